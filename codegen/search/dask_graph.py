"""The search as a Dask graph: the same walk as the in-process one, on a cluster.

The grid is the blocks of ``dask.array.arange(space.size, chunks=chunk)``: one task per block prices its
indices and keeps their best rows (below a seed bound priced once by the caller: :func:`_seed`), then pairwise
merge tasks reduce them in a tree, so only the best rows of each block leave a worker. ``scheduler=None`` runs
the local threaded scheduler; ``scheduler="tcp://HOST:PORT"`` connects a ``dask.distributed.Client`` and runs
the identical graph there. dask is an optional extra (``pip install symcost[search]``), imported on use.
"""

from __future__ import annotations

import re

import numpy as np

from .space import SearchSpace
from .spec import SearchSpec, search_context
from .top import empty_table, kth_objective, merge_top
from .walk import LEAN_KEYS, chunk_best, is_bounded

__all__ = ["dask_search", "check_scheduler_address"]


def _block_top(spec: SearchSpec, start: int, stop: int, top: int, seed: float = np.inf
               ) -> tuple[dict[str, np.ndarray], int]:
    """The best *top* rows of grid indices ``[start, stop)`` whose objective does not exceed *seed* (the K-th best
    objective of some K layouts: no layout above it can enter the top K)."""
    space, _, _, _ = search_context(spec)
    best, count = empty_table(), 0
    keys = LEAN_KEYS if is_bounded(spec, None) else None
    for chunk in space.block(start, stop, keys):
        count += len(chunk)
        best = merge_top(best, chunk_best(spec, chunk, top, bound=min(seed, kth_objective(best, top))), top)
    return best, count


def _merge_pair(a: tuple[dict, int], b: tuple[dict, int], top: int) -> tuple[dict[str, np.ndarray], int]:
    """Two blocks' best rows merged, and their layout counts summed."""
    return merge_top(a[0], b[0], top), a[1] + b[1]


def _block_of_indices(indices: np.ndarray, spec: SearchSpec, top: int, seed: float = np.inf
                      ) -> tuple[dict[str, np.ndarray], int]:
    """A dask.array block of grid indices (a contiguous range) priced and reduced to its best rows (those not
    above *seed*)."""
    if len(indices) == 0:
        return empty_table(), 0
    return _block_top(spec, int(indices[0]), int(indices[-1]) + 1, top, seed)


def _seed(spec: SearchSpec, space: SearchSpace, top: int, chunk: int) -> float:
    """A bound for every block: the K-th best objective of the first chunk (K layouts at most that good exist,
    so no layout above it enters the top K), or infinity; priced once, by the caller."""
    if not is_bounded(spec, None):
        return np.inf
    best = empty_table()
    for part in space.block(0, min(chunk, space.size), LEAN_KEYS):
        best = merge_top(best, chunk_best(spec, part, top, bound=kth_objective(best, top)), top)
    return kth_objective(best, top)


#: A dask.distributed address: an optional protocol, a host (a name, IPv4, or IPv6 in brackets) and a port.
_SCHEDULER_ADDRESS = re.compile(r"(?:[a-z][a-z0-9+.-]*://)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>[0-9]{1,5})")


def check_scheduler_address(address: str) -> None:
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


def dask_search(spec: SearchSpec, space: SearchSpace, top: int, chunk: int, scheduler: str | None
                ) -> tuple[dict[str, np.ndarray], int]:
    """The best *top* rows of every layout of *space* and how many layouts were priced, as a Dask graph: one
    task per block of *chunk* grid indices, then pairwise merges. *scheduler*: a ``dask.distributed`` address
    (:func:`check_scheduler_address`), or None for the local threaded scheduler.

    Raises:
        ValueError: a missing optional extra (dask, distributed), or a scheduler that cannot be reached.
    """
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
        return empty_table(), 0
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
