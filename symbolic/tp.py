"""Tensor parallelism per layer: ``EvalLayerComm.tp_comm_layer`` (live path).

Restates the published ``EvalLayerComm.tp_comm_non_exp``, ``tp_comm_exp`` and
``tp_comm_layer`` (docs/formulas.md, "TP"), called by ``comm_time.py`` lines
502, 602-604 with ``mb = 1``.

Variants resolved in Python:

* dense or MoE — the original's ``n_exp > 1``;
* the layer node: a selective-recompute layer (``SEL_REC_LAYER``) keeps its
  gathered activation only where ``rec_op.gather`` is 1, so the factor
  κ = ([node ≠ SEL_REC] OR gather) is 1 for every other node and ``gather``
  for a selective one (``EvalUtils.rec_coeff``, an integer bit-or of two 0/1
  flags).

``comm_t`` (1 when ``t > 1``) switches the whole volume, so ``t = 1`` moves
nothing; ``t`` itself is not read.

**Units differ by variant** (docs/model.md, oddity 11): the dense volume is an
element count ``¼·n_gather·s·b·(h + hff)·mb/cp`` with no bytes; the MoE volume
is ``¼·n_gather·h·bytes_compute·(h·n_attMM + n_ffMM·(n_exp/ep +
n_shared_exp)·hff_exp)/cp``, bytes of a parameter-like size with no ``s``,
``b`` or ``mb``. Embedding and output layers are charged the same formula at
their own node (κ = 1, §10 item 15). The stage walk prices every body layer
with a kind entry at ``NOT_REC_LAYER``, so the selective variant is reached
only by layers beyond ``n_lay`` (MTP), which keep their own node, and through
``_recomputed_comm``: selective recompute never discounts TP in the plain
walk (§10 item 16).
"""

from __future__ import annotations


import sympy

from .formula import Formula
from .symbols import syms
from .vocabulary import LayerType, parse_layer_type

__all__ = ["kept_factor", "layer_volume", "layer_formula", "FORMULAS"]

s, b, h, hff, hff_exp, cp, ep, mb = syms("s", "b", "h", "hff", "hff_exp", "cp", "ep", "mb")
n_gather, n_attMM, n_ffMM, n_exp, n_shared_exp = syms("n_gather", "n_attMM", "n_ffMM", "n_exp", "n_shared_exp")
comm_t, bytes_compute, gather = syms("comm_t", "bytes_compute", "gather")

SOURCE = "published version of memory_estimation/evaluators/comm.py"
_QUARTER = sympy.Rational(1, 4)


def kept_factor(node: LayerType) -> sympy.Expr:
    """κ: 1 at any node but ``SEL_REC_LAYER``, where it is the ``gather`` switch (``EvalUtils.rec_coeff``)."""
    return gather if node is LayerType.SEL_REC_LAYER else sympy.Integer(1)


def layer_volume(moe: bool) -> sympy.Expr:
    """The TP volume of one layer before κ: non-expert plus expert part, over ``cp``, switched by ``comm_t``."""
    if moe:
        non_expert = _QUARTER * n_gather * h * h * bytes_compute * n_attMM
        expert = _QUARTER * n_gather * h * bytes_compute * n_ffMM * (n_exp / ep * hff_exp + n_shared_exp * hff_exp)
    else:
        non_expert = _QUARTER * n_gather * s * b * h * mb
        expert = _QUARTER * n_gather * s * b * hff * mb
    return comm_t * (non_expert + expert) / cp


def _key(moe: bool, node: LayerType) -> tuple[bool, bool]:
    return bool(moe), node is LayerType.SEL_REC_LAYER


def _build() -> dict[tuple[bool, bool], Formula]:
    out: dict[tuple[bool, bool], Formula] = {}
    for moe in (False, True):
        for node in (LayerType.NOT_REC_LAYER, LayerType.SEL_REC_LAYER):
            label = "moe" if moe else "dense"
            selective = node is LayerType.SEL_REC_LAYER
            unit = "bytes" if moe else "elements"
            what = ("bytes of a parameter-like size, no s, b or mb (§10 item 11)" if moe
                    else "elements, no bytes (§10 item 11)")
            where = ("a selective-recompute layer, kept only where rec_op.gather is 1" if selective
                     else "any layer but a selective-recompute one")
            out[_key(moe, node)] = Formula(
                name=f"tp_{label}{'_selective' if selective else ''}_layer_{unit}",
                expr=kept_factor(node) * layer_volume(moe),
                dimension="tp",
                algorithm=label,
                unit=unit,
                doc=(f"TP gather volume of one {label} layer "
                     f"{'per call, whatever mb' if moe else 'for mb micro-batches'} at {where}, in {what}."),
                source=f"{SOURCE}: EvalLayerComm.tp_comm_non_exp, tp_comm_exp, tp_comm_layer; "
                       "comm_time.py lines 502, 602-604",
                variant=(("ffn", label), ("node", "selective" if selective else "other")),
            )
    return out


_FORMULAS = _build()


def layer_formula(moe: bool, node_kind: LayerType | str) -> Formula:
    """The registered TP formula of a layer.

    Args:
        moe: the original's ``n_exp > 1``.
        node_kind: the layer node (``ctx.current_node``); only ``SEL_REC_LAYER`` differs.
    """
    return _FORMULAS[_key(moe, parse_layer_type(node_kind))]


FORMULAS: tuple[Formula, ...] = tuple(_FORMULAS.values())
