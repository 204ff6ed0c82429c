"""Model files, layouts, derived fields and pipeline stages against the reference cases.

The end-to-end cases (``estimate_from_mem_comm`` / ``estimate_comm``) record, in their
inputs, every configuration field the original derived for a model and a layout, and the
pipeline layout it built (``stages``). Each case's layout is read back from the case itself
(degrees from the inputs, ``p`` and ``vp`` from ``stages``, the recompute plan from the layer
kinds); the model comes from a model file. ``derive_fields`` and ``build_stages`` must then
give the recorded fields and stages.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
from collections import Counter
from pathlib import Path

import pytest

from codegen.configs import (ORIGINAL_CP_NETWORK, Layout, LayoutError, ModelConfig, ModelConfigError, RecomputePlan,
                             accounted_split_offset, build_stages, chunk_layer_counts, derive_fields, load_model,
                             model_names, module_list_split_offset, parse_layout, parse_recompute, validate)
from codegen.pricing.stages import stage_counts
from conftest import CASES, ROOT
from symbolic.vocabulary import BODY_KINDS, LayerType

EMBEDDING_LAYER, OUTPUT_LAYER, NOT_REC_LAYER, FULL_REC_LAYER, SEL_REC_LAYER = (kind.value for kind in LayerType)

SHARED_MODELS = ROOT.parent / "shared" / "models"
SHARED_QWEN = SHARED_MODELS / "hyper_qwen3_72b.yaml"
SHARED_DEEPSEEK = SHARED_MODELS / "hyper_deepseek_v3.yaml"

END_TO_END = [c for c in CASES if c.function in ("estimate_from_mem_comm", "estimate_comm")]

# Two synthetic models of the cases, written as HyperParallel files from the cases' own numbers.
MQA_YAML = """
model:
  config_overrides: {num_hidden_layers: 32, hidden_size: 4096, num_attention_heads: 32, num_key_value_heads: 1,
                     head_dim: 128, intermediate_size: 11008, vocab_size: 32000, num_experts: 8,
                     num_experts_per_tok: 2, moe_intermediate_size: 14336}
data: {max_seq_len: 8192}
train:
  mixed_precision: {enabled: true, param_dtype: bfloat16, reduce_dtype: float32}
"""
LINREC_YAML = """
model:
  config_overrides: {num_hidden_layers: 24, hidden_size: 2048, num_attention_heads: 16, num_key_value_heads: 4,
                     head_dim: 128, intermediate_size: 6144, vocab_size: 151936}
data: {max_seq_len: 65536}
train:
  mixed_precision: {enabled: true, param_dtype: bfloat16, reduce_dtype: float32}
"""


@pytest.fixture(scope="module")
def case_models(tmp_path_factory) -> dict[str, ModelConfig]:
    """The model of each case label: bundled files, the shared DeepSeek demo file, two synthetic files."""
    folder = tmp_path_factory.mktemp("models")
    (folder / "mqa_1kv.yaml").write_text(MQA_YAML)
    (folder / "linrec_gqa.yaml").write_text(LINREC_YAML)
    models = {
        "gqa_qwen3_72b": load_model("qwen3-72b"),
        "mha_llama7b": load_model("llama2-7b"),
        "mqa_1kv": load_model(folder / "mqa_1kv.yaml"),
        # A linear-attention layer has no YAML key; the cases' model states n_linrec = 1.
        "linrec_gqa": dataclasses.replace(load_model(folder / "linrec_gqa.yaml"), n_linrec=1),
    }
    if SHARED_DEEPSEEK.exists():
        # The cases use the demo's vocabulary (159744), which the demo file states.
        models["mla_deepseek_v3"] = load_model(SHARED_DEEPSEEK)
    return models


def _sibling_d(case) -> int:
    """DP of a case that does not read it: that of a case with the same model and pipeline which does."""
    key = _pipeline_key(case)
    for other in END_TO_END:
        if "d" in other.inputs and _pipeline_key(other) == key:
            return int(other.inputs["d"])
    raise AssertionError(f"{case.id}: no case with the same layout states d")


def _pipeline_key(case) -> tuple:
    i = case.inputs
    return (i["model"], len(i["stages"]), len(i["stages"][0]), i["t"], i["cp"], i.get("ep", 1.0))


def _recompute_from_stages(stages) -> RecomputePlan:
    """The plan a case's layer kinds show: one kind everywhere, or fully recomputed layers per stage."""
    kinds = {kind for stage in stages for chunk in stage for kind in chunk if kind in BODY_KINDS}
    if kinds == {FULL_REC_LAYER}:
        return RecomputePlan("full")
    if kinds == {SEL_REC_LAYER}:
        return RecomputePlan("selective")
    if kinds == {NOT_REC_LAYER}:
        return RecomputePlan("none")
    assert kinds == {FULL_REC_LAYER, NOT_REC_LAYER}, kinds
    return RecomputePlan("none", tuple(sum(chunk.count(FULL_REC_LAYER) for chunk in stage) for stage in stages))


