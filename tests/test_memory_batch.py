"""``MemoryPricer``: memory per rank of arrays of layouts, against ``stage_memory`` one layout at a time;
the memory sensitivity's generated derivatives; the memory options of the command line."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

import generated
from codegen.cli import main
from codegen.configs import ARRAY_KEYS, LayoutBatch, LayoutError, load_model, validate_batch
from codegen.runtime.kernels import fused_available
from codegen.pricing import memory
from codegen.pricing.memory import DEFAULT_SETTINGS, PARTS, MemoryPricer, stage_memory
from conftest import ROOT, assert_close

SYSTEM = "dgx_h100"
MODELS = ("qwen3-72b", "deepseek-v3", "llama2-7b")
BACKENDS = ["numpy"] + (["numba"] if fused_available() else [])


def random_batch(name: str, n: int, seed: int, **settings) -> tuple:
    """Up to *n* random valid layouts of a bundled model (p, vp, m, b, d, t, cp, ep varying)."""
    model = load_model(name)
    rng = np.random.default_rng(seed)
    k = 12 * n
    draw = {"d": rng.choice([1, 2, 4, 8, 16, 32], k), "t": rng.choice([1, 2, 4, 8], k),
            "p": rng.choice([1, 2, 3, 4, 8, 16], k), "cp": rng.choice([1, 2, 4], k),
            "m": rng.integers(1, 40, k), "b": rng.choice([1, 2, 4], k), "vp": rng.choice([1, 1, 2, 4], k)}
    if model.is_moe:
        draw["ep"] = rng.choice([1, 2, 4, 8, 16], k)
    batch = LayoutBatch.from_arrays(model.layout, **draw, **settings)
    keep = np.flatnonzero(validate_batch(model, batch))[:n]
    assert len(keep) >= n // 2, f"{name}: too few valid layouts drawn"
    return model, batch.subset(keep)


def assert_same_as_one_at_a_time(model, batch, prices, settings=DEFAULT_SETTINGS):
    """Every field of every layout equals stage_memory's peak stage, bit for bit."""
    parts = prices.parts()
    for i in range(len(batch)):
        stages = stage_memory(model, batch.layout(i), system=SYSTEM, settings=settings)["stages"]
        totals = [row["total"] for row in stages]
        peak = int(np.argmax(totals))  # the first stage on a tie
        row = stages[peak]
        got = (prices.peak_stage[i], prices.peak_total[i], prices.headroom[i], prices.fits[i], prices.capacity[i],
               *(parts[part][i] for part in PARTS))
        want = (peak, row["total"], row["headroom"], row["fits"], row["capacity"], *(row[part] for part in PARTS))
        assert got == want, f"{model.name} layout {i} ({batch.layout(i)}): batch {got} != one at a time {want}"


