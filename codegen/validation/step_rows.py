"""Step time against measured training steps given layout by layout (the NeMo / sweep table format).

The format of ``data/nemo_step_times.csv`` (NVIDIA's published NeMo / Megatron-Bridge throughput of
today's models on DGX H100 and DGX B200) and ``data/layout_sweeps.csv`` (Hagemann et al. 2023: LLaMA 13B
on 32 and 64 A100, 90 layouts). One row is one run:

* the model from its architecture columns: ``layers, hidden, ffn_hidden, heads, kv_heads`` (blank: the
  heads), ``head_dim`` (blank: hidden / heads), ``vocab``; for a MoE model (``is_moe`` yes, or
  ``experts`` > 1) ``experts, top_k, moe_ffn_hidden`` (blank: ``ffn_hidden``), ``shared_experts``
  (blank: 0). What the columns cannot say (a gated MLP or not, biases, the norm, tied embeddings, QK
  norms; MLA's latent ranks, leading dense layers, multi-token prediction, sliding windows) comes from
  :data:`FAMILIES`, keyed by the ``model_family`` column, each entry citing its source; an entry may say the
  project cannot price the family yet;
* the layout from ``tp, pp, cp, vp, ep, etp, fsdp, dp, global_batch, micro_batch, seq_len`` (a blank
  degree is 1; a blank ``fsdp`` is 0; ``dp``, when given, must equal ``gpus / (tp·pp·cp)``);
* the system from ``system``, a catalog name (``hardware.load``), or ``--system`` for every row;
* the precision from ``precision`` (:data:`PRECISIONS`): BF16 → bf16, FP8 → fp8 (Transformer Engine's
  delayed scaling), FP8-CS → fp8-cs (current scaling), MXFP8 and FP8-MX → mxfp8, NVFP4 → nvfp4;
* the run settings from ``recompute_mode`` (none, selective, full), ``recompute_modules`` (Megatron-Core's
  modules recomputed inside every layer not fully recomputed, ``layernorm;moe_act``), ``sequence_parallel`` and
  ``flash_attention``, ``account_for_embedding_in_pipeline_split`` and ``account_for_loss_in_pipeline_split``
  (Megatron-Core's pipeline split, :data:`RECIPE_ACCOUNTED_SPLIT` where blank) where the file has them; a row
  that leaves one out takes NeMo's recipe default
  (:data:`DEFAULTS`): recompute none, the recipe's modules (:data:`RECIPE_RECOMPUTE_MODULES`, else none),
  sequence parallel on when ``tp > 1``, FlashAttention on; a row of another framework (its ``framework`` cell,
  :data:`FRAMEWORKS`' names or ``megatron``, or where blank the repository its ``source`` names: Hagemann et al.'s
  sheets ran on Aleph Alpha's Scaling, ``scaling``) takes that framework's overlap, pipeline split and gradient
  accumulation width; and, in
  every row, dropout off and Megatron's distributed optimizer (ZeRO level 1), or ZeRO level 3 where
  ``fsdp`` shards over the whole data-parallel group;
* the measured step time ``measured_step_s`` (seconds), and optionally the ``sweep`` it belongs to and its
  ``source`` (where the figure was published; its repository names the framework, above).

Memory (:func:`memory_rows`): each row's memory per rank with the memory settings of NVIDIA's performance
recipes that no column states (:data:`RECIPE_MEMORY`: BF16 gradients; the distributed optimizer over the
data- and context-parallel ranks), the row's precision (Transformer Engine's quantized saved inputs and weight
copies in a low-precision row) and the recipe's recompute where the row leaves it out
(:data:`RECIPE_RECOMPUTE`, :data:`RECIPE_RECOMPUTE_MODULES`), against the GPU's HBM less the default reserve; the
rows ran, so each should fit (docs/memory.md, "Published layouts"). The step time is priced with ``DEFAULTS`` as before.

A cell the reader does not know (a word, a number out of its bounds, an unknown family or system) is one
error naming the file, line, column and value (``codegen.validation.csvfile``, through the input gate
``codegen.runtime.inputs``). A row the model cannot price — a family the project does not model yet, a
layout the layout rules of ``symcost eval`` refuse, a precision its GPU lacks — is kept with its
``reason`` and no prediction.

Sweeps: rows with the same ``sweep`` form one; :func:`sweep_stats` gives the Spearman rank correlation of
predicted against measured step time (average ranks on ties) and the regret of picking the layout the
model ranks first (its measured time over the fastest measured, minus 1).

Public API::

    FAMILIES, PRECISIONS, DEFAULTS, REQUIRED, RECIPE_MEMORY, RECIPE_RECOMPUTE, RECIPE_RECOMPUTE_MODULES, RECIPE_OVERLAP,
    RECIPE_EP_DISPATCHER, RECIPE_ACCOUNTED_SPLIT, FRAMEWORKS
    is_step_rows_table(table) -> bool
    read_rows(table, system=None) -> list[dict]            # every row's cells read through the gate
    model_and_layout(row, name, source) -> (ModelConfig, Layout, ZeRO level)   # a row read by read_rows
    step_rows(table, system=None) -> list[dict]
    recipe_recompute(row, p) -> (RecomputePlan, source)
    row_framework(row) -> Framework | None              # the framework other than NeMo the row ran on (by its source)
    recipe_overlap(row) -> (overlap names, source)      # the row's cell, its recipe's, its framework's, or DEFAULTS
    recipe_modules(row) -> (module names, source)       # the row's recompute_modules cell, its recipe's, or none
    recipe_dispatcher(row) -> (dispatcher, source)      # the row's ep_dispatcher cell, its recipe's, or alltoall
    row_memory(row, name, source, settings=DEFAULT_SETTINGS) -> dict   # memory per rank with the recipe's settings
    memory_rows(table, system=None, settings=DEFAULT_SETTINGS) -> list[dict]
    spearman(x, y) -> float;  regret(predicted, measured) -> float
    sweep_stats(rows) -> list[dict];  group_stats(rows) -> list[dict]
    print_report(path, rows) -> None   # the table, the groups, the sweeps, then one JSON line
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

import numpy as np

import hardware
from symbolic.vocabulary import DEFAULT_EP_DISPATCHER, DEFAULT_OVERLAP, EP_DISPATCHERS, SEARCH_KEYS

from ..configs import Layout, LayoutError, ModelConfig, RecomputePlan, module_list_split_offset, validate
from ..pricing.chunks import Chunk, Setting
from ..pricing.memory import DEFAULT_SETTINGS, MemorySettings, stage_memory
from ..pricing.exposure import overlap_names
from ..pricing.recompute import recompute_modules
from ..pricing.step_time import StepTimePricer, time_family_comm
from ..runtime.inputs import COUNT_MAX, DEGREE_MAX, DEVICES_MAX, LAYERS_MAX, InputError, finite, flag, one_of, \
    parse_flag, parse_real, parse_whole
from .csvfile import Table, recompute_mode, rows_read
from .recipes import ACCOUNTED_PARTS, FRAMEWORKS, MEGATRON, RECIPE_ACCOUNTED_SPLIT, RECIPE_EP_DISPATCHER, \
    RECIPE_MEMORY, RECIPE_OVERLAP, RECIPE_RECOMPUTE, RECIPE_RECOMPUTE_MODULES, Framework, framework_name, row_framework

__all__ = ["FAMILIES", "PRECISIONS", "DEFAULTS", "REQUIRED", "RECIPE_MEMORY", "RECIPE_RECOMPUTE",
           "RECIPE_RECOMPUTE_MODULES", "RECIPE_OVERLAP", "RECIPE_EP_DISPATCHER", "RECIPE_ACCOUNTED_SPLIT", "FRAMEWORKS",
           "Family", "Framework", "row_framework",
           "is_step_rows_table", "read_rows", "model_and_layout", "step_rows", "recipe_recompute", "recipe_modules",
           "recipe_overlap", "recipe_dispatcher", "row_memory", "memory_rows", "spearman", "regret", "sweep_stats",
           "group_stats", "summary_json", "print_report"]

#: The columns every row of this format needs (the others are optional, with the defaults above).
REQUIRED = ("model", "model_family", "system", "gpus", "precision", "global_batch", "micro_batch", "seq_len", "tp",
            "pp", "layers", "hidden", "ffn_hidden", "heads", "vocab", "measured_step_s")

#: A ``precision`` cell (any case) → the pricer's precision (``symbolic.vocabulary.PRECISIONS``). FP8 without a
#: scaling named is Transformer Engine's delayed scaling, NeMo's default recipe (README of the measurements).
PRECISIONS = {"bf16": "bf16", "fp8": "fp8", "fp8-ds": "fp8", "fp8-cs": "fp8-cs", "mxfp8": "mxfp8", "fp8-mx": "mxfp8",
              "nvfp4": "nvfp4"}

#: The run settings a row leaves out: NeMo / Megatron-Bridge recipes' defaults (FlashAttention through
#: Transformer Engine's fused attention; sequence parallelism with tensor parallelism; no activation
#: recompute; no dropout in pretraining recipes; Megatron's distributed optimizer, ZeRO level 1).
DEFAULTS = {"recompute_mode": "none", "sequence_parallel": "tp > 1", "flash_attention": True, "dropout": False,
            "zero": 1, "overlap": DEFAULT_OVERLAP}


#: Megatron-Bridge's DeepSeek-V3 pipeline layouts by (pp, vp) (``set_deepseek_v3_pipeline_model_parallel_layout``'s
#: ``layout_map``, the same at v0.2.0, v0.3.0 and v0.4.2: src/megatron/bridge/recipes/deepseek/deepseek_v3.py; v0.4.2's
#: B200 MXFP8 preset states the (8, 2) one as "Et*4|(t*4|)*14tmL"): the embedding with the first chunk's decoder
#: layers, the MTP layer and the loss with the last chunk's one to thirteen; here body and MTP layers per chunk.
_DEEPSEEK_LAYOUTS: Mapping[tuple[int, int], tuple[int, ...]] = MappingProxyType({
    (4, 1): (16, 16, 16, 13 + 1), (8, 1): (8,) * 7 + (5 + 1,), (4, 2): (8,) * 7 + (5 + 1,),
    (16, 1): (4,) * 15 + (1 + 1,), (8, 2): (4,) * 15 + (1 + 1,), (4, 4): (4,) * 15 + (1 + 1,),
})


@dataclass(frozen=True)
class Family:
    """What a model family's architecture has beyond the table's columns (``ModelConfig`` switches)."""

    n_ffMM: int          # 3: gated MLP (SwiGLU), 2: two matrices (GeLU, squared ReLU)
    biases: bool         # linear layers with biases (QKV, output projection, MLP)
    norm_bias: bool      # LayerNorm (with bias) rather than RMSNorm
    tie_emb_out: bool    # input embedding and output layer share one table
    n_qknorm: int        # QK-norms per layer
    vocab: int           # the tokenizer's vocabulary, for a blank vocab cell (0: the cell is required)
    source: str          # where these facts are stated
    unpriced: str = ""   # why the project cannot price the family yet ("" when it can)
    mla: tuple[int, int, int, int, int] = ()  # MLA: q_lora, kv_lora ranks; rope, nope (query/key), value head widths
    route_groups: tuple[int, int] = (1, 1)   # group-limited routing: groups of experts, groups a token's experts lie in
    # The recipe's pipeline layout by (pp, vp): body and MTP layers per chunk in model order (chunk c·pp + s holds
    # stage s's chunk c), where the recipe states one (Megatron-Core's pipeline_model_parallel_layout); else the even
    # split.
    pipeline_layouts: Mapping[tuple[int, int], tuple[int, ...]] = dataclasses.field(
        default_factory=lambda: MappingProxyType({}))
    first_k_dense: int = 0   # leading dense layers of a model with experts (dense FFN of width ffn_hidden)
    n_mtp: int = 0           # multi-token-prediction layers
    sliding_window: int = 0  # tokens of the sliding window of the windowed layers (0: none)
    full_every: int = 0      # with a window: every full_every-th layer (1-based) has full attention, the others the window


def _unpriced(source: str, why: str) -> Family:
    """A family whose layers the model cannot state: its rows are listed with *why*, its shape switches unread."""
    return Family(3, False, False, False, 0, 0, source, unpriced=why)


_NEMO = "NVIDIA/NeMo@8cfedd72:nemo/collections/llm/gpt/model/"
_LLAMA = dict(n_ffMM=3, biases=False, norm_bias=False, tie_emb_out=False, n_qknorm=0)
_LLAMA_SOURCE = _NEMO + "llama.py LlamaConfig: SwiGLU, RMSNorm, no biases, untied embedding and output"
#: ``model_family`` prefix (case-insensitive; the longest that matches) → the architecture the columns cannot
#: state, and the vocabulary of the family's tokenizer for a row whose ``vocab`` cell is blank (NeMo's model
#: configs leave it to the tokenizer).
FAMILIES: dict[str, Family] = {
    "llama-1": Family(**_LLAMA, vocab=32000, source="LLaMA (Touvron et al. 2023, arXiv:2302.13971): SwiGLU, "
                      "RMSNorm, no biases, untied; 32,000-token SentencePiece vocabulary"),
    "llama-2": Family(**_LLAMA, vocab=32000, source="Llama 2 (arXiv:2307.09288), 32,000-token vocabulary; "
                      + _LLAMA_SOURCE),
    "llama-3": Family(**_LLAMA, vocab=128256, source="Llama 3 / 3.1 (arXiv:2407.21783), 128,256-token vocabulary; "
                      + _LLAMA_SOURCE),
    "gpt-3": Family(2, True, True, True, 0, 50257, _NEMO + "base.py GPTConfig (Megatron-LM GPT): GeLU MLP, biases, "
                    "LayerNorm, embedding tied to the output layer; GPT-2 BPE vocabulary of 50,257 (Brown et al. 2020, "
                    "arXiv:2005.14165), unpadded"),
    "nemotron": Family(2, False, True, False, 0, 256000, _NEMO + "nemotron.py NemotronConfig: squared-ReLU MLP "
                       "(not gated), no linear biases, LayerNorm, untied embedding and output; 256,000-token "
                       "vocabulary (Nemotron-4, arXiv:2402.16819, Table 1)"),
    "mixtral": Family(3, False, False, False, 0, 32000, _NEMO + "mixtral.py MixtralConfig (arXiv:2401.04088): SwiGLU "
                      "experts, RMSNorm, no biases, untied; 32,000-token vocabulary"),
    "qwen3": Family(3, False, False, False, 1, 0, _NEMO + "qwen3.py Qwen3Config (arXiv:2505.09388): SwiGLU (experts), "
                    "RMSNorm, QK-norm, no biases, untied embedding and output"),
    "deepseek-v3": Family(3, False, False, False, 0, 129280,
                          _NEMO + "deepseek.py DeepSeekV3Config (arXiv:2412.19437, §2.1 and §4.2) and "
                          "deepseek-ai/DeepSeek-V3 config.json: SwiGLU, RMSNorm, no biases, untied; MLA with "
                          "q_lora_rank 1536, kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128 "
                          "(the table's arch_notes); first_k_dense_replace 3 (moe_layer_freq [0]*3 + [1]*58); one "
                          "multi-token-prediction layer (num_nextn_predict_layers 1; NVIDIA's table names the 25.11 "
                          "run 'DeepSeekV3 (w/ MTP)', and Megatron-Core's DeepSeek-V3 recipe, "
                          "yanring/Megatron-MoE-ModelZoo, sets mtp_num_layers 1); vocabulary 129,280; node-limited "
                          "routing n_group 8, topk_group 4 (config.json; Megatron-Bridge's DeepSeek-V3 recipes read "
                          "the model from it, AutoBridge.from_hf_pretrained, whose converter maps them to "
                          "moe_router_num_groups and moe_router_group_topk: src/megatron/bridge/recipes/deepseek/"
                          "deepseek_v3.py, src/megatron/bridge/models/conversion/model_bridge.py at v0.4.2)",
                          mla=(1536, 512, 64, 128, 128), first_k_dense=3, n_mtp=1, route_groups=(8, 4),
                          pipeline_layouts=_DEEPSEEK_LAYOUTS),
    "gpt-oss": Family(3, True, False, False, 0, 201088,
                      _NEMO + "gpt_oss.py GPTOSSConfig and openai/gpt-oss-120b config.json: SwiGLU experts, "
                      "RMSNorm, biases on the attention projections and the experts, untied; sliding_window 128 on "
                      "the layers layer_types calls sliding_attention, every other one from the first (NeMo's "
                      "window_attn_skip_freq 2: every second layer full); the attention sinks (one learned logit per "
                      "head) add no matrix multiply; vocabulary 201,088 (o200k_harmony)",
                      sliding_window=128, full_every=2),
    # Architectures whose layers the model cannot state: listed so that their rows are reported unpriced, with why,
    # where a shorter prefix ("nemotron", "qwen3") would otherwise price them as another family's transformer.
    **dict.fromkeys(("nemotron-h", "nemotronh", "nemotron-3-nano", "nemotron-3-super", "nemotron-3-ultra"), _unpriced(
        "Nemotron-H (arXiv:2504.03624) and Nemotron 3: hybrid models, most layers Mamba-2, a few self-attention",
        "a hybrid Mamba-2 / attention model: its Mamba-2 layers are not modelled")),
    "qwen3-next": _unpriced("Qwen3-Next (Qwen team, 2025): Gated DeltaNet linear-attention layers beside gated "
                            "attention, three to one", "its Gated DeltaNet linear-attention layers are not modelled"),
    "llama-4": _unpriced("Llama 4 (Meta, 2025): chunked local attention on three layers of four (iRoPE), "
                         "mixture-of-experts layers", "its chunked local attention layers are not modelled"),
}

#: The bound of each whole-number column (``codegen.runtime.inputs``).
_DEGREES = ("tp", "pp", "cp", "vp", "ep", "etp", "dp")
_BOUNDS = {**dict.fromkeys(_DEGREES, DEGREE_MAX), "layers": LAYERS_MAX, "gpus": DEVICES_MAX}


def is_step_rows_table(table: Table) -> bool:
    """Whether *table* is of this format (its header names ``measured_step_s``)."""
    return table.has("measured_step_s")


def _whole(field: str, text: str, blank: int | None = None, minimum: int = 1) -> int:
    if blank is not None and not text.strip():
        return blank
    return parse_whole(field, text, minimum=minimum, maximum=_BOUNDS.get(field.rsplit("column ", 1)[-1], COUNT_MAX))


def _precision(field: str, text: str) -> str:
    key = text.strip().lower()
    if key not in PRECISIONS:
        raise InputError(f"{field}: unknown precision {text!r}; known: BF16, FP8, FP8-CS, MXFP8, FP8-MX, NVFP4")
    return PRECISIONS[key]


def _family(field: str, text: str) -> Family:
    key = re.sub(r"[\s_]+", "-", text.strip().lower())  # "Llama 3 8B", "Nemotron_H" as "llama-3-8b", "nemotron-h"
    for prefix in sorted(FAMILIES, key=len, reverse=True):
        if key.startswith(prefix):
            return FAMILIES[prefix]
    raise InputError(f"{field}: unknown model family {text!r}; known: names starting with "
                     f"{', '.join(sorted(FAMILIES))} (codegen.validation.step_rows.FAMILIES)")


def _system(field: str, text: str) -> str:
    try:
        return hardware.load(text.strip()).name
    except ValueError as exc:
        raise InputError(f"{field}: {exc}") from None


def _mode(field: str, text: str) -> str:
    try:
        return recompute_mode(text) if text.strip() else DEFAULTS["recompute_mode"]
    except ValueError as exc:
        raise InputError(f"{field}: {exc}") from None


def _names_or_recipe(parse: Callable[[str, str], tuple[str, ...]]) -> Callable[[str, str], tuple[str, ...] | None]:
    """A cell of names separated by ``;`` or ``,`` (``dp;tp``, ``layernorm;moe_act``), ``none``, or blank (``None``:
    the recipe's, :func:`recipe_overlap` / :func:`recipe_modules`), read by *parse* (``overlap_names``,
    ``recompute_modules``)."""
    def read(field: str, text: str) -> tuple[str, ...] | None:
        return parse(field, text.replace(";", ",")) if text.strip() else None
    return read


def _framework(field: str, text: str) -> str | None:
    """A ``framework`` cell (a :data:`FRAMEWORKS` name or ``megatron``), or blank (``None``: by the row's source,
    :func:`row_framework`)."""
    return one_of(field, text.strip().lower(), (MEGATRON, *FRAMEWORKS)) if text.strip() else None


def _dispatcher(field: str, text: str) -> str | None:
    """An ``ep_dispatcher`` cell (``symbolic.vocabulary.EP_DISPATCHERS``), or blank (``None``: the recipe's,
    :func:`recipe_dispatcher`)."""
    return one_of(field, text.strip().lower(), EP_DISPATCHERS) if text.strip() else None


def _flag_or(blank: bool):
    def read(field: str, text: str) -> bool:
        return blank if not text.strip() else parse_flag(field, text)
    return read


def _row(table: Table, i: int, system: str | None) -> dict[str, Any]:
    """Every cell of row index *i* read through the gate (raises ValueError naming file, line, column, value)."""
    cell = table.cell
    r: dict[str, Any] = {"line": table.line(i), "model": table.cells("model")[i]}
    r["family"] = cell(i, "model_family", _family)
    r["system"] = system or cell(i, "system", _system)
    r["precision"] = cell(i, "precision", _precision)
    for k in ("gpus", "global_batch", "micro_batch", "seq_len"):
        r[k] = cell(i, k, _whole)
    # A family the project cannot price yet may leave its shape out (it is read, when given, all the same).
    blank = 0 if r["family"].unpriced else None
    for k in ("layers", "hidden", "ffn_hidden", "heads"):
        r[k] = cell(i, k, lambda f, t: _whole(f, t, blank=blank))
    r["vocab"] = cell(i, "vocab", lambda f, t: _whole(f, t, blank=r["family"].vocab or blank))
    for k in ("tp", "pp", "cp", "vp", "ep", "etp"):
        r[k] = cell(i, k, lambda f, t: _whole(f, t, blank=1))
    r["fsdp"] = cell(i, "fsdp", lambda f, t: _whole(f, t, blank=0, minimum=0))
    r["kv_heads"] = cell(i, "kv_heads", lambda f, t: _whole(f, t, blank=r["heads"]))
    r["head_dim"] = cell(i, "head_dim", lambda f, t: _whole(f, t, blank=0))
    r["experts"] = cell(i, "experts", lambda f, t: _whole(f, t, blank=1))
    moe = cell(i, "is_moe", _flag_or(r["experts"] > 1))
    if moe and r["experts"] <= 1 and not r["family"].unpriced:
        raise InputError(f"{table.where(i, 'experts')}: is_moe says a MoE model, but experts is "
                         f"{table.cells('experts')[i]!r} (expected a whole number > 1)")
    r["is_moe"] = moe
    r["top_k"] = cell(i, "top_k", lambda f, t: _whole(f, t, blank=1))
    r["moe_ffn_hidden"] = cell(i, "moe_ffn_hidden", lambda f, t: _whole(f, t, blank=r["ffn_hidden"]))
    r["shared_experts"] = cell(i, "shared_experts", lambda f, t: _whole(f, t, blank=0, minimum=0))
    r["recompute_mode"] = cell(i, "recompute_mode", _mode)
    r["recompute_given"] = bool(table.cells("recompute_mode")[i].strip())
    r["recompute_modules"] = cell(i, "recompute_modules", _names_or_recipe(recompute_modules))
    r["sequence_parallel"] = cell(i, "sequence_parallel", _flag_or(r["tp"] > 1))
    r["flash_attention"] = cell(i, "flash_attention", _flag_or(True))
    r["release"] = table.cells("release")[i].strip()
    r["overlap"] = cell(i, "overlap", _names_or_recipe(overlap_names))
    r["ep_dispatcher"] = cell(i, "ep_dispatcher", _dispatcher)
    for part in ACCOUNTED_PARTS:
        r[f"account_{part}"] = cell(i, f"account_for_{part}_in_pipeline_split", _flag_or(None))
    r["measured_s"] = cell(i, "measured_step_s", parse_real)
    r["sweep"] = table.cells("sweep")[i].strip()
    r["source"] = table.cells("source")[i].strip()
    r["framework"] = cell(i, "framework", _framework)
    dp = r["gpus"] // (r["tp"] * r["pp"] * r["cp"])
    if dp * r["tp"] * r["pp"] * r["cp"] != r["gpus"]:
        raise InputError(f"{table.where(i, 'gpus')}: {r['gpus']} GPUs is not a multiple of tp·pp·cp = "
                         f"{r['tp'] * r['pp'] * r['cp']}")
    given = cell(i, "dp", lambda f, t: _whole(f, t, blank=dp))
    if given != dp:
        raise InputError(f"{table.where(i, 'dp')}: expected gpus / (tp·pp·cp) = {dp}, got {given}")
    r["dp"] = dp
    return r


def _recipe_offset(r: dict[str, Any], family: Family) -> tuple[int, ...] | tuple[tuple[int, ...], ...] | None:
    """The row's recipe pipeline layout (``Family.pipeline_layouts`` at its pp and vp) as a layout offset over the even
    split (``codegen.configs.chunk_layer_counts``: one entry per stage, or one row of pp per chunk); else, for a row
    of a framework that splits its module list (:func:`row_framework`), that split
    (``codegen.configs.module_list_split_offset``); ``None`` where neither states one, or the row's layers do not add
    up to the recipe's.

    Raises:
        LayoutError: the row counts the embedding or the loss as a layer (:func:`_accounted_split`) beside a recipe
            pipeline layout, which places them already (Megatron-Core refuses both), or beside its framework's split
            (Megatron-Core's settings, which that framework has not); a framework row with ``vp`` > 1 (its schedule
            runs one model chunk a stage).
    """
    p, vp = r["pp"], r["vp"]
    counts = family.pipeline_layouts.get((p, vp))
    total = r["layers"] + family.n_mtp
    if counts is not None and len(counts) == p * vp and sum(counts) == total:
        if any(r.get(f"account_{part}") for part in ACCOUNTED_PARTS):
            raise LayoutError("account_for_*_in_pipeline_split: the recipe's pipeline layout places the embedding and "
                              "the loss already (Megatron-Core refuses both at once)")
        base = total // (p * vp)
        rows = tuple(tuple(counts[c * p + s] - base for s in range(p)) for c in range(vp))
        return rows[0] if vp == 1 else rows
    framework = row_framework(r)
    if framework is None or framework.split_modules == (0, 0):
        return None
    if vp > 1:
        raise LayoutError(f"vp = {vp}: {framework.name}'s pipeline schedule runs one model chunk a stage")
    if any(r.get(f"account_{part}") for part in ACCOUNTED_PARTS):
        raise LayoutError(f"account_for_*_in_pipeline_split: Megatron-Core's settings; {framework.name} splits its "
                          "module list evenly")
    return module_list_split_offset(r["layers"], p, *framework.split_modules) if p > 1 else None


def _accounted_split(r: dict[str, Any]) -> dict[str, bool]:
    """Whether the row's pipeline split counts the embedding and the loss as layers, as ``ModelConfig`` switches: its
    ``account_for_*_in_pipeline_split`` cells, a blank one its recipe's (:data:`RECIPE_ACCOUNTED_SPLIT`, else not)."""
    releases, _ = RECIPE_ACCOUNTED_SPLIT.get(_model_key(r), ((), ""))
    recipe = r.get("release", "") in releases
    return {f"account_for_{part}_in_pipeline_split": recipe if r.get(f"account_{part}") is None
            else r[f"account_{part}"] for part in ACCOUNTED_PARTS}