def _case_layout(case, model: ModelConfig) -> Layout:
    i = case.inputs
    t, cp = int(i["t"]), int(i["cp"])
    os = None
    if "shard_p_os_non_exp_partial" in i:  # R·t·cp: the optimizer's ranks R are part of the layout
        os = int(i["shard_p_os_non_exp_partial"]) // (t * cp)
    return Layout(
        d=int(i["d"]) if "d" in i else _sibling_d(case), t=t, p=len(i["stages"]), vp=len(i["stages"][0]),
        m=int(i.get("m", model.layout.m)), cp=cp, ep=int(i.get("ep", 1)), b=int(i["b"]), etp=int(i.get("etp", 1)),
        os=os, sp=True, fsdp=bool(i.get("grad_shard_as_params", False)), reshards=bool(i.get("reshards", True)),
        cp_algo=i.get("cp_algo", "colossalai_cp"), s=int(i["s"]), recompute=_recompute_from_stages(i["stages"]),
    )


def _model_for(case, case_models) -> ModelConfig:
    label = case.inputs["model"]
    if label not in case_models:
        pytest.skip(f"the model file of {label} ({SHARED_DEEPSEEK}) is not beside this checkout")
    return case_models[label]


# Inputs that are no field of a model or a layout: the call's own arguments and labels.
_CALL_INPUTS = {"model", "stages", "mode", "ttype", "device", "with_recomp", "fsdp", "tokens_per_expert"}


def _same(got, want) -> bool:
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(_same(got[k], want[k]) for k in want)
    if isinstance(want, str):
        return got == want
    return math.isclose(float(got), float(want), rel_tol=1e-12, abs_tol=0.0)


@pytest.mark.parametrize("case", END_TO_END, ids=[c.id for c in END_TO_END])
def test_build_stages_reproduces_the_case_layout(case, case_models):
    model = _model_for(case, case_models)
    layout = _case_layout(case, model)
    assert build_stages(model, layout) == case.inputs["stages"]


@pytest.mark.parametrize("case", END_TO_END, ids=[c.id for c in END_TO_END])
def test_derive_fields_reproduces_the_case_inputs(case, case_models):
    model = _model_for(case, case_models)
    derived = derive_fields(model, _case_layout(case, model))
    compared = set(case.inputs) - _CALL_INPUTS
    # The original leaves MLA's qk_nope_head_dim unset (0), which the formulas read as dh;
    # the model files state it, and it equals dh, so either reading prices the same.
    if case.inputs.get("qk_nope_head_dim") == 0:
        compared.discard("qk_nope_head_dim")
        assert derived["qk_nope_head_dim"] in (0, derived["dh"])
    missing = sorted(compared - derived.keys())
    assert not missing, f"derive_fields gives no {missing}"
    wrong = {k: (derived[k], case.inputs[k]) for k in sorted(compared) if not _same(derived[k], case.inputs[k])}
    assert not wrong, f"(derived, case) differ: {wrong}"


def test_every_end_to_end_case_is_covered():
    """Each case's model is one of the files above: no case silently falls out of the two tests."""
    assert {c.inputs["model"] for c in END_TO_END} == {"gqa_qwen3_72b", "mla_deepseek_v3", "mha_llama7b",
                                                       "mqa_1kv", "linrec_gqa"}
    assert len(END_TO_END) >= 100


# --------------------------------------------------------------------------- expert and shard fields

FSDP_PARTS = [c for c in CASES if c.function == "EvalLayerComm.fsdp_layer_parts"]
_SHARD_FIELDS = ("t_exp", "d_exp", "shard_p_os_non_exp_partial", "shard_p_os_exp", "shard_p_os_exp_partial")


