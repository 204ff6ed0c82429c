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
    algorithms(NCCL_ALGO value) -> frozenset;  protocols(NCCL_PROTO value) -> frozenset
"""

from __future__ import annotations

import functools
import math

import hardware

__all__ = ["ALGORITHM_NAMES", "PROTOCOL_NAMES", "algorithms", "cluster", "cluster_of", "nccl_settings", "protocols"]

#: NCCL_ALGO names (src/graph/tuning.cc ncclAlgoStr, case-insensitive) → the time model's, ``None`` for NCCL's
#: algorithms the model does not price (CollNet needs SHARP switches; PAT runs at one rank per node).
ALGORITHM_NAMES: dict[str, str | None] = {**{a: a for a in hardware.ALGORITHMS}, "collnetdirect": None,
                                           "collnetchain": None, "collnet": None, "pat": None}
#: NCCL_PROTO names (ncclProtoStr) → the time model's.
PROTOCOL_NAMES: dict[str, str | None] = {p: p for p in hardware.PROTOCOLS}


@functools.cache
def cluster(system: str, transport: str, nics_per_node: int, nic_gbps: float | None = None) -> hardware.System:
    """The catalog node *system* on a network of *nics_per_node* NICs of *nic_gbps* Gb/s (``None``: the node's
    own NIC speed) running *transport*.

    Raises:
        hardware.HardwareSpecError: an unknown system or transport, or a value the network level refuses.
    """
    return cluster_of(hardware.load(system), transport, nics_per_node, nic_gbps)


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
        raise ValueError(f"NCCL_ALGO={value!r} leaves only algorithms the model does not price (CollNet, PAT)")
    return chosen


def protocols(value: str) -> frozenset[str]:
    """The protocols an ``NCCL_PROTO`` value enables.

    Raises:
        ValueError: a name NCCL does not know.
    """
    return _list("NCCL_PROTO", value, PROTOCOL_NAMES)


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
