"""Rank every valid layout of a model on N devices: in process, or as dask.array blocks on a cluster.

The grid of :class:`codegen.search.space.SearchSpace` is walked in chunks of grid indices;
each chunk's valid layouts are priced (:func:`price_chunk`) and reduced to its best ``top`` rows
(ascending objective, ties by grid index, so the ranking is total and the same in every path).
Merging two reductions keeps the best ``top`` of both: a tree reduction over the chunks gives the
global top K, and only those rows leave a worker.

The Dask path (:func:`search` with ``engine="dask"``) expresses the same walk as the blocks of
``dask.array.arange(space.size, chunks=chunk)``: one task per block prices its indices, then
pairwise merge tasks reduce them in a tree. ``scheduler=None`` runs the local threaded scheduler;
``scheduler="tcp://HOST:PORT"`` connects a ``dask.distributed.Client`` and runs the identical graph
there. dask is an optional extra (``pip install symcost[search]``).

Public API::

    OBJECTIVES
    SearchSpec(model, devices, global_batch, system, objective="step-time", ...)
    price_chunk(spec, chunk) -> dict[str, ndarray]      # one chunk's table: compute, bubble (comm, memory not yet)
    chunk_best(spec, chunk, top, sink=None) -> dict     # its best rows, comm and memory priced where needed
                                                        # (branch and bound on floors: docs/search.md)
    reduce_top(table, top) -> dict;  merge_top(a, b, top) -> dict
    search(spec, *, top=10, chunk=1 << 18, engine="numpy", scheduler=None, progress=None, sink=None)
        -> SearchResult(table, layouts, grid, interrupted, seconds)
"""

from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from ..configs.models import ModelConfig
from ..pricing.chunks import DEGREE_KEYS, RECOMPUTE_MODES, Chunk, distinct_sorted
from ..pricing.step_time import exposed_comm
from .space import SearchSpace

__all__ = ["OBJECTIVES", "SearchSpec", "SearchResult", "price_chunk", "chunk_best", "pareto_front", "reduce_top", "merge_top", "search",
           "COLUMNS"]

#: Objectives: the step time (compute + bubble + exposed communication), the communication time alone
#: (needs the time family, codegen.pricing.time), the original's cost (the largest stage total of
#: StagePricer, the original's units).
OBJECTIVES = ("step-time", "comm-time", "original")

#: Setting columns of a result table, coded as small integers; their labels are in SearchResult.labels.
SETTING_COLUMNS = ("recompute", "zero", "cp_algo")


@dataclass(frozen=True)
class SearchSpec:
    """Everything a worker needs to rebuild the search space and its pricers (picklable).

    Attributes mirror :class:`SearchSpace` and the pricers: *system* is a hardware catalog name;
    *original_device* the catalog device of the original's cost (``--objective original``).
    *memory*: price memory per rank (``codegen.pricing.memory.MemoryPricer``) and drop the layouts that do not
    fit, unless *keep_infeasible* (then they are ranked too, ``fits`` = 0).
    """

    model: ModelConfig
    devices: int
    global_batch: int
    system: str
    objective: str = "step-time"
    fix: tuple[tuple[str, int], ...] = ()
    maximum: tuple[tuple[str, int], ...] = ()
    recompute: tuple[str, ...] = RECOMPUTE_MODES
    zero_levels: tuple[int, ...] = (1,)
    cp_algos: tuple[str, ...] | None = None
    tp_cross_node: bool = False
    original_device: str | None = None
    memory: bool = True
    keep_infeasible: bool = False

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"--objective: one of {', '.join(OBJECTIVES)}, got {self.objective!r}")


@functools.lru_cache(maxsize=8)
def _context(spec: SearchSpec) -> tuple[SearchSpace, Any, Any, Any]:
    """(space, step-time pricer, original pricer, memory pricer) of *spec*, built once per process (each worker)."""
    import hardware

    from ..pricing.step_time import StepTimePricer, time_family_comm

    system = hardware.load(spec.system)
    space = SearchSpace(spec.model, spec.devices, spec.global_batch, fix=dict(spec.fix), maximum=dict(spec.maximum),
                        recompute=spec.recompute, zero_levels=spec.zero_levels, cp_algos=spec.cp_algos,
                        devices_per_node=system.devices_per_node, tp_cross_node=spec.tp_cross_node)
    step = None
    original = None
    if spec.objective == "original":
        from ..pricing.pricer import StagePricer

        original = StagePricer(spec.model, device=spec.original_device or spec.system)
    else:
        comm = time_family_comm(spec.model, spec.system)
        if spec.objective == "comm-time" and comm is None:
            raise ValueError("--objective comm-time: needs the time family (codegen.pricing.time), not in this build")
        step = StepTimePricer(spec.model, system=system, comm=comm)
    memory = None
    if spec.memory:
        from ..pricing.memory import MemoryPricer

        # The NumPy evaluators: the same numbers as the fused (numba) ones, without numba's import and kernel
        # load (about a second in a cold process), and as fast on the few rows a top-K search prices.
        memory = MemoryPricer(spec.model, system=spec.system, backend="numpy")
    return space, step, original, memory


