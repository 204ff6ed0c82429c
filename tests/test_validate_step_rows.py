"""``symcost validate step-time --data FILE`` on tables of one run per row (NeMo step times, layout sweeps).

A row is priced as StepTimePricer prices the same model and layout built by hand; a sweep's Spearman rank
correlation and regret have the values worked out by hand; a cell the reader does not know is one error line
naming the file, line and column (exit 2); a row the model cannot price keeps its place with a null error and
its reason.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from codegen.cli import main
from codegen.configs import Layout, ModelConfig
from codegen.pricing.chunks import Chunk, Setting
from codegen.pricing.step_time import StepTimePricer, time_family_comm
from codegen.validation.csvfile import DATA_DIR
from codegen.validation.step_rows import regret, spearman
from conftest import read_csv, write_csv

NEMO = DATA_DIR / "nemo_step_times.csv"
SWEEPS = DATA_DIR / "layout_sweeps.csv"


def _row(model_family: str, system: str, precision: str) -> dict[str, str]:
    header, rows = read_csv(NEMO)
    return next(r for r in rows if (r["model_family"], r["system"], r["precision"]) == (model_family, system,
                                                                                        precision))


def _run(capsys, path: Path, *extra: str) -> tuple[dict, str]:
    code = main(["validate", "step-time", "--data", str(path), *extra])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Traceback" not in captured.err
    return json.loads(captured.out.strip().splitlines()[-1]), captured.out


def _error(capsys, path: Path) -> str:
    code = main(["validate", "step-time", "--data", str(path)])
    captured = capsys.readouterr()
    assert code == 2, (captured.out[-300:], captured.err)
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("symcost validate: error: "), captured.err
    assert "Traceback" not in captured.err
    return lines[0]


def _direct(model: ModelConfig, system: str, precision: str, recompute: str, zero: int) -> dict[str, float]:
    layout = model.layout
    pricer = StepTimePricer(model, system=system, comm=time_family_comm(model, system, precision), precision=precision)
    values = {k: np.array([getattr(layout, k)], dtype=np.int64) for k in ("d", "t", "p", "cp", "ep", "etp", "vp", "b",
                                                                        "m")}
    chunk = Chunk(Setting(recompute, zero, layout.cp_algo), values, np.zeros(1, np.int64), model)
    return {k: float(v[0]) for k, v in pricer.price(values, recompute, chunk).items()}


def test_a_row_is_priced_as_the_pricer_prices_its_model_and_layout(capsys, tmp_path):
    """Llama 3 8B on DGX H100, FP8 (delayed scaling), tp 1, pp 1, cp 2, dp 4, 128 × 8192 tokens, micro-batch 1;
    Llama 3 is SwiGLU with 8 KV heads, no biases, untied, vocabulary 128,256 (blank in NeMo's table); NeMo's
    defaults: no recompute, FlashAttention, no sequence parallelism at tp 1, the distributed optimizer (ZeRO 1),
    BF16 gradients (RECIPE_MEMORY).
    GPT-3 175B on DGX B200 (FP8, tp 4, pp 4, vp 6, sequence parallel; fsdp set to 1: ZeRO 3): GeLU MLP, biases,
    LayerNorm, tied, 50,257."""
    header, _ = read_csv(NEMO)
    llama, gpt = _row("Llama-3-8B", "dgx_h100", "FP8"), _row("GPT-3-175B", "dgx_b200", "FP8")
    assert (llama["tp"], llama["pp"], llama["cp"], llama["dp"], llama["vocab"]) == ("1", "1", "2", "4", "")
    assert (gpt["tp"], gpt["pp"], gpt["vp"], gpt["fsdp"], gpt["dp"]) == ("4", "4", "6", "", "32")
    gpt = dict(gpt, fsdp="1")  # FSDP over the whole data-parallel group
    got, _ = _run(capsys, write_csv(tmp_path / "two.csv", header, [llama, gpt]))
    model = ModelConfig(name="llama", source="", s=8192, h=4096, a=32, n_kv=8, dh=128.0, hff=14336, v=128256,
                        n_lay=32, layout=Layout(d=4, t=1, p=1, cp=2, m=32, b=1), hff_exp=14336, bytes_grad=2.0)
    want = _direct(model, "dgx_h100", "fp8", "none", 1)
    gpt_model = ModelConfig(name="gpt", source="", s=2048, h=12288, a=96, n_kv=96, dh=128.0, hff=49152, v=50257,
                            n_lay=96, layout=Layout(d=32, t=4, p=4, vp=6, m=32, b=2, sp=True), hff_exp=49152,
                            n_ffMM=2, qkv_bias=True, o_bias=True, mlp_bias=True, norm_bias=True, tie_emb_out=True,
                            bytes_grad=2.0)
    want_gpt = _direct(gpt_model, "dgx_b200", "fp8", "none", 3)
    for row, expect, measured in zip(got["rows"], (want, want_gpt), (llama, gpt)):
        assert row["predicted_s"] == expect["step_time_s"] > 0
        assert (row["compute_s"], row["bubble_s"], row["comm_s"]) == (expect["compute_s"], expect["bubble_s"],
                                                                      expect["comm_s"])
        assert row["measured_s"] == float(measured["measured_step_s"])
        assert row["rel_err"] == (row["predicted_s"] - row["measured_s"]) / row["measured_s"]
        assert row["precision"] == "fp8"
    assert [r["line"] for r in got["rows"]] == [2, 3]
    assert got["mean_abs_rel_err"] == pytest.approx(np.mean([abs(r["rel_err"]) for r in got["rows"]]), rel=1e-15)


def test_spearman_and_regret_by_hand():
    # ranks differ by 0, 0, 1, 1: 1 − 6·2 / (4·15) = 0.8
    assert spearman([1, 2, 3, 4], [10, 20, 40, 30]) == pytest.approx(0.8, abs=1e-15)
    assert spearman([4, 3, 2, 1], [1, 2, 3, 4]) == pytest.approx(-1.0, abs=1e-15)
    # a tie shares its average rank 1.5: Pearson of (1.5, 1.5, 3, 4) and (1, 2, 3, 4) = 4.5 / sqrt(4.5·5)
    assert spearman([1, 1, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(22.5), abs=1e-15)
    assert math.isnan(spearman([1, 1], [1, 2]))
    # the model's pick (predicted 1) was measured 12, the fastest 10: regret 20 %
    assert regret([3, 1, 2], [10, 12, 11]) == pytest.approx(0.2, abs=1e-15)
    assert regret([1, 2, 3], [10, 12, 11]) == 0.0
    # two rows tied at the lowest prediction: one pick at their mean measured time, 12 over 9
    assert regret([1, 1, 2], [10, 14, 9]) == pytest.approx(1 / 3, abs=1e-15)


def test_a_sweep_reports_its_rank_correlation_and_regret(capsys, tmp_path):
    """Four layouts of LLaMA 13B on 64 A100 (one sweep) with measured times set by hand: the reported figures are
    those of the predicted times the command prints, worked out without ties by 1 − 6Σd²/(n(n²−1))."""
    header, rows = read_csv(SWEEPS)
    chosen = [r for r in rows if r["sweep"] == "Llama 13B 64 GPUs" and r["flash_attention"] == "true"]
    picked, seen = [], set()
    for r in chosen:  # four distinct layouts
        key = (r["tp"], r["pp"], r["micro_batch"], r["recompute_mode"])
        if key not in seen:
            seen.add(key)
            picked.append(dict(r, measured_step_s=str(30 + 5 * len(picked))))
        if len(picked) == 4:
            break
    got, out = _run(capsys, write_csv(tmp_path / "sweep.csv", header, picked))
    predicted = np.array([r["predicted_s"] for r in got["rows"]])
    measured = np.array([30.0, 35.0, 40.0, 45.0])
    assert len(set(predicted.tolist())) == 4
    d = np.argsort(np.argsort(predicted)) - np.argsort(np.argsort(measured))
    [sweep] = got["sweeps"]
    assert sweep["sweep"] == "Llama 13B 64 GPUs" and sweep["n"] == 4
    assert sweep["spearman"] == pytest.approx(1 - 6 * float(d @ d) / (4 * 15), abs=1e-12)
    assert sweep["regret"] == pytest.approx(measured[np.argmin(predicted)] / 30.0 - 1, abs=1e-12)
    assert sweep["mean_abs_rel_err"] == pytest.approx(np.mean(np.abs(predicted - measured) / measured), rel=1e-12)
    assert "Llama 13B 64 GPUs" in out and "spearman" in out


def test_sweep_rows_take_their_frameworks_split_overlap_and_gradient_width(capsys, tmp_path):
    """A row of Hagemann et al.'s sheets (LLaMA 13B, 64 A100, tp 1, pp 2, micro-batch 1, no recompute) ran on Aleph
    Alpha's Scaling: priced with its module-list pipeline split (21 decoder layers on the first stage, 19 beside the
    head on the last), no communication overlap (its optimizer step all-reduces the gradients after the pipeline)
    and micro-batches accumulated in the BF16 parameters' gradients; the same row from another source keeps NeMo's
    defaults (the even split, the data-parallel and pipeline overlap, the fp32 gradient width)."""
    header, rows = read_csv(SWEEPS)
    row = next(r for r in rows
               if (r["tp"], r["pp"], r["micro_batch"], r["recompute_mode"]) == ("1", "2", "1", "none"))
    assert row["source"].startswith("Aleph-Alpha/NeurIPS-WANT-submission-efficient-parallelization-layouts@")
    other = dict(row, source="elsewhere")
    got, _ = _run(capsys, write_csv(tmp_path / "two.csv", header, [row, other]))
    shape = dict(name="llama", source="", s=2048, h=5120, a=40, n_kv=40, dh=128.0, hff=13824, v=32000, n_lay=40,
                 hff_exp=13824)
    scaling = ModelConfig(**shape, layout=Layout(d=32, t=1, p=2, m=64, b=1, offset=(1, -1)), bytes_grad_acc=2.0)
    nemo = ModelConfig(**shape, layout=Layout(d=32, t=1, p=2, m=64, b=1))
    for model, overlap, priced, named in ((scaling, (), got["rows"][0], "none"),
                                          (nemo, ("dp", "pp"), got["rows"][1], "dp,pp")):
        pricer = StepTimePricer(model, system="dgx_a100", comm=time_family_comm(model, "dgx_a100", "bf16"),
                                overlap=overlap)
        values = {k: np.array([getattr(model.layout, k)], dtype=np.int64)
                  for k in ("d", "t", "p", "cp", "ep", "etp", "vp", "b", "m")}
        chunk = Chunk(Setting("none", 1, model.layout.cp_algo), values, np.zeros(1, np.int64), model)
        want = pricer.price(values, "none", chunk)
        assert priced["predicted_s"] == float(want["step_time_s"][0]) and priced["overlap"] == named


def test_a_framework_cell_wins_over_the_source(capsys, tmp_path):
    """The ``framework`` cell names the framework a row ran on: ``scaling`` prices a row of any source as the
    sweeps' rows, ``megatron`` a sweep row with NeMo's defaults; a blank cell reads the source; another name is one
    error line naming the file, line and column."""
    header, rows = read_csv(SWEEPS)
    row = next(r for r in rows
               if (r["tp"], r["pp"], r["micro_batch"], r["recompute_mode"]) == ("1", "2", "1", "none"))
    cells = [dict(row, framework=""), dict(row, source="elsewhere", framework="scaling"),
             dict(row, framework="megatron"), dict(row, source="elsewhere", framework="")]
    got, _ = _run(capsys, write_csv(tmp_path / "four.csv", [*header, "framework"], cells))
    scaling, named, megatron, plain = (r["predicted_s"] for r in got["rows"])
    assert scaling == named != megatron == plain
    assert [r["overlap"] for r in got["rows"]] == ["none", "none", "dp,pp", "dp,pp"]
    assert [r["framework"] for r in got["rows"]] == ["scaling", "scaling", "megatron", "megatron"]
    path = write_csv(tmp_path / "bad.csv", [*header, "framework"], [dict(row, framework="deepspeed")])
    line = _error(capsys, path)
    assert f"{path} line 2, column framework: " in line and "megatron, scaling" in line and "'deepspeed'" in line


def test_the_accumulation_width_moves_two_reads_and_writes_a_parameter_a_micro_batch():
    """HBM bytes of one rank's stage at accumulation widths 4 and 2: each micro-batch reads and writes every weight
    gradient of the stage once, so the difference is m · 2·(4 − 2) bytes a parameter. LLaMA-like: h 1024, 8 heads,
    FFN 2816 (SwiGLU), no biases, two RMSNorms a layer, 6 layers, vocabulary 32,000; tp 2, pp 1, m 8: the rank
    holds (4h² + 2h + 3·h·2816)/2 a layer and h·v/2 of the output layer."""
    h, hff, v, n, m = 1024, 2816, 32000, 6, 8
    base = ModelConfig(name="x", source="", s=1024, h=h, a=8, n_kv=8, dh=128.0, hff=hff, v=v, n_lay=n,
                       layout=Layout(d=1, t=2, p=1, m=m, b=1), hff_exp=hff)
    values = {k: np.array([getattr(base.layout, k)], dtype=np.int64) for k in ("d", "t", "p", "cp", "ep", "etp", "vp",
                                                                             "b", "m")}
    moved = []
    for width in (None, 2.0):
        model = dataclasses.replace(base, bytes_grad_acc=width)
        pricer = StepTimePricer(model, system="dgx_a100")
        moved.append(pricer.stage_parts(values, "none", 1, hbm_only=True)[1][2][0])
    params = n * (4 * h * h + 2 * h + 3 * h * hff) / 2 + h * v / 2
    assert moved[0] - moved[1] == pytest.approx(m * 2 * (4 - 2) * params, rel=1e-12)


@pytest.mark.parametrize("column, value, fragment", [
    ("precision", "FP9", "unknown precision 'FP9'"),
    ("model_family", "Falcon-40B", "unknown model family 'Falcon-40B'"),
    ("system", "dgx_z100", "unknown hardware system 'dgx_z100'"),
    ("tp", "2.5", "expected a whole number, got '2.5'"),
    ("dp", "3", "expected gpus / (tp·pp·cp) = 4, got 3"),
    ("recompute_mode", "sometimes", "cannot read 'sometimes' as a recompute mode"),
    ("sequence_parallel", "maybe", "must be true or false"),
    ("measured_step_s", "nan", "expected a number, got 'nan'"),
])
def test_an_unknown_value_is_one_line_naming_file_line_and_column(capsys, tmp_path, column, value, fragment):
    header, _ = read_csv(SWEEPS)
    row = _row("Llama-3-8B", "dgx_h100", "FP8")
    bad = dict(row, **{column: value})
    path = write_csv(tmp_path / "bad.csv", header, [{k: row.get(k, "") for k in header},
                                                 {k: bad.get(k, "") for k in header}])
    line = _error(capsys, path)
    assert f"{path} line 3, column {column}: " in line and fragment in line, line


def test_a_row_that_cannot_be_priced_keeps_its_place_with_its_reason(capsys, tmp_path):
    """FSDP over 2 of the 4 data-parallel ranks (hybrid sharding, not modelled), FP8 on an A100 (no FP8 units), TP 3
    of 32 heads (a layout rule): null error, a reason; the priced row's figures are still reported."""
    header, _ = read_csv(NEMO)
    llama = _row("Llama-3-8B", "dgx_h100", "FP8")
    rows = [dict(llama, fsdp="2"), dict(llama, system="dgx_a100"),
            dict(llama, tp="3", dp="", gpus="6", cp="2"), llama]
    got, out = _run(capsys, write_csv(tmp_path / "mixed.csv", header, rows))
    reasons = [r.get("reason", "") for r in got["rows"]]
    assert [r["rel_err"] is None for r in got["rows"]] == [True, True, True, False]
    assert "hybrid sharding" in reasons[0]
    assert "fp8" in reasons[1] and "A100" in reasons[1]
    assert "heads" in reasons[2]
    assert all(r["predicted_s"] is None for r in got["rows"][:3])
    assert got["mean_abs_rel_err"] == abs(got["rows"][3]["rel_err"])
    assert "not priced: fsdp over 2 of the 4 data-parallel ranks" in out


