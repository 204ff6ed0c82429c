"""Memory per rank of every pipeline stage, on the generated evaluators (no SymPy).

The memory family of ``symbolic.memory`` is compiled into ``generated`` as one set of stage
closed forms per variant (attention parameter layout × dense or MoE):
``memory_<variant>_stage_{weights,gradients,optimizer,activations,recompute_workspace,total,
headroom,fits}``, and for a run whose linear layers compute in FP8, MXFP8 or NVFP4 (``MemorySettings.precision``)
the ``<variant>_lowp`` forms: Transformer Engine's quantized saved inputs and cached weight copies, in the bytes
:func:`low_precision_values` gives for the recipe and the GPU (docs/memory.md, "Low precision"). This module
feeds them a model, a layout, the layer-kind counts of each stage
and the run settings (:class:`MemorySettings`: the model file's byte widths unless a caller gives
its own, and the settings a model file and a layout do not fix), and reads
the capacity from the hardware catalog's GPU (``Gpu.hbm_bytes``). ``symcost eval --memory`` prints
what :func:`stage_memory` returns; ``codegen.validation.memory`` checks the same evaluation
against ZeRO's Table 1 and Megatron-LM's Figure 1.

As in the communication walk, every body layer of a MoE model is counted as a MoE layer: the
leading dense layers (``first_k_dense``) are kept for reference only (``derive_fields``), so a
stage holding them is estimated with expert layers in their place.

Public API::

    MemorySettings, MODEL_WIDTHS, DEFAULT_SETTINGS, DEFAULT_RESERVE_BYTES, PARTS, NoCapacityError
    MemorySettings.for_model(model) -> MemorySettings  (the model's byte widths where left to it)
    width_sources(settings) -> dict[str, str]  ("model" or "given" per model width)
    low_precision_values(precision, system) -> dict[str, float]  (bytes_lowp_input, bytes_lowp_weight, lowp_proj_copy)
    zero_level_of(layout) -> int
    variant_key(model, precision="bf16") -> str
    call(name, values) -> float | ndarray
    stage_inputs(model, layout, settings, counts) -> dict
    evaluate_stages(key, values, outputs=...) -> dict[str, ndarray]
    stage_memory(model, layout, *, system, settings=DEFAULT_SETTINGS) -> dict
    stage_totals(model, layout, settings=DEFAULT_SETTINGS, *, system=None) -> ndarray  (bytes per rank per stage)
    stage_slopes(model, layout, degrees, settings=DEFAULT_SETTINGS, *, relax_p=True) -> dict[str, ndarray]
    MemoryPricer(model, *, system, settings=DEFAULT_SETTINGS).price_batch(batch, *, validated=False)
        -> MemoryPrices  (arrays of layouts, for searchers)
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

import generated
from hardware import System
from symbolic.vocabulary import RECOMPUTE_MODULES, STAGE_COUNT_NAMES, attention_variant

from ..configs import (ARRAY_KEYS, LAYOUT_FIELD_NAMES, Layout, LayoutBatch, LayoutError, ModelConfig,
                       batch_stage_counts, build_stages, check_batch, derive_fields, derive_fields_batch, inherit_os,
                       stage_layers)
from ..runtime import inputs
from ..runtime.inputs import finite, flag
from .engine import (GROUP_TABLE_CACHED, KERNEL_BLOCK, MEMORY_GROUP_FROM, Digit, PipelineShapes, RowGroups, blocks,
                     call_term, group_rows, term_arguments, term_function)
from .families import FamilySpec
from .low_precision import LOW_PRECISION_VALUES, low_precision_values, precision_name
from .recompute import module_values, recompute_modules
from .stages import batch_argument, degrees_argument, layout_argument, model_argument, stage_counts

__all__ = ["MemorySettings", "MODEL_WIDTHS", "DEFAULT_SETTINGS", "DEFAULT_RESERVE_BYTES", "width_sources", "PARTS", "OUTPUTS",
           "NoCapacityError", "LOW_PRECISION_VALUES", "low_precision_values",
           "zero_level_of", "variant_key", "memory_family", "call", "stage_inputs", "evaluate_stages",
           "stage_memory", "stage_totals", "stage_slopes", "slope_name", "MemoryPricer", "MemoryPrices"]

#: The parts of a stage's total, in the order they are printed; they add up to ``total``.
#: ``recompute_workspace`` is what a recomputed layer holds again during its backward pass
#: (0 without recompute), part of the stage formulas' total, so it is reported beside the others.
PARTS = ("weights", "gradients", "optimizer", "activations", "recompute_workspace")

#: The stage outputs :func:`stage_memory` evaluates: the parts, their total, headroom and fits.
OUTPUTS = PARTS + ("total", "headroom", "fits")


#: The byte widths a model file states (``ModelConfig``: ``compute_dtype``, ``param_dtype`` or ``param_init_type``,
#: ``reduce_dtype``), which the communication families read too: :class:`MemorySettings` takes them from the model
#: unless a caller gives its own (``None``: the model's).
MODEL_WIDTHS = ("bytes_compute", "bytes_p", "bytes_grad")


@dataclass(frozen=True, kw_only=True)
class MemorySettings:
    """Run settings the memory formulas read beside the model's architecture and the layout (keyword-only).

    The byte widths a model file states (:data:`MODEL_WIDTHS`) are the model's unless given: ``None``
    takes the model's field (:meth:`for_model`), so the memory and communication families price one
    model with the same data types; a number given is an override and is reported as one
    (:func:`width_sources`). The optimizer's and the logits' bytes are no model-file fields: they are
    settings.

    Attributes:
        bytes_compute: bytes per stored activation element; ``None``: the model's (``compute_dtype``).
        dropout: 1 when dropout keeps 1-byte masks (GPT-3-style training), else 0.
        flash_attention: 1 with a fused attention kernel, else 0.
        bytes_logits: bytes per stored logit for the loss.
        bytes_p, bytes_grad: bytes per parameter of the weights and the gradients; ``None``: the
            model's (``param_dtype`` or ``param_init_type``, ``reduce_dtype``).
        bytes_optimizer: bytes per parameter of the optimizer states (K).
        zero_level: ZeRO stage of the optimizer (0: states replicated over the DP group);
            ``None`` takes it from the layout (:func:`zero_level_of`).
        reserve_bytes: device memory per GPU kept back from the model (framework, CUDA context,
            communication buffers, fragmentation); headroom is capacity − reserve − total. 0 unless given;
            :data:`DEFAULT_SETTINGS` keeps :data:`DEFAULT_RESERVE_BYTES`.
        precision: the run's precision (``symbolic.vocabulary.PRECISIONS``): ``"bf16"`` (the default) prices the
            BF16 forms; any other the low-precision ones, in the bytes :func:`low_precision_values` gives for it
            on the system's GPU (so these need a system).
        lowp_primary_weights: in a low-precision run, the linear layers' primary weights are the quantized tensors
            (``fp8_param_gather``, as NVIDIA's FP8 and MXFP8 recipes set it); False: BF16 weights and Transformer
            Engine's cached quantized copies beside them (Megatron-Core's own default).
        recompute_modules: the modules every layer not fully recomputed recomputes
            (``symbolic.vocabulary.RECOMPUTE_MODULES``: ``layernorm``, ``moe_act``, ``mla_up_proj``; a tuple, or one
            comma-separated text), as Megatron-Core's ``recompute_modules`` beside the layout's recompute plan; none
            by default.
    """

    bytes_compute: float | None = None
    dropout: float
    flash_attention: float
    bytes_logits: float
    bytes_p: float | None = None
    bytes_grad: float | None = None
    bytes_optimizer: float
    zero_level: int | None = None
    reserve_bytes: float = 0.0
    precision: str = "bf16"
    lowp_primary_weights: bool = True
    recompute_modules: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        precision_name("precision", self.precision)
        object.__setattr__(self, "recompute_modules", recompute_modules("recompute_modules", self.recompute_modules))
        flag("lowp_primary_weights", self.lowp_primary_weights)
        if self.zero_level is not None and (isinstance(self.zero_level, bool) or self.zero_level not in (0, 1, 2, 3)):
            raise inputs.InputError(f"zero_level: one of 0, 1, 2, 3 or None (from the layout), got {self.zero_level!r}")
        # Every byte count is a finite number >= 0 and the two switches lie in [0, 1]: then each stage's
        # total grows with every layer count and with the micro-batches in flight (MemoryPricer relies on it).
        # A model width left to the model (None) is checked when resolved (for_model).
        for name in ("bytes_compute", "bytes_logits", "bytes_p", "bytes_grad", "bytes_optimizer", "reserve_bytes",
                     "dropout", "flash_attention"):
            value = getattr(self, name)
            if value is None and name in MODEL_WIDTHS:
                continue
            ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
            if not ok or not np.isfinite(value) or value < 0 or (name in ("dropout", "flash_attention") and value > 1):
                bound = "between 0 and 1" if name in ("dropout", "flash_attention") else ">= 0"
                raise inputs.InputError(f"{name}: a finite number {bound}, got {value!r}")

    def for_model(self, model: ModelConfig) -> MemorySettings:
        """These settings with each model width left to the model (``None``) set to *model*'s field.

        The one place a model's byte widths enter the memory family; settings already resolved come
        back as they are.

        Raises:
            ValueError: naming the field when the model's width is not a finite number >= 0.
        """
        taken = {name: getattr(model, name) for name in MODEL_WIDTHS if getattr(self, name) is None}
        return dataclasses.replace(self, **taken) if taken else self


def width_sources(settings: MemorySettings) -> dict[str, str]:
    """Where each model width of *settings* comes from: ``"model"`` (left to the model file) or ``"given"``."""
    return {name: "model" if getattr(settings, name) is None else "given" for name in MODEL_WIDTHS}


#: Device memory per GPU a training process holds beside the model's states and activations, kept back from
#: the capacity by default (``MemorySettings.reserve_bytes``): 2 GiB, stated, never fitted to a measurement.
#: Its parts, each from a published figure (docs/memory.md, "The reserve"):
#:
#: * the CUDA context with the kernels PyTorch, cuBLAS, cuDNN and Transformer Engine load: 1-2 GB when a model is
#:   put on a GPU (Hugging Face Transformers, "Model training anatomy", huggingface.co/docs/transformers/
#:   model_memory_anatomy); the upper end, 1.5 GiB, is taken here;
#: * NCCL's communication buffers: ``NCCL_BUFFSIZE`` is 4 MiB per channel and peer by default (NCCL user guide,
#:   "Environment Variables"), so a ring communicator of 32 channels and two peers holds 256 MiB; the tensor- and
#:   data-parallel communicators of one rank, 0.5 GiB.
#:
#: Not in it: the caching allocator's fragmentation, which NVIDIA's recipes keep small with
#: ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (Megatron-Bridge perf_recipes); a run that needs more
#: states it (``--reserve``, or ``reserve_bytes``).
DEFAULT_RESERVE_BYTES = 2.0 * 2 ** 30


#: Today's large-model training as ``symcost eval --memory`` assumes it: the model file's byte widths
#: (its ``compute_dtype``, ``param_dtype`` and ``reduce_dtype``: every bundled model states BF16
#: activations and weights and fp32 gradient reduction, Megatron-LM's main_grad), no dropout
#: (DeepSeek-V3, Qwen3 and Llama 2 pretrain without it), fused (flash) attention, fp32 logits for the
#: loss, and K = 12 bytes of Adam's optimizer state (fp32 master weights and two moments), which no
#: model file states. The ZeRO stage follows the layout. The reserve is :data:`DEFAULT_RESERVE_BYTES` (CUDA
#: context and kernels, NCCL buffers); headroom is what is left after it.
DEFAULT_SETTINGS = MemorySettings(bytes_compute=None, dropout=0.0, flash_attention=1.0, bytes_logits=4.0,
                                  bytes_p=None, bytes_grad=None, bytes_optimizer=12.0, zero_level=None,
                                  reserve_bytes=DEFAULT_RESERVE_BYTES)


class NoCapacityError(ValueError):
    """The system's catalog entry has no GPU facts, so no memory capacity to compare against."""