@functools.lru_cache(maxsize=4)  # the settings a walk is in (memory flat however many settings the search has)
def _row_stage_parts(spec: SearchSpec, cp_algo: str, recompute: str, zero: int
                     ) -> tuple[tuple[np.ndarray, tuple[np.ndarray, ...]], ...]:
    """Per structure row, the first and last stages' FLOPs, HBM bytes and vector FLOPs as forms of ``m``, once
    per process.

    A row fixes ``b·m = global_batch / d``. The FLOPs and the vector FLOPs depend on ``b·m`` alone (every
    per-micro-batch term ∝ b, the optimizer update none); the HBM bytes are ``m`` times a per-micro-batch
    amount affine in ``b`` (activations ∝ b, weights read once per micro-batch) plus the optimizer update:
    ``base + slope·m`` at fixed ``b·m``. Evaluated at ``m = 1`` and ``m = 2`` (``b`` the matching real number)
    once per group of rows that the forms cannot tell apart (:func:`_stage_groups`). Returns, for the first
    stage and then the last, ``(group, (flops, base, slope, vector flops))``: each row's group and the four
    forms per group (a row's value of a form is ``form[group[row]]``).
    """
    space = _context(spec)[0]
    ids, stages = _union_stage_parts(spec, recompute, zero)
    at = np.searchsorted(ids, space.structure_id[cp_algo])
    out = []
    for group, parts in stages:
        group = group[at]
        group.flags.writeable = False
        out.append((group, parts))
    return tuple(out)


@functools.lru_cache(maxsize=4)  # as _row_stage_parts
def _row_bound_forms(spec: SearchSpec, cp_algo: str, recompute: str, zero: int) -> np.ndarray:
    """Per structure row, the compute bound's forms in ``m`` (``StepTimePricer.bound_forms``), once per process."""
    space, step, _, _ = _context(spec)
    table = space.structures[cp_algo]
    stages = _row_stage_parts(spec, cp_algo, recompute, zero)
    forms = step.bound_forms(table["p"], table["vp"], stages)
    forms.flags.writeable = False
    return forms


@functools.lru_cache(maxsize=2)
def _union_rows(spec: SearchSpec) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The structure rows of every CP algorithm (their ``SearchSpace.structure_id``, ascending, and their columns):
    the compute forms read no CP algorithm (``StepTimePricer.stage_parts``), so the algorithms that share a
    structure share its parts."""
    space = _context(spec)[0]
    algos = list(space.structures)
    ids, first = np.unique(np.concatenate([space.structure_id[a] for a in algos]), return_index=True)
    return ids, {key: np.concatenate([space.structures[a][key] for a in algos])[first]
                 for key in space.structures[algos[0]]}


@functools.lru_cache(maxsize=2)
def _stage_groups(spec: SearchSpec) -> list[tuple[np.ndarray, np.ndarray]]:
    """``StepTimePricer.stage_groups`` of the union's structure rows at ``m = 1`` (once per search)."""
    _, step, _, _ = _context(spec)
    table = _union_rows(spec)[1]
    return step.stage_groups({**table, "b": spec.global_batch / table["d"], "m": 1.0})


@functools.lru_cache(maxsize=2)
def _union_stage_parts(spec: SearchSpec, recompute: str, zero: int
                       ) -> tuple[np.ndarray, tuple[tuple[np.ndarray, tuple[np.ndarray, ...]], ...]]:
    """:func:`_row_stage_parts` of every structure row of any CP algorithm (:func:`_union_rows`): their ids and,
    per stage, each row's group and the forms per group."""
    _, step, _, _ = _context(spec)
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
    for (flops, at_one, vector), (_, at_two, _), (reps, inverse) in zip(
            step.stage_parts(one, recompute, zero, groups=groups),
            step.stage_parts(two, recompute, zero, hbm_only=True, groups=groups), groups):
        slope = at_two - at_one
        parts = tuple(np.broadcast_to(x, reps.shape).copy() for x in (flops, at_one - slope, slope, vector))
        for x in parts:
            x.flags.writeable = False
        out.append((inverse, parts))
    return ids, tuple(out)


#: The layout keys a structure's base row and the micro-batch size fix (``d``, ``m`` follow from them).
_BASE_KEYS = frozenset({"t", "cp", "p", "vp", "d", "b", "m"})
#: A floor is lowered by this relative amount: the items' seconds summed in another order than the time
#: family's own total may round up by a few units in the last place (far below this).
_FLOOR_SLACK = 1e-9


@dataclass(frozen=True)
class _Part:
    """Items of the communication floor that share their table: what their seconds per stage follow from."""

    items: tuple[str, ...]
    by_row: bool  # the structure row (ep, etp too); else the base row (t, cp, p, vp, d)
    by_b: bool  # and the micro-batch size
    by_zero: bool  # one table per ZeRO level (always one per recompute mode)
    dims: tuple[str, ...] = ()  # the items are these dimensions' every item (priced without every stage)
    by_algo: bool = False  # one table per CP algorithm (an item reads it: CP is ring send/recvs or all-to-alls)


