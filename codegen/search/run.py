"""The search's driver: every valid layout of a model on N devices ranked, in process or as a Dask graph.

:func:`search` walks the grid of the spec's :class:`codegen.search.space.SearchSpace` in chunks of grid
indices, each reduced to its best rows (``walk.chunk_best``) and merged into the best *top* so far, whose K-th
objective bounds the next chunks; or hands the same walk to a Dask scheduler (``dask_graph``). It returns a
:class:`SearchResult`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .bounds import clear_caches
from ..runtime.inputs import InputError, whole
from .dask_graph import check_scheduler, dask_search
from .options import CHUNK_MAX, CHUNK_MIN, SCHEDULER_TIMEOUT_S, TOP_MAX
from .spec import SearchSpec, search_context, setting_labels
from .top import empty_table, kth_objective, merge_top
from .walk import LEAN_KEYS, chunk_best, is_bounded

__all__ = ["SearchResult", "search"]


@dataclass
class SearchResult:
    """A search's best rows and what it walked.

    Attributes:
        table: ``{column: (k,) array}`` in rank order (``top.COLUMNS``).
        layouts: valid layouts priced.
        grid: grid points walked.
        interrupted: stopped by Ctrl-C (the table is the best so far).
        seconds: wall time.
        labels: the setting codes' names (``spec.setting_labels``).
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


def search(spec: SearchSpec, *, top: int = 10, chunk: int = 1 << 18, engine: str = "numpy",
           scheduler: str | None = None, progress: Callable[[int, int], None] | None = None,
           sink: Callable[[dict[str, np.ndarray]], None] | None = None,
           scheduler_timeout: int = SCHEDULER_TIMEOUT_S) -> SearchResult:
    """Rank every valid layout of *spec* by its objective and keep the best *top*.

    Args:
        spec: the search. top: rows kept (1 to ``options.TOP_MAX``). chunk: grid points per chunk, from
            ``options.CHUNK_MIN`` (2**10: below it a chunk's fixed cost outweighs its layouts) to
            ``options.CHUNK_MAX``; memory stays proportional to it.
        engine: ``"numpy"`` (in process) or ``"dask"`` (dask.array blocks; *scheduler* an address or None
            for the local threaded scheduler). A scheduler address implies the dask engine.
        scheduler: a ``dask.distributed`` scheduler's address; it must answer Dask's handshake within
            *scheduler_timeout* seconds (``dask_graph.check_scheduler``), checked before any work.
        progress: called ``progress(done, total)`` in grid points after each chunk (in process).
        sink: called with every chunk's full table (``--out``); in process only.

    Raises:
        InputError: a ``ValueError`` naming the argument and the value: a *spec* that is no
            :class:`SearchSpec`, a bad *top*, *chunk*, *engine*, *scheduler* (malformed, unreachable, or no
            Dask scheduler), *progress* or *sink*, or a missing optional extra.
    """
    if not isinstance(spec, SearchSpec):
        raise InputError(f"spec: expected a SearchSpec, got {type(spec).__name__}")
    top = whole("top", top, minimum=1, maximum=TOP_MAX)
    chunk = whole("chunk", chunk, minimum=CHUNK_MIN, maximum=CHUNK_MAX)
    for name, value in (("progress", progress), ("sink", sink)):
        if value is not None and not callable(value):
            raise InputError(f"{name}: expected a callable or None, got {type(value).__name__}")
    if not isinstance(engine, str) or engine not in ("numpy", "dask"):
        raise InputError(f"engine: one of numpy, dask, got {engine!r:.80}")
    if scheduler is not None:
        check_scheduler(scheduler, "scheduler", scheduler_timeout)  # before any work: one line at once
        engine = "dask"
    if engine == "dask" and sink is not None:
        raise InputError("sink (--out): writes every layout from the in-process search; drop the dask engine "
                         "(--engine dask, --scheduler) to use it")
    started = time.perf_counter()
    space, _, _, _ = search_context(spec)
    clear_caches()  # the floors and the rows' compute parts: each search prices its own
    labels = setting_labels(spec)
    interrupted = False
    if engine == "dask":
        best, count = dask_search(spec, space, top, chunk, scheduler, scheduler_timeout)
    else:
        best, count, done = empty_table(), 0, 0
        keys = LEAN_KEYS if is_bounded(spec, sink) else None
        try:
            for lo in range(0, space.size, chunk):
                hi = min(lo + chunk, space.size)
                for part in space.block(lo, hi, keys):
                    count += len(part)
                    best = merge_top(best, chunk_best(spec, part, top, sink, kth_objective(best, top)), top)
                done = hi
                if progress is not None:
                    progress(done, space.size)
        except KeyboardInterrupt:
            interrupted = True
    return SearchResult(best, count, space.size, interrupted, time.perf_counter() - started, labels)
