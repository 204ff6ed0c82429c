"""The expert dispatch of DeepEP / Hybrid-EP (a token once per destination node and rank): its closed form against
a simulation of the routes, and the run setting through the pricers, the search, the CLI and the step-time rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import generated
import hardware
from codegen.cli import main
from codegen.configs import load_model
from codegen.pricing.time import TimePricer
from codegen.runtime.inputs import InputError
from codegen.search.spec import SearchSpec
from codegen.validation.step_rows import read_rows, recipe_dispatcher
from codegen.validation.csvfile import read_table
from hardware._nccl import time_bindings

from conftest import assert_close

NAME = "collective_ep_dispatch_dedup_time_s"


def _time(values: dict) -> float:
    return float(getattr(generated, NAME)(**{a: values[a] for a in generated.FORMULAS[NAME]["arguments"]}))


def _values(ranks: int, per_node: int, k: int, size: float, groups: tuple[int, int] = (1, 1)) -> dict:
    b = time_bindings(hardware.load("dgx_h100"))
    return dict(b, msg_bytes=size, ranks=float(ranks), ranks_per_node=float(per_node), nodes=float(ranks // per_node),
                nics_used=float(per_node), n_chosen_exp=float(k), n_route_groups=float(groups[0]),
                n_route_groups_topk=float(groups[1]))


def _simulated_rows(ranks: int, per_node: int, k: int, tokens: int = 200_000) -> tuple[float, float]:
    """Rows a rank sends over the network and over NVLink per token it holds, from random routes: each token
    picks k ranks uniformly (with replacement, the form's assumption); a row goes once to each other node hit (to
    the rank of the sender's local index there) and, in each node hit (its own too), once to each rank hit other
    than the one that received it there."""
    rng = np.random.default_rng(7)
    nodes = ranks // per_node
    picks = rng.integers(0, ranks, size=(tokens, k))  # sender: rank 0 (node 0, local index 0)
    hit = np.zeros((tokens, ranks), dtype=bool)
    np.put_along_axis(hit, picks, True, axis=1)
    by_node = hit.reshape(tokens, nodes, per_node)
    node_hit = by_node.any(axis=2)
    network = node_hit[:, 1:].sum(axis=1).mean()
    # In every node hit, the receiving rank is local index 0: NVLink carries the rows to the others hit there.
    nvlink = by_node[:, :, 1:].sum(axis=(1, 2)).mean()
    return float(network), float(nvlink)


@pytest.mark.parametrize("ranks,per_node,k", [(8, 8, 8), (16, 8, 8), (32, 8, 8), (64, 8, 4), (8, 1, 2)])
def test_the_rows_sent_match_a_simulation_of_the_routes(ranks, per_node, k):
    size = 2.0 ** 30  # the NCCL all-to-all's S: k rows per token
    v = _values(ranks, per_node, k, size)
    network, nvlink = _simulated_rows(ranks, per_node, k)
    row = size / k
    latency = v["alpha_ring_simple_s"] + (v["hop_nvlink_ring_simple_s"] if ranks == per_node
                                          else v["hop_net_ring_simple_s"] + v["net_latency_simple_s"])
    nvlink_bw = v["ring_channels"] * v["ring_channel_bw_bytes_per_s"]
    net_bw = v["nic_bw_bytes_per_s"] * v["net_bw_efficiency"]  # one NIC per rank on DGX H100
    expected = latency + max(row * nvlink / nvlink_bw, row * network / net_bw)
    assert_close(_time(v), expected, rtol=0.01)  # the simulation's sampling error is well under 1 %


def _simulated_group_rows(ranks: int, per_node: int, k: int, groups: int, topk: int, experts: int = 256,
                          tokens: int = 100_000) -> tuple[float, float]:
    """As :func:`_simulated_rows` under group-limited routing: each token takes *topk* of *groups* groups of
    consecutive experts (uniformly), then its k experts uniformly (with replacement) among theirs; rank r holds
    experts ``[r E/n, (r + 1) E/n)`` and a node consecutive ranks."""
    rng = np.random.default_rng(11)
    nodes, per_group = ranks // per_node, experts // groups
    chosen = np.argsort(rng.random((tokens, groups)), axis=1)[:, :topk]
    slot = rng.integers(0, topk * per_group, size=(tokens, k))
    expert = np.take_along_axis(chosen, slot // per_group, axis=1) * per_group + slot % per_group
    hit = np.zeros((tokens, ranks), dtype=bool)
    np.put_along_axis(hit, expert // (experts // ranks), True, axis=1)
    by_node = hit.reshape(tokens, nodes, per_node)
    return float(by_node.any(axis=2)[:, 1:].sum(axis=1).mean()), float(by_node[:, :, 1:].sum(axis=(1, 2)).mean())


def _move_rows(v: dict) -> tuple[float, float]:
    """The rows per token the form prices over the network and over NVLink, read back from its two limits."""
    slow_net = dict(v, nic_bw_bytes_per_s=v["nic_bw_bytes_per_s"] * 1e-6)  # the network term alone sets the time
    slow_nvl = dict(v, ring_channel_bw_bytes_per_s=v["ring_channel_bw_bytes_per_s"] * 1e-6)
    latency = v["alpha_ring_simple_s"] + v["hop_net_ring_simple_s"] + v["net_latency_simple_s"]
    row = v["msg_bytes"] / v["n_chosen_exp"]
    network = (_time(slow_net) - latency) * v["nic_bw_bytes_per_s"] * 1e-6 * v["net_bw_efficiency"] / row
    nvlink = (_time(slow_nvl) - latency) * v["ring_channels"] * v["ring_channel_bw_bytes_per_s"] * 1e-6 / row
    return network, nvlink


@pytest.mark.parametrize("ranks,exact", [(64, True), (128, True), (32, False)])
def test_group_limited_routing_caps_the_nodes_a_token_reaches(ranks, exact):
    # DeepSeek-V3's routing (256 experts, top-8 from the best 4 of 8 groups) with EP over 8, 16 and 4 nodes of 8.
    v = _values(ranks, 8, 8, 2.0 ** 30, groups=(8, 4))
    network, nvlink = _move_rows(v)
    sim_network, sim_nvlink = _simulated_group_rows(ranks, 8, 8, 8, 4)
    if exact:  # groups that are nodes, or span whole nodes: the form is exact under uniform picks
        assert_close(network, sim_network, rtol=0.01)
        assert_close(nvlink, sim_nvlink, rtol=0.01)
    unlimited = _move_rows(_values(ranks, 8, 8, 2.0 ** 30))
    if not exact:
        # Two groups a node: a token's four groups may share nodes and reach fewer than the four the cap allows, so
        # the form (then the one without groups: the cap does not bind) prices more than the routes move (24 %).
        assert (network, nvlink) == unlimited
        assert sim_network <= network <= 1.3 * sim_network and sim_nvlink <= nvlink <= 1.3 * sim_nvlink
    assert network <= unlimited[0] * (1 + 1e-12)  # never more than without groups


def test_one_node_sends_each_row_once_per_rank_and_nothing_over_the_network():
    v = _values(8, 8, 8, 2.0 ** 30)
    slow_net = dict(v, nic_bw_bytes_per_s=v["nic_bw_bytes_per_s"] / 1000)
    assert _time(slow_net) == _time(v)
    # Fewer bytes than NCCL's all-to-all of k copies: (q - 1)(1 - (1 - 1/q)^k) rows instead of k (q - 1)/q.
    move = _time(v) - v["alpha_ring_simple_s"] - v["hop_nvlink_ring_simple_s"]
    assert_close(move * v["ring_channels"] * v["ring_channel_bw_bytes_per_s"],
                 2.0 ** 30 / 8 * 7 * (1 - (7 / 8) ** 8), rtol=1e-12)


def test_deduplication_cuts_the_expert_all_to_all_across_nodes_and_leaves_a_dense_model_alone():
    layout = dict(d=np.array([16]), t=np.array([1]), p=np.array([1]), cp=np.array([1]), ep=np.array([16]),
                  m=np.array([64]), b=np.array([1]))
    moe = load_model("qwen3-30b-a3b")
    nccl = TimePricer(moe, system="dgx_h100")(**layout).by_dimension
    dedup = TimePricer(moe, system="dgx_h100", ep_dispatcher="deepep")(**layout).by_dimension
    # 16 ranks over 2 nodes, top-8: about one row per token crosses the network instead of k/2 = 4.
    assert 0.2 < dedup["ep"][0] / nccl["ep"][0] < 0.35
    assert dedup["dp"][0] == nccl["dp"][0]
    dense = load_model("llama3-8b")
    dense_layout = dict(layout, ep=np.array([1]))
    a = TimePricer(dense, system="dgx_h100")(**dense_layout).bottleneck_s
    b = TimePricer(dense, system="dgx_h100", ep_dispatcher="hybridep")(**dense_layout).bottleneck_s
    assert a[0] == b[0]


def test_an_unknown_dispatcher_is_one_error_naming_it():
    with pytest.raises(InputError, match="ep_dispatcher: expected one of alltoall, deepep, hybridep, got 'nccl'"):
        TimePricer(load_model("qwen3-30b-a3b"), system="dgx_h100", ep_dispatcher="nccl")
    with pytest.raises(InputError, match="ep_dispatcher"):
        SearchSpec(load_model("qwen3-30b-a3b"), 16, 1024, "dgx_h100", ep_dispatcher="flex")
    with pytest.raises(InputError, match="--objective original has none"):
        SearchSpec(load_model("qwen3-30b-a3b"), 16, 1024, "dgx_h100", objective="original", ep_dispatcher="deepep")


def test_the_cli_takes_the_dispatcher_where_the_time_is_priced(capsys):
    args = ["eval", "--model", "qwen3-30b-a3b", "--device", "dgx_h100", "--layout", "d=16,t=1,p=1,ep=16,m=64,b=1"]
    assert main([*args, "--cost", "step-time", "--ep-dispatcher", "deepep", "--json"]) == 0
    assert '"ep_dispatcher": "deepep"' in capsys.readouterr().out
    assert main([*args, "--ep-dispatcher", "deepep"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--ep-dispatcher deepep" in err[0]


def test_a_rows_dispatcher_cell_wins_and_an_unknown_one_names_its_line(tmp_path):
    header = ("model,model_family,system,gpus,precision,global_batch,micro_batch,seq_len,tp,pp,cp,ep,layers,hidden,"
              "ffn_hidden,heads,kv_heads,vocab,experts,top_k,moe_ffn_hidden,measured_step_s,release,ep_dispatcher")
    row = ("Qwen3_30B_a3B,Qwen3,dgx_h100,16,FP8,1024,1,4096,1,1,1,16,48,2048,6144,32,4,151936,128,8,768,29.45,26.04,")
    good = tmp_path / "rows.csv"
    good.write_text(f"{header}\n{row}\n{row}deepep\n")
    rows = read_rows(read_table(good))
    assert recipe_dispatcher(rows[0]) == ("hybridep", recipe_dispatcher(rows[0])[1])
    assert "v0.4.0" in recipe_dispatcher(rows[0])[1]
    assert recipe_dispatcher(rows[1]) == ("deepep", "table")
    bad = tmp_path / "bad.csv"
    bad.write_text(f"{header}\n{row}nccl\n")
    with pytest.raises(ValueError, match=r"line 2.*ep_dispatcher.*'nccl'"):
        read_rows(read_table(bad))


def test_the_sensitivity_in_seconds_takes_the_dispatcher(capsys):
    args = ["sensitivity", "--model", "qwen3-30b-a3b", "--device", "dgx_h100", "--layout",
            "d=16,t=1,p=1,ep=16,m=64,b=1", "--degrees", "d,ep"]
    assert main([*args, "--cost", "time", "--ep-dispatcher", "hybridep", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"ep_dispatcher": "hybridep"' in out
    assert main([*args, "--ep-dispatcher", "hybridep"]) == 2  # the volume cost has no dispatcher
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--ep-dispatcher hybridep" in err[0]


def test_symcost_collective_prices_one_dispatch_as_the_form_does(capsys):
    assert main(["collective", "ep_dispatch", "--system", "dgx_h100", "--ranks", "16", "--bytes", "64MiB",
                 "--top-k", "8", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["placement"] == {"ranks_per_node": 8, "nodes": 2, "nics_used": 8} and got["algorithm"] == "dedup"
    assert_close(got["time_s"], _time(_values(16, 8, 8, 2.0 ** 26)), rtol=1e-12)
    for args, needle in ((["ep_dispatch"], "--top-k: ep_dispatch needs"),
                         (["all_to_all", "--top-k", "8"], "--top-k 8: only ep_dispatch reads it"),
                         (["ep_dispatch", "--top-k", "0"], "--top-k: a whole number of experts per token"),
                         (["ep_dispatch", "--top-k", "8", "--algo", "ring"], "--algo ring: ep_dispatch runs")):
        assert main(["collective", *args, "--system", "dgx_h100", "--ranks", "16", "--bytes", "64MiB"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err


def test_route_groups_are_read_from_the_model_file_and_checked(tmp_path):
    from codegen.configs import ModelConfigError, load_model

    bundled = load_model("deepseek-v3")
    assert (bundled.n_route_groups, bundled.n_route_groups_topk) == (8, 4)
    assert (load_model("qwen3-30b-a3b").n_route_groups, load_model("qwen3-30b-a3b").n_route_groups_topk) == (1, 1)
    text = Path(bundled.source).read_text(encoding="utf-8")
    for old, new, needle in (("n_group: 8", "n_group: 7", "n_group: must divide the 256 routed experts, got 7"),
                             ("topk_group: 4", "topk_group: 9", "topk_group: cannot exceed n_group = 8, got 9"),
                             ("    topk_group: 4\n", "", "topk_group: required key is missing"),
                             ("n_group: 8", "n_group: 256", "topk_group: 4 groups of 1 experts hold fewer than")):
        path = tmp_path / "model.yaml"
        path.write_text(text.replace(old, new, 1), encoding="utf-8")
        with pytest.raises(ModelConfigError, match=needle):
            load_model(str(path))


def test_eval_cost_time_says_which_dispatcher_it_priced(capsys):
    args = ["eval", "--model", "qwen3-30b-a3b", "--device", "dgx_h100", "--cost", "time", "--layout",
            "d=16,t=1,p=1,ep=16,m=64,b=1"]
    assert main([*args, "--json"]) == 0
    nccl = json.loads(capsys.readouterr().out)
    assert main([*args, "--ep-dispatcher", "hybridep", "--json"]) == 0
    dedup = json.loads(capsys.readouterr().out)
    assert (nccl["ep_dispatcher"], dedup["ep_dispatcher"]) == ("alltoall", "hybridep")
    # One EP item runs under each: NCCL's all-to-all, or the dedup dispatch, never both.
    nccl_items, dedup_items = nccl["stages"][0]["by_collective"], dedup["stages"][0]["by_collective"]
    assert nccl_items["ep.dedup_dispatch"] == 0 < nccl_items["ep.all_to_all"]
    assert dedup_items["ep.all_to_all"] == 0 < dedup_items["ep.dedup_dispatch"]
