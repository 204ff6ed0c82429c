"""StagePricer: arrays of layouts priced at once equal the closed-form stage path, layout by layout.

The reference is ``codegen.reference.adapters.model.evaluate_stages`` on one layout's fields and
stages (the path the reference cases check): each layout's bottleneck stage, the sum of its
stages and every stage's DP, TP, EP, CP parts and total must agree to relative 1e-12. Each
bundled model is priced under two settings that between them take every value of every
setting (FLOP / TIME, FSDP off / on, ``with_recomp`` off / on, A2 / A3), the three models
pairing the values differently, on 100 random valid layouts per setting (200 per model) with
mixed ``d`` (DP on and off), ``p``, ``vp``, ``cp``, ``ep`` (DeepSeek) and a default ``os``
that applies to some layouts only.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import codegen.configs._validation as layout_module
from codegen.pricing import engine
from codegen.reference.adapters.model import evaluate_stages
from codegen.configs import (LAYOUT_FIELD_NAMES, LayoutBatch, LayoutError, build_stages, derive_fields,
                             derive_fields_batch, layout_violations, load_model, validate_batch)
from codegen.pricing.pricer import StagePricer
from conftest import assert_close

RTOL = 1e-12

_DEGREES = {
    "qwen3-72b": {"d": [1, 2, 4, 8, 16, 32], "t": [1, 2, 4, 8], "ep": [1]},
    "llama2-7b": {"d": [1, 2, 4, 8, 16], "t": [1, 2, 4, 8], "ep": [1]},
    "deepseek-v3": {"d": [1, 2, 4, 8, 16, 32], "t": [1, 2, 4, 8], "ep": [1, 2, 4, 8, 16, 32]},
}

# (model, ttype, fsdp, with_recomp, device): per model two settings that differ in every switch.
SETTINGS = [
    ("qwen3-72b", "FLOP", False, False, "A2"),
    ("qwen3-72b", "TIME", True, True, "A3"),
    ("deepseek-v3", "FLOP", True, False, "A3"),
    ("deepseek-v3", "TIME", False, True, "A2"),
    ("llama2-7b", "FLOP", False, True, "A3"),
    ("llama2-7b", "TIME", True, False, "A2"),
]


def _random_arrays(name: str, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """n random layouts of model *name*, most of them valid (``vp > 1`` and deep pipelines included)."""
    degrees = _DEGREES[name]
    return {
        "d": rng.choice(degrees["d"], n), "t": rng.choice(degrees["t"], n), "ep": rng.choice(degrees["ep"], n),
        "cp": rng.choice([1, 2, 4, 8], n), "p": rng.choice([1, 2, 3, 4, 5, 8, 16], n),
        "vp": rng.choice([1, 1, 2], n), "m": rng.integers(1, 200, n), "b": rng.choice([1, 2, 4], n),
    }


def _valid_arrays(name: str, fsdp: bool, n: int, seed: int, *, sharded: bool = False) -> dict[str, np.ndarray]:
    """n random valid layouts of model *name*; with *sharded*, only layouts whose DP levels are both 2."""
    model = load_model(name)
    pool = _random_arrays(name, np.random.default_rng(seed), 8 * n)
    batch = LayoutBatch.from_arrays(model.layout, fsdp=fsdp, **pool)
    mask = validate_batch(model, batch)
    if sharded:
        levels = derive_fields_batch(model, batch, names=["comm_d_non_exp", "comm_d_exp"], validated=True)
        mask &= (levels["comm_d_non_exp"] == 2) & (levels["comm_d_exp"] == 2)
    assert mask.sum() >= n
    return {key: values[mask][:n] for key, values in pool.items()}


def _reference(model, layout, device: str, ttype: str, with_recomp: bool) -> dict[str, np.ndarray]:
    """The closed-form path's stage parts and total of one layout."""
    inputs = {**derive_fields(model, layout), "stages": build_stages(model, layout), "device": device, "ttype": ttype}
    out = evaluate_stages(inputs)
    suffix = "_recomputed" if with_recomp else ""
    keys = {"dp": "dp", "tp": "tp" + suffix, "ep": "ep" + suffix, "cp": "cp" + suffix, "total": "total" + suffix}
    return {dim: np.broadcast_to(np.asarray(out[key], dtype=float), (layout.p,)) for dim, key in keys.items()}


