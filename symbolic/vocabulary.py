"""The project's vocabulary, declared once: layer kinds, CP algorithms and their aliases, stage counts and outputs,
the layout keys (with their bounds, defaults and which are degrees), the recompute modes, the ZeRO levels and
the network levels' parameters.

Plain Python (no SymPy), so that the pricer, the layouts and the command line
import the same names as the formulas without paying for SymPy. Every other
module imports these; none declares its own copy.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

__all__ = [
    "LayerType",
    "LAYER_KINDS",
    "BODY_KINDS",
    "parse_layer_type",
    "CpAlgorithm",
    "CP_ALGORITHMS",
    "CP_ALIASES",
    "resolve_algorithm",
    "STAGE_COUNT_NAMES",
    "BODY_COUNT_NAMES",
    "STAGE_DIMENSIONS",
    "STAGE_OUTPUTS",
    "PRICED_OUTPUTS",
    "DEGREES",
    "Attention",
    "parse_attention",
    "detect_attention",
    "AttentionParams",
    "attention_variant",
    "Routing",
    "routing",
    "STAGE_TERMS",
    "RECOMPUTE_COUNT_NAMES",
    "DEGREE_MAX",
    "DEVICES_MAX",
    "LAYERS_MAX",
    "COUNT_MAX",
    "REQUIRED",
    "LayoutKey",
    "LAYOUT_KEYS",
    "LAYOUT_KEY_NAMES",
    "PER_LAYOUT_KEYS",
    "SHARED_KEYS",
    "LAYOUT_DEGREES",
    "TEXT_KEYS",
    "REQUIRED_KEYS",
    "layout_key",
    "RECOMPUTE_MODES",
    "RECOMPUTE_MODULES",
    "ZERO_LEVELS",
    "SEARCH_KEYS",
    "SEARCH_SETTINGS",
    "LEVEL_PARAMETERS",
    "Precision",
    "PRECISIONS",
    "OVERLAPS",
    "DEFAULT_OVERLAP",
    "EP_DISPATCHERS",
    "DEFAULT_EP_DISPATCHER",
]


class LayerType(enum.Enum):
    """The original's ``LayerType`` node labels, as its pipeline layouts and the reference cases spell them."""

    EMBEDDING_LAYER = "EMBEDDING_LAYER"
    OUTPUT_LAYER = "OUTPUT_LAYER"
    NOT_REC_LAYER = "NOT_REC_LAYER"
    FULL_REC_LAYER = "FULL_REC_LAYER"
    SEL_REC_LAYER = "SEL_REC_LAYER"


#: Every layer label, and the body (transformer) ones: not, fully and selectively recomputed.
LAYER_KINDS: tuple[str, ...] = tuple(kind.value for kind in LayerType)
BODY_KINDS: tuple[str, ...] = (LayerType.NOT_REC_LAYER.value, LayerType.FULL_REC_LAYER.value,
                               LayerType.SEL_REC_LAYER.value)


def parse_layer_type(name: object, field: str = "ctx_current_node") -> LayerType:
    """The layer type called *name*.

    Raises:
        ValueError: naming *field* and the value when it is no layer type.
    """
    if isinstance(name, LayerType):
        return name
    try:
        return LayerType(str(name).upper())
    except ValueError:
        raise ValueError(f"{field}: unknown layer type {name!r}; expected one of {', '.join(LAYER_KINDS)}") from None


class CpAlgorithm(enum.Enum):
    """How CP exchanges attention inputs. Values are the original's ``cp_algo`` labels."""

    COLOSSALAI = "colossalai_cp"
    HYBRID = "hybrid_cp"
    ULYSSES = "ulysses_cp"

    @property
    def family(self) -> str:
        """"ulysses" (all-to-all) or "ring" (colossalai and hybrid move the same K/V)."""
        return "ulysses" if self is CpAlgorithm.ULYSSES else "ring"


#: The labels a layout names a CP algorithm by.
CP_ALGORITHMS: tuple[str, ...] = tuple(algo.value for algo in CpAlgorithm)

