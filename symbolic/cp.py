"""Context parallelism: traffic per algorithm, the topology blend, the detailed record.

Restates ``cp_traffic``, ``_cp_resolve_topology`` and ``cp_comm_layer_detailed``
of HyperParallel SAPP-ND ``perf_estimation/comm_time.py`` (printout lines
58–207; docs/formulas.md, "Context parallelism (CP)"). The algorithm and the attention type are resolved
here in Python (``resolve_algorithm``, ``attention.detect_attention``) and each
variant gets its own expression; only numeric conditions (``cp ≤ 1``,
``cp ≤ device_per_node``, ``dh = 0``) stay inside as ``Piecewise``.

Oddities kept (docs/model.md, oddities 7, 9, 10, 22):

* the ring record counts K+V at a fixed 4 bytes while ``cp_traffic`` uses
  ``bytes_compute``; the Ulysses record counts ``s·b·(a/t)·dh·2`` elements with
  the raw ``dh`` and no bytes — so ``total_kv_volume`` and ``total_comm_time``
  disagree with ``comm_volume``;
* the linear-attention state volume does not depend on s, b or cp;
* an unknown algorithm name is colossalai, and ``hybird_cp`` is hybrid — but
  only through ``resolve_algorithm(..., lenient=True)``, which the reference
  check uses; the public API rejects unknown names.
"""

from __future__ import annotations


import sympy
from sympy import Piecewise, floor

from . import collectives
from .attention import Attention, guarded_head_width, kv_width, tp_width
from .formula import Formula
from .symbols import syms
from .vocabulary import CpAlgorithm

__all__ = [
    "TOPOLOGIES",
    "traffic",
    "traffic_formula",
    "record_formulas",
    "RECORD_FIELDS",
    "FORMULAS",
]

s, b, a, dh, dhr, cp, n_linrec = syms("s", "b", "a", "dh", "dhr", "cp", "n_linrec")
bytes_compute, device_per_node, bw_intra, bw_inter = syms("bytes_compute", "device_per_node", "bw_intra", "bw_inter")

SOURCE = "HyperParallel SAPP-ND perf_estimation/comm_time.py"


#: Topology labels by the code ``cp_topology_code`` returns.
TOPOLOGIES: tuple[str, ...] = ("none", "intra-node", "cross-node", "mixed")


def _ulysses_traffic(attention: Attention) -> sympy.Expr:
    rope = dhr if attention is Attention.MLA else 0
    head = guarded_head_width()  # line 159: the original guards a here (an unset a reads as 1)
    tw = tp_width()
    # Queries (with the MLA rope part), keys and values, and the output, per token of the local shard.
    widths = a * (head + rope) / tw + 2 * kv_width(attention) + a * head / tw
    local = s / cp * b * widths * bytes_compute
    return 2 * collectives.all_to_all(local, cp)  # forward and backward


def _ring_traffic(attention: Attention) -> sympy.Expr:
    kv = s * b * 2 * kv_width(attention) * bytes_compute
    # K and V all-gathered in the forward, their gradients reduce-scattered in the backward.
    return collectives.all_gather(kv, cp) + collectives.reduce_scatter(kv, cp)


def _linear_state_traffic() -> sympy.Expr:
    state_bytes = 4  # the original's fixed fp32 recurrent state
    head = guarded_head_width()  # line 159: the original guards a here (an unset a reads as 1)
    state = a / tp_width() * head * head * state_bytes
    return 2 * collectives.p2p(state)  # the state passed on, its gradient passed back


def traffic(algorithm: CpAlgorithm, attention: Attention, *, linear: bool = False) -> sympy.Expr:
    """Bytes one rank moves per micro-batch for one layer's CP exchange (``cp_traffic``).

    Args:
        algorithm: the resolved CP algorithm.
        attention: the attention type of the layer.
        linear: a linear-attention layer (``n_linrec ≠ 0``): it passes its
            recurrent state unless the algorithm is Ulysses, which is checked
            first as in the original.
    """
    if algorithm is CpAlgorithm.ULYSSES:
        return _ulysses_traffic(attention)
    if linear:
        return _linear_state_traffic()
    return _ring_traffic(attention)


