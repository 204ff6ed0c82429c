"""Memory per rank of every pipeline stage, on the generated evaluators (no SymPy).

The memory family of ``symbolic.memory`` is compiled into ``generated`` as one set of stage
closed forms per variant (attention parameter layout × dense or MoE):
``memory_<variant>_stage_{weights,gradients,optimizer,activations,recompute_workspace,total,
headroom,fits}``. This module feeds them a model, a layout, the layer-kind counts of each stage
and the run settings a model file and a layout do not fix (:class:`MemorySettings`), and reads
the capacity from the hardware catalog's GPU (``Gpu.hbm_bytes``). ``symcost eval --memory`` prints
what :func:`stage_memory` returns; ``codegen.validation.memory`` checks the same evaluation
against ZeRO's Table 1 and Megatron-LM's Figure 1.

As in the communication walk, every body layer of a MoE model is counted as a MoE layer: the
leading dense layers (``first_k_dense``) are kept for reference only (``derive_fields``), so a
stage holding them is estimated with expert layers in their place.

Public API::

    MemorySettings, DEFAULT_SETTINGS, PARTS, NoCapacityError
    zero_level_of(layout) -> int
    variant_key(model) -> str
    call(name, values) -> float | ndarray
    stage_inputs(model, layout, settings, counts) -> dict
    evaluate_stages(key, values, outputs=...) -> dict[str, ndarray]
    stage_memory(model, layout, *, system, settings=DEFAULT_SETTINGS) -> dict
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

import generated
import hardware
from hardware import System
from symbolic.vocabulary import attention_variant

from ..configs.layouts import Layout, build_stages, derive_fields
from ..configs.models import ModelConfig
from ..inputs import finite
from .stages import stage_counts

__all__ = ["MemorySettings", "DEFAULT_SETTINGS", "PARTS", "OUTPUTS", "NoCapacityError", "zero_level_of",
           "variant_key", "call", "stage_inputs", "evaluate_stages", "stage_memory"]

#: The parts of a stage's total, in the order they are printed; they add up to ``total``.
#: ``recompute_workspace`` is what a recomputed layer holds again during its backward pass
#: (0 without recompute), part of the stage formulas' total, so it is reported beside the others.
PARTS = ("weights", "gradients", "optimizer", "activations", "recompute_workspace")

#: The stage outputs :func:`stage_memory` evaluates: the parts, their total, headroom and fits.
OUTPUTS = PARTS + ("total", "headroom", "fits")


@dataclass(frozen=True)
class MemorySettings:
    """Run settings the memory formulas read that a model file and a layout do not fix.

    Attributes:
        bytes_compute: bytes per stored activation element.
        dropout: 1 when dropout keeps 1-byte masks (GPT-3-style training), else 0.
        flash_attention: 1 with a fused attention kernel, else 0.
        bytes_logits: bytes per stored logit for the loss.
        bytes_p, bytes_grad, bytes_optimizer: bytes per parameter of the weights, the gradients
            and the optimizer states (K).
        zero_level: ZeRO stage of the optimizer (0: states replicated over the DP group);
            ``None`` takes it from the layout (:func:`zero_level_of`).
        reserve_bytes: device memory per GPU kept back from the model (framework, CUDA context,
            communication buffers, fragmentation); headroom is capacity − reserve − total.
    """

    bytes_compute: float
    dropout: float
    flash_attention: float
    bytes_logits: float
    bytes_p: float
    bytes_grad: float
    bytes_optimizer: float
    zero_level: int | None = None
    reserve_bytes: float = 0.0

    def __post_init__(self) -> None:
        if self.zero_level is not None and self.zero_level not in (0, 1, 2, 3):
            raise ValueError(f"zero_level: one of 0, 1, 2, 3 or None (from the layout), got {self.zero_level!r}")
        if not np.isfinite(self.reserve_bytes) or self.reserve_bytes < 0:
            raise ValueError(f"reserve_bytes: a finite number >= 0, got {self.reserve_bytes!r}")


#: Today's large-model training as ``symcost eval --memory`` assumes it: BF16 activations, no
#: dropout (DeepSeek-V3, Qwen3 and Llama 2 pretrain without it), fused (flash) attention, fp32
#: logits for the loss, and Megatron-LM's mixed-precision Adam — 16-bit weights, fp32 gradient
#: buffers (main_grad), K = 12 bytes of optimizer state (fp32 master weights and two moments).
#: The ZeRO stage follows the layout. The reserve is 0: the catalog has no measured figure for
#: the framework's share, and a guessed fraction would hide in ``fits``; headroom then says how
#: much a run may keep back (CUDA context, NCCL buffers, allocator fragmentation) and still fit.
DEFAULT_SETTINGS = MemorySettings(bytes_compute=2.0, dropout=0.0, flash_attention=1.0, bytes_logits=4.0,
                                  bytes_p=2.0, bytes_grad=4.0, bytes_optimizer=12.0, zero_level=None,
                                  reserve_bytes=0.0)


class NoCapacityError(ValueError):
    """The system's catalog entry has no GPU facts, so no memory capacity to compare against."""


