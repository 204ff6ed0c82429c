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
sequence, as Narayanan et al. count them; a fused attention kernel computes half of a causal mask's:
``stage_flops``). Full recompute repeats a layer's
forward pass; selective recompute (Korthikanti et al. 2022, arXiv:2205.05198, §5) repeats the core
attention only: its scores; a recomputed module (Megatron-Core's ``recompute_modules``) repeats its own
forward pass (MLA's up-projections: GEMMs; the norms and the experts' activation: memory-bound work).

A rank of a stage does ``1/(t·cp)`` of its stage's work (TP splits every matrix multiply, CP the
sequence; experts are balanced over the EP group, so each rank's expert work is the same share).

Besides the matrix multiplies (tensor cores), a stage moves bytes through HBM in memory-bound work
(``stage_hbm_bytes``) and computes its element-wise operations on the vector unit (``stage_vector_flops``:
Calculon's FLOPs per element of each operation); the stage's compute seconds add the three, not overlapped,
as Calculon's ``no_overlap`` processing mode does.

The pipeline bubble of 1F1B and of the interleaved schedule with ``vp`` chunks per stage is
``(p − 1)/(vp·m)`` of the ideal time (Narayanan et al. 2021, §2.2.1 and §2.2.2).
"""

from __future__ import annotations

import sympy
from sympy import Ne, Piecewise

from .attention import head_width
from .formula import Formula
from .params import (attention_params, dense_ffn_params, mla_up_projection_params, mla_up_projection_shapes,
                     norm_params, router_params, routed_expert_params, shared_expert_params)
from .symbols import syms
from .vocabulary import AttentionParams

__all__ = ["layer_forward_flops", "linear_forward_flops", "score_flops", "stage_flops", "stage_lowp_flops", "stage_hbm_bytes", "stage_vector_flops", "dense_layers_of_moe", "window_saved_flops", "window_saved_gemm_flops", "permuted_elements", "FORMULAS"]

s, b, h, a, dh, dhr, qk_nope, v = syms("s", "b", "h", "a", "dh", "dhr", "qk_nope_head_dim", "v")
hff, hff_exp, n_exp, n_shared_exp, n_chosen_exp, n_ffMM = syms(
    "hff", "hff_exp", "n_exp", "n_shared_exp", "n_chosen_exp", "n_ffMM")
t, cp, p, m, vp = syms("t", "cp", "p", "m", "vp")
n_layers_stage, n_full_rec, n_sel_rec, n_output = syms("n_layers_stage", "n_full_rec", "n_sel_rec", "n_output")
stage_flops_sym, peak, efficiency, exposed = syms(
    "stage_flops", "peak_flops_per_s", "compute_efficiency", "exposed_comm_s")
n_kv, sp, d, ep, zero_level, flash, dropout = syms("n_kv", "sp", "d", "ep", "zero_level", "flash_attention", "dropout")
bytes_grad_acc = syms("bytes_grad_acc")[0]
hbm_bytes_sym, hbm_bw, hbm_eff = syms("stage_hbm_bytes", "hbm_bytes_per_s", "hbm_efficiency")
vector_sym, vector_peak, vector_eff = syms("stage_vector_flops", "vector_flops_per_s", "vector_efficiency")
lowp_sym, lowp_peak, lowp_eff = syms("stage_lowp_flops", "lowp_peak_flops_per_s", "lowp_efficiency")
n_dense_stage, n_dense_full, n_dense_sel = syms("n_dense_layers_stage", "n_dense_full_rec", "n_dense_sel_rec")
n_window_stage, n_window_full, n_window_sel, window = syms(
    "n_window_layers_stage", "n_window_full_rec", "n_window_sel_rec", "sliding_window")
attn_ratio, = syms("attention_ratio")
recompute_norm, recompute_moe_act, recompute_mla_up = syms("recompute_norm", "recompute_moe_act", "recompute_mla_up")
dc_kv, dc_q = syms("dc_kv", "dc_q")

NARAYANAN = "Narayanan et al. 2021 (arXiv:2104.04473), §5.1 and Appendix (FLOPs of a GPT layer and the logits)"
KORTHIKANTI = "Korthikanti et al. 2022 (arXiv:2205.05198), §5 (selective recompute of the core attention)"
CALCULON = ("Calculon (Isaev et al. 2023, SC'23; calculon-ai/calculon@caa4b11, calculon/llm/layers.py and llm.py): "
            "per-layer operations, each moving its inputs, outputs and weights through HBM, not overlapped with its "
            "math (processing_mode no_overlap of systems/a100_80g.json and h100_80g_nvl8.json)")
VECTOR = ("Calculon (Isaev et al. 2023; calculon-ai/calculon@caa4b11, calculon/llm/layers.py): FLOPs per element of "
          "each element-wise operation on the vector unit (LayerNorm 9 forward, 14 + 7 backward; GeLU 8, 13; softmax "
          "5, 8; dropout 1, 1; residual add 1, 2; a fork summing n gradients n; Adam 11 per parameter), their time "
          "added to the operation's memory time (processing_mode no_overlap, calculon/system.py)")
ACCUMULATE = ("Megatron-LM (NVIDIA/Megatron-LM, megatron/core/tensor_parallel/layers.py, "
              "LinearWithGradAccumulationAndAsyncCommunication.backward): the weight gradient is accumulated in "
              "place into the parameter's main_grad buffer every micro-batch (wgrad_gemm_accum_fp32 / _fp16, or "
              "main_grad.add_), which reads and writes the buffer in the gradient dtype")
LOW_PRECISION = ("NVIDIA Transformer Engine documentation (\"Using FP8 with Transformer Engine\"; "
                 "transformer_engine.pytorch.Linear / LayerNormLinear / LayerNormMLP / GroupedLinear under fp8_autocast): "
                 "a linear layer's forward, input-gradient (dgrad) and weight-gradient (wgrad) GEMMs run in FP8 "
                 "(MXFP8, NVFP4 on Blackwell); attention's core and every other operation stay in BF16; Megatron-Core's "
                 "output layer and MoE router are not Transformer Engine modules and stay in BF16")
MODULES = ("Megatron-Core (NVIDIA/Megatron-LM@d98e8a6) megatron/core/transformer/transformer_config.py "
           "(recompute_modules layernorm, moe_act and mla_up_proj: output-discarding checkpoints, their modules' "
           "forward run again in the backward pass), transformer/transformer_layer.py, transformer/moe/experts.py and "
           "transformer/multi_latent_attention.py (qkv_up_proj_and_rope_apply)")
CAUSAL = ("Dao 2023, FlashAttention-2 (arXiv:2307.08691), §3.1 (causal masking: the blocks whose entries are all "
          "masked are skipped, about half of them); NVIDIA's NeMo / Megatron-Bridge model FLOPs count causal "
          "attention's scores as half the full matrix")
FIRST_K_DENSE = ("DeepSeek-V3 (arXiv:2412.19437), §4.2 and its config.json first_k_dense_replace = 3: the first layers "
                 "have a dense FFN of width intermediate_size in place of the router and experts; Megatron-Core's "
                 "moe_layer_freq / NeMo's DeepSeekV3Config moe_layer_freq = [0]*3 + [1]*58")
WINDOW = ("Beltagy et al. 2020, Longformer (arXiv:2004.05150), §3.1 (sliding-window attention: each query attends to "
          "the w keys before it, O(s·w) instead of O(s²)); OpenAI gpt-oss-120b config.json (sliding_window 128 on "
          "the layers whose layer_types entry is sliding_attention, every other layer); FlashAttention's local "
          "(window) attention skips the blocks outside the band as it skips those above the diagonal (Dao 2023, "
          "arXiv:2307.08691, §3.1)")
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
    projections = attention_params(variant)
    if moe:
        ffn = h * n_exp + (n_chosen_exp + n_shared_exp) * n_ffMM * hff_exp * h
    else:
        ffn = n_ffMM * hff * h
    return 2 * (projections + ffn) + score_flops(variant)


def linear_forward_flops(variant: AttentionParams, moe: bool) -> sympy.Expr:
    """Forward FLOPs per token of one layer's linear layers that Transformer Engine runs in a low precision: the
    attention projections and the MLP or the chosen and shared experts (not the router, not the scores)."""
    projections = attention_params(variant)
    if moe:
        ffn = (n_chosen_exp + n_shared_exp) * n_ffMM * hff_exp * h
    else:
        ffn = n_ffMM * hff * h
    return 2 * (projections + ffn)


def _up_projections_again(variant: AttentionParams) -> sympy.Expr:
    """Forward FLOPs per token of the up-projections a layer not fully recomputed runs again under
    ``mla_up_proj`` (:func:`_up_projection_gemms`; 0 for standard attention)."""
    return sympy.Add(*(flops for flops, _size in _up_projection_gemms(variant)))


def stage_lowp_flops(variant: AttentionParams, moe: bool) -> sympy.Expr:
    """FLOPs of a stage's GEMMs one rank runs per step in the run's low precision: the linear layers' three passes
    (forward, input gradient, weight gradient), their forward again under full recompute, and MLA's up-projections
    again in the layers recomputing ``mla_up_proj``."""
    return m * b * s / (t * cp) * ((3 * n_layers_stage + n_full_rec) * linear_forward_flops(variant, moe)
                                   + (n_layers_stage - n_full_rec) * _up_projections_again(variant))


def stage_flops(variant: AttentionParams, moe: bool) -> sympy.Expr:
    """FLOPs one rank of a pipeline stage computes per step (forward, backward = 2 × forward, recompute).

    The models are causal decoders: a fused attention kernel (``flash_attention`` = 1) computes the scores block
    by block and skips the blocks above the diagonal, half the ``s × s`` matrix (``CAUSAL``); without one the
    whole matrix is computed and then masked (Megatron-LM's fused softmax), as Narayanan et al. count it.
    """
    tokens = m * b * s / (t * cp)
    scores = (1 - flash / 2) * score_flops(variant)
    layer = layer_forward_flops(variant, moe) - score_flops(variant) + scores
    output = 2 * h * v
    return tokens * (3 * n_layers_stage * layer + n_full_rec * layer + n_sel_rec * scores + 3 * n_output * output
                     + (n_layers_stage - n_full_rec) * _up_projections_again(variant))


GEMM_CURVE = ("Calculon (Isaev et al. 2023, SC'23; calculon-ai/calculon@caa4b11, systems/a100_80g.json and "
              "h100_80g_nvl8.json, \"matrix\" float16 gflops_efficiency [[128, 0.95], [16, 0.9], [1, 0.6], [0, 0.1]]: "
              "a GEMM's efficiency by its GFLOPs, looked up per operation in calculon/processor.py: the first band "
              "whose lower edge the size reaches), taken relative to its 16-128 GFLOP value, which the catalog's "
              "compute_efficiency stands for: 0.1/0.9 under 1 GFLOP, 0.6/0.9 from 1 to 16; not above 1, since that "
              "reference is the generation's measured maximum achievable matmul efficiency (S. Bekman, \"Machine "
              "Learning Engineering\", compute/accelerator, MAMF table)")
GROUPED_GEMM = ("Megatron-Core MoE (NVIDIA/Megatron-LM, megatron/training/arguments.py and "
                "megatron/core/transformer/moe/README.md, --moe-grouped-gemm: 'launch multiple local GEMM kernels in "
                "multiple streams ... with GroupedLinear in TransformerEngine'; experts.py TEGroupedMLP): the local "
                "experts' GEMMs, one per expert on its own tokens, are issued as separate GEMMs, so each is sized by "
                "its own tokens; a rank holds n_exp/ep experts, each receiving the tokens routed to it from the EP "
                "group (tokens x top-k / experts per rank)")


def gemm_efficiency_ratio(size: sympy.Expr) -> sympy.Expr:
    """A GEMM's efficiency over the generation's reference GEMM efficiency (``compute_efficiency``), by the GEMM's
    size *size* in FLOPs (one kernel: one pass of one micro-batch on one rank): 1/9 under 1 GFLOP, 2/3 from 1 to
    16 GFLOP, 1 from 16 GFLOP (unit: 1). Calculon's step table over its 16-128 GFLOP value, capped at 1
    (``GEMM_CURVE``); the same bands on every generation, as Calculon gives them for A100 and H100 alike."""
    return Piecewise((sympy.Rational(1, 9), size < 10**9), (sympy.Rational(2, 3), size < 16 * 10**9), (1, True))


FUSED_ATTENTION = ("a fused attention kernel's measured throughput, per GPU generation (the catalog's "
                   "attention_efficiency): on Hopper cuDNN's fused attention, Transformer Engine's default backend, "
                   "at 529 TFLOP/s forward with a causal mask and 518 TFLOP/s backward (H100 80GB SXM5, BF16, head "
                   "dim 128, sequence 8k: Shah et al. 2024, FlashAttention-3, arXiv:2407.08608, Figs. 5 and 6); a "
                   "backward pass is 2.5 forward passes of matmul FLOPs (five matmuls to two), so 3 forward passes' "
                   "FLOPs take F/529 + 2.5 F/518 TFLOP/s: 0.45 of the 989 TFLOP/s peak in the step's count of "
                   "three passes")


def score_gemm_ratio(size: sympy.Expr) -> sympy.Expr:
    """The efficiency of the attention scores' matmuls over the reference GEMM efficiency, by their size in FLOPs:
    under a fused attention kernel the kernel's own (``attention_ratio``: its achieved fraction of the peak over
    ``compute_efficiency``, ``FUSED_ATTENTION``), at most the size's GEMM ratio (:func:`gemm_efficiency_ratio`: the
    kernel is no faster than a GEMM of its size); 1 where no kernel's figure is published, the GEMM curve's alone
    (unit: 1)."""
    return sympy.Min(attn_ratio, gemm_efficiency_ratio(size))


def _linear_gemms(variant: AttentionParams, moe: bool) -> list[tuple[sympy.Expr, sympy.Expr]]:
    """One layer's linear GEMMs as ``(forward FLOPs per token of a rank's share, size in FLOPs of one GEMM)``.

    A rank's share of a micro-batch is ``b·s/(t·cp)`` tokens' worth of FLOPs (TP splits every matrix, CP the
    sequence), so a GEMM's size is that many tokens times its per-token FLOPs. The attention projections are two
    GEMMs of equal size (the fused QKV and the output projection); the MLP's first GEMM fuses the gate with the up
    projection (``n_ffMM − 1`` matrices), the second is the down projection. Routed experts (``GROUPED_GEMM``):
    each of a rank's ``n_exp/ep`` experts is a GEMM of its own tokens, ``ep/n_exp`` of the rank's expert FLOPs;
    the shared experts are one fused MLP.
    """
    tokens = b * s / (t * cp)
    out = [(2 * attention_params(variant), tokens * attention_params(variant))]
    if moe:
        for width in (n_ffMM - 1, 1):
            routed = 2 * n_chosen_exp * width * hff_exp * h
            shared = 2 * n_shared_exp * width * hff_exp * h
            out += [(routed, tokens * routed * ep / n_exp), (shared, tokens * shared)]
    else:
        for width in (n_ffMM - 1, 1):
            out.append((2 * width * hff * h, tokens * 2 * width * hff * h))
    return out


def _weighted(gemms: list[tuple[sympy.Expr, sympy.Expr]]) -> sympy.Expr:
    """Per-token FLOPs of *gemms*, each over its size's efficiency ratio (:func:`gemm_efficiency_ratio`)."""
    return sum(flops / gemm_efficiency_ratio(size) for flops, size in gemms)


