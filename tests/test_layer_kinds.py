"""The published per-layer structure the step time prices: leading dense layers of a model with experts, multi-token
prediction heads, sliding-window attention, MLA — each against an independent count by hand."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hardware

from codegen.configs import ModelConfigError, stage_layer_kinds
from codegen.configs.models import load_model
from codegen.pricing.step_time import StepTimePricer, stage_layer_counts
from codegen.pricing.time import TimePricer
from codegen.configs import LayoutBatch
from codegen.pricing.engine import term_arguments, term_function

ROOT = Path(__file__).resolve().parents[1]
NEMO = ROOT / "codegen" / "validation" / "data" / "nemo_step_times.csv"
SYSTEM = "dgx_h100"


def _values(**keys):
    return {k: np.array([v], dtype=np.int64) for k, v in keys.items()}


# ----------------------------------------------------------------------------- which layers each stage holds


def test_deepseek_v3_dense_layers_sit_in_the_first_stage_and_the_mtp_head_in_the_last():
    model = load_model("deepseek-v3")  # 61 layers + 1 MTP, first_k_dense_replace 3
    kinds = stage_layer_kinds(model, 16, 1)
    assert kinds["n_dense"].tolist() == [3.0] + [0.0] * 15
    assert kinds["n_mtp_heads"].tolist() == [0.0] * 15 + [1.0]
    assert not kinds["n_window"].any()
    # Two chunks per stage of 62 layers over 32 slots: slot 0 (stage 0, chunk 0) holds layers 0 and 1, slot 1
    # (stage 1, chunk 0) layers 2 and 3: two dense layers in stage 0 and one in stage 1.
    assert stage_layer_kinds(model, 16, 2)["n_dense"].tolist() == [2.0, 1.0] + [0.0] * 14
    assert stage_layer_kinds(model, 1, 1)["n_dense"].tolist() == [3.0]


def test_gpt_oss_windows_alternate_from_the_first_layer():
    model = load_model("gpt-oss-120b")
    assert model.sliding_window == 128
    assert model.window_layers == tuple(range(0, 36, 2))
    # 9 layers per stage: layers 0-8 hold 0, 2, 4, 6, 8; 9-17 hold 10, 12, 14, 16; and so on.
    assert stage_layer_kinds(model, 4, 1)["n_window"].tolist() == [5.0, 4.0, 5.0, 4.0]


def test_the_window_keys_are_read_as_hugging_face_states_them(tmp_path):
    base = (ROOT / "codegen" / "configs" / "bundled" / "gpt-oss-120b.yaml").read_text()
    bad = base.replace("      - full_attention\n", "      - local_attention\n", 1)
    path = tmp_path / "bad.yaml"
    path.write_text(bad)
    with pytest.raises(ModelConfigError, match=r"layer_types\[1\]: one of sliding_attention, full_attention, got "
                                               r"'local_attention'"):
        load_model(str(path))
    # No layer_types: every layer has the window (Mistral's meaning); use_sliding_window false: none (Qwen's).
    start, end = base.index("    layer_types:"), base.index("data:")
    every = base[:start] + "\n" + base[end:]
    path.write_text(every)
    assert load_model(str(path)).window_layers == tuple(range(36))
    path.write_text(every.replace("    sliding_window: 128\n", "    sliding_window: 128\n    use_sliding_window: false\n"))
    assert load_model(str(path)).window_layers == ()


def test_a_bad_layer_types_key_is_one_line_on_the_command_line(tmp_path):
    base = (ROOT / "codegen" / "configs" / "bundled" / "gpt-oss-120b.yaml").read_text()
    path = tmp_path / "short.yaml"
    path.write_text(base.replace("      - sliding_attention\n", "", 1))
    run = subprocess.run([sys.executable, "-m", "codegen.cli", "eval", "--model", str(path), "--device", SYSTEM,
                          "--cost", "step-time"], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "layer_types" in lines[0] and "36 entries" in lines[0]
    assert "Traceback" not in run.stderr


# ----------------------------------------------------------------------------- FLOPs by hand


def _mla_projection_params(h, a, q_lora, kv_lora, rope, nope, v_head):
    """MLA's weights a token passes through (DeepSeek-V2, arXiv:2405.04434, §2.1.2; DeepSeek-V3 §2.1.1): query
    down- and up-projection (nope + rope per head), the joint key/value down-projection and the decoupled rotary
    key, the key (nope) and value up-projections, the output; the two latent RMSNorm gains, which the project
    counts among the layer's parameters."""
    query = h * q_lora + q_lora * a * (nope + rope)
    key_value = h * (kv_lora + rope) + kv_lora * a * (nope + v_head)
    return query + key_value + a * v_head * h + q_lora + kv_lora


