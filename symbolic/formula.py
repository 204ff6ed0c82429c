"""The one core type: a named SymPy expression with what it counts and where it comes from."""

from __future__ import annotations

import functools
import keyword
from dataclasses import dataclass, field

import sympy

from .symbols import SPECS

__all__ = ["Formula", "UNITS", "DIMENSIONS"]

#: Units a formula may state. "params" is a parameter count; "mixed" marks the
#: original's sums of quantities in different units (docs/model.md, oddity 11).
#: "derivative" is a formula's unit per unit of one symbol (symbolic.sensitivity).
#: "s" and "bytes/s" belong to the time model (symbolic.collective_time), in SI units.
UNITS = frozenset({"bytes", "params", "elements", "ms", "GB/s", "count", "score", "mixed", "1", "derivative",
                   "s", "bytes/s", "FLOP"})

#: Dimensions a formula belongs to.
#: "collective" holds the time model of one collective call, "placement" where a group's ranks sit;
#: "stage" the per-layer terms of a pipeline stage, "stage_slope" their derivatives; "memory" bytes per rank,
#: "memory_slope" the derivatives of a stage's memory total.
DIMENSIONS = frozenset({"cp", "dp", "fsdp", "tp", "ep", "pp", "model", "recompute", "score", "params", "attention",
                        "collective", "placement", "stage", "stage_slope", "memory", "memory_slope", "compute"})


@dataclass(frozen=True)
class Formula:
    """One closed form of the model.

    Attributes:
        name: the generated function's name, ``<dimension>_<algorithm>_<what>_<unit>``.
        expr: the expression; its free symbols are model symbols only.
        dimension: which parallel dimension it prices (see ``DIMENSIONS``).
        algorithm: the variant it was built for ("ring", "ulysses", "linear", …).
        unit: the unit of the value (see ``UNITS``).
        doc: one sentence: what it counts, per what (rank, micro-batch, layer).
        source: where it comes from in the original (file and lines), with any oddity kept.
    """

    name: str
    expr: sympy.Expr
    dimension: str
    algorithm: str
    unit: str
    doc: str
    source: str
    variant: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or keyword.iskeyword(self.name):
            raise ValueError(f"formula name {self.name!r} is not a Python identifier")
        if not isinstance(self.expr, sympy.Basic):
            raise TypeError(f"formula {self.name}: expr must be a SymPy expression, got {type(self.expr).__name__}")
        if self.unit not in UNITS:
            raise ValueError(f"formula {self.name}: unknown unit {self.unit!r}; expected one of {sorted(UNITS)}")
        if self.dimension not in DIMENSIONS:
            raise ValueError(f"formula {self.name}: unknown dimension {self.dimension!r}")
        unknown = sorted(s.name for s in self.expr.free_symbols if s.name not in SPECS)
        if unknown:
            raise ValueError(f"formula {self.name}: symbols not declared in symbolic.symbols: {unknown}")
        if not self.doc.strip() or not self.source.strip():
            raise ValueError(f"formula {self.name}: doc and source must say what it counts and where it comes from")

    @functools.cached_property
    def arguments(self) -> tuple[str, ...]:
        """The free symbols' names, sorted: the generated function's keyword arguments.

        Computed once per formula: a walk over SymPy's tree is slow, and the reference adapters
        read the arguments at every layer of every stage.
        """
        return tuple(sorted(s.name for s in self.expr.free_symbols))
