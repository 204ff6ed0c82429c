"""The sensitivity in seconds: generated derivatives of the collective candidates and of the stage forms,
chained by ``TimePricer.stage_slopes``, checked against central finite differences of the same pricing path
(the time of NCCL's pick, and ``TimePricer.price_batch``) at points where no algorithm switch is near; and
``symcost sensitivity --cost time``."""

from __future__ import annotations

import json

import numpy as np
import pytest

import hardware
from codegen.cli import main
from codegen.configs import LayoutBatch, load_model, parse_layout
from codegen.pricing import collective
from codegen.pricing.sensitivity import time_sensitivity
from codegen.pricing.time import LEVELS, TimePricer
from codegen.validation.collectives import group_values
from conftest import assert_close
from symbolic import collective_time, vocabulary
from symbolic.symbols import SPECS

DEGREES = ("t", "cp", "ep", "d", "p", "m", "b", "s")
H = 1e-5  # relative step of the finite differences


def test_level_parameters_are_the_vocabulary_ones():
    """One declaration (symbolic.vocabulary) for the formulas and the pricer: each level's α are latencies in
    seconds, its β bandwidths in bytes per second, every one a hardware symbol."""
    assert collective.LEVEL_PARAMETERS is collective_time.LEVEL_PARAMETERS is vocabulary.LEVEL_PARAMETERS
    for level, names in vocabulary.LEVEL_PARAMETERS.items():
        unit = "_bytes_per_s" if level.endswith("_beta") else "_s"
        assert names and all(name.endswith(unit) and not (unit == "_s" and name.endswith("_per_s"))
                             for name in names), level
        assert all(SPECS[name] for name in names), level


def _time(op: str, values: dict) -> tuple[np.ndarray, np.ndarray]:
    pick = collective.choose(op, values)
    return pick.time_s, pick.index


@pytest.mark.parametrize("system", ["dgx_a100", "dgx_h100", "dgx_b200"])
@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send_recv",
                                "ep_dispatch"])
def test_collective_slopes_match_central_differences(system, op):
    sizes = np.array([3.0e3, 5.0e5, 3.0e7, 7.0e8])
    for ranks, nodes in ((8, 1), (16, 2)):
        values = group_values(hardware.load(system), np.full(sizes.shape, float(ranks)), sizes)
        if op == "ep_dispatch":  # (its forms read the model's top-k and routing groups too)
            values.update(n_chosen_exp=8.0, n_route_groups=8.0, n_route_groups_topk=4.0)
        t, index = _time(op, values)
        got = collective.slopes(op, values, index)
        for by in collective.SLOPE_BY:
            names = (by,) if by in ("msg_bytes", "ranks") else collective.LEVEL_PARAMETERS[by]
            up, down = dict(values), dict(values)
            for n in names:
                up[n] = np.asarray(values[n], dtype=float) * (1 + H)
                down[n] = np.asarray(values[n], dtype=float) * (1 - H)
            (t_up, i_up), (t_down, i_down) = _time(op, up), _time(op, down)
            same = (i_up == index) & (i_down == index)
            assert same.sum() >= 3, (by, index, i_up, i_down)  # the points sit away from a switch
            fd = (t_up - t_down) / (2 * H)
            if by in ("msg_bytes", "ranks"):
                fd = fd / np.asarray(values[by], dtype=float)
                scale = t / np.asarray(values[by], dtype=float)
            else:
                scale = t
            assert_close(got[by][same], fd[same], rtol=1e-4, atol=1e-7 * scale[same].max(),
                         msg=f"{system} {op} {ranks} ranks: d/d{by}")


LAYOUTS = [("deepseek-v3", "d=8,t=4,p=4,ep=8,m=16", "dgx_h100"),
           ("qwen3-72b", "d=16,t=8,p=4,cp=2,m=32", "dgx_b200"),
           ("qwen3-72b", "d=4,t=2,p=8,m=64", "dgx_a100"),
           ("qwen3-72b", "d=8,t=4,p=4,cp=4,m=32,cp_algo=ulysses_cp", "dgx_h100")]  # CP as all-to-alls


def _stage_fd(pricer: TimePricer, batch: LayoutBatch, x: str, monkeypatch) -> np.ndarray:
    """Central difference of every stage's seconds in *x*, on the pricer's own path, derived fields held.

    The bound value of *x* is shifted (the placement, read from the layout fields, stays); for ``p`` the
    stage's layer counts move ∝ 1/p as well (the relaxation ``stage_slopes`` differentiates). A degree at
    1, the edge of its domain (a group of one rank runs no collective, its calls switch on above 1), takes
    the forward difference: ``stage_slopes`` gives the right derivative there.
    """
    values0, _ = pricer._values(batch)
    step = H * float(np.max(values0[x]))
    edge = float(np.max(values0[x])) == 1.0
    original_values, original_columns = pricer._values, pricer._layer_columns
    out = []
    for sign in ((1, 0) if edge else (1, -1)):
        def shifted(b, sign=sign):
            values, f = original_values(b)
            return dict(values, **{x: values[x] + sign * step}), f

        def columns(b, moe, sign=sign):
            lay, moe_lay, where, inside = original_columns(b, moe)
            if x != "p":
                return lay, moe_lay, where, inside
            p = float(np.max(values0["p"]))
            scale = p / (p + sign * step)
            return lay * scale, moe_lay * scale, where, inside

        monkeypatch.setattr(pricer, "_values", shifted)
        monkeypatch.setattr(pricer, "_layer_columns", columns)
        out.append(pricer.price_batch(batch, per_stage=True, validated=True).stages["total_s"][0])
        monkeypatch.undo()
    return (out[0] - out[1]) / (step if edge else 2 * step)