@functools.lru_cache(maxsize=8)
def _floors(spec: SearchSpec) -> tuple[tuple[_Part, ...], ...]:
    """The levels of the communication floor of *spec*, each a tuple of parts (none without the time family).

    ``step_time.time_item_keys`` says what each item's seconds per stage follow from; an item that reads a
    ZeRO level is left out (every table is shared by the ZeRO levels; the tables are per recompute mode, and
    per CP algorithm where an item reads it: the CP items, ring send/recvs or Ulysses all-to-alls). Level 1:
    the items that read the base row ``(t, cp, p, vp)`` and ``b`` alone (tensor-, context-, pipeline-parallel
    on DeepSeek-V3), keyed by the base row and ``b``: shared by every ``ep`` and ``etp`` too. Level 2: every
    item left (the expert all-to-all too), keyed by the whole structure row and ``b``; only when a key is shared
    by several layouts of one structure row and ``b``: several ZeRO levels, several CP algorithms for tables
    that do not depend on it, or recompute modes (with one of each a key would be one layout's, priced as
    dearly as the layout). A part whose items are every item of some dimensions is priced at the bottleneck
    stage (``by_dimension``); another at every stage.
    """
    _, step, _, _ = _context(spec)
    keys = getattr(step.comm, "item_keys", None) if step is not None else None
    if not keys:
        return ()
    every = dict(keys)
    keys = {item: needs for item, needs in keys.items() if "zero" not in needs}

    def by_algo(items: tuple[str, ...]) -> bool:
        return any("cp_algo" in keys[item] for item in items)

    def whole(items: tuple[str, ...]) -> tuple[str, ...]:
        """The dimensions *items* are every item of (their seconds are ``by_dimension``'s), or ()."""
        dims = tuple(dict.fromkeys(item.split(".")[0] for item in items))
        return dims if {i for i in every if i.split(".")[0] in dims} == set(items) else ()

    levels = []
    one = tuple(item for item, needs in keys.items() if needs - {"recompute", "cp_algo"} <= _BASE_KEYS)
    if one:
        levels.append((_Part(one, False, True, False, whole(one), by_algo(one)),))
    two = tuple(keys)
    shared = (len(spec.zero_levels) > 1  # else a level-2 key is one layout's
              or (len(spec.cp_algos or ()) > 1 and not by_algo(two))
              or (len(spec.recompute) > 1 and _recompute_free(spec)))
    if shared and set(two) - set(one):
        levels.append((_Part(two, True, True, False, whole(two), by_algo(two)),))
    return tuple(levels)


@functools.lru_cache(maxsize=8)
def _recompute_free(spec: SearchSpec) -> bool:
    """Whether the floors' items read the recompute mode through nothing: no item's form reads a field of it
    (``time_item_keys`` names ``recompute`` only for the stage's layer counts) and every pipeline shape of the
    space holds the same layers per stage under each of the spec's recompute modes, counted as ``TimePricer``
    counts them (``pipeline_stage_counts`` with the plan and offset that apply: body, MTP recomputed or not).
    Then the floors' tables are shared by the recompute modes."""
    from ..configs.layouts import pipeline_stage_counts, stage_layers

    space, step, _, _ = _context(spec)
    keys = getattr(step.comm, "item_keys", None) if step is not None else None
    if not keys:
        return False
    algo = space.settings[0].cp_algo
    table = space.structures[algo]
    if not len(table["p"]):
        return True
    from ..pricing.chunks import Setting

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
def _floor_table(spec: SearchSpec, part: _Part, zero: int | None, recompute: str | None,
                 algo: str | None = None) -> tuple[np.ndarray, ...]:
    """A part's seconds per key, lowered by ``_FLOOR_SLACK``, NaN where not priced yet: (first stage, last stage,
    largest stage); for a part of whole dimensions the bottleneck stage's in all three (one float32 array,
    rounded down). One table per *zero*, *recompute* and *algo* (the cache's key; None where the part's seconds
    do not depend on it)."""
    space = _context(spec)[0]
    rows = space.structure_count if part.by_row else len(space.base["t"])
    size = rows * (len(space.b) if part.by_b else 1)
    if part.dims:  # one stage's seconds (the bottleneck's): first, last and largest alike; float32 (rounded down)
        one = np.full(size, np.nan, dtype=np.float32)
        return one, one, one
    return tuple(np.full(size, np.nan) for _ in range(3))


def _level_floor(spec: SearchSpec, chunk: Chunk, level: int, need: np.ndarray) -> np.ndarray:
    """The *level*'s floor of each layout of *chunk*, pricing it where *need* and not known (0 elsewhere).

    The exposed communication of a layout is its bottleneck stage's seconds, the largest stage total
    (``exposed_comm``; full recompute adds more), and every item's seconds are >= 0, so it is at least
    the sum of any items' seconds at any one stage. Layouts that agree on what a part's items follow
    from (``_floors``) have the same seconds for them at every stage: they are priced once on one of
    them and kept. A part of whole dimensions: their seconds at the stage with the most seconds of the
    level's dimensions, those alone priced (``TimePricer.price_batch(..., dimensions=…)``'s ``by_dimension``),
    at most the exposed communication of every layout sharing them.
    Otherwise (every stage priced): the largest of each part's largest stage, the sum of the parts'
    first stages and that of their last.
    """
    space, step, _, _ = _context(spec)
    setting = chunk.setting
    algo = setting.cp_algo
    parts = _floors(spec)[level]
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
        sub = _full(spec, chunk, reps)
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