@pytest.mark.parametrize("family, words", [
    ("Nemotron-H-56B", "Mamba-2"), ("NemotronH 8B", "Mamba-2"), ("Nemotron 3 Nano", "Mamba-2"),
    ("Qwen3-Next-80B-A3B", "Gated DeltaNet"), ("Llama-4-Maverick", "chunked local attention"),
])
def test_a_family_whose_layers_cannot_be_stated_is_listed_unpriced_not_priced_as_a_shorter_prefix(
        capsys, tmp_path, family, words):
    """A hybrid Mamba model named "Nemotron-H" starts like "Nemotron" (Nemotron-4's transformer), Qwen3-Next like
    Qwen3: such a row is reported unpriced with why, never priced as the shorter prefix's family; spaces and
    underscores read as hyphens ("Llama 3 8B" is Llama 3's)."""
    header, _ = read_csv(NEMO)
    llama = _row("Llama-3-8B", "dgx_h100", "FP8")
    rows = [dict(llama, model_family=family), dict(llama, model_family="Llama 3 8B"), llama]
    got, out = _run(capsys, write_csv(tmp_path / "families.csv", header, rows))
    first, spaced, named = got["rows"]
    assert first["rel_err"] is None and words in first["reason"] and "not priced" in out
    assert spaced["predicted_s"] == named["predicted_s"] is not None


