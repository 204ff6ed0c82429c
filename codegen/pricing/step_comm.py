"""The time family's communication as the step time reads it: one layout chunk's seconds of the bottleneck
stage by dimension (``time_family_comm``), and what each of its items follows from in a search
(``time_item_keys``).

Public API (re-exported by ``codegen.pricing.step_time``)::

    time_family_comm(model, system, precision="bf16", *, lowp_primary_weights=True, ep_dispatcher="alltoall")
        -> comm(chunk[, dimensions]) or None;  comm.stage_seconds(chunk), comm.item_keys
    time_item_keys(model) -> {"dim.collective": frozenset of layout keys and run settings}
    gathered_in(model, precision, lowp_primary_weights) -> the model as the time family prices its gathers
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import numpy as np

import generated
from symbolic.vocabulary import DEFAULT_EP_DISPATCHER, EP_DISPATCHERS, PRECISIONS, SEARCH_KEYS, SEARCH_SETTINGS

from ..configs import ModelConfig
from ..runtime import inputs
from .engine import term_arguments
from .low_precision import precision_name

__all__ = ["gathered_in", "time_family_comm", "time_item_keys"]


def gathered_in(model: ModelConfig, precision: str, lowp_primary_weights: bool) -> ModelConfig:
    """*model* with its parameter width at the width a *precision* run gathers its weights in over the
    data-parallel ranks (``Precision.gather_bytes``, where its primary weights are the quantized tensors); the
    time family reads ``bytes_p`` for those gathers alone."""
    gather = PRECISIONS[precision_name("precision", precision)].gather_bytes
    if gather and inputs.flag("lowp_primary_weights", lowp_primary_weights):
        return dataclasses.replace(model, bytes_p=gather)
    return model


def time_family_comm(model: ModelConfig, system: str, precision: str = "bf16", *, lowp_primary_weights: bool = True,
                     ep_dispatcher: str = DEFAULT_EP_DISPATCHER) -> Callable[[Any], Mapping[str, np.ndarray]] | None:
    """The exposed-communication callable of the time family, or ``None`` when this build lacks it.

    A run in a low *precision* whose primary weights are quantized (*lowp_primary_weights*, the recipes' default:
    docs/memory.md, "Low precision") gathers them over the data-parallel ranks at ``Precision.gather_bytes`` (FP8 1
    byte a parameter), not at the model's width; its experts' tokens move on *ep_dispatcher* (``EP_DISPATCHERS``).

    ``comm(chunk)`` prices ``chunk.batch`` (layouts of one run setting, ``chunk.setting``: recompute
    mode, ZeRO level) with ``codegen.pricing.time.TimePricer`` — one pricer per setting, FSDP for
    ZeRO level 3 — and returns its ``by_dimension`` seconds of the bottleneck stage;
    ``comm(chunk, dimensions)`` prices those dimensions only (a search's floors).
    """
    try:
        from .time import TIME_DIMENSIONS, TimePricer
    except ImportError:
        return None
    model = gathered_in(model, precision, lowp_primary_weights)
    ep_dispatcher = inputs.one_of("ep_dispatcher", ep_dispatcher, EP_DISPATCHERS)
    pricers: dict[tuple[int, str], Any] = {}

    def pricer(setting: Any) -> Any:
        key = (setting.zero, setting.recompute)
        if key not in pricers:
            pricers[key] = TimePricer(model, system=system, fsdp=setting.zero == 3, recompute=setting.recompute,
                                      ep_dispatcher=ep_dispatcher)
        return pricers[key]

    def comm(chunk: Any, dimensions: tuple[str, ...] | None = None) -> Mapping[str, np.ndarray]:
        """By dimension, the seconds of the bottleneck stage; with *dimensions*, of the stage with the most seconds
        of those dimensions' collectives, the only ones priced (``TimePricer.price_batch``): a lower bound."""
        return pricer(chunk.setting).price_batch(chunk.batch, validated=True,
                                                 dimensions=dimensions or TIME_DIMENSIONS).by_dimension

    def stage_seconds(chunk: Any) -> Mapping[str, np.ndarray]:
        """Every stage's seconds per item ``"dim.collective"``: ``(n, P_max)``, NaN past a layout's last stage."""
        return pricer(chunk.setting).price_batch(chunk.batch, validated=True, per_stage=True).stages["time_s"]

    comm.stage_seconds = stage_seconds  # type: ignore[attr-defined]
    comm.item_keys = time_item_keys(model)  # type: ignore[attr-defined]
    return comm


#: Fields that follow from a search's run settings (the ZeRO level's switches ``op``, ``grad_shard``, ``fsdp``;
#: the recompute mode; the CP algorithm), by the setting (codegen.configs._derivation: ``_FIELD_RULES`` reading
#: ``batch.op`` / ``batch.grad_shard``, ``_shared_fields``).
_SETTING_FIELDS = {
    **dict.fromkeys(("comm_d_non_exp", "comm_d_exp", "os_max_shard", "shard_p_os_non_exp_partial", "shard_p_os_exp",
                     "shard_p_os_exp_partial", "shard_embed", "gather_embed", "grad_shard_as_params"), "zero"),
    **dict.fromkeys(("rec_op", "gather"), "recompute"),
    "cp_algo": "cp_algo",
}
#: Run fields a search keeps as the model file sets them for every layout, and the expert dispatcher's switch.
_RUN_FIELDS = frozenset({"reshards", "ep_dedup"})
#: What an item follows from when one of its arguments is none of the known kinds: everything.
_EVERYTHING = frozenset(SEARCH_KEYS) | frozenset(SEARCH_SETTINGS)


def time_item_keys(model: ModelConfig) -> dict[str, frozenset[str]]:
    """Per item ``"dim.collective"`` of the time family, what its seconds per stage follow from in a search:
    layout keys (``t, cp, p, vp, d, ep, etp, b, m``) and run settings (``zero``, ``recompute``, ``cp_algo``).

    From the declarations, not from numbers: the item's generated forms (calls, S, ranks) read their
    ``arguments``; a layout field among them follows from the keys ``LAYOUT_FIELD_KEYS`` declares (a test of
    the fused pricer holds the declaration to the rules), a ZeRO switch from its source field
    (``stages.BIND_SOURCES``), a field of the run settings from its setting (``_SETTING_FIELDS``), ``P_ne`` /
    ``P_r`` from the ``params_*`` forms' arguments, a model field or a run field the search keeps
    (``_RUN_FIELDS``) from nothing that varies; any other argument from everything. A stage's layer counts,
    which weigh every item, follow from what ``TimePricer.LAYER_KEYS`` says (``(p, vp)`` and the recompute mode).
    NCCL's pick reads S, the ranks and the group's placement (``TimePricer`` checks it), which follows from the
    fields ``TimePricer`` places the group by (``TimePricer.placement_fields``: ``t, cp, d, p`` for the dense
    groups, ``t_exp, ep, d, t, cp, p`` for the expert ones); the pricer is built per ZeRO level and recompute mode
    (``time_family_comm``) and reads ``fsdp`` only through the fields. Layouts of one search that agree on an
    item's keys and settings have the same seconds per stage for it.
    """
    from ..configs import LAYOUT_FIELD_KEYS
    from .stages import BIND_SOURCES
    from .time import ITEMS, TimePricer

    constants = set(model.fields()) | _RUN_FIELDS
    params: dict[str, set[str]] = {"P_ne": set(), "P_r": set()}
    for name, meta in generated.FORMULAS.items():
        if name.startswith("params_"):
            params["P_r" if "routed" in name else "P_ne"] |= set(meta["arguments"])

    def keys(argument: str, seen: frozenset[str] = frozenset()) -> set[str]:
        if argument in seen:
            return set(_EVERYTHING)
        seen = seen | {argument}
        if argument in ("n_layers_stage", "n_moe_layers_stage"):
            return set(TimePricer.LAYER_KEYS)
        if argument in params:
            return set().union(*(keys(a, seen) for a in params[argument]))
        if argument in BIND_SOURCES:
            return set().union(*(keys(a, seen) for a in BIND_SOURCES[argument]))
        found = set()
        if argument in _SETTING_FIELDS:
            found.add(_SETTING_FIELDS[argument])
        if argument in LAYOUT_FIELD_KEYS:
            found |= set(LAYOUT_FIELD_KEYS[argument])
        elif argument not in _SETTING_FIELDS and argument not in constants:
            return set(_EVERYTHING)
        return found

    # A group's placement follows from the fields TimePricer places it by, each from the keys it is derived from.
    placement = {group: set().union(*(LAYOUT_FIELD_KEYS[field] for field in fields))
                 for group, fields in TimePricer.placement_fields().items()}
    out = {}
    for dim, coll, group, _ in ITEMS:
        found: set[str] = placement[group] | set(TimePricer.LAYER_KEYS)  # the stage's layers weigh it
        for what in ("calls_count", "msg_bytes", "ranks_count"):
            for argument in term_arguments(f"{dim}_{coll}_stage_{what}"):
                found |= keys(argument)
        out[f"{dim}.{coll}"] = frozenset(found)
    return out