#: Other spellings every entry point accepts: the original's accepted typo ``hybird_cp`` and short names.
CP_ALIASES: dict[str, CpAlgorithm] = {
    "hybird_cp": CpAlgorithm.HYBRID,
    "colossalai": CpAlgorithm.COLOSSALAI,
    "ring": CpAlgorithm.COLOSSALAI,
    "hybrid": CpAlgorithm.HYBRID,
    "ulysses": CpAlgorithm.ULYSSES,
}


def resolve_algorithm(name: object, *, lenient: bool = False, field: str = "cp_algo") -> CpAlgorithm:
    """The algorithm a ``cp_algo`` value names (a label of :data:`CP_ALGORITHMS` or an alias, any case).

    Args:
        name: the value of ``cp_algo``.
        lenient: reproduce the original's ``_resolve_cp_algo``: anything unknown, unset (0) or
            empty is colossalai (docs/model.md, "Oddities kept on purpose").
        field: the name to put in the error message.

    Raises:
        ValueError: naming *field* and the value, unless *lenient*.
    """
    if isinstance(name, CpAlgorithm):
        return name
    if isinstance(name, str):
        key = name.strip().lower()
        for algo in CpAlgorithm:
            if key == algo.value:
                return algo
        if key in CP_ALIASES:
            return CP_ALIASES[key]
    if lenient:
        return CpAlgorithm.COLOSSALAI
    known = ", ".join([*CP_ALGORITHMS, *CP_ALIASES])
    raise ValueError(f"{field}: unknown CP algorithm {name!r}; expected one of {known}")


# ---------------------------------------------------------------- model variants, chosen before any expression

class Attention(enum.Enum):
    """Attention variants. ``label`` is the original's ``AttentionType`` string."""

    MHA = "mha"
    GQA = "gqa"
    MQA = "mqa"
    MLA = "mla"

    @property
    def label(self) -> str:
        # The original has no MQA type: one K/V head is GQA to it.
        return "gqa" if self is Attention.MQA else self.value


def parse_attention(name: str) -> Attention:
    """The variant called *name* (``mha``, ``gqa``, ``mqa``, ``mla``; any case).

    Raises:
        ValueError: naming the field and the value when *name* is unknown.
    """
    try:
        return Attention(str(name).lower())
    except ValueError:
        known = ", ".join(x.value for x in Attention)
        raise ValueError(f"attention: unknown attention type {name!r}; expected one of {known}") from None


def detect_attention(*, dc_kv: float, n_kv: float, a: float) -> Attention:
    """The original's ``detect_attention_type``: MLA if dc_kv > 0, GQA if n_kv < a, else MHA.

    Unset fields read as 0, so an unset ``n_kv`` detects as GQA (and its width
    then falls back to ``a`` heads). One K/V head is reported as GQA, as the
    original does; ask for ``Attention.MQA`` explicitly to get its closed form.
    """
    if dc_kv > 0:
        return Attention.MLA
    if n_kv < a:
        return Attention.GQA
    return Attention.MHA


class AttentionParams(enum.Enum):
    """How a layer's attention weights are laid out, as the parameter count distinguishes them."""

    #: Separate Q, K, V and O projections (MHA, GQA, MQA): ``dc_kv = 0``.
    STANDARD = "standard"
    #: MLA whose queries go through a latent of rank ``dc_q`` (``dc_q ≠ 0``).
    MLA_Q_LATENT = "mla_q_latent"
    #: MLA whose queries are projected directly (``dc_q = 0``).
    MLA_Q_DIRECT = "mla_q_direct"


def attention_variant(*, dc_kv: float, dc_q: float) -> AttentionParams:
    """The layout the original's branches pick: ``dc_kv == 0`` is standard, else MLA by ``dc_q``'s truthiness."""
    if dc_kv == 0:
        return AttentionParams.STANDARD
    return AttentionParams.MLA_Q_LATENT if dc_q else AttentionParams.MLA_Q_DIRECT


class Routing(enum.Enum):
    """How the EP volume counts the tokens a rank exchanges."""

    BALANCED = "balanced"
    IMBALANCED = "imbalanced"