def test_mla_forward_flops_per_token_by_hand():
    model = load_model("deepseek-v3")
    h, a, s = 7168, 128, 4096
    projections = _mla_projection_params(h, a, 1536, 512, 64, 128, 128)
    scores = 2 * s * a * ((128 + 64) + 128)  # QKᵀ over d_qk = nope + rope, A·V over v_head, the whole sequence
    experts = (8 + 1) * 3 * 2048 * h  # 8 routed and 1 shared SwiGLU experts
    router = 256 * h
    want = 2 * (projections + experts + router) + scores
    fields = {**model.fields(), "s": float(s)}
    name = "compute_mla_q_latent_moe_layer_forward_flop"
    got = term_function(name)(**{k: fields[k] for k in term_arguments(name)})
    assert got == pytest.approx(want, rel=1e-12)


def _attention_ratio() -> float:
    """The fused attention kernel's efficiency over the reference GEMM efficiency on SYSTEM (the catalog's)."""
    gpu = hardware.load(SYSTEM).gpu
    return gpu.attention_efficiency / gpu.compute_efficiency


def test_a_first_stage_with_dense_layers_by_hand():
    """DeepSeek-V3 at p = 16: stage 0 holds 3 dense layers (a SwiGLU FFN of width 18432) and 1 MoE layer; its FLOPs
    are the sum of the two kinds, each counted by hand (three passes, causal scores halved by the fused kernel).
    At the reference GEMM efficiency (docs/search.md, "Compute") every GEMM but the router is 16 GFLOP or more; the
    router's (4096 tokens × 7168 × 256: 15 GFLOP) runs at 2/3 of it."""
    model = load_model("deepseek-v3")
    h, a, s, b, m, t = 7168, 128, model.layout.s or model.s, 1, 8, 1
    projections = _mla_projection_params(h, a, 1536, 512, 64, 128, 128)
    causal_scores = 2 * s * a * (192 + 128) / 2
    dense_layer = 2 * (projections + 3 * 18432 * h) + causal_scores
    moe_layer = 2 * (projections + 9 * 3 * 2048 * h + 256 * h) + causal_scores
    want = m * b * s / t * 3 * (3 * dense_layer + 1 * moe_layer)
    router = 2 * 256 * h
    assert b * s / t * router < 16e9
    pricer = StepTimePricer(model, system=SYSTEM)
    values = _values(p=16, vp=1, t=t, d=32, cp=1, ep=32, etp=1, b=b, m=m)
    first = pricer.stage_parts(values, "none", 1)[0]
    # the scores' causal half at the fused attention kernel's efficiency over the reference (0.45 / 0.803 on Hopper)
    scores = m * b * s / t * 3 * 4 * causal_scores * (1 / _attention_ratio() - 1)
    assert first[0][0] == pytest.approx(want + m * b * s / t * 3 * router * (3 / 2 - 1) + scores, rel=1e-12)
    flops_only = pricer.stage_parts(values, "none", 1, flops_only=True)[0]
    assert flops_only[0][0] == first[0][0]
    assert pricer.stage_flops(values, "none")[0] >= want  # the FLOPs themselves: this stage's or a heavier one's
    # As the original walks it (every layer a MoE layer) the stage would count 4 MoE layers.
    assert want < m * b * s * 3 * 4 * moe_layer


def test_the_mtp_head_adds_the_output_layer_again_in_the_last_stage():
    """DeepSeek-V3's MTP module computes its logits with the main model's output head: the last stage's FLOPs are
    its layers' and two output layers' (three passes of 2·h·V per token each), at the reference GEMM efficiency (the
    heads' GEMMs, 4096 tokens × 7168 × 129280, keep it)."""
    model = load_model("deepseek-v3")
    s, m = model.layout.s or model.s, 8
    values = _values(p=16, vp=1, t=1, d=32, cp=1, ep=32, etp=1, b=1, m=m)
    last = StepTimePricer(model, system=SYSTEM).stage_parts(values, "none", 1)[-1][0][0]
    layers = float(stage_layer_counts(model, np.array([16]), np.array([1]))[1][0])
    name = "compute_mla_q_latent_moe_stage_gemm_flop"
    fields = {**model.fields(), "s": float(s), "flash_attention": 1.0, "t": 1.0, "cp": 1.0, "ep": 32.0, "m": float(m),
              "b": 1.0, "n_layers_stage": layers, "n_full_rec": 0.0, "n_sel_rec": 0.0, "n_output": 0.0,
              "attention_ratio": _attention_ratio(), "recompute_mla_up": 0.0}
    body = term_function(name)(**{k: fields[k] for k in term_arguments(name)})
    heads = 2 * (2 * 7168 * model.v) * 3 * m * s
    assert last == pytest.approx(body + heads, rel=1e-12)


