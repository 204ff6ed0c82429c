"""Symbolic core of symcost: symbols, formulas, model assembly, closed forms, sensitivity.

Imports neither ``codegen`` nor ``hardware``: data flows one way, from here down.
Importing the package costs nothing: ``symbolic.vocabulary`` is plain Python for
the SymPy-free run time, and the SymPy-backed names below load on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Formula", "FORMULAS", "get"]


def __getattr__(name: str) -> Any:
    if name == "Formula":
        from .formula import Formula

        return Formula
    if name in ("FORMULAS", "get"):
        from . import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'symbolic' has no attribute {name!r}")
