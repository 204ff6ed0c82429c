"""Seconds per training step of every collective a pipeline stage runs, by dimension (consistent units).

Each item is one collective of one dimension over one parallel group, written four ways
(``<dim>_<collective>_stage_{calls_count, msg_bytes, step_bytes, ranks_count}``):

* ``calls_count``: calls per rank per step (``symbolic.step_volumes``' counts, times the switches
  that say whether the collective runs at all: a group of one rank, SP off, no ZeRO, one stage, the
  run's CP algorithm (``cp_ulysses``: Ulysses all-to-alls or ring send/recvs), the run's expert dispatcher
  (``ep_dedup``: NCCL's all-to-all or DeepEP / Hybrid-EP's kernels), an empty call — no
  routed experts — that NCCL discards);
* ``msg_bytes``: nccl-tests size S of one call (``symbolic.step_volumes``);
* ``step_bytes``: bytes one rank sends per step, ``calls × share(S)`` (``symbolic.collectives``);
* ``ranks_count``: ranks of the group the collective runs over (its degree).

The calls form also carries, as ``variant`` pairs, ``forward_share``: the share of the calls that the layers'
forward passes run (a fraction, forward calls over calls, declared per item beside its calls; 0 for the stage
items), which full recompute runs again (``codegen.pricing.step_time``); and, for the CP items, ``cp_ulysses``:
the value of the run's switch they run under (1: Ulysses, 0: the ring).

Seconds per step are ``calls × t(S, n)``, with ``t`` the real time of the candidate NCCL's tuner
picks for one call of S bytes over the n = ``ranks_count`` ranks of the group
(``symbolic.collective_time``'s per-candidate forms; the pick is
``codegen.pricing.collective.choose``). The pricer (``codegen.pricing.time``) does that product
at run time, binding the group's placement (``ranks_per_node``, ``nodes``, ``nics_used``,
``symbolic.placement`` under the layout's rank order) per item. NCCL's choice is not substituted
into these forms: they stay small, lower fast, and their derivatives in the degrees are simple
(the sensitivity in seconds chains them with the candidates' derivatives in S and n).

How a stage weighs them (``Formula.variant``: ``weight``):

* ``layer`` (TP, CP): the form is per transformer layer of the stage (``n_layers_stage = 1``); the
  stage's value is that times its transformer layers (body and MTP layers);
* ``moe_layer`` (EP): per MoE layer (``n_moe_layers_stage = 1``), times the stage's MoE layers;
* ``stage`` (DP, PP): the form holds the stage's layer counts itself (the gradient buffer grows with
  the stage's layers, so the time is not linear in them); PP is one per stage.

Not modelled (stated in docs/time.md): overlap of communication with compute (every second here is
exposed), the extra forward collectives of recomputed layers (the step time adds them by ``forward_share``),
the embedding and output layers' TP collectives, gradient bucketing (one DP call per step of the stage's
whole gradient, as ``step_volumes``).
"""

from __future__ import annotations

import dataclasses

import sympy

from . import collectives, step_volumes
from .formula import Formula
from .symbols import syms
from .vocabulary import DEGREES

__all__ = ["FORMULAS", "ITEMS", "SLOPE_FORMS", "SLOPE_VARIABLES"]

(t, cp, ep, d, t_exp, p, m, vp, sp, z2, z3, z2e, z3e, layers, moe_layers, ulysses, fsdp, reshards, dedup) = syms(
    "t", "cp", "ep", "d", "t_exp", "p", "m", "vp", "sp", "zero2_non_exp", "zero3_non_exp", "zero2_exp", "zero3_exp",
    "n_layers_stage", "n_moe_layers_stage", "cp_ulysses", "grad_shard_as_params", "reshards", "ep_dedup")
_S, _N, bytes_grad, bytes_p = syms("msg_bytes", "ranks", "bytes_grad", "bytes_p")

_VOLUMES = {f.name: f.expr for f in step_volumes.FORMULAS}


