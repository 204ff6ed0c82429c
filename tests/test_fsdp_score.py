"""FSDP traffic, the FSDP rounds and parts, the level assignment and the level score."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import sympy

import hardware
from codegen.reference.adapters import fsdp as fsdp_adapter
from codegen.runtime.inputs import InputError
from codegen.runtime.kernels import evaluator
from codegen.pricing.levels import DIMENSIONS, Hierarchy, assign_levels, comm_score, hierarchy
from conftest import assert_close
from symbolic import fsdp, registry, score
from symbolic.symbols import SPECS, symbol

DEVICES = ("A2", "A3")


def _random_parts(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """Valid parts: sizes and rank counts ≥ 0, fractional widths included (the embedding's τ can be)."""
    return {
        "part_size": rng.uniform(0, 1e9, n),
        "part_computed": rng.choice([0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 8.0, 16.0], n),
        "part_sharded": rng.choice([0.0, 1.0, 2.0, 4.0, 6.0, 8.0, 16.0, 64.0], n),
        "part_held": rng.choice([0.0, 1.0, 2.0, 8.0, 12.0, 32.0, 128.0], n),
    }


def _rounds_and_bytes(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    return {"gathers": rng.choice([0.0, 1 / 16, 0.25, 1.0, 2.0], n), "reduces": rng.choice([1 / 144, 0.25, 1.0], n),
            "bytes_p": rng.choice([1.0, 2.0, 4.0], n), "bytes_grad": rng.choice([2.0, 4.0], n)}


# ---------------------------------------------------------------- FSDP


def test_fsdp_traffic_is_nonnegative_on_random_parts():
    rng = np.random.default_rng(7)
    parts, rest = _random_parts(rng, 2000), _rounds_and_bytes(rng, 2000)
    total = evaluator("fsdp_part_traffic_bytes")(**parts, **rest)
    reduce = evaluator("fsdp_part_reduce_traffic_bytes")(**parts, reduces=rest["reduces"],
                                                         bytes_grad=rest["bytes_grad"])
    assert np.all(np.isfinite(total)) and np.all(total >= 0)
    assert np.all(reduce >= 0)
    # The all-reduce share is one of the two non-negative terms of the total.
    assert np.all(reduce <= total * (1 + 1e-12))


def test_unsharded_single_copy_parts_move_nothing():
    """σ = 1 (k ≤ max(1, c)) and κ = 1 (g ≤ max(1, k)): nothing to gather, scatter or all-reduce."""
    rng = np.random.default_rng(11)
    n = 1000
    computed = rng.choice([0.0, 1.0, 2.0, 4.0, 8.0], n)
    sharded = np.maximum(1.0, computed) * rng.uniform(0, 1, n)
    held = np.maximum(1.0, sharded) * rng.uniform(0, 1, n)
    parts = {"part_size": rng.uniform(0, 1e9, n), "part_computed": computed, "part_sharded": sharded,
             "part_held": held}
    total = evaluator("fsdp_part_traffic_bytes")(**parts, **_rounds_and_bytes(rng, n))
    np.testing.assert_array_equal(total, 0.0)


def test_sharding_beyond_the_tp_width_moves_bytes():
    # One part of 1e6 parameters on 2 TP ranks sharded over 8 (σ = 4), no copies: (3/4)·5e5·(G·2 + 4) bytes.
    got = fsdp_adapter.fsdp_traffic([[1e6, 2, 8, 8]], gathers=2, reduces=1, bytes_p=2, bytes_grad=4)
    assert_close(got, 0.75 * 5e5 * (2 * 2 + 4))
    # Two copies of each shard (κ = 2) add a ring all-reduce of the 1.25e5-parameter shard.
    reduce = fsdp_adapter.fsdp_reduce_traffic([[1e6, 2, 8, 16]], reduces=0.5, bytes_grad=4)
    assert_close(reduce, 2 * 0.5 * 1.25e5 * 4 * 0.5)


def test_no_parts_is_no_traffic():
    assert fsdp_adapter.fsdp_traffic([], gathers=1, reduces=1, bytes_p=2, bytes_grad=4) == 0.0
    assert fsdp_adapter.fsdp_reduce_traffic([], reduces=1, bytes_grad=4) == 0.0


def test_bad_parts_are_named():
    with pytest.raises(InputError, match="parts"):
        fsdp_adapter.fsdp_traffic([[1, 2, 3]], gathers=1, reduces=1, bytes_p=2, bytes_grad=4)
    with pytest.raises(InputError, match="part_held"):
        fsdp_adapter.fsdp_traffic([[1, 2, 3, -1]], gathers=1, reduces=1, bytes_p=2, bytes_grad=4)


def test_part_builder_takes_any_expressions():
    """The builder with expressions substituted equals the per-part formula at their values."""
    t, d, cp, P_ne = (symbol(n) for n in ("t", "d", "cp", "P_ne"))
    built = fsdp.part_traffic((P_ne, t, 4 * t, d * cp * t), gathers=2, reduces=sympy.Rational(1, 4))
    at = {t: 2, d: 3, cp: 2, P_ne: 10**6}
    direct = registry.get("fsdp_part_traffic_bytes").expr.subs(
        {symbol("part_size"): 10**6, symbol("part_computed"): 2, symbol("part_sharded"): 8, symbol("part_held"): 12,
         symbol("gathers"): 2, symbol("reduces"): sympy.Rational(1, 4)})
    assert sympy.simplify(built.subs(at) - direct) == 0


def test_layer_traffic_is_the_sum_over_its_parts():
    layer = registry.get("fsdp_layer_traffic_bytes").expr
    assert sympy.expand(layer - fsdp.parts_traffic(fsdp.layer_parts())) == 0
    assert {"P_ne", "P_r", "P_s", "gathers", "reduces"} <= {s.name for s in layer.free_symbols}


def test_tied_embedding_moves_nothing_with_one_stage():
    tied = registry.get("fsdp_tied_embedding_traffic_bytes")
    untied = registry.get("fsdp_embedding_traffic_bytes")
    values = dict(h=4096, v=32000, d=8, shard_embed=16, gather_embed=8, gathers=1, reduces=1, bytes_p=2,
                  bytes_grad=4)
    assert evaluator(tied.name)(p=1, **values) == 0
    assert evaluator(tied.name)(p=4, **values) == evaluator(untied.name)(**values) > 0


def test_rounds_variants():
    layer, root, reduces = fsdp.rounds(reshards=True, spans_cp=False)
    assert (layer, root) == (2, 1)
    kept = fsdp.rounds(reshards=False, spans_cp=True)
    m, t, cp, shard = (symbol(n) for n in ("m", "t", "cp", "shard_p_os_non_exp_partial"))
    # A shard as wide as t·cp reads as none under separate CP (all-reduce every micro-batch)...
    assert reduces.subs({m: 4, t: 2, cp: 4, shard: 8}) == 1
    # ...but as a real FSDP shard once the shard already spans CP.
    assert kept[2].subs({m: 4, t: 2, cp: 4, shard: 8}) == sympy.Rational(1, 4)
    assert kept[0].subs(m, 4) == kept[1].subs(m, 4) == sympy.Rational(1, 4)


# ---------------------------------------------------------------- level assignment and score


def _plain_level_assign(bounds, d, t, cp, p):
    """docs/model.md, "Level score" written out one layout at a time, for comparison."""
    devices = d * t * cp * p
    left = {"MP": t, "EP": 1, "CP": cp, "DP": d, "PP": p}
    placed = {k: [] for k in left}
    for bound in bounds:
        if bound is None:
            room = max(devices, 1)
        else:
            room = max(min(devices, bound), 1)
            devices //= bound
        for k in ("MP", "EP", "CP", "DP", "PP"):
            take = min(left[k], room)
            placed[k].append(take)
            left[k] //= take
            room //= take
    return placed


@pytest.mark.parametrize("device", DEVICES)
def test_vectorised_assignment_equals_a_plain_loop(device):
    rng = np.random.default_rng(3)
    n = 400
    pick = lambda: np.where(rng.random(n) < 0.5, 2 ** rng.integers(0, 8, n), rng.integers(1, 40, n))  # noqa: E731
    d, t, cp, p = pick(), pick(), pick(), pick()
    bounds = hardware.load(device).level_bounds()
    got = assign_levels(bounds, d=d, t=t, cp=cp, p=p)
    assert set(got) == set(DIMENSIONS)
    for i in range(n):
        want = _plain_level_assign(bounds, int(d[i]), int(t[i]), int(cp[i]), int(p[i]))
        for dim in DIMENSIONS:
            assert list(got[dim][:, i]) == want[dim], (device, d[i], t[i], cp[i], p[i], dim)


@pytest.mark.parametrize("device", DEVICES)
def test_vectorised_score_equals_a_plain_loop(device):
    rng = np.random.default_rng(5)
    n = 200
    d, t, cp, p = (2 ** rng.integers(0, 7, n) for _ in range(4))
    volume, overlap = rng.uniform(0, 1e9, n), rng.choice([0.0, 0.5, 0.9], n)
    system = hardware.load(device)
    bounds, bws = system.level_bounds(), system.level_bandwidths_gbps()
    for dim in ("MP", "CP", "DP", "PP", "EP"):
        got = comm_score(comm_volume=volume, overlap=overlap, dim=dim, d=d, t=t, cp=cp, p=p, device=device)
        for i in range(n):
            placed = _plain_level_assign(bounds, int(d[i]), int(t[i]), int(cp[i]), int(p[i]))[dim]
            below, want = 1, 0.0
            for lvl, count in enumerate(placed):
                want += volume[i] * (1 - overlap[i]) * (count - 1) * below / bws[lvl]
                below *= bounds[lvl] or 1
            assert_close(got[i], want)


@pytest.mark.parametrize("device", DEVICES)
def test_a_degree_inside_one_node_uses_level_zero_only(device):
    system = hardware.load(device)
    node, bw0 = system.level_bounds()[0], system.level_bandwidths_gbps()[0]
    # TP takes devices first: any t up to a node stays inside one, whatever the other degrees.
    t = np.array([2, node // 2, node, node])
    d, cp, p = np.array([1, 4, 8, 64]), np.array([1, 2, 1, 4]), np.array([1, 1, 2, 16])
    placed = assign_levels(system.level_bounds(), d=d, t=t, cp=cp, p=p)["MP"]
    np.testing.assert_array_equal(placed[0], t)
    np.testing.assert_array_equal(placed[1:], 1)
    got = comm_score(comm_volume=1e9, overlap=0.25, dim="MP", d=d, t=t, cp=cp, p=p, device=device)
    assert_close(got, 1e9 * 0.75 * (t - 1) / bw0)
    assert np.all(got > 0)


def test_score_is_zero_for_a_dimension_of_one_rank():
    got = comm_score(comm_volume=1e9, overlap=0.0, dim="EP", d=64, t=8, cp=4, p=8, device="A3")
    assert got == 0


def test_score_errors_name_the_culprit():
    with pytest.raises(ValueError, match="dim"):
        comm_score(comm_volume=1, overlap=0, dim="XP", d=1, t=1, cp=1, p=1)
    with pytest.raises(InputError, match="cp"):
        comm_score(comm_volume=1, overlap=0, dim="DP", d=1, t=1, cp=1.5, p=1)
    with pytest.raises(InputError, match="overlap"):
        comm_score(comm_volume=1, overlap=-0.1, dim="DP", d=1, t=1, cp=1, p=1)
    with pytest.raises(ValueError, match="unbounded"):
        Hierarchy((None, 8, None), (1.0, 2.0, 3.0))


def test_hierarchy_comes_from_the_catalog():
    for device in DEVICES:
        system = hardware.load(device)
        levels = hierarchy(device)
        assert levels.bounds == tuple(system.level_bounds())
        assert levels.bandwidths_gbps == tuple(system.level_bandwidths_gbps())


def test_score_formula_per_depth():
    assert score.score(2).free_symbols == {symbol(n) for n in (
        "comm_volume", "overlap", "level_assign_0", "level_assign_1", "level_bw_0", "level_bw_1", "level_bound_0")}
    with pytest.raises(ValueError, match="levels"):
        score.score(score.MAX_LEVELS + 1)


# ---------------------------------------------------------------- evaluators against exact substitution

_MINE = [name for name in registry.names() if name.startswith(("fsdp_", "score_"))]


def _random_value(rng: np.random.Generator, name: str) -> sympy.Rational:
    kind = SPECS[name].kind
    if kind == "positive_integer":
        return sympy.Integer(int(rng.integers(1, 65)))
    if kind == "nonnegative_integer":
        return sympy.Integer(int(rng.integers(0, 65)))
    low = 0.0 if kind == "nonnegative" else 0.01
    return sympy.Rational(float(rng.choice([low, rng.uniform(low, 1.0), rng.uniform(1.0, 1e4)])))


@pytest.mark.parametrize("name", _MINE)
def test_evaluator_equals_exact_substitution(name):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    formula = registry.get(name)
    for _ in range(12):
        values = {a: _random_value(rng, a) for a in formula.arguments}
        exact = formula.expr.xreplace({symbol(a): v for a, v in values.items()})
        got = evaluator(name)(**{a: float(v) for a, v in values.items()})
        assert_close(got, float(exact))
