"""Readable closed forms through explicit cheap passes.

Never a blind ``simplify()`` (slow, and its output changes between SymPy
versions). Each pass in ``PASSES`` is one cheap, value-preserving rewrite;
``closed_form`` tries them in turn on the best expression so far and keeps a
result only when it is smaller by ``size`` (operation count, then printed
length), in the spirit of ``sympy.codegen.rewriting``'s optimisations kept
only when cheaper. The round repeats while it still shrinks the expression
(at most ``ROUNDS`` times), so ``closed_form`` never returns anything larger
than its input.

A stage total is a sum over layer kinds of (count × per-layer cost). Asked to
(``linear_in``), ``closed_form`` lays it out that way — ``collect_linear`` —
whatever the size: this is a choice of layout made by the caller, not a
simplification; each per-layer cost inside it still goes through the passes.
"""

from __future__ import annotations

import functools
from typing import Callable, Iterable

import sympy
from sympy import Piecewise

__all__ = ["closed_form", "collect_linear", "PASSES", "ROUNDS", "size"]

#: Most rounds of ``PASSES`` one ``closed_form`` call runs.
ROUNDS = 3

#: ``piecewise_fold`` multiplies the branches of every Piecewise it merges, so it is only tried on
#: expressions with at most this many Piecewise nodes (it blows a stage total up 30-fold, slowly).
_FOLD_MAX_PIECEWISE = 3

_NOT_POLYNOMIAL = (sympy.Piecewise, sympy.Min, sympy.Max, sympy.floor)


def size(expr: sympy.Expr) -> tuple[int, int]:
    """How big an expression reads: (operation count, printed length)."""
    return (int(sympy.count_ops(expr)), len(sympy.sstr(expr)))


def _piecewise_count(expr: sympy.Expr) -> int:
    return sum(1 for node in sympy.preorder_traversal(expr) if isinstance(node, Piecewise))


def _absorb_into_piecewise(expr: sympy.Expr) -> sympy.Expr:
    """``c · Piecewise((e_i, C_i), …)`` → ``Piecewise((c · e_i, C_i), …)``.

    Only where a product has exactly one Piecewise factor; outermost products first, and a Piecewise nested inside a branch is left
    alone, so no branches multiply (unlike ``piecewise_fold``). The conditions
    do not change, so the value does not either.
    """
    if expr.is_Atom or not isinstance(expr, sympy.Basic):
        return expr
    if expr.is_Mul:
        pieces = [arg for arg in expr.args if isinstance(arg, Piecewise)]
        if len(pieces) == 1:
            others = [arg for arg in expr.args if arg is not pieces[0]]
            # One Mul over every factor, so that numbers combine and c is not distributed over a sum.
            return Piecewise(*((sympy.Mul(*others, value), cond) for value, cond in pieces[0].args))
    if isinstance(expr, Piecewise):
        return Piecewise(*((_absorb_into_piecewise(value), cond) for value, cond in expr.args))
    if not expr.args:
        return expr
    return expr.func(*(_absorb_into_piecewise(arg) for arg in expr.args))


@functools.lru_cache(maxsize=8192)
def _cancel(value: sympy.Expr) -> sympy.Expr:
    # The same branch values come back in every round of the passes and in many formulas (a stage's
    # terms share their pieces); cancel() is deterministic, so each is cancelled once.
    return sympy.cancel(value)


def _cancel_pieces(expr: sympy.Expr) -> sympy.Expr:
    # cancel() on a Piecewise would touch its conditions; cancel each branch's value instead.
    return expr.replace(lambda e: isinstance(e, Piecewise),
                        lambda e: Piecewise(*[(_cancel(v), c) for v, c in e.args]))


def _piecewise_fold(expr: sympy.Expr) -> sympy.Expr:
    if _piecewise_count(expr) > _FOLD_MAX_PIECEWISE:
        return expr
    return sympy.piecewise_fold(expr)


#: (name, pass) in the order they are tried. Each keeps the value of the expression wherever it is
#: defined; ``closed_form`` decides whether its result is kept.
PASSES: tuple[tuple[str, Callable[[sympy.Expr], sympy.Expr]], ...] = (
    ("absorb_into_piecewise", _absorb_into_piecewise),
    ("cancel", lambda e: e if e.has(Piecewise) else sympy.cancel(e)),
    ("cancel_pieces", _cancel_pieces),
    ("factor_terms", lambda e: sympy.factor_terms(e)),
    ("piecewise_fold", _piecewise_fold),
    ("together", lambda e: e if e.has(Piecewise) else sympy.together(e)),
    ("factor", lambda e: e if e.has(*_NOT_POLYNOMIAL) else sympy.factor(e)),
)