def _on(degree: sympy.Expr) -> sympy.Expr:
    """1 for a group of two or more ranks, 0 for one rank (degrees are integers >= 1).

    A step placed at 3/2, between the whole degrees: its derivative is 0 at every whole degree, so the
    sensitivity in seconds holds the switch (as the original's sensitivity holds ``comm_*``) instead of
    reading a one-sided kink.
    """
    return sympy.Piecewise((0, degree < sympy.Rational(3, 2)), (1, True))


_sp_on = _on(sp)  # the layout's sp field is t with sequence parallelism, 1 without


def _nonempty(size: sympy.Expr) -> sympy.Expr:
    """1 for a call that moves bytes, 0 for an empty one, which NCCL discards without a kernel or a latency
    (src/enqueue.cc ``taskAppend``: "Empty collectives can be discarded").

    The expert data-parallel collectives of a dense model (no routed experts: P_r = 0) are such calls; every
    other item's S is positive whenever its calls are not 0.
    """
    return sympy.Piecewise((0, size <= 0), (1, True))


def _dp_calls(zero1: sympy.Expr, zero2: sympy.Expr) -> dict[str, sympy.Expr]:
    """Calls per step of a data-parallel group's all-reduce, reduce-scatter and all-gather, by how it shards.

    *zero1* is 1 where only the optimizer states are sharded (``comm_d = 2``), *zero2* where the gradients are
    too (``comm_d = 3``); ``grad_shard_as_params`` (FSDP) shards the weights as well, and ``reshards`` frees
    them after each pass.

    * Nothing sharded: the accumulated gradients are all-reduced once per step (PyTorch DDP, Megatron-LM).
    * Optimizer states only (ZeRO-1, Megatron-LM's distributed optimizer): the accumulated gradients are
      reduce-scattered once per step and the updated weights all-gathered once.
    * Gradients sharded (ZeRO-2): a rank keeps only its shard of the gradients, so each micro-batch's
      gradients are reduce-scattered in its backward pass (m per step); the weights are all-gathered once.
    * Weights sharded too (FSDP, ZeRO-3): the gradients as in ZeRO-2; the weights are all-gathered before
      the forward and again before the backward of every micro-batch when resharded after each pass (2 m),
      once per step when they stay gathered (as the original's ``_fsdp_rounds``: 1/m per micro-batch).
    """
    sharded_grads = 1 - (1 - zero2) * (1 - fsdp)
    return {
        "all_reduce": (1 - zero1 - zero2) * (1 - fsdp),
        "reduce_scatter": zero1 * (1 - fsdp) + m * sharded_grads,
        "all_gather": (zero1 + zero2) * (1 - fsdp) + fsdp * (2 * m * reshards + (1 - reshards)),
    }


_DP_CALLS = _dp_calls(z2, z3)
#: The dense weights' gradients reduce over the data-parallel ranks and the context-parallel ones together:
#: every CP rank holds the same weights and computes gradients from its part of the sequence (Megatron-LM's
#: data-parallel group with context parallelism).
_DP_GROUP = d * cp
#: The experts' weights likewise over Megatron-LM's expert data-parallel group, the ranks left once the expert
#: tensor-parallel and expert-parallel ones are taken, CP included: world / (etp·ep·pp) = d·t·cp / (t_exp·ep).
#: (The original's d_exp leaves CP out unless etp > 1.)
_EDP_GROUP = d * t * cp / (t_exp * ep)
_EXPERT_DP_CALLS = _dp_calls(z2e, z3e)
_EXPERT_GRAD = _VOLUMES["dp_expert_all_reduce_msg_bytes"]
_EXPERT_PARAM = _EXPERT_GRAD.subs(bytes_grad, bytes_p)
_SHARE = {"all_gather": collectives.all_gather, "reduce_scatter": collectives.reduce_scatter,
          "all_reduce": collectives.all_reduce, "all_to_all": collectives.all_to_all,
          "ep_dispatch": collectives.all_to_all,
          "send_recv": lambda size, _group: collectives.p2p(size)}

#: (dimension, collective, op, group, weight, calls per step, forward calls per step, S, group degree, doc, source)
#: per item.
_ACT = _VOLUMES["tp_sp_collective_msg_bytes"]
_TP_CALLS = _VOLUMES["tp_sp_all_gather_calls_count"].subs(layers, 1)
_MEGATRON_SP = ("Korthikanti et al. 2022 (arXiv:2205.05198) Sec. 4.2.2 (SP: 2 all-gathers and 2 reduce-scatters "
                "per layer forward, 2 of each backward)")