def test_the_decision_test_lists_the_rows_it_leaves_out(capsys, tmp_path):
    header, _ = read_csv(NEMO)
    llama = _row("Llama-3-8B", "dgx_b200", "FP8-CS")
    path = write_csv(tmp_path / "left.csv", header, [llama, dict(llama, model_family="Nemotron-H-56B")])
    code = main(["validate", "decision", "--data", str(path)])
    out = capsys.readouterr().out
    got = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and got["summary"]["cases"] == 1
    assert got["left_out"] == [{"line": 3, "family": "Nemotron-H-56B",
                                "reason": "a hybrid Mamba-2 / attention model: its Mamba-2 layers are not modelled"}]
    assert "left out, not priced" in out


def test_each_row_says_the_overlap_and_recomputed_modules_it_was_priced_with(capsys, tmp_path):
    """A row's run settings that no column states come from its recipe (codegen.validation.step_rows: RECIPE_OVERLAP,
    RECIPE_RECOMPUTE_MODULES); a ``recompute_modules`` column wins, and its modules' forward again adds compute."""
    header, rows = read_csv(NEMO)
    oss = next(r for r in rows if r["model"] == "GPT OSS 120B" and r["release"] == "26.02.01")
    path = write_csv(tmp_path / "oss.csv", [*header, "recompute_modules"],
                     [dict(oss, recompute_modules=""), dict(oss, recompute_modules="none")])
    got, _ = _run(capsys, path)
    recipe, none = got["rows"]
    assert (recipe["overlap"], recipe["recompute_modules"]) == ("dp,pp", "layernorm,moe_act")
    assert (none["overlap"], none["recompute_modules"]) == ("dp,pp", "none")
    assert recipe["compute_s"] > none["compute_s"]


