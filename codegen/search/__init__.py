"""The search: every valid layout of a model on N devices priced and reduced to its best rows, in process or as
a Dask graph on a cluster.

The grid of a :class:`SearchSpace` is walked in chunks of grid indices; each chunk's valid layouts are priced
(:func:`price_chunk`) and reduced to its best ``top`` rows (ascending objective, ties by grid index, so the
ranking is total and the same in every path). Merging two reductions keeps the best ``top`` of both: a tree
reduction over the chunks gives the global top K, and only those rows leave a worker.

Modules, by job:

- ``space``: the valid layouts, numbered ``0 … size − 1`` and decoded in chunks (``SearchSpace``).
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
    price_chunk(spec, chunk) -> dict[str, ndarray]      # one chunk's table: compute, bubble (comm, memory not yet)
    chunk_best(spec, chunk, top, sink=None) -> dict     # its best rows, comm and memory priced where needed
                                                        # (branch and bound on floors: docs/search.md)
    reduce_top(table, top) -> dict;  merge_top(a, b, top) -> dict;  pareto_front(x, y) -> indices
    search(spec, *, top=10, chunk=1 << 18, engine="numpy", scheduler=None, progress=None, sink=None)
        -> SearchResult(table, layouts, grid, interrupted, seconds, labels)
    SearchSpace(model, devices, global_batch, ...);  parse_restrictions(items, option)
"""

from .run import SearchResult, search
from .space import SearchSpace, parse_restrictions
from .spec import OBJECTIVES, SearchContext, SearchSpec, search_context, setting_labels
from .top import COLUMNS, merge_top, pareto_front, reduce_top
from .walk import chunk_best, price_chunk

__all__ = ["OBJECTIVES", "COLUMNS", "SearchSpec", "SearchContext", "search_context", "setting_labels", "search",
           "SearchResult", "price_chunk", "chunk_best", "reduce_top", "merge_top", "pareto_front", "SearchSpace",
           "parse_restrictions"]
