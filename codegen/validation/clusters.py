"""The cluster a measured collective ran on: the catalog node, the row's network, and NCCL's settings.

Multi-node nccl-tests tables (the format of ``data/nccl_multinode.csv``) state, per row, the node (``system``, a
catalog name), its scale-out network (``nics_per_node``, ``nic_gbps`` per NIC, blank = the catalog node's,
``transport``: ib, roce, efa, tcp), the placement (``nodes``, ``gpus_per_node``, ``ranks``) and the NCCL
settings of the run (``nccl_env``: ``NAME=VALUE`` pairs joined by ``;``). :func:`cluster` makes the system the
time model prices (``hardware.with_network``) and :func:`nccl_settings` reads the settings the model honours:
``NCCL_ALGO`` and ``NCCL_PROTO`` (NCCL's list syntax, a leading ``^`` excluding what follows); every other
variable is kept as text and not priced.

Public API::

    cluster(system, transport, nics_per_node, nic_gbps=None) -> hardware.System
    cluster_of(node, transport, nics_per_node, nic_gbps=None) -> hardware.System   # of a System at hand
    nccl_settings(env) -> tuple[algorithms | None, protocols | None]
    nccl_version_algorithms(version) -> algorithms | None   # what the NCCL of a version has
    algorithms(NCCL_ALGO value) -> frozenset;  protocols(NCCL_PROTO value) -> frozenset
"""

from __future__ import annotations

import dataclasses
import functools
import math

import hardware

__all__ = ["ALGORITHM_NAMES", "ALGORITHM_SINCE", "PROTOCOL_NAMES", "algorithms", "cluster", "cluster_of",
           "nccl_settings", "nccl_version_algorithms", "nccl_version_before", "protocols"]

#: NCCL_ALGO names (src/graph/tuning.cc ncclAlgoStr, case-insensitive) → the time model's, ``None`` for NCCL's
#: algorithms the model does not price (CollNet needs SHARP switches).
ALGORITHM_NAMES: dict[str, str | None] = {**{a: a for a in hardware.ALGORITHMS}, "collnetdirect": None,
                                           "collnetchain": None, "collnet": None}
#: NCCL_PROTO names (ncclProtoStr) → the time model's.
PROTOCOL_NAMES: dict[str, str | None] = {p: p for p in hardware.PROTOCOLS}


def cluster(system: str, transport: str, nics_per_node: int, nic_gbps: float | None = None) -> hardware.System:
    """The catalog node *system* on a network of *nics_per_node* NICs of *nic_gbps* Gb/s (``None``: the node's
    own NIC speed) running *transport*.

    Where the catalog holds a cluster of that node on that network which states the latency a network hop takes
    (``net_latency_<proto>_s``: AWS P5, H100 on 32 x 100 Gb/s EFA), those measured latencies apply: a row that
    names the node and its network ran on that cluster; so does its host CPU (H100 nodes on 32 x 100 Gb/s EFA are
    P5's, AMD EPYC: NCCL's tuner reads the CPU, ``hardware.HOST_CPUS``). A row that leaves the NIC speed blank (its
    source did not print it) takes the speed of the catalog's cluster of that node, transport and NIC count where
    the catalog states one (A100 nodes on 16 RoCE NICs: OCI's 100 Gb/s), else the node's own NIC speed.

    Raises:
        hardware.HardwareSpecError: an unknown system or transport, or a value the network level refuses.
    """
    catalog = tuple(sorted((str(f), f.stat().st_mtime_ns) for d in hardware.catalog_dirs() for f in d.glob("*.toml")))
    return _cluster(catalog, system, transport, nics_per_node, nic_gbps)


@functools.cache
def _cluster(catalog: tuple[object, ...], system: str, transport: str, nics_per_node: int,
             nic_gbps: float | None) -> hardware.System:
    """:func:`cluster` once per state of the catalog (its files and their times: a user's ``--catalog`` may add
    clusters)."""
    node = hardware.load(system)
    if nic_gbps is None or math.isnan(nic_gbps):
        nic_gbps = _stated_nic_gbps(catalog, node, transport, nics_per_node)
    made = cluster_of(node, transport, nics_per_node, nic_gbps)
    same = [c for c in _catalog_clusters(catalog) if _same_cluster(c, made)]
    hosts = {c.host_cpu for c in same}
    if len(hosts) == 1:  # else none, or catalog files that disagree: the node's host stands
        made = dataclasses.replace(made, host_cpu=hosts.pop())
    stated = {tuple(sorted(c.network.net_latency_s.items())) for c in same if c.network.net_latency_s}
    if len(stated) != 1:  # none, or catalog files that disagree: the transport's latency stands
        return made
    return hardware.with_network(made, **{f"net_latency_{p}_s": v for p, v in stated.pop()})


@functools.cache
def _catalog_clusters(catalog: tuple[object, ...]) -> tuple[hardware.System, ...]:
    """The systems of the catalog (*catalog*: its files, as a cache key) with a scale-out network and a GPU (the ones
    a measured row can have run on)."""
    systems = (hardware.load(name) for name in hardware.names())
    return tuple(s for s in systems if s.gpu is not None and len(s.levels) == 2)


def _stated_nic_gbps(catalog: tuple[object, ...], node: hardware.System, transport: str,
                     nics_per_node: int) -> float | None:
    """The NIC speed (Gb/s) the catalog's clusters of *node* on *nics_per_node* NICs of *transport* state, ``None``
    where none does or where they disagree (the node's own NIC speed then stands)."""
    asked = cluster_of(node, transport, nics_per_node)
    speeds = {c.nic_bandwidth_bytes_per_s * 8 / 1e9 for c in _catalog_clusters(catalog) if _same_nics(c, asked)}
    return speeds.pop() if len(speeds) == 1 else None


