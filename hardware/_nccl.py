"""NCCL's cost-model constants (``hardware/nccl_tuning.toml``) and the time model's bindings of a system.

``time_bindings(system)`` gives every hardware-side symbol the collective time formulas
(``symbolic/collective_time.py``) read: NCCL's latencies (times the generation's ``latency_scale``),
its per-generation bandwidth caps, the ring channels its topology search finds on the system's NVLink
(their bus bandwidth capped at the generation's ``app_bus_bw_bytes_per_s``), NCCL's P2P LL threshold, its
point-to-point channels and NVLink step size,
the NIC bandwidth, NVLS availability. The group-side symbols (``msg_bytes``, ``ranks``, ``ranks_per_node``, ``nodes``,
``nics_used``) are the caller's.
"""

from __future__ import annotations

import functools
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ._system import (ALGORITHMS, GENERATIONS, HOST_CPUS, PROTOCOLS, TRANSPORTS, HardwareSpecError, System,
                      positive_real)

__all__ = ["NcclTuning", "RingGraph", "TIME_SYMBOLS", "Transport", "nccl_tuning",
           "hop_latencies", "network_latency", "p2p_channels", "ring_graph", "time_bindings", "transport"]

TUNING_FILE = Path(__file__).resolve().parent / "nccl_tuning.toml"

_LATENCY_KEYS = (
    "alpha_ring_ll_s", "alpha_ring_ll128_s", "alpha_ring_simple_s",
    "alpha_tree_ll_s", "alpha_tree_ll128_s", "alpha_tree_simple_s",
    "hop_nvlink_ring_ll_s", "hop_nvlink_ring_ll128_s", "hop_nvlink_ring_simple_s",
    "hop_nvlink_tree_ll_s", "hop_nvlink_tree_ll128_s", "hop_nvlink_tree_simple_s", "hop_nvlink_nvls_s",
    "hop_net_ring_ll_s", "hop_net_ring_ll128_s", "hop_net_ring_simple_s",
    "hop_net_tree_ll_s", "hop_net_tree_ll128_s", "hop_net_tree_simple_s", "hop_net_nvlstree_s",
    "alpha_pat_simple_s", "pat_rank_latency_s",
)
_GENERATION_REQUIRED = ("nvlink_link_bw_bytes_per_s", "ll_max_bw_bytes_per_s", "ll128_channel_max_bw_bytes_per_s",
                        "tree_channel_max_bw_bytes_per_s", "tree_ll128_channel_max_bw_bytes_per_s",
                        "intra_speeds_bytes_per_s", "tree_channel_max_bw_n2_bytes_per_s",
                        "tree_channel_max_bw_n4_bytes_per_s", "tree_ll128_channel_max_bw_n2_bytes_per_s",
                        "tree_ll128_channel_max_bw_n4_bytes_per_s", "nvlstree_channel_max_bw_n2_bytes_per_s",
                        "nvlstree_channel_max_bw_n4_bytes_per_s")
#: NVLS-tree's thread blocks and largest chunk (only where the generation has NVLS).
_NVLSTREE_KEYS = ("nvlstree_channels_n2", "nvlstree_channels_n4", "nvlstree_chunk_n2_bytes", "nvlstree_chunk_n4_bytes")
_GENERATION_OPTIONAL = ("nvls_efficiency", "latency_scale", "app_bus_bw_bytes_per_s", *_NVLSTREE_KEYS)
_P2P_KEYS = ("ll_threshold_bytes", "nvl_chunk_bytes", "net_chunk_bytes")
_HOST_KEYS = ("net_overhead_s", "ll_max_bw_n2_bytes_per_s", "ll_max_bw_n4_bytes_per_s", "nvlstree_size_correction")
_TRANSPORT_REQUIRED = ("nccl_net_latency_s",)
_TRANSPORT_OPTIONAL = ("algorithms", "protocols")


