"""GEMM efficiency by size (docs/search.md, "Compute"): the curve against Calculon's table, and the GEMMs of one MoE
layer sized and priced by hand."""

from __future__ import annotations

import numpy as np
import pytest
import sympy

import hardware
import symbolic.compute
from codegen.configs import load_model
from codegen.pricing.step_time import StepTimePricer
from conftest import assert_close
from symbolic.compute import (dense_layers_of_moe, gemm_efficiency_ratio, stage_flops, stage_gemm_flops,
                              stage_lowp_flops, stage_lowp_gemm_flops, window_saved_flops, window_saved_gemm_flops)
from symbolic.vocabulary import AttentionParams

#: Calculon (calculon-ai/calculon@caa4b11), systems/a100_80g.json and h100_80g_nvl8.json, "matrix"
#: gflops_efficiency float16: (from GFLOP, efficiency), copied by hand from the files.
CALCULON_MATRIX = ((128, 0.95), (16, 0.9), (1, 0.6), (0, 0.1))


def _calculon(gflop: float) -> float:
    """Calculon's lookup (calculon/processor.py): the efficiency of the first band whose lower edge the size reaches."""
    return next(eff for edge, eff in CALCULON_MATRIX if gflop >= edge)


@pytest.mark.parametrize("gflop", [0.001, 0.5, 0.999, 1.0, 6.4, 15.99, 16.0, 100.0, 127.9, 128.0, 500.0, 1e5])
def test_the_curve_is_calculons_table_over_its_16_to_128_gflop_value_capped_at_one(gflop):
    ratio = float(gemm_efficiency_ratio(sympy.Float(gflop * 1e9)))
    assert ratio == pytest.approx(min(1.0, _calculon(gflop) / 0.9), rel=1e-15)
    # Hopper's reference efficiency (the catalog's compute_efficiency, H100's measured maximum) times the ratio:
    # Calculon's curve scaled to that reference, the reference itself from 16 GFLOP on.
    gpu = hardware.load("dgx_h100").gpu
    assert gpu.compute_efficiency * ratio == pytest.approx(0.803 * min(0.9, _calculon(gflop)) / 0.9, rel=1e-12)


def test_hand_values_of_the_bands():
    assert gemm_efficiency_ratio(sympy.Integer(10**9 - 1)) == sympy.Rational(1, 9)
    assert gemm_efficiency_ratio(sympy.Integer(10**9)) == sympy.Rational(2, 3)
    assert gemm_efficiency_ratio(sympy.Integer(16 * 10**9 - 1)) == sympy.Rational(2, 3)
    assert gemm_efficiency_ratio(sympy.Integer(16 * 10**9)) == 1
    assert gemm_efficiency_ratio(sympy.Integer(10**12)) == 1


def _qwen3_30b(ep: int, b: int):
    """Qwen3-30B-A3B (h 2048, 48 layers, 128 experts of width 768, top-8, gated, 32 heads and 4 KV heads of 128,
    vocabulary 151936, s 4096) on one stage of t = cp = 1 ranks, ``ep`` expert-parallel ranks, 8 micro-batches of
    ``b``: (pricer, values)."""
    model = load_model("qwen3-30b-a3b")
    values = {k: np.array([v]) for k, v in dict(d=16, t=1, p=1, cp=1, ep=ep, etp=1, vp=1, b=b, m=8).items()}
    return StepTimePricer(model, system="dgx_h100"), values