def _gather_floor(parts, tables, keys, need: np.ndarray) -> np.ndarray:
    largest = [np.take(table[2], key).astype(np.float64, copy=False) for table, key in zip(tables, keys)]
    floor = largest[0]
    for value in largest[1:]:
        floor = np.fmax(floor, value)
    if len(parts) > 1:
        for column in (0, 1):
            floor = np.fmax(floor, sum(np.take(table[column], key) for table, key in zip(tables, keys)))
    return np.where(need, floor, 0.0)


def _stage_parts(spec: SearchSpec, chunk: Chunk, rows: tuple[tuple[np.ndarray, tuple[np.ndarray, ...]], ...]
                 ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The chunk's layouts' (FLOPs, HBM bytes, vector FLOPs) of the first and last stage, from their structure
    rows' forms (:func:`_row_stage_parts`)."""
    m = chunk.values["m"]
    out = []
    for group, (flops, base, slope, vector) in rows:
        g = group[chunk.row]
        out.append((flops[g], base[g] + slope[g] * m, vector[g]))
    return out


#: Columns of a result table besides the degrees and the settings.
COLUMNS = ("index", *DEGREE_KEYS, *SETTING_COLUMNS, "objective", "step_time_s", "compute_s", "bubble_s", "comm_s",
           "stage_flops", "original_cost", "memory_peak_bytes", "headroom_bytes", "fits")
_FLOAT_COLUMNS = ("objective", "step_time_s", "compute_s", "bubble_s", "comm_s", "stage_flops", "original_cost",
                  "memory_peak_bytes", "headroom_bytes")


def _empty() -> dict[str, np.ndarray]:
    return {name: np.empty(0, dtype=np.float64 if name in _FLOAT_COLUMNS else np.int64) for name in COLUMNS}


def price_chunk(spec: SearchSpec, chunk: Chunk) -> dict[str, np.ndarray]:
    """The table of one chunk: grid index, degrees, setting codes, the objective and its parts."""
    space, step, original, _ = _context(spec)
    n = len(chunk)
    setting = chunk.setting
    table: dict[str, np.ndarray] = {"index": chunk.index}
    for key in DEGREE_KEYS:
        table[key] = chunk.values[key]
    table["recompute"] = np.full(n, RECOMPUTE_MODES.index(setting.recompute), np.int64)
    table["zero"] = np.full(n, setting.zero, np.int64)
    algos = [s.cp_algo for s in space.settings]
    table["cp_algo"] = np.full(n, list(dict.fromkeys(algos)).index(setting.cp_algo), np.int64)
    nan = np.full(n, np.nan)
    if step is not None:
        stages = None
        if chunk.row is not None:
            stages = _stage_parts(spec, chunk, _row_stage_parts(spec, setting.cp_algo, setting.recompute, setting.zero))
        parts = step.price(chunk.values, setting.recompute, None, zero=setting.zero, parts=stages)  # comm 0: a bound
        for key in ("step_time_s", "compute_s", "bubble_s", "comm_s", "stage_flops"):
            table[key] = parts[key]
        table["original_cost"] = nan
        table["objective"] = parts["comm_s"] if spec.objective == "comm-time" else parts["step_time_s"]
    else:
        batch = chunk.batch
        prices = original.price_batch(batch, validated=True)
        for key in ("step_time_s", "compute_s", "bubble_s", "comm_s", "stage_flops"):
            table[key] = nan
        table["original_cost"] = prices.bottleneck
        table["objective"] = prices.bottleneck
    table["memory_peak_bytes"] = nan
    table["headroom_bytes"] = nan
    table["fits"] = np.full(n, -1, np.int64)  # -1: not evaluated
    return table


def _complete(spec: SearchSpec, chunk: Chunk, table: dict[str, np.ndarray], rows: np.ndarray,
              memory_priced: Any = None, bound: float = np.inf) -> dict[str, np.ndarray]:
    """The *rows* (ascending) of *table* with their exposed communication (when the time family is present)
    and memory per rank, headroom and fits (when memory is priced) filled in, the objective updated.

    *memory_priced*: the rows' memory when the caller has it (``peak_total``, ``headroom``, ``fits``).
    *bound*: rows whose exact objective exceeds it are left out (they cannot enter the top K).
    """
    _, step, _, memory = _context(spec)
    sub = _subchunk(spec, chunk, rows)
    filled: dict[str, np.ndarray] = {}
    if step is not None and step.comm is not None:
        comm = exposed_comm(step.comm(sub), chunk.setting.recompute, chunk.setting.cp_algo)
        comm = np.broadcast_to(comm, rows.shape).astype(np.float64)
        filled["comm_s"] = comm
        filled["step_time_s"] = step.step_time(table["compute_s"][rows], sub.values, comm)
        filled["objective"] = comm if spec.objective == "comm-time" else filled["step_time_s"]
    if memory is not None:
        # The batch carries the chunk's recompute mode and ZeRO flags (Setting.batch_kwargs).
        got = memory_priced if memory_priced is not None else memory.price_batch(sub.batch, validated=True)
        filled["memory_peak_bytes"] = np.asarray(got.peak_total)
        filled["headroom_bytes"] = np.asarray(got.headroom)
        filled["fits"] = np.asarray(got.fits).astype(np.int64)
    keep = None
    if np.isfinite(bound):
        objective = filled.get("objective", table["objective"][rows])
        keep = ~(objective > bound)
        rows = rows[keep]
    out = {k: v[rows] for k, v in table.items() if k not in filled}
    for k, v in filled.items():
        out[k] = v if keep is None else v[keep]
    return {k: out[k] for k in table}


#: The keys a chunk of the bounded walk decodes for every layout (the compute bound's: its structure row and ``m``
#: are always decoded); the others are decoded for the layouts priced further (:func:`_full`).
_LEAN = ("m",)


def _bounded(spec: SearchSpec, sink: Callable[[dict], None] | None) -> bool:
    """Whether the walk is :func:`_chunk_best_bounded` (communication floors; lean chunks)."""
    _, step, _, _ = _context(spec)
    return (sink is None and not spec.keep_infeasible and spec.objective == "step-time" and step is not None
            and step.comm is not None and bool(_floors(spec)))


def _full(spec: SearchSpec, chunk: Chunk, rows: np.ndarray | None = None) -> Chunk:
    """The layouts *rows* of *chunk* (all by default) with every key decoded."""
    if all(key in chunk.values for key in DEGREE_KEYS):
        return chunk if rows is None else _subchunk(spec, chunk, rows)
    space = _context(spec)[0]
    index = chunk.index if rows is None else chunk.index[rows]
    values = space.decode(index, space.settings.index(chunk.setting))
    row, bpos = values.pop("row"), values.pop("bpos")
    return Chunk(chunk.setting, values, index, spec.model, row, bpos)


def _chunk_best_bounded(spec: SearchSpec, chunk: Chunk, top: int, bound: float) -> dict[str, np.ndarray]:
    """:func:`chunk_best` of the step-time objective with the time family: branch and bound on floors.

    Every layout's lower bound is compute × (1 + bubble) (from its structure row's parts) plus the level-1
    communication floor (:func:`_level_floor`); the layouts are taken in that order, in growing windows;
    a window's layouts get the level-2 floor, then memory (the infeasible dropped), then their exact
    communication; the K-th best objective found tightens *bound*, and the walk stops at the first layout
    whose bound exceeds it. Only a layout whose lower bound exceeds the K-th best objective found so far
    is left out: it cannot enter the top K.
    """
    space, step, _, memory = _context(spec)
    setting = chunk.setting
    best = _empty()
    lower = step.compute_bound(_row_bound_forms(spec, setting.cp_algo, setting.recompute, setting.zero), chunk.row,
                               chunk.values["m"])
    window = max(4 * top, 1 << 12)
    done = None
    if not np.isfinite(bound) and len(chunk) > 4 * window:
        # A seed: the layouts of the smallest compute bound, priced first, so that the floors are priced only
        # for the layouts that bound keeps (not every one of the chunk's).
        seed = np.sort(np.argpartition(np.nan_to_num(lower, nan=np.inf), window)[:window])
        everywhere = np.ones(len(seed), bool)
        seeded = _full(spec, chunk, seed)  # (decoded once: the floor and the window read the same layouts)
        best, bound = _price_window(spec, seeded, seed, lower[seed], lower[seed]
                                    + _level_floor(spec, seeded, 0, everywhere), bound, best, top)
        done = np.zeros(len(chunk), bool)
        done[seed] = True
    objective = lower + _level_floor(spec, chunk, 0, ~(lower > bound))
    keep = ~(objective > bound)  # NaN bounds stay (ranked last, as in the full table)
    if done is not None:
        keep &= ~done
    live = np.flatnonzero(keep)
    if len(live) == 0:
        return best
    order = live[np.lexsort((chunk.index[live], np.nan_to_num(objective[live], nan=np.inf)))]
    start = 0
    while start < len(order):
        rows = np.sort(order[start:start + window])
        start += len(rows)
        best, bound = _price_window(spec, _full(spec, chunk, rows), rows, lower[rows], objective[rows], bound, best,
                                    top)
        if start < len(order) and objective[order[start]] > bound:
            break
        window *= 4
    return best


def _price_window(spec: SearchSpec, sub: Chunk, rows: np.ndarray, lower: np.ndarray, objective: np.ndarray,
                  bound: float, best: dict[str, np.ndarray], top: int) -> tuple[dict[str, np.ndarray], float]:
    """Layouts *sub* (every key decoded; *lower*: their compute bounds, *objective*: with the level-1 floor) of
    a walk: the later floor levels, memory (the infeasible dropped), their exact communication, merged into
    *best*; returns it and the tightened bound."""
    _, _, _, memory = _context(spec)
    tight = objective  # each layout's best lower bound so far
    for level in range(1, len(_floors(spec))):  # the later levels, before memory and communication
        deeper = lower + _level_floor(spec, sub, level, ~(objective > bound))
        keep = np.flatnonzero(~(np.maximum(deeper, objective) > bound))
        rows, sub, lower, objective = rows[keep], _subchunk(spec, sub, keep), lower[keep], objective[keep]
        tight = np.maximum(deeper[keep], objective)
    got = None
    if memory is not None and len(rows):  # memory first: only the feasible rows are priced for communication
        prices = memory.price_batch(sub.batch, validated=True)
        fits = np.flatnonzero(np.asarray(prices.fits, dtype=bool))
        rows, sub, tight = rows[fits], _subchunk(spec, sub, fits), tight[fits]
        got = _Memory(prices.peak_total[fits], prices.headroom[fits], np.ones(len(rows), np.int64))
    # Their exact communication. With no bound yet (a seed window) the _FIRST_EXACT of smallest bound first, when
    # there are many more: their K-th best leaves out most of the others, whose floors already exceed it.
    order = np.argsort(tight, kind="stable") if len(rows) > 4 * _FIRST_EXACT and not np.isfinite(bound) else None
    for part in ((np.arange(len(rows)),) if order is None else (order[:_FIRST_EXACT], order[_FIRST_EXACT:])):
        part = np.sort(part[~(tight[part] > bound)])
        if len(part):
            one = _subchunk(spec, sub, part)
            mem = None if got is None else _Memory(got.peak_total[part], got.headroom[part], got.fits[part])
            priced = _complete(spec, one, price_chunk(spec, one), np.arange(len(part)), memory_priced=mem,
                               bound=bound)
            best = merge_top(best, priced, top)
        if len(best["index"]) >= top:
            bound = min(bound, float(best["objective"][-1]))
    return best, bound


#: A seed window's layouts priced exactly first when it has many more (:func:`_price_window`).
_FIRST_EXACT = 512


def chunk_best(spec: SearchSpec, chunk: Chunk, top: int, sink: Callable[[dict], None] | None = None,
               bound: float = np.inf) -> dict[str, np.ndarray]:
    """The best *top* rows of one chunk under the spec's memory rule, exactly as pricing every row would give,
    leaving out rows that cannot beat *bound* (the objective of the K-th best row found elsewhere).

    :func:`price_chunk` gives each row its step time without communication: a lower bound of the step
    time (communication seconds are >= 0), exact when the time family is absent. Branch and bound: rows
    whose bound exceeds *bound* cannot enter the top K (their objective is larger than K rows' already)
    and are never priced further; the others are taken in bound order, in growing windows: memory first
    (the infeasible are dropped), then communication for the feasible ones; the K-th best objective found
    tightens the bound as it goes, and the walk stops at the first row whose bound exceeds it. A sink
    (``--out``), ``keep_infeasible`` and the comm-time objective (whose bound is 0) price every row.
    With the time family the bounds add communication floors (:func:`_chunk_best_bounded`).
    """
    if chunk.row is not None and chunk.bpos is not None and _bounded(spec, sink):
        return _chunk_best_bounded(spec, chunk, top, bound)
    chunk = _full(spec, chunk)
    table = price_chunk(spec, chunk)
    _, step, _, memory = _context(spec)
    comm = step is not None and step.comm is not None
    n = len(table["index"])
    if not comm and memory is None:
        if sink is not None:
            sink(table)
        return reduce_top(table, top)
    if sink is not None or spec.keep_infeasible or spec.objective == "comm-time":
        table = _complete(spec, chunk, table, np.arange(n))
        if memory is not None and not spec.keep_infeasible:
            ok = table["fits"] == 1
            table = {k: v[ok] for k, v in table.items()}
        if sink is not None and len(table["index"]):
            sink(table)
        return reduce_top(table, top)
    best = _empty()
    objective = table["objective"]
    live = np.flatnonzero(~(objective > bound))  # NaN bounds stay (ranked last, as in the full table)
    if len(live) == 0:
        return best
    order = live[np.lexsort((table["index"][live], np.nan_to_num(objective[live], nan=np.inf)))]
    window = max(4 * top, 1 << 12)
    start = 0
    while start < len(order):
        rows = np.sort(order[start:start + window])
        start += len(rows)
        got = None
        if memory is not None and len(rows):  # memory first: only the feasible rows are priced for communication
            prices = memory.price_batch(_subchunk(spec, chunk, rows).batch, validated=True)
            fits = np.asarray(prices.fits, dtype=bool)
            rows = rows[fits]
            got = _Memory(prices.peak_total[fits], prices.headroom[fits], np.ones(len(rows), np.int64))
        if len(rows):
            priced = _complete(spec, chunk, table, rows, memory_priced=got,
                               bound=bound)
            best = merge_top(best, priced, top)
        if len(best["index"]) >= top:
            bound = min(bound, float(best["objective"][-1]))
            if not comm:  # the order is exact: the first K feasible rows are the best
                break
        if start < len(order) and objective[order[start]] > bound:
            break
        window *= 4
    return best


@dataclass
class _Memory:
    peak_total: np.ndarray
    headroom: np.ndarray
    fits: np.ndarray


def _subchunk(spec: SearchSpec, chunk: Chunk, rows: np.ndarray) -> Chunk:
    return Chunk(chunk.setting, {k: v[rows] for k, v in chunk.values.items()}, chunk.index[rows], spec.model,
                 None if chunk.row is None else chunk.row[rows], None if chunk.bpos is None else chunk.bpos[rows])


def _order(table: Mapping[str, np.ndarray]) -> np.ndarray:
    """Rows by ascending objective, then grid index (NaN last)."""
    return np.lexsort((table["index"], np.nan_to_num(table["objective"], nan=np.inf)))


def _best_rows(table: Mapping[str, np.ndarray], count: int) -> np.ndarray:
    """Row numbers of the first *count* rows in rank order (objective, then grid index), in that order.

    A partition finds the count-th objective; only the rows at or below it are sorted.
    """
    n = len(table["index"])
    if n > 4 * count:
        objective = np.nan_to_num(table["objective"], nan=np.inf)
        kth = np.partition(objective, count - 1)[count - 1]
        candidates = np.flatnonzero(objective <= kth)
        sub = {"objective": table["objective"][candidates], "index": table["index"][candidates]}
        return candidates[_order(sub)[:count]]
    return _order(table)[:count]


def reduce_top(table: Mapping[str, np.ndarray], top: int) -> dict[str, np.ndarray]:
    """The best *top* rows of *table*, in rank order."""
    rows = _best_rows(table, top)
    return {k: np.asarray(v)[rows] for k, v in table.items()}


def merge_top(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray], top: int) -> dict[str, np.ndarray]:
    """The best *top* rows of two reductions."""
    return reduce_top({k: np.concatenate([a[k], b[k]]) for k in a}, top)


