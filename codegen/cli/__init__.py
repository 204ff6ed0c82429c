"""The ``symcost`` command line: one sub-command per module ``codegen/cli/*.py``."""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn, Sequence

from . import calibrate, check, collective, compile, derive, eval, hardware, models, search, sensitivity, validate

#: Sub-command modules, each with ``register(subparsers)`` that sets ``func``.
COMMANDS = (eval, check, derive, compile, hardware, sensitivity, validate, collective, calibrate, models, search)


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


class _Parser(argparse.ArgumentParser):
    """argparse with the project's error form: one line naming the argument and the value, exit status 2.

    argparse's own ``error`` prints the whole usage first; the usage stays one ``--help`` away.
    Sub-command parsers are made by ``add_subparsers`` with the parent's class, so they share it.
    """

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _Version(argparse.Action):
    """``--version``, with the version looked up only when asked for: ``importlib.metadata`` costs every
    command's start some 10-20 ms otherwise."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        print(f"symcost {version()}")  # on stdout, as argparse's own version action
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="symcost",
        description="Symbolic cost model of distributed LLM training (communication volumes and seconds, "
                    "memory per rank, step time), compiled to NumPy.",
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="print the version and exit")
    parser.add_argument("--catalog", action="append", metavar="DIR",
                        help="also read the system files (<name>.toml) of folder DIR with the bundled catalog, for "
                             "every command (repeatable; or the environment variable SYMCOST_CATALOG: folders "
                             "joined by the path separator)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit code. Errors in input print one line and exit 2."""
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
    except SystemExit as done:  # --help, --version, or a usage error already printed on one line
        return done.code if isinstance(done.code, int) else 0 if done.code is None else 2
    if unknown:  # parse_args would blame the top-level parser; name the command they were given to
        prog = f"symcost {args.command}"
        print(f"{prog}: error: unrecognized arguments: {' '.join(unknown)} (see {prog} --help)", file=sys.stderr)
        return 2
    try:
        if args.catalog:
            import hardware

            for folder in args.catalog:
                hardware.add_catalog(folder)
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
