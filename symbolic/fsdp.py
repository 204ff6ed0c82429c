"""Fully sharded data parallelism (FSDP): traffic of a part, a layer's and the root's parts, the rounds.

Restates, from HyperParallel SAPP-ND (docs/formulas.md, "FSDP"):

* ``EvalLayerComm.fsdp_traffic`` and ``EvalLayerComm.fsdp_layer_parts`` —
  published version of ``memory_estimation/evaluators/comm.py``;
* ``EvalLayerComm.fsdp_reduce_traffic`` — **inferred**: no published version
  shows it and ``comm_time.py`` only calls it (printout lines 594, 600); it is
  taken to be the all-reduce term of ``fsdp_traffic`` alone;
* ``fsdp_root_parts`` and ``_fsdp_rounds`` — ``comm_time.py`` printout lines
  518-529 and 532-546.

A *part* is a block of parameters FSDP handles as one: ``(N, c, k, g)`` = its
size in parameters, the ranks it is computed over (its TP width), the ranks it
is sharded over, and the ranks that hold it (shard copies included). Per part,
with ``w = N / max(1, c)`` the parameters of one TP slice,
``σ = max(1, k / max(1, c))`` the FSDP shards of a slice and
``κ = max(1, g / max(1, k))`` the copies of a shard::

    traffic = (σ − 1)/σ · w · (G · bytes_p + bytes_grad)      all-gathers, reduce-scatter
              + 2 (κ − 1)/κ · (w / σ) · bytes_grad · R          all-reduce between copies

``G`` gathers and ``R`` all-reduces per micro-batch come from ``_fsdp_rounds``.
Units: bytes per rank and micro-batch.

The switches of the original (``reshards``, ``shard_spans_cp``,
``tie_emb_out``) are resolved in Python before an expression is built; only
numeric conditions (``shard > t · param_cp``, ``p ≤ 1``) stay inside.

Oddities kept (docs/model.md, oddity 19): without resharding a layer is
gathered ``1/m`` times per micro-batch (once a step); copies of a shard
all-reduce once per micro-batch unless the non-expert shard is wider than
``t · param_cp`` — "a HyperParallel shard no wider than CP read as none".
"""

from __future__ import annotations

import enum
import functools
from typing import Iterable, NamedTuple

import sympy
from sympy import Max, Piecewise

from .formula import Formula
from .symbols import syms

__all__ = [
    "Part",
    "RootTable",
    "PART",
    "part_traffic",
    "part_reduce_traffic",
    "parts_traffic",
    "parts_reduce_traffic",
    "layer_parts",
    "root_parts",
    "param_cp",
    "rounds",
    "FORMULAS",
]

part_size, part_computed, part_sharded, part_held = syms("part_size", "part_computed", "part_sharded", "part_held")
gathers, reduces, bytes_p, bytes_grad = syms("gathers", "reduces", "bytes_p", "bytes_grad")
P_ne, P_r, P_s = syms("P_ne", "P_r", "P_s")
t, cp, d, ep, p, m, t_exp, d_exp, h, v = syms("t", "cp", "d", "ep", "p", "m", "t_exp", "d_exp", "h", "v")
shard_non_exp, shard_exp, shard_exp_partial = syms(
    "shard_p_os_non_exp_partial", "shard_p_os_exp", "shard_p_os_exp_partial")
shard_embed, gather_embed = syms("shard_embed", "gather_embed")

COMM = "HyperParallel SAPP-ND perf_estimation/comm_time.py"
EVALUATORS = "published version of HyperParallel SAPP-ND memory_estimation/evaluators/comm.py"

Scalar = sympy.Expr | int | float


class Part(NamedTuple):
    """One FSDP part as expressions: ``(N, c, k, g)``.

    Attributes:
        size: N, parameters of the part.
        computed: c, ranks it is computed over (its TP width).
        sharded: k, ranks it is sharded over.
        held: g, ranks that hold it, copies of the shard included.
    """

    size: sympy.Expr
    computed: sympy.Expr
    sharded: sympy.Expr
    held: sympy.Expr