@dataclass
class SearchResult:
    """A search's best rows and what it walked.

    Attributes:
        table: ``{column: (k,) array}`` in rank order (:data:`COLUMNS`). labels: the setting codes' names.
        layouts: valid layouts priced. grid: grid points walked. interrupted: stopped by Ctrl-C (the best
        so far). seconds: wall time.
    """

    table: dict[str, np.ndarray]
    layouts: int
    grid: int
    interrupted: bool = False
    seconds: float = 0.0
    labels: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    def rows(self) -> list[dict[str, Any]]:
        """The table as one dict per row, settings by name."""
        out = []
        for i in range(len(self.table["index"])):
            row = {k: v[i].item() for k, v in self.table.items()}
            for key, names in self.labels.items():
                row[key] = names[int(row[key])] if key != "zero" else int(row[key])
            out.append(row)
        return out


def _kth(best: Mapping[str, np.ndarray], top: int) -> float:
    """The objective of the K-th best row so far (a bound no row beyond it can beat), or infinity."""
    if len(best["index"]) < top:
        return np.inf
    value = float(best["objective"][top - 1])
    return value if np.isfinite(value) else np.inf


def _block_top(spec: SearchSpec, start: int, stop: int, top: int, seed: float = np.inf
               ) -> tuple[dict[str, np.ndarray], int]:
    """The best *top* rows of grid indices ``[start, stop)`` whose objective does not exceed *seed* (the K-th best
    objective of some K layouts: no layout above it can enter the top K)."""
    space, _, _, _ = _context(spec)
    best, count = _empty(), 0
    keys = _LEAN if _bounded(spec, None) else None
    for chunk in space.block(start, stop, keys):
        count += len(chunk)
        best = merge_top(best, chunk_best(spec, chunk, top, bound=min(seed, _kth(best, top))), top)
    return best, count


