"""A model's architecture by the original's field names, with its file's default layout.

The type alone: :mod:`codegen.configs.models` reads it from HyperParallel's YAML format.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields, replace

from ._layout import Layout

__all__ = ["ModelConfig", "ModelConfigError"]


class ModelConfigError(ValueError):
    """A model file that cannot be read; the message names the file and the key path."""


#: Attributes that are no config field of the original's (text, the layout, and the per-layer structure only the
#: step time reads).
_NOT_FIELDS = frozenset({"name", "source", "layout", "first_k_dense", "sliding_window", "window_layers",
                         "n_route_groups", "n_route_groups_topk", "account_for_embedding_in_pipeline_split",
                         "account_for_loss_in_pipeline_split", "bytes_grad_acc"})


@dataclass(frozen=True)
class ModelConfig:
    """A model's architecture by the original's field names, and its file's default layout.

    Attributes:
        name: the bundled name or the file's stem. source: the file it was read from.
        s: sequence length (``data.max_seq_len``, else ``max_position_embeddings``).
        h, a, n_kv: hidden width, attention heads, key/value heads (``num_key_value_heads``,
            default ``a``).
        dh: head width: ``v_head_dim`` for MLA, else ``head_dim``, else ``h / a``.
        dhr, dc_kv, dc_q, qk_nope_head_dim: MLA rotary key width and latent ranks
            (``qk_rope_head_dim``, ``kv_lora_rank``, ``q_lora_rank``); 0 without MLA.
        hff: dense FFN width (``intermediate_size``). hff_exp: one expert's width
            (``moe_intermediate_size``; ``hff`` for a dense model, as HyperParallel's parser).
        n_exp, n_shared_exp, n_chosen_exp: routed experts (1 when dense), shared experts,
            top-k. cap_fact: capacity factor (at least 1).
        n_route_groups, n_route_groups_topk: group-limited routing (``n_group``, ``topk_group``; Megatron-Core's
            ``moe_router_num_groups``, ``moe_router_group_topk``): the routed experts in that many equal groups of
            consecutive experts, a token's top-k taken from its best ``n_route_groups_topk`` groups; 1 and 1 without.
            Read by the expert dispatch's time only (``symbolic.collective_time``), not one of :meth:`fields`.
        v: vocabulary. n_lay: body layers. n_mtp: multi-token-prediction layers
            (``mtp_depth`` / ``num_nextn_predict_layers``). first_k_dense: leading dense layers
            of a MoE model (``first_k_dense_replace``); the original's walk (the volumes) prices every
            layer as the model's kind (no per-layer stack), the step time prices them as dense layers
            (``codegen.configs.stage_layer_kinds``).
        sliding_window, window_layers: the attention window in tokens of the body layers *window_layers*
            (0-based indices in model order; ``sliding_window`` with ``layer_types``, Hugging Face's
            spelling); 0 and ``()`` without one. Read by the step time only.
        n_linrec: >0 for linear-attention layers (no YAML key; set it in Python).
        qkv_bias, o_bias, mlp_bias, norm_bias, attn_output_gate, shared_expert_gate: layer
            structure switches (unstated reads false, as the original's config reads 0); ``norm_bias``
            is true for LayerNorm (a bias beside the gain), false for RMSNorm.
        n_qknorm: QK-norms per layer (1 with ``qk_norm`` / ``use_qk_norm``).
        tie_emb_out: embedding and output share a table (``tie_word_embeddings``).
        n_attMM, n_ffMM, n_normOp, n_gather, layer_norms: op counts per layer: 4 attention
            matmuls, 3 FFN matmuls (gated MLP; 2 with ``gated_linear_unit: false``, a GeLU or
            squared-ReLU MLP), 2 norm ops, 4 TP gathers, 2 norms.
        bytes_compute, bytes_p, bytes_grad, bytes_norm: bytes per activation (``compute_dtype``),
            parameter (``train.mixed_precision.param_dtype`` when mixed precision is enabled,
            else ``param_init_type``), gradient (``reduce_dtype``, default float32) and norm
            input (4, as the original's parser fixes it).
        bytes_grad_acc: bytes per gradient element as each micro-batch's weight gradient is added into the step's
            (the compute family's HBM bytes); ``None``: ``bytes_grad``, one buffer accumulating and reducing as
            Megatron-LM's ``main_grad`` does. PyTorch's autograd accumulates in the parameters' dtype instead. In
            :meth:`fields` as its value.
        layout: the file's own layout (``train.accelerator``, batch, recompute, offset).
        account_for_embedding_in_pipeline_split, account_for_loss_in_pipeline_split: Megatron-Core's settings of
            those names (in its TransformerConfig): the pipeline split counts the input embedding / the loss as one
            layer (``codegen.configs.accounted_split_offset``) in every layout without an offset; false by default
            (the even split). Not one of :meth:`fields`.
    """

    name: str
    source: str
    s: int
    h: int
    a: int
    n_kv: int
    dh: float
    hff: int
    v: int
    n_lay: int
    layout: Layout
    dhr: int = 0
    dc_kv: int = 0
    dc_q: int = 0
    qk_nope_head_dim: int = 0
    hff_exp: int = 0
    n_exp: int = 1
    n_shared_exp: int = 0
    n_chosen_exp: int = 1
    n_route_groups: int = 1
    n_route_groups_topk: int = 1
    cap_fact: float = 1.0
    n_mtp: int = 0
    first_k_dense: int = 0
    sliding_window: int = 0
    window_layers: tuple[int, ...] = ()
    n_linrec: int = 0
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    norm_bias: bool = False
    attn_output_gate: bool = False
    shared_expert_gate: bool = False
    n_qknorm: int = 0
    tie_emb_out: bool = False
    n_attMM: int = 4
    n_ffMM: int = 3
    n_normOp: int = 2
    n_gather: int = 4
    layer_norms: int = 2
    attn_extra_p: float = 0.0
    bytes_compute: float = 2.0
    bytes_p: float = 2.0
    bytes_grad: float = 4.0
    bytes_norm: float = 4.0
    bytes_grad_acc: float | None = None
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False

    def with_sequence_length(self, s: int) -> "ModelConfig":
        """This model run at sequence length *s* (a whole number the caller has checked): its layout's ``s``, which
        every family reads over the model file's, as ``s=N`` in a layout does."""
        return replace(self, layout=replace(self.layout, s=s))

    @property
    def is_moe(self) -> bool:
        """Whether the layers route over several experts (``n_exp > 1``)."""
        return self.n_exp > 1

    @property
    def has_layer_kinds(self) -> bool:
        """Whether the step time prices some layers apart (``codegen.configs.stage_layer_kinds``): leading dense
        layers of a model with experts, sliding-window layers, or multi-token-prediction heads."""
        return bool((self.is_moe and self.first_k_dense) or self.window_layers or self.n_mtp)

    @property
    def is_mla(self) -> bool:
        """Whether attention is MLA (a key/value latent rank is stated)."""
        return self.dc_kv > 0

    def fields(self) -> dict[str, float]:
        """The architecture as the original's config fields, numbers as floats and switches as 0/1 (a new dict)."""
        return dict(self._fields)

    @functools.cached_property
    def _fields(self) -> dict[str, float]:
        # Read on every pricing call: built once (the config is frozen).
        out = {f.name: float(getattr(self, f.name)) for f in fields(self) if f.name not in _NOT_FIELDS}
        out["bytes_grad_acc"] = float(self.bytes_grad if self.bytes_grad_acc is None else self.bytes_grad_acc)
        return out
