"""Traffic a recomputed layer moves again: ``_recomputed_comm`` → [TP, EP, CP].

Restates ``_recomputed_comm`` of ``perf_estimation/comm_time.py`` (printout
lines 488-515; docs/formulas.md, "Recompute again"). The original prices the
layer at ``NOT_REC_LAYER`` ("plain") and, for a selective layer, subtracts
the same prices at ``SEL_REC_LAYER``; it calls the TP and EP volumes with
``mb = 1`` (lines 502-503), so the expressions here have ``mb`` set to 1:

* plain = (TP at a non-selective node, EP, ½·V_cp), with V_cp the CP
  record's ``comm_volume`` (``cp.record_formulas(...)["comm_volume"]``: the
  ``cp_traffic`` bytes where ``cp > 1``, 0 at ``cp ≤ 1``) — a recompute runs
  the forward's half of the CP exchange again;
* a full-recompute layer returns plain;
* a selective layer returns plain − (TP·gather, EP, ½·V_cp·gather) =
  (TP·(1 − gather), 0, ½·V_cp·(1 − gather)).

The layer kind, the TP variant (dense/MoE), the EP routing and the CP
variant (algorithm, attention, linear layer) are resolved in Python; each
component is then one expression. **Units follow the components**
(docs/model.md, oddity 11): dense TP in elements, MoE TP, EP and CP in bytes.

Oddity kept (docs/model.md, oddity 18): for a selective layer the EP
difference is always 0 (EP does not depend on the node), and CP counts half
the traffic times ``1 − gather``.
"""

from __future__ import annotations

from typing import NamedTuple

import sympy

from . import cp, ep, tp
from .attention import Attention
from .formula import Formula
from .symbols import syms
from .vocabulary import LayerType, parse_layer_type
from .vocabulary import CpAlgorithm

__all__ = ["RecomputeFormulas", "is_full", "layer_formulas", "FORMULAS"]

gather, mb = syms("gather", "mb")

SOURCE = "HyperParallel SAPP-ND perf_estimation/comm_time.py lines 488-515 (_recomputed_comm)"
_HALF = sympy.Rational(1, 2)


class RecomputeFormulas(NamedTuple):
    """The three formulas of ``_recomputed_comm``, in its order."""

    tp: Formula
    ep: Formula
    cp: Formula


def is_full(layer: LayerType | str) -> bool:
    """Whether *layer* takes the full-recompute branch; the original treats every other value as selective."""
    return parse_layer_type(layer, "layer") is LayerType.FULL_REC_LAYER


def _cp_variants() -> dict[str, Formula]:
    """The CP record's comm_volume formulas by name, one per distinct variant."""
    out: dict[str, Formula] = {}
    for algorithm in CpAlgorithm:
        for attention in Attention:
            for linear in (False, True):
                f = cp.record_formulas(algorithm, attention, linear=linear)["comm_volume"]
                out.setdefault(f.name, f)
    return out


def _cp_key(volume: Formula) -> str:
    # "cp_ring_gqa_record_comm_volume_bytes" -> "ring_gqa"
    return volume.name.removeprefix("cp_").removesuffix("_record_comm_volume_bytes")


