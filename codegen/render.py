"""Rendering: a strict Jinja2 environment, the templates' filters, and the header added in Python.

The environment fails on anything undefined (``StrictUndefined``), keeps
the templates' own line structure (``trim_blocks``, ``lstrip_blocks``,
``keep_trailing_newline``) and escapes nothing (it writes Python, not HTML).
Text is laid out by the filters below, in Python, so that a template holds
structure only. The header says which command wrote a file from which
templates, carries a fingerprint of the formulas in it and says "do not
edit"; it has no time stamp and no version, so the output is byte-for-byte
the same for the same registry.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Iterable, Sequence

import jinja2

__all__ = [
    "TEMPLATES_DIR",
    "COMMAND",
    "WIDTH",
    "environment",
    "header",
]

#: Where the ``*.py.jinja`` templates live (package data of ``codegen``).
TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"

#: The command that writes the generated tree, as the header and error messages name it.
COMMAND = "symcost compile"

#: Line width the filters wrap docstrings and comments to.
WIDTH = 100


def _wrap(text: str, indent: int, hanging: int = 0, first: bool = False) -> str:
    """*text* wrapped at spaces to ``WIDTH``; *first*: the first line follows an opening ``\"\"\"``."""
    pad = " " * indent
    opening = " " * (indent + 3)  # where the text starts after an opening triple quote
    lines = textwrap.wrap(text, width=WIDTH, initial_indent=opening if first else pad,
                          subsequent_indent=pad + " " * hanging, break_long_words=False,
                          break_on_hyphens=False)
    if first and lines:
        lines[0] = lines[0][len(opening):]
    return "\n".join(lines) if lines else ("" if first else pad.rstrip())


def docwrap(text: str, indent: int, hanging: int = 0, first: bool = False) -> str:
    """Text made safe inside a triple-quoted docstring, then wrapped (see ``_wrap``)."""
    safe = " ".join(str(text).split()).replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    return _wrap(safe, indent, hanging, first)


def comment(text: str, pad: str) -> str:
    """*text* as ``#`` comment lines at indentation *pad*, continuation lines indented."""
    lines = textwrap.wrap(" ".join(str(text).split()), width=WIDTH - len(pad) - 2, subsequent_indent="    ",
                          break_long_words=True, break_on_hyphens=False)
    return "\n".join(f"{pad}# {line}" for line in lines)


def pyrepr(value: object) -> str:
    """A Python literal: ``repr`` of a string, int, bool or None, or a tuple of them (nested tuples too)."""
    if isinstance(value, tuple):
        return pytuple([pyrepr(item) for item in value])
    if not isinstance(value, (str, int, bool, type(None))):
        raise TypeError(f"pyrepr: expected str, int, bool, None or a tuple of them, got {type(value).__name__}")
    text = repr(value)
    if isinstance(value, str) and text.startswith("'") and '"' not in value:
        text = '"' + text[1:-1] + '"'  # no quote inside: the same literal, in the generated code's quotes
    return text


def pycall(arguments: Sequence[str], head: str, pad: str) -> str:
    """The statement ``head(arguments…)`` at indentation *pad*: on one line when it fits ``WIDTH``, else
    ``head(`` then the arguments filled onto lines four spaces deeper (each kept whole, each followed by
    a comma), then ``)``."""
    one = f"{pad}{head}({', '.join(arguments)})"
    if len(one) <= WIDTH:
        return one
    inner = pad + "    "
    lines: list[str] = []
    line = ""
    for argument in arguments:
        piece = f"{argument},"
        if line and len(inner) + len(line) + 1 + len(piece) > WIDTH:
            lines.append(inner + line)
            line = piece
        else:
            line = f"{line} {piece}" if line else piece
    if line:
        lines.append(inner + line)
    return "\n".join([f"{pad}{head}(", *lines, f"{pad})"])


def pytuple(names: Sequence[str], quote: bool = False) -> str:
    """A tuple display of *names*: ``(a, b)``, ``(a,)``, ``()``; as strings with *quote*."""
    items = [pyrepr(n) if quote else str(n) for n in names]
    if len(items) == 1:
        return f"({items[0]},)"
    return f"({', '.join(items)})"


def environment(loader: jinja2.BaseLoader | None = None) -> jinja2.Environment:
    """The strict environment, loading from ``TEMPLATES_DIR`` unless *loader* is given (tests)."""
    env = jinja2.Environment(
        loader=loader or jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(docwrap=docwrap, comment=comment, pyrepr=pyrepr, pytuple=pytuple, pycall=pycall)
    return env


def header(templates: Iterable[str], fingerprint: str | None) -> str:
    """The comment block that opens every generated file.

    Args:
        templates: the template names the file was rendered from.
        fingerprint: ``symbolic.fingerprints.fingerprint`` of the formulas in the
            file, or None for a file that holds none.
    """
    names = ", ".join(f"codegen/templates/{t}" for t in templates)
    lines = [f"# Generated by `{COMMAND}` from {names}."]
    if fingerprint is not None:
        lines.append(f"# Fingerprint (sha256 of the sorted formulas' srepr): {fingerprint}")
    lines.append(f"# Do not edit: change the formulas under symbolic/ and run `{COMMAND}`.")
    return "\n".join(lines) + "\n"