def stage_lowp_gemm_flops(variant: AttentionParams, moe: bool) -> sympy.Expr:
    """:func:`stage_lowp_flops` with each GEMM's FLOPs over its size's efficiency ratio (unit: FLOP at the
    reference efficiency): the low-precision GEMMs' seconds are these over the low-precision peak × its efficiency.
    Sources: ``LOW_PRECISION``, ``GEMM_CURVE``, ``GROUPED_GEMM``."""
    return m * b * s / (t * cp) * ((3 * n_layers_stage + n_full_rec) * _weighted(_linear_gemms(variant, moe))
                                   + (n_layers_stage - n_full_rec) * _weighted(_up_projection_gemms(variant)))


def stage_gemm_flops(variant: AttentionParams, moe: bool) -> sympy.Expr:
    """:func:`stage_flops` with each GEMM's FLOPs over its size's efficiency ratio (unit: FLOP at the reference
    efficiency, so that the seconds are these over peak × ``compute_efficiency``).

    The GEMMs: the linear layers (:func:`_linear_gemms`), the MoE router (``b·s/(t·cp)`` tokens by ``h`` by
    ``n_exp``), the attention scores (``QKᵀ`` and ``A·V``, each one batched kernel over the micro-batch's heads)
    and the output layer; their sizes are a micro-batch's on one rank, the same in the forward, input-gradient
    and weight-gradient passes (equal FLOPs); under a fused attention kernel the scores at its own efficiency
    (:func:`score_gemm_ratio`). Sources: ``NARAYANAN``, ``GEMM_CURVE``, ``GROUPED_GEMM``, ``FUSED_ATTENTION``.
    """
    tokens = b * s / (t * cp)
    gemms = _linear_gemms(variant, moe)
    if moe:
        gemms.append((2 * h * n_exp, tokens * 2 * h * n_exp))
    layer = _weighted(gemms)
    # Under a fused kernel (flash = 1) the causal half of the scores at the kernel's efficiency; without one the
    # whole matrix as two GEMMs (QKᵀ and A·V, each half the FLOPs) on the GEMM curve.
    causal = score_flops(variant) / 2
    core = (flash * causal / score_gemm_ratio(tokens * causal / 2)
            + (1 - flash) * score_flops(variant) / gemm_efficiency_ratio(tokens * score_flops(variant) / 2))
    output = 2 * h * v / gemm_efficiency_ratio(tokens * 2 * h * v)
    return m * tokens * (3 * n_layers_stage * (layer + core) + n_full_rec * (layer + core) + n_sel_rec * core
                         + 3 * n_output * output
                         + (n_layers_stage - n_full_rec) * _weighted(_up_projection_gemms(variant)))


