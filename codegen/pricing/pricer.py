"""The one pricer: arrays of layouts of one model, priced stage by stage without SymPy.

A stage's communication is linear in its layer counts: ``output = Σ_count
count · term`` (``symbolic.model``), with generated per-layer terms
(``codegen.pricing.stages``). For N layouts the pricer

1. checks every layout once (``derive_fields_batch``; ``validated=True``
   skips it for layouts a generator made valid) and reads the model's variant
   from one layout (the fields that pick it are the model's and the run's);
2. groups the variant's terms by how the stages weigh them (the same use of
   the layer counts: the embedding, output, body, MTP and recomputed layers),
   once per set of counts the pipelines use;
3. then, block by block (``_BLOCK`` layouts, so that temporaries stay in
   cache), derives only the fields the terms read, evaluates each term once
   per layout (a field every layout shares stays one number), adds each group,
   and forms the stages from small tables over the pipeline shapes
   ``(p, vp)``: the weight of each group in each kind of stage, gathered by
   each layout's pipeline. The sum over the stages weighs each group by its
   layer counts over all stages; the bottleneck is the largest of the stages
   that no other stage of the pipeline outweighs in every group (often the
   first stage alone), when the groups are not negative, else the largest of
   every kind of stage.

With ``per_stage=True`` every stage's parts come from ``stages.stage_outputs``,
the function the reference check prices the original's cases with. Stages
beyond a layout's own ``p`` are NaN in the per-stage arrays.
"""

from __future__ import annotations

import functools
import itertools
import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import numpy as np

from symbolic.vocabulary import BODY_COUNT_NAMES, RECOMPUTE_COUNT_NAMES, STAGE_COUNT_NAMES, STAGE_DIMENSIONS

from ..configs import (LAYOUT_FIELD_NAMES, LayoutBatch, ModelConfig, batch_stage_counts, check_batch,
                       derive_fields_batch, direct_column, dp_comm_level_values, load_model)
from ..runtime.inputs import flag
from .kernels import BLOCK as _RUNTIME_BLOCK, BoundKernel  # (the most elements a kernel's block runs)
from .levels import score_factors
from .stages import BIND_SOURCES, TTYPES, ZERO_SWITCHES, Fields, Terms, bind, stage_outputs, terms_of, variant_of

__all__ = ["StagePricer", "StagePrices"]

_FLOAT64 = np.dtype(np.float64)

#: Layouts per block of the pricing loop: its temporaries (a few float64 arrays of a block) stay in the
#: processor's cache, and the Python cost per block is spread over enough layouts.
_BLOCK = 1 << 14

@dataclass(frozen=True)
class StagePrices:
    """Prices of N layouts.

    Attributes:
        bottleneck: the largest stage total of each layout, shape ``(N,)``.
        sum: the sum of the stage totals of each layout, shape ``(N,)``.
        stages: with ``per_stage=True``, ``{"dp", "tp", "ep", "cp", "total"}`` (the parts as priced:
            the recompute sums under ``with_recomp``; and the outputs asked for) → arrays of shape ``(N, P_max)``, NaN past a layout's last stage; else ``None`` (they
            take N·P_max floats each, which a search over millions of layouts rarely wants).
    """

    bottleneck: np.ndarray
    sum: np.ndarray
    stages: dict[str, np.ndarray] | None = None


@dataclass(frozen=True)
class _Sums:
    """The variant's terms grouped by how the stages weigh them.

    Attributes:
        usage: per group, how many times it counts each layer of ``counts`` (its weight in a
            stage is ``usage · stage counts``).
        counts: the count names the usage vectors run over (those some stage holds).
        names: per group, the generated terms added into it.
    """

    usage: tuple[tuple[int, ...], ...]
    counts: tuple[str, ...]
    names: tuple[tuple[str, ...], ...]


def _sums(terms: Terms, outputs: Sequence[str], counts: tuple[str, ...]) -> _Sums:
    """Group the terms of *outputs* by their use of *counts* (a term used by two outputs counts twice)."""
    usage: dict[str, list[int]] = {}
    for output in outputs:
        base = output.removesuffix("_recomputed")
        for count, name in terms.by_output[base].items():
            if count in counts and (output.endswith("_recomputed") or count not in RECOMPUTE_COUNT_NAMES):
                usage.setdefault(name, [0] * len(counts))[counts.index(count)] += 1
    groups: dict[tuple[int, ...], list[str]] = {}
    for name, used in usage.items():
        groups.setdefault(tuple(used), []).append(name)
    return _Sums(tuple(groups), counts, tuple(tuple(names) for names in groups.values()))


# ----------------------------------------------------------------- pipeline tables


