"""Every symbol of the communication model, declared once.

This module is the glossary: the only place a ``sympy.Symbol`` of the model is
created. Names are the original HyperParallel SAPP-ND config field names
(``../shared/FORMULAS.md`` §1), so that a formula reads like the planner's own
code and a reference case's inputs bind to arguments by name.

Assumptions state what holds for every *valid* configuration:

* parallel degrees and counts that are at least one are ``positive`` and
  ``integer`` (``t, cp, ep, d, p, a, …``);
* fields the original reads as 0 when unset, and whose 0 means "absent"
  (``dh``, ``dhr``, ``dc_kv``, ``n_kv``, ``n_linrec``, …), are
  ``nonnegative``; formulas keep the original's fallback for that 0 as a
  numeric condition inside the expression;
* sizes, byte widths and bandwidths are ``positive`` reals.

SymPy uses the assumptions while it builds and simplifies: ``Max(1, t)`` with
``t`` a positive integer is ``t`` at once, which is exactly the original's
``max(1, t)`` on every valid layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

import sympy

__all__ = ["SymbolSpec", "SPECS", "symbol", "spec", "syms"]


@dataclass(frozen=True)
class SymbolSpec:
    """What one symbol stands for.

    Attributes:
        name: the config field name, a Python identifier.
        meaning: one line on what it is.
        unit: its unit ("tokens", "elements", "bytes", "GB/s", "ranks", "1", …).
        kind: "positive_integer", "positive", "nonnegative_integer" or
            "nonnegative"; decides the SymPy assumptions and input checks.
    """

    name: str
    meaning: str
    unit: str
    kind: str

    @property
    def integer(self) -> bool:
        return self.kind.endswith("_integer")

    @property
    def positive(self) -> bool:
        return self.kind.startswith("positive")


_KINDS = {
    "positive_integer": {"positive": True, "integer": True},
    "positive": {"positive": True},
    "nonnegative_integer": {"nonnegative": True, "integer": True},
    "nonnegative": {"nonnegative": True},
}

# (name, kind, unit, meaning). Grouped as in FORMULAS.md §1.
_TABLE: tuple[tuple[str, str, str, str], ...] = (
    # Shapes of one micro-batch.
    ("s", "positive_integer", "tokens", "sequence length: tokens per sample"),
    ("b", "positive_integer", "samples", "micro-batch size"),
    ("m", "positive_integer", "micro-batches", "number of micro-batches per step"),
    ("mb", "positive", "micro-batches", "micro-batches a per-layer call is priced for"),
    # Attention.
    ("h", "positive_integer", "elements", "hidden width"),
    ("a", "positive_integer", "heads", "attention (query) heads"),
    ("n_kv", "nonnegative_integer", "heads", "key/value heads; 0 when unset (read as a)"),
    ("dh", "nonnegative", "elements", "head width (MLA: value-head width); 0 when unset (falls back to h/a)"),
    ("dhr", "nonnegative", "elements", "rotary part of an MLA key head"),
    ("dc_kv", "nonnegative", "elements", "MLA key/value latent rank; > 0 means MLA"),
    ("dc_q", "nonnegative", "elements", "MLA query latent rank; 0 means no query compression"),
    ("qk_nope_head_dim", "nonnegative", "elements", "MLA non-rotary key width; 0 falls back to dh"),
    ("n_linrec", "nonnegative_integer", "1", "non-zero for a linear-attention (recurrent-state) layer"),
    ("n_qknorm", "nonnegative_integer", "norms", "query/key norms per layer"),
    ("attn_extra_p", "nonnegative", "parameters", "extra attention parameters per layer"),
    # Feed-forward and experts.
    ("hff", "nonnegative_integer", "elements", "dense FFN width"),
    ("hff_exp", "nonnegative_integer", "elements", "width of one expert"),
    ("n_exp", "positive_integer", "experts", "routed experts (1 for a dense layer)"),
    ("n_shared_exp", "nonnegative_integer", "experts", "shared experts"),
    ("n_chosen_exp", "nonnegative_integer", "experts", "experts each token is routed to (top-k)"),
    ("cap_fact", "positive", "1", "MoE capacity factor"),
    ("v", "positive_integer", "tokens", "vocabulary size"),
    ("n_lay", "positive_integer", "layers", "body layers"),
    ("n_mtp", "nonnegative_integer", "layers", "multi-token-prediction layers"),
    # Parallel degrees.
    ("t", "positive_integer", "ranks", "tensor-parallel degree"),
    ("cp", "positive_integer", "ranks", "context-parallel degree"),
    ("ep", "positive_integer", "ranks", "expert-parallel degree"),
    ("d", "positive_integer", "ranks", "data-parallel degree"),
    ("p", "positive_integer", "ranks", "pipeline-parallel degree"),
    ("vp", "positive_integer", "chunks", "virtual pipeline chunks per stage"),
    ("etp", "nonnegative_integer", "ranks", "expert tensor-parallel degree; 0 when unset"),
    ("t_exp", "positive_integer", "ranks", "tensor-parallel degree seen by an expert layer"),
    ("d_exp", "positive_integer", "ranks", "data-parallel degree seen by an expert layer"),
    ("sp", "positive_integer", "ranks", "sequence-parallel divisor (t with SP, else 1)"),
    ("os_max_shard", "positive_integer", "ranks", "optimizer-shard size"),
    # Sharding (ZeRO / FSDP).
    ("comm_d_non_exp", "nonnegative_integer", "1", "DP communication level of non-expert parameters: 0, 2 or 3"),
    ("comm_d_exp", "nonnegative_integer", "1", "DP communication level of expert parameters: 0, 2 or 3"),
    ("shard_p_os_non_exp_partial", "positive_integer", "ranks", "ranks that shard the non-expert parameters"),
    ("shard_p_os_exp", "positive_integer", "ranks", "ranks that shard the routed experts"),
    ("shard_p_os_exp_partial", "positive_integer", "ranks", "ranks that shard the shared experts"),
    ("shard_embed", "positive_integer", "ranks", "ranks that shard the embedding table"),
    ("gather_embed", "nonnegative_integer", "ranks", "ranks the embedding table is gathered over (FSDP); 0 when unset"),
    # Switches, as 0/1 numbers.
    ("comm_t", "nonnegative", "1", "1 when tensor parallelism communicates (t > 1), else 0"),
    ("comm_ep", "nonnegative", "1", "1 when expert parallelism communicates, else 0"),
    ("comm_cp", "nonnegative", "1", "1 when context parallelism communicates (cp > 1), else 0"),
    ("gather", "nonnegative", "1", "selective-recompute switch rec_op.gather: 1 keeps the gathered activation"),
    # Overlap.
    ("comm_dp_overlap", "nonnegative", "1", "fraction of DP communication hidden behind compute"),
    ("comm_tp_overlap", "nonnegative", "1", "fraction of TP communication hidden behind compute"),
    # Byte widths.
    ("bytes_compute", "positive", "bytes", "bytes per activation element"),
    ("bytes_p", "positive", "bytes", "bytes per parameter"),
    ("bytes_grad", "positive", "bytes", "bytes per gradient element"),
    ("bytes_norm", "positive", "bytes", "bytes per norm input element"),
    # Op counts per layer.
    ("n_attMM", "nonnegative_integer", "ops", "attention matrix multiplies per layer"),
    ("n_ffMM", "nonnegative_integer", "ops", "feed-forward matrix multiplies per layer"),
    ("n_normOp", "nonnegative_integer", "ops", "norm ops per layer"),
    ("n_gather", "nonnegative_integer", "ops", "TP gathers per layer"),
    # Layer structure for parameter counts (EvalBody.num_params_layer); switches as 0/1 numbers (truthiness).
    ("layer_norms", "nonnegative_integer", "norms", "norms per layer the model states; 0 when unset"),
    ("norm_bias", "nonnegative", "1", "1 when each norm has a bias beside its weight (LayerNorm), else 0"),
    ("qkv_bias", "nonnegative", "1", "1 when the Q, K and V projections have biases, else 0 (unset reads 0)"),
    ("o_bias", "nonnegative", "1", "1 when the attention output projection has a bias, else 0 (unset reads 0)"),
    ("mlp_bias", "nonnegative", "1", "1 when the feed-forward projections have biases, else 0 (unset reads 0)"),
    ("attn_output_gate", "nonnegative", "1", "1 when a fused output gate doubles the query projection, else 0"),
    ("shared_expert_gate", "nonnegative", "1", "1 when the shared experts' output is gated by a weight, else 0"),
    # Expert routing measured per micro-batch (EvalLayerComm.ep_comm_layer_imbalanced).
    ("max_rank_tokens", "nonnegative", "tokens", "most tokens one EP rank's experts receive per micro-batch"),
    # Hardware: CP topology.
    ("device_per_node", "positive_integer", "devices", "devices per node seen by the CP topology"),
    ("bw_intra", "positive", "GB/s", "intra-node bandwidth seen by CP"),
    ("bw_inter", "positive", "GB/s", "inter-node bandwidth seen by CP"),
    ("device_intra_node_num", "positive_integer", "devices", "devices per node of the device type (D)"),
    # FSDP: one part (N, c, k, g) of a layer's or the root's parameters, and the rounds (FORMULAS.md §7).
    ("part_size", "nonnegative", "params", "parameters of one FSDP part (N)"),
    ("part_computed", "nonnegative", "ranks", "ranks one FSDP part is computed over, its TP width (c)"),
    ("part_sharded", "nonnegative", "ranks", "ranks one FSDP part is sharded over (k)"),
    ("part_held", "nonnegative", "ranks", "ranks holding one FSDP part, copies of the shard included (g)"),
    ("gathers", "nonnegative", "rounds", "FSDP parameter all-gathers per micro-batch (G)"),
    ("reduces", "nonnegative", "rounds", "FSDP all-reduces between copies of a shard per micro-batch (R)"),
    ("P_ne", "nonnegative", "params", "non-expert parameters of one layer (num_params_layer[0])"),
    ("P_r", "nonnegative", "params", "routed-expert parameters of one layer (num_params_layer[1])"),
    ("P_s", "nonnegative", "params", "shared-expert parameters of one layer (num_params_layer[2])"),
    # Level score (estimate_comm_score, FORMULAS.md §9): level l of the device hierarchy.
    ("comm_volume", "nonnegative", "mixed", "volume of one dimension handed to estimate_comm_score (bytes or params)"),
    ("overlap", "nonnegative", "1", "fraction of the scored volume hidden behind compute"),
    ("level_assign_0", "positive_integer", "ranks", "ranks of the scored dimension placed inside one level-0 group"),
    ("level_assign_1", "positive_integer", "ranks", "ranks of the scored dimension spread over level-1 groups"),
    ("level_assign_2", "positive_integer", "ranks", "ranks of the scored dimension spread over level-2 groups"),
    # Pipeline stage composition: how many layers of each kind one stage holds (model assembly).
    ("n_embedding", "nonnegative_integer", "layers", "embedding layers in the stage (0 or 1)"),
    ("n_output", "nonnegative_integer", "layers", "output layers in the stage (0 or 1)"),
    ("n_body", "nonnegative_integer", "layers", "body layers of the stage among the model's first n_lay"),
    ("n_extra", "nonnegative_integer", "layers", "body layers past n_lay (MTP) that are not selective-recompute"),
    ("n_extra_sel", "nonnegative_integer", "layers", "body layers past n_lay (MTP) that are selective-recompute"),
    ("n_full_rec", "nonnegative_integer", "layers", "fully recomputed layers of the stage"),
    ("n_sel_rec", "nonnegative_integer", "layers", "selectively recomputed layers of the stage"),
    ("score_factor_dp", "nonnegative", "score/volume", "level score of a unit DP volume (TIME path)"),
    ("score_factor_tp", "nonnegative", "score/volume", "level score of a unit TP volume (TIME path)"),
    ("score_factor_cp", "nonnegative", "score/volume", "level score of a unit CP volume (TIME path)"),
    ("level_bound_0", "positive_integer", "devices", "devices in one level-0 group (a node)"),
    ("level_bound_1", "positive_integer", "groups", "level-0 groups in one level-1 group"),
    ("level_bw_0", "positive", "GB/s", "bandwidth of hierarchy level 0"),
    ("level_bw_1", "positive", "GB/s", "bandwidth of hierarchy level 1"),
    ("level_bw_2", "positive", "GB/s", "bandwidth of hierarchy level 2"),
    # Memory per rank (symbolic.memory). Weights and gradients take bytes_p and bytes_grad above.
    ("bytes_optimizer", "positive", "bytes",
     "optimizer-state bytes per parameter (K): 12 for mixed-precision Adam (fp32 master weight and two moments)"),
    ("zero_level", "nonnegative_integer", "1",
     "ZeRO stage over the data-parallel group: 0 none, 1 optimizer states, 2 and gradients, 3 and weights (FSDP)"),
    ("flash_attention", "nonnegative", "1",
     "1 when a fused attention kernel (FlashAttention) keeps no s-by-s score matrices, else 0"),
    ("dropout", "nonnegative", "1", "1 when dropout layers keep their 1-byte masks for the backward pass, else 0"),
    ("bytes_logits", "positive", "bytes", "bytes per stored output logit for the cross-entropy loss (4: fp32)"),
    ("tie_emb_out", "nonnegative", "1", "1 when the output layer reuses the embedding table, else 0"),
    ("pp_rank", "nonnegative_integer", "stages", "index of the pipeline stage, 0 for the first"),
    ("memory_reserve", "nonnegative", "bytes",
     "device memory set aside per device for the framework, CUDA context, workspaces and fragmentation"),
    ("device_memory_bytes", "positive", "bytes", "device memory capacity per device (HBM)"),
)


def _build() -> tuple[Mapping[str, SymbolSpec], Mapping[str, sympy.Symbol]]:
    specs: dict[str, SymbolSpec] = {}
    symbols: dict[str, sympy.Symbol] = {}
    for name, kind, unit, meaning in _TABLE:
        if not name.isidentifier():
            raise ValueError(f"symbol name {name!r} is not a Python identifier")
        if name in specs:
            raise ValueError(f"symbol {name!r} is declared twice")
        specs[name] = SymbolSpec(name, meaning, unit, kind)
        symbols[name] = sympy.Symbol(name, **_KINDS[kind])
    return MappingProxyType(specs), MappingProxyType(symbols)


SPECS, _SYMBOLS = _build()


def symbol(name: str) -> sympy.Symbol:
    """The model's symbol called *name*.

    Raises:
        KeyError: naming the unknown symbol.
    """
    try:
        return _SYMBOLS[name]
    except KeyError:
        raise KeyError(f"unknown symbol {name!r}; known: {', '.join(sorted(_SYMBOLS))}") from None


def spec(name: str) -> SymbolSpec:
    """The declaration of the symbol called *name*."""
    symbol(name)
    return SPECS[name]


def syms(*names: str) -> tuple[sympy.Symbol, ...]:
    """Several symbols at once: ``s, b, h = syms("s", "b", "h")``."""
    return tuple(symbol(n) for n in names)