SETTINGS = [
    {},  # the model file's own run settings (Qwen's per-stage recompute list where p = 8)
    {"recompute": "selective", "grad_shard": True},
    {"recompute": "full", "fsdp": True},
    {"recompute": "none", "op": False},
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("case", range(len(SETTINGS)))
def test_batch_equals_stage_memory_exactly(name, case, backend):
    model, batch = random_batch(name, 40, seed=case, **SETTINGS[case])
    assert len(set(batch.p.tolist())) > 1 and len(set(batch.vp.tolist())) > 1
    prices = MemoryPricer(model, system=SYSTEM, backend=backend).price_batch(batch)
    assert_same_as_one_at_a_time(model, batch, prices)


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_batch_equals_stage_memory_under_every_zero_level_and_settings(zero):
    settings = dataclasses.replace(DEFAULT_SETTINGS, zero_level=zero, reserve_bytes=7.5 * 2 ** 30, dropout=1.0,
                                   flash_attention=0.0, bytes_optimizer=8.0)
    model, batch = random_batch("deepseek-v3", 30, seed=10 + zero, recompute="selective")
    prices = MemoryPricer(model, system=SYSTEM, settings=settings).price_batch(batch, validated=True)
    assert_same_as_one_at_a_time(model, batch, prices, settings)


def test_both_outcomes_of_fits_occur_and_agree_with_headroom():
    model, batch = random_batch("qwen3-72b", 200, seed=7, recompute="none")
    prices = MemoryPricer(model, system=SYSTEM).price_batch(batch)
    assert prices.fits.dtype == bool and prices.fits.any() and (~prices.fits).any()
    assert np.array_equal(prices.fits, prices.headroom >= 0)
    assert np.array_equal(prices.headroom, (prices.capacity - DEFAULT_SETTINGS.reserve_bytes) - prices.peak_total)
    assert_close(sum(prices.parts()[part] for part in PARTS), prices.peak_total)
    assert prices.peak_stage.dtype == np.int64 and np.all(prices.peak_stage < batch.p)


def test_blocks_and_one_pipeline():
    """A batch larger than a block, and a batch of one pipeline shape, price as their layouts do one by one."""
    model = load_model("llama2-7b")
    rng = np.random.default_rng(3)
    n = MemoryPricer.block + 123
    batch = LayoutBatch.from_arrays(model.layout, d=rng.choice([1, 2, 4], n), m=rng.integers(1, 30, n),
                                    b=rng.choice([1, 2], n))  # p, vp: the model's own (one pipeline)
    pricer = MemoryPricer(model, system=SYSTEM)
    whole = pricer.price_batch(batch)
    for rows in (slice(0, 50), slice(n - 50, n)):
        part = pricer.price_batch(batch.subset(rows))
        assert np.array_equal(part.peak_total, whole.peak_total[rows])
        assert np.array_equal(part.parts()["activations"], whole.parts()["activations"][rows])
    assert_same_as_one_at_a_time(model, batch.subset(slice(n - 20, n)), pricer.price_batch(batch.subset(slice(n - 20, n))))


def test_tables_over_more_pipelines_price_alike():
    """A batch whose pipelines the tables of an earlier, deeper batch cover reuses them, and prices as a
    fresh pricer does (bit for bit)."""
    model, deep = random_batch("deepseek-v3", 2000, seed=41)
    shallow = deep.subset(np.flatnonzero(deep.p <= int(deep.p.max()) // 2))
    assert len(shallow) and int(shallow.p.max()) < int(deep.p.max())
    pricer = MemoryPricer(model, system=SYSTEM)
    pricer.price_batch(deep, validated=True)
    reused = _prices(pricer, shallow)
    assert len(pricer._tables) == 1  # the deep batch's tables served the shallow one
    _assert_identical(reused, _prices(MemoryPricer(model, system=SYSTEM), shallow))


def test_empty_batch_and_bad_input():
    model = load_model("llama2-7b")
    pricer = MemoryPricer(model, system=SYSTEM)
    empty = pricer.price_batch(LayoutBatch.from_arrays(model.layout, d=np.array([], dtype=np.int64)))
    assert len(empty) == 0 and empty.parts()["weights"].shape == (0,)
    bad = LayoutBatch.from_arrays(model.layout, t=[2, 3])  # 3 does not divide the heads
    with pytest.raises(LayoutError, match="layout 1 of the batch"):
        pricer.price_batch(bad)
    with pytest.raises(ValueError, match="validated"):
        pricer.price_batch(bad, validated="no")
    with pytest.raises(memory.NoCapacityError, match="no GPU facts"):
        MemoryPricer(model, system="A2")
    with pytest.raises(ValueError, match="backend"):
        MemoryPricer(model, system=SYSTEM, backend="cuda")


@pytest.mark.parametrize("field,value", [("bytes_p", -1.0), ("bytes_optimizer", float("nan")),
                                         ("reserve_bytes", float("inf")), ("flash_attention", 2.0),
                                         ("dropout", -0.5), ("zero_level", 4), ("zero_level", True)])
def test_settings_reject_values_that_break_the_ordering(field, value):
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(DEFAULT_SETTINGS, **{field: value})


# Not ep: with t·cp fixed, doubling ep halves the expert TP degree t_exp (codegen.configs._derivation.expert_degrees),
# so each rank holds more of an expert's intermediate activations; with t_exp held the per-layer forms do not grow
# in ep either (tests/test_memory.py).
@pytest.mark.parametrize("key", ["d", "t", "cp"])
def test_peak_memory_is_non_increasing_in_each_sharding_degree(key):
    model, batch = random_batch("deepseek-v3", 60, seed=21)
    doubled = dataclasses.replace(batch, **{key: batch.__dict__[key] * 2})
    keep = validate_batch(model, doubled)
    assert keep.sum() >= 5
    pricer = MemoryPricer(model, system=SYSTEM, settings=dataclasses.replace(DEFAULT_SETTINGS, zero_level=3))
    base = pricer.price_batch(batch.subset(keep)).peak_total
    more = pricer.price_batch(doubled.subset(keep)).peak_total
    assert np.all(more <= base * (1 + 1e-12)), key


# ---------------------------------------------------------------- groups of layouts with equal keys


def _prices(pricer, batch):
    prices = pricer.price_batch(batch, validated=True)
    return (prices.peak_total, prices.peak_stage, prices.headroom, prices.fits, prices.capacity,
            *(prices.parts()[part] for part in PARTS))


def _assert_identical(got, want):
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


@pytest.mark.parametrize("name,settings", [("qwen3-72b", {}), ("deepseek-v3", {"recompute": "selective"}),
                                           ("llama2-7b", {"recompute": "none", "grad_shard": True})])
def test_grouped_prices_equal_every_layout_priced_alone(name, settings, monkeypatch):
    """A batch large enough to be grouped (m up to 300, so min(m, 2p) merges many) prices bit for bit as
    without groups, every layout evaluated on its own keys."""
    model, batch = random_batch(name, 3000, seed=31, **settings)
    copies = [batch, *(dataclasses.replace(batch, m=batch.m * k + 5) for k in (7, 11))]  # m well past 2p too
    batch = LayoutBatch.from_arrays(model.layout, **{k: np.concatenate([getattr(c, k) for c in copies])
                                                     for k in ("d", "t", "p", "cp", "m", "b", "vp", "ep")}, **settings)
    assert len(batch) >= MemoryPricer.group_from
    pricer = MemoryPricer(model, system=SYSTEM)
    groups = memory._group(memory._grouping_keys(batch), len(batch))
    assert groups is not None and len(groups.present) < len(batch) // 2
    grouped = _prices(pricer, batch)
    monkeypatch.setattr(MemoryPricer, "group_from", len(batch) + 1)
    _assert_identical(grouped, _prices(MemoryPricer(model, system=SYSTEM), batch))
    assert_same_as_one_at_a_time(model, batch.subset(np.arange(0, len(batch), len(batch) // 25)),
                                 MemoryPricer(model, system=SYSTEM).price_batch(
                                     batch.subset(np.arange(0, len(batch), len(batch) // 25))))


def test_an_inherited_os_is_grouped_by_d():
    """An os column derived from d (the defaults' os where it divides d) is no grouping key: each group's os
    comes from its d, and the prices equal those with os given as the very same column (a key then)."""
    model, batch = random_batch("qwen3-72b", 6000, seed=53)
    assert batch.os_inherited_from() is not None and "os" not in memory._grouping_keys(batch)
    given = LayoutBatch.from_arrays(model.layout, **{k: getattr(batch, k) for k in ARRAY_KEYS})
    assert given.os_inherited_from() is None and "os" in memory._grouping_keys(given)
    assert len(set(batch.os.tolist())) > 1  # both outcomes of the rule occur
    _assert_identical(_prices(MemoryPricer(model, system=SYSTEM), batch), _prices(MemoryPricer(model, system=SYSTEM), given))


def test_the_stage_forms_read_m_only_as_the_capped_in_flight_count():
    """The pricer groups layouts by min(m, 2p): every memory stage form reads m only as min(m, X) with X <= 2p."""
    import sympy

    from symbolic.memory import stage_formulas, variants
    from symbolic.symbols import syms

    m, p, vp, rank = syms("m", "p", "vp", "pp_rank")
    grid = [(q, v, i) for q in (1, 2, 3, 5, 8, 16, 64) for v in (1, 2, 3, 4, 7) for i in range(q)]
    for variant in variants():
        forms = stage_formulas(variant)
        for part in (*PARTS, "total"):
            expr = getattr(forms, part).expr
            capped = [e for e in expr.atoms(sympy.Min) if m in e.args]
            assert m not in expr.xreplace({e: sympy.Dummy() for e in capped}).free_symbols, (variant.key, part)
            for e in capped:
                bound = sympy.lambdify((p, vp, rank), sympy.Min(*(x for x in e.args if x != m)))
                assert all(bound(q, v, i) <= 2 * q for q, v, i in grid), (variant.key, part, e)


def test_memory_pricer_imports_no_sympy():
    code = ("import sys; from codegen.pricing.memory import MemoryPricer; from codegen.configs.models import "
            "load_model; from codegen.configs import LayoutBatch; m = load_model('qwen3-72b'); "
            "MemoryPricer(m, system='dgx_h100', backend='numpy').price_batch("
            "LayoutBatch.from_arrays(m.layout, d=[1, 2])).parts(); "
            "assert 'sympy' not in sys.modules, 'sympy imported'")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


# ---------------------------------------------------------------- sensitivity


@pytest.mark.parametrize("precision", ["bf16", "fp8", "mxfp8"])
@pytest.mark.parametrize("name", MODELS)
def test_generated_slopes_are_the_derivatives_of_the_total(name, precision):
    """Each generated ∂total/∂x against a central difference of the generated total (other values held), in a
    BF16 run and in low-precision ones (their own totals: quantized saved inputs and weight copies)."""
    model = load_model(name)
    layout = model.layout
    settings = dataclasses.replace(DEFAULT_SETTINGS, precision=precision)
    system = "dgx_b200" if precision == "mxfp8" else SYSTEM
    values = memory._values(model, layout, settings, None if precision == "bf16" else system)
    key = memory.variant_key(model, precision)
    total = f"memory_{key}_stage_total_bytes"
    slopes = [n for n in generated.FORMULAS if n.startswith(total + "__d_") and not n.endswith("_split")]
    assert {n.rsplit("_", 1)[1] for n in slopes} >= {"t", "cp", "b", "s", "p", "m"}
    for slope in slopes:
        x = slope.rsplit("__d_", 1)[1]
        h = 1e-4 * values[x]
        up = memory.call(total, dict(values, **{x: values[x] + h}))
        down = memory.call(total, dict(values, **{x: values[x] - h}))
        assert_close(memory.call(slope, values), (up - down) / (2 * h), rtol=1e-5, atol=1e-3)


def test_p_split_relaxes_the_body_counts():
    model = load_model("qwen3-72b")
    values = memory._values(model, model.layout, DEFAULT_SETTINGS)
    key = memory.variant_key(model)
    total = f"memory_{key}_stage_total_bytes"
    p, eps = values["p"], 1e-5
    # Body counts ∝ 1/p: move p and the counts together and difference the total.
    body = ("n_body", "n_extra", "n_extra_sel", "n_full_rec", "n_sel_rec")

    def at(q):
        return memory.call(total, dict(values, p=q, **{c: values[c] * p / q for c in body}))

    want = (at(p * (1 + eps)) - at(p * (1 - eps))) / (2 * p * eps)
    assert_close(memory.call(total + "__d_p_split", values), want, rtol=1e-5)


def _json(capsys, argv):
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_sensitivity_objective_memory(capsys):
    argv = ["sensitivity", "--model", "llama2-7b", "--objective", "memory", "--json"]
    out = _json(capsys, argv)
    assert out["objective"] == "memory" and out["units"]["value"].startswith("bytes per rank")
    model = load_model("llama2-7b")
    totals = memory.stage_totals(model, model.layout)
    assert out["value"] == totals.max()
    b = out["degrees"]["b"]
    assert_close(b["elasticity"], b["value"] * b["derivative"] / out["value"], rtol=1e-6, atol=1e-12)
    assert out["degrees"]["d"]["derivative"] == 0  # through the shard sizes alone, which are held
    assert out["degrees"]["d"]["doubling_ratio"] < 1  # the doubled d re-priced: ZeRO shards more
    # The settings reach the objective: more optimizer bytes, more memory.
    more = _json(capsys, argv + ["--bytes-optimizer", "16"])
    assert more["value"] > out["value"]


def test_sensitivity_objective_memory_in_low_precision(capsys):
    """--precision prices the peak stage of a low-precision run (eval --memory's figure) and differentiates its
    own total; --bf16-weights keeps BF16 primary weights beside the quantized copies (more memory)."""
    argv = ["sensitivity", "--model", "llama3-70b", "--layout", "d=4,t=4,p=4,vp=5,m=32,b=1", "--device", SYSTEM,
            "--objective", "memory", "--json"]
    bf16 = _json(capsys, argv)
    fp8 = _json(capsys, argv + ["--precision", "fp8"])
    layout = "d=4,t=4,p=4,vp=5,m=32,b=1"
    priced = _json(capsys, ["eval", "--model", "llama3-70b", "--layout", layout, "--device", SYSTEM, "--memory",
                            "--precision", "fp8", "--json"])["memory"]
    assert fp8["value"] == max(stage["total"] for stage in priced["stages"]) != bf16["value"]
    for x in ("t", "b", "cp"):
        got = fp8["degrees"][x]
        assert_close(got["elasticity"], got["value"] * got["derivative"] / fp8["value"], rtol=1e-6, atol=1e-12)
        assert got["derivative"] != bf16["degrees"][x]["derivative"]
    assert _json(capsys, argv + ["--precision", "fp8", "--bf16-weights"])["value"] > fp8["value"]


@pytest.mark.parametrize("argv,words", [
    (["--objective", "memory", "--precision", "fp8"],
     "--precision fp8: the bytes of its quantized copies are its GPU's"),
    (["--precision", "fp8", "--device", SYSTEM], "--precision fp8: the precision of --objective memory"),
    (["--cost", "time", "--bf16-weights", "--device", SYSTEM], "--bf16-weights: a setting of a low-precision run"),
    (["--objective", "memory", "--precision", "nvfp4", "--device", SYSTEM], "--precision nvfp4: the H100"),
    (["--objective", "memory", "--precision", "fp4"], "--precision: invalid choice: 'fp4'"),
])
def test_sensitivity_precision_bad_input_is_one_line(capsys, argv, words):
    assert main(["sensitivity", "--model", "llama2-7b", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err


# ---------------------------------------------------------------- command line


def _eval_memory(capsys, *extra):
    return _json(capsys, ["eval", "--model", "qwen3-72b", "--device", SYSTEM, "--memory", "--json", *extra])["memory"]


def test_memory_options_reach_the_settings(capsys):
    base = _eval_memory(capsys)
    reserved = _eval_memory(capsys, "--reserve", "6.5")
    for a, b in zip(base["stages"], reserved["stages"]):
        assert a["total"] == b["total"]
        # (--reserve replaces the default reserve, DEFAULT_SETTINGS.reserve_bytes, which base keeps back)
        assert_close(a["headroom"] - b["headroom"], 6.5 * 2 ** 30 - DEFAULT_SETTINGS.reserve_bytes, rtol=1e-6,
                     atol=1e-12)
    assert base["reserve_bytes"] == DEFAULT_SETTINGS.reserve_bytes
    assert reserved["reserve_bytes"] == 6.5 * 2 ** 30
    halved = _eval_memory(capsys, "--bytes-optimizer", "6")
    assert_close([r["optimizer"] * 2 for r in halved["stages"]], [r["optimizer"] for r in base["stages"]],
                 rtol=1e-6, atol=1e-12)
    grads = _eval_memory(capsys, "--bytes-grad", "2", "--bytes-param", "4")
    assert_close([r["gradients"] * 2 for r in grads["stages"]], [r["gradients"] for r in base["stages"]],
                 rtol=1e-6, atol=1e-12)
    assert_close([r["weights"] for r in grads["stages"]], [r["weights"] * 2 for r in base["stages"]],
                 rtol=1e-6, atol=1e-12)
    no_flash = _eval_memory(capsys, "--no-flash-attention")
    assert all(n["activations"] > b["activations"] for n, b in zip(no_flash["stages"], base["stages"]))
    assert no_flash["settings"]["flash_attention"] == 0
    zero3 = _eval_memory(capsys, "--zero-level", "3")
    assert zero3["zero_level"] == 3 and base["zero_level"] != 3
    assert all(z["weights"] < b["weights"] for z, b in zip(zero3["stages"], base["stages"]))


@pytest.mark.parametrize("argv,option", [
    (["--reserve", "-1"], "--reserve"), (["--reserve", "nan"], "--reserve"), (["--bytes-param", "abc"], "--bytes-param"),
    (["--bytes-grad", "inf"], "--bytes-grad"), (["--bytes-optimizer", "-0.5"], "--bytes-optimizer"),
    (["--zero-level", "4"], "--zero-level"), (["--zero-level", "1.5"], "--zero-level"),
    (["--zero-level", "x"], "--zero-level"),
])
@pytest.mark.parametrize("command", ["eval", "sensitivity"])
def test_bad_memory_options_are_one_line_exit_2(capsys, argv, option, command):
    on = ["--memory", "--device", SYSTEM] if command == "eval" else ["--objective", "memory"]
    assert main([command, "--model", "llama2-7b", *on, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"symcost {command}: error: {option}:") and argv[1] in err[0], err


@pytest.mark.parametrize("command,needs", [("eval", "--memory"), ("sensitivity", "--objective memory")])
def test_memory_options_need_memory(capsys, command, needs):
    assert main([command, "--model", "llama2-7b", "--no-flash-attention"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--no-flash-attention" in err and needs in err and len(err.splitlines()) == 1
