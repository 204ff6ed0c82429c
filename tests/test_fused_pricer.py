"""The stage pricer's fused backend (``StagePricer(..., backend="numba")``,
``codegen.pricing.fused.FusedBackend``): the NumPy pricer's numbers from one numba kernel per variant. Every
number is compared with the NumPy backend's (itself held to the original's
closed forms in test_search.py) on the same layouts.

Skips without numba (``pip install -e '.[fast]'``); the first run compiles a kernel per variant
(seconds each), later runs load them from numba's on-disk cache.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from codegen.configs import LayoutBatch, LayoutError, load_model
from codegen.runtime.inputs import InputError
from codegen.pricing import fused
from codegen.pricing.pricer import StagePricer
from conftest import assert_close
from test_search import SETTINGS, _valid_arrays

NO_NUMBA = "the fused pricer needs numba: pip install -e '.[fast]'"

RTOL = 1e-12


needs_numba = pytest.mark.skipif(not fused.available(), reason=NO_NUMBA)


def test_without_numba_it_says_which_extra(monkeypatch):
    monkeypatch.setattr(fused, "available", lambda: False)
    with pytest.raises(ImportError, match=re.escape("pip install -e '.[fast]'")):
        StagePricer("llama2-7b", backend="numba")


@pytest.mark.parametrize("backend", ["jax", "fused", None, ["numba"]])
def test_an_unknown_backend_is_named(backend):
    with pytest.raises(InputError, match=re.escape(f"backend: expected 'numpy' or 'numba', got {backend!r}")):
        StagePricer("llama2-7b", backend=backend)


def test_the_backend_reads_only_the_pricers_public_plan():
    """FusedBackend holds its pricer and reads it through the public members StagePlanner declares (no private
    name of the pricer's, nothing else): the plan stays the pricer's, in one place."""
    tree = ast.parse(Path(fused.__file__).read_text())
    declared = {node.target.id if isinstance(node, ast.AnnAssign) else node.name
                for node in next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "StagePlanner").body
                if isinstance(node, (ast.AnnAssign, ast.FunctionDef))}
    aliases = {"pricer"}  # self.pricer, and the locals it is read into
    read = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and (isinstance(node.value, ast.Name) and node.value.id in aliases
                 or isinstance(node.value, ast.Attribute) and node.value.attr == "pricer")}
    read -= {"pricer"}
    assert read and read <= declared, read - declared
    assert not any(name.startswith("_") for name in declared)
    assert all(callable(getattr(StagePricer, name, None)) or name in vars(StagePricer("llama2-7b"))
               for name in declared)


# Per model: the settings of test_search (FLOP and TIME, FSDP on and off, with_recomp on and off) and a
# recompute plan other than the model file's.
CASES = [(*setting, None) for setting in SETTINGS] + [
    ("qwen3-72b", "FLOP", False, True, "A2", "full"),
    ("llama2-7b", "FLOP", False, False, "A2", "selective"),
]


@needs_numba
@pytest.mark.parametrize("name, ttype, fsdp, with_recomp, device, recompute", CASES)
def test_same_prices_as_the_numpy_pricer(name, ttype, fsdp, with_recomp, device, recompute):
    model = load_model(name)
    arrays = _valid_arrays(name, fsdp, 300, seed=3 + len(name) + fsdp + 2 * with_recomp)
    settings = dict(device=device, fsdp=fsdp, with_recomp=with_recomp, ttype=ttype, recompute=recompute)
    want = StagePricer(model, **settings)(**arrays)
    got = StagePricer(model, **settings, backend="numba")(**arrays)
    assert_close(got.bottleneck, want.bottleneck, rtol=RTOL, atol=0)
    assert_close(got.sum, want.sum, rtol=RTOL, atol=0)
    assert got.stages is None


@needs_numba
def test_blocks_shared_keys_and_per_stage(monkeypatch):
    """Small blocks (other pipelines present in each), keys given as one number, and per_stage."""
    model = load_model("deepseek-v3")
    arrays = _valid_arrays("deepseek-v3", False, 200, seed=11)
    want = StagePricer(model)(**arrays)
    monkeypatch.setattr(fused.FusedBackend, "kernel_block", 7)
    got = StagePricer(model, backend="numba")(**arrays)
    assert_close(got.bottleneck, want.bottleneck, rtol=RTOL, atol=0)
    assert_close(got.sum, want.sum, rtol=RTOL, atol=0)
    d = np.array([32, 16, 8, 1])
    qwen = StagePricer("qwen3-72b", backend="numba")
    shared = qwen(d=d, t=4, p=8, cp=2, m=144)
    assert_close(shared.bottleneck, StagePricer("qwen3-72b")(d=d, t=4, p=8, cp=2, m=144).bottleneck,
                 rtol=RTOL, atol=0)
    staged = qwen(d=d, t=4, p=8, cp=2, m=144, per_stage=True)
    assert_close(staged.bottleneck, shared.bottleneck, rtol=RTOL, atol=0)
    assert staged.stages["total"].shape == (4, 8)


@needs_numba
def test_per_stage_and_slopes_stay_the_numpy_passes():
    """The backend takes the per_stage=False prices only: every stage's parts and the slopes are the NumPy
    pricer's, bit for bit, and the pricer is a StagePricer either way (the backend is held, not inherited)."""
    arrays = _valid_arrays("deepseek-v3", False, 60, seed=31)
    numpy_pricer, pricer = StagePricer("deepseek-v3"), StagePricer("deepseek-v3", backend="numba")
    assert type(pricer) is StagePricer and pricer.backend == "numba" and numpy_pricer.backend == "numpy"
    want, got = numpy_pricer(per_stage=True, **arrays), pricer(per_stage=True, **arrays)
    for name, stages in want.stages.items():
        np.testing.assert_array_equal(got.stages[name], stages)
    np.testing.assert_array_equal(got.bottleneck, want.bottleneck)
    batch = LayoutBatch.from_arrays(load_model("deepseek-v3").layout, **arrays)
    for degree, slopes in numpy_pricer.stage_slopes(batch, ["t", "p"], relax_p=True).items():
        np.testing.assert_array_equal(pricer.stage_slopes(batch, ["t", "p"], relax_p=True)[degree], slopes)


@needs_numba
@pytest.mark.parametrize("name, arrays, message", [
    ("qwen3-72b", {"d": [32, 16], "t": [4, 3], "p": [8, 8]},
     "layout 1 of the batch (d=16,t=3,p=8,cp=1,ep=1,m=144,b=1,vp=1,etp=1): t must divide the attention heads a: "
     "a = 64, t = 3"),
    ("deepseek-v3", {"d": [16, 16], "ep": [8, 3]}, "ep must divide the routed experts n_exp: n_exp = 256, ep = 3"),
])
def test_invalid_layouts_raise_as_the_numpy_pricer(name, arrays, message):
    arrays = {key: np.array(value) for key, value in arrays.items()}
    with pytest.raises(LayoutError) as numpy_error:
        StagePricer(name)(**arrays)
    with pytest.raises(LayoutError, match=re.escape(message)) as fused_error:
        StagePricer(name, backend="numba")(**arrays)
    assert str(fused_error.value) == str(numpy_error.value)


@needs_numba
def test_empty_and_validated():
    model = load_model("llama2-7b")
    pricer = StagePricer(model, backend="numba")
    assert pricer(d=np.array([], dtype=np.int64)).bottleneck.shape == (0,)
    arrays = _valid_arrays("llama2-7b", False, 50, seed=5)
    np.testing.assert_array_equal(pricer(validated=True, **arrays).bottleneck, pricer(**arrays).bottleneck)


# ------------------------------------------------------------------ the kernel over the key columns


def _used_keys_kernel(pricer) -> bool:
    """Whether the last plans the pricer built were kernels over the key columns (not the batch path)."""
    plans = pricer._fused._key_plans
    return bool(plans) and all(plan is not False for plan in plans.values())


# Every case with the term groups tabulated; per model one case (FLOP and TIME both) with every group in the kernel.
KEY_CASES = [(*case, True) for case in CASES] + [(*case, False) for case in CASES[1:6:2]]


@needs_numba
@pytest.mark.parametrize("name, ttype, fsdp, with_recomp, device, recompute, tabulated", KEY_CASES)
def test_keys_kernel_same_prices_as_the_numpy_pricer(monkeypatch, name, ttype, fsdp, with_recomp, device, recompute,
                                                      tabulated):
    """Validation, derived fields, levels, terms and stage sums in the one kernel over the keys (vp and ep
    vary too): the NumPy pricer's numbers, with the term groups tabulated over the keys' values or computed
    in the kernel from tabulated arguments."""
    monkeypatch.setattr(fused, "_KEYS_FROM", 1)
    if not tabulated:
        monkeypatch.setattr(fused, "_PART_TABLE_LIMIT", 0)
    model = load_model(name)
    arrays = _valid_arrays(name, fsdp, 400, seed=7 + len(name) + fsdp + 2 * with_recomp)
    settings = dict(device=device, fsdp=fsdp, with_recomp=with_recomp, ttype=ttype, recompute=recompute)
    want = StagePricer(model, **settings)(**arrays)
    pricer = StagePricer(model, **settings, backend="numba")
    for validated in (False, True):
        got = pricer(validated=validated, **arrays)
        assert _used_keys_kernel(pricer)
        assert_close(got.bottleneck, want.bottleneck, rtol=RTOL, atol=0)
        assert_close(got.sum, want.sum, rtol=RTOL, atol=0)


@needs_numba
def test_small_calls_take_the_keys_kernel_once_their_shape_repeats(monkeypatch):
    """Below ``_KEYS_FROM`` layouts a call goes the batch path until its shape (settings, shared keys, varying
    key names) has been priced ``_WARM_CALLS`` times: a searcher's loop over chunks then skips the batch path's
    per-call Python. The numbers are the NumPy pricer's either way; another shape counts its own calls."""
    monkeypatch.setattr(fused, "_WARM_CALLS", 3)
    arrays = _valid_arrays("deepseek-v3", False, 200, seed=17)
    chunks = [{key: values[start:start + 50] for key, values in arrays.items()} for start in range(0, 200, 50)]
    numpy_pricer, pricer = StagePricer("deepseek-v3"), StagePricer("deepseek-v3", backend="numba")
    used = []
    for chunk in chunks:
        got = pricer(**chunk)
        used.append(_used_keys_kernel(pricer))
        assert_close(got.bottleneck, numpy_pricer(**chunk).bottleneck, rtol=RTOL, atol=0)
        assert_close(got.sum, numpy_pricer(**chunk).sum, rtol=RTOL, atol=0)
    assert used == [False, False, True, True]
    # The kept head (the shape's first layout) checks no later call: a broken first layout still raises as the
    # NumPy pricer does, from the kernel's own check.
    for key, value in (("ep", 3), ("d", 0)):
        broken = {name: values.copy() for name, values in chunks[1].items()}
        broken[key][0] = value
        with pytest.raises(LayoutError) as numpy_error:
            numpy_pricer(**broken)
        with pytest.raises(LayoutError) as fused_error:
            pricer(**broken)
        assert str(fused_error.value) == str(numpy_error.value)
    again = StagePricer("deepseek-v3", backend="numba")
    for validated in (False, True):  # validated is part of the shape: each counts from one
        again(validated=validated, **chunks[0])
        assert not _used_keys_kernel(again)


@needs_numba
def test_keys_kernel_keys_given_as_numbers_and_os(monkeypatch):
    """Keys given as one number, an os column (the model's os otherwise follows d), and one pipeline."""
    monkeypatch.setattr(fused, "_KEYS_FROM", 1)
    arrays = _valid_arrays("qwen3-72b", False, 300, seed=13)
    d = arrays["d"]
    cases = [dict(d=d, t=4, p=8, cp=2, m=144),
             dict(d=d, t=arrays["t"], p=8, os=np.where(d % 2 == 0, 2, 0).astype(np.int64)),
             dict(arrays, os=np.zeros(len(d), dtype=np.int64))]
    for given in cases:
        want = StagePricer("qwen3-72b")(**given)
        pricer = StagePricer("qwen3-72b", backend="numba")
        got = pricer(**given)
        assert _used_keys_kernel(pricer)
        assert_close(got.bottleneck, want.bottleneck, rtol=RTOL, atol=0)
        assert_close(got.sum, want.sum, rtol=RTOL, atol=0)


@needs_numba
@pytest.mark.parametrize("name, key, index, value", [
    ("qwen3-72b", "t", 5, 3),        # a constraint the kernel checks (heads)
    ("deepseek-v3", "ep", 9, 3),     # experts
    ("qwen3-72b", "m", 7, 0),        # the input gate, on a key the terms do not read (checked in the kernel)
    ("qwen3-72b", "d", 3, 0),        # the input gate, on a scanned key
    ("qwen3-72b", "b", 2, 1 << 40),  # beyond the bound
])
def test_keys_kernel_invalid_layouts_raise_as_the_numpy_pricer(monkeypatch, name, key, index, value):
    monkeypatch.setattr(fused, "_KEYS_FROM", 1)
    arrays = _valid_arrays(name, False, 50, seed=17)
    arrays[key] = arrays[key].copy()
    arrays[key][index] = value
    with pytest.raises(LayoutError) as numpy_error:
        StagePricer(name)(**arrays)
    with pytest.raises(LayoutError) as fused_error:
        StagePricer(name, backend="numba")(**arrays)
    assert str(fused_error.value) == str(numpy_error.value)
    assert f"{index}" in str(fused_error.value)


@needs_numba
def test_keys_kernel_falls_back_to_the_batch_path(monkeypatch):
    """Values beyond the scan, keys of another type, and short batches take the batch path: the same numbers."""
    arrays = _valid_arrays("deepseek-v3", False, 200, seed=19)
    want = StagePricer("deepseek-v3")(**arrays)
    monkeypatch.setattr(fused, "_KEYS_FROM", 1)
    monkeypatch.setattr(fused, "_VALUES", 8)  # d and ep reach 32
    pricer = StagePricer("deepseek-v3", backend="numba")
    assert_close(pricer(**arrays).bottleneck, want.bottleneck, rtol=RTOL, atol=0)
    assert not pricer._fused._key_plans
    monkeypatch.setattr(fused, "_VALUES", 1 << 12)
    listed = {key: values.tolist() for key, values in arrays.items()}
    assert_close(pricer(**listed).bottleneck, want.bottleneck, rtol=RTOL, atol=0)
    assert not pricer._fused._key_plans


def test_layout_field_keys_name_every_key_a_field_reads():
    """LAYOUT_FIELD_KEYS (what the fused pricer tabulates each field over): layouts that agree on a field's
    declared keys agree on the field, over random (also invalid) layouts of every key and setting."""
    from codegen.configs import LAYOUT_FIELD_KEYS, LayoutBatch, derive_fields_batch

    rng = np.random.default_rng(23)
    n = 4000
    keys = {"d": rng.choice([1, 2, 3, 4, 6, 8, 16], n), "t": rng.choice([1, 2, 4, 8], n),
            "p": rng.choice([1, 2, 4], n), "cp": rng.choice([1, 2, 4], n), "ep": rng.choice([1, 2, 4, 8, 16], n),
            "m": rng.integers(1, 9, n), "b": rng.choice([1, 2], n), "vp": rng.choice([1, 2], n),
            "etp": rng.choice([1, 2], n), "os": rng.choice([0, 2, 4], n)}
    for name in ("deepseek-v3", "qwen3-72b"):
        model = load_model(name)
        for op, grad_shard, sp in [(True, False, False), (True, True, True), (False, False, True)]:
            batch = LayoutBatch.from_arrays(model.layout, op=op, grad_shard=grad_shard, sp=sp, **keys)
            fields = derive_fields_batch(model, batch, names=list(LAYOUT_FIELD_KEYS), validated=True)
            for field, reads in LAYOUT_FIELD_KEYS.items():
                _, group = np.unique(np.stack([keys[key] for key in reads], axis=1), axis=0, return_inverse=True)
                group = group.reshape(-1)
                first = np.zeros(group.max() + 1)
                first[group] = fields[field]  # some layout's value per group of declared keys
                np.testing.assert_array_equal(fields[field], first[group], err_msg=f"{name} {field}")


@needs_numba
def test_keys_kernel_later_calls_with_other_values(monkeypatch):
    """A later call reuses the last plan while its values are ones the plan holds, and makes a new plan (of
    the values of both) when one is not; an invalid layout in a later call raises as the NumPy pricer."""
    monkeypatch.setattr(fused, "_KEYS_FROM", 1)
    arrays = _valid_arrays("deepseek-v3", False, 600, seed=29)
    numpy_pricer, pricer = StagePricer("deepseek-v3"), StagePricer("deepseek-v3", backend="numba")
    small = {key: values[arrays["d"] < 16] for key, values in arrays.items()}
    for given in (small, arrays, small, {key: values[::-1].copy() for key, values in arrays.items()}):
        got = pricer(**given)
        assert_close(got.bottleneck, numpy_pricer(**given).bottleneck, rtol=RTOL, atol=0)
        assert_close(got.sum, numpy_pricer(**given).sum, rtol=RTOL, atol=0)
    assert len(pricer._fused._key_plans) == 2  # the small values', then the union's (reused by the last two calls)
    broken = {key: values.copy() for key, values in arrays.items()}
    broken["t"][100] = 3
    with pytest.raises(LayoutError) as numpy_error:
        numpy_pricer(**broken)
    with pytest.raises(LayoutError) as fused_error:
        pricer(**broken)
    assert str(fused_error.value) == str(numpy_error.value)
