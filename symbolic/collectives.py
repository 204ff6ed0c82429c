"""Building blocks for collectives: bytes one rank sends, as SymPy expressions.

Each takes the size of the whole buffer the collective works on (as one rank
sees it) and the group size, and returns what a rank moves with a
bandwidth-optimal (ring or pairwise) implementation.
"""

from __future__ import annotations

import sympy

__all__ = ["ring_fraction", "all_gather", "reduce_scatter", "all_reduce", "all_to_all", "p2p"]


def ring_fraction(group: sympy.Expr) -> sympy.Expr:
    """``(n − 1) / n``: the share of a buffer a rank exchanges in a group of n."""
    return (group - 1) / group


def all_gather(total: sympy.Expr, group: sympy.Expr) -> sympy.Expr:
    """A rank receives the other ``n − 1`` shards of a buffer of size *total*."""
    return ring_fraction(group) * total


def reduce_scatter(total: sympy.Expr, group: sympy.Expr) -> sympy.Expr:
    """A rank sends ``n − 1`` partial shards of a buffer of size *total*."""
    return ring_fraction(group) * total


def all_reduce(total: sympy.Expr, group: sympy.Expr) -> sympy.Expr:
    """Reduce-scatter then all-gather: ``2 (n − 1)/n · total``."""
    return reduce_scatter(total, group) + all_gather(total, group)


def all_to_all(local: sympy.Expr, group: sympy.Expr) -> sympy.Expr:
    """A rank keeps ``1/n`` of its *local* buffer and sends the rest."""
    return ring_fraction(group) * local


def p2p(size: sympy.Expr) -> sympy.Expr:
    """A point-to-point send of *size*."""
    return size
