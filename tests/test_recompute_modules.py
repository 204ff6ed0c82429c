"""Recompute of chosen modules (Megatron-Core's ``recompute_modules``: ``layernorm``, ``moe_act``).

Each number here is derived by hand from what the modules discard (docs/memory.md, "Recompute of chosen modules"):
a MoE layer's pre-MLP norm output (``h`` values a token), the experts' activation output (``hff_exp`` values a
routed copy of a token), MLA's input-norm output; and from what recomputing them costs: each norm's forward and the
activation function's again (their HBM bytes and vector FLOPs, as the compute family counts the first pass).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
import sympy

from codegen.configs import Layout, load_model
from codegen.pricing.memory import DEFAULT_SETTINGS, MemorySettings, stage_memory
from codegen.pricing.recompute import module_values, recompute_modules
from codegen.pricing.step_time import StepTimePricer
from codegen.runtime.inputs import InputError
from codegen.search import SearchSpec
from symbolic import memory as sym_memory
from symbolic.params import AttentionParams
from symbolic.vocabulary import RECOMPUTE_MODULES

# gpt-oss-120b's bundled shape (h 2880, 4 of 128 experts of width 2880, SwiGLU) on one B200 layout.
OSS = dict(d=64, t=1, p=1, cp=1, ep=8, etp=1, vp=1, b=4, m=5)
TOKENS = 4 * 4096  # b · s of one micro-batch on one rank (cp 1)


def _values(layout: dict[str, int]) -> dict[str, np.ndarray]:
    return {k: np.array([v]) for k, v in layout.items()}


def test_names_are_checked_and_kept_in_the_vocabularys_order():
    assert recompute_modules("f", "moe_act, layernorm") == ("layernorm", "moe_act")
    assert recompute_modules("f", ["moe_act", "moe_act"]) == ("moe_act",)
    assert recompute_modules("f", "none") == recompute_modules("f", "") == ()
    assert module_values(("moe_act",)) == {"recompute_norm": 0.0, "recompute_moe_act": 1.0, "recompute_mla_up": 0.0}
    assert ({symbol for symbol, _ in RECOMPUTE_MODULES.values()}
            == {"recompute_norm", "recompute_moe_act", "recompute_mla_up"})
    for bad, says in (("norm", "expected one of layernorm, moe_act, mla_up_proj, got 'norm'"),
                      ("core_attn", "--recompute selective"), ("mlp", "not modelled"), (3, "got 3")):
        with pytest.raises(InputError, match=f"^f: .*{says}"):
            recompute_modules("f", bad if bad == 3 else [bad])
    with pytest.raises(InputError, match="^recompute_modules: "):
        MemorySettings(dropout=0.0, flash_attention=1.0, bytes_logits=4.0, bytes_optimizer=12.0,
                       recompute_modules=("mlp",))


def test_what_each_module_drops_per_token_by_variant():
    """Per token of ``s·b/cp`` and layer, in bytes: the BF16 norm output of a MoE layer (``2h/sp``) and of MLA
    (``2h/sp``); the experts' activation output, ``2·k·cap·hff_exp/t_exp``; none in a standard dense layer (its
    norms are fused into its linear layers). In a low-precision run what the linear layers kept of them: the
    quantized copies (``bytes_lowp_input`` each) in place of the BF16 tensors they replaced."""
    values = dict(h=2880, sp=2, hff_exp=1536, t_exp=2, n_chosen_exp=8, cap_fact=1.25, bytes_compute=2,
                  bytes_lowp_input=1.03125, n_shared_exp=1, s=4096, b=2, cp=2, recompute_norm=1, recompute_moe_act=1,
                  recompute_mla_up=0, a=64, n_kv=64, qk_nope_head_dim=128, dh=128, dhr=64, dc_q=1536, dc_kv=512, t=2)

    def dropped(attention: AttentionParams, moe: bool, low: bool) -> float:
        expr = sympy.sympify(sym_memory.module_recompute_dropped(sym_memory.MemoryVariant(attention, moe, low)))
        return float(expr.subs({x: values[x.name] for x in expr.free_symbols})) / (4096 * 2 / 2)

    norm, act = 2 * 2880 / 2, 2 * 8 * 1.25 * 1536 / 2
    assert dropped(AttentionParams.STANDARD, False, False) == 0
    assert dropped(AttentionParams.STANDARD, True, False) == norm + act
    assert dropped(AttentionParams.MLA_Q_LATENT, False, False) == norm
    assert dropped(AttentionParams.MLA_Q_LATENT, True, False) == 2 * norm + act
    lowp = 1.03125
    # standard MoE: the router's BF16 input, the shared experts' FC1 copy; the expert FC2 inputs' copies
    assert dropped(AttentionParams.STANDARD, True, True) == pytest.approx(norm + lowp * 2880 / 2 + act / 2 * lowp)
    # MLA with a query latent: both down-projections' copies (their BF16 input was already replaced)
    assert dropped(AttentionParams.MLA_Q_LATENT, False, True) == pytest.approx(2 * lowp * 2880 / 2)
    assert dropped(AttentionParams.MLA_Q_DIRECT, False, True) == pytest.approx(lowp * 2880 / 2)


def test_memory_of_gpt_oss_drops_the_modules_outputs_on_every_layer():
    model = load_model("gpt-oss-120b")
    layout = Layout(**OSS)
    plain = stage_memory(model, layout, system="dgx_b200")["stages"][0]
    settings = dataclasses.replace(DEFAULT_SETTINGS, recompute_modules=("layernorm", "moe_act"))
    ours = stage_memory(model, layout, system="dgx_b200", settings=settings)["stages"][0]
    per_layer = TOKENS * (2 * 2880 + 2 * 4 * 2880)  # one micro-batch in flight on the single stage
    assert plain["activations"] - ours["activations"] == 36 * per_layer
    assert ours["recompute_workspace"] == per_layer and plain["recompute_workspace"] == 0
    assert ours["weights"] == plain["weights"] and ours["optimizer"] == plain["optimizer"]
    # a fully recomputed layer keeps its input alone: the modules change nothing there
    full = dataclasses.replace(layout, recompute=dataclasses.replace(layout.recompute, mode="full"))
    assert (stage_memory(model, full, system="dgx_b200", settings=settings)["stages"][0]["total"]
            == stage_memory(model, full, system="dgx_b200")["stages"][0]["total"])


def test_recomputing_the_modules_costs_their_forward_again():
    """HBM bytes: each pre-MLP norm reads and writes ``h`` BF16 values a token (4·h bytes), the SwiGLU reads its two
    inputs and writes its output for each of the 4 routed copies (3·2·hff_exp bytes); vector FLOPs: the norm's 9 an
    element, the activation's 8 and the gate's product 1 an element; 36 layers, 5 micro-batches."""
    model = load_model("gpt-oss-120b")
    plain = StepTimePricer(model, system="dgx_b200").stage_parts(_values(OSS), "none", 1)[0]
    ours = StepTimePricer(model, system="dgx_b200", recompute_modules="layernorm,moe_act").stage_parts(
        _values(OSS), "none", 1)[0]
    per_layer_hbm = TOKENS * (4 * 2880 + 3 * 2 * 4 * 2880)
    per_layer_vector = TOKENS * (9 * 2880 + 9 * 4 * 2880)
    assert ours[2][0] - plain[2][0] == pytest.approx(5 * 36 * per_layer_hbm, rel=1e-12)
    assert ours[3][0] - plain[3][0] == pytest.approx(5 * 36 * per_layer_vector, rel=1e-12)
    assert ours[0][0] == plain[0][0]  # no matrix multiply is recomputed
    # under full recompute the whole forward pass runs again already
    full = StepTimePricer(model, system="dgx_b200", recompute_modules="layernorm,moe_act").stage_parts(
        _values(OSS), "full", 1)[0]
    assert full[2][0] == StepTimePricer(model, system="dgx_b200").stage_parts(_values(OSS), "full", 1)[0][2][0]


def test_no_modules_prices_as_before_to_the_bit():
    model = load_model("qwen3-30b-a3b")
    values = _values(dict(d=16, t=1, p=1, cp=1, ep=8, etp=1, vp=1, b=1, m=8))
    a = StepTimePricer(model, system="dgx_h100").stage_parts(values, "none", 1)[0]
    b = StepTimePricer(model, system="dgx_h100", recompute_modules=()).stage_parts(values, "none", 1)[0]
    assert [x.tolist() for x in a if x is not None] == [x.tolist() for x in b if x is not None]


def test_the_search_spec_checks_and_keeps_the_modules():
    model = load_model("gpt-oss-120b")
    spec = SearchSpec(model, 64, 1280, "dgx_b200", recompute_modules="moe_act,layernorm")
    assert spec.recompute_modules == ("layernorm", "moe_act")
    with pytest.raises(InputError, match="^recompute_modules: "):
        SearchSpec(model, 64, 1280, "dgx_b200", recompute_modules=("shared_experts",))


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "codegen.cli", *args], capture_output=True, text=True)


def test_eval_and_search_take_the_modules_and_refuse_them_where_nothing_reads_them():
    layout = "d=64,t=1,p=1,ep=8,m=5,b=4"
    base = ("eval", "--model", "gpt-oss-120b", "--layout", layout, "--device", "dgx_b200")
    plain = json.loads(_cli(*base, "--cost", "step-time", "--json").stdout)
    ours = json.loads(_cli(*base, "--cost", "step-time", "--json", "--recompute-modules", "layernorm,moe_act").stdout)
    assert ours["recompute_modules"] == ["layernorm", "moe_act"] and plain["recompute_modules"] == []
    assert ours["compute_s"] > plain["compute_s"]
    assert plain["memory"][0]["total_bytes"] - ours["memory"][0]["total_bytes"] == 35 * TOKENS * 10 * 2880
    memory = json.loads(_cli(*base, "--memory", "--json", "--recompute-modules", "layernorm,moe_act").stdout)
    assert memory["memory"]["stages"][0]["total"] == ours["memory"][0]["total_bytes"]
    for args, says in (((*base, "--recompute-modules", "moe_act"), "--recompute-modules moe_act: a memory setting"),
                       ((*base, "--cost", "step-time", "--recompute-modules", "mlp"), "'mlp' is a Megatron-Core"),
                       (("search", "--model", "gpt-oss-120b", "--devices", "64", "--global-batch", "1280",
                         "--system", "dgx_b200", "--recompute-modules", "x"), "--recompute-modules: expected one of")):
        got = _cli(*args)
        assert got.returncode == 2 and says in got.stderr and "Traceback" not in got.stderr, got.stderr


# DeepSeek-V3's MLA (its model file): 128 heads, query latent 1536, key/value latent 512, q/k head 128 + rope 64,
# value head 128.
MLA = dict(a=128, n_kv=128, qk_nope_head_dim=128, dh=128, dhr=64, dc_q=1536, dc_kv=512, h=7168)


def _dropped_mla_up(variant: sym_memory.MemoryVariant, **given: float) -> float:
    values = {**MLA, "s": 4096, "b": 1, "cp": 1, "t": 1, "sp": 1, "bytes_compute": 2, "bytes_lowp_input": 1 + 1 / 32,
              "recompute_norm": 0, "recompute_moe_act": 0, "recompute_mla_up": 1, "n_chosen_exp": 8, "cap_fact": 1,
              "hff_exp": 2048, "t_exp": 1, "n_shared_exp": 1, **given}
    expr = sympy.sympify(sym_memory.module_recompute_dropped(variant))
    return float(expr.subs({x: values[x.name] for x in expr.free_symbols})) / 4096


def test_mla_up_proj_drops_q_k_and_v():
    """Per token and layer at t = 1: Q (128 heads × 192), K (128 × 192) and V (128 × 128) in BF16, 131,072 bytes. In an
    MXFP8 run the up-projections' inputs (the latents' norm outputs, 1536 + 512) are kept in BF16 by the checkpoint in
    place of their quantized copies (2 − 1.03125 bytes more each); without a query latent the input norm's output too
    (h = 7168) in place of the query projection's copy."""
    latent, direct = AttentionParams.MLA_Q_LATENT, AttentionParams.MLA_Q_DIRECT
    qkv = 2 * (128 * 192 + 128 * 192 + 128 * 128)
    assert qkv == 131_072
    for moe in (False, True):
        assert _dropped_mla_up(sym_memory.MemoryVariant(latent, moe)) == qkv
        assert _dropped_mla_up(sym_memory.MemoryVariant(latent, moe, True)) == pytest.approx(
            qkv - (2 - 1.03125) * (1536 + 512), rel=1e-12)
    assert _dropped_mla_up(sym_memory.MemoryVariant(direct, False, True)) == pytest.approx(
        qkv - (2 - 1.03125) * 512 - (2 - 1.03125) * 7168, rel=1e-12)
    # with the layernorm module too the input norm's output is freed: the query projection's copy goes alone
    both = _dropped_mla_up(sym_memory.MemoryVariant(direct, False, True), recompute_norm=1)
    alone_norm = _dropped_mla_up(sym_memory.MemoryVariant(direct, False, True), recompute_norm=1, recompute_mla_up=0)
    assert both - alone_norm == pytest.approx(qkv - (2 - 1.03125) * 512 + 1.03125 * 7168, rel=1e-12)
    assert _dropped_mla_up(sym_memory.MemoryVariant(AttentionParams.STANDARD, True)) == 0