#: The names ``time_bindings`` binds: every hardware-side symbol of the collective time forms.
TIME_SYMBOLS = frozenset(_LATENCY_KEYS) | frozenset({
    "ring_channels", "ring_channel_bw_bytes_per_s", "p2p_ll_threshold_bytes", "p2p_channels", "p2p_chunk_bytes",
    "p2p_net_chunk_bytes",
    "nvlink_nccl_bw_bytes_per_s",
    "ll_max_bw_bytes_per_s", "ll128_channel_max_bw_bytes_per_s", "tree_channel_max_bw_bytes_per_s",
    "tree_ll128_channel_max_bw_bytes_per_s", "nvls_channel_max_bw_bytes_per_s", "nvls", "nvls_efficiency",
    "nic_bw_bytes_per_s", "gpus_per_node", "nics_per_node", "net_latency_ll_s", "net_latency_ll128_s",
    "net_latency_simple_s", "net_tuner_latency_ll_s", "net_tuner_latency_ll128_s", "net_tuner_latency_simple_s",
    "net_bw_efficiency",
    "ll_max_bw_n2_bytes_per_s", "ll_max_bw_n4_bytes_per_s", "tree_channel_max_bw_n2_bytes_per_s",
    "tree_channel_max_bw_n4_bytes_per_s", "tree_ll128_channel_max_bw_n2_bytes_per_s",
    "tree_ll128_channel_max_bw_n4_bytes_per_s", "nvlstree_channel_max_bw_n2_bytes_per_s",
    "nvlstree_channel_max_bw_n4_bytes_per_s", "net_overhead_s", "nvlstree_size_correction", *_NVLSTREE_KEYS})

#: search.cc: the ring graph searches at most MAXCHANNELS / 2 channels (init.cc line 1177, MAXCHANNELS = 64).
RING_MAX_CHANNELS = 32


def p2p_channels(ring_channels: int) -> int:
    """NCCL's ``p2pnChannels`` on one node: the thread blocks its point-to-point kernel (send/recv, all-to-all) runs.

    ``src/graph/connect.cc`` (``ncclTopoPostset``) doubles the ring graph's channels (``nChannels =
    min(MAXCHANNELS, 2 nChannels)``); ``src/graph/paths.cc`` (``ncclTopoComputeP2pChannels``) takes
    ``min(nChannels, NCCL_MAX_P2P_NCHANNELS = MAXCHANNELS)`` and rounds it up to a power of two (the peers' channels
    are mapped by bit reversal). Left out: the cap by the kernel's argument space (``ncclDevMaxChannelsForArgsBytes``,
    above MAXCHANNELS at the default size) and the extra copies across nodes.
    """
    channels = min(2 * RING_MAX_CHANNELS, 2 * ring_channels)
    return min(2 * RING_MAX_CHANNELS, 1 << max(0, math.ceil(math.log2(channels))))


@dataclass(frozen=True)
class NcclTuning:
    """The constants of ``hardware/nccl_tuning.toml``: latencies (s), per-generation tables (bytes/s), what the
    tuner reads off the host CPU (``hosts``, by :data:`HOST_CPUS` name) and off the scale-out transport."""

    latency: dict[str, float]
    generations: dict[str, dict[str, object]]
    p2p: dict[str, float]
    hosts: dict[str, dict[str, float]]
    transports: dict[str, "Transport"]


@dataclass(frozen=True)
class Transport:
    """What NCCL runs over one scale-out transport (``[transports.<name>]``).

    Attributes:
        nccl_net_latency_s: the latency its network plugin reports to NCCL (seconds, >= 0).
        algorithms: the algorithms it runs (NCCL_ALGO names, lower case), all of :data:`ALGORITHMS` if unrestricted.
        protocols: the protocols it runs, all of :data:`PROTOCOLS` if unrestricted.
    """

    nccl_net_latency_s: float
    algorithms: tuple[str, ...] = ALGORITHMS
    protocols: tuple[str, ...] = PROTOCOLS


def _names(where: str, value: object, known: tuple[str, ...]) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or any(v not in known for v in value):
        raise HardwareSpecError(f"{where}: a non-empty list of {', '.join(known)}, got {value!r}")
    return tuple(value)


