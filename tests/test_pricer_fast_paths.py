"""The stage pricer's paths for a searcher's repeated calls give the numbers of its general path.

A call of a shape the pricer has seen writes the columns its kernels read straight from the key columns
where the field's rule allows (``layouts.direct_column``) and reuses the shape's plan; a vouched-for call of one block
goes straight to the block's pricing. Each is checked here against the general derivation, bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

from codegen.configs import (LAYOUT_FIELD_NAMES, LayoutBatch, derive_fields_batch, direct_column, load_model,
                             validate_batch)
from codegen.pricing.pricer import StagePricer

_SETTINGS = ({}, {"op": False}, {"op": True, "grad_shard": True}, {"sp": True, "cp_algo": "ulysses_cp"})


def _valid_arrays(model, rng: np.random.Generator, n: int, **settings) -> dict[str, np.ndarray]:
    """*n* random layouts of *model* that ``validate_batch`` accepts (with *settings*)."""
    pool = {"d": rng.choice([1, 2, 4, 8, 16, 32], 40 * n), "t": rng.choice([1, 2, 4, 8], 40 * n),
            "p": rng.choice([1, 2, 4, 8, 5], 40 * n), "cp": rng.choice([1, 2, 4], 40 * n),
            "m": rng.integers(1, 64, 40 * n), "b": rng.choice([1, 2, 4], 40 * n), "vp": rng.choice([1, 2], 40 * n)}
    if model.is_moe:
        pool["ep"] = rng.choice([1, 2, 4, 8, 16, 32], 40 * n)
        pool["etp"] = rng.choice([1, 1, 2], 40 * n)
    keep = np.flatnonzero(validate_batch(model, LayoutBatch.from_arrays(model.layout, **pool, **settings)))[:n]
    assert len(keep) == n, "too few valid layouts drawn"
    return {key: values[keep] for key, values in pool.items()}


@pytest.mark.parametrize("name", ["qwen3-72b", "deepseek-v3", "llama2-7b"])
@pytest.mark.parametrize("settings", _SETTINGS, ids=lambda s: ",".join(s) or "defaults")
def test_direct_columns_equal_the_rules(name, settings):
    model = load_model(name)
    batch = LayoutBatch.from_arrays(model.layout, **_valid_arrays(model, np.random.default_rng(3), 300, **settings),
                                    **settings)
    derived = derive_fields_batch(model, batch, validated=True)
    written, memo = 0, {}
    for field in LAYOUT_FIELD_NAMES:
        for level in (None, 2.0, 3.0):
            write = direct_column(model, batch, field, level)
            if write is None:
                continue
            column = write(batch, memo)
            want = np.broadcast_to(derived[field] if level is None else derived[field] == level, (len(batch),))
            assert column.dtype == np.float64 and column.shape == (len(batch),), field
            assert np.array_equal(column, want.astype(np.float64)), (field, level)
            written += 1
    # every key field, comm_t, comm_cp, comm_ep, t_exp, d_exp; both ZeRO switches where the settings shard
    # the optimizer
    assert written == 14 + 2 * bool(batch.op)


@pytest.mark.parametrize("name", ["qwen3-72b", "deepseek-v3"])
@pytest.mark.parametrize("settings", _SETTINGS, ids=lambda s: ",".join(s) or "defaults")
def test_repeated_calls_price_as_the_general_path(name, settings):
    """The first call of a shape prices through the general derivation and binding; the later ones through
    the shape's plan (one-pass columns, kernels) and, vouched for, straight to the block: the same bits."""
    model = load_model(name)
    rng = np.random.default_rng(11)
    fast, general = StagePricer(model, device="A2"), StagePricer(model, device="A2")
    for _ in range(3):
        arrays = _valid_arrays(model, rng, 500, **settings)
        got = fast(**arrays, **settings, validated=True)
        want = general.price_batch(LayoutBatch.from_arrays(model.layout, **arrays, **settings))
        general._call_plans.clear()  # (the general path again on the next call)
        general._last_plan = (None,) * 4
        assert np.array_equal(got.bottleneck, want.bottleneck) and np.array_equal(got.sum, want.sum)
        assert got.stages is None