__all__ += ["gemm_efficiency_ratio", "score_gemm_ratio", "stage_gemm_flops", "stage_lowp_gemm_flops"]


#: Bytes of a 16-bit activation element; dropout masks take one byte (Korthikanti et al. 2022, §4.1).
_E = 2


PERMUTE = ("Megatron-Core's token dispatcher (NVIDIA/Megatron-LM, megatron/core/transformer/moe/moe_utils.py: permute, "
           "an index_select copying each token's row once per chosen expert, and unpermute, the expert outputs (weighed "
           "by their routing probabilities inside the experts) summed back into the tokens' rows; token_dispatcher.py, "
           "MoEAlltoAllTokenDispatcher): memory-bound copies of a rank's tokens, h elements each, forward and "
           "mirrored backward; the all-to-all's own chunk sorting is left out")


def permuted_elements() -> sympy.Expr:
    """Elements a MoE layer's token permutation and un-permutation move through HBM in one pass of one micro-batch on
    one rank (``PERMUTE``; unit: elements, 16-bit each): each of the rank's ``b·s/(cp·t)`` tokens read once and
    written once per chosen expert before the dispatch, each chosen expert's output read and summed back into its
    token's row after the combine — ``2·(b·s/(cp·t))·h·(1 + k)``; the backward pass mirrors it."""
    return 2 * (b * s / (cp * t)) * h * (1 + n_chosen_exp)


