"""A scalar per-layer walk of a pipeline layout, in the original's style.

This is the *reference* the closed-form stage totals are tested and
benchmarked against: it visits every layer of every stage and adds the
per-layer volumes one call at a time, exactly as ``estimate_from_mem_comm``
does (docs/model.md, "From a layer to a stage"; printout lines 549-712), but through the project's
per-layer adapters. It is slow by design — one layout at a time, hundreds of
calls per layout — and is used only by the tests and ``bench/model.py``, which is why it lives here
and not in the product.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from symbolic.vocabulary import LayerType

__all__ = ["walk"]

EMBEDDING, OUTPUT, NOT_REC, FULL_REC, SEL_REC = (kind.value for kind in LayerType)
DIMS = ("DP", "MP", "EP", "CP")


def _model_order(stages: Sequence[Sequence[Sequence[str]]]) -> list[tuple[int, int, int]]:
    """Positions of the body layers in model order: chunk-major, then stage (docs/model.md, "From a layer to a
    stage"). Written out here on purpose: the walk is the independent reference of the closed forms."""
    order = []
    chunks = max(len(stage) for stage in stages)
    for c in range(chunks):
        for s, stage in enumerate(stages):
            if c < len(stage):
                order.extend((s, c, i) for i, kind in enumerate(stage[c]) if kind not in (EMBEDDING, OUTPUT))
    return order


def walk(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """``estimate_from_mem_comm`` for one case's inputs, walked layer by layer.

    Returns the output in the reference file's shape: ``totals`` (or ``plain``
    and ``recomputed`` in ``both`` mode), ``per_dim`` (and
    ``per_dim_recomputed``), ``reduce_share``.
    """
    from hardware import load as load_device

    from codegen.reference.adapters import ADAPTERS

    cfg = dict(inputs)
    stages = cfg["stages"]
    mode = cfg.get("mode", "with_recomp" if cfg.get("with_recomp") else "plain")
    with_recomp, both = mode in ("with_recomp", "both"), mode == "both"
    fsdp = bool(cfg.get("grad_shard_as_params", 0))
    n_lay = int(cfg.get("n_lay", 0))
    kinds = set(_model_order(stages)[:n_lay])
    device = load_device(cfg["device"])
    dpn0 = device.level_bounds()[0]

    def call(name: str, **extra: Any) -> Any:
        return ADAPTERS[name]({**cfg, **extra})

    if fsdp:
        layer_gathers, root_gathers, reduces = call("_fsdp_rounds")

    def fsdp_pair(parts: Any, gathers: float) -> tuple[float, float]:
        base = {"bytes_grad": cfg.get("bytes_grad", 0), "bytes_p": cfg.get("bytes_p", 0), "parts": parts}
        traffic = ADAPTERS["EvalLayerComm.fsdp_traffic"]({**base, "gathers": gathers, "reduces": reduces})
        reduced = ADAPTERS["EvalLayerComm.fsdp_reduce_traffic"]({**base, "reduces": reduces})
        return traffic, reduced

    plain_lists: dict[str, list[float]] = {d: [] for d in DIMS}
    again_lists: dict[str, list[float]] = {d: [] for d in DIMS}
    shares: list[float] = []
    for s, stage in enumerate(stages):
        plain = dict.fromkeys(DIMS, 0.0)
        again = dict.fromkeys(DIMS, 0.0)
        reduced = 0.0
        sums = (plain, again)
        for c, chunk in enumerate(stage):
            for i, layer in enumerate(chunk):
                node = layer
                is_body = layer not in (EMBEDDING, OUTPUT)
                if is_body and (s, c, i) in kinds:
                    node = NOT_REC
                    if fsdp:
                        parts = call("EvalLayerComm.fsdp_layer_parts", ctx_current_node=node)
                        traffic, red = fsdp_pair(parts, layer_gathers)
                        reduced += red
                    else:
                        traffic = call("EvalLayerComm.dp_comm_layer", ctx_current_node=node)
                    for acc in sums:
                        acc["DP"] += traffic
                elif fsdp and not is_body:
                    traffic, red = fsdp_pair(call("fsdp_root_parts", layer=layer), root_gathers)
                    reduced += red
                    for acc in sums:
                        acc["DP"] += traffic
                tp = call("EvalLayerComm.tp_comm_layer", ctx_current_node=node, mb=1.0)
                ep = call("EvalLayerComm.ep_comm_layer", ctx_current_node=node, mb=1.0)
                for acc in sums:
                    acc["MP"] += tp
                    acc["EP"] += ep
                if is_body:
                    cp_volume = call("cp_comm_layer_detailed")["comm_volume"]
                    for acc in sums:
                        acc["CP"] += cp_volume
                if layer in (FULL_REC, SEL_REC):
                    tp_again, ep_again, cp_again = call("_recomputed_comm", layer=layer)
                    again["MP"] += tp_again
                    again["EP"] += ep_again
                    again["CP"] += cp_again
        returned = again if with_recomp and not both else plain
        shares.append(reduced / returned["DP"] if returned["DP"] else 0.0)
        for acc, lists in ((plain, plain_lists), (again, again_lists)):
            _convert(acc, cfg, device, dpn0)
            for d in DIMS:
                lists[d].append(acc[d])

    def totals(lists: dict[str, list[float]]) -> list[float]:
        return [lists["MP"][k] + lists["DP"][k] + lists["EP"][k] + lists["CP"][k] for k in range(len(stages))]

    if both:
        return {"plain": totals(plain_lists), "recomputed": totals(again_lists), "per_dim": plain_lists,
                "per_dim_recomputed": again_lists, "reduce_share": shares}
    returned_lists = again_lists if with_recomp else plain_lists
    return {"totals": totals(returned_lists), "per_dim": returned_lists, "reduce_share": shares}


def _convert(acc: dict[str, float], cfg: Mapping[str, Any], device: Any, dpn0: int) -> None:
    """``_stage_comm_time``: TIME scores, per-node multipliers, overlap, A3 halving (lines 627-663)."""
    from codegen.reference.adapters import ADAPTERS

    if cfg.get("ttype") == "TIME":
        for dim in ("DP", "MP", "CP"):
            acc[dim] = ADAPTERS["estimate_comm_score"]({**cfg, "device": device.name, "dim": dim,
                                                         "comm_volume": acc[dim], "overlap": 0.0})
    acc["MP"] *= max(1, int(cfg.get("t", 0)) // dpn0)
    acc["EP"] *= max(1, int(cfg.get("ep", 0)) // dpn0)
    acc["CP"] *= max(1, int(cfg.get("cp", 0)) // dpn0)
    acc["DP"] *= 1 - cfg.get("comm_dp_overlap", 0)
    acc["MP"] *= 1 - cfg.get("comm_tp_overlap", 0)
    for dim in DIMS:  # A3's halving (oddity 14), a field of its system file
        acc[dim] *= device.original_stage_cost_scale
