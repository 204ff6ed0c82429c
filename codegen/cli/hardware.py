"""``symcost hardware list|show NAME``: the systems of the hardware catalog."""

from __future__ import annotations

import argparse
import dataclasses
import math
from typing import Any

import hardware
from hardware import Level, System
from symbolic.symbols import SPECS

from . import COMMANDS
from ..runtime.inputs import json_text


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("hardware", help=COMMANDS["hardware"],
                       description="The hardware catalog (hardware/catalog/*.toml): network levels innermost "
                                   "first, peak bandwidth per device and per direction (the marketed figure "
                                   "beside it), the GPU's memory and compute peaks, the values each system "
                                   "gives the original's hardware symbols, and the collective time model's "
                                   "NCCL figures (channels, bandwidths, latencies).")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="one line per system")
    listing.set_defaults(func=run_list)
    show = actions.add_parser("show", help="every field of one system, with units")
    show.add_argument("name", metavar="NAME", help="system name as `symcost hardware list` prints it, e.g. A2")
    show.add_argument("--json", action="store_true", help="print JSON instead of text")
    show.set_defaults(func=run_show)


def _bound(level: Level) -> str:
    return "unbounded" if level.devices is None else f"x{level.devices}"


def _levels_summary(system: System) -> str:
    return " > ".join(f"{level.name} {_bound(level)} @ {level.bandwidth_gbps:g} GB/s" for level in system.levels)


def run_list(args: argparse.Namespace) -> int:
    systems = [hardware.load(name) for name in hardware.names()]
    width = max([len(s.name) for s in systems] + [6])
    print(f"{'system':<{width}}  levels, innermost first (bound @ peak bandwidth per device per direction)")
    for system in systems:
        print(f"{system.name:<{width}}  {_levels_summary(system)}")
    return 0


def _time_bindings(system: System) -> dict[str, float] | None:
    """The collective time model's hardware values (``hardware.time_bindings``); None without GPU facts."""
    from hardware import time_bindings

    return None if system.gpu is None else time_bindings(system)


def _as_json(system: System) -> dict[str, Any]:
    record = dataclasses.asdict(system)
    record["devices_per_node"] = system.devices_per_node
    record["hosts_per_node"] = system.hosts_per_node
    record["level_bounds"] = list(system.level_bounds())
    record["level_bandwidths_gbps"] = list(system.level_bandwidths_gbps())
    record["bindings"] = system.bindings()
    record["time_bindings"] = _time_bindings(system)
    if system.gpu is not None:
        runs = hardware.transport(system)
        hops = hardware.hop_latencies(system)
        record["network"] = {"transport": system.network.transport or "ib", "nics_per_node": system.nics_per_node,
                             "nic_bandwidth_bytes_per_s": system.nic_bandwidth_bytes_per_s,
                             "nccl_net_latency_s": hardware.network_latency(system),
                             "net_latency_s": {p: hops[f"net_latency_{p}_s"] for p in hardware.PROTOCOLS},
                             "rail_optimized": system.network.rail_optimized, "sharp": system.network.sharp,
                             "algorithms": list(runs.algorithms), "protocols": list(runs.protocols)}
    return record


def _optional(value: float | None, unit: str) -> str:
    return "not stated" if value is None else f"{value:g} {unit}"


def _readable(x: float) -> str:
    """The reading of a figure: four significant digits below 10,000, the whole number from there, thousands
    separated, never an exponent (10,000 TFLOP/s and 1,048,576 GiB, where ``,.4g`` writes 1e+04 and 1.049e+06)."""
    return f"{x:,.0f}" if abs(x) >= 1e4 else f"{x:,.4g}"


