"""The time pricer (``codegen.pricing.time``), ``symcost eval --cost time`` and ``--convention consistent``."""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from codegen.cli import main
from codegen.configs import LayoutBatch, derive_fields_batch, parse_layout, validate_batch
from codegen.pricing.time import ITEMS, TIME_DIMENSIONS, WHATS, TimePricer
from codegen.validation.collectives import predict
from conftest import assert_close

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def llama() -> TimePricer:
    return TimePricer("llama2-7b", system="dgx_h100")


@pytest.fixture(scope="module")
def dsv3() -> TimePricer:
    return TimePricer("deepseek-v3", system="dgx_h100")


def _batch(pricer: TimePricer, text: str) -> LayoutBatch:
    return LayoutBatch.from_layouts([parse_layout(text, pricer.model.layout)])


# ----------------------------------------------------------------------------- units


def test_bytes_per_rank_per_step_match_a_hand_derivation(llama):
    """Llama-2-7B, d=2, t=2, p=2, SP and a distributed optimizer (the model file's run settings).

    By hand (Megatron-LM conventions): a stage holds 32 / 2 = 16 layers; an SP all-gather's S is one
    micro-batch's activation s·b·h·2 bytes, 4 all-gathers per layer per micro-batch, a rank sends
    (t − 1)/t of S; the optimizer shards over DP: one gradient reduce-scatter of the stage's
    non-expert gradients (P = 4h² + 3·h·h_ff + 2h per layer, bytes_grad each) and one parameter
    all-gather (bytes_p each); PP sends 2 m activations of s·b·h·2 / t bytes.
    """
    batch = _batch(llama, "d=2,t=2,p=2")
    f = derive_fields_batch(llama.model, batch, names=("s", "b", "h", "hff", "m", "bytes_compute", "bytes_grad",
                                                      "bytes_p", "sp"))
    s, b, h, hff, m = (float(np.ravel(f[k])[0]) for k in ("s", "b", "h", "hff", "m"))
    bc, bg, bp = (float(np.ravel(f[k])[0]) for k in ("bytes_compute", "bytes_grad", "bytes_p"))
    assert float(np.ravel(f["sp"])[0]) == 2, "the model file runs with sequence parallelism"
    layers, t, d = 16, 2, 2
    act = s * b * h * bc
    params = 4 * h * h + 3 * h * hff + 2 * h
    vol = llama.volumes(batch)
    by = {k: v[0, 0] for k, v in vol["step_bytes"].items()}
    assert_close(by["tp.all_gather"], 4 * m * layers * (t - 1) / t * act, rtol=1e-12, atol=1e-12)
    assert_close(by["tp.reduce_scatter"], 4 * m * layers * (t - 1) / t * act, rtol=1e-12, atol=1e-12)
    assert by["tp.all_reduce"] == 0 and by["cp.send_recv"] == 0 and by["ep.all_to_all"] == 0
    assert_close(by["dp.reduce_scatter"], params * layers * bg / t * (d - 1) / d, rtol=1e-12, atol=1e-12)
    assert_close(by["dp.all_gather"], params * layers * bp / t * (d - 1) / d, rtol=1e-12, atol=1e-12)
    assert by["dp.all_reduce"] == 0
    assert_close(by["pp.send_recv"], 2 * m * act / t, rtol=1e-12, atol=1e-12)
    assert_close(vol["msg_bytes"]["tp.all_gather"][0, 0], act, rtol=1e-12, atol=1e-12)
    assert vol["calls_count"]["tp.all_gather"][0, 1] == 4 * m * layers


def test_seconds_are_calls_times_the_collective_time(llama):
    """Each item's seconds = calls × NCCL's predicted time of one call (``validate collectives``' path)."""
    batch = _batch(llama, "d=2,t=4,p=2,m=8")
    st = llama.price_batch(batch, per_stage=True).stages
    for key, op, ranks in (("tp.all_gather", "all_gather", 4), ("tp.reduce_scatter", "reduce_scatter", 4)):
        calls, size = st["calls_count"][key][0, 0], st["msg_bytes"][key][0, 0]
        one = float(predict("dgx_h100", op, ranks, size).time_s)  # TP ranks are consecutive: one node
        assert_close(st["time_s"][key][0, 0], calls * one, rtol=1e-12, atol=1e-12)
    # The DP group (stride t = 4, 2 ranks) sits in one node: consecutive placement gives the same time.
    calls, size = st["calls_count"]["dp.reduce_scatter"][0, 0], st["msg_bytes"]["dp.reduce_scatter"][0, 0]
    assert_close(st["time_s"]["dp.reduce_scatter"][0, 0],
                 calls * float(predict("dgx_h100", "reduce_scatter", 2, size).time_s), rtol=1e-12, atol=1e-12)


