"""SymPy → NumPy source text: SymPy's ``NumPyPrinter`` with a few documented overrides.

The printer turns one expression into one NumPy expression string. The
generated modules show it (each CSE temporary as infix code above the
in-place statements that compute it, see ``codegen.lowering``) and use it
for any function the in-place lowering has no rule for. Overrides, each
kept as small as the rule it states:

* ``Piecewise`` → nested ``numpy.where(cond, value, rest)`` instead of
  ``numpy.select``: it reads like the original's ``if``/``else`` chain and
  needs no list building; without a ``True`` branch the rest is ``numpy.nan``
  as in SymPy. Both branches are evaluated: callers that run the code wrap
  it in ``numpy.errstate`` (the generated modules do) so that a dead branch
  dividing by zero raises no warning.
* ``Max``/``Min`` → nested ``numpy.maximum``/``numpy.minimum`` instead of
  ``functools.reduce(...)``: elementwise, broadcasting, and no import of
  ``functools``.
* integer powers → products (``(x*x)``, ``1/(x*x*x)``): exact for integer
  powers and cheaper than ``**`` with a float exponent.
* rationals → the float constant nearest to ``p/q`` (Python's ``int / int``
  is correctly rounded), e.g. ``0.3333333333333333`` rather than ``1/3``.
* ``floor``/``ceiling`` → ``numpy.floor``/``numpy.ceil`` of an argument
  whose rational coefficient p/q keeps q as a divisor unless q is a power of
  two (``numpy.floor(s/49)``, not ``numpy.floor(0.02040816326530612*s)``,
  which is one below 1 at s = 49), relations →
  ``numpy.less_equal`` …, and ``And``/``Or``/``Not`` → ``numpy.logical_*`` (nested pairs, which broadcast),
  so that conditions work on arrays as well as on scalars.

Anything else is SymPy's: with ``strict`` on (its default), an expression
the printer cannot print raises ``PrintMethodNotImplementedError``.

``ScalarPrinter`` prints the same expression for one element of a loop
over the broadcast inputs (the fused numba target): arguments as ``name[i]``,
``Piecewise`` as a conditional expression (only the branch taken runs),
relations and logic infix, and, as the in-place lowering does, a rational
p/q under ``floor``/``ceiling`` or in a comparison kept as ×p ÷q at every
depth so that an exact quotient stays exact. NumPy's ufuncs
(``numpy.maximum``, ``numpy.floor``, …) stay: numba compiles them on
scalars with NumPy's NaN rules, so both targets give the same numbers.

``ArrayApiPrinter`` prints it for any array-API namespace bound to ``xp``
(``xp.where``, ``xp.maximum``, ``xp.logical_and`` of two operands,
``xp.remainder``, ``xp.acos`` …): the plain path the NumPy target takes for
arrays of another library (JAX, CuPy), which have no ``out=``.
"""

from __future__ import annotations

import sympy
from sympy.printing.numpy import NumPyPrinter
from sympy.printing.precedence import PRECEDENCE

__all__ = ["CostPrinter", "ScalarPrinter", "ArrayApiPrinter", "print_numpy", "print_scalar", "print_array_api",
           "float_literal"]


def float_literal(value: sympy.Expr) -> str:
    """A Python float literal for a SymPy number, exactly rounded.

    Rationals go through Python's ``int / int``, which rounds correctly;
    other numbers through ``evalf`` at 30 digits.

    Raises:
        TypeError: when *value* is not a real number.
    """
    value = sympy.sympify(value)
    if value.is_Rational:
        number = value.p / value.q
    elif value.is_number and value.is_real:
        number = float(value.evalf(30))
    else:
        raise TypeError(f"not a real number: {sympy.sstr(value)}")
    return repr(number)


