"""A pipeline stage's communication as closed forms (``estimate_from_mem_comm``).

The original walks every layer of every stage and adds per-layer volumes
(printout lines 549-712; docs/model.md, "From layer to stage"). Layers of the
same kind cost the same, so a stage's output is

    output = Σ_count count · term(role)

over the layer-kind counts of ``symbolic.vocabulary.STAGE_COUNT_NAMES``, with
the roles of ``STAGE_TERMS`` (a plain layer, a selective MTP layer, what a
recomputed layer adds again, the FSDP embedding and output tables). Each
*term* is the cost one such layer adds to its stage, converted as
``_stage_comm_time`` converts a stage (lines 627-663): the TIME path's level
score factor (the score is linear in the volume; on the FLOP path the factor
is bound to 1), the per-node multiplier ``max(1, ⌊x / level_bound_0⌋)``, the
overlap discount and the device's ``stage_cost_scale`` (A3's halving, a field
of its system file).

A term depends on only part of a model's variant: TP on dense/MoE, EP on the
routing, CP on the algorithm, attention type and linear attention, DP on the
parameter layout, dense/MoE, FSDP and a tied embedding. The ZeRO levels and
FSDP's ``reshards`` / ``shard_spans_cp`` settings are 0/1 switch symbols
inside the DP terms. So a few hundred small terms cover every model a config
can describe; they are registered formulas (``TERMS``, and their derivatives
in the degrees in ``SLOPES``) that ``symcost compile`` generates ahead of
time, and each carries its identity as ``Formula.variant`` data (output, role
and the variant fields it depends on), which the SymPy-free pricer looks up.

Units: the stage sums add parameter counts (DP without FSDP), elements (dense
TP) and bytes (EP, CP, FSDP, MoE TP) — the original's mixed sum (docs/model.md,
"Oddities kept on purpose", item 11); the unit is "mixed".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Mapping

import sympy
from sympy import Max, floor

from . import cp, dp, ep, fsdp, params, recompute, tp
from .attention import Attention
from .formula import Formula
from .sensitivity import derivative_expr
from .vocabulary import DEGREES
from .symbols import syms
from .vocabulary import (RECOMPUTE_COUNT_NAMES, STAGE_COUNT_NAMES, STAGE_DIMENSIONS, STAGE_OUTPUTS,
                         STAGE_TERMS, CpAlgorithm, LayerType)

__all__ = ["StageVariant", "StageFormulas", "Term", "stage_formulas", "stage_terms", "variant_key",
           "TERMS",
           "SLOPES", "FORMULAS", "COUNT_SYMBOLS"]

t, ep_deg, cp_deg, mb = syms("t", "ep", "cp", "mb")
comm_dp_overlap, comm_tp_overlap, level_bound_0 = syms("comm_dp_overlap", "comm_tp_overlap", "level_bound_0")
score_factor_dp, score_factor_tp, score_factor_cp = syms("score_factor_dp", "score_factor_tp", "score_factor_cp")
zero2_non_exp, zero3_non_exp, zero2_exp, zero3_exp = syms("zero2_non_exp", "zero3_non_exp", "zero2_exp", "zero3_exp")
stage_cost_scale, = syms("stage_cost_scale")

#: The count symbols a stage output is linear in, in the vocabulary's order.
COUNT_SYMBOLS: tuple[sympy.Symbol, ...] = syms(*STAGE_COUNT_NAMES)

SOURCE = "HyperParallel SAPP-ND perf_estimation/comm_time.py lines 549-712 (estimate_from_mem_comm)"


@dataclass(frozen=True)
class StageVariant:
    """The structural choices of a model that pick different expressions (numeric ones are switch symbols).

    Attributes:
        attention: attention type as CP sees it (``attention.detect_attention``).
        params: attention layout as the parameter count sees it (``params.attention_variant``).
        moe: the layer routes to experts (``n_exp > 1``).
        cp_algorithm: the resolved CP algorithm.
        linear: linear-attention layers (``n_linrec ≠ 0``).
        routing: EP routing (``ep.routing``).
        fsdp: ``grad_shard_as_params``: DP priced as FSDP traffic.
        tied_embedding: ``tie_emb_out`` (read with FSDP only).
    """

    attention: Attention
    params: params.AttentionParams
    moe: bool
    cp_algorithm: CpAlgorithm
    linear: bool
    routing: ep.Routing
    fsdp: bool
    tied_embedding: bool = False

    @classmethod
    def from_data(cls, fields: Mapping[str, str]) -> StageVariant:
        """The variant the data of ``codegen.pricing.stages.variant_of`` describes (the pairs of :meth:`keys`)."""
        return cls(attention=Attention(fields["attention"]), params=params.AttentionParams(fields["params"]),
                   moe=fields["moe"] == "moe", cp_algorithm=CpAlgorithm(fields["cp_algorithm"]),
                   linear=fields["linear"] == "linear", routing=ep.Routing(fields["routing"]),
                   fsdp=fields["fsdp"] == "fsdp", tied_embedding=fields["tied"] == "tied")

    def keys(self, output: str, role: str = "layer") -> tuple[tuple[str, str], ...]:
        """The variant fields the term (*output*, *role*) depends on, as ``(field, value)`` pairs: its identity."""
        if output == "tp":
            return (("moe", _moe(self.moe)),)
        if output == "ep":
            return (("routing", self.routing.value),)
        if output == "cp":
            return (("cp_algorithm", self.cp_algorithm.value), ("attention", self.attention.value),
                    ("linear", "linear" if self.linear else "softmax"))
        fsdp_key = ("fsdp", "fsdp" if self.fsdp else "zero")
        if role == "embedding":  # the FSDP embedding table: its size is h·v whatever the layers
            return (fsdp_key, ("tied", "tied" if self.tied_embedding else "untied"))
        if role == "output":
            return (fsdp_key,)
        return (("params", self.params.value), ("moe", _moe(self.moe)), fsdp_key)


def _moe(moe: bool) -> str:
    return "moe" if moe else "dense"


@functools.cache
def _per_node(degree: sympy.Expr) -> sympy.Expr:
    """``max(1, degree // devices at level 0)`` (lines 639-642)."""
    return Max(1, floor(degree / level_bound_0))


def _convert(dim: str, volume: sympy.Expr) -> sympy.Expr:
    """``_stage_comm_time`` for one dimension (lines 627-663): score factor, per-node multiplier, overlap, scale."""
    if dim == "tp":
        volume = volume * score_factor_tp * _per_node(t) * (1 - comm_tp_overlap)
    elif dim == "ep":
        volume = volume * _per_node(ep_deg)  # EP is never scored on the TIME path (oddity 12)
    elif dim == "cp":
        volume = volume * score_factor_cp * _per_node(cp_deg)
    elif dim == "dp":
        volume = volume * score_factor_dp * (1 - comm_dp_overlap)
    return volume * stage_cost_scale


def _again(layer: LayerType, v: StageVariant) -> recompute.RecomputeFormulas:
    return recompute.layer_formulas(layer, moe=v.moe, routing=v.routing, cp_algorithm=v.cp_algorithm,
                                    attention=v.attention, linear=v.linear)


@functools.cache
def _dp_volumes(param_layout: params.AttentionParams, moe: bool, fsdp_on: bool,
                tied_embedding: bool) -> dict[str, dict[str, sympy.Expr]]:
    """DP's unconverted terms and, with FSDP, the all-reduced bytes of each: role → expression.

    Keyed by the only fields of a stage variant it reads, so it is built once per field set (the 44
    variants share 18); callers copy the dicts, never mutate them.
    """
    counts = params.layer_counts(param_layout, moe)
    if not fsdp_on:
        # The ZeRO levels as switches: a layer's DP volume is its non-expert level's part plus its
        # expert level's part (dp.layer_formula), so each part is weighed by its level's switch.
        none = dp.ZeroLevel.NONE
        parts = ((zero2_non_exp, dp.ZeroLevel.ZERO2, none), (zero3_non_exp, dp.ZeroLevel.ZERO3, none),
                 (zero2_exp, none, dp.ZeroLevel.ZERO2), (zero3_exp, none, dp.ZeroLevel.ZERO3))
        # A Piecewise, not a product: a level's part may divide by a field the config leaves unset
        # (0) when that level is off, and 0 · inf would be NaN where the original never reads it.
        # Folded into one level of conditions: lambdify (the tests' reference) cannot nest them.
        layer = sympy.Add(*[sympy.piecewise_fold(sympy.Piecewise(
            (dp.with_param_counts(dp.layer_formula(ne, ex, moe=moe), counts), sympy.Eq(switch, 1)), (0, True)))
            for switch, ne, ex in parts])
        return {"volume": {"layer": layer}, "reduced": {}}
    layer_g, root_g, reduces = fsdp.switched_rounds()
    tables = {"layer": (fsdp.layer_parts(*counts), layer_g),
              "embedding": (fsdp.root_parts(fsdp.RootTable.EMBEDDING, tied=tied_embedding), root_g),
              "output": (fsdp.root_parts(fsdp.RootTable.OUTPUT), root_g)}
    return {"volume": {role: fsdp.parts_traffic(parts, g, reduces) for role, (parts, g) in tables.items()},
            "reduced": {role: fsdp.parts_reduce_traffic(parts, reduces) for role, (parts, _) in tables.items()}}


@functools.cache
def stage_terms(v: StageVariant) -> dict[str, dict[str, sympy.Expr]]:
    """The terms of every stage output of *v*: output → role → the cost one such layer adds (nonzero ones).

    Outputs: ``dp``, ``tp``, ``ep``, ``cp`` (converted; the roles of ``n_full_rec`` / ``n_sel_rec``
    are what the recompute sums add), ``dp_unconverted`` and ``dp_reduced``.
    """
    full, sel = _again(LayerType.FULL_REC_LAYER, v), _again(LayerType.SEL_REC_LAYER, v)
    raw = {
        "tp": {"layer": tp.layer_formula(v.moe, LayerType.NOT_REC_LAYER).expr.subs(mb, 1),
               "selective_layer": tp.layer_formula(v.moe, LayerType.SEL_REC_LAYER).expr.subs(mb, 1),
               "full_again": full.tp.expr, "selective_again": sel.tp.expr},
        "ep": {"layer": ep.layer_formula(v.routing).expr.subs(mb, 1),
               "full_again": full.ep.expr, "selective_again": sel.ep.expr},
        "cp": {"layer": cp.record_formulas(v.cp_algorithm, v.attention, linear=v.linear)["comm_volume"].expr,
               "full_again": full.cp.expr, "selective_again": sel.cp.expr},
    }
    dp_volumes = _dp_volumes(v.params, v.moe, v.fsdp, v.tied_embedding)
    out = {dim: {role: _convert(dim, e) for role, e in terms.items()} for dim, terms in raw.items()}
    out["dp"] = {role: _convert("dp", e) for role, e in dp_volumes["volume"].items()}
    out["dp_unconverted"] = dict(dp_volumes["volume"])
    out["dp_reduced"] = dict(dp_volumes["reduced"])
    return {name: {role: e for role, e in terms.items() if e != 0} for name, terms in out.items()}


# ---------------------------------------------------------------- whole-stage closed forms (derive, docs)


@dataclass(frozen=True)
class StageFormulas:
    """The closed forms of one stage for a variant, over the count symbols (see ``STAGE_OUTPUTS``)."""

    dp: Formula
    tp: Formula
    ep: Formula
    cp: Formula
    total: Formula
    tp_recomputed: Formula
    ep_recomputed: Formula
    cp_recomputed: Formula
    total_recomputed: Formula
    dp_unconverted: Formula
    dp_reduced: Formula

    def all(self) -> tuple[Formula, ...]:
        return tuple(getattr(self, name) for name in STAGE_OUTPUTS)


def _weighed(terms: dict[str, sympy.Expr], dim: str, recomputed: bool) -> sympy.Expr:
    """``Σ_count count · term(role)`` over the counts of *dim* in ``STAGE_TERMS``."""
    return sympy.Add(*[count * terms.get(STAGE_TERMS[dim][count.name], sympy.Integer(0))
                       for count in COUNT_SYMBOLS if count.name in STAGE_TERMS[dim]
                       and (recomputed or count.name not in RECOMPUTE_COUNT_NAMES)])


def variant_key(v: StageVariant) -> str:
    """A short identifier of the variant, for the names of its whole-stage formulas."""
    fields = dict(pair for dim in ("dp", "tp", "ep", "cp") for pair in v.keys(dim))
    if v.fsdp:
        fields.update(v.keys("dp", "embedding"))
    return "_".join(fields.values())


@functools.cache
def stage_formulas(variant: StageVariant) -> StageFormulas:
    """The closed forms of one pipeline stage for *variant*: each output as ``Σ count · term`` (cached)."""
    terms = stage_terms(variant)
    key = variant_key(variant)

    def f(name: str, expr: sympy.Expr, dimension: str, doc: str, unit: str = "mixed") -> Formula:
        return Formula(name=f"model_{key}_{name}", expr=expr, dimension=dimension, algorithm=key, unit=unit,
                       doc=doc, source=SOURCE)

    parts = {dim: _weighed(terms[dim], dim, False) for dim in STAGE_DIMENSIONS}
    again = {dim: _weighed(terms[dim], dim, True) for dim in ("tp", "ep", "cp")}
    what = "converted as _stage_comm_time converts it (per-node multipliers, overlap, device scale)"
    return StageFormulas(
        dp=f("stage_dp", parts["dp"], "dp", f"DP volume of one stage per micro-batch, {what}; parameter counts "
             "without FSDP, bytes with it (oddity 11)."),
        tp=f("stage_tp", parts["tp"], "tp", f"TP volume of one stage per micro-batch, {what}."),
        ep=f("stage_ep", parts["ep"], "ep", f"EP bytes of one stage per micro-batch, {what}; never scored."),
        cp=f("stage_cp", parts["cp"], "cp", f"CP bytes of one stage per micro-batch, {what}."),
        total=f("stage_total", sympy.Add(*parts.values()), "model",
                "One stage's communication: DP + TP + EP + CP, each converted."),
        tp_recomputed=f("stage_tp_recomputed", again["tp"], "tp",
                        "TP of one stage with each recomputed layer's traffic added again, converted."),
        ep_recomputed=f("stage_ep_recomputed", again["ep"], "ep",
                        "EP of one stage with each recomputed layer's traffic added again, converted."),
        cp_recomputed=f("stage_cp_recomputed", again["cp"], "cp",
                        "CP of one stage with each recomputed layer's traffic added again, converted."),
        total_recomputed=f("stage_total_recomputed", parts["dp"] + sympy.Add(*again.values()), "model",
                           "One stage's communication with each recomputed layer's traffic added again "
                           "(the with_recomp sum; DP is not recomputed)."),
        dp_unconverted=f("stage_dp_unconverted", _weighed(terms["dp_unconverted"], "dp", False), "dp",
                         "DP volume of one stage per micro-batch before _stage_comm_time converts it.",
                         unit="bytes" if variant.fsdp else "params"),
        dp_reduced=f("stage_dp_reduced", _weighed(terms["dp_reduced"], "dp", False), "fsdp",
                     "Bytes of the stage's FSDP traffic that the copies of a shard spend all-reducing it "
                     "(fsdp_reduce_traffic summed over its layers and tables; 0 without FSDP).", unit="bytes"),
    )


# ---------------------------------------------------------------- the registered terms


def _variants() -> list[StageVariant]:
    """One variant per combination of the fields any term depends on (the others at their first value)."""
    out = []
    for att in Attention:
        for algo in CpAlgorithm:
            for linear in (False, True):
                out.append(StageVariant(att, params.AttentionParams.STANDARD, False, algo, linear,
                                        ep.Routing.BALANCED, False))
    for routing in ep.Routing:
        out.append(StageVariant(Attention.MHA, params.AttentionParams.STANDARD, False, CpAlgorithm.COLOSSALAI,
                                False, routing, False))
    for layout in params.AttentionParams:
        for moe in (False, True):
            for fsdp_on, tied in ((False, False), (True, False), (True, True)):
                out.append(StageVariant(Attention.MHA, layout, moe, CpAlgorithm.COLOSSALAI, False,
                                        ep.Routing.BALANCED, fsdp_on, tied))
    return out


_ROLE_DOCS = {
    "layer": "one layer of the kinds STAGE_TERMS weighs as a plain layer",
    "selective_layer": "one selective-recompute layer past n_lay (MTP)",
    "full_again": "what one fully recomputed layer adds again (the with_recomp sum)",
    "selective_again": "what one selectively recomputed layer adds again (the with_recomp sum)",
    "embedding": "the embedding table",
    "output": "the output layer's table",
}

_OUTPUT_DOCS = {
    "dp": ("DP volume", "converted as _stage_comm_time converts it; parameter counts without FSDP, bytes with it"),
    "tp": ("TP volume", "converted as _stage_comm_time converts it; elements (dense) or bytes (MoE)"),
    "ep": ("EP bytes", "converted as _stage_comm_time converts it"),
    "cp": ("CP bytes", "converted as _stage_comm_time converts it"),
    "dp_unconverted": ("DP volume", "before _stage_comm_time converts it"),
    "dp_reduced": ("FSDP all-reduce bytes", "the part of the FSDP traffic copies of a shard spend all-reducing it"),
}


@dataclass(frozen=True)
class Term:
    """A registered stage term and where it sits: ``formula.variant`` holds the same as data."""

    output: str
    role: str
    keys: tuple[tuple[str, str], ...]
    formula: Formula


def _term_name(output: str, role: str, keys: tuple[tuple[str, str], ...]) -> str:
    return "_".join(["stage", output, *(value for _, value in keys), role])


def _build() -> tuple[tuple[Term, ...], tuple[Formula, ...]]:
    terms: dict[str, Term] = {}
    for v in _variants():
        for output, by_role in stage_terms(v).items():
            for role, expr in by_role.items():
                keys = v.keys(output, role)
                name = _term_name(output, role, keys)
                if name in terms:
                    if terms[name].formula.expr != expr:  # a term depends on a field its keys leave out
                        raise ValueError(f"stage term {name}: differs between variants with the same keys")
                    continue
                what, how = _OUTPUT_DOCS[output]
                unit = "mixed" if output in STAGE_DIMENSIONS else ("params" if output == "dp_unconverted"
                                                                  and not v.fsdp else "bytes")
                formula = Formula(
                    name=name, expr=expr, dimension="stage", algorithm="_".join(value for _, value in keys),
                    unit=unit, doc=f"{what} that {_ROLE_DOCS[role]} adds to its pipeline stage per micro-batch, "
                                   f"{how}.",
                    source=SOURCE, variant=(("output", output), ("role", role), *keys))
                terms[name] = Term(output, role, keys, formula)
    slopes = []
    for term in terms.values():
        if term.output not in STAGE_DIMENSIONS:
            continue
        for x in DEGREES:
            expr = derivative_expr(term.formula.expr, x)
            if expr != 0:
                f = term.formula
                slopes.append(Formula(
                    name=f"{f.name}__d_{x}", expr=expr, dimension="stage_slope", algorithm=f.algorithm,
                    unit="derivative", doc=f"∂/∂{x} of {f.name} (almost everywhere; derived fields held): "
                                           f"{f.doc[0].lower()}{f.doc[1:]}",
                    source=f"{f.source}; differentiated by symbolic.sensitivity", variant=(*f.variant, ("wrt", x))))
    return tuple(terms.values()), tuple(slopes)


TERMS, _SLOPES = _build()

#: The derivatives of the converted terms in each degree of ``symbolic.sensitivity.DEGREES`` (nonzero ones).
SLOPES: tuple[Formula, ...] = _SLOPES

FORMULAS: tuple[Formula, ...] = (*(term.formula for term in TERMS), *SLOPES)
