"""The level score ``estimate_comm_score``: a volume priced over the levels of a device hierarchy.

Restates ``estimate_comm_score(cfg, V, dim, overlap, device)`` (published
version of HyperParallel SAPP-ND's time model; docs/model.md, "Level score"). The planner
places the ranks of each parallel dimension on the levels of the hierarchy
(inside a node, across nodes, …) greedily; ``A_l`` is how many ranks of the
scored dimension land at level ``l``. That step is integer bookkeeping and is
done numerically (``codegen.pricing.levels``); given it, the score is::

    Score = Σ_l V · (1 − overlap) · (A_l − 1) · devices_below(l) / BW_l

with ``devices_below(0) = 1`` and ``devices_below(l)`` the product of the
bounds of the levels below ``l`` (here ``level_bound_0 · … · level_bound_{l−1}``).

Unit: "score". It is **not** a time in any unit (docs/model.md, oddity 12): it
multiplies by the devices below a level instead of dividing, takes bandwidths
as bare GB/s numbers (no 10⁹), and ignores latency — the original's own
"Follow-up" comment admits as much (comm_time.py lines 653-654). It is the
volume's unit (bytes or parameter counts, whatever ``V`` is) times devices per
GB/s. Levels where ``A_l = 1`` add nothing, so a dimension kept inside one
node is priced by the level-0 term alone.
"""

from __future__ import annotations

import sympy

from .formula import Formula
from .symbols import symbol, syms

__all__ = ["MAX_LEVELS", "score", "formula_name", "FORMULAS"]

comm_volume, overlap = syms("comm_volume", "overlap")

#: Hierarchy depths with declared per-level symbols (A2 has 2 levels, A3 has 3).
MAX_LEVELS = 3

SOURCE = "published version of estimate_comm_score (HyperParallel SAPP-ND perf_estimation); docs/model.md, 'Level score'"


def _devices_below(level: int) -> sympy.Expr:
    return sympy.Mul(*(symbol(f"level_bound_{j}") for j in range(level)))


def score(levels: int) -> sympy.Expr:
    """The score of a volume over a hierarchy of *levels* levels (unit "score", not a time).

    Free symbols: ``comm_volume``, ``overlap``, ``level_assign_l`` and
    ``level_bw_l`` for each level, ``level_bound_l`` for each level but the
    top one (which is unbounded).

    Raises:
        ValueError: naming ``levels`` when it is not 1 … MAX_LEVELS.
    """
    if not isinstance(levels, int) or not 1 <= levels <= MAX_LEVELS:
        raise ValueError(f"levels: a hierarchy of 1 to {MAX_LEVELS} levels is supported, got {levels!r}")
    terms = (
        (symbol(f"level_assign_{lvl}") - 1) * _devices_below(lvl) / symbol(f"level_bw_{lvl}")
        for lvl in range(levels)
    )
    return comm_volume * (1 - overlap) * sympy.Add(*terms)


def formula_name(levels: int) -> str:
    """The registered name of the score over *levels* levels."""
    return f"score_levels{levels}_comm_score"


FORMULAS: tuple[Formula, ...] = tuple(
    Formula(
        name=formula_name(n),
        expr=score(n),
        dimension="score",
        algorithm=f"levels{n}",
        unit="score",
        doc=(f"Level score of a dimension's volume on a {n}-level device hierarchy: per level, the volume not "
             "overlapped times (ranks placed there − 1) times devices below over the level's GB/s; not a time "
             "(§10 item 12)."),
        source=SOURCE,
        variant=(("levels", str(n)),),
    )
    for n in range(1, MAX_LEVELS + 1)
)
