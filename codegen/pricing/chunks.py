"""Chunks of layouts that share their run settings: what the step-time and search pricers take.

Public API::

    Setting(recompute, zero, cp_algo).batch_kwargs() -> dict
    Chunk(setting, values, index, model, row=None, bpos=None): .batch (a LayoutBatch, built on first use)
    distinct_sorted(values) -> ndarray
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from symbolic.vocabulary import ZERO_LEVELS

from ..configs import LayoutBatch, ModelConfig

__all__ = ["Setting", "Chunk", "distinct_sorted"]

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
        setting: the run settings of every layout. values: ``{key: (n,) int64}`` for ``symbolic.vocabulary.SEARCH_KEYS``.
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