_ULYSSES_CALLS = _VOLUMES["cp_ulysses_all_to_all_calls_count"].subs(layers, 1)
_ULYSSES = ("Jacobs et al. 2023 DeepSpeed-Ulysses (arXiv:2309.14509) Sec. 3.1: all-to-alls of Q, K, V before the "
            "attention and of its output after it, forward; of their gradients, backward")
_ZERO = ("Rajbhandari et al. 2020 ZeRO (arXiv:1910.02054) Sec. 5 and 7; Zhao et al. 2023 PyTorch FSDP "
         "(arXiv:2304.11277): all-gather before the forward and the backward, reduce-scatter after the backward; "
         "Megatron-LM's distributed optimizer (docs/source/api-guide/dist_optimizer.md): one reduce-scatter when "
         "the backward passes finish, one all-gather after the optimizer step")
#: The calls of one layer's forward pass per micro-batch, the rest of each item's calls per layer being its backward
#: pass's (what a full recompute, which runs the forward pass again, runs again: ``codegen.pricing.step_time``):
#: TP 2 all-gathers and 2 reduce-scatters (without SP 2 all-reduces) of 4 each; ring attention the cp - 1 key/value
#: passes of 3 (cp - 1); Ulysses the all-to-alls of Q and O, and of K and V, 2 of each width's 4; EP the dispatch
#: and the combine, 2 of 4. The stage items (DP, PP) run no collective inside a layer's forward pass.
_TP_FORWARD_CALLS = 2 * m
_RING_FORWARD_CALLS = (cp - 1) * m
_ULYSSES_FORWARD_CALLS = 2 * m
_EP_FORWARD_CALLS = 2 * m
#: The expert tensor-parallel group's calls per MoE layer and micro-batch: Megatron-Core's all-to-all token
#: dispatcher all-gathers the tokens an EP rank received over the expert-TP ranks (whose experts' weights are
#: split) before the experts, and reduce-scatters their output after them; the backward pass runs each as the
#: other. One of each kind forward, one backward; S is the gathered tokens, t_exp times a rank's routed ones.
_ETP_ON = _on(t_exp)
_ETP_CALLS = 2 * m
_ETP_FORWARD_CALLS = m
_ETP_MSG = t_exp * _VOLUMES["ep_all_to_all_msg_bytes"]
_ETP_SOURCE = ("Megatron-Core MoE (megatron/core/transformer/moe/token_dispatcher.py, MoEAlltoAllTokenDispatcher: "
               "gather_from_sequence_parallel_region over the expert tensor-parallel group after the EP all-to-all, "
               "reduce_scatter_to_sequence_parallel_region before the combine)")
#: The switches that say whether an item's collective runs at all, shared by its calls and its forward calls.
_TP_SP = _on(t) * _sp_on
_TP_NO_SP = _on(t) * (1 - _sp_on)
_RING = 1 - ulysses
_ULYSSES_ON = _on(cp) * ulysses
_EP_ON = _on(ep)
#: The run's expert dispatcher (``ep_dedup``): NCCL's all-to-all (0) or DeepEP / Hybrid-EP (1), which send the same
#: calls of the same S on their own deduplicating kernels (``symbolic.collective_time``, op ``ep_dispatch``).
_EP_CALLS = _VOLUMES["ep_all_to_all_calls_count"].subs(moe_layers, 1)
_DEDUP_SOURCE = ("Megatron-Core MoE flex token dispatcher (megatron/core/transformer/moe/token_dispatcher.py, "
                 "MoEFlexTokenDispatcher; fused_a2a.py: DeepEP / Hybrid-EP dispatch and combine, forward and backward)")