def model_and_layout(r: dict[str, Any], name: str, source: str) -> tuple[ModelConfig, Layout, int]:
    """The model, layout and ZeRO level of a row read by :func:`_row`.

    Raises:
        LayoutError: the layout breaks a rule of ``symcost eval`` (or the row a rule of its own).
    """
    family: Family = r["family"]
    d, b, gb = r["dp"], r["micro_batch"], r["global_batch"]
    if gb % (d * b):
        raise LayoutError(f"global_batch {gb} is not a multiple of dp·micro_batch = {d}·{b} = {d * b}")
    if r["fsdp"] not in (0, 1, d):
        raise LayoutError(f"fsdp over {r['fsdp']} of the {d} data-parallel ranks (hybrid sharding) is not modelled")
    zero = 3 if r["fsdp"] else DEFAULTS["zero"]
    h, a = r["hidden"], r["heads"]
    if not r["head_dim"] and h % a:
        raise LayoutError(f"hidden {h} is not a multiple of the heads {a} and no head_dim is given")
    layout = Layout(d=d, t=r["tp"], p=r["pp"], m=gb // (d * b), b=b, vp=r["vp"], cp=r["cp"], ep=r["ep"],
                    etp=r["etp"], sp=r["sequence_parallel"], offset=_recipe_offset(r, family))
    moe = r["is_moe"]
    mla: dict[str, Any] = {}
    if family.mla:
        q_lora, kv_lora, rope, nope, v_head = family.mla
        # MLA prices its heads at the value heads' width (as the model files' reader: v_head_dim).
        mla = dict(dc_q=q_lora, dc_kv=kv_lora, dhr=rope, qk_nope_head_dim=nope, dh=float(v_head))
    n_lay = r["layers"]
    window = {}
    if family.sliding_window:
        window = dict(sliding_window=family.sliding_window,
                      window_layers=tuple(i for i in range(n_lay) if (i + 1) % family.full_every))
    shape = {"dh": float(r["head_dim"] or h / a), **mla}
    model = ModelConfig(
        name=name, source=source, s=r["seq_len"], h=h, a=a, n_kv=r["kv_heads"], **shape,
        hff=r["ffn_hidden"], v=r["vocab"], n_lay=n_lay, layout=layout,
        first_k_dense=min(family.first_k_dense, n_lay) if moe else 0, n_mtp=family.n_mtp, **window,
        hff_exp=r["moe_ffn_hidden"] if moe else r["ffn_hidden"], n_exp=r["experts"] if moe else 1,
        n_shared_exp=r["shared_experts"] if moe else 0, n_chosen_exp=r["top_k"] if moe else 1,
        **(dict(zip(("n_route_groups", "n_route_groups_topk"), family.route_groups)) if moe else {}),
        qkv_bias=family.biases, o_bias=family.biases, mlp_bias=family.biases, norm_bias=family.norm_bias,
        tie_emb_out=family.tie_emb_out, n_ffMM=family.n_ffMM, n_qknorm=family.n_qknorm, **_accounted_split(r))
    validate(model, layout, devices=r["gpus"])
    return model, layout, zero


