"""Sensitivity of a formula to one symbol: derivative, elasticity, derivative through a split.

Each function takes a registered (or on-demand) :class:`Formula` and returns
a new ``Formula`` over the same symbols, which the code generator compiles
like any other (the tests compile them in memory):

* ``derivative(f, x)``: ``∂f/∂x``, named ``<f.name>__d_<x>``, unit
  ``"derivative"`` (``f``'s unit per unit of ``x``; the doc says which).
* ``elasticity(f, x)``: ``x/f · ∂f/∂x``, the relative change of ``f`` per
  relative change of ``x`` (a term ``∝ x^k`` has elasticity ``k``), named
  ``<f.name>__elasticity_<x>``, unit ``"1"``; 0 where ``f = 0``.
* ``split_derivative(f, x, shares)``: ``df/dx`` where the count symbols
  *shares* are each a share of a whole split ``x`` ways (``n ∝ 1/x``, so
  ``dn/dx = −n/x``): the continuous relaxation of an even split, e.g. the
  layers of a pipeline stage over ``p``. Named ``<f.name>__d_<x>_split``.

Every symbol is differentiated as a continuous real, integer assumptions
notwithstanding (a degree's derivative is the slope of the closed form, not
a difference of neighbouring layouts).

Non-smooth parts. The formulas hold floors, ``Max``/``Min`` and
``Piecewise``; this module differentiates them itself, by a small recursive
differentiator, and returns the derivative that holds *almost everywhere*
(everywhere except on the measure-zero set of kinks and jumps):

* ``floor(u)``, ``ceiling(u)``, ``sign(u)``, ``Heaviside(u)``: 0 (step
  functions are flat between their jumps);
* ``Max(a, b)``: ``Piecewise((∂a, a > b), (∂b, True))`` — on a tie ``a = b``
  the *second* argument's derivative is taken; ``Max(a, b, c, …)`` is read as
  ``Max(a, Max(b, c, …))``, in SymPy's argument order;
* ``Min(a, b)``: ``Piecewise((∂a, a < b), (∂b, True))``, ties likewise;
* ``Abs(u)``: ``Piecewise((−∂u, u < 0), (∂u, True))``;
* ``Piecewise((e₁, c₁), …)``: ``Piecewise((∂e₁, c₁), …)`` with the same
  conditions (the jumps where a condition flips are not differentiated);
  when every branch has the same derivative, that derivative alone;
* sums, products, powers and smooth functions (``exp``, ``log``, …): the
  usual rules.

``sympy.diff`` is not used on these nodes because it answers with
``Heaviside``, ``DiracDelta`` or unevaluated ``Derivative``/``Subs`` objects,
which the printer cannot (and should not) evaluate; a result of this module
never holds any of them (a ``ValueError`` names the node otherwise).

Public API::

    derivative(formula, symbol_name) -> Formula
    elasticity(formula, symbol_name) -> Formula
    split_derivative(formula, symbol_name, shares) -> Formula
    derivative_expr(expr, symbol_name) -> sympy.Expr
    elasticity_expr(expr, symbol_name) -> sympy.Expr
    DEGREES: the parallel degrees and sizes a layout's sensitivity is taken over
"""

from __future__ import annotations

from typing import Sequence

import sympy

from .formula import Formula
from .symbols import SPECS, symbol

__all__ = ["derivative", "derivative_expr", "elasticity", "elasticity_expr", "split_derivative"]

#: The parallel degrees and sizes a layout's sensitivity is taken over (all declared symbols).

#: Node types a derivative must never contain: what ``sympy.diff`` leaves for non-smooth nodes.
FORBIDDEN = (sympy.Derivative, sympy.Subs, sympy.Heaviside, sympy.DiracDelta)

_STEPS = (sympy.floor, sympy.ceiling, sympy.sign, sympy.Heaviside)