_NONE = sympy.Integer(0)
_ITEMS: tuple[tuple, ...] = (
    ("tp", "all_gather", "all_gather", "tp", "layer", _TP_CALLS * _TP_SP, _TP_FORWARD_CALLS * _TP_SP,
     _ACT, t, "SP all-gathers of one transformer layer over the TP group", _MEGATRON_SP),
    ("tp", "reduce_scatter", "reduce_scatter", "tp", "layer", _TP_CALLS * _TP_SP,
     _TP_FORWARD_CALLS * _TP_SP, _ACT, t, "SP reduce-scatters of one transformer layer over the TP group",
     _MEGATRON_SP),
    ("tp", "all_reduce", "all_reduce", "tp", "layer", _TP_CALLS * _TP_NO_SP, _TP_FORWARD_CALLS * _TP_NO_SP, _ACT, t,
     "TP all-reduces of one transformer layer without SP",
     "Shoeybi et al. 2019 (arXiv:1909.08053) Sec. 3: 2 all-reduces per layer forward, 2 backward"),
    ("cp", "send_recv", "send_recv", "cp", "layer",
     _VOLUMES["cp_ring_send_recv_calls_count"].subs(layers, 1) * _RING, _RING_FORWARD_CALLS * _RING,
     _VOLUMES["cp_ring_send_recv_msg_bytes"], cp,
     "CP ring-attention key/value send/recvs of one transformer layer (a ring that spans nodes steps at the "
     "speed of its network hops; the colossalai and hybrid algorithms, which the original prices alike)",
     "Liu et al. 2023 Ring Attention (arXiv:2310.01889); Megatron-LM context parallelism"),
    ("cp", "all_to_all_qo", "all_to_all", "cp", "layer", _ULYSSES_CALLS * _ULYSSES_ON,
     _ULYSSES_FORWARD_CALLS * _ULYSSES_ON, _VOLUMES["cp_ulysses_qo_msg_bytes"], cp,
     "Ulysses CP all-to-alls of the queries and the attention output of one transformer layer", _ULYSSES),
    ("cp", "all_to_all_kv", "all_to_all", "cp", "layer", _ULYSSES_CALLS * _ULYSSES_ON,
     _ULYSSES_FORWARD_CALLS * _ULYSSES_ON, _VOLUMES["cp_ulysses_kv_msg_bytes"], cp,
     "Ulysses CP all-to-alls of the keys and the values of one transformer layer", _ULYSSES),
    ("ep", "all_to_all", "all_to_all", "ep", "moe_layer", _EP_CALLS * _EP_ON * (1 - dedup),
     _EP_FORWARD_CALLS * _EP_ON * (1 - dedup), _VOLUMES["ep_all_to_all_msg_bytes"], ep,
     "EP token dispatch and combine all-to-alls of one MoE layer (forward and backward), NCCL's",
     "Lepikhin et al. 2020 GShard (arXiv:2006.16668); Megatron-LM MoE token dispatcher"),
    ("ep", "dedup_dispatch", "ep_dispatch", "ep", "moe_layer", _EP_CALLS * _EP_ON * dedup,
     _EP_FORWARD_CALLS * _EP_ON * dedup, _VOLUMES["ep_all_to_all_msg_bytes"], ep,
     "EP token dispatches and combines of one MoE layer (forward and backward) on DeepEP's or Hybrid-EP's kernels "
     "(S and the bytes sent: the NCCL all-to-all's of the same call; the kernels send fewer, docs/time.md)",
     _DEDUP_SOURCE),
    ("ep", "expert_tp_all_gather", "all_gather", "etp", "moe_layer", _ETP_CALLS * _ETP_ON,
     _ETP_FORWARD_CALLS * _ETP_ON, _ETP_MSG, t_exp,
     "expert tensor-parallel all-gathers of the tokens an EP rank received, before its experts (forward), and of "
     "the output's gradients (backward), per MoE layer", _ETP_SOURCE),
    ("ep", "expert_tp_reduce_scatter", "reduce_scatter", "etp", "moe_layer", _ETP_CALLS * _ETP_ON,
     _ETP_FORWARD_CALLS * _ETP_ON, _ETP_MSG, t_exp,
     "expert tensor-parallel reduce-scatters of the experts' partial outputs after them (forward), and of the "
     "input's gradients (backward), per MoE layer", _ETP_SOURCE),
    ("dp", "all_reduce", "all_reduce", "dp", "stage", _on(_DP_GROUP) * _DP_CALLS["all_reduce"], _NONE,
     _VOLUMES["dp_all_reduce_msg_bytes"], _DP_GROUP,
     "the stage's DP gradient all-reduce when nothing is sharded (one per step)",
     "Li et al. 2020 PyTorch DDP (arXiv:2006.15704)"),
    ("dp", "reduce_scatter", "reduce_scatter", "dp", "stage", _on(_DP_GROUP) * _DP_CALLS["reduce_scatter"], _NONE,
     _VOLUMES["dp_zero_reduce_scatter_msg_bytes"], _DP_GROUP,
     "the stage's DP gradient reduce-scatters: one per step with the optimizer states sharded (ZeRO-1), one per "
     "micro-batch with the gradients sharded (ZeRO-2, ZeRO-3 / FSDP)", _ZERO),
    ("dp", "all_gather", "all_gather", "dp", "stage", _on(_DP_GROUP) * _DP_CALLS["all_gather"], _NONE,
     _VOLUMES["dp_zero_all_gather_msg_bytes"], _DP_GROUP,
     "the stage's DP weight all-gathers: one per step after the sharded optimizer (ZeRO-1/2); under FSDP the "
     "forward and backward of every micro-batch (resharding), or one per step (the weights kept)", _ZERO),
    ("dp", "expert_all_reduce", "all_reduce", "edp", "stage",
     _on(_EDP_GROUP) * _EXPERT_DP_CALLS["all_reduce"] * _nonempty(_EXPERT_GRAD), _NONE, _EXPERT_GRAD, _EDP_GROUP,
     "the stage's routed-expert gradient all-reduce over the expert data-parallel group when nothing is sharded "
     "(none in a dense model)",
     "Megatron-LM MoE: expert gradients reduce over the expert data-parallel group"),
    ("dp", "expert_reduce_scatter", "reduce_scatter", "edp", "stage",
     _on(_EDP_GROUP) * _EXPERT_DP_CALLS["reduce_scatter"] * _nonempty(_EXPERT_GRAD), _NONE,
     _EXPERT_GRAD, _EDP_GROUP,
     "the stage's routed-expert gradient reduce-scatters over the expert data-parallel group, as the dense ones "
     "(none in a dense model)", _ZERO),
    ("dp", "expert_all_gather", "all_gather", "edp", "stage",
     _on(_EDP_GROUP) * _EXPERT_DP_CALLS["all_gather"] * _nonempty(_EXPERT_PARAM), _NONE,
     _EXPERT_PARAM, _EDP_GROUP,
     "the stage's routed-expert weight all-gathers over the expert data-parallel group, as the dense ones (none "
     "in a dense model)", _ZERO),
    ("pp", "send_recv", "send_recv", "pp", "stage", _VOLUMES["pp_send_recv_calls_count"] * _on(p), _NONE,
     _VOLUMES["pp_send_recv_msg_bytes"], sympy.Integer(2),
     "the stage's pipeline sends of activations (forward) and their gradients (backward) to its neighbour "
     "stage (every stage counted with 2 m vp sends; none with one stage)",
     "Narayanan et al. 2021 (arXiv:2104.04473) Sec. 2.2 and 4.1"),
)