def routing(tokens_per_expert: object, *, n_exp: float, ep: float, comm_ep: float = 1.0) -> Routing:
    """The branch the original takes for a ``tokens_per_expert`` value (unset reads 0).

    Imbalanced only for a non-empty list when EP communicates (``ep > 1``
    and ``comm_ep ≠ 0``; otherwise the volume is 0 and nothing else is read)
    and ``ep`` divides ``n_exp``.

    Raises:
        ValueError: naming ``tokens_per_expert`` when it is neither unset (0) nor a list.
    """
    if ep <= 1 or comm_ep == 0:
        return Routing.BALANCED  # the original returns 0 before it looks at the list
    if isinstance(tokens_per_expert, (list, tuple)):
        if not tokens_per_expert or n_exp % ep != 0:
            return Routing.BALANCED
        return Routing.IMBALANCED
    if tokens_per_expert is None or (isinstance(tokens_per_expert, (int, float)) and not tokens_per_expert):
        return Routing.BALANCED  # `not tokens` falls back; an unset field reads 0 (oddity 17)
    raise ValueError(f"tokens_per_expert: expected a list of token counts per expert, got {tokens_per_expert!r}")


# ---------------------------------------------------------------- stage assembly

#: The layer counts a pipeline stage's closed forms are linear in (symbols of ``symbolic.symbols``):
#: embedding and output layers; body layers among the model's first ``n_lay`` (``n_body``, which alone
#: carry DP); body layers past ``n_lay`` (multi-token prediction), plain and selective; and the layers
#: the recompute sums add again.
STAGE_COUNT_NAMES: tuple[str, ...] = ("n_embedding", "n_output", "n_body", "n_extra", "n_extra_sel",
                                      "n_full_rec", "n_sel_rec")

#: The counts that are a share of the body layers (relaxed as ∝ 1/p for the sensitivity to p).
BODY_COUNT_NAMES: tuple[str, ...] = ("n_body", "n_extra", "n_extra_sel", "n_full_rec", "n_sel_rec")

#: The parallel dimensions a stage's communication is split into, in the order every output lists them.
STAGE_DIMENSIONS: tuple[str, ...] = ("dp", "tp", "ep", "cp")

#: A stage's outputs: the converted parts and totals, with and without the recompute sums, the
#: unconverted DP volume and its all-reduced bytes (for the reduce share).
STAGE_OUTPUTS: tuple[str, ...] = ("dp", "tp", "ep", "cp", "total", "tp_recomputed", "ep_recomputed",
                                  "cp_recomputed", "total_recomputed", "dp_unconverted", "dp_reduced")

#: The degrees and sizes sensitivity differentiates by, in the order it reports them.
DEGREES: tuple[str, ...] = ("t", "cp", "ep", "d", "p", "m", "b", "s")

#: The stage outputs a searcher ranks layouts by (the converted parts and totals).
PRICED_OUTPUTS: tuple[str, ...] = STAGE_OUTPUTS[:9]

#: How each stage output weighs its per-layer terms: output → count → the term's role. A stage's
#: output is ``Σ_count count · term(role)``; the pricer and the closed forms of ``symbolic.model``
#: both read this one table. ``n_full_rec`` / ``n_sel_rec`` weigh only the recompute sums
#: (``*_recomputed``): the traffic a recomputed layer adds again. DP is carried by the body layers
#: among the first ``n_lay`` and, with FSDP, by the embedding and output tables.
STAGE_TERMS: dict[str, dict[str, str]] = {
    "dp": {"n_body": "layer", "n_embedding": "embedding", "n_output": "output"},
    "tp": {"n_embedding": "layer", "n_output": "layer", "n_body": "layer", "n_extra": "layer",
           "n_extra_sel": "selective_layer", "n_full_rec": "full_again", "n_sel_rec": "selective_again"},
    "ep": {"n_embedding": "layer", "n_output": "layer", "n_body": "layer", "n_extra": "layer",
           "n_extra_sel": "layer", "n_full_rec": "full_again", "n_sel_rec": "selective_again"},
    "cp": {"n_body": "layer", "n_extra": "layer", "n_extra_sel": "layer", "n_full_rec": "full_again",
           "n_sel_rec": "selective_again"},
}