#: The generic part: one symbol per field, what the per-part formulas are written over.
PART = Part(part_size, part_computed, part_sharded, part_held)


class RootTable(enum.Enum):
    """The root's tables FSDP prices on their own. Values are the original's layer-type labels."""

    EMBEDDING = "EMBEDDING_LAYER"
    OUTPUT = "OUTPUT_LAYER"


def _as_part(part: Part | Iterable[Scalar]) -> Part:
    return Part(*(sympy.sympify(x) for x in part))


@functools.cache
def _slice_and_shards(part: Part) -> tuple[sympy.Expr, sympy.Expr, sympy.Expr]:
    """(w, σ, κ): parameters of one TP slice, shards of a slice, copies of a shard (once per part: the
    traffic and the reduce traffic of a part both read them, and each ``Max`` costs SymPy a comparison)."""
    tp = Max(1, part.computed)
    slice_params = part.size / tp
    shards = Max(1, part.sharded / tp)
    copies = Max(1, part.held / Max(1, part.sharded))
    return slice_params, shards, copies


def part_reduce_traffic(part: Part | Iterable[Scalar] = PART, reduces: Scalar = reduces) -> sympy.Expr:
    """Bytes one rank sends per micro-batch to all-reduce its gradient shard between the shard's copies.

    ``2 (κ − 1)/κ · (w/σ) · bytes_grad · R``: a ring all-reduce of the
    ``w/σ`` gradients of one shard over its ``κ`` copies, ``R`` times a
    micro-batch. Inferred (``fsdp_reduce_traffic`` is not published): the
    second term of ``fsdp_traffic`` alone.

    Args:
        part: ``(N, c, k, g)`` as expressions or numbers; the symbols
            ``part_size, part_computed, part_sharded, part_held`` by default.
        reduces: R, all-reduces per micro-batch.
    """
    part = _as_part(part)
    slice_params, shards, copies = _slice_and_shards(part)
    return 2 * (copies - 1) / copies * (slice_params / shards) * bytes_grad * sympy.sympify(reduces)


def part_traffic(part: Part | Iterable[Scalar] = PART, gathers: Scalar = gathers,
                 reduces: Scalar = reduces) -> sympy.Expr:
    """Bytes one rank moves per micro-batch for one FSDP part (a term of ``fsdp_traffic``).

    ``(σ − 1)/σ · w · (G · bytes_p + bytes_grad)``: G all-gathers of the
    parameters of a TP slice over its σ shards, and one reduce-scatter of their
    gradients; plus ``part_reduce_traffic``.

    Args:
        part: ``(N, c, k, g)`` as expressions or numbers (any SymPy
            expression, e.g. a parameter count); the part symbols by default.
        gathers: G, all-gathers per micro-batch.
        reduces: R, all-reduces between copies per micro-batch.
    """
    part = _as_part(part)
    slice_params, shards, _ = _slice_and_shards(part)
    gather_scatter = (shards - 1) / shards * slice_params * (sympy.sympify(gathers) * bytes_p + bytes_grad)
    return gather_scatter + part_reduce_traffic(part, reduces)


def parts_traffic(parts: Iterable[Part | Iterable[Scalar]], gathers: Scalar = gathers,
                  reduces: Scalar = reduces) -> sympy.Expr:
    """``fsdp_traffic(parts, G, R)``: the sum of ``part_traffic`` over *parts* (0 for none), in bytes."""
    return sympy.Add(*(part_traffic(x, gathers, reduces) for x in parts))


def parts_reduce_traffic(parts: Iterable[Part | Iterable[Scalar]], reduces: Scalar = reduces) -> sympy.Expr:
    """``fsdp_reduce_traffic(parts, R)`` (inferred): the sum of ``part_reduce_traffic``, in bytes."""
    return sympy.Add(*(part_reduce_traffic(x, reduces) for x in parts))


# ---------------------------------------------------------------- a layer's and the root's parts


def _held_non_expert() -> sympy.Expr:
    return d * cp * t


