"""Shared test helpers: the one tolerance policy and the reference cases."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np

from codegen.reference.cases import ATOL, RTOL, load_cases

ROOT = Path(__file__).resolve().parent.parent
CASES_FILE = ROOT / "tests" / "reference" / "cases.json"
SHARED_CASES = ROOT.parent / "shared" / "reference" / "cases.json"

CASES = load_cases(CASES_FILE)


#: The suite's longest tests (the in-sync test lowers every formula; a cold lowering cache in CI makes it
#: about a minute and a half), started first: the suite runs on two workers (pyproject's addopts), and a
#: long test taken last would run alone at the end.
_FIRST = ("test_generated.py::test_committed_tree_matches_the_registry",
          "test_derive_docs.py::test_closed_form_keeps_the_value_and_never_grows",
          "test_derive_docs.py::test_each_pass_keeps_the_value")


def pytest_collection_modifyitems(items) -> None:
    def rank(item) -> int:
        test = item.nodeid.split("tests/")[-1]
        return next((i for i, name in enumerate(_FIRST) if test.startswith(name)), len(_FIRST))

    items.sort(key=rank)  # (stable: the rest keep their order)


#: Plain scalars: compared without numpy, which costs some 100 times more per call (tests check in loops).
_SCALARS = (int, float, np.integer, np.floating)


def _scalar(x) -> bool:
    return isinstance(x, _SCALARS) or (isinstance(x, np.ndarray) and x.ndim == 0)


def assert_close(got, want, rtol: float = RTOL, atol: float = ATOL, *, msg: str = "") -> None:
    """The one numeric comparison of the suite: relative, with an absolute floor near zero.

    numpy's rule elementwise, |got - want| <= atol + rtol * |want| (*want* is the reference), NaN equal to NaN
    and an infinity only to itself; *msg* is added to the failure message.
    """
    if _scalar(got) and _scalar(want):
        g, w = float(got), float(want)
        close = abs(g - w) <= atol + rtol * abs(w) if math.isfinite(w) else g == w or (math.isnan(g) and math.isnan(w))
        if close:
            return
        raise AssertionError(f"Not equal to tolerance rtol={rtol:g}, atol={atol:g}: got {g!r}, want {w!r}"
                             f" (|got - want| = {abs(g - w):g}) {msg}".rstrip())
    np.testing.assert_allclose(np.asarray(got, dtype=float), np.asarray(want, dtype=float), rtol=rtol, atol=atol,
                               err_msg=msg)


#: Functions compiled in memory for formulas the registry lacks, by (name, expression), for the process.
_DYNAMIC: dict = {}


def formula_functions(formulas) -> dict:
    """Evaluators of formulas that may not be registered (model-stage variants built on demand), by name.

    A registered formula goes through ``evaluator``; any other is rendered by
    the code generator in memory (``compiler.compile_in_memory``: the same
    printer, lowering and templates as ``generated/``) once per (name,
    expression) and cached for the process; the ones not cached yet are
    compiled in one pass.
    """
    from codegen.compiler import compile_in_memory
    from codegen.runtime.kernels import evaluator
    from symbolic import registry

    out, missing = {}, []
    for f in formulas:
        if f.name in registry.FORMULAS and registry.FORMULAS[f.name].expr == f.expr:
            out[f.name] = evaluator(f.name)
        elif (f.name, f.expr) in _DYNAMIC:
            out[f.name] = _DYNAMIC[(f.name, f.expr)]
        else:
            missing.append(f)
    if missing:
        compiled = compile_in_memory(missing)
        for f in missing:
            _DYNAMIC[(f.name, f.expr)] = out[f.name] = compiled[f.name]
    return out


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """A CSV table's header and rows (each a dict of its cells' texts)."""
    with Path(path).open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or ()), list(reader)


def write_csv(path: Path, header: list[str], rows: list[dict[str, str]]) -> Path:
    """*rows* under *header* written to *path* as a CSV table (``\n`` line ends); returns *path*."""
    out = io.StringIO()
    writer = csv.DictWriter(out, header, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    path.write_text(out.getvalue(), encoding="utf-8")
    return path
