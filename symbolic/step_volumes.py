"""Bytes per rank per training step, one collective call at a time, in consistent units.

For every dimension: which collective runs, over which group, how many calls per step, the
nccl-tests size S of one call (``*_msg_bytes``: the whole buffer for all-reduce, the gathered
buffer for all-gather / reduce-scatter, the per-rank send buffer for all-to-all, the message for
send/recv) and the bytes one rank sends per step with a bandwidth-optimal implementation
(``*_step_bytes``: calls × S × the collective's share from ``symbolic.collectives``). A pricer
feeds S into ``symbolic.collective_time`` with the group from ``symbolic.placement``.

These are the new convention; the original's mixed-unit volumes (``tp``, ``dp``, ``ep``, ``cp``,
``fsdp`` modules) stay untouched for the reference check. Layout conventions (Megatron-LM):
sequence parallelism splits the sequence over the TP group outside attention and the MLP, so a
rank holds ``s b h / (cp t)`` activation elements between layers; MoE tokens are dispatched from
that shard; gradients are reduced once per step (after the last micro-batch), ZeRO-3 / FSDP
gathers parameters once in the forward and once in the backward of every micro-batch.
"""

from __future__ import annotations

import sympy

from . import collectives
from .formula import Formula
from .symbols import syms

__all__ = ["FORMULAS"]

(s, b, h, a, n_kv, dh, cp, t, ep, d, m, vp, bytes_compute, bytes_p, bytes_grad, n_chosen_exp, cap_fact,
 P_ne, P_r, d_exp, t_exp, etp, layers, moe_layers) = syms(
    "s", "b", "h", "a", "n_kv", "dh", "cp", "t", "ep", "d", "m", "vp", "bytes_compute", "bytes_p", "bytes_grad",
    "n_chosen_exp", "cap_fact", "P_ne", "P_r", "d_exp", "t_exp", "etp", "n_layers_stage", "n_moe_layers_stage")

_ULYSSES = ("Jacobs et al. 2023 DeepSpeed-Ulysses (arXiv:2309.14509) Sec. 3.1: an all-to-all of each of Q, K, V "
            "before the attention and one of its output after it, forward; their gradients backward")
_MEGATRON = "Korthikanti et al. 2022 (arXiv:2205.05198) Sec. 4.2.2: SP = all-gather + reduce-scatter, 2 of each " \
            "per layer in the forward, 2 in the backward"

#: Activation of one micro-batch on one rank between layers, bytes (full sequence, before the SP split).
_activation = s * b * h * bytes_compute / cp
#: The original's fallbacks: unset key/value heads read as a, unset head width as h / a.
_kv_heads = sympy.Piecewise((a, sympy.Eq(n_kv, 0)), (n_kv, True))
_head_width = sympy.Piecewise((h / a, sympy.Eq(dh, 0)), (dh, True))

_tp_calls = 4 * layers * m
_cp_msg = 2 * (s / cp) * b * _kv_heads * _head_width * bytes_compute / t
_cp_calls = 3 * (cp - 1) * layers * m
#: Ulysses: one rank's share of the sequence (s/cp tokens) for its TP share of the heads, exchanged for all the
#: sequence of 1/cp of those heads (and back). The queries and the output are as wide as the attention heads,
#: each of keys and values as wide as the key/value heads.
_ulysses_qo_msg = (s / cp) * b * a * _head_width * bytes_compute / t
_ulysses_kv_msg = (s / cp) * b * _kv_heads * _head_width * bytes_compute / t
_ulysses_calls = 4 * layers * m
_ep_msg = cap_fact * n_chosen_exp * (s / cp) * b * h * bytes_compute / t
_ep_calls = 4 * moe_layers * m
_dp_grad = P_ne * layers * bytes_grad / t
_dp_param = P_ne * layers * bytes_p / t
#: A rank's routed-expert gradients: the layer's experts over EP and expert TP. P_r already holds one expert-TP
#: slice of each expert (symbolic.params: hff_exp / max(etp, 1)), so the slice is undone before dividing by t_exp
#: (etp where given, else t): P_r / ep with etp given, P_r / (ep·t) without (as the memory family's expert part).
_exp_grad = P_r * sympy.Max(etp, 1) * moe_layers * bytes_grad / (ep * t_exp)
_pp_msg = (s / cp) * b * h * bytes_compute / t
_pp_calls = 2 * m * vp


def _f(name: str, expr: sympy.Expr, dimension: str, algorithm: str, unit: str, doc: str, source: str) -> Formula:
    return Formula(name=name, expr=expr, dimension=dimension, algorithm=algorithm, unit=unit, doc=doc, source=source)


