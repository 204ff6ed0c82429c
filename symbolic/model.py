"""A pipeline stage's communication as closed forms (``estimate_from_mem_comm``).

The original walks every layer of every stage and adds per-layer volumes
(printout lines 549-712; FORMULAS.md §8). Layers of the same kind cost the
same, so a stage's sum is Σ over layer kinds of (count × per-layer
expression). This module builds that sum once per model *variant* (attention
layout, dense or MoE, CP algorithm, EP routing, ZeRO levels, FSDP mode,
output path), over the count symbols of ``symbolic.symbols``:

* ``n_embedding``, ``n_output``: the embedding and output layers (0 or 1);
* ``n_body``: body layers among the model's first ``n_lay`` (they get a kind
  entry: priced at NOT_REC, and they alone carry DP);
* ``n_extra``, ``n_extra_sel``: body layers past ``n_lay`` (multi-token
  prediction), which keep their own node type — selective ones have TP
  scaled by the ``gather`` switch — and carry no DP (§10 item 16);
* ``n_full_rec``, ``n_sel_rec``: layers the recompute sum adds again.

Every CP, TP and EP term is the per-layer formula of its module; DP is the
per-layer DP (or FSDP traffic) with the parameter-count expressions
substituted. The stage conversion (``_stage_comm_time``, lines 627-663) is
part of the expression: the TIME path's level score (linear in the volume,
so a factor ``score_factor_*`` computed from the level assignment), the
per-node multipliers ``max(1, ⌊x / level_bound_0⌋)``, the overlap discounts
and the A3 halving (§10 items 12-14).

Units: the stage sums add parameter counts (DP without FSDP), elements
(dense TP) and bytes (EP, CP, FSDP, MoE TP) — the original's mixed sum
(§10 item 11); the unit is "mixed", or "score" pieces on the TIME path.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import sympy
from sympy import Max, floor

from . import cp, dp, ep, fsdp, params, recompute, tp
from .attention import Attention
from .formula import Formula
from .symbols import syms
from .tp import LayerType

__all__ = ["StageVariant", "StageFormulas", "stage_formulas", "stage_coefficients", "per_layer_costs", "OUTPUTS"]

(n_embedding, n_output, n_body, n_extra, n_extra_sel, n_full_rec, n_sel_rec) = syms(
    "n_embedding", "n_output", "n_body", "n_extra", "n_extra_sel", "n_full_rec", "n_sel_rec")
t, ep_deg, cp_deg, mb, gather = syms("t", "ep", "cp", "mb", "gather")
comm_dp_overlap, comm_tp_overlap, level_bound_0 = syms("comm_dp_overlap", "comm_tp_overlap", "level_bound_0")
score_factor_dp, score_factor_tp, score_factor_cp = syms("score_factor_dp", "score_factor_tp", "score_factor_cp")

SOURCE = "HyperParallel SAPP-ND perf_estimation/comm_time.py lines 549-712 (estimate_from_mem_comm)"

#: Names of a stage's outputs, in the order ``StageFormulas`` holds them.
OUTPUTS = ("dp", "tp", "ep", "cp", "total", "tp_recomputed", "ep_recomputed", "cp_recomputed", "total_recomputed",
           "dp_unconverted", "dp_reduced")


@dataclass(frozen=True)
class StageVariant:
    """Everything about a model and its settings that picks a different expression.

    Attributes:
        attention: attention type as CP sees it (``attention.detect_attention``).
        params: attention layout as the parameter count sees it (``params.attention_variant``).
        moe: the layer routes to experts (``n_exp > 1``).
        cp_algorithm: the resolved CP algorithm.
        linear: linear-attention layers (``n_linrec ≠ 0``).
        routing: EP routing (``ep.routing``).
        zero_non_exp, zero_exp: ZeRO levels ``comm_d_non_exp`` and ``comm_d_exp`` (0, 2 or 3).
        fsdp: ``grad_shard_as_params``: DP priced as FSDP traffic.
        reshards: FSDP frees gathered parameters after each pass.
        shard_spans_cp: the stated shard already spans CP.
        tied_embedding: ``tie_emb_out``.
        time: the TIME path (``ttype == TIME``): DP, TP, CP become level scores.
        halve: the device halves every dimension (A3, §10 item 14).
    """

    attention: Attention
    params: params.AttentionParams
    moe: bool
    cp_algorithm: cp.CpAlgorithm
    linear: bool
    routing: ep.Routing
    zero_non_exp: int
    zero_exp: int
    fsdp: bool
    reshards: bool = False
    shard_spans_cp: bool = False
    tied_embedding: bool = False
    time: bool = False
    halve: bool = False

    @property
    def key(self) -> str:
        """A short identifier of the variant, used in formula names."""
        parts = [self.params.value, "moe" if self.moe else "dense", _cp_key(self), self.routing.value,
                 f"z{self.zero_non_exp}{self.zero_exp}"]
        if self.fsdp:
            parts.append("fsdp" + ("_reshard" if self.reshards else "") + ("_spancp" if self.shard_spans_cp else "")
                         + ("_tied" if self.tied_embedding else ""))
        parts.append("time" if self.time else "flop")
        if self.halve:
            parts.append("halved")
        return "_".join(parts)


def _cp_key(v: StageVariant) -> str:
    volume = cp.record_formulas(v.cp_algorithm, v.attention, linear=v.linear)["comm_volume"]
    return volume.name.removeprefix("cp_").removesuffix("_record_comm_volume_bytes")


@dataclass(frozen=True)
class StageFormulas:
    """The closed forms of one stage for a variant, over the count symbols (see ``OUTPUTS``)."""

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
        return tuple(getattr(self, name) for name in OUTPUTS)


def _per_node(degree: sympy.Expr) -> sympy.Expr:
    """``max(1, degree // devices at level 0)`` (lines 639-642; §10 item 13)."""
    return Max(1, floor(degree / level_bound_0))


def _raw_sums(v: StageVariant) -> dict[str, sympy.Expr]:
    """A stage's volumes before ``_stage_comm_time``: DP, TP, EP, CP, their recompute extras, and the reduced DP."""
    counts = params.layer_counts(v.params, v.moe)
    every_layer = n_embedding + n_output + n_body + n_extra + n_extra_sel
    tp_plain = tp.layer_formula(v.moe, LayerType.NOT_REC_LAYER).expr.subs(mb, 1)
    tp_selective = tp.layer_formula(v.moe, LayerType.SEL_REC_LAYER).expr.subs(mb, 1)
    ep_layer = ep.layer_formula(v.routing).expr.subs(mb, 1)
    cp_layer = cp.record_formulas(v.cp_algorithm, v.attention, linear=v.linear)["comm_volume"].expr

    if v.fsdp:
        layer_g, root_g, reduces = fsdp.rounds(v.reshards, v.shard_spans_cp)
        layer_parts = fsdp.layer_parts(*counts)
        emb_parts = fsdp.root_parts(fsdp.RootTable.EMBEDDING, tied=v.tied_embedding)
        out_parts = fsdp.root_parts(fsdp.RootTable.OUTPUT)
        dp_sum = (n_body * fsdp.parts_traffic(layer_parts, layer_g, reduces)
                  + n_embedding * fsdp.parts_traffic(emb_parts, root_g, reduces)
                  + n_output * fsdp.parts_traffic(out_parts, root_g, reduces))
        reduced = (n_body * fsdp.parts_reduce_traffic(layer_parts, reduces)
                   + n_embedding * fsdp.parts_reduce_traffic(emb_parts, reduces)
                   + n_output * fsdp.parts_reduce_traffic(out_parts, reduces))
    else:
        dp_layer = dp.with_param_counts(dp.layer_formula(v.zero_non_exp, v.zero_exp, moe=v.moe), counts)
        dp_sum = n_body * dp_layer
        reduced = sympy.Integer(0)

    def again(layer: LayerType) -> recompute.RecomputeFormulas:
        return recompute.layer_formulas(layer, moe=v.moe, routing=v.routing, cp_algorithm=v.cp_algorithm,
                                        attention=v.attention, linear=v.linear)

    full, sel = again(LayerType.FULL_REC_LAYER), again(LayerType.SEL_REC_LAYER)
    tp_sum = (every_layer - n_extra_sel) * tp_plain + n_extra_sel * tp_selective
    ep_sum = every_layer * ep_layer
    cp_sum = (n_body + n_extra + n_extra_sel) * cp_layer
    return {
        "dp": dp_sum, "tp": tp_sum, "ep": ep_sum, "cp": cp_sum, "reduced": reduced,
        "tp_again": n_full_rec * full.tp.expr + n_sel_rec * sel.tp.expr,
        "ep_again": n_full_rec * full.ep.expr + n_sel_rec * sel.ep.expr,
        "cp_again": n_full_rec * full.cp.expr + n_sel_rec * sel.cp.expr,
    }


def _convert(v: StageVariant, dim: str, volume: sympy.Expr) -> sympy.Expr:
    """``_stage_comm_time`` for one dimension (lines 627-663)."""
    if v.time and dim in ("dp", "tp", "cp"):
        # estimate_comm_score(volume, overlap=0) is linear in the volume (FORMULAS.md §9).
        volume = volume * {"dp": score_factor_dp, "tp": score_factor_tp, "cp": score_factor_cp}[dim]
    if dim == "tp":
        volume = volume * _per_node(t) * (1 - comm_tp_overlap)
    elif dim == "ep":
        volume = volume * _per_node(ep_deg)  # EP is never scored on the TIME path (§10 item 12)
    elif dim == "cp":
        volume = volume * _per_node(cp_deg)
    elif dim == "dp":
        volume = volume * (1 - comm_dp_overlap)
    if v.halve:
        volume = volume / 2
    return volume


@functools.cache
def stage_formulas(variant: StageVariant) -> StageFormulas:
    """The closed forms of one pipeline stage for *variant* (built once per variant, then cached)."""
    raw = _raw_sums(variant)
    conv = {dim: _convert(variant, dim, raw[dim]) for dim in ("dp", "tp", "ep", "cp")}
    again = {dim: _convert(variant, dim, raw[dim] + raw[f"{dim}_again"]) for dim in ("tp", "ep", "cp")}
    unit = "score" if variant.time else "mixed"
    key = variant.key

    def f(name: str, expr: sympy.Expr, dimension: str, doc: str, unit: str = unit) -> Formula:
        return Formula(name=f"model_{key}_{name}", expr=expr, dimension=dimension, algorithm=key, unit=unit,
                       doc=doc, source=SOURCE)

    total = conv["dp"] + conv["tp"] + conv["ep"] + conv["cp"]
    total_again = conv["dp"] + again["tp"] + again["ep"] + again["cp"]
    what = "converted as _stage_comm_time converts it (per-node multipliers, overlap, device halving)"
    return StageFormulas(
        dp=f("stage_dp", conv["dp"], "dp", f"DP volume of one stage per micro-batch, {what}; parameter counts "
             "without FSDP, bytes with it (§10 item 11)."),
        tp=f("stage_tp", conv["tp"], "tp", f"TP volume of one stage per micro-batch, {what}."),
        ep=f("stage_ep", conv["ep"], "ep", f"EP bytes of one stage per micro-batch, {what}; never scored."),
        cp=f("stage_cp", conv["cp"], "cp", f"CP bytes of one stage per micro-batch, {what}."),
        total=f("stage_total", total, "model", "One stage's communication: DP + TP + EP + CP, each converted."),
        tp_recomputed=f("stage_tp_recomputed", again["tp"], "tp",
                        "TP of one stage with each recomputed layer's traffic added again, converted."),
        ep_recomputed=f("stage_ep_recomputed", again["ep"], "ep",
                        "EP of one stage with each recomputed layer's traffic added again, converted."),
        cp_recomputed=f("stage_cp_recomputed", again["cp"], "cp",
                        "CP of one stage with each recomputed layer's traffic added again, converted."),
        total_recomputed=f("stage_total_recomputed", total_again, "model",
                           "One stage's communication with each recomputed layer's traffic added again "
                           "(the with_recomp sum; DP is not recomputed)."),
        # reduce_share = dp_reduced / dp_unconverted (0 where DP is 0) is a ratio of these two; the
        # division is left to the caller so that no Piecewise has to test a Piecewise for zero.
        dp_unconverted=f("stage_dp_unconverted", raw["dp"], "dp",
                         "DP volume of one stage per micro-batch before _stage_comm_time converts it.",
                         unit="bytes" if variant.fsdp else "params"),
        dp_reduced=f("stage_dp_reduced", raw["reduced"], "fsdp",
                     "Bytes of the stage's FSDP traffic that the copies of a shard spend all-reducing it "
                     "(fsdp_reduce_traffic summed over its layers and tables; 0 without FSDP).", unit="bytes"),
    )


#: The count symbols a stage formula is linear in, in a fixed order.
COUNT_SYMBOLS: tuple[sympy.Symbol, ...] = (n_embedding, n_output, n_body, n_extra, n_extra_sel, n_full_rec,
                                           n_sel_rec)

#: The stage outputs a searcher ranks layouts by (the converted parts and totals).
PRICED_OUTPUTS = ("dp", "tp", "ep", "cp", "total", "tp_recomputed", "ep_recomputed", "cp_recomputed",
                  "total_recomputed")


def per_layer_costs(expr: sympy.Expr, name: str) -> dict[str, sympy.Expr]:
    """``∂expr/∂count`` for each count symbol with a nonzero one: the cost one layer of that kind adds.

    Exact because a stage output is linear in the counts with no constant term; that is checked.

    Raises:
        ValueError: naming *name* if *expr* is not zero for an empty stage or not linear in a count.
    """
    if expr.subs({c: 0 for c in COUNT_SYMBOLS}) != 0:
        raise ValueError(f"{name}: not zero for an empty stage; the count expansion does not hold")
    out: dict[str, sympy.Expr] = {}
    for count in COUNT_SYMBOLS:
        coeff = sympy.diff(expr, count)
        if coeff == 0:
            continue
        if coeff.free_symbols & set(COUNT_SYMBOLS):
            raise ValueError(f"{name}: not linear in {count.name}")
        out[count.name] = coeff
    return out


@functools.cache
def stage_coefficients(variant: StageVariant) -> dict[str, dict[str, Formula]]:
    """The cost of one layer of each kind in a stage: ``∂output/∂count``, per priced output.

    Every priced stage output is linear in the layer counts (a sum over
    layers, then scaled by the stage conversion), with no constant term, so

        output = Σ_k count_k · coefficient_k

    exactly. A searcher evaluates the coefficients once per layout — they do
    not depend on which stage it is — and forms every stage's value as a dot
    product with that stage's counts. Counts whose coefficient is 0 are left
    out.

    Raises:
        ValueError: if an output is not linear in the counts (a bug in the assembly).
    """
    formulas = stage_formulas(variant)
    out: dict[str, dict[str, Formula]] = {}
    for name in PRICED_OUTPUTS:
        f = getattr(formulas, name)
        coefficients: dict[str, Formula] = {}
        for count, coeff in per_layer_costs(f.expr, f.name).items():
            coefficients[count] = Formula(
                name=f"{f.name}_per_{count.removeprefix('n_')}", expr=coeff, dimension=f.dimension,
                algorithm=f.algorithm, unit=f.unit,
                doc=f"{f.name} per layer counted by {count}: the cost one such layer adds to its stage.",
                source=f.source)
        out[name] = coefficients
    return out
