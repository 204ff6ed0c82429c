"""Cost families as specs: what a family declares, and the engine's one way to price a batch from it.

A family (the original's volumes, collective time, memory per rank, compute and step seconds, energy, …) is its
generated stage terms, how their arguments are bound, how a stage's value follows from them, how the stages
make a step, and its slopes. :class:`FamilySpec` holds exactly that; :func:`price_family` does the rest with the
engine's pieces (``codegen.pricing.engine``): the block loop, the pipeline shapes present, the stage counts of
each, the grouping of layouts by the keys each term reads (found from the term's own arguments) and the calls of
the generated terms. A new family is then its formulas, its hardware facts and one spec. The families with a
pricer of their own (a search's hot paths) are declared as specs too and priced the same numbers by them
(``tests/test_families.py``).

Public API::

    FamilySpec(name, unit, terms, stage, step="max", slopes=None, settings=None, stage_inputs=...,
               arguments=None, finish=None)
    price_family(spec, model, batch, *, validated=False, per_stage=False, group_from=...) -> FamilyPrices
    price_slopes(spec, model, batch, degree, *, validated=False) -> (N, P_max) derivatives per stage
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from symbolic.vocabulary import STAGE_COUNT_NAMES

from ..configs import (LAYER_KIND_NAMES, LayoutBatch, LayoutError, batch_stage_counts, check_batch, derive_fields_batch,
                       stage_layer_kinds)
from ..configs.models import ModelConfig
from ..runtime.inputs import flag
from .engine import KERNEL_BLOCK, TIME_GROUP_FROM, KeyColumns, batch_blocks, by_table, term_arguments, term_function

__all__ = ["FamilySpec", "FamilyPrices", "price_family", "price_slopes", "STEPS"]

#: How a family's stages make a step: ``"max"``, the stage with the largest value (the first on a tie: the
#: bottleneck, a peak), or ``"sum"`` over the stages.
STEPS = ("max", "sum")


def _pp_rank(counts: Mapping[str, float], stage: int) -> dict[str, float]:
    """A stage's counts (``pipeline_stage_counts``) and its index ``pp_rank``, as the stage terms read them."""
    return {**counts, "pp_rank": float(stage)}


@dataclass(frozen=True)
class FamilySpec:
    """A cost family as data.

    Attributes:
        name, unit: what the family prices and its unit (``"memory"``, ``"bytes"``).
        terms: ``(model, batch) → `` its generated stage terms, part name → function name (the variant's own;
            *batch*, the layouts priced, gives the run settings that pick a variant, or is ``None`` for a family
            whose variant the model alone picks).
        stage: a stage's value from its parts (each a ``(rows,)`` array) and *values*: the arguments bound for
            the layouts (``arguments``), the settings and the stage's inputs (``stage_inputs``), by name.
        step: how the stages make a step (:data:`STEPS`).
        slopes: ``(model, batch, degree) → `` the generated derivatives of the parts in the degree (part name →
            function name), or ``None`` (none declared or generated). A stage's slope is ``stage`` applied to
            them: every family here is linear in its parts (a sum of counts times terms, a sum of quotients by
            hardware constants).
        settings: ``(model, batch) → `` the values the terms read that are neither a layout or model field nor a
            stage count (byte widths, hardware facts, …); every layout of the batch shares them.
        stage_inputs: a stage's counts and index → the values its terms read per stage (default: the counts of
            ``pipeline_stage_counts`` and ``pp_rank``).
        arguments: ``(model, block, names) → `` the terms' arguments *names* for the layouts of a block (numbers
            or ``(rows,)`` arrays); default the layouts' derived fields (``derive_fields_batch``). A family whose
            terms read more than fields (the original's ZeRO switches and level scores) binds them here.
        finish: ``(step, block, settings) → `` the step's value of each layout of a block from its stages'
            (``step``): the step time's ``compute × (1 + bubble) + exposed communication``; default the stages'.
    """

    name: str
    unit: str
    terms: Callable[[ModelConfig, LayoutBatch | None], Mapping[str, str]]
    stage: Callable[[Mapping[str, np.ndarray], Mapping[str, Any]], np.ndarray]
    step: str = "max"
    slopes: Callable[[ModelConfig, LayoutBatch | None, str], Mapping[str, str] | None] | None = None
    settings: Callable[[ModelConfig, LayoutBatch], Mapping[str, Any]] | None = None
    stage_inputs: Callable[[Mapping[str, float], int], Mapping[str, float]] = _pp_rank
    arguments: Callable[[ModelConfig, LayoutBatch, frozenset[str]], Mapping[str, Any]] | None = None
    finish: Callable[[np.ndarray, LayoutBatch, Mapping[str, Any]], np.ndarray] | None = None

    def __post_init__(self) -> None:
        if self.step not in STEPS:
            raise ValueError(f"step: one of {', '.join(STEPS)}, got {self.step!r}")

    def slope(self, model: ModelConfig, degree: str, batch: LayoutBatch | None = None) -> Mapping[str, str] | None:
        """The generated derivatives of the parts in *degree* (for the variant *batch*'s run settings pick, where
        they pick one), or ``None`` (none declared or generated)."""
        return None if self.slopes is None else self.slopes(model, batch, degree)


