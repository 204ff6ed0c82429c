"""The search: every valid layout of a model on N devices priced and reduced to its best rows, in process or as
a Dask graph on a cluster.

The grid of a :class:`SearchSpace` is walked in chunks of grid indices; each chunk's valid layouts are priced
(:func:`price_chunk`) and reduced to its best ``top`` rows (ascending objective, ties by grid index, so the
ranking is total and the same in every path). Merging two reductions keeps the best ``top`` of both: a tree
reduction over the chunks gives the global top K, and only those rows leave a worker.

Modules, by job:

- ``space``: the valid layouts, numbered ``0 … size − 1`` and decoded in chunks (``SearchSpace``).
- ``options``: a search's options checked once for the command line and the API (lists merged, bounds, systems).
- ``spec``: what a search is (``SearchSpec``) and what a process builds from it once (``search_context``).
- ``bounds``: the branch and bound's lower bounds: the compute bound and the communication floors.
- ``top``: result tables and their reduction to the best K rows (``reduce_top``, ``merge_top``).
- ``walk``: one chunk priced and reduced to its best rows (``price_chunk``, ``chunk_best``).
- ``dask_graph``: the same walk as a Dask graph (``engine="dask"``, ``scheduler=``).
- ``run``: the driver (``search`` → ``SearchResult``).

Public API::

    OBJECTIVES;  COLUMNS
    SearchSpec(model, devices, global_batch, system, objective="step-time", ...)
    search_context(spec) -> SearchContext(space, step, original, memory)   # built once per process
    setting_labels(spec) -> {"recompute": names, "cp_algo": names}         # a result table's setting codes
    priced_columns(spec) -> tuple[str, ...]             # the columns a search of spec prices (--out writes)
    price_chunk(spec, chunk) -> dict[str, ndarray]      # one chunk's table: compute, bubble (comm, memory not yet)
    chunk_best(spec, chunk, top, sink=None) -> dict     # its best rows, comm and memory priced where needed
                                                        # (branch and bound on floors: docs/search.md)
    reduce_top(table, top) -> dict;  merge_top(a, b, top) -> dict;  pareto_front(x, y) -> indices
    search(spec, *, top=10, chunk=1 << 18, engine="numpy", scheduler=None, progress=None, sink=None,
           scheduler_timeout=5) -> SearchResult(table, layouts, grid, interrupted, seconds, labels)
    check_scheduler(address, field="--scheduler", timeout=5)   # malformed, unreachable or not Dask: one error
    SearchSpace(model, devices, global_batch, ...);  parse_restrictions(items, option)

Every public entry point checks its arguments first and raises one ``codegen.runtime.inputs.InputError`` (a
``ValueError``) naming the argument and the value: never an ``AttributeError``, ``IndexError``, ``KeyError`` or
``TypeError`` from inside, and no cache sees an argument before it is checked.
"""

from .dask_graph import check_scheduler
from .options import parse_restrictions
from .run import SearchResult, search
from .space import SearchSpace
from .spec import OBJECTIVES, SearchContext, SearchSpec, priced_columns, search_context, setting_labels
from .top import COLUMNS, merge_top, pareto_front, reduce_top
from .walk import chunk_best, price_chunk

__all__ = ["OBJECTIVES", "COLUMNS", "SearchSpec", "SearchContext", "search_context", "setting_labels", "search",
           "SearchResult", "price_chunk", "chunk_best", "reduce_top", "merge_top", "pareto_front", "SearchSpace",
           "parse_restrictions", "priced_columns", "check_scheduler"]
