"""What published runs set that their tables' columns do not state: NVIDIA's recipes and other frameworks.

The step-time and memory readers of one-run-per-row tables (``codegen.validation.step_rows``) price each row with
the settings its recipe or framework ran, where the row leaves them out. Each entry here names the code that sets
it: NeMo's and Megatron-Bridge's tagged recipes and performance presets, keyed by ``(model, system, precision[,
release])`` (the model key is the ``model`` cell in lower case with ``-``, ``.`` and spaces read as ``_``), and the
frameworks other than NeMo / Megatron-Core that rows ran on, by name (a ``framework`` cell) and by the repository of
their ``source`` cell.

Public API::

    RECIPE_MEMORY, RECIPE_RECOMPUTE, RECIPE_RECOMPUTE_MODULES, RECIPE_OVERLAP, RECIPE_ACCOUNTED_SPLIT,
    RECIPE_EP_DISPATCHER, ACCOUNTED_PARTS, FRAMEWORKS, MEGATRON, SOURCE_FRAMEWORKS, Framework
    framework_name(row) -> str               # the framework a row ran on (its cell, or its source), or "megatron"
    row_framework(row) -> Framework | None   # that framework where it is not NeMo / Megatron-Core
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["RECIPE_MEMORY", "RECIPE_RECOMPUTE", "RECIPE_RECOMPUTE_MODULES", "RECIPE_OVERLAP", "RECIPE_ACCOUNTED_SPLIT",
           "RECIPE_EP_DISPATCHER", "ACCOUNTED_PARTS", "FRAMEWORKS", "MEGATRON", "SOURCE_FRAMEWORKS", "Framework",
           "framework_name", "row_framework"]


#: The memory settings of NVIDIA's performance recipes that no column states, for every row (the memory check,
#: ``step_rows.row_memory``; the gradient width in the step time too, ``step_rows.price_row``): gradients reduced
#: and kept in BF16 (``grad_reduce_in_fp32 = False``: Megatron-Bridge
#: ``scripts/performance/configs/{llama3,llama31,qwen3}/*_llm_pretrain.py`` at fa55da5f (release 25.11) and
#: ``src/megatron/bridge/perf_recipes/_common.py`` ``_benchmark_common`` (later releases); NeMo 2.0's
#: ``scripts/performance/llm/pretrain_gpt3_175b.py`` for FP8), so 2 bytes per gradient, not the fp32 main_grad a
#: model file's ``reduce_dtype`` defaults to; Megatron's distributed optimizer (``step_rows.DEFAULTS["zero"]``), whose
#: optimizer states are sharded over the data-parallel ranks with the context-parallel ones (Megatron-Core's
#: data-parallel group ``with_context_parallel``: ``shard_p_os_non_exp_partial = R·t·cp``, docs/memory.md);
#: and the default reserve (``codegen.pricing.memory.DEFAULT_RESERVE_BYTES``: CUDA context, kernels, NCCL
#: buffers). In a low-precision row the linear layers' primary weights are the quantized tensors
#: (``fp8_param_gather = True``: NeMo 2.0's ``nemo/collections/llm/recipes/precision/mixed_precision.py``
#: ``bf16_with_fp8_mixed`` and ``bf16_with_fp8_current_scaling_mixed``, which ``scripts/performance/helpers.py``
#: ``set_precision_configs`` picks for FP8 and FP8-CS; Megatron-Bridge's ``src/megatron/bridge/training/
#: mixed_precision.py`` ``bf16_with_fp8_delayed_scaling_mixed``, ``bf16_with_fp8_current_scaling_mixed`` and
#: ``bf16_with_mxfp8_mixed``), so no BF16 copy of them (``MemorySettings.lowp_primary_weights``). The 24.07 rows
#: ran NeMo 1.0's launcher, whose gradient width and primary weights this table does not check.
RECIPE_MEMORY = {"bytes_grad": 2.0, "lowp_primary_weights": True,
                 "source": "Megatron-Bridge@fa55da5f scripts/performance/configs/*/*_llm_pretrain.py and "
                           "perf_recipes/_common.py: grad_reduce_in_fp32 = False; NeMo 2.0 and Megatron-Bridge "
                           "mixed_precision.py: fp8_param_gather = True"}

#: Activation recompute a published recipe sets where the table's row does not say (the row's ``recompute_mode``
#: column wins where given): ``(model, system, precision)`` → (fully recomputed layers per pipeline stage, source).
#: The model key is the ``model`` cell in lower case with ``-``, ``.`` and spaces read as ``_``. Megatron's
#: ``recompute_granularity = "full"``, ``recompute_method = "block"``, ``recompute_num_layers = N`` recomputes
#: the first N layers of each pipeline stage in full: the project's per-stage plan (``RecomputePlan`` with
#: ``full_per_stage``). Every other row's recipe recomputes nothing (``step_rows.DEFAULTS``): NeMo 2.0's recommended
#: pretraining configs list ``recompute_layers`` 0 and no ``recompute_modules`` for GPT-3, Llama 3 / 3.1,
#: Mixtral and Nemotron-4 on H100 and B200 (NVIDIA/NeMo ``scripts/performance/recommended_model_configs/
#: model_configs_{h100,b200}.csv``), and Megatron-Bridge's Llama 3 / 3.1 and Qwen3 performance recipes at
#: fa55da5f and later set ``recompute_granularity = None`` or leave the recipe's none. The modules a recipe
#: recomputes inside its layers are :data:`RECIPE_RECOMPUTE_MODULES`'.
RECIPE_RECOMPUTE: dict[tuple[str, str, str], tuple[int, str]] = {
    ("llama3_8b", "dgx_h100", "fp8-cs"): (5, "Megatron-Bridge@fa55da5f scripts/performance/configs/llama3/"
                                             "workload_base_configs.py LLAMA3_8B_H100_FP8_CS_BASE_CONFIG: "
                                             "recompute_num_layers=5 (full, block)"),
}


_MB = "NVIDIA-NeMo/Megatron-Bridge@"
#: The modules a published recipe recomputes inside every layer it does not recompute in full (Megatron-Core's
#: ``recompute_granularity = "selective"`` with ``recompute_modules``; ``symbolic.vocabulary.RECOMPUTE_MODULES``)
#: where the table's row does not say (a ``recompute_modules`` column wins where given): ``(model, system,
#: precision)`` → (module names, source), the model key as :data:`RECIPE_RECOMPUTE`'s, the same in every release of
#: the table (Megatron-Bridge v0.2.1 = 25.11, v0.3.0 = 26.02, v0.4.1 = 26.02.01, v0.4.2 = 26.04.01: the first tag
#: whose docs/performance-summary.md lists the release). DeepSeek-V3's 26.04.01 recipe also recomputes ``mlp``, its
#: dense layers' MLP, which is not modelled (nor does the memory family see those layers). The Llama, Qwen3 and
#: Nemotron recipes recompute no module.
RECIPE_RECOMPUTE_MODULES: dict[tuple[str, str, str], tuple[tuple[str, ...], str]] = {
    **{("gpt_oss_120b", system, "bf16"): (
        ("layernorm", "moe_act"),
        "Megatron-Bridge v0.2.1, v0.3.0, v0.4.1 scripts/performance/configs/gpt_oss/"
        f"[gpt_oss_]workload_base_configs.py GPT_OSS_120B_*{gpu}_BF16*: recompute_modules=['layernorm', 'moe_act'] "
        f"({_MB}067f987: src/megatron/bridge/perf_recipes/gpt_oss/{gpu.lower()}/gpt_oss.py lines 39-40 the same)")
       for system, gpu in (("dgx_b200", "B200"), ("dgx_h100", "H100"))},
    **{(model, "dgx_b200", "mxfp8"): (
        ("mla_up_proj",),
        "Megatron-Bridge v0.2.1 scripts/performance/configs/deepseek/workload_base_configs.py "
        "DEEPSEEK_V3_B200_BASE_CONFIG, v0.3.0 and v0.4.2 configs/deepseek/deepseek_workload_base_configs.py "
        "DEEPSEEK_V3_PRETRAIN_CONFIG_B200_V1 / _V2 and _B200_FP8_MX_V2: recompute_modules=['mla_up_proj'] "
        "(['mla_up_proj', 'mlp'] in v0.4.2's FP8_MX_V2)")
       for model in ("deepseekv3", "deepseekv3_(w/_mtp)")},
}


_TP_MB = ("Megatron-Bridge's Llama 3 / 3.1 recipes, CommOverlapConfig(tp_comm_overlap=True) with the performance "
          "script's userbuffers config (" + _MB + "7af9601c9 (v0.2.0, 25.11), 21b02e0cf (v0.3.0, 26.02), "
          "fcbb60311 (v0.5.0, 26.06): src/megatron/bridge/recipes/llama/llama3.py; "
          "scripts/performance/configs/llama*/llama3*_llm_pretrain.py)")
_TP_NEMO = ("NeMo 2.2.0's recipe callback tp_comm_overlap=True with the script's userbuffers config (NVIDIA/NeMo@"
            "7192a2c944: nemo/collections/llm/recipes/{gpt3_175b,llama3_70b,llama31_405b,nemotron4_340b}.py; "
            "scripts/llm/performance/pretrain_*.py)")
_TP_LAUNCHER = ("NeMo Framework Launcher 24.07's training configs, ub_tp_comm_overlap True with sequence parallelism "
                "(NVIDIA/NeMo-Framework-Launcher@8325688d8, tag 24.07: launcher_scripts/conf/training/{gpt3/20b,"
                "llama/llama2_70b,llama/llama3_70b,nemotron/nemotron_22b,nemotron/nemotron_8b}.yaml); their TP overlap "
                "configs are named for the published runs' TP, micro-batch and sequence (ub_cfg_h100_h6144_tp2_mbs2_"
                "seqlen2048, _h8192_tp4_mbs1_seqlen4096, _h8192_tp4_mbs1_seqlen8192)")
_NO_P2P_LAUNCHER = ("NeMo Framework Launcher 24.07's training config, overlap_p2p_comm False and ub_tp_comm_overlap "
                    "False (NVIDIA/NeMo-Framework-Launcher@8325688d8, tag 24.07: launcher_scripts/conf/training/"
                    "nemotron/nemotron_340b.yaml)")
_EP_MB = ("Megatron-Bridge's Qwen3 presets moe_a2a_overlap=True: overlap_moe_expert_parallel_comm and "
          "delay_wgrad_compute on (" + _MB + "7af9601c9, 21b02e0cf: scripts/performance/configs/qwen*/"
          "*workload_base_configs.py; scripts/performance/utils/helpers.py / overrides.py)")
_EP_DEEPSEEK = ("Megatron-Bridge v0.4.2 scripts/performance/configs/deepseek/deepseek_workload_base_configs.py "
                "DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2 (pipeline 8, virtual 2, EP 32, global batch 4096, the "
                "published layout): moe_a2a_overlap=True, the DeepEP dispatcher")
#: The communication overlap of the runs whose recipes turn on more than the data-parallel overlap every recipe has and
#: the pipeline one every interleaved recipe has (``step_rows.DEFAULTS["overlap"]``,
#: ``symbolic.vocabulary.DEFAULT_OVERLAP``; an ``overlap`` column wins where given), or less: ``(model, system,
#: precision, release)`` → (overlap names, source), the model key as :data:`RECIPE_RECOMPUTE`'s. From the tagged code of
#: each release (Megatron-Bridge v0.2.0 = 25.11, v0.3.0 = 26.02, v0.5.0 = 26.06: its docs/releases/software-versions.md;
#: NeMo 2.2.0 for 25.02). Transformer Engine's TP overlap needs TP >= 2 and sequence parallelism (Megatron-Bridge
#: ``comm_overlap.py``, ``_get_model_comm_overlap_cfgs``), so the recipes that ask for it at TP 1 run without. The 24.07
#: rows (NeMo 1.0, whose benchmark configs are not published) take the release's launcher training config of the same
#: model: its other settings (nodes, global batch) differ from the published runs', but the TP overlap configs it names
#: are the published runs' shapes (``_TP_LAUNCHER``); GPT-3 175B's and Nemotron-4 340B's set ``ub_tp_comm_overlap``
#: False; the data-parallel overlap (``overlap_grad_sync``, ``overlap_param_sync``) is on in every one and
#: ``overlap_p2p_comm`` in every interleaved one but Nemotron-4 340B's (``_NO_P2P_LAUNCHER``). DeepSeek-V3's 26.04.01
#: row is Megatron-Bridge v0.4.2's B200 MXFP8 preset, the first tag whose performance summary lists that release
#: (``_EP_DEEPSEEK``).
RECIPE_OVERLAP: dict[tuple[str, str, str, str], tuple[tuple[str, ...], str]] = {
    **{key: (("dp", "tp", "pp"), _TP_MB) for key in (
        ("llama3_1_405b", "dgx_b200", "fp8-cs", "25.11"), ("llama3_70b", "dgx_h100", "fp8", "26.02"),
        ("llama3_70b", "dgx_h100", "fp8-cs", "25.11"), ("llama3_1_405b", "dgx_h100", "fp8", "26.02"),
        ("llama3_1_405b", "dgx_h100", "fp8", "26.06"), ("llama3_1_405b", "dgx_h100", "fp8-cs", "25.11"))},
    **{key: (("dp", "tp", "pp"), _TP_NEMO) for key in (
        ("gpt3_175b", "dgx_b200", "fp8", "25.02"), ("llama3_70b", "dgx_b200", "fp8", "25.02"),
        ("llama3_405b", "dgx_b200", "fp8", "25.02"), ("nemotron_340b", "dgx_b200", "fp8", "25.02"),
        ("gpt3_175b", "dgx_h100", "fp8", "25.02"))},
    **{key: (("dp", "tp", "pp"), _TP_LAUNCHER) for key in (
        ("gpt3_20b", "dgx_h100", "fp8", "24.07"), ("llama2_70b", "dgx_h100", "fp8", "24.07"),
        ("llama3_70b", "dgx_h100", "fp8", "24.07"), ("nemotron_22b", "dgx_h100", "fp8", "24.07"),
        ("nemotron_8b", "dgx_h100", "fp8", "24.07"))},
    **{key: (("dp", "ep", "pp"), _EP_MB) for key in (
        ("qwen3_235b_a22b", "dgx_b200", "mxfp8", "25.11"), ("qwen3_235b_a22b", "dgx_h100", "fp8", "26.02"),
        ("qwen3_235b_a22b", "dgx_h100", "fp8-cs", "25.11"), ("qwen3_30b_a3b", "dgx_h100", "fp8", "26.02"),
        ("qwen3_30b_a3b", "dgx_h100", "fp8-cs", "25.11"))},
    ("nemotron_340b", "dgx_h100", "fp8", "24.07"): (("dp",), _NO_P2P_LAUNCHER),
    ("deepseekv3", "dgx_b200", "mxfp8", "26.04.01"): (("dp", "ep", "pp"), _EP_DEEPSEEK),
}


_DISPATCH_TAGS = ("scripts/performance/configs/{deepseek,gpt_oss,qwen}/*workload_base_configs.py, "
                  "moe_flex_dispatcher_backend of the system's preset")
#: What Megatron-Core's ``account_for_*_in_pipeline_split`` settings can count as a layer, in their names' order.
ACCOUNTED_PARTS = ("embedding", "loss")

#: The model families whose recipe splits the pipeline with the input embedding and the loss counted as one layer
#: each (Megatron-Core's ``account_for_embedding_in_pipeline_split`` and ``account_for_loss_in_pipeline_split``:
#: ``codegen.configs.accounted_split_offset``), ``model`` key as :data:`RECIPE_OVERLAP`'s → (the releases, source).
#: Megatron-Bridge's pretraining recipes of Llama 3.1 405B and Qwen3 235B-A22B set both in every release of the table
#: (v0.2.0 = 25.11 to v0.5.0 = 26.06), and the performance scripts of each build on them and leave both as set
#: (no ``account_for`` anywhere under scripts/performance); NeMo 2.0's (24.x, 25.02) rows keep the even split.
_BRIDGE_RELEASES = ("25.11", "26.02", "26.02.01", "26.04", "26.04.01", "26.06")
RECIPE_ACCOUNTED_SPLIT: dict[str, tuple[tuple[str, ...], str]] = {
    "llama3_1_405b": (_BRIDGE_RELEASES, "Megatron-Bridge v0.2.0-v0.5.0 src/megatron/bridge/recipes/llama/llama3.py "
                                        "llama31_405b_pretrain_config, built on by scripts/performance/configs/"
                                        "llama{31,}/llama31_llm_pretrain.py"),
    "qwen3_235b_a22b": (_BRIDGE_RELEASES, "Megatron-Bridge v0.2.0-v0.5.0 src/megatron/bridge/recipes/qwen/"
                                          "qwen3_moe.py qwen3_235b_a22b_pretrain_config, built on by "
                                          "scripts/performance/configs/qwen{3,}/qwen3_llm_pretrain.py"),
}

@dataclass(frozen=True)
class Framework:
    """A training framework other than NeMo / Megatron-Core that rows ran on: its defaults for what they leave out."""

    name: str
    overlap: tuple[str, ...]         # the communication it runs beside compute (``symbolic.vocabulary.OVERLAPS``)
    split_modules: tuple[int, int]   # modules before and after the decoder layers its even pipeline split counts
    bytes_grad_acc: float            # bytes per gradient element of the buffer it accumulates micro-batches in
    source: str                      # where these facts are stated


_SCALING = "Aleph-Alpha/scaling@737f855 src/scaling/"
#: The frameworks other than NeMo / Megatron-Core that rows ran on, by the name a ``framework`` cell gives
#: (``megatron`` there: NeMo's / Megatron-Core's, the reader's defaults). Their defaults replace NeMo's recipe defaults
#: (``step_rows.DEFAULTS``) for the settings the table's columns do not state; an ``overlap`` cell still wins.
FRAMEWORKS: dict[str, Framework] = {
    "scaling": Framework(
        "Aleph Alpha Scaling", overlap=(), split_modules=(1, 2), bytes_grad_acc=2.0,
        source=_SCALING + "core/optimizer/optimizer.py Optimizer.step: the data-parallel gradients all-reduced (in "
        "fp32, optimizer/allreduce.py allreduce_tensor_in_float32) after the last micro-batch's backward pass, so no "
        "data-parallel overlap; the micro-batches' gradients accumulated by PyTorch's autograd in the BF16 parameters' "
        "own .grad (optimizer/parameter_group.py step_prequel copies them to fp32 only then); "
        "core/nn/pipeline_schedule/train.py PipelineScheduleTrain: sends in the schedule, one "
        "model chunk a stage; core/nn/parallel_module/pipeline_partitioning.py pipe_partition_uniform, the default "
        "pipe_partition_method: the even split of the module list (embedding, layers, final norm, LM head: "
        "transformer/model/model.py get_transformer_layer_specs), codegen.configs.module_list_split_offset"),
}

#: The ``framework`` cell's name for NeMo's / Megatron-Core's runs (the reader's defaults, no :class:`Framework`).
MEGATRON = "megatron"

#: The framework of the rows whose ``framework`` cell is blank, by the repository their ``source`` cell names (the
#: text before its ``@``). Hagemann et al.'s sheets (``layout_sweeps.csv``) ran on Aleph Alpha's Scaling: their
#: setting names and values are its configuration's (``activation_checkpointing_type`` ``every_layer`` /
#: ``disabled``, ``model_parallel_size``, ``pipe_parallel_size``, ``micro_batch_size``: core/topology/
#: topology_config.py; the kernel ``torch`` / ``flash_attention``: core/nn/masked_softmax/masked_softmax_config.py).
#: Scaling's public release (2024) postdates the runs (2023); it is read as the framework they ran on.
SOURCE_FRAMEWORKS: dict[str, str] = {
    "Aleph-Alpha/NeurIPS-WANT-submission-efficient-parallelization-layouts": "scaling",
}


def framework_name(r: dict[str, Any]) -> str:
    """The name of the framework a row read by ``step_rows.read_rows`` ran on: its ``framework`` cell (a
    :data:`FRAMEWORKS` name, or :data:`MEGATRON`), else its ``source`` cell's repository's (:data:`SOURCE_FRAMEWORKS`),
    else :data:`MEGATRON`."""
    return r.get("framework") or SOURCE_FRAMEWORKS.get(r.get("source", "").split("@", 1)[0].strip(), MEGATRON)


def row_framework(r: dict[str, Any]) -> Framework | None:
    """The framework a row ran on where it is not NeMo / Megatron-Core (:func:`framework_name`); ``None`` for
    NeMo's / Megatron-Core's."""
    return FRAMEWORKS.get(framework_name(r))


#: The expert dispatcher of the runs whose recipes move their tokens with DeepEP's or Hybrid-EP's kernels
#: (Megatron-Core's flex token dispatcher), ``(model, system, precision, release)`` → (dispatcher, source), the key
#: as :data:`RECIPE_OVERLAP`'s; every other row's recipe leaves Megatron-Core's default, NCCL's all-to-all
#: (``alltoall``; an ``ep_dispatcher`` column wins where given). From the tagged presets of each release
#: (Megatron-Bridge v0.2.0 = 25.11, v0.3.0 = 26.02, v0.4.0 = 26.04, v0.4.1 = 26.02.01, v0.4.2 = 26.04.01, v0.5.0 =
#: 26.06): in 25.11 none of the presets this table's rows ran names one (DeepSeek-V3's H100 preset, which no row runs,
#: names deepep); from 26.02 DeepSeek-V3's B200 presets name hybridep (EP 8), and
#: v0.4.2's FP8_MX_V2 deepep (EP 32); Qwen3-30B-A3B's H100 presets deepep in 26.02 and hybridep from 26.04 (EP 16),
#: its B200 presets hybridep from 26.02.01, GPT-OSS 120B's B200 V2 preset in 26.02.01 (v0.4.1) only; the Qwen3-235B-A22B
#: presets none. Each runs where the preset names it: from v0.3.0 Megatron-Bridge applies Hybrid-EP on compute
#: capability 8 to 10 and DeepEP on Ampere, Hopper, B200 and B300 (src/megatron/bridge/training/
#: flex_dispatcher_backend.py, apply_flex_dispatcher_backend; v0.2.0 kept Hybrid-EP to GB200 and GB300).
RECIPE_EP_DISPATCHER: dict[tuple[str, str, str, str], tuple[str, str]] = {
    ("deepseekv3", "dgx_b200", "mxfp8", "26.02"): ("hybridep", f"Megatron-Bridge v0.3.0 {_DISPATCH_TAGS}"),
    ("deepseekv3", "dgx_b200", "mxfp8", "26.04.01"): ("deepep", f"Megatron-Bridge v0.4.2 {_DISPATCH_TAGS}"),
    ("gpt_oss_120b", "dgx_b200", "bf16", "26.02.01"): ("hybridep", f"Megatron-Bridge v0.4.1 {_DISPATCH_TAGS}"),
    ("qwen3_30b_a3b", "dgx_b200", "mxfp8", "26.02.01"): ("hybridep", f"Megatron-Bridge v0.4.1 {_DISPATCH_TAGS}"),
    ("qwen3_30b_a3b", "dgx_h100", "fp8", "26.02"): ("deepep", f"Megatron-Bridge v0.3.0 {_DISPATCH_TAGS}"),
    ("qwen3_30b_a3b", "dgx_h100", "fp8", "26.04"): ("hybridep", f"Megatron-Bridge v0.4.0 {_DISPATCH_TAGS}"),
    ("qwen3_30b_a3b", "dgx_h100", "fp8", "26.06"): ("hybridep", f"Megatron-Bridge v0.5.0 {_DISPATCH_TAGS}"),
}