def zero_level_of(layout: Layout | LayoutBatch) -> int:
    """The ZeRO stage a layout (or a batch, whose layouts share these settings) runs: FSDP 3 (weights sharded too), optimizer and gradient sharding
    2, optimizer sharding 1 (``op``, on by default as in MindSpore/HyperParallel), else 0."""
    inputs.instance("layout", layout, (Layout, LayoutBatch), "a Layout or a LayoutBatch")
    if layout.fsdp:
        return 3
    if layout.op:
        return 2 if layout.grad_shard else 1
    return 0


def variant_key(model: ModelConfig, precision: str = "bf16") -> str:
    """The memory variant of *model* in a run of *precision*, the ``<variant>`` of ``memory_<variant>_stage_*``
    (``_lowp`` appended for any precision but BF16)."""
    model_argument(model, names=False)
    attention = attention_variant(dc_kv=float(model.dc_kv), dc_q=float(model.dc_q)).value
    return f"{attention}_{'moe' if model.is_moe else 'dense'}" + ("" if precision == "bf16" else "_lowp")


#: The generated function *name* on the values it reads (``engine.call_term``).
call = call_term


def stage_inputs(model: ModelConfig, layout: Layout, settings: MemorySettings,
                 counts: Mapping[str, Sequence[float]], *, capacity_bytes: float = 0.0,
                 system: System | str | None = None) -> dict[str, Any]:
    """The values the stage formulas read, one entry per stage in the arrays of *counts*.

    *counts* holds each stage's layer-kind counts (``STAGE_COUNT_NAMES``), stage ``i`` at index
    ``i``; ``pp_rank`` is that index, so a caller may pass the first stage's counts alone. A low-precision
    *settings* needs the *system* whose GPU sets its bytes (:func:`low_precision_values`).
    """
    values: dict[str, Any] = dict(derive_fields(model, layout))
    values.update(_run_values(settings, model, layout, system))
    columns = {name: np.asarray(column, dtype=float) for name, column in counts.items()}
    values.update(columns)
    values["pp_rank"] = np.arange(len(next(iter(columns.values()))), dtype=float)
    values["device_memory_bytes"] = float(capacity_bytes)
    values["memory_reserve"] = float(settings.reserve_bytes)
    return values