@pytest.mark.parametrize("ep,b,down,gate_up", [
    # per expert: tokens b·4096 of each of the ep ranks, 8 of 128 experts each: b·4096·ep·8/128 tokens;
    # the down projection 2·tokens·768·2048 FLOPs, the fused gate and up projection twice that.
    (16, 1, 2 / 3, 1.0),  # 4096 tokens: 12.9 and 25.8 GFLOP
    (8, 1, 2 / 3, 2 / 3),  # 2048 tokens: 6.4 and 12.9 GFLOP
    (1, 1, 1 / 9, 2 / 3),  # 256 tokens: 0.81 and 1.6 GFLOP
    (1, 4, 2 / 3, 2 / 3),  # 1024 tokens: 3.2 and 6.4 GFLOP
])
def test_one_moe_layers_expert_gemms_by_hand(ep, b, down, gate_up):
    """The FLOPs at the reference efficiency minus the FLOPs: each GEMM's FLOPs times (1/ratio − 1), summed by hand.
    Of Qwen3-30B's GEMMs only the experts' and the router's (2·b·4096·2048·128 = b·2.1 GFLOP: 2/3) fall under
    16 GFLOP; the attention projections (b·77 GFLOP), the scores (b·69 GFLOP each, FlashAttention's causal half)
    and the output layer (b·2.5 TFLOP) do not."""
    pricer, values = _qwen3_30b(ep, b)
    tokens_per_expert = b * 4096 * ep * 8 / 128
    down_size = 2 * tokens_per_expert * 768 * 2048
    assert down_size == pytest.approx({(16, 1): 12.88e9, (8, 1): 6.44e9, (1, 1): 0.805e9, (1, 4): 3.22e9}[ep, b],
                                      rel=1e-3)
    assert float(gemm_efficiency_ratio(sympy.Float(down_size))) == pytest.approx(down)
    assert float(gemm_efficiency_ratio(sympy.Float(2 * down_size))) == pytest.approx(gate_up)
    router = 2.0 / 3.0 if b * 2 * 4096 * 2048 * 128 < 16e9 else 1.0
    tokens_per_step = 8 * b * 4096  # m·b·s over t·cp
    # The scores' causal half, 2·s·a·(d_qk + d_v)/2 = 4096·32·256 FLOPs a token, at the fused kernel's efficiency
    # over the reference (the catalog's attention_efficiency / compute_efficiency: 0.45 / 0.803 on Hopper).
    gpu = hardware.load("dgx_h100").gpu
    scores = 4096 * 32 * 256
    per_token = (2 * 8 * 768 * 2048 * (1 / down - 1) + 2 * 2 * 8 * 768 * 2048 * (1 / gate_up - 1)
                 + 2 * 2048 * 128 * (1 / router - 1)
                 + scores * (gpu.compute_efficiency / gpu.attention_efficiency - 1))
    want = tokens_per_step * 3 * 48 * per_token  # three passes of 48 layers
    (weighted, *_), _ = pricer.stage_parts(values, "none", 1)
    real = pricer.stage_flops(values, "none")
    assert_close(weighted - real, np.array([want]), rtol=1e-9, atol=0)


def test_the_compute_seconds_price_each_gemm_at_its_sizes_efficiency():
    """Qwen3-30B at ep = 1, b = 1: the expert down projections (0.81 GFLOP) at 1/9 of the reference efficiency
    take nine times their seconds at it; the step's compute grows by exactly the weighted FLOPs' extra seconds."""
    pricer, values = _qwen3_30b(1, 1)
    gpu = hardware.load("dgx_h100").gpu
    (weighted, _, moved, vector), _ = pricer.stage_parts(values, "none", 1)
    real = pricer.stage_flops(values, "none")
    seconds, *_ = pricer.compute(values, "none", 1)
    at_reference = (real / (gpu.peak_flops_bf16_per_s * gpu.compute_efficiency)
                    + moved / (gpu.hbm_bytes_per_s * gpu.hbm_efficiency)
                    + vector / (gpu.vector_flops_per_s * gpu.vector_efficiency))
    extra = (weighted - real) / (gpu.peak_flops_bf16_per_s * gpu.compute_efficiency)
    assert_close(seconds, at_reference + extra, rtol=1e-12, atol=0)
    down = 8 * 4096 * 3 * 48 * 2 * 8 * 768 * 2048  # the step's expert down-projection FLOPs
    assert extra[0] > 8 * down / (gpu.peak_flops_bf16_per_s * gpu.compute_efficiency)


