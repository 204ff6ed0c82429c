"""The published layer structure the step time prices apart: which stages to price, and their forms' inputs.

A model's layers are not all alike (``ModelConfig.has_layer_kinds``): DeepSeek-V3's first three layers are dense
(a dense FFN, no router, no experts), its multi-token-prediction module computes its logits with the main output
head, gpt-oss attends to a 128-token window on every other layer. ``codegen.configs.stage_layer_kinds`` counts
them per stage; here the step time's compute family turns the counts into its forms' inputs
(:func:`kind_inputs`), adds the forms' parts into a stage's (:func:`combined_parts`), and picks the stages that can
be the slowest (:func:`kind_stages`). The original's volumes price every layer as the model's kind, as the
original does (``codegen.configs.derive_fields``); this module is read by the step time alone.

Public API::

    kind_inputs(layers, dense, window, full, selective) -> {form input: value}
    combined_parts(parts) -> (FLOPs, low-precision FLOPs or None, HBM bytes, vector FLOPs)
    combined_flops(parts) -> (FLOPs, low-precision FLOPs or None)
    kind_stages(model, p, vp) -> three stages' (layers, output heads, dense layers, windowed layers)
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..configs import ModelConfig, pipeline_stage_counts, stage_layer_kinds, stage_layers

__all__ = ["kind_inputs", "combined_parts", "combined_flops", "kind_stages"]


def kind_inputs(layers: Any, dense: Any, window: Any, full: Any, selective: Any) -> dict[str, Any]:
    """The compute forms' per-stage inputs of a stage of *layers* layers, *dense* of them leading dense layers and
    *window* of them windowed, *full* of them fully and *selective* selectively recomputed: the stage's MoE form
    counts its other layers, the dense forms its dense ones. A stage's recomputed layers are its first in stage
    order (``pipeline_stage_counts``), where the dense layers are (the first in model order); the windowed layers
    alternate, so they are recomputed in proportion (exact for a whole-stage mode, the step pricer's)."""
    dense_full = np.minimum(dense, full)
    dense_sel = np.minimum(dense - dense_full, selective)
    share = np.divide(full, layers, out=np.zeros_like(np.asarray(full, dtype=np.float64)), where=layers > 0)
    sel_share = np.divide(selective, layers, out=np.zeros_like(share), where=layers > 0)
    return {"n_layers_stage": layers - dense, "n_full_rec": full - dense_full, "n_sel_rec": selective - dense_sel,
            "n_dense_layers_stage": dense, "n_dense_full_rec": dense_full, "n_dense_sel_rec": dense_sel,
            "n_window_layers_stage": window, "n_window_full_rec": window * share,
            "n_window_sel_rec": window * sel_share}


def combined_parts(parts: Mapping[str, Any]) -> tuple[Any, Any, Any, Any]:
    """(FLOPs, low-precision GEMM FLOPs or None, HBM bytes, vector FLOPs) of a stage from the compute terms' parts
    (:func:`compute_terms`): the model's layers' and output layer's, plus its leading dense layers', less the score
    FLOPs its windows save."""
    flops, lowp = combined_flops(parts)
    moved, vector = parts["hbm_bytes"], parts["vector_flops"]
    if "dense_flops" in parts:
        moved = moved + parts["dense_hbm_bytes"]
        vector = vector + parts["dense_vector_flops"]
    return flops, lowp, moved, vector


def combined_flops(parts: Mapping[str, Any]) -> tuple[Any, Any]:
    """(FLOPs, low-precision GEMM FLOPs or None) of a stage from the compute terms' FLOP parts, as
    :func:`combined_parts` adds them (its HBM bytes and vector FLOPs not read)."""
    flops, lowp = parts["flops"], parts.get("lowp_flops")
    if "dense_flops" in parts:
        flops = flops + parts["dense_flops"]
        lowp = None if lowp is None else lowp + parts["dense_lowp_flops"]
    if "window_saved_flops" in parts:
        flops = flops - parts["window_saved_flops"]
    return flops, lowp


def kind_stages(model: ModelConfig, p: np.ndarray, vp: np.ndarray) -> tuple[tuple[np.ndarray, ...], ...]:
    """(layers, output heads, leading dense layers, windowed layers) per layout of three stages that hold the
    slowest, for a model whose layers the step time prices apart (``ModelConfig.has_layer_kinds``): the first stage; of the
    other stages but the last, the one with the most MoE layers, then the most layers, then the fewest windowed
    ones (the heaviest when a dense layer costs no more than a MoE one and a windowed layer less than a full one,
    as in DeepSeek-V3, whose dense FFN is as wide as its eight chosen and one shared experts together, and
    gpt-oss); the last stage, with the output layer and the MTP heads (the first stage, for ``p = 1``). The layer
    counts are ``codegen.pricing.step_time.stage_layer_counts``' split (the model's offset for its own pipeline), the kinds
    ``codegen.configs.stage_layer_kinds``; each pipeline shape counted once.

    *p* and *vp*: whole numbers from 1 to the model's layers, one per layout (checked by the caller).
    """
    p, vp = np.broadcast_arrays(np.asarray(p, dtype=np.int64), np.asarray(vp, dtype=np.int64))
    radix = int(np.max(vp, initial=1)) + 1
    shapes, index = np.unique((p * radix + vp).ravel(), return_inverse=True)
    table = np.zeros((len(shapes), 3, 4))
    own = model.layout
    heads = 1.0 + model.n_mtp
    for j, code in enumerate(shapes.tolist()):
        pp, vv = divmod(code, radix)
        offset = own.offset if (pp, vv) == (own.p, own.vp) else None
        layers = stage_layers(pipeline_stage_counts(model, pp, vv, offset=offset))
        kinds = stage_layer_kinds(model, pp, vv, offset)
        rows = np.stack([layers, np.zeros(pp), kinds["n_dense"], kinds["n_window"]], axis=1)
        rows[-1, 1] = heads
        middle = rows[1:-1] if pp > 2 else rows[:1]
        pick = np.lexsort((middle[:, 3], -middle[:, 0], -(middle[:, 0] - middle[:, 2])))[0]
        table[j] = (rows[0], middle[pick], rows[-1])
    got = table[index.reshape(p.shape)] if p.ndim else table[int(index[0])]
    return tuple(tuple(np.ascontiguousarray(got[..., i, k]) for k in range(4)) for i in range(3))