def evaluate_stages(key: str, values: Mapping[str, Any], outputs: Sequence[str] = OUTPUTS) -> dict[str, np.ndarray]:
    """``memory_<key>_stage_<output>`` for each output, one float per stage of *values*."""
    stages = np.shape(values["pp_rank"])
    return {out: np.broadcast_to(np.asarray(call(f"memory_{key}_stage_{_suffix(out)}", values), dtype=float),
                                 stages) for out in outputs}


def _suffix(output: str) -> str:
    # The generated names carry the unit: every output is in bytes but the 0/1 ``fits``.
    return output if output == "fits" else f"{output}_bytes"


def _family_terms(model: ModelConfig, _batch: LayoutBatch | None = None, *, precision: str = "bf16"
                  ) -> dict[str, str]:
    """The memory family's stage terms of *model*'s variant (the model and the run's precision pick it): each part
    and the total."""
    key = variant_key(model, precision)
    return {out: f"memory_{key}_stage_{_suffix(out)}" for out in PARTS + ("total",)}


def _family_slopes(model: ModelConfig, _batch: LayoutBatch | None, degree: str, *, precision: str = "bf16"
                   ) -> dict[str, str] | None:
    """The memory family's slopes: the generated derivative of the stage total in *degree* (:func:`slope_name`,
    the run's precision's variant), where one is generated."""
    name = slope_name(model, degree, precision=precision)
    return {"total": name} if name in generated.FORMULAS else None


def _run_values(settings: MemorySettings, model: ModelConfig, batch: Layout | LayoutBatch,
                system: System | str | None = None) -> dict[str, float]:
    """The values the stage terms read from the run settings (byte widths, switches, the ZeRO stage, and in a
    low-precision run its bytes on *system*'s GPU); byte widths left to the model are *model*'s
    (:meth:`MemorySettings.for_model`).

    Raises:
        InputError: for a low-precision run without a system (the bytes of its weight copies depend on the GPU).
    """
    settings = settings.for_model(model)
    zero = zero_level_of(batch) if settings.zero_level is None else settings.zero_level
    values = {"bytes_compute": settings.bytes_compute, "dropout": settings.dropout,
              "flash_attention": settings.flash_attention, "bytes_logits": settings.bytes_logits,
              "bytes_p": settings.bytes_p, "bytes_grad": settings.bytes_grad,
              "bytes_optimizer": settings.bytes_optimizer, "zero_level": float(zero),
              **module_values(settings.recompute_modules)}
    if settings.precision != "bf16":
        if system is None:
            raise inputs.InputError(f"system: precision {settings.precision} needs the system whose GPU sets the "
                                    "bytes of its quantized weights (system=...)")
        values.update(low_precision_values(settings.precision, system))
        values["lowp_primary_weights"] = float(settings.lowp_primary_weights)
    return values


def memory_family(settings: MemorySettings = DEFAULT_SETTINGS, system: System | str | None = None) -> FamilySpec:
    """The memory family as a spec (``codegen.pricing.families``): a stage's value is its total bytes per rank,
    the step's the largest stage's (the peak), its slopes the generated derivatives of the total
    (:func:`slope_name`, of the run's precision). :class:`MemoryPricer` reads its terms and run values from
    here. A low-precision *settings* needs the *system* (:func:`low_precision_values`)."""
    precision = settings.precision
    return FamilySpec(name="memory", unit="bytes", terms=functools.partial(_family_terms, precision=precision),
                      stage=lambda parts, _values: parts["total"], step="max",
                      slopes=functools.partial(_family_slopes, precision=precision),
                      settings=functools.partial(_run_values, settings, system=system))


def _headroom(capacity: float, settings: MemorySettings, total: Any) -> Any:
    """Headroom per rank: ``(capacity − reserve) − total``, one rounding order for every caller."""
    return (capacity - float(settings.reserve_bytes)) - total


def _system(system: System | str) -> System:
    return inputs.system("system", system)


def _checked(model: Any, layout: Any, settings: Any) -> None:
    """The arguments :func:`stage_memory`, :func:`stage_totals` and :func:`stage_slopes` share, each checked
    (an ``InputError`` naming it: a model name where a ``ModelConfig`` is meant, ``--layout`` text where a
    ``Layout`` is)."""
    model_argument(model, names=False)
    layout_argument(layout)
    inputs.instance("settings", settings, MemorySettings, "a MemorySettings")


