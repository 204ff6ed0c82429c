"""Pricing arrays of layouts of one model at once: the searcher's entry point.

A stage's communication is linear in its layer counts (``symbolic.model.
stage_coefficients``): ``output = Σ_k count_k · coefficient_k(layout)``. For N
layouts the pricer

1. checks every layout (``layout.layout_violations``, through
   ``derive_fields_batch``) and finds what they share: the model's fields,
   the run settings' and those of the keys given as one value
   (``derive_fields_batch(compact=True)`` on one layout says which fields are
   one value for the whole batch);
2. specialises the coefficients to those shared values: each is substituted
   into the stage formulas (``symbolic.model.stage_formulas``) exactly (as the
   rational the float is), so that the branches they decide and the zero
   terms drop out, and the per-layer coefficients are the derivatives of the
   small specialised expressions by the layer counts; the ZeRO levels,
   which vary with ``d``, select their expression through exact 0/1
   indicator polynomials of ``comm_d_non_exp`` / ``comm_d_exp``; coefficients
   that every stage weighs alike (by the same layer counts) are added into
   one expression. The code generator compiles each such sum once, in memory
   (``kernels.formula_functions``);
3. then, block by block (``_BLOCK`` layouts, so that the temporaries stay in
   cache), derives only the fields those sums still read
   (``derive_fields_batch(names=…)``), evaluates each sum once per layout, and
   forms the stages from small tables over the pipeline shapes ``(p, vp)``:
   the weight of each sum in each kind of stage, gathered by each layout's
   pipeline. The sum over the stages weighs each sum by its layer counts over
   all stages; the bottleneck is the largest of the stages that no other stage
   of the pipeline outweighs in every sum (often the first stage alone), when
   the sums are not negative, else the largest of every kind of stage.

Steps 1-2 cost SymPy and compile time the first time a set of shared values
is seen and are cached; a search calling the pricer again pays the check,
a one-layout probe and step 3. Every layout gets its own arithmetic: nothing
is priced once for several layouts.

Stages beyond a layout's own ``p`` are NaN in the per-stage arrays.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import sympy

from symbolic import model as stage_model
from symbolic.ep import Routing
from symbolic.formula import Formula
from symbolic.symbols import symbol

from ..reference.adapters.fields import Fields
from ..reference.adapters.model import variant_of
from ..reference.adapters.tp import gather_switch
from ..kernels import formula_functions
from ..configs.layouts import (STAGE_COUNT_NAMES, LayoutBatch, LayoutError, derive_fields_batch, dp_comm_level_values,
                     pipeline_stage_counts)
from .levels import SCORE_FACTORS, score_factors
from ..configs.models import ModelConfig, load_model

__all__ = ["StagePricer", "StagePrices"]

_DIMS = ("dp", "tp", "ep", "cp")
_SCORE_DEGREES = ("d", "t", "cp", "p")
_LEVELS = ("comm_d_non_exp", "comm_d_exp")
#: Layouts per block of the pricing loop: its temporaries (a few float64 arrays of a block) stay in the
#: processor's cache, and the Python cost per block is spread over enough layouts.
_BLOCK = 1 << 15


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


# ----------------------------------------------------------------- step 2: specialised coefficients


def _exact(value: float) -> sympy.Rational:
    """*value* as the rational it is exactly (0.9 → 8106479329266893/2**53): SymPy then folds exactly,
    and the generated code rounds each folded constant once."""
    return sympy.Rational(value)


def _indicator(level: sympy.Symbol, value: int, values: Sequence[int]) -> sympy.Expr:
    """1 where *level* is *value*, 0 where it is another of *values*: the Lagrange basis polynomial.

    Exact in floating point for ZeRO levels ({0, L}: ``c/L`` and ``(L - c)/L``), and, unlike a
    ``Piecewise``, no masked copy per layout in the generated code.
    """
    out = sympy.Integer(1)
    for other in values:
        if other != value:
            out *= (level - other) / sympy.Integer(value - other)
    return out


def _over_levels(per_levels: Mapping[tuple[int, int], sympy.Expr], values: Sequence[Sequence[int]]) -> sympy.Expr:
    """One expression from the expressions of each ZeRO level pair ``(comm_d_non_exp, comm_d_exp)``.

    ``Σ_pairs indicator(pair) · expression(pair)``, over *values*, the levels a layout of the
    batch can have (every pair of them is in *per_levels*). Each expression is finite on every
    valid layout (parameter counts over degrees of at least 1), so an indicator of 0 removes
    it exactly. A dense layer's DP reads the non-expert level alone; then only that level's
    indicators appear.
    """
    distinct = list(dict.fromkeys(per_levels.values()))
    if len(distinct) == 1:
        return distinct[0]
    for position, name in enumerate(_LEVELS):
        by_level: dict[int, sympy.Expr] = {}
        if all(by_level.setdefault(pair[position], e) == e for pair, e in per_levels.items()):
            level = symbol(name)
            return sympy.Add(*[_indicator(level, v, values[position]) * e for v, e in by_level.items()])
    non_exp, exp = (symbol(name) for name in _LEVELS)
    return sympy.Add(*[_indicator(non_exp, a, values[0]) * _indicator(exp, b, values[1]) * e
                       for (a, b), e in per_levels.items()])


def _whole_number_values(condition: sympy.Basic) -> tuple[sympy.Symbol, range] | None:
    """``(s, values)`` when *condition* bounds one positive-integer symbol to a few whole values (``s <= k``,
    ``s < k``, ``Eq(s, k)``), else ``None``."""
    if not isinstance(condition, (sympy.Le, sympy.Lt, sympy.Eq)) or not condition.rhs.is_number:
        return None
    s = condition.lhs
    if not (isinstance(s, sympy.Symbol) and s.is_integer and s.is_positive):
        return None
    bound = int(sympy.floor(condition.rhs)) + (0 if isinstance(condition, sympy.Lt) and condition.rhs.is_integer
                                               else 1)
    values = range(max(1, bound - 1) if isinstance(condition, sympy.Eq) else 1, bound)
    return (s, values) if len(values) <= 16 else None


def _prune_pieces(expr: sympy.Expr) -> sympy.Expr:
    """*expr* with each ``Piecewise((v, s <= k), (x, True))`` whose default equals ``v`` wherever the
    condition holds replaced by its default.

    ``s`` is a positive-integer symbol (a degree), so the condition holds at ``s = 1..k`` only;
    where ``x`` takes the value ``v`` exactly at each of them (``cp - 1`` at ``cp = 1``), the two
    agree on every valid layout and the generated code saves a masked copy per layout.
    """
    def prune(piecewise: sympy.Piecewise) -> sympy.Expr:
        if len(piecewise.args) != 2 or piecewise.args[1].cond is not sympy.true:
            return piecewise
        (value, condition), (default, _) = piecewise.args
        pinned = _whole_number_values(condition)
        if pinned is None:
            return piecewise
        s, values = pinned
        if all(condition.subs(s, v) is sympy.true and default.subs(s, v) == value for v in values):
            return default
        return piecewise

    return expr.replace(lambda e: isinstance(e, sympy.Piecewise), prune)


@dataclass(frozen=True)
class _Coefficients:
    """The stage coefficients of the layouts that share one set of values, specialised to them.

    Attributes:
        by_dim: dimension → count name → the cost one layer of that count adds to its stage
            (nonzero ones only), over the fields the layouts do not share.
        slug: the model's name as an identifier, for formula names.
        unit: the coefficients' unit ("mixed", or "score" on the TIME path).
    """

    by_dim: Mapping[str, Mapping[str, sympy.Expr]]
    slug: str
    unit: str


def _formula(expr: sympy.Expr, what: str, doc: str, coefficients: _Coefficients) -> Formula:
    """A compiled-on-demand formula for *expr*; the name carries a digest of the expression, so
    two different expressions never share one."""
    digest = hashlib.sha256(sympy.srepr(expr).encode()).hexdigest()[:12]
    return Formula(name=f"model_{coefficients.slug}_{what}_{digest}", expr=expr, dimension="model",
                   algorithm=coefficients.slug, unit=coefficients.unit, doc=doc, source=stage_model.SOURCE)


@dataclass(frozen=True)
class _Compiled:
    """A compiled expression and the per-layout arguments it takes."""

    function: Callable[..., np.ndarray]
    arguments: tuple[str, ...]

    def __call__(self, values: Mapping[str, Any]) -> np.ndarray:
        return self.function(**{name: values[name] for name in self.arguments})


def _compile(formulas: Sequence[Formula]) -> list[_Compiled]:
    functions = formula_functions(list(formulas))
    return [_Compiled(functions[f.name], f.arguments) for f in formulas]


@dataclass(frozen=True)
class _Sums:
    """The fast path's compiled sums: coefficients with the same use of the layer counts, added.

    Attributes:
        usage: per sum, how many times it counts each layer of ``counts`` (its weight in a
            stage is ``usage · stage counts``).
        counts: the count names the usage vectors run over (those some stage holds).
        functions: per sum, its compiled evaluator.
    """

    usage: tuple[tuple[int, ...], ...]
    counts: tuple[str, ...]
    functions: tuple[_Compiled, ...]


def _sums(coefficients: _Coefficients, counts: tuple[str, ...]) -> _Sums:
    """Group the distinct coefficients by how the stages weigh them (their use of *counts*) and add each group."""
    usage: dict[sympy.Expr, list[int]] = {}
    for per_count in coefficients.by_dim.values():
        for count, expr in per_count.items():
            if count in counts:
                usage.setdefault(expr, [0] * len(counts))[counts.index(count)] += 1
    groups: dict[tuple[int, ...], list[sympy.Expr]] = {}
    for expr, used in usage.items():
        groups.setdefault(tuple(used), []).append(expr)
    formulas = [_formula(sympy.Add(*exprs), "stage_weighed_sum",
                         f"Sum of the per-layer stage coefficients that every stage of a {coefficients.slug} layout "
                         f"weighs by the same layer counts ({', '.join(counts)} × {list(used)}), with the values "
                         "the priced layouts share substituted.", coefficients)
                for used, exprs in groups.items()]
    return _Sums(tuple(groups), counts, tuple(_compile(formulas)))


# ----------------------------------------------------------------- step 4: pipeline tables


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


@dataclass(frozen=True)
class _Pipelines:
    """The pipeline shapes a batch can hold: each layout's index into tables over them, and the shapes.

    Attributes:
        index: per layout, ``p`` (``p·(max vp + 1) + vp`` when vp varies); ``None`` when every
            layout has the same pipeline.
        present: index → ``(p, vp)`` for every pipeline up to the batch's largest ``p`` (and
            ``vp``) that the model can run: a superset of the layouts' pipelines, found from the
            maxima alone (no count of the layouts of each).
    """

    index: np.ndarray | None
    present: dict[int, tuple[int, int]]

    @classmethod
    def of(cls, batch: LayoutBatch, stage_counts: StageCounts,
           known: dict[Any, dict[int, tuple[int, int]]] | None = None) -> _Pipelines:
        """The pipelines of *batch*; *known* keeps the shapes found for each range of ``p`` and ``vp``."""
        p, vp = batch.p, batch.vp
        single_p = p.strides == (0,)
        p_range = (int(p[0]), int(p[0]) + 1) if single_p else (1, int(p.max()) + 1)
        if vp.strides == (0,):
            index, radix, vp_range = (None if single_p else p), 0, (int(vp[0]), int(vp[0]) + 1)
        else:
            radix = int(vp.max()) + 1
            index, vp_range = p * radix + vp, (1, radix)
        key = (p_range, vp_range, single_p, radix, batch.offset, batch.offset_pipeline, batch.recompute,
               batch.recompute_pipeline)
        present = None if known is None else known.get(key)
        if present is None:
            shapes = [(pv, v) for pv in range(*p_range) for v in range(*vp_range)]
            where = {shape: (0 if index is None else shape[0] * radix + shape[1] if radix else shape[0])
                     for shape in shapes}
            present = {where[shape]: shape for shape in shapes if stage_counts(*shape) is not None}
            if known is not None:
                known[key] = present
        return cls(index, present)

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
        self._names = [(dim + "_recomputed" if with_recomp and dim != "dp" else dim) for dim in _DIMS]
        self._coefficients: dict[Any, _Coefficients] = {}
        self._sums: dict[Any, _Sums] = {}
        self._per_dim: dict[Any, dict[str, dict[str, _Compiled]]] = {}
        self._weights: dict[Any, Any] = {}
        self._counts: dict[Any, Mapping[str, np.ndarray]] = {}
        self._counts_used: dict[Any, tuple[str, ...]] = {}
        self._pipelines: dict[Any, dict[int, tuple[int, int]]] = {}

    def __call__(self, *, per_stage: bool = False, validated: bool = False, **arrays: Any) -> StagePrices:
        """Prices of the layouts given as arrays (``d, t, p, cp, ep, m, b``, …; see ``LayoutBatch.from_arrays``).

        Args:
            per_stage: also return every stage's parts and total (``StagePrices.stages``).
            validated: the caller has already kept only layouts ``layout.validate_batch``
                accepts; they are not checked again (an invalid layout then gets an unspecified
                price). By default every layout is checked.

        Raises:
            codegen.configs.layouts.LayoutError: naming the first invalid layout and its constraint.
        """
        batch = LayoutBatch.from_arrays(self.model.layout, fsdp=self.fsdp, recompute=self.recompute, **arrays)
        n = len(batch)
        if n == 0:
            empty = {name: np.empty((0, 0)) for name in (*_DIMS, "total")} if per_stage else None
            return StagePrices(bottleneck=np.empty(0), sum=np.empty(0), stages=empty)
        if not validated:
            derive_fields_batch(self.model, batch, names=())  # checks every layout; derives nothing
        shared, varying = self._shared_values(batch)
        key = (tuple(sorted(shared.items())), frozenset(varying), batch.cp_algo)
        coefficients = self._coefficients.get(key)
        if coefficients is None:
            coefficients = self._coefficients[key] = self._specialise(batch, shared)
        bottleneck, total_sum = np.empty(n), np.empty(n)
        scratch = (np.empty(min(n, _BLOCK)), np.empty(min(n, _BLOCK)))
        for start in range(0, n, _BLOCK):
            # Block by block, each step over the same layouts: every temporary is one block long and
            # stays in cache.
            rows = slice(start, start + _BLOCK)
            block = batch.subset(rows)
            pipelines = _Pipelines.of(block, functools.partial(self._stage_counts, block), self._pipelines)
            sums, tables = self._plan(key, coefficients, block, pipelines)
            values = self._values(block, {a for f in sums.functions for a in f.arguments})
            _combine([f(values) for f in sums.functions], tables, pipelines.index, bottleneck[rows], total_sum[rows],
                     *scratch)
        stages = None
        if per_stage:
            per_dim = self._per_dim.get(key)
            if per_dim is None:
                per_dim = self._per_dim[key] = self._per_dim_functions(coefficients)
            needed = {a for fs in per_dim.values() for f in fs.values() for a in f.arguments}
            stage_counts = functools.partial(self._stage_counts, batch)
            stages = _stages(n, stage_counts, _Pipelines.of(batch, stage_counts), per_dim, self._values(batch, needed))
        return StagePrices(bottleneck=bottleneck, sum=total_sum, stages=stages)

    def _plan(self, key: Any, coefficients: _Coefficients, block: LayoutBatch, pipelines: _Pipelines
              ) -> tuple[_Sums, _StageTables]:
        """The compiled sums and the weight tables for layouts of the *pipelines* present (each built once)."""
        pipeline_key = (tuple(sorted(pipelines.present.items())), block.offset, block.offset_pipeline,
                        block.recompute, block.recompute_pipeline)
        stage_counts = functools.partial(self._stage_counts, block)
        counts_used = self._counts_used.get(pipeline_key)
        if counts_used is None:
            counts_used = self._counts_used[pipeline_key] = _counts_used(stage_counts, pipelines)
        sums = self._sums.get((key, counts_used))
        if sums is None:
            sums = self._sums[(key, counts_used)] = _sums(coefficients, counts_used)
        tables = self._weights.get((key, pipeline_key))
        if tables is None:
            tables = self._weights[(key, pipeline_key)] = _weights(stage_counts, pipelines, sums)
        return sums, tables

    # -- what the layouts share

    def _shared_values(self, batch: LayoutBatch) -> tuple[dict[str, float], set[str]]:
        """The numeric fields every layout of *batch* shares (with the device's and the run's
        switches the formulas read), and the names of those that vary."""
        probe = derive_fields_batch(self.model, batch.subset(slice(0, 1)), validated=True, compact=True)
        shared = {k: v for k, v in probe.items() if isinstance(v, float)}
        varying = {k for k, v in probe.items() if isinstance(v, np.ndarray)}
        shared["level_bound_0"] = self.level_bound_0
        shared["gather"] = gather_switch(probe)
        if self.ttype == "TIME" and not varying & set(_SCORE_DEGREES):
            factors = score_factors(device=self.device, **{k: int(shared[k]) for k in _SCORE_DEGREES})
            shared.update({name: float(value) for name, value in factors.items()})
        elif self.ttype == "TIME":
            varying |= set(SCORE_FACTORS)
        return shared, varying

    def _specialise(self, batch: LayoutBatch, shared: Mapping[str, float]) -> _Coefficients:
        """The coefficients of every ZeRO level pair the batch can hold, with *shared* substituted."""
        possible = dp_comm_level_values(batch)
        levels = [[int(shared[name])] if name in shared else list(possible) for name in _LEVELS]
        # Derived fields hold no tokens_per_expert, so the routing is balanced whatever ep is (ep.routing).
        row = {**shared, "cp_algo": batch.cp_algo, "ttype": self.ttype}
        exact = {name: _exact(value) for name, value in shared.items()}
        per_pair: dict[tuple[int, int], dict[str, dict[str, sympy.Expr]]] = {}
        for pair in ((a, b) for a in levels[0] for b in levels[1]):
            variant = variant_of(Fields({**row, **dict(zip(_LEVELS, pair))}), self.device)
            if variant.routing is not Routing.BALANCED:  # pragma: no cover - see above
                raise NotImplementedError("StagePricer prices balanced expert routing only")
            formulas = stage_model.stage_formulas(variant)
            per_pair[pair] = {}
            for dim, name in zip(_DIMS, self._names):
                expr = getattr(formulas, name).expr
                shared = {s: exact[s.name] for s in expr.free_symbols if s.name in exact}
                per_pair[pair][dim] = stage_model.per_layer_costs(expr.xreplace(shared), name)
        by_dim: dict[str, dict[str, sympy.Expr]] = {}
        for dim in _DIMS:
            by_dim[dim] = {}
            for count in STAGE_COUNT_NAMES:
                expr = _over_levels({pair: per[dim].get(count, sympy.Integer(0)) for pair, per in per_pair.items()},
                                    levels)
                expr = _prune_pieces(expr)
                if expr != 0:
                    by_dim[dim][count] = expr
        slug = re.sub(r"\W", "_", self.model.name)
        return _Coefficients(by_dim, slug, "score" if self.ttype == "TIME" else "mixed")

    def _stage_counts(self, batch: LayoutBatch, p: int, vp: int) -> Mapping[str, np.ndarray] | None:
        """The stage counts of the batch's layouts with pipeline (p, vp), offset and recompute list where they
        apply; ``None`` when no layout can have that pipeline."""
        offset_applies, list_applies = batch.stage_lists_apply(p, vp)
        plan = batch.recompute if list_applies else batch.recompute.uniform()
        offset = batch.offset if offset_applies else None
        key = (p, vp, plan, offset)
        if key not in self._counts:
            try:
                self._counts[key] = pipeline_stage_counts(self.model, p, vp, recompute=plan, offset=offset)
            except LayoutError:
                self._counts[key] = None  # no valid layout has this pipeline
        return self._counts[key]

    def _per_dim_functions(self, coefficients: _Coefficients) -> dict[str, dict[str, _Compiled]]:
        """Per dimension and count, the compiled coefficient (each distinct expression compiled once)."""
        formulas = {dim: {count: _formula(expr, f"stage_{dim}_per_layer",
                                          f"The {dim} cost one layer adds to its stage, with the values the priced "
                                          "layouts share substituted.", coefficients)
                          for count, expr in per_count.items()}
                    for dim, per_count in coefficients.by_dim.items()}
        distinct = list({f.name: f for per_count in formulas.values() for f in per_count.values()}.values())
        compiled = dict(zip((f.name for f in distinct), _compile(distinct)))
        return {dim: {count: compiled[f.name] for count, f in per_count.items()} for dim, per_count in formulas.items()}

    # -- per-layout values

    def _values(self, batch: LayoutBatch, needed: set[str]) -> dict[str, Any]:
        """The per-layout arguments *needed*: derived fields (float64 arrays) and TIME score factors."""
        fields = sorted(needed - set(SCORE_FACTORS))
        values = derive_fields_batch(self.model, batch, names=fields, validated=True, compact=True)
        if needed & set(SCORE_FACTORS):
            values.update(score_factors(device=self.device, **{k: getattr(batch, k) for k in _SCORE_DEGREES}))
        return values


def _counts_used(stage_counts: StageCounts, pipelines: _Pipelines) -> tuple[str, ...]:
    """The count names some stage of the pipelines present holds (the others weigh nothing)."""
    used: set[str] = set()
    for p, vp in pipelines.present.values():
        counts = stage_counts(p, vp)
        used |= {name for name in STAGE_COUNT_NAMES if counts[name].any()}
    return tuple(name for name in STAGE_COUNT_NAMES if name in used)


def _stages(n: int, stage_counts: StageCounts, pipelines: _Pipelines,
            per_dim: Mapping[str, Mapping[str, _Compiled]], values: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Every stage's parts and total, ``(N, P_max)`` arrays, NaN past a layout's last stage."""
    p_max = max(p for p, _ in pipelines.present.values())
    stages = {name: np.full((n, p_max), np.nan) for name in (*_DIMS, "total")}
    coefficient = {dim: {count: np.broadcast_to(f(values), (n,)) for count, f in fs.items()}
                   for dim, fs in per_dim.items()}
    for i, (p, vp) in pipelines.present.items():
        rows = np.arange(n) if pipelines.index is None else np.flatnonzero(pipelines.index == i)
        if not len(rows):
            continue
        counts = stage_counts(p, vp)
        total = np.zeros((len(rows), p))
        for dim in _DIMS:
            part = np.zeros((len(rows), p))
            for count, values_k in coefficient[dim].items():
                part += values_k[rows, None] * counts[count][None, :]
            stages[dim][rows, :p] = part
            total += part
        stages["total"][rows, :p] = total
    return stages


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
                    gathered[id(w)] = np.take(w, index, mode="clip")  # every pipeline index is in the table
                w = gathered[id(w)]
            out.append(w)
        return out

    value = _weighted_sum(parts, per_layout(tables.total), total, scratch)
    if not isinstance(value, np.ndarray):
        total.fill(value)
    # With sums that are not negative, a stage another outweighs in every sum is never the bottleneck.
    kinds = tables.front if all(part.min() >= 0 for part in parts) else tables.every
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
