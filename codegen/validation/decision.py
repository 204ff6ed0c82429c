"""The decision test: does the search's best layout stay near the layout NVIDIA published and ran?

A planner trusts the search when, on the runs practitioners tuned by hand, it does not claim a much faster layout
than theirs (a claim the measurements would have to contradict) and never calls theirs infeasible. For each model
family × system of a layout-by-layout table (``data/nemo_step_times.csv``: NVIDIA's published NeMo /
Megatron-Bridge throughput), the case is the row of the newest release (the tuned layout of today's software; the
last such row of the file when two share it). Its model, devices, global batch, sequence length, precision,
system, communication overlap (its recipe's, ``step_rows.recipe_overlap``), the modules it recomputes inside
its layers (its recipe's, ``step_rows.recipe_modules``) and its expert dispatcher (its recipe's,
``step_rows.recipe_dispatcher``) are the row's (``step_rows.read_rows``, ``model_and_layout``); then

* the **search**: ``codegen.search.search`` over every valid layout (every recompute mode, the ZeRO levels 1 and the
  row's: 3 where it shards with FSDP), the search's default reserve, and the recipes' BF16 gradients
  (``recipes.RECIPE_MEMORY``, as the published layouts' memory check counts them) in the step time (the model's
  gradient width) and the memory filter (as ``symcost search --bytes-grad 2`` runs);
* the **published layout**: the same search with every degree fixed to the row's (``--fix`` ``d, t, p, cp, ep,
  etp, vp, b``; ``m`` follows from the global batch): its best recompute mode and ZeRO level of those, priced as
  any other layout; infeasible when no mode fits in memory.

A case **passes** when the published layout fits and the search's best predicted step time is at most
:data:`GAP_BOUND` (15 %) below the published layout's prediction; the test asks this of at least
:data:`PASS_SHARE` (80 %) of the cases (docs/search.md, "The decision test").

Public API::

    DEFAULT_DATA, GAP_BOUND, PASS_SHARE, FIXED_KEYS
    DecisionCase                                  # one case: the row, the two predictions, the verdict
    decision_cases(table, system=None) -> list[DecisionCase]
    decision_summary(cases) -> dict               # counts, share passing, whether the test holds
    left_out(table, system=None) -> list[dict]    # the rows of families the model cannot price, with why
    print_decision_report(path, cases, unpriced=()) -> None    # a table, then one JSON line
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from symbolic.vocabulary import SEARCH_KEYS

from ..search import SearchSpec, search
from .csvfile import DATA_DIR, Table
from .recipes import RECIPE_MEMORY
from .step_rows import model_and_layout, read_rows, recipe_dispatcher, recipe_modules, recipe_overlap

__all__ = ["DEFAULT_DATA", "GAP_BOUND", "PASS_SHARE", "FIXED_KEYS", "DecisionCase", "decision_cases",
           "decision_summary", "left_out", "print_decision_report"]

#: The shipped table of NVIDIA's published layouts (``symcost validate decision`` without ``--data``).
DEFAULT_DATA = DATA_DIR / "nemo_step_times.csv"

#: The largest share by which the search's best predicted step may undercut the published layout's prediction.
GAP_BOUND = 0.15
#: The share of cases that must pass.
PASS_SHARE = 0.8
#: The degrees fixed to price the published layout (``m`` follows from the global batch, ``d`` and ``b``).
FIXED_KEYS = tuple(key for key in SEARCH_KEYS if key != "m")
#: The columns of a layout a case reports (its degrees and run settings).
_LAYOUT_COLUMNS = (*FIXED_KEYS, "m", "recompute", "zero")


@dataclass(frozen=True)
class DecisionCase:
    """One model family × system: its newest row, the search's best layout and the published one.

    Attributes:
        family, system, line, model, release, precision: the row's (``line``: its line in the file).
        devices, global_batch, seq_len: the run the search keeps.
        overlap, recompute_modules, ep_dispatcher: the recipe's run settings both searches priced with.
        best, published: the layouts (degrees, ``m``, recompute mode, ZeRO level); ``published`` is ``None``
            when no recompute mode of it fits in memory.
        best_s, published_s: their predicted step seconds (``published_s`` the best mode's, priced regardless of
            memory when none fits).
        published_fits: whether the published layout fits in memory with some recompute mode.
        gap: ``1 − best_s / published_s``, how far below the published prediction the search's best is.
        passes: ``published_fits`` and ``gap <= GAP_BOUND``.
        layouts: the valid layouts the search priced.
    """

    family: str
    system: str
    line: int
    model: str
    release: str
    precision: str
    devices: int
    global_batch: int
    seq_len: int
    overlap: tuple[str, ...]
    recompute_modules: tuple[str, ...]
    ep_dispatcher: str
    best: dict[str, Any]
    published: dict[str, Any] | None
    best_s: float
    published_s: float
    published_fits: bool
    gap: float
    passes: bool
    layouts: int


def _release_key(text: str) -> tuple[int, ...]:
    """A release label (``25.11``, ``26.02.01``) as numbers for ordering; a label without numbers sorts first."""
    parts = [int(p) for p in text.replace("-", ".").split(".") if p.strip().isdigit()]
    return tuple(parts)


def _layout(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in _LAYOUT_COLUMNS}


def _best(spec: SearchSpec) -> tuple[dict[str, Any] | None, int]:
    """The best row of a search of *spec* (``None`` when no layout is valid) and the layouts it priced."""
    result = search(spec, top=1)
    rows = result.rows()
    return (rows[0] if rows else None), result.layouts


def decision_cases(table: Table, system: str | None = None) -> list[DecisionCase]:
    """The decision test's cases of a layout-by-layout table (:mod:`.step_rows`' format), in file order of the
    chosen rows. *system*: a catalog system for every row (``--system``), else each row's.

    Raises:
        ValueError: naming the file, line, column and value of the first cell the reader does not know, or the
            row whose model or layout cannot be priced (a family not modelled, a layout rule).
    """
    rows = read_rows(table, system)
    families = [name.strip() for name in table.cells("model_family")]
    newest: dict[tuple[str, str], int] = {}
    for i, r in enumerate(rows):
        if r["family"].unpriced:
            continue
        key = (families[i], r["system"])
        if key not in newest or _release_key(r["release"]) >= _release_key(rows[newest[key]]["release"]):
            newest[key] = i
    cases = []
    for i in sorted(newest.values()):
        r = rows[i]
        where = f"{table.path}, line {r['line']}"
        model, layout, zero = model_and_layout(r, r["model"], str(table.path))
        # the recipe's BF16 gradients in the step time as in the memory filter (recipes.RECIPE_MEMORY)
        model = dataclasses.replace(model, bytes_grad=RECIPE_MEMORY["bytes_grad"])
        zeros = tuple(sorted({1, zero}))
        common = dict(model=model, devices=r["gpus"], global_batch=r["global_batch"], system=r["system"],
                      precision=r["precision"], overlap=recipe_overlap(r)[0], bytes_grad=RECIPE_MEMORY["bytes_grad"],
                      recompute_modules=recipe_modules(r)[0], ep_dispatcher=recipe_dispatcher(r)[0])
        best, layouts = _best(SearchSpec(**common, zero_levels=zeros))
        if best is None:
            raise ValueError(f"{where}: the search finds no layout that fits")
        fixed = tuple((k, int(getattr(layout, k))) for k in FIXED_KEYS)
        published, _ = _best(SearchSpec(**common, zero_levels=(zero,), fix=fixed))
        fits = published is not None
        if not fits:  # priced all the same, to say by how much the search's best undercuts it
            published_any, _ = _best(SearchSpec(**common, zero_levels=(zero,), fix=fixed, keep_infeasible=True))
            if published_any is None:
                raise ValueError(f"{where}: the published layout is not a valid layout of the search")
            published_s = float(published_any["step_time_s"])
        else:
            published_s = float(published["step_time_s"])
        gap = 1.0 - float(best["step_time_s"]) / published_s
        cases.append(DecisionCase(
            family=families[i], system=r["system"], line=r["line"], model=r["model"], release=r["release"],
            precision=r["precision"], devices=r["gpus"], global_batch=r["global_batch"], seq_len=r["seq_len"],
            overlap=common["overlap"], recompute_modules=common["recompute_modules"],
            ep_dispatcher=common["ep_dispatcher"], best=_layout(best),
            published=_layout(published) if fits else None, best_s=float(best["step_time_s"]),
            published_s=published_s, published_fits=fits, gap=gap, passes=fits and gap <= GAP_BOUND,
            layouts=layouts))
    return cases


def decision_summary(cases: list[DecisionCase]) -> dict[str, Any]:
    """``{"cases", "passing", "share", "infeasible", "holds"}``: how many cases pass, their share, how many
    published layouts are called infeasible, and whether the test holds (share >= :data:`PASS_SHARE` and none
    infeasible)."""
    n = len(cases)
    passing = sum(case.passes for case in cases)
    infeasible = sum(not case.published_fits for case in cases)
    share = passing / n if n else 0.0
    return {"cases": n, "passing": passing, "share": share, "infeasible": infeasible,
            "holds": bool(n) and share >= PASS_SHARE and infeasible == 0}


def left_out(table: Table, system: str | None = None) -> list[dict[str, Any]]:
    """The rows :func:`decision_cases` leaves out, a family the model cannot price (``step_rows.FAMILIES``' unpriced
    ones): ``{"line", "family", "reason"}`` each, in file order."""
    families = [name.strip() for name in table.cells("model_family")]
    return [{"line": r["line"], "family": families[i], "reason": r["family"].unpriced}
            for i, r in enumerate(read_rows(table, system)) if r["family"].unpriced]


def _degrees(layout: dict[str, Any] | None) -> str:
    if layout is None:
        return "does not fit"
    return (" ".join(f"{k}{layout[k]}" for k in SEARCH_KEYS)
            + f" {layout['recompute']}")


def print_decision_report(path: Path, cases: list[DecisionCase], unpriced: Sequence[dict[str, Any]] = ()) -> None:
    """Each case (published and best layouts, their predictions, the gap, the verdict), the rows left out
    (*unpriced*: :func:`left_out`), the summary, then one JSON line ``{"cases": [...], "left_out": [...],
    "summary": {...}}``."""
    print(f"{path.name}: {len(cases)} cases (model family x system, newest release)")
    print(f"{'line':>5} {'family':18} {'system':9} {'prec':6} {'published s':>11} {'best s':>8} {'gap':>7}  verdict")
    for case in cases:
        verdict = "pass" if case.passes else ("published does not fit" if not case.published_fits else "fail")
        print(f"{case.line:5d} {case.family[:18]:18} {case.system:9} {case.precision:6} {case.published_s:11.3f} "
              f"{case.best_s:8.3f} {case.gap:7.1%}  {verdict}")
        print(f"{'':6}published: {_degrees(case.published)};  best: {_degrees(case.best)}")
    for row in unpriced:
        print(f"{row['line']:5d} {row['family'][:18]:18} left out, not priced: {row['reason']}")
    summary = decision_summary(cases)
    print(f"{summary['passing']} of {summary['cases']} cases pass ({summary['share']:.0%}; needs {PASS_SHARE:.0%}); "
          f"{summary['infeasible']} published layouts called infeasible; the test "
          f"{'holds' if summary['holds'] else 'does not hold'}")
    print(json.dumps({"cases": [asdict(case) for case in cases], "left_out": list(unpriced), "summary": summary}))