def _quantity(value: float, unit: str) -> str:
    """*value* in *unit*, with the reading a person wants beside it: GB/s (1e9), KiB to GiB, TFLOP/s, us."""
    if unit == "bytes" and value >= 1024:
        exponent = min(3, int(math.log2(value) // 10))
        return f"{value:g} bytes ({_readable(value / 2 ** (10 * exponent))} {('KiB', 'MiB', 'GiB')[exponent - 1]})"
    readable = {"bytes/s": (1e9, "GB/s"), "FLOP/s": (1e12, "TFLOP/s"), "s": (1e-6, "us")}
    if unit in readable and value:
        scale, name = readable[unit]
        return f"{value:g} {unit} ({_readable(value / scale)} {name})"
    return f"{value:g}" if unit in ("1", "") else f"{value:g} {unit}"


def _print_gpu(system: System) -> None:
    gpu = system.gpu
    if gpu is None:
        print("GPU: none stated (no [gpu] table): memory per rank, compute and collective seconds are not priced "
              "on this system")
        return
    capability = f"{gpu.compute_capability // 10}.{gpu.compute_capability % 10}"
    print(f"GPU: {gpu.model} ({gpu.generation}, compute capability {capability}, "
          f"{gpu.nvlink_links} NVLink links)")
    print(f"  host CPU: {system.host_cpu} (what NCCL's tuner reads: network overhead, LL bandwidth across nodes)")
    rows = (("HBM", gpu.hbm_bytes, "bytes"), ("peak dense BF16", gpu.peak_flops_bf16_per_s, "FLOP/s"),
            ("peak dense FP8", gpu.peak_flops_fp8_per_s, "FLOP/s"),
            ("peak dense FP4", gpu.peak_flops_fp4_per_s, "FLOP/s"),
            ("matrix-multiply efficiency", gpu.compute_efficiency, "(fraction of the BF16 peak)"),
            ("FP8 (delayed scaling) matrix-multiply efficiency", gpu.compute_efficiency_fp8,
             "(fraction of the FP8 peak, quantization included)"),
            ("FP8 (current scaling) matrix-multiply efficiency", gpu.compute_efficiency_fp8_cs,
             "(fraction of the FP8 peak, quantization included)"),
            ("MXFP8 matrix-multiply efficiency", gpu.compute_efficiency_mxfp8,
             "(fraction of the FP8 peak, quantization included)"),
            ("NVFP4 matrix-multiply efficiency", gpu.compute_efficiency_nvfp4,
             "(fraction of the FP4 peak, quantization included)"),
            ("HBM bandwidth", gpu.hbm_bytes_per_s, "bytes/s"),
            ("HBM efficiency", gpu.hbm_efficiency, "(fraction of peak)"),
            ("vector unit", gpu.vector_flops_per_s, "FLOP/s"),
            ("vector efficiency", gpu.vector_efficiency, "(fraction of peak)"),
            ("fused attention efficiency", gpu.attention_efficiency, "(fraction of the BF16 peak)"))
    for label, value, unit in rows:
        print(f"  {label}: {'not stated' if value is None else _quantity(value, unit)}")


def _print_time_bindings(system: System) -> None:
    bindings = _time_bindings(system)
    if bindings is None:
        return
    print("collective time model (NCCL's tuner: hardware/nccl_tuning.toml, per-generation figures applied):")
    for name, value in bindings.items():
        spec = SPECS.get(name)
        described = f"{_quantity(value, spec.unit)}  ({spec.meaning})" if spec else f"{value:g}"
        print(f"  {name} = {described}")


def _print_network(system: System) -> None:
    """The scale-out network as the collective time model reads it (``hardware.transport``)."""
    runs = hardware.transport(system)
    net = system.network
    print(f"      network: {net.transport or 'ib'} (transport), {system.nics_per_node} NICs per node of "
          f"{system.nic_bandwidth_bytes_per_s * 8 / 1e9:g} Gb/s ({system.nic_bandwidth_bytes_per_s / 1e9:g} GB/s) "
          f"each, rail-optimised: {'yes' if net.rail_optimized else 'no'}, SHARP: {'yes' if net.sharp else 'no'}")
    stated = "stated" if net.nccl_net_latency_s is not None else "the transport's"
    print(f"      NCCL network plugin latency: {hardware.network_latency(system) * 1e6:g} us ({stated}; what NCCL's "
          "tuner prices a network hop with)")
    hops = hardware.hop_latencies(system)
    taken = ", ".join(f"{p} {hops[f'net_latency_{p}_s'] * 1e6:g} us" for p in hardware.PROTOCOLS)
    source = "stated" if net.net_latency_s else "the plugin's, twice with Simple"
    print(f"      network hop latency in time: {taken} ({source})")
    print(f"      NCCL algorithms: {', '.join(runs.algorithms)}; protocols: {', '.join(runs.protocols)}")


def run_show(args: argparse.Namespace) -> int:
    system = hardware.load(args.name)
    if args.json:
        print(json_text(_as_json(system), indent=2))
        return 0
    print(f"{system.name}: {system.description}")
    if system.aliases:
        print(f"also answers to: {', '.join(system.aliases)}")
    print(f"devices per node (level 0 bound): {system.devices_per_node} devices")
    print("levels, innermost first (bandwidth: peak per device, per direction):")
    for i, level in enumerate(system.levels):
        holds = "devices" if i == 0 else f"units of {system.levels[i - 1].name!r}"
        bound = "unbounded" if level.devices is None else f"{level.devices} {holds} per unit"
        print(f"  [{i}] {level.name}")
        if level.fabric:
            print(f"      fabric: {level.fabric}")
        print(f"      bound: {bound}")
        print(f"      bandwidth: {level.bandwidth_bytes_per_s:g} bytes/s ({level.bandwidth_gbps:g} GB/s)")
        if level.marketed_bandwidth_bytes_per_s is not None:
            direction = (level.marketed_direction or "direction not stated").replace("_", " ")
            print(f"      marketed: {level.marketed_bandwidth_bytes_per_s / 1e9:g} GB/s, {direction}")
        if level.nics_per_unit is not None:
            print(f"      NICs: {level.nics_per_unit} per unit")
        if i == 1 and system.gpu is not None:
            _print_network(system)
        if i == 0:
            print(f"      NVLink SHARP (NVLS): {'yes' if level.nvls else 'no'}")
            if level.devices_per_host is not None:
                print(f"      hosts: {system.hosts_per_node} per unit, {level.devices_per_host} devices each (one "
                      "node to NCCL's multi-node NVLink)")
        print(f"      latency: {_optional(level.latency_s, 's')}")
        print(f"      efficiency: {_optional(level.efficiency, '(fraction of peak)')}")
    if system.unused_helper_levels:
        print("figures the original states but the reference model never uses:")
        for helper in system.unused_helper_levels:
            print(f"  {helper.name}: bandwidth {helper.bandwidth_bytes_per_s:g} bytes/s "
                  f"({helper.bandwidth_bytes_per_s / 1e9:g} GB/s), efficiency {helper.efficiency:g}, "
                  f"latency {helper.latency_s:g} s")
    _print_gpu(system)
    print("hardware symbol bindings (the original's model):")
    for name, value in system.bindings().items():
        spec = SPECS.get(name)  # tests/test_hardware.py keeps every key declared; print it anyway if not
        described = f"{value:g} {spec.unit}  ({spec.meaning})" if spec else f"{value:g}  (not a declared symbol)"
        print(f"  {name} = {described}")
    _print_time_bindings(system)
    return 0