def price_row(r: dict[str, Any], name: str = "row", source: str = "") -> dict[str, float]:
    """The predicted step time and its parts (seconds) of a row read by :func:`_row`.

    Raises:
        ValueError: why the row cannot be priced (a family not modelled, a layout rule, a precision its GPU
            lacks, a non-finite result).
    """
    if r["family"].unpriced:
        raise ValueError(r["family"].unpriced)
    model, layout, zero = model_and_layout(r, name, source)
    if r["release"]:  # a row of NVIDIA's tables: its recipe reduces and accumulates BF16 gradients
        model = dataclasses.replace(model, bytes_grad=RECIPE_MEMORY["bytes_grad"])
    framework = row_framework(r)
    if framework is not None:  # a row of another framework: its gradients accumulated in their own width
        model = dataclasses.replace(model, bytes_grad_acc=framework.bytes_grad_acc)
    comm = time_family_comm(model, r["system"], r["precision"], ep_dispatcher=recipe_dispatcher(r)[0])
    pricer = StepTimePricer(model, system=r["system"], comm=comm,
                            flash_attention=float(r["flash_attention"]), dropout=float(DEFAULTS["dropout"]),
                            precision=r["precision"], overlap=recipe_overlap(r)[0],
                            recompute_modules=recipe_modules(r)[0])
    values = {k: np.array([getattr(layout, k)], dtype=np.int64) for k in SEARCH_KEYS}
    plan = recipe_recompute(r, layout.p)[0]
    chunk = Chunk(Setting(plan.mode, zero, layout.cp_algo), values, np.zeros(1, np.int64), model)
    got = {k: float(x[0]) for k, x in pricer.price_plan(values, plan, chunk).items()}
    finite(f"{name}: the predicted step time", [got[k] for k in ("step_time_s", "compute_s", "bubble_s", "comm_s")])
    return got


