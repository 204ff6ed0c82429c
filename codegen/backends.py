"""Backends: what the code generator writes for one target, as data.

In the spirit of SymForce's ``CodegenConfig``, a ``Backend`` names
everything target-specific and nothing else: the printer of one expression,
how a CSE form becomes statements (the schedule), how candidate forms are
ranked, the template folder and the templates to render, and where its files
go under ``generated/``. The lowering (CSE, rewrites) and the compiler (file
set, header, writing, ``--check``) are shared.

Two backends, both written by ``symcost compile``:

* ``NUMPY`` — ``generated/``: blocked, in-place NumPy statements
  (``numpy.multiply(x, y, out=r0)``, written by ``NumPyEmitter``), ranked by
  NumPy calls per block, then by operation count. The default, and the only
  target that needs nothing beyond NumPy. The array API has no ``out=``, so
  for arrays of another library (JAX, CuPy, …) each function also holds a
  plain path: the CSE form as whole-array expressions on that library's
  namespace (``codegen.printer.ArrayApiPrinter``), JAX in, JAX out.
* ``NUMBA`` — ``generated/fused/``: one ``numba.njit`` loop per formula over
  the broadcast inputs, the CSE temporaries as scalars in the loop body
  (``codegen.printer.ScalarPrinter``), ranked by operation count. Each
  element is read once and written once, so a call costs about one pass
  over memory. Importing ``generated.fused`` needs numba; ``generated``
  never imports it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Sequence

import sympy

from symbolic.symbols import PER_LAYOUT, SPECS

from .lowering import RESERVED_NAMES, Program, hoist, in_place_program, loop_program
from .printer import print_array_api, print_numpy, print_scalar

__all__ = ["Backend", "Templates", "NumPyEmitter", "NUMPY", "NUMBA", "BACKENDS", "by_name"]

CseForm = Sequence[tuple[sympy.Symbol, sympy.Expr]]


@dataclass(frozen=True)
class Templates:
    """The templates one backend renders, by role (names inside the backend's template folder)."""

    module: str = "module.py.jinja"
    function: str = "function.py.jinja"
    init: str = "init.py.jinja"
    runtime: str = "runtime.py.jinja"


@dataclass(frozen=True)
class Backend:
    """One code-generation target.

    Attributes:
        name: what callers select it by (``codegen.runtime.kernels.evaluator(..., backend=name)``).
        package: its sub-directory of ``generated/`` (``""``: ``generated/`` itself).
        template_dir: its folder under ``codegen/templates`` (``""``: the folder itself).
        templates: the templates it renders.
        printer: one expression as code, given the formula's argument names.
        schedule: statements for a CSE form (temporaries, result, argument names).
        rank: cost of a candidate form (its program, its operation count); the lowest is kept.
        reserved: names its generated code binds, which no argument may take.
        requires: modules its output imports besides NumPy.
        plain_printer: one expression for a second, plain code path (NumPy: arrays of another
            array-API library, ``xp``), or None.
        skip: dimensions it does not compile (their functions fall back to the NumPy target).
    """

    name: str
    package: str
    template_dir: str
    templates: Templates
    printer: Callable[[sympy.Basic, tuple[str, ...]], str]
    schedule: Callable[[CseForm, sympy.Expr, tuple[str, ...]], Program]
    rank: Callable[[Program, int], tuple[int, ...]]
    reserved: frozenset[str]
    requires: tuple[str, ...] = ()
    plain_printer: Callable[[sympy.Basic], str] | None = None
    skip: frozenset[str] = frozenset()

    # -- what lowering asks (codegen.lowering.Target)

    def print_code(self, expr: sympy.Basic, arguments: tuple[str, ...]) -> str:
        return self.printer(expr, arguments)

    def program(self, temps: CseForm, result: sympy.Expr, arguments: tuple[str, ...]) -> Program:
        return self.schedule(temps, result, arguments)

    def cost(self, program: Program, ops: int) -> tuple[int, ...]:
        return self.rank(program, ops)

    def print_plain(self, expr: sympy.Basic) -> str | None:
        return None if self.plain_printer is None else self.plain_printer(expr)

    # -- file layout

    def template(self, role: str) -> str:
        """The loader name of the template for *role* (``module``, ``function``, ``init``, ``runtime``)."""
        name = getattr(self.templates, role)
        return f"{self.template_dir}/{name}" if self.template_dir else name

    def path(self, filename: str) -> str:
        """Where *filename* goes, relative to ``generated/``."""
        return f"{self.package}/{filename}" if self.package else filename


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


def _numpy_printer(expr: sympy.Basic, arguments: tuple[str, ...]) -> str:
    return print_numpy(expr)


#: Symbols one call of a NumPy evaluator usually sees as single numbers (the model's and the run's fields).
_INVARIANT = frozenset(SPECS) - PER_LAYOUT


def _numpy_schedule(temps: CseForm, result: sympy.Expr, arguments: tuple[str, ...]) -> Program:
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


def _numpy_rank(program: Program, ops: int) -> tuple[int, ...]:
    # Each NumPy call is a pass over a block: calls decide, operations break ties.
    return (program.calls, ops)


def _scalar_printer(expr: sympy.Basic, arguments: tuple[str, ...]) -> str:
    return print_scalar(expr, frozenset(arguments))


def _loop_schedule(temps: CseForm, result: sympy.Expr, arguments: tuple[str, ...]) -> Program:
    indexed = frozenset(arguments)
    return loop_program(temps, result, lambda e: print_scalar(e, indexed))


def _loop_rank(program: Program, ops: int) -> tuple[int, ...]:
    # In a loop body every operation costs about the same; fewer is cheaper.
    return (ops,)


NUMPY = Backend(
    name="numpy",
    package="",
    template_dir="",
    templates=Templates(),
    printer=_numpy_printer,
    schedule=_numpy_schedule,
    rank=_numpy_rank,
    reserved=RESERVED_NAMES,
    plain_printer=print_array_api,
)

NUMBA = Backend(
    name="numba",
    package="fused",
    template_dir="numba",
    templates=Templates(),
    printer=_scalar_printer,
    schedule=_loop_schedule,
    rank=_loop_rank,
    reserved=frozenset({"numpy", "out", "i", "result", "arrays", "_runtime"}),
    requires=("numba",),
    # Sensitivity evaluates the derivatives once per layout it analyses: a fused loop buys nothing there.
    skip=frozenset({"stage_slope", "memory_slope"}),
)

#: Every backend ``symcost compile`` writes, in the order it renders them.
BACKENDS: tuple[Backend, ...] = (NUMPY, NUMBA)


def by_name(name: str) -> Backend:
    """The backend called *name*.

    Raises:
        ValueError: naming the backends there are.
    """
    for backend in BACKENDS:
        if backend.name == name:
            return backend
    raise ValueError(f"unknown backend {name!r}; there are {[b.name for b in BACKENDS]}")
