"""The original's ``max(1, ·)`` guards on fields a case may leave unset (0), applied before the evaluators.

The symbols ``t``, ``a`` and ``m`` are declared positive (every valid layout has them ≥ 1), so
SymPy folds the original's ``max(1, t)`` to ``t`` while it builds a formula; the public API
keeps rejecting a degree of 0 (``codegen.runtime.inputs``). The original, however, reads an unset field
as 0 and, at the lines below, guards it: a reference case with such a 0 must reproduce the
original's number, not ``inf`` or NaN. This module restores the guard at the one depth where it
is exact: per function of the original and per field, it substitutes the guarded value for the
inputs of exactly the functions whose only reads of the field go through the guard.

Per field (seed printout of ``perf_estimation/comm_time.py``):

* ``t`` in ``cp_traffic`` (line 157, ``t = max(1, ccfg.t)``) and ``cp_comm_layer_detailed``
  (``_ulysses_cp_volumes`` line 129 and ``cp_traffic``; ``compute_kv_dim`` divides by the same
  guarded width): every read is guarded, so ``t`` reads as ``max(1, t)``.
* ``m`` in ``_fsdp_rounds`` (line 541, ``micro = max(1, cfg.m)``): the only read, so ``m`` reads
  as ``max(1, m)``.

``a`` in ``cp_traffic`` (line 159, ``head = ccfg.dh or ccfg.h / max(1, ccfg.a)``) needs no rule here: only
the head-width fallback is guarded there (``a`` itself multiplies the head terms unguarded), and the
formulas carry that guard themselves (``symbolic.attention.guarded_head_width``), for every attention
type, MLA included, and with ``h`` unset too.

Functions whose reads of these fields are not guarded (``EvalLayerComm.dp_comm_layer`` divides
by ``t``; the original raises there) are not touched.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Callable, Mapping

__all__ = ["GUARDED", "guard", "guarded"]


def _at_least_one(field: str) -> Callable[[dict[str, Any]], None]:
    def rule(inputs: dict[str, Any]) -> None:
        value = inputs.get(field)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 1:
            inputs[field] = 1.0
    return rule


#: Function of the original → field → the rule that restores its guard (see the module docstring).
GUARDED: Mapping[str, Mapping[str, Callable[[dict[str, Any]], None]]] = MappingProxyType({
    "cp_traffic": {"t": _at_least_one("t")},
    "cp_comm_layer_detailed": {"t": _at_least_one("t")},
    "_fsdp_rounds": {"m": _at_least_one("m")},
})


def guarded(function: str, inputs: Mapping[str, Any]) -> Mapping[str, Any]:
    """*inputs* of a case of *function* with the original's guards applied (a copy; unchanged if none apply)."""
    rules = GUARDED.get(function)
    if not rules:
        return inputs
    out = dict(inputs)
    for rule in rules.values():
        rule(out)
    return out


def guard(function: str, adapter: Callable[[Mapping[str, Any]], Any]) -> Callable[[Mapping[str, Any]], Any]:
    """*adapter* with *function*'s guards applied to its inputs (itself where the original guards nothing)."""
    if function not in GUARDED:
        return adapter

    def call(inputs: Mapping[str, Any]) -> Any:
        return adapter(guarded(function, inputs))

    call.__name__ = getattr(adapter, "__name__", function)
    call.__doc__ = adapter.__doc__
    return call