class CostPrinter(NumPyPrinter):
    """``NumPyPrinter`` with the overrides listed in the module docstring."""

    printmethod = "_costprinter"

    def _print_Piecewise(self, expr: sympy.Piecewise) -> str:
        where = self._module_format(self._module + ".where")
        rest = self._print(sympy.S.NaN)
        for value, cond in reversed(expr.args):
            if cond is sympy.true:
                rest = self._print(value)
            else:
                rest = f"{where}({self._print(cond)}, {self._print(value)}, {rest})"
        return rest

    def _nested(self, name: str, args: tuple[sympy.Expr, ...]) -> str:
        fn = self._module_format(self._module + "." + name)
        printed = [self._print(a) for a in args]
        out = printed[-1]
        for arg in reversed(printed[:-1]):
            out = f"{fn}({arg}, {out})"
        return out

    def _print_Max(self, expr: sympy.Max) -> str:
        return self._nested("maximum", expr.args)

    # Nested pairs, not SymPy's ``logical_and.reduce((a, b))``: that stacks its operands into one array
    # and fails when they have different shapes (a number beside an array), where a pair broadcasts.
    def _print_And(self, expr: sympy.And) -> str:
        return self._nested("logical_and", expr.args)

    def _print_Or(self, expr: sympy.Or) -> str:
        return self._nested("logical_or", expr.args)

    def _print_Min(self, expr: sympy.Min) -> str:
        return self._nested("minimum", expr.args)

    def _print_Pow(self, expr: sympy.Pow, rational: bool = False) -> str:
        exp = expr.exp
        if exp.is_Integer and exp != 0 and abs(int(exp)) <= 8:
            base = self.parenthesize(expr.base, PRECEDENCE["Mul"], strict=True)
            n = abs(int(exp))
            if n == 1:
                return f"1/{base}"
            # Parenthesised: SymPy's Mul printer puts a power in a denominator after "/" unbracketed.
            product = f"({'*'.join([base] * n)})"
            return product if exp > 0 else f"1/{product}"
        return super()._print_Pow(expr, rational=rational)

    def _print_Rational(self, expr: sympy.Rational) -> str:
        return float_literal(expr)

    def _print_Half(self, expr: sympy.Rational) -> str:
        return float_literal(expr)

    def _print_Mul(self, expr: sympy.Mul) -> str:
        # SymPy's code printers put a rational coefficient in parentheses; a float needs none.
        coeff, rest = expr.as_coeff_Mul()
        if coeff.is_Rational and not coeff.is_Integer and rest is not sympy.S.One:
            sign = "-" if coeff.is_negative else ""
            return f"{sign}{float_literal(abs(coeff))}*{self.parenthesize(rest, PRECEDENCE['Mul'], strict=False)}"
        return super()._print_Mul(expr)

    def _exact(self, arg: sympy.Expr) -> str:
        # Rounded down or up, x*(1/q) may miss an integer that x/q hits: keep q a divisor.
        coeff, rest = arg.as_coeff_Mul()
        if coeff.is_Rational and coeff.q & (coeff.q - 1) and rest is not sympy.S.One:
            num, den = sympy.fraction(coeff.p * rest)
            return (f"{self.parenthesize(num, PRECEDENCE['Mul'], strict=True)}/"
                    f"{self.parenthesize(coeff.q * den, PRECEDENCE['Mul'], strict=False)}")
        return self._print(arg)

    def _print_floor(self, expr: sympy.floor) -> str:
        return f"{self._module_format(self._module + '.floor')}({self._exact(expr.args[0])})"

    def _print_ceiling(self, expr: sympy.ceiling) -> str:
        return f"{self._module_format(self._module + '.ceil')}({self._exact(expr.args[0])})"


class _ExactQuotients(CostPrinter):
    """Under ``floor``/``ceiling`` and in comparisons, p/q stays ×p ÷q at every depth, as the in-place lowering does."""

    _exact_depth = 0

    def _exactly(self, expr: sympy.Basic) -> str:
        self._exact_depth += 1
        try:
            return self._print(expr)
        finally:
            self._exact_depth -= 1

    def _print_Mul(self, expr: sympy.Mul) -> str:
        coeff, rest = expr.as_coeff_Mul()
        if self._exact_depth and coeff.is_Rational and coeff.q & (coeff.q - 1) and rest is not sympy.S.One:
            # x*(1/3) may round one ulp below the integer x/3 hits: the numerator over q, one division.
            num, den = sympy.fraction(coeff.p * rest)
            return (f"{self.parenthesize(num, PRECEDENCE['Mul'], strict=True)}/"
                    f"{self.parenthesize(coeff.q * den, PRECEDENCE['Mul'], strict=False)}")
        return super()._print_Mul(expr)

    def _print_floor(self, expr: sympy.floor) -> str:
        return f"{self._module}.floor({self._exactly(expr.args[0])})"

    def _print_ceiling(self, expr: sympy.ceiling) -> str:
        return f"{self._module}.ceil({self._exactly(expr.args[0])})"