@pytest.mark.parametrize("case", FSDP_PARTS, ids=[c.id for c in FSDP_PARTS])
def test_expert_degrees_and_shards_of_the_fsdp_part_cases(case):
    """``fsdp_layer_parts`` cases hold the expert degrees and shards of 14 more layouts."""
    i = case.inputs
    d, t, cp, ep = (int(i[k]) for k in ("d", "t", "cp", "ep"))
    ranks = int(i["shard_p_os_non_exp_partial"]) // (t * cp)
    n_exp = int(i["n_exp"])
    model = ModelConfig(
        name="case", source=case.id, s=4096, h=int(i["h"]), a=int(i["a"]), n_kv=int(i["n_kv"]), dh=i["dh"],
        hff=int(i.get("hff", i.get("hff_exp"))), v=32000, n_lay=4, n_exp=n_exp,
        hff_exp=int(i.get("hff_exp", i.get("hff"))), n_shared_exp=int(i["n_shared_exp"]),
        n_chosen_exp=2 if n_exp > 1 else 1, dc_kv=int(i["dc_kv"]),
        layout=Layout(d=d, t=t, p=1, m=1, cp=cp, ep=ep),
    )
    # One optimizer rank with d > 1 is how these cases turn optimizer sharding off.
    layout = Layout(d=d, t=t, p=1, m=1, cp=cp, ep=ep, etp=int(i.get("etp", 1)), os=ranks,
                    op=not (ranks == 1 and d > 1), fsdp=True)
    if ep > n_exp:
        # More EP ranks than experts: the original's own search refuses it (moe_valid, C1).
        with pytest.raises(LayoutError, match=f"ep must divide the routed experts n_exp: n_exp = {n_exp}, ep = {ep}"):
            derive_fields(model, layout)
        return
    derived = derive_fields(model, layout)
    assert {k: derived[k] for k in _SHARD_FIELDS} == {k: float(i[k]) for k in _SHARD_FIELDS}


# --------------------------------------------------------------------------- stage counts


def test_stage_counts_split_body_layers_from_mtp():
    model = load_model("deepseek-v3")
    stages = build_stages(model, model.layout)
    counts = {name: c.tolist() for name, c in stage_counts(stages, model.n_lay).items()}
    assert counts["n_embedding"] == [1] + [0] * 15
    assert counts["n_output"] == [0] * 15 + [1]
    assert sum(counts["n_body"]) == model.n_lay
    # The one MTP layer is the last body layer in model order: the last stage's last (fully recomputed).
    assert counts["n_extra"] == [0] * 15 + [1] and counts["n_extra_sel"] == [0] * 16
    body = [b + x + xs for b, x, xs in zip(counts["n_body"], counts["n_extra"], counts["n_extra_sel"])]
    assert body == [4] * 14 + [3, 3]


def test_stage_counts_number_layers_chunk_major():
    """With two chunks, model order runs through every stage's chunk 0 before any chunk 1."""
    stages = [[[EMBEDDING_LAYER] + [SEL_REC_LAYER] * 20, [SEL_REC_LAYER] * 20],
              [[SEL_REC_LAYER] * 20, [SEL_REC_LAYER] * 20 + [OUTPUT_LAYER]]]
    # 50 layers with an entry: stage 0 chunk 0 (20), stage 1 chunk 0 (20), then 10 of stage 0 chunk 1.
    counts = stage_counts(stages, 50)
    assert counts["n_body"].tolist() == [30, 20]
    assert counts["n_extra_sel"].tolist() == [10, 20]
    assert counts["n_sel_rec"].tolist() == [40, 40]
    with pytest.raises(ValueError, match="unknown layer type 'LAYER'"):
        stage_counts([[["LAYER"]]], 1)


def test_full_rec_list_recomputes_the_first_layers_of_each_stage():
    model = load_model("qwen3-72b")
    stages = build_stages(model, model.layout)
    for stage, full in zip(stages, (8, 6, 6, 6, 4, 4, 2, 2)):
        body = [kind for kind in stage[0] if kind in BODY_KINDS]
        assert body == [FULL_REC_LAYER] * full + [NOT_REC_LAYER] * (10 - full)


