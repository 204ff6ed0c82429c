"""Pricing arrays of layouts of one model at once: the searcher's entry point.

A stage's communication is linear in its layer counts (``symbolic.model.
stage_coefficients``): ``output = Σ_k count_k · coefficient_k(layout)``. So
for N layouts the pricer

1. derives every config field of every layout in NumPy
   (``layout.derive_fields_batch``);
2. groups the layouts by what changes the expression or the stage shapes —
   pipeline ``(p, vp)`` and the ZeRO levels — a handful of groups;
3. evaluates each group's coefficients with generated code, once per layout
   (they do not depend on the stage);
4. forms every stage as a dot product of its layer counts
   (``layout.pipeline_stage_counts``) with the coefficients.

Stages beyond a layout's own ``p`` are NaN in the per-stage arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from symbolic import model as stage_model

from .adapters.fields import Fields
from .adapters.model import variant_of
from .adapters.tp import gather_switch
from .kernels import formula_functions
from .layout import LayoutBatch, derive_fields_batch, pipeline_stage_counts
from .levels import comm_score
from .modelcfg import ModelConfig, load_model

__all__ = ["StagePricer", "StagePrices"]

_DIMS = ("dp", "tp", "ep", "cp")


@dataclass(frozen=True)
class StagePrices:
    """Prices of N layouts.

    Attributes:
        bottleneck: the largest stage total of each layout, shape ``(N,)``.
        sum: the sum of the stage totals of each layout, shape ``(N,)``.
        stages: with ``per_stage=True``, ``{"dp", "tp", "ep", "cp", "total"}`` → arrays of shape
            ``(N, P_max)``, NaN past a layout's last stage; else ``None`` (they take N·P_max
            floats each, which a search over millions of layouts rarely wants).
    """

    bottleneck: np.ndarray
    sum: np.ndarray
    stages: dict[str, np.ndarray] | None = None


def _groups(*keys: np.ndarray) -> list[np.ndarray]:
    """Row indices of the layouts that agree on every key (small non-negative integers), one array per group.

    Mixed-radix codes and a counting pass instead of ``numpy.unique(axis=0)``,
    which sorts rows and dominates the time on millions of layouts.
    """
    code = np.zeros(len(keys[0]), dtype=np.int64)
    for key in keys:
        key = np.asarray(key).astype(np.int64)
        code = code * (int(key.max(initial=0)) + 1) + key
    present = np.flatnonzero(np.bincount(code)) if len(code) else np.array([], dtype=np.int64)
    if len(present) == 1:
        return [np.arange(len(code))]
    # A stable sort of small integers is a radix sort in NumPy: linear time.
    small = code.astype(np.int16) if code.max(initial=0) < np.iinfo(np.int16).max else code
    order = np.argsort(small, kind="stable")
    bounds = np.searchsorted(code[order], present, side="left")
    return np.split(order, bounds[1:])


class StagePricer:
    """Prices arrays of layouts of one model, vectorised.

    Args:
        model: a bundled model name, a YAML path or a loaded ``ModelConfig``.
        device: hardware catalog name (the level model's node size, A3's halving, TIME scores).
        fsdp, recompute: run settings shared by every layout (``None`` keeps the model file's).
        with_recomp: price each recomputed layer's traffic again (the original's ``with_recomp``).
        ttype: "FLOP" (volumes) or "TIME" (level scores for DP, TP and CP).
    """

    def __init__(self, model: str | ModelConfig, *, device: str = "A2", fsdp: bool | None = None,
                 recompute: str | None = None, with_recomp: bool = False, ttype: str = "FLOP"):
        import hardware

        self.model = load_model(model) if isinstance(model, str) else model
        self.device = device
        self.level_bound_0 = float(hardware.load(device).level_bounds()[0])
        self.fsdp, self.recompute = fsdp, recompute
        self.with_recomp = with_recomp
        if ttype not in ("FLOP", "TIME"):
            raise ValueError(f"ttype: expected FLOP or TIME, got {ttype!r}")
        self.ttype = ttype

    def __call__(self, *, per_stage: bool = False, **arrays: Any) -> StagePrices:
        """Prices of the layouts given as arrays (``d, t, p, cp, ep, m, b``, …; see ``LayoutBatch.from_arrays``).

        Args:
            per_stage: also return every stage's parts and total (``StagePrices.stages``).

        Raises:
            codegen.layout.LayoutError: naming the first invalid layout and its constraint.
        """
        batch = LayoutBatch.from_arrays(self.model.layout, fsdp=self.fsdp, recompute=self.recompute, **arrays)
        fields = derive_fields_batch(self.model, batch)
        n = len(batch.d)
        bottleneck, total_sum = np.empty(n), np.empty(n)
        stages = None
        if per_stage:
            p_max = int(batch.p.max()) if n else 0
            stages = {name: np.full((n, p_max), np.nan) for name in (*_DIMS, "total")}
        for rows in _groups(batch.p, batch.vp, fields["comm_d_non_exp"], fields["comm_d_exp"]):
            self._price_group(batch, fields, rows, bottleneck, total_sum, stages)
        return StagePrices(bottleneck=bottleneck, sum=total_sum, stages=stages)

    def _price_group(self, batch: LayoutBatch, fields: Mapping[str, Any], rows: np.ndarray,
                     bottleneck: np.ndarray, total_sum: np.ndarray, stages: dict[str, np.ndarray] | None) -> None:
        first = int(rows[0])
        layout = batch.layout(first)
        row = {k: (v[first] if isinstance(v, np.ndarray) else v) for k, v in fields.items()}
        variant = variant_of(Fields({**row, "ttype": self.ttype}), self.device)
        coefficients = stage_model.stage_coefficients(variant)
        counts = pipeline_stage_counts(self.model, layout.p, layout.vp, recompute=layout.recompute,
                                       offset=layout.offset)
        # Stages with the same layer counts cost the same: price each distinct stage once.
        count_names = list(counts)
        matrix = np.stack([counts[c] for c in count_names], axis=1)  # (P, K)
        distinct, stage_of, multiplicity = np.unique(matrix, axis=0, return_inverse=True, return_counts=True)
        names = [(dim + "_recomputed" if self.with_recomp and dim != "dp" else dim) for dim in _DIMS]
        formulas = [f for name in names for f in coefficients[name].values()]
        functions = formula_functions(formulas)
        values = self._arguments(fields, rows, formulas, batch)
        parts = {}
        for dim, name in zip(_DIMS, names):
            stage_values = np.zeros((len(distinct), len(rows)))  # one contiguous row per distinct stage
            for count, f in coefficients[name].items():
                coeff = functions[f.name](**{a: values[a] for a in f.arguments})
                weights = distinct[:, count_names.index(count)]
                for u, weight in enumerate(weights):
                    if weight:
                        stage_values[u] += weight * coeff
            parts[dim] = stage_values
        total = parts["dp"] + parts["tp"] + parts["ep"] + parts["cp"]  # (distinct stages, rows)
        bottleneck[rows] = total.max(axis=0)
        total_sum[rows] = multiplicity @ total
        if stages is not None:
            index = np.ravel(stage_of)
            for name, value in (*parts.items(), ("total", total)):
                stages[name][rows, :layout.p] = value[index].T

    def _arguments(self, fields: Mapping[str, Any], rows: np.ndarray, formulas: list, batch: LayoutBatch
                   ) -> dict[str, Any]:
        needed = {a for f in formulas for a in f.arguments}
        values: dict[str, Any] = {}
        for name in needed:
            if name == "level_bound_0":
                values[name] = self.level_bound_0
            elif name.startswith("score_factor_"):
                continue
            elif name == "gather":
                values[name] = gather_switch(fields)
            else:
                v = fields[name]
                values[name] = v[rows] if isinstance(v, np.ndarray) else float(v)
        if any(name.startswith("score_factor_") for name in needed):
            degrees = {k: getattr(batch, k)[rows] for k in ("d", "t", "cp", "p")}
            for name, dim in (("dp", "DP"), ("tp", "MP"), ("cp", "CP")):
                values[f"score_factor_{name}"] = comm_score(comm_volume=1.0, overlap=0.0, dim=dim,
                                                            device=self.device, **degrees)
        return values
