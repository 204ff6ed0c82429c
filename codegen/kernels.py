"""Numeric evaluators of the registered formulas, by name.

``evaluator(name)`` returns a function with keyword-only arguments (the
formula's symbols) that accepts scalars or NumPy arrays and broadcasts.
The generated modules under ``generated/`` are the evaluators; a formula
they do not (yet) hold is compiled with ``sympy.lambdify`` on first use.
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np
import sympy

from symbolic import registry

__all__ = ["evaluator", "lambdified", "evaluate"]

Evaluator = Callable[..., np.ndarray]


@functools.cache
def lambdified(name: str) -> Evaluator:
    """``sympy.lambdify`` of the formula *name* (NumPy module), keyword-only by symbol name."""
    formula = registry.get(name)
    symbols = sorted(formula.expr.free_symbols, key=lambda s: s.name)
    fn = sympy.lambdify(symbols, formula.expr, modules="numpy", cse=True)

    def call(**kwargs: object) -> np.ndarray:
        missing = [s.name for s in symbols if s.name not in kwargs]
        if missing:
            raise TypeError(f"{name}: missing arguments {missing}")
        with np.errstate(divide="ignore", invalid="ignore"):
            out = fn(*(np.asarray(kwargs[s.name], dtype=float) for s in symbols))
        shape = np.broadcast_shapes(*(np.shape(kwargs[s.name]) for s in symbols)) if symbols else ()
        return np.broadcast_to(np.asarray(out, dtype=float), shape)

    call.__name__ = name
    return call


@functools.cache
def evaluator(name: str) -> Evaluator:
    """The evaluator of formula *name*: the generated function where there is one, else lambdify."""
    try:
        import generated
    except ImportError:  # pragma: no cover - generated/ is committed
        generated = None
    fn = getattr(generated, name, None) if generated is not None else None
    return fn if fn is not None else lambdified(name)


def evaluate(name: str, **values: object) -> np.ndarray:
    """Evaluate formula *name* on *values* (scalars or arrays) after checking them.

    Extra values are ignored, so a whole configuration can be passed.

    Raises:
        codegen.inputs.InputError: a value no valid configuration has.
        TypeError: a symbol of the formula is missing.
    """
    from .inputs import check_inputs

    args = registry.get(name).arguments
    missing = [a for a in args if a not in values]
    if missing:
        raise TypeError(f"{name}: missing inputs {missing}")
    checked = check_inputs({a: values[a] for a in args})
    return evaluator(name)(**checked)
