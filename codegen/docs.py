"""The formula reference ``docs/formulas.md``, and the printers ``symcost derive`` shares with it.

``render_formulas_doc`` renders every registered formula — name, closed form
in LaTeX, symbols with meaning and unit, unit, doc, source — grouped by
dimension with a table of contents, through the strict Jinja2 environment
(``codegen.render.environment``) from ``templates/formulas.md.jinja``. The
output is deterministic: no time stamp, registry order within a group, a
fixed group order. The closed forms are the registered expressions after the
cheap passes of ``symbolic.simplify`` (cached per expression).

The printers keep a symbol's config-field name readable: LaTeX writes a
one-letter name as is, ``x_rest`` as ``x_{\\mathrm{rest}}`` and any other
name upright (``\\mathrm{cp}``, so that ``cp`` does not read as c·p); the text
printer prints names verbatim (SymPy's would turn ``n_output`` into a
subscript and leave ``n_body`` alone).

``symcost compile`` writes the file and ``symcost compile --check`` compares it,
beside ``generated/``.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any, Collection, Iterable, Mapping, Sequence

import sympy
from sympy.printing.pretty.pretty import PrettyPrinter
from sympy.printing.pretty.stringpict import prettyForm

from symbolic import registry
from symbolic.fingerprints import expression_text
from symbolic.formula import Formula
from symbolic.simplify import closed_form
from symbolic.symbols import SPECS, symbol

from .compiler import UNLISTED, forked_map
from .render import COMMAND, environment
from .runtime import cache

__all__ = [
    "DOCS_PATH",
    "TEMPLATE",
    "latex",
    "text",
    "formula_context",
    "render_sections",
    "render_formulas_doc",
    "write_formulas_doc",
    "check_formulas_doc",
]

#: Where the reference lives: ``docs/formulas.md`` beside ``codegen/``.
DOCS_PATH = Path(__file__).resolve().parent.parent / "docs" / "formulas.md"

#: The template it is rendered from (in ``codegen/templates``).
TEMPLATE = "formulas.md.jinja"

#: Dimensions in the order the reference shows them, with their section titles. A dimension not
#: listed here comes after these, by name, under its own name.
GROUPS: tuple[tuple[str, str], ...] = (
    ("attention", "Attention widths"),
    ("cp", "Context parallelism (CP)"),
    ("params", "Parameter counts"),
    ("dp", "Data parallelism (DP)"),
    ("fsdp", "Fully sharded data parallelism (FSDP)"),
    ("tp", "Tensor parallelism (TP)"),
    ("ep", "Expert parallelism (EP)"),
    ("pp", "Pipeline parallelism (PP)"),
    ("recompute", "Recompute"),
    ("score", "Level score"),
    ("model", "Model-level terms"),
    ("collective", "Collective time (seconds, NCCL's model)"),
    ("placement", "Placement of a parallel group"),
    ("stage", "Pipeline-stage terms (one layer's cost to its stage; their derivatives in each degree, "
              "`<name>__d_<x>`, are generated beside them for sensitivity and not listed)"),
)



# ---------------------------------------------------------------- printers


def _latex_name(name: str) -> str:
    """A symbol's name in LaTeX: ``s``, ``n_{\\mathrm{kv}}``, ``\\mathrm{bytes\\_compute}``."""
    if len(name) == 1:
        return name
    head, sep, rest = name.partition("_")
    if sep and len(head) == 1 and rest:
        return "%s_{\\mathrm{%s}}" % (head, rest.replace("_", r"\_"))
    return "\\mathrm{%s}" % name.replace("_", r"\_")


@functools.cache
def _symbol_names() -> dict[sympy.Symbol, str]:
    return {symbol(name): _latex_name(name) for name in SPECS}


def _terms(expr: sympy.Expr, linear_in: Collection[sympy.Symbol]) -> list[tuple[sympy.Expr | None, sympy.Expr]]:
    """The (count group, cost) terms of a ``collect_linear`` layout, in stored order; (None, rest) for the rest."""
    out: list[tuple[sympy.Expr | None, sympy.Expr]] = []
    for term in expr.args if isinstance(expr, sympy.Add) else (expr,):
        if (isinstance(term, sympy.Mul) and len(term.args) == 2
                and term.args[0].free_symbols <= set(linear_in) and not term.args[1].free_symbols & set(linear_in)):
            out.append((term.args[0], term.args[1]))
        else:
            out.append((None, term))
    return out


