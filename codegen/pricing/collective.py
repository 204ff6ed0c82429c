"""NCCL's choice of algorithm and protocol at run time, on the generated candidate forms (no SymPy).

``symbolic.collective_time`` compiles, per collective and candidate (algorithm × protocol, in NCCL's
order), the time it really takes (``collective_<op>_<label>_time_s``) and, where it differs, NCCL's
tuned price (``collective_<op>_<label>_price_s``: tuning.cc's latency + bytes / bandwidth without the
Simple protocol's pipeline fill). NCCL's ``topoGetAlgoInfo`` (src/enqueue.cc) runs the candidate with
the smallest price, the first in its loop order on a tie (a strict ``<``); nccl-tests then measures
that candidate's real time. :func:`choose` does exactly that, element-wise: the chosen time is the real
time of the candidate with the smallest price. ``np.argmin`` keeps the first minimum, which is NCCL's
tie rule because the candidates are generated in NCCL's order (tree, ring, NVLS, then hierarchical,
protocols LL, LL128, Simple).

The choice is done here rather than as one closed form (a ``Piecewise`` over the candidates whose
conditions compare prices) because such a form costs SymPy minutes to build and lower, and the pick
is a comparison, not arithmetic: each candidate is evaluated once, the argmin is one NumPy call.

Public API::

    labels(op) -> tuple[str, ...]                 the candidates of op, NCCL's order
    choose(op, values) -> Choice                  chosen time, index, every candidate's time and price
    arguments(op) -> frozenset[str]               every symbol the candidate forms of op read
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

import generated

__all__ = ["Choice", "arguments", "choose", "labels"]


@functools.cache
def labels(op: str) -> tuple[str, ...]:
    """The candidates of *op* (``ring_ll``, ``tree_simple``, ``nvls_simple``, …) in NCCL's loop order.

    Raises:
        ValueError: *op* has no generated candidate forms.
    """
    out = []
    for meta in generated.FORMULAS.values():
        pairs = dict(meta.get("variant", ()))
        if pairs.get("op") == op and pairs.get("what") == "time" and "candidate" in pairs:
            out.append(pairs["candidate"])
    if not out:
        raise ValueError(f"op: no collective time forms for {op!r}")
    return tuple(out)


def _time_name(op: str, label: str) -> str:
    return f"collective_{op}_{label}_time_s"


def _price_name(op: str, label: str) -> str:
    """The price form of a candidate, or its time form where NCCL's price is its time."""
    name = f"collective_{op}_{label}_price_s"
    return name if name in generated.FORMULAS else _time_name(op, label)


@functools.cache
def arguments(op: str) -> frozenset[str]:
    """Every symbol the time and price forms of *op* read."""
    names = {n for label in labels(op) for n in (_time_name(op, label), _price_name(op, label))}
    return frozenset(a for n in names for a in generated.FORMULAS[n]["arguments"])


def _call(name: str, values: Mapping[str, Any]) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.asarray(getattr(generated, name)(**{a: values[a] for a in generated.FORMULAS[name]["arguments"]}),
                          dtype=float)


@dataclass(frozen=True)
class Choice:
    """NCCL's pick among the candidates of one collective, element-wise over broadcast inputs.

    Attributes:
        time_s: the real time of the chosen candidate.
        index: the chosen candidate's position in ``labels``.
        labels: the candidates, NCCL's order.
        times: every candidate's real time, ``(K, …)`` (``inf`` where unavailable).
        prices: every candidate's tuned price, ``(K, …)``.
    """

    time_s: np.ndarray
    index: np.ndarray
    labels: tuple[str, ...]
    times: np.ndarray
    prices: np.ndarray

    @property
    def algorithm(self) -> np.ndarray:
        """The chosen candidate's label per element."""
        return np.asarray(self.labels)[self.index]


def choose(op: str, values: Mapping[str, Any]) -> Choice:
    """The candidate of *op* NCCL runs (smallest price, first on ties) and the time it takes.

    *values* binds every symbol of :func:`arguments` (numbers or arrays that broadcast together).
    """
    names = labels(op)
    times = [_call(_time_name(op, k), values) for k in names]
    prices = [t if _price_name(op, k) == _time_name(op, k) else _call(_price_name(op, k), values)
              for k, t in zip(names, times)]
    times_a = np.stack(np.broadcast_arrays(*times, *prices)[:len(names)])
    prices_a = np.stack(np.broadcast_arrays(*prices, *times)[:len(names)])
    prices_a = np.where(np.isnan(prices_a), np.inf, prices_a)
    index = np.argmin(prices_a, axis=0)
    time = np.take_along_axis(times_a, index[None], axis=0)[0]
    return Choice(time_s=time, index=index, labels=names, times=times_a, prices=prices_a)
