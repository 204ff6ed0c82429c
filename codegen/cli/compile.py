"""``symcost compile [--out DIR] [--check]``: the registry → ``generated/`` (NumPy evaluators) and ``docs/formulas.md``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import COMMANDS


__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compile", help=COMMANDS["compile"],
                       description="Render every registered formula into NumPy evaluators (one module per "
                                   "dimension, a model's stage terms one per variant, formulas.json with the FORMULAS table) and the formula reference "
                                   "docs/formulas.md. Writes atomically and removes stale files; --check only "
                                   "compares. DIR must be missing, empty, or written by symcost compile before "
                                   "(it holds the marker file .symcost-generated listing the files it wrote): "
                                   "anything else is refused and nothing is written.")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="output directory: missing, empty, or one symcost compile wrote (default: generated/ "
                        "beside codegen/)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 with a unified diff when DIR differs from what would be written")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # The compiler needs SymPy; it loads here, not when the command line is parsed.
    from ..compiler import DEFAULT_DIRECTORY, compare_tree, render_tree, write_tree
    from ..docs import DOCS_PATH, check_formulas_doc, write_formulas_doc

    from ..compiler import check_output_directory

    if args.out is not None and not args.out.strip():
        raise ValueError(f"--out: expected a directory path, got {args.out!r}")
    directory = Path(args.out) if args.out is not None else DEFAULT_DIRECTORY
    if not args.check:
        check_output_directory(directory)  # before the ~40 s of rendering: refuse a directory it did not write
    # The formula reference belongs to the repository's own tree: only with the default output.
    with_docs = args.out is None
    files = render_tree()  # raises CodegenError (a ValueError) naming the formula; cli prints it
    if args.check:
        diff = compare_tree(files, directory)
        doc_report = check_formulas_doc() if with_docs else None
        if diff.ok:
            print(f"{directory}: up to date ({len(files)} files)")
        else:
            sys.stdout.write(diff.report(directory))
        if doc_report:
            sys.stdout.write(doc_report)
        elif with_docs:
            print(f"{DOCS_PATH}: up to date")
        return 0 if diff.ok and not doc_report else 1
    diff = write_tree(files, directory)
    if diff.ok:
        print(f"{directory}: up to date ({len(files)} files)")
    else:
        print(f"{directory}: wrote {len(files)} files ({len(diff.changed)} changed, {len(diff.missing)} new, "
              f"{len(diff.stale)} stale removed)")
    if with_docs:
        print(f"{DOCS_PATH}: {'written' if write_formulas_doc() else 'up to date'}")
    return 0
