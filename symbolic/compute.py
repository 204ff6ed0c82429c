"""Compute time of a training step: FLOPs per layer and per pipeline stage, the pipeline bubble, step time.

Every FLOP count is of matrix multiplies (2 FLOPs per multiply-add), the convention of Narayanan
et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
SC'21, arXiv:2104.04473, §5.1 and Appendix: a GPT layer's forward pass is ``24·B·s·h² (1 + s/(6h))``
and the logits ``2·B·s·h·V``; a step is three passes, four with full recompute: their eq. gives
``96·B·s·l·h² (1 + s/(6h) + V/(16·l·h))``). Here the layer's linear FLOPs come from the parameter
counts of its projections (``symbolic.params``), so that one expression covers GQA, MLA, gated MLPs
and routed experts: a token's forward pass through a linear map of ``P`` weights is ``2·P`` FLOPs,
and a MoE token passes through its ``n_chosen_exp`` routed and ``n_shared_exp`` shared experts and
the router. Attention scores add ``2·s·a·(d_qk + d_v)`` per token (``QKᵀ`` and ``A·V`` over the whole
sequence, no causal halving, as Narayanan et al. count them). Full recompute repeats a layer's
forward pass; selective recompute (Korthikanti et al. 2022, arXiv:2205.05198, §5) repeats the core
attention only: its scores.

A rank of a stage does ``1/(t·cp)`` of its stage's work (TP splits every matrix multiply, CP the
sequence; experts are balanced over the EP group, so each rank's expert work is the same share).

The pipeline bubble of 1F1B and of the interleaved schedule with ``vp`` chunks per stage is
``(p − 1)/(vp·m)`` of the ideal time (Narayanan et al. 2021, §2.2.1 and §2.2.2).
"""

from __future__ import annotations

import sympy
from sympy import Ne, Piecewise

from .attention import head_width
from .formula import Formula
from .params import _attention
from .symbols import syms
from .vocabulary import AttentionParams

__all__ = ["layer_forward_flops", "score_flops", "stage_flops", "FORMULAS"]

s, b, h, a, dh, dhr, qk_nope, v = syms("s", "b", "h", "a", "dh", "dhr", "qk_nope_head_dim", "v")
hff, hff_exp, n_exp, n_shared_exp, n_chosen_exp, n_ffMM = syms(
    "hff", "hff_exp", "n_exp", "n_shared_exp", "n_chosen_exp", "n_ffMM")
t, cp, p, m, vp = syms("t", "cp", "p", "m", "vp")
n_layers_stage, n_full_rec, n_sel_rec, n_output = syms("n_layers_stage", "n_full_rec", "n_sel_rec", "n_output")
stage_flops_sym, peak, efficiency, exposed = syms(
    "stage_flops", "peak_flops_per_s", "compute_efficiency", "exposed_comm_s")

NARAYANAN = "Narayanan et al. 2021 (arXiv:2104.04473), §5.1 and Appendix (FLOPs of a GPT layer and the logits)"
KORTHIKANTI = "Korthikanti et al. 2022 (arXiv:2205.05198), §5 (selective recompute of the core attention)"
BUBBLE = "Narayanan et al. 2021 (arXiv:2104.04473), §2.2.1 (1F1B) and §2.2.2 (interleaved): bubble (p-1)/(vp·m)"


def score_flops(variant: AttentionParams) -> sympy.Expr:
    """Forward FLOPs per token of the attention scores: ``QKᵀ`` and ``A·V`` over the whole sequence."""
    if variant is AttentionParams.STANDARD:
        d_qk = d_v = head_width()
    else:
        d_qk = Piecewise((qk_nope, Ne(qk_nope, 0)), (dh, True)) + dhr
        d_v = dh
    return 2 * s * a * (d_qk + d_v)


def layer_forward_flops(variant: AttentionParams, moe: bool) -> sympy.Expr:
    """Forward FLOPs per token of one transformer layer: its active projections and its scores."""
    projections = _attention(variant)
    if moe:
        ffn = h * n_exp + (n_chosen_exp + n_shared_exp) * n_ffMM * hff_exp * h
    else:
        ffn = n_ffMM * hff * h
    return 2 * (projections + ffn) + score_flops(variant)


def stage_flops(variant: AttentionParams, moe: bool) -> sympy.Expr:
    """FLOPs one rank of a pipeline stage computes per step (forward, backward = 2 × forward, recompute)."""
    tokens = m * b * s / (t * cp)
    layer = layer_forward_flops(variant, moe)
    output = 2 * h * v
    return tokens * (3 * n_layers_stage * layer + n_full_rec * layer + n_sel_rec * score_flops(variant)
                     + 3 * n_output * output)


def _f(name: str, expr: sympy.Expr, algorithm: str, unit: str, doc: str, source: str) -> Formula:
    return Formula(name=f"compute_{name}", expr=expr, dimension="compute", algorithm=algorithm, unit=unit,
                   doc=doc, source=source)


def _build() -> tuple[Formula, ...]:
    out = []
    for variant in AttentionParams:
        for moe in (False, True):
            key = f"{variant.value}_{'moe' if moe else 'dense'}"
            out.append(_f(f"{key}_layer_forward_flop", layer_forward_flops(variant, moe), key, "FLOP",
                          "Forward FLOPs per token of one transformer layer (active projections, router, scores).",
                          f"{NARAYANAN}; projections from the parameter counts of symbolic.params"))
            out.append(_f(f"{key}_stage_flop", stage_flops(variant, moe), key, "FLOP",
                          "FLOPs per rank per step of one pipeline stage: three passes of its layers and output "
                          "layer, plus the recomputed forward passes (full) or attention scores (selective).",
                          f"{NARAYANAN}; {KORTHIKANTI}"))
    out.append(_f("output_forward_flop", 2 * h * v, "output", "FLOP",
                  "Forward FLOPs per token of the output layer (logits).", NARAYANAN))
    out.append(_f("stage_time_s", stage_flops_sym / (peak * efficiency), "time", "s",
                  "Seconds per step one rank of a stage computes: its FLOPs over the achieved FLOP/s "
                  "(peak × compute efficiency of the GPU generation, hardware catalog).",
                  "FLOPs / (peak FLOP/s × efficiency)"))
    out.append(_f("pipeline_bubble", (p - 1) / (vp * m), "pipeline", "1",
                  "Idle fraction of the ideal step time a pipeline adds under 1F1B / interleaved schedules.", BUBBLE))
    out.append(_f("step_time_s", stage_flops_sym / (peak * efficiency) * (1 + (p - 1) / (vp * m)) + exposed,
                  "step", "s",
                  "Seconds per training step: the slowest stage's compute stretched by the pipeline bubble, plus "
                  "the communication that cannot overlap with it.", f"{BUBBLE}; exposed communication: docs/search.md"))
    return tuple(out)


FORMULAS: tuple[Formula, ...] = _build()