def test_a_windowed_layer_by_hand():
    """gpt-oss at p = 1: 18 of its 36 layers attend to a 128-token window. A windowed layer's scores are the band of
    the s × s causal triangle within w of the diagonal, area s·w − w²/2 (the causal triangle's s²/2 less the
    triangle of side s − w beyond the window), in place of s²/2; each score costs 2·(d_qk + d_v) FLOPs per head.
    At the reference GEMM efficiency (docs/search.md, "Compute") the scores run at the fused attention kernel's
    efficiency over it (0.45 / 0.803 on Hopper), below the 2/3 a windowed layer's score GEMMs (QKᵀ and A·V, each half
    the band's FLOPs of a micro-batch: 4.2 GFLOP) would run at as GEMMs, and the 1 of the causal ones (69 GFLOP)."""
    model = load_model("gpt-oss-120b")
    s, a, d, w, m, b = 4096, 64, 64, 128, 2, 1
    values = _values(p=1, vp=1, t=1, d=64, cp=1, ep=8, etp=1, b=b, m=m)
    windowed_pricer = StepTimePricer(model, system=SYSTEM)
    full_pricer = StepTimePricer(dataclasses.replace(model, sliding_window=0, window_layers=()), system=SYSTEM)
    windowed = windowed_pricer.stage_parts(values, "none", 1)[0][0][0]
    full = full_pricer.stage_parts(values, "none", 1)[0][0][0]
    per_score = 2 * a * (d + d)
    band, causal = s * w - w * w / 2, s * s / 2
    assert 1e9 <= b * per_score * band / 2 < 16e9 <= b * per_score * causal / 2
    want = m * b * 3 * 18 * per_score * (causal - band)  # per sequence: the scores the window leaves out
    real = full_pricer.stage_flops(values, "none") - windowed_pricer.stage_flops(values, "none")
    assert real[0] == pytest.approx(want, rel=1e-9)
    ratio = _attention_ratio()
    assert ratio < 2 / 3
    assert full - windowed == pytest.approx(m * b * 3 * 18 * per_score * (causal - band) / ratio, rel=1e-9)
    # Without a fused attention kernel the whole matrix is computed and masked: nothing is saved.
    plain = StepTimePricer(model, system=SYSTEM, flash_attention=0.0).stage_parts(values, "none", 1)[0][0][0]
    plain_full = StepTimePricer(dataclasses.replace(model, sliding_window=0, window_layers=()), system=SYSTEM,
                                flash_attention=0.0).stage_parts(values, "none", 1)[0][0][0]
    assert plain == plain_full


def test_the_dense_layers_carry_no_expert_all_to_all():
    model = load_model("deepseek-v3")
    batch = LayoutBatch.from_arrays(model.layout, p=16, vp=1, t=1, d=32, cp=1, ep=32, etp=1, b=1, m=8)
    got = TimePricer(model, system=SYSTEM).price_batch(batch, per_stage=True)
    ep = sum(v for k, v in got.stages["time_s"].items() if k.startswith("ep."))[0]
    # Stage 0: 1 MoE layer of its 4; stage 1: 4 of 4 (the expert items are per MoE layer).
    assert ep[0] == pytest.approx(ep[1] / 4, rel=1e-12)


# ----------------------------------------------------------------------------- the NeMo rows


def test_every_deepseek_and_gpt_oss_row_of_the_nemo_table_is_priced():
    run = subprocess.run([sys.executable, "-m", "codegen.cli", "validate", "step-time", "--data", str(NEMO)],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    rows = json.loads(run.stdout.strip().splitlines()[-1])["rows"]
    mine = [r for r in rows if r["model"].startswith(("DeepSeek", "GPT OSS"))]
    assert len(mine) == 9
    for r in mine:
        assert r["rel_err"] is not None and np.isfinite(r["predicted_s"]) and r["predicted_s"] > 0, r
        assert r["compute_s"] > 0 and r["comm_s"] > 0
