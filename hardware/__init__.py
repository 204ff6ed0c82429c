"""The hardware catalog: one commented TOML file per system in ``hardware/catalog/``.

A system is an ordered list of network levels, innermost first, each with a bound
(devices, or units of the level below, per unit; the top level is unbounded), a
peak bandwidth per device and per direction in bytes/s, and an optional latency
and measured efficiency. ``System.bindings()`` gives the values of the hardware
symbols of ``symbolic/symbols.py``; ``level_bounds()`` and
``level_bandwidths_gbps()`` give the original's level tables.

Public API::

    names() -> tuple[str, ...]          # the catalog's systems
    load(name) -> System                # one of them, e.g. load("A2")
    load_file(path) -> System           # any file in the same layout
    time_bindings(system) -> dict       # NCCL constants + the system, for symbolic.collective_time
    TIME_SYMBOLS                        # the names time_bindings gives (a frozenset)
    transport(system) -> Transport      # what NCCL runs over its network (plugin latency, algorithms, protocols)
    network_latency(system) -> float    # the latency NCCL's network plugin reports for it, seconds
    hop_latencies(system) -> dict       # what one network hop adds per protocol (net_latency_<proto>_s)
    with_network(system, **network) -> System  # the same nodes on another scale-out network
    System, Level, Gpu, UnusedHelperLevel  # frozen dataclasses
    HOST_CPUS                           # the host CPUs NCCL's tuner tells apart (a system's host_cpu)
    HardwareSpecError                   # a ValueError naming file, key path and value

Importing this package reads no file.
"""

from ._load import CATALOG_DIR as CATALOG_DIR
from ._load import CATALOG_ENV as CATALOG_ENV
from ._load import add_catalog as add_catalog
from ._load import catalog_dirs as catalog_dirs
from ._load import load as load
from ._load import load_file as load_file
from ._load import names as names
from ._nccl import TIME_SYMBOLS as TIME_SYMBOLS
from ._nccl import Transport as Transport
from ._nccl import hop_latencies as hop_latencies
from ._nccl import network_latency as network_latency
from ._nccl import time_bindings as time_bindings
from ._nccl import transport as transport
from ._system import Gpu as Gpu
from ._system import HardwareSpecError as HardwareSpecError
from ._system import Level as Level
from ._system import System as System
from ._system import ALGORITHMS as ALGORITHMS
from ._system import NETWORK_KEYS as NETWORK_KEYS
from ._system import PROTOCOLS as PROTOCOLS
from ._system import TRANSPORTS as TRANSPORTS
from ._system import HOST_CPUS as HOST_CPUS
from ._system import UnusedHelperLevel as UnusedHelperLevel
from ._system import with_network as with_network

__all__ = ["add_catalog", "ALGORITHMS", "CATALOG_DIR", "catalog_dirs", "CATALOG_ENV", "Gpu", "HardwareSpecError",
           "HOST_CPUS", "hop_latencies", "Level", "load", "load_file", "names", "NETWORK_KEYS", "network_latency",
           "PROTOCOLS", "System", "time_bindings", "TIME_SYMBOLS", "Transport", "transport", "TRANSPORTS",
           "UnusedHelperLevel", "with_network"]
