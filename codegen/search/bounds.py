"""The lower bounds of the search's branch and bound (docs/search.md, "Branch and bound").

The compute bound: a layout's step time without communication, compute × (1 + bubble), from linear forms
in ``m`` of its structure row's first and last stages (:func:`row_stage_parts`, :func:`row_bound_forms`,
:func:`chunk_stage_parts`), evaluated once per group of rows the forms cannot tell apart. The communication
floors: the exposed communication is at least the seconds of some of its items at one stage, shared by every
layout that agrees on what those items read (:func:`floors` says which, by level; :func:`level_floor` prices and
gathers them). Every table is cached per process; :func:`clear_caches` drops them (each search prices its own).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..pricing.chunks import Chunk, Setting, distinct_sorted
from ..pricing.engine import distinct_rows
from .spec import SearchSpec, decoded, search_context

__all__ = ["row_stage_parts", "row_bound_forms", "chunk_stage_parts", "FloorPart", "floors", "level_floor",
           "clear_caches"]


@functools.lru_cache(maxsize=4)  # the settings a walk is in (memory flat however many settings the search has)
def row_stage_parts(spec: SearchSpec, cp_algo: str, recompute: str, zero: int
                     ) -> tuple[tuple[np.ndarray, tuple[np.ndarray, ...]], ...]:
    """Per structure row, the first and last stages' FLOPs, HBM bytes and vector FLOPs as forms of ``m``, once
    per process.

    A row fixes ``b·m = global_batch / d``. The vector FLOPs depend on ``b·m`` alone (every per-micro-batch term
    ∝ b, the optimizer update none); so do the FLOPs, but the GEMMs' efficiency follows their size, a
    micro-batch's, so the FLOPs at the reference efficiency are smallest at ``m = 1`` (the largest GEMMs) and
    kept at that value here, the compute bound's (:func:`chunk_stage_parts` prices a layout at its own ``m``);
    the HBM bytes are ``m`` times a per-micro-batch amount affine in ``b`` (activations ∝ b, weights read once per micro-batch) plus the optimizer update:
    ``base + slope·m`` at fixed ``b·m``. Evaluated at ``m = 1`` and ``m = 2`` (``b`` the matching real number)
    once per group of rows that the forms cannot tell apart (:func:`_stage_groups`). Returns, for the first
    stage and then the last, ``(group, (flops, lowp flops, base, slope, vector flops))``: each row's group and the
    forms per group (a row's value of a form is ``form[group[row]]``).
    """
    space = search_context(spec).space
    ids, stages = _union_stage_parts(spec, recompute, zero)
    at = np.searchsorted(ids, space.structure_id[cp_algo])
    out = []
    for group, parts in stages:
        group = group[at]
        group.flags.writeable = False
        out.append((group, parts))
    return tuple(out)


@functools.lru_cache(maxsize=4)  # as row_stage_parts
def row_bound_forms(spec: SearchSpec, cp_algo: str, recompute: str, zero: int) -> np.ndarray:
    """Per structure row, the compute bound's forms in ``m`` (``StepTimePricer.bound_forms``), once per process."""
    space, step, _, _ = search_context(spec)
    table = space.structures[cp_algo]
    stages = row_stage_parts(spec, cp_algo, recompute, zero)
    forms = step.bound_forms(table["p"], table["vp"], stages)
    forms.flags.writeable = False
    return forms


@functools.lru_cache(maxsize=2)
def _union_rows(spec: SearchSpec) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The structure rows of every CP algorithm (their ``SearchSpace.structure_id``, ascending, and their columns):
    the compute forms read no CP algorithm (``StepTimePricer.stage_parts``), so the algorithms that share a
    structure share its parts."""
    space = search_context(spec).space
    algos = list(space.structures)
    ids, first = np.unique(np.concatenate([space.structure_id[a] for a in algos]), return_index=True)
    return ids, {key: np.concatenate([space.structures[a][key] for a in algos])[first]
                 for key in space.structures[algos[0]]}


@functools.lru_cache(maxsize=2)
def _stage_groups(spec: SearchSpec) -> list[tuple[np.ndarray, np.ndarray]]:
    """``StepTimePricer.stage_groups`` of the union's structure rows at ``m = 1`` (once per search)."""
    _, step, _, _ = search_context(spec)
    table = _union_rows(spec)[1]
    return step.stage_groups({**table, "b": spec.global_batch / table["d"], "m": 1.0})


@functools.lru_cache(maxsize=2)
def _union_stage_parts(spec: SearchSpec, recompute: str, zero: int
                       ) -> tuple[np.ndarray, tuple[tuple[np.ndarray, tuple[np.ndarray, ...]], ...]]:
    """:func:`row_stage_parts` of every structure row of any CP algorithm (:func:`_union_rows`): their ids and,
    per stage, each row's group and the forms per group."""
    _, step, _, _ = search_context(spec)
    ids, table = _union_rows(spec)
    batch = spec.global_batch / table["d"]
    one = {**table, "b": batch, "m": 1.0}
    two = {**table, "b": batch / 2, "m": 2.0}
    # Rows that differ only in what the forms do not read (the pipeline shape past the stage's layers: most
    # virtual-stage counts of a pipeline) are evaluated once (a tenth of the rows on DeepSeek-V3), and kept per
    # group; m = 2's b is m = 1's halved, a function of it, so the groups serve both.
    groups = _stage_groups(spec)
    out = []
    # (at m = 2 only the HBM bytes: the FLOPs and vector FLOPs are those of m = 1)
    for (flops, lowp, at_one, vector), (_, _, at_two, _), (reps, inverse) in zip(
            step.stage_parts(one, recompute, zero, groups=groups),
            step.stage_parts(two, recompute, zero, hbm_only=True, groups=groups), groups):
        slope = at_two - at_one
        # (a BF16 run has no low-precision FLOPs: None, as stage_parts gives them)
        parts = tuple(None if x is None else np.broadcast_to(x, reps.shape).copy()
                      for x in (flops, lowp, at_one - slope, slope, vector))
        for x in parts:
            if x is not None:
                x.flags.writeable = False
        out.append((inverse, parts))
    return ids, tuple(out)


#: The layout keys a structure's base row and the micro-batch size fix (``d``, ``m`` follow from them).
_BASE_KEYS = frozenset({"t", "cp", "p", "vp", "d", "b", "m"})
#: A floor is lowered by this relative amount: the items' seconds summed in another order than the time
#: family's own total may round up by a few units in the last place (far below this).
_FLOOR_SLACK = 1e-9


@dataclass(frozen=True)
class FloorPart:
    """Items of the communication floor that share their table: what their seconds per stage follow from."""

    items: tuple[str, ...]
    by_row: bool  # the structure row (ep, etp too); else the base row (t, cp, p, vp, d)
    by_b: bool  # and the micro-batch size
    by_zero: bool  # one table per ZeRO level (always one per recompute mode)
    dims: tuple[str, ...] = ()  # the items are these dimensions' every item (priced without every stage)
    by_algo: bool = False  # one table per CP algorithm (an item reads it: CP is ring send/recvs or all-to-alls)


@functools.lru_cache(maxsize=8)
def floors(spec: SearchSpec) -> tuple[tuple[FloorPart, ...], ...]:
    """The levels of the communication floor of *spec*, each a tuple of parts (none without the time family).

    ``step_time.time_item_keys`` says what each item's seconds per stage follow from; an item that reads a
    ZeRO level is left out (every table is shared by the ZeRO levels; the tables are per recompute mode, and
    per CP algorithm where an item reads it: the CP items, ring send/recvs or Ulysses all-to-alls), and so is an
    item of a dimension the run overlaps with compute (``spec.overlap``: its seconds may be hidden,
    ``codegen.pricing.exposure``). Level 1:
    the items that read the base row ``(t, cp, p, vp)`` and ``b`` alone (tensor-, context-, pipeline-parallel
    on DeepSeek-V3), keyed by the base row and ``b``: shared by every ``ep`` and ``etp`` too. Level 2: every
    item left (the expert all-to-all too), keyed by the whole structure row and ``b``; only when a key is shared
    by several layouts of one structure row and ``b``: several ZeRO levels, several CP algorithms for tables
    that do not depend on it, or recompute modes (with one of each a key would be one layout's, priced as
    dearly as the layout). A part whose items are every item of some dimensions is priced at the bottleneck
    stage (``by_dimension``); another at every stage.
    """
    _, step, _, _ = search_context(spec)
    keys = getattr(step.comm, "item_keys", None) if step is not None else None
    if not keys:
        return ()
    every = dict(keys)
    # An item of a dimension the run overlaps with compute may be hidden (codegen.pricing.exposure): no floor.
    keys = {item: needs for item, needs in keys.items()
            if "zero" not in needs and item.split(".")[0] not in spec.overlap}

    def by_algo(items: tuple[str, ...]) -> bool:
        return any("cp_algo" in keys[item] for item in items)

    def whole(items: tuple[str, ...]) -> tuple[str, ...]:
        """The dimensions *items* are every item of (their seconds are ``by_dimension``'s), or ()."""
        dims = tuple(dict.fromkeys(item.split(".")[0] for item in items))
        return dims if {i for i in every if i.split(".")[0] in dims} == set(items) else ()

    levels = []
    one = tuple(item for item, needs in keys.items() if needs - {"recompute", "cp_algo"} <= _BASE_KEYS)
    if one:
        levels.append((FloorPart(one, False, True, False, whole(one), by_algo(one)),))
    two = tuple(keys)
    shared = (len(spec.zero_levels) > 1  # else a level-2 key is one layout's
              or (len(spec.cp_algos or ()) > 1 and not by_algo(two))
              or (len(spec.recompute) > 1 and _recompute_free(spec)))
    if shared and set(two) - set(one):
        levels.append((FloorPart(two, True, True, False, whole(two), by_algo(two)),))
    return tuple(levels)


@functools.lru_cache(maxsize=8)
def _recompute_free(spec: SearchSpec) -> bool:
    """Whether the floors' items read the recompute mode through nothing: no item's form reads a field of it
    (``time_item_keys`` names ``recompute`` only for the stage's layer counts) and every pipeline shape of the
    space holds the same layers per stage under each of the spec's recompute modes, counted as ``TimePricer``
    counts them (``pipeline_stage_counts`` with the plan and offset that apply: body, MTP recomputed or not).
    Then the floors' tables are shared by the recompute modes."""
    from ..configs import pipeline_stage_counts, stage_layers

    space, step, _, _ = search_context(spec)
    keys = getattr(step.comm, "item_keys", None) if step is not None else None
    if not keys:
        return False
    algo = space.settings[0].cp_algo
    table = space.structures[algo]
    if not len(table["p"]):
        return True
    # The pipeline shapes present, as one code per row (a 1-D unique is far cheaper than unique rows).
    radix = int(table["vp"].max()) + 1
    shapes = [divmod(code, radix) for code in distinct_sorted(table["p"] * radix + table["vp"]).tolist()]
    one = {key: column[:1] for key, column in table.items()}
    one.update(b=space.global_batch // one["d"], m=np.ones(1, np.int64))
    batches = [Chunk(Setting(mode, spec.zero_levels[0], algo), one, np.zeros(1, np.int64), spec.model).batch
               for mode in spec.recompute]  # the run settings, the same for every layout of a batch
    for p, vp in shapes:
        seen = None
        for batch in batches:
            plan, offset = batch.stage_lists(p, vp)
            layers = stage_layers(pipeline_stage_counts(spec.model, p, vp, recompute=plan, offset=offset))
            if seen is not None and not np.array_equal(layers, seen):
                return False
            seen = layers
    return True


@functools.lru_cache(maxsize=128)
def _floor_table(spec: SearchSpec, part: FloorPart, zero: int | None, recompute: str | None,
                 algo: str | None = None) -> tuple[np.ndarray, ...]:
    """A part's seconds per key, lowered by ``_FLOOR_SLACK``, NaN where not priced yet: (first stage, last stage,
    largest stage); for a part of whole dimensions the bottleneck stage's in all three (one float32 array,
    rounded down). One table per *zero*, *recompute* and *algo* (the cache's key; None where the part's seconds
    do not depend on it)."""
    space = search_context(spec).space
    rows = space.structure_count if part.by_row else len(space.base["t"])
    size = rows * (len(space.b) if part.by_b else 1)
    if part.dims:  # one stage's seconds (the bottleneck's): first, last and largest alike; float32 (rounded down)
        one = np.full(size, np.nan, dtype=np.float32)
        return one, one, one
    return tuple(np.full(size, np.nan) for _ in range(3))


def level_floor(spec: SearchSpec, chunk: Chunk, level: int, need: np.ndarray) -> np.ndarray:
    """The *level*'s floor of each layout of *chunk*, pricing it where *need* and not known (0 elsewhere).

    The exposed communication of a layout is its bottleneck stage's seconds, the largest stage total
    (``exposed_comm``; full recompute adds more), and every item's seconds are >= 0, so it is at least
    the sum of any items' seconds at any one stage. Layouts that agree on what a part's items follow
    from (``floors``) have the same seconds for them at every stage: they are priced once on one of
    them and kept. A part of whole dimensions: their seconds at the stage with the most seconds of the
    level's dimensions, those alone priced (``TimePricer.price_batch(..., dimensions=…)``'s ``by_dimension``),
    at most the exposed communication of every layout sharing them.
    Otherwise (every stage priced): the largest of each part's largest stage, the sum of the parts'
    first stages and that of their last.
    """
    space, step, _, _ = search_context(spec)
    setting = chunk.setting
    algo = setting.cp_algo
    parts = floors(spec)[level]
    tables, keys = [], []
    recompute = None if _recompute_free(spec) else setting.recompute
    for part in parts:
        tables.append(_floor_table(spec, part, setting.zero if part.by_zero else None, recompute,
                                   algo if part.by_algo else None))
        key = np.take((space.structure_id if part.by_row else space.structure_base)[algo], chunk.row)
        if part.by_b:
            key = key * len(space.b) + chunk.bpos
        keys.append(key)
    largest = [np.take(table[2], key) for table, key in zip(tables, keys)]
    gaps = [need & np.isnan(value) for value in largest]
    if any(gap.any() for gap in gaps):
        reps = distinct_sorted(np.concatenate([np.flatnonzero(gap)[np.unique(key[gap], return_index=True)[1]]
                                               for gap, key in zip(gaps, keys) if gap.any()]))
        sub = decoded(spec, chunk, reps)
        if all(part.dims for part in parts):  # by dimension, a stage's seconds: those dimensions' alone priced
            by_dimension = step.comm(sub, tuple(dict.fromkeys(d for part in parts for d in part.dims)))
            for part, table, key in zip(parts, tables, keys):
                value = np.maximum(sum(np.asarray(by_dimension[d], dtype=np.float64) for d in part.dims), 0.0)
                value = value * (1 - _FLOOR_SLACK)
                low = value.astype(np.float32)
                table[2][key[reps]] = np.where(low > value, np.nextafter(low, np.float32(0)), low)  # rounded down
            return _gather_floor(parts, tables, keys, need)
        stages = step.comm.stage_seconds(sub)
        last = sub.values["p"] - 1
        for part, table, key in zip(parts, tables, keys):
            total = sum(np.asarray(stages[item]) for item in part.items)
            with np.errstate(invalid="ignore"):
                top_stage = np.max(np.where(np.isnan(total), -np.inf, total), axis=1)
            at = key[reps]
            for column, value in zip(table, (total[:, 0], total[np.arange(len(reps)), last], top_stage)):
                column[at] = np.maximum(value, 0.0) * (1 - _FLOOR_SLACK)
    return _gather_floor(parts, tables, keys, need)


def _gather_floor(parts: tuple[FloorPart, ...], tables: list[tuple[np.ndarray, ...]], keys: list[np.ndarray],
                  need: np.ndarray) -> np.ndarray:
    """The floor of each layout from its parts' tables at its keys (0 where not *need*)."""
    largest = [np.take(table[2], key).astype(np.float64, copy=False) for table, key in zip(tables, keys)]
    floor = largest[0]
    for value in largest[1:]:
        floor = np.fmax(floor, value)
    if len(parts) > 1:
        for column in (0, 1):
            floor = np.fmax(floor, sum(np.take(table[column], key) for table, key in zip(tables, keys)))
    return np.where(need, floor, 0.0)


def chunk_stage_parts(spec: SearchSpec, chunk: Chunk, rows: tuple[tuple[np.ndarray, tuple[np.ndarray, ...]], ...]
                 ) -> list[tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]]:
    """The chunk's layouts' (FLOPs, low-precision FLOPs, HBM bytes, vector FLOPs) of the first and last stage, from
    their structure rows' forms (:func:`row_stage_parts`).

    The HBM bytes and vector FLOPs come from the rows' forms in ``m``. The FLOPs are the GEMMs' at the reference
    efficiency (``StepTimePricer``'s compute parts): each GEMM's size is a micro-batch's, ``∝ b = b·m / m``, so they
    are evaluated at the layout's own ``m``, once per distinct (row group, ``m``) of the chunk (the rows' values at
    ``m = 1`` are the smallest, the compute bound's).
    """
    m = chunk.values["m"]
    step = search_context(spec).step
    keys = [group[chunk.row] for group, _ in rows]
    groups = [distinct_rows([g, m]) for g in keys]
    own = step.stage_parts(chunk.values, chunk.setting.recompute, chunk.setting.zero, groups=groups, flops_only=True)
    out = []
    for g, (_, inverse), (flops, lowp, _, _), (_, (_, _, base, slope, vector)) in zip(keys, groups, own, rows):
        out.append((np.take(flops, inverse), None if lowp is None else np.take(lowp, inverse),
                    base[g] + slope[g] * m, vector[g]))
    return out


def clear_caches() -> None:
    """Drop the floors' tables and the rows' compute parts: the search's own work, priced again by every search
    (a second search of the same spec is timed as the first), not kept from an earlier one."""
    for cache in (_floor_table, row_stage_parts, row_bound_forms, _union_stage_parts, _union_rows, _stage_groups,
                  _recompute_free):
        cache.cache_clear()
