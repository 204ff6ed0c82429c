"""Cost families as specs (``codegen.pricing.families``): the engine prices a batch from a spec alone.

The memory family's spec, priced by the engine's generic path, gives the memory pricer's peak to the bit; a toy
family defined here through the spec alone (energy of the bytes a stage holds, over existing generated terms)
prices a batch as its stages do one layout at a time, grouped or not.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from codegen.configs import LayoutBatch, validate_batch
from codegen.configs.models import load_model
from codegen.pricing import engine
from codegen.pricing.families import FamilySpec, price_family
from codegen.pricing.memory import DEFAULT_SETTINGS, MemoryPricer, memory_family, stage_memory, variant_key

SYSTEM = "dgx_h100"


def _batch(name: str, n: int, seed: int) -> tuple:
    """Up to *n* random valid layouts of a bundled model (p, vp, m, b, d, t, cp, ep varying), drawn from few values
    so that layouts repeat their keys (the grouped path is taken)."""
    model = load_model(name)
    rng = np.random.default_rng(seed)
    k = 12 * n
    draw = {"d": rng.choice([1, 2, 4, 8, 16, 32], k), "t": rng.choice([1, 2, 4, 8], k),
            "p": rng.choice([1, 2, 3, 4, 8], k), "cp": rng.choice([1, 2, 4], k),
            "m": rng.integers(1, 20, k), "b": rng.choice([1, 2, 4], k), "vp": rng.choice([1, 1, 2], k)}
    if model.is_moe:
        draw["ep"] = rng.choice([1, 2, 4, 8, 16], k)
    batch = LayoutBatch.from_arrays(model.layout, **draw)
    keep = np.flatnonzero(validate_batch(model, batch))[:n]
    assert len(keep) >= n // 2, f"{name}: too few valid layouts drawn"
    return model, batch.subset(keep)


@pytest.mark.parametrize("name", ["qwen3-72b", "deepseek-v3", "llama2-7b"])
def test_the_memory_spec_prices_as_the_memory_pricer_to_the_bit(name):
    model, batch = _batch(name, 6000, seed=7)
    assert len(batch) >= engine.TIME_GROUP_FROM  # (terms grouped by the keys they read)
    spec = memory_family(DEFAULT_SETTINGS)
    got = price_family(spec, model, batch, validated=True, per_stage=True)
    want = MemoryPricer(model, system=SYSTEM).price_batch(batch, validated=True)
    np.testing.assert_array_equal(got.step, want.peak_total)
    np.testing.assert_array_equal(got.stage, want.peak_stage)
    for i in range(0, len(batch), len(batch) // 5):
        stages = stage_memory(model, batch.layout(i), system=SYSTEM)["stages"]
        np.testing.assert_array_equal(got.stages[i, :len(stages)], [row["total"] for row in stages])
        assert np.isnan(got.stages[i, len(stages):]).all()
    assert spec.slope(model, "t") == f"memory_{variant_key(model)}_stage_total_bytes__d_t"


#: Joules per byte held (a toy figure: the test is about the engine, not about energy).
JOULES_PER_BYTE = 3.5e-12


def _energy() -> FamilySpec:
    """A toy family through the spec alone: a stage's 'energy' is the bytes its weights and activations take per rank
    (the memory family's generated parts) times a figure, and a step's the sum over the stages."""
    def terms(model):
        key = variant_key(model)
        return {"weights": f"memory_{key}_stage_weights_bytes", "activations": f"memory_{key}_stage_activations_bytes"}

    def settings(model, batch):
        values = {"joules_per_byte": JOULES_PER_BYTE, "bytes_compute": 2.0, "dropout": 0.0, "flash_attention": 1.0,
                  "bytes_logits": 4.0, "bytes_p": 2.0, "bytes_grad": 4.0, "bytes_optimizer": 12.0, "zero_level": 1.0}
        return values

    return FamilySpec(name="energy", unit="joules", terms=terms, step="sum", settings=settings,
                      stage=lambda parts, s: (parts["weights"] + parts["activations"]) * s["joules_per_byte"])


@pytest.mark.parametrize("name", ["qwen3-72b", "deepseek-v3"])
def test_a_toy_family_defined_by_its_spec_alone_prices_a_batch(name):
    model, batch = _batch(name, 3000, seed=3)
    spec = _energy()
    got = price_family(spec, model, batch, validated=True, per_stage=True)
    for i in range(0, len(batch), len(batch) // 7):
        stages = stage_memory(model, batch.layout(i), system=SYSTEM,
                              settings=dataclasses.replace(DEFAULT_SETTINGS, zero_level=1))
        want = [(row["weights"] + row["activations"]) * JOULES_PER_BYTE for row in stages["stages"]]
        np.testing.assert_array_equal(got.stages[i, :len(want)], want)
        assert got.step[i] == sum(want)  # (added stage by stage, as the engine does)
    plain = price_family(spec, model, batch, validated=True, group_from=len(batch) + 1)  # nothing grouped
    np.testing.assert_array_equal(plain.step, got.step)
    with pytest.raises(ValueError, match="step: one of max, sum"):
        FamilySpec(name="x", unit="y", terms=spec.terms, stage=spec.stage, step="mean")
