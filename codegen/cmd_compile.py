"""``symcost compile [--out DIR] [--check]``: the registry → ``generated/`` (NumPy evaluators)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .compiler import DEFAULT_DIRECTORY, compare_tree, render_tree, write_tree

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compile", help="compile every registered formula into generated/",
                       description="Render every registered formula into NumPy evaluators (one module per "
                                   "dimension, __init__.py with the FORMULAS table). Writes atomically and "
                                   "removes stale files; --check only compares.")
    p.add_argument("--out", metavar="DIR", type=Path, default=None,
                   help=f"output directory (default: {DEFAULT_DIRECTORY.name}/ beside codegen/)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 with a unified diff when DIR differs from what would be written")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    directory = args.out if args.out is not None else DEFAULT_DIRECTORY
    files = render_tree()  # raises CodegenError (a ValueError) naming the formula; cli prints it
    if args.check:
        diff = compare_tree(files, directory)
        if diff.ok:
            print(f"{directory}: up to date ({len(files)} files)")
            return 0
        sys.stdout.write(diff.report(directory))
        return 1
    diff = write_tree(files, directory)
    if diff.ok:
        print(f"{directory}: up to date ({len(files)} files)")
    else:
        print(f"{directory}: wrote {len(files)} files ({len(diff.changed)} changed, {len(diff.missing)} new, "
              f"{len(diff.stale)} stale removed)")
    return 0

