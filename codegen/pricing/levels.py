"""Placing parallel dimensions on the levels of a device hierarchy, and the level score, vectorised.

``estimate_comm_score`` (docs/model.md, "Level score") first places the ranks of each
dimension on the hierarchy's levels (``level_assign``): a greedy, integer
step — floor divisions and minima — that has no useful closed form. It is done
here with NumPy over whole arrays of layouts at once (one pass per level and
dimension, no Python loop per layout). The score itself is the SymPy formula
``symbolic.score`` (registered as ``score_levels<L>_comm_score``), evaluated on
the per-level counts through the evaluators.

The hierarchy (level bounds and bandwidths) comes from the hardware catalog,
``hardware.load(device)``, read in one place: ``hierarchy``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ..runtime.inputs import InputError, check_inputs
from ..runtime.kernels import evaluator, variants

__all__ = ["DIMENSIONS", "Hierarchy", "hierarchy", "assign_levels", "comm_score", "parse_dim", "SCORE_FACTORS",
           "score_factors"]

#: The original's dimension names, in the order they take devices at each level:
#: TP (named "MP"), EP (always one rank here), CP, DP, PP.
DIMENSIONS: tuple[str, ...] = ("MP", "EP", "CP", "DP", "PP")

_DIM_ALIASES = {"TP": "MP"}


def parse_dim(dim: object) -> str:
    """The original's name of a dimension (``MP``, ``EP``, ``CP``, ``DP``, ``PP``; ``TP`` means ``MP``).

    Raises:
        ValueError: naming ``dim`` and the value.
    """
    key = str(dim).strip().upper() if isinstance(dim, str) else None
    key = _DIM_ALIASES.get(key, key)
    if key not in DIMENSIONS:
        raise ValueError(f"dim: unknown dimension {dim!r}; expected one of {', '.join(DIMENSIONS)} (or TP)")
    return key


def _check_bounds(bounds: Sequence[int | None]) -> None:
    """Level bounds: whole numbers >= 1, innermost first, with only the top level unbounded (None).

    Raises:
        ValueError: naming the level and the value.
    """
    if not len(bounds):
        raise ValueError("levels: a hierarchy needs at least one level")
    for lvl, bound in enumerate(bounds):
        if bound is None and lvl != len(bounds) - 1:
            raise ValueError(f"levels: only the top level may be unbounded, level {lvl} is (bounds {tuple(bounds)})")
        if bound is not None and (int(bound) != bound or bound < 1):
            raise ValueError(f"levels: level {lvl} bound must be a whole number >= 1, got {bound!r}")


@dataclass(frozen=True)
class Hierarchy:
    """The levels of a device hierarchy, innermost first.

    Attributes:
        bounds: units of the level below that one unit of this level holds
            (devices for level 0); ``None`` for the unbounded top level.
        bandwidths_gbps: bandwidth of each level in GB/s, as the score divides by it.
    """

    bounds: tuple[int | None, ...]
    bandwidths_gbps: tuple[float, ...]

    def __post_init__(self) -> None:
        _check_bounds(self.bounds)
        if len(self.bounds) != len(self.bandwidths_gbps):
            raise ValueError(f"levels: need one bandwidth per level, got bounds {self.bounds} and bandwidths "
                             f"{self.bandwidths_gbps}")
        for lvl, bw in enumerate(self.bandwidths_gbps):
            if not bw > 0:
                raise ValueError(f"levels: level {lvl} bandwidth must be > 0 GB/s, got {bw!r}")

    @property
    def levels(self) -> int:
        return len(self.bounds)


def hierarchy(device: str) -> Hierarchy:
    """The level hierarchy of *device* (``A2``, ``A3``, …) from the hardware catalog.

    Raises:
        hardware.HardwareSpecError: (a ValueError) for a device the catalog does not hold, naming it.
    """
    import hardware  # codegen may read hardware/; imported here so that importing codegen stays light

    system = hardware.load(device)
    return Hierarchy(tuple(system.level_bounds()), tuple(float(x) for x in system.level_bandwidths_gbps()))


def _degrees(**degrees: object) -> dict[str, np.ndarray]:
    """Checked whole-number degrees as int64 arrays broadcast to one shape."""
    checked = check_inputs(degrees)
    shape = np.broadcast_shapes(*(a.shape for a in checked.values()))
    return {name: np.broadcast_to(a, shape).astype(np.int64) for name, a in checked.items()}


def assign_levels(bounds: Sequence[int | None], *, d: object, t: object, cp: object,
                  p: object) -> dict[str, np.ndarray]:
    """How many ranks of each dimension sit at each level (the original's ``level_assign``).

    With ``N = d·t·cp·p`` devices, level by level, innermost first:
    ``rem = max(min(N, bound), 1)`` (``max(N, 1)`` at the unbounded top) and
    ``N //= bound``; then the dimensions, in the order TP, EP (one rank), CP,
    DP, PP, each take ``A = min(degree, rem)`` and leave ``degree //= A``,
    ``rem //= A``. The greedy floor divisions are the original's: a degree
    need not end up fully placed (A3, t=4 cp=2 d=16 p=8 places PP as 1·3·2).

    Args:
        bounds: the hierarchy's level bounds (``Hierarchy.bounds``).
        d, t, cp, p: DP, TP, CP, PP degrees: whole numbers ≥ 1, scalars or
            arrays of any broadcastable shapes.

    Returns:
        ``{dim: array of shape (levels, *layout_shape)}`` for every name in
        ``DIMENSIONS``, int64.

    Raises:
        codegen.runtime.inputs.InputError: a degree that is not a whole number ≥ 1.
        ValueError: bounds that are not a hierarchy (``Hierarchy``).
    """
    _check_bounds(bounds)
    deg = _degrees(d=d, t=t, cp=cp, p=p)
    shape = deg["d"].shape
    remaining = {"MP": deg["t"].copy(), "EP": np.ones(shape, np.int64), "CP": deg["cp"].copy(),
                 "DP": deg["d"].copy(), "PP": deg["p"].copy()}
    devices = deg["d"] * deg["t"] * deg["cp"] * deg["p"]
    out = {dim: np.empty((len(bounds),) + shape, np.int64) for dim in DIMENSIONS}
    for lvl, bound in enumerate(bounds):
        if bound is None:
            room = np.maximum(devices, 1)
        else:
            room = np.maximum(np.minimum(devices, int(bound)), 1)
            devices = devices // int(bound)
        for dim in DIMENSIONS:
            taken = np.minimum(remaining[dim], room)
            out[dim][lvl] = taken
            remaining[dim] = remaining[dim] // taken
            room = room // taken
    return out


def _score_arguments(levels: Hierarchy, placed: np.ndarray) -> dict[str, object]:
    """The per-level keyword arguments of ``score_levels<L>_comm_score``."""
    args: dict[str, object] = {}
    for lvl in range(levels.levels):
        args[f"level_assign_{lvl}"] = placed[lvl]
        args[f"level_bw_{lvl}"] = levels.bandwidths_gbps[lvl]
        if lvl < levels.levels - 1:
            args[f"level_bound_{lvl}"] = levels.bounds[lvl]
    return args


def comm_score(*, comm_volume: object, overlap: object, dim: str, d: object, t: object, cp: object, p: object,
               device: str | Hierarchy = "A2",
               assignment: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
    """``estimate_comm_score``: the level score of *comm_volume* for dimension *dim* (unit "score").

    Not a time (docs/model.md, oddity 12): per level, the volume not overlapped
    times (ranks of *dim* there − 1) times the devices below that level, over
    the level's bandwidth as a bare GB/s number. Vectorised over layouts.

    Args:
        comm_volume: the volume V (bytes or parameter counts), ≥ 0.
        overlap: the hidden fraction, ≥ 0.
        dim: which dimension's placement prices it (``parse_dim``).
        d, t, cp, p: the layout's degrees (whole numbers ≥ 1; arrays broadcast).
        device: a catalog device name or a ``Hierarchy``; A2 by default, as
            the original binds it (§10 item 21).
        assignment: a ready ``assign_levels`` result for the same layouts, to
            skip recomputing it when several dimensions are scored.

    Raises:
        ValueError: an unknown ``dim``, or a hierarchy deeper than the score's symbols.
        codegen.runtime.inputs.InputError: a negative volume or overlap, or a bad degree.
    """
    name = parse_dim(dim)
    levels = device if isinstance(device, Hierarchy) else hierarchy(device)
    by_levels = {int(dict(pairs)["levels"]): formula for pairs, formula in variants("score").items()}
    if levels.levels not in by_levels:
        raise ValueError(f"device: {levels.levels} levels; the score is declared for at most {max(by_levels)}")
    values = check_inputs({"comm_volume": comm_volume, "overlap": overlap})
    placed = (assignment if assignment is not None else assign_levels(levels.bounds, d=d, t=t, cp=cp, p=p))[name]
    if placed.shape[0] != levels.levels:
        raise InputError(f"assignment: {placed.shape[0]} levels given for a {levels.levels}-level device")
    fn = evaluator(by_levels[levels.levels])
    return fn(**values, **_score_arguments(levels, placed))


#: The TIME path's score-factor symbols (``symbolic.model``) and the dimension each is scored as.
SCORE_FACTORS: dict[str, str] = {"score_factor_dp": "DP", "score_factor_tp": "MP", "score_factor_cp": "CP"}


def score_factors(*, device: str | Hierarchy, d: object, t: object, cp: object, p: object) -> dict[str, np.ndarray]:
    """Level score of a unit volume of DP, TP and CP, by score-factor symbol (scalars or arrays).

    The score is linear in the volume (``symbolic.score``), so the stage closed
    forms multiply each dimension's volume by these factors on the TIME path.
    """
    return {name: comm_score(comm_volume=1.0, overlap=0.0, dim=dim, device=device, d=d, t=t, cp=cp, p=p)
            for name, dim in SCORE_FACTORS.items()}
