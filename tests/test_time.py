"""The time model: collective closed forms (identities, units, monotonicity), placement, per-step
volumes, the NCCL data table, the validation against the shipped nccl-tests sweeps, and the CLI."""

from __future__ import annotations

import collections
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

import generated
import hardware
from codegen.cli import main
from codegen.cli.collective import parse_size
from codegen.validation import collectives
from codegen.pricing.placement import DEFAULT_ORDER, group_strides
from hardware._nccl import RingGraph, nccl_tuning, p2p_channels, ring_graph, time_bindings
from symbolic import registry
from symbolic.symbols import SPECS, symbol

from conftest import assert_close

#: The measurements the product ships and reads by default (package data).
SHIPPED = collectives.DEFAULT_DATA
SHARED = Path(__file__).resolve().parents[2] / "shared" / "measurements" / "nccl_single_node.csv"
TIME_SYSTEMS = [n for n in hardware.names() if hardware.load(n).gpu is not None]


def _values(system: str, ranks, size, nodes=1, per_node=None, nics=None) -> dict:
    b = time_bindings(hardware.load(system))
    per_node = ranks if per_node is None else per_node
    return dict(b, msg_bytes=np.asarray(size, dtype=float), ranks=np.asarray(ranks, dtype=float),
                ranks_per_node=per_node, nodes=nodes, nics_used=per_node if nics is None else nics)


def _eval(name: str, values: dict) -> np.ndarray:
    return getattr(generated, name)(**{a: values[a] for a in generated.FORMULAS[name]["arguments"]})


# ------------------------------------------------------------------ the shipped data


def test_shipped_measurements_equal_the_shared_copy():
    if not SHARED.exists():
        pytest.skip("the shared measurements folder is not beside this clone")
    assert SHIPPED.read_bytes() == SHARED.read_bytes()


# ------------------------------------------------------------------ textbook identities


@pytest.mark.parametrize("proto", ["ll", "ll128", "simple"])
@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_ring_all_reduce_is_reduce_scatter_plus_all_gather_in_bandwidth(proto, ranks):
    # The bandwidth terms add exactly (2(n-1) steps = (n-1) + (n-1)); latencies add up to one base latency.
    # The ring loop's fill is paid once per call, not once per half: half a chunk step with Simple
    # (collectives.h), one with LL and LL128 (their final receive unpacks the FIFO).
    v = _values("dgx_h100", ranks, 2.0**40)
    ar = _eval(f"collective_all_reduce_ring_{proto}_time_s", v)
    rs = _eval(f"collective_reduce_scatter_ring_{proto}_time_s", v)
    ag = _eval(f"collective_all_gather_ring_{proto}_time_s", v)
    base = v[f"alpha_ring_{proto}_s"]
    simple = v["ring_channels"] * v["ring_channel_bw_bytes_per_s"]
    bus = {"simple": simple, "ll": min(v["ll_max_bw_bytes_per_s"], simple / 2),
           "ll128": min(0.92 * simple, v["ring_channels"] * v["ll128_channel_max_bw_bytes_per_s"])}[proto]
    fill = (0.5 if proto == "simple" else 1.0) * v["msg_bytes"] / (ranks * bus)
    assert_close(ar, rs + ag - base - fill, rtol=1e-12)
    assert fill > 0 and np.all(ar < rs + ag - base)


@pytest.mark.parametrize("system", ["dgx_a100", "dgx_h100", "dgx_b200"])
@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
def test_busbw_of_a_bandwidth_bound_ring_is_the_ring_bandwidth(system, op):
    # With many ranks the fill (1/2 step per n - 1 steps) vanishes: busbw is the ring's bus bandwidth.
    v = _values(system, 4096, 2.0**60)
    t = _eval(f"collective_{op}_ring_simple_time_s", v)
    busbw = (4095 / 4096) * v["msg_bytes"] / t
    assert_close(busbw, v["ring_channels"] * v["ring_channel_bw_bytes_per_s"], rtol=2e-4)
    # 8 ranks: 7 chunk steps of data cost 7 + 1/2 (the Simple protocol's fill), so busbw = B x 7 / 7.5.
    v = _values(system, 8, 2.0**54)
    busbw = (7 / 8) * v["msg_bytes"] / _eval(f"collective_{op}_ring_simple_time_s", v)
    assert_close(busbw, v["ring_channels"] * v["ring_channel_bw_bytes_per_s"] * 7 / 7.5, rtol=1e-6)