@dataclass(frozen=True)
class FamilyPrices:
    """A family's prices of N layouts.

    Attributes:
        step: each layout's step value (its largest stage, or the sum over its stages), ``(N,)``.
        stage: with ``step="max"``, the index of that stage (the first on a tie), ``(N,)`` int64; else zeros.
        stages: with ``per_stage=True``, every stage's value ``(N, P_max)``, NaN past a layout's last stage.
    """

    step: np.ndarray
    stage: np.ndarray
    stages: np.ndarray | None = None


def price_family(spec: FamilySpec, model: ModelConfig, batch: LayoutBatch, *, validated: bool = False,
                 per_stage: bool = False, group_from: int = TIME_GROUP_FROM) -> FamilyPrices:
    """The step value of every layout of *batch* under the family *spec*, with the engine's pieces.

    Block by block (``KERNEL_BLOCK`` layouts), per pipeline shape ``(p, vp)`` present, per stage: the stage's
    inputs from its counts (``batch_stage_counts``), the terms' arguments (``spec.arguments``, by default the
    layouts' derived fields, only those the terms read), each term evaluated once per group of layouts with
    equal values of the arguments it reads that vary (``KeyColumns``; element-wise terms on equal inputs give
    equal numbers, to the bit) and once per pipeline shape when it reads nothing of the stage, the stage's value
    (``spec.stage``), the step (``spec.step``), then ``spec.finish``. A pipeline shape of fewer than *group_from*
    layouts of a block is not grouped (finding the repeats would cost more than it saves).

    Raises:
        LayoutError: naming the first invalid layout (unless *validated*).
    """
    validated, per_stage = flag("validated", validated), flag("per_stage", per_stage)
    if len(batch) and not validated:
        check_batch(model, batch)
    return _price(spec, model, batch, dict(spec.terms(model, batch)), per_stage, group_from, finish=True)


def price_slopes(spec: FamilySpec, model: ModelConfig, batch: LayoutBatch, degree: str, *,
                 validated: bool = False) -> np.ndarray:
    """Each stage's derivative in *degree* of every layout of *batch*, ``(N, P_max)``, NaN past a layout's last
    stage: ``spec.stage`` of the derivatives of its parts (``spec.slopes``), every derived field and the layer
    counts held.

    Raises:
        ValueError: naming *degree* when the family declares no derivatives in it.
        LayoutError: naming the first invalid layout (unless *validated*).
    """
    terms = spec.slope(model, degree, batch) if len(batch) else {}
    if terms is None:
        raise ValueError(f"degree: the {spec.name} family has no derivative in {degree!r}")
    if len(batch) and not flag("validated", validated):
        check_batch(model, batch)
    return _price(spec, model, batch, dict(terms), True, TIME_GROUP_FROM, finish=False).stages