def test_offsets_place_layers_beyond_the_even_split():
    if not SHARED_DEEPSEEK.exists():
        pytest.skip("the shared DeepSeek demo file is not beside this checkout")
    model = load_model(SHARED_DEEPSEEK)
    # 62 layers, 3 a stage, plus the demo's offset [1]*15 + [-1].
    assert chunk_layer_counts(model, model.layout) == [[4]] * 15 + [[2]]
    # Two chunks of 8 stages: 62 // 16 = 3 a slot, offsets per chunk, then per stage.
    two_chunks = dataclasses.replace(model.layout, p=8, vp=2, offset=((1,) * 8, (1,) * 6 + (0, 0)))
    assert chunk_layer_counts(model, two_chunks) == [[4, 4]] * 6 + [[4, 3]] * 2
    with pytest.raises(LayoutError, match="offset places 64 layers, but the model has n_lay \\+ n_mtp = 61 \\+ 1 = 62"):
        chunk_layer_counts(model, dataclasses.replace(model.layout, offset=(1,) * 16))


def _megatron_layers_to_build(n_lay: int, p: int, vp: int, stage: int, chunk: int, embedding: bool,
                              loss: bool) -> int:
    """Decoder layers Megatron-Core builds on (stage, chunk), restated from its get_num_layers_to_build
    (megatron/core/transformer/transformer_block.py at NVIDIA/Megatron-LM@d98e8a6) for these two settings."""
    per_rank = (n_lay + embedding + loss) // p
    build = per_rank // vp
    build -= embedding and stage == 0 and chunk == 0
    build -= loss and stage == p - 1 and chunk == vp - 1
    return build


@pytest.mark.parametrize("p, vp, embedding, loss", [(16, 8, True, True), (8, 2, True, True), (8, 8, True, True),
                                                    (16, 1, True, True), (2, 1, True, True), (127, 1, True, False),
                                                    (127, 1, False, True)])
def test_the_accounted_split_builds_what_megatron_builds(p, vp, embedding, loss):
    # Llama 3.1 405B (126 layers): Megatron-Bridge's llama31_405b_pretrain_config sets both settings at PP 8 x VP 2.
    model = load_model("llama3.1-405b")
    offset = accounted_split_offset(126, 0, p, vp, embedding, loss)
    counts = chunk_layer_counts(model, dataclasses.replace(model.layout, p=p, vp=vp, offset=offset))
    assert counts == [[_megatron_layers_to_build(126, p, vp, s, c, embedding, loss) for c in range(vp)]
                      for s in range(p)]
    if (p, vp) == (16, 8):  # the layout the even split refuses: 128 chunks for 126 layers
        assert counts[0][0] == counts[-1][-1] == 0 and sum(map(sum, counts)) == 126


def test_the_accounted_split_puts_mtp_on_the_last_chunk_and_names_what_does_not_divide():
    model = load_model("deepseek-v3")  # 61 decoder layers and one MTP layer
    counts = chunk_layer_counts(model, dataclasses.replace(
        model.layout, p=2, vp=1, offset=accounted_split_offset(61, 1, 2, 1, False, True)))
    assert counts == [[31], [30 + 1]]
    with pytest.raises(LayoutError, match="61 layers \\+ the embedding \\+ the loss = 63 do not divide over p = 16"):
        accounted_split_offset(61, 1, 16, 1, True, True)
    with pytest.raises(LayoutError, match="16 layers a stage .* do not divide over vp = 3"):
        accounted_split_offset(126, 0, 8, 3, True, True)


def _module_list_layers(n_lay: int, p: int) -> list[int]:
    """Decoder layers per stage when a list [embedding, n_lay layers, final norm, head] is cut as Aleph Alpha's
    Scaling cuts it (pipe_partition_uniform): boundaries every len // p items, then each boundary after the i-th
    pushed one item on for i below the remainder, so the first stages take the extra items."""
    items = ["embedding"] + ["layer"] * n_lay + ["norm", "head"]
    share = len(items) // p
    bounds = [share * i for i in range(p + 1)]
    for i in range(len(items) - share * p):
        bounds[i + 1:] = [x + 1 for x in bounds[i + 1:]]
    return [items[bounds[i]:bounds[i + 1]].count("layer") for i in range(p)]


@pytest.mark.parametrize("n_lay", [40, 60, 80, 126])
@pytest.mark.parametrize("p", [2, 3, 4, 8, 16])
def test_the_module_list_split_builds_what_scaling_builds(n_lay, p):
    model = dataclasses.replace(load_model("llama3-8b"), n_lay=n_lay)
    offset = module_list_split_offset(n_lay, p)
    counts = chunk_layer_counts(model, dataclasses.replace(model.layout, p=p, vp=1, offset=offset))
    assert [c[0] for c in counts] == _module_list_layers(n_lay, p)


