"""NCCL's choice of algorithm and protocol at run time, on the generated candidate forms (no SymPy).

``symbolic.collective_time`` compiles, per collective and candidate (algorithm × protocol, in NCCL's
order), the time it really takes (``collective_<op>_<label>_time_s``) and, where it differs, NCCL's
tuned price (``collective_<op>_<label>_price_s``: tuning.cc's latency + bytes / bandwidth without the
ring loop's pipeline fill). NCCL's ``topoGetAlgoInfo`` (src/enqueue.cc) runs the candidate with
the smallest price, the first in its loop order on a tie (a strict ``<``); nccl-tests then measures
that candidate's real time. :func:`choose` does exactly that, element-wise: the chosen time is the real
time of the candidate with the smallest price. ``np.argmin`` keeps the first minimum, which is NCCL's
tie rule because the candidates are generated in NCCL's order (tree, ring, NVLS, then hierarchical,
protocols LL, LL128, Simple). The hierarchical schedule (:data:`OUTSIDE_TUNER`: no NCCL algorithm, which its
tuner does not price) is evaluated beside them for comparison and never picked: NCCL runs its own algorithms,
and nccl-tests and a training run measure those. Every candidate's time grows with S, so the chosen time falls
as S grows only at NCCL's own switches; :func:`next_fall` finds where (docs/time.md, "Where the time falls as S
grows").

The choice is done here rather than as one closed form (a ``Piecewise`` over the candidates whose
conditions compare prices) because such a form costs SymPy minutes to build and lower, and the pick
is a comparison, not arithmetic: each candidate is evaluated once, the argmin is one NumPy call.

Public API::

    labels(op) -> tuple[str, ...]                 the candidates of op, NCCL's order
    choose(op, values) -> Choice                  chosen time, index, every candidate's time and price
    allowed(op, algorithms, protocols)            the candidates NCCL may run under NCCL_ALGO / NCCL_PROTO
    arguments(op) -> frozenset[str]               every symbol the candidate forms of op read
    slopes(op, values, index) -> dict             the chosen candidate's derivatives (a.e.)
    next_fall(pick_at, size, *, top) -> Fall | None   where the chosen time first falls below its value at size
    LEVEL_PARAMETERS (symbolic.vocabulary's), SLOPE_BY

Derivatives (the sensitivity in seconds): ``symbolic.collective_time`` generates, per candidate,
``∂t/∂msg_bytes``, ``∂t/∂ranks`` (the placement held) and ``∂t/∂λ`` for each level parameter (a
relative scale of a network level's latencies, α, or bandwidths, β). :func:`slopes` evaluates the
chosen candidate's (the pick is a step function of its inputs: a.e. its derivative is the chosen
candidate's). The hierarchical candidate's are not generated (its nest of ``Min`` over phases takes SymPy
minutes to differentiate): it is never picked, so no slope is taken of it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping, Sequence

import numpy as np

import generated
import hardware
from symbolic.vocabulary import LEVEL_PARAMETERS  # (re-exported: the level parameters of the sensitivity)

from .engine import BOUND_BLOCK, BoundKernel, bound_scratch, bound_term, term_arguments, term_function

__all__ = ["Choice", "Chooser", "Fall", "LEVEL_PARAMETERS", "OUTSIDE_TUNER", "SLOPE_BY", "allowed", "arguments",
           "choose", "enabled_on", "labels", "next_fall", "slopes"]

#: What :func:`slopes` differentiates the chosen time in: the call's S and n, then the level parameters.
SLOPE_BY = ("msg_bytes", "ranks", *LEVEL_PARAMETERS)


@functools.cache
def labels(op: str) -> tuple[str, ...]:
    """The candidates of *op* (``ring_ll``, ``tree_simple``, ``nvls_simple``, …) in NCCL's loop order.

    Raises:
        ValueError: *op* has no generated candidate forms.
    """
    out = _candidates().get(op)
    if not out:
        raise ValueError(f"op: no collective time forms for {op!r}")
    return out


@functools.cache
def _candidates() -> dict[str, tuple[str, ...]]:
    """Every collective's candidates in the generated table's order (NCCL's), from one pass over the table
    (a few thousand forms: a pass per collective cost a cold search 1 ms each)."""
    out: dict[str, list[str]] = {}
    for meta in generated.FORMULAS.values():
        pairs = dict(meta.get("variant", ()))
        if "op" in pairs and pairs.get("what") == "time" and "candidate" in pairs:
            out.setdefault(pairs["op"], []).append(pairs["candidate"])
    return {op: tuple(found) for op, found in out.items()}


def _time_name(op: str, label: str) -> str:
    return f"collective_{op}_{label}_time_s"


def _price_name(op: str, label: str) -> str:
    """The price form of a candidate, or its time form where NCCL's price is its time."""
    name = f"collective_{op}_{label}_price_s"
    return name if name in generated.FORMULAS else _time_name(op, label)


@functools.cache
def arguments(op: str) -> frozenset[str]:
    """Every symbol the time and price forms of *op* read."""
    names = {n for label in labels(op) for n in (_time_name(op, label), _price_name(op, label))}
    return frozenset(a for n in names for a in term_arguments(n))


def _call(name: str, values: Mapping[str, Any]) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.asarray(term_function(name)(**{a: values[a] for a in term_arguments(name)}),
                          dtype=float)


@dataclass(frozen=True)
class Choice:
    """NCCL's pick among the candidates of one collective, element-wise over broadcast inputs.

    Attributes:
        time_s: the real time of the chosen candidate.
        index: the chosen candidate's position in ``labels``.
        labels: the candidates, NCCL's order.
        times: every candidate's real time, ``(K, …)`` (``inf`` where unavailable).
        prices: every candidate's tuned price, ``(K, …)``.
    """

    time_s: np.ndarray
    index: np.ndarray
    labels: tuple[str, ...]
    times: np.ndarray
    prices: np.ndarray

    @property
    def algorithm(self) -> np.ndarray:
        """The chosen candidate's label per element."""
        return np.asarray(self.labels)[self.index]


#: Candidates that NCCL's tuner does not price (``symbolic.collective_time``: the hierarchical schedule of phases,
#: no NCCL algorithm): :func:`choose` evaluates them, for comparison, and never picks one.
OUTSIDE_TUNER = frozenset({"hierarchical"})

#: Candidates that are infinite (unavailable) by their own forms' conditions: the hierarchical one on a
#: group inside one node (``nodes < 2``), NVLS where the switch has none (``nvls = 0``) or across nodes, PAT
#: but at one rank per node across nodes. :func:`choose` does not evaluate them where every element is
#: unavailable (a test holds the forms to it).
_UNAVAILABLE = {
    "hierarchical": lambda v: bool((np.asarray(v["nodes"]) < 2).all()),
    "nvls_simple": lambda v: bool((np.asarray(v["nvls"]) <= 0).all() or (np.asarray(v["nodes"]) >= 2).all()),
    "pat_simple": lambda v: bool(((np.asarray(v["ranks_per_node"]) != 1) | (np.asarray(v["nodes"]) < 2)).all()),
}


@functools.cache
def _plan(op: str) -> tuple[tuple[str, Any, tuple[str, ...], Any, tuple[str, ...]], ...]:
    """Per candidate: (label, time function, its arguments, price function or None where the price is the time,
    the price's arguments)."""
    out = []
    for label in labels(op):
        t, p = _time_name(op, label), _price_name(op, label)
        out.append((label, term_function(t), tuple(term_arguments(t)),
                    None if p == t else term_function(p), tuple(term_arguments(p))))
    return tuple(out)


def allowed(op: str, algorithms: Collection[str] | None = None,
            protocols: Collection[str] | None = None) -> tuple[bool, ...] | None:
    """Which candidates of *op* (``labels(op)``) NCCL may run with only *algorithms* and *protocols* enabled
    (``NCCL_ALGO`` / ``NCCL_PROTO`` names in lower case: tree, ring, nvls, nvlstree, pat; ll, ll128, simple);
    ``None`` = no restriction. The hierarchical schedule, not NCCL's, goes where the algorithms are restricted;
    the point-to-point candidates (all-to-all, send/recv), which NCCL's tuner does not pick, and the expert
    dispatch's (DeepEP's kernels, no NCCL) are never restricted.
    """
    if algorithms is None and protocols is None:
        return None
    out = []
    for label in labels(op):
        algorithm, _, protocol = label.partition("_")
        if algorithm in ("p2p", "dedup"):
            out.append(True)
        elif label in OUTSIDE_TUNER:
            out.append(algorithms is None)
        else:
            out.append((algorithms is None or algorithm in algorithms) and (protocols is None or protocol in protocols))
    return tuple(out)


def enabled_on(system: hardware.System, op: str, algorithms: Collection[str] | None = None,
               protocols: Collection[str] | None = None) -> tuple[bool, ...] | None:
    """:func:`allowed` for *op* on *system*: what its network's transport runs (``hardware.transport``: a transport
    whose published NCCL settings restrict the algorithms or protocols), within *algorithms* and *protocols* where a
    run restricts them further (its ``NCCL_ALGO`` / ``NCCL_PROTO``); ``None`` where nothing is restricted."""
    runs = hardware.transport(system)
    if set(runs.algorithms) != set(hardware.ALGORITHMS):
        algorithms = set(runs.algorithms) & set(algorithms) if algorithms is not None else set(runs.algorithms)
    if set(runs.protocols) != set(hardware.PROTOCOLS):
        protocols = set(runs.protocols) & set(protocols) if protocols is not None else set(runs.protocols)
    return allowed(op, algorithms, protocols)


def choose(op: str, values: Mapping[str, Any], enabled: tuple[bool, ...] | None = None) -> Choice:
    """The candidate of *op* NCCL runs (smallest price, first on ties) and the time it takes.

    *values* binds every symbol of :func:`arguments` (numbers or arrays that broadcast together). *enabled*
    (:func:`allowed`): the candidates NCCL may run, the others priced and timed as unavailable (``inf``).
    """
    times, prices = [], []
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for label, time_fn, time_args, price_fn, price_args in _plan(op):
            if label in _UNAVAILABLE and _UNAVAILABLE[label](values):
                times.append(np.inf)
                prices.append(np.inf)
                continue
            t = time_fn(**{a: values[a] for a in time_args})
            times.append(t)
            prices.append(t if price_fn is None else price_fn(**{a: values[a] for a in price_args}))
    shape = np.broadcast_shapes(*(np.shape(x) for x in times), *(np.shape(x) for x in prices))
    times_a = np.empty((len(times), *shape))
    prices_a = np.empty((len(times), *shape))
    for i, (t, p) in enumerate(zip(times, prices)):
        times_a[i] = t
        prices_a[i] = p
        if enabled is not None and not enabled[i]:
            times_a[i] = np.inf
            prices_a[i] = np.inf
    return _pick(op, times_a, prices_a)


def _pick(op: str, times_a: np.ndarray, prices_a: np.ndarray) -> Choice:
    """The choice from every candidate's time and price ``(K, …)`` (*prices_a* is written to: NaN → inf).

    NCCL's candidates compete by their tuned price, as ``topoGetAlgoInfo`` does; the hierarchical schedule
    (:data:`OUTSIDE_TUNER`), which NCCL does not run, keeps its time and price in the choice and is never picked.
    Each candidate's time grows with S, so the time of this choice falls with S only where NCCL's own pick
    switches (docs/time.md, "Where the time falls as S grows").
    """
    prices_a[np.isnan(prices_a)] = np.inf
    names = labels(op)
    tuned = np.array([label not in OUTSIDE_TUNER for label in names])
    competing = prices_a
    if not tuned.all():  # the candidates NCCL does not run take no part in the argmin
        competing = np.where(tuned.reshape((-1,) + (1,) * (prices_a.ndim - 1)), prices_a, np.inf)
    index = np.argmin(competing, axis=0)
    time = np.take_along_axis(times_a, index[None], axis=0)[0]
    return Choice(time_s=time, index=index, labels=names, times=times_a, prices=prices_a)


class Chooser:
    """:func:`choose` for one collective with the values of *shared* (the hardware's constants) bound once.

    ``Chooser(op, shared)(values)`` is ``choose(op, {**shared, **values})``, the same numbers to the bit,
    for a caller that asks again and again with new placements, sizes and group sizes (the time pricer:
    per item and block of layouts): each candidate's time and price forms run as their kernels
    (``engine.bound_term``: the shared arguments and the forms' invariants bound here),
    writing straight into the ``(K, …)`` arrays of every candidate's time and price, with one set of
    scratch buffers per call; a call of a generated function would convert and broadcast its arguments
    and allocate its output and buffers each time, which on the pricer's small arrays costs more than
    the arithmetic. A call this cannot take (a form without a kernel or with invariants that read a
    varying value, a value of *shared* given again, more than ``BOUND_BLOCK`` elements) is :func:`choose`'s.
    """

    def __init__(self, op: str, shared: Mapping[str, Any], enabled: tuple[bool, ...] | None = None) -> None:
        self.op = op
        self.shared = dict(shared)
        #: The candidates NCCL may run (``allowed``; ``None``: all), as ``choose`` takes them.
        self.enabled = enabled
        forms: list[tuple[str, BoundKernel | None, BoundKernel | None, bool]] = []
        for label in labels(op):
            time_name, price_name = _time_name(op, label), _price_name(op, label)
            same = price_name == time_name
            forms.append((label, bound_term(time_name, self.shared),
                          None if same else bound_term(price_name, self.shared), same))
        #: Per candidate: (label, time kernel, price kernel or None, whether the price is the time).
        self._forms = tuple(forms)
        #: Every form has a kernel and every shared value is one number (the output's shape is then the
        #: varying values' broadcast): the direct path is open.
        self.direct = (all(np.ndim(v) == 0 for v in self.shared.values())
                       and all(t is not None and (same or p is not None) for _, t, p, same in forms))
        kernels = [k for _, t, p, _ in forms for k in (t, p) if k is not None]
        self._reals = max((k.reals for k in kernels), default=0)
        self._masks = max((k.masks for k in kernels), default=0)
        #: Per candidate, the varying arguments its forms read (the output's shape is theirs broadcast).
        self._reads = tuple(frozenset(a for k in (t, p) if k is not None for a in k.varying) for _, t, p, _ in forms)

    def __call__(self, values: Mapping[str, Any]) -> Choice:
        """NCCL's pick for the varying *values* (numbers or arrays that broadcast together)."""
        prepared = self._prepare(values)
        if prepared is None or math.prod(prepared[2]) > BOUND_BLOCK:
            return choose(self.op, {**self.shared, **values}, self.enabled)
        arrays, available, shape = prepared
        return _pick(self.op, *self._fill(arrays, shape, available, ()))

    def times(self, parts: Sequence[Mapping[str, Any]]) -> list[np.ndarray]:
        """``[self(values).time_s for values in parts]``, the same numbers, as one evaluation of every candidate
        over the parts' elements side by side (flat) where they take the direct path together.

        The forms and the pick are element-wise (a ``Piecewise`` branch a block skips because no element
        takes it is overwritten where it runs: ``Call`` cuts large arrays into blocks on the same ground),
        and a candidate one part would not evaluate (``_UNAVAILABLE``) is set to ``inf`` over that part's
        elements, as that part's own call has it. The time pricer asks once per collective and block of
        layouts instead of once per item: a form's fixed cost per call (its 10-60 statements) is most of
        the work on its small arrays.
        """
        prepared = [self._prepare(values) for values in parts]
        if len(parts) < 2 or any(p is None for p in prepared):
            return [self(values).time_s for values in parts]
        sizes = [math.prod(shape) for _, _, shape in prepared]
        evaluated = [any(available[k] for _, available, _ in prepared) for k in range(len(self._forms))]
        reads = {a for k, on in enumerate(evaluated) if on for a in self._reads[k]}
        try:
            arrays = {a: np.concatenate([(values[a] if values[a].shape == shape else np.broadcast_to(values[a], shape))
                                         .reshape(-1) for values, _, shape in prepared]) for a in reads}
        except (KeyError, ValueError):  # a part without a value the others read, or one that does not broadcast
            return [self(values).time_s for values in parts]
        if sum(sizes) > BOUND_BLOCK:
            return [self(values).time_s for values in parts]
        off = []
        start = 0
        for (_, available, _), size in zip(prepared, sizes):
            off += [(k, slice(start, start + size)) for k, on in enumerate(evaluated) if on and not available[k]]
            start += size
        time = _pick(self.op, *self._fill(arrays, (sum(sizes),), evaluated, off)).time_s
        out = []
        start = 0
        for (_, _, shape), size in zip(prepared, sizes):
            out.append(time[start:start + size].reshape(shape))
            start += size
        return out

    def _prepare(self, values: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], list[bool], tuple[int, ...]] | None:
        """*values* as float64 arrays, which candidates are available and the output's shape; ``None`` where the
        direct path is closed (see the class)."""
        if not self.direct or not self.shared.keys().isdisjoint(values):
            return None
        merged = {**self.shared, **values}
        arrays = {k: v if type(v) is np.ndarray and v.dtype == np.float64 else np.asarray(v, dtype=np.float64)
                  for k, v in values.items()}
        available = [not (label in _UNAVAILABLE and _UNAVAILABLE[label](merged)) and (self.enabled is None
                                                                                      or self.enabled[k])
                     for k, (label, *_) in enumerate(self._forms)]
        shapes = {arrays[a].shape for on, reads in zip(available, self._reads) if on for a in reads}
        shape = shapes.pop() if len(shapes) == 1 else np.broadcast_shapes(*shapes)  # most often one, or two
        return arrays, available, shape

    def _fill(self, arrays: Mapping[str, np.ndarray], shape: tuple[int, ...], evaluated: Sequence[bool],
              off: Sequence[tuple[int, slice]]) -> tuple[np.ndarray, np.ndarray]:
        """Every candidate's time and price ``(K, *shape)``: ``inf`` for one not *evaluated* and over the
        elements *off* gives (candidate, slice); the others' kernels write straight into their rows."""
        times_a = np.empty((len(self._forms), *shape))
        prices_a = np.empty((len(self._forms), *shape))
        reals, masks = bound_scratch(shape, self._reals, self._masks)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            for i, ((_label, time_k, price_k, same), on) in enumerate(zip(self._forms, evaluated)):
                time_out, price_out = times_a[i, ...], prices_a[i, ...]  # views, also of a 0-d shape
                if not on:
                    time_out.fill(np.inf)
                    price_out.fill(np.inf)
                    continue
                assert time_k is not None
                time_k.into(time_out, arrays, reals, masks)
                if same:
                    np.copyto(price_out, time_out)
                else:
                    assert price_k is not None
                    price_k.into(price_out, arrays, reals, masks)
        for i, elements in off:
            times_a[i, elements] = np.inf
            prices_a[i, elements] = np.inf
        return times_a, prices_a