@pytest.mark.parametrize("name, ttype, fsdp, with_recomp, device", SETTINGS)
def test_prices_equal_the_closed_form_layout_by_layout(name, ttype, fsdp, with_recomp, device):
    model = load_model(name)
    # With FSDP the ZeRO levels do not change the expressions; one level pair keeps the reference
    # path from compiling the same FSDP stage formulas once per pair.
    arrays = _valid_arrays(name, fsdp, 100, seed=len(name) + 2 * fsdp + with_recomp, sharded=fsdp)
    pricer = StagePricer(model, device=device, fsdp=fsdp, with_recomp=with_recomp, ttype=ttype)
    prices = pricer(per_stage=True, **arrays)
    plain = pricer(**arrays)
    np.testing.assert_array_equal(plain.bottleneck, prices.bottleneck)
    np.testing.assert_array_equal(plain.sum, prices.sum)
    batch = LayoutBatch.from_arrays(model.layout, fsdp=fsdp, **arrays)
    assert prices.stages["total"].shape == (100, int(arrays["p"].max()))
    for i in range(len(batch)):
        layout = batch.layout(i)
        want = _reference(model, layout, device, ttype, with_recomp)
        for dim, values in want.items():
            assert_close(prices.stages[dim][i, :layout.p], values, rtol=RTOL, atol=0, msg=f"{layout} {dim}")
            assert np.isnan(prices.stages[dim][i, layout.p:]).all()
        assert_close(prices.bottleneck[i], want["total"].max(), rtol=RTOL, atol=0, msg=str(layout))
        assert_close(prices.sum[i], want["total"].sum(), rtol=RTOL, atol=0, msg=str(layout))


def test_blocks_and_shared_keys_do_not_change_the_prices(monkeypatch):
    """Tiny blocks (each with other pipelines present) and keys given as one number price the same."""
    model = load_model("deepseek-v3")
    arrays = _valid_arrays("deepseek-v3", False, 200, seed=11)
    whole = StagePricer(model)(**arrays)
    monkeypatch.setattr(StagePricer, "block", 7)
    blocked = StagePricer(model)(**arrays)
    assert_close(blocked.bottleneck, whole.bottleneck, rtol=RTOL, atol=0)
    assert_close(blocked.sum, whole.sum, rtol=RTOL, atol=0)
    # One pipeline and one cp for every layout: those keys are folded into the compiled sums.
    qwen = load_model("qwen3-72b")
    d = np.array([32, 16, 8, 1])
    shared = StagePricer(qwen)(d=d, t=4, p=8, cp=2, m=144)
    spelled = StagePricer(qwen)(d=d, t=np.full(4, 4), p=np.full(4, 8), cp=np.full(4, 2), m=np.full(4, 144))
    assert_close(shared.bottleneck, spelled.bottleneck, rtol=RTOL, atol=0)
    batch = LayoutBatch.from_arrays(qwen.layout, d=d, t=4, p=8, cp=2, m=144)
    for i in range(4):
        want = _reference(qwen, batch.layout(i), "A2", "FLOP", False)["total"]
        assert_close(shared.bottleneck[i], want.max(), rtol=RTOL, atol=0)
        assert_close(shared.sum[i], want.sum(), rtol=RTOL, atol=0)
    # One p, several vp; and on the TIME path every degree shared (the level scores become constants).
    vp = np.array([1, 2, 1, 2])
    mixed = StagePricer(qwen)(d=d, p=4, vp=vp, m=144)
    batch = LayoutBatch.from_arrays(qwen.layout, d=d, p=4, vp=vp, m=144)
    for i in range(4):
        want = _reference(qwen, batch.layout(i), "A2", "FLOP", False)["total"]
        assert_close(mixed.bottleneck[i], want.max(), rtol=RTOL, atol=0)
    llama = load_model("llama2-7b")
    m = np.array([8, 16])
    timed = StagePricer(llama, ttype="TIME", device="A3")(d=4, t=2, p=2, cp=2, m=m)
    batch = LayoutBatch.from_arrays(llama.layout, d=4, t=2, p=2, cp=2, m=m)
    for i in range(2):
        want = _reference(llama, batch.layout(i), "A3", "TIME", False)["total"]
        assert_close(timed.bottleneck[i], want.max(), rtol=RTOL, atol=0)
        assert_close(timed.sum[i], want.sum(), rtol=RTOL, atol=0)