#: The counts that weigh only the recompute sums.
RECOMPUTE_COUNT_NAMES: tuple[str, ...] = ("n_full_rec", "n_sel_rec")


# ---------------------------------------------------------------- layouts: keys, bounds, recompute modes, ZeRO levels

#: Largest parallel degree along one axis: ~10^6 ranks, beyond any machine; a product of two degrees stays
#: below 2**40, exact in int64 and float64 (``codegen.runtime.inputs`` gives the whole table of bounds).
DEGREE_MAX = 1 << 20
#: Largest device count d·t·cp·p of a layout: every product of degrees the layout rules form
#: (d·t·cp·etp·ep at most) stays below 2**63.
DEVICES_MAX = 1 << 30
#: Largest layer count (body plus MTP layers), offset or recompute count.
LAYERS_MAX = 1 << 10
#: Largest other whole number of a model or a layout (sizes, heads, experts, micro-batches).
COUNT_MAX = 1 << 32


class _Required:
    """The default of a key every layout must state (:data:`REQUIRED`)."""

    def __repr__(self) -> str:
        return "REQUIRED"


#: The :attr:`LayoutKey.default` of a key without a default: a layout states it.
REQUIRED = _Required()

#: The recompute modes a layout's plan names, from recomputing nothing to recomputing every body layer:
#: ``none``, ``selective`` (selective activation checkpointing), ``full`` (each body layer recomputed whole).
RECOMPUTE_MODES: tuple[str, ...] = ("none", "selective", "full")

#: The modules a run recomputes inside every layer it does not recompute in full (``--recompute-modules``;
#: Megatron-Core's ``recompute_granularity = "selective"`` with ``recompute_modules``, whose output-discarding
#: checkpoints drop a module's output after its consumer ran and recompute it in the backward pass,
#: megatron/core/transformer/transformer_config.py), by name: the symbol that switches it in the memory and compute
#: formulas, and what it recomputes. Megatron-Core's ``core_attn`` is the recompute mode ``selective``.
RECOMPUTE_MODULES: Mapping[str, tuple[str, str]] = MappingProxyType({
    "layernorm": ("recompute_norm", "the unfused norms: a MoE layer's pre-MLP norm and MLA's input norm (a norm "
                  "fused into the next linear layer, as Transformer Engine fuses the others, is not recomputed)"),
    "moe_act": ("recompute_moe_act", "the experts' activation function (its output is the second expert GEMM's input)"),
    "mla_up_proj": ("recompute_mla_up", "MLA's query and key/value up-projections and rotary embedding (their outputs "
                    "are the attention's Q, K and V)"),
})


@dataclass(frozen=True)
class LayoutKey:
    """One key of a parallel layout (``codegen.configs.Layout``'s fields, in their order).

    Attributes:
        name: the key, as layouts, the ``--layout`` text and the config fields spell it.
        kind: ``"whole"`` (a whole number), ``"flag"`` (true or false), ``"text"`` (a name), ``"offset"``
            (layers per stage beyond the even split) or ``"plan"`` (the recompute plan).
        default: the value a layout takes when nothing states the key (``None``: unset, see the key's
            meaning); :data:`REQUIRED` when every layout states it.
        meaning: what the key sets, in one line.
        degree: a parallel degree (bounded by :data:`DEGREE_MAX`).
        per_layout: a batch of layouts holds one value of the key per layout (an int64 column); the other
            keys are run settings the layouts of a batch share.
        in_text: the ``key=value`` layout text (``--layout``) may state it.
        minimum, maximum: the bounds of a whole number; ``None`` for other kinds.
    """

    name: str
    kind: str
    default: object
    meaning: str
    degree: bool = False
    per_layout: bool = False
    in_text: bool = True
    minimum: int | None = None
    maximum: int | None = None


def _whole(name: str, default: object, meaning: str, *, degree: bool = False, per_layout: bool = True) -> LayoutKey:
    """A whole-number key >= 1: a degree is at most :data:`DEGREE_MAX`, any other at most :data:`COUNT_MAX`."""
    return LayoutKey(name, "whole", default, meaning, degree=degree, per_layout=per_layout, minimum=1,
                     maximum=DEGREE_MAX if degree else COUNT_MAX)


