"""Memory per rank of NVIDIA's published NeMo / Megatron-Bridge layouts, with their recipes' settings.

Every row of the shipped table is a run that ran, so its layout fits its GPU with its recipe's settings
(BF16 gradients, the distributed optimizer over the data- and context-parallel ranks, the recipe's
recompute, the default reserve: ``codegen.validation.step_rows.row_memory``). The rows the model does
not yet admit are listed with the modelling gap that keeps them out (docs/memory.md, "Published layouts");
the list is exact both ways: a listed row that comes to fit, or another row that stops fitting, fails.
"""

from __future__ import annotations

import dataclasses

import pytest

from codegen.configs import Layout, RecomputePlan, derive_fields, load_model
from codegen.pricing.memory import DEFAULT_RESERVE_BYTES, DEFAULT_SETTINGS, MemorySettings, stage_memory
from codegen.runtime.inputs import InputError
from codegen.validation.csvfile import DATA_DIR, read_table
from codegen.validation.step_rows import RECIPE_MEMORY, memory_rows, recipe_recompute
from conftest import read_csv, write_csv

NEMO = DATA_DIR / "nemo_step_times.csv"
SWEEPS = DATA_DIR / "layout_sweeps.csv"
GIB = 2 ** 30

#: FP8 runs whose activations the model counts at 2 bytes each where Transformer Engine keeps the quantized
#: 1-byte input of every FP8 linear layer for its backward pass; MoE rows with tp > 1 and experts without TP
#: also count each expert's hidden activations for every token of the sequence rather than the rank's 1/tp.
FP8_ACTIVATIONS = "activations of FP8 GEMMs counted at 2 bytes, not the 1-byte copies Transformer Engine keeps"
#: line of the shipped table → (its model cell, why the model does not admit it yet).
LAYER_KINDS = "the memory family does not see the step time's layer kinds (dense first layers, the MTP head)"
GAPS = {
    2: ("DeepSeekV3", f"{FP8_ACTIVATIONS}; {LAYER_KINDS}"),
    3: ("DeepSeekV3 (w/ MTP)", f"{FP8_ACTIVATIONS}; {LAYER_KINDS}"),
    4: ("DeepSeekV3", f"{FP8_ACTIVATIONS}; {LAYER_KINDS}"),
    5: ("DeepSeekV3", f"{FP8_ACTIVATIONS}; {LAYER_KINDS}"),
    # 2.5 GiB (1.4 % of HBM) over at micro-batch 4 without recompute: the recipe's recompute for GPT-OSS is not
    # verified, and the memory family does not see its sliding windows (none with FlashAttention, which stores no
    # scores) or layer kinds.
    7: ("GPT OSS 120B", "2.5 GiB over at micro-batch 4: the recipe's recompute not verified"),
    9: ("GPT OSS 120B", "2.5 GiB over at micro-batch 4: the recipe's recompute not verified"),
    18: ("Qwen3_235B_a22B", FP8_ACTIVATIONS),
    43: ("Nemotron-340B", FP8_ACTIVATIONS),
    45: ("Qwen3_235B_a22B", FP8_ACTIVATIONS + "; expert activations over the whole sequence at tp 2, etp 1"),
    46: ("Qwen3_235B_a22B", FP8_ACTIVATIONS + "; expert activations over the whole sequence at tp 2, etp 1"),
    50: ("Qwen3_30B_a3B", FP8_ACTIVATIONS),
}


@pytest.fixture(scope="module")
def rows():
    return memory_rows(read_table(NEMO))


def test_every_published_layout_fits_with_its_recipe_but_the_named_gaps(rows):
    priced = [r for r in rows if r["fits"] is not None]
    assert len(priced) >= 40  # every row of a family the project prices
    for r in priced:
        if r["line"] in GAPS:
            model, why = GAPS[r["line"]]
            assert r["model"] == model, (r["line"], r["model"])
            assert not r["fits"], f"line {r['line']} {r['model']} fits now: drop it from GAPS ({why})"
        else:
            assert r["fits"], (f"line {r['line']} {r['model']} on {r['system']}: peak {r['peak_bytes'] / GIB:.1f} GiB, "
                               f"headroom {r['headroom_bytes'] / GIB:.1f} GiB with recompute {r['recompute']}")
            assert r["headroom_bytes"] == r["capacity_bytes"] - r["reserve_bytes"] - r["peak_bytes"]


def test_rows_the_project_cannot_price_keep_their_reason(rows):
    unpriced = [r for r in rows if r["fits"] is None]
    assert all(r["reason"] for r in unpriced)  # every family of the table is priced today; any other has a reason
    assert len(unpriced) + len([r for r in rows if r["fits"] is not None]) == len(rows)