def test_one_pricer_called_again_with_other_shared_keys_prices_as_a_fresh_one():
    """What a pricer keeps between calls (the arguments shared by a batch, per set of shared keys and
    settings) never leaks into a call whose shared keys or settings differ."""
    qwen = load_model("qwen3-72b")
    d = np.array([32, 16, 8, 1])
    calls = [dict(d=d, t=4, p=8, cp=2, m=144), dict(d=d, t=8, p=8, cp=1, m=144), dict(d=d, t=4, p=8, cp=2, m=144, b=2),
             dict(d=d, t=np.array([4, 8, 4, 8]), p=8, cp=2, m=144), dict(d=4, t=np.array([4, 8]), p=8, cp=1, m=144)]
    kept = StagePricer(qwen, ttype="TIME", device="A3")
    for arrays in calls * 2:
        again = kept(**arrays)
        fresh = StagePricer(qwen, ttype="TIME", device="A3")(**arrays)
        np.testing.assert_array_equal(again.bottleneck, fresh.bottleneck, err_msg=str(arrays))
        np.testing.assert_array_equal(again.sum, fresh.sum, err_msg=str(arrays))
    # A column the caller changes after a call is read again (nothing is kept by the array's identity).
    t = np.array([4, 8, 4, 8])
    first = kept(d=d, t=t, p=8, cp=2, m=144).bottleneck
    t[:] = 4
    np.testing.assert_array_equal(kept(d=d, t=t, p=8, cp=2, m=144).bottleneck,
                                  StagePricer(qwen, ttype="TIME", device="A3")(d=d, t=4, p=8, cp=2, m=144).bottleneck)
    assert not np.array_equal(first, kept(d=d, t=t, p=8, cp=2, m=144).bottleneck)


def test_the_maximum_is_taken_when_sums_can_be_negative():
    """Leaving out outweighed stages needs sums >= 0; otherwise every kind of stage is compared."""
    model = load_model("qwen3-72b")
    batch = LayoutBatch.from_arrays(model.layout, d=np.array([1, 2, 4, 8]), p=np.array([1, 2, 3, 16]))
    pricer = StagePricer(model)
    stage_counts = lambda p, vp: pricer.stage_counts(batch, p, vp)  # noqa: E731
    pipelines = engine.PipelineShapes.of(batch, stage_counts)
    sums = engine.TermGroups(((0, 0, 1), (1, 1, 1)), ("n_embedding", "n_output", "n_body"), ())
    tables = engine.stage_tables(stage_counts, pipelines, sums)
    parts = [np.array([-1.0, 2.0, -3.0, 0.5]), np.array([5.0, -1.0, 1.0, -2.0])]
    bottleneck, total = np.empty(4), np.empty(4)
    engine.combine(parts, tables, pipelines.index, bottleneck, total, np.empty(4), np.empty(4))
    for i, p in enumerate([1, 2, 3, 16]):
        counts = pricer.stage_counts(batch, p, 1)
        every_layer = counts["n_embedding"] + counts["n_output"] + counts["n_body"]
        stage = counts["n_body"] * parts[0][i] + every_layer * parts[1][i]
        assert_close(bottleneck[i], stage.max(), rtol=RTOL, atol=1e-12)
        assert_close(total[i], stage.sum(), rtol=RTOL, atol=1e-12)


@pytest.mark.parametrize("name, arrays, message", [
    ("qwen3-72b", {"d": [32, 16], "t": [4, 3], "p": [8, 8]},
     "layout 1 of the batch (d=16,t=3,p=8,cp=1,ep=1,m=144,b=1,vp=1,etp=1): t must divide the attention heads a: "
     "a = 64, t = 3"),
    ("qwen3-72b", {"d": [32, 16, 4], "cp": [1, 2, 3]}, "cp must divide the sequence length s: s = 4096, cp = 3"),
    ("deepseek-v3", {"d": [16, 16], "ep": [8, 3]}, "ep must divide the routed experts n_exp: n_exp = 256, ep = 3"),
    ("llama2-7b", {"d": [4, 4], "p": [2, 40]}, "p·vp <= n_lay + n_mtp: 40·1 = 40 pipeline chunks for 32 layers"),
])
def test_invalid_layouts_raise_naming_the_constraint(name, arrays, message):
    pricer = StagePricer(name)
    with pytest.raises(LayoutError, match=re.escape(message)):
        pricer(**{key: np.array(value) for key, value in arrays.items()})


