"""All formulas of the model, by name.

Modules are concatenated explicitly (no import-time discovery), so the order
is stable and a new module is one line here. Duplicate names are rejected.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from . import attention, collective_time, compute, cp, dp, ep, fsdp, legacy, memory, model, params, placement, recompute, score, stage_time, step_volumes, tp
from .formula import Formula

__all__ = ["FORMULAS", "get", "names"]


def _collect(*groups: tuple[Formula, ...]) -> Mapping[str, Formula]:
    out: dict[str, Formula] = {}
    for group in groups:
        for f in group:
            if f.name in out:
                raise ValueError(f"formula name {f.name!r} is registered twice")
            out[f.name] = f
    return MappingProxyType(out)


FORMULAS: Mapping[str, Formula] = _collect(
    attention.FORMULAS,
    cp.FORMULAS,
    fsdp.FORMULAS,
    score.FORMULAS,
    params.FORMULAS,
    dp.FORMULAS,
    tp.FORMULAS,
    ep.FORMULAS,
    legacy.FORMULAS,
    recompute.FORMULAS,
    model.FORMULAS,
    collective_time.FORMULAS,
    placement.FORMULAS,
    step_volumes.FORMULAS,
    stage_time.FORMULAS,
    memory.FORMULAS,
    compute.FORMULAS,
)


def get(name: str) -> Formula:
    """The formula called *name*.

    Raises:
        KeyError: naming the unknown formula.
    """
    try:
        return FORMULAS[name]
    except KeyError:
        raise KeyError(f"unknown formula {name!r}; `symcost derive --list` lists them") from None


def names() -> tuple[str, ...]:
    """Every formula name, in registry order."""
    return tuple(FORMULAS)
