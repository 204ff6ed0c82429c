"""Every reference case of the original, through the project's evaluators."""

from __future__ import annotations

import json

import pytest

from codegen.reference.adapters import ADAPTERS
from codegen.reference.cases import RTOL, worst_error
from conftest import CASES, CASES_FILE, SHARED_CASES


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_reference_case(case):
    adapter = ADAPTERS.get(case.function)
    if adapter is None:
        pytest.skip(f"{case.function} is not implemented yet")
    err, where = worst_error(adapter(case.inputs), case.output)
    assert err <= RTOL, f"{case.id}{where}: relative error {err:.3g}"


def test_bundled_copy_matches_shared():
    if not SHARED_CASES.exists():
        pytest.skip("../shared/reference is not beside this checkout")
    # The same cases, format and source; only the header's pointer for units names this repository's docs.
    bundled, shared = (json.loads(path.read_text()) for path in (CASES_FILE, SHARED_CASES))
    assert bundled["units"].endswith("see docs/model.md")
    assert {**bundled, "units": shared["units"]} == shared, (
        "tests/reference/cases.json differs from ../shared/reference/cases.json: copy it again")