def test_the_module_list_split_of_llama_13b_and_what_it_cannot_split():
    # 43 modules over 2 stages: 22 and 21, the embedding in the first and the norm and head in the last
    assert module_list_split_offset(40, 2) == (1, -1)
    # 7 modules over 6 stages: the last stage's one module cannot hold the norm and the head
    with pytest.raises(LayoutError, match="p = 6 stages leave a stage -1 layers"):
        module_list_split_offset(4, 6)


# --------------------------------------------------------------------------- layouts


def test_parse_layout_over_model_defaults():
    model = load_model("qwen3-72b")
    same = parse_layout("", model.layout)
    assert same == model.layout
    layout = parse_layout("d=16, t=8, p=4, cp=2, m=64, cp_algo=ulysses_cp", model.layout, fsdp=True)
    assert (layout.d, layout.t, layout.p, layout.cp, layout.m, layout.cp_algo, layout.fsdp) == \
        (16, 8, 4, 2, 64, "ulysses_cp", True)
    # A new pipeline depth drops the file's per-stage list: its plan's mode is full recompute.
    assert layout.recompute == RecomputePlan("full")
    assert parse_layout("d=32,t=4,p=8,m=144", recompute="none").recompute == RecomputePlan("none")
    assert parse_recompute("2, 0,1") == RecomputePlan("none", (2, 0, 1))
    # The file's optimizer shard of 8 cannot split d = 4: the inherited value gives way, a stated one does not.
    assert parse_layout("d=4", model.layout).os is None
    assert parse_layout("d=64", model.layout).os == 8
    assert parse_layout("d=8,t=1,p=1,m=1").devices == 8


@pytest.mark.parametrize("text, message", [
    ("d=32,t=4,p=8,m=1,x=2", "layout key 'x' is unknown; known keys: d, t, p"),
    ("d=32,t=4.5,p=8,m=1", "layout t: expected a whole number, got '4.5'"),
    ("d=32,t=four,p=8,m=1", "layout t: expected a whole number, got 'four'"),
    ("d=32,t=0,p=8,m=1", "layout t: must be a whole number >= 1, got 0"),
    ("d=32,t=-2,p=8,m=1", "layout t: must be a whole number >= 1, got -2"),
    ("d=32,d=16,t=4,p=8,m=1", "layout key 'd' is given twice"),
    ("d=32,t,p=8,m=1", "layout item 't': expected key=value"),
    ("d=32,t=4,p=8", "lacks m"),
    ("d=32,t=4,p=8,m=1,sp=2", "layout sp: expected 0 or 1, got '2'"),
    ("d=32,t=4,p=8,m=1,cp_algo=ring_v2", "cp_algo: unknown CP algorithm 'ring_v2'; expected one of colossalai_cp, hybrid_cp, ulysses_cp, hybird_cp, colossalai, ring, hybrid, ulysses"),
])
def test_parse_layout_errors_name_key_and_value(text, message):
    with pytest.raises(LayoutError, match=re.escape(message)):
        parse_layout(text)


@pytest.mark.parametrize("text", ["fully", "8,x", "", "8,-1"])
def test_parse_recompute_errors(text):
    with pytest.raises(LayoutError, match="--recompute: expected none, selective, full"):
        parse_recompute(text)


GQA_48 = ModelConfig(name="gqa48", source="test", s=4096, h=6144, a=48, n_kv=12, dh=128, hff=16384, v=32000,
                     n_lay=8, layout=Layout(d=1, t=1, p=1, m=1))