def _variant_key(algorithm: CpAlgorithm, attention: Attention, linear: bool) -> str:
    if algorithm is CpAlgorithm.ULYSSES:
        return f"ulysses_{attention.value}"
    if linear:
        return "linear_state"
    return f"ring_{attention.value}"


def traffic_formula(algorithm: CpAlgorithm, attention: Attention, *, linear: bool = False) -> Formula:
    """The registered ``Formula`` of ``traffic`` for one variant."""
    return _TRAFFIC[_variant_key(algorithm, attention, linear)]


def _build_traffic() -> dict[str, Formula]:
    out: dict[str, Formula] = {}
    for att in Attention:
        out[f"ulysses_{att.value}"] = Formula(
            name=f"cp_ulysses_{att.value}_traffic_bytes",
            expr=traffic(CpAlgorithm.ULYSSES, att),
            dimension="cp",
            algorithm="ulysses",
            unit="bytes",
            doc=(f"Bytes a rank sends per micro-batch and layer in Ulysses CP with {att.value.upper()} attention: "
                 "all-to-all of queries, keys/values and output, forward and backward."),
            source=f"{SOURCE} lines 157-164 (cp_traffic, Ulysses branch)",
            variant=(("algorithm", "ulysses"), ("attention", att.value)),
        )
        out[f"ring_{att.value}"] = Formula(
            name=f"cp_ring_{att.value}_traffic_bytes",
            expr=traffic(CpAlgorithm.COLOSSALAI, att),
            dimension="cp",
            algorithm="ring",
            unit="bytes",
            doc=(f"Bytes a rank sends per micro-batch and layer in ring CP (colossalai, hybrid) with "
                 f"{att.value.upper()} attention: K/V all-gather forward, reduce-scatter backward."),
            source=f"{SOURCE} lines 157-168 (cp_traffic, default branch)",
            variant=(("algorithm", "ring"), ("attention", att.value)),
        )
    out["linear_state"] = Formula(
        name="cp_linear_state_traffic_bytes",
        expr=traffic(CpAlgorithm.COLOSSALAI, Attention.MHA, linear=True),
        dimension="cp",
        algorithm="linear",
        unit="bytes",
        doc=("Bytes a rank sends per micro-batch for a linear-attention layer under non-Ulysses CP: the fp32 "
             "recurrent state passed on and its gradient passed back; independent of s, b and cp (§10 item 9)."),
        source=f"{SOURCE} lines 165-167 (cp_traffic, n_linrec branch)",
        variant=(("algorithm", "linear"),),
    )
    return out


_TRAFFIC = _build_traffic()


# ---------------------------------------------------------------- topology


def topology_bandwidth() -> sympy.Expr:
    """Effective CP bandwidth in GB/s (``_cp_resolve_topology``).

    Intra-node when ``cp ≤ device_per_node``; else a blend weighted by the
    share ``f = (r − 1)/(cp − 1)`` of ring hops inside a node, with
    ``r = min(⌊cp⌋, ⌊device_per_node⌋)``. The cross-node branch of the
    original (r = 1) is this blend at f = 0, so it needs no branch of its own.
    """
    r = sympy.Min(floor(cp), floor(device_per_node))
    f = (r - 1) / (cp - 1)
    return Piecewise((bw_intra, cp <= device_per_node), (f * bw_intra + (1 - f) * bw_inter, True))


def topology_code() -> sympy.Expr:
    """Index into ``TOPOLOGIES``: 1 intra-node, 2 cross-node, 3 mixed (0 is the record's "none")."""
    r = sympy.Min(floor(cp), floor(device_per_node))
    return Piecewise((1, cp <= device_per_node), (2, sympy.Eq(r, 1)), (3, True))


# ---------------------------------------------------------------- detailed record

#: The 16 fields of the original's ``CPCommunicationCost``, in its order.
RECORD_FIELDS: tuple[str, ...] = (
    "kv_volume_per_step", "total_kv_volume", "comm_volume", "ring_steps", "ring_directions",
    "total_comm_time", "exposed_comm_time", "overlap_ratio", "effective_bandwidth", "topology",
    "cp_degree", "seq_len", "batch_size", "attention_type", "kv_dim", "cp_algo",
)

