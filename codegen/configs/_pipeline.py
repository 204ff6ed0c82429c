"""The pipeline split: body layers per stage and chunk, and how a recompute plan's per-stage list fits them."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ._layout import Layout, LayoutError, RecomputePlan
from ._model import ModelConfig

__all__ = ["accounted", "accounted_split_broken", "accounted_split_offset", "accounted_stage_layers",
           "chunk_layer_counts", "even_split_leaves_empty", "full_recompute_per_stage", "interleaving_notes",
           "module_list_split_offset", "offset_pipeline", "recompute_list_error", "slot_layers", "split_layers",
           "uneven_chunks", "ungrouped_microbatches"]


def even_split_leaves_empty(total: int, p: Any, vp: Any) -> Any:
    """Whether an even split of *total* layers over ``p·vp`` chunks leaves a chunk without one."""
    return p * vp > total


def accounted(model: ModelConfig) -> tuple[bool, bool]:
    """Whether *model*'s pipeline split counts the embedding and the loss as layers (Megatron-Core's settings)."""
    return model.account_for_embedding_in_pipeline_split, model.account_for_loss_in_pipeline_split


def split_layers(model: ModelConfig) -> int:
    """The layers *model*'s pipeline split divides over ``p·vp`` chunks: the body and MTP layers, with the embedding
    and the loss where its split counts them (:func:`accounted`)."""
    return model.n_lay + model.n_mtp + sum(accounted(model))


def uneven_chunks(model: ModelConfig, p: Any, vp: Any) -> Any:
    """Whether an interleaved pipeline's ``p·vp`` model chunks hold unequal layers (elementwise): the layers, with
    the embedding and the loss where *model*'s split counts them, do not divide by ``p·vp``. Megatron-Core builds
    a stage's chunks evenly (transformer_block.py ``get_num_layers_to_build``: a stage's layers divisible by vp)
    unless the run states a pipeline layout (``pipeline_model_parallel_layout``)."""
    return (vp > 1) & (split_layers(model) % (p * vp) != 0)


def ungrouped_microbatches(p: Any, vp: Any, m: Any) -> Any:
    """Whether an interleaved pipeline's ``m`` micro-batches are no multiple of ``p`` (elementwise): Megatron-Core's
    interleaved schedule runs them in groups of ``microbatch_group_size_per_vp_stage``, ``p`` unless the run sets
    it, from ``p`` to ``m``, and refuses a last group of fewer than ``p`` (schedules.py
    ``forward_backward_pipelining_with_interleaving``)."""
    return (vp > 1) & (m % p != 0)


def interleaving_notes(model: ModelConfig, layout: Layout) -> tuple[str, ...]:
    """What an interleaved *layout* needs of Megatron-Core beyond its degrees (:func:`uneven_chunks`,
    :func:`ungrouped_microbatches`), one sentence each; none for a layout without interleaving or that keeps both
    rules, and no chunk note where the layout states its own split (an offset)."""
    p, vp, m = layout.p, layout.vp, layout.m
    notes = []
    if layout.offset is None and uneven_chunks(model, p, vp):
        notes.append(f"{split_layers(model)} layers do not fill p·vp = {p * vp} model chunks evenly: Megatron-Core "
                     f"builds such chunks only from a stated pipeline layout (pipeline_model_parallel_layout), and "
                     f"the bubble is priced as for equal chunks")
    if m < p and vp > 1:
        notes.append(f"m = {m} micro-batches are fewer than p = {p} stages: Megatron-Core's interleaved schedule "
                     f"refuses them (its micro-batch groups hold p to m)")
    elif ungrouped_microbatches(p, vp, m):
        notes.append(f"m = {m} micro-batches are no multiple of p = {p}: Megatron-Core's interleaved schedule needs a "
                     f"micro-batch group size (microbatch_group_size_per_vp_stage) that divides them, or leaves a "
                     f"last group of at least p")
    return tuple(notes)


def accounted_split_broken(model: ModelConfig, p: Any, vp: Any) -> Any:
    """Whether the layers *model*'s accounted split counts do not divide over ``p`` stages and then ``vp`` chunks
    (:func:`accounted_split_offset` refuses them); elementwise over arrays."""
    counted = model.n_lay + sum(accounted(model))
    return (counted % p != 0) | ((counted // p) % vp != 0)


def accounted_stage_layers(model: ModelConfig, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Body layers (MTP included) of the most loaded stage but the last and of the last, per pipeline depth *p*,
    under *model*'s accounted split (:func:`accounted_split_offset`): ``N/p`` counted layers a stage, the first one
    fewer for the embedding, the last one fewer for the loss and its MTP layers more, so the most loaded stage but
    the last is a middle one where there is one. A depth the counted layers do not divide is no valid layout
    (:func:`accounted_split_broken`): its numbers mean nothing."""
    embedding, loss = accounted(model)
    total = model.n_lay + model.n_mtp
    per_stage = (model.n_lay + embedding + loss) // p
    first = np.where(p == 1, total, np.where(p > 2, per_stage, per_stage - embedding))
    return first, np.where(p == 1, total, per_stage - loss + model.n_mtp)