_UNIT_OF = {"layer": "one transformer layer", "moe_layer": "one MoE layer", "stage": "the pipeline stage"}

#: Per item: (dimension, collective, group, weight): what the pricer reads from the variant pairs.
ITEMS: tuple[tuple[str, str, str, str], ...] = tuple((i[0], i[1], i[3], i[4]) for i in _ITEMS)


def _forward_share(calls: sympy.Expr, forward: sympy.Expr) -> sympy.Rational:
    """The share of an item's calls that its layers' forward passes run: forward calls over calls, one number.

    Raises:
        ValueError: when the ratio depends on the layout (the forward calls are not a fixed share of the calls, so
            a dimension's seconds could not be split by it).
    """
    if forward == 0:
        return sympy.Integer(0)
    # Each switch (a Piecewise step) stands for a symbol of its own, so that the ones both share cancel.
    switches = {w: sympy.Dummy() for w in (forward.atoms(sympy.Piecewise) | calls.atoms(sympy.Piecewise))}
    share = sympy.cancel(forward.xreplace(switches) / calls.xreplace(switches))
    if not share.is_Rational:
        raise ValueError(f"forward calls {forward} are no fixed share of the calls {calls}: {share}")
    return share


def _runs_under(calls: sympy.Expr) -> tuple[tuple[str, str], ...]:
    """``(("cp_ulysses", "1"),)`` for an item whose calls run under Ulysses only, ``"0"`` under the ring only, none
    for one that does not read the switch: which of a dimension's items the run's CP algorithm keeps."""
    if ulysses not in calls.free_symbols:
        return ()
    for value in (1, 0):
        if calls.subs(ulysses, 1 - value) == 0:
            return (("cp_ulysses", str(value)),)
    return ()