def _rank_weights(variant: AttentionParams, moe: bool) -> sympy.Expr:
    """Parameters of one layer held by one rank: the non-expert part over TP, routed experts over EP."""
    if moe:
        non_expert = attention_params(variant) + norm_params() + router_params() + shared_expert_params()
        return non_expert / t + routed_expert_params() / ep
    return (attention_params(variant) + norm_params() + dense_ffn_params()) / t


def _layer_hbm(variant: AttentionParams, moe: bool) -> tuple[sympy.Expr, sympy.Expr, sympy.Expr, sympy.Expr]:
    """HBM bytes of one layer, one micro-batch, one rank: (forward element-wise, backward element-wise,
    one pass of the GEMM operands, the attention core's forward operands and score element-wise ops)."""
    tokens = b * s / cp
    resid = tokens * h / sp  # the residual stream: split over TP by sequence parallelism
    gathered = tokens * h  # a TP block's gathered input
    heads = a / t
    d_v = head_width() if variant is AttentionParams.STANDARD else dh
    scores = (1 - flash) * b * heads * s * s / cp  # s-by-s score elements unless a fused kernel keeps them on chip
    permute = 0
    if moe:
        active = (n_chosen_exp + n_shared_exp) * hff_exp
        act = tokens * active / t
        ffn_io = tokens * (n_chosen_exp + n_shared_exp) * n_ffMM * (h + hff_exp) / t
        permute = permuted_elements()
    else:
        act = tokens * hff / t
        ffn_io = tokens * (n_ffMM * h + n_ffMM * hff / t)
    # Attention projections: Q, K, V read the gathered input, O writes an h-wide output; the projected widths
    # (Q, K, V outputs and O's input) are the attention weights over h, split by TP.
    attn_io = tokens * (4 * h + attention_params(variant) / (h * t))
    core = 4 * tokens * heads * d_v  # Q, K, V in and the context out of the attention core
    gemm = _E * (attn_io + ffn_io + _rank_weights(variant, moe) + core + 2 * scores)
    # Per block (attention, MLP): layer norm in + out, dropout in + out + mask, residual add 2 in + 1 out.
    softmax = scores * (2 * _E + dropout * (2 * _E + 1))
    fwd = 2 * resid * (2 * _E + dropout * (2 * _E + 1) + 3 * _E) + n_ffMM * _E * act + softmax + _E * permute
    # Backward: layer norm (input gradient and weight gradient), dropout, residual, the fork summing the two
    # users' gradients (3 elements), and the attention block's gathered input forked to Q, K and V (4 elements).
    bwd = (2 * resid * (4 * _E + dropout * (2 * _E + 1) + 3 * _E + 3 * _E) + 4 * _E * gathered
           + n_ffMM * _E * act + softmax + _E * permute)
    attention_core = _E * (core + 2 * scores) + softmax
    return fwd, bwd, gemm, attention_core