def test_stage_total_is_the_sum_and_the_bottleneck_its_maximum(dsv3):
    batch = _batch(dsv3, "d=16,t=4,p=16,ep=8")
    res = dsv3.price_batch(batch, per_stage=True)
    st = res.stages
    total = sum(st["time_s"][f"{dim}.{coll}"] for dim, coll, _, _ in ITEMS)
    assert_close(st["total_s"], total, rtol=1e-12, atol=0)
    assert_close(res.bottleneck_s[0], np.nanmax(st["total_s"][0]), rtol=1e-12, atol=1e-12)
    assert_close(sum(res.by_dimension[d][0] for d in TIME_DIMENSIONS), res.bottleneck_s[0], rtol=1e-12, atol=1e-12)
    assert res.by_dimension["ep"][0] > 0 and res.by_dimension["cp"][0] == 0
    assert set(st) == {*WHATS, "total_s"}


@pytest.mark.parametrize("dims", [("tp", "cp", "pp"), ("tp", "cp", "ep", "pp"), ("ep",), ("dp",)])
def test_a_subset_of_dimensions_is_its_items_alone_and_a_lower_bound(dims):
    """``price_batch(dimensions=…)`` prices those dimensions' collectives only: every stage's seconds of them are
    the full pricing's, to the bit; the bottleneck is the stage with the most of them; and it is at most the full
    bottleneck (what a search's floors rely on), on a grid of distinct layouts (several stages each)."""
    pricer = TimePricer("deepseek-v3", system="dgx_h100")
    batch = _grid_batch(pricer.model, repeats=1)
    full = pricer.price_batch(batch, per_stage=True)
    part = pricer.price_batch(batch, per_stage=True, dimensions=dims)
    assert set(part.by_dimension) == set(dims)
    items = [f"{dim}.{coll}" for dim, coll, _, _ in ITEMS if dim in dims]
    assert set(part.stages["time_s"]) == set(items)
    for key in items:
        np.testing.assert_array_equal(part.stages["time_s"][key], full.stages["time_s"][key], err_msg=key)
    with np.errstate(invalid="ignore"):
        stage_totals = sum(np.where(np.isnan(full.stages["time_s"][k]), -np.inf, full.stages["time_s"][k])
                           for k in items)
    assert_close(part.bottleneck_s, stage_totals.max(axis=1), rtol=1e-12, atol=0)
    assert_close(sum(part.by_dimension[d] for d in dims), part.bottleneck_s, rtol=1e-12, atol=0)
    assert (part.bottleneck_s <= full.bottleneck_s * (1 + 1e-12)).all()
    assert (part.bottleneck_s < full.bottleneck_s).any(), "a dimension left out costs something somewhere"
    quick = pricer.price_batch(batch, validated=True, dimensions=dims)
    np.testing.assert_array_equal(quick.bottleneck_s, part.bottleneck_s)


@pytest.mark.parametrize("bad", [(), ("tp", "xp"), ["tp"], "tp"])
def test_an_unknown_dimension_subset_is_named(dsv3, bad):
    with pytest.raises(ValueError, match="dimensions"):
        dsv3.price_batch(_batch(dsv3, "d=16,t=4,p=16,ep=8"), dimensions=bad)


# ----------------------------------------------------------------------------- monotonicity


@pytest.mark.parametrize("key,larger", [("m", "m=64"), ("b", "b=2")])
def test_more_work_per_step_takes_longer(dsv3, key, larger):
    """More micro-batches (more calls) or larger micro-batches (larger messages): more seconds."""
    base = "d=16,t=4,p=16,ep=8,m=32,b=1"
    a = dsv3.price_batch(_batch(dsv3, base), per_stage=True)
    bigger = base.replace(f"{key}=32" if key == "m" else f"{key}=1", larger)
    z = dsv3.price_batch(_batch(dsv3, bigger), per_stage=True)
    for dim in ("tp", "ep", "pp"):
        assert z.by_dimension[dim][0] > a.by_dimension[dim][0]
    assert z.bottleneck_s[0] > a.bottleneck_s[0]


