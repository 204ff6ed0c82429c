"""Which layouts can run a model: the constraints, checked in order over one layout or a whole batch at once.

Each constraint is a rule written once, in NumPy form (:func:`_constraint_rules`); :func:`validate` runs
them on a batch of one, and a long batch looks each layout's answer up in a table of the rules over the
key values it spans.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from ..runtime.inputs import DEVICES_MAX, whole
from ._batch import ARRAY_KEYS, WHOLE_DP_GROUP, LayoutBatch, key_columns
from ._derivation import expert_degrees
from ._layout import Layout, LayoutError, positive_int
from ._model import ModelConfig
from ._pipeline import (accounted, accounted_split_broken, chunk_layer_counts, even_split_leaves_empty,
                        offset_pipeline, recompute_list_error, slot_layers)

__all__ = ["LAYOUT_CONSTRAINTS", "check_batch", "constraint_keys", "layout_violations", "validate", "validate_batch",
           "validate_one", "violation_message"]

#: Names of the constraints a layout must meet, in the order :func:`validate` checks them;
#: :func:`layout_violations` gives, per layout, the index of the first one it breaks.
LAYOUT_CONSTRAINTS = (
    "devices", "heads", "kv_heads", "sequence", "ulysses_heads", "virtual_pipeline", "pipeline_split",
    "dense_ep", "experts", "ep_within_dp_tp", "expert_dp_with_etp", "ep_divides_d", "ep_divides_dt",
    "expert_width", "optimizer_shard", "recompute_list_length", "recompute_list_layers",
)


def _check_devices(devices: int | None) -> None:
    if devices is not None:
        whole("devices", devices, minimum=1, maximum=DEVICES_MAX, error=LayoutError)


def _succeeds(compute: Any) -> bool:
    try:
        compute()
    except LayoutError:
        return False
    return True


def _constraint_rules(model: ModelConfig, batch: LayoutBatch,
                      devices: int | None) -> list[tuple[str, tuple[str, ...], Callable[..., Any]]]:
    """The constraints of :data:`LAYOUT_CONSTRAINTS` that apply, in order, as ``(name, keys read, rule)``.

    ``rule(*keys)`` takes the keys it reads (whole numbers or arrays, broadcast together) and
    says where they break the constraint (a bool or bool array). It is elementwise: a
    layout's answer depends on its own keys only, so it may be evaluated on a table of key
    values instead of the layouts (:func:`layout_violations`). A constraint is only
    meaningful where the earlier ones hold (as :func:`validate`'s checks run in order);
    elsewhere its rule may say anything, but never fails to compute.
    """
    s = batch.s or model.s
    total = model.n_lay + model.n_mtp
    rules: list[tuple[str, tuple[str, ...], Callable[..., Any]]] = []
    if devices is not None:
        rules.append(("devices", ("d", "t", "cp", "p"), lambda d, t, cp, p: d * t * cp * p != devices))
    rules.append(("heads", ("t",), lambda t: model.a % t != 0))
    if model.dc_kv == 0:
        kv = model.n_kv
        rules.append(("kv_heads", ("t",), lambda t: np.where(kv >= t, kv % t != 0, t % kv != 0)))
    rules.append(("sequence", ("cp",), lambda cp: s % cp != 0))
    if batch.cp_algo == "ulysses_cp":
        rules.append(("ulysses_heads", ("t", "cp"), lambda t, cp: (model.a // t) % cp != 0))
    rules.append(("virtual_pipeline", ("p", "vp"), lambda p, vp: (vp > 1) & (p == 1)))

    def pipeline_split(p: Any, vp: Any) -> Any:
        if any(accounted(model)):  # Megatron-Core's split: the counted layers divide over p, then vp
            broken = accounted_split_broken(model, p, vp)
        else:
            broken = even_split_leaves_empty(total, p, vp)
        if batch.offset is None:
            return broken
        offset_applies, _ = batch.stage_lists_apply(p, vp)
        shape = offset_pipeline(batch.offset)
        offset_fits = (p == shape[0]) & (vp == shape[1]) & \
            (shape[0] >= 1 and _succeeds(lambda: slot_layers(model, *shape, batch.offset)))
        return np.where(offset_applies, np.logical_not(offset_fits), broken)

    rules.append(("pipeline_split", ("p", "vp"), pipeline_split))

    if model.n_exp <= 1:
        rules.append(("dense_ep", ("ep",), lambda ep: ep != 1))
    else:
        rules += [
            ("experts", ("ep",), lambda ep: model.n_exp % ep != 0),
            ("ep_within_dp_tp", ("ep", "d", "t"), lambda ep, d, t: ep > d * t),
            ("expert_dp_with_etp", ("etp", "d", "t", "cp", "ep"),
             lambda etp, d, t, cp, ep: (etp > 1) & ((d * t * cp) % (etp * ep) != 0)),
            ("ep_divides_d", ("etp", "ep", "d"), lambda etp, ep, d: ~(etp > 1) & (ep <= d) & (d % ep != 0)),
            ("ep_divides_dt", ("etp", "ep", "d", "t"),
             lambda etp, ep, d, t: ~(etp > 1) & (ep > d) & ((d * t) % ep != 0)),
            ("expert_width", ("d", "t", "cp", "ep", "etp"),
             lambda d, t, cp, ep, etp: model.hff_exp % expert_degrees(d, t, cp, ep, etp)[0] != 0),
        ]
    rules.append(("optimizer_shard", ("d", "os"),
                  lambda d, os: (os != WHOLE_DP_GROUP) & (d % np.where(os != WHOLE_DP_GROUP, os, 1) != 0)))

    plan = batch.recompute
    if plan.full_per_stage is not None:
        stages = len(plan.full_per_stage)

        def list_length(p: Any, vp: Any) -> Any:
            return batch.stage_lists_apply(p, vp)[1] & (p != stages)

        def list_layers(p: Any, vp: Any) -> Any:
            # The list's own pipeline depth fixes p; the stage sizes then vary only with vp.
            listed = batch.stage_lists_apply(p, vp)[1] & (p == stages)
            if np.ndim(vp):
                chunk_values = np.unique(vp[listed]).tolist()  # a single True or False picks all or none
            else:
                chunk_values = [int(vp)] if np.any(listed) else []
            too_many: Any = False
            for chunks in chunk_values:
                with_offset, _ = batch.stage_lists_apply(stages, chunks)
                try:
                    slots = slot_layers(model, stages, chunks, batch.offset if with_offset else None)
                except LayoutError:
                    continue  # pipeline_split rejects these layouts first
                if recompute_list_error(plan, stages, slots.sum(axis=1).tolist()) is not None:
                    too_many = too_many | (listed & (vp == chunks))
            return too_many

        rules += [("recompute_list_length", ("p", "vp"), list_length),
                  ("recompute_list_layers", ("p", "vp"), list_layers)]
    return rules


def constraint_keys(model: ModelConfig, batch: LayoutBatch, devices: int | None = None) -> frozenset[str]:
    """The layout keys the constraints of *model* and *batch*'s settings read (:func:`validate_batch`'s):
    layouts that agree on these keys are all valid or break the same first constraint."""
    return frozenset(key for _name, reads, _rule in _constraint_rules(model, batch, devices) for key in reads)


def _violation_message(model: ModelConfig, layout: Layout, devices: int | None, constraint: str) -> str:
    """The error text of *constraint* for one layout that breaks it, naming the values."""
    d, t, p, cp, ep = layout.d, layout.t, layout.p, layout.cp, layout.ep
    if constraint == "devices":
        return (f"d·t·cp·p must equal the device count: {d}·{t}·{cp}·{p} = {layout.devices}, "
                f"devices = {devices}")
    if constraint == "heads":
        return f"t must divide the attention heads a: a = {model.a}, t = {t}"
    if constraint == "kv_heads":
        return (f"t must divide the KV heads n_kv (or n_kv divide t, KV heads replicated): "
                f"n_kv = {model.n_kv}, t = {t}")
    if constraint == "sequence":
        return f"cp must divide the sequence length s: s = {layout.s or model.s}, cp = {cp}"
    if constraint == "ulysses_heads":
        return (f"Ulysses CP splits each TP rank's heads: cp must divide a/t = {model.a}/{t} = "
                f"{model.a // t}, cp = {cp}")
    if constraint == "virtual_pipeline":
        return f"vp > 1 (virtual pipeline chunks) needs p > 1: vp = {layout.vp}, p = {p}"
    if constraint == "pipeline_split":
        try:
            chunk_layer_counts(model, layout)
        except LayoutError as exc:
            return str(exc)
    if constraint == "dense_ep":
        return f"ep must be 1 for a dense model (n_exp = {model.n_exp}), got ep = {ep}"
    if constraint == "experts":
        return f"ep must divide the routed experts n_exp: n_exp = {model.n_exp}, ep = {ep}"
    if constraint == "ep_within_dp_tp":
        return f"ep <= d·t: the experts spread over a stage's DP×TP ranks; ep = {ep}, d·t = {d}·{t} = {d * t}"
    if constraint == "expert_dp_with_etp":
        return (f"etp·ep must divide d·t·cp (expert DP = d·t·cp/(etp·ep)): etp = {layout.etp}, "
                f"ep = {ep}, d·t·cp = {d * t * cp}")
    if constraint == "ep_divides_d":
        return f"ep must divide d (expert DP = d/ep while ep <= d): d = {d}, ep = {ep}"
    if constraint == "ep_divides_dt":
        return f"ep must divide d·t (expert DP = d·t/ep once ep > d): d·t = {d * t}, ep = {ep}"
    if constraint == "expert_width":
        t_exp, _ = expert_degrees(d, t, cp, ep, layout.etp)
        return (f"the expert TP degree t_exp must divide the expert width hff_exp: "
                f"hff_exp = {model.hff_exp}, t_exp = {int(t_exp)}")
    if constraint == "optimizer_shard":
        return f"os (optimizer shard ranks) must divide d: d = {d}, os = {layout.os}"
    if constraint in ("recompute_list_length", "recompute_list_layers"):
        layers = None
        if len(layout.recompute.full_per_stage or ()) == p:  # the stages' sizes matter once the length fits
            layers = [sum(row) for row in chunk_layer_counts(model, layout)]
        message = recompute_list_error(layout.recompute, p, layers)
        if message is not None:
            return message
    raise AssertionError(f"layout {layout} breaks no constraint {constraint!r}")  # pragma: no cover


_CONSTRAINT_CODES = {name: code for code, name in enumerate(LAYOUT_CONSTRAINTS)}

#: Largest table of key values :func:`layout_violations` evaluates the rules on, instead of the layouts.
_RULE_TABLE_LIMIT = 1 << 16

#: The first broken constraint of a layout that breaks none, as uint16: -1 once viewed as int16.
_NO_VIOLATION = np.uint16(0xFFFF)


def _key_grid(keys: Mapping[str, Any], varying: Sequence[str], tops: Sequence[int]) -> dict[str, Any]:
    """*keys* with each *varying* key replaced by its value in every combination of values ``0..top-1``.

    The first key varies slowest, so that combination ``((v0·top1 + v1)·top2 + v2)…`` is entry
    ``v0, v1, v2, …``. Keys are at least 1 (``os`` at least 0): a 0 stands in as 1, so that no
    entry divides by it; no layout reads those entries.
    """
    grid = dict(keys)
    for i, key in enumerate(varying):
        values = np.arange(tops[i], dtype=np.int64)
        if key != "os":
            values[0] = 1
        grid[key] = np.broadcast_to(values.reshape((-1,) + (1,) * (len(varying) - 1 - i)), tuple(tops)).ravel()
    return grid


#: Layouts per block of :func:`layout_violations`: its per-layout temporaries stay in cache.
_VALIDATION_BLOCK = 1 << 16

#: Batches shorter than this are checked rule by rule over their layouts (no table pays off).
_SMALL_BATCH = 1 << 10

#: Tables of first broken constraints already built, by model, run settings, device count, keys
#: and their ranges: a searcher checking its layouts block by block builds each once.
_RULE_TABLES: dict[tuple[Any, ...], np.ndarray] = {}
_RULE_TABLES_KEPT = 256


def _rule_table(model: ModelConfig, batch: LayoutBatch, devices: int | None, keys: Mapping[str, Any],
                varying: tuple[str, ...], tops: list[int],
                members: Sequence[tuple[int, tuple[str, ...], Callable[..., Any]]]) -> np.ndarray:
    """The first constraint of *members* broken at each combination of the *varying* keys' values (cached)."""
    settings = batch.settings()
    shared = tuple((key, int(value)) for key, value in keys.items() if np.ndim(value) == 0)
    cache_key = (model, settings, devices, shared, varying, tuple(tops))
    table = _RULE_TABLES.get(cache_key)
    if table is None:
        grid = _key_grid(keys, varying, tops)
        size = len(next(iter(grid[key] for key in varying)))
        table = np.full(size, _NO_VIOLATION)
        for code, reads, rule in reversed(members):  # the earliest broken constraint is written last
            table[np.broadcast_to(rule(*(grid[key] for key in reads)), (size,))] = code
        if len(_RULE_TABLES) >= _RULE_TABLES_KEPT:
            _RULE_TABLES.clear()
        _RULE_TABLES[cache_key] = table
    return table


