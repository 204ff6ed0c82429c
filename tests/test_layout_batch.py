"""Batches of layouts: the vectorised rules give what the one-layout functions give, layout by layout.

Random layouts of each bundled model (valid and not) are built twice: as one
``LayoutBatch`` from arrays, and one by one through ``parse_layout`` from text. The batch's
validity mask, first-violation messages and derived fields must equal ``validate`` /
``derive_fields`` of each text-built layout; the closed-form stage counts must equal the
counts of the stages ``build_stages`` lists.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from codegen.pricing.stages import stage_counts
from symbolic.vocabulary import STAGE_COUNT_NAMES
from codegen.configs import (LAYOUT_CONSTRAINTS, WHOLE_DP_GROUP, Layout, LayoutBatch, LayoutError, ModelConfig,
                             RecomputePlan, build_stages, chunk_layer_counts,
                             derive_fields, derive_fields_batch, layout_violations, load_model, parse_layout,
                             parse_recompute, pipeline_stage_counts, validate, validate_batch, violation_message)
from codegen.configs._derivation import _optimizer_ranks, expert_degrees

MODELS = ("qwen3-72b", "deepseek-v3", "llama2-7b")

# Fields that follow from the layout keys: arrays over the batch. Every other field is one value.
LAYOUT_FIELDS = {
    "b", "m", "d", "t", "p", "cp", "ep", "vp", "etp", "t_exp", "d_exp", "sp", "os_max_shard",
    "comm_t", "comm_ep", "comm_cp", "comm_d_non_exp", "comm_d_exp", "shard_p_os_non_exp_partial",
    "shard_p_os_exp", "shard_p_os_exp_partial", "shard_embed", "gather_embed",
}

# Run settings of the random batches; each model and FSDP switch gets all of them. Values the
# models cannot run on purpose (cp = 3, t = 3, lists for other depths) exercise the constraints.
SETTINGS = (
    {},  # the model file's own settings: its recompute plan (Qwen's per-stage list) and os
    {"sp": False, "op": False, "grad_shard": True, "cp_algo": "ulysses_cp", "recompute": "selective"},
    {"grad_shard": True, "cp_algo": "hybrid_cp", "reshards": False, "recompute": "none", "s": 8192},
    {"recompute": "2,1", "with_os": True},
    {"recompute": "full", "sp": False, "with_os": True},
)

_DEGREES = {
    "qwen3-72b": {"d": [1, 2, 3, 4, 6, 8, 12, 16, 32, 64], "t": [1, 2, 3, 4, 8, 16], "ep": [1]},
    "llama2-7b": {"d": [1, 2, 4, 5, 8, 16, 32], "t": [1, 2, 4, 8, 32, 64], "ep": [1, 1, 1, 1, 2]},
    "deepseek-v3": {"d": [1, 2, 4, 8, 12, 16, 24, 32, 64, 128], "t": [1, 2, 3, 4, 8, 16],
                    "ep": [1, 2, 4, 8, 16, 32, 64, 128, 256, 3]},
}


def _random_arrays(model: ModelConfig, rng: np.random.Generator, n: int, with_os: bool,
                   usual_p: int) -> dict[str, np.ndarray]:
    """n random layouts of *model*, many of them valid, with *usual_p* stages often."""
    degrees = _DEGREES[model.name]
    layers = model.n_lay + model.n_mtp
    arrays = {
        "d": rng.choice(degrees["d"], n), "t": rng.choice(degrees["t"], n), "ep": rng.choice(degrees["ep"], n),
        "cp": rng.choice([1, 1, 2, 4, 8, 3], n), "m": rng.integers(1, 600, n), "b": rng.choice([1, 2, 4], n),
        "vp": rng.choice([1, 1, 1, 2, 3], n),
    }
    # Pipeline depths: up to the layers, with the usual depth and short ones often.
    arrays["p"] = np.where(rng.random(n) < 0.3, usual_p,
                           np.where(rng.random(n) < 0.5, rng.integers(1, 5, n), rng.integers(1, layers + 3, n)))
    if model.is_moe:
        arrays["etp"] = rng.choice([1, 1, 1, 1, 2, 4, 3], n)
    if with_os:
        arrays["os"] = rng.choice([1, 2, 4, 8, 7], n)
    return arrays


def _text(arrays: dict[str, np.ndarray], i: int, settings: dict) -> str:
    """Layout i as parse_layout text (the run settings included)."""
    items = [f"{key}={int(values[i])}" for key, values in arrays.items()]
    for key in ("sp", "op", "grad_shard", "reshards"):
        if key in settings:
            items.append(f"{key}={int(settings[key])}")
    for key in ("cp_algo", "s"):
        if key in settings:
            items.append(f"{key}={settings[key]}")
    return ",".join(items)


def _batch_and_layouts(model: ModelConfig, defaults: Layout, settings: dict, fsdp: bool, valid: int, invalid: int,
                       seed: int):
    """A batch of random layouts, *valid* ones and *invalid* ones by the batch's mask, and the same layouts from text.

    Both kinds are checked against ``validate`` layout by layout, so the mask is tested either way.
    """
    rng = np.random.default_rng(seed)
    settings = dict(settings)
    with_os = settings.pop("with_os", False)
    plan = RecomputePlan() if "recompute" not in settings else parse_recompute(settings["recompute"])
    usual_p = len(plan.full_per_stage) if plan.full_per_stage else defaults.p  # where a recompute list fits
    pool = _random_arrays(model, rng, 20 * (valid + invalid), with_os, usual_p)
    mask = validate_batch(model, LayoutBatch.from_arrays(defaults, **pool, fsdp=fsdp, **settings))
    chosen = np.sort(np.concatenate([np.flatnonzero(mask)[:valid], np.flatnonzero(~mask)[:invalid]]))
    arrays = {key: values[chosen] for key, values in pool.items()}
    n = len(chosen)
    batch = LayoutBatch.from_arrays(defaults, **arrays, fsdp=fsdp, **settings)
    layouts = [parse_layout(_text(arrays, i, settings), defaults, fsdp=fsdp, recompute=settings.get("recompute"))
               for i in range(n)]
    return batch, layouts


def _check_against_scalar(model: ModelConfig, batch: LayoutBatch, layouts: list[Layout]) -> int:
    """Assert batch and one-layout functions agree on every layout; returns how many are valid."""
    valid = validate_batch(model, batch)
    codes = layout_violations(model, batch)
    assert valid.shape == (len(layouts),) and valid.dtype == bool
    messages = []
    for i, layout in enumerate(layouts):
        assert batch.layout(i) == layout, i
        try:
            validate(model, layout)
            messages.append(None)
        except LayoutError as exc:
            messages.append(str(exc))
    assert [m is None for m in messages] == valid.tolist()
    for i in np.flatnonzero(~valid)[:200]:
        assert violation_message(model, batch, int(i)) == messages[i]
        assert messages[i] is not None
    good = batch.subset(valid)
    fields = derive_fields_batch(model, good)
    scalar = [derive_fields(model, layout) for layout, ok in zip(layouts, valid) if ok]
    assert {k for k, v in fields.items() if isinstance(v, np.ndarray)} == LAYOUT_FIELDS
    for key, value in fields.items():
        if isinstance(value, np.ndarray):
            assert value.shape == (len(good),) and value.dtype == np.float64
            want = np.array([one[key] for one in scalar])
            assert np.array_equal(value, want), f"{key}: first difference at {np.flatnonzero(value != want)[:1]}"
        else:
            assert all(one[key] == value for one in scalar), key
    assert all(one.keys() == fields.keys() for one in scalar)
    return int(valid.sum()), set(codes[codes >= 0].tolist())


@pytest.mark.parametrize("fsdp", [False, True], ids=["no_fsdp", "fsdp"])
@pytest.mark.parametrize("name", MODELS)
def test_batch_equals_one_layout_at_a_time(name, fsdp):
    model = load_model(name)
    valid, broken = 0, set()
    for k, settings in enumerate(SETTINGS):
        batch, layouts = _batch_and_layouts(model, model.layout, settings, fsdp, valid=200, invalid=60,
                                            seed=100 * k + fsdp)
        count, codes = _check_against_scalar(model, batch, layouts)
        valid += count
        broken |= codes
    assert valid == 5 * 200  # 2000 valid layouts per model over both FSDP switches
    # The random layouts break the constraints the model can break, not only one or two.
    expected = {"heads", "sequence", "pipeline_split", "virtual_pipeline", "recompute_list_length"}
    expected |= {"experts", "ep_within_dp_tp", "ep_divides_d", "expert_dp_with_etp"} if model.is_moe \
        else {"dense_ep"} if name == "llama2-7b" else set()
    assert expected <= {LAYOUT_CONSTRAINTS[c] for c in broken}


def test_offset_applies_to_its_own_pipeline_only():
    """A default offset (DeepSeek's demo: 16 stages) applies where p, vp are the defaults', the even split elsewhere."""
    model = load_model("deepseek-v3")
    defaults = dataclasses.replace(model.layout, offset=(1,) * 15 + (-1,))
    batch, layouts = _batch_and_layouts(model, defaults, {}, False, valid=300, invalid=100, seed=7)
    assert any(layout.offset is not None for layout in layouts)
    assert any(layout.offset is None for layout in layouts)
    _check_against_scalar(model, batch, layouts)
    # Applied to every layout (from_layouts), the offset rejects the pipelines it does not fit.
    wrong = dataclasses.replace(defaults, p=8)
    codes = layout_violations(model, LayoutBatch.from_layouts([defaults, wrong]))
    assert [LAYOUT_CONSTRAINTS[c] if c >= 0 else None for c in codes] == [None, "pipeline_split"]
    with pytest.raises(LayoutError, match=re.escape("offset has 16 entries, but p = 8 stages")):
        validate(model, wrong)


def test_constraints_are_reported_in_validate_order():
    model = load_model("deepseek-v3")
    texts = ["", "ep=3", "d=2,t=2,ep=8", "d=12,ep=8", "d=12,t=2,ep=16", "etp=3", "os=7", "t=3,ep=3", "p=64"]
    layouts = [parse_layout(text, model.layout) for text in texts]
    batch = LayoutBatch.from_layouts(layouts)
    codes = layout_violations(model, batch)
    assert [LAYOUT_CONSTRAINTS[c] if c >= 0 else None for c in codes] == [
        None, "experts", "ep_within_dp_tp", "ep_divides_d", "ep_divides_dt", "expert_dp_with_etp",
        "optimizer_shard", "heads", "pipeline_split"]
    assert violation_message(model, batch, 0) is None
    assert violation_message(model, batch, 3) == "ep must divide d (expert DP = d/ep while ep <= d): d = 12, ep = 8"
    with pytest.raises(LayoutError, match=re.escape("layout 1 of the batch (d=16,t=4,p=16,cp=1,ep=3,m=32,b=1,vp=1,"
                                                    "etp=1): ep must divide the routed experts n_exp: n_exp = 256, "
                                                    "ep = 3; 8 of 9 layouts are invalid")):
        derive_fields_batch(model, batch)
    # The device count is one more constraint, checked first.
    assert validate_batch(model, batch.subset([0]), devices=1024).tolist() == [True]
    assert layout_violations(model, batch.subset([0, 1]), devices=512).tolist() == [0, 0]
    with pytest.raises(LayoutError, match="devices: must be a whole number >= 1, got 0"):
        validate_batch(model, batch, devices=0)


def test_from_arrays_follows_parse_layout():
    model = load_model("qwen3-72b")
    batch = LayoutBatch.from_arrays(model.layout, d=[32, 4, 64], p=[8, 8, 4], cp=2)
    assert len(batch) == 3 and batch.cp.tolist() == [2, 2, 2] and batch.t.tolist() == [4, 4, 4]
    # The inherited os of 8 gives way where it cannot split d; the per-stage list where p changes.
    assert batch.os.tolist() == [8, WHOLE_DP_GROUP, 8]
    assert [batch.layout(i).recompute for i in range(3)] == \
        [model.layout.recompute, model.layout.recompute, RecomputePlan("full")]
    assert batch.layout(2) == parse_layout("d=64,p=4,cp=2", model.layout)
    assert batch.layout(-1) == batch.layout(2)
    with pytest.raises(IndexError, match="layout index 3 is outside the batch of 3"):
        batch.layout(3)
    assert batch.devices.tolist() == [32 * 4 * 2 * 8, 4 * 4 * 2 * 8, 64 * 4 * 2 * 4]
    assert len(batch.subset(batch.d > 10)) == 2
    # The batch's arrays are read-only views: the caller's array stays writable, the batch frozen.
    d = np.array([32, 64])
    frozen = LayoutBatch.from_arrays(model.layout, d=d)
    d[0] = 16
    assert d.flags.writeable
    with pytest.raises(ValueError):
        frozen.t[0] = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        frozen.sp = False  # type: ignore[misc]


@pytest.mark.parametrize("kwargs, message", [
    ({"d": [4, 8, 0, -1]}, "d: every value must be a whole number >= 1, got 0 at index 2"),
    ({"t": np.array([2, 4, -4])}, "t: every value must be a whole number >= 1, got -4 at index 2"),
    ({"os": [2, -1]}, "os: every value must be a whole number >= 0, got -1 at index 1"),
    ({"m": [1.0, 2.0]}, "m: expected whole numbers, got float64 values"),
    ({"p": [True, False]}, "p: expected whole numbers, got bool values"),
    ({"d": [[1, 2], [3, 4]]}, "d: expected one value per layout (a one-dimensional array), got shape (2, 2)"),
    ({"d": [1, 2, 4], "t": [1, 2]}, "t: 2 values, but d has 3"),
    ({"d": [1, 2], "cp_algo": "ring_v2"}, "cp_algo: unknown CP algorithm 'ring_v2'; expected one of colossalai_cp, hybrid_cp, ulysses_cp, hybird_cp, colossalai, ring, hybrid, ulysses"),
    ({"d": [1, 2], "sp": 1}, "sp: must be true or false, got 1"),
    ({"d": [1, 2], "recompute": "most"}, "--recompute: expected none, selective, full"),
])
def test_batch_errors_name_key_value_and_index(kwargs, message):
    with pytest.raises(LayoutError, match=re.escape(message)):
        LayoutBatch.from_arrays(load_model("llama2-7b").layout, **kwargs)



def test_validated_arrays_skip_only_the_range_reductions():
    """Arrays vouched for (validate_batch accepted them) give the same batch; other columns are still gated."""
    model = load_model("qwen3-72b")
    arrays = {"d": np.array([32, 4, 64]), "p": np.array([8, 8, 4]), "cp": np.array([2, 2, 2])}
    trusted = LayoutBatch.from_arrays(model.layout, validated=True, **arrays)
    checked = LayoutBatch.from_arrays(model.layout, **arrays)
    for name in ("d", "t", "p", "m", "cp", "ep", "b", "vp", "etp", "os"):
        assert getattr(trusted, name).tolist() == getattr(checked, name).tolist()
        assert not getattr(trusted, name).flags.writeable
    assert trusted.top("d") == 64 and trusted.top("p") == 8  # found by a pass where the gate did not run
    with pytest.raises(LayoutError, match=re.escape("m: expected whole numbers, got float64 values")):
        LayoutBatch.from_arrays(model.layout, validated=True, d=arrays["d"], m=[1.0, 2.0, 4.0])
    with pytest.raises(LayoutError, match=re.escape("validated: must be true or false (a bool), got 'yes'")):
        LayoutBatch.from_arrays(model.layout, validated="yes", **arrays)

def test_repeated_call_shapes_build_the_same_batch():
    """A vouched-for call of a shape seen before (the same defaults, settings and length, the same keys
    as columns and as fixed numbers) is built from the earlier batch: column for column the batch the
    full way builds, its inherited os derived from the new d, the caller's arrays left writable."""
    from codegen.configs import _batch as layouts

    defaults = Layout(d=8, t=2, p=2, m=4, os=4)
    rng = np.random.default_rng(5)
    layouts._KNOWN_SHAPES.clear()
    lazy = 0
    for length, cp in ((50, 2), (50, 2), (50, 2), (51, 2), (50, 4), (50, 4)):
        d, p = rng.choice([1, 2, 4, 8, 16], length), rng.choice([1, 2], length)
        fast = LayoutBatch.from_arrays(defaults, validated=True, d=d, p=p, cp=cp, sp=True)
        lazy += "os" not in fast.__dict__  # (derived from d when first read, below)
        full = LayoutBatch.from_arrays(defaults, d=d, p=p, cp=cp, sp=True)
        for name in ("d", "t", "p", "m", "cp", "ep", "b", "vp", "etp", "os"):
            assert getattr(fast, name).tolist() == getattr(full, name).tolist(), name
            assert not getattr(fast, name).flags.writeable
        assert fast.os.tolist() == np.where(d % 4 == 0, 4, 0).tolist()  # inherited where 4 divides d
        assert (fast.settings(), fast.shared_keys()) == (full.settings(), full.shared_keys())
        assert fast.top("d") == int(d.max()) and fast.top("cp") == cp
        assert d.flags.writeable
    assert lazy == 3  # every call of a shape seen before
    again = LayoutBatch.from_arrays(defaults, validated=True, d=d, p=p, cp=cp, sp=True)
    half = again.subset(slice(0, 25))  # a slice of a batch whose os is not derived yet derives its own
    assert "os" not in half.__dict__ and half.os.tolist() == full.os[:25].tolist() and "os" not in again.__dict__
    # Three shapes (length 50 with cp = 2, length 51, cp = 4), each kept once, without the caller's arrays
    # (nor the os derived from them).
    assert len(layouts._KNOWN_SHAPES) == 3
    assert all(state[k] is None for _defaults, state in layouts._KNOWN_SHAPES.values() for k in ("d", "p", "os"))
    # Another defaults object or a setting of another type is another shape, built the full way.
    other = dataclasses.replace(defaults, os=None)
    d = rng.choice([1, 2, 4], 50)
    assert LayoutBatch.from_arrays(other, validated=True, d=d, p=p[:50], cp=2, sp=True).os.tolist() == [0] * 50
    with pytest.raises(LayoutError, match="sp"):
        LayoutBatch.from_arrays(defaults, validated=True, d=d, p=p[:50], cp=2, sp=1)


def test_batch_construction_errors():
    with pytest.raises(LayoutError, match=re.escape("from_arrays lacks p, m (no default layout to fall back on)")):
        LayoutBatch.from_arrays(d=[1, 2], t=[1, 1])
    assert LayoutBatch.from_arrays(d=[1, 2], t=1, p=1, m=4).layout(1) == Layout(d=2, t=1, p=1, m=4)
    with pytest.raises(LayoutError, match="from_layouts: needs at least one layout"):
        LayoutBatch.from_layouts([])
    one = Layout(d=2, t=1, p=1, m=1)
    with pytest.raises(LayoutError, match=re.escape("layouts[1].sp = True differs from layouts[0].sp = False")):
        LayoutBatch.from_layouts([one, dataclasses.replace(one, sp=True)])
    with pytest.raises(LayoutError, match=re.escape("offset_pipeline: expected None or a pair (p, vp), got 4")):
        dataclasses.replace(LayoutBatch.from_layouts([one]), offset_pipeline=4)


def test_rules_take_whole_numbers_and_arrays():
    """Each rule is one NumPy expression: plain integers and arrays give the same values."""
    assert tuple(int(x) for x in expert_degrees(16, 4, 1, 8, 1)) == (4, 2)
    assert tuple(int(x) for x in expert_degrees(8, 8, 2, 16, 1)) == (1, 4)
    t_exp, d_exp = expert_degrees(np.array([16, 8, 16]), np.array([4, 8, 4]), np.array([1, 2, 1]),
                                   np.array([8, 16, 8]), np.array([1, 1, 2]))
    assert (t_exp.tolist(), d_exp.tolist()) == ([4, 1, 2], [2, 4, 4])
    assert int(_optimizer_ranks(32, 8, True)) == 8 and int(_optimizer_ranks(32, 0, True)) == 32
    assert _optimizer_ranks(np.array([32, 12, 12]), np.array([8, 8, 0]), True).tolist() == [8, 12, 12]
    assert int(_optimizer_ranks(32, 8, False)) == 1


def test_network_bindings_are_shared_fields():
    import hardware

    model = load_model("qwen3-72b")
    a3 = hardware.load("A3")
    batch = LayoutBatch.from_arrays(model.layout, d=[32, 16], p=[8, 16])
    fields = derive_fields_batch(model, batch, network=a3)
    for i in range(2):
        one = derive_fields(model, batch.layout(i), network=a3)
        assert {k: fields[k] for k in one if k not in LAYOUT_FIELDS} == {k: one[k] for k in one if k not in LAYOUT_FIELDS}
        assert {k: fields[k][i] for k in LAYOUT_FIELDS} == {k: one[k] for k in LAYOUT_FIELDS}


# --------------------------------------------------------------------------- stage counts


def _plans(model: ModelConfig, p: int, vp: int, rng: np.random.Generator, offset=None) -> list[RecomputePlan]:
    layers = [sum(row) for row in chunk_layer_counts(model, Layout(d=1, t=1, p=p, m=1, vp=vp, offset=offset))]
    listed = tuple(int(rng.integers(0, n + 1)) for n in layers)
    return [RecomputePlan("full"), RecomputePlan("selective"), RecomputePlan("none"),
            RecomputePlan("none", listed), RecomputePlan("selective", listed), RecomputePlan("full", listed)]


def _assert_counts_equal(model: ModelConfig, layout: Layout) -> None:
    want = stage_counts(build_stages(model, layout), model.n_lay)
    got = pipeline_stage_counts(model, layout.p, layout.vp, recompute=layout.recompute, offset=layout.offset)
    assert tuple(got) == STAGE_COUNT_NAMES
    for name in STAGE_COUNT_NAMES:
        assert got[name].shape == (layout.p,) and got[name].dtype == np.float64
        assert np.array_equal(got[name], want[name]), f"{layout} {layout.recompute}: {name} {got[name]} != {want[name]}"


@pytest.mark.parametrize("name", MODELS + ("mtp3",))
def test_stage_counts_equal_the_built_stages_for_every_depth(name):
    # mtp3: three MTP layers on 8 body layers, so that whole chunks lie past n_lay.
    model = dataclasses.replace(load_model("llama2-7b"), n_lay=8, n_mtp=3) if name == "mtp3" else load_model(name)
    rng = np.random.default_rng(3)
    layers = model.n_lay + model.n_mtp
    for p in range(1, layers + 1):
        for vp in (1, 2, 3):
            if vp > 1 and (p == 1 or p * vp > layers or (p % 3 and vp == 3)):
                continue
            for plan in _plans(model, p, vp, rng):
                _assert_counts_equal(model, Layout(d=1, t=1, p=p, m=1, vp=vp, recompute=plan))
    with pytest.raises(LayoutError, match=re.escape(f"p·vp <= n_lay + n_mtp: {layers + 1}·1")):
        pipeline_stage_counts(model, layers + 1)


def test_stage_counts_with_offsets_and_errors():
    model = load_model("deepseek-v3")
    rng = np.random.default_rng(5)
    for p, vp, offset in ((16, 1, (1,) * 15 + (-1,)), (8, 2, ((1,) * 8, (1,) * 6 + (0, 0))),
                          (4, 1, (0, 2, 1, -1))):
        for plan in _plans(model, p, vp, rng, offset):
            _assert_counts_equal(model, Layout(d=1, t=1, p=p, m=1, vp=vp, offset=offset, recompute=plan))
    # The MTP layer is the last in model order: past n_lay, on the last stage.
    counts = pipeline_stage_counts(model, 2, recompute="selective")
    assert counts["n_body"].tolist() == [31, 30] and counts["n_extra_sel"].tolist() == [0, 1]
    assert counts["n_embedding"].tolist() == [1, 0] and counts["n_output"].tolist() == [0, 1]
    with pytest.raises(LayoutError, match=re.escape("the recompute list needs one entry per stage: 2 entries [1, 2], p = 4")):
        pipeline_stage_counts(model, 4, recompute="1,2")
    with pytest.raises(LayoutError, match=re.escape("recompute: stage 1 holds 31 layers, cannot fully recompute 32")):
        pipeline_stage_counts(model, 2, recompute="1,32")
    with pytest.raises(LayoutError, match="vp: must be a whole number >= 1, got 0"):
        pipeline_stage_counts(model, 2, 0)
