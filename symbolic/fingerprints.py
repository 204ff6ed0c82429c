"""Fingerprints of formulas: what ``generated/`` records of each expression, so that a stale function is
recognised (the compiler writes them; the run time compares them where the registry is loaded)."""

from __future__ import annotations

import functools
import hashlib
from typing import Iterable

import sympy

from .formula import Formula

__all__ = ["expression_text", "formula_fingerprint", "fingerprint"]


@functools.lru_cache(maxsize=8192)
def expression_text(expr: sympy.Basic) -> str:
    """``sympy.srepr(expr)``, computed once per expression in a process (the latest 8,192: the registry and
    every stage variant hold under 2,000 distinct expressions, and a process that compiles formulas of its
    own should not keep them all alive).

    A compile reads it about eight times per formula (the fingerprints of its module, package and
    table in each backend, the lowering cache's key per backend, the docs' key), and ``srepr`` orders
    every sum's terms for printing: unmemoised it was 53 of the 85 s of a warm ``compile --check``
    under the profiler.
    """
    return sympy.srepr(expr)


def formula_fingerprint(formula: Formula) -> str:
    """sha256 of the formula's name and ``srepr`` (16 hex digits): changes when its expression does."""
    text = f"{formula.name}\n{expression_text(formula.expr)}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fingerprint(formulas: Iterable[Formula]) -> str:
    """sha256 of the formulas' names and ``srepr``, sorted by name (hex)."""
    h = hashlib.sha256()
    for f in sorted(formulas, key=lambda f: f.name):
        h.update(f"{f.name}\n{expression_text(f.expr)}\n".encode())
    return h.hexdigest()
