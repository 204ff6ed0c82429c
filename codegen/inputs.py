"""Checks on numeric inputs, by the symbols' declarations: clear errors naming the field and the value."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from symbolic.symbols import SPECS

__all__ = ["InputError", "check_inputs"]


class InputError(ValueError):
    """A value that no valid configuration has."""


def _first_bad(values: np.ndarray, bad: np.ndarray) -> float:
    return float(values[bad].flat[0]) if values.ndim else float(values)


def check_inputs(values: Mapping[str, object]) -> dict[str, np.ndarray]:
    """*values* as float arrays, after checking each against its symbol's declaration.

    Rejects NaN and infinities everywhere, non-positive values of positive
    symbols, negative values of non-negative ones, and fractions where the
    symbol is an integer (a degree of 2.5 ranks).

    Raises:
        InputError: naming the field and the first offending value.
        KeyError: for a name that is no symbol of the model.
    """
    out: dict[str, np.ndarray] = {}
    for name, raw in values.items():
        if name not in SPECS:
            raise KeyError(f"unknown input field {name!r}")
        spec = SPECS[name]
        try:
            arr = np.asarray(raw, dtype=float)
        except (TypeError, ValueError):
            raise InputError(f"{name}: expected a number, got {raw!r}") from None
        bad = ~np.isfinite(arr)
        if bad.any():
            raise InputError(f"{name}: must be a finite number, got {_first_bad(arr, bad)!r}")
        bad = arr <= 0 if spec.positive else arr < 0
        if bad.any():
            need = "> 0" if spec.positive else ">= 0"
            raise InputError(f"{name}: must be {need} ({spec.meaning}), got {_first_bad(arr, bad)!r}")
        if spec.integer:
            bad = arr != np.floor(arr)
            if bad.any():
                raise InputError(f"{name}: must be a whole number ({spec.meaning}), got {_first_bad(arr, bad)!r}")
        out[name] = arr
    return out
