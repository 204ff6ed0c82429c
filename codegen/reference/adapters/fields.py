"""A case's inputs read the way the original reads its config."""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["Fields"]


class Fields:
    """Config fields of one case: an unset field reads as 0, booleans as 0/1.

    The original's config hands out 0 for any attribute it was never given
    (FORMULAS.md preamble), including ``getattr(cfg, name, None)``.
    """

    def __init__(self, inputs: Mapping[str, Any]):
        self.raw = inputs

    def __getitem__(self, name: str) -> Any:
        value = self.raw.get(name, 0)
        if isinstance(value, bool):
            return float(value)
        return value

    def num(self, name: str) -> float:
        value = self[name]
        if isinstance(value, (int, float)):
            return float(value)
        raise ValueError(f"{name}: expected a number, got {value!r}")

    def values(self, names: tuple[str, ...]) -> dict[str, float]:
        """The named fields as numbers, for an evaluator's keyword arguments."""
        return {n: self.num(n) for n in names}