def test_deepseek_rows_take_the_recipes_pipeline_layout():
    """Megatron-Bridge's DeepSeek-V3 layouts (set_deepseek_v3_pipeline_model_parallel_layout): the embedding with the
    first chunk's 4 decoder layers, the MTP layer and the loss with the last chunk's 1, 4 in every other chunk; its
    Qwen3 235B-A22B recipe's split with the embedding and the loss counted as layers."""
    from codegen.configs import chunk_layer_counts
    from codegen.validation.csvfile import read_table
    from codegen.validation.step_rows import model_and_layout, read_rows

    rows = {r["line"]: r for r in read_rows(read_table(NEMO))}
    for line, (p, vp) in ((2, (16, 1)), (5, (8, 2))):
        model, layout, _ = model_and_layout(rows[line], rows[line]["model"], "")
        assert (layout.p, layout.vp) == (p, vp) and model.layout.offset == layout.offset
        per_slot = [chunk_layer_counts(model, layout)[s][c] for c in range(vp) for s in range(p)]  # model order
        assert per_slot == [4] * 15 + [2]  # (the last: one decoder layer and the MTP layer)
    # Qwen3 235B-A22B's recipe (Megatron-Bridge's releases) counts the embedding and the loss as layers: 94 + 2
    # over PP 8 x VP 2, 6 a chunk, one fewer on the first and on the last (Megatron-Core's get_num_layers_to_build).
    qwen = rows[18]
    assert (qwen["model"], qwen["release"], qwen["pp"], qwen["vp"]) == ("Qwen3_235B_a22B", "25.11", 8, 2)
    model, layout, _ = model_and_layout(qwen, qwen["model"], "")
    assert [chunk_layer_counts(model, layout)[s][c] for c in range(2) for s in range(8)] == [5] + [6] * 14 + [5]
    # A family whose recipe states neither keeps the even split.
    llama = next(r for r in rows.values() if r["model"] == "LLAMA3_70B" and r["pp"] > 1)
    assert model_and_layout(llama, llama["model"], "")[1].offset is None


