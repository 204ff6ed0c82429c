"""Memory per rank of NVIDIA's published NeMo / Megatron-Bridge layouts, with their recipes' settings.

Every row of the shipped table is a run that ran, so its layout fits its GPU with its recipe's settings
(BF16 gradients, the distributed optimizer over the data- and context-parallel ranks, the recipe's
recompute, the default reserve: ``codegen.validation.step_rows.row_memory``). Rows the model would not admit
are listed with the modelling gap that keeps them out (docs/memory.md, "Published layouts"), none today; the
list is exact both ways: a listed row that comes to fit, or another row that stops fitting, fails.
"""

from __future__ import annotations

import dataclasses
import re

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

#: line of the shipped table → (its model cell, why the model does not admit it yet): none. Every published layout
#: fits since the memory family counts what Megatron-Core keeps of a MoE layer (the experts' hidden activations
#: for the rank's own tokens, no expert output kept for the combine) and the recipes' recomputed modules
#: (docs/memory.md, "Published layouts"); a row that stops fitting fails, and one listed here that comes to fit.
GAPS: dict[int, tuple[str, str]] = {}


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
    # GPT-OSS 120B: its recipes recompute the pre-MLP norm and the experts' activation inside every layer.
    oss = [r for r in rows if r["model"] == "GPT OSS 120B"]
    assert oss and all(r["recompute_modules"] == "layernorm,moe_act" for r in oss)
    assert all(r["recompute_modules_from"].startswith("Megatron-Bridge v0.2.1, v0.3.0, v0.4.1") for r in oss)
    assert all(by_line[line]["recompute_modules"] == "none" for line in (6, 23, 43))
    # DeepSeek-V3 on B200: its recipes recompute MLA's up-projections.
    assert all(by_line[line]["recompute_modules"] == "mla_up_proj" for line in (2, 3, 4, 5))
    # Gradients in BF16 (grad_reduce_in_fp32 = False): as many bytes as the weights where both are unsharded: on
    # H100 the FP8 primary weights keep their data and its transpose, 2 bytes per linear parameter, as BF16 does.
    gpt = by_line[23]
    assert RECIPE_MEMORY["bytes_grad"] == 2.0 and RECIPE_MEMORY["lowp_primary_weights"] is True
    assert gpt["parts"]["gradients"] == gpt["parts"]["weights"]
    # On B200 its FP8 weights need no transpose: 1 byte per linear parameter, under the BF16 gradients' 2.
    assert by_line[6]["precision"] == "fp8" and by_line[6]["parts"]["weights"] < 0.55 * by_line[6]["parts"]["gradients"]


def test_low_precision_rows_count_the_quantized_tensors(rows, monkeypatch):
    """A low-precision row's memory is its precision's (docs/memory.md, "Low precision"): with BF16 weights and
    Transformer Engine's cached FP8 copies beside them instead of the recipes' quantized primary weights, line 43
    (Nemotron-4 340B in FP8 on H100) would not fit: its fit rests on the primary weights, which its 24.07 launcher
    is not verified to set."""
    from codegen.validation import step_rows

    monkeypatch.setitem(step_rows.RECIPE_MEMORY, "lowp_primary_weights", False)
    cached = {r["line"]: r for r in memory_rows(read_table(NEMO))}
    ours = {r["line"]: r for r in rows}
    assert ours[43]["fits"] and not cached[43]["fits"]
    # 2 bytes of FP8 data and transpose per linear parameter of the rank beside the 2 BF16 bytes, or in their place.
    assert cached[43]["parts"]["weights"] > 1.8 * ours[43]["parts"]["weights"]  # (the embedding and norms stay BF16)
    assert cached[43]["parts"]["activations"] == ours[43]["parts"]["activations"]


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
    # Aleph Alpha's Scaling, which ran the sweeps, accumulates the gradients in the BF16 weights' own .grad
    assert got[0]["parts"]["gradients"] == got[0]["parts"]["weights"]
    elsewhere = dict(on, source="elsewhere")  # a row of no known framework: the model's fp32 gradients
    [other] = memory_rows(read_table(write_csv(tmp_path / "one.csv", header, [elsewhere])), nvidia_recipe=False)
    assert other["parts"]["gradients"] == 2 * other["parts"]["weights"]


def test_every_sweep_layout_that_ran_fits_with_its_frameworks_gradients():
    """The 90 LLaMA 13B runs of Hagemann et al.'s sheets completed on A100 80 GB: each fits with its framework's
    BF16 gradients, its own recompute and FlashAttention cells, and the default reserve."""
    rows = memory_rows(read_table(SWEEPS), nvidia_recipe=False)
    assert len(rows) == 90
    for r in rows:
        assert r["fits"], (f"line {r['line']}: peak {r['peak_bytes'] / GIB:.1f} GiB, headroom "
                           f"{r['headroom_bytes'] / GIB:.1f} GiB with recompute {r['recompute']}")


def test_nvidia_recipe_is_a_real_flag():
    with pytest.raises(InputError, match="^nvidia_recipe: "):
        memory_rows(read_table(NEMO), nvidia_recipe="no")


def test_gpt_oss_on_b200_drops_what_its_recipes_recomputed_modules_discard(tmp_path):
    """GPT-OSS 120B on 64 B200 at micro-batch 4, EP 8 (line 9, the 26.02.01 run): its recipe's ``layernorm`` and
    ``moe_act`` modules (Megatron-Bridge v0.2.1-v0.4.1 GPT_OSS_120B B200 BF16 configs) drop, per token of a
    micro-batch and per layer, the pre-MLP norm's output (h = 2880 BF16 values) and the experts' activation output
    (top-4 copies of 2880 BF16 values): 16,384 tokens x 36 layers x 28,800 bytes, one pipeline stage holding one
    micro-batch; one layer holds its part again in its backward pass."""
    header, table = read_csv(NEMO)
    row = next(r for r in table if r["model"] == "GPT OSS 120B" and r["release"] == "26.02.01")
    rows = [dict(row, recompute_modules=cell) for cell in ("", "none", "layernorm;moe_act")]
    path = write_csv(tmp_path / "oss.csv", [*header, "recompute_modules"], rows)
    with_modules, without, stated = memory_rows(read_table(path))
    per_layer = 4 * 4096 * (2880 * 2 + 4 * 2880 * 2)
    assert without["parts"]["activations"] - with_modules["parts"]["activations"] == 36 * per_layer
    assert with_modules["parts"]["recompute_workspace"] == per_layer and without["parts"]["recompute_workspace"] == 0
    assert without["headroom_bytes"] == with_modules["headroom_bytes"] - 35 * per_layer
    assert with_modules["fits"] and without["fits"]
    assert (with_modules["recompute_modules_from"].startswith("Megatron-Bridge")
            and without["recompute_modules_from"] == stated["recompute_modules_from"] == "table")
    assert stated["peak_bytes"] == with_modules["peak_bytes"]


def test_a_recompute_modules_cell_names_only_known_modules(tmp_path):
    header, table = read_csv(NEMO)
    row = next(r for r in table if r["model"] == "GPT OSS 120B")
    for cell, says in (("mlp", "a Megatron-Core module not modelled"), ("core_attn", "--recompute selective"),
                       ("layernorm;norm", "expected one of layernorm, moe_act, mla_up_proj, got 'norm'")):
        path = write_csv(tmp_path / "bad.csv", [*header, "recompute_modules"], [dict(row, recompute_modules=cell)])
        with pytest.raises(ValueError, match=rf"bad\.csv line 2, column recompute_modules: .*{re.escape(says)}"):
            memory_rows(read_table(path))
