"""Memory per rank of a batch of layouts, for the search's feasibility filter (no SymPy).

The stage closed forms of ``symbolic.memory`` (``generated.memory_<variant>_stage_{total,headroom}_bytes``,
the ones ``codegen.pricing.memory.stage_memory`` evaluates for one layout) are evaluated for a whole
:class:`LayoutBatch` at once, on the first pipeline stage (the embedding, and under 1F1B the most
micro-batches in flight) and the last (the output layer and its logits); a layout's peak is the larger,
its headroom the smaller. The fields come from ``derive_fields_batch``, the layer-kind counts of each
``(p, vp)`` pipeline from ``pipeline_stage_counts``, the run settings from
``codegen.pricing.memory.DEFAULT_SETTINGS`` and the capacity from the catalog GPU's HBM.

Public API::

    BatchMemory(model, *, system, settings=DEFAULT_SETTINGS)
    BatchMemory.price(batch, recompute, zero) -> {"peak_bytes", "headroom_bytes", "fits"}
"""

from __future__ import annotations

from typing import Any

import numpy as np

import generated
import hardware

from ..configs.layouts import LayoutBatch, derive_fields_batch, pipeline_stage_counts
from ..configs.models import ModelConfig
from .memory import DEFAULT_SETTINGS, MemorySettings, NoCapacityError, variant_key

__all__ = ["BatchMemory"]

#: Arguments this module supplies itself (settings, capacity, stage counts), not the layout's derived fields.
_OWN = frozenset({"bytes_compute", "dropout", "flash_attention", "bytes_logits", "bytes_p", "bytes_grad",
                  "bytes_optimizer", "device_memory_bytes", "memory_reserve", "zero_level", "pp_rank",
                  "n_embedding", "n_output", "n_body", "n_extra", "n_extra_sel", "n_full_rec", "n_sel_rec"})


class BatchMemory:
    """Peak memory per rank and headroom of the layouts of a batch (first and last stage).

    Raises:
        NoCapacityError: for a system without GPU facts (no HBM capacity).
    """

    def __init__(self, model: ModelConfig, *, system: str, settings: MemorySettings = DEFAULT_SETTINGS) -> None:
        net = hardware.load(system)
        if net.gpu is None:
            raise NoCapacityError(f"--system {system}: no GPU facts in the hardware catalog (no HBM capacity), so "
                                  f"no memory feasibility")
        self.model, self.settings = model, settings
        self.capacity = float(net.gpu.hbm_bytes)
        key = variant_key(model)
        self._total = f"memory_{key}_stage_total_bytes"
        self._headroom = f"memory_{key}_stage_headroom_bytes"
        self._arguments = tuple(sorted(set(generated.FORMULAS[self._total]["arguments"])
                                       | set(generated.FORMULAS[self._headroom]["arguments"])))
        self._counts: dict[tuple[int, int, str], dict[str, np.ndarray]] = {}
        model_fields = set(model.fields())
        self._derived = tuple(a for a in self._arguments if a not in model_fields and a not in _OWN)

    def _stage_counts(self, p: np.ndarray, vp: np.ndarray, recompute: str) -> dict[str, dict[str, np.ndarray]]:
        """Per layout, the first and the last stage's layer-kind counts (gathered from each (p, vp) pipeline)."""
        width = int(vp.max()) + 1
        code = p * width + vp
        present = np.flatnonzero(np.bincount(code))  # the (p, vp) pipelines present, without a sort
        first: dict[str, np.ndarray] = {}
        last: dict[str, np.ndarray] = {}
        for c in present:
            pp, vv = divmod(int(c), width)
            key = (pp, vv, recompute)
            if key not in self._counts:
                self._counts[key] = pipeline_stage_counts(self.model, pp, vv, recompute=recompute)
            for name, column in self._counts[key].items():
                first.setdefault(name, np.zeros(int(code.max()) + 1))[c] = column[0]
                last.setdefault(name, np.zeros(int(code.max()) + 1))[c] = column[-1]
        return {"first": {k: v[code] for k, v in first.items()}, "last": {k: v[code] for k, v in last.items()}}

    def price(self, batch: LayoutBatch, recompute: str, zero: int) -> dict[str, np.ndarray]:
        """``{"peak_bytes", "headroom_bytes", "fits"}`` per layout of *batch* (validated layouts)."""
        needed = [a for a in self._arguments]
        fields: dict[str, Any] = dict(self.model.fields())
        fields.update(derive_fields_batch(self.model, batch, validated=True, names=self._derived))
        s = self.settings
        fields.update(bytes_compute=s.bytes_compute, dropout=s.dropout, flash_attention=s.flash_attention,
                      bytes_logits=s.bytes_logits, bytes_p=s.bytes_p, bytes_grad=s.bytes_grad,
                      bytes_optimizer=s.bytes_optimizer, device_memory_bytes=self.capacity,
                      memory_reserve=float(s.reserve_bytes),
                      zero_level=float(zero if s.zero_level is None else s.zero_level))
        stages = self._stage_counts(batch.p, batch.vp, recompute)
        peak = headroom = None
        for name, rank in (("first", np.zeros(len(batch))), ("last", batch.p - 1.0)):
            values = dict(fields, **stages[name], pp_rank=rank)
            missing = [a for a in needed if a not in values]
            if missing:
                raise KeyError(f"{self._total}: no value for {', '.join(missing)}")
            args = {a: values[a] for a in needed}
            total = np.asarray(getattr(generated, self._total)(**{a: args[a] for a in
                                                                  generated.FORMULAS[self._total]["arguments"]}))
            room = np.asarray(getattr(generated, self._headroom)(**{a: args[a] for a in
                                                                    generated.FORMULAS[self._headroom]["arguments"]}))
            peak = total if peak is None else np.maximum(peak, total)
            headroom = room if headroom is None else np.minimum(headroom, room)
        peak = np.broadcast_to(peak, (len(batch),)).astype(np.float64)
        headroom = np.broadcast_to(headroom, (len(batch),)).astype(np.float64)
        return {"peak_bytes": peak, "headroom_bytes": headroom, "fits": headroom >= 0}
