"""Parameter counts of one body layer: ``EvalBody.num_params_layer`` → (P_ne, P_r, P_s).

Restates the published ``EvalBody.num_params_layer`` and the block counts it
sums (``EvalAttn.num_params_attn`` / ``num_params_mla``, ``EvalNorm.num_params_norm``,
``EvalFFn.num_params_ffn`` / ``num_params_router`` / ``num_params_routed_expert`` /
``num_params_shared_expert``; docs/formulas.md, "Parameter counts"). The unit is
a parameter count (no bytes).

Variants resolved in Python before an expression is built:

* attention: separate Q, K, V, O projections (``dc_kv = 0``), or MLA with a
  query latent (``dc_q ≠ 0``) or without one (``AttentionParams``);
* dense (``n_exp = 1``: the FFN counts as non-expert) or MoE (otherwise: a
  router in P_ne, routed experts in P_r, shared experts in P_s).

The model's yes/no fields (``qkv_bias``, ``o_bias``, ``mlp_bias``,
``norm_bias``, ``attn_output_gate``, ``shared_expert_gate``) are 0/1 symbols
that multiply the terms they switch on, so one expression covers both
settings. Numeric fallbacks stay inside as ``Piecewise``/``Max``: the head
width ``dh or h/a``, the MLA key width ``qk_nope_head_dim or dh``, the expert
slice ``hff_exp / max(etp, 1)``, the shared-expert gate only where
``n_shared_exp ≠ 0``.

Oddity kept (docs/model.md, oddity 17): the original reads "unstated" as
``getattr(cfg, name, None) is None`` and then counts a bias of width ``h``
per projection, ``n_ffMM·w`` per FFN, and ``2·n_normOp`` norm vectors. Its
config hands out 0 for any unset field, so that branch never runs: an
unstated bias counts 0 and an unstated ``layer_norms`` makes the norm count
0. The expressions here are the reachable branches only.
"""

from __future__ import annotations

from typing import NamedTuple

import sympy
from sympy import Max, Ne, Piecewise

from .attention import head_width
from .formula import Formula
from .symbols import syms
from .vocabulary import AttentionParams, attention_variant

__all__ = ["AttentionParams", "attention_variant", "ParamCounts", "ParamFormulas", "layer_counts",
           "layer_formulas", "attention_params", "mla_up_projection_params", "mla_up_projection_shapes", "norm_params",
           "dense_ffn_params",
           "router_params", "routed_expert_params", "shared_expert_params", "FORMULAS"]

h, a, n_kv, dh, dhr, dc_kv, dc_q, qk_nope = syms("h", "a", "n_kv", "dh", "dhr", "dc_kv", "dc_q", "qk_nope_head_dim")
n_attMM, n_ffMM, n_qknorm, attn_extra_p, layer_norms = syms("n_attMM", "n_ffMM", "n_qknorm", "attn_extra_p",
                                                            "layer_norms")
qkv_bias, o_bias, mlp_bias, norm_bias, attn_output_gate, shared_expert_gate = syms(
    "qkv_bias", "o_bias", "mlp_bias", "norm_bias", "attn_output_gate", "shared_expert_gate")
hff, hff_exp, n_exp, n_shared_exp, etp = syms("hff", "hff_exp", "n_exp", "n_shared_exp", "etp")

SOURCE = "published version of memory_estimation/evaluators (body.py, layer_block.py)"
_QUARTER = sympy.Rational(1, 4)


class ParamCounts(NamedTuple):
    """One layer's parameter counts as expressions: the three values ``num_params_layer`` returns."""

    non_expert: sympy.Expr
    routed: sympy.Expr
    shared: sympy.Expr


class ParamFormulas(NamedTuple):
    """The registered formulas of one layer variant, in ``num_params_layer``'s order."""

    non_expert: Formula
    routed: Formula
    shared: Formula

    def counts(self) -> ParamCounts:
        return ParamCounts(self.non_expert.expr, self.routed.expr, self.shared.expr)