def zero_level_of(layout: Layout) -> int:
    """The ZeRO stage a layout runs: FSDP 3 (weights sharded too), optimizer and gradient sharding
    2, optimizer sharding 1 (``op``, on by default as in MindSpore/HyperParallel), else 0."""
    if layout.fsdp:
        return 3
    if layout.op:
        return 2 if layout.grad_shard else 1
    return 0


def variant_key(model: ModelConfig) -> str:
    """The memory variant of *model*, the ``<variant>`` of ``memory_<variant>_stage_*``."""
    attention = attention_variant(dc_kv=float(model.dc_kv), dc_q=float(model.dc_q)).value
    return f"{attention}_{'moe' if model.is_moe else 'dense'}"


def call(name: str, values: Mapping[str, Any]) -> Any:
    """The generated function *name* on the values it reads (extra values ignored).

    Raises:
        KeyError: naming the first argument *values* does not hold.
    """
    meta = generated.FORMULAS[name]
    missing = [arg for arg in meta["arguments"] if arg not in values]
    if missing:
        raise KeyError(f"{name}: no value for {', '.join(missing)}")
    return getattr(generated, name)(**{arg: values[arg] for arg in meta["arguments"]})


def stage_inputs(model: ModelConfig, layout: Layout, settings: MemorySettings,
                 counts: Mapping[str, Sequence[float]], *, capacity_bytes: float = 0.0) -> dict[str, Any]:
    """The values the stage formulas read, one entry per stage in the arrays of *counts*.

    *counts* holds each stage's layer-kind counts (``STAGE_COUNT_NAMES``), stage ``i`` at index
    ``i``; ``pp_rank`` is that index, so a caller may pass the first stage's counts alone.
    """
    values: dict[str, Any] = dict(derive_fields(model, layout))
    values.update(bytes_compute=settings.bytes_compute, dropout=settings.dropout,
                  flash_attention=settings.flash_attention, bytes_logits=settings.bytes_logits,
                  bytes_p=settings.bytes_p, bytes_grad=settings.bytes_grad, bytes_optimizer=settings.bytes_optimizer)
    values["zero_level"] = float(zero_level_of(layout) if settings.zero_level is None else settings.zero_level)
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


def _system(system: System | str) -> System:
    return hardware.load(system) if isinstance(system, str) else system


def stage_memory(model: ModelConfig, layout: Layout, *, system: System | str,
                 settings: MemorySettings = DEFAULT_SETTINGS) -> dict[str, Any]:
    """Memory per rank of each pipeline stage of *layout* on one GPU of *system*, in bytes.

    Returns:
        ``{"variant": key, "units": "bytes", "capacity_bytes": C, "reserve_bytes": R,
        "zero_level": z, "stages": [{"stage": i, "weights", "gradients", "optimizer",
        "activations", "recompute_workspace", "total", "capacity", "headroom", "fits"}, …]}``;
        ``capacity`` is the GPU's HBM (``Gpu.hbm_bytes``), ``headroom = capacity − reserve −
        total`` and ``fits`` is ``headroom >= 0``.

    Raises:
        NoCapacityError: when the system's catalog entry has no GPU (the Ascend A2/A3 levels).
        LayoutError: when the layout does not fit the model (``validate``).
    """
    net = _system(system)
    if net.gpu is None:
        raise NoCapacityError(f"{net.name} has no GPU facts in the hardware catalog (no HBM capacity)")
    capacity = float(net.gpu.hbm_bytes)
    counts = stage_counts(build_stages(model, layout), model.n_lay)
    values = stage_inputs(model, layout, settings, counts, capacity_bytes=capacity)
    key = variant_key(model)
    got = evaluate_stages(key, values)
    stages = []
    for i in range(layout.p):
        row: dict[str, Any] = {"stage": i}
        row.update({part: float(finite(f"stage {i} {part} bytes", got[part][i])) for part in PARTS + ("total",)})
        row["capacity"] = capacity
        row["headroom"] = float(finite(f"stage {i} headroom bytes", got["headroom"][i]))
        row["fits"] = bool(got["fits"][i] >= 0.5)
        stages.append(row)
    return {"variant": key, "units": "bytes", "capacity_bytes": capacity, "reserve_bytes": float(settings.reserve_bytes),
            "zero_level": int(values["zero_level"]), "stages": stages}