def test_the_recipe_settings_are_applied(rows):
    by_line = {r["line"]: r for r in rows}
    for r in rows:
        if r["fits"] is not None:
            assert r["reserve_bytes"] == DEFAULT_RESERVE_BYTES
    # Llama 3 8B on 8 H100 in FP8 current scaling: its recipe recomputes the first 5 layers in full.
    llama = [r for r in rows if r["model"] == "LLAMA3_8B" and r["system"] == "dgx_h100"]
    assert llama and all(r["recompute"] == "5" and r["recompute_from"].startswith("Megatron-Bridge") for r in llama)
    # Gradients in BF16 (grad_reduce_in_fp32 = False): as many bytes as the BF16 weights where both are unsharded.
    gpt = by_line[23]
    assert RECIPE_MEMORY["bytes_grad"] == 2.0
    assert gpt["parts"]["gradients"] == gpt["parts"]["weights"]


def test_the_distributed_optimizer_shards_over_data_and_context_parallel_ranks():
    # Megatron-Core shards the optimizer states over the data-parallel group with the context-parallel ranks:
    # the layer parameters' shard width is R·t·cp (R = d, the whole data-parallel group), and doubling cp at a
    # fixed d halves a body layer's optimizer bytes per rank (Llama 3 70B's published H100 layout t4 p4 cp2 d2).
    model = load_model("llama3-70b")
    layout = Layout(d=2, t=4, p=4, m=32, b=1, vp=5, cp=2, sp=True)
    assert derive_fields(model, layout)["shard_p_os_non_exp_partial"] == 2 * 4 * 2
    settings = dataclasses.replace(DEFAULT_SETTINGS, zero_level=1)
    one = stage_memory(model, dataclasses.replace(layout, cp=1), system="dgx_h100", settings=settings)["stages"]
    two = stage_memory(model, layout, system="dgx_h100", settings=settings)["stages"]
    middle = 1  # a stage of body layers alone (no embedding or output table)
    assert two[middle]["optimizer"] == pytest.approx(one[middle]["optimizer"] / 2, rel=1e-12)
    assert two[middle]["weights"] == one[middle]["weights"]


def test_the_reserve_is_adjustable(rows):
    none = memory_rows(read_table(NEMO), settings=dataclasses.replace(DEFAULT_SETTINGS, reserve_bytes=0.0))
    for a, b in zip(rows, none):
        if a["fits"] is not None:
            assert b["headroom_bytes"] == pytest.approx(a["headroom_bytes"] + DEFAULT_RESERVE_BYTES, abs=1.0)


def test_a_row_recompute_column_wins_over_the_recipe():
    r = {"recompute_given": True, "recompute_mode": "selective", "model": "LLAMA3_8B", "system": "dgx_h100",
         "precision": "fp8-cs"}
    assert recipe_recompute(r, 1) == (RecomputePlan("selective"), "table")
    r["recompute_given"] = False
    plan, source = recipe_recompute(r, 2)
    assert plan == RecomputePlan("none", (5, 5)) and "recompute_num_layers=5" in source
    r["model"] = "LLAMA3-70B"
    assert recipe_recompute(r, 4) == (RecomputePlan("none"), "recipe default")


def test_default_reserve_is_stated():
    assert DEFAULT_SETTINGS.reserve_bytes == DEFAULT_RESERVE_BYTES == 2 * GIB
    assert MemorySettings(dropout=0.0, flash_attention=1.0, bytes_logits=4.0, bytes_optimizer=12.0).reserve_bytes == 0


def test_settings_of_another_kind_are_one_error():
    with pytest.raises(InputError, match="^settings: expected a MemorySettings, got dict"):
        memory_rows(read_table(NEMO), settings={})


def test_a_row_without_flash_attention_keeps_its_scores(tmp_path):
    # One layout of the LLaMA 13B sweeps (Hagemann et al. 2023) with FlashAttention and without: the scores
    # the unfused kernel keeps (a·s/t per query token, 2 bytes each) are the difference, layer by layer.
    header, rows = read_csv(SWEEPS)
    row = next(r for r in rows if r["recompute_mode"] == "none" and r["pp"] == "1" and r["tp"] == "1")
    on, off = dict(row, flash_attention="true"), dict(row, flash_attention="false")
    got = memory_rows(read_table(write_csv(tmp_path / "two.csv", header, [on, off])), nvidia_recipe=False)
    s, b, a, layers = int(row["seq_len"]), int(row["micro_batch"]), int(row["heads"]), int(row["layers"])
    scores = layers * s * b * (a * s * 2 - 4 * a)  # bf16 scores instead of the fp32 log-sum-exp
    assert got[1]["parts"]["activations"] - got[0]["parts"]["activations"] == pytest.approx(scores, rel=1e-9)
    assert got[0]["parts"]["gradients"] == 2 * got[0]["parts"]["weights"]  # the model's fp32 gradients


def test_nvidia_recipe_is_a_real_flag():
    with pytest.raises(InputError, match="^nvidia_recipe: "):
        memory_rows(read_table(NEMO), nvidia_recipe="no")
