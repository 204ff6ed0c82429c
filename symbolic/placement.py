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
_g2, _stride2 = syms("group_size_2", "group_stride_2")

_SOURCE = ("Megatron-LM megatron/core/parallel_state.py (RankGenerator, order 'tp-cp-ep-dp-pp'): a group's "
           "members are stride apart; NCCL uses the NIC closest to each GPU (rail-optimised DGX/HGX nodes: one NIC "
           "per GPU)")



def _members_per_node(size: sympy.Expr, stride: sympy.Expr) -> sympy.Expr:
    """A stride at least the node size puts one member per node; otherwise the node holds
    gpus_per_node / stride consecutive members, or the whole group if it is smaller."""
    return sympy.Max(1, sympy.Min(size, sympy.floor(_gpn / stride)))


_per_node = _members_per_node(_g, _stride)
_nodes = sympy.ceiling(_g / _per_node)
_nics_used = sympy.Max(1, _per_node * _nics / _gpn)
# A group over two dimensions of the order (Megatron-LM's data-parallel group with context parallelism, 'dp-cp'):
# its ranks vary along both. The farther dimension's stride is at least the nearer one's times its size (the
# nearer one's members all lie within one step of the farther), so a node holds the product of the two
# dimensions' members per node: when the farther stride reaches the node, one of its steps, all the nearer
# members that fit; else the whole nearer dimension for each of the farther members the node holds.
_per_node_2 = _members_per_node(_g, _stride) * _members_per_node(_g2, _stride2)
_nodes_2 = sympy.ceiling(_g * _g2 / _per_node_2)
_nics_used_2 = sympy.Max(1, _per_node_2 * _nics / _gpn)
_SOURCE_2 = ("Megatron-LM megatron/core/parallel_state.py (RankGenerator.get_ranks('dp-cp'): the gradients of a "
             "layout with context parallelism reduce over the data-parallel and context-parallel ranks together)")

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
    Formula(
        name="placement_group2_ranks_per_node_count", expr=_per_node_2, dimension="placement",
        algorithm="rank_order_2", unit="count",
        doc="Ranks inside one node of a group over two dimensions of the rank order (group_size ranks "
            "group_stride apart times group_size_2 ranks group_stride_2 apart).",
        source=f"{_SOURCE}; {_SOURCE_2}"),
    Formula(
        name="placement_group2_nodes_count", expr=_nodes_2, dimension="placement", algorithm="rank_order_2",
        unit="count",
        doc="Nodes a group over two dimensions of the rank order spans: its ranks over its ranks per node, "
            "rounded up.",
        source=f"{_SOURCE}; {_SOURCE_2}"),
    Formula(
        name="placement_group2_nics_used_count", expr=_nics_used_2, dimension="placement", algorithm="rank_order_2",
        unit="count",
        doc="NICs of one node a group over two dimensions of the rank order drives at once (as for one "
            "dimension: one per member in the node on a rail-optimised node, at least one).",
        source=f"{_SOURCE}; {_SOURCE_2}"),
)