def layout_violations(model: ModelConfig, batch: LayoutBatch, devices: int | None = None) -> np.ndarray:
    """Per layout, the first constraint it breaks: an index into :data:`LAYOUT_CONSTRAINTS`, or -1.

    The constraints are :func:`validate`'s, checked in its order over the whole batch at once
    (:func:`_violation_blocks` block by block; a short batch, such as the one layout of
    :func:`validate`, runs every rule over its layouts at once).

    Raises:
        LayoutError: for a device count that is not a whole number >= 1.
    """
    _check_devices(devices)
    n = len(batch)
    if n >= _SMALL_BATCH:
        first = np.empty(n, dtype=np.int16)
        for rows, codes in _violation_blocks(model, batch, devices, block=_VALIDATION_BLOCK):
            first[rows] = codes
        return first
    keys = key_columns(batch, compact=False)
    first = np.full(n, -1, dtype=np.int16)
    for name, reads, rule in reversed(_constraint_rules(model, batch, devices)):  # the earliest is written last
        mask = rule(*[keys[key] for key in reads])
        if np.ndim(mask) == 0:
            if mask:
                first[:] = _CONSTRAINT_CODES[name]
        else:
            first[mask] = _CONSTRAINT_CODES[name]
    return first


def _violation_blocks(model: ModelConfig, batch: LayoutBatch, devices: int | None = None, *,
                            block: int = _VALIDATION_BLOCK) -> Iterator[tuple[slice, np.ndarray]]:
    """:func:`layout_violations` of consecutive blocks of *block* layouts: ``(rows, codes)`` per block.

    Each block's keys are read once, and its temporaries stay in cache.

    How: keys every layout shares (:func:`key_columns`) are single values, and the rules
    (:func:`_constraint_rules`) that read the same varying keys form a group. When those
    keys' values in a block span a small table (their ranges multiplied: at most
    ``_RULE_TABLE_LIMIT`` entries and half the block), the group's rules run once per entry
    (the table is kept for later blocks and batches of the same model and settings) and each
    layout looks its answer up — one gather instead of integer divisions per rule and layout,
    and exact, because each rule is elementwise. Otherwise the rules run over the layouts.

    Raises:
        LayoutError: for a device count that is not a whole number >= 1, or a block below 1.
    """
    _check_devices(devices)
    positive_int("block", block)
    keys = key_columns(batch, compact=True)
    groups: dict[tuple[str, ...], list[tuple[int, tuple[str, ...], Callable[..., Any]]]] = {}
    for name, reads, rule in _constraint_rules(model, batch, devices):
        varying = tuple(key for key in ARRAY_KEYS if key in reads and np.ndim(keys[key]))
        groups.setdefault(varying, []).append((_CONSTRAINT_CODES[name], reads, rule))
    constant = _NO_VIOLATION  # the first broken constraint the shared values decide alone
    for code, reads, rule in groups.pop((), []):
        if rule(*(keys[key] for key in reads)):
            constant = np.uint16(code)
            break
    tables: dict[tuple[Any, ...], np.ndarray] = {}
    n = len(batch)
    for start in range(0, n, block):
        rows = slice(start, min(start + block, n))
        part = {key: value[rows] if np.ndim(value) else value for key, value in keys.items()}
        out = np.full(rows.stop - rows.start, constant)
        for varying, members in groups.items():
            tops = [int(part[key].max()) + 1 for key in varying]
            if int(np.prod(tops)) <= min(_RULE_TABLE_LIMIT, len(out) // 2):
                table = tables.get((varying, *tops))
                if table is None:
                    table = tables[(varying, *tops)] = _rule_table(model, batch, devices, keys, varying, tops, members)
                index = part[varying[0]]
                for top, key in zip(tops[1:], varying[1:]):
                    index = index * top + part[key]
                np.minimum(out, np.take(table, index, mode="clip"), out=out)  # in range: the table spans the maxima
            else:
                codes = np.full(len(out), _NO_VIOLATION)
                for code, reads, rule in reversed(members):  # the earliest broken constraint is written last
                    codes[np.broadcast_to(rule(*(part[key] for key in reads)), codes.shape)] = code
                np.minimum(out, codes, out=out)
        yield rows, out.view(np.int16)


def validate_batch(model: ModelConfig, batch: LayoutBatch, devices: int | None = None) -> np.ndarray:
    """A bool array: which layouts of *batch* can run *model* (the constraints of :func:`validate`).

    Raises:
        LayoutError: for a device count that is not a whole number >= 1.
    """
    return layout_violations(model, batch, devices) < 0


def violation_message(model: ModelConfig, batch: LayoutBatch, index: int, devices: int | None = None) -> str | None:
    """The error :func:`validate` gives for layout *index* of *batch*, or ``None`` when it is valid."""
    layout = batch.layout(index)
    code = int(layout_violations(model, batch.subset([index]), devices)[0])
    return None if code < 0 else _violation_message(model, layout, devices, LAYOUT_CONSTRAINTS[code])


def validate(model: ModelConfig, layout: Layout, devices: int | None = None) -> None:
    """Check that *layout* can run *model*.

    Constraints (each error names it and the values; :data:`LAYOUT_CONSTRAINTS` in this
    order, the same rules as :func:`validate_batch`):

    * ``d·t·cp·p == devices`` when a device count is given;
    * ``t`` divides the heads ``a``; for non-MLA attention ``t`` divides ``n_kv`` when
      ``n_kv >= t``, else ``n_kv`` divides ``t`` (KV heads replicated, as MQA);
    * ``cp`` divides ``s``; Ulysses CP splits each TP rank's heads: ``cp`` divides ``a / t``;
    * ``vp > 1`` needs ``p > 1``; the stage split of :func:`chunk_layer_counts` holds
      (``p·vp <= n_lay + n_mtp`` or a consistent offset);
    * a dense model has ``ep = 1``; a MoE model has ``ep`` dividing ``n_exp`` and
      ``ep <= d·t`` (the original's ``moe_valid``), with an exact expert DP degree
      (:func:`expert_degrees`: ``ep`` divides ``d`` while ``ep <= d``, else ``d·t``; with
      ``etp > 1``, ``etp·ep`` divides ``d·t·cp``), and ``t_exp`` divides ``hff_exp``
      (the original's C1, C2);
    * an explicit ``os`` divides ``d``;
    * a per-stage recompute list has ``p`` entries, each at most its stage's layers.

    Raises:
        LayoutError: for the first constraint that fails.
    """
    validate_one(model, layout, LayoutBatch.from_layouts([layout]), devices)


def validate_one(model: ModelConfig, layout: Layout, batch: LayoutBatch, devices: int | None) -> None:
    """:func:`validate` for *layout*, given with the batch of one it makes (``LayoutBatch.from_layouts([layout])``).

    Raises:
        LayoutError: for the first constraint that fails.
    """
    code = int(layout_violations(model, batch, devices)[0])
    if code >= 0:
        raise LayoutError(_violation_message(model, layout, devices, LAYOUT_CONSTRAINTS[code]))


def check_batch(model: ModelConfig, batch: LayoutBatch) -> None:
    """Check every layout of *batch* once, deriving nothing.

    Raises:
        LayoutError: naming the first invalid layout, its index, the constraint and how many are
            invalid (filter with :func:`validate_batch`).
    """
    codes = layout_violations(model, batch)
    if len(codes) and codes.max() >= 0:  # one reduction over valid batches, the usual case
        invalid = np.flatnonzero(codes >= 0)
        index = int(invalid[0])
        layout = batch.layout(index)
        message = _violation_message(model, layout, None, LAYOUT_CONSTRAINTS[codes[index]])
        raise LayoutError(f"layout {index} of the batch ({layout}): {message}; {invalid.size} of {len(batch)} "
                          f"layouts are invalid (validate_batch gives the mask)")
