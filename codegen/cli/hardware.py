"""``symcost hardware list|show NAME``: the systems of the hardware catalog."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import hardware
from hardware import Level, System
from symbolic.symbols import SPECS

from ..inputs import json_text


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("hardware", help="list or show the systems of the hardware catalog",
                       description="The hardware catalog (hardware/catalog/*.toml): network levels innermost "
                                   "first, peak bandwidth per device and per direction, and the values each "
                                   "system gives the model's hardware symbols.")
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


def _as_json(system: System) -> dict[str, Any]:
    record = dataclasses.asdict(system)
    record["devices_per_node"] = system.devices_per_node
    record["level_bounds"] = list(system.level_bounds())
    record["level_bandwidths_gbps"] = list(system.level_bandwidths_gbps())
    record["bindings"] = system.bindings()
    return record


def _optional(value: float | None, unit: str) -> str:
    return "not stated" if value is None else f"{value:g} {unit}"


def run_show(args: argparse.Namespace) -> int:
    system = hardware.load(args.name)
    if args.json:
        print(json_text(_as_json(system), indent=2))
        return 0
    print(f"{system.name}: {system.description}")
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
        print(f"      latency: {_optional(level.latency_s, 's')}")
        print(f"      efficiency: {_optional(level.efficiency, '(fraction of peak)')}")
    if system.unused_helper_levels:
        print("figures the original states but the reference model never uses:")
        for helper in system.unused_helper_levels:
            print(f"  {helper.name}: bandwidth {helper.bandwidth_bytes_per_s:g} bytes/s "
                  f"({helper.bandwidth_bytes_per_s / 1e9:g} GB/s), efficiency {helper.efficiency:g}, "
                  f"latency {helper.latency_s:g} s")
    print("hardware symbol bindings:")
    for name, value in system.bindings().items():
        spec = SPECS.get(name)  # tests/test_hardware.py keeps every key declared; print it anyway if not
        described = f"{value:g} {spec.unit}  ({spec.meaning})" if spec else f"{value:g}  (not a declared symbol)"
        print(f"  {name} = {described}")
    return 0