def _held_routed() -> sympy.Expr:
    return d_exp * cp * t_exp


def _held_shared() -> sympy.Expr:
    return d * cp * t_exp


def _routed_size(routed: sympy.Expr) -> sympy.Expr:
    # A rank holds the experts of its EP group only.
    return routed / ep


def layer_parts(non_expert: Scalar = P_ne, routed: Scalar = P_r, shared: Scalar = P_s) -> tuple[Part, Part, Part]:
    """``EvalLayerComm.fsdp_layer_parts``: the non-expert, routed-expert and shared-expert parts of a layer.

    * non-expert: ``(P_ne, t, shard_p_os_non_exp_partial, d·cp·t)``;
    * routed experts: ``(P_r/ep, t_exp, shard_p_os_exp, d_exp·cp·t_exp)``;
    * shared experts: ``(P_s, t_exp, shard_p_os_exp_partial, d·cp·t_exp)``.

    The three are always returned, with size 0 where a dense layer has no
    experts.

    Args:
        non_expert, routed, shared: the layer's parameter counts
            (``EvalBody.num_params_layer``); the symbols ``P_ne, P_r, P_s``
            by default, or the parameter-count expressions to substitute.
    """
    non_expert, routed, shared = (sympy.sympify(x) for x in (non_expert, routed, shared))
    return (
        Part(non_expert, t, shard_non_exp, _held_non_expert()),
        Part(_routed_size(routed), t_exp, shard_exp, _held_routed()),
        Part(shared, t_exp, shard_exp_partial, _held_shared()),
    )


def _embedding_tp() -> sympy.Expr:
    # ``shard_embed / max(1, gather_embed or 1)``: an unset gather_embed (0) reads 1, which max(1, ·) already gives.
    return shard_embed / Max(1, gather_embed)


def _embedding_size() -> sympy.Expr:
    return h * v  # EvalHead.num_params_embed: the table


def _output_size() -> sympy.Expr:
    return h * v + v  # EvalTail.num_params_output: the table and a bias of v


def root_parts(table: RootTable, *, tied: bool = False) -> tuple[Part, ...]:
    """``fsdp_root_parts``: the embedding's or the output layer's table as FSDP holds it.

    * embedding: with ``τ = shard_embed / max(1, gather_embed or 1)``, one part
      ``(h·v, τ, shard_embed, d·τ)``. A table tied to the output layer
      (``tie_emb_out``) belongs to the output layer when there is one stage:
      the original then returns no part. The stage count is numeric, so here
      the tied part keeps its place with size ``0`` where ``p ≤ 1`` (it moves
      nothing, so traffic sums agree).
    * output: one part ``(h·v + v, t, shard_p_os_non_exp_partial, d·cp·t)``.

    Args:
        table: which table.
        tied: ``tie_emb_out``; read for the embedding only.
    """
    if table is RootTable.EMBEDDING:
        tp = _embedding_tp()
        size = _embedding_size()
        if tied:
            size = Piecewise((0, p <= 1), (size, True))
        return (Part(size, tp, shard_embed, d * tp),)
    if table is RootTable.OUTPUT:
        return (Part(_output_size(), t, shard_non_exp, _held_non_expert()),)
    raise ValueError(f"layer: no FSDP root table for {table!r}")


# ---------------------------------------------------------------- rounds


def param_cp(spans_cp: bool) -> sympy.Expr:
    """``param_cp``: what CP adds to a parameter's width — 1 if the stated shard already spans CP, else cp."""
    return sympy.Integer(1) if spans_cp else cp


def _once_a_step() -> sympy.Expr:
    return 1 / Max(1, m)