def _merge_pair(a: tuple[dict, int], b: tuple[dict, int], top: int) -> tuple[dict[str, np.ndarray], int]:
    return merge_top(a[0], b[0], top), a[1] + b[1]


def _block_of_indices(indices: np.ndarray, spec: SearchSpec, top: int, seed: float = np.inf
                      ) -> tuple[dict[str, np.ndarray], int]:
    """A dask.array block of grid indices (a contiguous range) priced and reduced to its best rows (those not
    above *seed*)."""
    if len(indices) == 0:
        return _empty(), 0
    return _block_top(spec, int(indices[0]), int(indices[-1]) + 1, top, seed)


def _seed(spec: SearchSpec, space: SearchSpace, top: int, chunk: int) -> float:
    """A bound for every block: the K-th best objective of the first chunk (K layouts at most that good exist,
    so no layout above it enters the top K), or infinity; priced once, by the caller."""
    if not _bounded(spec, None):
        return np.inf
    best = _empty()
    for part in space.block(0, min(chunk, space.size), _LEAN):
        best = merge_top(best, chunk_best(spec, part, top, bound=_kth(best, top)), top)
    return _kth(best, top)


#: A dask.distributed address: an optional protocol, a host (a name, IPv4, or IPv6 in brackets) and a port.
_SCHEDULER_ADDRESS = re.compile(r"(?:[a-z][a-z0-9+.-]*://)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>[0-9]{1,5})")