@pytest.mark.parametrize("model_name, layout_text, devices, message", [
    ("qwen3-72b", "d=32,t=4,p=8,m=144", 512, "d·t·cp·p must equal the device count: 32·4·1·8 = 1024, devices = 512"),
    ("qwen3-72b", "d=32,t=3,p=8,m=144", None, "t must divide the attention heads a: a = 64, t = 3"),
    ("gqa48", "d=1,t=8,p=1,m=1", None, "t must divide the KV heads n_kv (or n_kv divide t, KV heads replicated): "
                                       "n_kv = 12, t = 8"),
    ("qwen3-72b", "d=32,t=4,p=8,m=144,cp=3", None, "cp must divide the sequence length s: s = 4096, cp = 3"),
    ("qwen3-72b", "d=8,t=16,p=4,m=32,cp=8,cp_algo=ulysses_cp", None,
     "Ulysses CP splits each TP rank's heads: cp must divide a/t = 64/16 = 4, cp = 8"),
    ("llama2-7b", "d=1,t=1,p=64,m=64", None, "p·vp <= n_lay + n_mtp: 64·1 = 64 pipeline chunks for 32 layers"),
    ("llama2-7b", "d=4,t=2,p=1,vp=2,m=8", None, "vp > 1 (virtual pipeline chunks) needs p > 1: vp = 2, p = 1"),
    ("llama2-7b", "d=4,t=2,p=2,ep=2,m=8", None, "ep must be 1 for a dense model (n_exp = 1), got ep = 2"),
    ("deepseek-v3", "d=16,t=4,p=16,ep=3,m=32", None, "ep must divide the routed experts n_exp: n_exp = 256, ep = 3"),
    ("deepseek-v3", "d=2,t=2,p=16,ep=8,m=32", None, "ep <= d·t: the experts spread over a stage's DP×TP ranks; "
                                                     "ep = 8, d·t = 2·2 = 4"),
    ("deepseek-v3", "d=12,t=4,p=16,ep=8,m=32", None, "ep must divide d (expert DP = d/ep while ep <= d): d = 12, ep = 8"),
    ("deepseek-v3", "d=12,t=2,p=16,ep=16,m=32", None,
     "ep must divide d·t (expert DP = d·t/ep once ep > d): d·t = 24, ep = 16"),
    ("deepseek-v3", "d=16,t=4,p=16,ep=8,etp=3,m=32", None,
     "etp·ep must divide d·t·cp (expert DP = d·t·cp/(etp·ep)): etp = 3, ep = 8, d·t·cp = 64"),
    ("qwen3-72b", "d=32,t=4,p=8,m=144,os=7", None, "os (optimizer shard ranks) must divide d: d = 32, os = 7"),
])
def test_invalid_layouts_name_the_constraint(model_name, layout_text, devices, message):
    model = GQA_48 if model_name == "gqa48" else load_model(model_name)
    layout = parse_layout(layout_text, model.layout)
    with pytest.raises(LayoutError, match=re.escape(message)):
        validate(model, layout, devices)
    with pytest.raises(LayoutError, match=re.escape(message)) if devices is None else contextlib.nullcontext():
        derive_fields(model, layout)


def test_recompute_list_must_fit_the_stages():
    model = load_model("qwen3-72b")
    with pytest.raises(LayoutError, match=re.escape("the recompute list needs one entry per stage: 2 entries [1, 2], p = 8")):
        build_stages(model, parse_layout("", model.layout, recompute="1,2"))
    with pytest.raises(LayoutError, match=re.escape("recompute: stage 0 holds 10 layers, cannot fully recompute 11")):
        build_stages(model, parse_layout("", model.layout, recompute="11,0,0,0,0,0,0,0"))


def test_validate_accepts_the_device_count():
    model = load_model("qwen3-72b")
    validate(model, model.layout, devices=1024)


def test_cp_network_defaults_and_device_bindings():
    import hardware

    model = load_model("qwen3-72b")
    layout = parse_layout("d=16,t=8,p=4,cp=2,m=64", model.layout)
    fields = derive_fields(model, layout)
    assert {k: fields[k] for k in ORIGINAL_CP_NETWORK} == dict(ORIGINAL_CP_NETWORK)
    a3 = hardware.load("A3")
    bound = derive_fields(model, layout, network=a3)
    for key in ("device_per_node", "bw_intra", "bw_inter", "device_intra_node_num"):
        assert bound[key] == float(a3.bindings()[key])


def test_comm_levels_follow_optimizer_and_gradient_sharding():
    model = load_model("deepseek-v3")
    assert derive_fields(model, parse_layout("grad_shard=1", model.layout))["comm_d_non_exp"] == 3.0
    off = derive_fields(model, parse_layout("op=0", model.layout))
    assert (off["comm_d_non_exp"], off["comm_d_exp"], off["shard_p_os_non_exp_partial"]) == (0.0, 0.0, 4.0)
    # Past DP, EP borrows TP's ranks and the experts run without TP.
    wide = derive_fields(model, parse_layout("d=8,t=8,p=8,cp=2,ep=16,m=16", model.layout))
    assert (wide["t_exp"], wide["d_exp"]) == (1.0, 4.0)


# --------------------------------------------------------------------------- model files


