"""Shared test helpers: the one tolerance policy and the reference cases."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from codegen.reference.cases import ATOL, RTOL, load_cases

ROOT = Path(__file__).resolve().parent.parent
CASES_FILE = ROOT / "tests" / "reference" / "cases.json"
SHARED_CASES = ROOT.parent / "shared" / "reference" / "cases.json"

CASES = load_cases(CASES_FILE)


def assert_close(got, want, rtol: float = RTOL, atol: float = ATOL) -> None:
    """The one numeric comparison of the suite: relative, with an absolute floor near zero."""
    np.testing.assert_allclose(np.asarray(got, dtype=float), np.asarray(want, dtype=float), rtol=rtol, atol=atol)