def _slope_name(op: str, label: str, by: str) -> str:
    suffix = f"__d_{by}" if by in ("msg_bytes", "ranks") else f"__scale_{by}"
    return f"{_time_name(op, label)}{suffix}"


def slopes(op: str, values: Mapping[str, Any], index: np.ndarray) -> dict[str, np.ndarray]:
    """The derivatives of the chosen candidate's real time (*index* from :func:`choose`), by ``SLOPE_BY``.

    ``msg_bytes``: seconds per byte; ``ranks``: seconds per rank (the placement held); a level parameter:
    seconds per unit of its relative scale (``Σ sym · ∂t/∂sym`` over the level's symbols). Almost
    everywhere: where the pick or a ``Min`` inside a candidate switches, the active branch's.
    """
    names = labels(op)
    index = np.asarray(index)
    out: dict[str, np.ndarray] = {}
    for by in SLOPE_BY:
        per = []
        for label in names:
            if label in OUTSIDE_TUNER:
                per.append(np.zeros(()))  # never picked (its derivatives are not generated)
            elif _slope_name(op, label, by) in generated.FORMULAS:
                per.append(_call(_slope_name(op, label, by), values))
            else:
                per.append(np.zeros(()))  # not generated: the derivative is 0
        stack = np.stack(np.broadcast_arrays(*per, index)[:len(names)])
        stack = np.where(np.isfinite(stack), stack, 0.0)  # an unavailable candidate is never chosen
        out[by] = np.take_along_axis(stack, np.broadcast_to(index, stack.shape[1:])[None], axis=0)[0]
    return out