def _same_nics(a: hardware.System, b: hardware.System) -> bool:
    """The same node (GPU and NVLink level) with as many NICs of the same transport, at any speed."""
    return (a.gpu == b.gpu and a.levels[0] == b.levels[0]
            and (a.network.transport or "ib") == (b.network.transport or "ib")
            and a.nics_per_node == b.nics_per_node)


def _same_cluster(a: hardware.System, b: hardware.System) -> bool:
    """The same node (GPU and NVLink level) on the same network (transport, NICs per node, NIC speed)."""
    return _same_nics(a, b) and math.isclose(a.nic_bandwidth_bytes_per_s, b.nic_bandwidth_bytes_per_s, rel_tol=1e-9)


def cluster_of(node: hardware.System, transport: str, nics_per_node: int,
               nic_gbps: float | None = None) -> hardware.System:
    """:func:`cluster` of a system at hand (not read from the catalog by name): its network's other facts (a
    stated plugin latency, an efficiency) are kept."""
    if transport not in hardware.TRANSPORTS:
        raise hardware.HardwareSpecError(f"transport: one of {', '.join(hardware.TRANSPORTS)}, got {transport!r}")
    network: dict[str, object] = {"transport": transport, "nics_per_node": nics_per_node, "name": transport}
    if nic_gbps is not None and not math.isnan(nic_gbps):
        network["nic_bandwidth_bytes_per_s"] = nic_gbps * 1e9 / 8
    return hardware.with_network(node, **network)


def _list(name: str, value: str, known: dict[str, str | None]) -> frozenset[str]:
    items = [v.strip().lower() for v in value.split(",") if v.strip()]
    exclude = bool(items) and items[0].startswith("^")
    if exclude:
        items[0] = items[0][1:]
    unknown = [v for v in items if v not in known]
    if not items or unknown:
        raise ValueError(f"{name}={value!r} names {', '.join(unknown) or 'nothing'}; known: {', '.join(sorted(known))}")
    chosen = {known[v] for v in items} - {None}
    every = {v for v in known.values() if v is not None}
    return frozenset(every - chosen if exclude else chosen)


def algorithms(value: str) -> frozenset[str]:
    """The algorithms an ``NCCL_ALGO`` value enables (NCCL's list syntax), in the time model's names.

    Raises:
        ValueError: a name NCCL does not know, or a value that leaves no algorithm the model prices.
    """
    chosen = _list("NCCL_ALGO", value, ALGORITHM_NAMES)
    if not chosen:
        raise ValueError(f"NCCL_ALGO={value!r} leaves only algorithms the model does not price (CollNet)")
    return chosen


def protocols(value: str) -> frozenset[str]:
    """The protocols an ``NCCL_PROTO`` value enables.

    Raises:
        ValueError: a name NCCL does not know.
    """
    return _list("NCCL_PROTO", value, PROTOCOL_NAMES)


#: The NCCL release that brought each algorithm the model prices after ring and tree (the first tag whose
#: ``NCCL_ALGO_*`` list names it: NVLS in v2.17.1, NVLS-tree in v2.18.1, PAT in v2.23.4).
ALGORITHM_SINCE: dict[str, tuple[int, int]] = {"nvls": (2, 17), "nvlstree": (2, 18), "pat": (2, 23)}


def nccl_version_algorithms(version: str) -> frozenset[str] | None:
    """The algorithms the NCCL of *version* (as nccl-tests prints it, ``2.18.3``; text after the number, such as
    ``(image tag)``, is ignored) has; ``None`` where *version* names none (blank: the current NCCL, every one).

    Raises:
        ValueError: ``nccl_version: …`` for a text that starts with no ``MAJOR.MINOR`` number.
    """
    have = _major_minor(version)
    if have is None:
        return None
    return frozenset(a for a in ALGORITHM_NAMES.values() if a is not None and have >= ALGORITHM_SINCE.get(a, (0, 0)))


def nccl_version_before(version: str, release: tuple[int, int]) -> bool:
    """Whether the NCCL of *version* (as :func:`nccl_version_algorithms` reads it) predates *release* (MAJOR,
    MINOR); a blank version is the current NCCL, which does not.

    Raises:
        ValueError: as :func:`nccl_version_algorithms`.
    """
    have = _major_minor(version)
    return have is not None and have < release


def _major_minor(version: str) -> tuple[int, int] | None:
    text = version.strip()
    if not text:
        return None
    head = text.split()[0].split(".")
    if len(head) < 2 or not all(part.isdigit() for part in head[:2]):
        raise ValueError(f"nccl_version: {version!r} is no NCCL version (MAJOR.MINOR[.PATCH], e.g. 2.18.3)")
    return int(head[0]), int(head[1])


def nccl_settings(env: str) -> tuple[frozenset[str] | None, frozenset[str] | None]:
    """The algorithms and protocols a run's NCCL settings (*env*: ``NAME=VALUE`` pairs joined by ``;``) enable;
    ``None`` where the run leaves NCCL's choice open.

    Raises:
        ValueError: ``nccl_env: …`` naming an ``NCCL_ALGO`` / ``NCCL_PROTO`` value NCCL does not know, or one that
            leaves no algorithm the model prices.
    """
    chosen: dict[str, frozenset[str] | None] = {"NCCL_ALGO": None, "NCCL_PROTO": None}
    for part in env.split(";"):
        name, _, value = part.partition("=")
        name = name.strip().upper()
        if name in chosen:
            try:
                chosen[name] = algorithms(value) if name == "NCCL_ALGO" else protocols(value)
            except ValueError as exc:
                raise ValueError(f"nccl_env: {exc}") from None
    return chosen["NCCL_ALGO"], chosen["NCCL_PROTO"]
