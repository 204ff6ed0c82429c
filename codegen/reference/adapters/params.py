"""``EvalBody.num_params_layer`` through the evaluators → [P_ne, P_r, P_s]."""

from __future__ import annotations

from typing import Any, Mapping

from symbolic import params
from symbolic.formula import Formula

from ...runtime.kernels import evaluator
from ...pricing.stages import Fields

__all__ = ["ADAPTERS", "SWITCHES", "layer_variant", "arguments", "param_counts"]

#: Yes/no fields of a layer, read by truthiness as the original's ``if cfg.x`` does (unset reads 0: false).
SWITCHES: frozenset[str] = frozenset({"qkv_bias", "o_bias", "mlp_bias", "norm_bias", "attn_output_gate",
                                      "shared_expert_gate"})


def arguments(formula: Formula, fields: Fields) -> dict[str, float]:
    """The formula's keyword arguments from a case: switches as 0/1 by truthiness, the rest as numbers."""
    return {name: (1.0 if fields.raw.get(name, 0) else 0.0) if name in SWITCHES else fields.num(name)
            for name in formula.arguments}


def layer_variant(fields: Fields) -> tuple[params.AttentionParams, bool]:
    """(attention layout, MoE) as ``num_params_layer`` branches: MLA on ``dc_kv``, MoE on ``n_exp != 1``."""
    attention = params.attention_variant(dc_kv=fields.num("dc_kv"), dc_q=fields.num("dc_q"))
    return attention, fields.num("n_exp") != 1


def param_counts(fields: Fields) -> list[float]:
    """[P_ne, P_r, P_s] of the case's layer, each through its registered formula."""
    attention, moe = layer_variant(fields)
    return [float(evaluator(f.name)(**arguments(f, fields))) for f in params.layer_formulas(attention, moe)]


def _num_params_layer(inputs: Mapping[str, Any]) -> list[float]:
    return param_counts(Fields(inputs))


ADAPTERS = {"EvalBody.num_params_layer": _num_params_layer}
