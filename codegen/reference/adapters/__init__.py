"""Adapters from the original's function names to the project's evaluators.

Each module maps the names of the original functions it restates to a
callable ``inputs -> output`` in the shape the reference file records; the
original's ``max(1, ·)`` guards on unset fields are applied first (``guards``).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Callable, Mapping

from . import cp, dp, ep, fsdp, legacy, model, params, recompute, score, tp
from .guards import guard

Adapter = Callable[[Mapping[str, Any]], Any]


def _merge(*tables: Mapping[str, Adapter]) -> Mapping[str, Adapter]:
    out: dict[str, Adapter] = {}
    for table in tables:
        for name, fn in table.items():
            if name in out:
                raise ValueError(f"adapter for {name!r} defined twice")
            out[name] = guard(name, fn)  # the original's max(1, ·) on unset fields (guards.py)
    return MappingProxyType(out)


ADAPTERS: Mapping[str, Adapter] = _merge(cp.ADAPTERS, fsdp.ADAPTERS, score.ADAPTERS,
                                         params.ADAPTERS, dp.ADAPTERS, tp.ADAPTERS, ep.ADAPTERS,
                                         legacy.ADAPTERS, recompute.ADAPTERS, model.ADAPTERS)