@dataclass(frozen=True)
class _Kinds:
    """Kinds of stages to take the largest of: per kind, per compiled sum, its weight (a number, the same
    for every pipeline, or a table over the pipeline index).

    Attributes:
        kinds: per kind of stage, per sum, its weight (``None`` for a common sum).
        common: per sum, its weight where it is the same in every kind (else ``None``): added once,
            outside the maximum.
    """

    kinds: tuple[tuple[Any, ...], ...]
    common: tuple[Any, ...]


@dataclass(frozen=True)
class _StageTables:
    """Per compiled sum, its weights in a layout's stages.

    Attributes:
        total: per sum, its weight summed over a layout's stages.
        every: the distinct kinds of stages of each pipeline.
        front: of each pipeline, the kinds no other of its kinds outweighs in every sum (often one:
            the first stage). With sums that are not negative the bottleneck is one of them.
    """

    total: tuple[Any, ...]
    every: _Kinds
    front: _Kinds


def _stage_rows(weights: np.ndarray) -> list[int]:
    """The stages with distinct rows of *weights* (stages × sums): the first stage, the last, then
    the others in stage order, so that the kinds of stages line up across pipelines."""
    kept: list[int] = []
    for s in [0, len(weights) - 1, *range(1, len(weights) - 1)]:
        if not any(np.array_equal(weights[s], weights[k]) for k in kept):
            kept.append(s)
    return kept


StageCounts = Callable[[int, int], "Mapping[str, np.ndarray] | None"]


_PIPELINE_TOKENS = itertools.count()


@dataclass(frozen=True)
class _Pipelines:
    """The pipeline shapes a batch can hold: each layout's index into tables over them, and the shapes.

    Attributes:
        key: what decides ``present`` (the ranges of ``p`` and ``vp``, the index's radix and the
            batch's stage lists): a key for the tables built over them. With *known*, a number that
            stands for that key (one per key, never reused: hashed once per call, not once per table).
        index: per layout, ``p`` (``p·(max vp + 1) + vp`` when vp varies); ``None`` when every
            layout has the same pipeline.
        present: index → ``(p, vp)`` for every pipeline up to the batch's largest ``p`` (and
            ``vp``) that the model can run: a superset of the layouts' pipelines, found from the
            maxima alone (no count of the layouts of each).
    """

    index: np.ndarray | None
    present: dict[int, tuple[int, int]]
    key: tuple[Any, ...] = ()

    @classmethod
    def of(cls, batch: LayoutBatch, stage_counts: StageCounts,
           known: dict[Any, tuple[dict[int, tuple[int, int]], int]] | None = None) -> _Pipelines:
        """The pipelines of *batch*; *known* keeps the shapes found for each range of ``p`` and ``vp``."""
        p, vp = batch.p, batch.vp
        single_p = p.strides == (0,)
        p_range = (int(p[0]), int(p[0]) + 1) if single_p else (1, batch.top("p") + 1)
        if vp.strides == (0,):
            index, radix, vp_range = (None if single_p else p), 0, (int(vp[0]), int(vp[0]) + 1)
        else:
            radix = batch.top("vp") + 1
            index, vp_range = p * radix + vp, (1, radix)
        key = (p_range, vp_range, single_p, radix, batch.offset, batch.offset_pipeline, batch.recompute,
               batch.recompute_pipeline)
        entry = None if known is None else known.get(key)
        if entry is None:
            shapes = [(pv, v) for pv in range(*p_range) for v in range(*vp_range)]
            where = {shape: (0 if index is None else shape[0] * radix + shape[1] if radix else shape[0])
                     for shape in shapes}
            present = {where[shape]: shape for shape in shapes if stage_counts(*shape) is not None}
            if known is None:
                return cls(index, present, key)
            entry = known[key] = (present, next(_PIPELINE_TOKENS))
        return cls(index, *entry)

    def table(self, values: Mapping[int, float]) -> Any:
        """A weight per layout from its value per pipeline: one number when every pipeline has the same."""
        distinct = set(values.values())
        if len(distinct) == 1:
            return distinct.pop()
        table = np.zeros(max(values) + 1)
        for i, value in values.items():
            table[i] = value
        return table