def rounds(reshards: bool, spans_cp: bool) -> tuple[sympy.Expr, sympy.Expr, sympy.Expr]:
    """``_fsdp_rounds``: (layer gathers G, root gathers G, all-reduces R) per micro-batch.

    * Resharded after each pass: a layer is gathered for its forward and its
      backward (2), the root, kept through its backward, once (1).
    * Kept gathered: each is gathered once a step, ``1/m̂`` per micro-batch, m̂ = max(1, m).
    * Copies of a shard all-reduce once a step (``1/m̂``) where FSDP shards the
      non-expert parameters beyond ``t · param_cp``, else every micro-batch (1).

    Args:
        reshards: the config's ``reshards``.
        spans_cp: the config's ``shard_spans_cp`` (``param_cp`` = 1 if set, else cp).
    """
    once = _once_a_step()
    layer = sympy.Integer(2) if reshards else once
    root = sympy.Integer(1) if reshards else once
    all_reduces = Piecewise((once, shard_non_exp > t * param_cp(spans_cp)), (1, True))
    return layer, root, all_reduces


def switched_rounds() -> tuple[sympy.Expr, sympy.Expr, sympy.Expr]:
    """:func:`rounds` with ``reshards`` and ``shard_spans_cp`` as 0/1 symbols: one expression for all four settings.

    Each switch selects its branch exactly (``x·A + (1 − x)·B`` is A at 1 and B at 0), so that one
    generated stage evaluator serves every FSDP setting.
    """
    reshards, spans = syms("reshards", "shard_spans_cp")
    once = _once_a_step()
    layer = reshards * 2 + (1 - reshards) * once
    root = reshards + (1 - reshards) * once
    spanned_cp = spans + (1 - spans) * cp
    all_reduces = Piecewise((once, shard_non_exp > t * spanned_cp), (1, True))
    return layer, root, all_reduces


# ---------------------------------------------------------------- registered formulas


def _f(name: str, expr: sympy.Expr, unit: str, doc: str, source: str, algorithm: str = "fsdp",
       variant: tuple[tuple[str, str], ...] = ()) -> Formula:
    return Formula(name=name, expr=expr, dimension="fsdp", algorithm=algorithm, unit=unit, doc=doc, source=source,
                   variant=variant)


_LAYER_PARTS = layer_parts()
_ROOT_SRC = f"{COMM} lines 518-529 (fsdp_root_parts)"
_ROUNDS_SRC = f"{COMM} lines 532-546 (_fsdp_rounds)"


