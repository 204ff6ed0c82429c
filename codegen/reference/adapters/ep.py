"""``EvalLayerComm.ep_comm_layer`` through the evaluators, with the busiest rank's load computed in NumPy."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from symbolic import ep
from symbolic.formula import Formula

from ...kernels import evaluator
from .fields import Fields

__all__ = ["ADAPTERS", "max_rank_tokens", "routing_of", "arguments"]


def max_rank_tokens(tokens_per_expert: Sequence[float], *, n_exp: int, ep: int) -> float:
    """Most tokens one EP rank receives per micro-batch: max over ranks of its contiguous experts' counts.

    Rank r holds experts ``r·E … r·E + E − 1`` with ``E = n_exp // ep``
    (``n_exp`` of the config, not the list's length; entries past ``n_exp``
    are not read).

    Raises:
        ValueError: naming ``tokens_per_expert`` when it holds fewer than
            ``n_exp`` counts or a count that is not a finite number >= 0.
    """
    n_exp, ep = int(n_exp), int(ep)
    counts = np.asarray(tokens_per_expert, dtype=float)
    if counts.ndim != 1 or counts.size < n_exp:
        raise ValueError(f"tokens_per_expert: expected at least n_exp = {n_exp} counts, got {counts.size}")
    counts = counts[:n_exp]
    if not np.all(np.isfinite(counts)) or np.any(counts < 0):
        raise ValueError("tokens_per_expert: counts must be finite numbers >= 0")
    return float(counts.reshape(ep, n_exp // ep).sum(axis=1).max())


def routing_of(f: Fields) -> ep.Routing:
    """The EP branch the original takes for the case's config."""
    return ep.routing(f["tokens_per_expert"], n_exp=f.num("n_exp"), ep=f.num("ep"), comm_ep=f.num("comm_ep"))


def arguments(formula: Formula, f: Fields) -> dict[str, float]:
    """The formula's keyword arguments from a case, ``max_rank_tokens`` reduced from ``tokens_per_expert``."""
    args = {}
    for name in formula.arguments:
        if name == "max_rank_tokens":
            args[name] = max_rank_tokens(f["tokens_per_expert"], n_exp=int(f.num("n_exp")), ep=int(f.num("ep")))
        else:
            args[name] = f.num(name)
    return args


def _ep_comm_layer(inputs: Mapping[str, Any]) -> float:
    f = Fields(inputs)
    formula = ep.layer_formula(routing_of(f))
    return float(evaluator(formula.name)(**arguments(formula, f)))


ADAPTERS = {"EvalLayerComm.ep_comm_layer": _ep_comm_layer}
