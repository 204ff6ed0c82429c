"""The original's function names, resolved to the formulas of one variant.

``symcost derive cp_traffic --algo ulysses_cp --attention gqa`` goes through
here: the variant is chosen in Python, then the registered formula is
returned. Names of registered formulas resolve to themselves.
"""

from __future__ import annotations

from typing import Callable

from . import cp, registry
from .attention import Attention, parse_attention
from .formula import Formula

__all__ = ["Variant", "resolve", "FAMILIES"]


class Variant:
    """The choices a family of formulas may need: CP algorithm, attention type, linear layer."""

    def __init__(self, algo: str | None = None, attention: str | None = None, linear: bool = False):
        self.algo = algo
        self.attention = attention
        self.linear = linear

    def algorithm(self, family: str) -> cp.CpAlgorithm:
        if self.algo is None:
            raise ValueError(f"{family} needs --algo (one of {', '.join(a.value for a in cp.CpAlgorithm)})")
        return cp.resolve_algorithm(self.algo)

    def attention_type(self, family: str) -> Attention:
        if self.attention is None:
            raise ValueError(f"{family} needs --attention (one of {', '.join(a.value for a in Attention)})")
        return parse_attention(self.attention)


def _cp_traffic(v: Variant) -> list[Formula]:
    return [cp.traffic_formula(v.algorithm("cp_traffic"), v.attention_type("cp_traffic"), linear=v.linear)]


def _cp_detailed(v: Variant) -> list[Formula]:
    fields = cp.record_formulas(v.algorithm("cp_comm_layer_detailed"), v.attention_type("cp_comm_layer_detailed"),
                                linear=v.linear)
    return list(fields.values())


def _cp_topology(v: Variant) -> list[Formula]:
    return [registry.get("cp_topology_effective_bandwidth_gbps"), registry.get("cp_topology_code")]


def _kv_width(v: Variant) -> list[Formula]:
    return [registry.get(f"attention_{v.attention_type('compute_kv_dim').value}_kv_width_elements")]


#: Original function name -> the formulas of the chosen variant.
FAMILIES: dict[str, Callable[[Variant], list[Formula]]] = {
    "cp_traffic": _cp_traffic,
    "cp_comm_layer_detailed": _cp_detailed,
    "_cp_resolve_topology": _cp_topology,
    "compute_kv_dim": _kv_width,
}


def resolve(name: str, variant: Variant | None = None) -> list[Formula]:
    """The formulas *name* stands for: a registered formula, or a family of the original for *variant*.

    Raises:
        KeyError: naming *name* when it is neither.
        ValueError: when the family needs a choice the variant does not make.
    """
    variant = variant or Variant()
    if name in registry.FORMULAS:
        return [registry.get(name)]
    if name in FAMILIES:
        return FAMILIES[name](variant)
    raise KeyError(f"unknown formula or function {name!r}; `symcost derive --list` lists them")
