"""Every symbol of the communication model, declared once.

This module is the glossary: the only place a ``sympy.Symbol`` of the model is
created. Names are the original HyperParallel SAPP-ND config field names
(docs/model.md, "Config fields"), so that a formula reads like the planner's own
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

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING
from types import MappingProxyType
from typing import Mapping


if TYPE_CHECKING:  # pragma: no cover
    import sympy

__all__ = ["SymbolSpec", "SPECS", "PER_LAYOUT", "symbol", "spec", "syms"]


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

# (name, kind, unit, meaning). Grouped as in docs/model.md, "Config fields".
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
    ("n_route_groups", "positive_integer", "groups", "groups of consecutive routed experts of group-limited routing "
                                                     "(1 without)"),
    ("n_route_groups_topk", "positive_integer", "groups", "groups a token's experts are taken from (1 without)"),
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
    ("bytes_grad_acc", "positive", "bytes", "bytes per gradient element as each micro-batch's weight gradient is "
                                            "added into the step's (bytes_grad where one buffer does both)"),
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
    # FSDP: one part (N, c, k, g) of a layer's or the root's parameters, and the rounds (docs/formulas.md).
    ("part_size", "nonnegative", "params", "parameters of one FSDP part (N)"),
    ("part_computed", "nonnegative", "ranks", "ranks one FSDP part is computed over, its TP width (c)"),
    ("part_sharded", "nonnegative", "ranks", "ranks one FSDP part is sharded over (k)"),
    ("part_held", "nonnegative", "ranks", "ranks holding one FSDP part, copies of the shard included (g)"),
    ("gathers", "nonnegative", "rounds", "FSDP parameter all-gathers per micro-batch (G)"),
    ("reduces", "nonnegative", "rounds", "FSDP all-reduces between copies of a shard per micro-batch (R)"),
    ("P_ne", "nonnegative", "params", "non-expert parameters of one layer (num_params_layer[0])"),
    ("P_r", "nonnegative", "params", "routed-expert parameters of one layer (num_params_layer[1])"),
    ("P_s", "nonnegative", "params", "shared-expert parameters of one layer (num_params_layer[2])"),
    # Level score (estimate_comm_score, docs/model.md, "Level score"): level l of the device hierarchy.
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
    # Variant choices as numeric switches, so that one stage evaluator covers them all.
    ("zero2_non_exp", "nonnegative_integer", "1", "1 where comm_d_non_exp selects ZeRO-2 (the value 2), else 0"),
    ("zero3_non_exp", "nonnegative_integer", "1", "1 where comm_d_non_exp selects ZeRO-3 (the value 3), else 0"),
    ("zero2_exp", "nonnegative_integer", "1", "1 where comm_d_exp selects ZeRO-2 (the value 2), else 0"),
    ("zero3_exp", "nonnegative_integer", "1", "1 where comm_d_exp selects ZeRO-3 (the value 3), else 0"),
    ("reshards", "nonnegative_integer", "1", "1 where FSDP frees gathered parameters after each pass, else 0"),
    ("grad_shard_as_params", "nonnegative_integer", "1", "1 where DP runs as FSDP (weights sharded like the "
                                                         "gradients and optimizer states), else 0"),
    ("cp_ulysses", "nonnegative_integer", "1", "1 where the run's CP algorithm is Ulysses (all-to-all), else 0 "
                                               "(ring attention)"),
    ("ep_dedup", "nonnegative_integer", "1", "1 where the run's expert dispatcher sends a token once per destination "
                                             "rank and node (DeepEP, Hybrid-EP), else 0 (NCCL all-to-all)"),
    ("shard_spans_cp", "nonnegative_integer", "1", "1 where the stated FSDP shard already spans CP, else 0"),
    ("stage_cost_scale", "positive", "1", "factor the original applies to every stage dimension on a device "
                                          "(1; 1/2 on A3: the system file's original_stage_cost_scale)"),
    ("score_factor_dp", "nonnegative", "score/volume", "level score of a unit DP volume (TIME path)"),
    ("score_factor_tp", "nonnegative", "score/volume", "level score of a unit TP volume (TIME path)"),
    ("score_factor_cp", "nonnegative", "score/volume", "level score of a unit CP volume (TIME path)"),
    ("level_bound_0", "positive_integer", "devices", "devices in one level-0 group (a node)"),
    ("level_bound_1", "positive_integer", "groups", "level-0 groups in one level-1 group"),
    ("level_bw_0", "positive", "GB/s", "bandwidth of hierarchy level 0"),
    ("level_bw_1", "positive", "GB/s", "bandwidth of hierarchy level 1"),
    ("level_bw_2", "positive", "GB/s", "bandwidth of hierarchy level 2"),
    # Time model: one collective call (symbolic.collective_time). Bytes are nccl-tests' size S:
    # the whole buffer for all-reduce and broadcast, count x type size x ranks for all-gather,
    # reduce-scatter and all-to-all, the message for send/recv. Bandwidths are per direction.
    ("msg_bytes", "positive", "bytes", "nccl-tests size S of one collective call"),
    ("ranks", "positive_integer", "ranks", "ranks in the communicator (group size n)"),
    ("ranks_per_node", "positive_integer", "ranks", "ranks of the group inside one node"),
    ("nodes", "positive_integer", "nodes", "nodes the group spans"),
    ("nics_used", "positive", "NICs", "NICs of one node the group drives at once"),
    ("nic_bw_bytes_per_s", "positive", "bytes/s", "peak bandwidth of one NIC, per direction"),
    ("ring_channels", "positive_integer", "channels", "NCCL ring channels inside one node (search.cc outcome)"),
    ("ring_channel_bw_bytes_per_s", "positive", "bytes/s", "NCCL bandwidth of one ring channel (search.cc bwIntra)"),
    ("nvlink_nccl_bw_bytes_per_s", "positive", "bytes/s",
     "NVLink bandwidth of one GPU as NCCL's topology counts it: links x per-link bw (topo.h)"),
    ("ll_max_bw_bytes_per_s", "positive", "bytes/s", "NCCL llMaxBws: cap of the LL protocol's bus bandwidth"),
    ("ll128_channel_max_bw_bytes_per_s", "positive", "bytes/s", "NCCL perChMaxRingLL128Bws: LL128 cap per ring channel"),
    ("tree_channel_max_bw_bytes_per_s", "positive", "bytes/s", "NCCL perChMaxTreeBws: tree cap per channel"),
    ("tree_ll128_channel_max_bw_bytes_per_s", "positive", "bytes/s", "NCCL perChMaxTreeLL128Bws: tree LL128 cap per channel"),
    ("nvls_channel_max_bw_bytes_per_s", "positive", "bytes/s", "top of NCCL's intra-node speed array: NVLS channel cap"),
    ("nvls", "nonnegative", "1", "1 when the node's NVSwitch does NVLink SHARP (NVLS), else 0"),
    ("p2p_ll_threshold_bytes", "positive", "bytes",
     "NCCL P2P_LL_THRESHOLD: point-to-point sends of at most this many bytes per peer use LL, larger ones Simple"),
    ("p2p_channels", "positive_integer", "channels",
     "NCCL p2pnChannels: thread blocks of the point-to-point kernel, pow2Up(2 x ring channels) (paths.cc)"),
    ("p2p_chunk_bytes", "positive", "bytes",
     "NCCL P2P_NVL_CHUNKSIZE: bytes of one Simple point-to-point FIFO step over NVLink (init.cc)"),
    ("p2p_net_chunk_bytes", "positive", "bytes",
     "NCCL P2P_NET_CHUNKSIZE: bytes of one Simple point-to-point step across nodes (init.cc computeBuffSizes)"),
    ("nvls_efficiency", "positive", "1", "NCCL nvlsEfficiency: NVLS share of the channel speed, per GPU generation"),
    ("alpha_ring_ll_s", "positive", "s", "NCCL baseLat: ring, LL protocol"),
    ("alpha_ring_ll128_s", "positive", "s", "NCCL baseLat: ring, LL128 protocol"),
    ("alpha_ring_simple_s", "positive", "s", "NCCL baseLat: ring, Simple protocol"),
    ("alpha_tree_ll_s", "positive", "s", "NCCL baseLat: tree, LL protocol"),
    ("alpha_tree_ll128_s", "positive", "s", "NCCL baseLat: tree, LL128 protocol"),
    ("alpha_tree_simple_s", "positive", "s", "NCCL baseLat: tree, Simple protocol"),
    ("hop_nvlink_ring_ll_s", "positive", "s", "NCCL hwLat NVLink: one ring step, LL"),
    ("hop_nvlink_ring_ll128_s", "positive", "s", "NCCL hwLat NVLink: one ring step, LL128"),
    ("hop_nvlink_ring_simple_s", "positive", "s", "NCCL hwLat NVLink: one ring step, Simple"),
    ("hop_nvlink_tree_ll_s", "positive", "s", "NCCL hwLat NVLink: one tree hop, LL"),
    ("hop_nvlink_tree_ll128_s", "positive", "s", "NCCL hwLat NVLink: one tree hop, LL128"),
    ("hop_nvlink_tree_simple_s", "positive", "s", "NCCL hwLat NVLink: one tree hop, Simple"),
    ("hop_nvlink_nvls_s", "positive", "s", "NCCL hwLat NVLink: NVLS (whole collective), Simple"),
    ("hop_net_ring_ll_s", "positive", "s", "NCCL hwLat network: one inter-node ring step, LL"),
    ("hop_net_ring_ll128_s", "positive", "s", "NCCL hwLat network: one inter-node ring step, LL128"),
    ("hop_net_ring_simple_s", "positive", "s", "NCCL hwLat network: one inter-node ring step, Simple"),
    ("hop_net_tree_ll_s", "positive", "s", "NCCL hwLat network: one inter-node tree hop, LL"),
    ("hop_net_tree_ll128_s", "positive", "s", "NCCL hwLat network: one inter-node tree hop, LL128"),
    ("hop_net_tree_simple_s", "positive", "s", "NCCL hwLat network: one inter-node tree hop, Simple"),
    ("net_overhead_s", "positive", "s",
     "NCCL getNetOverhead: post cost of one network step (x3 for Simple), the host CPU's (1 us Intel, 2 us AMD)"),
    ("hop_net_nvlstree_s", "positive", "s", "NCCL hwLat network: one inter-node NVLS-tree hop, Simple"),
    ("alpha_pat_simple_s", "positive", "s", "NCCL baseLat: fixed cost of one PAT call (Simple)"),
    ("pat_rank_latency_s", "positive", "s", "NCCL tuning.cc: PAT's latency per rank of the communicator"),
    ("net_latency_ll_s", "nonnegative", "s",
     "seconds one network hop takes beyond NCCL's hwLat with LL (the time): the network's measured latency where "
     "its system file states one, or a calibrated value; else the latency the network plugin reports"),
    ("net_latency_ll128_s", "nonnegative", "s", "the same with LL128"),
    ("net_latency_simple_s", "nonnegative", "s",
     "the same with Simple; else twice the plugin's latency (tuning.cc adds it again as the flush latency)"),
    ("net_tuner_latency_ll_s", "nonnegative", "s",
     "seconds NCCL's tuner adds to a network hop with LL (the price): the latency the network plugin reports "
     "(the graph's latencyInter, tuning.cc lines 391-393)"),
    ("net_tuner_latency_ll128_s", "nonnegative", "s", "the same with LL128"),
    ("net_tuner_latency_simple_s", "nonnegative", "s",
     "the same with Simple: twice the plugin's latency (tuning.cc adds it again as the flush latency)"),
    ("net_bw_efficiency", "positive", "1", "fraction of the NICs' peak bandwidth collectives reach across nodes"),
    ("ll_max_bw_n2_bytes_per_s", "positive", "bytes/s", "NCCL llMaxBws across 2 nodes (the host CPU's row)"),
    ("ll_max_bw_n4_bytes_per_s", "positive", "bytes/s",
     "NCCL llMaxBws across more than 2 nodes (the host CPU's row)"),
    ("nvlstree_size_correction", "nonnegative", "1",
     "1 where NCCL corrects NVLS-tree's all-reduce bandwidth at medium sizes by treeCorrectionFactor (x86 hosts, "
     "compute capability 10.0 and above: ncclTopoGetAlgoTime, NCCL 2.29), else 0"),
    ("tree_channel_max_bw_n2_bytes_per_s", "positive", "bytes/s", "NCCL perChMaxTreeBws, 2 nodes"),
    ("tree_channel_max_bw_n4_bytes_per_s", "positive", "bytes/s", "NCCL perChMaxTreeBws, more than 2 nodes"),
    ("tree_ll128_channel_max_bw_n2_bytes_per_s", "positive", "bytes/s", "NCCL perChMaxTreeLL128Bws, 2 nodes"),
    ("tree_ll128_channel_max_bw_n4_bytes_per_s", "positive", "bytes/s",
     "NCCL perChMaxTreeLL128Bws, more than 2 nodes"),
    ("nvlstree_channel_max_bw_n2_bytes_per_s", "positive", "bytes/s", "NCCL perChMaxNVLSTreeBws, 2 nodes"),
    ("nvlstree_channel_max_bw_n4_bytes_per_s", "positive", "bytes/s", "NCCL perChMaxNVLSTreeBws, more than 2 nodes"),
    ("nvlstree_channels_n2", "positive", "channels",
     "NCCL nvlsChannels across 2 nodes: thread blocks NVLS-tree runs (nvls.cc ncclNvlsTuning, per GPU generation)"),
    ("nvlstree_channels_n4", "positive", "channels", "NCCL nvlsChannels across more than 2 nodes"),
    ("nvlstree_chunk_n2_bytes", "positive", "bytes",
     "largest NVLS-tree chunk across 2 or 3 nodes: min(nvlsChunkSize, nvlsTreeMaxChunkSize) (nvls.cc)"),
    ("nvlstree_chunk_n4_bytes", "positive", "bytes", "the same across 4 nodes or more"),
    # Placement of one parallel group (symbolic.placement): Megatron rank order, stride = product
    # of the degrees before the group's dimension in that order.
    ("group_size", "positive_integer", "ranks", "ranks in the parallel group"),
    ("group_stride", "positive_integer", "ranks", "distance between consecutive ranks of the group"),
    ("group_size_2", "positive_integer", "ranks", "ranks along the second dimension of a group spanning two "
                                                   "dimensions of the rank order (DP with CP)"),
    ("group_stride_2", "positive_integer", "ranks", "distance between consecutive ranks along that second "
                                                     "dimension"),
    ("gpus_per_node", "positive_integer", "devices", "GPUs in one node (or one NVLink domain)"),
    ("nics_per_node", "positive_integer", "NICs", "scale-out NICs of one node"),
    # Per-step volumes (symbolic.step_volumes).
    ("n_layers_stage", "nonnegative_integer", "layers", "transformer layers one pipeline stage holds"),
    ("n_moe_layers_stage", "nonnegative_integer", "layers", "MoE layers one pipeline stage holds"),
    # The published per-layer structure the step time prices apart (symbolic.compute).
    ("n_dense_layers_stage", "nonnegative_integer", "layers",
     "leading dense layers of a model with experts that one pipeline stage holds (first_k_dense_replace)"),
    ("n_dense_full_rec", "nonnegative_integer", "layers", "of those dense layers, the fully recomputed ones"),
    ("n_dense_sel_rec", "nonnegative_integer", "layers", "of those dense layers, the selectively recomputed ones"),
    ("n_window_layers_stage", "nonnegative_integer", "layers",
     "layers with sliding-window attention that one pipeline stage holds"),
    ("n_window_full_rec", "nonnegative_integer", "layers", "of those windowed layers, the fully recomputed ones"),
    ("n_window_sel_rec", "nonnegative_integer", "layers", "of those windowed layers, the selectively recomputed ones"),
    ("sliding_window", "positive_integer", "tokens", "keys a query of a sliding-window attention layer attends to"),
    # Memory per rank (symbolic.memory). Weights and gradients take bytes_p and bytes_grad above.
    ("bytes_optimizer", "positive", "bytes",
     "optimizer-state bytes per parameter (K): 12 for mixed-precision Adam (fp32 master weight and two moments)"),
    ("zero_level", "nonnegative_integer", "1",
     "ZeRO stage over the data-parallel group: 0 none, 1 optimizer states, 2 and gradients, 3 and weights (FSDP)"),
    ("flash_attention", "nonnegative", "1",
     "1 when a fused attention kernel (FlashAttention) keeps no s-by-s score matrices, else 0"),
    ("attention_ratio", "positive", "1",
     "a fused attention kernel's achieved fraction of the BF16 peak over the reference GEMM efficiency (1: sized "
     "as a GEMM)"),
    ("dropout", "nonnegative", "1", "1 when dropout layers keep their 1-byte masks for the backward pass, else 0"),
    ("recompute_norm", "nonnegative", "1",
     "1 when the layers not fully recomputed discard the outputs of their unfused norms (a MoE layer's pre-MLP norm, "
     "MLA's input norm) and recompute them in the backward pass (Megatron-Core's recompute module layernorm), else 0"),
    ("recompute_moe_act", "nonnegative", "1",
     "1 when the MoE layers not fully recomputed discard their experts' activation-function output (the second expert "
     "GEMM's input) and recompute it in the backward pass (Megatron-Core's recompute module moe_act), else 0"),
    ("recompute_mla_up", "nonnegative", "1",
     "1 when the MLA layers not fully recomputed discard their up-projections' outputs (the attention's Q, K and V) "
     "and recompute them from the latents in the backward pass (Megatron-Core's recompute module mla_up_proj), else 0"),
    ("bytes_logits", "positive", "bytes", "bytes per stored output logit for the cross-entropy loss (4: fp32)"),
    ("tie_emb_out", "nonnegative", "1", "1 when the output layer reuses the embedding table, else 0"),
    ("bytes_lowp_input", "positive", "bytes",
     "bytes per element of the quantized input a linear layer saves for its weight-gradient GEMM in a low-precision "
     "run, block scales included (1 FP8, 1 + 1/32 MXFP8, 1/2 + 1/16 NVFP4)"),
    ("bytes_lowp_weight", "nonnegative", "bytes",
     "bytes per linear-layer weight parameter of the low-precision copies Transformer Engine caches across "
     "micro-batches (row-wise and, where distinct, column-wise; block scales included)"),
    ("lowp_primary_weights", "nonnegative", "1",
     "1 when the linear layers' primary weights are the quantized tensors (Megatron-Core fp8_param_gather): no BF16 "
     "copy of them beside the quantized one, else 0"),
    ("lowp_proj_copy", "nonnegative", "1",
     "1 when the attention output projection saves its own quantized copy of its input (delayed scaling), 0 when "
     "it saves the BF16 attention output"),
    ("pp_rank", "nonnegative_integer", "stages", "index of the pipeline stage, 0 for the first"),
    ("memory_reserve", "nonnegative", "bytes",
     "device memory set aside per device for the framework, CUDA context, workspaces and fragmentation"),
    ("device_memory_bytes", "positive", "bytes", "device memory capacity per device (HBM)"),
    # Compute time of a step (symbolic.compute).
    ("stage_flops", "nonnegative", "FLOP", "FLOPs one rank of a pipeline stage computes per step"),
    ("peak_flops_per_s", "positive", "FLOP/s", "datasheet dense peak FLOP/s of one GPU in the training dtype"),
    ("compute_efficiency", "positive", "1", "achieved fraction of the peak FLOP/s (one per GPU generation)"),
    ("stage_lowp_flops", "nonnegative", "FLOP",
     "FLOPs of a stage's GEMMs one rank runs per step in the run's low precision (FP8, MXFP8, NVFP4; 0 in BF16)"),
    ("lowp_peak_flops_per_s", "positive", "FLOP/s", "datasheet dense peak FLOP/s of one GPU in the low precision"),
    ("lowp_efficiency", "positive", "1",
     "achieved fraction of the low-precision peak FLOP/s (one per GPU generation and precision)"),
    ("exposed_comm_s", "nonnegative", "s", "communication seconds per step that do not overlap with compute"),
    ("stage_hbm_bytes", "nonnegative", "bytes",
     "HBM bytes one rank of a pipeline stage moves per step in memory-bound work (element-wise ops, GEMM operands, "
     "the optimizer step)"),
    ("hbm_bytes_per_s", "positive", "bytes/s", "datasheet peak HBM bandwidth of one GPU"),
    ("hbm_efficiency", "positive", "1", "achieved fraction of the peak HBM bandwidth (one per GPU generation)"),
    ("stage_vector_flops", "nonnegative", "FLOP",
     "FLOPs one rank of a pipeline stage computes per step on the vector unit (element-wise operations, the "
     "optimizer step)"),
    ("vector_flops_per_s", "positive", "FLOP/s", "peak 16-bit FLOP/s of one GPU's vector (non-tensor) unit"),
    ("vector_efficiency", "positive", "1", "achieved fraction of the vector unit's peak (one per GPU generation)"),
)


def _specs() -> Mapping[str, SymbolSpec]:
    specs: dict[str, SymbolSpec] = {}
    for name, kind, unit, meaning in _TABLE:
        if not name.isidentifier():
            raise ValueError(f"symbol name {name!r} is not a Python identifier")
        if name in specs:
            raise ValueError(f"symbol {name!r} is declared twice")
        if kind not in _KINDS:
            raise ValueError(f"symbol {name!r}: unknown kind {kind!r}")
        specs[name] = SymbolSpec(name, meaning, unit, kind)
    return MappingProxyType(specs)


#: Every symbol's declaration, by name. Plain data: the SymPy-free run time checks inputs against it.
SPECS = _specs()

#: The symbols whose value changes from one layout of a model to the next: the degrees and micro-batch
#: shape, what a layout derives from them (switches, levels, shard sizes, score factors) and the layer
#: counts of a stage. Every other symbol is a field of the model or of the run, one value for all the
#: layouts a searcher prices together, so the code generator computes what depends on those alone
#: once per call (``codegen.lowering.hoist``). A matter of speed only: the values are the same.
PER_LAYOUT: frozenset[str] = frozenset({
    "b", "m", "mb", "t", "cp", "ep", "d", "p", "vp", "etp", "t_exp", "d_exp", "sp", "os_max_shard",
    "comm_d_non_exp", "comm_d_exp", "zero2_non_exp", "zero3_non_exp", "zero2_exp", "zero3_exp",
    "shard_p_os_non_exp_partial", "shard_p_os_exp", "shard_p_os_exp_partial", "shard_embed", "gather_embed",
    "comm_t", "comm_ep", "comm_cp", "max_rank_tokens", "score_factor_dp", "score_factor_tp", "score_factor_cp",
    "level_assign_0", "level_assign_1", "level_assign_2", "n_embedding", "n_output", "n_body", "n_extra",
    "n_extra_sel", "n_full_rec", "n_sel_rec", "part_size", "part_computed", "part_sharded", "part_held",
    "gathers", "reduces", "comm_volume", "overlap", "P_ne", "P_r", "P_s",
    # A collective call: its size and its group, placed on the system.
    "msg_bytes", "ranks", "ranks_per_node", "nodes", "nics_used", "ring_channels", "group_size", "group_stride",
    "group_size_2", "group_stride_2",
    "n_layers_stage", "n_moe_layers_stage", "n_dense_layers_stage", "n_dense_full_rec", "n_dense_sel_rec",
    "n_window_layers_stage", "n_window_full_rec", "n_window_sel_rec", "stage_flops", "exposed_comm_s", "stage_hbm_bytes", "stage_vector_flops",
    "stage_lowp_flops",
})
if not PER_LAYOUT <= set(SPECS):  # pragma: no cover - a typo here would silently slow the evaluators
    raise ValueError(f"PER_LAYOUT names undeclared symbols: {sorted(PER_LAYOUT - set(SPECS))}")


@functools.cache
def _symbols() -> Mapping[str, sympy.Symbol]:
    # SymPy is imported on the first symbol asked for, so that SPECS costs nothing.
    import sympy

    return MappingProxyType({name: sympy.Symbol(name, **_KINDS[s.kind]) for name, s in SPECS.items()})


def symbol(name: str) -> sympy.Symbol:
    """The model's symbol called *name*.

    Raises:
        KeyError: naming the unknown symbol.
    """
    try:
        return _symbols()[name]
    except KeyError:
        raise KeyError(f"unknown symbol {name!r}; known: {', '.join(sorted(SPECS))}") from None


def spec(name: str) -> SymbolSpec:
    """The declaration of the symbol called *name*."""
    symbol(name)
    return SPECS[name]


def syms(*names: str) -> tuple[sympy.Symbol, ...]:
    """Several symbols at once: ``s, b, h = syms("s", "b", "h")``."""
    return tuple(symbol(n) for n in names)