def _d(expr: sympy.Basic, x: sympy.Symbol) -> sympy.Expr:
    """The almost-everywhere derivative of *expr* in *x* (see the module docstring)."""
    if not expr.has(x):
        return sympy.Integer(0)
    if expr == x:
        return sympy.Integer(1)
    if isinstance(expr, sympy.Add):
        return sympy.Add(*(_d(arg, x) for arg in expr.args))
    if isinstance(expr, sympy.Mul):
        args = expr.args
        terms = []
        for i, arg in enumerate(args):
            d_arg = _d(arg, x)
            if d_arg != 0:
                terms.append(sympy.Mul(*args[:i], d_arg, *args[i + 1:]))
        return sympy.Add(*terms)
    if isinstance(expr, sympy.Pow):
        base, exponent = expr.args
        if not exponent.has(x):
            return exponent * base ** (exponent - 1) * _d(base, x)
        return expr * (_d(exponent, x) * sympy.log(base) + exponent * _d(base, x) / base)
    if isinstance(expr, _STEPS):
        return sympy.Integer(0)
    if isinstance(expr, (sympy.Max, sympy.Min)):
        first, rest = expr.args[0], expr.func(*expr.args[1:])
        d_first, d_rest = _d(first, x), _d(rest, x)
        if d_first == d_rest:
            return d_first
        wins = first > rest if isinstance(expr, sympy.Max) else first < rest
        return sympy.Piecewise((d_first, wins), (d_rest, True))
    if isinstance(expr, sympy.Abs):
        u = expr.args[0]
        d_u = _d(u, x)
        return sympy.Piecewise((-d_u, u < 0), (d_u, True))
    if isinstance(expr, sympy.Piecewise):
        pieces = [(_d(value, x), cond) for value, cond in expr.args]
        values = {value for value, _ in pieces}
        if len(values) == 1 and expr.args[-1].cond is sympy.true:
            return values.pop()
        return sympy.Piecewise(*pieces)
    if isinstance(expr, sympy.Function) and not isinstance(expr, sympy.core.function.AppliedUndef):
        # A smooth elementary function: the chain rule through SymPy's own partial derivatives.
        terms = []
        for i, arg in enumerate(expr.args, start=1):
            d_arg = _d(arg, x)
            if d_arg != 0:
                terms.append(expr.fdiff(i) * d_arg)
        out = sympy.Add(*terms)
        if out.has(*FORBIDDEN):
            raise ValueError(f"cannot differentiate {expr.func.__name__}: SymPy's derivative of it is not "
                             f"a closed form ({out})")
        return out
    raise ValueError(f"cannot differentiate a {type(expr).__name__} node: {expr}")


def _symbol(symbol_name: str) -> sympy.Symbol:
    if not isinstance(symbol_name, str):
        raise TypeError(f"symbol_name: expected a symbol's name, got {symbol_name!r}")
    return symbol(symbol_name)  # KeyError naming an undeclared name


def derivative_expr(expr: sympy.Expr, symbol_name: str) -> sympy.Expr:
    """The almost-everywhere partial derivative of *expr* in the symbol *symbol_name*.

    Raises:
        KeyError: naming a symbol ``symbolic.symbols`` does not declare.
        ValueError: for a node type with no closed-form derivative here (naming it).
    """
    out = _d(expr, _symbol(symbol_name))
    if out.has(*FORBIDDEN):  # pragma: no cover - _d builds none of them
        raise ValueError(f"derivative in {symbol_name} holds an unevaluated node: {out}")
    return out


def _per_unit(symbol_name: str) -> str:
    return f"per {SPECS[symbol_name].unit} of {symbol_name}"


def derivative(formula: Formula, symbol_name: str) -> Formula:
    """``∂formula/∂x`` as a new formula ``<name>__d_<x>`` (almost everywhere; see the module docstring).

    Raises:
        KeyError: naming a symbol ``symbolic.symbols`` does not declare.
    """
    expr = derivative_expr(formula.expr, symbol_name)
    return Formula(
        name=f"{formula.name}__d_{symbol_name}", expr=expr, dimension=formula.dimension,
        algorithm=formula.algorithm, unit="derivative",
        doc=(f"Partial derivative of {formula.name} with respect to {symbol_name}, in {formula.unit} "
             f"{_per_unit(symbol_name)}; every other symbol held; floors flat, Max/Min/Piecewise by their "
             f"active branch (almost everywhere)."),
        source=f"{formula.source}; differentiated by symbolic.sensitivity", variant=formula.variant)


def _log_slope(expr: sympy.Expr, x: sympy.Symbol) -> sympy.Expr:
    """``x/e · ∂e/∂x`` by the structure of *expr*: a product's is the sum of its factors', a power's
    ``k`` times its base's, so that a monomial ``c·x^k`` gives ``k`` with no division left."""
    if not expr.has(x):
        return sympy.Integer(0)
    if expr == x:
        return sympy.Integer(1)
    if isinstance(expr, sympy.Mul):
        return sympy.Add(*(_log_slope(factor, x) for factor in expr.args))
    if isinstance(expr, sympy.Pow) and not expr.exp.has(x):
        return expr.exp * _log_slope(expr.base, x)
    return x * _d(expr, x) / expr


