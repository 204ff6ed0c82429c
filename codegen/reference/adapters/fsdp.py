"""FSDP: ``fsdp_traffic``, ``fsdp_reduce_traffic``, a layer's and the root's parts, ``_fsdp_rounds``.

Part lists are summed here by evaluating the per-part formulas
(``fsdp_part_traffic_bytes``, ``fsdp_part_reduce_traffic_bytes``) on arrays
of parts at once.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import sympy

from symbolic import fsdp, registry
from symbolic.fsdp import RootTable

from ...runtime.inputs import InputError, check_inputs
from ...runtime.kernels import evaluator
from ...pricing.stages import Fields
from .params import param_counts

__all__ = ["ADAPTERS", "fsdp_traffic", "fsdp_reduce_traffic"]

_PART_FIELDS = ("part_size", "part_computed", "part_sharded", "part_held")

#: Layer-type labels of the original; every one but the embedding prices the output table (line 529).
_LAYER_TYPES = ("EMBEDDING_LAYER", "OUTPUT_LAYER", "NOT_REC_LAYER", "FULL_REC_LAYER", "SEL_REC_LAYER")


def _part_columns(parts: Sequence[Sequence[float]]) -> dict[str, np.ndarray]:
    """The parts as one checked array per field (N, c, k, g).

    Raises:
        InputError: naming ``parts`` when a part is not four numbers, or a field when a value is invalid.
    """
    arr = np.asarray(parts, dtype=float) if len(parts) else np.zeros((0, 4))
    if arr.ndim != 2 or arr.shape[1] != 4:
        raise InputError(f"parts: expected a list of [N, c, k, g] parts, got shape {arr.shape}")
    return check_inputs(dict(zip(_PART_FIELDS, arr.T)))


def fsdp_traffic(parts: Sequence[Sequence[float]], *, gathers: float, reduces: float, bytes_p: float,
                 bytes_grad: float) -> float:
    """``EvalLayerComm.fsdp_traffic``: bytes a rank moves per micro-batch for *parts*, summed.

    Args:
        parts: ``[N, c, k, g]`` per part (``fsdp_layer_parts`` / ``fsdp_root_parts``).
        gathers, reduces: G and R of ``_fsdp_rounds``.
        bytes_p, bytes_grad: bytes per parameter and per gradient element.
    """
    cols = _part_columns(parts)
    scalars = check_inputs({"gathers": gathers, "reduces": reduces, "bytes_p": bytes_p, "bytes_grad": bytes_grad})
    return float(np.sum(evaluator("fsdp_part_traffic_bytes")(**cols, **scalars)))


def fsdp_reduce_traffic(parts: Sequence[Sequence[float]], *, reduces: float, bytes_grad: float) -> float:
    """``EvalLayerComm.fsdp_reduce_traffic`` (inferred): the all-reduce bytes of *parts*, summed."""
    cols = _part_columns(parts)
    scalars = check_inputs({"reduces": reduces, "bytes_grad": bytes_grad})
    return float(np.sum(evaluator("fsdp_part_reduce_traffic_bytes")(**cols, **scalars)))


def _traffic(inputs: Mapping[str, Any]) -> float:
    f = Fields(inputs)
    return fsdp_traffic(inputs.get("parts", []), gathers=f.num("gathers"), reduces=f.num("reduces"),
                        bytes_p=f.num("bytes_p"), bytes_grad=f.num("bytes_grad"))


def _reduce_traffic(inputs: Mapping[str, Any]) -> float:
    f = Fields(inputs)
    return fsdp_reduce_traffic(inputs.get("parts", []), reduces=f.num("reduces"), bytes_grad=f.num("bytes_grad"))


def _value(name: str, f: Fields, extra: Mapping[str, float] | None = None) -> float:
    """Formula *name* at the case's fields (and *extra* values), unchecked as the original's own config is."""
    values = dict(extra or {})
    args = {a: values[a] if a in values else f.num(a) for a in registry.get(name).arguments}
    return float(evaluator(name)(**args))


#: Registered FSDP formulas by expression: how a part's computed fields are found.
_BY_EXPR = {formula.expr: formula.name for formula in fsdp.FORMULAS}


def _part_values(part: fsdp.Part, f: Fields, extra: Mapping[str, float] | None = None) -> list[float]:
    """[N, c, k, g] of a symbolic part: a bare field is read, anything else through its registered formula."""
    extra = extra or {}
    out = []
    for expr in part:
        if isinstance(expr, sympy.Symbol):
            out.append(float(extra[expr.name]) if expr.name in extra else f.num(expr.name))
        elif expr in _BY_EXPR:
            out.append(_value(_BY_EXPR[expr], f, extra))
        else:  # pragma: no cover - a part field without a formula is a bug in symbolic.fsdp
            raise LookupError(f"no registered FSDP formula for the part field {expr}")
    return out


def _rounds(inputs: Mapping[str, Any]) -> list[float]:
    f = Fields(inputs)
    reshards, spans_cp = bool(f["reshards"]), bool(f["shard_spans_cp"])
    layer = "fsdp_resharded_layer_gathers_count" if reshards else "fsdp_kept_gathers_count"
    root = "fsdp_resharded_root_gathers_count" if reshards else "fsdp_kept_gathers_count"
    reduce = "fsdp_cp_spanning_reduces_count" if spans_cp else "fsdp_cp_separate_reduces_count"
    return [_value(layer, f), _value(root, f), _value(reduce, f)]


def _root_parts(inputs: Mapping[str, Any]) -> list[list[float]]:
    f = Fields(inputs)
    layer = inputs.get("layer")
    if layer not in _LAYER_TYPES:
        raise ValueError(f"layer: unknown layer type {layer!r}; expected one of {', '.join(_LAYER_TYPES)}")
    table = RootTable.EMBEDDING if layer == RootTable.EMBEDDING.value else RootTable.OUTPUT
    # EvalHead.shares_output_table: a tied table with one stage is the output layer's (line 525); the tied
    # part's size is h*v where it is kept, so the untied part gives its fields.
    if table is RootTable.EMBEDDING and f["tie_emb_out"] and f.num("p") <= 1:
        return []
    return [_part_values(part, f) for part in fsdp.root_parts(table)]


def _layer_parts(inputs: Mapping[str, Any]) -> list[list[float]]:
    f = Fields(inputs)
    # P_ne, P_r, P_s through the parameter-count formulas, read as EvalBody.num_params_layer reads them.
    counts = dict(zip(("P_ne", "P_r", "P_s"), param_counts(f)))
    return [_part_values(part, f, counts) for part in fsdp.layer_parts()]


ADAPTERS = {
    "EvalLayerComm.fsdp_traffic": _traffic,
    "EvalLayerComm.fsdp_reduce_traffic": _reduce_traffic,
    "_fsdp_rounds": _rounds,
    "fsdp_root_parts": _root_parts,
    "EvalLayerComm.fsdp_layer_parts": _layer_parts,
}