def _model_key(r: dict[str, Any]) -> str:
    return r["model"].strip().lower().replace("-", "_").replace(".", "_").replace(" ", "_")


def recipe_overlap(r: dict[str, Any]) -> tuple[tuple[str, ...], str]:
    """The communication overlap of a row read by :func:`read_rows`, and where it comes from: the row's ``overlap``
    cell (``"table"``); else its recipe's (:data:`RECIPE_OVERLAP`, its source); else its framework's
    (:func:`row_framework`); else the data-parallel overlap every recipe has (``DEFAULTS["overlap"]``,
    ``"recipe default"``)."""
    if r.get("overlap") is not None:
        return r["overlap"], "table"
    key = (_model_key(r), r["system"], r["precision"], r.get("release", ""))
    if key in RECIPE_OVERLAP:
        return RECIPE_OVERLAP[key]
    framework = row_framework(r)
    if framework is not None:
        return framework.overlap, f"{framework.name}: {framework.source}"
    return DEFAULTS["overlap"], "recipe default"


def recipe_dispatcher(r: dict[str, Any]) -> tuple[str, str]:
    """The expert dispatcher of a row read by :func:`read_rows`, and where it comes from: the row's ``ep_dispatcher``
    cell (``"table"``); else its recipe's (:data:`RECIPE_EP_DISPATCHER`, its source); else Megatron-Core's default,
    NCCL's all-to-all (``"recipe default"``)."""
    if r.get("ep_dispatcher") is not None:
        return r["ep_dispatcher"], "table"
    key = (_model_key(r), r["system"], r["precision"], r.get("release", ""))
    if key in RECIPE_EP_DISPATCHER:
        return RECIPE_EP_DISPATCHER[key]
    return DEFAULT_EP_DISPATCHER, "recipe default"