def _check_scheduler_address(address: str) -> None:
    """Refuse a malformed ``--scheduler`` before ``Client`` sees it.

    ``Client`` raises ``ValueError`` on an address without a port after it has started, and the half-made
    client then blocks its interpreter's exit for 20 s and prints a traceback from its finaliser.
    """
    if address.startswith("inproc://"):  # a LocalCluster(processes=False) in this process: no host or port
        return
    match = _SCHEDULER_ADDRESS.fullmatch(address.strip())
    if not match or not 1 <= int(match["port"]) <= 65535:
        raise ValueError(f"--scheduler: expected [PROTOCOL://]HOST:PORT with a port from 1 to 65535, "
                         f"e.g. tcp://10.0.0.5:8786, got {address!r}")


def _dask_search(spec: SearchSpec, space: SearchSpace, top: int, chunk: int, scheduler: str | None
                 ) -> tuple[dict[str, np.ndarray], int]:
    try:
        import dask
        import dask.array as da
    except ImportError:  # pragma: no cover - the optional extra
        raise ValueError("--engine dask / --scheduler: needs the optional extra dask[array] "
                         "(pip install symcost[search])") from None
    indices = da.arange(space.size, chunks=chunk, dtype=np.int64)
    seed = _seed(spec, space, top, chunk)
    level = [dask.delayed(_block_of_indices, pure=True)(block, spec, top, seed)
             for block in indices.to_delayed().ravel()]
    while len(level) > 1:  # the tree reduction: only the best rows of each pair move up
        nxt = [dask.delayed(_merge_pair, pure=True)(level[i], level[i + 1], top) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    if not level:
        return _empty(), 0
    if scheduler:
        try:
            from distributed import Client
        except ImportError:  # pragma: no cover
            raise ValueError("--scheduler: needs the optional extra distributed (pip install symcost[search])") from None
        try:
            client = Client(scheduler, timeout=10, set_as_default=False)
        except (OSError, ValueError) as exc:
            raise ValueError(f"--scheduler {scheduler}: cannot connect: {exc}") from None
        try:
            return client.compute(level[0]).result()
        finally:
            client.close()
    return dask.compute(level[0], scheduler="threads")[0]


def search(spec: SearchSpec, *, top: int = 10, chunk: int = 1 << 18, engine: str = "numpy",
           scheduler: str | None = None, progress: Callable[[int, int], None] | None = None,
           sink: Callable[[dict[str, np.ndarray]], None] | None = None) -> SearchResult:
    """Rank every valid layout of *spec* by its objective and keep the best *top*.

    Args:
        spec: the search. top: rows kept. chunk: grid points per chunk (memory stays proportional to it).
        engine: ``"numpy"`` (in process) or ``"dask"`` (dask.array blocks; *scheduler* an address or None
            for the local threaded scheduler). A scheduler address implies the dask engine.
        progress: called ``progress(done, total)`` in grid points after each chunk (in process).
        sink: called with every chunk's full table (``--out``); in process only.

    Raises:
        ValueError: naming the option for a bad *top*, *chunk* or *engine*, or a missing optional extra.
    """
    for name, value in (("--top", top), ("chunk", chunk)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name}: expected a whole number >= 1, got {value!r}")
    if scheduler:
        _check_scheduler_address(scheduler)  # before any work: a typo is one line at once
        engine = "dask"
    if engine not in ("numpy", "dask"):
        raise ValueError(f"engine: one of numpy, dask, got {engine!r}")
    if engine == "dask" and sink is not None:
        raise ValueError("--out: writes every layout from the in-process search; drop --scheduler to use it")
    started = time.perf_counter()
    space, _, _, _ = _context(spec)
    # The floors and the rows' compute parts are the search's own work: priced again by every search (a
    # second search of the same spec is timed as the first), not kept from an earlier one.
    for cache in (_floor_table, _row_stage_parts, _row_bound_forms, _union_stage_parts, _union_rows, _stage_groups,
                  _recompute_free):
        cache.cache_clear()
    labels = {"recompute": RECOMPUTE_MODES, "cp_algo": tuple(dict.fromkeys(s.cp_algo for s in space.settings))}
    interrupted = False
    if engine == "dask":
        best, count = _dask_search(spec, space, top, chunk, scheduler)
    else:
        best, count, done = _empty(), 0, 0
        keys = _LEAN if _bounded(spec, sink) else None
        try:
            for lo in range(0, space.size, chunk):
                hi = min(lo + chunk, space.size)
                for part in space.block(lo, hi, keys):
                    count += len(part)
                    best = merge_top(best, chunk_best(spec, part, top, sink, _kth(best, top)), top)
                done = hi
                if progress is not None:
                    progress(done, space.size)
        except KeyboardInterrupt:
            interrupted = True
    return SearchResult(best, count, space.size, interrupted, time.perf_counter() - started, labels)


def pareto_front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats in both *x* and *y* (smaller is better), by ascending x."""
    order = np.lexsort((y, x))
    ys = y[order]
    best = np.minimum.accumulate(ys)
    keep = np.ones(len(order), bool)
    keep[1:] = ys[1:] < best[:-1]
    return order[keep]