def accounted_split_offset(n_lay: int, n_mtp: int, p: int, vp: int, embedding: bool,
                           loss: bool) -> tuple[int, ...] | tuple[tuple[int, ...], ...]:
    """The offset (:attr:`Layout.offset`) of a model of *n_lay* decoder and *n_mtp* multi-token-prediction layers
    under Megatron-Core's pipeline split with the input embedding and/or the loss counted as one transformer layer
    each (``account_for_embedding_in_pipeline_split``, ``account_for_loss_in_pipeline_split``).

    Megatron-Core (megatron/core/transformer/transformer_config.py, the checks of these two settings, and
    transformer_block.py, ``get_num_layers_to_build``): the decoder layers plus one for each setting, ``N``, split
    evenly, ``N/p`` a stage and ``N/(p·vp)`` a model chunk, which both must divide; the first chunk of the first
    stage builds one decoder layer fewer for the embedding, the last chunk of the last stage one fewer for the loss.
    The model's multi-token-prediction layers sit on that last chunk besides (Megatron-Core builds them after the
    decoder on the last stage). Llama 3.1 405B's 126 layers with both settings fill PP 16 × VP 8: one layer a
    chunk, none on the first and the last (Megatron-Bridge's ``llama31_405b_pretrain_config`` sets both).

    (Where ``N`` divides, each chunk counts at least one layer, so the first and the last never fall below none.)

    Raises:
        LayoutError: *N* does not divide by ``p`` or ``N/p`` by ``vp``.
    """
    counted = n_lay + int(embedding) + int(loss)
    what = " + ".join(["the embedding"] * embedding + ["the loss"] * loss)
    if counted % p:
        raise LayoutError(f"pipeline split: {n_lay} layers + {what} = {counted} do not divide over p = {p} "
                          f"stages (Megatron-Core needs them to)")
    if (counted // p) % vp:
        raise LayoutError(f"pipeline split: {counted // p} layers a stage ({n_lay} + {what} over p = {p}) do "
                          f"not divide over vp = {vp} model chunks (Megatron-Core needs them to)")
    rows = np.full((p, vp), counted // (p * vp), dtype=np.int64)
    rows[0, 0] -= int(embedding)
    rows[p - 1, vp - 1] -= int(loss)
    rows[p - 1, vp - 1] += n_mtp
    offset = rows - (n_lay + n_mtp) // (p * vp)
    if vp == 1:
        return tuple(int(n) for n in offset[:, 0])
    return tuple(tuple(int(n) for n in offset[:, c]) for c in range(vp))


def module_list_split_offset(n_lay: int, p: int, before: int = 1, after: int = 2) -> tuple[int, ...]:
    """The offset (:attr:`Layout.offset`, one model chunk a stage) of a pipeline split evenly over the model's list of
    modules rather than over its decoder layers: *before* modules ahead of the *n_lay* decoder layers (the input
    embedding) and *after* behind them (the final norm and the output head). The list's ``N = n_lay + before + after``
    modules go ``N // p`` a stage, the first ``N % p`` stages one more each; the first stage's share includes the
    modules before the layers, the last stage's those after them.

    Aleph Alpha's Scaling framework splits so by default (Aleph-Alpha/scaling, src/scaling/core/nn/parallel_module/
    pipeline_partitioning.py ``pipe_partition_uniform``, the topology's default ``pipe_partition_method`` "uniform";
    its transformer's module list, src/scaling/transformer/model/model.py ``get_transformer_layer_specs``: the
    embedding, the layers, the final norm, the LM head). LLaMA 13B's 40 layers over 2 stages: 43 modules, 22 and 21,
    so 21 decoder layers on the first stage and 19 on the last: offset (1, −1) over the even split's 20 and 20.

    Raises:
        LayoutError: a stage's share holds fewer modules than the embedding, or the norm and head, it must hold.
    """
    total = n_lay + before + after
    share, extra = divmod(total, p)
    body = [share + (stage < extra) for stage in range(p)]
    body[0] -= before
    body[-1] -= after
    if min(body) < 0:
        raise LayoutError(f"pipeline split over {total} modules ({n_lay} layers, {before} before, {after} after): "
                          f"p = {p} stages leave a stage {min(body)} layers")
    return tuple(n - n_lay // p for n in body)


def offset_pipeline(offset: tuple[int, ...] | tuple[tuple[int, ...], ...]) -> tuple[int, int]:
    """``(p, vp)`` an offset is written for: one entry per stage, or one row of p per chunk (0: ragged)."""
    if offset and isinstance(offset[0], tuple):
        widths = {len(row) for row in offset}  # type: ignore[arg-type]
        return (widths.pop() if len(widths) == 1 else 0), len(offset)
    return len(offset), 1


def slot_layers(model: ModelConfig, p: int, vp: int,
                 offset: tuple[int, ...] | tuple[tuple[int, ...], ...] | None) -> np.ndarray:
    """Body layers per (stage, chunk) slot, shape ``(p, vp)``: see :func:`chunk_layer_counts`."""
    total = model.n_lay + model.n_mtp
    slots = p * vp
    embedding, loss = accounted(model)
    if embedding or loss:
        if offset is not None:
            raise LayoutError("offset: the model's pipeline split counts the embedding or the loss as a layer "
                              "(Megatron-Core's account_for_*_in_pipeline_split); an offset cannot split it too")
        offset = accounted_split_offset(model.n_lay, model.n_mtp, p, vp, embedding, loss)
    if offset is None:
        if even_split_leaves_empty(total, p, vp):
            raise LayoutError(f"p·vp <= n_lay + n_mtp: {p}·{vp} = {slots} pipeline chunks for "
                              f"{total} layers ({model.n_lay} + {model.n_mtp} MTP) leaves a chunk empty")
        # Slot (stage s, chunk c) is number c·p + s in model order; the first total % slots get one more.
        order = np.arange(vp) * p + np.arange(p)[:, None]
        return total // slots + (order < total % slots).astype(np.int64)
    base = total // slots
    nested = bool(offset) and isinstance(offset[0], tuple)
    if vp == 1 and not nested:
        if len(offset) != p:
            raise LayoutError(f"offset has {len(offset)} entries, but p = {p} stages: {list(offset)}")
        rows = base + np.array(offset, dtype=np.int64)[:, None]
    else:
        if not nested or offset_pipeline(offset) != (p, vp):
            raise LayoutError(f"offset must be vp = {vp} lists of p = {p} integers (chunk, then stage), "
                              f"got {offset!r}")
        rows = base + np.array(offset, dtype=np.int64).T
    negative = np.argwhere(rows < 0)
    if len(negative):
        s, c = (int(i) for i in negative[0])
        raise LayoutError(f"offset gives stage {s} chunk {c} {rows[s, c]} layers (even split {base} + offset)")
    placed = int(rows.sum())
    if placed != total:
        raise LayoutError(f"offset places {placed} layers, but the model has n_lay + n_mtp = "
                          f"{model.n_lay} + {model.n_mtp} = {total}: offset {offset!r} over an even split of {base}")
    return rows


def chunk_layer_counts(model: ModelConfig, layout: Layout) -> list[list[int]]:
    """Body layers per stage and chunk: ``counts[stage][chunk]``, MTP layers included.

    ``n_lay + n_mtp`` layers (HyperParallel puts the MTP layers into the offset balancing
    whenever the model has them, ``mtp_in_offset``). Without an offset, each (chunk, stage)
    slot holds ``total // (p·vp)`` layers and the first ``total % (p·vp)`` slots in model
    order (chunk 0's stages first) one more: for one chunk that is "the first stages one
    more each", HyperParallel's ``_balanced_offset``, confirmed by the DeepSeek cases
    (62 layers over 16 stages: 14 × 4, then 3, 3). With several chunks and a remainder the
    order is our reading. With an offset: ``total // (p·vp) + offset[...]``.

    Raises:
        LayoutError: when the offset's shape does not fit ``p`` and ``vp``, its layers do not
            add up to ``n_lay + n_mtp``, a slot would hold fewer than 0 layers, or the even
            split would leave a slot empty.
    """
    return slot_layers(model, layout.p, layout.vp, layout.offset).tolist()


def recompute_list_error(plan: RecomputePlan, p: int, stage_layers: Sequence[int] | None) -> str | None:
    """Why the plan's per-stage list does not fit a pipeline of *p* stages holding *stage_layers*; ``None`` if it does."""
    counts = plan.full_per_stage
    if counts is None:
        return None
    if len(counts) != p:
        return f"the recompute list needs one entry per stage: {len(counts)} entries {list(counts)}, p = {p}"
    for stage, (n, layers) in enumerate(zip(counts, stage_layers or ())):
        if n > layers:
            return f"recompute: stage {stage} holds {layers} layers, cannot fully recompute {n}"
    return None


def full_recompute_per_stage(plan: RecomputePlan, stage_layers: np.ndarray) -> np.ndarray:
    """Fully recomputed body layers of each stage (its first ones, in stage order)."""
    if plan.full_per_stage is not None:
        return np.array(plan.full_per_stage, dtype=np.int64)
    return stage_layers if plan.mode == "full" else np.zeros_like(stage_layers)