def _build() -> tuple[Formula, ...]:
    out: list[Formula] = []
    for dim, coll, op, group, weight, calls, forward, size, degree, doc, source in _ITEMS:
        variant = (("output", "time"), ("dimension", dim), ("collective", coll), ("group", group),
                   ("weight", weight), ("op", op))
        per = _UNIT_OF[weight]
        # The calls' own pairs: the share of them a layer's forward pass runs (``forward_share``, a fraction) and
        # the CP algorithm they run under.
        calls_pairs = (("forward_share", str(_forward_share(calls, forward))), *_runs_under(calls))
        rows = (
            ("calls_count", calls, "count", f"Calls per rank per step of {doc}, for {per}."),
            ("msg_bytes", size, "bytes", f"nccl-tests size S of one call of {doc}."),
            ("step_bytes", calls * _SHARE[op](size, degree), "bytes",
             f"Bytes one rank sends per step for {doc}, for {per} (calls x the collective's share of S)."),
            ("ranks_count", degree, "count",
             f"Ranks of the group of {doc} (the collective's n; seconds per step = calls x the time of one call "
             f"of S bytes over these ranks, NCCL's pick: collective_{op}_*_time_s)."),
        )
        for what, expr, unit, text in rows:
            own = calls_pairs if what == "calls_count" else ()
            out.append(Formula(name=f"{dim}_{coll}_stage_{what}", expr=expr, dimension=dim, algorithm=coll, unit=unit,
                               doc=text, source=source, variant=(*variant, *own, ("what", what))))
    return tuple(out)


#: What the sensitivity in seconds differentiates the item forms in: the layout's degrees and sizes, and the
#: stage's layer counts (the pricer relaxes them ∝ 1/p for ``p``, as ``symcost sensitivity`` does).
SLOPE_VARIABLES = (*DEGREES, "n_layers_stage", "n_moe_layers_stage")
#: The item forms the sensitivity in seconds chains: seconds = calls × t(S, n).
SLOPE_FORMS = ("calls_count", "msg_bytes", "ranks_count")


def _slopes(formulas: tuple[Formula, ...]) -> tuple[Formula, ...]:
    """``<item form>__d_<x>`` for the forms of ``SLOPE_FORMS`` and x of ``SLOPE_VARIABLES`` (nonzero ones).

    Derived fields (``t_exp``, ``sp``, the ZeRO switches, ``P_ne``, ``P_r``) are held, as the
    original's sensitivity holds them; ``Min``/``Max`` by their active branch (``symbolic.sensitivity``).
    """
    from .sensitivity import derivative

    out = []
    for f in formulas:
        pairs = dict(f.variant)
        if pairs["what"] not in SLOPE_FORMS:
            continue
        for x in SLOPE_VARIABLES:
            d = derivative(f, x)
            if d.expr != 0:
                variant = tuple((k, v) for k, v in f.variant if k != "what") + (("what", "slope"),
                                                                                 ("of", pairs["what"]), ("by", x))
                out.append(dataclasses.replace(d, variant=variant))
    return tuple(out)


_ITEM_FORMULAS = _build()
FORMULAS: tuple[Formula, ...] = _ITEM_FORMULAS + _slopes(_ITEM_FORMULAS)