def test_bundled_models_load_and_build():
    assert set(model_names()) >= {"qwen3-72b", "deepseek-v3", "llama2-7b"}
    for name in model_names():
        model = load_model(name)
        assert model.name == name
        stages = build_stages(model, model.layout)
        assert sum(len(chunk) for stage in stages for chunk in stage) == model.n_lay + model.n_mtp + 2


def test_bundled_architectures():
    qwen = load_model("qwen3-72b")
    assert (qwen.n_lay, qwen.h, qwen.a, qwen.n_kv, qwen.dh, qwen.hff, qwen.v, qwen.qkv_bias, qwen.o_bias) == \
        (80, 8192, 64, 8, 128, 29696, 152064, True, False)
    ds = load_model("deepseek-v3")
    assert (ds.n_lay, ds.first_k_dense, ds.h, ds.a, ds.dc_kv, ds.dc_q, ds.dhr, ds.qk_nope_head_dim, ds.dh) == \
        (61, 3, 7168, 128, 512, 1536, 64, 128, 128)
    assert (ds.n_exp, ds.n_shared_exp, ds.n_chosen_exp, ds.hff_exp, ds.hff, ds.v, ds.n_mtp) == \
        (256, 1, 8, 2048, 18432, 129280, 1)
    llama = load_model("llama2-7b")
    assert (llama.n_lay, llama.h, llama.a, llama.n_kv, llama.hff, llama.v, llama.s) == (32, 4096, 32, 32, 11008, 32000, 4096)
    assert (llama.bytes_compute, llama.bytes_p, llama.bytes_grad, llama.bytes_norm) == (2, 2, 4, 4)


@pytest.mark.skipif(not SHARED_QWEN.exists(), reason="the shared model files are not beside this checkout")
def test_shared_demo_files_load():
    qwen = load_model(SHARED_QWEN)
    assert (qwen.n_lay, qwen.v, qwen.layout.d, qwen.layout.t, qwen.layout.p, qwen.layout.m, qwen.layout.os) == \
        (80, 152064, 32, 4, 8, 144, 8)
    assert qwen.layout.recompute == RecomputePlan("full", (8, 6, 6, 6, 4, 4, 2, 2))
    ds = load_model(SHARED_DEEPSEEK)
    assert (ds.n_lay, ds.n_mtp, ds.v, ds.layout.d, ds.layout.ep, ds.layout.p, ds.layout.m, ds.cap_fact) == \
        (61, 1, 159744, 16, 8, 16, 32, 1.5)
    assert ds.layout.recompute == RecomputePlan("full")
    # The bundled files state the same architectures, apart from what the demos leave out or pad:
    # the demo Qwen file does not state its Q/K/V biases, the demo DeepSeek pads the vocabulary and
    # states a capacity factor.
    assert _arch(qwen, "qkv_bias") == _arch(load_model("qwen3-72b"), "qkv_bias")
    assert _arch(ds, "v", "cap_fact") == _arch(load_model("deepseek-v3"), "v", "cap_fact")


def _arch(model: ModelConfig, *skip: str) -> dict[str, float]:
    return {k: v for k, v in model.fields().items() if k not in skip}


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "model.yaml"
    path.write_text(text)
    return path


GOOD = """
model:
  config_overrides: {num_hidden_layers: 4, hidden_size: 1024, num_attention_heads: 8, intermediate_size: 2816,
                     vocab_size: 32000}
data: {max_seq_len: 2048}
"""