def test_an_invalid_layout_is_found_in_any_block(monkeypatch):
    monkeypatch.setattr(StagePricer, "block", 5)
    d = np.full(23, 32)
    t = np.full(23, 4)
    t[17] = 3
    with pytest.raises(LayoutError, match=re.escape("layout 17 of the batch")):
        StagePricer("qwen3-72b")(d=d, t=t, p=8)


def test_validated_skips_the_check_and_prices_alike():
    model = load_model("llama2-7b")
    arrays = _valid_arrays("llama2-7b", False, 50, seed=5)
    pricer = StagePricer(model)
    np.testing.assert_array_equal(pricer(validated=True, **arrays).bottleneck, pricer(**arrays).bottleneck)


def test_empty_batch():
    prices = StagePricer("llama2-7b")(d=np.array([], dtype=np.int64), per_stage=True)
    assert prices.bottleneck.shape == prices.sum.shape == (0,)
    assert prices.stages["total"].shape == (0, 0)


# --------------------------------------------------------------------------- the batch internals the pricer uses


@pytest.mark.parametrize("name", ["qwen3-72b", "deepseek-v3", "llama2-7b"])
def test_value_tables_check_as_the_rules_do(name, monkeypatch):
    """layout_violations on a large batch (value tables, blocks) equals the rules run over every layout."""
    model = load_model(name)
    rng = np.random.default_rng(3)
    n = 3000
    arrays = _random_arrays(name, rng, n)
    arrays["t"] = rng.choice([1, 2, 3, 4, 8, 16], n)
    arrays["cp"] = rng.choice([1, 2, 3, 4, 8], n)
    arrays["p"] = rng.integers(1, model.n_lay + 4, n)
    for settings in ({}, {"recompute": "selective", "cp_algo": "ulysses_cp"}, {"os": rng.choice([0, 1, 2, 3, 8], n)}):
        batch = LayoutBatch.from_arrays(model.layout, **arrays, **settings)
        got = layout_violations(model, batch)
        monkeypatch.setattr(layout_module, "_RULE_TABLE_LIMIT", 0)
        want = layout_violations(model, batch)
        monkeypatch.undo()
        np.testing.assert_array_equal(got, want)
        assert (got >= 0).any() and (got < 0).any()
        # The one-layout check agrees too.
        for i in rng.choice(n, 20, replace=False):
            single = layout_violations(model, batch.subset([int(i)]))
            assert single[0] == got[i]


def test_derive_only_the_named_fields_compactly():
    model = load_model("qwen3-72b")
    batch = LayoutBatch.from_arrays(model.layout, d=np.array([32, 16, 1]), t=np.array([4, 8, 1]), p=8)
    full = derive_fields_batch(model, batch)
    names = ["comm_t", "comm_d_non_exp", "ep", "p", "h", "comm_dp_overlap", "rec_op"]
    some = derive_fields_batch(model, batch, names=names, compact=True)
    assert list(some) == names
    np.testing.assert_array_equal(some["comm_t"], full["comm_t"])
    np.testing.assert_array_equal(some["comm_d_non_exp"], full["comm_d_non_exp"])
    # ep and p are one value for the whole batch (left to the defaults, given as one number).
    assert some["ep"] == 1.0 and some["p"] == 8.0 and some["h"] == full["h"] and some["rec_op"] == full["rec_op"]
    assert set(LAYOUT_FIELD_NAMES) == {k for k, v in full.items() if isinstance(v, np.ndarray)}
    with pytest.raises(ValueError, match="names: no such field 'tee'"):
        derive_fields_batch(model, batch, names=["t", "tee"])
    bad = LayoutBatch.from_arrays(model.layout, d=np.array([32, 16]), t=np.array([4, 3]))
    with pytest.raises(LayoutError, match="t must divide the attention heads"):
        derive_fields_batch(model, bad, names=["t"])
    assert derive_fields_batch(model, bad, names=["t"], validated=True)["t"].tolist() == [4.0, 3.0]
