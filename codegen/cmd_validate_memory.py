"""``symcost validate-memory [--data FILE.csv]``: memory per rank against ZeRO Table 1 and Megatron-LM Figure 1.

Parsing and printing only; the work is ``codegen.validation.memory.run_memory_validation``.
(To become ``symcost validate memory`` once the CLI has sub-command groups.)
"""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate-memory", help="compare memory per rank with published figures",
                       description="Reproduce ZeRO's Table 1 (model states per device) and predict the first "
                                   "pipeline stage's memory per GPU of the Megatron-LM runs of Korthikanti et al. "
                                   "2022 (Figure 1) under the paper's assumptions; print each row with its "
                                   "relative errors and, last, one JSON line. Exit 1 when a row misses the bounds "
                                   "(activations 2 %%, parameters + optimizer 5 %%).")
    p.add_argument("--data", metavar="FILE.csv", type=Path, default=None,
                   help="a CSV with the columns of tests/data/megatron_memory_figure1.csv (default: the shipped "
                        "copy, and ZeRO's Table 1 first)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .validation.memory import run_memory_validation

    return run_memory_validation(args.data)