#: Every key of a parallel layout, in the order of ``Layout``'s fields (and of a batch's columns).
LAYOUT_KEYS: tuple[LayoutKey, ...] = (
    _whole("d", REQUIRED, "data-parallel degree", degree=True),
    _whole("t", REQUIRED, "tensor-parallel degree", degree=True),
    _whole("p", REQUIRED, "pipeline-parallel degree (stages)", degree=True),
    _whole("m", REQUIRED, "micro-batches per step"),
    _whole("cp", 1, "context-parallel degree", degree=True),
    _whole("ep", 1, "expert-parallel degree", degree=True),
    _whole("b", 1, "micro-batch size (samples)"),
    _whole("vp", 1, "virtual pipeline chunks per stage", degree=True),
    _whole("etp", 1, "expert tensor-parallel degree (at most 1: the experts follow t)", degree=True),
    _whole("os", None, "ranks the optimizer shards a parameter over (None: the whole DP group)", degree=True),
    LayoutKey("op", "flag", True, "optimizer sharding"),
    LayoutKey("grad_shard", "flag", False, "gradients sharded too (DP communication level 3)"),
    LayoutKey("sp", "flag", False, "sequence parallelism"),
    LayoutKey("fsdp", "flag", False, "FSDP: gradients sharded as the parameters", in_text=False),
    LayoutKey("reshards", "flag", True, "FSDP frees gathered parameters after each pass"),
    LayoutKey("cp_algo", "text", CpAlgorithm.COLOSSALAI.value, "the CP algorithm (a label or an alias)"),
    _whole("s", None, "sequence length (None: the model file's)", per_layout=False),
    LayoutKey("offset", "offset", None, "layers per stage beyond the even split (None: the even split)",
              in_text=False),
    LayoutKey("recompute", "plan", RECOMPUTE_MODES[0], "the recompute plan (a mode, or full layers per stage)",
              in_text=False),
)

#: The keys' names, in :data:`LAYOUT_KEYS` order.
LAYOUT_KEY_NAMES: tuple[str, ...] = tuple(key.name for key in LAYOUT_KEYS)
#: The whole-number keys a batch holds one value of per layout (its int64 columns), in :data:`LAYOUT_KEYS` order.
PER_LAYOUT_KEYS: tuple[str, ...] = tuple(key.name for key in LAYOUT_KEYS if key.per_layout)
#: The run settings every layout of a batch shares, in :data:`LAYOUT_KEYS` order.
SHARED_KEYS: tuple[str, ...] = tuple(key.name for key in LAYOUT_KEYS if not key.per_layout)
#: The keys that are parallel degrees (bounded by :data:`DEGREE_MAX`).
LAYOUT_DEGREES: tuple[str, ...] = tuple(key.name for key in LAYOUT_KEYS if key.degree)
#: The keys the ``key=value`` layout text may state.
TEXT_KEYS: tuple[str, ...] = tuple(key.name for key in LAYOUT_KEYS if key.in_text)
#: The keys a layout must state when no default layout supplies them.
REQUIRED_KEYS: tuple[str, ...] = tuple(key.name for key in LAYOUT_KEYS if key.default is REQUIRED)

_BY_NAME: Mapping[str, LayoutKey] = MappingProxyType({key.name: key for key in LAYOUT_KEYS})


def layout_key(name: str) -> LayoutKey:
    """The declaration of layout key *name*.

    Raises:
        KeyError: for a name that is no layout key.
    """
    return _BY_NAME[name]


#: ZeRO levels and the layout switches each sets: 0 none, 1 optimizer states (``op``), 2 and gradients
#: (``grad_shard``), 3 and weights (``fsdp``).
ZERO_LEVELS: Mapping[int, dict[str, bool]] = MappingProxyType({
    0: {"op": False, "grad_shard": False, "fsdp": False},
    1: {"op": True, "grad_shard": False, "fsdp": False},
    2: {"op": True, "grad_shard": True, "fsdp": False},
    3: {"op": True, "grad_shard": True, "fsdp": True},
})