def stage_memory(model: ModelConfig, layout: Layout, *, system: System | str,
                 settings: MemorySettings = DEFAULT_SETTINGS) -> dict[str, Any]:
    """Memory per rank of each pipeline stage of *layout* on one GPU of *system*, in bytes.

    Returns:
        ``{"variant": key, "units": "bytes", "capacity_bytes": C, "reserve_bytes": R,
        "zero_level": z, "settings": {bytes_p, bytes_grad, bytes_optimizer, bytes_compute,
        bytes_logits, flash_attention, dropout}, "widths_from": {bytes_compute, bytes_p, bytes_grad},
        "stages": [{"stage": i, "weights", "gradients", "optimizer", "activations", "recompute_workspace",
        "total", "capacity", "headroom", "fits"}, …]}``; ``settings`` holds the numbers used (the
        model's byte widths where *settings* leaves them to it), ``widths_from`` says for each model
        width whether it is the model file's (``"model"``) or given (``"given"``, :func:`width_sources`);
        ``capacity`` is the GPU's HBM (``Gpu.hbm_bytes``), ``headroom = capacity − reserve −
        total`` and ``fits`` is ``headroom >= 0``. A low-precision run (``settings.precision``) adds
        ``"precision"`` and, to ``settings``, the bytes :func:`low_precision_values` gives; its ``weights``
        hold the cached quantized copies too, and each stage its ``weight_copies`` (bytes, of ``weights``).

    Raises:
        NoCapacityError: when the system's catalog entry has no GPU (the Ascend A2/A3 levels).
        LayoutError: when the layout does not fit the model (``validate``).
        InputError: naming an argument of another kind (a model name, ``system=None``, layout text), or a
            precision the GPU cannot run.
    """
    _checked(model, layout, settings)
    net = _system(system)
    if net.gpu is None:
        raise NoCapacityError(f"{net.name} has no GPU facts in the hardware catalog (no HBM capacity)")
    capacity = float(net.gpu.hbm_bytes)
    sources, settings = width_sources(settings), settings.for_model(model)
    counts = stage_counts(build_stages(model, layout), model.n_lay)
    values = stage_inputs(model, layout, settings, counts, capacity_bytes=capacity, system=net)
    key = variant_key(model, settings.precision)
    got = evaluate_stages(key, values, PARTS + ("total",))
    if settings.precision != "bf16":  # (the body layers' cached quantized weights, of ``weights``)
        copies = np.asarray(call(f"memory_{key}_layer_weight_copies_bytes", values), dtype=float) * stage_layers(values)
        got["weight_copies"] = np.broadcast_to(copies, np.shape(values["pp_rank"]))
    stages = []
    for i in range(layout.p):
        row: dict[str, Any] = {"stage": i}
        row.update({part: float(finite(f"stage {i} {part} bytes", got[part][i])) for part in PARTS + ("total",)})
        row["capacity"] = capacity
        # capacity − reserve − total as MemoryPricer forms it (the generated headroom's value to rounding).
        row["headroom"] = float(finite(f"stage {i} headroom bytes", _headroom(capacity, settings, got["total"][i])))
        row["fits"] = bool(row["headroom"] >= 0)
        if "weight_copies" in got:
            row["weight_copies"] = float(finite(f"stage {i} weight_copies bytes", got["weight_copies"][i]))
        stages.append(row)
    used = {name: float(getattr(settings, name)) for name in ("bytes_p", "bytes_grad", "bytes_optimizer",
                                                               "bytes_compute", "bytes_logits", "flash_attention",
                                                               "dropout")}
    out = {"variant": key, "units": "bytes", "capacity_bytes": capacity, "reserve_bytes": float(settings.reserve_bytes),
           "zero_level": int(values["zero_level"]), "settings": used, "widths_from": sources, "stages": stages}
    if settings.precision != "bf16":  # (a BF16 run's result as before)
        out["precision"] = settings.precision
        used.update({name: float(values[name]) for name in LOW_PRECISION_VALUES})
    return out



# ---------------------------------------------------------------- sensitivity


def _values(model: ModelConfig, layout: Layout, settings: MemorySettings,
            system: System | str | None = None) -> dict[str, Any]:
    counts = stage_counts(build_stages(model, layout), model.n_lay)
    return stage_inputs(model, layout, settings, counts, system=system)


def stage_totals(model: ModelConfig, layout: Layout, settings: MemorySettings = DEFAULT_SETTINGS, *,
                 system: System | str | None = None) -> np.ndarray:
    """Each stage's memory total per rank (bytes), shape ``(p,)``: :func:`stage_memory`'s totals, no GPU needed
    but in a low-precision run (``settings.precision``), whose weight copies' bytes the *system*'s GPU sets.

    Raises:
        LayoutError: when the layout does not fit the model.
        InputError: naming an argument of another kind, or a low-precision run without a system.
    """
    _checked(model, layout, settings)
    return evaluate_stages(variant_key(model, settings.precision), _values(model, layout, settings, system),
                           ("total",))["total"].copy()


def slope_name(model: ModelConfig, degree: str, *, relax_p: bool = True, precision: str = "bf16") -> str:
    """The generated derivative of the stage total in *degree* (``symbolic.memory.stage_slopes``) in a run of
    *precision* (its variant, :func:`variant_key`); for ``p`` with *relax_p*, the one with the body-layer counts
    relaxed as shares of an even split (∝ 1/p)."""
    suffix = "p_split" if degree == "p" and relax_p else degree
    return f"memory_{variant_key(model, precision)}_stage_total_bytes__d_{suffix}"


