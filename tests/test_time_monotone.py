"""A collective's time as its size grows: every candidate's time never falls; the chosen time falls only where
NCCL's own pick switches (its tuner's price, its P2P LL threshold), and ``symcost collective`` says where."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import hardware
from codegen.cli import main
from codegen.pricing.collective import OUTSIDE_TUNER, next_fall
from codegen.validation import collectives

SYSTEMS = [n for n in hardware.names() if hardware.load(n).gpu is not None]
OPS = sorted(set(collectives.OPS.values()))
RANKS = [2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 72, 128, 144, 256, 1024]
TOP = 2.0**34  # 16 GiB
SIZE = st.integers(min_value=1, max_value=int(TOP))


def _pick_at(system: str, op: str, ranks: int):
    def pick_at(sizes: np.ndarray):
        p = collectives.predict(system, op, ranks, sizes)
        return np.broadcast_to(p.time_s, sizes.shape), np.broadcast_to(p.algorithm, sizes.shape)
    return pick_at


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(SYSTEMS), st.sampled_from(OPS), st.sampled_from(RANKS), SIZE, SIZE)
def test_every_candidates_time_is_non_decreasing_in_bytes(system, op, ranks, a, b):
    small, large = sorted((a, b))
    p = collectives.predict(system, op, ranks, np.array([small, large], dtype=float))
    for label, times in p.candidates.items():
        times = np.asarray(times, dtype=float)
        if np.isfinite(times).all():
            assert times[1] >= times[0], (label, small, large, times)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(SYSTEMS), st.sampled_from(OPS), st.sampled_from(RANKS), SIZE, SIZE)
def test_the_chosen_time_falls_only_at_nccls_own_switches(system, op, ranks, a, b):
    small, large = sorted((a, b))
    p = collectives.predict(system, op, ranks, np.array([small, large], dtype=float))
    if p.time_s[1] >= p.time_s[0]:
        return
    # A fall: NCCL's pick switches between the two sizes, to a candidate NCCL itself runs (not one it does not
    # price), and next_fall finds it at or below the larger size.
    fall = next_fall(_pick_at(system, op, ranks), float(small), top=float(large))
    assert fall is not None and small < fall.msg_bytes <= large, (small, large, fall)
    assert fall.before != fall.after and fall.after not in OUTSIDE_TUNER and fall.time_s < p.time_s[0]
    assert fall.rule.startswith(("NCCL's tuner", "NCCL's P2P LL threshold"))
    assert fall.rule.startswith("NCCL's P2P") == fall.after.startswith("p2p_")


@pytest.mark.parametrize("system, op, ranks", [
    ("hgx_b300", "all_gather", 16), ("hgx_b300", "reduce_scatter", 64), ("selene_a100", "all_gather", 1024),
    ("gb300_nvl72", "all_reduce", 512), ("gb300_nvl72", "reduce_scatter", 512), ("selene_a100", "reduce_scatter", 32),
])
def test_the_hierarchical_schedule_is_evaluated_and_never_picked(system, op, ranks):
    # Groups across nodes, where the hierarchical schedule (no NCCL algorithm; its tuner does not price it) is
    # evaluated beside NCCL's candidates and runs faster at some sizes (taken there, it once priced these groups
    # below what NCCL runs). The pick is NCCL's: the smallest tuned price among NCCL's own candidates.
    sizes = np.unique(np.round(np.geomspace(1, TOP, 6000)))
    p = collectives.predict(system, op, ranks, sizes)
    hier = np.asarray(p.candidates["hierarchical"], dtype=float)
    assert np.isfinite(hier).all() and np.any(hier < p.time_s)
    assert "hierarchical" not in set(p.algorithm)
    tuned = {k: np.asarray(v, dtype=float) for k, v in p.prices.items() if k not in OUTSIDE_TUNER}
    cheapest = np.min(np.vstack([np.broadcast_to(v, sizes.shape) for v in tuned.values()]), axis=0)
    picked = np.array([tuned[a][i] if np.ndim(tuned[a]) else tuned[a] for i, a in enumerate(p.algorithm)])
    assert np.array_equal(picked, cheapest)


def test_collective_says_where_the_time_falls(capsys):
    # Two ranks of HGX B300, all-reduce: NCCL's tuner keeps ring LL up to 3,944,909 bytes, whose real time
    # (with the ring loop's fill its price leaves out) is above ring Simple's there.
    argv = ["collective", "all_reduce", "--system", "hgx_b300", "--ranks", "2", "--json", "--bytes"]
    assert main([*argv, "3922389"]) == 0
    record = json.loads(capsys.readouterr().out)
    fall = record["falls_at"]
    assert fall["from"] == "ring_ll" and fall["to"] == "ring_simple" and fall["bytes"] == 3944910
    assert fall["time_s"] < record["time_s"] and "topoGetAlgoInfo" in fall["rule"]
    for size in (fall["bytes"] - 1, fall["bytes"]):  # the switch, to the byte
        assert main([*argv, str(int(size))]) == 0
        assert json.loads(capsys.readouterr().out)["algorithm"] == ("ring_ll" if size < fall["bytes"] else "ring_simple")
    assert main([*argv, "512"]) == 0
    assert json.loads(capsys.readouterr().out)["falls_at"] is None  # above 512 bytes nothing is faster
    assert main(argv[:-2] + ["--bytes", "3922389"]) == 0
    out = capsys.readouterr().out
    assert "falls     to 24.33 us at 3944910 bytes, where NCCL switches from ring_ll to ring_simple" in out
    # All-to-all over 1,024 ranks: LL up to 16,384 bytes per peer (NCCL's P2P LL threshold), Simple above.
    assert main(["collective", "all_to_all", "--system", "selene_a100", "--ranks", "1024", "--bytes", "16777216",
                 "--json"]) == 0
    fall = json.loads(capsys.readouterr().out)["falls_at"]
    assert fall["bytes"] == 16777217 and (fall["from"], fall["to"]) == ("p2p_ll", "p2p_simple")
    assert "P2P_LL_THRESHOLD" in fall["rule"]
