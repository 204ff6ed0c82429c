"""Closed-form stage totals: against the reference cases, an explicit per-layer walk, and the eval command."""

from __future__ import annotations

import json

import numpy as np
import pytest

from codegen.pricing.stages import stage_counts
from codegen.reference.adapters.model import evaluate_stages
from codegen.cli import main
from codegen.configs import build_stages, derive_fields, load_model, parse_layout
from conftest import CASES, assert_close
from walk import walk

END_TO_END = [c for c in CASES if c.function == "estimate_from_mem_comm"]


def _per_dim_close(closed: dict, walked: dict) -> None:
    for key in walked:
        assert_close(np.asarray(closed[key], dtype=float), np.asarray(walked[key], dtype=float), rtol=1e-9)


@pytest.mark.parametrize("model,layout,extra", [
    ("qwen3-72b", "d=8,t=8,p=4,m=32", {}),
    ("qwen3-72b", "d=4,t=4,p=2,cp=4,m=8", {"fsdp": True, "recompute": "selective"}),
    ("deepseek-v3", "d=16,t=4,p=8,ep=16,m=16", {"recompute": "full"}),
    ("deepseek-v3", "d=8,t=2,p=4,ep=8,m=8", {"fsdp": True}),
    ("llama2-7b", "d=4,t=2,p=2,cp=2,m=16", {"recompute": "1,3"}),
])
@pytest.mark.parametrize("mode,device,ttype", [("both", "A2", "FLOP"), ("with_recomp", "A3", "FLOP"),
                                                ("plain", "A2", "TIME")])
def test_closed_form_equals_the_per_layer_walk(model, layout, extra, mode, device, ttype):
    cfg = load_model(model)
    lay = parse_layout(layout, cfg.layout, fsdp=extra.get("fsdp"), recompute=extra.get("recompute"))
    inputs = {**derive_fields(cfg, lay), "stages": build_stages(cfg, lay), "device": device, "mode": mode,
              "ttype": ttype, "d": lay.d, "p": lay.p}
    from codegen.reference.adapters import ADAPTERS

    closed = ADAPTERS["estimate_from_mem_comm"](inputs)
    walked = walk(inputs)
    assert set(closed) == set(walked)
    for key, value in walked.items():
        if isinstance(value, dict):
            _per_dim_close(closed[key], value)
        else:
            assert_close(closed[key], value, rtol=1e-9)


def test_stage_counts_follow_model_order():
    # Two stages, one chunk each; n_lay = 3 leaves the last body layer (stage 1) as an extra (MTP) layer.
    stages = [[["EMBEDDING_LAYER", "FULL_REC_LAYER", "SEL_REC_LAYER"]],
              [["NOT_REC_LAYER", "SEL_REC_LAYER", "OUTPUT_LAYER"]]]
    counts = stage_counts(stages, 3)
    assert counts["n_embedding"].tolist() == [1, 0] and counts["n_output"].tolist() == [0, 1]
    assert counts["n_body"].tolist() == [2, 1]
    assert counts["n_extra_sel"].tolist() == [0, 1] and counts["n_extra"].tolist() == [0, 0]
    assert counts["n_full_rec"].tolist() == [1, 0] and counts["n_sel_rec"].tolist() == [1, 1]
    with pytest.raises(ValueError, match="stages: unknown layer type 'ATTN'"):
        stage_counts([[["ATTN"]]], 1)


def test_eval_matches_the_reference_case(capsys):
    case = next(c for c in END_TO_END if c.inputs["model"] == "gqa_qwen3_72b" and c.inputs["mode"] == "plain"
                and c.inputs["ttype"] == "FLOP" and c.inputs["device"] == "A2" and not c.inputs["fsdp"]
                and c.inputs["t"] == 4 and len(c.inputs["stages"]) == 8 and c.inputs.get("cp", 1) == 1)
    assert main(["eval", "--model", "qwen3-72b", "--layout", "d=32,t=4,p=8,cp=1,ep=1,m=144,b=1", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert_close(got["stages"], case.output["totals"])
    assert_close(got["per_dim"]["TP"], case.output["per_dim"]["MP"])
    assert_close(got["per_dim"]["DP"], case.output["per_dim"]["DP"])


@pytest.mark.parametrize("argv,fragment", [
    (["--layout", "d=32,t=3,p=8"], "t must divide the attention heads"),
    (["--layout", "d=32,t=4,p=8", "--devices", "64"], "64"),
    (["--layout", "d=32,t=4,p=0"], "p"),
    (["--layout", "d=32,t=4,p=8", "--device", "Z9"], "Z9"),
    (["--layout", "d=32,t=4,p=8,zz=1"], "zz"),
])
def test_eval_bad_layouts_name_the_constraint(argv, fragment, capsys):
    assert main(["eval", "--model", "qwen3-72b", *argv]) == 2
    assert fragment in capsys.readouterr().err


def test_evaluate_stages_is_vectorised_over_stages():
    cfg = load_model("llama2-7b")
    lay = parse_layout("d=8,t=2,p=4,m=16", cfg.layout)
    inputs = {**derive_fields(cfg, lay), "stages": build_stages(cfg, lay), "device": "A2", "mode": "plain",
              "ttype": "FLOP"}
    out = evaluate_stages(inputs)
    assert out["total"].shape == (4,)
    assert_close(out["total"], out["dp"] + out["tp"] + out["ep"] + out["cp"], rtol=1e-12)


def test_selective_recompute_reads_the_gather_switch():
    """A selective layer with rec_op.gather = 1 keeps its gathered activation: no TP again (κ = 1)."""
    cfg = load_model("llama2-7b")
    lay = parse_layout("d=4,t=2,p=2,m=8", cfg.layout, recompute="selective")
    base = {**derive_fields(cfg, lay), "stages": build_stages(cfg, lay), "device": "A2", "mode": "both",
            "ttype": "FLOP"}
    from codegen.reference.adapters import ADAPTERS

    for gather in (0.0, 1.0):
        inputs = {**base, "rec_op": {**base["rec_op"], "gather": gather}}
        closed, walked = ADAPTERS["estimate_from_mem_comm"](inputs), walk(inputs)
        assert_close(closed["recomputed"], walked["recomputed"], rtol=1e-9)
        assert_close(closed["per_dim_recomputed"]["MP"], walked["per_dim_recomputed"]["MP"], rtol=1e-9)
    assert lay.recompute.mode == "selective"
