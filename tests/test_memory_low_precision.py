"""Memory per rank of a low-precision run (FP8, FP8 current scaling, MXFP8, NVFP4): Transformer Engine's quantized
saved inputs and cached weight copies (docs/memory.md, "Low precision"), against numbers derived by hand from the
recipes' rules, and a BF16 run unchanged."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import generated
from codegen import cli
from codegen.configs import LayoutBatch, load_model, parse_layout
from codegen.pricing.memory import (DEFAULT_SETTINGS, MemoryPricer, MemorySettings, low_precision_values,
                                    stage_memory, stage_totals)
from codegen.runtime.inputs import InputError
from codegen.search import SearchSpec, search_context
from symbolic.vocabulary import PRECISIONS


def call(name, **values):
    """A generated function on the values it reads; the rest are ignored."""
    args = generated.FORMULAS[name]["arguments"]
    missing = [a for a in args if a not in values]
    assert not missing, f"{name}: test gives no value for {missing}"
    return float(getattr(generated, name)(**{a: values[a] for a in args}))


#: One small dense layer: h 1024, 8 heads of 128 (a·dh = 1024), 8 K/V heads, a 4h GeLU MLP (n_ffMM 2), 2048 tokens
#: per micro-batch, tensor and sequence parallel 2, flash attention, no dropout.
DENSE = dict(s=2048, b=1, cp=1, h=1024.0, a=8.0, n_kv=8.0, dh=128.0, hff=4096.0, n_ffMM=2.0, n_attMM=4.0,
             t=2.0, sp=2.0, bytes_compute=2.0, dropout=0.0, flash_attention=1.0, attn_output_gate=0.0,
             n_exp=1.0, n_shared_exp=0.0, qkv_bias=0.0, o_bias=0.0, mlp_bias=0.0, attn_extra_p=0.0,
             shard_p_os_non_exp_partial=16.0, shard_p_os_exp=1.0, shard_p_os_exp_partial=1.0, ep=1.0, etp=1.0,
             t_exp=1.0, hff_exp=4096.0, zero_level=1.0, shared_expert_gate=0.0)

# Per token of the rank, by hand from Transformer Engine's rule (each linear layer keeps one quantized copy of its
# input for the weight-gradient GEMM; the norms' inputs, Q, K, V and the attention output stay BF16):
#   QKV input (norm output, sharded by SP)   h/sp    = 512 elements, 2 bytes -> quantized
#   FC1 input (norm output)                  h/sp    = 512 elements, 2 bytes -> quantized
#   FC2 input                                hff/t   = 2048 elements, 2 bytes -> quantized
#   output projection input                  a·dh/t  = 512 elements: a quantized copy beside the BF16 attention
#                                            output under delayed scaling (fp8) only
# so 3072 elements move from 2 bytes to the recipe's bytes, plus 512 more quantized elements under fp8:
#   fp8     1 byte:           3584·1       − 3072·2 = −2560 bytes per token
#   fp8-cs  1 byte:           3072·1       − 3072·2 = −3072
#   mxfp8   1 + 1/32 (E8M0 per 32):  3072·1.03125 − 6144 = −2976
#   nvfp4   1/2 + 1/16 (E4M3 per 16): 3072·0.5625 − 6144 = −4416
# times 2048 tokens.
DENSE_CHANGE = {"fp8": -2560 * 2048, "fp8-cs": -3072 * 2048, "mxfp8": -2976 * 2048, "nvfp4": -4416 * 2048}

# Linear weights of the layer: QKV h·(a·dh + 2·n_kv·dh) = 1024·3072 = 3,145,728; O 1024·1024 = 1,048,576; FC1 and
# FC2 2·1024·4096 = 8,388,608: 12,582,912 parameters, 6,291,456 on each of the 2 TP ranks. The cached copies per
# parameter: FP8 on H100 a row-wise copy and its transpose (2 bytes), on B200 the row-wise one alone (1 byte; its
# GEMMs read any layout); MXFP8 a row- and a column-wise copy with their own scales, 2·(1 + 1/32) = 2.0625; NVFP4
# 2·(1/2 + 1/16) = 1.125.
DENSE_COPIES = {("fp8", "dgx_h100"): 2 * 6291456, ("fp8-cs", "dgx_h100"): 2 * 6291456,
                ("fp8", "dgx_b200"): 6291456, ("fp8-cs", "dgx_b200"): 6291456,
                ("mxfp8", "dgx_b200"): 2.0625 * 6291456, ("nvfp4", "dgx_b200"): 1.125 * 6291456}


@pytest.mark.parametrize("precision, system", sorted(DENSE_COPIES))
def test_dense_layer_by_hand(precision, system):
    values = dict(DENSE, **low_precision_values(precision, system))
    change = call("memory_standard_dense_lowp_layer_activations_change_bytes", **values)
    assert change == pytest.approx(DENSE_CHANGE[precision], rel=1e-12)
    kept = call("memory_standard_dense_lowp_layer_activations_bytes", **values)
    assert kept == pytest.approx(call("memory_standard_dense_layer_activations_bytes", **values) + change, rel=1e-12)
    copies = call("memory_standard_dense_lowp_layer_weight_copies_bytes", **values)
    assert copies == pytest.approx(DENSE_COPIES[(precision, system)], rel=1e-12)
    assert call("memory_standard_dense_lowp_layer_weight_copies_bytes", **dict(values, zero_level=3.0)) == 0.0


@pytest.mark.parametrize("precision, system, change", [
    # Quantized primary weights (Megatron-Core fp8_param_gather): the 6,291,456 BF16 linear parameters of the rank
    # (2 bytes each) are not kept, the quantized ones are: FP8 on H100 2 − 2 = 0 bytes per parameter, on B200
    # 1 − 2 = −1, MXFP8 2.0625 − 2 = 0.0625, NVFP4 1.125 − 2 = −0.875.
    ("fp8", "dgx_h100", 0.0), ("fp8", "dgx_b200", -6291456), ("mxfp8", "dgx_b200", 0.0625 * 6291456),
    ("nvfp4", "dgx_b200", -0.875 * 6291456)])
def test_quantized_primary_weights_replace_the_bf16_ones(precision, system, change):
    values = dict(DENSE, bytes_p=2.0, **low_precision_values(precision, system))
    name = "memory_standard_dense_lowp_layer_weights_change_bytes"
    assert call(name, **dict(values, lowp_primary_weights=1.0)) == pytest.approx(change, rel=1e-12, abs=1e-9)
    assert call(name, **dict(values, lowp_primary_weights=0.0)) == pytest.approx(
        DENSE_COPIES[(precision, system)], rel=1e-12)


def test_delayed_scaling_without_flash_attention_quantizes_the_projection_input_in_place():
    # Without a fused kernel no one else keeps the attention output: the projection's FP8 copy replaces its 2-byte
    # count, 512 elements per token from 2 bytes to 1: −512 bytes per token beside the −3072 of the other inputs.
    values = dict(DENSE, flash_attention=0.0, **low_precision_values("fp8", "dgx_h100"))
    change = call("memory_standard_dense_lowp_layer_activations_change_bytes", **values)
    assert change == pytest.approx((-3072 - 512) * 2048, rel=1e-12)


#: A MoE layer: standard attention (8 heads of 128, 2 K/V heads), 8 experts of hff_exp 512 with a gated MLP
#: (n_ffMM 3), top-2, one shared expert, tp = sp = 2, expert TP 2 (t_exp 2), ep 4.
MOE = dict(DENSE, n_kv=2.0, n_ffMM=3.0, n_exp=8.0, n_shared_exp=1.0, n_chosen_exp=2.0, cap_fact=1.0,
           hff_exp=512.0, t_exp=2.0, etp=2.0, ep=4.0)

# By hand, MXFP8 (1.03125 bytes per quantized element), per token:
#   QKV input h/sp = 512 -> quantized;   each of the 2 routed copies: dispatched FC1 input h/sp = 512 and FC2
#   input hff_exp/t_exp = 256 -> quantized (1536);   shared expert: FC2 input hff_exp/t = 256 -> quantized, and
#   its FC1 keeps its own quantized copy of the norm output (512) beside the router's BF16 one.
#   quantized 512 + 1536 + 256 + 512 = 2816 elements; replaced 512 + 1536 + 256 = 2304 BF16 elements:
#   2816·1.03125 − 2304·2 = 2904 − 4608 = −1704 bytes per token.
# Weights: attention Q 1024·1024, O 1024·1024, K and V 2·1024·256: 2,621,440, over t = 2: 1,310,720; routed experts
# 8·3·(512/2)·1024 = 6,291,456 (expert TP slice), over ep 4: 1,572,864; shared 3·512·1024 = 1,572,864 over t_exp 2:
# 786,432. 3,670,016 parameters · 2.0625 = 7,569,408 bytes.


def test_moe_layer_by_hand_mxfp8():
    values = dict(MOE, **low_precision_values("mxfp8", "dgx_b200"))
    assert call("memory_standard_moe_lowp_layer_activations_change_bytes", **values) == pytest.approx(
        -1704 * 2048, rel=1e-12)
    assert call("memory_standard_moe_lowp_layer_weight_copies_bytes", **values) == pytest.approx(7569408, rel=1e-12)


def test_recipe_values():
    # (bytes per saved element, bytes per weight parameter on H100 / B200, projection copy) as the recipes store them.
    assert low_precision_values("bf16", "dgx_h100") == {}
    assert low_precision_values("fp8", "dgx_h100") == {"bytes_lowp_input": 1.0, "bytes_lowp_weight": 2.0,
                                                       "lowp_proj_copy": 1.0}
    assert low_precision_values("fp8-cs", "dgx_b200") == {"bytes_lowp_input": 1.0, "bytes_lowp_weight": 1.0,
                                                          "lowp_proj_copy": 0.0}
    assert low_precision_values("mxfp8", "dgx_b200")["bytes_lowp_weight"] == 2.0625
    assert low_precision_values("nvfp4", "dgx_b200")["bytes_lowp_input"] == 0.5625
    assert PRECISIONS["bf16"].weight_copy_bytes(90) == 0.0


def test_a_low_precision_stage_adds_the_layers_changes_and_copies():
    """A stage of a real model: the low-precision total is the BF16 total plus, per body layer, the change of its
    kept activations times the micro-batches in flight and its weight copies; the change by hand from the model's
    widths (Llama 3 8B: h 4096, 32 heads of 128, 8 K/V heads, gated MLP of 14336)."""
    model = load_model("llama3-8b")
    layout = parse_layout("d=2,t=4,p=2,cp=1,m=8,b=1,sp=1", model.layout)
    bf16 = stage_memory(model, layout, system="dgx_h100")
    # (BF16 weights with Transformer Engine's cached copies beside them: Megatron-Core's fp8_param_gather = False)
    settings = dataclasses.replace(DEFAULT_SETTINGS, precision="fp8-cs", lowp_primary_weights=False)
    low = stage_memory(model, layout, system="dgx_h100", settings=settings)
    assert low["precision"] == "fp8-cs" and low["variant"] == bf16["variant"] + "_lowp"
    s, h, hff, t = model.s, 4096, 14336, 4  # sp = t: sequence parallel with TP
    tokens = s  # b = 1, cp = 1 (the layout given: sequence parallel on, no CP)
    change = tokens * (h / t + h / t + hff / t) * (1 - 2)  # QKV, FC1, FC2 inputs from 2 bytes to 1
    linear = h * (32 * 128 + 2 * 8 * 128) + 32 * 128 * h + 3 * h * hff  # QKV, O, gate/up/down
    copies = 2 * linear / t  # FP8 row-wise and transposed on H100
    for stage, (a, b) in enumerate(zip(bf16["stages"], low["stages"])):
        layers = 16  # 32 layers over 2 stages
        in_flight = min(2 - stage, 8)
        assert b["weight_copies"] == pytest.approx(layers * copies, rel=1e-12)
        assert b["weights"] == pytest.approx(a["weights"] + layers * copies, rel=1e-12)
        assert b["activations"] == pytest.approx(a["activations"] + in_flight * layers * change, rel=1e-12)
        assert (b["gradients"], b["optimizer"]) == (a["gradients"], a["optimizer"])
    assert stage_totals(model, layout, settings, system="dgx_h100").tolist() == [r["total"] for r in low["stages"]]
    # Quantized primary weights on H100: 2 bytes of FP8 data and transpose in place of 2 BF16 bytes per parameter.
    primary = stage_memory(model, layout, system="dgx_h100",
                           settings=dataclasses.replace(settings, lowp_primary_weights=True))
    assert [r["weights"] for r in primary["stages"]] == pytest.approx([r["weights"] for r in bf16["stages"]],
                                                                      rel=1e-12)
    assert primary["settings"]["lowp_primary_weights"] == 1.0


def test_bf16_is_the_default_and_unchanged():
    model = load_model("llama3-8b")
    layout = parse_layout("d=2,t=4,p=2,cp=1,m=8,b=1,sp=1", model.layout)
    default = stage_memory(model, layout, system="dgx_h100")
    given = stage_memory(model, layout, system="dgx_h100", settings=dataclasses.replace(DEFAULT_SETTINGS,
                                                                                          precision="bf16"))
    assert default == given and "precision" not in default and "weight_copies" not in default["stages"][0]


def test_the_pricer_agrees_with_stage_memory():
    model = load_model("qwen3-30b-a3b")
    settings = dataclasses.replace(DEFAULT_SETTINGS, precision="mxfp8")
    layouts = [parse_layout(text, model.layout) for text in ("d=8,t=1,p=1,ep=8,m=4,b=1", "d=4,t=2,p=2,ep=8,m=8,b=1")]
    prices = MemoryPricer(model, system="dgx_b200", settings=settings, backend="numpy").price_batch(
        LayoutBatch.from_layouts(layouts))
    for i, layout in enumerate(layouts):
        stages = stage_memory(model, layout, system="dgx_b200", settings=settings)["stages"]
        assert prices.peak_total[i] == max(r["total"] for r in stages)


def test_bad_precision_is_one_error():
    with pytest.raises(InputError, match="^precision: one of bf16, fp8, fp8-cs, mxfp8, nvfp4, got 'FP8'"):
        MemorySettings(dropout=0.0, flash_attention=1.0, bytes_logits=4.0, bytes_optimizer=12.0, precision="FP8")
    with pytest.raises(InputError, match="^--precision nvfp4: the .* of dgx_h100 .* cannot run it"):
        low_precision_values("nvfp4", "dgx_h100")
    model = load_model("llama3-8b")
    low = dataclasses.replace(DEFAULT_SETTINGS, precision="fp8")
    with pytest.raises(InputError, match="^system: precision fp8 needs the system"):
        stage_totals(model, model.layout, low)
    with pytest.raises(InputError, match="^--precision mxfp8: "):
        MemoryPricer(model, system="dgx_h100", settings=dataclasses.replace(low, precision="mxfp8"))
    with pytest.raises(InputError, match="^lowp_primary_weights: "):
        dataclasses.replace(low, lowp_primary_weights="yes")


def test_eval_memory_precision(capsys):
    args = ["eval", "--model", "llama3-8b", "--layout", "d=2,t=4,p=2,cp=1,m=8,b=1,sp=1", "--device", "dgx_h100", "--memory"]
    assert cli.main([*args, "--json"]) == 0
    bf16 = json.loads(capsys.readouterr().out)["memory"]
    assert cli.main([*args, "--json", "--precision", "fp8-cs", "--bf16-weights"]) == 0
    low = json.loads(capsys.readouterr().out)["memory"]
    assert low["precision"] == "fp8-cs" and low["settings"]["bytes_lowp_weight"] == 2.0
    assert low["settings"]["lowp_primary_weights"] == 0.0
    assert low["stages"][0]["activations"] < bf16["stages"][0]["activations"]
    assert cli.main([*args, "--precision", "fp8"]) == 0
    assert "precision fp8: linear layers' saved inputs 1 bytes per element" in capsys.readouterr().out
    assert cli.main([*args, "--json", "--precision", "fp8-cs"]) == 0  # the recipes' quantized primary weights
    primary = json.loads(capsys.readouterr().out)["memory"]
    assert primary["settings"]["lowp_primary_weights"] == 1.0
    assert primary["stages"][0]["weights"] < low["stages"][0]["weights"]
    for extra, fragment in ((["--precision", "nvfp4"], "--precision nvfp4: the"),
                            (["--precision", "fp9"], "--precision: invalid choice"),
                            (["--bf16-weights"], "--bf16-weights: a setting of a low-precision run")):
        assert cli.main([*args, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert fragment in err and len(err.splitlines()) == 1 and "Traceback" not in err
    no_memory = [a for a in args if a != "--memory"]
    assert cli.main([*no_memory, "--precision", "fp8"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--precision fp8: the precision of --cost step-time, --cost time, --convention consistent" in err
    assert len(err.splitlines()) == 1


def test_eval_step_time_memory_follows_the_precision(capsys):
    args = ["eval", "--model", "llama3-8b", "--layout", "d=2,t=4,p=2,cp=1,m=8,b=1,sp=1", "--device", "dgx_h100", "--cost",
            "step-time", "--json", "--precision", "fp8"]
    assert cli.main(args) == 0
    got = json.loads(capsys.readouterr().out)
    model = load_model("llama3-8b")
    layout = parse_layout("d=2,t=4,p=2,cp=1,m=8,b=1,sp=1", model.layout)
    want = stage_memory(model, layout, system="dgx_h100", settings=dataclasses.replace(DEFAULT_SETTINGS,
                                                                                         precision="fp8"))
    assert [r["total_bytes"] for r in got["memory"]] == [r["total"] for r in want["stages"]]


def test_search_memory_filter_reads_the_precision(capsys):
    """The search's memory filter prices each layout in the spec's precision, as stage_memory does."""
    model = load_model("llama3-8b")
    context = search_context(SearchSpec(model, 16, 64, "dgx_h100", precision="fp8"))
    assert context.memory.settings.precision == "fp8" and context.memory.key.endswith("_lowp")
    settings = dataclasses.replace(DEFAULT_SETTINGS, precision="fp8")
    checked = 0
    for chunk in context.space.chunks(chunk=5000):
        got = context.memory.price_batch(chunk.batch, validated=True)
        for i in np.linspace(0, len(chunk) - 1, 3).astype(int):
            want = stage_memory(model, chunk.batch.layout(int(i)), system="dgx_h100", settings=settings)
            assert got.peak_total[i] == max(s["total"] for s in want["stages"])
            checked += 1
    assert checked >= 3
    args = ["search", "--model", "llama3-8b", "--devices", "16", "--system", "dgx_h100", "--global-batch", "64",
            "--top", "2", "--no-progress", "--json"]
    assert cli.main([*args, "--precision", "fp8"]) == 0
    assert json.loads(capsys.readouterr().out)["top"]
    assert cli.main([*args, "--precision", "mxfp8"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--precision mxfp8" in err and len(err.splitlines()) == 1 and "Traceback" not in err