def _build() -> tuple[Formula, ...]:
    out = [
        _f("fsdp_part_traffic_bytes", part_traffic(), "bytes",
           "Bytes a rank moves per micro-batch for one FSDP part (N, c, k, g): G parameter all-gathers and a "
           "gradient reduce-scatter over its shards, plus R all-reduces between copies of a shard.",
           f"{EVALUATORS} (EvalLayerComm.fsdp_traffic, one term of its sum)"),
        _f("fsdp_part_reduce_traffic_bytes", part_reduce_traffic(), "bytes",
           "Bytes a rank sends per micro-batch to all-reduce the gradients of one FSDP part's shard between "
           "its copies, R times (the second term of fsdp_part_traffic_bytes).",
           "inferred: EvalLayerComm.fsdp_reduce_traffic is not published; comm_time.py lines 594 and 600 call it"),
        _f("fsdp_routed_part_size_params", _routed_size(P_r), "params",
           "Routed-expert parameters a rank's EP group holds: P_r / ep.",
           f"{EVALUATORS} (EvalLayerComm.fsdp_layer_parts)"),
        _f("fsdp_non_expert_part_held_count", _held_non_expert(), "count",
           "Ranks holding the non-expert part of a layer (and the output table): d * cp * t.",
           f"{EVALUATORS} (EvalLayerComm.fsdp_layer_parts); {COMM} line 529"),
        _f("fsdp_routed_part_held_count", _held_routed(), "count",
           "Ranks holding the routed-expert part of a layer: d_exp * cp * t_exp.",
           f"{EVALUATORS} (EvalLayerComm.fsdp_layer_parts)"),
        _f("fsdp_shared_part_held_count", _held_shared(), "count",
           "Ranks holding the shared-expert part of a layer: d * cp * t_exp.",
           f"{EVALUATORS} (EvalLayerComm.fsdp_layer_parts)"),
        _f("fsdp_embedding_part_computed_count", _embedding_tp(), "count",
           "Ranks the embedding table is computed over: shard_embed / max(1, gather_embed or 1).",
           f"{COMM} line 527"),
        _f("fsdp_embedding_part_held_count", d * _embedding_tp(), "count",
           "Ranks holding the embedding table: d times its computed-over width.", f"{COMM} line 528"),
        _f("fsdp_embedding_part_size_params", _embedding_size(), "params",
           "Parameters of the embedding table: h * v.", f"{COMM} line 528 (EvalHead.num_params_embed)"),
        _f("fsdp_output_part_size_params", _output_size(), "params",
           "Parameters of the output layer: the h * v table and v biases.",
           f"{COMM} line 529 (EvalTail.num_params_output)"),
        _f("fsdp_layer_traffic_bytes", parts_traffic(_LAYER_PARTS), "bytes",
           "FSDP bytes a rank moves per micro-batch for one body layer, over its non-expert, routed and shared "
           "parts, given the layer's parameter counts P_ne, P_r, P_s.",
           f"{EVALUATORS} (fsdp_layer_parts, fsdp_traffic); {COMM} line 593"),
        _f("fsdp_layer_reduce_traffic_bytes", parts_reduce_traffic(_LAYER_PARTS), "bytes",
           "The all-reduce share of fsdp_layer_traffic_bytes (inferred fsdp_reduce_traffic).",
           f"inferred fsdp_reduce_traffic; {COMM} line 594"),
    ]
    roots = (("embedding", RootTable.EMBEDDING, False), ("tied_embedding", RootTable.EMBEDDING, True),
             ("output", RootTable.OUTPUT, False))
    for key, table, tied in roots:
        parts = root_parts(table, tied=tied)
        what = {"embedding": "the embedding table", "tied_embedding": "an embedding table tied to the output "
                "layer (nothing when p <= 1: the output layer holds it)", "output": "the output layer"}[key]
        out.append(_f(f"fsdp_{key}_traffic_bytes", parts_traffic(parts), "bytes",
                      f"FSDP bytes a rank moves per micro-batch for {what}.",
                      f"{_ROOT_SRC}; {COMM} line 599", variant=(("table", key),)))
        out.append(_f(f"fsdp_{key}_reduce_traffic_bytes", parts_reduce_traffic(parts), "bytes",
                      f"The all-reduce share of fsdp_{key}_traffic_bytes (inferred fsdp_reduce_traffic).",
                      f"{_ROOT_SRC}; inferred fsdp_reduce_traffic, {COMM} line 600", variant=(("table", key),)))
    resharded, resharded_root, _ = rounds(True, False)
    kept, _, _ = rounds(False, False)
    out += [
        _f("fsdp_resharded_layer_gathers_count", resharded, "count",
           "All-gathers of a layer per micro-batch when FSDP reshards after each pass: forward and backward.",
           _ROUNDS_SRC, algorithm="resharded"),
        _f("fsdp_resharded_root_gathers_count", resharded_root, "count",
           "All-gathers of the embedding or output table per micro-batch when FSDP reshards: once, kept "
           "through its backward.", _ROUNDS_SRC, algorithm="resharded"),
        _f("fsdp_kept_gathers_count", kept, "count",
           "All-gathers of a layer or root table per micro-batch when FSDP keeps parameters gathered: once a "
           "step, 1/max(1, m) (§10 item 19).", _ROUNDS_SRC, algorithm="kept"),
    ]
    for spans, key in ((True, "cp_spanning"), (False, "cp_separate")):
        out.append(_f(f"fsdp_{key}_reduces_count", rounds(False, spans)[2], "count",
                      "All-reduces between copies of a shard per micro-batch: once a step where the non-expert "
                      f"shard is wider than t * param_cp (param_cp = {'1' if spans else 'cp'}, "
                      f"shard_spans_cp {'set' if spans else 'unset'}), else every micro-batch (§10 item 19).",
                      _ROUNDS_SRC, algorithm=key, variant=(("shard_spans_cp", str(spans).lower()),)))
    return tuple(out)


FORMULAS: tuple[Formula, ...] = _build()