def test_units_catch_gib_and_bidirectional_mix_ups():
    # The catalog's NVLink figure is per direction: half the datasheet's bidirectional total, and
    # NCCL's effective ring bandwidth sits below it (a bidirectional mix-up would put it above).
    for name, per_dir in (("dgx_a100", 300e9), ("dgx_h100", 450e9), ("dgx_b200", 900e9)):
        system = hardware.load(name)
        assert system.levels[0].bandwidth_bytes_per_s == per_dir
        b = time_bindings(system)
        ring = b["ring_channels"] * b["ring_channel_bw_bytes_per_s"]
        assert 0.7 * per_dir < ring <= 0.8 * per_dir + 1e6, (name, ring)
        # 1 GB (1e9 bytes) all-gather over 8 ranks, bandwidth-bound: busbw in GB/s of 1e9 bytes is the
        # ring's bus bandwidth x 7/7.5 (the fill); read as GiB the same time would be 7.4 % off.
        t = float(_eval("collective_all_gather_ring_simple_time_s", _values(name, 8, 1e12)))
        assert_close((7 / 8) * 1e12 / t, ring * 7 / 7.5, rtol=1e-4)
    # The shipped data's bandwidth columns are GB = 1e9 bytes (codegen/validation/data/README.md), not GiB.
    data = collectives.load_measurements(SHIPPED)
    rows = data.msg_bytes >= 2**20
    import csv
    with SHIPPED.open(newline="") as handle:
        algbw = np.array([float(r["algbw_GBps"]) for r in csv.DictReader(handle)])
    assert_close(algbw[rows], data.msg_bytes[rows] / data.time_s[rows] / 1e9, rtol=1e-2, atol=1e-3)
    assert not np.allclose(algbw[rows], data.msg_bytes[rows] / data.time_s[rows] / 2**30, rtol=1e-2)


def test_busbw_factors_are_nccl_tests_definitions():
    n = np.array([2.0, 4.0, 8.0])
    assert_close(generated.collective_all_reduce_nccl_busbw_factor_ratio(ranks=n), 2 * (n - 1) / n)
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert_close(getattr(generated, f"collective_{op}_nccl_busbw_factor_ratio")(ranks=n), (n - 1) / n)
    p = collectives.predict("dgx_h100", "all_reduce", 8, 2.0**26)
    assert_close(p.algbw_bytes_per_s, 2.0**26 / p.time_s)
    assert_close(p.busbw_bytes_per_s, 1.75 * 2.0**26 / p.time_s)


def test_reduce_is_priced_as_broadcast():
    """tuning.cc gives Reduce and Broadcast one path: the ring alone, nsteps = n, one hop added to the base latency
    (lines 289-294, 395-402), and their kernels slice a chunk alike (REDUCE_ and BROADCAST_SLICESTEPS = CHUNKSTEPS
    = 1, src/include/collectives.h); nccl-tests' busbw factor is 1 for both."""
    sizes = 2.0 ** np.arange(3, 34)
    for system, ranks, per_node in (("dgx_h100", 8, None), ("dgx_h100", 32, 8), ("dgx_a100", 16, 4),
                                    ("gb200_nvl72", 72, None)):
        reduce = collectives.predict(system, "reduce", ranks, sizes, gpus_per_node=per_node)
        broadcast = collectives.predict(system, "broadcast", ranks, sizes, gpus_per_node=per_node)
        assert list(reduce.candidates) == list(broadcast.candidates) == ["ring_ll", "ring_ll128", "ring_simple"]
        assert np.array_equal(reduce.time_s, broadcast.time_s) and list(reduce.algorithm) == list(broadcast.algorithm)
    assert generated.collective_reduce_nccl_busbw_factor_ratio() == 1.0  # busbw = algbw, a constant form


def test_chosen_time_is_the_real_time_of_the_cheapest_tuned_price():
    sizes = 2.0 ** np.arange(9, 30)
    for system in ("dgx_a100", "dgx_h100", "dgx_b200"):
        for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "send_recv"):
            p = collectives.predict(system, op, 8, sizes)
            labels = list(p.candidates)
            prices = np.stack([p.prices[k] for k in labels])
            first = np.argmin(prices, axis=0)  # NCCL: the first candidate (its loop order) with the least price
            assert list(p.algorithm) == [labels[i] for i in first]
            assert_close(p.time_s, np.stack([p.candidates[k] for k in labels])[first, np.arange(len(sizes))],
                         rtol=1e-12)
            # The real time is never below the price (the Simple fill only adds).
            assert np.all(np.stack(list(p.candidates.values())) >= prices * (1 - 1e-12))
    small, large = collectives.predict("dgx_h100", "all_reduce", 8, [4096, 2**29]).algorithm
    assert small == "ring_ll" and large == "nvls_simple"
    # No NVLS on A100 (gen-2 NVSwitch), and none across nodes.
    assert "nvls" not in "".join(collectives.predict("dgx_a100", "all_reduce", 8, sizes).algorithm)
    assert np.isinf(collectives.predict("dgx_h100", "all_reduce", 16, [2**29]).candidates["nvls_simple"]).all()


