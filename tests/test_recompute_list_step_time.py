"""The step time of a recompute list per stage (``RecomputePlan.full_per_stage``: stage i recomputes its first N_i
layers in full, the rest as the plan's mode says), priced stage by stage (``StepTimePricer.price_plan``).

The numbers are derived from the uniform modes: a list that recomputes every body layer of every stage is full
recompute, an empty one none (or selective, with the rest selective); a list that recomputes only the slowest
stage of full recompute, all of it, has full recompute's slowest stage and its repeated collectives; and the
exposed communication of a list grows with the share of the slowest stage's layers recomputed in full.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from codegen.cli import main
from codegen.cli._step import step_time_result
from codegen.configs import LayoutError, RecomputePlan, load_model, pipeline_stage_counts
from codegen.pricing.exposure import exposed_comm
from codegen.pricing.step_time import StepTimePricer
from codegen.runtime.inputs import InputError
from symbolic.vocabulary import SEARCH_KEYS

PARTS = ("step_time_s", "compute_s", "bubble_s", "comm_s", "stage_flops")


def _step(model, plan: RecomputePlan) -> dict[str, float]:
    res = step_time_result(model, dataclasses.replace(model.layout, recompute=plan), "dgx_h100", "bf16")
    return {k: res[k] for k in PARTS}


@pytest.mark.parametrize("name", ["qwen3-72b", "gpt-oss-120b", "deepseek-v3", "llama3.1-405b"])
def test_a_list_of_every_layer_is_full_recompute_and_an_empty_one_none(name):
    # Dense (qwen3-72b), sliding windows (gpt-oss), leading dense layers and an MTP layer (DeepSeek-V3), an
    # interleaved pipeline on Megatron-Core's accounted split (Llama 3.1 405B's file).
    model = load_model(name)
    p, vp = model.layout.p, model.layout.vp
    body = pipeline_stage_counts(model, p, vp, offset=model.layout.offset)["n_body"]
    every = RecomputePlan("none", tuple(int(n) for n in body))
    for listed, mode in ((every, "full"), (RecomputePlan("none", (0,) * p), "none"),
                         (RecomputePlan("selective", (0,) * p), "selective")):
        assert _step(model, listed) == pytest.approx(_step(model, RecomputePlan(mode)), rel=1e-12)


def test_a_list_recomputing_only_full_recomputes_slowest_stage_prices_as_full():
    # qwen3-72b on PP 8: ten layers a stage; under full recompute the last stage (it holds the output layer) is the
    # slowest. Recomputing only its ten layers leaves every other stage faster than it, and the share of its layers
    # recomputed is 1: the step is full recompute's.
    model = load_model("qwen3-72b")
    assert _step(model, RecomputePlan("none", (0,) * 7 + (10,))) == pytest.approx(
        _step(model, RecomputePlan("full")), rel=1e-12)


def test_the_model_files_list_lies_between_none_and_full_and_its_exposed_share_is_its_slowest_stages():
    # qwen3-72b's file: 8,6,6,6,4,4,2,2 of ten layers a stage.
    model = load_model("qwen3-72b")
    plan = model.layout.recompute
    assert plan.full_per_stage == (8, 6, 6, 6, 4, 4, 2, 2)
    listed, none, full = (_step(model, p) for p in (plan, RecomputePlan("none"), RecomputePlan("full")))
    for part in ("step_time_s", "compute_s", "comm_s"):
        assert none[part] < listed[part] < full[part]
    # The compute of each stage is its none compute plus its fully recomputed layers' forward again: per layer
    # (full − none) / 10 on the stage that is slowest under both (the last, with the output layer). Stage 0 (8
    # layers again, no output layer) or the last (2 again) is the slowest of the list.
    pricer = StepTimePricer(model, system="dgx_h100")
    values = {k: np.array([getattr(model.layout, k)]) for k in SEARCH_KEYS}
    stages, layers, again = pricer.listed_stage_parts(values, plan)
    seconds = [float(pricer.slowest([s])[0][0]) for s in stages]
    per_layer = (full["compute_s"] - none["compute_s"]) / 10
    assert list(layers) == [10] * 8 and list(again) == list(plan.full_per_stage)
    assert seconds[-1] == pytest.approx(none["compute_s"] + 2 * per_layer, rel=1e-9)
    assert listed["compute_s"] == pytest.approx(max(seconds), rel=1e-12)
    assert seconds[0] == pytest.approx(max(seconds), rel=1e-12)  # the output layer costs less than 6 layers again


def test_exposed_comm_repeats_the_forward_share_of_the_recomputed_layers():
    # TP's forward share is 1/2 (2 of its 4 calls a layer): a stage recomputing 3 of its 4 layers adds 3/8 of its
    # TP seconds; DP and PP repeat nothing.
    parts = {"tp": np.array([8.0]), "dp": np.array([1.0]), "pp": np.array([2.0])}
    assert float(exposed_comm(parts, "none", full_share=0.75)[0]) == pytest.approx(8 + 3 + 1 + 2)
    assert float(exposed_comm(parts, "full")[0]) == float(exposed_comm(parts, "none", full_share=1.0)[0]) == 15.0
    assert float(exposed_comm(parts, "full", full_share=0.0)[0]) == 11.0


def test_a_list_that_does_not_fit_the_pipeline_is_refused():
    model = load_model("qwen3-72b")
    pricer = StepTimePricer(model, system="dgx_h100")
    values = {k: np.array([getattr(model.layout, k)]) for k in SEARCH_KEYS}
    with pytest.raises(LayoutError, match="one entry per stage: 2 entries"):
        pricer.price_plan(values, RecomputePlan("none", (1, 2)))
    with pytest.raises(LayoutError, match="stage 3 holds 10 layers, cannot fully recompute 11"):
        pricer.price_plan(values, RecomputePlan("none", (0, 0, 0, 11, 0, 0, 0, 0)))
    with pytest.raises(InputError, match="plan: expected a RecomputePlan"):
        pricer.price_plan(values, "8,6")
    with pytest.raises(InputError, match="full_share: a fraction"):
        pricer.price(values, "full", full_share=1.5)
    two = {k: np.repeat(v, 2) for k, v in values.items()}
    with pytest.raises(InputError, match="a recompute list per stage prices one layout, got 2"):
        pricer.price_plan(two, RecomputePlan("none", (1,) * 8))
    # One mode needs no list and prices a batch as price does.
    assert pricer.price_plan(two, RecomputePlan("full"))["step_time_s"].shape == (2,)


def test_eval_prices_the_model_files_list_and_says_so(capsys):
    argv = ["eval", "--model", "qwen3-72b", "--device", "dgx_h100", "--cost", "step-time", "--json"]
    assert main(argv) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["recompute"] == "8,6,6,6,4,4,2,2" and len(res["memory"]) == 8
    # Each stage's compute, the step's the slowest's: stage 0 recomputes 8 layers, stage 6 two (and no output layer).
    compute = [row["compute_s"] for row in res["memory"]]
    assert max(compute) == res["compute_s"] == compute[0] and min(compute) == compute[6]
    assert main([*argv, "--recompute", "8,6,6,6,4,4,2,2"]) == 0
    assert json.loads(capsys.readouterr().out) == res
    assert main(argv[:-1]) == 0
    printed = capsys.readouterr().out
    assert "recompute 8,6,6,6,4,4,2,2" in printed and "compute s" in printed
    # Under one mode the stages' compute is every stage's too, the slowest the pricer's (first or last stage).
    assert main([*argv, "--recompute", "full"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert max(row["compute_s"] for row in res["memory"]) == res["compute_s"]