def stage_slopes(model: ModelConfig, layout: Layout, degrees: Sequence[str],
                 settings: MemorySettings = DEFAULT_SETTINGS, *, relax_p: bool = True,
                 system: System | str | None = None) -> dict[str, np.ndarray]:
    """Per degree, each stage's ∂total/∂degree in bytes per rank per unit of the degree, shape ``(p,)``.

    The generated derivatives (dimension ``memory_slope``) with every derived field and the
    layer counts held (``p``: the counts relaxed, see :func:`slope_name`); a degree the total
    does not read (``d``, whose effect is through the shard sizes; ``ep`` of a dense model) has
    none and gets 0. A low-precision run (``settings.precision``) differentiates its own total, on *system*'s
    GPU (the bytes of its quantized copies).

    Raises:
        InputError: naming a degree that is none of ``symbolic.vocabulary.DEGREES`` (or *degrees* given as one
            string: ``"tp"`` is not ``t`` and ``p``), an argument of another kind, or a low-precision run without
            a system.
        LayoutError: when the layout does not fit the model.
    """
    _checked(model, layout, settings)
    degrees = degrees_argument(degrees)
    relax_p = flag("relax_p", relax_p)
    values = _values(model, layout, settings, system)
    stages = np.shape(values["pp_rank"])
    out = {}
    for x in degrees:
        name = slope_name(model, x, relax_p=relax_p, precision=settings.precision)
        out[x] = (np.broadcast_to(np.asarray(call(name, values), dtype=float), stages).copy()
                  if name in generated.FORMULAS else np.zeros(stages))
    return out


# ---------------------------------------------------------------- arrays of layouts

#: The values :func:`stage_inputs` sets that are no configuration field.
_NOT_FIELDS = frozenset(("bytes_compute", "dropout", "flash_attention", "bytes_logits", "bytes_p", "bytes_grad",
                         "bytes_optimizer", "zero_level", "pp_rank", "device_memory_bytes", "memory_reserve",
                         *LOW_PRECISION_VALUES, *(symbol for symbol, _what in RECOMPUTE_MODULES.values())))


def _candidates(counts: Mapping[str, np.ndarray]) -> list[int]:
    """The stages of one pipeline that may hold its peak, in stage order.

    With non-negative settings (:class:`MemorySettings` checks them) a stage's total grows with
    each of its weights: the embedding and output layers, the body layers, those not, selectively
    and fully recomputed, whether it recomputes at all (the workspace), and the micro-batches in
    flight, which fall with the stage index. A stage another stage matches or exceeds in every
    weight, an earlier one included, is never the first largest: only the others are evaluated.
    """
    layers = stage_layers(counts)
    rows = np.stack([counts["n_embedding"], counts["n_output"], layers,
                     layers - counts["n_full_rec"] - counts["n_sel_rec"], counts["n_sel_rec"], counts["n_full_rec"],
                     np.minimum(counts["n_full_rec"], 1), np.minimum(counts["n_sel_rec"], 1),
                     -np.arange(len(layers))], axis=1)
    # covers[j, i]: stage j matches or exceeds stage i in every weight (one comparison of all pairs).
    covers = (rows[:, None, :] >= rows[None, :, :]).all(axis=2)
    np.fill_diagonal(covers, False)
    return np.flatnonzero(~covers.any(axis=0)).tolist()


def _grouping_keys(batch: LayoutBatch) -> dict[str, np.ndarray]:
    """The integer keys that vary over *batch* (``ARRAY_KEYS``), ``m`` as the stage formulas read it.

    A layout's stage totals and parts are functions of its keys and of the run settings the
    batch shares (``derive_fields_batch`` derives every field they read from these alone), so
    layouts with equal keys have equal memory, to the bit: the pricer evaluates each group once.
    The micro-batches ``m`` enter only as the micro-batches in flight, ``min(m, X)`` with
    ``X <= 2p`` (``symbolic.memory.in_flight``: ``p − i`` under 1F1B, ``(p·vp + p − 1 − 2i)/vp
    < 2p`` interleaved; a rounded quotient stays below the whole number ``2p``), so
    ``min(m, 2p)`` stands in for ``m``: ``min(min(m, 2p), X) = min(m, X)``, exactly, and layouts
    that differ only in ``m >= 2p`` share a group (``tests/test_memory_batch.py`` checks that the
    generated forms read ``m`` nowhere else).
    """
    columns = {}
    for name in ARRAY_KEYS:
        if name == "os" and batch.os_inherited_from() is not None:
            continue  # derived from d (the defaults' os where it divides d): d's digit groups it (see _rows)
        column = getattr(batch, name)
        if column.strides == (0,):  # one value for every layout (a default or a number given)
            continue
        if name == "m":
            p = batch.p
            column = np.minimum(column, 2 * (int(p[0]) if p.strides == (0,) else p))
        columns[name] = column
    return columns


def _group(columns: Mapping[str, np.ndarray], n: int) -> RowGroups | None:
    """The groups of the *n* layouts with equal values in every column of *columns* (whole numbers): the engine's
    grouping (``engine.group_rows``) with tables in cache (``GROUP_TABLE_CACHED``) as a rule and of up to four
    entries per layout where the keys need it; ``None`` when too few layouts share their keys."""
    limit = max(4 * n, 1 << 12)
    bound = min(limit, GROUP_TABLE_CACHED)
    digits = {name: Digit.of(column, compact_above=bound) for name, column in columns.items()}
    return group_rows(digits, n, table=bound, limit=limit)


def _rows(batch: LayoutBatch, groups: RowGroups | None, rows: slice) -> LayoutBatch:
    """Layouts *rows* of *batch* (``groups`` None), or one layout of each group at *rows* of ``groups.present``
    (a key every layout shares kept one value)."""
    if groups is None:
        return batch.subset(rows)
    size = len(groups.present[rows])
    columns = {name: groups.keys[name][rows] if name in groups.keys else column[:size]
               for name in ARRAY_KEYS for column in (getattr(batch, name),)}
    inherited = batch.os_inherited_from()
    if inherited is not None and "os" not in groups.keys:  # (not a key: each group's from its d)
        columns["os"] = inherit_os(inherited, columns["d"])
    return dataclasses.replace(batch, **columns)