# --------------------------------------------------------------------------- where the time falls as S grows

#: Why NCCL's pick switches, by the candidate it switches to: point-to-point calls change protocol at NCCL's
#: P2P LL threshold, the collectives where the tuner's price of another candidate becomes the smallest.
_SWITCH_RULES = {
    "p2p": "NCCL's P2P LL threshold (src/enqueue.cc: LL while a channel's bytes are at most P2P_LL_THRESHOLD, "
           "16384; Simple above)",
    "tuned": "NCCL's tuner (src/enqueue.cc topoGetAlgoInfo runs the smallest tuned price, tuning.cc's latency + "
             "bytes / bandwidth, which leaves out the ring loop's pipeline fill)",
}


@dataclass(frozen=True)
class Fall:
    """The first size above a given one where the time of NCCL's pick is below the time at that size.

    Attributes:
        msg_bytes: the first whole size at or after NCCL's switch whose time is below the given size's.
        before, after: NCCL's pick one byte below the switch and at it.
        time_s: the time at *msg_bytes*.
        rule: which rule of NCCL's makes the switch (the tuner's price or the P2P LL threshold).
    """

    msg_bytes: float
    before: str
    after: str
    time_s: float
    rule: str


def next_fall(pick_at: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], size: float, *,
              top: float) -> Fall | None:
    """Where the chosen time first falls below its value at *size* as S grows to *top*, or ``None``.

    *pick_at(sizes)* gives, for an array of whole sizes, the chosen time and the chosen candidate's label.
    Every candidate's time grows with S, so the chosen time can fall only where the pick switches: each
    switch on a grid of 32 sizes per octave is located to the byte (every switch at once, 256 sizes per
    switch and round) and the time at its first byte compared with the time at *size*.
    """
    time0, _ = pick_at(np.array([float(size)]))
    t0 = float(np.asarray(time0)[0])
    octaves = max(1, math.ceil(math.log2(top / size)))
    ladder = np.minimum(np.ceil(size * 2.0 ** (np.arange(1, 32 * octaves + 1) / 32)), top)
    grid = np.unique(np.concatenate([[float(size)], ladder]))
    names = np.asarray(pick_at(grid)[1])
    at = np.flatnonzero(names[1:] != names[:-1])
    if not at.size:
        return None
    lo, hi, below = grid[at], grid[at + 1], names[at]  # the pick is *below* at lo, another one at hi
    steps = np.arange(1, 257)
    rows = np.arange(lo.size)
    while np.any(hi - lo > 1):
        probe = np.minimum(lo[:, None] + np.floor((hi - lo)[:, None] * steps / (steps.size + 1)), hi[:, None])
        moved = np.asarray(pick_at(probe.ravel())[1]).reshape(probe.shape) != below[:, None]
        first = np.where(moved.any(axis=1), moved.argmax(axis=1), steps.size)
        hi = np.where(first < steps.size, probe[rows, np.minimum(first, steps.size - 1)], hi)
        lo = np.where(first > 0, probe[rows, np.maximum(first - 1, 0)], lo)
    times, after = pick_at(hi)
    times, after = np.asarray(times, dtype=float), np.asarray(after)
    for k in np.flatnonzero(times < t0)[:1]:
        label = str(after[k])
        rule = _SWITCH_RULES["p2p" if label.startswith("p2p_") else "tuned"]
        return Fall(msg_bytes=float(hi[k]), before=str(below[k]), after=label, time_s=float(times[k]), rule=rule)
    return None