#: The per-layout keys a search enumerates (every one but ``os``, which a search takes from the model's own
#: layout), in the order its results list them: the degrees, then the micro-batch size and count.
SEARCH_KEYS: tuple[str, ...] = ("d", "t", "p", "cp", "ep", "etp", "vp", "b", "m")
#: The run settings a search varies, in the order its results list them (their codes index
#: :data:`RECOMPUTE_MODES`, :data:`ZERO_LEVELS` and the searched CP algorithms).
SEARCH_SETTINGS: tuple[str, ...] = ("recompute", "zero", "cp_algo")



@dataclass(frozen=True)
class Precision:
    """A training precision: the data type of the linear layers' GEMMs (NVIDIA Transformer Engine's recipes; every
    other operation stays in BF16).

    Attributes:
        name: the run setting's value (``--precision``).
        peak: the ``hardware.Gpu`` field of its dense tensor peak.
        efficiency: the ``hardware.Gpu`` field of the achieved fraction of that peak.
        min_capability: the CUDA compute capability (× 10) its GEMMs need: FP8 from Hopper (89/90), the MX block
            formats from Blackwell (100).
        meaning: one line for ``--help`` and the docs.
        input_bytes: bytes per element of one quantized copy of a tensor, its block scales included: what a
            linear layer saves of its input for the weight-gradient GEMM (one copy, row- or column-wise,
            Transformer Engine ``transformer_engine/pytorch/module/linear.py`` ``_Linear.forward``: "Discard
            row-wise data since it is not needed in backward pass"). FP8 1 (a per-tensor scale, negligible);
            MXFP8 1 + 1/32 (one E8M0 scale per 32 elements, ``MXFP8_BLOCK_SCALING_SIZE``); NVFP4 1/2 + 1/16
            (4-bit data, one E4M3 scale per 16 elements, ``NVFP4Quantizer.get_scale_shape``). BF16: 2, unread.
        columnwise_copy: the weight copy Transformer Engine caches across micro-batches holds a second,
            column-wise copy (for the input-gradient GEMM) on every GPU: MXFP8 and NVFP4, whose block scales run
            along the other axis (``MXFP8Quantizer`` / ``NVFP4Quantizer``: ``columnwise_data`` and its own
            ``columnwise_scale_inv``). FP8 with per-tensor scales keeps a transpose only where the GPU's FP8
            GEMMs take the TN layout alone (``Float8Quantizer``: ``_transpose`` unless
            ``is_non_tn_fp8_gemm_supported()``, compute capability 10.x, 11.x and 13+).
        own_proj_copy: the attention output projection saves its own quantized copy of its input (delayed
            scaling). The other recipes save the BF16 attention output the fused attention kernel keeps anyway
            (Megatron-Core ``megatron/core/transformer/attention.py`` ``Attention.__init__``:
            ``set_save_original_input(self.linear_proj)`` when ``fp8_recipe != 'delayed'`` or FP4).
        gather_bytes: bytes per parameter of the data-parallel weight all-gather when the primary weights are the
            quantized tensors, 0 where the gather stays at the weights' BF16 width. FP8 1: Megatron-Core's
            ``fp8_param_gather`` "perform[s] the param all-gather in fp8"
            (``megatron/core/distributed/distributed_data_parallel_config.py``). MXFP8 none: its quantized weights
            cannot be mapped into the contiguous parameter buffer, so the all-gather runs in the gradient buffer
            (``reuse_grad_buf_for_mxfp8_param_ag``) and is cast into the MXFP8 tensors after it
            (``param_and_grad_buffer.py`` ``_post_param_sync``). NVFP4 none (``fp4_param_gather`` is off unless
            asked for).
    """

    name: str
    peak: str
    efficiency: str
    min_capability: int
    meaning: str
    input_bytes: float = 2.0
    columnwise_copy: bool = False
    own_proj_copy: bool = False
    gather_bytes: float = 0.0

    def weight_copy_bytes(self, compute_capability: int) -> float:
        """Bytes per linear-layer weight parameter of the low-precision copies Transformer Engine caches across
        micro-batches on a GPU of *compute_capability* (× 10): the row-wise copy for the forward GEMM and, where
        it is a second tensor (:attr:`columnwise_copy`, or an FP8 transpose on a TN-only GPU), the column-wise
        one for the input-gradient GEMM (``_Linear.forward``: ``weight_quantizer.set_usage(rowwise=True,
        columnwise=...)``, cached under ``_fp8_workspaces["weight"]`` while Megatron-Core passes
        ``is_first_microbatch``). 0 for BF16 (no copy)."""
        if self.name == "bf16":
            return 0.0
        non_tn = 100 <= compute_capability < 120 or compute_capability >= 130
        return self.input_bytes * (2 if self.columnwise_copy or not non_tn else 1)


