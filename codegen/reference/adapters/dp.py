"""``EvalLayerComm.dp_comm_layer`` through the evaluators: the layer's counts, then its DP volume over them."""

from __future__ import annotations

from typing import Any, Mapping

from symbolic import dp

from ...runtime.kernels import evaluator
from ...pricing.stages import Fields
from .params import layer_variant, param_counts

__all__ = ["ADAPTERS"]


def _dp_comm_layer(inputs: Mapping[str, Any]) -> float:
    f = Fields(inputs)
    _, moe = layer_variant(f)
    formula = dp.layer_formula(f.num("comm_d_non_exp"), f.num("comm_d_exp"), moe=moe)
    counts = dict(zip((s.name for s in dp.PARAM_SYMBOLS), param_counts(f)))
    args = {name: counts[name] if name in counts else f.num(name) for name in formula.arguments}
    return float(evaluator(formula.name)(**args))


ADAPTERS = {"EvalLayerComm.dp_comm_layer": _dp_comm_layer}
