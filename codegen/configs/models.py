"""Model configs in HyperParallel's YAML format: load a bundled model or a file.

The format is the one HyperParallel's trainer reads (``model.config_overrides`` with
Hugging Face-style names, ``data.max_seq_len``, ``train.accelerator`` with the parallel
layout, ``train.gradient_checkpointing``, ``train.mixed_precision``); the mapping to the
original's field names follows HyperParallel's own parser (published
``framework_parsers/cost_model_parser_hyper.py``). Bundled models live in
``codegen/configs/bundled/<name>.yaml``.

Public API::

    load_model(name_or_path) -> ModelConfig
    model_names() -> tuple[str, ...]
    ModelConfig, ModelConfigError
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Mapping

import yaml

from symbolic.vocabulary import RECOMPUTE_MODES, resolve_algorithm

from ..runtime.inputs import COUNT_MAX, DEGREE_MAX, LAYERS_MAX, whole
from ._layout import Layout, LayoutError, RecomputePlan
from ._model import ModelConfig, ModelConfigError
from ._validation import validate

__all__ = ["ModelConfig", "ModelConfigError", "load_model", "model_names"]

MODELS_DIR = Path(__file__).resolve().parent / "bundled"


def model_names() -> tuple[str, ...]:
    """Names of the bundled models (``codegen/configs/bundled/*.yaml`` stems), sorted."""
    return tuple(sorted(path.stem for path in MODELS_DIR.glob("*.yaml")))


def load_model(name_or_path: str | Path) -> ModelConfig:
    """A bundled model by name, or any file in HyperParallel's YAML format by path.

    Args:
        name_or_path: a name of :func:`model_names`, or a path to a ``.yaml`` / ``.yml`` file.

    Raises:
        ModelConfigError: for an unknown name, an unreadable or malformed file, a missing
            required key, a value of the wrong type or sign, a non-identifier key, an unknown
            ``train.accelerator`` key, or a default layout the model cannot run — naming the
            file and the key.
    """
    path = Path(name_or_path)
    text = str(name_or_path)
    if path.suffix.lower() in (".yaml", ".yml") or path.is_file() or "/" in text:
        name = path.stem
    else:
        name = text
        path = MODELS_DIR / f"{text}.yaml"
        if not path.is_file():
            raise ModelConfigError(f"unknown model {text!r}; bundled models: {', '.join(model_names())} "
                                   f"(or give a path to a HyperParallel YAML file)")
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ModelConfigError(f"{path}: the model file is {size:,} bytes; a model file holds at most "
                                   f"{MAX_FILE_BYTES:,}")
        raw = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ModelConfigError(f"{path}: cannot read the model file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ModelConfigError(f"{path}: not a UTF-8 text file (byte {exc.start}: {exc.reason}); a model file "
                               f"is YAML text") from None
    try:
        document = yaml.load(raw, Loader=StrictLoader)  # noqa: S506 - a SafeLoader that rejects duplicate keys
    except DuplicateKeyError as exc:
        raise ModelConfigError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ModelConfigError(f"{path}: malformed YAML: {_yaml_problem(exc)}") from None
    except RecursionError:
        raise ModelConfigError(f"{path}: malformed YAML: nested too deeply") from None
    return _Reader(path, name).model(document)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error on one line: where (1-based line and column) and what, without its drawing of the line."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return " ".join(str(exc).split())
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    what = "; ".join(part for part in (exc.context, exc.problem) if part)
    return where + " ".join(what.split())


#: Largest model file read (a HyperParallel train.yaml is a few kB).
MAX_FILE_BYTES = 1 << 20


class DuplicateKeyError(yaml.YAMLError):
    """A mapping of a YAML file states one key twice."""


class StrictLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, except that a key given twice in one mapping is an error, not "the last wins".

    Merge keys (``<<: *base``) still override as YAML says; only keys written twice in the same
    mapping are rejected, naming the key and both lines.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: SafeLoader's own error says so
                    continue
                line = key_node.start_mark.line + 1
                if first is not None:
                    raise DuplicateKeyError(f"key {key!r} is given twice (lines {first} and {line}); "
                                            f"state each key once")
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


# --------------------------------------------------------------------------- reading

_DTYPE_BYTES = {
    "float64": 8, "fp64": 8, "double": 8,
    "float32": 4, "fp32": 4, "float": 4,
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
    "float8": 1, "fp8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
}

#: The model file's switches of Megatron-Core's accounted pipeline split (``ModelConfig`` fields of the same names).
_ACCOUNTED_KEYS = ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")

# train.accelerator keys HyperParallel's parser reads (legacy and AutoModels spellings).
_ACCELERATOR_KEYS = frozenset({
    "dp_shard", "dp_replicate", "tp_degree", "tp_size", "pipeline_parallel_degree", "pp_size",
    "context_parallel_degree", "cp_size", "context_parallel_algo", "expert_parallel_degree", "ep_size",
    "expert_tensor_parallel_degree", "pp_interleave_num", "use_seq_parallel", "sequence_parallel",
    "enable_parallel_optimizer", "optimizer_weight_shard_size", "gradient_accumulation_shard",
    "pipeline_scheduler", "loss_parallel",
})

#: Bounds of the whole numbers a model file states (codegen.runtime.inputs: why these); other keys: COUNT_MAX.
_KEY_BOUNDS = {
    **{key: LAYERS_MAX for key in ("num_hidden_layers", "mtp_depth", "num_nextn_predict_layers",
                                   "first_k_dense_replace")},
    **{key: DEGREE_MAX for key in ("dp_shard", "dp_replicate", "tp_degree", "tp_size", "pipeline_parallel_degree",
                                   "pp_size", "context_parallel_degree", "cp_size", "expert_parallel_degree",
                                   "ep_size", "expert_tensor_parallel_degree", "pp_interleave_num",
                                   "optimizer_weight_shard_size")},
}

_MISSING = object()
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Reader:
    """Reads one YAML document, naming the file and key path in every error."""

    def __init__(self, path: Path, name: str):
        self.path = path
        self.name = name

    def fail(self, key: str, message: str) -> ModelConfigError:
        return ModelConfigError(f"{self.path}: {key}: {message}")

    def section(self, parent: Mapping[str, Any], key: str, where: str, required: bool = False) -> Mapping[str, Any]:
        value = parent.get(key, _MISSING)
        path = f"{where}.{key}" if where else key
        if value is _MISSING or value is None:
            if required:
                raise self.fail(path, "required section is missing")
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(path, f"must be a mapping of keys to values, got {type(value).__name__}")
        for sub in value:
            if not isinstance(sub, str) or not _IDENTIFIER.match(sub):
                raise self.fail(f"{path}.{sub}", "keys must be identifiers (letters, digits, underscores)")
        return value

    def integer(self, section: Mapping[str, Any], key: str, where: str, default: Any = _MISSING,
                minimum: int = 1) -> Any:
        """A whole number through the one input gate (``codegen.runtime.inputs.whole``), bounded by :data:`_KEY_BOUNDS`."""
        value = section.get(key, _MISSING)
        if value is _MISSING or value is None:
            if default is _MISSING:
                raise self.fail(f"{where}.{key}", "required key is missing")
            return default
        return whole(f"{self.path}: {where}.{key}", value, minimum=minimum, maximum=_KEY_BOUNDS.get(key, COUNT_MAX),
                     floats=True, error=ModelConfigError)

    def number(self, section: Mapping[str, Any], key: str, where: str, default: float) -> float:
        value = section.get(key, _MISSING)
        if value is _MISSING or value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0 \
                or value > COUNT_MAX:
            raise self.fail(f"{where}.{key}", f"must be a finite number > 0 and at most {COUNT_MAX:,}, got "
                                              f"{value!r}"[:200])
        return float(value)

    def flag(self, section: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
        value = section.get(key, _MISSING)
        if value is _MISSING or value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(f"{where}.{key}", f"must be true or false, got {value!r}")
        return value

    def route_groups(self, over: Mapping[str, Any], where: str, n_exp: int, n_chosen: int) -> tuple[int, int]:
        """``(groups, groups per token)`` of group-limited routing from Hugging Face's ``n_group`` and ``topk_group``
        (Megatron-Core's ``moe_router_num_groups``, ``moe_router_group_topk``: Megatron-Bridge's converter maps one to
        the other); ``(1, 1)`` without. The groups split the routed experts evenly and hold a token's top-k."""
        groups = self.integer(over, "n_group", where, default=0, minimum=0) or \
            self.integer(over, "moe_router_num_groups", where, default=1)
        topk = self.integer(over, "topk_group", where, default=0, minimum=0) or \
            self.integer(over, "moe_router_group_topk", where, default=0, minimum=0)
        if not topk:
            if groups > 1:
                raise self.fail(f"{where}.topk_group", f"required key is missing (n_group = {groups}: the groups a "
                                                       f"token's experts are taken from)")
            topk = 1
        if n_exp % groups:
            raise self.fail(f"{where}.n_group", f"must divide the {n_exp} routed experts, got {groups}")
        if topk > groups:
            raise self.fail(f"{where}.topk_group", f"cannot exceed n_group = {groups}, got {topk}")
        if topk * (n_exp // groups) < n_chosen:
            raise self.fail(f"{where}.topk_group", f"{topk} groups of {n_exp // groups} experts hold fewer than the "
                                                   f"{n_chosen} experts a token is routed to")
        return groups, topk

    def sliding_window(self, over: Mapping[str, Any], where: str, n_lay: int) -> tuple[int, tuple[int, ...]]:
        """``(window, windowed layers)`` from Hugging Face's keys: ``sliding_window`` (tokens; null or absent: none)
        on the layers whose ``layer_types`` entry is ``sliding_attention`` (the others ``full_attention``), or on
        every layer without ``layer_types`` (Mistral's meaning), and on none with ``use_sliding_window: false``
        (Qwen's)."""
        window = self.integer(over, "sliding_window", where, default=0, minimum=1)
        types = over.get("layer_types", _MISSING)
        if not window or not self.flag(over, "use_sliding_window", where, True):
            return 0, ()
        if types is _MISSING or types is None:
            return window, tuple(range(n_lay))
        known = ("sliding_attention", "full_attention")
        if not isinstance(types, list) or len(types) != n_lay:
            raise self.fail(f"{where}.layer_types", f"expected a list of {n_lay} entries (one per hidden layer), "
                                                    f"got {types!r}"[:200])
        for i, kind in enumerate(types):
            if kind not in known:
                raise self.fail(f"{where}.layer_types[{i}]", f"one of {', '.join(known)}, got {kind!r}"[:200])
        return window, tuple(i for i, kind in enumerate(types) if kind == "sliding_attention")

    def dtype(self, section: Mapping[str, Any], key: str, where: str, default: str) -> float:
        value = section.get(key, default)
        text = str(value).lower().removeprefix("torch.").removeprefix("mstype.")
        if text not in _DTYPE_BYTES:
            raise self.fail(f"{where}.{key}", f"unknown dtype {value!r}; known: {', '.join(sorted(_DTYPE_BYTES))}")
        return float(_DTYPE_BYTES[text])

    # ------------------------------------------------------------------ the document

    def model(self, document: Any) -> ModelConfig:
        if not isinstance(document, Mapping):
            raise ModelConfigError(f"{self.path}: the file must hold a mapping with a 'model' section, "
                                   f"got {type(document).__name__}")
        model = self.section(document, "model", "", required=True)
        over = self.section(model, "config_overrides", "model", required=True)
        data = self.section(document, "data", "")
        train = self.section(document, "train", "")
        where = "model.config_overrides"

        h = self.integer(over, "hidden_size", where)
        a = self.integer(over, "num_attention_heads", where)
        n_lay = self.integer(over, "num_hidden_layers", where)
        hff = self.integer(over, "intermediate_size", where)
        v = self.integer(over, "vocab_size", where)
        if h % a:
            raise self.fail(f"{where}.hidden_size", f"must be a multiple of num_attention_heads: {h} % {a} != 0")
        n_kv = self.integer(over, "num_key_value_heads", where, default=a)
        if n_kv > a or (a % n_kv):
            raise self.fail(f"{where}.num_key_value_heads", f"must divide num_attention_heads = {a}, got {n_kv}")
        dc_kv = self.integer(over, "kv_lora_rank", where, default=0, minimum=0)
        dc_q = self.integer(over, "q_lora_rank", where, default=0, minimum=0)
        dhr = self.integer(over, "qk_rope_head_dim", where, default=0, minimum=0)
        nope = self.integer(over, "qk_nope_head_dim", where, default=0, minimum=0)
        head_dim = self.integer(over, "head_dim", where, default=0, minimum=0)
        v_head = self.integer(over, "v_head_dim", where, default=0, minimum=0)
        # MLA prices its heads at the value heads' width (published derive_head_dim).
        dh = float(v_head if (dc_kv and v_head) else head_dim or h / a)

        n_exp = self.integer(over, "num_experts", where, default=0, minimum=0) or \
            self.integer(over, "n_routed_experts", where, default=1)
        moe = n_exp > 1
        if moe:
            n_chosen = self.integer(over, "num_experts_per_tok", where)
            hff_exp = self.integer(over, "moe_intermediate_size", where)
            n_shared = self.integer(over, "num_shared_experts", where, default=0, minimum=0) or \
                self.integer(over, "n_shared_experts", where, default=0, minimum=0)
            first_dense = self.integer(over, "first_k_dense_replace", where, default=0, minimum=0)
            cap = max(1.0, self.number(over, "capacity_factor", where, default=1.0))
            if n_chosen > n_exp:
                raise self.fail(f"{where}.num_experts_per_tok", f"cannot exceed num_experts = {n_exp}, got {n_chosen}")
            if first_dense > n_lay:
                raise self.fail(f"{where}.first_k_dense_replace", f"cannot exceed num_hidden_layers = {n_lay}")
            groups, groups_topk = self.route_groups(over, where, n_exp, n_chosen)
        else:
            n_chosen, hff_exp, n_shared, first_dense, cap = 1, hff, 0, 0, 1.0
            groups, groups_topk = 1, 1
        n_mtp = self.integer(over, "mtp_depth", where, default=0, minimum=0) or \
            self.integer(over, "num_nextn_predict_layers", where, default=0, minimum=0)
        if n_lay + n_mtp > LAYERS_MAX:
            raise self.fail(f"{where}.num_hidden_layers", f"{n_lay} body and {n_mtp} MTP layers: at most "
                                                          f"{LAYERS_MAX:,} layers in all")

        window, window_layers = self.sliding_window(over, where, n_lay)

        attention_bias = self.flag(over, "attention_bias", where, False)
        qk_norm = self.flag(over, "qk_norm", where, False) or self.flag(over, "use_qk_norm", where, False)

        s = self.integer(data, "max_seq_len", "data", default=0, minimum=0) or \
            self.integer(over, "max_position_embeddings", where, default=0, minimum=0) or \
            self.integer(over, "seq_length", where, default=0, minimum=0)
        if not s:
            raise self.fail("data.max_seq_len", "required key is missing (no sequence length: set data.max_seq_len, "
                                                "or model.config_overrides.max_position_embeddings)")

        precision = self.section(train, "mixed_precision", "train")
        mixed = self.flag(precision, "enabled", "train.mixed_precision", bool(precision))
        if mixed and "param_dtype" in precision:
            bytes_p = self.dtype(precision, "param_dtype", "train.mixed_precision", "bfloat16")
        else:
            bytes_p = self.dtype(model, "param_init_type", "model", "float32")
        bytes_grad = self.dtype(precision, "reduce_dtype", "train.mixed_precision", "float32")

        config = ModelConfig(
            name=self.name, source=str(self.path), s=s, h=h, a=a, n_kv=n_kv, dh=dh, hff=hff, v=v,
            n_lay=n_lay, layout=self.layout(document, over, train, n_lay + n_mtp),
            dhr=dhr, dc_kv=dc_kv, dc_q=dc_q, qk_nope_head_dim=nope, hff_exp=hff_exp, n_exp=n_exp,
            n_shared_exp=n_shared, n_chosen_exp=n_chosen, n_route_groups=groups, n_route_groups_topk=groups_topk,
            cap_fact=cap, n_mtp=n_mtp, first_k_dense=first_dense,
            sliding_window=window, window_layers=window_layers,
            qkv_bias=self.flag(over, "qkv_bias", where, attention_bias),
            o_bias=self.flag(over, "o_bias", where, attention_bias),
            mlp_bias=self.flag(over, "mlp_bias", where, False),
            norm_bias=self.flag(over, "norm_bias", where, False),
            attn_output_gate=self.flag(over, "attn_output_gate", where, False),
            n_qknorm=1 if qk_norm else 0,
            tie_emb_out=self.flag(over, "tie_word_embeddings", where, False),
            # Megatron's name: a gated MLP (SwiGLU: gate, up and down projections) or two matrices (GeLU, squared ReLU).
            n_ffMM=3 if self.flag(over, "gated_linear_unit", where, True) else 2,
            bytes_compute=self.dtype(model, "compute_dtype", "model", "bfloat16"),
            bytes_p=bytes_p, bytes_grad=bytes_grad,
            # Megatron-Core's pipeline split with the embedding / the loss counted as a layer (its TransformerConfig
            # names); Megatron-Core refuses them beside a stated layout, so beside an offset.
            **{name: self.flag(over, name, where, False) for name in _ACCOUNTED_KEYS},
        )
        if any(getattr(config, name) for name in _ACCOUNTED_KEYS) and config.layout.offset is not None:
            raise self.fail(f"{where}.offset", "cannot be given with account_for_*_in_pipeline_split (Megatron-Core "
                                               "refuses a stated split beside them); drop one")
        try:
            validate(config, config.layout)
        except LayoutError as exc:
            raise ModelConfigError(f"{self.path}: the file's own layout ({config.layout}) does not fit "
                                   f"the model: {exc}") from None
        return config

    def layout(self, document: Mapping[str, Any], over: Mapping[str, Any], train: Mapping[str, Any],
               layers: int) -> Layout:
        where = "train.accelerator"
        accel = self.section(train, "accelerator", "train")
        for key in accel:
            if key not in _ACCELERATOR_KEYS:
                raise self.fail(f"{where}.{key}", f"unknown key; known: {', '.join(sorted(_ACCELERATOR_KEYS))}")

        def degree(*keys: str) -> int:
            for key in keys:
                value = self.integer(accel, key, where, default=0, minimum=0)
                if value:
                    return value
            return 1

        dp_shard = degree("dp_shard")
        d = dp_shard * degree("dp_replicate")
        t, p, cp = degree("tp_size", "tp_degree"), degree("pp_size", "pipeline_parallel_degree"), \
            degree("cp_size", "context_parallel_degree")
        ep, etp, vp = degree("ep_size", "expert_parallel_degree"), degree("expert_tensor_parallel_degree"), \
            degree("pp_interleave_num")
        # MindSpore reads -1 (and HyperParallel 0) as "shard over the whole DP group".
        shard = self.integer(accel, "optimizer_weight_shard_size", where, default=0, minimum=-1)
        os = shard if shard > 0 else (dp_shard if dp_shard > 1 else None)
        try:  # the one set of names and aliases (symbolic.vocabulary), the original's ``hybird_cp`` included
            cp_algo = resolve_algorithm(accel.get("context_parallel_algo") or "colossalai_cp",
                                        field=f"{where}.context_parallel_algo").value
        except ValueError as exc:
            raise ModelConfigError(f"{self.path}: {exc}") from None

        b = self.integer(train, "micro_batch_size", "train", default=1)
        m = self.integer(train, "micro_batch_num", "train", default=0, minimum=0)
        if not m:
            gbs = self.integer(train, "global_batch_size", "train", default=0, minimum=0)
            m = gbs // (b * d) if gbs and gbs % (b * d) == 0 else p

        fsdp_section = self.section(document, "fsdp_config", "")
        reshards = self.flag(fsdp_section, "reshard_after_forward", "fsdp_config", True) and \
            self.flag(fsdp_section, "reshard_after_backward", "fsdp_config", True)

        try:
            return Layout(
                d=d, t=t, p=p, m=m, cp=cp, ep=ep, b=b, vp=vp, etp=etp, os=os,
                op=self.flag(accel, "enable_parallel_optimizer", where, True),
                grad_shard=self.flag(accel, "gradient_accumulation_shard", where, False),
                sp=self.flag(accel, "use_seq_parallel", where, False) or
                self.flag(accel, "sequence_parallel", where, False),
                fsdp=dp_shard > 1, reshards=reshards, cp_algo=cp_algo,
                offset=self.offset(over, p), recompute=self.recompute(over, train),
            )
        except LayoutError as exc:
            raise ModelConfigError(f"{self.path}: {exc}") from None

    def offset(self, over: Mapping[str, Any], p: int) -> Any:
        key = "model.config_overrides.offset"
        value = over.get("offset")
        if value is None or value == 0:
            return None
        if isinstance(value, bool):
            raise self.fail(key, f"must be 0, an integer or a list of integers, got {value!r}")
        if isinstance(value, int):
            return (value,) * p
        if isinstance(value, list):
            return value
        raise self.fail(key, f"must be 0, an integer or a list of integers, got {value!r}")

    def recompute(self, over: Mapping[str, Any], train: Mapping[str, Any]) -> RecomputePlan:
        """HyperParallel's ``_parse_recompute``: ``full_rec`` / ``sel_rec`` overrides win over the mode."""
        checkpoint = self.section(train, "gradient_checkpointing", "train")
        where = "train.gradient_checkpointing.activation_checkpoint"
        mode = checkpoint.get("activation_checkpoint", "none")
        if mode is True:
            mode = "full"
        if mode is False or mode == "off":
            mode = "none"
        if mode not in RECOMPUTE_MODES:
            raise self.fail(where, f"must be {', '.join(RECOMPUTE_MODES[:-1])} or {RECOMPUTE_MODES[-1]}, got {mode!r}")
        selective = over.get("sel_rec")
        if selective is not None and not isinstance(selective, bool):
            raise self.fail("model.config_overrides.sel_rec", f"must be true or false, got {selective!r}")
        if selective is None:
            selective = mode == "selective"
        full = over.get("full_rec")
        if full is None:
            full = mode == "full"
        if isinstance(full, list):
            for i, n in enumerate(full):
                if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                    raise self.fail(f"model.config_overrides.full_rec[{i}]", f"must be a whole number >= 0, got {n!r}")
            return RecomputePlan("selective" if selective else mode if mode != "selective" else "none", tuple(full))
        if not isinstance(full, bool):
            raise self.fail("model.config_overrides.full_rec", f"must be true, false or a list per stage, got {full!r}")
        if full:
            return RecomputePlan("full")
        return RecomputePlan("selective" if selective else "none")