@dataclass(frozen=True)
class _Tables:
    """Stage counts by pipeline, for a batch's range of ``p`` and ``vp``.

    Attributes:
        shapes: the pipelines the tables are over (``engine.PipelineShapes.used``): its ``index_of`` gives a
            layout's row (``None``: one pipeline, row 0).
        counts: count name → ``(pipelines, P_max)`` table (0 past a pipeline's last stage).
        kinds: per candidate position, count name and ``pp_rank`` → a number (the same in every
            pipeline) or a table over the pipeline index; a pipeline with fewer candidates repeats
            its first.
        extra: per candidate position, ``None`` where every pipeline has it, else a bool table over
            the pipeline index: which pipelines have that many candidates (the others need no evaluation).
        stacked: count name and ``pp_rank`` → a number (the same at every candidate position of
            every pipeline) or a table of the positions' ``kinds`` one after the other, entry
            ``u·pipelines + index`` for position u (one lookup for the candidates of a block).
    """

    shapes: PipelineShapes
    counts: Mapping[str, np.ndarray]
    kinds: tuple[Mapping[str, Any], ...]
    extra: tuple[np.ndarray | None, ...]
    stacked: Mapping[str, Any]


@dataclass(frozen=True, eq=False)
class MemoryPrices:
    """Memory per rank of N layouts at each layout's peak stage, in bytes: ``(N,)`` arrays.

    Attributes:
        peak_total: the largest stage total of each layout (bytes per rank).
        capacity: the GPU's HBM per rank (the same for every layout: a read-only broadcast).
        headroom: ``capacity − reserve − peak_total``: the least headroom over the stages.
        fits: ``headroom >= 0`` (bool): every stage of the layout fits.
        peak_stage: the index of the stage with the largest total (int64; the first on a tie).
        weights, gradients, optimizer, activations, recompute_workspace: the parts of the peak
            stage, adding up to ``peak_total``; evaluated on first access (a feasibility search
            reads ``fits`` and ``headroom`` alone).
    """

    peak_total: np.ndarray
    capacity: np.ndarray
    headroom: np.ndarray
    fits: np.ndarray
    peak_stage: np.ndarray
    _parts: Callable[[], Mapping[str, np.ndarray]]

    def __len__(self) -> int:
        return len(self.peak_total)

    def parts(self) -> dict[str, np.ndarray]:
        """The peak stage's parts (``PARTS``), evaluated once."""
        cache = self.__dict__.get("_cache")
        if cache is None:
            cache = dict(self._parts())
            object.__setattr__(self, "_cache", cache)
        return cache

    weights = property(lambda self: self.parts()["weights"], doc="Weight bytes per rank of the peak stage.")
    gradients = property(lambda self: self.parts()["gradients"], doc="Gradient bytes per rank of the peak stage.")
    optimizer = property(lambda self: self.parts()["optimizer"], doc="Optimizer-state bytes of the peak stage.")
    activations = property(lambda self: self.parts()["activations"], doc="Activation bytes of the peak stage.")
    recompute_workspace = property(lambda self: self.parts()["recompute_workspace"],
                                   doc="Recompute workspace bytes of the peak stage.")