_OVERLAP = sympy.Rational(1, 2)  # the record's fixed overlap_ratio (line 106)


def _active(expr: sympy.Expr) -> sympy.Expr:
    """*expr* where CP communicates, 0 at ``cp ≤ 1`` (``_cp_comm_zero``, lines 75-86)."""
    return Piecewise((0, cp <= 1), (expr, True))


def _time_ms(volume: sympy.Expr) -> sympy.Expr:
    return volume / (topology_bandwidth() * 10**9) * 10**3


def _record_volumes(family: str, attention: Attention) -> tuple[sympy.Expr, sympy.Expr, sympy.Expr]:
    """(kv_volume_per_step, total_kv_volume, ring_steps) of the record."""
    if family == "ulysses":
        # Raw dh, no K/V-head width, no bytes (lines 125-132; §10 item 7).
        per_a2a = collectives.all_to_all(s * b * (a / tp_width()) * dh * 2, cp)
        return per_a2a, 2 * per_a2a, sympy.Integer(0)
    kv_bytes = 4  # fixed K+V byte count of the ring record (line 139)
    step = (s / cp) * b * kv_width(attention) * kv_bytes
    return step, step * (cp - 1) * 2, floor(cp - 1)


def _record_key(family: str, attention: Attention) -> str:
    return "ulysses" if family == "ulysses" else f"ring_{attention.value}"


def record_formulas(algorithm: CpAlgorithm, attention: Attention, *, linear: bool = False) -> dict[str, Formula]:
    """The numeric fields of ``cp_comm_layer_detailed`` for one variant, by field name.

    Labels (``topology``, ``attention_type``, ``cp_algo``) come from
    ``cp_topology_code`` and the variant itself; ``cp_degree``, ``seq_len`` and
    ``batch_size`` are the inputs truncated to integers.
    """
    family = algorithm.family
    key = _record_key(family, attention)
    return {
        "kv_volume_per_step": _RECORD[f"{key}_kv_volume_per_step"],
        "total_kv_volume": _RECORD[f"{key}_total_kv_volume"],
        "comm_volume": _RECORD[f"comm_{_variant_key(algorithm, attention, linear)}"],
        "ring_steps": _RECORD[f"{family}_ring_steps"],
        "ring_directions": _RECORD["ring_directions"],
        "total_comm_time": _RECORD[f"{key}_total_comm_time"],
        "exposed_comm_time": _RECORD[f"{key}_exposed_comm_time"],
        "overlap_ratio": _RECORD["overlap_ratio"],
        "effective_bandwidth": _RECORD["effective_bandwidth"],
        "topology": _RECORD["topology"],
        "kv_dim": _RECORD[f"kv_dim_{attention.value}"],
    }


