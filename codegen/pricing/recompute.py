"""The modules a run recomputes inside its layers (Megatron-Core's ``recompute_modules``): their names checked,
and the 0/1 switches the memory and compute formulas read (``symbolic.vocabulary.RECOMPUTE_MODULES``).

Public API::

    recompute_modules(field, value) -> tuple[str, ...]   # names, each once, in the vocabulary's order
    module_values(modules) -> {symbol: 0.0 | 1.0}        # every module's switch
"""

from __future__ import annotations

from typing import Any, Sequence

from symbolic.vocabulary import RECOMPUTE_MODULES

from ..runtime import inputs

__all__ = ["recompute_modules", "module_values"]

#: Megatron-Core's other recompute modules (megatron/core/transformer/transformer_config.py), and what to say of each.
_NOT_MODELLED = {
    "core_attn": "the recompute mode selective (--recompute selective), not a module here",
    **dict.fromkeys(("mlp", "moe", "shared_experts", "mhc"), "a Megatron-Core module not modelled"),
}


def recompute_modules(field: str, value: Any) -> tuple[str, ...]:
    """*value* as recompute module names (``symbolic.vocabulary.RECOMPUTE_MODULES``), each once, in the
    vocabulary's order: a sequence of names, or one text of names separated by commas (``"none"`` or ``""`` for
    none).

    Raises:
        InputError: naming *field* and the value: not text or a sequence of texts, or a name no module has
            (Megatron-Core's ``core_attn`` is the recompute mode ``selective``; its ``mlp``, ``moe``,
            ``shared_experts`` and ``mhc`` are not modelled).
    """
    return inputs.name_set(field, value, RECOMPUTE_MODULES, "recompute modules", refused=_NOT_MODELLED)


def module_values(modules: Sequence[str]) -> dict[str, float]:
    """The 0/1 switch of every recompute module (its symbol's name → 1.0 when *modules*, names already checked by
    :func:`recompute_modules`, holds it, else 0.0), the values the memory and compute formulas read."""
    return {symbol: float(name in modules) for name, (symbol, _what) in RECOMPUTE_MODULES.items()}