def _branch_elasticity(expr: sympy.Expr, x: sympy.Symbol) -> sympy.Expr:
    """The elasticity of a Piecewise-free expression, 0 where it is 0."""
    if expr == 0 or not expr.has(x):
        return sympy.Integer(0)
    if expr.has(sympy.Piecewise):
        # Only a Piecewise that piecewise_fold cannot lift (inside Max/Min/floor arguments) gets here;
        # a zero test of it would be rewritten into ITE conditions the printer does not know.
        raise ValueError(f"cannot take the elasticity of {expr}: a Piecewise sits where it cannot be lifted")
    slope = _log_slope(expr, x)
    if expr.is_zero is False:  # nonzero under the symbols' assumptions: no guard needed
        return slope
    return sympy.Piecewise((0, sympy.Eq(expr, 0)), (slope, True))


def elasticity_expr(expr: sympy.Expr, symbol_name: str) -> sympy.Expr:
    """``x/f · ∂f/∂x`` of *expr*, 0 where *expr* is 0 (see :func:`elasticity`).

    Raises:
        KeyError: naming a symbol ``symbolic.symbols`` does not declare.
        ValueError: for a node type with no closed-form derivative here (naming it).
    """
    x = _symbol(symbol_name)
    # Lift every Piecewise to the top first: on each branch's region f is that branch, so its
    # elasticity is the branch's (a.e.), and no zero test or reciprocal ever wraps a Piecewise
    # (SymPy would distribute 1/Piecewise into branches of 1/0 = zoo).
    folded = sympy.piecewise_fold(expr)
    if not isinstance(folded, sympy.Piecewise):
        return _branch_elasticity(folded, x)
    pieces = [(_branch_elasticity(value, x), cond) for value, cond in folded.args]
    values = {value for value, _ in pieces}
    if len(values) == 1 and folded.args[-1].cond is sympy.true:
        return values.pop()
    return sympy.Piecewise(*pieces)


def elasticity(formula: Formula, symbol_name: str) -> Formula:
    """``x/f · ∂f/∂x`` as a new formula ``<name>__elasticity_<x>``, 0 where ``f = 0``.

    A term proportional to ``x^k`` has elasticity ``k``: the percentage change of
    the formula per percent change of ``x``, at the point it is evaluated. Built
    branch by branch after lifting every ``Piecewise`` to the top
    (``sympy.piecewise_fold``), a product's elasticity as the sum of its
    factors' (so ``c·x^k`` gives exactly ``k``), with the ``f = 0`` guard on each
    branch that is not nonzero by the symbols' assumptions.

    Raises:
        KeyError: naming a symbol ``symbolic.symbols`` does not declare.
        ValueError: for a node type with no closed-form derivative here (naming it).
    """
    expr = elasticity_expr(formula.expr, symbol_name)
    return Formula(
        name=f"{formula.name}__elasticity_{symbol_name}", expr=expr, dimension=formula.dimension,
        algorithm=formula.algorithm, unit="1",
        doc=(f"Elasticity of {formula.name} in {symbol_name}: {symbol_name}/f times the partial derivative "
             f"(relative change per relative change of {symbol_name}; k for a term in {symbol_name}^k), "
             f"0 where the formula is 0."),
        source=f"{formula.source}; differentiated by symbolic.sensitivity", variant=formula.variant)


def split_derivative(formula: Formula, symbol_name: str, shares: Sequence[str]) -> Formula:
    """``df/dx`` where each count in *shares* is a share of a whole split *x* ways.

    The continuous relaxation of an even split: a count ``n`` that is one of
    ``x`` equal shares of a fixed whole is ``N/x``, so ``dn/dx = −n/x``, and

        df/dx = ∂f/∂x + Σ_n ∂f/∂n · (−n/x)

    with the counts at their current values. For a pipeline stage's layer
    counts over ``p`` this is the slope of the stage's cost as its share of
    the layers shrinks like ``1/p``; the whole is not needed, only the share.

    Raises:
        KeyError: naming a symbol ``symbolic.symbols`` does not declare.
    """
    x = _symbol(symbol_name)
    total = derivative_expr(formula.expr, symbol_name)
    for name in shares:
        n = _symbol(name)
        if n == x:
            raise ValueError(f"shares: {name!r} is the split symbol itself")
        total += derivative_expr(formula.expr, name) * (-n / x)
    return Formula(
        name=f"{formula.name}__d_{symbol_name}_split", expr=total, dimension=formula.dimension,
        algorithm=formula.algorithm, unit="derivative",
        doc=(f"Derivative of {formula.name} with respect to {symbol_name}, in {formula.unit} "
             f"{_per_unit(symbol_name)}, where {', '.join(shares)} are shares of a whole split "
             f"{symbol_name} ways (each ∝ 1/{symbol_name}: the continuous relaxation of an even split)."),
        source=f"{formula.source}; differentiated by symbolic.sensitivity", variant=formula.variant)