def _layer_vector(variant: AttentionParams, moe: bool) -> tuple[sympy.Expr, sympy.Expr, sympy.Expr]:
    """Vector-unit FLOPs of one layer, one micro-batch, one rank: (forward, backward, the attention core's forward).

    Per element, as Calculon counts each operation (``VECTOR``): per block (attention, MLP) a layer norm (9
    forward; 14 for the input gradient and 7 for the weight gradient backward), a dropout (1, 1) and a residual
    add (1 forward, 2 backward: one gradient per operand) on the residual stream, and in the backward pass the
    fork that sums the gradients of the block's two users (2); the attention block's gathered input forked to
    Q, K and V (3 backward); the activation function on the FFN's hidden elements (GeLU's 8 forward, 13
    backward; a gated MLP adds the product with the gate, 1 forward, 2 backward); the softmax (5, 8) and the
    dropout (1, 1) of the ``s × s`` scores unless a fused attention kernel keeps them on chip.
    """
    tokens = b * s / cp
    resid = tokens * h / sp
    gathered = tokens * h
    scores = (1 - flash) * b * (a / t) * s * s / cp
    if moe:
        act = tokens * (n_chosen_exp + n_shared_exp) * hff_exp / t
    else:
        act = tokens * hff / t
    gate = n_ffMM - 2  # 1 for a gated MLP (three matrices), 0 for a two-matrix one
    fwd = 2 * (9 + dropout + 1) * resid + (8 + gate) * act + (5 + dropout) * scores
    bwd = 2 * (2 + 14 + 7 + dropout + 2) * resid + 3 * gathered + (13 + 2 * gate) * act + (8 + dropout) * scores
    return fwd, bwd, (5 + dropout) * scores


def _up_projection_gemms(variant: AttentionParams) -> list[tuple[sympy.Expr, sympy.Expr]]:
    """MLA's up-projections that ``mla_up_proj`` runs again, as :func:`_linear_gemms` lists GEMMs (forward FLOPs per
    token of a rank's share, size in FLOPs), each times ``recompute_mla_up``; none for standard attention."""
    if variant is AttentionParams.STANDARD:
        return []
    tokens = b * s / (t * cp)
    return [(recompute_mla_up * 2 * p, tokens * 2 * p)
            for p in mla_up_projection_params(variant is AttentionParams.MLA_Q_LATENT)]


