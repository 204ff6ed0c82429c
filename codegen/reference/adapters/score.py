"""``estimate_comm_score`` through the vectorised level assignment and the score formula."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ...pricing.levels import DIMENSIONS, assign_levels, comm_score, hierarchy, parse_dim
from ...pricing.stages import Fields

__all__ = ["ADAPTERS"]


def _check_assignment(recorded: Mapping[str, Any], placed: Mapping[str, np.ndarray]) -> None:
    """The case's recorded ``assignment`` (a check, not an input) must equal the computed one.

    Raises:
        ValueError: naming the first dimension whose placement differs.
    """
    for dim, counts in recorded.items():
        name = parse_dim(dim)
        got = [int(x) for x in placed[name]]
        if [float(x) for x in counts] != [float(x) for x in got]:
            raise ValueError(f"assignment: {dim} placed as {got}, the case records {list(counts)}")
    unrecorded = [dim for dim in DIMENSIONS if dim not in {parse_dim(k) for k in recorded}]
    if recorded and unrecorded:
        raise ValueError(f"assignment: the case records no placement for {unrecorded}")


def _estimate_comm_score(inputs: Mapping[str, Any]) -> float:
    f = Fields(inputs)
    device = inputs.get("device", "A2")  # the original's default, bound at import (§10 item 21)
    levels = hierarchy(str(device))
    degrees = {k: f.num(k) for k in ("d", "t", "cp", "p")}
    placed = assign_levels(levels.bounds, **degrees)
    if "assignment" in inputs:
        _check_assignment(inputs["assignment"], placed)
    return float(comm_score(comm_volume=f.num("comm_volume"), overlap=f.num("overlap"), dim=inputs["dim"],
                            device=levels, assignment=placed, **degrees))


ADAPTERS = {"estimate_comm_score": _estimate_comm_score}
