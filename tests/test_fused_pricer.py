"""The fused pricer (``codegen.pricing.fused.FusedPricer``): the NumPy pricer's numbers from one numba
kernel per variant. Every number is compared with ``StagePricer`` (itself held to the original's
closed forms in test_search.py) on the same layouts.

Skips without numba (``pip install -e '.[fast]'``); the first run compiles a kernel per variant
(seconds each), later runs load them from numba's on-disk cache.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from codegen.configs.layouts import LayoutError
from codegen.configs.models import load_model
from codegen.pricing import fused
from codegen.pricing.pricer import StagePricer
from test_search import SETTINGS, _valid_arrays

NO_NUMBA = "the fused pricer needs numba: pip install -e '.[fast]'"

RTOL = 1e-12


needs_numba = pytest.mark.skipif(not fused.available(), reason=NO_NUMBA)


def test_without_numba_it_says_which_extra(monkeypatch):
    monkeypatch.setattr(fused, "available", lambda: False)
    with pytest.raises(ImportError, match=re.escape("pip install -e '.[fast]'")):
        fused.FusedPricer("llama2-7b")


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
    got = fused.FusedPricer(model, **settings)(**arrays)
    np.testing.assert_allclose(got.bottleneck, want.bottleneck, rtol=RTOL, atol=0)
    np.testing.assert_allclose(got.sum, want.sum, rtol=RTOL, atol=0)
    assert got.stages is None


@needs_numba
def test_blocks_shared_keys_and_per_stage(monkeypatch):
    """Small blocks (other pipelines present in each), keys given as one number, and per_stage."""
    model = load_model("deepseek-v3")
    arrays = _valid_arrays("deepseek-v3", False, 200, seed=11)
    want = StagePricer(model)(**arrays)
    monkeypatch.setattr(fused, "_BLOCK", 7)
    got = fused.FusedPricer(model)(**arrays)
    np.testing.assert_allclose(got.bottleneck, want.bottleneck, rtol=RTOL, atol=0)
    np.testing.assert_allclose(got.sum, want.sum, rtol=RTOL, atol=0)
    d = np.array([32, 16, 8, 1])
    qwen = fused.FusedPricer("qwen3-72b")
    shared = qwen(d=d, t=4, p=8, cp=2, m=144)
    np.testing.assert_allclose(shared.bottleneck, StagePricer("qwen3-72b")(d=d, t=4, p=8, cp=2, m=144).bottleneck,
                               rtol=RTOL, atol=0)
    staged = qwen(d=d, t=4, p=8, cp=2, m=144, per_stage=True)
    np.testing.assert_allclose(staged.bottleneck, shared.bottleneck, rtol=RTOL, atol=0)
    assert staged.stages["total"].shape == (4, 8)


@needs_numba
@pytest.mark.parametrize("name, arrays, message", [
    ("qwen3-72b", {"d": [32, 16], "t": [4, 3], "p": [8, 8]},
     "layout 1 of the batch (d=16,t=3,p=8,cp=1,ep=1,m=144,b=1): t must divide the attention heads a: a = 64, t = 3"),
    ("deepseek-v3", {"d": [16, 16], "ep": [8, 3]}, "ep must divide the routed experts n_exp: n_exp = 256, ep = 3"),
])
def test_invalid_layouts_raise_as_the_numpy_pricer(name, arrays, message):
    arrays = {key: np.array(value) for key, value in arrays.items()}
    with pytest.raises(LayoutError) as numpy_error:
        StagePricer(name)(**arrays)
    with pytest.raises(LayoutError, match=re.escape(message)) as fused_error:
        fused.FusedPricer(name)(**arrays)
    assert str(fused_error.value) == str(numpy_error.value)


@needs_numba
def test_empty_and_validated():
    model = load_model("llama2-7b")
    pricer = fused.FusedPricer(model)
    assert pricer(d=np.array([], dtype=np.int64)).bottleneck.shape == (0,)
    arrays = _valid_arrays("llama2-7b", False, 50, seed=5)
    np.testing.assert_array_equal(pricer(validated=True, **arrays).bottleneck, pricer(**arrays).bottleneck)