def _standard_attention() -> sympy.Expr:
    """``num_params_attn`` for ``dc_kv = 0``: Q (doubled by an output gate), O, and K and V."""
    d_h = head_width()
    d_q = a * d_h
    q_fact = 1 + attn_output_gate
    query = _QUARTER * n_attMM * (q_fact * h * d_q + qkv_bias * q_fact * d_q)
    output = _QUARTER * n_attMM * (h * d_q + o_bias * h)
    key_value = 2 * _QUARTER * n_attMM * (h * n_kv * d_h + qkv_bias * n_kv * d_h)
    return query + output + key_value + attn_extra_p


def _mla_attention(q_latent: bool) -> sympy.Expr:
    """``num_params_mla``: queries (through a latent or direct), the K/V latent and up-projection, the output."""
    d_qk = Piecewise((qk_nope, Ne(qk_nope, 0)), (dh, True))  # qk_nope_head_dim or dh
    heads_q = a * (d_qk + dhr)
    # With a latent: down-projection, its norm weight, up-projection to every head.
    query = h * dc_q + dc_q + dc_q * heads_q if q_latent else h * heads_q
    key_value = h * (dc_kv + dhr) + dc_kv + dc_kv * n_kv * (d_qk + dh)
    output = a * dh * h
    return _QUARTER * n_attMM * (query + key_value + output)


def mla_up_projection_shapes(q_latent: bool) -> tuple[tuple[sympy.Expr, sympy.Expr], tuple[sympy.Expr, sympy.Expr]]:
    """(input width, output width) of MLA's two up-projections, elements per token: the query's, from its latent
    ``dc_q`` or, without one, from ``h`` to every head's ``d_qk + dhr``; the key/value's, from ``dc_kv`` to every
    head's ``d_qk + dh``. The output widths carry :func:`attention_params`' ``n_attMM / 4`` (1 with the four attention
    matmuls), so that input × output is the parameter count it counts."""
    d_qk = Piecewise((qk_nope, Ne(qk_nope, 0)), (dh, True))
    return ((dc_q if q_latent else h, _QUARTER * n_attMM * a * (d_qk + dhr)),
            (dc_kv, _QUARTER * n_attMM * n_kv * (d_qk + dh)))


def mla_up_projection_params(q_latent: bool) -> tuple[sympy.Expr, sympy.Expr]:
    """The parameters of MLA's up-projections, as :func:`attention_params` counts them: (the query's, the key/value's)
    (:func:`mla_up_projection_shapes`: input width × output width), in parameters."""
    return tuple(width_in * width_out for width_in, width_out in mla_up_projection_shapes(q_latent))


def norm_params() -> sympy.Expr:
    """``num_params_norm`` with ``layer_norms`` stated: a weight per norm (and a bias), plus QK-norm weights."""
    return layer_norms * (1 + norm_bias) * h + n_qknorm * 2 * head_width()


def _mlp_biases(width: sympy.Expr) -> sympy.Expr:
    """Biases of one FFN of *width* where ``mlp_bias`` is stated: one per projection into it, one back to h."""
    return mlp_bias * ((n_ffMM - 1) * width + h)


def dense_ffn_params() -> sympy.Expr:
    """``num_params_ffn`` of a dense layer: every FFN's projections and biases (shared experts counted alike)."""
    return (n_exp + n_shared_exp) * (n_ffMM * hff * h + _mlp_biases(hff))


def router_params() -> sympy.Expr:
    """``num_params_router``: one weight per expert and hidden unit."""
    # The original's `h·n_exp if n_exp > 1 else 0`; in the MoE variant (n_exp ≠ 1) both agree for every n_exp ≥ 0.
    return h * n_exp


def routed_expert_params() -> sympy.Expr:
    """``num_params_routed_expert`` times the routed experts: their projections and biases, sliced by expert TP."""
    hff_slice = hff_exp / Max(etp, 1)  # expert-TP slices each expert (etp unset reads 0: no slicing)
    return n_exp * (n_ffMM * hff_slice * h + _mlp_biases(hff_slice))


def shared_expert_params() -> sympy.Expr:
    """``num_params_shared_expert`` times the shared experts, with the shared-expert gate where stated."""
    gate = Piecewise((h * shared_expert_gate, Ne(n_shared_exp, 0)), (0, True))
    # Every producer states the shared experts as a count of experts of the routed width hff_exp.
    return n_shared_exp * (n_ffMM * hff_exp * h + _mlp_biases(hff_exp)) + gate


