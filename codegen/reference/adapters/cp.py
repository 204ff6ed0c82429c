"""``_cp_resolve_topology``, ``cp_traffic`` and ``cp_comm_layer_detailed`` through the evaluators."""

from __future__ import annotations

from typing import Any, Mapping

from symbolic import cp, registry
from symbolic.attention import Attention, detect_attention
from symbolic.formula import Formula

from ...runtime.kernels import evaluator
from ...pricing.stages import Fields
from symbolic.vocabulary import CpAlgorithm, resolve_algorithm

__all__ = ["ADAPTERS", "value", "variant_of"]


def value(formula: Formula, fields: Fields) -> float:
    """The formula evaluated at the case's fields, as a Python float.

    No input checks here: a reference case holds the original's own config,
    where a field the formula's untaken branch names may be unset (0).
    """
    return float(evaluator(formula.name)(**fields.values(formula.arguments)))


def variant_of(fields: Fields, algo: object) -> tuple[CpAlgorithm, Attention, bool]:
    """(algorithm, attention, linear) as the original resolves them from a config.

    The check reproduces the original's fallbacks: an unset or unknown
    ``cp_algo`` reads as colossalai.
    """
    algorithm = resolve_algorithm(algo, lenient=True)
    attention = detect_attention(dc_kv=fields.num("dc_kv"), n_kv=fields.num("n_kv"), a=fields.num("a"))
    return algorithm, attention, fields.num("n_linrec") != 0


def _topology(inputs: Mapping[str, Any]) -> dict[str, Any]:
    f = Fields(inputs)
    code = int(value(registry.get("cp_topology_code"), f))
    return {"topology": cp.TOPOLOGIES[code],
            "effective_bandwidth": value(registry.get("cp_topology_effective_bandwidth_gbps"), f)}


def _traffic(inputs: Mapping[str, Any]) -> float:
    f = Fields(inputs)
    algorithm, attention, linear = variant_of(f, inputs.get("algo", 0))
    return value(cp.traffic_formula(algorithm, attention, linear=linear), f)


def _detailed(inputs: Mapping[str, Any]) -> dict[str, Any]:
    f = Fields(inputs)
    cp_degree = f.num("cp")
    ints = {"cp_degree": int(cp_degree), "seq_len": int(f.num("s")), "batch_size": int(f.num("b"))}
    if cp_degree <= 1:
        # _cp_comm_zero: reports MHA / colossalai whatever the layer is (§10 item 21).
        algorithm, attention, linear = CpAlgorithm.COLOSSALAI, Attention.MHA, False
    else:
        if f.num("a") <= 0:
            raise ValueError(f"a: attention heads must be positive when cp > 1, got {f.num('a')!r}")
        algorithm, attention, linear = variant_of(f, inputs.get("cp_algo", 0))
    out: dict[str, Any] = {}
    for name, formula in cp.record_formulas(algorithm, attention, linear=linear).items():
        out[name] = value(formula, f)
    out["topology"] = cp.TOPOLOGIES[int(out["topology"])]
    out["ring_steps"] = int(out["ring_steps"])
    out["ring_directions"] = int(out["ring_directions"])
    out["kv_dim"] = int(out["kv_dim"])
    out.update(ints)
    out["attention_type"] = attention.label
    out["cp_algo"] = algorithm.value
    return {k: out[k] for k in cp.RECORD_FIELDS}


ADAPTERS = {
    "_cp_resolve_topology": _topology,
    "cp_traffic": _traffic,
    "cp_comm_layer_detailed": _detailed,
}
