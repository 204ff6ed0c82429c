"""Reference cases: loading, the one tolerance policy, and checking them through the evaluators.

The case format is ``../shared/reference/README.md``'s: ``{"format": 1,
"cases": [{"id", "function", "inputs", "output"}, …]}``. Each function name
of the original maps to an *adapter* (``codegen.reference.adapters``) that turns a
case's inputs into the same shape of output through the project's own
evaluators.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

__all__ = ["RTOL", "ATOL", "Case", "load_cases", "worst_error", "CheckReport", "run_check"]

RTOL = 1e-9
ATOL = 1e-9


@dataclass(frozen=True)
class Case:
    id: str
    function: str
    inputs: dict[str, Any]
    output: Any


class CaseFileError(ValueError):
    """A file that is not in the reference case format."""


def load_cases(path: str | Path) -> list[Case]:
    """The cases of a reference file.

    Raises:
        CaseFileError: naming the file and what is wrong with it.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CaseFileError(f"--cases: no such file {str(path)!r}") from None
    except json.JSONDecodeError as exc:
        raise CaseFileError(f"--cases: {path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != 1 or not isinstance(data.get("cases"), list):
        raise CaseFileError(f"--cases: {path} is not a format-1 case file (need {{'format': 1, 'cases': [...]}})")
    cases = []
    for i, raw in enumerate(data["cases"]):
        try:
            cases.append(Case(str(raw["id"]), str(raw["function"]), dict(raw["inputs"]), raw["output"]))
        except (KeyError, TypeError) as exc:
            raise CaseFileError(f"--cases: case #{i} of {path} lacks id, function, inputs or output ({exc})") from None
    return cases


def _leaf_error(got: Any, want: Any, where: str) -> tuple[float, str]:
    """(relative error, where) of one leaf; inf for a mismatch of kind or label."""
    if isinstance(want, str) or isinstance(got, str):
        return (0.0 if str(got) == str(want) else math.inf), where
    g, w = float(got), float(want)
    if math.isnan(g) or math.isnan(w):
        return (0.0 if math.isnan(g) and math.isnan(w) else math.inf), where
    diff = abs(g - w)
    if diff <= ATOL:
        return 0.0, where
    return diff / max(abs(w), 1e-300), where


def worst_error(got: Any, want: Any, where: str = "") -> tuple[float, str]:
    """The worst relative error over all leaves of *want*, and where it is.

    Leaves within ``ATOL`` of each other count as exact (0), so outputs near
    zero compare absolutely. Shapes that differ are an infinite error.
    """
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            return math.inf, f"{where} keys {sorted(got) if isinstance(got, dict) else type(got).__name__}"
        return max((worst_error(got[k], want[k], f"{where}.{k}") for k in want), default=(0.0, where))
    if isinstance(want, list):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            return math.inf, f"{where} length {len(got) if isinstance(got, (list, tuple)) else got!r}"
        return max((worst_error(g, w, f"{where}[{i}]") for i, (g, w) in enumerate(zip(got, want))),
                   default=(0.0, where))
    return _leaf_error(got, want, where)


def within_tolerance(error: float) -> bool:
    return error <= RTOL


@dataclass
class FunctionReport:
    function: str
    cases: int = 0
    worst: float = 0.0
    worst_case: str = ""
    failures: list[str] = field(default_factory=list)


@dataclass
class CheckReport:
    functions: dict[str, FunctionReport]
    missing: dict[str, int]

    @property
    def ok(self) -> bool:
        return all(not r.failures for r in self.functions.values())


def run_check(cases: Iterable[Case]) -> CheckReport:
    """Evaluate every case through its adapter and compare with its output."""
    from .adapters import ADAPTERS

    functions: dict[str, FunctionReport] = {}
    missing: dict[str, int] = {}
    for case in cases:
        adapter = ADAPTERS.get(case.function)
        if adapter is None:
            missing[case.function] = missing.get(case.function, 0) + 1
            continue
        rep = functions.setdefault(case.function, FunctionReport(case.function))
        rep.cases += 1
        try:
            got = adapter(case.inputs)
            err, where = worst_error(got, case.output)
        except Exception as exc:  # a case that raises is a miss, reported with its reason
            err, where = math.inf, f" raised {type(exc).__name__}: {exc}"
        if err > rep.worst or not rep.worst_case:
            rep.worst, rep.worst_case = err, case.id
        if not within_tolerance(err):
            rep.failures.append(f"{case.id}{where}: relative error {err:.3g}")
    return CheckReport(functions, missing)
