"""Shared test helpers: the one tolerance policy and the reference cases."""

from __future__ import annotations

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


def assert_close(got, want, rtol: float = RTOL, atol: float = ATOL) -> None:
    """The one numeric comparison of the suite: relative, with an absolute floor near zero."""
    np.testing.assert_allclose(np.asarray(got, dtype=float), np.asarray(want, dtype=float), rtol=rtol, atol=atol)
