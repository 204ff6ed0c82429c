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
from codegen.pricing.families import FamilySpec, price_family, price_slopes
from codegen.pricing.pricer import StagePricer
from codegen.pricing.stages import volumes_family
from codegen.pricing.time import TimePricer, time_family
from codegen.pricing.memory import DEFAULT_SETTINGS, MemoryPricer, memory_family, stage_memory, variant_key
from codegen.pricing.layer_kinds import combined_parts
from codegen.pricing.step_time import StepTimePricer, compute_family, exposed_time_comm, step_time_family
from codegen.runtime.inputs import InputError

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
    assert spec.slope(model, "t") == {"total": f"memory_{variant_key(model)}_stage_total_bytes__d_t"}
    assert spec.slope(model, "d") is None  # (the total reads d only through the shard sizes: no derivative)


#: Joules per byte held (a toy figure: the test is about the engine, not about energy).
JOULES_PER_BYTE = 3.5e-12


def _energy() -> FamilySpec:
    """A toy family through the spec alone: a stage's 'energy' is the bytes its weights and activations take per rank
    (the memory family's generated parts) times a figure, and a step's the sum over the stages."""
    def terms(model, _batch):
        key = variant_key(model)
        return {"weights": f"memory_{key}_stage_weights_bytes", "activations": f"memory_{key}_stage_activations_bytes"}

    def settings(model, batch):
        values = {"joules_per_byte": JOULES_PER_BYTE, "bytes_compute": 2.0, "dropout": 0.0, "flash_attention": 1.0,
                  "bytes_logits": 4.0, "bytes_p": 2.0, "bytes_grad": 4.0, "bytes_optimizer": 12.0, "zero_level": 1.0,
                  "recompute_norm": 0.0, "recompute_moe_act": 0.0, "recompute_mla_up": 0.0}
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


# ----------------------------------------------------------------------------- compute and step time


def _uniform(model, batch, recompute):
    """The layouts of *batch* under one recompute mode for every layer (the step-time pricer's run setting)."""
    return LayoutBatch.from_arrays(model.layout, recompute=recompute, validated=True,
                                   **{k: getattr(batch, k) for k in ("d", "t", "p", "cp", "ep", "etp", "vp", "b", "m")})


@pytest.mark.parametrize("name,recompute,zero", [("qwen3-72b", "selective", 1), ("deepseek-v3", "full", 0),
                                                 ("llama2-7b", "none", 2), ("gpt-oss-120b", "selective", 1),
                                                 ("deepseek-v3", "none", 1)])
def test_the_compute_spec_prices_as_the_step_time_pricer(name, recompute, zero):
    """Every stage priced by the compute family's spec, the slowest taken: the step-time pricer's compute seconds
    and FLOPs, which it reads from the first and the last stage alone (the most loaded and the one with the output
    layer) — so this also holds that no other stage is slower."""
    model, batch = _batch(name, 3000, seed=11)
    batch = _uniform(model, batch, recompute)
    spec = compute_family(SYSTEM, zero=zero)
    got = price_family(spec, model, batch, validated=True, per_stage=True)
    values = {k: getattr(batch, k) for k in ("d", "t", "p", "cp", "ep", "etp", "vp", "b", "m")}
    pricer = StepTimePricer(model, system=SYSTEM)
    want, flops, _moved, _vector = pricer.compute(values, recompute, zero)
    np.testing.assert_allclose(got.step, want, rtol=1e-14, atol=0)
    assert (got.step > 0).all()
    # the spec's parts are the pricer's: FLOPs of the bottleneck stage
    flop_spec = dataclasses.replace(spec, stage=lambda parts, _values: combined_parts(parts)[0])
    got_flops = price_family(flop_spec, model, batch, validated=True)
    stages = [flops for flops, *_ in pricer.stage_parts(values, recompute, zero)]  # the GEMMs' FLOPs at the
    np.testing.assert_allclose(got_flops.step, np.maximum.reduce(stages), rtol=1e-14, atol=0)  # reference efficiency
    assert np.isfinite(got.stages[np.arange(len(batch)), batch.p - 1]).all()


def test_the_step_time_spec_adds_the_bubble_and_exposed_communication():
    """compute × (1 + bubble) + exposed communication, as StepTimePricer.price forms a step, for a comm callable of
    the spec's (the time family's exposed seconds of the batch, under the default overlap, given its compute)."""
    model, batch = _batch("qwen3-72b", 400, seed=5)
    batch = _uniform(model, batch, "full")
    comm = exposed_time_comm(model, SYSTEM)
    got = price_family(step_time_family(SYSTEM, comm=comm, zero=1), model, batch, validated=True)
    values = {k: getattr(batch, k) for k in ("d", "t", "p", "cp", "ep", "etp", "vp", "b", "m")}
    want = StepTimePricer(model, system=SYSTEM).price(values, batch.recompute.mode, zero=1)
    exposed = comm(batch, want["compute_s"])  # (the data-parallel overlap's window is the compute's)
    assert (exposed > 0).any()
    np.testing.assert_allclose(got.step, want["step_time_s"] + exposed, rtol=1e-14, atol=0)
    bare = price_family(step_time_family(SYSTEM, zero=1), model, batch, validated=True)
    np.testing.assert_allclose(bare.step, want["step_time_s"], rtol=1e-14, atol=0)


