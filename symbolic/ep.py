"""Expert parallelism per layer: ``EvalLayerComm.ep_comm_layer`` (balanced and imbalanced routing).

Restates the published ``EvalLayerComm.ep_comm_layer``,
``ep_comm_layer_balanced`` and ``ep_comm_layer_imbalanced`` (docs/formulas.md
"EP"), called by ``comm_time.py`` lines 503, 605-607 with ``mb = 1``.

A rank dispatches its routed tokens to the experts' ranks and combines the
results back: two all-to-alls of ``h·bytes_compute`` per token, of which a
share ``(ep − 1)/ep`` crosses ranks. **Unit: bytes** per layer for ``mb``
micro-batches.

* Balanced: a rank routes ``mb·n_chosen_exp·s·b/cp`` tokens.
* Imbalanced: from measured ``tokens_per_expert`` (global counts per expert
  and micro-batch), the busiest rank's load ``max_rank_tokens`` replaces
  ``n_chosen_exp·s·b/cp`` (no division by cp). The maximum over ranks is a
  numeric step on the list, done outside the expression
  (``codegen.reference.adapters.ep.max_rank_tokens``); the formula takes its result.

Which one applies is resolved in Python (``routing``), as the original
decides it: ``tokens_per_expert`` that is empty, or ``ep`` that does not
divide ``n_exp``, falls back to balanced. An unset ``tokens_per_expert``
reads 0, which is "not None": the imbalanced branch is entered and falls
back at once (docs/model.md, oddity 17). The volume does not depend on the
layer node, so embedding and output layers are charged it in full like a
body layer (§10 item 15). The guard ``ep ≤ 1 or comm_ep = 0 →
0`` is numeric and stays in the expression.
"""

from __future__ import annotations


import sympy
from sympy import Eq, Or, Piecewise

from . import collectives
from .formula import Formula
from .symbols import syms
from .vocabulary import Routing, routing

__all__ = ["Routing", "routing", "layer_formula", "FORMULAS"]

s, b, h, cp, ep, mb = syms("s", "b", "h", "cp", "ep", "mb")
n_chosen_exp, comm_ep, bytes_compute, max_rank_tokens = syms("n_chosen_exp", "comm_ep", "bytes_compute",
                                                             "max_rank_tokens")

SOURCE = "published version of memory_estimation/evaluators/comm.py"


def _volume(tokens_per_rank: sympy.Expr) -> sympy.Expr:
    dispatch = collectives.all_to_all(tokens_per_rank * h * bytes_compute, ep)
    active = 2 * dispatch * comm_ep  # dispatch and combine
    return Piecewise((0, Or(ep <= 1, Eq(comm_ep, 0))), (active, True))


_FORMULAS = {
    Routing.BALANCED: Formula(
        name="ep_balanced_layer_bytes",
        expr=_volume(mb * n_chosen_exp * s * b / cp),
        dimension="ep",
        algorithm="balanced",
        unit="bytes",
        doc=("Bytes a rank moves in the EP dispatch and combine all-to-alls of one layer for mb micro-batches, "
             "every rank routing n_chosen_exp·s·b/cp tokens; 0 when ep <= 1 or comm_ep = 0."),
        source=f"{SOURCE}: EvalLayerComm.ep_comm_layer, ep_comm_layer_balanced; comm_time.py lines 503, 605-607",
        variant=(("routing", "balanced"),),
    ),
    Routing.IMBALANCED: Formula(
        name="ep_imbalanced_layer_bytes",
        expr=_volume(mb * max_rank_tokens),
        dimension="ep",
        algorithm="imbalanced",
        unit="bytes",
        doc=("Bytes the busiest rank moves in the EP dispatch and combine all-to-alls of one layer for mb "
             "micro-batches, from its measured per-micro-batch load max_rank_tokens (no division by cp); "
             "0 when ep <= 1 or comm_ep = 0."),
        source=f"{SOURCE}: EvalLayerComm.ep_comm_layer, ep_comm_layer_imbalanced",
        variant=(("routing", "imbalanced"),),
    ),
}


def layer_formula(routing_kind: Routing | str = Routing.BALANCED) -> Formula:
    """The registered EP formula of a layer for a routing (``routing(...)`` resolves it from a config)."""
    return _FORMULAS[Routing(routing_kind)]


FORMULAS: tuple[Formula, ...] = tuple(_FORMULAS.values())
