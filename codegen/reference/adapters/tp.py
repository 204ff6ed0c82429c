"""``EvalLayerComm.tp_comm_layer`` through the evaluators."""

from __future__ import annotations

from typing import Any, Mapping

from symbolic import tp
from symbolic.formula import Formula

from ...kernels import evaluator
from .fields import Fields

__all__ = ["ADAPTERS", "gather_switch", "arguments", "is_moe"]


def gather_switch(inputs: Mapping[str, Any]) -> float:
    """``rec_op.gather`` as 0 or 1 (unset reads 0).

    Raises:
        ValueError: naming ``rec_op.gather`` when it is not a 0/1 switch: the
            original bit-ors it with a flag, which means nothing for other values.
    """
    rec_op = inputs.get("rec_op", 0)
    value = rec_op.get("gather", 0) if isinstance(rec_op, Mapping) else 0
    if value not in (0, 1):  # True/False compare equal to 1/0
        raise ValueError(f"rec_op.gather: expected a 0/1 switch, got {value!r}")
    return float(value)


def arguments(formula: Formula, inputs: Mapping[str, Any]) -> dict[str, float]:
    """The formula's keyword arguments from a case, ``gather`` read from ``rec_op``."""
    f = Fields(inputs)
    return {name: gather_switch(inputs) if name == "gather" else f.num(name) for name in formula.arguments}


def is_moe(inputs: Mapping[str, Any]) -> bool:
    """The original's TP switch between the dense and the MoE volume: ``n_exp > 1``."""
    return Fields(inputs).num("n_exp") > 1


def _tp_comm_layer(inputs: Mapping[str, Any]) -> float:
    formula = tp.layer_formula(is_moe(inputs), inputs.get("ctx_current_node", tp.LayerType.NOT_REC_LAYER))
    return float(evaluator(formula.name)(**arguments(formula, inputs)))


ADAPTERS = {"EvalLayerComm.tp_comm_layer": _tp_comm_layer}