def recipe_recompute(r: dict[str, Any], p: int) -> tuple[RecomputePlan, str]:
    """The recompute plan of a row read by :func:`_row` on its *p* pipeline stages, and where it comes from.

    The row's ``recompute_mode`` where the table gives one (``"table"``); else the published recipe's
    (:data:`RECIPE_RECOMPUTE`, its source); else NeMo's default, none (``"recipe default"``).
    """
    if r.get("recompute_given"):
        return RecomputePlan(r["recompute_mode"]), "table"
    key = (_model_key(r), r["system"], r["precision"])
    if key in RECIPE_RECOMPUTE:
        layers, source = RECIPE_RECOMPUTE[key]
        return RecomputePlan("none", (layers,) * p), source
    return RecomputePlan(DEFAULTS["recompute_mode"]), "recipe default"


def recipe_modules(r: dict[str, Any]) -> tuple[tuple[str, ...], str]:
    """The modules a row read by :func:`read_rows` recomputes inside its layers, and where they come from: the row's
    ``recompute_modules`` cell (``"table"``); else its recipe's (:data:`RECIPE_RECOMPUTE_MODULES`, its source); else
    none (``"recipe default"``)."""
    if r.get("recompute_modules") is not None:
        return r["recompute_modules"], "table"
    key = (_model_key(r), r["system"], r["precision"])
    if key in RECIPE_RECOMPUTE_MODULES:
        return RECIPE_RECOMPUTE_MODULES[key]
    return (), "recipe default"


