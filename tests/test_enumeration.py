"""The search enumeration yields exactly the layouts the layout checks accept (brute force on small N)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from codegen.configs import LayoutBatch, check_batch, load_model, validate_batch
from codegen.search import SearchSpace, parse_restrictions


def _brute(model, devices, global_batch, node, fix=None, maximum=None, cp_algo=None, any_interleaving=False):
    """Every key combination in 1..devices (b, ep up to their own bounds), filtered by validate_batch and the policies
    (t within a node; vp > 1 only where the layers split evenly into p·vp chunks and m is a multiple of p, unless vp
    is pinned or *any_interleaving*)."""
    fix, maximum = fix or {}, maximum or {}
    found = set()
    rng = range(1, devices + 1)
    ep_rng = range(1, max(model.n_exp, 1) + 1) if model.n_exp > 1 else (1,)
    etp_rng = range(1, node + 1) if model.n_exp > 1 else (1,)
    rows = []
    total = model.n_lay + model.n_mtp
    for t, cp, p in itertools.product(rng, rng, rng):
        if devices % (t * cp * p):
            continue
        d = devices // (t * cp * p)
        vp_rng = range(1, min(total, maximum.get("vp", total)) + 1)  # a bound given prunes the loop, nothing else
        for vp, ep, etp, b in itertools.product(vp_rng, ep_rng, etp_rng, range(1, global_batch + 1)):
            if global_batch % (d * b) or t > node:
                continue
            m = global_batch // (d * b)
            if vp > 1 and (total % (p * vp) or m % p) and not any_interleaving and "vp" not in fix:
                continue
            row = dict(d=d, t=t, cp=cp, p=p, vp=vp, ep=ep, etp=etp, b=b, m=global_batch // (d * b))
            if any(row[k] != v for k, v in fix.items()) or any(row[k] > v for k, v in maximum.items()):
                continue
            rows.append(row)
    if not rows:
        return found
    cols = {k: np.array([r[k] for r in rows]) for k in rows[0]}
    batch = LayoutBatch.from_arrays(model.layout, **cols, recompute="none", cp_algo=cp_algo)
    ok = validate_batch(model, batch, devices)
    for i in np.flatnonzero(ok):
        found.add(tuple(int(cols[k][i]) for k in ("d", "t", "p", "cp", "ep", "etp", "vp", "b", "m")))
    return found


def _enumerated(space):
    got = []
    for chunk in space.chunks(chunk=97):  # a small odd chunk: the setting boundaries fall inside chunks
        check_batch(space.model, chunk.batch)  # every yielded layout is valid
        v = chunk.values
        assert (v["d"] * v["t"] * v["cp"] * v["p"] == space.devices).all()
        for i in range(len(chunk)):
            got.append((chunk.setting, tuple(int(v[k][i]) for k in ("d", "t", "p", "cp", "ep", "etp", "vp", "b", "m"))))
    return got


@pytest.mark.parametrize("name,devices,batch,fix,maximum,lifted", [
    ("llama2-7b", 16, 8, {}, {}, False),
    ("llama2-7b", 16, 8, {}, {"vp": 6}, True),         # 32 layers: vp 3, 5, 6 with p 2, or m < p, only so
    ("llama2-7b", 16, 8, {"vp": 3}, {}, False),        # a pinned vp is taken as given
    ("qwen3-72b", 8, 4, {}, {"vp": 3}, False),
    ("deepseek-v3", 8, 2, {"p": 2}, {"vp": 2}, False),  # 61 + 1 layers: 2·2 chunks uneven, so vp 1 only
])
def test_enumeration_matches_brute_force(name, devices, batch, fix, maximum, lifted):
    model = load_model(name)
    space = SearchSpace(model, devices, batch, fix=fix, maximum=maximum, devices_per_node=8, recompute=("none", "full"),
                        any_interleaving=lifted)
    got = _enumerated(space)
    keys = [k for _, k in got]
    assert len(keys) == len(set((s, k) for s, k in got))  # no duplicates
    want = _brute(model, devices, batch, 8, fix, maximum, any_interleaving=lifted)
    assert want  # every case enumerates something
    for setting in space.settings:
        assert {k for s, k in got if s == setting} == want


def test_restrictions_and_errors():
    model = load_model("llama2-7b")
    space = SearchSpace(model, 64, 64, fix={"t": 4}, maximum={"p": 2}, devices_per_node=8)
    for chunk in space.chunks():
        assert (chunk.values["t"] == 4).all() and (chunk.values["p"] <= 2).all()
    assert parse_restrictions(["t=8", "p=2,cp=1"], "--fix") == {"t": 8, "p": 2, "cp": 1}
    for bad in (["t"], ["q=2"], ["t=0"], ["t=x"], ["t=2", "t=4"]):
        with pytest.raises(ValueError, match="--fix"):
            parse_restrictions(bad, "--fix")
    with pytest.raises(ValueError, match="devices"):
        SearchSpace(model, 0, 8)
    with pytest.raises(ValueError, match="recompute"):
        SearchSpace(model, 8, 8, recompute=("sometimes",))
    with pytest.raises(ValueError, match="zero"):
        SearchSpace(model, 8, 8, zero_levels=(4,))


@pytest.mark.parametrize("name, devices, batch, fix, reason", [
    # llama2-7b: 32 heads, 32 layers, sequence 4096, no routed experts; deepseek-v3: 256 routed experts.
    ("llama2-7b", 48, 48, {"t": 3}, "--fix t=3: t must divide the attention heads a = 32."),
    ("llama2-7b", 16, 64, {"t": 3}, "--fix t=3: t must divide the 16 devices."),
    ("llama2-7b", 16, 64, {"t": 16}, "--fix t=16: t must fit a node of 8 devices (--tp-cross-node lifts this)."),
    ("llama2-7b", 64, 64, {"p": 64}, "--fix p=64: p must be at most the layers, 32."),
    ("llama2-7b", 16, 64, {"ep": 2}, "--fix ep=2: ep must be 1: the model has no routed experts."),
    ("llama2-7b", 16, 64, {"b": 3}, "--fix b=3: b must divide the global batch, 64."),
    ("llama2-7b", 16, 64, {"d": 4, "t": 8}, "--fix: d·t = 32 does not divide the 16 devices (d·t·cp·p = 16)."),
    ("deepseek-v3", 64, 64, {"ep": 7}, "--fix ep=7: ep must divide the routed experts n_exp = 256."),
    ("deepseek-v3", 64, 64, {"etp": 16}, "--fix etp=16: etp must be at most the devices of a node, 8."),
    ("llama2-7b", 16, 64, {"etp": 2}, "--fix etp=2: etp must be 1: the model has no routed experts."),
    # Each pin holds on its own; only together do they fail (d = 16/(2·8) = 1, so m = 64/(1·2) = 32, not 64).
    ("llama2-7b", 16, 64, {"t": 2, "p": 8, "b": 2, "m": 64}, None),
])
def test_an_empty_search_says_which_pin_breaks_which_rule(name, devices, batch, fix, reason):
    space = SearchSpace(load_model(name), devices, batch, fix=fix, devices_per_node=8)
    assert space.size == 0
    if name == "llama2-7b":  # the brute force agrees the grid is empty (DeepSeek-V3's 256 experts: too many to list)
        assert not _brute(load_model(name), devices, batch, 8, fix, {})
    assert space.why_empty() == reason
    assert SearchSpace(load_model(name), devices, batch, devices_per_node=8).why_empty() is None  # not empty


def test_chunks_bounded():
    """Memory stays proportional to the chunk: no chunk holds more layouts than its grid points."""
    space = SearchSpace(load_model("deepseek-v3"), 1024, 512, devices_per_node=8)
    assert space.size > 10_000
    seen = 0
    for chunk in space.chunks(chunk=4096):
        assert len(chunk) <= 4096
        seen += len(chunk)
    assert seen > 0


def test_decode_contiguous_equals_scattered():
    space = SearchSpace(load_model("deepseek-v3"), 1024, 512, devices_per_node=8, any_interleaving=True)
    index = np.arange(1000, 40000)
    whole = space.decode(index, 0)
    pick = np.sort(np.random.default_rng(1).choice(len(index), 3000, replace=False))
    part = space.decode(index[pick], 0)
    for key in whole:
        np.testing.assert_array_equal(whole[key][pick], part[key])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_distinct_rows_groups_equal_tuples_and_only_those(seed):
    """``distinct_rows`` on columns of every kind it codes differently (narrow whole numbers, a wide whole range,
    fractions, a constant, booleans): every column is its representatives' values gathered back, two rows share a
    group exactly when all their values are equal, and the groups are as many as the distinct tuples."""
    from codegen.pricing.engine import distinct_rows

    rng = np.random.default_rng(seed)
    n = 5000
    columns = [rng.integers(1, 5, n), rng.integers(0, 10**9, n) // 10**8 * 10**7, rng.integers(0, 3, n) / 4.0,
               np.full(n, 7.0), rng.integers(0, 2, n).astype(bool), rng.integers(-3, 3, n).astype(np.float64)]
    reps, inverse = distinct_rows(columns)
    for column in columns:
        np.testing.assert_array_equal(column[reps][inverse], column)
    tuples = {tuple(row) for row in np.stack([np.asarray(c, dtype=np.float64) for c in columns], axis=1).tolist()}
    assert len(reps) == len(tuples) == len(np.unique(inverse))
    assert len(reps) < n  # the columns' few values repeat