def _module_recompute(variant: AttentionParams, moe: bool) -> tuple[sympy.Expr, sympy.Expr]:
    """(HBM bytes, vector FLOPs) of one layer, one micro-batch, one rank recomputing its modules in the backward
    pass (``MODULES``): each ``recompute_norm`` norm's forward again (its input read and output written, 9 FLOPs
    an element), a MoE layer's pre-MLP norm and MLA's input norm; under ``recompute_moe_act`` the routed experts'
    activation function again (its ``n_ffMM − 1`` inputs read and its output written, GeLU's 8 FLOPs an element
    and the gate's product); under ``recompute_mla_up`` MLA's up-projections' operands again (their GEMM FLOPs are
    :func:`_up_projection_gemms`'; the rotary embedding's element-wise work is left out). Both 0 where the layer
    has none of these modules (a standard dense layer's norms are fused into its linear layers)."""
    resid = b * s / cp * h / sp
    norms = int(moe) + int(variant is not AttentionParams.STANDARD)
    hbm = recompute_norm * norms * 2 * _E * resid
    vector = recompute_norm * norms * 9 * resid
    if moe:
        routed = b * s / cp * n_chosen_exp * hff_exp / t
        hbm = hbm + recompute_moe_act * n_ffMM * _E * routed
        vector = vector + recompute_moe_act * (8 + n_ffMM - 2) * routed
    if variant is not AttentionParams.STANDARD:
        # The up-projections' operands again: their inputs (the latents, or h without a query latent), weights and
        # outputs (every head's query and key/value widths, split by TP).
        shapes = mla_up_projection_shapes(variant is AttentionParams.MLA_Q_LATENT)
        inputs = sum(width_in for width_in, _ in shapes)
        outputs = sum(width_out for _, width_out in shapes) / t
        weights = sum(width_in * width_out for width_in, width_out in shapes) / t
        hbm = hbm + recompute_mla_up * _E * (b * s / cp * (inputs + outputs) + weights)
    return hbm, vector


def stage_vector_flops(variant: AttentionParams, moe: bool) -> sympy.Expr:
    """FLOPs one rank of a pipeline stage computes per step on the vector unit (not the tensor cores).

    Per layer and micro-batch, the element-wise operations of :func:`_layer_vector` forward and backward,
    again forward under full recompute, the scores' softmax and dropout again under selective recompute, the
    recomputed modules' forward again in every layer not fully recomputed (:func:`_module_recompute`); per
    step, the Adam update: 11 FLOPs per parameter of the rank (Calculon's count), over the data-parallel
    group under ZeRO level >= 1. Left out, as in the HBM bytes: the cross-entropy of the logits.
    """
    fwd, bwd, core = _layer_vector(variant, moe)
    modules = _module_recompute(variant, moe)[1]
    body = m * (n_layers_stage * (fwd + bwd) + n_full_rec * fwd + n_sel_rec * core
                + (n_layers_stage - n_full_rec) * modules)
    shards = Piecewise((d, sympy.Ge(zero_level, 1)), (1, True))
    optimizer = 11 * (n_layers_stage * _rank_weights(variant, moe) + n_output * h * v / t) / shards
    return body + optimizer


def stage_hbm_bytes(variant: AttentionParams, moe: bool) -> sympy.Expr:
    """HBM bytes one rank of a pipeline stage moves per step in memory-bound work.

    Per layer and micro-batch: the element-wise operations (forward and backward), a MoE layer's token permutation
    and un-permutation (``PERMUTE``: ``2·(b·s/(cp·t))·h·(1 + k)`` elements each pass), the GEMMs' operands
    (inputs, outputs and weights; forward once, backward twice: input and weight gradients), the
    weight-gradient GEMM's accumulation into the gradient buffer (Megatron-LM's ``main_grad += dY^T·X``, in
    place, every micro-batch: the buffer read and written in the accumulation's dtype, ``2·bytes_grad_acc`` a
    parameter, where the GEMM operands above count one 16-bit write; Megatron-LM accumulates in the buffer it
    reduces, ``bytes_grad_acc = bytes_grad``, PyTorch's autograd in the parameters' own dtype), the recomputed
    forward pass (full) or attention core (selective), the recomputed modules in every layer not fully recomputed
    (:func:`_module_recompute`); per step, the Adam update of the rank's parameters (30 bytes each: fp32 gradient,
    weight and two moments read, the three written, the 16-bit weight copy written), over the data-parallel group
    under ZeRO level >= 1.
    """
    fwd, bwd, gemm, core = _layer_hbm(variant, moe)
    accumulate = 2 * bytes_grad_acc - _E  # per parameter and micro-batch, beyond the 16-bit write counted in gemm
    per_layer = fwd + bwd + 3 * gemm + accumulate * _rank_weights(variant, moe)
    modules = _module_recompute(variant, moe)[0]
    body = m * (n_layers_stage * per_layer + n_full_rec * (fwd + gemm) + n_sel_rec * core
                + (n_layers_stage - n_full_rec) * modules)
    output = m * n_output * (_E * 3 * (b * s / cp * (h + v / t) + h * v / t) + accumulate * h * v / t)
    shards = Piecewise((d, sympy.Ge(zero_level, 1)), (1, True))
    optimizer = 30 * (n_layers_stage * _rank_weights(variant, moe) + n_output * h * v / t) / shards
    return body + output + optimizer