def row_memory(r: dict[str, Any], name: str = "row", source: str = "",
               settings: MemorySettings = DEFAULT_SETTINGS, *, nvidia_recipe: bool = True) -> dict[str, Any]:
    """Memory per rank of a row read by :func:`_row` with its recipe's settings, at its peak pipeline stage.

    The recipe's settings are the row's flash attention and precision (a low-precision row with Transformer
    Engine's quantized saved inputs and cached weight copies, docs/memory.md "Low precision"), the distributed
    optimizer over the data- and context-parallel ranks (or ZeRO 3 where ``fsdp`` is set),
    :func:`recipe_recompute` and, with
    *nvidia_recipe* (a row of NVIDIA's NeMo / Megatron-Bridge table), :data:`RECIPE_MEMORY`'s BF16 gradients and
    quantized primary weights,
    on top of *settings* (its reserve: ``DEFAULT_RESERVE_BYTES`` unless given; without *nvidia_recipe*, its
    gradient width: unless given, the width a row's framework accumulates its gradients in, :func:`row_framework`,
    else the model's fp32). Returns ``peak_bytes``, ``capacity_bytes``,
    ``reserve_bytes``, ``headroom_bytes`` (capacity − reserve − peak), ``fits``, ``peak_stage``, the peak stage's
    parts (bytes), ``recompute`` (the plan, as text) and ``recompute_from``.

    Raises:
        ValueError: why the row cannot be priced (a family not modelled, a layout rule, a precision its GPU
            lacks).
    """
    if r["family"].unpriced:
        raise ValueError(r["family"].unpriced)
    model, layout, zero = model_and_layout(r, name, source)
    plan, origin = recipe_recompute(r, layout.p)
    layout = dataclasses.replace(layout, recompute=plan)
    modules, modules_origin = recipe_modules(r)
    used = dataclasses.replace(settings, zero_level=zero, flash_attention=float(r["flash_attention"]),
                               precision=r["precision"], recompute_modules=modules)
    framework = row_framework(r)
    if nvidia_recipe:
        used = dataclasses.replace(used, bytes_grad=RECIPE_MEMORY["bytes_grad"],
                                   lowp_primary_weights=RECIPE_MEMORY["lowp_primary_weights"])
    elif framework is not None and settings.bytes_grad is None:  # the buffer its backward passes accumulate into
        used = dataclasses.replace(used, bytes_grad=framework.bytes_grad_acc)
    got = stage_memory(model, layout, system=r["system"], settings=used)
    peak = max(got["stages"], key=lambda stage: stage["total"])  # the first largest, as MemoryPricer picks it
    return {"peak_bytes": peak["total"], "capacity_bytes": got["capacity_bytes"], "reserve_bytes": got["reserve_bytes"],
            "headroom_bytes": peak["headroom"], "fits": peak["fits"], "peak_stage": peak["stage"],
            "parts": {k: peak[k] for k in ("weights", "gradients", "optimizer", "activations", "recompute_workspace")},
            "recompute": str(plan), "recompute_from": origin, "recompute_modules": ",".join(modules) or "none",
            "recompute_modules_from": modules_origin}