FORMULAS: tuple[Formula, ...] = (
    # TP with sequence parallelism.
    _f("tp_sp_collective_msg_bytes", _activation, "tp", "sp", "bytes",
       "nccl-tests size S of one SP all-gather (gathered buffer) or reduce-scatter (input buffer) over the TP "
       "group: one micro-batch's activation, s b h / cp elements.", _MEGATRON),
    _f("tp_sp_all_gather_calls_count", _tp_calls, "tp", "sp", "count",
       "SP all-gathers per rank per step: 2 per layer forward, 2 backward (the gradients of the "
       "reduce-scatters), for every micro-batch.", _MEGATRON),
    _f("tp_sp_reduce_scatter_calls_count", _tp_calls, "tp", "sp", "count",
       "SP reduce-scatters per rank per step: 2 per layer forward, 2 backward, for every micro-batch.", _MEGATRON),
    _f("tp_sp_step_bytes", _tp_calls * (collectives.all_gather(_activation, t)
                                        + collectives.reduce_scatter(_activation, t)),
       "tp", "sp", "bytes", "Bytes one rank sends per step for SP's all-gathers and reduce-scatters (ring: "
       "(t - 1)/t of S per call).", _MEGATRON),
    # TP without SP.
    _f("tp_all_reduce_msg_bytes", _activation, "tp", "all_reduce", "bytes",
       "nccl-tests size S of one TP all-reduce without SP: one micro-batch's activation.",
       "Shoeybi et al. 2019 (arXiv:1909.08053) Sec. 3: 2 all-reduces per layer forward (g), 2 backward (f)"),
    _f("tp_all_reduce_calls_count", _tp_calls, "tp", "all_reduce", "count",
       "TP all-reduces per rank per step without SP: 2 per layer forward, 2 backward, per micro-batch.",
       "Shoeybi et al. 2019 (arXiv:1909.08053) Sec. 3"),
    _f("tp_all_reduce_step_bytes", _tp_calls * collectives.all_reduce(_activation, t), "tp", "all_reduce", "bytes",
       "Bytes one rank sends per step for TP all-reduces without SP (ring: 2(t - 1)/t of S per call).",
       "Shoeybi et al. 2019 (arXiv:1909.08053) Sec. 3"),
    # CP: ring attention passes key/value blocks around the CP ring.
    _f("cp_ring_send_recv_msg_bytes", _cp_msg, "cp", "ring_p2p", "bytes",
       "Bytes of one CP ring send/recv: the key and value block of s/cp tokens, this rank's heads (n_kv / t).",
       "Liu et al. 2023 Ring Attention (arXiv:2310.01889); Megatron-LM context parallelism: cp - 1 KV exchanges "
       "forward, cp - 1 KV plus cp - 1 dKV backward"),
    _f("cp_ring_send_recv_calls_count", _cp_calls, "cp", "ring_p2p", "count",
       "CP send/recvs per rank per step: 3 (cp - 1) per layer per micro-batch (KV forward; KV and dKV backward).",
       "Megatron-LM context parallelism (attention backward re-circulates KV and sends dKV)"),
    _f("cp_ring_step_bytes", _cp_calls * collectives.p2p(_cp_msg), "cp", "ring_p2p", "bytes",
       "Bytes one rank sends per step for CP ring attention.", "calls x message"),
    # CP, Ulysses: all-to-alls turn the sequence split into a head split around the attention and back.
    _f("cp_ulysses_qo_msg_bytes", _ulysses_qo_msg, "cp", "ulysses_all_to_all", "bytes",
       "Size S of one Ulysses all-to-all of the queries or the attention output (or their gradients): this rank's "
       "s/cp tokens of its a/t attention heads.", _ULYSSES),
    _f("cp_ulysses_kv_msg_bytes", _ulysses_kv_msg, "cp", "ulysses_all_to_all", "bytes",
       "Size S of one Ulysses all-to-all of the keys or the values (or their gradients): this rank's s/cp tokens "
       "of its n_kv/t key/value heads.", _ULYSSES),
    _f("cp_ulysses_all_to_all_calls_count", _ulysses_calls, "cp", "ulysses_all_to_all", "count",
       "Ulysses all-to-alls per rank per step of each width: 4 per layer per micro-batch (queries and output, or "
       "keys and values, forward; their gradients backward).", _ULYSSES),
    _f("cp_ulysses_step_bytes",
       _ulysses_calls * (collectives.all_to_all(_ulysses_qo_msg, cp) + collectives.all_to_all(_ulysses_kv_msg, cp)),
       "cp", "ulysses_all_to_all", "bytes",
       "Bytes one rank sends per step for Ulysses CP: its (cp - 1)/cp share of every all-to-all.",
       "calls x message; equals the original's Ulysses cp_traffic per layer and micro-batch (bytes) times layers "
       "and micro-batches for MHA and GQA"),
    # EP: token dispatch and combine.
    _f("ep_all_to_all_msg_bytes", _ep_msg, "ep", "all_to_all", "bytes",
       "nccl-tests size S of one EP all-to-all: the rank's routed tokens (its SP shard times top-k and the "
       "capacity factor) times h.", "Lepikhin et al. 2020 GShard (arXiv:2006.16668); Megatron-LM MoE token "
                                    "dispatcher (all-to-all dispatch and combine)"),
    _f("ep_all_to_all_calls_count", _ep_calls, "ep", "all_to_all", "count",
       "EP all-to-alls per rank per step: dispatch and combine forward, their gradients backward, per MoE layer "
       "per micro-batch.", "Megatron-LM MoE token dispatcher"),
    _f("ep_all_to_all_step_bytes", _ep_calls * collectives.all_to_all(_ep_msg, ep), "ep", "all_to_all", "bytes",
       "Bytes one rank sends per step for EP all-to-alls ((ep - 1)/ep of S per call).", "calls x share x S"),
    # DP: plain, distributed optimizer (ZeRO-1/2), ZeRO-3 / FSDP.
    _f("dp_all_reduce_msg_bytes", _dp_grad, "dp", "all_reduce", "bytes",
       "nccl-tests size S of the step's DP gradient all-reduce: the stage's non-expert gradients on this TP rank "
       "(one call per step; buckets split it without changing the bytes).",
       "Li et al. 2020 PyTorch DDP (arXiv:2006.15704)"),
    _f("dp_all_reduce_step_bytes", collectives.all_reduce(_dp_grad, d), "dp", "all_reduce", "bytes",
       "Bytes one rank sends per step for the DP gradient all-reduce.", "ring all-reduce: 2(d - 1)/d of S"),
    _f("dp_zero_reduce_scatter_msg_bytes", _dp_grad, "dp", "zero", "bytes",
       "nccl-tests size S of the step's gradient reduce-scatter under ZeRO-1/2 or a distributed optimizer.",
       "Rajbhandari et al. 2020 ZeRO (arXiv:1910.02054) Sec. 7"),
    _f("dp_zero_all_gather_msg_bytes", _dp_param, "dp", "zero", "bytes",
       "nccl-tests size S of the step's parameter all-gather after the sharded optimizer step (ZeRO-1/2).",
       "Rajbhandari et al. 2020 ZeRO (arXiv:1910.02054) Sec. 7"),
    _f("dp_zero_step_bytes", collectives.reduce_scatter(_dp_grad, d) + collectives.all_gather(_dp_param, d),
       "dp", "zero", "bytes", "Bytes one rank sends per step under ZeRO-1/2: one reduce-scatter, one all-gather.",
       "ZeRO Sec. 7: same volume as an all-reduce"),
    _f("dp_zero3_all_gather_calls_count", 2 * m, "dp", "zero3", "count",
       "Parameter all-gathers per rank per step under ZeRO-3 / FSDP: forward and backward of every micro-batch.",
       "ZeRO Sec. 7 (P_os+g+p: 1.5x the all-reduce volume per step with one micro-batch); Zhao et al. 2023 FSDP "
       "(arXiv:2304.11277)"),
    _f("dp_zero3_step_bytes", 2 * m * collectives.all_gather(_dp_param, d) + collectives.reduce_scatter(_dp_grad, d),
       "dp", "zero3", "bytes",
       "Bytes one rank sends per step under ZeRO-3 / FSDP: 2m parameter all-gathers, one gradient reduce-scatter.",
       "ZeRO Sec. 7; FSDP (arXiv:2304.11277)"),
    _f("dp_expert_all_reduce_msg_bytes", _exp_grad, "dp", "expert_all_reduce", "bytes",
       "nccl-tests size S of the step's expert-gradient all-reduce over the expert-data-parallel group "
       "(d_exp ranks): this rank's routed-expert gradients.", "Megatron-LM MoE: expert gradients reduce over "
                                                             "the expert data-parallel group"),
    _f("dp_expert_all_reduce_step_bytes", collectives.all_reduce(_exp_grad, d_exp), "dp", "expert_all_reduce",
       "bytes", "Bytes one rank sends per step for the expert-gradient all-reduce.",
       "ring all-reduce: 2(d_exp - 1)/d_exp of S"),
    # PP: activations forward, gradients backward, between adjacent stages.
    _f("pp_send_recv_msg_bytes", _pp_msg, "pp", "send_recv", "bytes",
       "Bytes of one PP send/recv: one micro-batch's activation (or its gradient) split over the TP group "
       "(Megatron's scatter/gather optimisation).", "Narayanan et al. 2021 (arXiv:2104.04473) Sec. 4.1"),
    _f("pp_send_recv_calls_count", _pp_calls, "pp", "send_recv", "count",
       "PP sends per rank per step: one activation forward and one gradient backward per micro-batch and "
       "virtual chunk (the first and last stage send half as many).", "Narayanan et al. 2021 Sec. 2.2"),
    _f("pp_send_recv_step_bytes", _pp_calls * collectives.p2p(_pp_msg), "pp", "send_recv", "bytes",
       "Bytes one rank sends per step between pipeline stages.", "calls x message"),
)