@pytest.mark.parametrize("cp", [2, 3, 8])
@pytest.mark.parametrize("m", [1, 3])
def test_forward_shares_are_the_calls_of_megatrons_forward_pass(cp, m):
    # What one layer's forward pass runs per micro-batch in Megatron-LM, counted here: with SP, 2 all-gathers and
    # 2 reduce-scatters (Korthikanti et al. 2022, Sec. 4.2.2), without SP 2 all-reduces (Shoeybi et al. 2019,
    # Sec. 3); the MoE token dispatch and combine, 2 all-to-alls; ring attention's cp - 1 key/value passes; Ulysses'
    # all-to-alls of Q, K, V and the attention output, 4. The pricer's share of each dimension's calls (derived from
    # the items' declarations) times the generated calls must give those counts; DP and PP run none in a layer.
    # With expert tensor parallelism (t_exp > 1) Megatron-Core's all-to-all dispatcher adds an all-gather of the
    # dispatched tokens and a reduce-scatter of the experts' output over the expert-TP group, one each forward.
    from codegen.pricing.engine import term_arguments, term_function
    from codegen.pricing.step_time import forward_shares

    def calls(dim: str, **values: float) -> Fraction:
        """The generated calls per layer of *dim*'s items, summed (whole numbers, so exact as a fraction)."""
        values = {"m": float(m), "t": 4.0, "sp": 4.0, "cp": float(cp), "ep": 8.0, "t_exp": 1.0, "cp_ulysses": 0.0,
                  "ep_dedup": 0.0, **values}
        names = [f"{d}_{c}_stage_calls_count" for d, c, _, _ in ITEMS if d == dim]
        return sum(Fraction(float(term_function(n)(**{a: values[a] for a in term_arguments(n)}))) for n in names)

    ring, ulysses = forward_shares(), forward_shares("ulysses_cp")
    assert ring == forward_shares("colossalai_cp") == forward_shares("hybrid_cp")
    assert ring["tp"] * calls("tp") == (2 + 2) * m and calls("tp") == (4 + 4) * m
    assert ring["tp"] * calls("tp", sp=1.0) == 2 * m and calls("tp", sp=1.0) == 4 * m
    assert ring["ep"] * calls("ep") == 2 * m and calls("ep") == 4 * m
    assert calls("ep", ep_dedup=1.0) == 4 * m  # DeepEP's dispatch and combine: the same calls on its own kernels
    assert ring["ep"] * calls("ep", t_exp=4.0) == (2 + 2) * m and calls("ep", t_exp=4.0) == (4 + 4) * m
    assert calls("ep", ep=1.0, t_exp=4.0) == 4 * m  # (no EP all-to-all with one EP rank; the expert-TP ones stay)
    assert ring["cp"] * calls("cp") == (cp - 1) * m and calls("cp") == 3 * (cp - 1) * m
    assert ulysses["cp"] * calls("cp", cp_ulysses=1.0) == 4 * m and calls("cp", cp_ulysses=1.0) == 8 * m
    assert ring["dp"] == ring["pp"] == ulysses["dp"] == ulysses["pp"] == 0
    assert {k: v for k, v in ulysses.items() if k != "cp"} == {k: v for k, v in ring.items() if k != "cp"}


def test_one_rank_groups_cost_nothing(llama):
    res = llama.price_batch(_batch(llama, "d=1,t=1,p=1,m=8"), per_stage=True)
    assert res.bottleneck_s[0] == 0
    assert all(float(v[0]) == 0 for v in res.by_dimension.values())


@pytest.mark.parametrize("name, attention, layout", [("llama2-7b", "mha", "d=2,t=2,p=2,cp=4,m=8"),
                                                     ("qwen3-72b", "gqa", "d=1,t=4,p=4,cp=2,m=8")])