def memory_rows(table: Table, system: str | None = None, settings: MemorySettings = DEFAULT_SETTINGS, *,
                nvidia_recipe: bool = True) -> list[dict[str, Any]]:
    """Each row's memory per rank with its recipe's settings (:func:`row_memory`; *nvidia_recipe*: the table is
    NVIDIA's, whose recipes reduce gradients in BF16), keyed by ``line``, ``model``, ``system``; ``fits`` is
    ``None`` with a ``reason`` where the row cannot be priced.

    Raises:
        ValueError: naming the file, line, column and value of the first cell the reader does not know.
    """
    if not isinstance(settings, MemorySettings):
        raise InputError(f"settings: expected a MemorySettings, got {type(settings).__name__}")
    nvidia_recipe = flag("nvidia_recipe", nvidia_recipe)
    read = read_rows(table, system)
    out = []
    for r in read:
        row: dict[str, Any] = {"line": r["line"], "model": r["model"], "system": r["system"],
                               "precision": r["precision"], "fits": None}
        try:
            row.update(row_memory(r, r["model"], str(table.path), settings, nvidia_recipe=nvidia_recipe))
        except ValueError as exc:
            row["reason"] = str(exc)
        out.append(row)
    return out


def read_rows(table: Table, system: str | None = None) -> list[dict[str, Any]]:
    """Every row of *table* read (``_row``), after checking its columns and the ``--system`` override."""
    missing = [c for c in REQUIRED if not table.has(c)]
    if missing:
        raise InputError(f"--data {table.path}: missing columns {', '.join(missing)} (it needs {', '.join(REQUIRED)})")
    if system is not None:
        try:
            system = hardware.load(system).name
        except ValueError as exc:
            raise InputError(f"--system: {exc}") from None
    return [_row(table, i, system) for i in range(len(table))]


def step_rows(table: Table, system: str | None = None) -> list[dict[str, Any]]:
    """Each row's measured and predicted step time, parts and relative error (``None`` with a ``reason`` when the
    row cannot be priced), with the overlap, the recompute plan (a mode, or fully recomputed layers per stage) and
    the recomputed modules it was priced with (:func:`recipe_overlap`, :func:`recipe_recompute`,
    :func:`recipe_modules`).

    Raises:
        ValueError: naming the file, line, column and value of the first cell the reader does not know.
    """
    read = read_rows(table, system)
    out = []
    for r in read:
        row = {"line": r["line"], "model": r["model"], "system": r["system"], "precision": r["precision"],
               "moe": r["is_moe"], "sweep": r["sweep"], "overlap": ",".join(recipe_overlap(r)[0]) or "none",
               "recompute": str(recipe_recompute(r, int(r["pp"]))[0]),
               "recompute_modules": ",".join(recipe_modules(r)[0]) or "none",
               "ep_dispatcher": recipe_dispatcher(r)[0], "framework": framework_name(r), "measured_s": r["measured_s"],
               "predicted_s": None, "compute_s": None, "bubble_s": None, "comm_s": None, "rel_err": None}
        try:
            got = price_row(r, r["model"], str(table.path))
        except ValueError as exc:
            row["reason"] = str(exc)
        else:
            row.update(predicted_s=got["step_time_s"], compute_s=got["compute_s"], bubble_s=got["bubble_s"],
                       comm_s=got["comm_s"], rel_err=(got["step_time_s"] - r["measured_s"]) / r["measured_s"])
        out.append(row)
    return out


def _ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of *x*, tied values sharing their average rank."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), dtype=float)
    ranks[order] = np.arange(1, len(x) + 1)
    values, inverse = np.unique(x, return_inverse=True)
    sums = np.bincount(inverse, weights=ranks)
    counts = np.bincount(inverse)
    return (sums / counts)[inverse]