def dense_layers_of_moe(dense_form: sympy.Expr) -> sympy.Expr:
    """A dense stage form (:func:`stage_flops`, :func:`stage_lowp_flops`, :func:`stage_hbm_bytes` or
    :func:`stage_vector_flops` with ``moe=False``) for the leading dense layers a stage of a model with experts holds
    (``FIRST_K_DENSE``): their count ``n_dense_layers_stage`` (``n_dense_full_rec``, ``n_dense_sel_rec`` of them
    recomputed) in place of the stage's layers, one FFN of width ``hff`` each (``n_exp = 1``, no shared expert: the
    model's experts are in its other layers), and no output layer (the stage's MoE form counts it)."""
    return dense_form.xreplace({n_layers_stage: n_dense_stage, n_full_rec: n_dense_full, n_sel_rec: n_dense_sel,
                                n_output: 0, n_exp: 1, n_shared_exp: 0})


def window_saved_flops(variant: AttentionParams) -> sympy.Expr:
    """Score FLOPs one rank of a stage does not compute per step because its windowed layers attend to a sliding
    window of ``sliding_window`` keys (``WINDOW``), against the causal attention :func:`stage_flops` counts.

    A query at position ``i`` of a causal window ``w ≤ s`` attends to ``min(i + 1, w)`` keys: ``w·(1 − w/(2s))`` on
    average over the ``s`` positions (``s/2`` at ``w = s``, the causal count), so a windowed layer's scores are
    ``score_flops · w'·(1 − w'/(2s))/s`` per token with ``w' = min(w, s)``, and it saves
    ``score_flops · (s − w')² / (2s²)`` per token, in each of its three passes and in its recomputed forward pass
    (full) or scores (selective). Only a fused attention kernel skips the masked blocks (``flash_attention`` = 1);
    without one the whole ``s × s`` matrix is computed and masked, and nothing is saved. Attention sinks (one
    learned logit per head, gpt-oss) add no matrix multiply.
    """
    tokens = m * b * s / (t * cp)
    w = sympy.Min(window, s)
    per_token = score_flops(variant) * (s - w) ** 2 / (2 * s ** 2)
    return flash * tokens * (3 * n_window_stage + n_window_full + n_window_sel) * per_token


