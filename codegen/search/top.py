"""Result tables and their reduction to the best K rows.

A result table is ``{column: (n,) array}`` (:data:`COLUMNS`). Rows rank by ascending objective, ties by grid
index (NaN last), so the ranking is total and the same in every path: :func:`reduce_top` keeps a table's best
*top* rows, :func:`merge_top` the best of two reductions (a tree of merges over the chunks gives the global top
K, and only those rows leave a worker); :func:`kth_objective` is the bound a K-th best row sets;
:func:`pareto_front` picks the rows no other beats on two columns.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from symbolic.vocabulary import SEARCH_KEYS, SEARCH_SETTINGS

from ..runtime.inputs import InputError, whole


__all__ = ["SETTING_COLUMNS", "COLUMNS", "empty_table", "reduce_top", "merge_top", "kth_objective", "pareto_front"]

#: Setting columns of a result table, coded as small integers; their names: ``spec.setting_labels``.
SETTING_COLUMNS = SEARCH_SETTINGS

#: Columns of a result table: the grid index, the degrees, the settings, the objective and its parts, memory.
COLUMNS = ("index", *SEARCH_KEYS, *SETTING_COLUMNS, "objective", "step_time_s", "compute_s", "bubble_s", "comm_s",
           "stage_flops", "original_cost", "memory_peak_bytes", "headroom_bytes", "fits")
_FLOAT_COLUMNS = ("objective", "step_time_s", "compute_s", "bubble_s", "comm_s", "stage_flops", "original_cost",
                  "memory_peak_bytes", "headroom_bytes")


def empty_table() -> dict[str, np.ndarray]:
    """A result table of no rows (every column, with its dtype)."""
    return {name: np.empty(0, dtype=np.float64 if name in _FLOAT_COLUMNS else np.int64) for name in COLUMNS}


def _order(table: Mapping[str, np.ndarray]) -> np.ndarray:
    """Rows by ascending objective, then grid index (NaN last)."""
    return np.lexsort((table["index"], np.nan_to_num(table["objective"], nan=np.inf)))


def _best_rows(table: Mapping[str, np.ndarray], count: int) -> np.ndarray:
    """Row numbers of the first *count* rows in rank order (objective, then grid index), in that order.

    A partition finds the count-th objective; only the rows at or below it are sorted.
    """
    n = len(table["index"])
    if n > 4 * count:
        objective = np.nan_to_num(table["objective"], nan=np.inf)
        kth = np.partition(objective, count - 1)[count - 1]
        candidates = np.flatnonzero(objective <= kth)
        sub = {"objective": table["objective"][candidates], "index": table["index"][candidates]}
        return candidates[_order(sub)[:count]]
    return _order(table)[:count]


def _checked(table: object, top: object, name: str = "table") -> int:
    """*top* as a whole number >= 1, after checking that *table* is a result table (its ``index`` and
    ``objective`` columns one-dimensional and of one length)."""
    top = whole("top", top, minimum=1)
    if not isinstance(table, Mapping) or "index" not in table or "objective" not in table:
        raise InputError(f"{name}: expected a result table, {{column: array}} with 'index' and 'objective', "
                         f"got {type(table).__name__}")
    if np.ndim(table["index"]) != 1 or np.shape(table["index"]) != np.shape(table["objective"]):
        raise InputError(f"{name}: 'index' and 'objective' must be one-dimensional arrays of one length, got shapes "
                         f"{np.shape(table['index'])} and {np.shape(table['objective'])}")
    return top


def reduce_top(table: Mapping[str, np.ndarray], top: int) -> dict[str, np.ndarray]:
    """The best *top* rows of *table*, in rank order.

    Raises:
        InputError: *top* not a whole number >= 1 (``bool`` and floats included), or *table* not a result table.
    """
    top = _checked(table, top)
    rows = _best_rows(table, top)
    return {k: np.asarray(v)[rows] for k, v in table.items()}


def merge_top(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray], top: int) -> dict[str, np.ndarray]:
    """The best *top* rows of two reductions (tables of the same columns).

    Raises:
        InputError: as :func:`reduce_top`, or tables of different columns.
    """
    _checked(a, top, "a")
    _checked(b, top, "b")
    if set(a) != set(b):
        raise InputError(f"merge_top: the tables have different columns: {sorted(set(a) ^ set(b))}")
    return reduce_top({k: np.concatenate([a[k], b[k]]) for k in a}, top)


def kth_objective(best: Mapping[str, np.ndarray], top: int) -> float:
    """The objective of the K-th best row so far (a bound no row beyond it can beat), or infinity."""
    top = _checked(best, top, "best")
    if len(best["index"]) < top:
        return np.inf
    value = float(best["objective"][top - 1])
    return value if np.isfinite(value) else np.inf


def pareto_front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats in both *x* and *y* (smaller is better), by ascending x.

    Raises:
        InputError: *x* and *y* not one-dimensional arrays of finite numbers of one length.
    """
    x, y = (_points(name, v) for name, v in (("x", x), ("y", y)))
    if x.shape != y.shape:
        raise InputError(f"pareto_front: x and y must have one length, got {len(x)} and {len(y)}")
    order = np.lexsort((y, x))
    ys = y[order]
    best = np.minimum.accumulate(ys)
    keep = np.ones(len(order), bool)
    keep[1:] = ys[1:] < best[:-1]
    return order[keep]


def _points(name: str, values: object) -> np.ndarray:
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{name}: expected numbers, got {values!r:.80}") from None
    if isinstance(values, (str, bytes)) or array.ndim != 1:
        raise InputError(f"{name}: expected a one-dimensional array of numbers, got {values!r:.80}")
    if not np.isfinite(array).all():
        raise InputError(f"{name}: every value must be finite, got {array[~np.isfinite(array)][0]!r}")
    return array
