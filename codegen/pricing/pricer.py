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
3. then, block by block (``engine.STAGE_BLOCK`` layouts, so that temporaries stay in
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

**Backends.** ``backend="numpy"`` (the default) runs the passes above on the
generated NumPy terms. ``backend="numba"`` hands the ``per_stage=False`` calls
(key arrays or batches) to ``codegen.pricing.fused.FusedBackend``: the same
plan (the variant's terms, their groups, the stage tables over the pipeline
shapes, the terms' bound arguments), read through this pricer's public
:meth:`StagePricer.terms`, :meth:`StagePricer.pipeline_shapes`,
:meth:`StagePricer.plan`, :meth:`StagePricer.stage_counts` and
:meth:`StagePricer.argument_values`, evaluated by numba kernels the compiler's
``NUMBA`` backend renders. Everything else (``per_stage``, the slopes, a
vouched-for call of one block below the fused target's thresholds) stays on
the NumPy passes.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import numpy as np

from symbolic.vocabulary import BODY_COUNT_NAMES, STAGE_DIMENSIONS

from ..configs import (LAYOUT_FIELD_NAMES, LayoutBatch, ModelConfig, batch_stage_counts, check_batch,
                       derive_fields_batch, direct_column, dp_comm_level_values)
from ..runtime.inputs import InputError, flag
from .engine import (BOUND_BLOCK, STAGE_BLOCK, BoundKernel, PipelineShapes, StageTables, TermGroups, accumulate,
                     batch_blocks, bound_term, combine, counts_used, group_arguments, group_terms, stage_tables,
                     term_calls)
from .levels import score_factors
from .stages import (TTYPES, ZERO_SWITCHES, Fields, Terms, arrays_argument, batch_argument, bind, degrees_argument,
                     field_sources, model_argument, per_stage_argument, stage_outputs, terms_of, variant_of)

__all__ = ["StagePricer", "StagePrices"]

_FLOAT64 = np.dtype(np.float64)


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




class StagePricer:
    """Prices arrays of layouts of one model, vectorised, on the generated evaluators (no SymPy).

    Args:
        model: a bundled model name, a YAML path or a loaded ``ModelConfig``.
        device: hardware catalog name (the level model's node size, the original's stage scale,
            TIME scores).
        fsdp, recompute: run settings shared by every layout (``None`` keeps the model file's).
        with_recomp: price each recomputed layer's traffic again (the original's ``with_recomp``).
        ttype: "FLOP" (volumes) or "TIME" (level scores for DP, TP and CP).
        backend: ``"numpy"`` (the generated NumPy terms) or ``"numba"`` (the fused target,
            ``codegen.pricing.fused.FusedBackend``, for the ``per_stage=False`` calls: one numba kernel per
            variant; the same numbers within rounding, ``tests/test_fused_pricer.py``).

    Raises:
        ValueError: naming an unknown model, device, setting or backend.
        ImportError: ``backend="numba"`` without numba, naming the extra ``fast``.
    """

    #: Layouts per block of the pricing loop (``engine.STAGE_BLOCK``).
    block: int = STAGE_BLOCK

    def __init__(self, model: str | ModelConfig, *, device: str = "A2", fsdp: bool | None = None,
                 recompute: str | None = None, with_recomp: bool = False, ttype: str = "FLOP",
                 backend: str = "numpy"):
        import hardware

        if not isinstance(backend, str) or backend not in ("numpy", "numba"):
            raise InputError(f"backend: expected 'numpy' or 'numba', got {backend!r}")
        model = model_argument(model)
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
        self._sums: dict[Any, TermGroups] = {}
        self._weights: dict[Any, Any] = {}
        self._counts: dict[Any, Mapping[str, np.ndarray] | None] = {}
        self._counts_used: dict[Any, tuple[str, ...]] = {}
        self._pipelines: dict[Any, tuple[dict[int, tuple[int, int]], int]] = {}
        self._value_plans: dict[Any, tuple[dict[str, Any], frozenset[str], tuple[str, ...]]] = {}
        self._call_plans: dict[Any, _CallPlan] = {}
        self._last_plan: tuple[Any, ...] = (None, None, None, None)
        self._variants: dict[Any, Terms] = {}
        self._scratch: dict[tuple[int, int], tuple[list[np.ndarray], list[np.ndarray]]] = {}
        self.backend = backend
        self._fused: Any = None  # the fused target's FusedBackend, for backend="numba"
        if backend == "numba":
            from .fused import FusedBackend  # (numba's import and the kernels only for this backend)

            self._fused = FusedBackend(self)

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

        With ``backend="numba"`` and ``per_stage=False``, the fused target first tries its kernel over
        the key columns (``FusedBackend.price_keys``); where it does not take the call, as below.

        Raises:
            codegen.configs.LayoutError: naming the first invalid layout and its constraint.
        """
        arrays_argument(arrays)
        fused = self._fused
        if fused is not None and per_stage is False:
            priced = fused.price_keys(arrays, flag("validated", validated))
            if priced is not None:
                return StagePrices(bottleneck=priced[0], sum=priced[1])
        validated = flag("validated", validated)
        batch = LayoutBatch.from_arrays(self.model.layout, fsdp=self.fsdp, recompute=self.recompute,
                                        validated=validated, **arrays)
        n = len(batch)
        if validated and per_stage is False and 0 < n <= self.block:
            # A searcher's call (vouched-for layouts, one block, no stages): price_batch's own path, without
            # its checks of what this call's arguments already are.
            bottleneck, total_sum = np.empty(n), np.empty(n)
            self._price_block(self.terms(batch), batch, bottleneck, total_sum, self._combine_scratch(n))
            return StagePrices(bottleneck=bottleneck, sum=total_sum)
        return self.price_batch(batch, per_stage=per_stage, validated=validated)

    def price_batch(self, batch: LayoutBatch, *, per_stage: bool | Sequence[str] = False,
                    validated: bool = False) -> StagePrices:
        """Prices of the layouts of *batch* (``LayoutBatch.from_layouts`` for parsed layouts); as ``__call__``.

        With ``backend="numba"`` and ``per_stage=False`` the fused target prices them
        (``FusedBackend.price_batch``) after the same checks.
        """
        validated = flag("validated", validated)  # only a real bool: validated="no" must not skip the checks
        batch, per_stage = batch_argument(batch), per_stage_argument(per_stage)
        n = len(batch)
        if n == 0:
            empty = {name: np.empty((0, 0)) for name in (*STAGE_DIMENSIONS, "total")} if per_stage else None
            return StagePrices(bottleneck=np.empty(0), sum=np.empty(0), stages=empty)
        if not validated:
            check_batch(self.model, batch)
        terms = self.terms(batch)
        if self._fused is not None and per_stage is False:
            bottleneck, total_sum = self._fused.price_batch(batch, terms)
            return StagePrices(bottleneck=bottleneck, sum=total_sum)
        bottleneck, total_sum = np.empty(n), np.empty(n)
        scratch = self._combine_scratch(min(n, self.block))
        # Block by block, each step over the same layouts: every temporary is one block long and stays in cache.
        for rows, block in batch_blocks(batch, self.block):
            self._price_block(terms, block, bottleneck[rows], total_sum[rows], scratch)
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
        """Fill *bottleneck* and *total_sum* of the layouts of *block* (at most :attr:`block` of them)."""
        pipelines = self.pipeline_shapes(block)
        sums, tables = self.plan(terms, block, pipelines)
        evaluated = self._evaluate(block, sums)
        # Each term is in one group and its array is this call's own: the group's sum goes into it.
        parts = [accumulate([evaluated[name] for name in group if name in evaluated]) for group in sums.names]
        combine(parts, tables, pipelines.index, bottleneck, total_sum, *scratch)

    def stage_slopes(self, batch: LayoutBatch, degrees: Sequence[str], *, relax_p: bool = False
                     ) -> dict[str, np.ndarray]:
        """Per degree, each stage's ∂total/∂degree, ``(N, P_max)`` (NaN past a layout's last stage).

        The partial derivative of the generated terms (``symbolic.model.SLOPES``) with every derived
        field and the layer counts held. With *relax_p*, ``p`` also acts through the body-layer
        counts as shares of an even split (``∝ 1/p``): ``−(1/p) Σ_body count · term`` is added.

        Raises:
            ValueError: naming a degree with no derivative terms (see ``symbolic.sensitivity.DEGREES``).
        """
        batch, degrees, relax_p = batch_argument(batch), degrees_argument(degrees), flag("relax_p", relax_p)
        terms = self.terms(batch, degrees)
        out = {x: sum(self._stages(batch, terms, self.outputs, wrt=x).values()) for x in degrees}
        if relax_p and "p" in degrees:
            body = sum(self._stages(batch, terms, self.outputs, only=BODY_COUNT_NAMES).values())
            out["p"] = out["p"] - body / batch.p[:, None]
        return out

    def terms(self, batch: LayoutBatch, degrees: Sequence[str] = ()) -> Terms:
        """The variant's terms for the layouts of *batch* (with the derivative terms of *degrees*).

        The fields that pick the variant are the model's and the run's (the batch's shared settings), so
        one layout tells, once per set of settings.
        """
        key = (batch.settings(), tuple(degrees))
        terms = self._variants.get(key)
        if terms is None:
            probe = derive_fields_batch(self.model, batch.subset(slice(0, 1)), validated=True, compact=True)
            terms = self._variants[key] = terms_of(variant_of(Fields(probe)), degrees)
        return terms

    def pipeline_shapes(self, batch: LayoutBatch) -> PipelineShapes:
        """The pipeline shapes ``(p, vp)`` of the model up to the largest of *batch* and each layout's index
        among them (``engine.PipelineShapes.of``; the shapes kept per set of pipelines)."""
        return PipelineShapes.of(batch, functools.partial(self.stage_counts, batch), self._pipelines)

    def plan(self, terms: Terms, block: LayoutBatch, pipelines: PipelineShapes) -> tuple[TermGroups, StageTables]:
        """The plan of *terms* for layouts of the *pipelines* present (:meth:`pipeline_shapes` of *block*).

        Returns:
            The term groups (``engine.group_terms``: the terms by how the stages weigh them) and their weight
            in each kind of stage and over the stages (``engine.stage_tables``), each built once.
        """
        pipeline_key = pipelines.key  # (the batch's offset and recompute lists included)
        stage_counts = functools.partial(self.stage_counts, block)
        used = self._counts_used.get(pipeline_key)
        if used is None:
            used = self._counts_used[pipeline_key] = counts_used(stage_counts, pipelines)
        sums = self._sums.get((terms, used))
        if sums is None:
            sums = self._sums[(terms, used)] = group_terms(terms, self.outputs, used)
        tables = self._weights.get((terms, pipeline_key))
        if tables is None:
            tables = self._weights[(terms, pipeline_key)] = stage_tables(stage_counts, pipelines, sums)
        return sums, tables

    def stage_counts(self, batch: LayoutBatch, p: int, vp: int) -> Mapping[str, np.ndarray] | None:
        """The stage counts of the batch's layouts with pipeline (p, vp) (``configs.batch_stage_counts``)."""
        return batch_stage_counts(self.model, batch, p, vp, self._counts)

    def argument_values(self, batch: LayoutBatch, needed: frozenset[str] | set[str] | Sequence[str]
                        ) -> dict[str, Any]:
        """The terms' arguments *needed*, bound for the layouts of *batch*: shared ones as numbers, the rest arrays.

        The values ``stages.bind`` gives on the fields ``derive_fields_batch`` derives. Which arguments are
        one number for the whole batch, and their values, follow from the run settings and from the keys
        every layout shares (a stride-0 column and its value): per such shape of batch they are derived and
        bound once, and later calls derive and bind only the arguments that vary per layout.
        """
        needed = frozenset(needed)
        shape = (needed, batch.settings(), batch.shared_keys())
        plan = self._value_plans.get(shape)
        if plan is not None:
            shared, varying, fields = plan
            derived = derive_fields_batch(self.model, batch, names=fields, validated=True, compact=True)
            return {**shared, **bind(Fields(derived), varying, system=self.system, ttype=self.ttype,
                                     score=self._score)}
        values = bind(Fields(derive_fields_batch(self.model, batch, names=field_sources(needed), validated=True,
                                                 compact=True)),
                      needed, system=self.system, ttype=self.ttype, score=self._score)
        varying = frozenset(name for name, value in values.items() if isinstance(value, np.ndarray) and value.ndim)
        if len(self._value_plans) >= 1024:
            self._value_plans.clear()
        self._value_plans[shape] = ({name: value for name, value in values.items() if name not in varying},
                                    varying, field_sources(varying))
        return values

    def _evaluate(self, batch: LayoutBatch, sums: TermGroups) -> dict[str, np.ndarray]:
        """Each generated term the groups of *sums* add, evaluated for the layouts of *batch*.

        As :meth:`argument_values` (whose plans decide which arguments are one number for a shape of batch),
        and per such shape each term's shared arguments are bound once: a later call derives, binds
        and passes only the arguments that vary per layout. A term whose generated function has a
        kernel (``generated._runtime.Kernel``) then runs its block statements directly
        (``engine.bound_term``): its invariants computed once per shape, the arguments in place,
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
            values = self.argument_values(batch, group_arguments(sums))
            # A ZeRO switch of a level the batch's settings rule out is 0 for every layout: shared.
            levels = dp_comm_level_values(batch)
            for name, (_source, level) in ZERO_SWITCHES.items():
                if isinstance(values.get(name), np.ndarray) and level not in levels:
                    values[name] = 0.0
            varying = frozenset(name for name, value in values.items() if isinstance(value, np.ndarray) and value.ndim)
            calls = tuple((name, function, {a: values[a] for a in arguments if a not in varying},
                           tuple(a for a in arguments if a in varying)) for name, function, arguments in term_calls(sums))
            # (a term with no argument that varies is one call of the function: no kernel to run)
            kernels = [(name, bound_term(name, shared) if own else None) for name, _function, shared, own in calls]
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
            steps, fields = _column_steps(varying), field_sources(varying)
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
        if n <= BOUND_BLOCK and all(values[a].shape == (n,) and values[a].dtype is _FLOAT64 for a in varying):
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
        """The two scratch arrays of :func:`combine` for *n* layouts, made once per length and thread (as
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
        stage_counts = functools.partial(self.stage_counts, batch)
        pipelines = PipelineShapes.of(batch, stage_counts)
        p_max = max(p for p, _ in pipelines.present.values())
        stages = {name: np.full((n, p_max), np.nan) for name in outputs}
        bases = {o.removesuffix("_recomputed") for o in outputs}
        needed = terms.arguments(bases) if wrt is None else terms.arguments((), slopes=(wrt,))
        values = self.argument_values(batch, needed)
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