def spearman(x: Any, y: Any) -> float:
    """Spearman's rank correlation of *x* and *y* (Pearson's of their average ranks); NaN when either is constant
    or fewer than 2 values."""
    rx, ry = _ranks(np.asarray(x, dtype=float)), _ranks(np.asarray(y, dtype=float))
    if len(rx) < 2:
        return math.nan
    dx, dy = rx - rx.mean(), ry - ry.mean()
    den = math.sqrt(float(dx @ dx) * float(dy @ dy))
    return float(dx @ dy) / den if den else math.nan


def regret(predicted: Any, measured: Any) -> float:
    """The measured time of the layout with the lowest predicted time over the lowest measured time, minus 1.

    Rows the model predicts equally fast (the same layout measured twice, or layouts that differ only in what the
    model does not see, such as sequence parallelism at ``tp = 1``) are one pick at their mean measured time: the
    expected regret of picking one of them at random.
    """
    predicted, measured = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    picked = float(np.mean(measured[predicted == predicted.min()]))
    return picked / float(measured.min()) - 1.0


def _priced(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["rel_err"] is not None]


def sweep_stats(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per ``sweep`` (in order of appearance, priced rows only): ``{sweep, n, spearman, regret, mean_abs_rel_err}``;
    ``unpriced`` counts the sweep's rows without a prediction."""
    out = []
    for name in dict.fromkeys(r["sweep"] for r in rows if r["sweep"]):
        mine = [r for r in rows if r["sweep"] == name]
        got = _priced(mine)
        p = [r["predicted_s"] for r in got]
        m = [r["measured_s"] for r in got]
        out.append({"sweep": name, "n": len(got), "spearman": spearman(p, m) if got else math.nan,
                    "regret": regret(p, m) if got else math.nan,
                    "mean_abs_rel_err": float(np.mean([abs(r["rel_err"]) for r in got])) if got else math.nan,
                    "unpriced": len(mine) - len(got)})
    return out


def group_stats(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (system, dense/MoE, precision), in order of appearance: ``{system, kind, precision, n, unpriced,
    mean_abs_rel_err, mean_rel_err}`` over the priced rows."""
    keys = dict.fromkeys((r["system"], "moe" if r["moe"] else "dense", r["precision"]) for r in rows)
    out = []
    for system, kind, precision in keys:
        mine = [r for r in rows if (r["system"], "moe" if r["moe"] else "dense", r["precision"]) == (system, kind,
                                                                                                     precision)]
        err = [r["rel_err"] for r in _priced(mine)]
        out.append({"system": system, "kind": kind, "precision": precision, "n": len(err),
                    "unpriced": len(mine) - len(err),
                    "mean_abs_rel_err": float(np.mean(np.abs(err))) if err else math.nan,
                    "mean_rel_err": float(np.mean(err)) if err else math.nan})
    return out


def _json_number(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def summary_json(rows: list[dict[str, Any]]) -> str:
    """The last line: ``{"rows": [...], "mean_abs_rel_err", "groups": [...], "sweeps": [...]}`` (NaN as null); each
    row with the framework, overlap, recompute plan and recomputed modules it was priced with."""
    keep = ("line", "model", "system", "precision", "framework", "overlap", "recompute", "recompute_modules",
            "ep_dispatcher", "measured_s", "predicted_s", "compute_s", "bubble_s", "comm_s", "rel_err")
    out_rows = []
    for r in rows:
        row = {k: r[k] for k in keep}
        if r["rel_err"] is None:
            row["reason"] = r["reason"]
        out_rows.append(row)
    err = [abs(r["rel_err"]) for r in _priced(rows)]
    clean = [[{k: _json_number(v) for k, v in g.items()} for g in stats] for stats in (group_stats(rows),
                                                                                          sweep_stats(rows))]
    return json.dumps({"rows": out_rows, "mean_abs_rel_err": float(np.mean(err)) if err else None,
                       "groups": clean[0], "sweeps": clean[1]}, allow_nan=False)


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def print_report(path: Path, rows: list[dict[str, Any]]) -> None:
    """Print how many rows were read, each row, the groups and the sweeps, then :func:`summary_json`."""
    print(rows_read(path, len(rows)))
    w = max([10, *(len(r["system"]) for r in rows)])  # as wide as the longest system name (gb200_nvl72)
    print(f"{'line':>5} {'model':<20} {'system':<{w}} {'prec':<6} {'measured':>9} {'predicted':>9} {'compute':>8} "
          f"{'bubble':>7} {'comm':>7} {'rel err':>8}   (seconds per step)")
    for r in rows:
        head = f"{r['line']:>5} {r['model'][:20]:<20} {r['system']:<{w}} {r['precision']:<6} {r['measured_s']:>9.3f}"
        if r["rel_err"] is None:
            print(f"{head} {'-':>9}   not priced: {r['reason']}")
            continue
        print(f"{head} {r['predicted_s']:>9.3f} {r['compute_s']:>8.3f} {r['bubble_s']:>7.3f} {r['comm_s']:>7.3f} "
              f"{r['rel_err']:>8.1%}")
    err = [abs(r["rel_err"]) for r in _priced(rows)]
    print(f"priced {len(err)} of {len(rows)} rows; mean |rel err| {_fmt(float(np.mean(err)) if err else None, '.1%')}")
    print(f"{'system':<{w}} {'kind':<6} {'prec':<6} {'n':>4} {'unpriced':>8} {'mean|err|':>9} {'mean err':>9}")
    for g in group_stats(rows):
        print(f"{g['system']:<{w}} {g['kind']:<6} {g['precision']:<6} {g['n']:>4} {g['unpriced']:>8} "
              f"{_fmt(g['mean_abs_rel_err'], '.1%'):>9} {_fmt(g['mean_rel_err'], '+.1%'):>9}")
    sweeps = sweep_stats(rows)
    if sweeps:
        print(f"{'sweep':<24} {'n':>4} {'spearman':>8} {'regret':>8} {'mean|err|':>9}")
        for s in sweeps:
            print(f"{s['sweep'][:24]:<24} {s['n']:>4} {_fmt(s['spearman'], '.3f'):>8} {_fmt(s['regret'], '.1%'):>8} "
                  f"{_fmt(s['mean_abs_rel_err'], '.1%'):>9}")
    print(summary_json(rows))
