"""Strides of the parallel groups for a rank order, vectorised (the NumPy side of ``symbolic.placement``)."""

from __future__ import annotations

from typing import Mapping

import numpy as np

__all__ = ["DEFAULT_ORDER", "group_strides"]

#: Megatron-LM's default rank order (``parallel_state.RankGenerator``): tensor ranks adjacent, stages farthest.
DEFAULT_ORDER = "tp-cp-ep-dp-pp"


def group_strides(order: str, degrees: Mapping[str, object]) -> dict[str, np.ndarray]:
    """The stride of each dimension's group: the product of the degrees before it in *order*.

    Args:
        order: dimensions joined by ``-``, innermost first, each once (e.g. ``"tp-cp-ep-dp-pp"``).
        degrees: each dimension's degree, a number or an array (arrays broadcast).

    Raises:
        ValueError: naming an unknown, repeated or missing dimension, or a degree below 1.
    """
    dims = order.split("-")
    if len(set(dims)) != len(dims) or not all(dims):
        raise ValueError(f"order: each dimension once, joined by '-', got {order!r}")
    unknown = [dim for dim in dims if dim not in degrees]
    if unknown:
        raise ValueError(f"order: no degree for {', '.join(unknown)} (degrees given: {', '.join(degrees)})")
    stride: np.ndarray = np.asarray(1.0)
    out: dict[str, np.ndarray] = {}
    for dim in dims:
        value = np.asarray(degrees[dim], dtype=float)
        if np.any(value < 1):
            raise ValueError(f"degrees.{dim}: must be >= 1, got {degrees[dim]!r}")
        out[dim] = stride
        stride = stride * value
    return out
