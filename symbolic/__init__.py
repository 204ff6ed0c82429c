"""Symbolic core of symcost: symbols, formulas, model assembly, closed forms, sensitivity.

Imports neither ``codegen`` nor ``hardware``: data flows one way, from here down.
"""

from .formula import Formula as Formula
from .registry import FORMULAS as FORMULAS
from .registry import get as get