# ----------------------------------------------------------------------------- the original's volumes


@pytest.mark.parametrize("name,device,ttype,with_recomp", [("qwen3-72b", "A2", "FLOP", False),
                                                           ("deepseek-v3", "A3", "TIME", True),
                                                           ("llama2-7b", "A2", "FLOP", True)])
def test_the_volumes_spec_prices_as_the_stage_pricer(name, device, ttype, with_recomp):
    """Each stage's total to the bit as StagePricer's stages (both weigh the terms by the counts in the order of
    stage_outputs); the bottleneck and the sum over the stages as its grouped fast path, which adds them in
    another order (to rounding); the slopes as its stage_slopes."""
    model, batch = _batch(name, 2500, seed=13)
    pricer = StagePricer(model, device=device, ttype=ttype, with_recomp=with_recomp)
    want = pricer.price_batch(batch, validated=True, per_stage=True)
    spec = volumes_family(device, ttype=ttype, with_recomp=with_recomp)
    got = price_family(spec, model, batch, validated=True, per_stage=True)
    np.testing.assert_array_equal(got.stages, want.stages["total"])
    np.testing.assert_allclose(got.step, want.bottleneck, rtol=1e-12, atol=0)
    summed = price_family(dataclasses.replace(spec, step="sum"), model, batch, validated=True)
    np.testing.assert_allclose(summed.step, want.sum, rtol=1e-12, atol=0)
    for degree in ("t", "cp"):
        slopes = price_slopes(spec, model, batch, degree, validated=True)
        np.testing.assert_array_equal(slopes, pricer.stage_slopes(batch, [degree])[degree])
    with pytest.raises(ValueError, match="no derivative in 'zz'"):
        price_slopes(spec, model, batch, "zz", validated=True)


# ----------------------------------------------------------------------------- collective time


@pytest.mark.parametrize("name,order,dispatcher", [("qwen3-72b", "tp-cp-ep-dp-pp", "alltoall"),
                                                   ("deepseek-v3", "tp-ep-cp-dp-pp", "alltoall"),
                                                   ("deepseek-v3", "tp-cp-ep-dp-pp", "deepep")])
def test_the_collective_time_spec_prices_as_the_time_pricer(name, order, dispatcher):
    """Every stage's seconds over every item, NCCL's pick per call (or the expert dispatch's form), to the bit as
    TimePricer's stages (which evaluates each item once per group of layouts with equal inputs and per distinct
    layer count); the bottleneck as its bottleneck."""
    model, batch = _batch(name, 1500, seed=17)
    want = TimePricer(model, system=SYSTEM, order=order, ep_dispatcher=dispatcher).price_batch(
        batch, validated=True, per_stage=True)
    got = price_family(time_family(model, SYSTEM, order=order, ep_dispatcher=dispatcher), model, batch,
                       validated=True, per_stage=True)
    np.testing.assert_array_equal(got.stages, want.stages["total_s"])
    np.testing.assert_array_equal(got.step, want.bottleneck_s)
    # The spec names the first stage of the most seconds; the pricer the first stage of its layer count that has
    # them (its columns are the distinct layer counts): the same stage unless stages of other counts tie.
    rows = np.arange(len(batch))
    np.testing.assert_array_equal(got.stages[rows, want.bottleneck_stage], got.step)
    np.testing.assert_array_equal(got.stages[rows, got.stage], got.step)
    assert (got.stage <= want.bottleneck_stage).all() and (got.stage == want.bottleneck_stage).mean() > 0.9


def test_the_exposed_comm_callable_refuses_a_recompute_list_it_cannot_place():
    """A recompute list per stage repeats the slowest stage's share of the forward collectives; the family's comm
    callable sees the step's compute only, so a batch the list applies to is refused (StepTimePricer.price_plan
    prices it), and a batch of other pipelines, to which the list does not apply, is priced as before."""
    model = load_model("qwen3-72b")  # its file: 8,6,6,6,4,4,2,2 layers per stage over p = 8
    comm = exposed_time_comm(model, SYSTEM)
    own = LayoutBatch.from_arrays(model.layout, p=np.array([8]), m=np.array([144]))
    with pytest.raises(InputError, match="layers per stage: the exposed communication of a recompute list"):
        comm(own, np.array([10.0]))
    other = LayoutBatch.from_arrays(model.layout, p=np.array([4]), d=np.array([64]), m=np.array([144]))
    assert np.isfinite(comm(other, np.array([10.0]))).all()
