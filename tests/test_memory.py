"""Memory per rank: ZeRO Table 1, Korthikanti Table 2, properties, the Megatron rows, the CLI hook."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import generated
from codegen import cli
from codegen.validation import memory as validation
from conftest import ROOT, assert_close

#: The tables the product ships and reads (package data), not a copy of the tests' own.
DATA = validation.DATA_DIR
SHARED = Path(__file__).resolve().parents[2] / "shared" / "measurements"
COPIES = ("zero_table1.csv", "megatron_memory_figure1.csv", "megatron_iteration_times.csv")


def call(name, **values):
    """A generated function on the values it reads; the rest are ignored."""
    args = generated.FORMULAS[name]["arguments"]
    missing = [a for a in args if a not in values]
    assert not missing, f"{name}: test gives no value for {missing}"
    return getattr(generated, name)(**{a: values[a] for a in args})


@pytest.mark.parametrize("name", COPIES)
def test_shipped_copies_equal_the_shared_measurements(name):
    if not SHARED.is_dir():
        pytest.skip("no shared measurements beside this clone")
    assert (DATA / name).read_bytes() == (SHARED / name).read_bytes(), f"{DATA / name} differs from the source"


# ---------------------------------------------------------------- ZeRO Table 1


def test_zero_table1_reproduced_to_its_printing():
    rows = validation.zero_table1_rows()
    published = [r for r in rows if r["matches"] is not None]
    assert len(rows) == 72 and len(published) == 54
    wrong = [(r["model"], r["dp_degree"], r["stage"], r["printed"], r["per_device_GB_published"])
             for r in published if not r["matches"]]
    assert not wrong
    for r in rows:  # the exact values, against the table's formula column (4 decimals)
        assert_close(r["per_device_GB"], r["per_device_GB_formula"], rtol=0.0, atol=5e-5 + 1e-9, msg=str(r))


def test_zero_table1_closed_forms():
    psi, k = 7.5e9, 12.0
    for n_d in (1, 4, 64, 1024):
        got = [float(call("memory_part_model_states_bytes", part_size=psi, part_computed=1, part_sharded=n_d,
                          zero_level=z, bytes_p=2, bytes_grad=2, bytes_optimizer=k)) for z in range(4)]
        want = [(2 + 2 + k) * psi, 4 * psi + k * psi / n_d, 2 * psi + (2 + k) * psi / n_d, (2 + 2 + k) * psi / n_d]
        assert_close(got, want)


def test_printing_rounds_half_up_and_truncates():
    assert validation.printed(41.25, "41.3", "rounded") == "41.3"
    assert validation.printed(0.1172, "0.12", "rounded") == "0.12"
    assert validation.printed(513.5, "513", "truncated") == "513"
    assert validation.printed(15.625, "15.6", "truncated") == "15.6"


# ---------------------------------------------------------------- Korthikanti Table 2

# The paper's model configurations (Korthikanti et al. 2022, Table 3): heads, hidden, micro-batch; s = 2048, t = 8.
PAPER_MODELS = {"22B": (64, 6144, 4), "175B": (96, 12288, 1), "530B": (128, 20480, 1), "1T": (160, 25600, 1)}


def gpt_layer(a, h, b, t, sp, s=2048):
    return dict(s=s, b=b, h=h, a=a, n_kv=a, dh=h / a, hff=4 * h, n_ffMM=2, t=t, sp=sp, cp=1, bytes_compute=2,
                dropout=1, flash_attention=0)


def table2(a, h, b, t, s=2048):
    """Table 2 of the paper, bytes per layer, written from the paper."""
    sbh = s * b * h
    return {
        "none": sbh * (34 + 5 * a * s / h),
        "tp": sbh * (10 + 24 / t + 5 * a * s / (h * t)),
        "tp_sp": sbh * (34 / t + 5 * a * s / (h * t)),
        "tp_selective": sbh * (10 + 24 / t),
        "tp_sp_selective": sbh * (34 / t),
        "full": 2 * sbh,
    }


@pytest.mark.parametrize("model", PAPER_MODELS)
def test_korthikanti_table2(model):
    a, h, b = PAPER_MODELS[model]
    t = 8
    want = table2(a, h, b, t)
    keep = "memory_standard_dense_layer_activations_bytes"
    sel = "memory_standard_dense_layer_selective_activations_bytes"
    assert_close(call(keep, **gpt_layer(a, h, b, 1, 1)), table2(a, h, b, 1)["none"])
    assert_close(call(keep, **gpt_layer(a, h, b, t, 1)), want["tp"])
    assert_close(call(keep, **gpt_layer(a, h, b, t, t)), want["tp_sp"])
    assert_close(call(sel, **gpt_layer(a, h, b, t, 1)), want["tp_selective"])
    assert_close(call(sel, **gpt_layer(a, h, b, t, t)), want["tp_sp_selective"])
    assert_close(call("memory_layer_full_recompute_activations_bytes", **gpt_layer(a, h, b, t, 1)), want["full"])


def test_flash_attention_keeps_only_the_log_sum_exp():
    a, h, b, t, s = 64, 6144, 4, 8, 2048
    values = gpt_layer(a, h, b, t, t)
    kept = call("memory_standard_dense_layer_activations_bytes", **dict(values, flash_attention=1))
    selective = call("memory_standard_dense_layer_selective_activations_bytes", **values)
    assert_close(kept - selective, s * b * a / t * 4)


def test_first_stage_in_flight_micro_batches():
    fn = generated.memory_pp_in_flight_microbatches_count
    p = np.array([1, 2, 4, 8, 8, 16])
    assert fn(p=p, m=64, vp=1, pp_rank=0).tolist() == p.tolist()  # 1F1B: the first stage holds p
    assert fn(p=8, m=3, vp=1, pp_rank=0) == 3  # fewer micro-batches than stages
    assert fn(p=8, m=64, vp=1, pp_rank=np.arange(8)).tolist() == list(range(8, 0, -1))
    for p_, vp in ((8, 3), (4, 2), (16, 4)):
        assert_close(fn(p=p_, m=1000, vp=vp, pp_rank=0), p_ * (1 + (p_ - 1) / (p_ * vp)))


# ---------------------------------------------------------------- properties


def moe_values(seed, n=300):
    """Random valid layouts of a MoE layer with MLA attention, and ZeRO stages 0-3."""
    rng = np.random.default_rng(seed)
    pick = lambda *xs: rng.choice(np.asarray(xs, dtype=float), n)  # noqa: E731
    t, cp, d = pick(1, 2, 4, 8), pick(1, 2, 4), pick(1, 2, 8, 32)
    return dict(
        s=pick(2048, 4096), b=pick(1, 2), h=7168.0, a=128.0, n_kv=128.0, dh=128.0, dhr=64.0, dc_kv=512.0,
        dc_q=1536.0, qk_nope_head_dim=128.0, hff=18432.0, hff_exp=2048.0, n_exp=256.0, n_shared_exp=1.0,
        n_chosen_exp=8.0, cap_fact=pick(1.0, 1.25), n_ffMM=3.0, n_attMM=4.0, n_qknorm=0.0, layer_norms=2.0,
        norm_bias=0.0, qkv_bias=0.0, o_bias=0.0, mlp_bias=0.0, attn_output_gate=0.0, shared_expert_gate=0.0,
        attn_extra_p=0.0, t=t, cp=cp, sp=np.where(rng.random(n) < 0.5, t, 1.0), ep=pick(1, 8, 32), etp=pick(0, 1, 2),
        t_exp=pick(1, 2, 4), d=d, shard_p_os_non_exp_partial=d * t * cp, shard_p_os_exp=pick(1, 4, 16, 64),
        shard_p_os_exp_partial=pick(1, 2, 8), zero_level=rng.integers(0, 4, n).astype(float), bytes_p=2.0,
        bytes_grad=4.0, bytes_optimizer=12.0, bytes_compute=2.0, dropout=pick(0, 1), flash_attention=pick(0, 1),
        recompute_norm=pick(0, 1), recompute_moe_act=pick(0, 1), recompute_mla_up=pick(0, 1),
    )


STATES = [f"memory_mla_q_latent_moe_layer_{x}_bytes" for x in ("weights", "gradients", "optimizer")]
ACTIVATIONS = ["memory_mla_q_latent_moe_layer_activations_bytes",
               "memory_mla_q_latent_moe_layer_selective_activations_bytes",
               "memory_layer_full_recompute_activations_bytes"]
DEGREES = ("t", "cp", "sp", "ep", "etp", "t_exp", "shard_p_os_non_exp_partial", "shard_p_os_exp",
           "shard_p_os_exp_partial")


def test_experts_hold_their_ranks_share_of_the_tokens_hidden_activations():
    """A routed expert's hidden activations per token of s·b/cp are split max(sp, t_exp) ways: under sequence
    parallelism a rank's experts compute on the tokens of its own shard whether they run with expert TP (the ETP
    group gathers its ranks' tokens and splits the hidden width) or without (Megatron's etp = 1 beside t > 1); without
    sequence parallelism only expert TP splits them. Derived from the widths: top-8, capacity 1.25, SwiGLU (3), 2048
    wide, 2 bytes, 4096 tokens."""
    values = {k: (v[0] if isinstance(v, np.ndarray) else v) for k, v in moe_values(seed=1, n=1).items()}
    values.update(s=4096.0, b=1.0, cp=1.0, t=2.0, cap_fact=1.25, flash_attention=1.0, dropout=0.0, recompute_norm=0.0,
                  recompute_moe_act=0.0, recompute_mla_up=0.0)
    name = "memory_mla_q_latent_moe_layer_activations_bytes"
    at = lambda sp, t_exp: float(call(name, **{**values, "sp": sp, "t_exp": t_exp}))  # noqa: E731
    hidden = 4096 * 2 * 8 * 1.25 * 3 * 2048
    assert at(sp=2.0, t_exp=1.0) == at(sp=2.0, t_exp=2.0)
    assert at(sp=1.0, t_exp=1.0) - at(sp=1.0, t_exp=2.0) == pytest.approx(hidden / 2, rel=1e-12)
    assert at(sp=2.0, t_exp=4.0) - at(sp=2.0, t_exp=8.0) == pytest.approx(hidden / 8, rel=1e-12)


def test_a_routed_copy_keeps_its_dispatched_input_and_hidden_activations_not_its_output():
    """Per routed copy of a token a MoE layer keeps FC1's input (h) and the expert's gate, up and activation outputs
    (3 · hff_exp): Megatron-Core weighs the activation by the routing probability inside the expert and un-permutes
    by a sum that keeps nothing (experts.py weighted_bias_swiglu_impl, moe_utils.py unpermute), so one more chosen
    expert adds 2 bytes · capacity · (h + 3 · hff_exp) per token and no expert output for the combine."""
    values = {k: (v[0] if isinstance(v, np.ndarray) else v) for k, v in moe_values(seed=2, n=1).items()}
    values.update(s=4096.0, b=1.0, cp=1.0, t=1.0, sp=1.0, t_exp=1.0, cap_fact=1.25, flash_attention=1.0, dropout=0.0,
                  recompute_norm=0.0, recompute_moe_act=0.0, recompute_mla_up=0.0)
    name = "memory_mla_q_latent_moe_layer_activations_bytes"
    at = lambda k: float(call(name, **{**values, "n_chosen_exp": k}))  # noqa: E731
    assert at(9.0) - at(8.0) == pytest.approx(4096 * 2 * 1.25 * (7168 + 3 * 2048), rel=1e-12)


@pytest.mark.parametrize("name", STATES + ACTIVATIONS)
def test_memory_is_non_increasing_in_each_sharding_degree(name):
    values = moe_values(seed=len(name))
    base = call(name, **values)
    read = [x for x in DEGREES if x in generated.FORMULAS[name]["arguments"]]
    assert read, name
    for degree in read:
        doubled = call(name, **dict(values, **{degree: values[degree] * 2}))
        assert np.all(doubled <= base * (1 + 1e-12)), f"{name} grows with {degree}"


def test_zero3_model_states_are_inversely_proportional_to_d():
    values = dict(gpt_layer(96, 12288, 1, 8, 8), v=51200, n_attMM=4, n_qknorm=0, layer_norms=2, norm_bias=1,
                  qkv_bias=1, o_bias=1, mlp_bias=1, attn_output_gate=0, attn_extra_p=0, n_exp=1, n_shared_exp=0,
                  bytes_p=2, bytes_grad=4, bytes_optimizer=12, zero_level=3)
    d = np.array([1.0, 2, 4, 16, 64, 512])
    total = sum(call(f"memory_standard_dense_layer_{x}_bytes", **dict(values, shard_p_os_non_exp_partial=8 * d))
                for x in ("weights", "gradients", "optimizer"))
    assert_close(total * d, np.full_like(d, total[0]))


def test_full_recompute_activations_ignore_the_body_widths():
    stage = "memory_mla_q_latent_moe_stage_activations_bytes"
    values = dict(moe_values(seed=3, n=50), n_embedding=0, n_output=0, n_body=12, n_extra=0, n_extra_sel=0,
                  n_full_rec=12, n_sel_rec=0, p=4, m=16, vp=1, pp_rank=0, v=129280, bytes_logits=4)
    base = call(stage, **values)
    for width in ("hff", "hff_exp", "a", "n_kv", "dh", "dc_kv", "dc_q", "n_exp", "n_chosen_exp", "n_ffMM"):
        assert_close(call(stage, **dict(values, **{width: values[width] * 3})), base)
    assert not {"hff", "a", "dh", "n_kv"} & set(generated.FORMULAS["memory_layer_full_recompute_activations_bytes"]
                                                 ["arguments"])


def test_headroom_and_fits_agree():
    name = "memory_standard_dense_stage_{}"
    values = dict(gpt_layer(96, 12288, 1, 8, 8), v=51200, n_attMM=4, n_qknorm=0, layer_norms=2, norm_bias=1,
                  qkv_bias=1, o_bias=1, mlp_bias=1, attn_output_gate=0, attn_extra_p=0, n_exp=1, n_shared_exp=0,
                  bytes_p=2, bytes_grad=4, bytes_optimizer=12, zero_level=1, shard_p_os_non_exp_partial=64,
                  shard_embed=64, gather_embed=8, tie_emb_out=1, bytes_logits=4, n_embedding=1, n_output=0,
                  n_body=12, n_extra=0, n_extra_sel=0, n_full_rec=0, n_sel_rec=12, p=8, m=64, vp=1, pp_rank=0,
                  memory_reserve=2e9, device_memory_bytes=np.array([20e9, 40e9, 80e9, 160e9]))
    total = call(name.format("total_bytes"), **values)
    headroom = call(name.format("headroom_bytes"), **values)
    assert_close(headroom, values["device_memory_bytes"] - 2e9 - total)
    assert call(name.format("fits"), **values).tolist() == (headroom >= 0).astype(float).tolist()
    assert 0 < (headroom >= 0).sum() < 4  # both outcomes occur
    parts = sum(call(name.format(f"{x}_bytes"), **values)
                for x in ("weights", "gradients", "optimizer", "activations", "recompute_workspace"))
    assert_close(total, parts)


# ---------------------------------------------------------------- Megatron rows and the CLI hook


def figure1_from_the_paper(row):
    """Figure 1's activations (GiB) derived from the paper alone: Table 2's bytes per layer times the L/p
    layers of the first stage times its p in-flight micro-batches (Eq. 5), times the interleaving factor
    1 + (p - 1)/(p·vp) (§4.2.3) — the transformer layers only."""
    a, h, n_lay, t, p, s, b = (int(row[k]) for k in ("a", "h", "L", "t", "p", "seq", "micro_batch"))
    vp = {"megatron-22B": 1, "gpt3-175B": 3}[row["model"]]  # Table 3: interleaving for 175B only
    selective = "selective" in row["recompute"]
    per_layer = table2(a, h, b, t, s)["tp_sp_selective" if selective else "tp"]
    return per_layer * (n_lay / p) * p * (1 + (p - 1) / (p * vp)) / 2 ** 30


def test_figure1_plots_the_transformer_layers_alone():
    import csv

    with open(DATA / "megatron_memory_figure1.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        assert_close(figure1_from_the_paper(row), float(row["activations_GiB_per_gpu"]), rtol=1e-12, atol=1e-12,
                     msg=str(row))
        # Parameters + optimizer: 18 bytes for each of the 12h² weight-matrix parameters per layer on a GPU.
        h, n_lay, t, p = (int(row[k]) for k in ("h", "L", "t", "p"))
        assert 18 * 12 * h * h * n_lay / (t * p) / 2 ** 30 == float(row["params_and_optimizer_GiB_per_gpu"])


def test_megatron_rows_within_bounds():
    rows = validation.megatron_rows()
    assert len(rows) == 4
    for r in rows:
        assert abs(r["params_and_optimizer_rel_err"]) <= validation.STATES_BOUND, r
        # The transformer layers, what the figure plots: Table 2 times the in-flight micro-batches, exactly.
        assert abs(r["activations_rel_err"]) <= 1e-9 and abs(r["activations_rel_err"]) <= validation.ACTIVATIONS_BOUND


def test_megatron_stage_adds_the_embedding_and_output_terms():
    """The whole first stage holds, beyond the layers, Korthikanti §4.3's embedding dropout mask (sbh/sp bytes per
    micro-batch in flight) and, where it is also the last stage (p = 1), the output layer: final LayerNorm
    and projection inputs (2·2sbh/sp) and fp32 logits (4sbv/t)."""
    v = 51200
    for r in validation.megatron_rows():
        s, t = 2048, 8
        a, h, b, p, vp = {"megatron-22B": (64, 6144, 4, 1, 1), "gpt3-175B": (96, 12288, 1, 8, 3)}[r["model"]]
        sp = t if "sequence_parallel" in r["recompute"] else 1
        in_flight = p * (1 + (p - 1) / (p * vp))
        extra = s * b * h / sp * in_flight + (s * b * (4 * h / sp + 4 * v / t) if p == 1 else 0)
        assert_close((r["activations_stage_GiB"] - r["activations_GiB"]) * 2 ** 30, extra, rtol=1e-9)


def test_validate_memory_command_on_a_csv(tmp_path, capsys):
    lines = (DATA / "megatron_memory_figure1.csv").read_text().splitlines()
    custom = tmp_path / "rows.csv"
    custom.write_text("\n".join([lines[0]] + [x for x in lines[1:] if x.startswith("gpt3-175B")]) + "\n")
    assert cli.main(["validate", "memory", "--data", str(custom)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(out[-1])
    assert [r["model"] for r in summary["rows"]] == ["gpt3-175B", "gpt3-175B"]
    assert all(math.isfinite(r["activations_rel_err"]) for r in summary["rows"])
    broken = tmp_path / "broken.csv"
    broken.write_text("model,a,h\nx,1,2\n")
    assert cli.main(["validate", "memory", "--data", str(broken)]) == 2
    assert "missing columns" in capsys.readouterr().err


def test_validation_imports_no_sympy():
    code = "import sys, codegen.validation.memory; assert 'sympy' not in sys.modules, 'sympy imported'"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