def _build() -> tuple[dict[tuple[bool, bool], Formula], dict[tuple[str, bool], Formula],
                      dict[tuple[str, bool], Formula]]:
    tp_again: dict[tuple[bool, bool], Formula] = {}
    for moe in (False, True):
        plain = tp.layer_formula(moe, LayerType.NOT_REC_LAYER)
        label = "moe" if moe else "dense"
        for full in (True, False):
            kind = "full" if full else "selective"
            kept = sympy.Integer(1) if full else 1 - gather
            tp_again[(moe, full)] = Formula(
                name=f"recompute_tp_{label}_{kind}_{plain.unit}",
                expr=(kept * tp.layer_volume(moe)).subs(mb, 1),
                dimension="recompute",
                algorithm=label,
                unit=plain.unit,
                doc=(f"TP volume a {kind}-recompute {label} layer moves again, priced at mb = 1: "
                     + ("the plain layer's" if full else "the plain layer's less what its gather switch keeps")
                     + f", in {plain.unit} as {plain.name}."),
                source=f"{SOURCE}; {plain.source}",
                variant=(("layer", kind), ("ffn", label)),
            )
    ep_again: dict[tuple[str, bool], Formula] = {}
    for routing in ep.Routing:
        plain = ep.layer_formula(routing)
        ep_again[(routing.value, True)] = Formula(
            name=f"recompute_ep_{routing.value}_full_bytes",
            expr=plain.expr.subs(mb, 1),
            dimension="recompute",
            algorithm=routing.value,
            unit="bytes",
            doc=f"EP bytes a full-recompute layer moves again, priced at mb = 1 as {plain.name}.",
            source=f"{SOURCE}; {plain.source}",
            variant=(("layer", "full"), ("routing", routing.value)),
        )
    # Selective: plain EP less the same EP at SEL_REC_LAYER, whatever the routing.
    ep_selective = Formula(
        name="recompute_ep_selective_bytes",
        expr=sympy.Integer(0),
        dimension="recompute",
        algorithm="selective",
        unit="bytes",
        doc="EP bytes a selective-recompute layer moves again: none, as EP does not depend on the node (§10 item 18).",
        source=SOURCE,
        variant=(("layer", "selective"),),
    )
    for routing in ep.Routing:
        ep_again[(routing.value, False)] = ep_selective
    cp_again: dict[tuple[str, bool], Formula] = {}
    for volume in _cp_variants().values():
        key = _cp_key(volume)
        for full in (True, False):
            kept = sympy.Integer(1) if full else 1 - gather
            kind = "full" if full else "selective"
            cp_again[(key, full)] = Formula(
                name=f"recompute_cp_{key}_{kind}_bytes",
                expr=_HALF * volume.expr * kept,
                dimension="recompute",
                algorithm=volume.algorithm,
                unit="bytes",
                doc=(f"CP bytes a {kind}-recompute layer moves again: half the record's comm_volume ({volume.name}, "
                     f"0 at cp <= 1){'' if full else ' times 1 - gather (§10 item 18)'}."),
                source=f"{SOURCE}; {volume.source}",
                variant=(("layer", kind), ("cp", key)),
            )
    return tp_again, ep_again, cp_again


_TP_AGAIN, _EP_AGAIN, _CP_AGAIN = _build()


def layer_formulas(layer: LayerType | str, *, moe: bool, routing: ep.Routing | str = ep.Routing.BALANCED,
                   cp_algorithm: CpAlgorithm = CpAlgorithm.COLOSSALAI, attention: Attention = Attention.MHA,
                   linear: bool = False) -> RecomputeFormulas:
    """[TP, EP, CP] formulas of ``_recomputed_comm`` for one layer variant.

    Args:
        layer: ``FULL_REC_LAYER``, or any other layer type for the selective branch (as the original).
        moe: the TP variant, the original's ``n_exp > 1``.
        routing: the EP routing (``ep.routing``).
        cp_algorithm, attention, linear: the CP record variant, resolved as
            ``cp_comm_layer_detailed`` resolves it (its ``cp ≤ 1`` zero is in the expression).
    """
    volume = cp.record_formulas(cp_algorithm, attention, linear=linear)["comm_volume"]
    full = is_full(layer)
    return RecomputeFormulas(_TP_AGAIN[(bool(moe), full)], _EP_AGAIN[(ep.Routing(routing).value, full)],
                             _CP_AGAIN[(_cp_key(volume), full)])


FORMULAS: tuple[Formula, ...] = (*_TP_AGAIN.values(), *{f.name: f for f in _EP_AGAIN.values()}.values(),
                                  *_CP_AGAIN.values())
