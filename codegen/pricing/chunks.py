"""Chunks of layouts that share their run settings: what the step-time and search pricers take.

Public API::

    ZERO_LEVELS, RECOMPUTE_MODES, DEGREE_KEYS  (symbolic.vocabulary's ZERO_LEVELS, RECOMPUTE_MODES, SEARCH_KEYS)
    Setting(recompute, zero, cp_algo).batch_kwargs() -> dict
    Chunk(setting, values, index, model, row=None, bpos=None): .batch (a LayoutBatch, built on first use)
    distinct_sorted(values) -> ndarray;  distinct_rows(columns) -> (reps, inverse)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from symbolic.vocabulary import RECOMPUTE_MODES, SEARCH_KEYS, ZERO_LEVELS

from ..configs import LayoutBatch, ModelConfig

__all__ = ["ZERO_LEVELS", "RECOMPUTE_MODES", "DEGREE_KEYS", "Setting", "Chunk", "distinct_sorted", "distinct_rows"]

#: The keys a search enumerates (``d`` and ``m`` follow from the others): ``symbolic.vocabulary.SEARCH_KEYS``.
DEGREE_KEYS = SEARCH_KEYS


@dataclass(frozen=True)
class Setting:
    """The run settings one batch of layouts shares."""

    recompute: str
    zero: int
    cp_algo: str

    def batch_kwargs(self) -> dict[str, object]:
        return {"recompute": self.recompute, "cp_algo": self.cp_algo, **ZERO_LEVELS[self.zero]}


class Chunk:
    """Valid layouts of one setting: their keys as arrays, their grid indices (stable identities), the batch.

    Attributes:
        setting: the run settings of every layout. values: ``{key: (n,) int64}`` for :data:`DEGREE_KEYS`.
        index: grid indices, ascending. batch: the :class:`LayoutBatch`, built on first use.
        row: each layout's row of the space's structure table (everything but ``b`` and ``m``), or None.
        bpos: each layout's ``b`` as its position in the space's micro-batch sizes ``SearchSpace.b``, or None.
    """

    __slots__ = ("setting", "values", "index", "row", "bpos", "_model", "_batch")

    def __init__(self, setting: Setting, values: dict[str, np.ndarray], index: np.ndarray, model: ModelConfig,
                 row: np.ndarray | None = None, bpos: np.ndarray | None = None):
        self.setting, self.values, self.index, self._model, self._batch = setting, values, index, model, None
        self.row = row  # each layout's structure row (SearchSpace.structures[setting.cp_algo]), when known
        self.bpos = bpos  # each layout's b as its position in SearchSpace.b, when known

    def __len__(self) -> int:
        return len(self.index)

    @property
    def batch(self) -> LayoutBatch:
        if self._batch is None:
            # (every layout of a chunk is valid by construction: the input gate's range checks are skipped)
            self._batch = LayoutBatch.from_arrays(self._model.layout, **self.values, **self.setting.batch_kwargs(),
                                                  validated=True)
        return self._batch


def distinct_sorted(values: np.ndarray) -> np.ndarray:
    """The distinct values of a 1-D array, ascending: ``np.unique(values)``, without the ``numpy.ma`` import its
    first plain call makes (~12 ms of a cold search)."""
    ordered = np.sort(values)
    return ordered[np.append(True, ordered[1:] != ordered[:-1])] if len(ordered) else ordered


def distinct_rows(columns: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The rows of equal-length 1-D *columns* grouped by their tuple of values: ``(reps, inverse)``, one row index
    per distinct tuple (in ascending tuple order) and each row's tuple number, so that ``x[reps][inverse]`` is
    ``x`` for every column ``x`` (and for any array that is a function of the columns, row by row).

    Each column becomes a code ``0 … k − 1`` (its offset from the lowest value where it holds whole numbers in a
    range no wider than 4 × its length, else its rank among its distinct values) and the codes one mixed-radix
    number per row, ranked again whenever the next radix would overflow.
    """
    n = len(columns[0]) if columns else 0
    number, total = np.zeros(n, dtype=np.int64), 1
    for column in columns:
        column = np.asarray(column)
        code = None
        if column.dtype.kind in "iub" or bool(np.all(np.floor(column) == column)):
            whole = column.astype(np.int64)
            low = int(whole.min()) if n else 0
            width = (int(whole.max()) - low + 1) if n else 1
            if width <= max(4 * n, 64):
                code, k = whole - low, width
        if code is None:  # not whole, or a wide range: rank by the distinct values
            distinct, code = np.unique(column, return_inverse=True)
            code, k = code.reshape(-1), len(distinct)
        if k == 1:
            continue
        if total > (1 << 62) // k:  # would overflow: rank the numbers so far first
            distinct, number = np.unique(number, return_inverse=True)
            number, total = number.reshape(-1), len(distinct)
        number = number * k + code
        total *= k
    _, reps, inverse = np.unique(number, return_index=True, return_inverse=True)
    return reps, inverse.reshape(-1)