def _kinds(pipelines: _Pipelines, rows: Mapping[int, np.ndarray], sums: int) -> _Kinds:
    """Kinds of stages from each pipeline's rows of weights (kinds × sums), lined up by position."""
    depth = max(len(r) for r in rows.values())
    # Pad each pipeline's kinds with its first (a repeated stage does not change the maximum).
    padded = {i: np.concatenate([r, np.repeat(r[:1], depth - len(r), axis=0)]) for i, r in rows.items()}
    kinds: list[list[dict[int, float]]] = []
    for u in range(depth):
        kind = [{i: float(padded[i][u, j]) for i in padded} for j in range(sums)]
        if kind not in kinds:
            kinds.append(kind)
    common = [pipelines.table(kinds[0][j]) if len(kinds) > 1 and all(kind[j] == kinds[0][j] for kind in kinds)
              else None for j in range(sums)]
    return _Kinds(kinds=tuple(tuple(None if common[j] is not None else pipelines.table(kind[j]) for j in range(sums))
                              for kind in kinds),
                  common=tuple(common))


def _weights(stage_counts: StageCounts, pipelines: _Pipelines, sums: _Sums) -> _StageTables:
    """The weight of each sum in each kind of stage and over all stages, per pipeline present."""
    usage = np.array(sums.usage, dtype=np.float64).T  # (counts, sums)
    every: dict[int, np.ndarray] = {}
    front: dict[int, np.ndarray] = {}
    totals: dict[int, np.ndarray] = {}
    for i, (p, vp) in pipelines.present.items():
        counts = stage_counts(p, vp)
        matrix = np.stack([counts[c] for c in sums.counts], axis=1) @ usage  # (stages, sums)
        kinds = matrix[_stage_rows(matrix)]
        every[i] = kinds
        outweighed = [any((other >= row).all() and (other > row).any() for other in kinds) for row in kinds]
        front[i] = kinds[[not o for o in outweighed]]
        totals[i] = matrix.sum(axis=0)
    n = len(sums.usage)
    return _StageTables(total=tuple(pipelines.table({i: float(totals[i][j]) for i in totals}) for j in range(n)),
                        every=_kinds(pipelines, every, n), front=_kinds(pipelines, front, n))


# ----------------------------------------------------------------- the pricer


