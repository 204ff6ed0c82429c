"""The ``symcost`` command line: one sub-command per module ``codegen/cli/*.py``."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from . import check, collective, compile, derive, eval, hardware, models, search, sensitivity, validate

#: Sub-command modules, each with ``register(subparsers)`` that sets ``func``.
COMMANDS = (eval, check, derive, compile, hardware, sensitivity, validate, collective, models, search)


def version() -> str:
    """symcost's version: the installed package's metadata, else (a source checkout) ``pyproject.toml``'s."""
    from importlib import metadata
    from pathlib import Path

    try:
        return metadata.version("symcost")
    except metadata.PackageNotFoundError:
        pass
    import tomllib

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        return str(tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"])
    except (OSError, ValueError, KeyError):
        return "unknown (not installed, no pyproject.toml)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="symcost",
        description="Symbolic communication-cost model of distributed LLM training, compiled to NumPy.",
    )
    parser.add_argument("--version", action="version", version=f"symcost {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit code. Errors in input print one line and exit 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # The reader went away (`symcost eval … | head`): not an error of ours; stop writing quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (ValueError, KeyError, TypeError, OSError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"symcost {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