def test_rows_state_megatrons_accounted_pipeline_split(capsys, tmp_path):
    """The account_for_*_in_pipeline_split columns: blank takes the recipe's (Llama 3.1 405B in Megatron-Bridge's
    releases: both), false the even split, true on a pipeline they do not divide an unpriced row with its reason."""
    from codegen.configs import chunk_layer_counts
    from codegen.validation.csvfile import read_table
    from codegen.validation.step_rows import model_and_layout, read_rows

    header, rows = read_csv(NEMO)
    llama = next(r for r in rows if r["model"] == "LLAMA3.1_405B" and r["release"] == "26.02")  # PP 8 x VP 8
    dense = next(r for r in rows if r["model"] == "LLAMA3_70B" and r["pp"] == "8")  # 80 layers: 82 do not divide
    columns = [*header, "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"]
    cells = [{**llama}, {**llama, columns[-2]: "false", columns[-1]: "false"}, {**dense, columns[-1]: "true",
                                                                               columns[-2]: "true"}]
    path = write_csv(tmp_path / "split.csv", columns, cells)
    read = read_rows(read_table(path))
    first = [[chunk_layer_counts(*model_and_layout(r, r["model"], "")[:2])[s][c] for c in range(8) for s in (0, 7)]
             for r in read[:2]]
    # Recipe split: the first stage's first chunk and the last stage's last hold one layer fewer (2 a chunk);
    # even split: 126 over 64 chunks, the last two chunks in model order (stages 6 and 7 of chunk 7) one fewer.
    assert first[0] == [1, 2] + [2, 2] * 6 + [2, 1]
    assert first[1] == [2, 2] * 7 + [2, 1]
    got, _ = _run(capsys, path)
    assert got["rows"][2]["rel_err"] is None and "82 do not divide over p = 8" in got["rows"][2]["reason"]


