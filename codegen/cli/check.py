"""``symcost check --cases FILE``: every reference case through the project's evaluators."""

from __future__ import annotations

import argparse
import math

from . import COMMANDS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help=COMMANDS["check"],
                       description="Evaluate every case of a reference file (format 1) through the generated "
                                   "evaluators; print cases and worst relative error per function.")
    p.add_argument("--cases", required=True, metavar="FILE", help="reference case file (JSON, format 1)")
    p.add_argument("--allow-missing", action="store_true",
                   help="list functions the project does not implement instead of failing on them")
    p.add_argument("--verbose", "-v", action="store_true", help="print every failing case, not the first five")
    p.set_defaults(func=run)


def _fmt(err: float) -> str:
    return "inf" if math.isinf(err) else f"{err:.3e}"


def run(args: argparse.Namespace) -> int:
    # The reference check is the one command that reads the reference-check code (and SymPy's registry).
    from ..reference.cases import RTOL, load_cases, run_check

    cases = load_cases(args.cases)
    report = run_check(cases)
    width = max([len(n) for n in report.functions] + [len(n) for n in report.missing] + [8])
    print(f"{'function':<{width}}  {'cases':>5}  {'worst rel. error':>16}  worst case")
    for name in sorted(report.functions):
        r = report.functions[name]
        mark = "ok" if not r.failures else f"FAIL ({len(r.failures)})"
        print(f"{name:<{width}}  {r.cases:>5}  {_fmt(r.worst):>16}  {r.worst_case}  {mark}")
        for line in r.failures if args.verbose else r.failures[:5]:
            print(f"    {line}")
    worst = max((r.worst for r in report.functions.values()), default=0.0)
    checked = sum(r.cases for r in report.functions.values())
    print(f"checked {checked} cases of {len(report.functions)} functions; worst relative error {_fmt(worst)} "
          f"(tolerance {RTOL:g})")
    status = 0 if report.ok else 1
    if report.missing:
        names = ", ".join(f"{n} ({c})" for n, c in sorted(report.missing.items()))
        if args.allow_missing:
            print(f"not implemented, skipped: {names}")
        else:
            print(f"not implemented: {names}")
            status = 1
    if not report.ok:
        print("FAILED: some cases miss the tolerance")
    return status