def attention_params(variant: AttentionParams) -> sympy.Expr:
    """``num_params_attn`` or ``num_params_mla`` of *variant*, in parameters."""
    if variant is AttentionParams.STANDARD:
        return _standard_attention()
    return _mla_attention(variant is AttentionParams.MLA_Q_LATENT)


def layer_counts(attention: AttentionParams, moe: bool) -> ParamCounts:
    """(P_ne, P_r, P_s) of one layer variant as expressions, in parameters.

    Args:
        attention: the attention layout (``attention_variant``).
        moe: True for a routed layer (the original's ``n_exp != 1``).
    """
    base = attention_params(attention) + norm_params()
    if not moe:
        return ParamCounts(base + dense_ffn_params(), sympy.Integer(0), sympy.Integer(0))
    return ParamCounts(base + router_params(), routed_expert_params(), shared_expert_params())


def _build() -> dict[tuple[str, bool], ParamFormulas]:
    src_attn = {
        AttentionParams.STANDARD: "EvalAttn.num_params_attn",
        AttentionParams.MLA_Q_LATENT: "EvalAttn.num_params_mla (dc_q branch)",
        AttentionParams.MLA_Q_DIRECT: "EvalAttn.num_params_mla (no query latent)",
    }
    experts: dict[bool, tuple[Formula, Formula]] = {}
    for moe, label in ((False, "dense"), (True, "moe")):
        zero = sympy.Integer(0)
        routed, shared = (routed_expert_params(), shared_expert_params()) if moe else (zero, zero)
        experts[moe] = (
            Formula(name=f"params_{label}_routed_experts_params", expr=routed, dimension="params",
                    algorithm=label, unit="params",
                    doc=(f"Routed-expert parameters of one {label} layer (P_r), expert-TP slice included"
                         + ("." if moe else ": none, the FFN counts as non-expert.")),
                    source=f"{SOURCE}: EvalBody.num_params_layer, EvalFFn.num_params_routed_expert",
                    variant=(("ffn", label),)),
            Formula(name=f"params_{label}_shared_experts_params", expr=shared, dimension="params",
                    algorithm=label, unit="params",
                    doc=(f"Shared-expert parameters of one {label} layer (P_s), hff_exp wide each, with the gate "
                         "weight where n_shared_exp > 0 and shared_expert_gate is set"
                         + ("." if moe else ": none, the FFN counts as non-expert.")),
                    source=f"{SOURCE}: EvalBody.num_params_layer, EvalFFn.num_params_shared_expert",
                    variant=(("ffn", label),)),
        )
    out: dict[tuple[str, bool], ParamFormulas] = {}
    for att in AttentionParams:
        for moe, label in ((False, "dense"), (True, "moe")):
            counts = layer_counts(att, moe)
            ffn = "the dense FFN" if not moe else "the router"
            non_expert = Formula(
                name=f"params_{att.value}_{label}_non_expert_params", expr=counts.non_expert, dimension="params",
                algorithm=att.value, unit="params",
                doc=(f"Non-expert parameters of one {label} layer with {att.value.replace('_', ' ')} attention "
                     f"(P_ne): attention, norms and {ffn}; unstated biases and norms count 0 (§10 item 17)."),
                source=(f"{SOURCE}: EvalBody.num_params_layer, {src_attn[att]}, EvalNorm.num_params_norm, "
                        + ("EvalFFn.num_params_ffn" if not moe else "EvalFFn.num_params_router")),
                variant=(("attention", att.value), ("ffn", label)),
            )
            out[(att.value, moe)] = ParamFormulas(non_expert, *experts[moe])
    return out


_FORMULAS = _build()


def layer_formulas(attention: AttentionParams, moe: bool) -> ParamFormulas:
    """The registered formulas of (P_ne, P_r, P_s) for one layer variant.

    For a substitution into the DP volume (``dp.with_param_counts``) use
    ``layer_formulas(...).counts()`` or ``layer_counts``.
    """
    return _FORMULAS[(AttentionParams(attention).value, bool(moe))]


def _registered() -> tuple[Formula, ...]:
    seen: dict[str, Formula] = {}
    for group in _FORMULAS.values():
        for f in group:
            seen.setdefault(f.name, f)
    return tuple(seen.values())


FORMULAS: tuple[Formula, ...] = _registered()