class MemoryPricer:
    """Memory per rank of arrays of layouts of one model, vectorised, on the generated stage forms (no SymPy).

    The numbers of :func:`stage_memory` layout by layout, exactly: each layout's stages are
    evaluated by ``memory_<variant>_stage_total_bytes`` on the same values. To be cheap per
    layout:

    * layouts with equal keys have equal memory (:func:`_grouping_keys`; ``m`` read as
      ``min(m, 2p)``, all the in-flight count can tell apart), so a batch of ``group_from``
      layouts or more is grouped (``engine.group_rows``: a few table lookups per layout, no sort) and
      each group evaluated once, then gathered back per layout;
    * the stage counts come from small tables over the pipeline shapes ``(p, vp)``
      (``pipeline_stage_counts``, the offset and recompute list where they apply), and only the
      stages that can hold a pipeline's peak are evaluated (:func:`_candidates`: usually the
      first and the last), all of them in one call of the generated total per block;
    * the fields of the model and the run settings are derived once per set of settings;
    * the parts of the peak stage are evaluated (per group) when first read.

    Args:
        model: a bundled model name, a YAML path or a loaded ``ModelConfig``.
        system: hardware catalog name or ``hardware.System`` with GPU facts (the capacity).
        settings: :class:`MemorySettings` (a ZeRO stage of ``None`` follows the batch's run settings; a byte
            width of ``None`` is the model's); ``self.settings`` holds them resolved (:meth:`MemorySettings.for_model`).
        backend: ``"auto"`` (the fused numba target where numba is installed, else NumPy),
            ``"numpy"`` or ``"numba"``; the numbers are the same.

    Raises:
        NoCapacityError: when the system has no GPU facts.
        ValueError: naming an unknown model or system; ``InputError`` (a ``ValueError``) naming an argument of
            another kind (``system=None``, a ``dict`` where a ``LayoutBatch`` is meant).
    """

    #: Layouts per block of the pricing loop (``engine.KERNEL_BLOCK``) and fewest layouts of a batch grouped
    #: (``engine.MEMORY_GROUP_FROM``).
    block: int = KERNEL_BLOCK
    group_from: int = MEMORY_GROUP_FROM

    def __init__(self, model: str | ModelConfig, *, system: System | str,
                 settings: MemorySettings = DEFAULT_SETTINGS, backend: str = "auto"):
        model = model_argument(model)
        inputs.instance("settings", settings, MemorySettings, "a MemorySettings")
        net = _system(system)
        if net.gpu is None:
            raise NoCapacityError(f"{net.name} has no GPU facts in the hardware catalog (no HBM capacity)")
        # (resolved once: the model's byte widths where the settings leave them to it)
        self.model, self.system, self.settings = model, net, settings.for_model(model)
        self.capacity = float(net.gpu.hbm_bytes)
        self.key = variant_key(model, self.settings.precision)
        low_precision_values(self.settings.precision, net)  # (a precision the GPU cannot run: refused here)
        self.family = memory_family(self.settings, net)
        names = dict(self.family.terms(model, None))
        self._functions = {out: term_function(name, backend) for out, name in names.items()}
        self._fused = any(f is not term_function(names[out]) for out, f in self._functions.items())
        self._spreads: dict[tuple[str, str], np.ndarray] = {}
        self._arguments = {out: term_arguments(name) for out, name in names.items()}
        arguments = {a for args in self._arguments.values() for a in args}
        fields = arguments - _NOT_FIELDS - set(STAGE_COUNT_NAMES)
        # The fields the layout keys give, derived per call; the model's and the run's, once per set of settings.
        self._fields = tuple(name for name in LAYOUT_FIELD_NAMES if name in fields)
        self._model_fields = tuple(sorted(fields - set(LAYOUT_FIELD_NAMES)))
        self._settings_values: dict[Any, dict[str, Any]] = {}
        self._counts: dict[Any, Mapping[str, np.ndarray] | None] = {}
        self._tables: dict[Any, _Tables] = {}
        self._chosen: dict[int, tuple[Mapping[str, np.ndarray], list[int]]] = {}  # per stage counts: _candidates

    def price_batch(self, batch: LayoutBatch, *, validated: bool = False) -> MemoryPrices:
        """Memory per rank of every layout of *batch* at its peak stage (:class:`MemoryPrices`).

        Args:
            validated: the caller kept only layouts ``validate_batch`` accepts; they are not
                checked again (an invalid layout then gets an unspecified price).

        Raises:
            codegen.configs.LayoutError: naming the first invalid layout and its constraint.
        """
        validated = flag("validated", validated)  # only a real bool: validated="no" must not skip the checks
        batch = batch_argument(batch)
        n = len(batch)
        if n and not validated:
            check_batch(self.model, batch)
        if not n:
            empty = np.empty(0)
            return MemoryPrices(peak_total=empty, capacity=np.empty(0), headroom=np.empty(0),
                                fits=np.empty(0, dtype=bool), peak_stage=np.empty(0, dtype=np.int64),
                                _parts=lambda: {part: np.empty(0) for part in PARTS})
        shared = self._shared(batch)
        groups = _group(_grouping_keys(batch), n) if n >= self.group_from else None
        tables = self._plan(batch, groups)
        # The stages of each group of layouts with equal keys, evaluated once (on its keys).
        g = n if groups is None else len(groups.present)
        best, stage = np.empty(g), np.empty(g, dtype=np.int64)
        for rows in blocks(g, self.block):
            self._peaks(_rows(batch, groups, rows), tables, shared, best[rows], stage[rows])
        if groups is None:
            peak_total, peak_stage = best, stage
            headroom = _headroom(self.capacity, self.settings, peak_total)
            fits = headroom >= 0
        else:  # each layout's group's values, block by block (its group numbers read once, in cache)
            totals, stages = groups.table(best), groups.table(stage)
            peak_total, peak_stage = np.empty(n), np.empty(n, dtype=np.int64)
            headroom, fits = np.empty(n), np.empty(n, dtype=bool)
            for rows in blocks(n, self.block):
                number = groups.number[rows]
                np.take(totals, number, out=peak_total[rows], mode="clip")
                np.take(stages, number, out=peak_stage[rows], mode="clip")
                headroom[rows] = _headroom(self.capacity, self.settings, peak_total[rows])
                np.greater_equal(headroom[rows], 0, out=fits[rows])
        # (capacity: one number for every layout, a read-only broadcast rather than a pass writing n copies)
        return MemoryPrices(peak_total=peak_total, capacity=np.broadcast_to(np.float64(self.capacity), (n,)),
                            headroom=headroom,
                            fits=fits, peak_stage=peak_stage,
                            _parts=functools.partial(self._parts, batch, tables, groups, stage, shared))

    def _peaks(self, block: LayoutBatch, tables: _Tables, shared: Mapping[str, float], best: np.ndarray,
               stage: np.ndarray) -> None:
        """Fill *best* and *stage* with the largest stage total of each layout of *block* and its stage.

        Every candidate stage (:class:`_Tables`) of every layout in one call of the generated total:
        the layouts' values repeated once per candidate their pipeline has, then the candidates
        compared in stage order (the first largest kept, as ``stage_memory``'s order gives it).
        """
        fields = derive_fields_batch(self.model, block, names=self._fields, validated=True, compact=True)
        at = tables.shapes.index_of(block.p, block.vp)
        count = len(block)
        positions, picks = [], []
        for u, extra in enumerate(tables.extra):
            rows = None if extra is None or at is None else np.flatnonzero(extra[at])
            if rows is None or len(rows):  # only the layouts whose pipeline has this many candidates
                positions.append(u)
                picks.append(rows)
        lengths = [count if rows is None else len(rows) for rows in picks]
        values: dict[str, Any] = {**shared}
        if len(picks) == 1:
            values.update(fields)
            kind = tables.kinds[0]
            values.update({name: (value if at is None or not isinstance(value, np.ndarray) else value[at])
                           for name, value in kind.items()})
        else:
            chosen = np.concatenate([np.arange(count) if rows is None else rows for rows in picks])
            values.update({k: (v[chosen] if isinstance(v, np.ndarray) and v.ndim else v) for k, v in fields.items()})
            # Each row's entry of the stacked tables: its candidate position, then its pipeline.
            pipelines = len(tables.counts["n_body"])
            flat = np.repeat(np.asarray(positions, dtype=np.int64) * pipelines, lengths)
            if at is not None:
                flat += at[chosen]
            values.update({name: (value if not isinstance(value, np.ndarray) else np.take(value, flat, mode="clip"))
                           for name, value in tables.stacked.items()})
        total = np.broadcast_to(self._call("total", values), (sum(lengths),))
        ranks = np.broadcast_to(values["pp_rank"], (sum(lengths),))
        best[...] = total[:count]
        stage[...] = ranks[:count]
        offset = count
        for rows, size in zip(picks[1:], lengths[1:]):
            here, rank = total[offset:offset + size], ranks[offset:offset + size]
            offset += size
            if rows is None:
                better = here > best
                np.copyto(best, here, where=better)
                np.copyto(stage, rank, where=better, casting="unsafe")
            else:
                better = here > best[rows]
                won = rows[better]
                best[won] = here[better]
                stage[won] = rank[better]

    def _call(self, output: str, values: Mapping[str, Any]) -> np.ndarray:
        arguments = {a: values[a] for a in self._arguments[output]}
        if self._fused:
            # The fused target hands its kernel an argument of the output's length as it is, and spreads a
            # number over that length first (numpy.broadcast_to, microseconds per argument): the numbers
            # arrive spread already, as views of one long stride-0 array per number (the same values).
            size = max((len(v) for v in arguments.values() if isinstance(v, np.ndarray) and v.ndim), default=0)
            if size > 1:
                arguments = {a: (v if isinstance(v, np.ndarray) and v.ndim else self._spread(a, v, size))
                             for a, v in arguments.items()}
        return self._functions[output](**arguments)

    def _spread(self, name: str, value: Any, size: int) -> np.ndarray:
        """*value* as a read-only stride-0 array of *size* floats (a view of one kept per argument and value)."""
        key = (name, float(value).hex())  # hex: -0.0 and 0.0 apart
        spread = self._spreads.get(key)
        if spread is None or len(spread) < size:
            if len(self._spreads) >= 4096:
                self._spreads.clear()
            spread = self._spreads[key] = np.broadcast_to(np.float64(value), (max(size, self.block),))
        return spread[:size]

    def _parts(self, batch: LayoutBatch, tables: _Tables, groups: RowGroups | None, peak_stage: np.ndarray,
               shared: Mapping[str, float]) -> dict[str, np.ndarray]:
        """The parts of each layout's peak stage: once per group of layouts with equal keys, block by block."""
        g = len(batch) if groups is None else len(groups.present)
        out = {part: np.empty(g) for part in PARTS}
        for rows in blocks(g, self.block):
            block = _rows(batch, groups, rows)
            fields = derive_fields_batch(self.model, block, names=self._fields, validated=True, compact=True)
            stage = peak_stage[rows]
            pipeline = tables.shapes.index_of(block.p, block.vp)
            pipeline = 0 if pipeline is None else pipeline
            counts = {name: table[pipeline, stage] for name, table in tables.counts.items()}
            values = {**fields, **shared, **counts, "pp_rank": stage.astype(np.float64)}
            for part in PARTS:
                out[part][rows] = self._call(part, values)
        return out if groups is None else {part: groups.gather(value) for part, value in out.items()}

    def _shared(self, batch: LayoutBatch) -> dict[str, Any]:
        """The values every layout of the (non-empty) batch shares: the settings, the ZeRO stage and the fields
        of the model and the run settings (``derive_fields_batch`` on one layout, once per set of run settings)."""
        key = batch.settings()
        values = self._settings_values.get(key)
        if values is None:
            values = dict(self.family.settings(self.model, batch))
            values.update(derive_fields_batch(self.model, batch.subset(slice(0, 1)), names=self._model_fields,
                                              validated=True, compact=True))
            if len(self._settings_values) >= 64:
                self._settings_values.clear()
            self._settings_values[key] = values
        return values

    def _stage_counts(self, batch: LayoutBatch, p: int, vp: int) -> Mapping[str, np.ndarray] | None:
        """The stage counts of the batch's layouts with pipeline (p, vp) (``batch_stage_counts``)."""
        return batch_stage_counts(self.model, batch, p, vp, self._counts)

    def _plan(self, batch: LayoutBatch, groups: RowGroups | None = None) -> _Tables:
        """The count tables for the pipelines ``(p, vp)`` the batch's layouts have (read from one layout of
        each group, with *groups*); tables built for a superset of them serve too (each pipeline is built
        once per pricer)."""
        p, vp = batch.p, batch.vp
        rest = (batch.offset, batch.offset_pipeline, batch.recompute, batch.recompute_pipeline)
        if groups is not None and not (p.strides == (0,) and vp.strides == (0,)):
            # (the groups' keys: a value per group, not per layout)
            p, vp = groups.keys.get("p", p[:1]), groups.keys.get("vp", vp[:1])
        shapes = PipelineShapes.used(p, vp)
        pipelines = shapes.present
        key = (shapes.radix, frozenset(pipelines.items()), *rest)
        tables = self._tables.get(key)
        if tables is None and shapes.radix is not None:
            # Tables over more pipelines serve as well (the same radix: the same index of each): a
            # searcher's later chunks, whose pipelines the first chunks had, reuse theirs.
            tables = next((known for (r, built, *others), known in self._tables.items()
                           if r == shapes.radix and key[1] <= built and tuple(others) == rest), None)
        if tables is not None:
            return tables
        present = {i: counts for i, (pv, v) in pipelines.items()
                   if (counts := self._stage_counts(batch, pv, v)) is not None}
        if not present:
            raise LayoutError(f"no pipeline of the batch fits {self.model.name}: "
                              f"(p, vp) in {sorted(pipelines.values())}")
        size, depth = max(pipelines) + 1, max(len(c["n_body"]) for c in present.values())
        counts = {name: np.zeros((size, depth)) for name in STAGE_COUNT_NAMES}
        chosen: dict[int, list[int]] = {}
        for i, c in present.items():
            for name in STAGE_COUNT_NAMES:
                counts[name][i, :len(c[name])] = c[name]
            # (once per pipeline and pricer: batches of other p ranges build their tables from the same)
            known = self._chosen.get(id(c))
            if known is None or known[0] is not c:
                known = self._chosen[id(c)] = (c, _candidates(c))
            chosen[i] = known[1]
        width = max(len(c) for c in chosen.values())
        kinds, extra = [], []
        for u in range(width):
            if all(len(c) > u for c in chosen.values()):
                extra.append(None)
            else:
                has = np.zeros(size, dtype=bool)
                has[[i for i, c in chosen.items() if len(c) > u]] = True
                extra.append(has)
            stage = {i: (c[u] if u < len(c) else c[0]) for i, c in chosen.items()}
            kind: dict[str, Any] = {}
            for name in (*STAGE_COUNT_NAMES, "pp_rank"):
                column = {i: (float(s) if name == "pp_rank" else float(counts[name][i, s])) for i, s in stage.items()}
                distinct = set(column.values())
                if len(distinct) == 1:
                    kind[name] = distinct.pop()
                else:
                    table = np.zeros(size)
                    table[list(column)] = list(column.values())
                    kind[name] = table
            kinds.append(kind)
        stacked: dict[str, Any] = {}
        for name in (*STAGE_COUNT_NAMES, "pp_rank"):
            column = [kind[name] for kind in kinds]
            if not any(isinstance(value, np.ndarray) for value in column) and len(set(column)) == 1:
                stacked[name] = column[0]
            else:
                stacked[name] = np.concatenate([np.broadcast_to(np.asarray(value, dtype=float), (size,))
                                                for value in column])
        tables = self._tables[key] = _Tables(shapes=shapes, counts=counts, kinds=tuple(kinds), extra=tuple(extra),
                                             stacked=stacked)
        return tables
