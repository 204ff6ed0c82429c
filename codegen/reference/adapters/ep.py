"""``EvalLayerComm.ep_comm_layer`` through the evaluators, with the busiest rank's load computed in NumPy."""

from __future__ import annotations

from typing import Any, Mapping

from symbolic import ep
from symbolic.formula import Formula

from ...runtime.kernels import evaluator
from ...pricing.stages import Fields, max_rank_tokens

__all__ = ["ADAPTERS", "routing_of", "arguments"]


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