def test_nvls_does_not_reduce_8_bit_types():
    # NCCL src/include/device.h ncclNvlsSupported: no 8-bit type; enqueue.cc keeps NVLS for all-gather (no reduction).
    size = [2.0**29]
    half = collectives.predict("dgx_h100", "all_reduce", 8, size, "half")
    int8 = collectives.predict("dgx_h100", "all_reduce", 8, size, "int8")
    assert half.algorithm[0] == "nvls_simple" and np.isfinite(half.candidates["nvls_simple"]).all()
    assert np.isinf(int8.candidates["nvls_simple"]).all() and int8.algorithm[0] != "nvls_simple"
    assert int8.time_s[0] > half.time_s[0]  # NVLS is NCCL's fastest all-reduce there
    assert_close(collectives.predict("dgx_h100", "all_reduce", 8, size).time_s, half.time_s, rtol=1e-12)
    assert np.isinf(collectives.predict("dgx_b200", "reduce_scatter", 8, size, "int8").candidates["nvls_simple"]).all()
    gather = collectives.predict("dgx_h100", "all_gather", 8, size, "int8")
    assert np.isfinite(gather.candidates["nvls_simple"]).all()
    assert collectives.nvls_reduces("bfloat16") and collectives.nvls_reduces("float") and collectives.nvls_reduces(None)
    assert not collectives.nvls_reduces("uint8") and not collectives.nvls_reduces("f8e4m3")
    with pytest.raises(ValueError, match="dtype: unknown data type 'int7'"):
        collectives.predict("dgx_h100", "all_reduce", 8, size, "int7")


def test_validation_predicts_each_row_with_its_dtype(tmp_path):
    rows = "system,op,n_gpus,bytes,time_us,dtype\nh100_sxm,all_reduce,8,536870912,2111.06,half\n" \
           "h100_sxm,all_reduce,8,536870912,2600.0,int8\n"
    path = tmp_path / "two.csv"
    path.write_text(rows)
    data = collectives.load_measurements(path)
    assert list(data.dtypes()) == ["half", "int8"]
    t = collectives.predicted_times(data)
    assert_close(t[0], float(collectives.predict("dgx_h100", "all_reduce", 8, 2.0**29, "half").time_s), rtol=1e-12)
    assert_close(t[1], float(collectives.predict("dgx_h100", "all_reduce", 8, 2.0**29, "int8").time_s), rtol=1e-12)
    assert t[1] > t[0]
    path.write_text(rows.replace("int8", "int7"))
    with pytest.raises(ValueError, match="two.csv line 3, column dtype: unknown data type 'int7'"):
        collectives.load_measurements(path)


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter"])
def test_the_simple_price_is_tuning_cc_without_the_pipeline_fill(op):
    # Independent derivation: the fill is SLICESTEPS/CHUNKSTEPS = 1/2 chunk step of S / (n B) (collectives.h).
    for ranks in (2, 4, 8):
        v = _values("dgx_a100", ranks, 2.0 ** np.arange(10, 30))
        bus = v["ring_channels"] * v["ring_channel_bw_bytes_per_s"]
        fill = 0.5 * v["msg_bytes"] / (ranks * bus)
        assert_close(_eval(f"collective_{op}_ring_simple_time_s", v) - _eval(f"collective_{op}_ring_simple_price_s", v),
                     fill, rtol=1e-9)
        # LL and LL128: one chunk step of fill at the protocol's bus bandwidth (the final receive unpacks the FIFO).
        for proto, proto_bus in (("ll", np.minimum(v["ll_max_bw_bytes_per_s"], bus / 2)),
                                 ("ll128", np.minimum(0.92 * bus, v["ring_channels"] * v["ll128_channel_max_bw_bytes_per_s"]))):
            assert_close(_eval(f"collective_{op}_ring_{proto}_time_s", v) - _eval(f"collective_{op}_ring_{proto}_price_s", v),
                         v["msg_bytes"] / (ranks * proto_bus), rtol=1e-9)


def test_ties_go_to_the_first_candidate_in_nccls_order():
    from codegen.pricing.collective import labels
    assert labels("all_reduce")[:6] == ("tree_ll", "tree_ll128", "tree_simple", "ring_ll", "ring_ll128",
                                        "ring_simple")
    assert labels("all_gather")[-3:] == ("nvls_simple", "pat_simple", "hierarchical")
    # 2 ranks, 1 MiB all-gather on A100: Simple's real time is below LL's (the loop's fill makes LL 2x per byte,
    # Simple 1.5x) but NCCL prices LL lower, runs it, and the reported time is LL's real time.
    p = collectives.predict("dgx_a100", "all_gather", 2, 2.0**20)
    assert str(p.algorithm) == "ring_ll"
    assert p.candidates["ring_simple"] < p.candidates["ring_ll"]
    assert p.prices["ring_ll"] < p.prices["ring_simple"]
    assert_close(p.time_s, p.candidates["ring_ll"], rtol=1e-12)


# ------------------------------------------------------------------ units and monotonicity


def test_time_formulas_are_in_seconds_and_constants_are_si():
    for name, f in registry.FORMULAS.items():
        if name.startswith("collective_") and name.endswith("_time_s"):
            assert f.unit == "s", name
    for name, spec in SPECS.items():
        if name.endswith("_bytes_per_s"):
            assert spec.unit == "bytes/s", name
        if name.startswith(("alpha_", "hop_")) or name == "net_overhead_s":
            assert spec.unit == "s", name
    b = time_bindings(hardware.load("dgx_h100"))
    # Microseconds and GB/s read as SI would be off by 1e6 and 1e9: the table is in seconds and bytes/s.
    assert 1e-7 < b["alpha_ring_ll_s"] < 1e-4 and 1e9 < b["ll_max_bw_bytes_per_s"] < 1e13
    # 8 ranks, 1 GB all-reduce on H100: milliseconds, not seconds or microseconds.
    assert 1e-3 < float(collectives.predict("dgx_h100", "all_reduce", 8, 1e9).time_s) < 1e-2


