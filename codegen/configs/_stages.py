"""The stages of a pipeline: the layer types the stage walk visits, and per stage how many layers of each kind."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from symbolic.vocabulary import STAGE_COUNT_NAMES, LayerType

from ._batch import LayoutBatch
from ._layout import Layout, LayoutError, RecomputePlan, normalise_offset, parse_recompute, positive_int
from ._model import ModelConfig
from ._pipeline import chunk_layer_counts, full_recompute_per_stage, recompute_list_error, slot_layers
from ._validation import validate

__all__ = ["LAYER_KIND_NAMES", "batch_stage_counts", "build_stages", "pipeline_stage_counts", "stage_layer_kinds",
           "stage_layers"]

#: What :func:`stage_layer_kinds` counts per stage.
LAYER_KIND_NAMES = ("n_dense", "n_window", "n_mtp_heads")


def build_stages(model: ModelConfig, layout: Layout) -> list[list[list[str]]]:
    """The pipeline layout the stage walk visits: ``stages[stage][chunk]`` = layer types.

    Body layers per chunk as :func:`chunk_layer_counts` says (the MTP layers are the last in
    model order, so they land on the last stage's last chunk); the embedding opens stage 0's
    first chunk and the output closes the last stage's last chunk. Each stage's body layers,
    in stage order, are recomputed as the plan says (:class:`RecomputePlan`): the reference
    cases confirm the even split, the MTP placement, embedding first and output last, and
    a per-stage ``full_rec`` list recomputing the *first* layers of each stage.

    Raises:
        LayoutError: when :func:`validate` rejects the layout.
    """
    validate(model, layout)
    counts = chunk_layer_counts(model, layout)
    plan = layout.recompute
    rest = LayerType.SEL_REC_LAYER.value if plan.mode == "selective" else LayerType.NOT_REC_LAYER.value
    full_per_stage = full_recompute_per_stage(plan, np.array([sum(row) for row in counts])).tolist()
    stages: list[list[list[str]]] = []
    for row, full in zip(counts, full_per_stage):
        kinds = [LayerType.FULL_REC_LAYER.value] * full + [rest] * (sum(row) - full)
        chunks, start = [], 0
        for n in row:
            chunks.append(kinds[start:start + n])
            start += n
        stages.append(chunks)
    stages[0][0].insert(0, LayerType.EMBEDDING_LAYER.value)
    stages[-1][-1].append(LayerType.OUTPUT_LAYER.value)
    return stages


def stage_layers(counts: Mapping[str, np.ndarray]) -> np.ndarray:
    """Body and MTP layers of each stage (recomputed or not), from :func:`pipeline_stage_counts`' counts."""
    return counts["n_body"] + counts["n_extra"] + counts["n_extra_sel"]


def pipeline_stage_counts(model: ModelConfig, p: int, vp: int = 1, *,
                          recompute: str | RecomputePlan | None = None,
                          offset: Sequence[int] | Sequence[Sequence[int]] | None = None) -> dict[str, np.ndarray]:
    """Per stage, how many layers of each kind a pipeline of *p* stages holds, without building it.

    The counts ``codegen.reference.adapters.model.stage_counts(build_stages(model, layout), model.n_lay)``
    gives for a layout with this pipeline, computed from the slot sizes of
    :func:`chunk_layer_counts` alone: ``n_embedding`` (stage 0) and ``n_output`` (the last
    stage); ``n_body``, the body layers with a kind entry (the first ``n_lay`` in model order:
    chunk 0 of every stage, then chunk 1, …); ``n_extra`` / ``n_extra_sel``, the layers past
    ``n_lay`` (MTP) not / selectively recomputed; ``n_full_rec`` / ``n_sel_rec``, the fully /
    selectively recomputed layers, the first ones of each stage in stage order fully
    (:class:`RecomputePlan`).

    Args:
        model: the model (``n_lay``, ``n_mtp``).
        p, vp: pipeline stages and virtual chunks per stage.
        recompute: the plan (text for :func:`parse_recompute` or a :class:`RecomputePlan`);
            ``None`` recomputes nothing.
        offset: layers beyond the even split, as :attr:`Layout.offset`; ``None``: the even split.

    Returns:
        Read-only float arrays of shape ``(p,)`` under the keys of :data:`STAGE_COUNT_NAMES` (counted once per
        process and pipeline, shared by every caller).

    Raises:
        LayoutError: for ``p`` or ``vp`` below 1, a split :func:`chunk_layer_counts` rejects,
            or a recompute list that does not fit the stages.
    """
    positive_int("p", p)
    positive_int("vp", vp)
    plan = RecomputePlan() if recompute is None else \
        recompute if isinstance(recompute, RecomputePlan) else parse_recompute(recompute)
    offset = None if offset is None else normalise_offset(offset)
    # A search asks for the same few pipelines again and again, from several pricers (one per run setting and
    # family): each is counted once per process (its arrays read-only, in a new dict per call).
    key = (model, int(p), int(vp), plan, offset)
    known = _STAGE_COUNTS.get(key)
    if known is None:
        if len(_STAGE_COUNTS) >= _STAGE_COUNTS_KEEP:
            _STAGE_COUNTS.clear()
        known = _STAGE_COUNTS[key] = _count_stages(model, int(p), int(vp), plan, offset)
    return dict(known)


def batch_stage_counts(model: ModelConfig, batch: LayoutBatch, p: int, vp: int,
                       memo: dict[Any, Mapping[str, np.ndarray] | None]) -> Mapping[str, np.ndarray] | None:
    """:func:`pipeline_stage_counts` for the layouts of *batch* with pipeline (p, vp), with their offset and
    recompute list where these apply (:meth:`LayoutBatch.stage_lists`); ``None`` when no layout can have that
    pipeline. *memo* is the caller's (a pricer's, for its one model): unlike the process-wide memo it keeps the
    ``None`` of a pipeline that fails, which a search asks about again on every block."""
    plan, offset = batch.stage_lists(p, vp)
    key = (p, vp, plan, offset)
    if key not in memo:
        try:
            memo[key] = pipeline_stage_counts(model, p, vp, recompute=plan, offset=offset)
        except LayoutError:
            memo[key] = None  # no valid layout has this pipeline
    return memo[key]


def stage_layer_kinds(model: ModelConfig, p: int, vp: int = 1,
                      offset: Sequence[int] | Sequence[Sequence[int]] | None = None) -> dict[str, np.ndarray]:
    """Per stage, how many of its layers are of the published structure the step time prices apart.

    ``n_dense``: the leading dense layers of a model with experts (``first_k_dense``: the body layers of
    model order ``0 … first_k_dense − 1``, DeepSeek-V3's ``first_k_dense_replace``), which have a dense FFN of
    width ``hff`` and no router or experts; ``n_window``: the layers whose attention is a sliding window
    (``window_layers``); ``n_mtp_heads``: the multi-token-prediction modules whose logits the stage computes with
    the shared output head, ``n_mtp`` on the last stage, which holds the MTP layers (DeepSeek-V3, arXiv:2412.19437,
    §2.2: each MTP module's output head is the main model's; Megatron-Core runs them in the last stage). Positions
    in model order as :func:`chunk_layer_counts` splits them (slot (stage s, chunk c) is number ``c·p + s``; MTP
    layers last). The volumes (the original's walk) do not read these.

    Returns:
        Float arrays of shape ``(p,)`` under :data:`LAYER_KIND_NAMES` (0 for a model without either).

    Raises:
        LayoutError: as :func:`chunk_layer_counts`.
    """
    positive_int("p", p)
    positive_int("vp", vp)
    slots = slot_layers(model, int(p), int(vp), None if offset is None else normalise_offset(offset))  # (p, vp)
    in_model_order = slots.T.ravel()
    first = (np.cumsum(in_model_order) - in_model_order).reshape(vp, p).T  # each slot's first position
    dense_k = model.first_k_dense if model.is_moe else 0
    dense = np.clip(dense_k - first, 0, slots).sum(axis=1)
    total = model.n_lay + model.n_mtp
    marks = np.zeros(total + 1, dtype=np.int64)
    marks[1:][np.array([i for i in model.window_layers if i < total], dtype=np.int64)] = 1
    before = np.cumsum(marks)  # windowed layers before each position
    window = (before[first + slots] - before[first]).sum(axis=1)
    heads = np.zeros(int(p))
    heads[-1] = model.n_mtp
    return {"n_dense": dense.astype(np.float64), "n_window": window.astype(np.float64), "n_mtp_heads": heads}


#: pipeline_stage_counts' memo by (model, p, vp, plan, offset), at most _STAGE_COUNTS_KEEP entries.
_STAGE_COUNTS: dict[tuple[Any, ...], dict[str, np.ndarray]] = {}
_STAGE_COUNTS_KEEP = 4096


def _count_stages(model: ModelConfig, p: int, vp: int, plan: RecomputePlan,
                  offset: tuple[int, ...] | tuple[tuple[int, ...], ...] | None) -> dict[str, np.ndarray]:
    """:func:`pipeline_stage_counts` of a parsed plan and a normalised offset (its arrays read-only)."""
    slots = slot_layers(model, p, vp, offset)  # (p, vp)
    stage_layers = slots.sum(axis=1)
    error = recompute_list_error(plan, p, stage_layers.tolist())
    if error is not None:
        raise LayoutError(error)
    # Model order runs slot (stage s, chunk c) as number c·p + s: each slot's first layer's position.
    in_model_order = slots.T.ravel()
    first_position = (np.cumsum(in_model_order) - in_model_order).reshape(vp, p).T
    with_entry = np.clip(model.n_lay - first_position, 0, slots)  # a slot's first layers have a kind entry
    first_in_stage = np.cumsum(slots, axis=1) - slots  # stage order: chunk 0's layers first
    full = full_recompute_per_stage(plan, stage_layers)
    if plan.selective:
        # The slot's layers past n_lay run from first_in_stage + with_entry; the selective ones start at `full`.
        extra_start = np.maximum(first_in_stage + with_entry, full[:, None])
        extra_sel = np.maximum(first_in_stage + slots - extra_start, 0).sum(axis=1)
        sel_rec = stage_layers - full
    else:
        extra_sel = sel_rec = np.zeros(p, dtype=np.int64)
    body = with_entry.sum(axis=1)
    stage = np.arange(p)
    counts = {
        "n_embedding": stage == 0,
        "n_output": stage == p - 1,
        "n_body": body,
        "n_extra": stage_layers - body - extra_sel,
        "n_extra_sel": extra_sel,
        "n_full_rec": full,
        "n_sel_rec": sel_rec,
    }
    out = {name: counts[name].astype(np.float64) for name in STAGE_COUNT_NAMES}
    for array in out.values():
        array.flags.writeable = False
    return out