def window_saved_gemm_flops(variant: AttentionParams) -> sympy.Expr:
    """:func:`window_saved_flops` with each score GEMM's FLOPs over its size's efficiency ratio (unit: FLOP at the
    reference efficiency): a windowed layer's ``QKᵀ`` and ``A·V`` (each one batched kernel over the micro-batch's
    heads, :func:`stage_gemm_flops`) are smaller than causal attention's, so what it saves is the causal scores'
    FLOPs over their size's ratio less its own windowed scores' over theirs, per token ``score_flops/2`` and
    ``score_flops · w'·(1 − w'/(2s))/s`` with ``w' = min(w, s)`` (their difference :func:`window_saved_flops`'
    ``score_flops · (s − w')²/(2s²)``), each at the fused kernel's efficiency (:func:`score_gemm_ratio`). Sources:
    ``WINDOW``, ``CAUSAL``, ``GEMM_CURVE``, ``FUSED_ATTENTION``."""
    tokens = b * s / (t * cp)
    w = sympy.Min(window, s)
    causal = score_flops(variant) / 2
    windowed = score_flops(variant) * w * (1 - w / (2 * s)) / s
    saved = (causal / score_gemm_ratio(tokens * causal / 2)
             - windowed / score_gemm_ratio(tokens * windowed / 2))
    return flash * m * tokens * (3 * n_window_stage + n_window_full + n_window_sel) * saved


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
                          "layer, plus the recomputed forward passes (full), attention scores (selective) or MLA "
                          "up-projections (mla_up_proj); a fused attention kernel computes half of a causal mask's "
                          "scores.",
                          f"{NARAYANAN}; {KORTHIKANTI}; {CAUSAL}; {MODULES}"))
            out.append(_f(f"{key}_stage_lowp_flop", stage_lowp_flops(variant, moe), key, "FLOP",
                          "FLOPs per rank per step of one pipeline stage's GEMMs that run in the low precision of an "
                          "FP8 / MXFP8 / NVFP4 run: its linear layers' forward, input-gradient and weight-gradient "
                          "GEMMs and their recomputed forward (a part of the stage's FLOPs).",
                          f"{NARAYANAN}; {LOW_PRECISION}; {MODULES}"))
            out.append(_f(f"{key}_stage_gemm_flop", stage_gemm_flops(variant, moe), key, "FLOP",
                          "FLOPs per rank per step of one pipeline stage (as compute_*_stage_flop), each GEMM's over "
                          "its size's efficiency relative to the generation's reference GEMM efficiency: the FLOPs "
                          "that take the stage's GEMM seconds at peak x compute_efficiency.",
                          f"{NARAYANAN}; {CAUSAL}; {GEMM_CURVE}; {GROUPED_GEMM}; {FUSED_ATTENTION}; {MODULES}"))
            out.append(_f(f"{key}_stage_lowp_gemm_flop", stage_lowp_gemm_flops(variant, moe), key, "FLOP",
                          "The low-precision GEMM FLOPs per rank per step of one pipeline stage (as "
                          "compute_*_stage_lowp_flop), each GEMM's over its size's efficiency relative to the "
                          "generation's reference efficiency.",
                          f"{LOW_PRECISION}; {GEMM_CURVE}; {GROUPED_GEMM}; {MODULES}"))
            out.append(_f(f"{key}_stage_hbm_bytes", stage_hbm_bytes(variant, moe), key, "bytes",
                          "HBM bytes per rank per step of one pipeline stage in memory-bound work: element-wise "
                          "operations, a MoE layer's token permutation, GEMM operands and weights, the weight "
                          "gradients' accumulation, recomputation, the Adam update.",
                          f"{CALCULON}; {KORTHIKANTI} (1-byte dropout masks); {ACCUMULATE}; {PERMUTE} (MoE); "
                          f"{MODULES}"))
            out.append(_f(f"{key}_stage_vector_flop", stage_vector_flops(variant, moe), key, "FLOP",
                          "Vector-unit FLOPs per rank per step of one pipeline stage: the element-wise operations "
                          "(layer norms, dropouts, residual adds, the activation function, the scores' softmax "
                          "unless fused), their recomputation, the Adam update.", f"{VECTOR}; {MODULES}"))
    for variant in AttentionParams:
        key = f"{variant.value}_moe"
        dense = "the leading dense layers (first_k_dense) one rank of a stage of a model with experts holds"
        for suffix, form, unit, what in (("flop", stage_flops, "FLOP", "FLOPs"),
                                         ("lowp_flop", stage_lowp_flops, "FLOP", "low-precision GEMM FLOPs"),
                                         ("gemm_flop", stage_gemm_flops, "FLOP",
                                          "FLOPs at the reference GEMM efficiency (as compute_*_stage_gemm_flop)"),
                                         ("lowp_gemm_flop", stage_lowp_gemm_flops, "FLOP",
                                          "low-precision GEMM FLOPs at the reference efficiency (as "
                                          "compute_*_stage_lowp_gemm_flop)"),
                                         ("hbm_bytes", stage_hbm_bytes, "bytes", "HBM bytes of memory-bound work"),
                                         ("vector_flop", stage_vector_flops, "FLOP", "vector-unit FLOPs")):
            out.append(_f(f"{key}_dense_layers_stage_{suffix}", dense_layers_of_moe(form(variant, False)), key, unit,
                          f"{what} per rank per step of {dense}: the dense stage form over their count, one FFN of "
                          f"width hff each, no output layer.", f"{FIRST_K_DENSE}; as the dense stage form"))
        out.append(_f(f"{variant.value}_window_saved_flop", window_saved_flops(variant), variant.value, "FLOP",
                      "Score FLOPs per rank per step a stage's sliding-window layers do not compute against causal "
                      "attention (a fused attention kernel skips the blocks outside the window).",
                      f"{WINDOW}; {CAUSAL}"))
        out.append(_f(f"{variant.value}_window_saved_gemm_flop", window_saved_gemm_flops(variant), variant.value,
                      "FLOP",
                      "The score FLOPs a stage's sliding-window layers save (as compute_*_window_saved_flop), each "
                      "score GEMM's over its size's efficiency relative to the generation's reference GEMM "
                      "efficiency: the causal scores' less the windowed scores'.",
                      f"{WINDOW}; {CAUSAL}; {GEMM_CURVE}; {FUSED_ATTENTION}"))
    out.append(_f("output_forward_flop", 2 * h * v, "output", "FLOP",
                  "Forward FLOPs per token of the output layer (logits).", NARAYANAN))
    # Every FLOP at the BF16 rate, then the low-precision GEMMs' at theirs instead: (F − L)/R + L/R_low written as
    # F/R + L·(1/R_low − 1/R), so that a BF16 run (L = 0, R_low = R) adds its terms as it always has.
    compute = (stage_flops_sym / (peak * efficiency) + hbm_bytes_sym / (hbm_bw * hbm_eff)
               + lowp_sym * (1 / (lowp_peak * lowp_eff) - 1 / (peak * efficiency))
               + vector_sym / (vector_peak * vector_eff))
    out.append(_f("stage_time_s", compute, "time", "s",
                  "Seconds per step one rank of a stage computes: its matrix-multiply FLOPs in BF16 over the "
                  "achieved BF16 GEMM FLOP/s (peak × the generation's GEMM efficiency) and those of its GEMMs in "
                  "the run's low precision over the achieved low-precision FLOP/s (0 in a BF16 run), plus its "
                  "memory-bound bytes over the achieved HBM bandwidth (peak × the generation's HBM efficiency), "
                  "plus its element-wise FLOPs over the achieved vector-unit FLOP/s (peak × the generation's "
                  "vector efficiency), not overlapped.",
                  f"{CALCULON}; {VECTOR}; {LOW_PRECISION}; peaks and efficiencies: the hardware catalog"))
    out.append(_f("pipeline_bubble", (p - 1) / (vp * m), "pipeline", "1",
                  "Idle fraction of the ideal step time a pipeline adds under 1F1B / interleaved schedules.", BUBBLE))
    out.append(_f("step_time_s", compute * (1 + (p - 1) / (vp * m)) + exposed,
                  "step", "s",
                  "Seconds per training step: the slowest stage's compute stretched by the pipeline bubble, plus "
                  "the communication that cannot overlap with it.", f"{BUBBLE}; exposed communication: docs/search.md"))
    return tuple(out)


FORMULAS: tuple[Formula, ...] = _build()