@pytest.mark.parametrize("model,layout,system", LAYOUTS, ids=[f"{m}-{s}" for m, _, s in LAYOUTS])
def test_stage_slopes_match_central_differences_of_the_pricer(model, layout, system, monkeypatch):
    _check_stage_slopes(TimePricer(model, system=system), layout, monkeypatch)


def test_stage_slopes_with_deepeps_dispatch_match_central_differences(monkeypatch):
    # EP 32 over four nodes on DeepEP's kernels (docs/time.md, "Expert dispatch").
    _check_stage_slopes(TimePricer("deepseek-v3", system="dgx_h100", ep_dispatcher="deepep"), "d=8,t=4,p=4,ep=32,m=16",
                        monkeypatch)


def _check_stage_slopes(pricer: TimePricer, layout: str, monkeypatch) -> None:
    parsed = parse_layout(layout, pricer.model.layout)
    batch = LayoutBatch.from_layouts([parsed])
    totals, slopes = pricer.stage_slopes(batch, DEGREES, validated=False)
    priced = pricer.price_batch(batch, per_stage=True).stages["total_s"][0]
    assert_close(totals[0], priced, rtol=1e-12, atol=0)
    nonzero = 0
    for x in DEGREES:
        fd = _stage_fd(pricer, batch, x, monkeypatch)
        assert_close(slopes[x][0], fd, rtol=2e-4, atol=1e-9 * np.nanmax(totals), msg=x)
        nonzero += bool(np.any(np.abs(fd) > 1e-6 * np.nanmax(totals)))
    assert nonzero >= 5  # the degrees do move the seconds: t, cp, p, m, b, s at least
    # Each level: scale its bound symbols by (1 ± H) in the pricer's hardware.
    base = dict(pricer.hardware)
    for level in LEVELS:
        ends = []
        for sign in (1, -1):
            pricer.hardware = {k: v * (1 + sign * H) if k in collective.LEVEL_PARAMETERS[level] else v
                               for k, v in base.items()}
            ends.append(pricer.price_batch(batch, per_stage=True, validated=True).stages["total_s"][0])
        pricer.hardware = base
        fd = (ends[0] - ends[1]) / (2 * H)
        assert_close(slopes[level][0], fd, rtol=2e-4, atol=1e-9 * np.nanmax(totals), msg=level)


def test_time_sensitivity_elasticities_and_levels():
    model = load_model("deepseek-v3")
    result = time_sensitivity(model, "d=8,t=4,p=4,ep=8,m=16", system="dgx_h100")
    assert result.value > 0 and result.bottleneck
    for d in result.degrees.values():
        assert_close(d.elasticity, d.value * d.derivative / result.value, rtol=1e-6, atol=1e-12)
    # A faster network or NVLink saves time; longer latencies cost time.
    assert result.levels["network_beta"].derivative < 0 and result.levels["nvlink_beta"].derivative < 0
    assert result.levels["nvlink_alpha"].derivative > 0
    # Seconds are 1/beta in the bandwidth terms and linear in the latencies: the level elasticities add to
    # -(bandwidth share) + (latency share), so they lie in [-1, 1] and beta's outweigh alpha's here.
    total = sum(lv.elasticity for lv in result.levels.values())
    assert -1 <= total <= 1


def test_cli_sensitivity_cost_time(capsys):
    args = ["sensitivity", "--model", "deepseek-v3", "--layout", "d=8,t=4,p=4,ep=8,m=16", "--device", "dgx_h100",
            "--cost", "time"]
    assert main([*args, "--json", "--degrees", "t,ep"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["cost"] == "time" and set(record["degrees"]) == {"t", "ep"}
    assert set(record["levels"]) == set(LEVELS)
    assert "seconds per unit of the degree" in record["units"]["derivative"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "network_beta" in out and "elasticity" in out
    # Bad input: a system without GPU facts, and an unknown one: one line, exit 2.
    for device in ("a3", "A3"):
        assert main(["sensitivity", "--model", "deepseek-v3", "--cost", "time", "--device", device]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and device in err[0], err
    assert main([*args, "--objective", "memory"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--objective memory" in err[0]


def test_a_low_precision_run_gathers_its_weights_at_its_width(capsys):
    """--precision fp8 with --cost time (eval, sensitivity): the distributed optimizer's weight all-gather moves 1
    byte a parameter where the recipes' quantized primary weights are gathered, 2 with --bf16-weights; nothing
    else changes."""
    base = ["--model", "llama3-70b", "--layout", "d=8,t=4,p=2,cp=1,vp=1,m=16,b=1", "--device", "dgx_h100",
            "--cost", "time", "--json"]

    def run(command, *extra):
        assert main([command, *base, *extra]) == 0
        return json.loads(capsys.readouterr().out)

    bf16, fp8, kept = (run("eval", *extra) for extra in ((), ("--precision", "fp8"),
                                                         ("--precision", "fp8", "--bf16-weights")))
    assert fp8["gather_bytes_per_param"] == 1 and kept["gather_bytes_per_param"] == bf16["gather_bytes_per_param"] == 2
    gather = "dp.all_gather"
    for b, f, k in zip(bf16["stages"], fp8["stages"], kept["stages"]):
        assert f["step_bytes"][gather] * 2 == b["step_bytes"][gather] > 0
        assert f["by_collective"][gather] < b["by_collective"][gather] == k["by_collective"][gather]
        assert {c: v for c, v in f["by_collective"].items() if c != gather} == {
            c: v for c, v in b["by_collective"].items() if c != gather}
    sens_bf16, sens_fp8 = run("sensitivity"), run("sensitivity", "--precision", "fp8")
    assert sens_fp8["precision"] == "fp8" and sens_fp8["value"] < sens_bf16["value"]
    assert_close(sens_fp8["value"], fp8["bottleneck"]["seconds"], rtol=1e-12)