def test_a_dense_models_large_gemms_keep_the_reference_efficiency():
    """Llama-2-7B's GEMMs at b = 1, s = 4096, t = 1 are all 16 GFLOP or more: its FLOPs at the reference
    efficiency are its FLOPs but for the scores, which the fused attention kernel runs at its own efficiency (on
    Hopper 0.45 of the peak against the GEMMs' 0.803): their causal half, 4096·32·256 FLOPs a token in each of three
    passes of 32 layers, counts 0.803/0.45 times; on a system without a kernel figure (A100) nothing changes."""
    model = load_model("llama2-7b")
    values = {k: np.array([v]) for k, v in dict(d=8, t=1, p=1, cp=1, ep=1, etp=1, vp=1, b=1, m=4).items()}
    pricer = StepTimePricer(model, system="dgx_a100")
    (weighted, *_), _ = pricer.stage_parts(values, "none", 1)
    np.testing.assert_array_equal(weighted, pricer.stage_flops(values, "none"))
    pricer = StepTimePricer(model, system="dgx_h100")
    (weighted, *_), _ = pricer.stage_parts(values, "none", 1)
    gpu = hardware.load("dgx_h100").gpu
    scores = 4 * 4096 * 3 * 32 * 4096 * 32 * 256
    want = scores * (gpu.compute_efficiency / gpu.attention_efficiency - 1)
    assert_close(weighted - pricer.stage_flops(values, "none"), np.array([want]), rtol=1e-9, atol=0)


@pytest.mark.parametrize("variant", list(AttentionParams))
@pytest.mark.parametrize("moe", [False, True])
def test_the_gemms_by_size_cover_every_flop(variant, moe, monkeypatch):
    """With every ratio 1 the FLOPs at the reference efficiency are the FLOPs, term for term: no GEMM is left out
    or counted twice (the linear layers', the router's, the scores', the output layer's)."""
    monkeypatch.setattr(symbolic.compute, "gemm_efficiency_ratio", lambda size: sympy.Integer(1))
    monkeypatch.setattr(symbolic.compute, "score_gemm_ratio", lambda size: sympy.Integer(1))
    assert sympy.expand(stage_gemm_flops(variant, moe) - stage_flops(variant, moe)) == 0
    assert sympy.expand(stage_lowp_gemm_flops(variant, moe) - stage_lowp_flops(variant, moe)) == 0


@pytest.mark.parametrize("variant", list(AttentionParams))
def test_the_dense_layers_and_windows_by_size_cover_every_flop(variant, monkeypatch):
    """With every ratio 1 a MoE model's leading dense layers at the reference efficiency are their FLOPs, and the
    FLOPs a sliding window saves at it are the FLOPs it saves (the causal score GEMMs' less the windowed ones')."""
    monkeypatch.setattr(symbolic.compute, "gemm_efficiency_ratio", lambda size: sympy.Integer(1))
    monkeypatch.setattr(symbolic.compute, "score_gemm_ratio", lambda size: sympy.Integer(1))
    assert sympy.expand(dense_layers_of_moe(stage_gemm_flops(variant, False))
                        - dense_layers_of_moe(stage_flops(variant, False))) == 0
    assert sympy.expand(dense_layers_of_moe(stage_lowp_gemm_flops(variant, False))
                        - dense_layers_of_moe(stage_lowp_flops(variant, False))) == 0
    assert sympy.simplify(window_saved_gemm_flops(variant) - window_saved_flops(variant)) == 0


@pytest.mark.parametrize("name,system,precision", [("deepseek-v3", "dgx_b200", "mxfp8"),
                                                   ("gpt-oss-120b", "dgx_h100", "bf16")])