def _transport(table: object, where: str) -> Transport:
    table = _check(table, where, _TRANSPORT_REQUIRED, _TRANSPORT_OPTIONAL)
    latency = table["nccl_net_latency_s"]
    if isinstance(latency, bool) or not isinstance(latency, (int, float)) or not 0 <= latency < math.inf:
        raise HardwareSpecError(f"{where}.nccl_net_latency_s: a finite number >= 0, got {latency!r}")
    return Transport(float(latency), _names(f"{where}.algorithms", table.get("algorithms", list(ALGORITHMS)),
                                            ALGORITHMS),
                     _names(f"{where}.protocols", table.get("protocols", list(PROTOCOLS)), PROTOCOLS))


def _host(table: object, where: str) -> dict[str, float]:
    table = _check(table, where, _HOST_KEYS)
    flag = table["nvlstree_size_correction"]
    if flag not in (0, 1) or isinstance(flag, bool):
        raise HardwareSpecError(f"{where}.nvlstree_size_correction: 0 or 1, got {flag!r}")
    return {k: float(flag) if k == "nvlstree_size_correction" else positive_real(f"{where}.{k}", v)
            for k, v in table.items()}


def _check(table: object, where: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict:
    if not isinstance(table, dict):
        raise HardwareSpecError(f"{where}: must be a table, got {table!r}")
    for key in table:
        if key not in required + optional:
            raise HardwareSpecError(f"{where}.{key}: unknown key (value {table[key]!r})")
    for key in required:
        if key not in table:
            raise HardwareSpecError(f"{where}.{key}: missing required key")
    return table


@functools.cache
def nccl_tuning() -> NcclTuning:
    """Read ``hardware/nccl_tuning.toml`` (once per process), checking every key and value.

    Raises:
        HardwareSpecError: a key is unknown or missing, or a number is not finite and > 0.
    """
    try:
        data = tomllib.loads(TUNING_FILE.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise HardwareSpecError(f"{TUNING_FILE}: {exc}") from None
    _check(data, "", ("latency", "p2p", "generations", "hosts", "transports"))
    hosts = {name: _host(table, f"hosts.{name}") for name, table in _check(data["hosts"], "hosts", HOST_CPUS).items()}
    transports = {name: _transport(table, f"transports.{name}")
                  for name, table in _check(data["transports"], "transports", TRANSPORTS).items()}
    p2p = {k: positive_real(f"p2p.{k}", v) for k, v in _check(data["p2p"], "p2p", _P2P_KEYS).items()}
    latency = {k: positive_real(f"latency.{k}", v)
               for k, v in _check(data["latency"], "latency", _LATENCY_KEYS).items()}
    generations: dict[str, dict[str, object]] = {}
    _check(data["generations"], "generations", GENERATIONS)
    for gen in GENERATIONS:
        table = _check(data["generations"][gen], f"generations.{gen}", _GENERATION_REQUIRED, _GENERATION_OPTIONAL)
        out: dict[str, object] = {}
        for key, value in table.items():
            where = f"{TUNING_FILE.name}: generations.{gen}.{key}"
            if key == "intra_speeds_bytes_per_s":
                speeds = [positive_real(where, v) for v in value]
                if speeds != sorted(speeds, reverse=True) or not speeds:
                    raise HardwareSpecError(f"{where}: must be a non-empty list, fastest first")
                out[key] = tuple(speeds)
            else:
                out[key] = positive_real(where, value)
        if "nvls_efficiency" in out:  # a generation with NVLS runs NVLS-tree across nodes: its chunking is needed
            for key in _NVLSTREE_KEYS:
                if key not in out:
                    raise HardwareSpecError(f"{TUNING_FILE.name}: generations.{gen}.{key}: missing (the generation "
                                            "has NVLS)")
        generations[gen] = out
    return NcclTuning(latency=latency, generations=generations, p2p=p2p, hosts=hosts, transports=transports)


@dataclass(frozen=True)
class RingGraph:
    """NCCL's ring graph inside one NVSwitch node: channels and bandwidth per channel (bytes/s)."""

    channels: int
    channel_bw_bytes_per_s: float

    @property
    def bus_bw_bytes_per_s(self) -> float:
        return self.channels * self.channel_bw_bytes_per_s


def ring_graph(total_bw: float, speeds: tuple[float, ...], compute_capability: int) -> RingGraph:
    """The ring channels search.cc finds on one NVSwitch node whose GPUs each have *total_bw* of NVLink.

    search.cc (``ncclTopoCompute``): start at the fastest speed not above the GPU's NVLink bandwidth;
    on a switch every ring channel uses each GPU's link once, so ``floor(total / speed)`` channels fit
    (at most ``RING_MAX_CHANNELS``); lower speeds are tried while ``next / first > 0.49`` and the best
    ``channels × speed`` is kept (the first on ties). Then ``ncclTopoDupChannels`` doubles the channels
    at half the speed unless the speed is below 25 GB/s, or (compute capability > 80) below 50 GB/s with
    more than four channels.
    """
    usable = [s for s in speeds if s <= total_bw] or [speeds[-1]]
    first = usable[0]
    best_channels, best_speed = 0, first
    for speed in usable:
        if speed / first <= 0.49:
            break
        channels = min(RING_MAX_CHANNELS, math.floor(total_bw / speed + 1e-9))
        if channels * speed > best_channels * best_speed:
            best_channels, best_speed = channels, speed
    channels, speed = max(best_channels, 1), best_speed
    keep = speed < 25e9 or (compute_capability > 80 and speed < 50e9 and channels > 4)
    if not keep:
        doubled = min(2 * channels, RING_MAX_CHANNELS)
        speed /= math.ceil(doubled / channels)
        channels = doubled
    return RingGraph(channels, speed)


def transport(system: System) -> Transport:
    """What NCCL runs over *system*'s scale-out network (its level's ``transport``, InfiniBand when unstated)."""
    return nccl_tuning().transports[system.network.transport or "ib"]


def network_latency(system: System) -> float:
    """Seconds NCCL's network plugin reports for *system*'s network: the level's ``nccl_net_latency_s``, else its
    transport's."""
    stated = system.network.nccl_net_latency_s
    return transport(system).nccl_net_latency_s if stated is None else stated


def hop_latencies(system: System) -> dict[str, float]:
    """Seconds one network hop adds to NCCL's hwLat per protocol, in NCCL's tuner and in time.

    ``net_tuner_latency_<proto>_s``, what the tuner prices: the plugin's latency (``network_latency``), counted
    twice with Simple as tuning.cc does (lines 391-393). ``net_latency_<proto>_s``, what a hop takes: the network
    level's ``net_latency_<proto>_s`` where it states one (a measured latency, or a calibration), else the same as
    the tuner's.
    """
    plugin = network_latency(system)
    stated = system.network.net_latency_s
    tuner = {"ll": plugin, "ll128": plugin, "simple": 2 * plugin}
    return {**{f"net_tuner_latency_{p}_s": tuner[p] for p in PROTOCOLS},
            **{f"net_latency_{p}_s": stated.get(p, tuner[p]) for p in PROTOCOLS}}


def time_bindings(system: System) -> dict[str, float]:
    """Values of the hardware-side symbols of ``symbolic/collective_time.py`` for *system*, by symbol name.

    Raises:
        HardwareSpecError: the system has no ``[gpu]`` table (A2, A3: the time model prices GPUs
            through NCCL's model only).
    """
    if system.gpu is None:
        raise HardwareSpecError(f"system {system.name!r} has no [gpu] table: the collective time model needs "
                                "the GPU generation and NVLink links")
    tuning = nccl_tuning()
    gen = tuning.generations[system.gpu.generation]
    nvlink_total = system.gpu.nvlink_links * float(gen["nvlink_link_bw_bytes_per_s"])  # type: ignore[arg-type]
    speeds: tuple[float, ...] = gen["intra_speeds_bytes_per_s"]  # type: ignore[assignment]
    ring = ring_graph(nvlink_total, speeds, system.gpu.compute_capability)
    nvls = system.levels[0].nvls and "nvls_efficiency" in gen
    # Published per-generation figures (nccl_tuning.toml): latencies scaled by a cited small-message
    # measurement, the ring's bus bandwidth capped at the maintainers' effective NVLink bandwidth.
    scale = float(gen.get("latency_scale", 1.0))  # type: ignore[arg-type]
    channel_bw = min(ring.channel_bw_bytes_per_s,
                     float(gen.get("app_bus_bw_bytes_per_s", math.inf)) / ring.channels)  # type: ignore[arg-type]
    out: dict[str, float] = {k: v * scale for k, v in tuning.latency.items()}
    host = tuning.hosts[system.host_cpu]
    out.update({
        "ring_channels": ring.channels,
        "ring_channel_bw_bytes_per_s": channel_bw,
        "p2p_ll_threshold_bytes": tuning.p2p["ll_threshold_bytes"],
        "p2p_channels": p2p_channels(ring.channels),
        "p2p_chunk_bytes": tuning.p2p["nvl_chunk_bytes"],
        # init.cc computeBuffSizes: across nodes the p2p step is P2P_NET_CHUNKSIZE, doubled on Arm hosts of compute
        # capability 10.0 and above (GB200/GB300: 4 GPUs a host).
        "p2p_net_chunk_bytes": tuning.p2p["net_chunk_bytes"] * (
            2 if system.host_cpu == "arm" and system.gpu.compute_capability >= 100 else 1),
        "nvlink_nccl_bw_bytes_per_s": nvlink_total,
        "ll_max_bw_bytes_per_s": gen["ll_max_bw_bytes_per_s"],
        "ll128_channel_max_bw_bytes_per_s": gen["ll128_channel_max_bw_bytes_per_s"],
        "tree_channel_max_bw_bytes_per_s": gen["tree_channel_max_bw_bytes_per_s"],
        "tree_ll128_channel_max_bw_bytes_per_s": gen["tree_ll128_channel_max_bw_bytes_per_s"],
        "nvls_channel_max_bw_bytes_per_s": next((s for s in speeds if s <= nvlink_total), speeds[-1]),
        "nvls": 1.0 if nvls else 0.0,
        # Unused where nvls = 0 (the NVLS candidate is then infinite); 1 keeps the symbol positive.
        "nvls_efficiency": float(gen.get("nvls_efficiency", 1.0)),  # type: ignore[arg-type]
        "nic_bw_bytes_per_s": system.nic_bandwidth_bytes_per_s,
        "gpus_per_node": system.devices_per_node,
        "nics_per_node": system.nics_per_node,
        # The network: what a hop adds per protocol in the tuner and in time (the plugin's latency, twice with
        # Simple; in time a stated one where given; never scaled by the generation's latency_scale, which
        # measures NCCL's own latencies), the fraction of the NICs' peak.
        **hop_latencies(system),
        "net_bw_efficiency": system.network.efficiency or 1.0,
        # The host CPU's (nccl_tuning.toml [hosts]): its network overhead (a latency, scaled as NCCL's others),
        # its LL bandwidths across nodes, and NVLS-tree's medium-size correction on x86 hosts of compute
        # capability 10.0 and above (ncclTopoGetAlgoTime: minCompCap >= 100).
        "net_overhead_s": host["net_overhead_s"] * scale,
        "ll_max_bw_n2_bytes_per_s": host["ll_max_bw_n2_bytes_per_s"],
        "ll_max_bw_n4_bytes_per_s": host["ll_max_bw_n4_bytes_per_s"],
        "nvlstree_size_correction": host["nvlstree_size_correction"] if system.gpu.compute_capability >= 100 else 0.0,
    })
    out.update({k: gen[k] for k in _GENERATION_REQUIRED if k.endswith(("_n2_bytes_per_s", "_n4_bytes_per_s"))})
    # Unused where nvls = 0 (the NVLS-tree candidate is then infinite); 1 keeps the symbols positive.
    out.update({k: float(gen.get(k, 1.0)) for k in _NVLSTREE_KEYS})  # type: ignore[arg-type]
    assert set(out) == TIME_SYMBOLS, sorted(set(out) ^ TIME_SYMBOLS)
    return out  # type: ignore[return-value]
