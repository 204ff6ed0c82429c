"""Reference cases: loading, the one tolerance policy, and checking them through the evaluators.

The case format is ``tests/reference/FORMAT.md``'s: ``{"format": 1,
"cases": [{"id", "function", "inputs", "output"}, …]}``; :func:`load_cases` is strict about
it (a known format, at least one case, finite numbers within ``codegen.runtime.inputs.VALUE_MAX``,
every error naming the file). Each function name
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

__all__ = ["RTOL", "ATOL", "Case", "CaseFileError", "FORMATS", "load_cases", "worst_error", "CheckReport",
           "run_check"]

#: Case-file formats this loader reads.
FORMATS = (1,)

#: Largest case file read (the bundled one is well under a megabyte per thousand cases).
MAX_FILE_BYTES = 64 << 20

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

    The file must be UTF-8 JSON of a known ``format`` (:data:`FORMATS`) holding at least one
    case; every case needs ``id``, ``function`` (strings), ``inputs`` (an object) and ``output``.
    Numbers must be finite (no ``NaN``/``Infinity``, no ``1e400``); the numbers of ``inputs``
    pass the input gate's magnitude bound (``codegen.runtime.inputs.VALUE_MAX``).

    Raises:
        CaseFileError: naming the file and what is wrong with it (and the case and field).
    """
    from ..runtime.inputs import VALUE_MAX

    path = Path(path)
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise CaseFileError(f"--cases: {path}: {path.stat().st_size:,} bytes; a case file holds at most "
                                f"{MAX_FILE_BYTES:,}")
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise CaseFileError(f"--cases: no such file {str(path)!r}") from None
    except OSError as exc:
        raise CaseFileError(f"--cases: {path}: cannot read the file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise CaseFileError(f"--cases: {path} is not UTF-8 text (byte {exc.start}: {exc.reason}); a case file "
                            f"is JSON") from None
    try:
        data = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise CaseFileError(f"--cases: {path} is not JSON: {exc}") from None
    except (ValueError, RecursionError) as exc:  # NaN/Infinity, 1e400, an integer of thousands of digits, nesting
        raise CaseFileError(f"--cases: {path}: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise CaseFileError(f"--cases: {path} is not a case file (need {{'format': 1, 'cases': [...]}})")
    if isinstance(data.get("format"), bool) or data.get("format") not in FORMATS:
        raise CaseFileError(f"--cases: {path}: unknown format {data.get('format')!r}; known: "
                            f"{', '.join(map(str, FORMATS))}")
    if not data["cases"]:
        raise CaseFileError(f"--cases: {path} holds no cases: a check of nothing would pass")
    cases = []
    for i, raw in enumerate(data["cases"]):
        if not isinstance(raw, dict) or not {"id", "function", "inputs", "output"} <= raw.keys():
            raise CaseFileError(f"--cases: case #{i} of {path} lacks id, function, inputs or output")
        if not isinstance(raw["id"], str) or not isinstance(raw["function"], str):
            raise CaseFileError(f"--cases: case #{i} of {path}: id and function must be strings")
        if not isinstance(raw["inputs"], dict):
            raise CaseFileError(f"--cases: case {raw['id']!r} of {path}: inputs must be an object")
        bad = _too_large(raw["inputs"], VALUE_MAX)
        if bad is not None:
            raise CaseFileError(f"--cases: case {raw['id']!r} of {path}: inputs{bad[0]} = {bad[1]:.6g} is beyond "
                                f"the largest input symcost evaluates ({VALUE_MAX:.0f} = 2**53)")
        cases.append(Case(raw["id"], raw["function"], dict(raw["inputs"]), raw["output"]))
    return cases


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} does not fit a float64")
    return value


def _too_large(value: Any, limit: float, where: str = "") -> tuple[str, float] | None:
    """(where, value) of the first number of *value* beyond *limit* in magnitude, if any."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return (where, float(value) if abs(value) < 1e300 else math.inf) if abs(value) > limit else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _too_large(item, limit, f"{where}.{key}" if isinstance(key, str) else f"{where}[{key}]")
        if found is not None:
            return found
    return None


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
