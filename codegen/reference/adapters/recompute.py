"""``_recomputed_comm`` through the evaluators → [TP, EP, CP]."""

from __future__ import annotations

from typing import Any, Mapping

from symbolic import recompute
from symbolic.attention import Attention

from ...runtime.kernels import evaluator
from . import ep as ep_adapter
from . import tp as tp_adapter
from .cp import variant_of
from ...pricing.stages import Fields
from symbolic.vocabulary import CpAlgorithm

__all__ = ["ADAPTERS", "cp_variant"]


def cp_variant(f: Fields) -> tuple[CpAlgorithm, Attention, bool]:
    """The CP record variant as ``cp_comm_layer_detailed`` resolves it.

    At ``cp ≤ 1`` the record is ``_cp_comm_zero`` whatever the layer (its
    comm_volume is 0; the formulas' own ``cp ≤ 1`` branch gives that 0).

    Raises:
        ValueError: naming ``a`` when cp > 1 and there are no heads, as the original raises.
    """
    if f.num("cp") <= 1:
        return CpAlgorithm.COLOSSALAI, Attention.MHA, False
    if f.num("a") <= 0:
        raise ValueError(f"a: attention heads must be positive when cp > 1, got {f.num('a')!r}")
    return variant_of(f, f["cp_algo"])


def _recomputed_comm(inputs: Mapping[str, Any]) -> list[float]:
    f = Fields(inputs)
    algorithm, attention, linear = cp_variant(f)
    formulas = recompute.layer_formulas(inputs.get("layer", 0), moe=tp_adapter.is_moe(inputs),
                                        routing=ep_adapter.routing_of(f), cp_algorithm=algorithm,
                                        attention=attention, linear=linear)
    out = []
    for formula in formulas:
        args = tp_adapter.arguments(formula, inputs)
        if "max_rank_tokens" in formula.arguments:
            args.update(ep_adapter.arguments(formula, f))
        out.append(float(evaluator(formula.name)(**args)))
    return out


ADAPTERS = {"_recomputed_comm": _recomputed_comm}
