"""``EvalLayerComm.tp_comm_layer`` through the evaluators."""

from __future__ import annotations

from typing import Any, Mapping

from symbolic import tp
from symbolic.formula import Formula

from ...runtime.kernels import evaluator
from ...pricing.stages import Fields, gather_switch
from symbolic.vocabulary import LayerType

__all__ = ["ADAPTERS", "arguments", "is_moe"]


def arguments(formula: Formula, inputs: Mapping[str, Any]) -> dict[str, float]:
    """The formula's keyword arguments from a case, ``gather`` read from ``rec_op``."""
    f = Fields(inputs)
    return {name: gather_switch(inputs) if name == "gather" else f.num(name) for name in formula.arguments}


def is_moe(inputs: Mapping[str, Any]) -> bool:
    """The original's TP switch between the dense and the MoE volume: ``n_exp > 1``."""
    return Fields(inputs).num("n_exp") > 1


def _tp_comm_layer(inputs: Mapping[str, Any]) -> float:
    formula = tp.layer_formula(is_moe(inputs), inputs.get("ctx_current_node", LayerType.NOT_REC_LAYER))
    return float(evaluator(formula.name)(**arguments(formula, inputs)))


ADAPTERS = {"EvalLayerComm.tp_comm_layer": _tp_comm_layer}