#: The precisions a run can train in, by name; ``bf16`` first (the default: no GEMM in a lower precision).
PRECISIONS: Mapping[str, Precision] = MappingProxyType({p.name: p for p in (
    Precision("bf16", "peak_flops_bf16_per_s", "compute_efficiency", 80, "every GEMM in BF16"),
    Precision("fp8", "peak_flops_fp8_per_s", "compute_efficiency_fp8", 89,
              "linear layers' GEMMs in FP8 (E4M3/E5M2) with delayed per-tensor scaling (TE DelayedScaling)",
              input_bytes=1.0, own_proj_copy=True, gather_bytes=1.0),
    Precision("fp8-cs", "peak_flops_fp8_per_s", "compute_efficiency_fp8_cs", 89,
              "linear layers' GEMMs in FP8 with per-tensor current scaling (TE Float8CurrentScaling)",
              input_bytes=1.0, gather_bytes=1.0),
    Precision("mxfp8", "peak_flops_fp8_per_s", "compute_efficiency_mxfp8", 100,
              "linear layers' GEMMs in MXFP8 (32-element blocks, E8M0 scales; TE MXFP8BlockScaling), Blackwell",
              input_bytes=1.0 + 1.0 / 32, columnwise_copy=True),
    Precision("nvfp4", "peak_flops_fp4_per_s", "compute_efficiency_nvfp4", 100,
              "linear layers' GEMMs in NVFP4 (16-element blocks, E4M3 scales; TE NVFP4BlockScaling), Blackwell",
              input_bytes=0.5 + 1.0 / 16, columnwise_copy=True),
)})

#: The communication a run overlaps with its compute, by name (``--overlap``; docs/search.md, "Exposed
#: communication"): each a switch of Megatron-Core / Transformer Engine.
OVERLAPS: Mapping[str, str] = MappingProxyType({
    "dp": "data-parallel gradient reduction and weight gathering beside the backward / forward passes (Megatron-Core's "
          "overlap_grad_reduce and overlap_param_gather; FSDP's prefetch)",
    "tp": "tensor-parallel all-gathers / reduce-scatters beside the GEMMs they feed (Transformer Engine's userbuffers, "
          "tp_comm_overlap)",
    "ep": "the expert all-to-alls of one micro-batch beside another's compute (Megatron-Core's "
          "overlap_moe_expert_parallel_comm)",
    "pp": "pipeline sends and receives beside the next model chunk's compute, in an interleaved pipeline (vp > 1) "
          "only (Megatron-Core's overlap_p2p_comm)",
})
#: The overlap of a run that states none: Megatron-Bridge's pretraining recipes turn on the data-parallel overlap
#: (NVIDIA-NeMo/Megatron-Bridge@067f987: src/megatron/bridge/recipes/common.py, the pretraining config's
#: DistributedDataParallelConfig(overlap_grad_reduce=True, overlap_param_gather=True)) and, in an interleaved
#: pipeline, the pipeline one (src/megatron/bridge/training/comm_overlap.py: overlap_p2p_comm = True when pp > 1
#: and vp > 1, batch_p2p_comm otherwise), and leave the other two off (_get_model_comm_overlap_cfgs:
#: tp_comm_overlap and overlap_moe_expert_parallel_comm "disabled by default").
DEFAULT_OVERLAP: tuple[str, ...] = ("dp", "pp")