def test_a_chunks_flops_alone_are_every_stages_flops(name, system, precision):
    """``stage_parts(flops_only=True)`` (a search's chunk at its own micro-batch) gives the FLOPs and low-precision
    FLOPs of every stage ``stage_parts`` prices, the three of a model whose layers are priced apart (its leading
    dense layers added, its windows' savings taken off), and its FLOPs at the reference efficiency are no fewer than
    the FLOPs themselves (no ratio is over 1)."""
    model = load_model(name)
    pricer = StepTimePricer(model, system=system, precision=precision)
    rng = np.random.default_rng(3)
    values = {"d": np.full(6, 8), "t": rng.choice([1, 2, 4], 6), "p": np.array([1, 2, 3, 4, 6, 12]),
              "cp": np.ones(6, dtype=np.int64), "ep": np.full(6, 8), "etp": np.ones(6, dtype=np.int64),
              "vp": np.ones(6, dtype=np.int64), "b": rng.choice([1, 2], 6), "m": rng.choice([1, 4, 16], 6)}
    for recompute in ("none", "selective", "full"):
        full = pricer.stage_parts(values, recompute, 1)
        alone = pricer.stage_parts(values, recompute, 1, flops_only=True)
        assert len(full) == len(alone) == 3
        for (flops, lowp, moved, vector), (only, only_lowp, no_bytes, no_vector) in zip(full, alone):
            np.testing.assert_array_equal(only, flops)
            assert (lowp is None) == (only_lowp is None) == (precision == "bf16")
            if lowp is not None:
                np.testing.assert_array_equal(only_lowp, lowp)
            assert no_bytes is None and no_vector is None
        assert (np.maximum.reduce([flops for flops, *_ in full]) >= pricer.stage_flops(values, recompute)).all()


def test_a_moe_layers_token_permutation_by_hand(monkeypatch):
    """Qwen3-30B-A3B (h 2048, top-8) at b = 1, s = 4096, t = cp = 1, 8 micro-batches on one stage of 48 layers: the
    dispatcher's permutation reads each of the 4096 tokens once and writes it once per chosen expert (4096·2048·9
    elements), the un-permutation reads each chosen output and writes each token's sum (the same count): 2·4096·2048·9
    = 150,994,944 elements, 301,989,888 bytes at 2 bytes, in the forward pass and again in the backward pass:
    8 · 48 · 2 · 301,989,888 = 231,928,233,984 bytes a step, the HBM bytes the stage gains over a dispatcher that moved
    nothing (and none in a dense model, which has no router)."""
    model = load_model("qwen3-30b-a3b")
    values = {k: np.array([v]) for k, v in dict(d=16, t=1, p=1, cp=1, ep=8, etp=1, vp=1, b=1, m=8).items()}
    with_permutation = StepTimePricer(model, system="dgx_h100").stage_parts(values, "none", 1)[0][2]
    variant = AttentionParams.STANDARD
    form, dense = (symbolic.compute.stage_hbm_bytes(variant, moe) for moe in (True, False))
    monkeypatch.setattr(symbolic.compute, "permuted_elements", lambda: sympy.Integer(0))
    without = symbolic.compute.stage_hbm_bytes(variant, True)
    assert symbolic.compute.stage_hbm_bytes(variant, False) == dense
    fields = {**model.fields(), "s": 4096.0, "t": 1.0, "cp": 1.0, "ep": 8.0, "m": 8.0, "b": 1.0, "d": 16.0,
              "n_layers_stage": 48.0, "n_full_rec": 0.0, "n_sel_rec": 0.0, "n_output": 1.0, "sp": 1.0,
              "flash_attention": 1.0, "dropout": 0.0, "zero_level": 1.0, "etp": 1.0, "recompute_norm": 0.0,
              "recompute_moe_act": 0.0, "recompute_mla_up": 0.0}
    difference = form - without
    extra = float(difference.subs({x: fields[x.name] for x in difference.free_symbols}))
    assert extra == 8 * 48 * 2 * 301_989_888 == 231_928_233_984
    assert with_permutation[0] > extra