def test_mla_up_proj_runs_the_up_projections_again():
    """DeepSeek-V3 at p = 16 (3 or 4 layers a stage): each layer not fully recomputed runs its query up-projection
    (1536 → 128 × 192) and key/value up-projection (512 → 128 × 256) forward again, 2 · (1536·24576 + 512·32768) =
    109,051,904 FLOPs a token, in the GEMM FLOPs and, in an FP8 run, the low-precision ones."""
    model = load_model("deepseek-v3")
    layout = dict(d=16, t=1, p=16, cp=1, ep=8, etp=1, vp=1, b=1, m=8)
    for precision in ("bf16", "mxfp8"):
        plain = StepTimePricer(model, system="dgx_b200", precision=precision)
        ours = StepTimePricer(model, system="dgx_b200", precision=precision, recompute_modules="mla_up_proj")
        real = plain.stage_flops(_values(layout), "none"), ours.stage_flops(_values(layout), "none")
        per_layer = 8 * 4096 * 109_051_904
        extra = real[1] - real[0]
        assert extra[0] % per_layer == 0 and extra[0] // per_layer in (3, 4)
        full = plain.stage_flops(_values(layout), "full"), ours.stage_flops(_values(layout), "full")
        assert full[0][0] == full[1][0]  # a fully recomputed layer runs them again anyway
        if precision == "mxfp8":
            low = [pricer.stage_parts(_values(layout), "none", 1)[0][1][0] for pricer in (plain, ours)]
            assert low[1] > low[0]