def test_ulysses_cp_moves_what_the_original_counts_for_it(name, attention, layout):
    """With ``cp_algo=ulysses_cp`` CP is all-to-alls (queries and output, keys and values), not ring send/recvs.

    Their bytes per rank per step, summed, equal the original's Ulysses ``cp_traffic`` (HyperParallel, reference-
    checked, bytes per layer and micro-batch) times the stage's layers and the micro-batches: an independent
    count of the same exchange. Each item's seconds are its calls times NCCL's pick for one all-to-all.
    """
    pricer = TimePricer(name, system="dgx_h100")
    ring_batch = _batch(pricer, layout)
    batch = LayoutBatch.from_layouts([parse_layout(layout + ",cp_algo=ulysses_cp", pricer.model.layout)])
    st = pricer.price_batch(batch, per_stage=True).stages
    ring = pricer.price_batch(ring_batch, per_stage=True).stages
    names = ("s", "b", "h", "a", "n_kv", "dh", "t", "cp", "p", "m", "bytes_compute")
    f = {k: float(np.ravel(v)[0]) for k, v in derive_fields_batch(pricer.model, batch, names=names).items()}
    import generated

    original = getattr(generated, f"cp_ulysses_{attention}_traffic_bytes")
    per_layer = original(**{k: f[k] for k in generated.FORMULAS[original.__name__]["arguments"]})
    layers = pricer.model.n_lay / f["p"]  # the even split (no MTP layers in these models)
    ulysses = st["step_bytes"]["cp.all_to_all_qo"][0, 0] + st["step_bytes"]["cp.all_to_all_kv"][0, 0]
    assert_close(ulysses, per_layer * layers * f["m"], rtol=1e-12, atol=0)
    assert st["calls_count"]["cp.send_recv"][0, 0] == 0 and ring["calls_count"]["cp.send_recv"][0, 0] > 0
    for key, heads in (("cp.all_to_all_qo", f["a"]), ("cp.all_to_all_kv", f["n_kv"])):
        assert ring["calls_count"][key][0, 0] == 0
        size = st["msg_bytes"][key][0, 0]
        assert_close(size, f["s"] / f["cp"] * f["b"] * heads / f["t"] * f["dh"] * f["bytes_compute"], rtol=1e-12,
                     atol=0)
        calls = st["calls_count"][key][0, 0]
        assert calls == 4 * layers * f["m"]
        one = float(predict("dgx_h100", "all_to_all", int(f["cp"]), size).time_s)  # t·cp ranks fit one node
        assert_close(st["time_s"][key][0, 0], calls * one, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("zero, reshards, calls", [
    (0, True, (1, 0, 0)),  # nothing sharded: one all-reduce of the accumulated gradients (DDP)
    (1, True, (0, 1, 1)),  # optimizer states: one reduce-scatter, one all-gather per step (Megatron's dist. opt.)
    (2, True, (0, 8, 1)),  # gradients too: each micro-batch's gradients reduce-scattered, weights gathered once
    (3, True, (0, 8, 16)),  # weights too (FSDP), resharded: gathered for the forward and the backward of each
    (3, False, (0, 8, 1)),  # FSDP keeping the gathered weights: gathered once per step
])
def test_dp_calls_follow_what_the_layout_shards(llama, zero, reshards, calls):
    from dataclasses import replace

    from symbolic.vocabulary import ZERO_LEVELS

    layout = replace(parse_layout("d=4,t=2,p=1,m=8", llama.model.layout), reshards=reshards, **ZERO_LEVELS[zero])
    st = llama.price_batch(LayoutBatch.from_layouts([layout]), per_stage=True).stages
    got = tuple(st["calls_count"][f"dp.{c}"][0, 0] for c in ("all_reduce", "reduce_scatter", "all_gather"))
    assert got == calls
    for c, n in zip(("all_reduce", "reduce_scatter", "all_gather"), calls):
        one = float(predict("dgx_h100", c, 4, st["msg_bytes"][f"dp.{c}"][0, 0]).time_s) if n else 0.0
        # the DP group (stride t = 2, 4 ranks) sits in one node: consecutive placement gives the same time
        assert_close(st["time_s"][f"dp.{c}"][0, 0], n * one, rtol=1e-12, atol=0)


def test_gradients_reduce_over_the_data_and_context_parallel_ranks_together(llama, dsv3):
    # Every CP rank holds the same weights: the DP group of a layout with CP is d·cp ranks (Megatron's 'dp-cp'),
    # the experts' d·t·cp / (t_exp·ep) (world / (etp·ep·pp)).
    st = llama.price_batch(_batch(llama, "d=2,t=2,p=2,cp=2,m=8"), per_stage=True).stages
    for c in ("reduce_scatter", "all_gather"):
        calls, size = st["calls_count"][f"dp.{c}"][0, 0], st["msg_bytes"][f"dp.{c}"][0, 0]
        assert calls == 1
        # cp and dp are neighbours in tp-cp-ep-dp-pp: 4 ranks two apart, inside one 8-GPU node
        assert_close(st["time_s"][f"dp.{c}"][0, 0], float(predict("dgx_h100", c, 4, size).time_s), rtol=1e-12, atol=0)
    vol = llama.volumes(_batch(llama, "d=2,t=2,p=2,cp=2,m=8"))
    assert_close(vol["step_bytes"]["dp.reduce_scatter"][0, 0], vol["msg_bytes"]["dp.reduce_scatter"][0, 0] * 3 / 4,
                 rtol=1e-12, atol=0)
    batch = _batch(dsv3, "d=16,t=4,p=8,ep=8,cp=2,m=16")
    f = {k: float(np.ravel(v)[0]) for k, v in derive_fields_batch(dsv3.model, batch, names=("t_exp", "d_exp")).items()}
    assert (f["t_exp"], f["d_exp"]) == (4, 2)  # the original's d_exp = d / ep leaves CP out
    vol = dsv3.volumes(batch)
    size = vol["msg_bytes"]["dp.expert_reduce_scatter"][0, 0]
    assert_close(vol["step_bytes"]["dp.expert_reduce_scatter"][0, 0], size * 3 / 4, rtol=1e-12, atol=0)  # 4 ranks


@pytest.mark.parametrize("name, layout", [("llama2-7b", "d=2,t=2,p=2,m=8"), ("qwen3-72b", "d=2,t=8,p=4,m=8")])
def test_a_dense_model_makes_no_expert_calls(name, layout):
    # No routed experts: the expert data-parallel collectives would move 0 bytes, and NCCL discards an empty
    # collective (enqueue.cc taskAppend) -- no call, no latency. They once cost 7-12 us a step each.
    pricer = TimePricer(name, system="dgx_h100")
    res = pricer.price_batch(_batch(pricer, layout), per_stage=True)
    st = res.stages
    expert = [key for key in st["calls_count"] if key.startswith("dp.expert_")]
    assert len(expert) == 3
    for key in expert:
        assert np.all(st["msg_bytes"][key][0] == 0), key
        assert np.all(st["calls_count"][key][0] == 0) and np.all(st["time_s"][key][0] == 0), key
    dense = sum(st["time_s"][f"dp.{c}"][0, 0] for c in ("all_reduce", "reduce_scatter", "all_gather"))
    assert dense > 0 and res.by_dimension["dp"][0] == dense


def test_crossing_nodes_is_slower_than_staying_inside(llama):
    """The same DP all-gather over 2 ranks: inside a node (stride 4) vs across nodes (rank order dp first)."""
    inside = TimePricer("llama2-7b", system="dgx_h100", order="tp-cp-ep-dp-pp")
    across = TimePricer("llama2-7b", system="dgx_h100", order="dp-tp-cp-ep-pp")
    batch = _batch(llama, "d=2,t=8,p=1,m=8")
    a = inside.price_batch(batch, per_stage=True).stages["time_s"]
    z = across.price_batch(batch, per_stage=True).stages["time_s"]
    assert z["tp.all_gather"][0, 0] > a["tp.all_gather"][0, 0]  # TP now strided over nodes
    assert z["dp.all_gather"][0, 0] < a["dp.all_gather"][0, 0]  # DP now inside a node


# ----------------------------------------------------------------------------- batch = per layout


def test_batch_equals_each_layout_alone(dsv3):
    model = dsv3.model
    grid = dict(d=np.array([16, 8, 32, 16, 4, 64]), t=np.array([4, 8, 2, 4, 8, 1]), p=np.array([16, 8, 8, 4, 16, 8]),
                ep=np.array([8, 8, 16, 4, 8, 64]), m=np.array([32, 64, 16, 32, 32, 64]), b=np.array([1, 1, 2, 1, 1, 1]),
                cp=np.array([1, 1, 1, 2, 1, 1]))
    batch = LayoutBatch.from_arrays(model.layout, **grid)
    ok = validate_batch(model, batch)
    assert ok.sum() >= 4
    batch = batch.subset(ok)
    together = dsv3.price_batch(batch, per_stage=True)
    for i in range(len(batch)):
        alone = dsv3.price_batch(batch.subset(slice(i, i + 1)), per_stage=True)
        assert_close(alone.bottleneck_s[0], together.bottleneck_s[i], rtol=1e-12, atol=1e-12)
        assert alone.bottleneck_stage[0] == together.bottleneck_stage[i]
        p = batch.layout(i).p
        assert_close(alone.stages["total_s"][0, :p], together.stages["total_s"][i, :p], rtol=1e-12, atol=0)
        assert np.isnan(together.stages["total_s"][i, p:]).all()
    quick = dsv3.price_batch(batch, validated=True)
    np.testing.assert_array_equal(quick.bottleneck_s, together.bottleneck_s)
    assert quick.stages is None


def test_invalid_layouts_and_systems_are_named(dsv3):
    from codegen.configs import LayoutError

    bad = LayoutBatch.from_arrays(dsv3.model.layout, d=3, t=4, p=16, ep=8)
    with pytest.raises(LayoutError, match="layout 0"):
        dsv3.price_batch(bad)
    with pytest.raises(ValueError, match="no GPU and network facts"):
        TimePricer("llama2-7b", system="A2")
    with pytest.raises(ValueError, match="order"):
        TimePricer("llama2-7b", system="dgx_h100", order="tp-dp-pp")


def test_the_pricer_imports_no_sympy():
    code = ("import sys, codegen.pricing.time as t; from codegen.cli import eval as e; "
            "assert 'sympy' not in sys.modules, 'sympy imported'")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


# ----------------------------------------------------------------------------- CLI


def test_eval_cost_time_json_gives_seconds_per_stage_by_dimension(capsys):
    argv = ["eval", "--model", "deepseek-v3", "--layout", "d=16,t=4,p=16,ep=8", "--device", "dgx_h100",
            "--cost", "time", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cost"] == "time" and "seconds" in out["units"]
    assert len(out["stages"]) == 16
    for row in out["stages"]:
        assert set(row["by_dimension"]) == set(TIME_DIMENSIONS)
        assert_close(sum(row["by_dimension"].values()), row["total_s"], rtol=1e-12, atol=1e-12)
        assert_close(sum(row["by_collective"].values()), row["total_s"], rtol=1e-12, atol=1e-12)
    assert_close(out["bottleneck"]["seconds"], max(r["total_s"] for r in out["stages"]), rtol=1e-12, atol=1e-12)
    assert main(argv[:-1]) == 0
    table = capsys.readouterr().out
    assert "bottleneck: stage" in table and "ep.all_to_all" in table


def test_eval_convention_consistent_gives_bytes(capsys):
    assert main(["eval", "--model", "llama2-7b", "--layout", "d=2,t=2,p=2", "--convention", "consistent",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["convention"] == "consistent" and out["units"].startswith("bytes")
    assert out["stages"][0]["by_collective"]["tp.all_gather"] > 0
    # The original convention is today's output, unchanged.
    assert main(["eval", "--model", "llama2-7b", "--layout", "d=2,t=2,p=2", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == {"stages", "per_dim", "units"}


@pytest.mark.parametrize("extra,field", [
    (["--device", "A2", "--cost", "time"], "--device A2"),
    (["--device", "A3", "--cost", "time"], "--device A3"),
    (["--device", "dgx_h100", "--cost", "time", "--order", "tp-dp"], "order"),
    (["--device", "dgx_h100", "--cost", "time", "--memory"], "--memory"),
    (["--device", "dgx_h100", "--cost", "time", "--layout", "d=0"], "d"),
])
def test_eval_time_bad_input_is_one_line_exit_2(extra, field):
    argv = ["eval", "--model", "llama2-7b", *extra]
    proc = subprocess.run([sys.executable, "-m", "codegen.cli", *argv], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in proc.stderr


def test_repeated_layouts_priced_once_give_each_layouts_own_prices(dsv3):
    # The pricer evaluates each item once per distinct combination of what it reads; a batch with many
    # repeats must give every layout exactly what pricing it alone (one row: nothing to share) gives.
    texts = ["d=8,t=4,p=4,ep=8,m=16", "d=16,t=2,p=4,ep=16,m=16", "d=8,t=8,p=2,ep=8,m=16", "d=4,t=4,p=8,ep=4,m=32"]
    layouts = [parse_layout(t, dsv3.model.layout) for t in texts]
    order = [0, 1, 0, 2, 3, 1, 0, 3, 3, 2, 0, 0]
    batch = LayoutBatch.from_layouts([layouts[i] for i in order])
    together = dsv3.price_batch(batch, per_stage=True)
    for row, i in enumerate(order):
        alone = dsv3.price_batch(LayoutBatch.from_layouts([layouts[i]]), per_stage=True)
        assert together.bottleneck_s[row] == alone.bottleneck_s[0]
        for what in WHATS:
            for key, value in alone.stages[what].items():
                got = together.stages[what][key][row, :value.shape[1]]
                np.testing.assert_array_equal(got, value[0], err_msg=f"{what} {key} row {row}")


def _grid_batch(model, *, repeats: int) -> LayoutBatch:
    """Valid layouts of a small grid (degrees, micro-batches, batch size), each distinct, tiled *repeats* times
    and shuffled."""
    import itertools

    values = list(itertools.product([1, 2, 4, 8, 16, 32], [1, 2, 4, 8], [1, 2, 4, 8, 16], [1, 2], [1, 4, 16, 64],
                                    [1, 2], [1, 8, 32]))
    arrays = dict(zip(("d", "t", "p", "cp", "ep", "b", "m"), np.array(values, dtype=np.int64).T))
    ok = validate_batch(model, LayoutBatch.from_arrays(model.layout, **arrays))
    order = np.random.default_rng(7).permutation(np.tile(np.flatnonzero(ok), repeats))
    return LayoutBatch.from_arrays(model.layout, **{k: v[order] for k, v in arrays.items()})


@pytest.mark.parametrize("repeats", [1, 4])
@pytest.mark.parametrize("name", ["deepseek-v3", "qwen3-72b"])
def test_grouped_pricing_equals_ungrouped_to_the_bit(name, repeats, monkeypatch):
    """Each item is evaluated once per distinct tuple of its own inputs (``engine.KeyColumns.group``); every number
    must be the one evaluating each layout's row gives (``group_from`` past the batch: nothing grouped), on a batch
    whose layouts are all distinct (repeats 1: the items still repeat their few inputs) and on one where each
    repeats 4×."""
    from codegen.pricing.engine import KeyColumns

    pricer = TimePricer(name, system="dgx_h100")
    batch = _grid_batch(pricer.model, repeats=repeats)
    pricer.group_from = 256  # the grouped path on every block (the threshold is speed only)
    assert len(batch) >= 4 * pricer.group_from
    grouped_rows = []
    real = KeyColumns.group

    def spy(keys, names, **kwargs):
        found = real(keys, names, **kwargs)
        grouped_rows.append(None if found is None else (len(found[0]), keys.m))
        return found

    monkeypatch.setattr(KeyColumns, "group", spy)
    grouped = pricer.price_batch(batch, validated=True, per_stage=True)
    assert any(g is not None and g[0] < g[1] for g in grouped_rows), "no item was grouped: the test would prove nothing"
    pricer.group_from = len(batch) + 1
    grouped_rows.clear()
    plain = pricer.price_batch(batch, validated=True, per_stage=True)
    assert not grouped_rows
    np.testing.assert_array_equal(grouped.bottleneck_s, plain.bottleneck_s)
    np.testing.assert_array_equal(grouped.bottleneck_stage, plain.bottleneck_stage)
    for dim in TIME_DIMENSIONS:
        np.testing.assert_array_equal(grouped.by_dimension[dim], plain.by_dimension[dim], err_msg=dim)
    for what in (*WHATS, "total_s"):
        table = {"": plain.stages[what]} if what == "total_s" else plain.stages[what]
        for key in table:
            want = plain.stages[what] if what == "total_s" else plain.stages[what][key]
            got = grouped.stages[what] if what == "total_s" else grouped.stages[what][key]
            np.testing.assert_array_equal(got, want, err_msg=f"{what} {key}")


# ----------------------------------------------------------------------------- direct kernels: the same numbers


def _call_values(rng: np.random.Generator, g: int, u: int) -> dict[str, np.ndarray]:
    """Random NCCL call inputs as the time pricer passes them: the placement per layout ``(g, 1)``, S and n per
    stage column ``(g, u)``; groups inside one node and across many, one-rank groups and empty messages."""
    per_node = rng.choice([1.0, 2.0, 4.0, 8.0], (g, 1))
    nodes = rng.choice([1.0, 1.0, 2.0, 4.0, 16.0, 128.0], (g, 1))
    return {"ranks_per_node": per_node, "nodes": nodes, "nics_used": np.minimum(per_node, rng.choice([1.0, 8.0], (g, 1))),
            "ranks": np.broadcast_to(per_node * nodes, (g, u)).copy(),
            "msg_bytes": np.where(rng.random((g, u)) < 0.05, 0.0, np.floor(2.0 ** rng.uniform(0, 36, (g, u))))}


@pytest.mark.parametrize("system", ["dgx_h100", "dgx_a100", "gb200_nvl72"])
def test_chooser_gives_the_numbers_of_choose_to_the_bit(system, monkeypatch):
    """``Chooser`` runs the candidates' kernels with the hardware bound; every number of its ``Choice`` must be
    ``choose``'s (the generated functions' path) on random inputs of mixed shapes, and the direct path must be the
    one taken (``choose`` fails if called)."""
    import hardware
    from hardware._nccl import time_bindings

    from codegen.pricing import collective
    from codegen.pricing.time import OPS

    hardware_side = {k: float(v) for k, v in time_bindings(hardware.load(system)).items()}
    rng = np.random.default_rng(11)
    cases = [_call_values(rng, 500, 3), _call_values(rng, 40, 1), _call_values(rng, 1, 2)]
    inside = _call_values(rng, 60, 2)
    inside["nodes"] = np.ones((60, 1))  # the hierarchical candidate is unavailable everywhere: not evaluated
    cases.append(inside)
    cases.append({k: v[0, 0] for k, v in _call_values(rng, 1, 1).items()})  # 0-d
    for op in sorted(set(OPS.values())):
        # (the expert dispatch reads the model's top-k beside the hardware, as TimePricer binds it)
        shared = (dict(hardware_side, n_chosen_exp=8.0, n_route_groups=8.0, n_route_groups_topk=4.0)
                  if op == "ep_dispatch" else hardware_side)
        chooser = collective.Chooser(op, shared)
        assert chooser.direct, op
        wants = [collective.choose(op, {**shared, **values}) for values in cases]
        with monkeypatch.context() as patch:
            patch.setattr(collective, "choose", lambda *a: pytest.fail("Chooser fell back to choose"))
            gots = [chooser(values) for values in cases]
            together = chooser.times(cases)  # side by side: one evaluation, the unavailable set per case
        for want, got, one in zip(wants, gots, together):
            for field in ("time_s", "index", "times", "prices"):
                np.testing.assert_array_equal(getattr(got, field), getattr(want, field), err_msg=f"{op} {field}")
            assert got.labels == want.labels
            assert one.shape == want.time_s.shape
            np.testing.assert_array_equal(one, want.time_s, err_msg=f"{op} times")


def _assert_same_prices(got, want) -> None:
    np.testing.assert_array_equal(got.bottleneck_s, want.bottleneck_s)
    np.testing.assert_array_equal(got.bottleneck_stage, want.bottleneck_stage)
    for dim in TIME_DIMENSIONS:
        np.testing.assert_array_equal(got.by_dimension[dim], want.by_dimension[dim], err_msg=dim)
    if want.stages is not None:
        for what in WHATS:
            for key in want.stages[what]:
                np.testing.assert_array_equal(got.stages[what][key], want.stages[what][key], err_msg=f"{what} {key}")
        np.testing.assert_array_equal(got.stages["total_s"], want.stages["total_s"])


@pytest.mark.parametrize("group_from", [256, 1 << 30])
@pytest.mark.parametrize("name", ["deepseek-v3", "qwen3-72b"])
def test_direct_kernels_price_as_the_generated_functions_to_the_bit(name, group_from, monkeypatch):
    """The pricer's direct path (NCCL's pick through ``Chooser``, for every item of a collective at once)
    against the generated functions' (``choose`` per item, put in its place here), grouped and not, every
    number; the direct path must be taken."""
    from codegen.pricing import collective

    per_item = collective.choose  # the generated functions, before the patch below makes it fail

    def choose_per_item(op, calls):
        return [per_item(op, dict(pricer.hardware, **call)).time_s for call in calls]

    pricer = TimePricer(name, system="dgx_h100")
    # Ungrouped, the direct path takes a block's (layouts × distinct layer columns) within BOUND_BLOCK elements:
    # DeepSeek-V3's pipelines have up to three columns (its leading dense layers make one of their own).
    batch = _grid_batch(pricer.model, repeats=2).subset(slice(0, 5000))
    pricer.group_from = group_from
    taken = []
    real = collective.Chooser._fill  # the direct path's evaluation, of one call (__call__) or of several (times)
    monkeypatch.setattr(collective.Chooser, "_fill", lambda self, *args: taken.append(1) or real(self, *args))
    monkeypatch.setattr(collective, "choose", lambda *a: pytest.fail("the direct path fell back to choose"))
    for per_stage in (False, True):
        fast = pricer.price_batch(batch, validated=True, per_stage=per_stage)
        small = pricer.price_batch(batch.subset(slice(0, 37)), validated=True, per_stage=per_stage)
        assert taken, "no pick went through Chooser: the test would prove nothing"
        with monkeypatch.context() as patch:
            patch.setattr(pricer, "_pick_times", choose_per_item)  # the generated functions, per item
            _assert_same_prices(fast, pricer.price_batch(batch, validated=True, per_stage=per_stage))
            _assert_same_prices(small, pricer.price_batch(batch.subset(slice(0, 37)), validated=True,
                                                          per_stage=per_stage))


def test_pricers_of_one_system_share_nccls_pick_until_their_constants_change():
    first = TimePricer("deepseek-v3", system="dgx_h100")
    second = TimePricer("deepseek-v3", system="dgx_h100", recompute="full")
    assert first._chooser("all_gather") is second._chooser("all_gather")
    second.hardware = dict(second.hardware, nic_bw_bytes_per_s=2 * second.hardware["nic_bw_bytes_per_s"])
    scaled = second._chooser("all_gather")
    assert scaled is not first._chooser("all_gather") and scaled.shared == second.hardware


def test_placement_fields_are_what_the_groups_read():
    """``TimePricer.placement_fields`` (what a search's item keys derive from) names exactly the fields the pricer
    places its groups by: a recording stand-in for the fields, handed to the pricer's own placement."""
    class Recorder:
        def __init__(self):
            self.read = set()

        def num(self, name):
            self.read.add(name)
            return 2.0

    pricer = TimePricer("deepseek-v3", system="dgx_h100")
    recorder = Recorder()
    groups = pricer._groups(recorder)
    declared = TimePricer.placement_fields()
    assert set(declared) == set(groups)
    assert set().union(*declared.values()) == recorder.read


def test_expert_tensor_parallelism_is_priced():
    """An expert-TP group (etp > 1) all-gathers the tokens an EP rank received and reduce-scatters the experts'
    output (Megatron-Core's all-to-all dispatcher): S is etp times the rank's routed tokens (the EP all-to-all's
    S), so a layout with ep = 1, etp = 8 no longer communicates nothing for its experts."""
    from codegen.configs import load_model
    from codegen.pricing.engine import term_arguments, term_function

    values = {"cap_fact": 1.0, "n_chosen_exp": 8.0, "s": 4096.0, "cp": 2.0, "b": 1.0, "h": 7168.0,
              "bytes_compute": 2.0, "t": 4.0, "t_exp": 8.0, "m": 3.0, "ep": 1.0, "n_moe_layers_stage": 1.0,
              "ep_dedup": 0.0}

    def form(name):
        return float(term_function(name)(**{a: values[a] for a in term_arguments(name)}))

    a2a = 8.0 * 4096 / 2 * 1 * 7168 * 2 / 4  # top-k · s/cp · b · h · bytes / t: the rank's routed tokens
    assert form("ep_all_to_all_stage_msg_bytes") == a2a
    for coll in ("all_gather", "reduce_scatter"):
        assert form(f"ep_expert_tp_{coll}_stage_msg_bytes") == 8 * a2a
        assert form(f"ep_expert_tp_{coll}_stage_calls_count") == 2 * 3  # one forward, one backward per micro-batch
    assert form("ep_all_to_all_stage_calls_count") == 0  # (one EP rank: no all-to-all)
    pricer = TimePricer(load_model("deepseek-v3"), system="dgx_h100")
    keys = dict(d=np.array([16]), t=np.array([1]), p=np.array([16]), cp=np.array([1]), ep=np.array([1]),
                m=np.array([64]), b=np.array([1]))
    assert pricer(**keys, etp=np.array([1])).by_dimension["ep"][0] == 0
    assert pricer(**keys, etp=np.array([8])).by_dimension["ep"][0] > 0
