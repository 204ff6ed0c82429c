"""Attention variants and the key/value widths every CP formula reads.

The attention type is a property of the model, so it is resolved in Python
before an expression is built (``detect_attention``); the widths below are
then plain expressions with only the original's numeric fallbacks inside.
"""

from __future__ import annotations


import sympy
from sympy import Max, Min, Ne, Piecewise

from .formula import Formula
from .symbols import syms
from .vocabulary import Attention, detect_attention, parse_attention

__all__ = ["Attention", "parse_attention", "detect_attention", "tp_width", "head_width", "guarded_head_width",
           "kv_width", "FORMULAS"]

h, a, n_kv, dh, dhr, t = syms("h", "a", "n_kv", "dh", "dhr", "t")


def tp_width() -> sympy.Expr:
    """``t' = max(1, t)``: the TP degree as the CP formulas divide by it.

    With ``t`` a positive integer SymPy reduces this to ``t`` at once; the
    ``Max`` is written to state the original's guard (``cost_model_preprocess``).
    """
    return Max(1, t)


def head_width() -> sympy.Expr:
    """Head width in elements: ``dh``, or ``h / max(1, a)`` when dh is unset (0).

    Source: comm_time.py line 159 (``ccfg.dh or ccfg.h / max(1, ccfg.a)``).
    """
    return Piecewise((dh, Ne(dh, 0)), (h / Max(1, a), True))


def guarded_head_width() -> sympy.Expr:
    """``cp_traffic``'s head width: ``dh``, or ``h / max(1, a)`` when dh is unset (0), guard included.

    Source: comm_time.py line 159 (``head = ccfg.dh or ccfg.h / max(1, ccfg.a)``). ``a`` is declared a
    positive integer, so SymPy folds ``Max(1, a)`` to ``a`` (:func:`head_width`), and an unset ``a`` (0, which
    the original reads) then gives ``h / 0``. In the branch taken only where ``dh = 0``, ``max(1, a - dh)`` is
    the original's ``max(1, a)`` exactly, and SymPy, which cannot bound ``a - dh`` below by 1, keeps the guard:
    with ``a = 0`` the width is ``h`` (0 when ``h`` is unset too), as the original computes it.
    """
    return Piecewise((dh, Ne(dh, 0)), (h / Max(1, a - dh), True))


def kv_width(attention: Attention) -> sympy.Expr:
    """Width W of each of K and V per TP rank, in elements (``compute_kv_dim``).

    * MHA: ``h / t'``.
    * GQA: ``min(n_kv or a, a) · dh / t'`` — raw ``dh``, no h/a fallback (docs/model.md, oddity 22).
    * MQA: GQA with one K/V head: ``dh / t'``.
    * MLA: ``n_kv · (2 dh + dhr) / (2 t')``, the mean of key (dh + dhr) and value (dh) widths.
    """
    tw = tp_width()
    if attention is Attention.MHA:
        return h / tw
    if attention is Attention.GQA:
        heads = Piecewise((Min(n_kv, a), n_kv > 0), (a, True))
        return heads * dh / tw
    if attention is Attention.MQA:
        return dh / tw
    if attention is Attention.MLA:
        return n_kv * (2 * dh + dhr) / (2 * tw)
    raise ValueError(f"attention: unknown attention type {attention!r}")


_KV_SOURCE = "cost_model_preprocess.compute_kv_dim (published version), read by comm_time.py lines 160 and 196"

FORMULAS: tuple[Formula, ...] = (
    Formula(
        name="attention_head_width_elements",
        expr=head_width(),
        dimension="attention",
        algorithm="any",
        unit="elements",
        doc="Head width per attention head, with the h/a fallback when dh is unset.",
        source="comm_time.py line 159 (cp_traffic)",
    ),
    *(
        Formula(
            name=f"attention_{att.value}_kv_width_elements",
            expr=kv_width(att),
            dimension="attention",
            algorithm=att.value,
            unit="elements",
            doc=f"Width of each of K and V per TP rank for {att.value.upper()} attention.",
            source=_KV_SOURCE,
            variant=(("attention", att.value),),
        )
        for att in Attention
    ),
)
