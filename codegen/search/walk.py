"""One chunk of the grid priced and reduced to its best rows: the search's walk.

:func:`price_chunk` gives each layout its step time without communication (a lower bound of its objective);
:func:`chunk_best` keeps the chunk's best *top* rows under the spec's memory rule, exactly as pricing every
layout would, taking the layouts in bound order in growing windows and pricing memory, then communication,
only for those whose bound can still enter the top K. With the time family the bounds add communication floors
(``bounds``): :func:`is_bounded` says whether a walk uses them, and then its chunks decode :data:`LEAN_KEYS`
alone for every layout, the other keys only for the layouts priced further.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from symbolic.vocabulary import RECOMPUTE_MODES, SEARCH_KEYS

from ..pricing.chunks import Chunk
from ..runtime.inputs import InputError, whole
from .bounds import chunk_stage_parts, floors, level_floor, row_bound_forms, row_stage_parts
from .spec import SearchSpec, decoded, search_context, subchunk
from .top import empty_table, merge_top, reduce_top

__all__ = ["price_chunk", "chunk_best", "is_bounded", "LEAN_KEYS"]


@dataclass
class _Memory:
    """The memory of some layouts, priced before their communication (``MemoryPricer.price_batch``'s fields)."""

    peak_total: np.ndarray
    headroom: np.ndarray
    fits: np.ndarray


def price_chunk(spec: SearchSpec, chunk: Chunk) -> dict[str, np.ndarray]:
    """The table of one chunk: grid index, degrees, setting codes, the objective and its parts.

    Raises:
        InputError: *spec* is no :class:`SearchSpec` or *chunk* no ``Chunk`` (``SearchSpace.block``'s).
    """
    space, step, original, _ = search_context(spec)
    _check_chunk(chunk)
    n = len(chunk)
    setting = chunk.setting
    table: dict[str, np.ndarray] = {"index": chunk.index}
    for key in SEARCH_KEYS:
        table[key] = chunk.values[key]
    table["recompute"] = np.full(n, RECOMPUTE_MODES.index(setting.recompute), np.int64)
    table["zero"] = np.full(n, setting.zero, np.int64)
    algos = [s.cp_algo for s in space.settings]
    table["cp_algo"] = np.full(n, list(dict.fromkeys(algos)).index(setting.cp_algo), np.int64)
    nan = np.full(n, np.nan)
    if step is not None:
        stages = None
        if chunk.row is not None:
            forms = row_stage_parts(spec, setting.cp_algo, setting.recompute, setting.zero)
            stages = chunk_stage_parts(spec, chunk, forms)
        # (comm 0: a bound; the chunk's layouts are valid by construction: nothing to check)
        parts = step.price(chunk.values, setting.recompute, None, zero=setting.zero, parts=stages, validated=True)
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
    _, step, _, memory = search_context(spec)
    sub = subchunk(spec, chunk, rows)
    filled: dict[str, np.ndarray] = {}
    if step is not None and step.comm is not None:
        comm = step.exposed(step.comm(sub), chunk.setting.recompute, chunk.setting.cp_algo, table["compute_s"][rows],
                            sub.values["m"], chunk.setting.zero, sub.values["p"], sub.values["vp"])
        comm = np.broadcast_to(comm, rows.shape).astype(np.float64)
        filled["comm_s"] = comm
        filled["step_time_s"] = step.step_time(table["compute_s"][rows], sub.values, comm, validated=True)
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


def _check_chunk(chunk: object) -> None:
    if not isinstance(chunk, Chunk):
        raise InputError(f"chunk: expected a Chunk of the search space (SearchSpace.block, .chunks), got "
                         f"{type(chunk).__name__}")


#: The keys a chunk of the bounded walk decodes for every layout (the compute bound's: its structure row and ``m``
#: are always decoded); the others are decoded for the layouts priced further (``spec.decoded``).
LEAN_KEYS = ("m",)


def is_bounded(spec: SearchSpec, sink: Callable[[dict], None] | None) -> bool:
    """Whether the walk is :func:`_chunk_best_bounded` (communication floors; lean chunks)."""
    _, step, _, _ = search_context(spec)
    return (sink is None and not spec.keep_infeasible and spec.objective == "step-time" and step is not None
            and step.comm is not None and bool(floors(spec)))


def _chunk_best_bounded(spec: SearchSpec, chunk: Chunk, top: int, bound: float) -> dict[str, np.ndarray]:
    """:func:`chunk_best` of the step-time objective with the time family: branch and bound on floors.

    Every layout's lower bound is compute × (1 + bubble) (from its structure row's parts) plus the level-1
    communication floor (:func:`level_floor`); the layouts are taken in that order, in growing windows;
    a window's layouts get the level-2 floor, then memory (the infeasible dropped), then their exact
    communication; the K-th best objective found tightens *bound*, and the walk stops at the first layout
    whose bound exceeds it. Only a layout whose lower bound exceeds the K-th best objective found so far
    is left out: it cannot enter the top K.
    """
    space, step, _, memory = search_context(spec)
    setting = chunk.setting
    best = empty_table()
    lower = step.compute_bound(row_bound_forms(spec, setting.cp_algo, setting.recompute, setting.zero), chunk.row,
                               chunk.values["m"])
    window = max(4 * top, 1 << 12)
    done = None
    if not np.isfinite(bound) and len(chunk) > 4 * window:
        # A seed: the layouts of the smallest compute bound, priced first, so that the floors are priced only
        # for the layouts that bound keeps (not every one of the chunk's).
        seed = np.sort(np.argpartition(np.nan_to_num(lower, nan=np.inf), window)[:window])
        everywhere = np.ones(len(seed), bool)
        seeded = decoded(spec, chunk, seed)  # (decoded once: the floor and the window read the same layouts)
        best, bound = _price_window(spec, seeded, seed, lower[seed], lower[seed]
                                    + level_floor(spec, seeded, 0, everywhere), bound, best, top)
        done = np.zeros(len(chunk), bool)
        done[seed] = True
    objective = lower + level_floor(spec, chunk, 0, ~(lower > bound))
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
        best, bound = _price_window(spec, decoded(spec, chunk, rows), rows, lower[rows], objective[rows], bound, best,
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
    _, _, _, memory = search_context(spec)
    tight = objective  # each layout's best lower bound so far
    for level in range(1, len(floors(spec))):  # the later levels, before memory and communication
        deeper = lower + level_floor(spec, sub, level, ~(objective > bound))
        keep = np.flatnonzero(~(np.maximum(deeper, objective) > bound))
        rows, sub, lower, objective = rows[keep], subchunk(spec, sub, keep), lower[keep], objective[keep]
        tight = np.maximum(deeper[keep], objective)
    got = None
    if memory is not None and len(rows):  # memory first: only the feasible rows are priced for communication
        prices = memory.price_batch(sub.batch, validated=True)
        fits = np.flatnonzero(np.asarray(prices.fits, dtype=bool))
        rows, sub, tight = rows[fits], subchunk(spec, sub, fits), tight[fits]
        got = _Memory(prices.peak_total[fits], prices.headroom[fits], np.ones(len(rows), np.int64))
    # Their exact communication. With no bound yet (a seed window) the _FIRST_EXACT of smallest bound first, when
    # there are many more: their K-th best leaves out most of the others, whose floors already exceed it.
    order = np.argsort(tight, kind="stable") if len(rows) > 4 * _FIRST_EXACT and not np.isfinite(bound) else None
    for part in ((np.arange(len(rows)),) if order is None else (order[:_FIRST_EXACT], order[_FIRST_EXACT:])):
        part = np.sort(part[~(tight[part] > bound)])
        if len(part):
            one = subchunk(spec, sub, part)
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
    _check_chunk(chunk)
    top = whole("top", top, minimum=1)
    if sink is not None and not callable(sink):
        raise InputError(f"sink: expected a callable or None, got {type(sink).__name__}")
    if chunk.row is not None and chunk.bpos is not None and is_bounded(spec, sink):
        return _chunk_best_bounded(spec, chunk, top, bound)
    chunk = decoded(spec, chunk)
    table = price_chunk(spec, chunk)
    _, step, _, memory = search_context(spec)
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
    best = empty_table()
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
            prices = memory.price_batch(subchunk(spec, chunk, rows).batch, validated=True)
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
