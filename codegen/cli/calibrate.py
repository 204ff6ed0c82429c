"""``symcost calibrate LOG… --system BASE --name NAME --out FILE.toml``: a cluster's network fitted to its own
nccl-tests logs.

Reads the logs (``codegen.validation.nccl_logs``), fits the network level's bandwidth efficiency and per-protocol hop
latencies of *BASE* to them (``codegen.validation.calibration``: least absolute deviations on log time, nothing
else fitted), prints what it fitted, the mean absolute deviation it minimised and the median relative error on
the logs, each against *BASE*'s (and per node count where the logs span several), and each constant's change, and
writes a system file (``base = BASE`` with a ``[network]`` table) for ``symcost --catalog``. An existing file is
never overwritten, and a log whose ``#wrong`` column counts errors (its collective returned wrong data) is refused.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from . import COMMANDS
from ..runtime.inputs import InputError
from ..validation import nccl_logs
from ..validation.calibration import calibrate
from ._logs import log_options

_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help=COMMANDS["calibrate"],
                       description="Fit the network level's bandwidth efficiency and per-protocol hop latencies of a "
                                   "catalog system to raw nccl-tests output of the user's cluster (least absolute "
                                   "deviations on log time) and write a system file for --catalog.")
    p.add_argument("logs", metavar="LOG", nargs="+", help="raw nccl-tests output files (all_reduce_perf and friends)")
    p.add_argument("--system", required=True, metavar="BASE",
                   help="the catalog system the logs ran on: its node and network (a cluster file of --catalog too)")
    p.add_argument("--name", required=True, help="the calibrated system's name (the written file's stem)")
    p.add_argument("--out", required=True, metavar="FILE.toml", help="where to write the system file (must not exist)")
    p.add_argument("--gpus-per-node", dest="gpus_per_node", metavar="N",
                   help="GPUs per node where a log lists no host for every rank and no mpirun -H/-N")
    p.add_argument("--op", metavar="OP", help="the collective where a log names no nccl-tests binary")
    p.set_defaults(func=run)


def _out(args: argparse.Namespace) -> Path:
    if not args.name or not set(args.name) <= _NAME_CHARS or args.name[0] in ".-":
        raise InputError(f"--name: a system name (letters, digits, _ . -), got {args.name!r}")
    out = Path(args.out)
    if out.suffix != ".toml" or out.stem != args.name:
        raise InputError(f"--out: a file named {args.name}.toml (a system's name is its file's stem), got {args.out!r}")
    if out.exists():
        raise InputError(f"--out: {args.out} exists; symcost does not overwrite a file (remove it or name another)")
    if not out.parent.is_dir():
        raise InputError(f"--out: {out.parent} is not a folder")
    return out


def run(args: argparse.Namespace) -> int:
    out = _out(args)
    per_node, op = log_options(args)
    rows = nccl_logs.read_logs(args.logs, per_node, op, argument="LOG")
    broken = next((row for row in rows if row.wrong), None)
    if broken is not None:
        # (a sweep whose collective returned wrong data timed a broken run: no constant is fitted to it)
        raise InputError(f"LOG {broken.path} line {broken.line}: #wrong = {broken.wrong}, the collective returned "
                         f"wrong results; calibration refuses a log with errors (fix the run or drop that sweep)")
    data = nccl_logs.measurements(rows, args.system)
    print(f"{len(rows)} rows read from {len(args.logs)} log file(s)")
    fit = calibrate(data, args.system)
    print(f"fitted on {fit.rows} rows of {args.system}: least absolute deviations on ln(time)")
    print(f"  network bandwidth efficiency: {fit.efficiency:.3f}  (base {fit.base_efficiency:.3f}, "
          f"{fit.efficiency / fit.base_efficiency - 1:+.1%})")
    for protocol, value in fit.latency_s.items():
        base = fit.base_latency_s[protocol] * 1e6
        print(f"  network hop latency, {protocol:<6}: {value * 1e6:8.2f} us  (base {base:.2f} us)")
    print(f"mean |ln predicted - ln measured| on these logs (minimised): {fit.deviation:.3f} calibrated, "
          f"{fit.base_deviation:.3f} with {args.system} as the catalog has it")
    print(f"median relative error on these logs: {fit.median_rel_err:.1%} calibrated, {fit.base_median_rel_err:.1%} "
          f"with {args.system} as the catalog has it")
    if len(fit.by_nodes) > 1:  # where the fit helps, and whether it holds as the nodes grow
        print("median relative error by node count:")
        for nodes, count, calibrated, catalog in fit.by_nodes:
            print(f"  {nodes:>4} nodes, {count:>4} rows: {calibrated:6.1%} calibrated, {catalog:6.1%} catalog")
    text = fit.system_file(args.name, [os.fspath(path) for path in args.logs])
    try:
        with open(out, "x", encoding="utf-8") as handle:  # "x": never overwrite a file written meanwhile
            handle.write(text)
    except FileExistsError:
        raise InputError(f"--out: {args.out} exists; symcost does not overwrite a file") from None
    print(f"wrote {out} (use it with: symcost --catalog {out.parent} … --system {args.name})")
    return 0
