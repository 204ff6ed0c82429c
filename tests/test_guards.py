"""The original's max(1, ·) guards on unset (0) fields: the reference check reproduces the original there.

Expected values come from the original's rule, not from our evaluators: a guarded field at 0
reads as 1, so a case recorded with the field at 1 gives the expected output of the same case
with the field at 0; where only part of a function is guarded (``a`` in ``cp_traffic``), the
expected value is the original's lines transcribed here.
"""

from __future__ import annotations

import pytest

from codegen.configs import LayoutError, parse_layout
from codegen.runtime.inputs import InputError
from codegen.runtime.kernels import evaluate
from codegen.reference.adapters import ADAPTERS
from codegen.reference.adapters.guards import GUARDED, guarded
from codegen.reference.cases import RTOL, Case, run_check, worst_error
from conftest import CASES


def _with(case: Case, **fields: float) -> Case:
    return Case(case.id + "+" + ",".join(f"{k}={v}" for k, v in fields.items()), case.function,
                {**case.inputs, **fields}, case.output)


def _recorded_at_one(function: str, field: str) -> list[Case]:
    return [c for c in CASES if c.function == function and c.inputs.get(field) == 1.0]


@pytest.mark.parametrize("function, field", [("cp_traffic", "t"), ("cp_comm_layer_detailed", "t"),
                                             ("_fsdp_rounds", "m")])
def test_unset_guarded_field_reads_as_one(function, field):
    cases = _recorded_at_one(function, field)
    assert len(cases) >= 5, f"too few {function} cases with {field} = 1 to test the guard"
    report = run_check([_with(c, **{field: 0.0}) for c in cases])
    rep = report.functions[function]
    assert rep.cases == len(cases) and not rep.failures, rep.failures[:3]


def _original_cp_traffic(i: dict) -> float:
    """comm_time.py lines 157-168, transcribed, for a non-MLA layer (compute_kv_dim of MHA: h / t')."""
    cp, t = i["cp"], max(1, i["t"])
    ring = (cp - 1) / cp
    head = i["dh"] or i["h"] / max(1, i["a"])
    assert i["dc_kv"] == 0 and not i["n_kv"] < i["a"], "this transcription covers MHA layers only"
    kv_width = i["h"] / t
    if i["algo"] == "ulysses_cp":
        widths = i["a"] * head / t + 2 * kv_width + i["a"] * head / t
        return 2 * ring * i["s"] / cp * i["b"] * widths * i["bytes_compute"]
    if i.get("n_linrec"):
        return 2 * i["a"] / t * head * head * 4
    return 2 * ring * i["s"] * i["b"] * 2 * kv_width * i["bytes_compute"]


def test_unset_heads_take_the_head_width_fallback_only():
    cases = [c for c in CASES if c.function == "cp_traffic" and c.inputs.get("dh") == 0.0
             and c.inputs.get("dc_kv", 0) == 0]
    assert len(cases) >= 5
    for case in cases:
        inputs = {**case.inputs, "a": 0.0}
        want = _original_cp_traffic(inputs)
        err, _ = worst_error(ADAPTERS["cp_traffic"](inputs), want)
        assert err <= RTOL, (case.id, want)
        # The transcription agrees with the recorded output where a is set.
        assert worst_error(_original_cp_traffic(case.inputs), case.output)[0] <= RTOL, case.id


def test_guards_touch_only_the_functions_the_original_guards():
    inputs = {"t": 0.0, "m": 0.0, "a": 0.0, "dh": 0.0, "h": 64.0}
    assert guarded("EvalLayerComm.dp_comm_layer", inputs) is inputs
    assert guarded("_fsdp_rounds", inputs)["t"] == 0.0  # only m is guarded there
    assert set(GUARDED) == {"cp_traffic", "cp_comm_layer_detailed", "_fsdp_rounds"}


def test_public_api_keeps_rejecting_non_positive_degrees():
    case = _recorded_at_one("cp_traffic", "t")[0]
    args = {k: v for k, v in case.inputs.items() if k not in ("algo", "model")}
    with pytest.raises(InputError, match="t: must be > 0"):
        evaluate("cp_ring_mha_traffic_bytes", **{**args, "t": 0})
    with pytest.raises(LayoutError, match="layout t: must be a whole number >= 1, got 0"):
        parse_layout("d=1,t=0,p=1,m=1")