def _build_record() -> dict[str, Formula]:
    src = f"{SOURCE} lines 171-207 (cp_comm_layer_detailed)"
    out: dict[str, Formula] = {}

    def add(key: str, name: str, expr: sympy.Expr, algorithm: str, unit: str, doc: str, source: str = src) -> None:
        out[key] = Formula(name=name, expr=expr, dimension="cp", algorithm=algorithm, unit=unit, doc=doc,
                           source=source)

    add("overlap_ratio", "cp_record_overlap_ratio", _OVERLAP, "any", "1",
        "Share of the CP exchange the record assumes hidden behind attention compute (fixed 0.5, also at cp <= 1).",
        f"{SOURCE} lines 81 and 106")
    add("ring_directions", "cp_record_ring_directions_count", _active(sympy.Integer(2)), "any", "count",
        "Directions the record counts (forward and backward); 0 at cp <= 1.", f"{SOURCE} lines 79, 132, 142")
    add("effective_bandwidth", "cp_record_effective_bandwidth_gbps", _active(topology_bandwidth()), "any", "GB/s",
        "Effective CP bandwidth of the topology blend; 0 at cp <= 1.", f"{SOURCE} lines 58-72, 81, 117")
    add("topology", "cp_record_topology_code", _active(topology_code()), "any", "1",
        "Topology as an index into TOPOLOGIES: 0 none (cp <= 1), 1 intra-node, 2 cross-node, 3 mixed.",
        f"{SOURCE} lines 58-72, 82")
    for family in ("ulysses", "ring"):
        steps = _record_volumes(family, Attention.MHA)[2]
        add(f"{family}_ring_steps", f"cp_{family}_record_ring_steps_count", _active(steps), family, "count",
            f"Ring steps the {family} record counts: cp - 1 for a ring, 0 for Ulysses; 0 at cp <= 1.")
        # The Ulysses record ignores the attention type; the ring record reads its K/V width.
        for att in (Attention.MHA,) if family == "ulysses" else tuple(Attention):
            step, total, _ = _record_volumes(family, att)
            key = _record_key(family, att)
            label = "" if family == "ulysses" else f" with {att.value.upper()} attention"
            unit, what = ("elements", "elements (no bytes: §10 item 7)") if family == "ulysses" else (
                "bytes", "bytes at a fixed 4 bytes for K+V (§10 item 7)")
            lines = "lines 125-132" if family == "ulysses" else "lines 135-142"
            add(f"{key}_kv_volume_per_step", f"cp_{key}_record_kv_volume_per_step_{unit}", _active(step), family,
                unit, f"K/V volume of one {family} step per rank and micro-batch{label}, in {what}.",
                f"{SOURCE} {lines}")
            add(f"{key}_total_kv_volume", f"cp_{key}_record_total_kv_volume_{unit}", _active(total), family, unit,
                f"Total K/V volume of the {family} record per rank and micro-batch{label}, in {what}.",
                f"{SOURCE} {lines}")
            add(f"{key}_total_comm_time", f"cp_{key}_record_total_comm_time_ms", _active(_time_ms(total)), family,
                "ms", f"The {family} record's total_kv_volume{label} over the effective bandwidth, in milliseconds.",
                f"{SOURCE} lines 103-108")
            add(f"{key}_exposed_comm_time", f"cp_{key}_record_exposed_comm_time_ms",
                _active((1 - _OVERLAP) * _time_ms(total)), family, "ms",
                f"The part of the {family} record's time{label} not hidden at the fixed 0.5 overlap, in milliseconds.",
                f"{SOURCE} lines 106-108")
    for att in Attention:
        add(f"kv_dim_{att.value}", f"cp_record_{att.value}_kv_dim_elements", _active(floor(kv_width(att))), att.value,
            "elements", f"The record's kv_dim: the {att.value.upper()} K/V width per TP rank truncated to an "
            "integer; 0 at cp <= 1.", f"{SOURCE} lines 84, 120, 196")
    for key, traffic_f in _TRAFFIC.items():
        add(f"comm_{key}", traffic_f.name.replace("_traffic_bytes", "_record_comm_volume_bytes"),
            _active(traffic_f.expr), traffic_f.algorithm, "bytes",
            f"The record's comm_volume: {traffic_f.name} where cp > 1, 0 at cp <= 1 (so no linear-state volume "
            "at cp = 1).", f"{SOURCE} lines 78, 132, 142")
    return out


_RECORD = _build_record()

FORMULAS: tuple[Formula, ...] = (
    *_TRAFFIC.values(),
    Formula(
        name="cp_topology_effective_bandwidth_gbps",
        expr=topology_bandwidth(),
        dimension="cp",
        algorithm="topology",
        unit="GB/s",
        doc="Effective bandwidth a CP ring sees, blending intra- and inter-node links by the share of hops inside a node.",
        source=f"{SOURCE} lines 58-72 (_cp_resolve_topology)",
    ),
    Formula(
        name="cp_topology_code",
        expr=topology_code(),
        dimension="cp",
        algorithm="topology",
        unit="1",
        doc="CP topology as an index into TOPOLOGIES: 1 intra-node, 2 cross-node, 3 mixed.",
        source=f"{SOURCE} lines 58-72 (_cp_resolve_topology)",
    ),
    *_RECORD.values(),
)
