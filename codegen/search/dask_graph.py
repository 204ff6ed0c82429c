"""The search as a Dask graph: the same walk as the in-process one, on a cluster.

The grid is the blocks of ``dask.array.arange(space.size, chunks=chunk)``: one task per block prices its
indices and keeps their best rows (below a seed bound priced once by the caller: :func:`_seed`), then pairwise
merge tasks reduce them in a tree, so only the best rows of each block leave a worker. ``scheduler=None`` runs
the local threaded scheduler; ``scheduler="tcp://HOST:PORT"`` connects a ``dask.distributed.Client`` and runs
the identical graph there. dask is an optional extra (``pip install symcost[search]``), imported on use.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading

import numpy as np

from ..runtime.inputs import InputError, whole
from .options import SCHEDULER_TIMEOUT_S

from .space import SearchSpace
from .spec import SearchSpec, search_context
from .top import empty_table, kth_objective, merge_top
from .walk import LEAN_KEYS, chunk_best, is_bounded

__all__ = ["dask_search", "check_scheduler", "check_scheduler_address"]


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
#: An in-process address (``LocalCluster(processes=False)``): ``inproc://HOST/PID/N``.
_INPROC_ADDRESS = re.compile(r"inproc://[^/\s]+/(?P<pid>[0-9]+)/[0-9]+")


def check_scheduler_address(address: object, field: str = "--scheduler") -> None:
    """Refuse a malformed scheduler address before ``Client`` sees it.

    ``Client`` raises ``ValueError`` on an address without a port after it has started, and the half-made
    client then blocks its interpreter's exit for 20 s and prints a traceback from its finaliser. An
    ``inproc://`` address names a scheduler inside this very process (``LocalCluster(processes=False)``): one
    of another process (its PID) can never be reached.

    Raises:
        InputError: naming *field* and the address.
    """
    if not isinstance(address, str):
        raise InputError(f"{field}: expected an address such as tcp://HOST:PORT, got {address!r:.80}")
    if address.startswith("inproc://"):
        match = _INPROC_ADDRESS.fullmatch(address)
        if not match or int(match["pid"]) != os.getpid():
            raise InputError(f"{field} {address}: an inproc:// address names a scheduler inside this Python process "
                             f"(LocalCluster(processes=False), inproc://HOST/{os.getpid()}/N); for another process's "
                             f"give tcp://HOST:PORT")
        return
    match = _SCHEDULER_ADDRESS.fullmatch(address.strip())
    if not match or not 1 <= int(match["port"]) <= 65535:
        raise InputError(f"{field}: expected [PROTOCOL://]HOST:PORT with a port from 1 to 65535, "
                         f"e.g. tcp://10.0.0.5:8786, got {address!r}")


def check_scheduler(address: object, field: str = "--scheduler", timeout: int = SCHEDULER_TIMEOUT_S) -> None:
    """Refuse a scheduler address that is malformed (:func:`check_scheduler_address`) or where no Dask scheduler
    answers Dask's handshake within *timeout* seconds, before any work and before ``Client`` sees it.

    ``Client(address, timeout=…)`` bounds the TCP connection only: on a port that accepts and never answers it
    waits for the handshake for good, and on an HTTP server it reads the reply's first bytes as a frame length
    (``HTTP/1.`` as 3 EiB) and fails to allocate it after tens of seconds. Here one connection
    (``distributed.comm.connect``, the handshake included) runs on its own event loop in a thread and is
    cancelled at *timeout*; a half-made ``Client`` is never left to block the interpreter's exit.

    Raises:
        InputError: naming *field* and the address: malformed, no connection, no answer in time, or an answer
            that is not Dask's; or the optional extra ``distributed`` missing.
    """
    check_scheduler_address(address, field)
    timeout = whole(f"{field} timeout", timeout, minimum=1, maximum=600)
    try:
        from distributed.comm import connect
    except ImportError:
        raise InputError(f"{field}: needs the optional extra distributed (pip install symcost[search])") from None
    outcome: dict[str, BaseException] = {}

    async def handshake() -> None:
        # connect() retries a refused connection until its own timeout: a little less than ours, so that its
        # error (with the refusal) arrives first; the handshake itself has none, hence wait_for.
        comm = await asyncio.wait_for(connect(address, timeout=0.8 * timeout), timeout)
        await comm.close()

    def attempt() -> None:
        try:
            asyncio.run(handshake())
        except BaseException as exc:  # noqa: BLE001 - whatever fails, the address is of no use: reported below
            outcome["error"] = exc

    thread = threading.Thread(target=attempt, name="symcost-scheduler-check", daemon=True)
    thread.start()
    thread.join(timeout + 2)
    error = outcome.get("error")
    if thread.is_alive() or isinstance(error, (asyncio.TimeoutError, TimeoutError)):
        raise InputError(f"{field} {address}: no answer from a Dask scheduler within {timeout} s (a port that "
                         f"accepts and never answers, or another server)")
    if isinstance(error, MemoryError):  # a frame length read from another protocol's bytes
        raise InputError(f"{field} {address}: the server there does not speak Dask's protocol (is it the "
                         f"scheduler's port, default 8786, and not its dashboard's?)")
    if error is not None:
        root = error  # the first cause (a refused connection, an unknown host), under distributed's wrappers
        while (root.__cause__ or root.__context__) is not None:
            root = root.__cause__ or root.__context__  # type: ignore[assignment]
        why = root.strerror if isinstance(root, OSError) and root.strerror else str(root)
        reason = str(error) if root is error or not why else f"{error} ({why})"
        raise InputError(f"{field} {address}: cannot connect to a Dask scheduler: {reason}")


def dask_search(spec: SearchSpec, space: SearchSpace, top: int, chunk: int, scheduler: str | None,
                timeout: int = SCHEDULER_TIMEOUT_S) -> tuple[dict[str, np.ndarray], int]:
    """The best *top* rows of every layout of *space* and how many layouts were priced, as a Dask graph: one
    task per block of *chunk* grid indices, then pairwise merges. *scheduler*: a ``dask.distributed`` address
    (:func:`check_scheduler`), or None for the local threaded scheduler; *timeout*: seconds to connect.

    Raises:
        ValueError: a missing optional extra (dask, distributed), or a scheduler that cannot be reached.
    """
    try:
        import dask
        import dask.array as da
    except ImportError:  # pragma: no cover - the optional extra
        raise InputError("--engine dask / --scheduler: needs the optional extra dask[array] "
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
            raise InputError("--scheduler: needs the optional extra distributed (pip install symcost[search])") from None
        try:
            client = Client(scheduler, timeout=timeout, set_as_default=False)
        except (OSError, ValueError) as exc:
            raise InputError(f"--scheduler {scheduler}: cannot connect: {exc}") from None
        try:
            return client.compute(level[0]).result()
        finally:
            client.close()
    return dask.compute(level[0], scheduler="threads")[0]
