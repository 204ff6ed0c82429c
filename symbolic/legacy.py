"""The legacy per-op tables of the dead bulk path, exercised directly.

Restates ``fill_dp_table``, ``fill_tp_table``, ``fill_ep_table``,
``dp_ratio`` and ``comm_embed_ouput`` (the original's spelling) of
``perf_estimation/comm_time.py`` (printout lines 210-309; docs/formulas.md).
Nothing in the live stage walk reads them: their only caller,
``estimate_op_bulk_comm_layer``, cannot run (docs/model.md, oddity 3).

Oddities kept, each in the formula where it lives:

* ``fill_tp_table`` scales the gather by 11/16 at ``t ≥ 8`` (commented "Fix
  this"), and the expert gather grows with ``ep/d`` (§10 item 5);
* ``fill_ep_table`` multiplies by ``os_max_shard`` twice (§10 item 6);
* ``dp_ratio`` reads ``1 - True + φ·…``: the leading ``1 − 1`` cancels, so only
  the optimizer-shard term remains (§10 item 1);
* ``comm_embed_ouput``'s output term has no byte factor while the embedding
  term has ``bytes_compute`` (§10 item 2).

The optimizer-cast entries of ``fill_dp_table`` are off (``COUNT_OPTIMIZER =
False``, line 55) and have no formula here.
"""

from __future__ import annotations

import sympy
from sympy import Eq, Max, Min, Piecewise, Rational

from .formula import Formula
from .symbols import syms

__all__ = ["DP_TABLE_OPS", "FORMULAS"]

s, b, h, hff, hff_exp, v, t, sp, d, ep = syms("s", "b", "h", "hff", "hff_exp", "v", "t", "sp", "d", "ep")
n_exp, n_shared_exp, n_chosen_exp, cap_fact, os_max_shard = syms("n_exp", "n_shared_exp", "n_chosen_exp",
                                                                  "cap_fact", "os_max_shard")
bytes_p, bytes_norm, bytes_compute, comm_d_non_exp, shard_embed = syms("bytes_p", "bytes_norm", "bytes_compute",
                                                                       "comm_d_non_exp", "shard_embed")
D = syms("device_intra_node_num")[0]

SOURCE = "HyperParallel SAPP-ND perf_estimation/comm_time.py"

#: The ops of the DP table, in the original's order.
DP_TABLE_OPS: tuple[str, ...] = ("n_attMM", "n_ffMM", "n_normOp")


def _tp_gather() -> sympy.Expr:
    high_tp_bias = Piecewise((Rational(11, 16), t >= 8), (1, True))  # the original's "Fix this" bias
    return b * s * h * high_tp_bias * bytes_compute


def _ep_ff_mm() -> sympy.Expr:
    os = os_max_shard
    # os_max_shard enters twice, and the inter-node term divides by ep/D (§10 item 6).
    inter = Piecewise((os / (ep / D), ep > D), (0, True))
    return 4 * n_chosen_exp * b * s * h * (Max(4, os) / t) * cap_fact * (os / Min(D, ep) + inter) * bytes_compute


def _dp_ratio() -> sympy.Expr:
    phi = Piecewise((Rational(1, 16), Eq(n_exp, 1)), (1 / Max(1, ep / D) / Rational(5, 4), True))
    # `1 - True`: the "standard DP" share is 1 - 1 = 0, so only the OP overlap bias remains (§10 item 1).
    standard_dp = 1 - 1
    return Piecewise((0, Eq(comm_d_non_exp, 0)), (standard_dp + phi * (comm_d_non_exp - 1) * os_max_shard / d, True))


def _f(name: str, expr: sympy.Expr, dimension: str, unit: str, doc: str, lines: str) -> Formula:
    return Formula(name=name, expr=expr, dimension=dimension, algorithm="legacy", unit=unit, doc=doc,
                   source=f"{SOURCE} lines {lines}")


FORMULAS: tuple[Formula, ...] = (
    _f("dp_legacy_att_mm_bytes", h * h / t * bytes_p, "dp", "bytes",
       "fill_dp_table n_attMM: bytes of one h x h attention weight per TP rank.", "210-225"),
    _f("dp_legacy_ff_mm_bytes", h * hff / t * bytes_p, "dp", "bytes",
       "fill_dp_table n_ffMM: bytes of one h x hff feed-forward weight per TP rank.", "210-225"),
    _f("dp_legacy_norm_op_bytes", 2 * h / sp * bytes_norm, "dp", "bytes",
       "fill_dp_table n_normOp: bytes of a norm's weight and bias per sequence-parallel rank, at bytes_norm.",
       "210-225"),
    _f("dp_legacy_exp_ff_mm_bytes", 2 * (n_exp + n_shared_exp) * h * hff_exp / t * bytes_p, "dp", "bytes",
       "fill_dp_table exp_dp n_ffMM: bytes of two h x hff_exp weights of every routed and shared expert per TP "
       "rank.", "227-237"),
    _f("tp_legacy_gather_bytes", _tp_gather(), "tp", "bytes",
       "fill_tp_table n_gather: bytes of one s x b x h activation gather, scaled by 11/16 at t >= 8 "
       "(the original's 'Fix this' bias, §10 item 5).", "240-247"),
    _f("tp_legacy_exp_gather_bytes", b * s * h * Rational(3, 2) * (ep / d) * bytes_compute, "tp", "bytes",
       "fill_tp_table exp_tp n_gather: 1.5 activation gathers scaled by ep/d (§10 item 5).", "249-254"),
    _f("ep_legacy_ff_mm_bytes", _ep_ff_mm(), "ep", "bytes",
       "fill_ep_table n_ffMM: EP all-to-all bytes of one MoE layer with os_max_shard counted twice and an "
       "inter-node term above D devices per node (§10 item 6).", "257-284"),
    _f("dp_legacy_ratio", _dp_ratio(), "dp", "1",
       "dp_ratio: share of DP communication left exposed: 0 at comm_d_non_exp = 0, else only the OP overlap bias "
       "term, since the literal `1 - True` cancels the standard-DP share (§10 item 1).", "287-302"),
    _f("model_legacy_embed_bytes", bytes_compute * h * v / shard_embed, "model", "bytes",
       "comm_embed_ouput embed: bytes of the h x v embedding table per embedding shard, at bytes_compute.",
       "305-309"),
    _f("model_legacy_output_elements", h * v / t, "model", "elements",
       "comm_embed_ouput output: elements of the h x v output table per TP rank, no byte factor (the bulk path "
       "multiplies it by bytes_p later, §10 item 2).", "305-309"),
)
