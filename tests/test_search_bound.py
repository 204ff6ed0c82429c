"""The search's branch and bound: every communication floor is a lower bound of the exposed communication,
and the bounded walk gives the table that pricing every layout gives, to the bit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from codegen.configs import load_model
from codegen.search import SearchSpec, bounds, search, search_context, walk
from codegen.pricing.step_time import exposed_comm, time_item_keys
from conftest import assert_close

ALGOS = ("colossalai_cp", "ulysses_cp")


def _spec(**kw):
    kw.setdefault("recompute", ("none", "full"))
    kw.setdefault("overlap", ("dp",))  # the pipeline sends not overlapped: they keep their floor
    kw.setdefault("any_interleaving", True)  # DeepSeek-V3's 62 layers split evenly into no p·vp > 1 but 2, 31 and 62
    return SearchSpec(load_model("deepseek-v3"), 256, 128, "dgx_h100", zero_levels=(0, 1, 3), cp_algos=ALGOS,
                      maximum=(("vp", 2), ("b", 4)), **kw)


def test_item_keys_declare_what_the_floors_share():
    keys = time_item_keys(load_model("deepseek-v3"))
    assert keys["dp.all_reduce"] >= {"zero", "d", "t", "p", "vp"} and not keys["dp.all_reduce"] & {"b", "m"}
    assert "zero" not in keys["tp.all_reduce"] and not keys["tp.all_reduce"] & {"ep", "etp"}
    assert keys["ep.all_to_all"] >= {"ep", "etp", "b", "m"} and "zero" not in keys["ep.all_to_all"]
    assert all("recompute" in needs for needs in keys.values())
    # ring send/recvs or Ulysses all-to-alls: the CP items alone read the CP algorithm
    assert {item for item, needs in keys.items() if "cp_algo" in needs} == {
        "cp.send_recv", "cp.all_to_all_qo", "cp.all_to_all_kv"}
    levels = bounds.floors(_spec())
    assert [len(level) for level in levels] == [1, 1]
    assert set(levels[0][0].dims) == {"tp", "cp", "pp"} and set(levels[1][0].dims) == {"tp", "cp", "ep", "pp"}
    assert levels[0][0].by_algo and levels[1][0].by_algo  # their tables are per CP algorithm


def test_every_floor_is_at_most_the_exposed_communication():
    """On every layout of a small grid (three ZeRO levels, two CP algorithms, two recompute modes): the
    floors of both levels, priced on other layouts and shared, never exceed the layout's own exposed
    communication; and they are not trivially 0: positive everywhere, and above a quarter of it on most (the
    data-parallel reductions, which no floor holds, are most of it on the expert-TP layouts)."""
    spec = _spec()
    bounds._floor_table.cache_clear()
    space, step, _, _ = search_context(spec)
    checked, positive, tight = 0, 0, 0
    for chunk in space.chunks(chunk=4000):
        exposed = exposed_comm(step.comm(chunk), chunk.setting.recompute, chunk.setting.cp_algo)
        everywhere = np.ones(len(chunk), bool)
        for level in range(len(bounds.floors(spec))):
            floor = bounds.level_floor(spec, chunk, level, everywhere)
            assert (floor <= exposed).all(), (chunk.setting, level, np.max(floor - exposed))
            positive += int((floor > 0).sum())
            tight += int((floor > 0.25 * exposed).sum())
        checked += len(chunk)
    assert checked == space.size > 50000
    assert positive == 2 * checked  # both levels
    assert tight > checked // 2


@pytest.mark.parametrize("top,chunk", [(1, 5000), (10, 20000), (37, 1 << 18)])
def test_bounded_walk_equals_pricing_every_layout(top, chunk):
    """The top K of the bounded walk (floors, lean chunks) equals the top K of pricing every layout's memory
    and communication (a sink forces it) on a grid of ZeRO levels and CP algorithms sharing the floors."""
    spec = _spec()
    bounds._floor_table.cache_clear()
    bounded = search(spec, top=top, chunk=chunk)
    rows = []
    everything = search(spec, top=top, chunk=chunk, sink=rows.append)
    assert bounded.layouts == everything.layouts > 50000
    assert sum(len(t["index"]) for t in rows) > 1000  # the feasible layouts, every one priced
    for key in bounded.table:
        np.testing.assert_array_equal(bounded.table[key], everything.table[key], err_msg=key)
    assert len(bounded.table["index"]) == top


def test_overlapped_dimensions_have_no_floor_and_the_bounded_walk_stays_exact():
    """Under every overlap (codegen.pricing.exposure) a dimension's seconds may be hidden behind compute, so its
    items leave the floors (pipeline and context-parallel ones stay); the bounded walk still equals pricing every
    layout, and differs from the walk without the TP and EP overlaps (they hide seconds)."""
    spec = _spec(overlap=("dp", "tp", "ep"))
    levels = bounds.floors(spec)
    items = {item for level in levels for part in level for item in part.items}
    assert items and not {item.split(".")[0] for item in items} & {"tp", "ep", "dp"}
    bounds._floor_table.cache_clear()
    bounded = search(spec, top=10, chunk=20000)
    everything = search(spec, top=10, chunk=20000, sink=lambda table: None)
    for key in bounded.table:
        np.testing.assert_array_equal(bounded.table[key], everything.table[key], err_msg=key)
    bounds._floor_table.cache_clear()
    plain = search(_spec(), top=10, chunk=20000)
    assert bounded.table["step_time_s"][0] < plain.table["step_time_s"][0]


def test_bounded_walk_on_dask_threads_equals_in_process():
    pytest.importorskip("dask.array", reason="the optional extra dask[array] is not installed")
    spec = _spec()
    want = search(spec, top=10, chunk=20000)
    got = search(spec, top=10, chunk=20000, engine="dask")
    assert got.layouts == want.layouts
    for key in want.table:
        np.testing.assert_array_equal(got.table[key], want.table[key], err_msg=key)


def test_floors_priced_at_every_stage_are_lower_bounds_too(monkeypatch):
    """A part that is not every item of its dimensions is priced at every stage (first, last, largest): forced
    here on the same grid, its floors stay at most the exposed communication and the top K is unchanged."""
    spec = _spec()
    levels = bounds.floors(spec)
    staged = tuple(tuple(dataclasses.replace(part, dims=()) for part in level) for level in levels)
    bounds._floor_table.cache_clear()
    want = search(spec, top=10, chunk=20000)
    for module in (bounds, walk):  # the floors' levels (bounds) and their count (the walk)
        monkeypatch.setattr(module, "floors", lambda s: staged)
    bounds._floor_table.cache_clear()
    space, step, _, _ = search_context(spec)
    chunk = next(space.chunks(chunk=20000))
    exposed = exposed_comm(step.comm(chunk), chunk.setting.recompute, chunk.setting.cp_algo)
    for level in range(len(staged)):
        floor = bounds.level_floor(spec, chunk, level, np.ones(len(chunk), bool))
        assert (floor <= exposed).all() and (floor > 0).any()
    got = search(spec, top=10, chunk=20000)
    for key in want.table:
        np.testing.assert_array_equal(got.table[key], want.table[key], err_msg=key)


def test_compute_bound_is_the_priced_step_time_without_communication_lowered():
    """The bound's linear forms in ``m`` (``StepTimePricer.bound_forms``) on every layout of the grid, every setting:
    at most the step time ``price`` gives without communication, and within a few units in the last place of it at
    ``m = 1`` (so they are the same closed forms, not merely some lower bound). At ``m > 1`` a micro-batch's GEMMs
    are smaller than the row's at ``m = 1`` and may fall in a band of lower efficiency (docs/search.md, Compute):
    the bound keeps ``m = 1``'s, so it is lower there, and on some layouts strictly."""
    spec = _spec(recompute=("none", "selective", "full"))
    space, step, _, _ = search_context(spec)
    checked = ones = looser = 0
    for chunk in space.chunks(chunk=20000):
        s = chunk.setting
        forms = bounds.row_bound_forms(spec, s.cp_algo, s.recompute, s.zero)
        bound = step.compute_bound(forms, chunk.row, chunk.values["m"])
        priced = step.price(chunk.values, s.recompute, None, zero=s.zero)["step_time_s"]
        assert (bound <= priced).all(), (s, np.max(bound / priced))
        one = chunk.values["m"] == 1
        assert_close(bound[one], priced[one], rtol=1e-11, atol=0)
        checked += len(chunk)
        ones += int(one.sum())
        looser += int((bound < priced * (1 - 1e-9)).sum())
    assert checked == space.size > 50000
    assert 0 < ones < checked and 0 < looser < checked


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_stage_parts_by_groups_are_every_rows_own_to_the_bit(recompute):
    """The search's structure rows' compute parts evaluated once per group of what the forms read
    (``StepTimePricer.stage_groups``) equal evaluating every row, bit for bit, at m = 1 and at m = 2 (whose b is
    m = 1's halved: the groups found at m = 1 serve it); and the rows do share groups (several virtual-stage
    counts of a pipeline put the same layers in a stage)."""
    spec = SearchSpec(load_model("deepseek-v3"), 16384, 4096, "dgx_h100", zero_levels=(1,), any_interleaving=True)
    _, step, _, _ = search_context(spec)
    table = bounds._union_rows(spec)[1]
    batch = spec.global_batch / table["d"]
    groups = bounds._stage_groups(spec)
    assert all(len(reps) < len(batch) / 4 for reps, _ in groups)
    for values in ({**table, "b": batch, "m": 1.0}, {**table, "b": batch / 2, "m": 2.0}):
        whole = step.stage_parts(values, recompute, 1)
        grouped = step.stage_parts(values, recompute, 1, groups=groups)
        for stage_whole, stage_grouped, (reps, inverse) in zip(whole, grouped, groups):
            for a, b in zip(stage_whole, stage_grouped):
                if a is None:  # (no low-precision GEMM FLOPs in a BF16 run)
                    assert b is None
                    continue
                b = np.take(np.broadcast_to(b, reps.shape), inverse)  # each row's group's value
                np.testing.assert_array_equal(np.broadcast_to(a, batch.shape), b)


@pytest.mark.parametrize("loss_only", [False, True])
def test_bounded_walk_equals_pricing_every_layout_under_the_accounted_split(loss_only):
    """Megatron-Core's accounted pipeline split (DeepSeek-V3: 61 layers + the loss = 62, + the embedding = 63; its
    MTP layer on the last chunk, its leading dense layers priced apart): the bound still never cuts a layout the
    table would keep."""
    model = dataclasses.replace(load_model("deepseek-v3"), account_for_embedding_in_pipeline_split=not loss_only,
                                account_for_loss_in_pipeline_split=True)
    spec = dataclasses.replace(_spec(), model=model)
    bounds._floor_table.cache_clear()
    bounded = search(spec, top=10, chunk=20000)
    everything = search(spec, top=10, chunk=20000, sink=lambda table: None)
    assert bounded.layouts == everything.layouts > 1000
    assert set(np.unique(bounded.table["p"])) <= ({1, 2, 31, 62} if loss_only else {1, 3, 7, 9, 21, 63})
    for key in bounded.table:
        np.testing.assert_array_equal(bounded.table[key], everything.table[key], err_msg=key)
