"""Where one parallel group's ranks sit: ranks per node, nodes spanned, NICs driven at once.

Ranks are numbered in the layout's rank order (Megatron's ``tp-cp-ep-dp-pp`` by default: tensor
parallel ranks adjacent, pipeline stages farthest apart), nodes hold ``gpus_per_node`` consecutive
ranks, and a group of ``group_size`` ranks has consecutive members ``group_stride`` ranks apart —
the product of the degrees before its dimension in the order. Degrees are powers of two or divide
the node size in every layout the planners consider; the forms assume that the stride divides the
node or the node divides the stride.
"""

from __future__ import annotations

import sympy

from .formula import Formula
from .symbols import syms

__all__ = ["FORMULAS"]

_g, _stride, _gpn, _nics = syms("group_size", "group_stride", "gpus_per_node", "nics_per_node")

_SOURCE = ("Megatron-LM megatron/core/parallel_state.py (RankGenerator, order 'tp-cp-ep-dp-pp'): a group's "
           "members are stride apart; NCCL uses the NIC closest to each GPU (rail-optimised DGX/HGX nodes: one NIC "
           "per GPU)")

# A stride at least the node size puts one member per node; otherwise the node holds
# gpus_per_node / stride consecutive members, or the whole group if it is smaller.
_per_node = sympy.Max(1, sympy.Min(_g, sympy.floor(_gpn / _stride)))
_nodes = sympy.ceiling(_g / _per_node)
_nics_used = sympy.Max(1, _per_node * _nics / _gpn)

FORMULAS: tuple[Formula, ...] = (
    Formula(
        name="placement_group_ranks_per_node_count", expr=_per_node, dimension="placement", algorithm="rank_order",
        unit="count",
        doc="Ranks of one parallel group inside one node, for members group_stride ranks apart.",
        source=_SOURCE),
    Formula(
        name="placement_group_nodes_count", expr=_nodes, dimension="placement", algorithm="rank_order", unit="count",
        doc="Nodes one parallel group spans: its size over its ranks per node, rounded up.",
        source=_SOURCE),
    Formula(
        name="placement_group_nics_used_count", expr=_nics_used, dimension="placement", algorithm="rank_order",
        unit="count",
        doc="NICs of one node the group drives at once: one per member in the node on a rail-optimised node "
            "(nics_per_node / gpus_per_node per GPU), at least one; a group of one GPU per node uses one NIC, "
            "a group over whole nodes all of them.",
        source=_SOURCE),
)