@pytest.mark.parametrize("system", ["dgx_a100", "dgx_h100", "dgx_b200", "gb200_nvl72"])
@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all",
                                "send_recv"])
def test_time_grows_with_bytes_and_ranks(system, op):
    sizes = 2.0 ** np.arange(9, 34)
    for ranks in (2, 4, 8, 16, 64):
        p = collectives.predict(system, op, ranks, sizes)
        for label, times in p.candidates.items():
            finite = np.isfinite(times)
            assert np.all(np.diff(times[finite]) > 0), (ranks, label, times)
        # NCCL picks by its tuned price, which leaves out the loop's fill, so where it switches protocol (LL ->
        # Simple at 2 ranks) the real time may dip a little; elsewhere it grows.
        t, switch = p.time_s, p.algorithm[1:] != p.algorithm[:-1]
        assert np.all((np.diff(t) > 0) | (switch & (t[1:] > 0.9 * t[:-1]))), (ranks, t, p.algorithm)
    ranks = np.array([2, 3, 4, 6, 8])
    for size in (512.0, 2.0**20, 2.0**28):
        t = collectives.predict(system, op, ranks, size).time_s
        if op in ("send_recv",):
            assert np.all(np.diff(t) >= 0)
        elif op in ("all_gather", "reduce_scatter", "all_to_all"):
            # S is the whole gathered buffer: more ranks means a smaller share per rank; the latency grows.
            assert np.all(t > 0)
        else:
            assert np.all(t > 0)
        # Each candidate grows with the ranks; the chosen time may not (NVLS can overtake the ring).
        p = collectives.predict(system, op, ranks, size)
        ring = p.candidates.get("ring_simple")
        if ring is None:  # p2p: Simple only above NCCL's LL threshold per peer
            ring = collectives.predict(system, op, ranks, 2.0**30).candidates["p2p_simple"]
        if op == "all_reduce":
            assert np.all(np.diff(ring) > 0), (size, ring)
        assert np.all(np.diff(ring) >= 0), (size, ring)  # NCCL prices a pipelined broadcast flat in ranks


# ------------------------------------------------------------------ catalog and NCCL data


def test_ring_graph_follows_nccls_search_on_switch_nodes():
    a100 = time_bindings(hardware.load("dgx_a100"))
    h100 = time_bindings(hardware.load("dgx_h100"))
    b200 = time_bindings(hardware.load("dgx_b200"))
    # The search finds 12 x 20 GB/s on A100; the maintainers' stated ~230 GB/s caps it (nccl_tuning.toml).
    assert ring_graph(12 * 20e9, nccl_tuning().generations["ampere"]["intra_speeds_bytes_per_s"], 80) == \
        RingGraph(12, 20e9)
    assert a100["ring_channels"] == 12
    assert_close(a100["ring_channels"] * a100["ring_channel_bw_bytes_per_s"], 230e9)
    # Latencies: tuning.cc's times the generation's cited scale (A100 1.30, H100 none, B200 1.15).
    assert_close([a100["alpha_ring_ll_s"], h100["alpha_ring_ll_s"], b200["alpha_ring_ll_s"]],
                 [6.6e-6 * 1.30, 6.6e-6, 6.6e-6 * 1.15])
    assert h100["p2p_ll_threshold_bytes"] == 16384
    # Below 25 GB/s per channel the search keeps its channels (ncclTopoDupChannels).
    assert ring_graph(40e9, (20e9, 10e9), 90).channels == 2
    assert (h100["ring_channels"], h100["ring_channel_bw_bytes_per_s"]) == (12, 30e9)
    assert (b200["ring_channels"], b200["ring_channel_bw_bytes_per_s"]) == (16, 45e9)


def test_p2p_channels_follow_nccls_setup():
    # connect.cc doubles the ring graph's channels, paths.cc rounds them up to a power of two (at most MAXCHANNELS).
    assert [p2p_channels(c) for c in (1, 3, 6, 12, 16, 24, 32)] == [2, 8, 16, 32, 32, 64, 64]
    for name in ("dgx_a100", "dgx_h100", "dgx_b200"):
        b = time_bindings(hardware.load(name))
        # 12, 12 and 16 ring channels: 32 p2p blocks on all three; 512 KiB steps (P2P_NVL_CHUNKSIZE).
        assert (b["p2p_channels"], b["p2p_chunk_bytes"]) == (32, 2**19), name


def test_p2p_blocks_per_peer_follow_nccls_schedule():
    import sympy
    from symbolic.collective_time import _p2p_blocks_per_peer
    # enqueue.cc scheduleP2pTasksToPlan: nChannelsMin halves while nChannelsMin x nRanks > p2pnChannels.
    blocks = [_p2p_blocks_per_peer(sympy.Integer(n)).subs(symbol("p2p_channels"), 32) for n in (2, 4, 8, 32, 64)]
    assert blocks == [16, 8, 4, 1, 1]


