"""``symcost validate WHAT``: compare a model with measurements.

One sub-choice per model, in ``CHOICES`` (name → (help, register function)); ``collectives`` is the
time model of one collective call against nccl-tests sweeps, ``memory`` the memory per rank against
ZeRO's Table 1 and Megatron-LM's measured memory. Another (``step-time``) is one more entry.

``symcost validate collectives [--data FILE.csv | --logs LOG… --system NAME] [--curves]`` prints how many rows
it read, then (with
``--curves``, first every sweep size by size: measured and predicted µs, bus bandwidths, the algorithm picked) one
line per (system, collective, size band) with the count, median and worst relative error of the predicted time,
then the overall median, and as its last line one JSON object ``{"groups": [{"system", "op", "band", "n",
"median_rel_err", "worst_rel_err"}, …], "overall": {"n", "median_rel_err"}}`` (a multi-node table's groups also
carry ``transport`` and ``nodes``).

Every validation first says how many rows it read; a bad cell or row of its table is one error line naming the
file, line, column and value (exit status 2; ``codegen.validation.csvfile``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

from . import COMMANDS
from ..runtime.inputs import InputError
from ..validation import collectives, no_cyclic_gc, rows_read
from ._logs import log_options


def _register_collectives(p: argparse.ArgumentParser) -> None:
    source = p.add_mutually_exclusive_group()
    source.add_argument("--data", metavar="FILE.csv", default=str(collectives.DEFAULT_DATA),
                   help="measurements with columns system, op, n_gpus, bytes, time_us, or a multi-node table "
                        "(ranks, nodes, gpus_per_node, nics_per_node, nic_gbps, transport, nccl_env: the format of "
                        "codegen/validation/data/nccl_multinode.csv) (default: the shipped one-node nccl-tests "
                        "sweeps, codegen/validation/data/nccl_single_node.csv)")
    source.add_argument("--logs", metavar="LOG", nargs="+",
                        help="raw nccl-tests output (what all_reduce_perf and friends print, one or more runs a file) "
                             "of the cluster --system names; nodes from host names, mpirun -H/-N or --gpus-per-node; "
                             "NCCL_ALGO / NCCL_PROTO on the mpirun line (-x) apply to that run")
    p.add_argument("--system", metavar="NAME",
                   help="with --logs: the catalog system the logs ran on (a node and its network; a user's cluster "
                        "file through --catalog)")
    p.add_argument("--gpus-per-node", metavar="N", dest="gpus_per_node",
                   help="with --logs: GPUs per node where a log lists no host for every rank and no mpirun -H/-N")
    p.add_argument("--op", metavar="OP",
                   help="with --logs: the collective where a log names no nccl-tests binary and its table could be "
                        "several (all_gather, all_to_all)")
    p.add_argument("--curves", action="store_true",
                   help="first print every (system, op, ranks) sweep size by size: measured and predicted time "
                        "(us), their bus bandwidths (GB/s) and the algorithm/protocol the model picks")
    p.set_defaults(func=run_collectives)


def _print_curves(data: collectives.Measurements, rows: tuple) -> None:
    for c in collectives.curves(data, rows):
        print(f"# {c.system} {c.op} ranks={c.ranks}" + (f" ({c.cluster})" if c.cluster else ""))
        print(f"{'bytes':>11} {'measured_us':>12} {'predicted_us':>12} {'rel_err':>8} {'meas_busbw':>10} "
              f"{'pred_busbw':>10}  algorithm")
        bus_m, bus_p = c.busbw_bytes_per_s("measured") / 1e9, c.busbw_bytes_per_s("predicted") / 1e9
        for i, size in enumerate(c.msg_bytes):
            err = (c.predicted_s[i] - c.measured_s[i]) / c.measured_s[i]
            print(f"{int(size):>11} {c.measured_s[i] * 1e6:>12.2f} {c.predicted_s[i] * 1e6:>12.2f} {err:>+8.1%} "
                  f"{bus_m[i]:>10.1f} {bus_p[i]:>10.1f}  {c.algorithm[i]}")


def run_collectives(args: argparse.Namespace) -> int:
    with no_cyclic_gc():  # a table of a million rows holds no reference cycles: no collector scans of it
        return _collectives(args)


def _logs(args: argparse.Namespace) -> collectives.Measurements:
    """The --logs rows as a multi-node table of --system."""
    from ..validation import nccl_logs

    if args.system is None:
        raise InputError("--system: --logs needs the catalog system the logs ran on (a node and its network)")
    per_node, op = log_options(args)
    return nccl_logs.measurements(nccl_logs.read_logs(args.logs, per_node, op), args.system)


def _collectives(args: argparse.Namespace) -> int:
    if args.logs is None:
        for name in ("system", "gpus_per_node", "op"):
            if getattr(args, name) is not None:
                raise InputError(f"--{name.replace('_', '-')}: applies to --logs only (a table states it per row)")
        data = collectives.load_measurements(args.data)
    else:
        data = _logs(args)
    print(rows_read(data.path, data.rows_read))
    rows = collectives.predicted_rows(data)
    if args.curves:
        _print_curves(data, rows)
    groups = collectives.validate(data, rows[0])
    network = data.clusters is not None
    where = f"{'transport':<9} {'nodes':>5} " if network else ""
    op_groups = collectives.validate(data, rows[0], bands=False)
    wide = max([10, *(len(g.system) for g in groups)])  # a user's system name may be longer than the catalog's
    print(f"{'system':<{wide}} {where}{'op':<15} {'band':<6} {'n':>5} {'median':>8} {'worst':>8}   (relative error "
          f"of predicted time; small < 1 MiB <= large)")
    for g in [*groups, *op_groups]:  # the bands, then every size of each group
        where = f"{g.transport:<9} {g.nodes:>5} " if network else ""
        print(f"{g.system:<{wide}} {where}{g.op:<15} {g.band:<6} {g.n:>5} {g.median_rel_err:>8.1%} "
              f"{g.worst_rel_err:>8.1%}")
    total = collectives.overall(data, rows[0])
    print(f"overall: {total['n']} rows, median relative error {total['median_rel_err']:.1%}")
    print(collectives.groups_json(groups, total, op_groups))
    return 0


def _register_memory(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", metavar="FILE.csv", type=Path, default=None,
                   help="a CSV with the columns of the shipped megatron_memory_figure1.csv (default: the shipped "
                        "copy, and ZeRO's Table 1 first)")
    p.set_defaults(func=run_memory)


def run_memory(args: argparse.Namespace) -> int:
    from ..validation.memory import run_memory_validation

    with no_cyclic_gc():
        return run_memory_validation(args.data)


def _register_step_time(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", metavar="FILE.csv", type=Path, default=None,
                   help="a CSV with the columns of the shipped megatron_iteration_times.csv, or of "
                        "nemo_step_times.csv / layout_sweeps.csv (one run per row: model shape, layout, precision, "
                        "measured_step_s; optional recompute_mode, recompute_modules, sequence_parallel, "
                        "flash_attention, overlap, sweep), told apart by the header (default: the shipped "
                        "megatron_iteration_times.csv)")
    p.add_argument("--system", default=None, help="catalog system for every row (default: from the system column)")
    p.set_defaults(func=run_step_time)


def run_step_time(args: argparse.Namespace) -> int:
    from ..validation.step_time import run_step_time_validation

    with no_cyclic_gc():
        return run_step_time_validation(args.data, args.system)


def _register_decision(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", metavar="FILE.csv", type=Path, default=None,
                   help="a table in the format of nemo_step_times.csv (default: the shipped copy, NVIDIA's NeMo / "
                        "Megatron-Bridge throughput); its newest row of each model family x system is a case")
    p.add_argument("--system", default=None, help="catalog system for every row (default: from the system column)")
    p.set_defaults(func=run_decision)


def run_decision(args: argparse.Namespace) -> int:
    from ..validation.csvfile import read_table
    from ..validation.decision import DEFAULT_DATA, decision_cases, decision_summary, left_out, print_decision_report

    path = Path(args.data) if args.data else DEFAULT_DATA
    table = read_table(path)
    with no_cyclic_gc():
        cases = decision_cases(table, args.system)
    print_decision_report(path, cases, left_out(table, args.system))
    return 0 if decision_summary(cases)["holds"] else 1


#: What can be validated: name → (help, function adding its options and setting ``func``).
CHOICES: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None]]] = {
    "collectives": ("collective times (NCCL's model) against nccl-tests measurements", _register_collectives),
    "memory": ("memory per rank against ZeRO's Table 1 and Megatron-LM's Figure 1 (first pipeline stage; exit 1 "
               "when a row misses activations 2 %, parameters + optimizer 5 %)", _register_memory),
    "step-time": ("step time (compute, bubble, exposed comm) against measured Megatron-LM iteration times, or "
                  "NeMo step times and layout sweeps (--data; per sweep: Spearman rank correlation and regret)",
                  _register_step_time),
    "decision": ("the decision test: per model family x system of NVIDIA's published layouts, the search's best "
                 "predicted step against the published layout's (passes within 15 %, the layout fitting; exit 1 "
                 "unless 80 % of the cases pass and none is called infeasible; docs/search.md)", _register_decision),
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help=COMMANDS["validate"],
                       description="Compare a model's predictions with measurements and report the errors.")
    what = p.add_subparsers(dest="what", required=True, metavar="WHAT")
    for name, (help_text, add) in CHOICES.items():
        # The one-line help is %-formatted by argparse (as '%(prog)s'); the description is printed as it is.
        add(what.add_parser(name, help=help_text.replace("%", "%%"), description=help_text))
