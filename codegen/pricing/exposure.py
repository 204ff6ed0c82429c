"""Exposed communication: the seconds of a step's collectives that its compute does not hide.

The time family (``codegen.pricing.time``) gives the seconds of each dimension's collectives at the bottleneck
stage (``by_dimension``: ``{"tp", "cp", "ep", "dp", "pp": (n,) seconds}``), each collective once per pass.
:func:`exposed_comm` turns them into the seconds the step waits for (docs/search.md, "Exposed communication"):

* Without overlap every collective is on the critical path: the tensor-, context- and expert-parallel ones
  in every layer (Megatron-LM issues the forward ones blocking), the pipeline sends, the data-parallel gradient
  reduction (Korthikanti et al.'s runs predate ``--overlap-grad-reduce``). Full recompute runs each layer's
  forward pass again, its collectives included: the forward share of each dimension more
  (:func:`forward_shares`).
* An **overlap** (``symbolic.vocabulary.OVERLAPS``, a run setting) hides a dimension's seconds behind compute,
  up to a window of that compute (``compute_s``: the bottleneck stage's compute seconds per step, ``m``
  micro-batches):

  - ``dp`` (Megatron-Core's ``overlap_grad_reduce`` and ``overlap_param_gather``): at ZeRO levels 0 and 1 the
    gradients are reduced once per step, bucket by bucket as the last micro-batch's backward pass produces them,
    and the updated weights gathered as the next step's first forward pass asks for them
    (``megatron/core/distributed/param_and_grad_buffer.py``, ``distributed_data_parallel.py``): a window of one
    micro-batch's compute, ``compute_s / m``. With an interleaved pipeline (``vp`` model chunks a stage, ``p``
    stages) each chunk's gradients are reduced as soon as its last micro-batch's backward pass ends and each
    chunk's weights gathered as the chunk before it starts its first micro-batch
    (``megatron/core/pipeline_parallel/schedules.py``, ``forward_backward_pipelining_with_interleaving``:
    ``grad_sync_func`` / ``param_sync_func`` per model chunk). The schedule runs micro-batches in groups of
    ``p`` a chunk, so the chunk reduced first (the last, backward runs them in reverse) still has ``p·(vp − 1)``
    chunk-passes of compute behind it: a window of ``u·(1 + p·(vp − 1))`` with ``u = compute_s / (m·vp)`` one
    micro-batch through one chunk, and the last chunk's own share ``c / vp`` waits behind ``u`` alone (exposed
    at least ``c / vp − u``). At ``vp = 1`` both are the window of one micro-batch. At levels 2 and 3 the calls
    come every micro-batch (ZeRO-2's gradient shards, FSDP's weight gathers, prefetched a layer ahead) beside
    that micro-batch's compute: a window of ``compute_s``.
  - ``tp`` (Transformer Engine's userbuffers, ``tp_comm_overlap``): each all-gather / reduce-scatter is split
    and run beside the GEMM it feeds or follows: a window of ``compute_s``. The streaming multiprocessors the
    communication kernels take from the GEMMs are not counted.
  - ``ep`` (Megatron-Core's ``overlap_moe_expert_parallel_comm``): the 1F1B schedule runs one micro-batch's
    forward pass beside another's backward, each one's all-to-alls beside the other's compute; the first and
    last micro-batch have no partner: a window of ``compute_s · (m − 1) / m``.
  - ``pp`` (Megatron-Core's ``overlap_p2p_comm``): the interleaved schedule posts the next transfers'
    isend/irecv before a model chunk's forward or backward pass and waits for them after it
    (``forward_backward_pipelining_with_interleaving``), each transfer beside a chunk's compute: a window of
    ``compute_s`` where ``vp > 1``. Without interleaving Megatron-Core batches the sends (``batch_p2p_comm``)
    and they stay exposed, bit for bit as without the overlap.

  The overlapped dimensions share one compute: together they hide at most ``compute_s``. So the exposed seconds
  are the sum over the dimensions not overlapped, plus ``max(Σ max(0, c_d − w_d), Σ c_d − compute_s)`` over
  those overlapped (``c_d`` a dimension's seconds, its full-recompute share included; ``w_d`` its window).
  With no overlap the sum is bit-for-bit the one before overlaps were modelled.

Public API::

    exposed_comm(parts, recompute, cp_algo=None, *, overlap=(), compute_s=None, m=None, zero=1, p=1, vp=1,
                 full_share=None)
        -> seconds
    forward_shares(cp_algo=None) -> {dimension: share of its calls a layer's forward pass runs}
    overlap_names(field, value) -> tuple of overlap names (checked)
    EXPOSED_DIMENSIONS
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import Any, Mapping

import numpy as np

import generated
from symbolic.vocabulary import OVERLAPS, RECOMPUTE_MODES, CpAlgorithm

from ..runtime.inputs import InputError, name_set

__all__ = ["EXPOSED_DIMENSIONS", "exposed_comm", "forward_shares", "overlap_names"]

#: Communication of these dimensions is exposed (docs/search.md, "Exposed communication").
EXPOSED_DIMENSIONS = ("tp", "cp", "ep", "pp", "dp")

#: The order full recompute adds the dimensions' forward seconds in (:data:`EXPOSED_DIMENSIONS`, each once; the
#: float sums round in this order).
_FORWARD_ORDER = ("tp", "ep", "cp", "pp", "dp")


@functools.cache
def _forward_shares(ulysses: str) -> tuple[tuple[str, Fraction], ...]:
    """(dimension, share) of the time family's items kept where the run's ``cp_ulysses`` switch is *ulysses*."""
    found: dict[str, set[Fraction]] = {}
    for meta in generated.FORMULAS.values():
        pairs = dict(meta.get("variant", ()))
        if pairs.get("output") != "time" or pairs.get("what") != "calls_count":
            continue
        if pairs.get("cp_ulysses", ulysses) != ulysses:  # an item of the other CP algorithm
            continue
        found.setdefault(pairs["dimension"], set()).add(Fraction(pairs["forward_share"]))
    out = []
    for dim, shares in found.items():
        if len(shares) != 1:
            raise ValueError(f"the {dim} items' calls declare different forward shares "
                             f"({', '.join(sorted(map(str, shares)))}): one share cannot split the {dim} seconds")
        out.append((dim, shares.pop()))
    return tuple(out)


def forward_shares(cp_algo: str | None = None) -> dict[str, Fraction]:
    """Per dimension of the time family, the share of its collective calls that the layers' forward passes run.

    From the generated table: the ``forward_share`` each item of ``symbolic.stage_time`` declares on its calls
    form (its forward calls over its calls), the same for every item of a dimension; of the CP items, those
    of *cp_algo* (the ``cp_ulysses`` pair: Ulysses, or ring attention for any other algorithm and ``None``). TP
    2 of its 4 all-gathers and 2 of its 4 reduce-scatters per layer, EP 2 of 4, ring CP cp - 1 of 3 (cp - 1),
    Ulysses 4 of 8, DP and PP none.

    Raises:
        ValueError: when items of one dimension declare different shares.
    """
    return dict(_forward_shares("1" if cp_algo == CpAlgorithm.ULYSSES.value else "0"))


def overlap_names(field: str, value: Any) -> tuple[str, ...]:
    """*value* as overlap names (``symbolic.vocabulary.OVERLAPS``), each once, in the vocabulary's order: a
    sequence of names, or one text of names separated by commas (``"dp,tp"``; ``"none"`` or ``""`` for none).

    Raises:
        InputError: naming *field* and the value: not text or a sequence of texts, or a name no overlap has.
    """
    return name_set(field, value, OVERLAPS, "overlap names")


def exposed_comm(parts: Mapping[str, np.ndarray], recompute: str, cp_algo: str | None = None, *,
                 overlap: tuple[str, ...] = (), compute_s: Any = None, m: Any = None, zero: int = 1,
                 p: Any = 1, vp: Any = 1, full_share: Any = None) -> np.ndarray:
    """Exposed communication seconds from the time family's per-dimension seconds of the bottleneck stage.

    The time family prices each collective once per pass (TP: the forward half, the backward half).
    Full recompute runs a layer's forward pass again, its collectives included (Megatron-LM's checkpointed
    forward re-executes the whole layer: the TP collectives, the MoE dispatch and combine, the CP exchanges):
    the forward share of each dimension more (:func:`forward_shares`: TP, EP and CP; CP's by *cp_algo*, ring
    attention when ``None``). Selective recompute repeats the core attention only, which communicates nothing;
    the all-gather sequence parallelism repeats in the backward pass is issued asynchronously beside the
    input-gradient GEMM in Megatron-LM and is not added. *full_share*: the fraction of the bottleneck stage's layers
    fully recomputed (a per-stage recompute list: that stage's count over its layers), whose forward collectives
    are repeated; default 1 under *recompute* ``"full"``, else 0.

    *overlap*: the dimensions whose seconds run beside compute (names of ``OVERLAPS``, checked by the caller:
    :func:`overlap_names`), each up to its window of *compute_s* (seconds per layout, the bottleneck stage's
    compute per step) over *m* micro-batches at ZeRO level *zero*, with *p* pipeline stages of *vp* model chunks
    each (the module's docstring); needs *compute_s* and *m* when not empty.

    Raises:
        InputError: an unknown *recompute* mode, or an *overlap* without *compute_s* and *m*.
    """
    if recompute not in RECOMPUTE_MODES:
        raise InputError(f"recompute: one of {', '.join(RECOMPUTE_MODES)}, got {recompute!r}")
    repeated = np.asarray(float(recompute == "full") if full_share is None else full_share, dtype=np.float64)
    shares = forward_shares(cp_algo) if np.any(repeated > 0) else {}
    if not overlap:
        total = sum(np.asarray(parts[k], dtype=np.float64) for k in EXPOSED_DIMENSIONS if k in parts)
        for dim in _FORWARD_ORDER:
            share = float(shares.get(dim, 0))
            if share:
                total = total + np.asarray(parts.get(dim, 0.0), dtype=np.float64) * share * repeated
        return total
    if compute_s is None or m is None:
        raise InputError("overlap: the exposed communication of an overlap needs the compute seconds and m")
    compute = np.asarray(compute_s, dtype=np.float64)
    micro = np.asarray(m, dtype=np.float64)
    virtual = np.asarray(vp, dtype=np.float64)
    unit = compute / (micro * virtual)  # one micro-batch through one model chunk of the stage
    dp_window = compute if zero >= 2 else np.minimum(unit * (1 + np.asarray(p, dtype=np.float64) * (virtual - 1)),
                                                     compute)
    windows = {"dp": dp_window, "tp": compute, "ep": compute * (micro - 1) / micro}
    exposed = np.zeros(np.broadcast_shapes(compute.shape, micro.shape))
    hidden_sum = np.zeros_like(exposed)  # Σ c_d of the overlapped dimensions
    beyond = np.zeros_like(exposed)      # Σ max(0, c_d − w_d) of them
    for dim in EXPOSED_DIMENSIONS:
        if dim not in parts:
            continue
        seconds = np.asarray(parts[dim], dtype=np.float64) * (1 + float(shares.get(dim, 0)) * repeated)
        if dim == "pp" and dim in overlap:  # overlapped in an interleaved pipeline only; else exposed, as before
            interleaved = virtual > 1
            exposed = exposed + np.where(interleaved, 0.0, seconds)
            seconds = np.where(interleaved, seconds, 0.0)
            hidden_sum = hidden_sum + seconds
            beyond = beyond + np.maximum(seconds - compute, 0.0)
        elif dim in overlap:
            hidden_sum = hidden_sum + seconds
            left = seconds - windows[dim]
            if dim == "dp" and zero < 2:  # the last chunk's share waits behind its own micro-batch alone
                left = np.maximum(left, seconds / virtual - unit)
            beyond = beyond + np.maximum(left, 0.0)
        else:
            exposed = exposed + seconds
    return exposed + np.maximum(beyond, hidden_sum - compute)
