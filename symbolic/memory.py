"""Memory per rank: model states, activations, in-flight micro-batches, a stage's total and headroom.

Every value is in bytes on one rank (one device) unless stated. The families:

* **Model states** of one block of parameters, a *part* ``(N, c, k)`` as the
  FSDP formulas know it (``symbolic.fsdp``): N parameters computed over c
  tensor-parallel ranks and sharded over k ranks (TP included). One rank keeps
  ``w = N / c`` parameters of a TP slice; ZeRO splits that slice into
  ``σ = max(1, k / c)`` shards. ZeRO stage 1 shards the optimizer states,
  stage 2 also the gradients, stage 3 (FSDP) also the weights (Rajbhandari et
  al. 2020, §5 and Table 1). A layer's parts are the original's
  ``fsdp_layer_parts`` over the parameter counts of ``symbolic.params``
  (non-expert over ``t`` and ``shard_p_os_non_exp_partial = R·t·cp``, so CP
  ranks shard like DP ranks, the original's ``param_cp = cp``; routed experts
  over ``ep``, expert TP and expert DP ``d_exp``; shared experts); the
  embedding and output tables are its ``fsdp_root_parts``.
* **Activations** kept for the backward pass, per micro-batch and layer, the
  per-element accounting of Korthikanti et al. 2022 (Table 2 and §4), written
  per token of the rank's sequence shard ``s·b/cp`` so that one expression
  covers tensor, sequence and context parallelism, GQA and MLA widths, gated
  MLPs and routed experts. With 2-byte activations, 1-byte dropout masks, no
  flash attention and GPT's widths it is Table 2 term by term (the tests
  check it).
* **In-flight micro-batches** of a pipeline stage under 1F1B and the
  interleaved schedule.
* **Low precision** (FP8, MXFP8, NVFP4 runs: ``MemoryVariant.low_precision``):
  the inputs Transformer Engine's linear layers save for their weight-gradient
  GEMM kept quantized instead of at 16 bits (:func:`lowp_saved_elements`), and
  the quantized weight copies it caches across micro-batches
  (:func:`layer_weight_copies`), each priced in bytes per element or parameter
  the run's recipe gives (``symbolic.vocabulary.Precision``).
* **Stage totals** over the layer-kind counts of ``symbolic.model``
  (``n_embedding, n_output, n_body, n_extra, n_extra_sel, n_full_rec,
  n_sel_rec``), headroom against a capacity and a reserve, and a 0/1 ``fits``.

Variants resolved in Python before an expression is built: the attention
parameter layout (``params.AttentionParams``), dense or MoE, the layer's
recompute kind, and a BF16 or a low-precision run (a BF16 run's forms are
built exactly as without the low-precision terms, so its numbers stay to the
bit). Numeric settings (ZeRO stage, flash attention, dropout, tied
embedding, interleaving) are symbols, so that one expression covers a batch
of layouts.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass

import sympy
from sympy import Max, Min, Ne, Piecewise

from . import params
from .attention import head_width
from .formula import Formula
from .fsdp import Part
from .params import AttentionParams
from .sensitivity import derivative_expr
from .symbols import SPECS, syms
from .vocabulary import BODY_COUNT_NAMES, DEGREES

__all__ = [
    "Recompute",
    "MemoryVariant",
    "StageMemory",
    "STAGE_OUTPUTS",
    "part_states",
    "part_model_states",
    "layer_parts",
    "embedding_part",
    "output_part",
    "layer_activations",
    "embedding_activations",
    "output_activations",
    "in_flight",
    "lowp_saved_elements",
    "module_recompute_dropped",
    "layer_lowp_activations_change",
    "layer_linear_weights",
    "layer_weight_copies",
    "layer_quantized_weights_change",
    "stage_formulas",
    "stage_slopes",
    "variants",
    "FORMULAS",
]

s, b, h, a, n_kv, dh, dhr, dc_kv, dc_q, qk_nope, v = syms(
    "s", "b", "h", "a", "n_kv", "dh", "dhr", "dc_kv", "dc_q", "qk_nope_head_dim", "v")
hff, hff_exp, n_exp, n_shared_exp, n_chosen_exp, cap_fact, n_ffMM = syms(
    "hff", "hff_exp", "n_exp", "n_shared_exp", "n_chosen_exp", "cap_fact", "n_ffMM")
t, cp, sp, ep, etp, t_exp, p, m, vp, pp_rank = syms("t", "cp", "sp", "ep", "etp", "t_exp", "p", "m", "vp", "pp_rank")
shard_non_exp, shard_exp, shard_exp_partial, shard_embed, gather_embed = syms(
    "shard_p_os_non_exp_partial", "shard_p_os_exp", "shard_p_os_exp_partial", "shard_embed", "gather_embed")
bytes_p, bytes_grad, bytes_optimizer, bytes_compute, bytes_logits = syms(
    "bytes_p", "bytes_grad", "bytes_optimizer", "bytes_compute", "bytes_logits")
zero_level, flash_attention, dropout, tie_emb_out = syms("zero_level", "flash_attention", "dropout", "tie_emb_out")
recompute_norm, recompute_moe_act, recompute_mla_up = syms("recompute_norm", "recompute_moe_act", "recompute_mla_up")
memory_reserve, device_memory_bytes = syms("memory_reserve", "device_memory_bytes")
bytes_lowp_input, bytes_lowp_weight, lowp_proj_copy, lowp_primary_weights = syms(
    "bytes_lowp_input", "bytes_lowp_weight", "lowp_proj_copy", "lowp_primary_weights")
qkv_bias, o_bias, mlp_bias, attn_extra_p, shared_expert_gate, n_attMM = syms(
    "qkv_bias", "o_bias", "mlp_bias", "attn_extra_p", "shared_expert_gate", "n_attMM")
part_size, part_computed, part_sharded = syms("part_size", "part_computed", "part_sharded")
(n_embedding, n_output, n_body, n_extra, n_extra_sel, n_full_rec, n_sel_rec) = syms(
    "n_embedding", "n_output", "n_body", "n_extra", "n_extra_sel", "n_full_rec", "n_sel_rec")

ZERO = "Rajbhandari et al. 2020, ZeRO (arXiv:1910.02054v3), §5.1-5.3 and Table 1"
KORTHIKANTI = ("Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer Models "
               "(arXiv:2205.05198)")
FSDP_PARTS = ("HyperParallel SAPP-ND parts: published memory_estimation/evaluators/comm.py "
              "(EvalLayerComm.fsdp_layer_parts) and perf_estimation/comm_time.py lines 518-529 (fsdp_root_parts)")
SCHEDULES = ("Megatron-LM megatron/core/pipeline_parallel/schedules.py: num_warmup_microbatches of "
             "forward_backward_pipelining_without_interleaving (p - i - 1) and _with_interleaving "
             "((p - i - 1)·2 + (vp - 1)·p), capped by the micro-batches of the step")
TE_SAVED = ("NVIDIA TransformerEngine transformer_engine/pytorch/module/linear.py (_Linear.forward: the quantized "
            "input kept for the weight-gradient GEMM, one usage), layernorm_linear.py (_LayerNormLinear.forward: the "
            "norm input in BF16, ln_out quantized), grouped_linear.py (the experts' inputs); Megatron-Core "
            "megatron/core/transformer/attention.py (set_save_original_input(linear_proj) but under delayed scaling)")
MEGATRON_MODULES = ("Megatron-Core (NVIDIA/Megatron-LM@d98e8a6) megatron/core/transformer/transformer_config.py "
                    "(recompute_modules: layernorm, moe_act and mla_up_proj use output-discarding checkpointing), "
                    "tensor_parallel/random.py (CheckpointWithoutOutput: the function run without autograd, its "
                    "inputs saved), transformer/transformer_layer.py (layernorm: "
                    "the input and pre-MLP norms that are not IdentityOp, set_save_original_input of their consumers "
                    "under FP8 / FP4), models/gpt/gpt_layer_specs.py (Transformer Engine specs: the QKV and dense FC1 "
                    "projections fuse their norms; a MoE layer's pre-MLP norm and MLA's input norm stand alone), "
                    "transformer/moe/experts.py (moe_act: the activation checkpointed, linear_fc2 saving its original "
                    "input under FP8 / FP4), transformer/moe/moe_layer.py and multi_latent_attention.py "
                    "(set_for_recompute_pre_mlp_layernorm, set_for_recompute_input_layernorm; mla_up_proj: "
                    "qkv_up_proj_and_rope_apply checkpointed from q_compressed, kv_compressed and k_pos_emb, its "
                    "query, key and value discarded after the core attention)")
MOE_COMBINE = ("Megatron-Core (NVIDIA/Megatron-LM@d98e8a6) megatron/core/transformer/moe/experts.py (TEGroupedMLP: the "
               "routing probabilities applied in bias_act_func, weighted_bias_swiglu_impl with "
               "bias_activation_fusion), token_dispatcher.py (MoEAlltoAllTokenDispatcher.combine_preprocess: "
               "unpermute without probabilities), "
               "moe_utils.py (unpermute: a scatter-add, whose backward needs no saved tensor)")
TE_WEIGHTS = ("NVIDIA TransformerEngine transformer_engine/pytorch/module/linear.py (Linear.forward: the quantized "
              "weight cached in _fp8_workspaces['weight'] while is_first_microbatch is not None, row- and column-wise "
              "usage), grouped_linear.py (the experts' weight workspaces); Megatron-Core "
              "megatron/core/extensions/transformer_engine.py (TELinear.forward passes is_first_microbatch unless "
              "disable_parameter_transpose_cache); primary quantized weights: megatron/core/fp8_utils.py "
              "(get_fp8_context(is_init=True): TE's fp8_model_init when config.fp8_param, fp8_param_gather)")

#: Bytes per element of the log-sum-exp a fused attention kernel keeps per query row and head (fp32),
#: FlashAttention's only per-row state for the backward pass (Dao et al. 2022, Algorithm 2).
_LSE_BYTES = 4


class Recompute(enum.Enum):
    """What a body layer keeps for its backward pass (the stage walk's layer types)."""

    #: Everything (``NOT_REC_LAYER``).
    NONE = "none"
    #: Everything but the attention scores, recomputed (``SEL_REC_LAYER``; Korthikanti §5).
    SELECTIVE = "selective"
    #: Only its input, the layer is recomputed (``FULL_REC_LAYER``).
    FULL = "full"


@dataclass(frozen=True)
class MemoryVariant:
    """What picks a different memory expression: the attention parameter layout, dense or MoE, and whether the
    run's linear layers compute in a low precision (FP8, MXFP8, NVFP4: key suffix ``_lowp``)."""

    attention: AttentionParams
    moe: bool
    low_precision: bool = False

    @property
    def key(self) -> str:
        key = f"{self.attention.value}_{'moe' if self.moe else 'dense'}"
        return f"{key}_lowp" if self.low_precision else key

    @property
    def tag(self) -> tuple[tuple[str, str], ...]:
        """The variant as a formula's ``variant`` pairs (a BF16 run's as before: attention and ffn alone)."""
        tag = (("attention", self.attention.value), ("ffn", "moe" if self.moe else "dense"))
        return (*tag, ("precision", "low")) if self.low_precision else tag


def variants() -> tuple[MemoryVariant, ...]:
    """Every memory variant, in a fixed order: the BF16 ones, then the low-precision ones."""
    return tuple(MemoryVariant(att, moe, low) for low in (False, True) for att in AttentionParams
                 for moe in (False, True))


# ---------------------------------------------------------------- model states


def _sharded(slice_params: sympy.Expr, shard_params: sympy.Expr, from_level: int) -> sympy.Expr:
    """A rank's share of a part: its ZeRO shard *shard_params* from ZeRO stage *from_level* on, else
    its TP slice *slice_params*."""
    return Piecewise((shard_params, zero_level >= from_level), (slice_params, True))


def _slice_and_shard(part: Part) -> tuple[sympy.Expr, sympy.Expr]:
    """The TP slice ``w = N / max(1, c)`` and the ZeRO shard ``w / σ`` with ``σ = max(1, k / max(1, c))``,
    written ``N / max(1, c, k)`` (the same number): a derivative in ``c`` with ``k`` held is then 0
    where ``k`` is the larger, exactly, instead of two terms that cancel."""
    return part.size / Max(1, part.computed), part.size / Max(1, part.computed, part.sharded)


def part_states(part: Part) -> tuple[sympy.Expr, sympy.Expr, sympy.Expr]:
    """(weights, gradients, optimizer states) one rank keeps of *part*, in bytes.

    ``w = N / max(1, c)``, ``σ = max(1, k / max(1, c))``; weights ``bytes_p·w``
    (÷σ from ZeRO stage 3), gradients ``bytes_grad·w`` (÷σ from stage 2),
    optimizer states ``bytes_optimizer·w`` (÷σ from stage 1). With c = 1 and
    k = N_d this is ZeRO's (2 + 2 + K)Ψ, 4Ψ + KΨ/N_d, 2Ψ + (2 + K)Ψ/N_d and
    (2 + 2 + K)Ψ/N_d.
    """
    slice_params, shard_params = _slice_and_shard(part)
    return (bytes_p * _sharded(slice_params, shard_params, 3),
            bytes_grad * _sharded(slice_params, shard_params, 2),
            bytes_optimizer * _sharded(slice_params, shard_params, 1))


def part_model_states(part: Part) -> sympy.Expr:
    """Weights, gradients and optimizer states of *part* in one sum, bytes (the sum of ``part_states``)."""
    return sympy.Add(*part_states(part))


def layer_parts(variant: MemoryVariant) -> tuple[Part, Part, Part]:
    """The non-expert, routed-expert and shared-expert parts of one body layer (``fsdp_layer_parts``).

    The routed count P_r already holds one expert-TP slice (``params``:
    ``hff_exp / max(etp, 1)``), so its TP width and shard width are divided by
    ``max(1, etp)`` here: the slice is not divided twice, and the ZeRO shards
    ``shard_p_os_exp / t_exp = d_exp·cp`` stay as the original derives them.
    The part's fourth field (ranks holding it) does not enter memory.
    """
    counts = params.layer_counts(variant.attention, variant.moe)
    return _layer_parts_of(counts.non_expert, counts.routed, counts.shared)


def _layer_parts_of(non_expert: sympy.Expr, routed: sympy.Expr, shared: sympy.Expr) -> tuple[Part, Part, Part]:
    """One body layer's (non-expert, routed, shared) parameter counts as parts, sliced and sharded as
    :func:`layer_parts` says."""
    expert_tp = Max(1, etp)
    zero = sympy.Integer(0)
    return (Part(non_expert, t, shard_non_exp, zero),
            Part(routed / ep, t_exp / expert_tp, shard_exp / expert_tp, zero),
            Part(shared, t_exp, shard_exp_partial, zero))


def embedding_part() -> Part:
    """The embedding table ``(h·v, τ, shard_embed)``, ``τ = shard_embed / max(1, gather_embed)`` (``fsdp_root_parts``)."""
    return Part(h * v, shard_embed / Max(1, gather_embed), shard_embed, sympy.Integer(0))


def output_part() -> Part:
    """The output layer ``(h·v + v, t, shard_p_os_non_exp_partial)``; a tied table counts once when p = 1.

    With ``tie_emb_out`` and one stage the embedding and output layers share
    one table on one rank, so the output part keeps only its bias; with p > 1
    the last stage holds its own copy of the table (Megatron-LM's
    ``share_embeddings_and_output_weights``), with its own states.
    """
    table = h * v * (1 - tie_emb_out * Piecewise((1, p <= 1), (0, True)))
    return Part(table + v, t, shard_non_exp, sympy.Integer(0))


def _sum_states(parts: tuple[Part, ...]) -> tuple[sympy.Expr, sympy.Expr, sympy.Expr]:
    states = [part_states(x) for x in parts]
    return tuple(sympy.Add(*(row[i] for row in states)) for i in range(3))  # type: ignore[return-value]


# ---------------------------------------------------------------- activations


def _tokens() -> sympy.Expr:
    """Tokens of one micro-batch on one rank before sequence parallelism: ``s·b / cp``."""
    return s * b / cp


def _kv_heads() -> sympy.Expr:
    return Piecewise((n_kv, n_kv > 0), (a, True))  # unset n_kv reads a, as the model configs do


def _attention_elements(attention: AttentionParams) -> sympy.Expr:
    """Elements per token the attention block keeps, scores and masks apart.

    Norm input and QKV input (``2h/sp``; Korthikanti §4.1 4sbh bytes, the
    input of Q/K/V projections stored sharded under SP), Q, K and V (Q and K
    for QKᵀ, V for the attention over values: Korthikanti 4sbh + 2sbh), and
    the output projection's input ``a·dh``. MLA adds its latents (query latent
    and its norm ``2·dc_q``, key/value latent and its norm ``2·dc_kv``, the
    rotary key ``dhr``), which the down-projections compute on every TP rank.
    """
    if attention is AttentionParams.STANDARD:
        d_h = head_width()
        q = a * d_h
        kv = _kv_heads() * d_h
        return 2 * h / sp + (q + 2 * kv) / t + q / t
    d_qk = Piecewise((qk_nope, Ne(qk_nope, 0)), (dh, True))
    q = a * (d_qk + dhr)
    k = n_kv * (d_qk + dhr)
    values = n_kv * dh
    latents = 2 * dc_kv + dhr + (2 * dc_q if attention is AttentionParams.MLA_Q_LATENT else 0)
    return 2 * h / sp + latents + (q + k + values) / t + a * dh / t


def _score_bytes() -> sympy.Expr:
    """Bytes per token the attention scores keep: softmax output, dropout mask and output (Korthikanti 5as²b/t).

    ``a·s/t`` scores per query token (a query sees all s keys, also under CP),
    each ``bytes_compute`` for the softmax output, plus the dropout's 1-byte
    mask and ``bytes_compute`` output when dropout is on. A fused kernel
    keeps none of them, only a 4-byte log-sum-exp per query and head.
    """
    per_score = bytes_compute * (1 + dropout) + dropout
    return (1 - flash_attention) * a * s / t * per_score + flash_attention * _LSE_BYTES * a / t


def _expert_split() -> sympy.Expr:
    """How many ways a routed expert's hidden activations are split per token of ``s·b/cp``: ``max(sp, t_exp)``.

    A rank's experts compute on the tokens dispatched to them from its own sequence shard (``s·b/(cp·sp)`` tokens,
    under sequence parallelism, which Megatron-Core requires of a MoE layer with TP); with expert TP the ETP group
    gathers its ranks' tokens and splits each expert's hidden width by ``t_exp``, the same hidden elements per
    local token (Megatron-Core ``token_dispatcher.py``, ``MoEAlltoAllTokenDispatcher``: the all-to-all over EP,
    then the gather over the expert TP group). Per token of ``s·b/cp``: ``hff_exp/sp`` at every expert TP up to
    ``sp``, ``hff_exp/t_exp`` beyond it (tokens replicated over TP without sequence parallelism, ``sp = 1``).
    Experts without TP in a TP group (Megatron's ``etp = 1`` beside ``t > 1``) so hold ``1/t`` of the group's
    tokens' hidden activations, not all of them."""
    return Max(sp, t_exp)


def _mlp_elements(moe: bool) -> sympy.Expr:
    """Elements per token the MLP (or MoE) block keeps, masks apart.

    Dense: norm input and FC1 input (``2h/sp``), the activation function's
    inputs and FC2's input, ``n_ffMM·hff/t`` (Korthikanti: 8sbh + 8sbh bytes
    for GPT's 4h GeLU MLP; a gated MLP keeps gate and up outputs and their
    product). MoE: norm and router input, router probabilities (``n_exp/sp``),
    per routed copy of a token (``top-k × capacity factor`` copies) its
    dispatched input (``h/sp``, FC1's input) and the expert's
    ``n_ffMM·hff_exp`` over :func:`_expert_split` (FC1's output, kept by the
    activation, and FC2's input), and the shared experts as a dense MLP of
    ``n_shared_exp·hff_exp`` over t. The expert's output is not kept for the
    combine: Megatron-Core weighs it by its routing probability inside the
    activation (``weighted_bias_swiglu_impl``, which keeps its input and the
    probabilities) and un-permutes the outputs by a sum that keeps nothing
    (``MOE_COMBINE``).
    """
    if not moe:
        return 2 * h / sp + n_ffMM * hff / t
    routed = n_chosen_exp * cap_fact * (h / sp + n_ffMM * hff_exp / _expert_split())
    shared = n_shared_exp * n_ffMM * hff_exp / t
    return 2 * h / sp + n_exp / sp + routed + shared


def layer_activations(variant: MemoryVariant, recompute: Recompute) -> sympy.Expr:
    """Bytes one body layer keeps per micro-batch on one rank.

    Not recomputed: ``tokens · (bytes_compute·elements + dropout·2h/sp + scores)``
    with two 1-byte dropout masks (after attention and after the MLP).
    Selective: the same without the scores (Korthikanti §5). Full: the layer's
    input only, ``bytes_compute·h/sp`` per token (Table 2's 2sbh; sharded
    under SP as Megatron-LM checkpoints it; a checkpoint keeps it in BF16
    whatever the GEMMs' precision). In a low-precision run the linear layers'
    saved inputs change bytes (:func:`layer_lowp_activations_change`). A layer
    not fully recomputed keeps less by what its recomputed modules drop
    (:func:`module_recompute_dropped`).
    """
    tokens = _tokens()
    if recompute is Recompute.FULL:
        return tokens * bytes_compute * h / sp
    elements = _attention_elements(variant.attention) + _mlp_elements(variant.moe)
    kept = bytes_compute * elements + dropout * 2 * h / sp
    if recompute is Recompute.NONE:
        kept = kept + _score_bytes()
    if variant.low_precision:
        low, replaced = lowp_saved_elements(variant)
        kept = kept + bytes_lowp_input * low - bytes_compute * replaced
    return tokens * kept - module_recompute_dropped(variant)


def module_recompute_dropped(variant: MemoryVariant) -> sympy.Expr:
    """Bytes per micro-batch on one rank a body layer not fully recomputed no longer keeps when the run recomputes
    Megatron-Core's modules ``layernorm`` (``recompute_norm``), ``moe_act`` (``recompute_moe_act``) and
    ``mla_up_proj`` (``recompute_mla_up``, :func:`_mla_up_dropped`) (``0`` where none applies to the variant).

    All three are output-discarding checkpoints (``CheckpointWithoutOutput``): once the module's consumer ran, the
    module's output is freed and recomputed from its kept input in the backward pass (``MEGATRON_MODULES``). With
    Transformer Engine's layer specs the attention's norm is fused into the QKV projection and a dense MLP's into
    FC1, so ``layernorm`` reaches the norms that stand alone: a MoE layer's pre-MLP norm (its output is the
    router's input, :func:`_mlp_elements`' second ``h/sp``) and MLA's input norm (its output feeds the
    down-projections). ``moe_act`` drops the experts' activation output, the second expert GEMM's input,
    ``hff_exp`` over :func:`_expert_split` per routed copy of a token. In a low-precision run the linear layers
    fed by a recomputed module keep its original output instead of a quantized copy (``set_save_original_input``)
    and that output is freed, so the quantized copies :func:`lowp_saved_elements` counts of it go too: the shared
    experts' FC1 copy, MLA's down-projection copies (the query's only with a query latent), the expert FC2
    inputs.
    """
    low = variant.low_precision
    norm = sympy.Integer(0)  # bytes per token
    if variant.moe:  # the router's BF16 input, and in low precision the shared experts' FC1 copy
        norm = bytes_compute * h / sp + (bytes_lowp_input * Min(n_shared_exp, 1) * h / sp if low else 0)
    if variant.attention is not AttentionParams.STANDARD:  # in low precision its BF16 output is already replaced
        copies = 2 if variant.attention is AttentionParams.MLA_Q_LATENT else 1
        norm = norm + (bytes_lowp_input * copies * h / sp if low else bytes_compute * h / sp)
    act = sympy.Integer(0)
    if variant.moe:
        act = (bytes_lowp_input if low else bytes_compute) * n_chosen_exp * cap_fact * hff_exp / _expert_split()
    up = sympy.Integer(0)
    if variant.attention is not AttentionParams.STANDARD:
        up = _mla_up_dropped(variant)
    return _tokens() * (recompute_norm * norm + recompute_moe_act * act + recompute_mla_up * up)


def _mla_up_dropped(variant: MemoryVariant) -> sympy.Expr:
    """Bytes per token an MLA layer no longer keeps when it recomputes ``mla_up_proj``: Q, K and V, the outputs of the
    up-projections and rotary embedding that the attention keeps (:func:`_attention_elements`' ``(q + k + v)/t``,
    in ``bytes_compute``). The checkpoint runs the up-projections without autograd and keeps their inputs, the
    latents' norm outputs, itself: the BF16 tensors a BF16 run keeps anyway; in a low-precision run those in place
    of the up-projections' quantized copies (less ``bytes_compute − bytes_lowp_input`` an element), and without a
    query latent the input norm's BF16 output in place of the query projection's quantized copy (freed all the same
    when the ``layernorm`` module discards it)."""
    d_qk = Piecewise((qk_nope, Ne(qk_nope, 0)), (dh, True))
    qkv = (a * (d_qk + dhr) + n_kv * (d_qk + dhr) + n_kv * dh) / t
    dropped = bytes_compute * qkv
    if not variant.low_precision:
        return dropped
    latent = variant.attention is AttentionParams.MLA_Q_LATENT
    dropped = dropped - (bytes_compute - bytes_lowp_input) * (dc_kv + (dc_q if latent else 0))
    if not latent:
        dropped = dropped + bytes_lowp_input * h / sp - bytes_compute * (1 - recompute_norm) * h / sp
    return dropped


def _modules_source(variant: MemoryVariant) -> str:
    """The sources of a variant's activations beyond Korthikanti's: the MoE combine, and the recomputed modules
    where they change the form (``""`` where neither applies)."""
    combine = f"; MoE combine: {MOE_COMBINE}" if variant.moe else ""
    return combine + (f"; recomputed modules: {MEGATRON_MODULES}" if module_recompute_dropped(variant) != 0 else "")


def lowp_saved_elements(variant: MemoryVariant) -> tuple[sympy.Expr, sympy.Expr]:
    """Per token of ``s·b/cp``: (elements the linear layers save quantized, 16-bit elements of the count they
    replace) in a low-precision run, over the attention and MLP blocks of :func:`_attention_elements` and
    :func:`_mlp_elements`.

    Transformer Engine quantizes each linear layer's input for its GEMMs and keeps one quantized copy of it
    (row- or column-wise) for the weight-gradient GEMM, instead of the BF16 input (``TE_SAVED``). Where no other
    operation keeps that BF16 input, the 16-bit count is replaced; where one does, the quantized copy is kept
    beside it. Standard attention: the QKV projection's input (its norm's output, ``h/sp``; the norm's input
    stays BF16); the output projection's input ``a·dh/t`` only under delayed scaling (``lowp_proj_copy``), beside
    the BF16 attention output the fused kernel keeps (in its place without flash attention). MLA: the norm's
    output feeds two linear layers (query and key/value down-projections, or the query projection), each with
    its own copy (``2h/sp``) in place of the one BF16 tensor; the up-projections' inputs (the latents' norm
    outputs ``dc_q``, ``dc_kv``). Dense MLP: FC1's input (``h/sp``) and FC2's (``hff/t``; the activation keeps
    its BF16 input). MoE: per routed copy of a token the expert FC1's input (the dispatched token, ``h/sp``) and
    FC2's (``hff_exp`` over :func:`_expert_split`); the shared experts' FC2 inputs and one copy of their FC1 input
    beside the BF16 norm output the router keeps. Not quantized: the router, the attention's core (Q, K, V, softmax
    state), the norms, the output layer.
    """
    if variant.attention is AttentionParams.STANDARD:
        proj = a * head_width() / t
        low = h / sp + lowp_proj_copy * proj
        replaced = h / sp + lowp_proj_copy * (1 - flash_attention) * proj
    else:
        latents = dc_kv + (dc_q if variant.attention is AttentionParams.MLA_Q_LATENT else 0)
        proj = a * dh / t
        low = 2 * h / sp + latents + lowp_proj_copy * proj
        replaced = h / sp + latents + lowp_proj_copy * (1 - flash_attention) * proj
    if not variant.moe:
        mlp = h / sp + hff / t
        return low + mlp, replaced + mlp
    routed = n_chosen_exp * cap_fact * (h / sp + hff_exp / _expert_split())
    shared = n_shared_exp * hff_exp / t
    return low + routed + shared + Min(n_shared_exp, 1) * h / sp, replaced + routed + shared


def layer_lowp_activations_change(variant: MemoryVariant) -> sympy.Expr:
    """Bytes a body layer (not fully recomputed) keeps per micro-batch in a low-precision run beyond its 16-bit
    count: ``s·b/cp · (bytes_lowp_input·low − bytes_compute·replaced)`` (:func:`lowp_saved_elements`); negative
    where the quantized copies replace BF16 inputs."""
    low, replaced = lowp_saved_elements(variant)
    return _tokens() * (bytes_lowp_input * low - bytes_compute * replaced)


def layer_linear_weights(variant: MemoryVariant) -> tuple[Part, Part, Part]:
    """The linear-layer weights of one body layer as parts (non-expert, routed, shared), sliced and sharded as
    :func:`layer_parts` slices them: the attention projections (``symbolic.params``' counts without biases, norm
    weights and ``attn_extra_p``), the dense MLP or the experts' projections; not the router, the norms or the
    shared-expert gate (no Transformer Engine linear layers)."""
    plain = {qkv_bias: 0, o_bias: 0, mlp_bias: 0, attn_extra_p: 0, shared_expert_gate: 0}
    attention = params.attention_params(variant.attention).xreplace(plain)
    if variant.attention is not AttentionParams.STANDARD:  # the latents' norm weights
        norms = dc_kv + (dc_q if variant.attention is AttentionParams.MLA_Q_LATENT else 0)
        attention = attention - n_attMM * norms / 4
    if not variant.moe:
        zero = sympy.Integer(0)
        return _layer_parts_of(attention + params.dense_ffn_params().xreplace(plain), zero, zero)
    return _layer_parts_of(attention, params.routed_expert_params().xreplace(plain),
                           params.shared_expert_params().xreplace(plain))


def _linear_slice(variant: MemoryVariant) -> sympy.Expr:
    """Parameters of one body layer's linear weights on one rank: the TP slice of each (:func:`layer_linear_weights`)."""
    return sympy.Add(*(_slice_and_shard(part)[0] for part in layer_linear_weights(variant)))


def layer_weight_copies(variant: MemoryVariant) -> sympy.Expr:
    """Bytes per rank of one body layer's quantized linear weights: ``bytes_lowp_weight`` per parameter of the
    rank's TP slice of each linear weight (:func:`layer_linear_weights`), the copies Transformer Engine caches
    across the micro-batches of a step beside the BF16 weights, or the primary weights themselves where
    Megatron-Core builds them quantized (``lowp_primary_weights``, :func:`layer_quantized_weights_change`). None
    with the weights sharded (ZeRO stage 3: TE keeps no cache under FSDP2, ``cache_name`` None in
    ``Linear.forward``, and quantizes each gathered weight again)."""
    return Piecewise((0, zero_level >= 3), (bytes_lowp_weight * _linear_slice(variant), True))


def layer_quantized_weights_change(variant: MemoryVariant) -> sympy.Expr:
    """Bytes per rank one body layer's weights hold in a low-precision run beyond their BF16 count: the quantized
    copies (:func:`layer_weight_copies`), less the BF16 linear weights (``bytes_p`` per parameter of the slice)
    where the quantized ones are the primary weights (``lowp_primary_weights``: Megatron-Core's ``fp8_param``
    builds Transformer Engine's modules under ``fp8_model_init``; the distributed optimizer keeps the fp32 main
    weights). 0 with ZeRO stage 3, where neither is modelled."""
    net = (bytes_lowp_weight - lowp_primary_weights * bytes_p) * _linear_slice(variant)
    return Piecewise((0, zero_level >= 3), (net, True))


def embedding_activations() -> sympy.Expr:
    """Bytes the embedding keeps per micro-batch: its dropout mask, ``dropout·h/sp`` per token (Korthikanti §4.3)."""
    return _tokens() * dropout * h / sp


def output_activations() -> sympy.Expr:
    """Bytes the output layer keeps per micro-batch: final norm input, projection input, logits (Korthikanti §4.3).

    ``2·bytes_compute·h/sp + bytes_logits·v/t`` per token: with SP and fp32
    logits the paper's 4sbh/t·(1 + v/h).
    """
    return _tokens() * (2 * bytes_compute * h / sp + bytes_logits * v / t)


# ---------------------------------------------------------------- pipeline


def in_flight() -> sympy.Expr:
    """Micro-batches whose activations stage ``pp_rank`` holds at its peak.

    1F1B (``vp = 1``): ``min(p − i, m)`` (Korthikanti Eq. 5 for i = 0: the
    first stage holds p). Interleaved (``vp > 1``): the schedule's warm-up
    of ``2(p − i − 1) + (vp − 1)·p`` chunk micro-batches plus one, each chunk
    1/vp of the stage, ``(p·vp + p − 1 − 2i) / vp``, capped by m; for i = 0
    that is ``p·(1 + (p − 1)/(p·vp))``, the paper's interleaving factor.
    """
    one_f_one_b = Min(p - pp_rank, m)
    interleaved = Min((p * vp + p - 1 - 2 * pp_rank) / vp, m)
    return Piecewise((one_f_one_b, vp <= 1), (interleaved, True))


# ---------------------------------------------------------------- stage assembly

#: Names of a stage's outputs, in the order ``StageMemory`` holds them.
STAGE_OUTPUTS = ("weights", "gradients", "optimizer", "model_states", "activations", "recompute_workspace",
                 "total", "headroom", "fits")


@dataclass(frozen=True)
class StageMemory:
    """The memory closed forms of one pipeline stage for a variant (see ``STAGE_OUTPUTS``)."""

    weights: Formula
    gradients: Formula
    optimizer: Formula
    model_states: Formula
    activations: Formula
    recompute_workspace: Formula
    total: Formula
    headroom: Formula
    fits: Formula

    def all(self) -> tuple[Formula, ...]:
        return tuple(getattr(self, name) for name in STAGE_OUTPUTS)


def _body_layers() -> sympy.Expr:
    return n_body + n_extra + n_extra_sel


@functools.cache
def stage_formulas(variant: MemoryVariant) -> StageMemory:
    """One stage's memory per rank over the layer-kind counts, built once per variant."""
    layer = _sum_states(layer_parts(variant))
    emb = part_states(embedding_part())
    out = part_states(output_part())
    states = [n_embedding * e + n_output * o + _body_layers() * x for e, o, x in zip(emb, out, layer)]
    model_states = (n_embedding * part_model_states(embedding_part()) + n_output * part_model_states(output_part())
                    + _body_layers() * sympy.Add(*(part_model_states(x) for x in layer_parts(variant))))
    if variant.low_precision:  # the quantized weights count with the weights
        copies = _body_layers() * layer_quantized_weights_change(variant)
        states[0] = states[0] + copies
        model_states = model_states + copies

    kept = {r: layer_activations(variant, r) for r in Recompute}
    not_recomputed = _body_layers() - n_full_rec - n_sel_rec
    per_micro_batch = (n_embedding * embedding_activations() + n_output * output_activations()
                       + not_recomputed * kept[Recompute.NONE] + n_sel_rec * kept[Recompute.SELECTIVE]
                       + n_full_rec * kept[Recompute.FULL])
    activations = in_flight() * per_micro_batch
    # While one recomputed layer runs its backward it holds, for one micro-batch, what it did not keep: a fully
    # recomputed layer all but its input (everything kept is kept[NONE] + dropped), a selectively recomputed one its
    # scores and its recomputed modules' outputs, a layer not recomputed those outputs alone. The largest of the
    # last two is the scores (where a layer is selective) plus the modules' outputs (where any layer is not fully
    # recomputed): two terms, so that the Max has two arguments, whose derivative stays cheap.
    # Unevaluated: SymPy's Max would try to order the sums symbolically, which takes minutes.
    dropped = module_recompute_dropped(variant)
    scores = kept[Recompute.NONE] - kept[Recompute.SELECTIVE]
    modules = Min(_body_layers() - n_full_rec, 1) * dropped if dropped != 0 else 0
    workspace = Max(Min(n_full_rec, 1) * (kept[Recompute.NONE] + dropped - kept[Recompute.FULL]),
                    Min(n_sel_rec, 1) * scores + modules, evaluate=False)
    total = model_states + activations + workspace
    headroom = device_memory_bytes - memory_reserve - total
    # [headroom >= 0] as 1 - max(0, sign(-headroom)), exact for every real headroom: a Piecewise would
    # fold the Piecewise terms of the total into its condition, every combination of their branches.
    fits = 1 - Max(0, sympy.sign(-headroom, evaluate=False), evaluate=False)

    key = variant.key
    states_src = f"{ZERO}; parts: {FSDP_PARTS}; parameter counts: symbolic.params"
    act_src = f"{KORTHIKANTI}, Table 2 and §4 (Eq. 5, interleaving factor); in flight: {SCHEDULES}"
    if variant.low_precision:
        states_src = f"{states_src}; quantized weight copies: {TE_WEIGHTS}"
        act_src = f"{act_src}; quantized saved inputs: {TE_SAVED}"
    act_src += _modules_source(variant)

    def f(name: str, expr: sympy.Expr, doc: str, source: str, unit: str = "bytes") -> Formula:
        return Formula(name=f"memory_{key}_stage_{name}", expr=expr, dimension="memory", algorithm=key, unit=unit,
                       doc=doc, source=source, variant=variant.tag)

    what = "per rank of one pipeline stage, summed over its embedding, output and body layers"
    lowp = (" In a low-precision run: with the body layers' quantized linear weights, beside the BF16 ones or in "
            "their place (lowp_primary_weights; neither when zero_level >= 3), the linear layers' saved inputs "
            "quantized.") if variant.low_precision else ""
    return StageMemory(
        weights=f("weights_bytes", states[0], f"Weight bytes {what}, ZeRO-3 sharded when zero_level >= 3.{lowp}",
                  states_src),
        gradients=f("gradients_bytes", states[1], f"Gradient bytes {what}, sharded when zero_level >= 2.",
                    states_src),
        optimizer=f("optimizer_bytes", states[2], f"Optimizer-state bytes {what}, sharded when zero_level >= 1.",
                    states_src),
        model_states=f("model_states_bytes", model_states, f"Weights, gradients and optimizer states {what}.{lowp}",
                       states_src),
        activations=f("activations_bytes", activations,
                      "Activation bytes one rank of stage pp_rank keeps at its peak: the in-flight micro-batches "
                      f"times its layers' activations per micro-batch, by recompute kind.{lowp}", act_src),
        recompute_workspace=f("recompute_workspace_bytes", workspace,
                              "Bytes a recomputed layer of the stage holds again for one micro-batch during its "
                              "backward pass: the largest of a fully and a selectively recomputed layer's dropped "
                              "activations (0 without recompute), or of a layer recomputing its modules.",
                              f"{KORTHIKANTI}, §5 (recompute){_modules_source(variant)}"),
        total=f("total_bytes", total, "Memory per rank of one pipeline stage: model states, activations and the "
                f"recompute workspace.{lowp}", f"{states_src}; {act_src}"),
        headroom=f("headroom_bytes", headroom, "Device memory left per rank of one stage: capacity minus reserve "
                   "minus the stage total (negative when it does not fit).", "capacity - reserve - total"),
        fits=f("fits", fits, "1 when one stage's total fits into device memory after the reserve, else 0.",
               "headroom >= 0", unit="1"),
    )


# ---------------------------------------------------------------- derivatives (sensitivity)


@functools.cache
def stage_slopes(variant: MemoryVariant) -> tuple[Formula, ...]:
    """The derivatives of one stage's memory total in each degree of ``DEGREES`` (the nonzero ones).

    ``memory_<key>_stage_total_bytes__d_<x>``: ∂total/∂x with every other symbol held — the
    derived fields (``sp``, ``t_exp``, the shard sizes, ``zero_level``) and the stage's layer
    counts — almost everywhere (``symbolic.sensitivity``: Max/Min/Piecewise by their active
    branch), as ``symbolic.model.SLOPES`` are for the communication terms. ``d`` reaches the
    total only through the shard sizes, so it has none. And
    ``memory_<key>_stage_total_bytes__d_p_split``: the derivative in ``p`` with the stage's
    body-layer counts relaxed as shares of an even split (each ∝ 1/p,
    ``symbolic.sensitivity.split_derivative``), the slope of the peak stage as the pipeline
    deepens. Dimension ``memory_slope``; compiled ahead of time, so run time stays SymPy-free.
    """
    total = stage_formulas(variant).total
    out = []

    def slope(name: str, expr: sympy.Expr, x: str, what: str, tag: str) -> Formula:
        return Formula(name=f"{total.name}__{name}", expr=expr, dimension="memory_slope", algorithm=variant.key,
                       unit="derivative",
                       doc=f"{what} of {total.name}, in bytes per rank per {SPECS[x].unit} of {x} (almost "
                           f"everywhere; Max/Min/Piecewise by their active branch): the sensitivity of one "
                           f"stage's memory per rank.",
                       source=f"{total.source}; differentiated by symbolic.sensitivity",
                       variant=(*total.variant, ("wrt", tag)))

    for x in DEGREES:
        expr = derivative_expr(total.expr, x)
        if expr != 0:
            out.append(slope(f"d_{x}", expr, x, f"∂/∂{x} (derived fields and layer counts held)", x))
    # The recompute workspace holds one layer whenever the stage recomputes any (Min(count, 1)): the
    # relaxed shares leave it as it is (its count derivatives vanish at every whole count >= 1 and are
    # multiplied by a zero count below 1), so only the rest of the total moves with the counts.
    moving = total.expr - stage_formulas(variant).recompute_workspace.expr
    split = derivative_expr(total.expr, "p")
    for name, count in zip(BODY_COUNT_NAMES, syms(*BODY_COUNT_NAMES)):
        split += derivative_expr(moving, name) * (-count / p)
    out.append(slope("d_p_split", split, "p", "d/dp with the stage's body-layer counts shares of an even split "
                     f"({', '.join(BODY_COUNT_NAMES)} each ∝ 1/p)", "p_split"))
    return tuple(out)


# ---------------------------------------------------------------- registered formulas


def _mem(name: str, expr: sympy.Expr, algorithm: str, doc: str, source: str, unit: str = "bytes",
         variant: tuple[tuple[str, str], ...] = ()) -> Formula:
    return Formula(name=f"memory_{name}", expr=expr, dimension="memory", algorithm=algorithm, unit=unit, doc=doc,
                   source=source, variant=variant)


def _build() -> tuple[Formula, ...]:
    generic = Part(part_size, part_computed, part_sharded, sympy.Integer(0))
    weights, gradients, optimizer = part_states(generic)
    out = [
        _mem("part_weights_bytes", weights, "zero",
             "Weight bytes one rank keeps of a part of N parameters computed over c TP ranks and sharded over k "
             "ranks, split over the k/c ZeRO shards from ZeRO stage 3 on.", ZERO),
        _mem("part_gradients_bytes", gradients, "zero",
             "Gradient bytes one rank keeps of a part (N, c, k), split over its ZeRO shards from stage 2 on.", ZERO),
        _mem("part_optimizer_bytes", optimizer, "zero",
             "Optimizer-state bytes one rank keeps of a part (N, c, k), split over its ZeRO shards from stage 1 on.",
             ZERO),
        _mem("part_model_states_bytes", part_model_states(generic), "zero",
             "Model-state bytes (weights, gradients, optimizer states) one rank keeps of a part (N, c, k): "
             "ZeRO Table 1's per-device memory for c = 1, k = N_d.", ZERO),
    ]
    for label, part in (("embedding", embedding_part()), ("output", output_part())):
        w, g, o = part_states(part)
        for what, expr in (("weights", w), ("gradients", g), ("optimizer", o)):
            out.append(_mem(f"{label}_{what}_bytes", expr, label,
                            f"{what.capitalize()} bytes one rank keeps of the {label} table, ZeRO-sharded as "
                            "zero_level says.", f"{ZERO}; part: {FSDP_PARTS}"))
    for variant in variants():
        tag = variant.tag
        if variant.low_precision:
            out += _low_precision_layer_forms(variant)
            continue
        w, g, o = _sum_states(layer_parts(variant))
        for what, expr in (("weights", w), ("gradients", g), ("optimizer", o)):
            out.append(_mem(f"{variant.key}_layer_{what}_bytes", expr, variant.key,
                            f"{what.capitalize()} bytes one rank keeps of one body layer ({variant.key}): "
                            "non-expert, routed-expert and shared-expert parts, each ZeRO-sharded as zero_level "
                            "says.", f"{ZERO}; parts: {FSDP_PARTS}; counts: symbolic.params", variant=tag))
        for recompute in (Recompute.NONE, Recompute.SELECTIVE):
            suffix = "" if recompute is Recompute.NONE else "_selective"
            out.append(_mem(f"{variant.key}_layer{suffix}_activations_bytes", layer_activations(variant, recompute),
                            variant.key,
                            f"Activation bytes one body layer ({variant.key}, recompute {recompute.value}) keeps per "
                            "micro-batch on one rank (less what its recomputed modules drop).",
                            f"{KORTHIKANTI}, Table 2 and §4.1{_modules_source(variant)}", variant=tag))
    out += [
        _mem("layer_full_recompute_activations_bytes", layer_activations(variants()[0], Recompute.FULL), "full",
             "Activation bytes a fully recomputed body layer keeps per micro-batch on one rank: its input.",
             f"{KORTHIKANTI}, Table 2 (full activation recomputation, 2sbh)"),
        _mem("embedding_activations_bytes", embedding_activations(), "embedding",
             "Activation bytes the embedding keeps per micro-batch on one rank (its dropout mask).",
             f"{KORTHIKANTI}, §4.3"),
        _mem("output_activations_bytes", output_activations(), "output",
             "Activation bytes the output layer keeps per micro-batch on one rank: norm and projection inputs, "
             "the logits for the loss.", f"{KORTHIKANTI}, §4.3"),
        _mem("pp_in_flight_microbatches_count", in_flight(), "pp",
             "Micro-batches whose activations pipeline stage pp_rank holds at its peak (1F1B or interleaved).",
             f"{KORTHIKANTI}, Eq. 5 and §4.2.3; {SCHEDULES}", unit="count"),
    ]
    for variant in variants():
        out += stage_formulas(variant).all()
    for variant in variants():
        out += stage_slopes(variant)
    return tuple(out)


def _low_precision_layer_forms(variant: MemoryVariant) -> list[Formula]:
    """One body layer's low-precision terms (a variant with ``low_precision``): its activations per micro-batch
    (not and selectively recomputed), their change from the 16-bit count, and its cached quantized weights."""
    out = []
    for recompute in (Recompute.NONE, Recompute.SELECTIVE):
        suffix = "" if recompute is Recompute.NONE else "_selective"
        out.append(_mem(f"{variant.key}_layer{suffix}_activations_bytes", layer_activations(variant, recompute),
                        variant.key,
                        f"Activation bytes one body layer ({variant.key}, recompute {recompute.value}) keeps per "
                        "micro-batch on one rank in a low-precision run, the linear layers' saved inputs quantized "
                        "(less what its recomputed modules drop).",
                        f"{KORTHIKANTI}, Table 2 and §4.1; {TE_SAVED}{_modules_source(variant)}", variant=variant.tag))
    out += [
        _mem(f"{variant.key}_layer_activations_change_bytes", layer_lowp_activations_change(variant), variant.key,
             "Bytes per micro-batch on one rank a body layer (not fully recomputed) keeps in a low-precision run "
             "beyond its 16-bit count: its linear layers' quantized saved inputs less the BF16 ones they replace "
             "(negative where they replace more than they add).", TE_SAVED, variant=variant.tag),
        _mem(f"{variant.key}_layer_weight_copies_bytes", layer_weight_copies(variant), variant.key,
             "Bytes per rank of one body layer's quantized linear weights: the copies Transformer Engine caches "
             "across a step's micro-batches, or the primary weights built quantized (the rank's TP slice, "
             "bytes_lowp_weight per parameter; 0 when zero_level >= 3).", TE_WEIGHTS, variant=variant.tag),
        _mem(f"{variant.key}_layer_weights_change_bytes", layer_quantized_weights_change(variant), variant.key,
             "Bytes per rank one body layer's weights hold in a low-precision run beyond their BF16 count: the "
             "quantized linear weights, less the BF16 ones where the quantized are the primary weights "
             "(lowp_primary_weights; 0 when zero_level >= 3).", TE_WEIGHTS, variant=variant.tag),
    ]
    return out


FORMULAS: tuple[Formula, ...] = _build()
