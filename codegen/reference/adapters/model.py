"""``estimate_from_mem_comm`` and ``estimate_comm``: the original's case inputs through the one pricer.

A case states its config fields and its pipeline (``stages``); the pricer's
core (``codegen.pricing.stages.price``) prices every stage from them. This
module only reshapes: the case's ``device``, ``ttype`` and ``mode`` in, the
original's lists out.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ...pricing.stages import Fields, price, stage_counts

__all__ = ["ADAPTERS", "evaluate_stages"]


def evaluate_stages(inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Every stage output of a case (``symbolic.vocabulary.STAGE_OUTPUTS`` and ``reduce_share``) over its stages."""
    import hardware

    f = Fields(inputs)
    if f.num("cp") > 1 and f.num("a") <= 0:
        raise ValueError(f"a: attention heads must be positive when cp > 1, got {f.num('a')!r}")
    system = hardware.load(str(inputs.get("device", "A2")))
    # The original tests ``ttype == TIME``; any other value is the FLOP path.
    ttype = "TIME" if str(f["ttype"]).upper() == "TIME" else "FLOP"
    out = price(f, stage_counts(inputs["stages"], int(f.num("n_lay"))), system=system, ttype=ttype)
    # The totals are the sums of the converted parts, as the original's _stage_totals adds its lists (line 668).
    out["total"] = out["dp"] + out["tp"] + out["ep"] + out["cp"]
    out["total_recomputed"] = out["dp"] + out["tp_recomputed"] + out["ep_recomputed"] + out["cp_recomputed"]
    # reduce_share: the all-reduced part of the unconverted DP volume, 0 where that volume is 0 (line 710).
    dp_raw = out["dp_unconverted"]
    out["reduce_share"] = np.divide(out["dp_reduced"], dp_raw, out=np.zeros(dp_raw.shape), where=dp_raw != 0)
    return out


def _lists(out: Mapping[str, np.ndarray], recomputed: bool) -> dict[str, list[float]]:
    suffix = "_recomputed" if recomputed else ""
    return {"DP": out["dp"].tolist(), "MP": out[f"tp{suffix}"].tolist(), "EP": out[f"ep{suffix}"].tolist(),
            "CP": out[f"cp{suffix}"].tolist()}


def _estimate_from_mem_comm(inputs: Mapping[str, Any]) -> dict[str, Any]:
    mode = inputs.get("mode", "plain")
    if mode not in ("plain", "with_recomp", "both"):
        raise ValueError(f"mode: expected plain, with_recomp or both, got {mode!r}")
    out = evaluate_stages(inputs)
    share = out["reduce_share"].tolist()
    if mode == "both":
        return {"plain": out["total"].tolist(), "recomputed": out["total_recomputed"].tolist(),
                "per_dim": _lists(out, False), "per_dim_recomputed": _lists(out, True), "reduce_share": share}
    recomputed = mode == "with_recomp"
    total = out["total_recomputed" if recomputed else "total"].tolist()
    return {"totals": total, "per_dim": _lists(out, recomputed), "reduce_share": share}


def _estimate_comm(inputs: Mapping[str, Any]) -> list[float]:
    out = evaluate_stages(inputs)
    return out["total_recomputed" if inputs.get("with_recomp") else "total"].tolist()


ADAPTERS = {
    "estimate_from_mem_comm": _estimate_from_mem_comm,
    "estimate_comm": _estimate_comm,
}