def _price(spec: FamilySpec, model: ModelConfig, batch: LayoutBatch, terms: Mapping[str, str], per_stage: bool,
           group_from: int, *, finish: bool) -> FamilyPrices:
    """:func:`price_family`'s loop over the parts *terms* (the family's terms or their derivatives)."""
    n = len(batch)
    step, stage = np.zeros(n), np.zeros(n, dtype=np.int64)
    p_max = int(batch.p.max()) if n else 0
    stages = np.full((n, p_max), np.nan) if per_stage else None
    if not n:
        return FamilyPrices(step, stage, stages)
    settings = dict(spec.settings(model, batch)) if spec.settings is not None else {}
    reads = {term: term_arguments(term) for term in terms.values()}
    per_stage_names = set(spec.stage_inputs({k: 0.0 for k in (*STAGE_COUNT_NAMES, *LAYER_KIND_NAMES)}, 0))
    fields = frozenset({a for args in reads.values() for a in args} - set(settings) - per_stage_names)
    # A term that reads nothing of the stage is the same for every stage of a pipeline shape: evaluated once.
    stage_free = {term for term, args in reads.items() if not per_stage_names.intersection(args)}
    memo: dict[Any, Mapping[str, np.ndarray] | None] = {}
    for rows, block in batch_blocks(batch, KERNEL_BLOCK):
        if spec.arguments is None:
            derived = dict(derive_fields_batch(model, block, names=sorted(fields), validated=True, compact=True))
        else:
            derived = dict(spec.arguments(model, block, fields))
        varying = {k: v for k, v in derived.items() if isinstance(v, np.ndarray) and v.ndim and v.strides != (0,)}
        radix = int(block.vp.max()) + 1
        shape_of, shapes = by_table(block.p * radix + block.vp, (int(block.p.max()) + 1) * radix)
        block_step = np.empty(len(block))
        for j, code in enumerate(shapes.tolist()):
            p, vp = divmod(code, radix)
            counts = batch_stage_counts(model, block, p, vp, memo)
            if counts is None:
                raise LayoutError(f"{model.name}: no layout of the batch can have a pipeline of p = {p}, vp = {vp}")
            if model.has_layer_kinds:  # the layers the step time prices apart, per stage (stage_layer_kinds)
                counts = {**counts, **stage_layer_kinds(model, p, vp, block.stage_lists(p, vp)[1])}
            at = np.flatnonzero(shape_of == j) if len(shapes) > 1 else np.arange(len(block))
            m = len(at)
            columns = {k: v[at] for k, v in varying.items()}
            keys = KeyColumns(m)
            keys.columns = columns
            groups = {term: (keys.group(sorted(a for a in args if a in columns)) if m >= group_from else None)
                      for term, args in reads.items()}
            best = np.full(m, -np.inf) if spec.step == "max" else np.zeros(m)
            where = np.zeros(m, dtype=np.int64)
            once: dict[str, np.ndarray] = {}
            bound = {k: columns[k] if k in columns else v[at] if isinstance(v, np.ndarray) and v.ndim else v
                     for k, v in derived.items()}  # (the shape's layouts' own)
            for s in range(p):
                inputs = spec.stage_inputs({k: float(v[s]) for k, v in counts.items()}, s)
                parts = {}
                for part, term in terms.items():
                    if term in once:
                        parts[part] = once[term]
                        continue
                    found = groups[term]
                    values = {a: (columns[a] if found is None else columns[a][found[0]]) if a in columns
                              else inputs[a] if a in inputs else settings[a] if a in settings else derived[a]
                              for a in reads[term]}
                    value = np.asarray(term_function(term)(**values), dtype=np.float64)
                    value = np.broadcast_to(value, (m if found is None else len(found[0]),))
                    parts[part] = value if found is None else np.take(value, found[1])
                    if term in stage_free:
                        once[term] = parts[part]
                value = np.broadcast_to(np.asarray(spec.stage(parts, {**bound, **settings, **inputs}),
                                                   dtype=np.float64), (m,))
                if stages is not None:
                    stages[np.arange(rows.start, rows.stop)[at], s] = value
                if spec.step == "sum":
                    best = best + value
                else:
                    better = value > best
                    best = np.where(better, value, best)
                    where[better] = s
            block_step[at] = best
            stage[rows.start + at] = where
        if finish and spec.finish is not None:
            block_step = np.broadcast_to(np.asarray(spec.finish(block_step, block, settings), dtype=np.float64),
                                         (len(block),))
        step[rows] = block_step
    return FamilyPrices(step, stage, stages)
