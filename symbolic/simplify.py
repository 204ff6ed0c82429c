"""Readable closed forms through explicit cheap passes.

Never a blind ``simplify()`` (slow, and its output changes between SymPy
versions). Each pass below is tried in turn and its result kept only when it
is smaller by ``count_ops`` (ties: the shorter string), in the spirit of
``sympy.codegen.rewriting``'s optimisations kept only when cheaper.
"""

from __future__ import annotations

from typing import Callable

import sympy

__all__ = ["closed_form", "PASSES", "size"]


def size(expr: sympy.Expr) -> tuple[int, int]:
    """How big an expression reads: (operation count, printed length)."""
    return (int(sympy.count_ops(expr)), len(sympy.sstr(expr)))


def _piecewise_fold(expr: sympy.Expr) -> sympy.Expr:
    return sympy.piecewise_fold(expr)


def _cancel_pieces(expr: sympy.Expr) -> sympy.Expr:
    # cancel() on a Piecewise would touch its conditions; cancel each branch's value instead.
    return expr.replace(lambda e: isinstance(e, sympy.Piecewise),
                        lambda e: sympy.Piecewise(*[(sympy.cancel(v), c) for v, c in e.args]))


#: (name, pass) in the order they are tried.
PASSES: tuple[tuple[str, Callable[[sympy.Expr], sympy.Expr]], ...] = (
    ("cancel", lambda e: e if e.has(sympy.Piecewise) else sympy.cancel(e)),
    ("cancel_pieces", _cancel_pieces),
    ("factor_terms", lambda e: sympy.factor_terms(e)),
    ("piecewise_fold", _piecewise_fold),
    ("together", lambda e: e if e.has(sympy.Piecewise) else sympy.together(e)),
    ("factor", lambda e: e if e.has(sympy.Piecewise, sympy.Min, sympy.Max, sympy.floor) else sympy.factor(e)),
)


def closed_form(expr: sympy.Expr) -> sympy.Expr:
    """*expr* after every pass that made it smaller."""
    best, best_size = expr, size(expr)
    for _, fn in PASSES:
        try:
            candidate = fn(best)
        except (sympy.PolynomialError, TypeError, ValueError, NotImplementedError):
            continue
        cand_size = size(candidate)
        if cand_size < best_size:
            best, best_size = candidate, cand_size
    return best