@pytest.mark.parametrize("text, message", [
    ("model: [", "malformed YAML"),
    # PyYAML draws the line under its message; the error keeps to one line with the place 1-based.
    ("model:\n  a: [1, 2\n", "malformed YAML: line 3, column 1: while parsing a flow sequence; expected ',' or ']'"),
    ("model:\n  a: b: c\n", "malformed YAML: line 2, column 7: mapping values are not allowed here"),
    ("- 1\n- 2\n", "the file must hold a mapping with a 'model' section, got list"),
    ("data: {max_seq_len: 4}\n", "model: required section is missing"),
    (GOOD.replace("hidden_size: 1024, ", ""), "model.config_overrides.hidden_size: required key is missing"),
    (GOOD.replace("hidden_size: 1024", "hidden_size: 0"), "model.config_overrides.hidden_size: must be a whole number >= 1, got 0"),
    (GOOD.replace("hidden_size: 1024", "hidden_size: 10.5"),
     "model.config_overrides.hidden_size: must be a whole number, got 10.5"),
    (GOOD.replace("vocab_size: 32000", "vocab_size: 32000, bad-key: 1"),
     "model.config_overrides.bad-key: keys must be identifiers"),
    (GOOD.replace("data: {max_seq_len: 2048}", "data: {}"), "data.max_seq_len: required key is missing"),
    (GOOD + "train: {accelerator: {tp_degre: 2}}\n", "train.accelerator.tp_degre: unknown key; known: "),
    (GOOD + "train: {accelerator: {tp_degree: 3}}\n", "the file's own layout (d=1,t=3,p=1"),
    (GOOD + "train: {mixed_precision: {enabled: true, param_dtype: int4}}\n",
     "train.mixed_precision.param_dtype: unknown dtype 'int4'"),
    (GOOD.replace("vocab_size: 32000", "vocab_size: 32000, full_rec: [1, 2]")
     + "train: {accelerator: {pipeline_parallel_degree: 4}}\n",
     "the recompute list needs one entry per stage: 2 entries [1, 2], p = 4"),
])
def test_model_file_errors_name_file_and_key(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(ModelConfigError, match=re.escape(str(path))) as info:
        load_model(path)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_unknown_model_name_lists_the_bundled_ones():
    with pytest.raises(ModelConfigError, match="unknown model 'gpt-5'; bundled models: deepseek-v3"):
        load_model("gpt-5")


def test_minimal_file_defaults(tmp_path):
    model = load_model(_write(tmp_path, GOOD))
    assert (model.n_kv, model.dh, model.n_exp, model.hff_exp, model.s) == (8, 128.0, 1, 2816, 2048)
    assert model.layout == Layout(d=1, t=1, p=1, m=1)
    # Unset byte widths: parameters in float32 (param_init_type), gradients float32, compute bfloat16.
    assert (model.bytes_p, model.bytes_grad, model.bytes_compute) == (4.0, 4.0, 2.0)
    assert Counter(k for s in build_stages(model, model.layout) for c in s for k in c) == \
        Counter({NOT_REC_LAYER: 4, EMBEDDING_LAYER: 1, OUTPUT_LAYER: 1})


# --------------------------------------------------------------------------- end to end


def _one_per_model_and_fsdp() -> list:
    """The first case of each model with and without FSDP: the scalar walk is slow (~0.3 s a case)."""
    chosen: dict[tuple, object] = {}
    for case in END_TO_END:
        chosen.setdefault((case.inputs["model"], bool(case.inputs.get("grad_shard_as_params"))), case)
    return list(chosen.values())


WALKED = _one_per_model_and_fsdp()


@pytest.mark.parametrize("case", WALKED, ids=[c.id for c in WALKED])
def test_case_output_from_model_file_and_layout(case, case_models):
    """The whole stage walk from a model file and a layout alone: fields and stages feed the walk."""
    from codegen.reference.cases import RTOL, worst_error
    from walk import walk

    model = _model_for(case, case_models)
    layout = _case_layout(case, model)
    inputs = {**derive_fields(model, layout), "stages": build_stages(model, layout)}
    inputs.update({k: case.inputs[k] for k in ("device", "mode", "ttype", "with_recomp") if k in case.inputs})
    out = walk(inputs)
    got = out["totals"] if case.function == "estimate_comm" else out
    err, where = worst_error(got, case.output)
    assert err <= RTOL, f"{case.id}{where}: relative error {err:.3g}"


def test_a_layout_prints_every_degree_it_was_given():
    """``str(layout)`` (eval's and sensitivity's "layout") shows every degree and an overridden sequence length: two
    layouts that price differently never print alike, and the text parses back to the same degrees (the bundled
    Mixtral 8x22B's own layout interleaves, vp 14: a vp = 1 left out would read back as 14)."""
    model = load_model("mixtral-8x22b")
    one, two = (parse_layout(f"d=16,t=2,p=4,cp=1,vp=1,ep=8,etp={etp},m=32,b=1,s=8192", model.layout) for etp in (1, 2))
    assert str(one) == "d=16,t=2,p=4,cp=1,ep=8,m=32,b=1,vp=1,etp=1,s=8192"
    assert str(two) == "d=16,t=2,p=4,cp=1,ep=8,m=32,b=1,vp=1,etp=2,s=8192"
    again = parse_layout(str(two), model.layout)
    assert (again.etp, again.s, again.vp, again.cp) == (2, 8192, 1, 1)