class StagePricer:
    """Prices arrays of layouts of one model, vectorised, on the generated evaluators (no SymPy).

    Args:
        model: a bundled model name, a YAML path or a loaded ``ModelConfig``.
        device: hardware catalog name (the level model's node size, the original's stage scale,
            TIME scores).
        fsdp, recompute: run settings shared by every layout (``None`` keeps the model file's).
        with_recomp: price each recomputed layer's traffic again (the original's ``with_recomp``).
        ttype: "FLOP" (volumes) or "TIME" (level scores for DP, TP and CP).

    Raises:
        ValueError: naming an unknown model, device or setting.
    """

    def __init__(self, model: str | ModelConfig, *, device: str = "A2", fsdp: bool | None = None,
                 recompute: str | None = None, with_recomp: bool = False, ttype: str = "FLOP"):
        import hardware

        if isinstance(model, str):
            model = load_model(model)
        if not isinstance(model, ModelConfig):
            raise TypeError(f"model: expected a model name, a YAML path or a ModelConfig, got {model!r}")
        self.model = model
        self.device = device
        self.system = hardware.load(device)
        self.fsdp, self.recompute = fsdp, recompute
        self.with_recomp = flag("with_recomp", with_recomp)
        if ttype not in TTYPES:
            raise ValueError(f"ttype: expected one of {', '.join(TTYPES)}, got {ttype!r}")
        self.ttype = ttype
        self.outputs = tuple(dim + "_recomputed" if with_recomp and dim != "dp" else dim for dim in STAGE_DIMENSIONS)
        self._score = functools.partial(score_factors, device=device)
        self._sums: dict[Any, _Sums] = {}
        self._weights: dict[Any, Any] = {}
        self._counts: dict[Any, Mapping[str, np.ndarray] | None] = {}
        self._counts_used: dict[Any, tuple[str, ...]] = {}
        self._pipelines: dict[Any, tuple[dict[int, tuple[int, int]], int]] = {}
        self._value_plans: dict[Any, tuple[dict[str, Any], frozenset[str], tuple[str, ...]]] = {}
        self._call_plans: dict[Any, _CallPlan] = {}
        self._last_plan: tuple[Any, ...] = (None, None, None, None)
        self._variants: dict[Any, Terms] = {}
        self._scratch: dict[tuple[int, int], tuple[list[np.ndarray], list[np.ndarray]]] = {}

    def __call__(self, *, per_stage: bool | Sequence[str] = False, validated: bool = False,
                 **arrays: Any) -> StagePrices:
        """Prices of the layouts given as arrays (``d, t, p, cp, ep, m, b``, …; see ``LayoutBatch.from_arrays``).

        Args:
            per_stage: also return every stage's parts and total (``StagePrices.stages``); a list of
                output names (``dp_unconverted``, ``dp_reduced``, …) adds those.
            validated: the caller has already kept only layouts ``layout.validate_batch``
                accepts; they are not checked again, nor are their int64 columns' ranges (which
                that check implies; see ``LayoutBatch.from_arrays``); an invalid layout then gets
                an unspecified price. By default every layout is checked.

        Raises:
            codegen.configs.LayoutError: naming the first invalid layout and its constraint.
        """
        validated = flag("validated", validated)
        batch = LayoutBatch.from_arrays(self.model.layout, fsdp=self.fsdp, recompute=self.recompute,
                                        validated=validated, **arrays)
        n = len(batch)
        if validated and per_stage is False and 0 < n <= _BLOCK:
            # A searcher's call (vouched-for layouts, one block, no stages): price_batch's own path, without
            # its checks of what this call's arguments already are.
            bottleneck, total_sum = np.empty(n), np.empty(n)
            self._price_block(self._terms(batch), batch, bottleneck, total_sum, self._combine_scratch(n))
            return StagePrices(bottleneck=bottleneck, sum=total_sum)
        return self.price_batch(batch, per_stage=per_stage, validated=validated)

    def price_batch(self, batch: LayoutBatch, *, per_stage: bool | Sequence[str] = False,
                    validated: bool = False) -> StagePrices:
        """Prices of the layouts of *batch* (``LayoutBatch.from_layouts`` for parsed layouts); as ``__call__``."""
        validated = flag("validated", validated)  # only a real bool: validated="no" must not skip the checks
        if not isinstance(per_stage, (bool, np.bool_)) and (
                isinstance(per_stage, str) or not all(isinstance(name, str) for name in per_stage)):
            raise TypeError(f"per_stage: expected true, false or a list of output names, got {per_stage!r}")
        if isinstance(per_stage, np.bool_):
            per_stage = bool(per_stage)
        n = len(batch)
        if n == 0:
            empty = {name: np.empty((0, 0)) for name in (*STAGE_DIMENSIONS, "total")} if per_stage else None
            return StagePrices(bottleneck=np.empty(0), sum=np.empty(0), stages=empty)
        if not validated:
            check_batch(self.model, batch)
        terms = self._terms(batch)
        bottleneck, total_sum = np.empty(n), np.empty(n)
        scratch = self._combine_scratch(min(n, _BLOCK))
        if n <= _BLOCK:
            self._price_block(terms, batch, bottleneck, total_sum, scratch)
        else:
            for start in range(0, n, _BLOCK):
                # Block by block, each step over the same layouts: every temporary is one block long
                # and stays in cache.
                rows = slice(start, start + _BLOCK)
                self._price_block(terms, batch.subset(rows), bottleneck[rows], total_sum[rows], scratch)
        stages = None
        if per_stage:
            extra = () if per_stage is True else tuple(per_stage)
            priced = self._stages(batch, terms, (*self.outputs, *extra))
            # The parts as priced (the recompute sums under with_recomp), by dimension, and their total.
            stages = {dim: priced.pop(name) for dim, name in zip(STAGE_DIMENSIONS, self.outputs)}
            stages["total"] = sum(stages[dim] for dim in STAGE_DIMENSIONS)
            stages.update(priced)
        return StagePrices(bottleneck=bottleneck, sum=total_sum, stages=stages)

    def _price_block(self, terms: Terms, block: LayoutBatch, bottleneck: np.ndarray, total_sum: np.ndarray,
                     scratch: tuple[np.ndarray, np.ndarray]) -> None:
        """Fill *bottleneck* and *total_sum* of the layouts of *block* (at most ``_BLOCK`` of them)."""
        pipelines = _Pipelines.of(block, functools.partial(self._stage_counts, block), self._pipelines)
        sums, tables = self._plan(terms, block, pipelines)
        evaluated = self._evaluate(block, sums)
        # Each term is in one group and its array is this call's own: the group's sum goes into it.
        parts = [_accumulate([evaluated[name] for name in group if name in evaluated]) for group in sums.names]
        _combine(parts, tables, pipelines.index, bottleneck, total_sum, *scratch)

    def stage_slopes(self, batch: LayoutBatch, degrees: Sequence[str], *, relax_p: bool = False
                     ) -> dict[str, np.ndarray]:
        """Per degree, each stage's ∂total/∂degree, ``(N, P_max)`` (NaN past a layout's last stage).

        The partial derivative of the generated terms (``symbolic.model.SLOPES``) with every derived
        field and the layer counts held. With *relax_p*, ``p`` also acts through the body-layer
        counts as shares of an even split (``∝ 1/p``): ``−(1/p) Σ_body count · term`` is added.

        Raises:
            ValueError: naming a degree with no derivative terms (see ``symbolic.sensitivity.DEGREES``).
        """
        terms = self._terms(batch, degrees)
        out = {x: sum(self._stages(batch, terms, self.outputs, wrt=x).values()) for x in degrees}
        if relax_p and "p" in degrees:
            body = sum(self._stages(batch, terms, self.outputs, only=BODY_COUNT_NAMES).values())
            out["p"] = out["p"] - body / batch.p[:, None]
        return out

    def _terms(self, batch: LayoutBatch, degrees: Sequence[str] = ()) -> Terms:
        """The variant's terms: the fields that pick it are the model's and the run's (the batch's shared
        settings), so one layout tells, once per set of settings."""
        key = (batch.settings(), tuple(degrees))
        terms = self._variants.get(key)
        if terms is None:
            probe = derive_fields_batch(self.model, batch.subset(slice(0, 1)), validated=True, compact=True)
            terms = self._variants[key] = terms_of(variant_of(Fields(probe)), degrees)
        return terms

    def _plan(self, terms: Terms, block: LayoutBatch, pipelines: _Pipelines) -> tuple[_Sums, _StageTables]:
        """The term groups and the weight tables for layouts of the *pipelines* present (each built once)."""
        pipeline_key = pipelines.key  # (the batch's offset and recompute lists included)
        stage_counts = functools.partial(self._stage_counts, block)
        counts_used = self._counts_used.get(pipeline_key)
        if counts_used is None:
            counts_used = self._counts_used[pipeline_key] = _counts_used(stage_counts, pipelines)
        sums = self._sums.get((terms, counts_used))
        if sums is None:
            sums = self._sums[(terms, counts_used)] = _sums(terms, self.outputs, counts_used)
        tables = self._weights.get((terms, pipeline_key))
        if tables is None:
            tables = self._weights[(terms, pipeline_key)] = _weights(stage_counts, pipelines, sums)
        return sums, tables

    def _stage_counts(self, batch: LayoutBatch, p: int, vp: int) -> Mapping[str, np.ndarray] | None:
        """The stage counts of the batch's layouts with pipeline (p, vp) (``batch_stage_counts``)."""
        return batch_stage_counts(self.model, batch, p, vp, self._counts)

    def _values(self, batch: LayoutBatch, needed: frozenset[str] | set[str]) -> dict[str, Any]:
        """The terms' arguments *needed* for the layouts of *batch*: shared ones as numbers, the rest arrays.

        Which arguments are one number for the whole batch, and their values, follow from the run
        settings and from the keys every layout shares (a stride-0 column and its value): per such
        shape of batch they are derived and bound once, and later calls derive and bind only the
        arguments that vary per layout.
        """
        needed = frozenset(needed)
        shape = (needed, batch.settings(), batch.shared_keys())
        plan = self._value_plans.get(shape)
        if plan is not None:
            shared, varying, fields = plan
            derived = derive_fields_batch(self.model, batch, names=fields, validated=True, compact=True)
            return {**shared, **bind(Fields(derived), varying, system=self.system, ttype=self.ttype,
                                     score=self._score)}
        values = bind(Fields(derive_fields_batch(self.model, batch, names=_sources(needed), validated=True,
                                                 compact=True)),
                      needed, system=self.system, ttype=self.ttype, score=self._score)
        varying = frozenset(name for name, value in values.items() if isinstance(value, np.ndarray) and value.ndim)
        if len(self._value_plans) >= 1024:
            self._value_plans.clear()
        self._value_plans[shape] = ({name: value for name, value in values.items() if name not in varying},
                                    varying, _sources(varying))
        return values

    def _evaluate(self, batch: LayoutBatch, sums: _Sums) -> dict[str, np.ndarray]:
        """Each generated term the groups of *sums* add, evaluated for the layouts of *batch*.

        As :meth:`_values` (whose plans decide which arguments are one number for a shape of batch),
        and per such shape each term's shared arguments are bound once: a later call derives, binds
        and passes only the arguments that vary per layout. A term whose generated function has a
        kernel (``generated._runtime.Kernel``) then runs its block statements directly
        (``kernels.BoundKernel``): its invariants computed once per shape, the arguments in place,
        buffers shared by the terms, one ``errstate`` for them all: the function's own steps on the
        same values, without its per-call checks (the values are the pricer's own floats and float64
        columns). A term the shared values decide alone (``BoundKernel.constant``) is that number.
        """
        settings, shared_keys = batch.settings(), batch.shared_keys()
        last = self._last_plan  # (a searcher's calls of one shape share these very objects: no hashing)
        if last[0] is sums and last[1] is settings and last[2] is shared_keys:
            plan = last[3]
        else:
            shape = (sums, settings, shared_keys)
            plan = self._call_plans.get(shape)
            if plan is not None:
                self._last_plan = (sums, settings, shared_keys, plan)
        if plan is None:
            values = self._values(batch, _needed(sums))
            # A ZeRO switch of a level the batch's settings rule out is 0 for every layout: shared.
            levels = dp_comm_level_values(batch)
            for name, (_source, level) in ZERO_SWITCHES.items():
                if isinstance(values.get(name), np.ndarray) and level not in levels:
                    values[name] = 0.0
            varying = frozenset(name for name, value in values.items() if isinstance(value, np.ndarray) and value.ndim)
            calls = tuple((name, function, {a: values[a] for a in arguments if a not in varying},
                           tuple(a for a in arguments if a in varying)) for name, function, arguments in _calls(sums))
            # (a term with no argument that varies is one call of the function: no kernel to run)
            kernels = [(name, BoundKernel.bind(function, shared) if own else None)
                       for name, function, shared, own in calls]
            kernels = [(name, kernel) for name, kernel in kernels if kernel is not None]
            # A term the shared values decide alone is that number for every layout of this shape.
            constants = {name: kernel.constant() for name, kernel in kernels}
            constants = {name: value for name, value in constants.items() if value is not None}
            # A term that is 0 adds nothing to its group where the group has another term (its sum is that
            # term's array: x + 0.0 is x): it is left out. (A group of such terms alone keeps one.)
            for group in sums.names:
                kept = [name for name in group if constants.get(name) != 0.0]
                for name in group if kept else group[1:]:
                    if constants.get(name) == 0.0:
                        constants[name] = None
            if len(self._call_plans) >= 1024:
                self._call_plans.clear()
            steps, fields = _column_steps(varying), _sources(varying)
            if steps is not None:
                # Each column a kernel reads written straight from the key columns where the field's rule
                # allows; the rest derived together (their rules share groups).
                steps = tuple((name, source, level, direct_column(self.model, batch, source, level))
                              for name, source, level in steps)
                fields = tuple(sorted({source for _name, source, _level, write in steps if write is None}))
            self._call_plans[shape] = _CallPlan(
                calls, varying, fields, steps, tuple(constants.items()),
                tuple((name, kernel) for name, kernel in kernels if not kernel.quiet and name not in constants),
                tuple((name, kernel) for name, kernel in kernels if kernel.quiet and name not in constants),
                max((kernel.reals for _name, kernel in kernels), default=0),
                max((kernel.masks for _name, kernel in kernels), default=0),
                len(kernels) == len(calls))
            return {name: function(**shared, **{a: values[a] for a in own}) for name, function, shared, own in calls}
        calls, varying, fields, steps, constants, loud, quiet, reals, masks, every = plan
        n = len(batch)
        derived = derive_fields_batch(self.model, batch, names=fields, validated=True, compact=True) if fields else {}
        if steps is None:
            values = bind(Fields(derived), varying, system=self.system, ttype=self.ttype, score=self._score)
        else:
            # What bind gives for these arguments, without its generic walk: a column written straight from
            # the key columns (layouts.direct_column; *memo*: what several of them read), a layout field's own
            # float64 column, or a ZeRO switch written straight from its level's column.
            memo: dict[str, Any] = {}
            values = {name: write(batch, memo) if write is not None else derived[source] if level is None
                      else np.equal(derived[source], level, out=np.empty(n)) for name, source, level, write in steps}
        evaluated = {name: np.full(n, value) for name, value in constants if value is not None}
        if n <= _RUNTIME_BLOCK and all(values[a].shape == (n,) and values[a].dtype is _FLOAT64 for a in varying):
            buffers, flags = self._kernel_scratch(n, reals, masks)
            for name, kernel in loud:
                evaluated[name] = kernel.into(np.empty(n), values, buffers, flags)
            if quiet:
                with np.errstate(divide="ignore", invalid="ignore"):
                    for name, kernel in quiet:
                        evaluated[name] = kernel.into(np.empty(n), values, buffers, flags)
            if every:
                return evaluated
        for name, function, shared, own in calls:
            if name not in evaluated:
                arguments = shared.copy()
                for a in own:
                    arguments[a] = values[a]
                evaluated[name] = function(**arguments)
        return evaluated

    def _combine_scratch(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The two scratch arrays of :func:`_combine` for *n* layouts, made once per length and thread (as
        :meth:`_kernel_scratch`'s: nothing a call returns is written there)."""
        key = (threading.get_ident(), -n)
        known = self._scratch.get(key)
        if known is None:
            if len(self._scratch) >= 64:
                self._scratch.clear()
            known = self._scratch[key] = ([np.empty(n), np.empty(n)], [])
        return known[0][0], known[0][1]

    def _kernel_scratch(self, n: int, reals: int, masks: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The kernels' scratch arrays for *n* layouts (*reals* float64, *masks* bool), made once per
        length and thread: the kernels write their steps there, never what a call returns (each
        term's result is its own new array), so a later call may reuse them; a thread has its own
        (a pricer shared by threads never shares a buffer between two calls at once)."""
        key = (threading.get_ident(), n)
        known = self._scratch.get(key)
        if known is None or len(known[0]) < reals or len(known[1]) < masks:
            if len(self._scratch) >= 64:
                self._scratch.clear()
            known = self._scratch[key] = ([np.empty(n) for _ in range(reals)],
                                          [np.empty(n, dtype=bool) for _ in range(masks)])
        return known

    def _stages(self, batch: LayoutBatch, terms: Terms, outputs: Sequence[str], *, wrt: str | None = None,
                only: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Every stage's *outputs*, ``(N, P_max)`` arrays, NaN past a layout's last stage (``stage_outputs``
        per pipeline shape; *wrt*: their derivatives; *only*: weigh these layer counts alone)."""
        n = len(batch)
        stage_counts = functools.partial(self._stage_counts, batch)
        pipelines = _Pipelines.of(batch, stage_counts)
        p_max = max(p for p, _ in pipelines.present.values())
        stages = {name: np.full((n, p_max), np.nan) for name in outputs}
        bases = {o.removesuffix("_recomputed") for o in outputs}
        needed = terms.arguments(bases) if wrt is None else terms.arguments((), slopes=(wrt,))
        values = self._values(batch, needed)
        for i, (p, vp) in pipelines.present.items():
            rows = np.arange(n) if pipelines.index is None else np.flatnonzero(pipelines.index == i)
            if not len(rows):
                continue
            picked = {k: (v[rows, None] if isinstance(v, np.ndarray) and v.ndim else v) for k, v in values.items()}
            counts = stage_counts(p, vp)
            if only is not None:
                counts = {k: (c if k in only else np.zeros_like(c)) for k, c in counts.items()}
            for name, value in stage_outputs(terms, picked, counts, outputs, wrt=wrt).items():
                stages[name][rows, :p] = value
        return stages


class _CallPlan(NamedTuple):
    """What :meth:`StagePricer._evaluate` keeps per shape of call (its docstring says how it is made)."""

    calls: tuple[Any, ...]  # (term, generated function, shared arguments, varying arguments)
    varying: frozenset[str]  # the arguments that vary per layout
    fields: tuple[str, ...]  # the layout fields derived per call (those no step writes directly)
    # _column_steps of varying, each with its direct writer (or None: from the derived fields)
    steps: tuple[tuple[str, str, float | None, Callable[[LayoutBatch, dict[str, Any]], np.ndarray] | None], ...] | None
    constants: tuple[tuple[str, float | None], ...]  # folded terms (None: a 0 left out of its group)
    loud: tuple[tuple[str, BoundKernel], ...]  # kernels run as they are
    quiet: tuple[tuple[str, BoundKernel], ...]  # kernels run with divide and invalid ignored
    reals: int  # scratch buffers the kernels need
    masks: int
    every: bool  # every term has a kernel


@functools.lru_cache(maxsize=256)
def _column_steps(varying: frozenset[str]) -> tuple[tuple[str, str, float | None], ...] | None:
    """How :func:`bind` makes each of the *varying* arguments from the derived fields, where every one is
    a layout field (read as it is: ``(name, name, None)``) or a ZeRO switch of one (``(name, source,
    level)``: 1.0 where the source field has the level); ``None`` when bind does more for some."""
    steps = []
    for name in sorted(varying):
        if name in LAYOUT_FIELD_NAMES:
            steps.append((name, name, None))
        elif name in ZERO_SWITCHES and ZERO_SWITCHES[name][0] in LAYOUT_FIELD_NAMES:
            steps.append((name, *ZERO_SWITCHES[name]))
        else:
            return None
    return tuple(steps)


@functools.lru_cache(maxsize=64)
def _needed(sums: _Sums) -> frozenset[str]:
    """The arguments the term groups read."""
    return frozenset(a for group in sums.names for name in group for a in _arguments(name))


@functools.lru_cache(maxsize=64)
def _calls(sums: _Sums) -> tuple[tuple[str, Callable[..., np.ndarray], tuple[str, ...]], ...]:
    """Each generated term the groups add, once: its name, its function and its arguments."""
    import generated

    names = dict.fromkeys(name for group in sums.names for name in group)
    return tuple((name, getattr(generated, name), generated.FORMULAS[name]["arguments"]) for name in names)


@functools.lru_cache(maxsize=256)
def _sources(names: frozenset[str]) -> tuple[str, ...]:
    """The fields :func:`bind` reads for the arguments *names* (layer counts are no fields)."""
    wanted = {source for name in names for source in BIND_SOURCES.get(name, (name,))}
    return tuple(sorted(wanted - set(STAGE_COUNT_NAMES)))


@functools.cache
def _arguments(name: str) -> tuple[str, ...]:
    import generated

    return generated.FORMULAS[name]["arguments"]


def _accumulate(parts: Sequence[np.ndarray]) -> np.ndarray:
    """The sum of *parts*, added into the first where it has the sum's shape (the parts are the
    caller's own fresh float64 arrays); else as :func:`_add`."""
    out = parts[0]
    if type(out) is not np.ndarray or out.dtype is not _FLOAT64 or not out.ndim:
        return _add(parts)
    for part in parts[1:]:
        if part.shape != out.shape:
            return _add(parts)
    for part in parts[1:]:
        np.add(out, part, out=out)
    return out


def _add(parts: Sequence[np.ndarray]) -> np.ndarray:
    """The sum of *parts* (a new array; the first part is not written to)."""
    out = np.array(parts[0], dtype=np.float64)
    for part in parts[1:]:
        if part.shape == out.shape or out.shape == np.broadcast_shapes(out.shape, part.shape):
            np.add(out, part, out=out)
        else:
            out = out + part
    return out


def _counts_used(stage_counts: StageCounts, pipelines: _Pipelines) -> tuple[str, ...]:
    """The count names some stage of the pipelines present holds (the others weigh nothing)."""
    used: set[str] = set()
    for p, vp in pipelines.present.values():
        counts = stage_counts(p, vp)
        used |= {name for name in STAGE_COUNT_NAMES if counts[name].any()}
    return tuple(name for name in STAGE_COUNT_NAMES if name in used)


_minimum = np.minimum.reduce  # (the ufunc's own reduction: ndarray.min adds a Python wrapper per call)


def _weighted_sum(parts: Sequence[np.ndarray], weights: Sequence[Any], out: np.ndarray, scratch: np.ndarray
                  ) -> np.ndarray | float:
    """``Σ weights[j] · parts[j]`` into *out* (weights None or 0 skipped); 0.0 when no term is left."""
    started = False
    for part, weight in zip(parts, weights):
        if weight is None or (not isinstance(weight, np.ndarray) and weight == 0):
            continue
        target = scratch if started else out
        if isinstance(weight, np.ndarray) or weight != 1:
            np.multiply(part, weight, out=target)
        elif not started:
            np.copyto(out, part)
        else:
            target = part
        if started:
            np.add(out, target, out=out)
        started = True
    return out if started else 0.0


def _combine(parts: Sequence[np.ndarray], tables: _StageTables, index: np.ndarray | None, bottleneck: np.ndarray,
             total: np.ndarray, scratch: np.ndarray, current: np.ndarray) -> None:
    """Fill *bottleneck* and *total* (the sum over stages) of M layouts from the evaluated sums.

    A table of weights becomes each layout's entry at its pipeline *index* (each table gathered
    once, and only when used). *scratch* and *current* are buffers of at least M values.
    """
    m = len(bottleneck)
    parts = [part if part.shape == (m,) else np.broadcast_to(part, (m,)) for part in parts]
    scratch, current = scratch[:m], current[:m]
    gathered: dict[int, np.ndarray] = {}

    def per_layout(weights: Sequence[Any]) -> list[Any]:
        out = []
        for w in weights:
            if isinstance(w, np.ndarray):
                if id(w) not in gathered:
                    # (every pipeline index is in the table; the method skips np.take's Python wrapper)
                    gathered[id(w)] = w.take(index, mode="clip")
                w = gathered[id(w)]
            out.append(w)
        return out

    value = _weighted_sum(parts, per_layout(tables.total), total, scratch)
    if not isinstance(value, np.ndarray):
        total.fill(value)
    # With sums that are not negative, a stage another outweighs in every sum is never the bottleneck.
    kinds = tables.front if all(_minimum(part) >= 0 for part in parts) else tables.every
    started = False
    for kind in kinds.kinds:
        stage = _weighted_sum(parts, per_layout(kind), current if started else bottleneck, scratch)
        if not started:
            if not isinstance(stage, np.ndarray):
                bottleneck.fill(stage)
            started = True
        else:
            np.maximum(bottleneck, stage, out=bottleneck)
    common = _weighted_sum(parts, per_layout(kinds.common), current, scratch)
    if not started:
        bottleneck[...] = common
    elif isinstance(common, np.ndarray):
        np.add(bottleneck, common, out=bottleneck)