def latex(expr: sympy.Expr, linear_in: Collection[sympy.Symbol] = ()) -> str:
    """*expr* in LaTeX with the model's symbol names (see the module docstring).

    Args:
        linear_in: when given, *expr* is a ``symbolic.simplify.collect_linear`` layout over these
            symbols: print it as ``count · (cost) + …`` in its stored order (each cost in SymPy's
            usual order).
    """
    if not linear_in:
        return sympy.latex(expr, symbol_names=_symbol_names())
    parts = []
    for group, cost in _terms(expr, linear_in):
        body = sympy.latex(cost, symbol_names=_symbol_names())
        if group is not None:
            if cost.is_Add or isinstance(cost, sympy.Piecewise):
                body = f"\\left({body}\\right)"
            group_text = sympy.latex(group, symbol_names=_symbol_names(), order="none")
            if group.is_Add:
                group_text = f"\\left({group_text}\\right)"
            body = f"{group_text} \\cdot {body}"
        parts.append(body)
    out = parts[0] if parts else "0"
    for part in parts[1:]:
        out += f" - {part[1:].lstrip()}" if part.startswith("-") else f" + {part}"
    return out


class _TextPrinter(PrettyPrinter):
    """SymPy's 2-D text printer with symbol names printed verbatim (no subscripts made of ``_x``)."""

    def _print_Symbol(self, e: sympy.Symbol, bold_name: bool = False) -> prettyForm:
        return prettyForm(e.name)


def _pretty(expr: sympy.Expr, order: str | None = None) -> str:
    settings: dict[str, Any] = {"use_unicode": True, "wrap_line": False}
    if order is not None:
        settings["order"] = order
    return _TextPrinter(settings).doprint(expr)


def text(expr: sympy.Expr, linear_in: Collection[sympy.Symbol] = ()) -> str:
    """*expr* as 2-D Unicode text, lines not wrapped, symbol names verbatim.

    Args:
        linear_in: when given, *expr* is a ``collect_linear`` layout over these symbols: one
            block per term, ``count ×`` on a line of its own above the cost, blocks joined by
            ``+`` lines.
    """
    if not linear_in:
        return _pretty(expr)
    blocks = []
    for group, cost in _terms(expr, linear_in):
        head = ""
        if group is not None:
            name = _pretty(group, "none")
            head = f"({name}) ×\n" if group.is_Add else f"{name} ×\n"
        blocks.append(head + _pretty(cost))
    return "\n+\n".join(blocks)


# ---------------------------------------------------------------- contexts


def _cell(value: str) -> str:
    """Text made safe inside a Markdown table cell or paragraph: no column break, no stray HTML tag."""
    out = " ".join(str(value).split()).replace("|", "\\|")
    return "".join("&lt;" if ch == "<" and nxt.isalpha() else ch for ch, nxt in zip(out, out[1:] + " "))


def _symbols(names: Iterable[str]) -> list[dict[str, str]]:
    return [{"name": n, "latex": _latex_name(n), "meaning": _cell(SPECS[n].meaning), "unit": _cell(SPECS[n].unit)}
            for n in names]


def formula_context(formula: Formula, expr: sympy.Expr | None = None,
                    linear_in: Collection[sympy.Symbol] = ()) -> dict[str, Any]:
    """What the template shows of one formula.

    Args:
        formula: the formula.
        expr: the closed form to show; by default ``closed_form(formula.expr)``.
        linear_in: *expr* is a ``collect_linear`` layout over these symbols (see ``latex``).
    """
    shown = closed_form(formula.expr) if expr is None else expr
    return {
        "name": formula.name,
        "unit": _cell(formula.unit),
        "dimension": formula.dimension,
        "algorithm": _cell(formula.algorithm),
        "variant": _cell(", ".join(f"{k} = {v}" for k, v in formula.variant)),
        "doc": _cell(formula.doc),
        "source": _cell(formula.source),
        "latex": latex(shown, linear_in),
        "symbols": _symbols(formula.arguments),
    }


