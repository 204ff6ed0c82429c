"""The hardware description types: a system is an ordered list of network levels.

A level groups units of the level below it (devices, for the innermost level) and
says how fast one device talks across it. Bandwidths are datasheet (or, for the
Ascend systems, the original model's) peaks per device and per direction, in
bytes/s; a measured efficiency factor, where one exists, is kept apart from the
peak so that neither hides in the other.

Every check lives in ``__post_init__`` so that a ``System`` built in Python obeys
the same rules as one read from the catalog; the loader only adds the file and
the key path to the message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["ALGORITHMS", "HOST_CPUS", "HardwareSpecError", "Gpu", "Level", "NETWORK_KEYS", "PROTOCOLS", "TRANSPORTS",
           "UnusedHelperLevel", "System", "positive_real", "with_network"]

#: bytes/s per GB/s: the original's bandwidths and the CP inputs are in GB/s (decimal).
BYTES_PER_S_PER_GBPS = 1e9

#: How a marketed bandwidth counts directions: the factor from the per-direction peak to it.
DIRECTIONS = {"per_direction": 1.0, "bidirectional": 2.0}

#: Scale-out transports a network level may name (``transport``), with what NCCL runs over each: ``ib``
#: InfiniBand and ``roce`` RoCE (NCCL's own IB verbs plugin), ``efa`` AWS Elastic Fabric Adapter (the
#: aws-ofi-nccl plugin), ``tcp`` sockets or Google's GPUDirect-TCPX/TCPXO plugins. Their NCCL-side facts are in
#: ``hardware/nccl_tuning.toml`` (``[transports.<name>]``).
TRANSPORTS = ("ib", "roce", "efa", "tcp")

#: NCCL's algorithms and protocols the time model prices (NCCL_ALGO / NCCL_PROTO names, lower case): a transport's
#: restrictions (``hardware/nccl_tuning.toml``) and a network level's per-protocol latencies name them.
ALGORITHMS = ("tree", "ring", "nvls", "nvlstree", "pat")
PROTOCOLS = ("ll", "ll128", "simple")

#: The host CPUs NCCL's tuner tells apart (``ncclTopoCpuType``: x86 Intel, x86 AMD, Arm such as NVIDIA Grace); what
#: each changes is in ``hardware/nccl_tuning.toml`` (``[hosts.<name>]``).
HOST_CPUS = ("intel", "amd", "arm")

#: GPU generations the time model knows (keys of ``hardware/nccl_tuning.toml``), by compute capability.
GENERATIONS = ("ampere", "hopper", "blackwell")


class HardwareSpecError(ValueError):
    """A hardware description or name the catalog cannot use.

    The message names the file (when there is one), the key path inside it and
    the offending value.
    """


def positive_real(key: str, value: object) -> float:
    """*value* as a float when it is a finite number > 0 (the catalog's and the NCCL table's numbers).

    Raises:
        HardwareSpecError: naming *key* and the value.
    """
    # bool is an int in Python; ``bandwidth = true`` is a typo, not the number 1.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise HardwareSpecError(f"{key}: must be a number, got {value!r} ({type(value).__name__})")
    if not math.isfinite(value) or value <= 0:
        raise HardwareSpecError(f"{key}: must be a finite number > 0, got {value!r}")
    return float(value)


def _positive_int(key: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise HardwareSpecError(f"{key}: must be an integer, got {value!r} ({type(value).__name__})")
    if value <= 0:
        raise HardwareSpecError(f"{key}: must be an integer > 0, got {value!r}")
    return value


def _fraction(key: str, value: object) -> float:
    number = positive_real(key, value)
    if number > 1:
        raise HardwareSpecError(f"{key}: an efficiency is a fraction of the peak, in (0, 1]; got {value!r}")
    return number


def _text(key: str, value: object, *, empty_ok: bool = False) -> str:
    if not isinstance(value, str):
        raise HardwareSpecError(f"{key}: must be a string, got {value!r} ({type(value).__name__})")
    if not empty_ok and not value.strip():
        raise HardwareSpecError(f"{key}: must not be empty, got {value!r}")
    return value


@dataclass(frozen=True)
class Level:
    """One network level of a system, innermost first.

    Attributes:
        name: what the level is ("node", "nvlink", "infiniband", …).
        devices: the level's bound: how many units of the level below one unit of
            this level holds (devices, for the innermost level). ``None`` means
            unbounded, which only the top level may be.
        bandwidth_bytes_per_s: peak bandwidth of one device across this level, per
            direction, in bytes/s.
        latency_s: latency across the level in seconds; ``None`` when no source
            states one.
        efficiency: measured fraction of the peak that transfers reach, in (0, 1];
            ``None`` when no measurement is recorded (the peak is then used as is).
        fabric: free text naming the interconnect.
        nics_per_unit: scale-out NICs of one unit of the level below (a node's NICs, on the network level).
        nvls: the level's switches reduce in the network (NVLink SHARP), innermost level only.
        transport: on the scale-out level, what the network runs (``TRANSPORTS``); ``None`` = ``ib``.
        nic_bandwidth_bytes_per_s: peak of one NIC per direction; ``None`` = the level's per-device bandwidth
            times the node's devices over its NICs.
        nccl_net_latency_s: the latency the NCCL network plugin reports (``ncclNetProperties.latency``), added to
            every network hop NCCL's tuner prices; ``None`` = the transport's (``hardware/nccl_tuning.toml``).
        net_latency_ll_s, net_latency_ll128_s, net_latency_simple_s: what one network hop takes per protocol where
            stated (a published measurement, a calibration: ``symcost calibrate``); ``None`` = the plugin's latency
            (twice with Simple).
        rail_optimized: NIC k of every node on one switch rail (DGX SuperPOD style); shown, not yet priced.
        sharp: the switches reduce in the network (SHARP, NCCL's CollNet); shown, not priced (NCCL runs CollNet only
            with NCCL_COLLNET_ENABLE=1, off by default).
        devices_per_host: innermost level only, where one unit spans several hosts: the devices of one host (GB200
            NVL72: a rack's NVLink domain of 72 GPUs over 18 compute trays of 4); ``None`` = the unit is one host.
    """

    name: str
    devices: int | None
    bandwidth_bytes_per_s: float
    latency_s: float | None = None
    efficiency: float | None = None
    fabric: str = ""
    marketed_bandwidth_bytes_per_s: float | None = None
    marketed_direction: str | None = None
    nics_per_unit: int | None = None
    nvls: bool = False
    transport: str | None = None
    nic_bandwidth_bytes_per_s: float | None = None
    nccl_net_latency_s: float | None = None
    net_latency_ll_s: float | None = None
    net_latency_ll128_s: float | None = None
    net_latency_simple_s: float | None = None
    rail_optimized: bool = True
    sharp: bool = False
    devices_per_host: int | None = None

    def __post_init__(self) -> None:
        _text("name", self.name)
        if self.transport is not None and self.transport not in TRANSPORTS:
            raise HardwareSpecError(f"transport: one of {', '.join(TRANSPORTS)}, got {self.transport!r}")
        if self.nic_bandwidth_bytes_per_s is not None:
            object.__setattr__(self, "nic_bandwidth_bytes_per_s",
                               positive_real("nic_bandwidth_bytes_per_s", self.nic_bandwidth_bytes_per_s))
        for key in ("nccl_net_latency_s", *(f"net_latency_{p}_s" for p in PROTOCOLS)):
            latency = getattr(self, key)
            if latency is None:
                continue
            if isinstance(latency, bool) or not isinstance(latency, (int, float)) or not math.isfinite(latency) \
                    or latency < 0:
                raise HardwareSpecError(f"{key}: must be a finite number >= 0, got {latency!r}")
            object.__setattr__(self, key, float(latency))
        for key in ("rail_optimized", "sharp"):
            if not isinstance(getattr(self, key), bool):
                raise HardwareSpecError(f"{key}: must be true or false, got {getattr(self, key)!r}")
        if self.devices is not None:
            _positive_int("devices", self.devices)
        if self.nics_per_unit is not None:
            _positive_int("nics_per_unit", self.nics_per_unit)
        if self.devices_per_host is not None:
            _positive_int("devices_per_host", self.devices_per_host)
            if self.devices is None or self.devices % self.devices_per_host:
                raise HardwareSpecError(f"devices_per_host: {self.devices_per_host} does not divide the level's "
                                        f"devices ({self.devices})")
        if not isinstance(self.nvls, bool):
            raise HardwareSpecError(f"nvls: must be true or false, got {self.nvls!r}")
        object.__setattr__(self, "bandwidth_bytes_per_s",
                           positive_real("bandwidth_bytes_per_s", self.bandwidth_bytes_per_s))
        if (self.marketed_bandwidth_bytes_per_s is None) != (self.marketed_direction is None):
            raise HardwareSpecError("marketed_bandwidth_bytes_per_s: give it together with marketed_direction")
        if self.marketed_bandwidth_bytes_per_s is not None:
            object.__setattr__(self, "marketed_bandwidth_bytes_per_s",
                               positive_real("marketed_bandwidth_bytes_per_s", self.marketed_bandwidth_bytes_per_s))
            if not isinstance(self.marketed_direction, str) or self.marketed_direction not in DIRECTIONS:
                raise HardwareSpecError(f"marketed_direction: one of {', '.join(DIRECTIONS)}, "
                                        f"got {self.marketed_direction!r}")
            # The stored peak is per direction: the marketed figure must be it, or twice it.
            per_direction = self.marketed_bandwidth_bytes_per_s / DIRECTIONS[self.marketed_direction]
            if not math.isclose(per_direction, self.bandwidth_bytes_per_s, rel_tol=1e-9):
                raise HardwareSpecError(
                    f"bandwidth_bytes_per_s: {self.bandwidth_bytes_per_s!r} is not the per-direction share of the "
                    f"marketed {self.marketed_bandwidth_bytes_per_s!r} bytes/s ({self.marketed_direction}), "
                    f"which is {per_direction!r}")
        if self.latency_s is not None:
            object.__setattr__(self, "latency_s", positive_real("latency_s", self.latency_s))
        if self.efficiency is not None:
            object.__setattr__(self, "efficiency", _fraction("efficiency", self.efficiency))
        _text("fabric", self.fabric, empty_ok=True)

    @property
    def net_latency_s(self) -> dict[str, float]:
        """The per-protocol hop latencies this level states, by protocol (``ll``, ``ll128``, ``simple``)."""
        return {p: v for p in PROTOCOLS if (v := getattr(self, f"net_latency_{p}_s")) is not None}

    @property
    def unbounded(self) -> bool:
        """True for the top level, which holds any number of units."""
        return self.devices is None

    @property
    def bandwidth_gbps(self) -> float:
        """The peak bandwidth in GB/s (1e9 bytes/s), the unit of the original's tables."""
        return self.bandwidth_bytes_per_s / BYTES_PER_S_PER_GBPS


@dataclass(frozen=True)
class UnusedHelperLevel:
    """A figure of the original's ``level_bandwidth`` / ``level_efficiency`` /
    ``level_latency`` helpers, which no path of the reference model calls.

    Kept so that the catalog records everything the original says about its
    hardware, apart from what the model uses.

    Attributes:
        name: the original's ``NetworkLevel`` member ("NODE", "CLUSTER").
        bandwidth_bytes_per_s: ``level_bandwidth`` in bytes/s.
        efficiency: ``level_efficiency``, a fraction in (0, 1].
        latency_s: ``level_latency`` in seconds.
    """

    name: str
    bandwidth_bytes_per_s: float
    efficiency: float
    latency_s: float

    def __post_init__(self) -> None:
        _text("name", self.name)
        object.__setattr__(self, "bandwidth_bytes_per_s",
                           positive_real("bandwidth_bytes_per_s", self.bandwidth_bytes_per_s))
        object.__setattr__(self, "efficiency", _fraction("efficiency", self.efficiency))
        object.__setattr__(self, "latency_s", positive_real("latency_s", self.latency_s))


def _check_unique(key: str, names: list[str]) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise HardwareSpecError(f"{key}[{i}].name: duplicate level name {name!r}")
        seen.add(name)


@dataclass(frozen=True)
class Gpu:
    """What one GPU of a system brings: generation, links, memory and compute peaks.

    Attributes:
        model: the GPU's name ("H100 SXM5").
        generation: NCCL's per-compute-capability tables to use, one of ``GENERATIONS``.
        compute_capability: CUDA compute capability times ten (80, 90, 100, 103).
        nvlink_links: NVLink links per GPU (NCCL's topology counts each at its per-link bandwidth).
        hbm_bytes: HBM capacity per GPU, bytes (HBM is counted in binary units: 80 GB = 80 GiB).
        peak_flops_bf16_per_s: datasheet dense BF16 tensor peak, FLOP/s (sparsity figures halved).
        peak_flops_fp8_per_s: datasheet dense FP8 tensor peak, FLOP/s; ``None`` where the GPU has no FP8.
        peak_flops_fp4_per_s: datasheet dense FP4 (NVFP4) tensor peak, FLOP/s; ``None`` where the GPU has no FP4
            (before Blackwell).
        compute_efficiency: achieved fraction of the BF16 peak a training step's matrix multiplies reach,
            one published figure per GPU generation (the catalog comment names it); ``None`` where none
            is published (the step-time objective then refuses the system).
        compute_efficiency_fp8: achieved fraction of the FP8 peak the same GEMMs reach in FP8 with delayed
            scaling, their quantization included (Transformer Engine's recipe casts each GEMM's inputs before it),
            one published figure per GPU generation; ``None`` where none is (a run in FP8 is then refused).
        compute_efficiency_fp8_cs, compute_efficiency_mxfp8: the same for FP8 with current scaling and for MXFP8,
            of the FP8 peak; ``compute_efficiency_nvfp4`` for NVFP4, of the FP4 peak. ``None`` where none is
            published (a run in that precision is then refused).
        hbm_bytes_per_s: datasheet peak HBM bandwidth, bytes/s; ``None`` where not stated.
        hbm_efficiency: achieved fraction of that peak for large memory-bound transfers, one published
            figure per GPU generation; ``None`` where none is published.
        vector_flops_per_s: peak 16-bit FLOP/s of the vector (non-tensor) unit, which runs the element-wise
            operations; ``None`` where not stated.
        vector_efficiency: achieved fraction of that peak for a training layer's element-wise operations, one
            published figure per GPU generation; ``None`` where none is published.
        attention_efficiency: achieved fraction of the BF16 peak a fused attention kernel (FlashAttention, cuDNN)
            reaches on a causal layer's forward and backward passes, counted as the step counts its FLOPs (three
            forward passes), one published figure per GPU generation; ``None`` where none is published (the
            scores' matmuls are then sized as GEMMs).
    """

    model: str
    generation: str
    compute_capability: int
    nvlink_links: int
    hbm_bytes: float
    peak_flops_bf16_per_s: float
    peak_flops_fp8_per_s: float | None = None
    peak_flops_fp4_per_s: float | None = None
    compute_efficiency: float | None = None
    compute_efficiency_fp8: float | None = None
    compute_efficiency_fp8_cs: float | None = None
    compute_efficiency_mxfp8: float | None = None
    compute_efficiency_nvfp4: float | None = None
    hbm_bytes_per_s: float | None = None
    hbm_efficiency: float | None = None
    vector_flops_per_s: float | None = None
    vector_efficiency: float | None = None
    attention_efficiency: float | None = None

    def __post_init__(self) -> None:
        _text("model", self.model)
        if self.generation not in GENERATIONS:
            raise HardwareSpecError(f"generation: one of {', '.join(GENERATIONS)}, got {self.generation!r}")
        _positive_int("compute_capability", self.compute_capability)
        _positive_int("nvlink_links", self.nvlink_links)
        object.__setattr__(self, "hbm_bytes", positive_real("hbm_bytes", self.hbm_bytes))
        object.__setattr__(self, "peak_flops_bf16_per_s",
                           positive_real("peak_flops_bf16_per_s", self.peak_flops_bf16_per_s))
        if self.peak_flops_fp8_per_s is not None:
            object.__setattr__(self, "peak_flops_fp8_per_s",
                               positive_real("peak_flops_fp8_per_s", self.peak_flops_fp8_per_s))
        if self.peak_flops_fp4_per_s is not None:
            object.__setattr__(self, "peak_flops_fp4_per_s",
                               positive_real("peak_flops_fp4_per_s", self.peak_flops_fp4_per_s))
        if self.compute_efficiency is not None:
            object.__setattr__(self, "compute_efficiency", _fraction("compute_efficiency", self.compute_efficiency))
        for name in ("compute_efficiency_fp8", "compute_efficiency_fp8_cs", "compute_efficiency_mxfp8",
                     "compute_efficiency_nvfp4"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _fraction(name, getattr(self, name)))
        if self.hbm_bytes_per_s is not None:
            object.__setattr__(self, "hbm_bytes_per_s", positive_real("hbm_bytes_per_s", self.hbm_bytes_per_s))
        if self.hbm_efficiency is not None:
            object.__setattr__(self, "hbm_efficiency", _fraction("hbm_efficiency", self.hbm_efficiency))
        if self.vector_flops_per_s is not None:
            object.__setattr__(self, "vector_flops_per_s", positive_real("vector_flops_per_s", self.vector_flops_per_s))
        if self.vector_efficiency is not None:
            object.__setattr__(self, "vector_efficiency", _fraction("vector_efficiency", self.vector_efficiency))
        if self.attention_efficiency is not None:
            object.__setattr__(self, "attention_efficiency",
                               _fraction("attention_efficiency", self.attention_efficiency))


@dataclass(frozen=True)
class System:
    """A machine as a hierarchy of network levels.

    Attributes:
        name: the catalog name (the TOML file's stem), e.g. "A2", "dgx_h100".
        description: one line on what the system is and where its figures come from.
        levels: at least two levels, innermost first; every level but the last is
            bounded, the last is unbounded.
        unused_helper_levels: figures the original states but never uses (A2, A3).
        aliases: other names the system answers to (e.g. the measurement files' ``h100_sxm``).
        original_stage_cost_scale: the factor the original model applies to every dimension's
            stage cost on this system: 0.5 on A3 (the original halves A3's volumes, selected by the
            device name in its code), 1 elsewhere. Kept as data so that callers need not test names.
        gpu: the GPU's facts for the time, memory and compute models; ``None`` (A2, A3) when the
            system is only described as the original models it.
        host_cpu: the node's host CPU as NCCL's tuner tells them apart, one of :data:`HOST_CPUS` (default
            ``"intel"``, the row NCCL's tables are first written for): its network overhead, its LL bandwidth
            across nodes and, on Blackwell, the NVLS-tree's medium-size correction depend on it.
    """

    name: str
    description: str
    levels: tuple[Level, ...]
    unused_helper_levels: tuple[UnusedHelperLevel, ...] = ()
    aliases: tuple[str, ...] = ()
    original_stage_cost_scale: float = 1.0
    gpu: Gpu | None = None
    host_cpu: str = "intel"

    def __post_init__(self) -> None:
        _text("name", self.name)
        _text("description", self.description)
        object.__setattr__(self, "aliases", tuple(self.aliases))
        for i, alias in enumerate(self.aliases):
            _text(f"aliases[{i}]", alias)
        object.__setattr__(self, "original_stage_cost_scale",
                           positive_real("original_stage_cost_scale", self.original_stage_cost_scale))
        if self.gpu is not None and not isinstance(self.gpu, Gpu):
            raise HardwareSpecError(f"gpu: must be a Gpu, got {self.gpu!r}")
        if self.host_cpu not in HOST_CPUS:
            raise HardwareSpecError(f"host_cpu: one of {', '.join(HOST_CPUS)}, got {self.host_cpu!r}")
        object.__setattr__(self, "levels", tuple(self.levels))
        object.__setattr__(self, "unused_helper_levels", tuple(self.unused_helper_levels))
        for i, level in enumerate(self.levels):
            if not isinstance(level, Level):
                raise HardwareSpecError(f"levels[{i}]: must be a Level, got {level!r}")
        for i, helper in enumerate(self.unused_helper_levels):
            if not isinstance(helper, UnusedHelperLevel):
                raise HardwareSpecError(f"unused_helper_levels[{i}]: must be an UnusedHelperLevel, got {helper!r}")
        # Two levels at least: the CP topology needs an intra-node and an inter-node bandwidth.
        if len(self.levels) < 2:
            raise HardwareSpecError(
                f"levels: needs at least two levels (a bounded innermost level and the unbounded top), "
                f"got {len(self.levels)}")
        last = len(self.levels) - 1
        for i, level in enumerate(self.levels):
            if i < last and level.unbounded:
                raise HardwareSpecError(
                    f"levels[{i}] ({level.name!r}): only the top (last) level may be unbounded; "
                    f"this one is level {i} of {last}")
        if not self.levels[last].unbounded:
            raise HardwareSpecError(
                f"levels[{last}] ({self.levels[last].name!r}): the top (last) level must be unbounded, "
                f"got devices = {self.levels[last].devices!r}")
        _check_unique("levels", [level.name for level in self.levels])
        for i, level in enumerate(self.levels[1:], 1):
            if level.devices_per_host is not None:
                raise HardwareSpecError(f"levels[{i}] ({level.name!r}).devices_per_host: the innermost level's key "
                                        f"only (its devices on one host), got {level.devices_per_host!r}")
        _check_unique("unused_helper_levels", [helper.name for helper in self.unused_helper_levels])

    @property
    def nics_per_node(self) -> int:
        """Scale-out NICs of one unit of the innermost level (level 1's ``nics_per_unit``; 1 if unstated)."""
        return self.levels[1].nics_per_unit or 1

    @property
    def network(self) -> Level:
        """The scale-out level (level 1): NICs, their bandwidth and transport."""
        return self.levels[1]

    @property
    def nic_bandwidth_bytes_per_s(self) -> float:
        """Peak of one scale-out NIC per direction: stated, or the level's per-device peak times the node's
        devices over its NICs (equal to it on one-NIC-per-GPU nodes)."""
        stated = self.network.nic_bandwidth_bytes_per_s
        if stated is not None:
            return stated
        return self.network.bandwidth_bytes_per_s * self.devices_per_node / self.nics_per_node

    @property
    def hosts_per_node(self) -> int:
        """Hosts one unit of the innermost level spans: 18 compute trays in a GB200 NVL72 rack's NVLink domain, 1
        where a node is one host (level 0's ``devices_per_host``)."""
        per_host = self.levels[0].devices_per_host
        return 1 if per_host is None else self.devices_per_node // per_host

    @property
    def devices_per_node(self) -> int:
        """Devices under one unit of the innermost level (the original's ``intra_node_num()``)."""
        devices = self.levels[0].devices
        assert devices is not None  # __post_init__: only the top level is unbounded
        return devices

    def level_bounds(self) -> tuple[int | None, ...]:
        """The bound of each level, innermost first; ``None`` for the unbounded top.

        The original's ``level_bound_number``: A2 gives ``(8, None)``.
        """
        return tuple(level.devices for level in self.levels)

    def level_bandwidths_gbps(self) -> tuple[float, ...]:
        """The peak bandwidth of each level in GB/s, innermost first.

        The original's ``level_bandwidth`` table, in its unit: the score divides
        volumes by these GB/s numbers. A2 gives ``(50.0, 10.0)``. Efficiency
        factors are not applied, as in the original.
        """
        return tuple(level.bandwidth_gbps for level in self.levels)

    def bindings(self) -> dict[str, float]:
        """Values for the hardware symbols of ``symbolic/symbols.py``, keyed by symbol name.

        The CP topology sees level 0 as "intra-node" and level 1 as "inter-node";
        its bandwidths are in GB/s, as the original's CP inputs are. The level
        score has one symbol per level (``tests/test_hardware.py`` checks that
        every key is a declared symbol, so a system deeper than the declared
        level symbols fails there).

        Returns:
            ``device_per_node`` and ``device_intra_node_num`` (devices, level 0's
            bound), ``bw_intra`` and ``bw_inter`` (GB/s, levels 0 and 1),
            ``level_bw_<l>`` for every level (GB/s) and ``level_bound_<l>`` for
            every bounded level.
        """
        bounds = self.level_bounds()
        bandwidths = self.level_bandwidths_gbps()
        values: dict[str, float] = {
            "device_per_node": self.devices_per_node,
            "bw_intra": bandwidths[0],
            "bw_inter": bandwidths[1],
            "device_intra_node_num": self.devices_per_node,
        }
        for lvl, bandwidth in enumerate(bandwidths):
            values[f"level_bw_{lvl}"] = bandwidth
        for lvl, bound in enumerate(bounds):
            if bound is not None:
                values[f"level_bound_{lvl}"] = bound
        return values


#: The keys of a network description (a system file's ``[network]`` table, ``with_network``'s arguments).
NETWORK_KEYS = ("name", "fabric", "transport", "nics_per_node", "nic_bandwidth_bytes_per_s", "nccl_net_latency_s",
                "net_latency_ll_s", "net_latency_ll128_s", "net_latency_simple_s", "efficiency", "rail_optimized",
                "sharp")


def with_network(system: System, *, system_name: str | None = None, description: str | None = None,
                 **network: object) -> System:
    """*system*'s nodes on another scale-out network: a cluster is a node times a network.

    *network* takes the keys of :data:`NETWORK_KEYS`; the ones not given keep *system*'s. The new network level
    keeps the node's level below it; its per-device bandwidth is ``nics_per_node × nic_bandwidth / devices per
    node`` (the marketed figures of the old network are dropped).

    Raises:
        HardwareSpecError: an unknown key, or a value the level refuses (naming the key and the value).
    """
    for key in network:
        if key not in NETWORK_KEYS:
            raise HardwareSpecError(f"{key}: unknown network key (value {network[key]!r}); allowed keys: "
                                    f"{', '.join(NETWORK_KEYS)}")
    old = system.network
    nics = network.get("nics_per_node", system.nics_per_node)
    nics = _positive_int("nics_per_node", nics)
    nic_bw = positive_real("nic_bandwidth_bytes_per_s",
                           network.get("nic_bandwidth_bytes_per_s", system.nic_bandwidth_bytes_per_s))
    fields = {key: getattr(old, key) for key in NETWORK_KEYS
              if key not in ("nics_per_node", "nic_bandwidth_bytes_per_s")}
    fields.update({k: v for k, v in network.items() if k not in ("nics_per_node", "nic_bandwidth_bytes_per_s")})
    level = Level(devices=None, bandwidth_bytes_per_s=nics * nic_bw / system.devices_per_node, latency_s=None,
                  nics_per_unit=nics, nic_bandwidth_bytes_per_s=nic_bw, **fields)  # type: ignore[arg-type]
    levels = (*system.levels[:1], level, *system.levels[2:])
    return System(name=system.name if system_name is None else system_name,
                  description=system.description if description is None else description, levels=levels,
                  aliases=system.aliases if system_name is None else (), gpu=system.gpu, host_cpu=system.host_cpu)
