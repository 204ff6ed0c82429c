"""``estimate_from_mem_comm`` and ``estimate_comm`` through the closed-form stage totals.

A case's layout (``stages``) is reduced to the counts of each layer kind per
stage (``stage_counts``); the stage formulas of the model's variant
(``symbolic.model.stage_formulas``) are then evaluated once over all stages
as arrays.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from symbolic import cp, ep, model, params
from symbolic.attention import detect_attention
from symbolic.formula import Formula

from ...kernels import formula_functions
from ...pricing.levels import score_factors
from .ep import max_rank_tokens
from .tp import gather_switch
from .fields import Fields

__all__ = ["ADAPTERS", "variant_of", "stage_counts", "stage_bindings", "evaluate_stages"]

EMBEDDING, OUTPUT = "EMBEDDING_LAYER", "OUTPUT_LAYER"
NOT_REC, FULL_REC, SEL_REC = "NOT_REC_LAYER", "FULL_REC_LAYER", "SEL_REC_LAYER"
_LAYER_TYPES = (EMBEDDING, OUTPUT, NOT_REC, FULL_REC, SEL_REC)
COUNT_NAMES = ("n_embedding", "n_output", "n_body", "n_extra", "n_extra_sel", "n_full_rec", "n_sel_rec")


def variant_of(f: Fields, device: str) -> model.StageVariant:
    """The stage variant a configuration selects, resolved as the original resolves each branch."""
    moe = f.num("n_exp") > 1
    return model.StageVariant(
        attention=detect_attention(dc_kv=f.num("dc_kv"), n_kv=f.num("n_kv"), a=f.num("a")),
        params=params.attention_variant(dc_kv=f.num("dc_kv"), dc_q=f.num("dc_q")),
        moe=moe,
        cp_algorithm=cp.resolve_algorithm(f["cp_algo"], lenient=True),
        linear=f.num("n_linrec") != 0,
        routing=ep.routing(f["tokens_per_expert"], n_exp=f.num("n_exp"), ep=f.num("ep"), comm_ep=f.num("comm_ep")),
        zero_non_exp=int(f.num("comm_d_non_exp")),
        zero_exp=int(f.num("comm_d_exp")),
        fsdp=bool(f.num("grad_shard_as_params")),
        reshards=bool(f.num("reshards")),
        shard_spans_cp=bool(f.num("shard_spans_cp")),
        tied_embedding=bool(f.num("tie_emb_out")),
        time=str(f["ttype"]).upper() == "TIME",
        halve=device == "A3",  # the original keys the halving on the device's name (§10 item 14)
    )


def stage_counts(stages: Sequence[Sequence[Sequence[str]]], n_lay: int) -> dict[str, np.ndarray]:
    """Per stage, how many layers of each kind it holds (the count symbols of ``symbolic.model``).

    Body layers are numbered in model order — chunk by chunk, and within a
    chunk stage by stage — and the first ``n_lay`` of them get a kind entry
    (FORMULAS.md §8); the rest are the extra (MTP) layers.

    Raises:
        ValueError: naming ``stages`` for an unknown layer type.
    """
    p = len(stages)
    counts = {name: np.zeros(p) for name in COUNT_NAMES}
    chunks = max((len(stage) for stage in stages), default=0)
    position = 0
    for c in range(chunks):
        for s, stage in enumerate(stages):
            for layer in stage[c] if c < len(stage) else ():
                if layer not in _LAYER_TYPES:
                    raise ValueError(f"stages: unknown layer type {layer!r}; expected one of {_LAYER_TYPES}")
                if layer == EMBEDDING:
                    counts["n_embedding"][s] += 1
                    continue
                if layer == OUTPUT:
                    counts["n_output"][s] += 1
                    continue
                if position < n_lay:
                    counts["n_body"][s] += 1
                elif layer == SEL_REC:
                    counts["n_extra_sel"][s] += 1
                else:
                    counts["n_extra"][s] += 1
                position += 1
                if layer == FULL_REC:
                    counts["n_full_rec"][s] += 1
                elif layer == SEL_REC:
                    counts["n_sel_rec"][s] += 1
    return counts


def _score_factors(f: Fields, device: str) -> dict[str, float]:
    """Level score of a unit volume for DP, TP and CP (the TIME path; the score is linear in the volume)."""
    factors = score_factors(device=device, **{k: f.num(k) for k in ("d", "t", "cp", "p")})
    return {name: float(value) for name, value in factors.items()}


def _arguments(formula: Formula, values: Mapping[str, Any]) -> dict[str, Any]:
    return {name: values[name] for name in formula.arguments}


def stage_bindings(inputs: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """Values of the symbols *names* for a case's stages: layer counts as arrays over the stages, the
    rest as numbers (``gather`` from ``rec_op``, ``max_rank_tokens`` from ``tokens_per_expert``, the
    TIME path's score factors from the level assignment, ``level_bound_0`` from the device)."""
    import hardware

    f = Fields(inputs)
    device = str(inputs.get("device", "A2"))
    values: dict[str, Any] = {**stage_counts(inputs["stages"], int(f.num("n_lay"))),
                              "level_bound_0": float(hardware.load(device).level_bounds()[0])}
    for name in sorted(set(names) - set(values)):
        if name == "max_rank_tokens":
            values[name] = max_rank_tokens(f["tokens_per_expert"], n_exp=int(f.num("n_exp")), ep=int(f.num("ep")))
        elif name.startswith("score_factor_"):
            values.update(_score_factors(f, device))
        elif name == "gather":
            values[name] = gather_switch(inputs)
        else:
            values[name] = f.num(name)
    return values


def evaluate_stages(inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Every stage output (``symbolic.model.OUTPUTS``) of a case, as arrays over its stages."""
    f = Fields(inputs)
    variant = variant_of(f, str(inputs.get("device", "A2")))
    if f.num("cp") > 1 and f.num("a") <= 0:
        raise ValueError(f"a: attention heads must be positive when cp > 1, got {f.num('a')!r}")
    formulas = model.stage_formulas(variant)
    # The totals are the sums of the converted parts, as the original's _stage_totals adds its lists
    # (line 668); evaluating the parts alone halves what has to be compiled.
    parts = {name: g for name, g in zip(model.OUTPUTS, formulas.all()) if not name.startswith("total")}
    values = stage_bindings(inputs, {a for g in parts.values() for a in g.arguments})
    shape = (len(inputs["stages"]),)
    functions = formula_functions(list(parts.values()))
    out = {name: np.broadcast_to(functions[g.name](**_arguments(g, values)), shape) for name, g in parts.items()}
    out["total"] = out["dp"] + out["tp"] + out["ep"] + out["cp"]
    out["total_recomputed"] = out["dp"] + out["tp_recomputed"] + out["ep_recomputed"] + out["cp_recomputed"]
    # reduce_share: the all-reduced part of the unconverted DP volume, 0 where that volume is 0 (line 710).
    dp_raw = out["dp_unconverted"]
    out["reduce_share"] = np.divide(out["dp_reduced"], dp_raw, out=np.zeros(shape), where=dp_raw != 0)
    return out


def _lists(out: Mapping[str, np.ndarray], recomputed: bool) -> dict[str, list[float]]:
    suffix = "_recomputed" if recomputed else ""
    return {"DP": out["dp"].tolist(), "MP": out[f"tp{suffix}"].tolist(), "EP": out[f"ep{suffix}"].tolist(),
            "CP": out[f"cp{suffix}"].tolist()}


def _estimate_from_mem_comm(inputs: Mapping[str, Any]) -> dict[str, Any]:
    mode = inputs.get("mode", "plain")
    if mode not in ("plain", "with_recomp", "both"):
        raise ValueError(f"mode: expected plain, with_recomp or both, got {mode!r}")
    out = evaluate_stages(inputs)
    share = out["reduce_share"].tolist()
    if mode == "both":
        return {"plain": out["total"].tolist(), "recomputed": out["total_recomputed"].tolist(),
                "per_dim": _lists(out, False), "per_dim_recomputed": _lists(out, True), "reduce_share": share}
    recomputed = mode == "with_recomp"
    total = out["total_recomputed" if recomputed else "total"].tolist()
    return {"totals": total, "per_dim": _lists(out, recomputed), "reduce_share": share}


def _estimate_comm(inputs: Mapping[str, Any]) -> list[float]:
    out = evaluate_stages(inputs)
    return out["total_recomputed" if inputs.get("with_recomp") else "total"].tolist()


ADAPTERS = {
    "estimate_from_mem_comm": _estimate_from_mem_comm,
    "estimate_comm": _estimate_comm,
}