class _Sized:
    """An expression with its size, the printed length computed only when operation counts tie (it is slow)."""

    def __init__(self, expr: sympy.Expr):
        self.expr = expr
        self.ops = int(sympy.count_ops(expr))
        self._length: int | None = None

    @property
    def length(self) -> int:
        if self._length is None:
            self._length = len(sympy.sstr(self.expr))
        return self._length

    def __lt__(self, other: _Sized) -> bool:
        if self.ops != other.ops:
            return self.ops < other.ops
        return self.expr != other.expr and self.length < other.length


#: Min/Max nodes above which no pass is tried: rebuilding a Min or Max compares its arguments pairwise,
#: and on a minimum over a dozen collective algorithms every pass costs seconds and rarely pays.
MAX_EXTREMA = 30


def too_large_to_rewrite(expr: sympy.Basic) -> bool:
    """Whether the passes (here and in the code generator's lowering) leave *expr* as it is (``MAX_EXTREMA``)."""
    return expr.count(sympy.Min) + expr.count(sympy.Max) > MAX_EXTREMA


def _passes(expr: sympy.Expr) -> sympy.Expr:
    if too_large_to_rewrite(expr):
        return expr
    best = _Sized(expr)
    for _ in range(ROUNDS):
        start = best
        for _, fn in PASSES:
            try:
                candidate = fn(best.expr)
            except (sympy.PolynomialError, TypeError, ValueError, NotImplementedError):
                continue
            if candidate == best.expr:
                continue
            sized = _Sized(candidate)
            if sized < best:
                best = sized
        if best is start:
            break
    return best.expr


def _enters_linearly(expr: sympy.Basic, symbols: frozenset[sympy.Symbol]) -> bool:
    """Whether *symbols* enter *expr* through sums, products and Piecewise values only.

    A symbol inside a condition, a Max, a floor or any other function makes ``∂expr/∂symbol``
    miss how the value jumps (SymPy differentiates ``floor(x)`` to 0 and a Piecewise branch by
    branch), so such an expression is not laid out. Powers are left to the coefficient check.
    """
    if not expr.free_symbols & symbols:
        return True
    if isinstance(expr, Piecewise):
        return all(not cond.free_symbols & symbols and _enters_linearly(value, symbols) for value, cond in expr.args)
    if isinstance(expr, (sympy.Add, sympy.Mul, sympy.Pow)):
        return all(_enters_linearly(arg, symbols) for arg in expr.args)
    return isinstance(expr, sympy.Symbol)


def collect_linear(expr: sympy.Expr, symbols: Iterable[sympy.Symbol]) -> sympy.Expr | None:
    """*expr* laid out as Σ (symbols with the same coefficient) × closed form of that coefficient.

    The terms keep the order of *symbols* (the first symbol of a group places
    it), then the part free of them; the sum and each ``group × cost`` product
    are unevaluated, so that they keep that shape (``codegen.docs`` prints them
    term by term). Each coefficient is ``∂expr/∂symbol`` after
    ``closed_form``; that is exact because *expr* must be linear in *symbols*
    (no products or powers of them, no symbol inside a Max, a floor or a
    condition).

    Returns:
        The laid-out sum, or None when *expr* is not linear in *symbols*.
    """
    symbols = tuple(symbols)
    if not _enters_linearly(expr, frozenset(symbols)):
        return None
    groups: dict[sympy.Expr, list[sympy.Symbol]] = {}
    for sym in symbols:
        coefficient = sympy.diff(expr, sym)
        if coefficient.has(*symbols) or coefficient.has(sympy.Derivative):
            return None
        if coefficient != 0:
            groups.setdefault(closed_form(coefficient), []).append(sym)
    rest = closed_form(expr.subs({sym: 0 for sym in symbols}))
    terms = [sympy.Mul(sympy.Add(*group, evaluate=False) if len(group) > 1 else group[0], coefficient,
                       evaluate=False)
             for coefficient, group in groups.items()]
    if rest != 0:
        terms.append(rest)
    if not terms:
        return sympy.Integer(0)
    return terms[0] if len(terms) == 1 else sympy.Add(*terms, evaluate=False)


@functools.lru_cache(maxsize=None)
def _closed_form(expr: sympy.Expr, linear_in: tuple[sympy.Symbol, ...]) -> sympy.Expr:
    if linear_in:
        collected = collect_linear(expr, linear_in)
        if collected is not None:
            return collected
    return _passes(expr)


def closed_form(expr: sympy.Expr, linear_in: Iterable[sympy.Symbol] = ()) -> sympy.Expr:
    """*expr* after every pass that made it smaller (cached per expression).

    Args:
        expr: the expression.
        linear_in: symbols to lay the result out over as Σ symbol × cost
            (``collect_linear``), e.g. the layer counts of a stage total;
            ignored when *expr* is not linear in them.
    """
    return _closed_form(sympy.sympify(expr), tuple(linear_in))