@pytest.mark.parametrize("system", ["dgx_a100", "dgx_h100", "dgx_b200"])
@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_p2p_simple_all_to_all_is_blocks_at_half_a_channel_plus_at_most_half_a_step(system, ranks):
    v = _values(system, ranks, 2.0 ** np.arange(20, 34))
    t = _eval("collective_all_to_all_p2p_simple_time_s", v)
    blocks = v["p2p_channels"] / ranks
    # Half of a ring channel per block (sendrecv.h splits a block's warps between its send and its receive),
    # bounded by the peer's share of the NVLink bus.
    bus = v["ring_channels"] * v["ring_channel_bw_bytes_per_s"]
    rate = min(v["ring_channel_bw_bytes_per_s"] / 2, bus / ((ranks - 1) * blocks))
    share = v["msg_bytes"] / ranks / blocks  # bytes one block moves
    move = t - v["alpha_ring_simple_s"] - v["hop_nvlink_ring_simple_s"] - share / rate
    # The fill: half of one FIFO step (or of the block's share, if smaller), never more.
    assert np.all(move > 0) and np.all(move <= 0.5 * v["p2p_chunk_bytes"] / rate * (1 + 1e-9))
    assert_close(move, 0.5 * np.minimum(share, v["p2p_chunk_bytes"]) / rate, rtol=1e-9)
    # Beyond one step per block the time grows by the blocks' bandwidth alone: on B200 (720 GB/s ring bus, 16 x 45)
    # 32 blocks at 22.5 GB/s, so the bus bandwidth (n-1)/n x S / t approaches 22.5 x 32 x (n-1)/n GB/s.
    big = v["msg_bytes"] >= 2 * v["p2p_chunk_bytes"] * ranks * blocks
    slope = np.diff(t[big]) / np.diff(v["msg_bytes"][big])
    assert_close(slope, 1 / (v["p2p_channels"] * rate), rtol=1e-9)
    if system == "dgx_b200":
        assert_close(rate * v["p2p_channels"], 720e9, rtol=1e-9)


def test_p2p_all_to_all_with_one_rank_per_node_moves_nothing_over_nvlink():
    # 8 nodes, one rank each: the time is the NICs' (plus latency), whatever NVLink's constants are.
    v = _values("dgx_h100", 8, 2.0**30, nodes=8, per_node=1, nics=1)
    t = _eval("collective_all_to_all_p2p_simple_time_s", v)
    slow = dict(v, ring_channel_bw_bytes_per_s=v["ring_channel_bw_bytes_per_s"] / 100)
    assert_close(_eval("collective_all_to_all_p2p_simple_time_s", slow), t, rtol=1e-12)
    assert_close(t - v["alpha_ring_simple_s"] - v["hop_net_ring_simple_s"], 2.0**30 * 7 / 8 / v["nic_bw_bytes_per_s"])


@pytest.mark.parametrize("name", TIME_SYSTEMS)
def test_time_bindings_cover_the_hardware_side_of_every_collective_formula(name):
    b = time_bindings(hardware.load(name))
    assert set(b) <= set(SPECS)
    group_side = {"msg_bytes", "ranks", "ranks_per_node", "nodes", "nics_used"}
    for fname, meta in generated.FORMULAS.items():
        if fname.startswith("collective_"):
            # (the expert dispatch reads the model's top-k too: the copies of a token it deduplicates)
            model_side = ({"n_chosen_exp", "n_route_groups", "n_route_groups_topk"}
                          if fname.startswith("collective_ep_dispatch_") else set())
            assert set(meta["arguments"]) <= set(b) | group_side | model_side, fname


def test_time_model_refuses_systems_without_gpu_facts():
    with pytest.raises(hardware.HardwareSpecError, match="no \\[gpu\\] table"):
        time_bindings(hardware.load("A2"))


# ------------------------------------------------------------------ placement


def test_group_strides_for_megatron_order():
    strides = group_strides(DEFAULT_ORDER, dict(tp=8, cp=2, ep=1, dp=4, pp=2))
    assert {k: float(v) for k, v in strides.items()} == dict(tp=1, cp=8, ep=16, dp=16, pp=64)
    arr = group_strides("tp-dp", dict(tp=np.array([1, 2, 4]), dp=2))
    assert arr["dp"].tolist() == [1, 2, 4] and float(arr["tp"]) == 1
    with pytest.raises(ValueError, match="order: no degree for pp"):
        group_strides("tp-pp", dict(tp=2))
    with pytest.raises(ValueError, match="degrees.tp: must be >= 1"):
        group_strides("tp", dict(tp=0))


