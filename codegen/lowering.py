"""Lowering: one ``Formula`` → plain strings a template can lay out, for one backend.

Three passes, each deterministic:

1. **Rewrites kept only when cheaper** (in the spirit of
   ``sympy.codegen.rewriting``): the expression as registered and a few
   exact, cheap rewrites of it (``REWRITES``) are each put through CSE and
   scheduled; the form the backend's ``cost`` ranks lowest wins (ties: the
   earlier candidate). This is the one such driver of the code generator.
   No ``simplify()``.
2. **CSE** with ``sympy.cse`` (canonical order, temporaries ``tmp0, tmp1, …``).
3. **Scheduling**, by the kind of backend (``codegen.backends.Backend``): for
   numba (``use_numba``), an element-wise loop (``loop_program``), one
   assignment per temporary; for NumPy (``in_place_program``) in-place
   statements (``numpy.multiply(x, y, out=r0)``, written by an ``Emitter``,
   ``NumPyEmitter`` here): every temporary and the result is computed into a small set
   of reusable buffers (``r0, r1, …`` for reals, ``m0, …`` for masks), so a
   call allocates a handful of buffers instead of one array per operation,
   and the generated loop can run block by block with the buffers in cache
   (``generated/_runtime.py``). Rational coefficients are folded into one
   exactly rounded float; a product with a denominator takes one division;
   integer powers are products; ``Piecewise`` fills the last branch then
   overwrites it where earlier conditions hold (``numpy.copyto(..., where=)``),
   which is ``numpy.where``'s meaning without a new array. When that last
   branch is costly (``SKIP_DEFAULT_OPS``), the conditions come first and a
   block they cover entirely skips it (``if not m0.all():``): free on mixed
   blocks, and measured 23% faster on ``cp_ulysses_mla_record_comm_volume_bytes``
   when half the layouts (in whole blocks, as in a sweep over cp) have cp = 1.
   Under ``floor``/``ceiling`` and in comparisons a rational p/q stays ×p, ÷q
   so that an exact quotient rounds as the original's integer arithmetic does.

The result is a frozen ``Lowered`` of strings: names, CSE temporaries as
``(name, infix code)`` pairs printed by ``codegen.printer``, the result code,
the statements, docstring pieces and the op count (``sympy.count_ops`` of
the CSE form).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol, Sequence

import sympy
from sympy.logic.boolalg import And, Boolean, BooleanFalse, BooleanTrue, Not, Or
from sympy.printing.codeprinter import PrintMethodNotImplementedError

from symbolic.fingerprints import formula_fingerprint
from symbolic.formula import Formula
from symbolic.simplify import too_large_to_rewrite
from symbolic.symbols import PER_LAYOUT, SPECS

from .backends import NUMPY, Backend
from .printer import float_literal, print_array_api, print_numpy, print_scalar

__all__ = [
    "CodegenError",
    "Emitter",
    "NumPyEmitter",
    "Program",
    "Step",
    "Lowered",
    "REWRITES",
    "in_place_program",
    "loop_program",
    "hoist",
    "lower",
]


class CodegenError(ValueError):
    """A formula (or template) the code generator cannot turn into code; the message names it."""


_TEMP_PREFIX = "tmp"
_REAL_PREFIX = "r"
_MASK_PREFIX = "m"


def _factor_terms(expr: sympy.Expr) -> sympy.Expr:
    return sympy.factor_terms(expr)


def _invariant(e: sympy.Basic) -> bool:
    return not any(x.name in PER_LAYOUT for x in e.free_symbols)


def _split_condition(cond: sympy.Basic) -> tuple[sympy.Basic, sympy.Basic]:
    """(varying, invariant) conjuncts of a Piecewise condition (``true`` where there are none)."""
    conjuncts = cond.args if isinstance(cond, sympy.And) else (cond,)
    return (sympy.And(*[c for c in conjuncts if not _invariant(c)]),
            sympy.And(*[c for c in conjuncts if _invariant(c)]))


def _pieces_with_invariant_conditions(pw: sympy.Piecewise) -> sympy.Expr:
    """*pw* with each run of branches that share a per-layout condition and differ only in model-only
    conditions and factors turned into one branch: ``(inner · g, V)``, where ``inner`` is a Piecewise of
    model fields alone (computed once per call, ``hoist``) and ``g`` the per-layout factor they share.

    When ``V`` holds, the original takes the first of the run whose model-only condition holds (the
    run's last has none, so one does), and its value is ``c_k · g``: the same number. A run that
    does not end unconditionally, or whose values share no per-layout factor, is left as it was.
    """
    pieces = [(value, *_split_condition(cond)) for value, cond in pw.args]
    out: list[tuple[sympy.Expr, sympy.Basic]] = []
    i = 0
    changed = False
    while i < len(pieces):
        varying = pieces[i][1]
        j = i
        while j < len(pieces) and pieces[j][1] == varying:
            j += 1
        run = pieces[i:j]
        if len(run) > 1 and run[-1][2] == sympy.true:
            per_layout = sorted((x for x in pw.free_symbols if not _invariant(x)), key=lambda x: x.name)
            split = [(sympy.Integer(0), None) if value == 0 else
                     sympy.factor_terms(value).as_independent(*per_layout, as_Add=False) for value, _, _ in run]
            shared = {g for _, g in split if g is not None}
            if len(shared) == 1:
                inner = sympy.Piecewise(*[(c, inv) for (c, _), (_, _, inv) in zip(split, run)])
                out.append((inner * shared.pop(), varying))
                changed = True
                i = j
                continue
        out.extend((value, sympy.And(var, inv)) for value, var, inv in run)
        i = j
    return sympy.Piecewise(*out) if changed else pw


def _invariant_pieces(expr: sympy.Expr) -> sympy.Expr:
    return expr.replace(lambda e: isinstance(e, sympy.Piecewise), _pieces_with_invariant_conditions)


#: (name, rewrite) candidates, each applied to the form before it (the first
#: to the registered expression). Each is an identity wherever the registered
#: expression is defined and never subtracts large terms that did not cancel
#: before (no cancel/expand), so the numbers stay within rounding of it.
#: (factor_terms already enters Piecewise values: factoring each value again afterwards made a form no
#: backend chose for any registered formula, at about a twelfth of the lowering's time.)
REWRITES: tuple[tuple[str, Callable[[sympy.Expr], sympy.Expr]], ...] = (
    ("factor_terms", _factor_terms),
    # A model's fields choose among branches of the same per-layout shape (MLA or not, shared experts
    # or not): that choice is made once per call, not per layout.
    ("invariant_pieces", _invariant_pieces),
)


# ------------------------------------------------------------------ fingerprints


# ------------------------------------------------------------------ scheduling


@dataclass(frozen=True)
class _Operand:
    text: str
    kind: str  # "input", "const", "reg" (a transient buffer the consumer may take over), "pinned"
    mask: bool = False

    @property
    def owned(self) -> bool:
        return self.kind == "reg"


class _Pool:
    """Buffers of one kind, reused lowest-index first (deterministic)."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.size = 0
        self.free: list[int] = []

    def take(self) -> str:
        if self.free:
            self.free.sort()
            return f"{self.prefix}{self.free.pop(0)}"
        self.size += 1
        return f"{self.prefix}{self.size - 1}"

    def give(self, name: str) -> None:
        self.free.append(int(name[len(self.prefix):]))

    def names(self) -> tuple[str, ...]:
        return tuple(f"{self.prefix}{i}" for i in range(self.size))


_UNARY = {sympy.floor: "floor", sympy.ceiling: "ceil", sympy.Abs: "absolute", sympy.exp: "exp",
          sympy.sign: "sign"}
#: A Piecewise whose default (last, ``True``) branch counts at least this many SymPy ops checks its
#: conditions first and skips the default in a block they cover entirely (0: never).
SKIP_DEFAULT_OPS = 4

_SPECIAL_NUMBERS = (sympy.nan, sympy.oo, -sympy.oo)
_RELATIONS = {"<": "less", "<=": "less_equal", ">": "greater", ">=": "greater_equal", "==": "equal",
              "!=": "not_equal"}


class Emitter(Protocol):
    """How an array library writes the in-place schedule's statements (``NumPyEmitter`` for NumPy)."""

    def ufunc(self, name: str, args: Sequence[str], out: str) -> str:
        """``name(args…)`` written into buffer *out* (*name* is a NumPy ufunc name)."""

    def copy(self, out: str, value: str, where: str | None = None) -> str:
        """*value* copied into *out*, only where the mask *where* holds when given."""

    def skip_if_covered(self, mask: str) -> str:
        """The opening line of a block that runs unless *mask* holds everywhere."""

    def constant(self, value: sympy.Expr) -> str:
        """NaN, ∞ or -∞ as the library spells it."""

    def expression(self, expr: sympy.Basic) -> str:
        """A node without an in-place rule as one expression of the library (its printer)."""


class _Scheduler:
    """Turns expressions into in-place statements over pooled buffers, written by an ``Emitter``."""

    def __init__(self, names: dict[sympy.Symbol, _Operand], emitter: Emitter):
        self.emitter = emitter
        self.calls = 0
        self.names = dict(names)
        self.exact = 0  # > 0 while emitting the argument of floor/ceiling or a comparison
        self.real = _Pool(_REAL_PREFIX)
        self.mask = _Pool(_MASK_PREFIX)
        self.lines: list[str] = []

    # -- buffers

    def _pool(self, mask: bool) -> _Pool:
        return self.mask if mask else self.real

    def release(self, *operands: _Operand) -> None:
        for op in operands:
            if op.owned:
                self._pool(op.mask).give(op.text)

    def _target(self, operands: Sequence[_Operand], dest: str | None, mask: bool) -> tuple[str, str]:
        """(buffer to write, its kind): *dest*, else an owned operand of the same kind, else a new buffer."""
        if dest is not None and not mask:
            return dest, "pinned"
        for op in operands:
            if op.owned and op.mask == mask:
                return op.text, "reg"
        return self._pool(mask).take(), "reg"

    def call(self, ufunc: str, operands: Sequence[_Operand], dest: str | None = None, *,
             mask: bool = False) -> _Operand:
        out, kind = self._target(operands, dest, mask)
        self._line(self.emitter.ufunc(ufunc, [op.text for op in operands], out))
        self.release(*[op for op in operands if op.owned and op.text != out])
        return _Operand(out, kind, mask)

    def _line(self, statement: str) -> None:
        self.lines.append(statement)
        self.calls += 1

    # -- expressions

    def emit(self, expr: sympy.Basic, dest: str | None = None) -> _Operand:
        """Statements computing *expr*; the operand holding it (in *dest* when that costs nothing)."""
        if isinstance(expr, (BooleanTrue, BooleanFalse)):
            return _Operand("True" if expr is sympy.true else "False", "const", True)
        if isinstance(expr, sympy.Symbol):
            return self.names.get(expr) or _Operand(expr.name, "input")
        if expr in _SPECIAL_NUMBERS:
            return _Operand(self.emitter.constant(expr), "const")
        if expr.is_Number or isinstance(expr, sympy.NumberSymbol):
            return _Operand(float_literal(expr), "const")
        if isinstance(expr, sympy.Piecewise):
            return self._piecewise(expr, dest)
        if isinstance(expr, sympy.core.relational.Relational) and expr.rel_op in _RELATIONS:
            with self._exact():
                sides = [self.emit(expr.lhs), self.emit(expr.rhs)]
            return self.call(_RELATIONS[expr.rel_op], sides, mask=True)
        if isinstance(expr, (And, Or)):
            ufunc = "logical_and" if isinstance(expr, And) else "logical_or"
            return self._fold(ufunc, list(expr.args), None, mask=True)
        if isinstance(expr, Not):
            return self.call("logical_not", [self.emit(expr.args[0])], mask=True)
        if expr.is_Add:
            return self._add(expr, dest)
        if expr.is_Mul:
            return self._mul(expr, dest)
        if expr.is_Pow:
            return self._pow(expr, dest)
        if isinstance(expr, (sympy.Max, sympy.Min)):
            return self._fold("maximum" if isinstance(expr, sympy.Max) else "minimum", list(expr.args), dest)
        if type(expr) in (sympy.floor, sympy.ceiling):
            with self._exact():
                inner = self.emit(expr.args[0])
            return self.call(_UNARY[type(expr)], [inner], dest)
        if type(expr) in _UNARY:
            return self.call(_UNARY[type(expr)], [self.emit(expr.args[0])], dest)
        if isinstance(expr, sympy.log) and len(expr.args) == 1:
            return self.call("log", [self.emit(expr.args[0])], dest)
        return self._printed(expr, dest)

    def _printed(self, expr: sympy.Basic, dest: str | None) -> _Operand:
        """A node without an in-place rule: the printer's expression, copied into a buffer."""
        renamed = expr.xreplace({s: sympy.Symbol(op.text) for s, op in self.names.items()})
        code = self.emitter.expression(renamed)  # raises PrintMethodNotImplementedError: no counterpart
        is_mask = isinstance(expr, Boolean)
        out, kind = self._target((), dest, is_mask)
        self._line(self.emitter.copy(out, code))
        return _Operand(out, kind, is_mask)

    def _fold(self, ufunc: str, args: list[sympy.Basic], dest: str | None, *, mask: bool = False) -> _Operand:
        args = _complex_first(args)
        acc = self.emit(args[0], dest)
        for arg in args[1:]:
            acc = self.call(ufunc, [acc, self.emit(arg)], dest, mask=mask)
        return acc

    def _add(self, expr: sympy.Add, dest: str | None) -> _Operand:
        plus: list[sympy.Expr] = []
        minus: list[sympy.Expr] = []
        for term in expr.args:
            coeff, _ = term.as_coeff_Mul()
            (minus if coeff.is_negative else plus).append(-term if coeff.is_negative else term)
        plus, minus = _complex_first(plus), _complex_first(minus)
        if plus:
            acc = self.emit(plus[0], dest)
            for term in plus[1:]:
                acc = self.call("add", [acc, self.emit(term)], dest)
        else:
            acc = self.call("negative", [self.emit(minus.pop(0), dest)], dest)
        for term in minus:
            acc = self.call("subtract", [acc, self.emit(term)], dest)
        return acc

    @contextlib.contextmanager
    def _exact(self):
        """Within: a rational p/q whose q is no power of two stays ×p and ÷q (see ``_mul``)."""
        self.exact += 1
        try:
            yield
        finally:
            self.exact -= 1

    def _mul(self, expr: sympy.Mul, dest: str | None) -> _Operand:
        coeff, factors = expr.as_coeff_mul()
        num: list[sympy.Expr] = []
        den: list[sympy.Expr] = []
        for f in factors:
            if f.is_Pow and f.exp.is_number and f.exp.is_negative:
                den.append(sympy.Pow(f.base, -f.exp))
            else:
                num.append(f)
        num, den = _complex_first(num), _complex_first(den)
        q = coeff.q if coeff.is_Rational else 1
        if self.exact and q & (q - 1) and num:
            # Under floor/ceiling or in a comparison the value must round like the original's integer
            # arithmetic: x*(1/3) can land one ulp below an integer that x/3 hits exactly. Products of
            # integers are exact, so numerator*p / (denominator*q) rounds once, correctly.
            if coeff.p != 1:
                num.append(sympy.Integer(coeff.p))
            den.append(sympy.Integer(q))
            coeff = sympy.Integer(1)
        if not num:
            return self.call("divide", [_Operand(float_literal(coeff), "const"), self._product(den, None)], dest)
        acc = self._product(num, dest)
        if den:
            acc = self.call("divide", [acc, self._product(den, None)], dest)
        if coeff == -1:
            acc = self.call("negative", [acc], dest)
        elif coeff != 1:
            acc = self.call("multiply", [acc, _Operand(float_literal(coeff), "const")], dest)
        return acc

    def _product(self, factors: list[sympy.Expr], dest: str | None) -> _Operand:
        acc = self.emit(factors[0], dest)
        for f in factors[1:]:
            acc = self.call("multiply", [acc, self.emit(f)], dest)
        return acc

    def _pow(self, expr: sympy.Pow, dest: str | None) -> _Operand:
        base, exp = expr.base, expr.exp
        if exp.is_Integer and exp < 0:
            power = self._integer_power(self.emit(base), int(-exp), None)
            return self.call("divide", [_Operand("1.0", "const"), power], dest)
        if exp.is_Integer and exp > 0:
            return self._integer_power(self.emit(base), int(exp), dest)
        if exp == sympy.S.Half:
            return self.call("sqrt", [self.emit(base)], dest)
        return self.call("power", [self.emit(base), self.emit(exp)], dest)

    def _integer_power(self, base: _Operand, n: int, dest: str | None) -> _Operand:
        """base**n by squaring and multiplying; *base* stays valid until the last use."""
        if n == 1:
            return base
        pinned = _Operand(base.text, "pinned") if base.owned else base
        half = self._integer_power(pinned, n // 2, None)
        square = self.call("multiply", [half, half], None if n % 2 else dest)
        if n % 2:
            square = self.call("multiply", [square, pinned], dest)
        if base.owned:
            self.release(base)
        return square

    def _piecewise(self, expr: sympy.Piecewise, dest: str | None) -> _Operand:
        pieces = list(expr.args)
        last_value, last_cond = pieces[-1]
        has_default = last_cond is sympy.true
        if has_default:
            pieces = pieces[:-1]
        held: list[_Operand] = []
        skippable = has_default and pieces and SKIP_DEFAULT_OPS and sympy.count_ops(last_value) >= SKIP_DEFAULT_OPS
        if skippable:
            # Conditions first: a block where they cover every element never computes the default.
            conds = []
            for _, cond in pieces:
                where = self.emit(cond)
                if where.owned:
                    held.append(where)
                    where = _Operand(where.text, "pinned", True)
                conds.append(where)
            covered = conds[0]
            for where in conds[1:]:
                covered = self.call("logical_or", [covered, where], mask=True)
            self.lines.append(self.emitter.skip_if_covered(covered.text))
            self.release(covered)
            start = len(self.lines)
        if has_default:
            default = self.emit(last_value, dest)
        else:
            default = _Operand(self.emitter.constant(sympy.nan), "const")
        if default.owned or (dest is not None and default.text == dest):
            acc = default
        else:
            out, kind = self._target((), dest, False)
            self._line(self.emitter.copy(out, default.text))
            acc = _Operand(out, kind)
        if skippable:
            self.lines[start:] = ["    " + line for line in self.lines[start:]]
            if len(self.lines) == start:
                self.lines.append("    pass")
        # Later pieces first, so that the first condition that holds wins, as in numpy.where nesting.
        for index in reversed(range(len(pieces))):
            value, cond = pieces[index]
            where = conds[index] if skippable else self.emit(cond)
            val = self.emit(value)
            self._line(self.emitter.copy(acc.text, val.text, where.text))
            self.release(where, val)
        self.release(*held)
        return acc


def _complex_first(args: Iterable[sympy.Basic]) -> list[sympy.Basic]:
    """Compound operands before atoms (stable): they land in a buffer the atoms then fold into."""
    args = list(args)
    return [a for a in args if not a.is_Atom] + [a for a in args if a.is_Atom]


# ------------------------------------------------------------------ programs


@dataclass(frozen=True)
class Program:
    """A backend's statements for one CSE form.

    Attributes:
        steps: ``(buffer, statements)`` per CSE temporary, then for the result.
        reals: names of the float buffers the statements use.
        masks: names of the boolean buffers the statements use.
        calls: array-library calls per block (0 for an element-wise loop).
        hoisted: ``(name, code)`` of the subexpressions free of per-layout symbols, computed once
            per call before the blocks.
        passed: the names of ``hoisted`` the statements read: handed to the blocks like arguments.
        widened: the arguments ``hoisted`` reads, made NumPy scalars first so that a division by
            zero in a dead branch gives inf under ``errstate``, as the blocks do, not an exception.
        forms: the ``(temporary, expression)`` pairs the steps compute, the result last under
            ``None`` (after hoisting, fewer than the CSE form's); empty: the CSE form's own.
        ops: ``count_ops`` of the hoisted expressions and ``forms`` together (with ``forms`` only).
    """

    steps: tuple[tuple[str, tuple[str, ...]], ...]
    reals: tuple[str, ...] = ()
    masks: tuple[str, ...] = ()
    calls: int = 0
    hoisted: tuple[tuple[str, str], ...] = ()
    passed: tuple[str, ...] = ()
    widened: tuple[str, ...] = ()
    forms: tuple[tuple[sympy.Symbol | None, sympy.Expr], ...] = ()
    ops: int = 0


def in_place_program(temps: Sequence[tuple[sympy.Symbol, sympy.Expr]], result: sympy.Expr,
                     emitter: Emitter) -> Program:
    """In-place statements over pooled buffers for a CSE form, the result into ``out``."""
    later_uses = [e.free_symbols for _, e in temps] + [result.free_symbols]
    last_use = {sym: max(i for i, fs in enumerate(later_uses) if sym in fs) for sym, _ in temps}
    sched = _Scheduler({}, emitter)
    programs: list[tuple[str, tuple[str, ...]]] = []
    buffered: set[sympy.Symbol] = set()  # temporaries that hold a pooled buffer until their last use
    for index, (sym, e) in enumerate([*temps, (None, result)]):
        start = len(sched.lines)
        dest = "out" if sym is None else None
        op = sched.emit(e, dest)
        if sym is None:
            if op.text != "out":
                sched._line(emitter.copy("out", op.text))
            buffer = "out"
        else:
            sched.names[sym] = _Operand(op.text, "pinned" if op.owned else op.kind, op.mask)
            if op.owned:
                buffered.add(sym)
            buffer = op.text
        programs.append((buffer, tuple(sched.lines[start:])))
        for tsym, last in last_use.items():
            if last == index and tsym in buffered:
                held = sched.names[tsym]
                sched.release(_Operand(held.text, "reg", held.mask))
    return Program(tuple(programs), sched.real.names(), sched.mask.names(), sched.calls)


_HOIST_PREFIX = "inv"


def hoist(temps: Sequence[tuple[sympy.Symbol, sympy.Expr]], result: sympy.Expr, invariant: frozenset[str]
          ) -> tuple[list[tuple[sympy.Symbol, sympy.Expr]], list[tuple[sympy.Symbol, sympy.Expr]], sympy.Expr]:
    """Loop-invariant code motion: ``(hoisted, temps, result)`` with every subexpression whose symbols
    are all in *invariant* moved into ``hoisted``.

    A searcher prices many layouts of one model: the model's fields are one number per call, the
    degrees one per layout. A subexpression of model fields alone (``bytes_compute·dh·s``, a layer's
    parameter count) is then computed once per call instead of once per block. Whole temporaries
    move; inside a sum or product, its invariant terms or factors move together. The values are
    the same: only where each operation runs changes.
    """
    known = set(invariant)
    names = sympy.numbered_symbols(_HOIST_PREFIX)
    hoisted: list[tuple[sympy.Symbol, sympy.Expr]] = []

    def constant(e: sympy.Basic) -> bool:
        # A condition on model fields alone (``dh ≠ 0``) is hoisted too: a branch it picks is then
        # picked once per call.
        numeric_or_condition = isinstance(e, sympy.Expr) or (
            isinstance(e, sympy.logic.boolalg.Boolean) and not e.is_Atom)
        return e.is_Number or (numeric_or_condition and {x.name for x in e.free_symbols} <= known)

    def lift(e: sympy.Expr) -> sympy.Expr:
        if e.is_Atom:
            return e
        sym = next(names)
        hoisted.append((sym, e))
        known.add(sym.name)
        return sym

    def move(e: sympy.Basic) -> sympy.Basic:
        if e.is_Atom:
            return e
        if constant(e):
            return lift(e)
        if isinstance(e, (sympy.Add, sympy.Mul)):
            fixed = [a for a in e.args if constant(a)]
            rest = [move(a) for a in e.args if not constant(a)]
            if len(fixed) > 1 or (fixed and not fixed[0].is_Atom):
                return e.func(lift(e.func(*fixed)), *rest, evaluate=False)
            if all(new is old for new, old in zip(rest, (a for a in e.args if not constant(a)))):
                return e
            return e.func(*fixed, *rest, evaluate=False)
        args = [move(a) for a in e.args]
        if all(new is old for new, old in zip(args, e.args)):
            return e  # nothing moved below: no rebuild (rebuilding a Min compares its arguments pairwise)
        return e.func(*args)

    if constant(result):  # nothing per layout: the whole form stays as it is
        return [], list(temps), result
    kept = []
    for sym, e in temps:
        if constant(e):
            hoisted.append((sym, e))
            known.add(sym.name)
        else:
            kept.append((sym, move(e)))
    result = move(result)
    # A hoisted condition the blocks read is computed there again (a mask of the block): the blocks
    # take only numbers from the hoisted part. Hoisted code that reads it keeps its own.
    read = set().union(*(e.free_symbols for _, e in kept), result.free_symbols)
    again = {sym: sympy.Symbol(f"{sym.name}_mask") for sym, e in hoisted
             if isinstance(e, sympy.logic.boolalg.Boolean) and sym in read}
    if again:
        kept = [(again[sym], e) for sym, e in hoisted if sym in again] + [(s, e.xreplace(again)) for s, e in kept]
        result = result.xreplace(again)
    return hoisted, kept, result


def loop_program(temps: Sequence[tuple[sympy.Symbol, sympy.Expr]], result: sympy.Expr,
                 printer: Callable[[sympy.Basic], str]) -> Program:
    """One assignment per CSE temporary and ``out[i] = …`` for the result: a loop body over element ``i``."""
    steps = [(sym.name, (f"{sym.name} = {printer(e)}",)) for sym, e in temps]
    steps.append(("out", (f"out[i] = {printer(result)}",)))
    return Program(tuple(steps))


class NumPyEmitter:
    """Writes the in-place schedule as NumPy calls: ``numpy.<ufunc>(…, out=)``, ``numpy.copyto``."""

    _CONSTANTS = {sympy.nan: "numpy.nan", sympy.oo: "numpy.inf", -sympy.oo: "-numpy.inf"}

    def ufunc(self, name: str, args: Sequence[str], out: str) -> str:
        return f"numpy.{name}({', '.join(args)}, out={out})"

    def copy(self, out: str, value: str, where: str | None = None) -> str:
        return f"numpy.copyto({out}, {value})" if where is None else f"numpy.copyto({out}, {value}, where={where})"

    def skip_if_covered(self, mask: str) -> str:
        return f"if not {mask}.all():"

    def constant(self, value: sympy.Expr) -> str:
        return self._CONSTANTS[value]

    def expression(self, expr: sympy.Basic) -> str:
        return print_numpy(expr)


_NUMPY_EMITTER = NumPyEmitter()

#: Symbols one call of a NumPy evaluator usually sees as single numbers (the model's and the run's fields).
_INVARIANT = frozenset(SPECS) - PER_LAYOUT


def _numpy_program(temps: Sequence[tuple[sympy.Symbol, sympy.Expr]], result: sympy.Expr) -> Program:
    # What depends on the model's fields alone is computed once per call, before the blocks.
    hoisted, temps, result = hoist(temps, result, _INVARIANT)
    program = in_place_program(temps, result, _NUMPY_EMITTER)
    read = {x for _, e in temps for x in e.free_symbols} | result.free_symbols
    made = {sym for sym, _ in hoisted}
    widened = sorted({x.name for _, e in hoisted for x in e.free_symbols} - {x.name for x in made})
    return dataclasses.replace(program, hoisted=tuple((sym.name, print_numpy(e)) for sym, e in hoisted),
                               passed=tuple(sym.name for sym, _ in hoisted if sym in read),
                               widened=tuple(widened), forms=(*temps, (None, result)),
                               ops=int(sum(sympy.count_ops(e) for _, e in (*hoisted, *temps, (None, result)))))


def _program(backend: Backend, temps: Sequence[tuple[sympy.Symbol, sympy.Expr]], result: sympy.Expr,
             arguments: tuple[str, ...]) -> Program:
    """*backend*'s statements for a CSE form: a numba loop body, or in-place NumPy statements."""
    if backend.use_numba:
        indexed = frozenset(arguments)
        return loop_program(temps, result, lambda e: print_scalar(e, indexed))
    return _numpy_program(temps, result)


def _print_code(backend: Backend, expr: sympy.Basic, arguments: tuple[str, ...]) -> str:
    """*expr* as one expression of *backend*, *arguments* being the inputs."""
    return print_scalar(expr, frozenset(arguments)) if backend.use_numba else print_numpy(expr)


def _cost(backend: Backend, program: Program, ops: int) -> tuple[int, ...]:
    """Rank of a candidate (smaller is cheaper); *ops* is ``count_ops`` of its CSE form."""
    if backend.use_numba:
        return (ops,)  # in a loop body every operation costs about the same; fewer is cheaper
    return (program.calls, ops)  # each NumPy call is a pass over a block: calls decide, operations break ties


# ------------------------------------------------------------------ lowered form


@dataclass(frozen=True)
class Step:
    """One CSE temporary (or the result, named ``out``): infix code and the statements computing it."""

    name: str
    code: str
    buffer: str
    statements: tuple[str, ...]


@dataclass(frozen=True)
class Lowered:
    """Everything a template needs for one formula and one backend, as strings and ints.

    Attributes:
        name: the function name (the formula's name).
        backend: the backend's name (``Backend.name``) the code is for.
        arguments: keyword-only argument names, sorted (``Formula.arguments``).
        temporaries: CSE temporaries as ``(name, infix code)`` in the backend's printer.
        result: the result as infix code over arguments and temporaries.
        steps: the temporaries then the result, each with its statements.
        reals: names of the float buffers the statements use.
        masks: names of the boolean buffers the statements use.
        quiet: evaluate under ``numpy.errstate(divide/invalid="ignore")``: the
            expression has a ``Piecewise``, whose dead branches may divide by zero.
        summary: the formula's one-sentence doc.
        unit, source, dimension, algorithm: the formula's metadata.
        ops: ``sympy.count_ops`` of the CSE form (temporaries plus result).
        calls: array-library calls per evaluation (per block); 0 for an element-wise loop.
        rewrite: the name of the rewrite the CSE form was built from.
        fingerprint: ``formula_fingerprint`` of the formula.
        variant: the formula's ``variant`` pairs: its identity as data (``Formula.variant``).
        plain: the same CSE form as ``(name, code)`` pairs, the result last as ``out``, in the
            backend's plain printer (NumPy: any array-API namespace ``xp``); empty when it has none.
    """

    name: str
    backend: str
    arguments: tuple[str, ...]
    temporaries: tuple[tuple[str, str], ...]
    result: str
    steps: tuple[Step, ...]
    reals: tuple[str, ...]
    masks: tuple[str, ...]
    quiet: bool
    summary: str
    unit: str
    source: str
    dimension: str
    algorithm: str
    ops: int
    calls: int
    rewrite: str
    fingerprint: str
    variant: tuple[tuple[str, str], ...] = ()
    plain: tuple[tuple[str, str], ...] = ()
    hoisted: tuple[tuple[str, str], ...] = ()
    passed: tuple[str, ...] = ()
    widened: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Candidate:
    rewrite: str
    temporaries: tuple[tuple[sympy.Symbol, sympy.Expr], ...]
    result: sympy.Expr
    program: Program

    def plain(self, backend: Backend) -> tuple[tuple[str, str], ...]:
        if not backend.plain:
            return ()
        named = [*((s.name, e) for s, e in self.temporaries), ("out", self.result)]
        return tuple((name, print_array_api(e)) for name, e in named)

    def steps(self, backend: Backend, arguments: tuple[str, ...]) -> tuple[Step, ...]:
        forms = self.program.forms or (*self.temporaries, (None, self.result))
        named = [("out" if s is None else s.name, e) for s, e in forms]
        return tuple(Step(name, _print_code(backend, e, arguments), buffer, statements)
                     for (name, e), (buffer, statements) in zip(named, self.program.steps))

    @property
    def ops(self) -> int:
        return int(sum(sympy.count_ops(e) for _, e in self.temporaries) + sympy.count_ops(self.result))


def _cse(expr: sympy.Expr) -> tuple[list[tuple[sympy.Symbol, sympy.Expr]], sympy.Expr]:
    temps, (result,) = sympy.cse(expr, symbols=sympy.numbered_symbols(_TEMP_PREFIX), order="canonical")
    return temps, result


def _inline_reciprocals(temps, result):
    """CSE likes ``tmp = 1/t`` then ``a*tmp``; one division per use is as cheap and one buffer fewer."""
    subs: dict[sympy.Symbol, sympy.Expr] = {}
    kept = []
    for sym, e in temps:
        e = e.xreplace(subs)
        if e.is_Pow and e.exp == -1:
            subs[sym] = e
        else:
            kept.append((sym, e))
    return kept, result.xreplace(subs)


@functools.lru_cache(maxsize=None)
def _cse_forms(expr: sympy.Expr) -> tuple[tuple[str, tuple[tuple[sympy.Symbol, sympy.Expr], ...], sympy.Expr], ...]:
    """``(rewrite name, temporaries, result)`` per candidate CSE form, backend-independent (cached)."""
    forms: list[tuple[str, sympy.Expr]] = [("registered", expr)]
    current = expr
    # The rewrites rebuild every node, and rebuilding a Min or Max compares its arguments pairwise; on a
    # minimum over a dozen collective algorithms that costs seconds per formula and rarely pays, so such
    # a form is kept as registered.
    rewrites = () if too_large_to_rewrite(expr) else REWRITES
    for name, fn in rewrites:
        try:
            current = fn(current)
        except (sympy.PolynomialError, TypeError, ValueError, NotImplementedError):
            continue
        if all(current != e for _, e in forms):
            forms.append((name, current))
    out = []
    for name, form in forms:
        temps, result = _cse(form)
        out.append((name, tuple(temps), result))
        if any(e.is_Pow and e.exp == -1 for _, e in temps):
            kept, res = _inline_reciprocals(temps, result)
            out.append((f"{name}+inline_reciprocals", tuple(kept), res))
    return tuple(out)


def _check_names(formula: Formula, arguments: Sequence[str], cand: _Candidate, backend: Backend) -> None:
    reserved = (set(backend.reserved) | set(cand.program.reals) | set(cand.program.masks)
                | {s.name for s, _ in cand.temporaries} | {name for name, _ in cand.program.hoisted})
    clash = sorted(set(arguments) & reserved)
    if clash:
        raise CodegenError(f"formula {formula.name}: argument names {clash} clash with names the generated "
                           f"{backend.name} code binds; rename the symbols")


@functools.lru_cache(maxsize=None)
def lower(formula: Formula, backend: Backend = NUMPY) -> Lowered:
    """The cheapest CSE form of *formula* for *backend* (NumPy by default), as strings.

    Raises:
        CodegenError: naming the formula when its expression has a node the
            backend cannot compute (the printer's message says which).
    """
    expr = formula.expr
    if not isinstance(expr, sympy.Expr):
        raise CodegenError(f"formula {formula.name}: expression must be numeric, got {type(expr).__name__}")
    arguments = formula.arguments
    try:
        candidates = [_Candidate(name, temps, result, _program(backend, temps, result, arguments))
                      for name, temps, result in _cse_forms(expr)]
        # The backend's cost, then the order of REWRITES: min keeps the first of equals.
        best = min(candidates, key=lambda c: _cost(backend, c.program, c.ops))
        steps = best.steps(backend, arguments)
        plain = best.plain(backend)
    except PrintMethodNotImplementedError as exc:
        first = str(exc).splitlines()[0]
        raise CodegenError(f"formula {formula.name}: cannot print {sympy.sstr(expr)!r} for {backend.name}: "
                           f"{first}") from None
    _check_names(formula, arguments, best, backend)
    return Lowered(
        name=formula.name,
        backend=backend.name,
        arguments=arguments,
        temporaries=best.program.hoisted + tuple((st.name, st.code) for st in steps[:-1]),
        result=steps[-1].code,
        steps=steps,
        reals=best.program.reals,
        masks=best.program.masks,
        quiet=bool(expr.has(sympy.Piecewise)),
        summary=" ".join(formula.doc.split()),
        unit=formula.unit,
        source=" ".join(formula.source.split()),
        dimension=formula.dimension,
        algorithm=formula.algorithm,
        ops=best.program.ops if best.program.forms else best.ops,
        calls=best.program.calls,
        rewrite=best.rewrite,
        fingerprint=formula_fingerprint(formula),
        variant=tuple(formula.variant),
        hoisted=best.program.hoisted,
        passed=best.program.passed,
        widened=best.program.widened,
        plain=plain,
    )