class ScalarPrinter(_ExactQuotients):
    """``CostPrinter`` for one element of a loop; see the module docstring.

    Args:
        indexed: names of the symbols printed as ``name[i]`` (the loop's input arrays).
    """

    printmethod = "_scalarprinter"

    def __init__(self, indexed: frozenset[str] = frozenset()):
        super().__init__({"fully_qualified_modules": True, "strict": True})
        self._indexed = indexed

    def _print_Symbol(self, expr: sympy.Symbol) -> str:
        if expr.name in self._indexed:
            return f"{expr.name}[i]"
        return super()._print_Symbol(expr)

    def _print_Piecewise(self, expr: sympy.Piecewise) -> str:
        rest = self._print(sympy.S.NaN)
        for value, cond in reversed(expr.args):
            if cond is sympy.true:
                rest = self._print(value)
            else:
                rest = f"({self._print(value)} if {self._print(cond)} else {rest})"
        return rest

    def _print_Relational(self, expr: sympy.core.relational.Relational) -> str:
        return f"({self._exactly(expr.lhs)} {expr.rel_op} {self._exactly(expr.rhs)})"

    def _print_And(self, expr: sympy.And) -> str:
        return "(" + " and ".join(self._print(a) for a in expr.args) + ")"

    def _print_Or(self, expr: sympy.Or) -> str:
        return "(" + " or ".join(self._print(a) for a in expr.args) + ")"

    def _print_Not(self, expr: sympy.Not) -> str:
        return f"(not {self._print(expr.args[0])})"

    def _print_BooleanTrue(self, expr: sympy.Basic) -> str:
        return "True"

    def _print_BooleanFalse(self, expr: sympy.Basic) -> str:
        return "False"


#: NumPy's function names that the array API standard spells differently.
_ARRAY_API_NAMES = {"arccos": "acos", "arcsin": "asin", "arctan": "atan", "arctan2": "atan2", "arccosh": "acosh",
                    "arcsinh": "asinh", "arctanh": "atanh", "absolute": "abs", "power": "pow", "mod": "remainder",
                    "amax": "max", "amin": "min"}


_RELATION_NAMES = {"==": "equal", "!=": "not_equal", "<": "less", "<=": "less_equal", ">": "greater",
                   ">=": "greater_equal"}


def _array_api_name(numpy_name: str) -> str:
    name = numpy_name.removeprefix("numpy.")
    return "xp." + _ARRAY_API_NAMES.get(name, name)


class ArrayApiPrinter(_ExactQuotients):
    """``CostPrinter`` for an array-API namespace ``xp``; see the module docstring."""

    printmethod = "_arrayapiprinter"
    _module = "xp"
    _kf = {k: _array_api_name(v) for k, v in CostPrinter._kf.items() if v.startswith("numpy.")}
    _kc = {k: _array_api_name(v) for k, v in CostPrinter._kc.items() if v in ("numpy.e", "numpy.pi", "numpy.nan",
                                                                                 "numpy.inf")}

    def _module_format(self, fqn: str, register: bool = True) -> str:
        return fqn  # xp is bound by the caller: nothing to import

    def _print_Mod(self, expr: sympy.Mod) -> str:
        return f"xp.remainder({self._print(expr.args[0])}, {self._print(expr.args[1])})"

    def _print_Relational(self, expr: sympy.core.relational.Relational) -> str:
        name = _RELATION_NAMES.get(expr.rel_op)
        if name is None:
            return super()._print_Relational(expr)
        return f"xp.{name}({self._exactly(expr.lhs)}, {self._exactly(expr.rhs)})"


_PRINTER = CostPrinter({"fully_qualified_modules": True, "strict": True})
_ARRAY_API_PRINTER = ArrayApiPrinter({"fully_qualified_modules": True, "strict": True})


def print_numpy(expr: sympy.Basic) -> str:
    """*expr* as one NumPy expression (module prefix ``numpy.``).

    Raises:
        sympy.printing.codeprinter.PrintMethodNotImplementedError: for an
            expression NumPy has no counterpart for.
    """
    return _PRINTER.doprint(expr)


def print_scalar(expr: sympy.Basic, indexed: frozenset[str] = frozenset()) -> str:
    """*expr* as one scalar Python expression for a loop body, *indexed* symbols as ``name[i]``.

    Raises:
        sympy.printing.codeprinter.PrintMethodNotImplementedError: as ``print_numpy``.
    """
    return ScalarPrinter(frozenset(indexed)).doprint(expr)


def print_array_api(expr: sympy.Basic) -> str:
    """*expr* as one expression over the array-API namespace ``xp``.

    Raises:
        sympy.printing.codeprinter.PrintMethodNotImplementedError: as ``print_numpy``.
    """
    return _ARRAY_API_PRINTER.doprint(expr)