#: The expert dispatchers a run may move its tokens with (``--ep-dispatcher``; docs/time.md, "Expert dispatch"), by
#: Megatron-Core's names (``moe_token_dispatcher_type`` alltoall, or flex with ``moe_flex_dispatcher_backend``
#: deepep / hybridep) → ``(sends each token once per destination rank and node, what it is)``.
EP_DISPATCHERS: Mapping[str, tuple[bool, str]] = MappingProxyType({
    "alltoall": (False, "NCCL all-to-all of one copy of a token per chosen expert (Megatron-Core's alltoall token "
                        "dispatcher)"),
    "deepep": (True, "DeepEP's normal kernels: a token sent once to each node holding one of its experts (to the rank "
                     "of the same local index, over RDMA) and forwarded there over NVLink to each rank holding one"),
    "hybridep": (True, "NVIDIA's Hybrid-EP kernels in DeepEP: the same deduplicated routes as DeepEP, TMA copies over "
                       "NVLink"),
})
#: The expert dispatcher of a run that names none: Megatron-Core's default token dispatcher, NCCL's all-to-all.
DEFAULT_EP_DISPATCHER = "alltoall"

# ---------------------------------------------------------------- network levels

#: The network levels' α and β for the sensitivity in seconds: each is a relative scale λ applied to every
#: symbol listed (λ = 1 as bound), so ``∂t/∂λ = Σ sym · ∂t/∂sym``. NVLink (level 0): NCCL's base latencies
#: (the fixed cost of a call, paid inside the node) and NVLink hop latencies; its bandwidth the ring channel's,
#: NCCL's NVLink total and the NVLS channel speed. Network (level 1): the network hop latencies and the
#: per-step network overhead; the NIC's bandwidth. NCCL's per-protocol caps (llMaxBws, perChMax*) are tuning
#: limits of the protocols, not of a link, and stay fixed.
LEVEL_PARAMETERS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "nvlink_alpha": ("alpha_ring_ll_s", "alpha_ring_ll128_s", "alpha_ring_simple_s", "alpha_tree_ll_s",
                     "alpha_tree_ll128_s", "alpha_tree_simple_s", "hop_nvlink_ring_ll_s", "hop_nvlink_ring_ll128_s",
                     "hop_nvlink_ring_simple_s", "hop_nvlink_tree_ll_s", "hop_nvlink_tree_ll128_s",
                     "hop_nvlink_tree_simple_s", "hop_nvlink_nvls_s"),
    "network_alpha": ("hop_net_ring_ll_s", "hop_net_ring_ll128_s", "hop_net_ring_simple_s", "hop_net_tree_ll_s",
                      "hop_net_tree_ll128_s", "hop_net_tree_simple_s", "net_overhead_s"),
    "nvlink_beta": ("ring_channel_bw_bytes_per_s", "nvlink_nccl_bw_bytes_per_s", "nvls_channel_max_bw_bytes_per_s"),
    "network_beta": ("nic_bw_bytes_per_s",),
})


def _check_declarations() -> None:
    """The declarations above agree with each other (checked once, at import: a few set operations)."""
    if len(set(LAYOUT_KEY_NAMES)) != len(LAYOUT_KEY_NAMES):
        raise AssertionError(f"LAYOUT_KEYS: a key is declared twice: {LAYOUT_KEY_NAMES}")
    if sorted(SEARCH_KEYS) != sorted(set(PER_LAYOUT_KEYS) - {"os"}):
        raise AssertionError(f"SEARCH_KEYS {SEARCH_KEYS} must be the per-layout keys but os, {PER_LAYOUT_KEYS}")
    for level, switches in ZERO_LEVELS.items():
        if any(layout_key(name).kind != "flag" for name in switches):
            raise AssertionError(f"ZERO_LEVELS[{level}] sets a key that is no flag: {switches}")
    if layout_key("recompute").default not in RECOMPUTE_MODES:
        raise AssertionError("the recompute key's default is no recompute mode")


_check_declarations()
