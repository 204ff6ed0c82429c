"""Data parallelism per layer: ``EvalLayerComm.dp_comm_layer`` (ZeRO-2/3-like sharding, no FSDP).

Restates the published ``EvalLayerComm.dp_comm_non_exp``, ``dp_comm_exp`` and
``dp_comm_layer`` (docs/formulas.md, "DP"). The volumes are over the layer's
parameter counts ``P_ne``, ``P_r``, ``P_s`` (``params.layer_counts``), so a
caller may evaluate them from numbers or substitute the count expressions
(``with_param_counts``) to get one expression in model symbols.

**Unit: parameter counts, no bytes** (docs/model.md, oddity 11): the stage
walk adds this to byte volumes of TP (MoE), EP and CP.

The DP levels ``comm_d_non_exp`` and ``comm_d_exp`` are *variant keys*,
resolved in Python (``zero_level``), not ``Piecewise`` conditions: they are
configuration choices the original tests with ``==`` (0 none, 2 ZeRO-2-like,
3 ZeRO-3-like; any other value moves nothing), not quantities a formula
varies smoothly in; each level gives an expression of a different shape; and
the branch a level does not take reads fields that may be unset (level 3 does
not read ``cp``, level 0 reads nothing), which a ``Piecewise`` would still
have to evaluate. Whether the layer has experts (dense vs MoE) is resolved in
Python too; the original's ``P_r + P_s = 0`` guard stays a numeric condition.

Oddity kept (docs/model.md, oddity 20): non-expert level 2 divides by ``cp``
in one of its two terms only, ``P_ne/(cp·t) + P_ne/t``.
"""

from __future__ import annotations

import enum
from typing import Mapping

import sympy
from sympy import Eq, Max, Piecewise

from .formula import Formula
from .params import ParamCounts
from .symbols import syms

__all__ = ["ZeroLevel", "zero_level", "PARAM_SYMBOLS", "layer_formula", "with_param_counts", "FORMULAS"]

t, cp, ep, t_exp = syms("t", "cp", "ep", "t_exp")
P_ne, P_r, P_s = syms("P_ne", "P_r", "P_s")

#: The parameter-count symbols the DP volumes are written over, in ``num_params_layer``'s order.
PARAM_SYMBOLS: tuple[sympy.Symbol, sympy.Symbol, sympy.Symbol] = (P_ne, P_r, P_s)

SOURCE = "published version of memory_estimation/evaluators/comm.py"


class ZeroLevel(enum.Enum):
    """A DP communication level, as ``comm_d_non_exp`` / ``comm_d_exp`` state it."""

    NONE = "none"
    ZERO2 = "zero2"
    ZERO3 = "zero3"


def zero_level(value: object) -> ZeroLevel:
    """The level a ``comm_d_*`` value selects: 2 and 3 as the original's ``==`` tests, anything else none.

    Raises:
        ValueError: naming the value when it is not a number.
    """
    if isinstance(value, ZeroLevel):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"comm_d_non_exp/comm_d_exp: expected a DP level number (0, 2 or 3), got {value!r}")
    if value == 2:
        return ZeroLevel.ZERO2
    if value == 3:
        return ZeroLevel.ZERO3
    return ZeroLevel.NONE


def _non_expert(level: ZeroLevel) -> sympy.Expr:
    if level is ZeroLevel.ZERO2:
        # Gradient reduce over the CP-and-TP shard, parameter gather over the TP shard (§10 item 20).
        return P_ne / (cp * t) + P_ne / t
    if level is ZeroLevel.ZERO3:
        return P_ne / t
    return sympy.Integer(0)


def _expert(level: ZeroLevel) -> sympy.Expr:
    experts = P_r + P_s
    if level is ZeroLevel.ZERO2:
        volume = experts / (cp * t_exp * ep) + experts / Max(ep, t_exp)
    elif level is ZeroLevel.ZERO3:
        volume = experts / (cp * t_exp * ep)
    else:
        return sympy.Integer(0)
    return Piecewise((0, Eq(experts, 0)), (volume, True))


def _name(level_non_exp: ZeroLevel, level_exp: ZeroLevel) -> str:
    return f"dp_{level_non_exp.value}_{level_exp.value}_layer_params"


def _build() -> dict[tuple[ZeroLevel, ZeroLevel], Formula]:
    out: dict[tuple[ZeroLevel, ZeroLevel], Formula] = {}
    for ne in ZeroLevel:
        for ex in ZeroLevel:
            out[(ne, ex)] = Formula(
                name=_name(ne, ex),
                expr=_non_expert(ne) + _expert(ex),
                dimension="dp",
                algorithm=f"{ne.value}_{ex.value}",
                unit="params",
                doc=(f"DP volume of one layer per micro-batch in parameter counts (no bytes, §10 item 11), "
                     f"non-expert level {ne.value}, expert level {ex.value}, over the layer's counts P_ne, P_r, P_s."),
                source=f"{SOURCE}: EvalLayerComm.dp_comm_non_exp, dp_comm_exp, dp_comm_layer",
                variant=(("comm_d_non_exp", ne.value), ("comm_d_exp", ex.value)),
            )
    return out


_FORMULAS = _build()


def layer_formula(level_non_exp: object, level_exp: object, *, moe: bool) -> Formula:
    """The registered DP formula of one layer, over ``P_ne``, ``P_r``, ``P_s``.

    Args:
        level_non_exp: ``comm_d_non_exp`` (a number or a ``ZeroLevel``).
        level_exp: ``comm_d_exp``; ignored for a dense layer, whose expert
            counts are 0 (the original returns 0 before reading the level).
        moe: whether the layer has experts.
    """
    expert = zero_level(level_exp) if moe else ZeroLevel.NONE
    return _FORMULAS[(zero_level(level_non_exp), expert)]


def with_param_counts(expr: sympy.Expr | Formula, counts: ParamCounts | Mapping[sympy.Symbol, sympy.Expr]
                      ) -> sympy.Expr:
    """*expr* with ``P_ne``, ``P_r``, ``P_s`` replaced by parameter-count expressions (exact ``subs``).

    Args:
        expr: a DP formula or expression over ``PARAM_SYMBOLS``.
        counts: ``params.layer_counts(...)`` (or a mapping symbol → expression).
    """
    if isinstance(expr, Formula):
        expr = expr.expr
    mapping = dict(zip(PARAM_SYMBOLS, counts)) if isinstance(counts, tuple) else dict(counts)
    return expr.subs(mapping)


FORMULAS: tuple[Formula, ...] = tuple(_FORMULAS.values())