def test_a_recipe_pipeline_layout_refuses_the_accounted_split(capsys, tmp_path):
    # DeepSeek-V3's recipe places the embedding and the loss by its pipeline layout; Megatron-Core refuses the
    # account_for_* settings beside one.
    header, rows = read_csv(NEMO)
    row = next(r for r in rows if r["model"] == "DeepSeekV3" and r["release"] == "26.02")
    columns = [*header, "account_for_loss_in_pipeline_split"]
    got, _ = _run(capsys, write_csv(tmp_path / "ds.csv", columns, [{**row, columns[-1]: "true"}]))
    assert got["rows"][0]["rel_err"] is None and "places the embedding and the loss already" in got["rows"][0]["reason"]


def test_a_recipes_recomputed_layers_are_priced_in_the_step_time(capsys, tmp_path):
    """Llama 3 8B on H100 in FP8-CS: its recipe recomputes the first 5 of its 32 layers in full (Megatron-Bridge's
    recompute_num_layers = 5, step_rows.RECIPE_RECOMPUTE); the row says so and its step prices them, as
    ``--recompute 5`` does for the same model and layout by hand; a ``recompute_mode`` column wins."""
    header, rows = read_csv(NEMO)
    llama = next(r for r in rows if r["model"] == "LLAMA3_8B" and r["system"] == "dgx_h100")
    path = write_csv(tmp_path / "llama.csv", [*header, "recompute_mode"],
                     [dict(llama, recompute_mode=""), dict(llama, recompute_mode="none")])
    got, _ = _run(capsys, path)
    recipe, none = got["rows"]
    assert (recipe["recompute"], none["recompute"]) == ("5", "none")
    # Five layers of 32 run their forward again, a third of a layer's forward and backward: at most 5/32/3 more
    # compute (the output layer and the optimizer update are not recomputed), and more than half of that.
    assert 1 + 5 / 32 / 3 / 2 < recipe["compute_s"] / none["compute_s"] <= 1 + 5 / 32 / 3