@pytest.mark.parametrize(("size", "stride", "per_node", "nodes", "nics"), [
    (8, 1, 8, 1, 8),     # TP inside one DGX node
    (4, 2, 4, 1, 4),     # CP after TP=2
    (16, 8, 1, 16, 1),   # DP after TP=8: one GPU per node, one NIC
    (16, 1, 8, 2, 8),    # a group over two whole nodes drives every NIC
    (4, 4, 2, 2, 2),
])
def test_placement_closed_forms(size, stride, per_node, nodes, nics):
    v = dict(group_size=size, group_stride=stride, gpus_per_node=8, nics_per_node=8)
    assert float(_eval("placement_group_ranks_per_node_count", v)) == per_node
    assert float(_eval("placement_group_nodes_count", v)) == nodes
    assert float(_eval("placement_group_nics_used_count", v)) == nics


@pytest.mark.parametrize("order", ["tp-cp-ep-dp-pp", "tp-dp-cp-ep-pp", "cp-tp-dp-ep-pp", "tp-cp-pp-dp-ep"])
@pytest.mark.parametrize("tp, cp, dp, pp", [(8, 2, 4, 2), (2, 2, 4, 2), (1, 4, 8, 2), (4, 2, 2, 4), (2, 1, 16, 1)])
def test_placement_of_a_group_over_two_dimensions_counts_its_ranks(order, tp, cp, dp, pp):
    """The data-parallel group with CP (its ranks vary along dp and cp) against its ranks listed one by one:
    members in a node, nodes spanned and NICs, for 8-GPU nodes with one NIC per GPU."""
    degrees = dict(tp=tp, cp=cp, ep=1, dp=dp, pp=pp)
    strides = {k: int(v) for k, v in group_strides(order, degrees).items()}
    ranks = {i * strides["dp"] + j * strides["cp"] for i in range(dp) for j in range(cp)}
    per_node = collections.Counter(rank // 8 for rank in ranks)
    assert len(set(per_node.values())) == 1  # every node the group touches holds as many of its ranks
    v = dict(group_size=dp, group_stride=strides["dp"], group_size_2=cp, group_stride_2=strides["cp"],
             gpus_per_node=8, nics_per_node=8)
    members = next(iter(per_node.values()))
    assert float(_eval("placement_group2_ranks_per_node_count", v)) == members
    assert float(_eval("placement_group2_nodes_count", v)) == len(per_node)
    assert float(_eval("placement_group2_nics_used_count", v)) == members  # one NIC per GPU
    one = dict(group_size=dp * cp, group_stride=min(strides["dp"], strides["cp"]), gpus_per_node=8, nics_per_node=8)
    if max(strides["dp"], strides["cp"]) == min(strides["dp"], strides["cp"]) * (dp if strides["dp"] < strides["cp"]
                                                                                  else cp):
        # neighbours in the order: one strided group, the one-dimension forms agree
        assert float(_eval("placement_group_ranks_per_node_count", one)) == members


# ------------------------------------------------------------------ per-step volumes


def test_step_volumes_are_bytes_and_vanish_without_the_dimension():
    base = dict(s=4096, b=1, h=8192, a=64, n_kv=8, dh=128, cp=1, t=1, ep=1, d=1, m=8, vp=1, bytes_compute=2,
                bytes_p=2, bytes_grad=4, n_chosen_exp=8, cap_fact=1, P_ne=2e8, P_r=1e9, d_exp=1, t_exp=1, etp=1,
                n_layers_stage=10, n_moe_layers_stage=10)
    import symbolic.step_volumes
    for f in symbolic.step_volumes.FORMULAS:
        name = f.name
        if name.endswith("_step_bytes"):
            assert f.unit == "bytes", name
            assert float(_eval(name, base)) == 0 or name.startswith("pp_"), name
    # A TP=8 SP layer moves the textbook 8 (t-1)/t s b h bytes per micro-batch per layer.
    v = dict(base, t=8)
    per = float(_eval("tp_sp_step_bytes", v)) / (10 * 8)
    assert_close(per, 8 * (7 / 8) * 4096 * 8192 * 2)
    # ZeRO-1/2 moves what an all-reduce moves when gradients and parameters have one width.
    v = dict(base, d=8, bytes_grad=2)
    assert_close(_eval("dp_zero_step_bytes", v), _eval("dp_all_reduce_step_bytes", v))


def test_expert_gradients_are_sliced_by_expert_tp_once():
    """A rank's routed-expert gradients (the expert data-parallel message) are the layer's experts over EP and
    expert TP, whichever of the two splits them: Mixtral 8x7B's 8 experts of 3 x 4096 x 14336 weights, 32 layers,
    fp32 gradients, held by halves at EP 2 or at expert TP 2."""
    from codegen.configs import LayoutBatch, load_model
    from codegen.pricing.time import TimePricer

    model = dataclasses.replace(load_model("mixtral-8x7b"), s=4096)
    pricer = TimePricer(model, system="dgx_b200")
    want = 8 * 3 * 4096 * 14336 * 32 * 4 / 2
    for ep, etp in ((2, 1), (1, 2)):
        lay = dict(d=16, t=1, p=1, cp=1, ep=ep, etp=etp, vp=1, b=1, m=1)
        batch = LayoutBatch(**{k: np.array([v]) for k, v in lay.items()}, os=np.array([1]), sp=True)
        got = pricer.price_batch(batch, per_stage=True).stages["msg_bytes"]["dp.expert_reduce_scatter"][0][0]
        assert got == want, (ep, etp)


def test_fp8_primary_weights_are_gathered_in_fp8():
    """Megatron-Core's fp8_param_gather: an FP8 run whose primary weights are FP8 all-gathers them at 1 byte a
    parameter (the model's BF16: 2); MXFP8 gathers in the gradient buffer, at the BF16 width; the gradients'
    reduce-scatter is the same in every precision."""
    from codegen.configs import load_model
    from codegen.pricing.chunks import Chunk, Setting
    from codegen.pricing.step_time import time_family_comm

    model = load_model("llama3-8b")
    assert model.bytes_p == 2
    values = {k: np.array([v], dtype=np.int64) for k, v in dict(d=16, t=1, p=1, cp=1, ep=1, etp=1, vp=1, b=1,
                                                                 m=8).items()}
    chunk = Chunk(Setting("none", 1, model.layout.cp_algo), values, np.zeros(1, np.int64), model)
    got = {}
    for system, precision, primary in (("dgx_b200", "bf16", True), ("dgx_b200", "fp8", True),
                                       ("dgx_b200", "fp8", False), ("dgx_b200", "mxfp8", True)):
        seconds = time_family_comm(model, system, precision, lowp_primary_weights=primary).stage_seconds(chunk)
        got[precision, primary] = (float(seconds["dp.all_gather"][0, 0]), float(seconds["dp.reduce_scatter"][0, 0]))
    bf16 = got["bf16", True]
    assert got["fp8", True][0] < bf16[0] and got["fp8", True][1] == bf16[1]
    assert got["fp8", False] == got["mxfp8", True] == bf16


def test_step_volumes_leave_the_original_formulas_alone():
    import symbolic.tp
    assert "tp_dense_layer_elements" in {f.name for f in symbolic.tp.FORMULAS}
    assert symbol("n_layers_stage") not in registry.get("tp_dense_layer_elements").expr.free_symbols


# ------------------------------------------------------------------ validation


GROUPS = {(g.system, g.op, g.band): g for g in collectives.validate(collectives.load_measurements(SHIPPED))}

#: The bounds on the median relative error each group is held to: 25 % below 1 MiB, 12 % from 1 MiB on.
_BOUND = {"small": 0.25, "large": 0.12}

#: Groups that do not meet their bound yet, each with why (docs/time.md, "What is left"). The
#: test is a strict expected failure for these: a group that starts meeting its bound fails it, and
#: must then leave this list.
_NOT_YET = {
    ("a100_sxm", "all_gather", "large"): "12.7 %: the Simple ring's mid sizes (2-64 MiB) run 15-80 us above "
                                         "one alpha-beta line; no NCCL figure prices a Simple step that slow",
}

#: Regression guard for every group: the median reached today (docs/time.md) with a little room.
_REACHED = {"small": 0.27, "large": 0.27}


def test_validation_covers_every_group_of_the_shipped_data():
    assert {s for s, _, _ in GROUPS} == {"a100_sxm", "h100_sxm", "b200_sxm"}
    assert {o for _, o, _ in GROUPS} == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"}
    assert sum(g.n for g in GROUPS.values()) == 5382
    assert set(_NOT_YET) <= set(GROUPS)


@pytest.mark.parametrize("key", sorted(GROUPS), ids=lambda k: "-".join(k))
def test_validation_error_bounds_reached(key):
    g = GROUPS[key]
    assert g.median_rel_err <= _REACHED[g.band], g
    assert g.worst_rel_err < 0.7, g


@pytest.mark.parametrize("key", [pytest.param(k, marks=pytest.mark.xfail(reason=_NOT_YET[k], strict=True))
                                 if k in _NOT_YET else k for k in sorted(GROUPS)], ids=lambda k: "-".join(k))
def test_group_bounds_on_the_shipped_data(key):
    g = GROUPS[key]
    assert g.median_rel_err <= _BOUND[g.band], g


# ------------------------------------------------------------------ CLI


def test_cli_validate_ends_with_one_json_object(capsys, tmp_path):
    lines = SHIPPED.read_text().splitlines()
    small = tmp_path / "few.csv"
    small.write_text("\n".join([lines[0], *lines[1:40]]) + "\n")
    assert main(["validate", "collectives", "--data", str(small)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    record = json.loads(last)
    assert set(record) == {"groups", "op_groups", "overall"}
    assert {tuple(sorted(g)) for g in record["groups"]} == {
        ("band", "median_rel_err", "n", "op", "system", "worst_rel_err")}
    assert sum(g["n"] for g in record["groups"]) == 39
    assert record["overall"]["n"] == 39 and 0 <= record["overall"]["median_rel_err"]


def test_cli_validate_bad_file_names_row_and_column(capsys, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("system,op,n_gpus,bytes,time_us\nh100_sxm,all_reduce,8,-5,3.0\n")
    assert main(["validate", "collectives", "--data", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.csv line 2, column bytes: must be a whole number >= 1, got -5" in err and len(err.strip().splitlines()) == 1
    bad.write_text("system,op,bytes\n")
    assert main(["validate", "collectives", "--data", str(bad)]) == 2
    assert "missing columns n_gpus, time_us" in capsys.readouterr().err


def test_cli_collective(capsys):
    assert main(["collective", "all_reduce", "--system", "h100_sxm", "--ranks", "8", "--bytes", "512M",
                 "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["algorithm"] == "nvls_simple" and record["bytes"] == 2**29
    assert_close(record["busbw_GBps"], record["algbw_GBps"] * 1.75)
    # int8 cannot be reduced by NVLS (NCCL ncclNvlsSupported): the ring runs, slower.
    assert main(["collective", "all_reduce", "--system", "h100_sxm", "--ranks", "8", "--bytes", "512M",
                 "--dtype", "int8", "--json"]) == 0
    int8 = json.loads(capsys.readouterr().out)
    assert int8["algorithm"].startswith("ring_") and int8["dtype"] == "int8" and int8["time_s"] > record["time_s"]
    assert main(["collective", "all_reduce", "--system", "h100_sxm", "--ranks", "8", "--bytes", "512M",
                 "--dtype", "int7"]) == 2
    err = capsys.readouterr().err
    assert "dtype: unknown data type 'int7'" in err and len(err.strip().splitlines()) == 1
    assert main(["collective", "all_gather", "--system", "dgx_b200", "--ranks", "4", "--bytes", "1MB"]) == 0
    out = capsys.readouterr().out
    assert "algorithm ring_" in out and "GB/s" in out
    assert main(["collective", "all_reduce", "--system", "dgx_h100", "--ranks", "8", "--bytes", "lots"]) == 2
    assert "--bytes" in capsys.readouterr().err
    assert main(["collective", "gather", "--system", "dgx_h100", "--ranks", "8", "--bytes", "1M"]) == 2
    assert "op: unknown collective 'gather'" in capsys.readouterr().err


def test_cli_collective_shows_the_placement_and_every_candidate_it_weighed(capsys):
    argv = ["collective", "all_reduce", "--system", "dgx_h100", "--bytes", "1G", "--json", "--ranks"]
    assert main([*argv, "16"]) == 0
    record = json.loads(capsys.readouterr().out)
    # 16 consecutive ranks of 8-GPU nodes: two whole nodes, each with its 8 NICs busy
    assert record["placement"] == {"ranks_per_node": 8, "nodes": 2, "nics_used": 8}
    priced = {k: v for k, v in record["candidates"].items() if v["price_s"] is not None}
    assert list(record["candidates"])[0] == record["algorithm"] == min(priced, key=lambda k: priced[k]["price_s"])
    assert record["candidates"][record["algorithm"]]["time_s"] == record["time_s"]
    assert record["candidates"]["nvls_simple"] == {"price_s": None, "time_s": None}  # NVLS: one node only
    assert "hierarchical" in priced  # the group spans nodes
    assert main([*argv, "8", "--dtype", "int8"]) == 0
    one_node = json.loads(capsys.readouterr().out)
    assert one_node["placement"]["nodes"] == 1 and one_node["candidates"]["nvls_simple"]["price_s"] is None
    assert main(argv[:-2] + ["--ranks", "8"]) == 0
    out = capsys.readouterr().out
    assert "placement one node, 8 ranks" in out and "nvls_simple" in out and out.count("<- picked") == 1


def test_parse_size_tells_binary_from_decimal():
    assert parse_size("4M") == parse_size("4MiB") == 4 * 2**20
    assert parse_size("4MB") == 4e6 and parse_size("512") == 512
    with pytest.raises(ValueError, match="--bytes"):
        parse_size("0")


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter"])
def test_candidates_choose_skips_are_unavailable_by_their_own_forms(op):
    # choose() does not evaluate the hierarchical candidate inside one node, nor NVLS without NVLS or across
    # nodes, nor PAT but at one rank per node across nodes: the generated forms must be infinite there.
    sizes = 2.0 ** np.arange(9, 34, 3)
    for system in ("dgx_a100", "dgx_h100", "dgx_b200"):
        for ranks in (2, 4, 8):
            v = _values(system, ranks, sizes)
            assert np.all(np.isinf(_eval(f"collective_{op}_hierarchical_time_s", v)))
            assert np.all(np.isinf(_eval(f"collective_{op}_hierarchical_price_s", v)))
        v = _values(system, 16, sizes, nodes=2, per_node=8, nics=8)
        assert np.all(np.isinf(_eval(f"collective_{op}_nvls_simple_time_s", v)))
        if op != "all_reduce":
            assert np.all(np.isinf(_eval(f"collective_{op}_pat_simple_time_s", v)))  # 8 ranks a node
            assert np.all(np.isinf(_eval(f"collective_{op}_pat_simple_price_s", v)))
            one = _values(system, 1, sizes)  # one rank on one node
            assert np.all(np.isinf(_eval(f"collective_{op}_pat_simple_time_s", one)))
    v = _values("dgx_a100", 8, sizes)
    assert v["nvls"] == 0 and np.all(np.isinf(_eval(f"collective_{op}_nvls_simple_time_s", v)))
