"""The ``symcost`` command line: one sub-command per module ``codegen/cli/*.py``."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Collection, NoReturn, Sequence

#: The sub-commands in the order ``symcost --help`` lists them, each with its one-line help. Command NAME is the
#: module ``codegen/cli/NAME.py``, whose ``register(subparsers)`` adds its parser (help from here) and sets
#: ``func``. Only the module of the command being run is imported (:func:`build_parser`): the others bring NumPy,
#: the pricers and the validation tables, which ``symcost --help`` and every other command's start would
#: otherwise pay for.
COMMANDS: dict[str, str] = {
    "eval": "price a parallel layout of a model, stage by stage",
    "check": "check the evaluators against a reference case file",
    "derive": "print the closed form of a formula, a function of the original or a stage",
    "compile": "compile every registered formula into generated/",
    "hardware": "list or show the systems of the hardware catalog",
    "sensitivity": "derivative, elasticity and doubling ratio of the cost per degree",
    "validate": "compare a model with measurements",
    "collective": "predicted time, algbw, busbw and algorithm of one collective call",
    "calibrate": "fit a cluster's network constants to its own nccl-tests logs",
    "models": "list the bundled models",
    "search": "rank every valid layout of a model on N devices",
}


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


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line; with *commands*, only those commands' parsers in full (their modules imported), the
    others as their name and help alone, enough for ``symcost --help`` and for argparse to name an unknown one."""
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
    for name, help_text in COMMANDS.items():
        if commands is None or name in commands:
            importlib.import_module(f"{__name__}.{name}").register(sub)
            _add_catalog_option(sub.choices[name])
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def _add_catalog_option(parser: argparse.ArgumentParser, depth: int = 1) -> None:
    """``--catalog DIR`` among a command's own options too (``symcost validate … --catalog DIR``, where a user
    writes it beside ``--system``), on the command's parser and on each of its actions' (``hardware show``,
    ``validate collectives``). Each level has its own ``dest`` (``command_catalog_<depth>``): argparse copies a
    sub-command's defaults over its parent's values, which would drop the folders given before it."""
    parser.add_argument("--catalog", action="append", dest=f"command_catalog_{depth}", metavar="DIR",
                        help="also read the system files of folder DIR with the bundled catalog (as "
                             "`symcost --catalog DIR` before the command; repeatable)")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # (a parser listed under each of its aliases once)
                _add_catalog_option(child, depth + 1)


def _catalog_folders(args: argparse.Namespace) -> list[str]:
    """The folders ``--catalog`` names on a parsed command line: before the command, then at each level after it."""
    levels = sorted((int(k.rsplit("_", 1)[1]), v) for k, v in vars(args).items() if k.startswith("command_catalog_"))
    return [*(args.catalog or ()), *(folder for _, given in levels for folder in (given or ()))]


class _GlobalOptions(argparse.ArgumentParser):
    """The options before the command, to find which command a command line runs; a usage error is left to the
    whole parser to report."""

    def error(self, message: str) -> NoReturn:
        raise ValueError(message)


def command_of(argv: Sequence[str]) -> str | None:
    """The sub-command *argv* names (the first word after the global options), or ``None`` if it names none or
    its global options do not parse."""
    front = _GlobalOptions(add_help=False)
    # (a value is optional here: a command's own --catalog left without its folder is that command's error to
    # report, naming the option, not a reason to lose track of the command)
    front.add_argument("--catalog", action="append", nargs="?")
    front.add_argument("--version", action="store_true")
    front.add_argument("command", nargs="?")
    try:
        known, _ = front.parse_known_args(list(argv))
    except ValueError:
        return None
    return known.command


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit code. Errors in input print one line and exit 2."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    command = command_of(arguments)
    parser = build_parser((command,) if command in COMMANDS else ())
    try:
        args, unknown = parser.parse_known_args(arguments)
    except SystemExit as done:  # --help, --version, or a usage error already printed on one line
        return done.code if isinstance(done.code, int) else 0 if done.code is None else 2
    if unknown:  # parse_args would blame the top-level parser; name the command they were given to
        prog = f"symcost {args.command}"
        print(f"{prog}: error: unrecognized arguments: {' '.join(unknown)} (see {prog} --help)", file=sys.stderr)
        return 2
    try:
        folders = _catalog_folders(args)
        if folders:
            import hardware

            for folder in folders:
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
