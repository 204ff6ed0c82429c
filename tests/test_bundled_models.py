"""The bundled models of today's training runs against NVIDIA's NeMo performance table.

Each model file (``codegen/configs/bundled/<name>.yaml``) states its architecture from its public release
and, as its default run, the layout NVIDIA published for it. Checked here, independently of how the files
were written: the architecture numbers equal the table's architecture columns, the switches the columns
cannot state (a gated MLP or not, biases, LayerNorm, tied embeddings, QK-norm) equal the family facts that
``symcost validate step-time`` reads the same table with (``codegen.validation.step_rows.FAMILIES``), and the
default layout is the table's row, meets the layout rules and runs through ``symcost eval``.

The table's cells are copied below (the shipped ``codegen/validation/data/nemo_step_times.csv``, a copy of
the published measurements, by its line number); a test keeps the copy and the file equal.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import re

import pytest

from codegen.cli import main
from codegen.cli.eval import accounted_model
from codegen.configs import (ModelConfigError, RecomputePlan, accounted, build_stages, chunk_layer_counts, load_model,
                             model_names, validate)
from codegen.validation.csvfile import DATA_DIR
from codegen.validation.step_rows import DEFAULTS, FAMILIES

NEMO_TABLE = DATA_DIR / "nemo_step_times.csv"

#: The columns copied from the table, in this order.
COLUMNS = ("model_family", "gpus", "global_batch", "micro_batch", "seq_len", "tp", "pp", "cp", "vp", "ep",
           "layers", "hidden", "ffn_hidden", "heads", "kv_heads", "head_dim", "vocab", "experts", "top_k",
           "moe_ffn_hidden", "shared_experts")

#: Bundled name → (line of nemo_step_times.csv, its cells of :data:`COLUMNS` as written: blank is "").
#: The line is the row of the DGX H100 table where it has the model (the latest release), else DGX B200.
TABLE_ROWS: dict[str, tuple[int, tuple[str, ...]]] = {
    "llama3-8b": (36, ("Llama-3-8B", "8", "128", "1", "8192", "1", "1", "2", "1", "",
                       "32", "4096", "14336", "32", "8", "", "", "", "", "", "")),
    "llama3-70b": (33, ("Llama-3-70B", "64", "256", "1", "8192", "4", "8", "1", "5", "",
                        "80", "8192", "28672", "64", "8", "", "", "", "", "", "")),
    "llama3.1-405b": (40, ("Llama-3.1-405B", "1024", "1536", "1", "8192", "8", "8", "2", "8", "",
                           "126", "16384", "53248", "128", "8", "", "", "", "", "", "")),
    "mixtral-8x7b": (15, ("Mixtral-8x7B", "64", "256", "2", "4096", "1", "1", "1", "1", "8",
                          "32", "4096", "14336", "32", "8", "", "", "8", "2", "14336", "")),
    "qwen3-30b-a3b": (49, ("Qwen3-30B-A3B", "16", "1024", "1", "4096", "1", "1", "1", "", "16",
                           "48", "2048", "6144", "32", "4", "128", "151936", "128", "8", "768", "")),
    "qwen3-235b-a22b": (45, ("Qwen3-235B-A22B", "256", "8192", "1", "4096", "2", "8", "1", "4", "32",
                             "94", "4096", "12288", "64", "4", "128", "151936", "128", "8", "1536", "")),
    "gpt-oss-120b": (29, ("GPT-OSS-120B", "64", "1280", "1", "4096", "1", "4", "1", "", "8",
                          "36", "2880", "2880", "64", "8", "64", "201088", "128", "4", "2880", "")),
    "nemotron4-15b": (16, ("Nemotron-4-15B", "64", "256", "2", "4096", "1", "1", "1", "1", "1",
                           "32", "6144", "24576", "48", "8", "", "256000", "", "", "", "")),
    "nemotron4-340b": (43, ("Nemotron-4-340B", "128", "32", "1", "4096", "8", "8", "1", "12", "",
                            "96", "18432", "73728", "96", "8", "", "", "", "", "", "")),
    "gpt3-175b": (25, ("GPT-3-175B", "512", "2048", "2", "2048", "4", "8", "1", "6", "1",
                       "96", "12288", "49152", "96", "96", "", "", "", "", "", "")),
}

#: Mixtral 8x22B is not in the table: NeMo's model config and pretraining recipe, in the same columns.
#: NVIDIA/NeMo@02f25a80bb78 nemo/collections/llm/gpt/model/mixtral.py MixtralConfig8x22B (num_query_groups
#: 8 from MixtralConfig; ffn_hidden_size is each expert's width) and @00138e21c9e3
#: nemo/collections/llm/recipes/mixtral_8x22b.py (trainer: 16 nodes x 8 GPUs, TP 2, PP 4, VP 14, CP 2,
#: EP 8; pretrain_recipe: seq_length 4096, global batch 512, micro-batch 1); vocabulary 32000 as
#: mlcommons/training@fbe62c7729a9 mixture_of_experts_pretraining/README.md states it for the checkpoint.
NEMO_CONFIG_ROWS: dict[str, tuple[str, ...]] = {
    "mixtral-8x22b": ("Mixtral-8x22B", "128", "512", "1", "4096", "2", "4", "2", "14", "8",
                      "56", "6144", "16384", "48", "8", "", "32000", "8", "2", "16384", ""),
}

PUBLISHED = {**{name: cells for name, (_, cells) in TABLE_ROWS.items()}, **NEMO_CONFIG_ROWS}


def _row(cells: tuple[str, ...]) -> dict[str, str]:
    assert len(cells) == len(COLUMNS)
    return dict(zip(COLUMNS, cells))


def _whole(text: str, blank: int) -> int:
    return int(text) if text else blank


def _family(model_family: str):
    """The family facts of a ``model_family`` cell: the longest prefix of :data:`FAMILIES` it starts with."""
    key = model_family.lower()
    prefix = max((p for p in FAMILIES if key.startswith(p)), key=len)
    return FAMILIES[prefix]


def test_every_model_of_the_list_is_bundled():
    assert set(PUBLISHED) | {"qwen3-72b", "deepseek-v3", "llama2-7b"} == set(model_names())


def test_the_copied_cells_equal_the_shipped_table():
    with NEMO_TABLE.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        by_line = {reader.line_num: row for row in reader}
    for name, (line, cells) in TABLE_ROWS.items():
        row = dict(zip(header, by_line[line]))
        assert tuple(row[c] for c in COLUMNS) == cells, f"{name}: line {line} of {NEMO_TABLE.name}"


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_architecture_equals_the_published_columns(name):
    """Blank cells read as the table's reader reads them: kv_heads the heads, head_dim hidden / heads, vocab the
    family's tokenizer, experts 1, moe_ffn_hidden the ffn_hidden, shared_experts 0."""
    model, row = load_model(name), _row(PUBLISHED[name])
    family = _family(row["model_family"])
    heads, hidden = int(row["heads"]), int(row["hidden"])
    experts = _whole(row["experts"], 1)
    want = {"n_lay": int(row["layers"]), "h": hidden, "a": heads, "n_kv": _whole(row["kv_heads"], heads),
            "dh": float(_whole(row["head_dim"], hidden // heads)), "v": _whole(row["vocab"], family.vocab),
            "n_exp": experts}
    if experts > 1:
        want.update(hff_exp=_whole(row["moe_ffn_hidden"], int(row["ffn_hidden"])), n_chosen_exp=int(row["top_k"]),
                    n_shared_exp=_whole(row["shared_experts"], 0), first_k_dense=0)
        assert model.hff == int(row["ffn_hidden"])  # the dense width config.json states (no dense layer uses it)
    else:
        want.update(hff=int(row["ffn_hidden"]))
    got = {key: getattr(model, key) for key in want}
    assert got == want
    assert model.n_mtp == 0


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_switches_equal_the_family_facts(name):
    """What the columns cannot say: the same facts ``symcost validate step-time`` prices the table's rows with."""
    model, family = load_model(name), _family(_row(PUBLISHED[name])["model_family"])
    assert (model.n_ffMM, model.qkv_bias, model.o_bias, model.mlp_bias, model.norm_bias, model.tie_emb_out,
            model.n_qknorm) == (family.n_ffMM, family.biases, family.biases, family.biases, family.norm_bias,
                                family.tie_emb_out, family.n_qknorm)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_default_layout_is_the_published_run(name):
    model, row = load_model(name), _row(PUBLISHED[name])
    layout = model.layout
    t, p, cp = int(row["tp"]), int(row["pp"]), int(row["cp"])
    assert (layout.t, layout.p, layout.cp, layout.vp, layout.ep, layout.etp, layout.b) == \
        (t, p, cp, _whole(row["vp"], 1), _whole(row["ep"], 1), 1, int(row["micro_batch"]))
    assert layout.d * t * cp * p == int(row["gpus"])
    assert layout.m * layout.b * layout.d == int(row["global_batch"])
    assert model.s == int(row["seq_len"]) and layout.s is None
    # The recipes' run settings the table leaves out, as its reader takes them.
    assert layout.sp == (t > 1)
    assert layout.recompute == RecomputePlan(DEFAULTS["recompute_mode"])
    assert not layout.fsdp
    validate(model, layout, devices=int(row["gpus"]))
    stages = build_stages(model, layout)
    assert len(stages) == p and {len(stage) for stage in stages} == {layout.vp}
    assert sum(len(chunk) for stage in stages for chunk in stage) == model.n_lay + 2


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_eval_runs_the_default_layout(name, capsys):
    assert main(["eval", "--model", name]) == 0
    assert capsys.readouterr().out.startswith(f"model {name} ")
    assert main(["eval", "--model", name, "--device", "dgx_h100", "--cost", "step-time", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["step_time_s"] > 0 and out["compute_s"] > 0


def test_models_lists_the_bundled_models(capsys):
    assert main(["models", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == set(model_names())
    assert (rows["llama3.1-405b"]["layers"], rows["qwen3-235b-a22b"]["experts"], rows["gpt3-175b"]["seq_len"]) == \
        (126, 128, 2048)


# --------------------------------------------------------------------------- the keys these files need

BASE = """
model:
  config_overrides: {{num_hidden_layers: 4, hidden_size: 1024, num_attention_heads: 8, intermediate_size: 4096,
                     vocab_size: 32000{extra}}}
data: {{max_seq_len: 2048}}
"""


def _file(tmp_path, extra: str = "", name: str = "model.yaml"):
    path = tmp_path / name
    path.write_text(BASE.format(extra=extra))
    return path


def test_unstated_mlp_and_norm_keys_keep_the_gated_rmsnorm_reading(tmp_path):
    model = load_model(_file(tmp_path))
    assert (model.n_ffMM, model.norm_bias) == (3, False)


def test_a_model_file_states_megatrons_accounted_pipeline_split(tmp_path):
    # Four layers with the embedding and the loss counted: six over three stages, two each, one fewer on the first
    # and on the last; beside a stated offset (Megatron-Core refuses a stated split beside them) or as a word, one
    # error naming the key.
    both = ", account_for_embedding_in_pipeline_split: true, account_for_loss_in_pipeline_split: true"
    model = load_model(_file(tmp_path, both))
    assert model.account_for_embedding_in_pipeline_split and model.account_for_loss_in_pipeline_split
    assert chunk_layer_counts(model, dataclasses.replace(model.layout, p=3)) == [[1], [2], [1]]
    assert not load_model(_file(tmp_path, name="plain.yaml")).account_for_loss_in_pipeline_split
    # The command line's flags add to the file's switches, never clear one.
    loss_only = load_model(_file(tmp_path, ", account_for_loss_in_pipeline_split: true", "loss.yaml"))
    flags = argparse.Namespace(account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=False)
    assert accounted(accounted_model(loss_only, flags)) == (True, True)
    with pytest.raises(ModelConfigError, match="model.config_overrides.offset: cannot be given with account_for_"):
        load_model(_file(tmp_path, both + ", offset: [0]", "offset.yaml"))
    with pytest.raises(ModelConfigError, match="account_for_loss_in_pipeline_split: must be true or false, got 3"):
        load_model(_file(tmp_path, ", account_for_loss_in_pipeline_split: 3", "word.yaml"))


def test_gated_linear_unit_and_norm_bias_reach_the_formulas(tmp_path, capsys):
    files = {"gated": ", gated_linear_unit: true", "layernorm": ", norm_bias: true",
             "plain": ", gated_linear_unit: false"}
    models = {stem: load_model(_file(tmp_path, extra, f"{stem}.yaml")) for stem, extra in files.items()}
    assert {stem: (m.n_ffMM, m.norm_bias) for stem, m in models.items()} == \
        {"gated": (3, False), "layernorm": (3, True), "plain": (2, False)}
    out = {}
    for stem in files:
        assert main(["eval", "--model", models[stem].source, "--device", "dgx_h100", "--cost", "step-time",
                     "--json"]) == 0
        out[stem] = json.loads(capsys.readouterr().out)
    # Two matrices instead of three: one h x 4096 projection fewer per layer, forward and backward.
    assert out["plain"]["stage_flops"] < out["gated"]["stage_flops"]
    # LayerNorm's bias: 2·h more parameters per layer (their weights, gradients and optimizer state).
    assert out["layernorm"]["memory"][0]["total_bytes"] > out["gated"]["memory"][0]["total_bytes"]


@pytest.mark.parametrize("key, value", [("gated_linear_unit", "1"), ("gated_linear_unit", "'no'"),
                                        ("norm_bias", "LayerNorm")])
def test_mlp_and_norm_keys_take_true_or_false(tmp_path, capsys, key, value):
    path = _file(tmp_path, f", {key}: {value}")
    with pytest.raises(ModelConfigError, match=re.escape(f"{path}: model.config_overrides.{key}: must be true or "
                                                         f"false, got")) as info:
        load_model(path)
    assert "\n" not in str(info.value)
    code = main(["eval", "--model", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"model.config_overrides.{key}: must be true or false, got" in lines[0]
