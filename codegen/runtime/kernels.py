"""Numeric evaluators of the registered formulas, by name: the evaluator lookup.

``evaluator(name)`` returns a function with keyword-only arguments (the
formula's symbols) that accepts scalars or NumPy arrays and broadcasts: the
generated function of ``generated/``, found through its metadata, without
importing SymPy (run time stays SymPy-free). Where the formula registry is
loaded already (the reference check, ``derive``, the tests), the lookup also
compares the generated function's fingerprint with the registry's; a formula
that ``generated/`` does not hold, or holds from an older expression, is then
evaluated through ``sympy.lambdify`` instead, with a warning to run
``symcost compile`` (the numbers are right, and ``symcost compile --check``
and the regeneration test fail until ``generated/`` is rebuilt).
``lambdified`` is also the reference the tests compare the generated code with.

``evaluator(name, backend=...)`` picks the target: ``"numpy"`` (the
default, ``generated/``), ``"numba"`` (``generated/fused/``: the same
functions as one loop each, compiled on first use; needs the optional extra
``fast``) or ``"auto"`` (numba where it is installed, else NumPy).
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import warnings
from typing import TYPE_CHECKING, Callable, Literal

import numpy as np

import generated

if TYPE_CHECKING:  # pragma: no cover
    from symbolic.formula import Formula

__all__ = ["evaluator", "lambdified", "evaluate", "variants", "fused_available", "BackendName"]

Evaluator = Callable[..., np.ndarray]

#: What ``evaluator`` accepts as *backend*.
BackendName = Literal["numpy", "numba", "auto"]


def fused_available() -> bool:
    """Whether numba is installed, so that ``generated.fused`` (the fused target) can be imported."""
    try:
        return importlib.util.find_spec("numba") is not None
    except (ImportError, ValueError):  # a broken install, or numba blocked in sys.modules
        return False


@functools.cache
def lambdified(name: str) -> Evaluator:
    """``sympy.lambdify`` of the formula *name* (NumPy module), keyword-only by symbol name."""
    from symbolic import registry

    return _lambdify(registry.get(name))


def _lambdify(formula: Formula) -> Evaluator:
    import sympy

    name = formula.name
    symbols = sorted(formula.expr.free_symbols, key=lambda s: s.name)
    # lambdify prints an if-then-else condition as numpy.select over booleans, which gives no boolean
    # array; the same condition as And/Or does.
    expr = formula.expr.replace(lambda e: isinstance(e, sympy.ITE),
                                lambda e: sympy.Or(sympy.And(e.args[0], e.args[1]), sympy.And(sympy.Not(e.args[0]), e.args[2])))
    fn = sympy.lambdify(symbols, expr, modules="numpy", cse=True)

    def call(**kwargs: object) -> np.ndarray:
        missing = [s.name for s in symbols if s.name not in kwargs]
        if missing:
            raise TypeError(f"{name}: missing arguments {missing}")
        # Broadcast first: lambdify's numpy.select wants every condition as an array of one shape.
        args = np.broadcast_arrays(*(np.asarray(kwargs[s.name], dtype=float) for s in symbols))
        shape = args[0].shape if args else ()
        with np.errstate(divide="ignore", invalid="ignore"):
            out = fn(*args)
        return np.broadcast_to(np.asarray(out, dtype=float), shape)

    call.__name__ = name
    return call


def generated_function(name: str) -> Evaluator | None:
    """The generated function of formula *name* if ``generated/`` holds it for the current expression."""
    from symbolic import registry

    from symbolic.fingerprints import formula_fingerprint

    formula = registry.get(name)
    meta = generated.FORMULAS.get(name)
    if meta is None or meta.get("fingerprint") != formula_fingerprint(formula):
        return None
    return getattr(generated, name)


def fused_function(name: str) -> Evaluator | None:
    """The fused (numba) function of formula *name*, or ``None`` where ``generated/fused`` lacks it.

    Both packages are written by one ``symcost compile`` and share the ``FORMULAS`` table, so the
    NumPy package's metadata (and, where checked, its fingerprint) speaks for both.

    Raises:
        ImportError: numba is not installed (the message says how to install it).
    """
    if _numpy_function(name) is None:
        return None
    import generated.fused as fused  # raises ImportError naming the extra when numba is missing

    return getattr(fused, name, None)


def _numpy_function(name: str) -> Evaluator | None:
    if "symbolic.registry" not in sys.modules:  # run time: generated/ is the truth, SymPy stays out
        if name not in generated.FORMULAS:
            raise KeyError(f"unknown formula {name!r}; `symcost derive --list` lists them")
        return getattr(generated, name)
    return generated_function(name)


@functools.cache
def evaluator(name: str, backend: BackendName = "numpy") -> Evaluator:
    """The evaluator of formula *name* for *backend* (see the module docstring for the lambdify fallback).

    Args:
        name: a registered formula.
        backend: ``"numpy"`` (``generated/``), ``"numba"`` (``generated/fused/``, needs numba) or
            ``"auto"`` (numba when installed, else NumPy). The numbers are the same to rounding.

    Raises:
        KeyError: naming an unknown formula.
        ValueError: an unknown *backend*.
        ImportError: ``backend="numba"`` without numba installed.
    """
    if backend == "auto":
        backend = "numba" if fused_available() else "numpy"
    if backend == "numba":
        fused = fused_function(name)
        if fused is not None:
            return fused
    elif backend != "numpy":
        raise ValueError(f"unknown backend {backend!r}: use 'numpy', 'numba' or 'auto'")
    fn = _numpy_function(name)
    if fn is not None:
        return fn
    warnings.warn(f"{name}: generated/ has no function for the current formula; evaluating through "
                  "sympy.lambdify. Run `symcost compile`.", stacklevel=2)
    return lambdified(name)


def variants(dimension: str) -> dict[tuple[tuple[str, str], ...], str]:
    """The generated formulas of *dimension* built for one variant each: their ``variant`` pairs → name.

    Variants carry their identity as data (``Formula.variant``), so a caller picks one by its
    fields instead of by spelling a name.
    """
    return {tuple(meta["variant"]): name for name, meta in generated.FORMULAS.items()
            if meta["dimension"] == dimension and "variant" in meta}


def _arguments(name: str) -> tuple[str, ...]:
    meta = generated.FORMULAS.get(name)
    if meta is not None:
        return meta["arguments"]
    from symbolic import registry  # a formula generated/ does not hold yet

    return registry.get(name).arguments


def evaluate(name: str, **values: object) -> np.ndarray:
    """Evaluate formula *name* on *values* (scalars or arrays) after checking them.

    Extra values are ignored, so a whole configuration can be passed.

    The inputs pass ``codegen.runtime.inputs.check_inputs`` (declarations and bounds) and the result
    ``codegen.runtime.inputs.finite``: an input that overflows float64 is an error, never ``inf`` or NaN.

    Raises:
        codegen.runtime.inputs.InputError: a value no valid configuration has, or a result that is not finite.
        TypeError: a symbol of the formula is missing.
    """
    from .inputs import InputError, check_inputs, finite

    args = _arguments(name)
    missing = [a for a in args if a not in values]
    if missing:
        raise TypeError(f"{name}: missing inputs {missing}")
    checked = check_inputs({a: values[a] for a in args})
    try:
        np.broadcast_shapes(*(v.shape for v in checked.values()))
    except ValueError:
        shapes = ", ".join(f"{k} {v.shape}" for k, v in checked.items() if v.shape)
        raise InputError(f"{name}: the inputs' shapes do not broadcast together: {shapes}") from None
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        result = evaluator(name)(**checked)
    return finite(name, result)