def _groups(formulas: Sequence[Formula]) -> list[dict[str, Any]]:
    titles = dict(GROUPS)
    by_dimension: dict[str, list[Formula]] = {}
    for f in formulas:
        by_dimension.setdefault(f.dimension, []).append(f)
    order = [d for d, _ in GROUPS if d in by_dimension] + sorted(set(by_dimension) - set(titles))
    # Closed forms cost seconds per large formula: computed side by side (same result as one by one),
    # once per process and formula.
    ordered = [f for d in order for f in by_dimension[d]]
    # Kept in the user's cache too (as the lowered forms are), named by the formula and the code that
    # shows it: compile --check after compile simplifies nothing again.
    for f in ordered:
        if (f.name, f.expr) not in _CONTEXTS:
            context = cache.load("docs", _cache_key(f))
            if isinstance(context, dict) and context.get("name") == f.name:
                _CONTEXTS[(f.name, f.expr)] = context
    todo = [f for f in ordered if (f.name, f.expr) not in _CONTEXTS]
    for f, context in zip(todo, forked_map(formula_context, todo)):
        _CONTEXTS[(f.name, f.expr)] = context
        cache.store("docs", _cache_key(f), context)
    return [{"id": f"dimension-{d}", "dimension": d, "title": titles.get(d, d),
             "formulas": [_CONTEXTS[(f.name, f.expr)] for f in by_dimension[d]]} for d in order]


@functools.cache
def _docs_digest() -> str:
    """A version of the code that turns a formula into its entry: this module, the simplification
    passes, the symbols' declarations, and SymPy's version."""
    here = Path(__file__).resolve().parent
    symbolic_dir = here.parent / "symbolic"
    return cache.source_digest(Path(__file__).resolve(), symbolic_dir / "simplify.py", symbolic_dir / "symbols.py",
                               extra=f"sympy {sympy.__version__}")


def _cache_key(formula: Formula) -> str:
    text = "\n".join((_docs_digest(), formula.name, expression_text(formula.expr), formula.dimension, formula.algorithm,
                      formula.unit, formula.doc, formula.source, repr(formula.variant)))
    return hashlib.sha256(text.encode()).hexdigest()


#: ``formula_context`` of each formula the reference listed, by (name, expression).
_CONTEXTS: dict[tuple[str, object], dict[str, Any]] = {}


def _template() -> Any:
    return environment().get_template(TEMPLATE)


def render_sections(contexts: Sequence[Mapping[str, Any]], level: int = 2) -> str:
    """Markdown sections of the given formula contexts (``formula_context``), without the document header."""
    return _template().render(document=False, level="#" * level, header="", groups=[
        {"id": "", "dimension": "", "title": "", "formulas": list(contexts)}], symbols=[], count=len(contexts))


def render_formulas_doc() -> str:
    """The whole ``docs/formulas.md``, as ``symcost compile`` writes it."""
    formulas = [f for f in (registry.get(name) for name in registry.names()) if f.dimension not in UNLISTED]
    used = sorted({a for f in formulas for a in f.arguments})
    header = (f"<!-- Generated by `{COMMAND}` from codegen/templates/{TEMPLATE} and the formula registry. "
              f"Do not edit: change the formulas under symbolic/ and run `{COMMAND}`. -->")
    return _template().render(document=True, level="###", header=header, groups=_groups(formulas),
                              symbols=_symbols(used), count=len(formulas), command=COMMAND)


# ---------------------------------------------------------------- files


def _file_mode(path: Path) -> int:
    """The existing file's permissions, else those the umask gives a new file."""
    if path.exists():
        return path.stat().st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_formulas_doc(path: Path = DOCS_PATH, content: str | None = None) -> bool:
    """Write the reference to *path* atomically (temporary file, then ``os.replace``).

    Args:
        path: where to write.
        content: the text; rendered when None.

    Returns:
        Whether the file changed.
    """
    content = render_formulas_doc() if content is None else content
    path = Path(path)
    if path.is_file() and path.read_text(encoding="utf-8") == content:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(content)
        os.chmod(tmp, _file_mode(path))  # mkstemp makes it private; the doc is an ordinary file
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def check_formulas_doc(path: Path = DOCS_PATH, content: str | None = None) -> str | None:
    """None when *path* holds exactly the rendered reference, else a report: a unified diff and the fix."""
    content = render_formulas_doc() if content is None else content
    path = Path(path)
    if not path.is_file():
        return f"{path}: missing; run `{COMMAND}` to write it\n"
    current = path.read_text(encoding="utf-8")
    if current == content:
        return None
    diff = difflib.unified_diff(current.splitlines(keepends=True), content.splitlines(keepends=True),
                                fromfile=f"{path} (committed)", tofile=f"{path} (rendered)", n=1)
    return (f"{path}: stale, it differs from what the registry renders; run `{COMMAND}` "
            f"to rewrite it\n" + "".join(diff))
