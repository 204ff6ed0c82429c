"""The legacy per-op tables (``fill_dp_table``, ``fill_tp_table``, ``fill_ep_table``, ``dp_ratio``,
``comm_embed_ouput``) through the evaluators, in the shapes the original fills."""

from __future__ import annotations

from typing import Any, Mapping

from symbolic import registry

from .cp import value
from ...pricing.stages import Fields

__all__ = ["ADAPTERS"]


def _v(name: str, f: Fields) -> float:
    return value(registry.get(name), f)


def _fill_dp_table(inputs: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    f = Fields(inputs)
    dp = {"n_attMM": _v("dp_legacy_att_mm_bytes", f), "n_ffMM": _v("dp_legacy_ff_mm_bytes", f),
          "n_normOp": _v("dp_legacy_norm_op_bytes", f)}
    # The expert table is a copy of the DP table with its n_ffMM replaced.
    return {"DP": dp, "exp_dp": {**dp, "n_ffMM": _v("dp_legacy_exp_ff_mm_bytes", f)}}


def _fill_tp_table(inputs: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    f = Fields(inputs)
    return {"tp": {"n_gather": _v("tp_legacy_gather_bytes", f)},
            "exp_tp": {"n_gather": _v("tp_legacy_exp_gather_bytes", f)}}


def _fill_ep_table(inputs: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    return {"EP": {"n_ffMM": _v("ep_legacy_ff_mm_bytes", Fields(inputs))}}


def _dp_ratio(inputs: Mapping[str, Any]) -> float:
    return _v("dp_legacy_ratio", Fields(inputs))


def _comm_embed_output(inputs: Mapping[str, Any]) -> list[float]:
    f = Fields(inputs)
    return [_v("model_legacy_embed_bytes", f), _v("model_legacy_output_elements", f)]


ADAPTERS = {
    "fill_dp_table": _fill_dp_table,
    "fill_tp_table": _fill_tp_table,
    "fill_ep_table": _fill_ep_table,
    "dp_ratio": _dp_ratio,
    "comm_embed_ouput": _comm_embed_output,  # the original's spelling
}
