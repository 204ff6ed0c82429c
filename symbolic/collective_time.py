"""Seconds of one collective call: NCCL's own cost model (α-β per algorithm and protocol) as closed forms.

NCCL prices every (algorithm, protocol) pair of a collective as ``latency + bytes / bandwidth``
(``src/graph/tuning.cc``, ``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime``; master 5067397, v2.30) and runs the
cheapest (``src/enqueue.cc``, ``topoGetAlgoInfo``: the minimum predicted time, the first in its loop
order on a tie). This module writes, per candidate, the time it really takes
(``collective_<op>_<candidate>_time_s``: tuning.cc's model plus the ring loop's pipeline fill nccl-tests
measures) and, where that differs, tuning.cc's price (``collective_<op>_<candidate>_price_s``, what
the tuner compares); the candidates are generated in NCCL's order. The pick (the real time of the
candidate with the smallest price) is made at run time by ``codegen.pricing.collective.choose``: a
``Piecewise`` comparing prices would be one closed form, but SymPy takes minutes to build and lower
it. Per candidate, the derivatives the sensitivity in seconds chains are generated too (``_slopes``).
The constants are symbols bound from
``hardware/nccl_tuning.toml`` (tuning.cc's tables) and the catalog (per-generation channel counts and
link bandwidths), never numbers fitted to measurements.

Conventions (nccl-tests ``doc/PERFORMANCE.md``): ``msg_bytes`` is nccl-tests' size S (the whole
buffer for all-reduce, broadcast and reduce; count × type size × ranks for all-gather, reduce-scatter and
all-to-all), algbw = S / t, busbw = algbw × factor with factor 2(n − 1)/n for all-reduce, (n − 1)/n
for all-gather, reduce-scatter and all-to-all, 1 for broadcast, reduce and send/recv. Bandwidths are bytes/s
per direction, latencies seconds.

How NCCL's model is followed, and where it is simplified (each is stated where it happens):

* Ring bus bandwidth = ``ring_channels × ring_channel_bw`` (the channel search's outcome); across
  nodes it is also bounded by the NICs the group drives, ``nics_used × nic_bw`` (every ring link
  carries the bus volume, and the node's crossings share its NICs).
* Protocol refinements of tuning.cc: Ring LL ``min(llMaxBw, 0.5 B)``; Ring LL128
  ``min(0.92 B, channels × perChMaxRingLL128Bw)``; Tree all-reduce ``min(0.92 B, channels ×
  perChMaxTreeBw)``, then LL ``min(/3.8, llMaxBw)`` and LL128 ``min(× 7/9 (one node) or 120/128,
  channels × perChMaxTreeLL128Bw)``; bus → algorithm bandwidth ``× n / nsteps`` (ring, NVLS) or
  ``× 0.5`` (tree).
* Latencies: ring ``base + (nsteps − interSteps) · max(intraHop, netOverhead) + interSteps ·
  netHop`` in the price (the time takes ``intraHop`` for the steps inside a node: ``_ring_latency``); tree
  all-reduce ``base + 2 ((ranksPerNode − 1) intraHop + log2(nodes) netHop)``; NVLS ``hop_nvlink_nvls``.
  ``log2i`` (integer log) is relaxed to ``log2`` (equal on powers of two).
* NVLS only inside one node (multi-node NVLS needs CollNet), only with ``nvls = 1`` (``src/transport/
  nvls.cc``: NVLS needs multicast-capable NVSwitches). The NVLS graph has one channel per rank at
  ``min(nvls_channel_max_bw, nvlink_nccl_bw / (n − 1))`` — the search's upper bound (search.cc raises
  the total by n/(n − 1) for non-ring patterns); its speed-array rounding is dropped.
* Across nodes (docs/time.md, "Across nodes"): tuning.cc's per-channel caps of the column for the node count
  (N1, N2, more), the network plugin's latency on every network hop (twice with Simple), the NICs' bound on the
  ring, the tree's network share (S per node on two nodes, 2S beyond), NVLS-tree (NVLS inside the node, a tree
  across), PAT (all-gather and reduce-scatter at one GPU per node, ``_pat_time``), the size-dependent
  ``treeCorrectionFactor`` and the ring's plateau latency factor.
* Not modelled: CollNet/SHARP (in-network reduction), PXN routing of all-to-all on rail-optimised networks.
  All-to-all and send/recv, which NCCL runs as grouped point-to-point operations its tuner does not price, use the
  ring constants of one step and NCCL's P2P LL threshold; the
  all-to-all's Simple path inside a node moves each peer's bytes on NCCL's point-to-point blocks (stated at
  ``_p2p_nvlink``).
* The expert dispatch of DeepEP and Hybrid-EP (``ep_dispatch``: no NCCL collective; one candidate, ``dedup``)
  sends a token once per destination node and rank instead of once per chosen expert (``_dedup_candidates``), with
  the all-to-all's latency and the same NVLink and network bandwidths.
* Added to tuning.cc's model (what nccl-tests measures and the tuner leaves out): the ring loop's pipeline
  fill, one slice per loop with Simple (``SLICESTEPS/CHUNKSTEPS`` chunk steps, src/device/collectives.h) and
  one chunk step with LL and LL128 (their final receive reads the FIFO), see ``_loop_fill``. The per-generation bindings (``hardware/_nccl.py``) may scale the
  latencies and cap the ring bandwidth with published figures (``hardware/nccl_tuning.toml``).
* Hierarchical (intra-node, then inter-node): reduce-scatter inside the node, the collective on
  ``1/ranks_per_node`` of the data across nodes (``ranks_per_node`` concurrent rings, each with its
  share of the NICs), all-gather inside the node; a candidate only when the group spans nodes.
"""

from __future__ import annotations

import dataclasses
import functools

import sympy
from sympy import Min, Piecewise

from .formula import Formula
from .symbols import symbol
from .vocabulary import LEVEL_PARAMETERS

__all__ = ["CALL_VARIABLES", "FORMULAS", "LEVEL_PARAMETERS", "NOT_DIFFERENTIATED", "OPS", "candidate_labels"]

_TUNING = "NCCL src/graph/tuning.cc (master 5067397, v2.30)"
_S = symbol("msg_bytes")
_N = symbol("ranks")
_Q = symbol("ranks_per_node")
_NODES = symbol("nodes")
_PROTOCOLS = ("ll", "ll128", "simple")
_MANY = sympy.oo  # a candidate that is not available: never the minimum


#: The collectives with a root (tuning.cc prices Broadcast and Reduce alike: the ring alone, one hop on the base).
_ROOTED = ("broadcast", "reduce")


def _sym(name: str) -> sympy.Symbol:
    return symbol(name)


def _nsteps(op: str, n: sympy.Expr) -> sympy.Expr:
    """tuning.cc ``nsteps``: 2(n − 1) for all-reduce, n − 1 for all-gather / reduce-scatter, n otherwise."""
    return {"all_reduce": 2 * (n - 1), "all_gather": n - 1, "reduce_scatter": n - 1}.get(op, n)


def _inter_steps(op: str, nodes: sympy.Expr) -> sympy.Expr:
    """tuning.cc ``nInterSteps``: ring steps that cross nodes (0 on one node)."""
    return 2 * (nodes - 1) if op == "all_reduce" else nodes - 1


def _by_nodes(name: str, nodes: sympy.Expr) -> sympy.Expr:
    """One of tuning.cc's per-node-count tables (``index2 = nNodes <= 2 ? nNodes - 1 : 2``): the column for one
    node (``<name>_bytes_per_s``), two (``<name>_n2_…``) or more (``<name>_n4_…``)."""
    base = name.removesuffix("_bytes_per_s")
    return Piecewise((_sym(name), nodes < 2), (_sym(f"{base}_n2_bytes_per_s"), nodes < 3),
                     (_sym(f"{base}_n4_bytes_per_s"), True))


def _net_bus(nics: sympy.Expr) -> sympy.Expr:
    """Bytes/s the *nics* NICs a node drives move across the network, per direction (peak × efficiency)."""
    return nics * _sym("nic_bw_bytes_per_s") * _sym("net_bw_efficiency")


def _net_hop(algorithm: str, proto: str, fill: bool = True) -> sympy.Expr:
    """tuning.cc ``interLat``: the network hop of *algorithm* plus what the network adds per hop with *proto*.

    In the price (``fill=False``) that is what NCCL's tuner adds, the plugin's reported latency
    (``net_tuner_latency_<proto>_s``: ``graphs[a]->latencyInter``, twice with Simple, "the flush extra latency");
    in the time the network's own latency (``net_latency_<proto>_s``: measured where the system file states it,
    a cluster's calibrated value, else the reported one). A plugin may report a latency that steers NCCL's choice
    rather than one it measures (aws-ofi-nccl's 75 us on AWS P5, against the 20 us its own tuner models).
    """
    extra = f"net_latency_{proto}_s" if fill else f"net_tuner_latency_{proto}_s"
    hop = "hop_net_nvlstree_s" if algorithm == "nvlstree" else f"hop_net_{algorithm}_{proto}_s"  # Simple only
    return _sym(hop) + _sym(extra)


def _ring_bus_simple(nodes: sympy.Expr, nics: sympy.Expr) -> sympy.Expr:
    """Bus bandwidth of the Simple ring: the channels' NVLink share, bounded by the NICs across nodes."""
    intra = _sym("ring_channels") * _sym("ring_channel_bw_bytes_per_s")
    return Piecewise((intra, nodes < 2), (Min(intra, _net_bus(nics)), True))


def _ring_bus(proto: str, nodes: sympy.Expr, nics: sympy.Expr) -> sympy.Expr:
    """tuning.cc "model refinements" of the ring's bus bandwidth per protocol (perChMaxRingLL128Bws has the same
    value for one, two and more nodes in every generation, so one symbol holds it)."""
    simple = _ring_bus_simple(nodes, nics)
    if proto == "ll":
        return Min(_by_nodes("ll_max_bw_bytes_per_s", nodes), simple / 2)
    if proto == "ll128":
        return Min(sympy.Rational(92, 100) * simple,
                   _sym("ring_channels") * _sym("ll128_channel_max_bw_bytes_per_s"))
    return simple


def _ring_latency(op: str, proto: str, n: sympy.Expr, q: sympy.Expr, nodes: sympy.Expr,
                  fill: bool = True) -> sympy.Expr:
    base = _sym(f"alpha_ring_{proto}_s")
    intra = _sym(f"hop_nvlink_ring_{proto}_s")
    # With one rank per node every step is exposed: tuning.cc uses the tree's network latency then.
    net = Piecewise((_net_hop("tree", proto, fill), sympy.Eq(q, 1)), (_net_hop("ring", proto, fill), True))
    overhead = _sym("net_overhead_s") * (3 if proto == "simple" else 1)
    if op in _ROOTED:
        # tuning.cc: broadcast/reduce on a ring with the same channels add one hop to the base.
        return base + Piecewise((intra, nodes < 2), (net, True))
    steps = _nsteps(op, n)
    crossing = _inter_steps(op, nodes)
    # tuning.cc charges every step of a ring across nodes at least the network's post overhead ("Inter-node rings
    # still have to launch nsteps * net overhead"): the price NCCL compares. A chunk's own path crosses the network
    # only at the node boundaries, its other hops NVLink ones, which no network proxy posts: the time sums those hops
    # (an NCCL_ALGO=Ring all-reduce of 8 B to 1 KiB on two DGX A100 takes 38-42 us, where the overhead per step
    # would make it 88: docs/time.md, "NCCL's multi-node forms").
    intra_step = intra if fill else sympy.Max(intra, overhead)
    multi = base + (steps - crossing) * intra_step + crossing * net
    return Piecewise((base + steps * intra, nodes < 2), (multi, True))


#: NCCL src/device/collectives.h (also src/include/collectives.h): SLICESTEPS / CHUNKSTEPS of the Simple
#: protocol, 2/4 for all-reduce, all-gather and reduce-scatter. Broadcast and reduce (1/1: BROADCAST_ and
#: REDUCE_SLICESTEPS / CHUNKSTEPS) are chains whose fill grows with their depth; tuning.cc's per-hop latency
#: stands for it and nothing is added.
_SLICE_PER_CHUNK = {"all_reduce": sympy.Rational(1, 2), "all_gather": sympy.Rational(1, 2),
                    "reduce_scatter": sympy.Rational(1, 2)}
#: LL and LL128 (enqueue.cc: chunkSteps = sliceSteps = 1 outside the Simple ring): the loop's last primitive
#: unpacks the whole chunk from the protocol's FIFO at the protocol's rate, one chunk step (see ``_loop_fill``).
_FIFO_FILL = {"all_reduce": sympy.Integer(1), "all_gather": sympy.Integer(1), "reduce_scatter": sympy.Integer(1)}
#: All-to-all and send/recv (NCCL's point-to-point, which its tuner does not price): the pipeline fill, in
#: p2p steps. A thread block moves its share of a peer's bytes through the peer's FIFO in steps of
#: ``P2P_NVL_CHUNKSIZE`` (one slice per step: ``ProtoSimple<1, 1>`` in src/device/sendrecv.h, and
#: prims_simple.h makes the slice the whole chunk), copied in by the sender and out by the receiver; the
#: collectives' half-step fill (``SLICESTEPS/CHUNKSTEPS``) is assumed for the copy that trails (see ``_p2p_nvlink``).
#: An assumption checked against the sweeps: the source's pipeline would charge the whole step, which makes H100
#: 17-49 % slow at 2-16 MiB (docs/time.md, round 3).
#: Send/recv (no shipped sweep) keeps the earlier form: half of its S as fill at the ring's bus bandwidth.
_P2P_FILL = sympy.Rational(1, 2)


def _p2p_blocks_per_peer(n: sympy.Expr) -> sympy.Expr:
    """Thread blocks (channels) NCCL's point-to-point kernel gives one peer, in channels.

    src/enqueue.cc ``scheduleP2pTasksToPlan``: ``nChannelsMin`` starts at the peers' channel count (at least
    ``p2pnChannels`` on NVSwitch nodes, paths.cc ``ncclTopoGetNchannels``: 2 x the GPU's NVLinks, capped at
    ``p2pnChannels``) and halves while ``nChannelsMin · nRanks > p2pnChannels``; src/include/channel.h
    (``ncclP2pChannelBaseForRound``) gives every round of the schedule its own channels. So each peer gets
    ``p2pnChannels / n`` blocks (16, 8, 4 of 32 at 2, 4, 8 ranks), at least one. ``pow2Down`` is relaxed to the
    plain ratio (equal on powers of two). Simplified: below 64 KiB per block (``P2P_NVL_CHUNKSIZE / 8``, enqueue.cc
    ``addP2pToPlan``) NCCL spreads a peer's bytes over fewer of them; the time there is the latency's (with NCCL's
    count the blocks' sustained bandwidth would make A100 below 1 MiB 28 % slow; docs/time.md, round 3).
    """
    return sympy.Max(1, _sym("p2p_channels") / n)


def _p2p_block_bw(n: sympy.Expr, q: sympy.Expr) -> sympy.Expr:
    """Bytes/s one thread block of the point-to-point kernel sends to its peer over NVLink.

    src/device/sendrecv.h (``RunWorkBatch<ncclFuncSendRecv, …>::run``): a block serving one send and one receive
    splits its warps in two halves (``nSendWarpPerWork``, ``nRecvWarpPerWork``), so each direction gets half of what
    one channel moves, ``ring_channel_bw / 2`` (NCCL's speed of one channel, search.cc). Bounded by the peer's share
    of the NVLink bus: ``ring_channels × ring_channel_bw`` spread over the ``q − 1`` peers inside the node and their
    blocks.
    """
    bus = _sym("ring_channels") * _sym("ring_channel_bw_bytes_per_s")
    return Min(_sym("ring_channel_bw_bytes_per_s") / 2, bus / (sympy.Max(q - 1, 1) * _p2p_blocks_per_peer(n)))


def _p2p_nvlink(per_peer: sympy.Expr, n: sympy.Expr, q: sympy.Expr) -> sympy.Expr:
    """Seconds the Simple point-to-point kernel takes to move *per_peer* bytes to each NVLink peer (all at once).

    Each peer's bytes are split evenly over its blocks (``ncclP2pPartBounds``); a block moves its share at
    ``_p2p_block_bw``, in FIFO steps of ``P2P_NVL_CHUNKSIZE`` (src/init.cc), each step written by the sender and
    then read out by the receiver (NCCL_STEPS = 8 steps in flight, so the copies overlap after the first). The last
    step's trailing copy is the fill: ``_P2P_FILL`` of one step, or of the block's share when that is smaller.
    """
    rate = _p2p_block_bw(n, q)
    # per_peer / _p2p_blocks_per_peer(n), written as one Max of n (per_peer is S/n): S / max(n, p2pnChannels), so
    # that its derivative in n is exactly 0 where every peer has several blocks (no cancellation of two terms).
    share = per_peer * n / sympy.Max(n, _sym("p2p_channels"))
    return share / rate + _P2P_FILL * Min(share, _sym("p2p_chunk_bytes")) / rate


def _loop_fill(op: str, proto: str) -> sympy.Expr:
    """Chunk steps a ring loop takes beyond tuning.cc's ``nsteps``, per protocol (what nccl-tests measures).

    NCCL's ring kernels (src/device/all_gather.h, reduce_scatter.h, all_reduce.h ``runRing``) run, per loop
    and channel, one primitive per chunk step in one thread block, one after the other: a send, ``nsteps − 1``
    receive-and-forward steps, then a final receive — ``nsteps + 1`` primitives for ``nsteps`` transfers.

    * Simple: the final receive is a plain copy out of a buffer in the receiver's memory, or no copy at all
      (all-gather and all-reduce use the "direct" primitives: the peer wrote straight into the user buffer),
      so the loop only waits for its last slice: one slice in flight per loop, ``SLICESTEPS/CHUNKSTEPS`` =
      1/2 chunk step (collectives.h). This is why nccl-tests' bus bandwidth grows with the ranks (2 ranks:
      1 + 1/2 chunk times per chunk moved; 8 ranks: 7 + 1/2 per 7).
    * LL and LL128: data travels as flagged lines that the receiving threads poll and unpack (prims_ll.h,
      prims_ll128.h; no direct primitives), so the protocol's rate is the threads' (tuning.cc caps it with
      llMaxBw and perChMaxRingLL128Bw) and the final receive, which unpacks the whole chunk from the FIFO,
      costs one chunk step at that rate.
    """
    if proto == "simple":
        return _SLICE_PER_CHUNK.get(op, sympy.Integer(0))
    return _FIFO_FILL.get(op, sympy.Integer(0))


def _ring_time(op: str, proto: str, size: sympy.Expr, n: sympy.Expr, q: sympy.Expr, nodes: sympy.Expr,
              nics: sympy.Expr, fill: bool = True) -> sympy.Expr:
    """Seconds of *op* on a ring with protocol *proto* (tuning.cc: ``lat + bytes / algbw``).

    Each ring loop takes ``nsteps`` plus the protocol's fill (``_loop_fill``: 1/2 chunk step with Simple, one
    with LL and LL128). With ``fill=False`` this is tuning.cc's price as it is (what NCCL compares).
    """
    # size / algbw with algbw = busBw · n / nsteps, written without dividing by nsteps (0 for one rank).
    steps = _nsteps(op, n) + (_loop_fill(op, proto) if fill else 0)
    latency = _ring_latency(op, proto, n, q, nodes, fill)
    if op == "all_reduce" and proto == "simple":
        # tuning.cc ncclTopoGetAlgoTime (lines 647-650), "plateau effect of ring": across nodes, once every
        # channel's share per rank is 64 bytes or more, the latency is 1.4 times (compute capability 80 and up;
        # every GPU generation of the catalog).
        plateau = sympy.And(nodes > 1, size >= 64 * _sym("ring_channels") * n)
        latency = latency * Piecewise((sympy.Rational(14, 10), plateau), (1, True))
    return latency + size * steps / (_ring_bus(proto, nodes, nics) * n)


def _tree_net_factor(nodes: sympy.Expr) -> sympy.Expr:
    """What a node's NICs carry in a tree all-reduce, as a multiple of the tree's bus bandwidth they allow.

    Bus bandwidth counts 2S per call (tuning.cc converts with 0.5). In the double binary tree over two nodes each
    node is the other's child in one tree and parent in the other, so its NICs send S/2 up one tree and S/2 down
    the other: S in each direction, and the NICs allow twice their bandwidth as bus bandwidth. Over more nodes an
    inner node of one tree takes S/2 from each of two children and sends S/2 up, then the mirror image: about 2S
    each way, so the NICs allow their bandwidth (NCCL's tuner applies the same factor 2 to NVLS-tree on two nodes,
    tuning.cc line 314)."""
    return Piecewise((2, nodes < 3), (1, True))


#: tuning.cc ``treeCorrectionFactor`` (lines 620-627): NCCL's static correction of the tree all-reduce's bandwidth
#: at medium sizes, per protocol (LL, LL128, Simple), indexed by ``log2i(nBytes >> 6)``: the tree reads entries 0
#: to 22 (``logSize < 23``), NVLS-tree all 24 (``logSize < 24``, ``ncclTopoGetAlgoTime`` lines 643-646).
_TREE_CORRECTION = {
    "ll": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    "ll128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    "simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
}
#: How many of ``_TREE_CORRECTION``'s entries each algorithm reads.
_TREE_CORRECTION_ENTRIES = {"tree": 23, "nvlstree": 24}


def _tree_correction(proto: str, size: sympy.Expr, algorithm: str = "tree") -> sympy.Expr:
    """tuning.cc ``treeCorrectionFactor[proto][log2i(size >> 6)]`` as a step function of *size* (1 below 64 bytes
    and past the entries *algorithm* reads, from 2**29 bytes for the tree, 2**30 for NVLS-tree)."""
    entries = _TREE_CORRECTION[proto][:_TREE_CORRECTION_ENTRIES[algorithm]]
    steps = [(sympy.Integer(1), size < 64)]
    steps += [(sympy.nsimplify(f), size < 64 * 2 ** (k + 1)) for k, f in enumerate(entries)]
    return Piecewise(*steps, (sympy.Integer(1), True))


def _tree_corrected_bytes(proto: str, size: sympy.Expr, fill: bool, algorithm: str = "tree") -> sympy.Expr:
    """*size* over NCCL's ``treeCorrectionFactor`` (``_tree_correction``): the bytes the tree's bus bandwidth moves
    in the time NCCL prices. The factor is a step function that rises again past 1 MiB, so at such a step the
    price of more bytes falls; NCCL compares prices so (``fill=False``), but a real transfer of more bytes takes no
    less time, so the time (``fill=True``) holds the largest value reached at a smaller size: ``max(size/f,
    e/f⁻)`` over the steps ``e`` below *size* (``f⁻`` the factor just below ``e``), a constant per step."""
    if not fill:
        return size / _tree_correction(proto, size, algorithm)
    entries = _TREE_CORRECTION[proto][:_TREE_CORRECTION_ENTRIES[algorithm]]
    factors = (1, *(sympy.nsimplify(f) for f in entries), 1)  # below 64 B, the steps, past the last entry
    pieces, floor = [], sympy.Integer(0)
    for k, f in enumerate(factors):
        lower = 64 * 2 ** (k - 1) if k else 0
        if k:
            floor = sympy.Max(floor, sympy.Integer(lower) / factors[k - 1])  # the left limit at this step
        here = size / f if floor <= sympy.Integer(lower) / f else sympy.Max(size / f, floor)
        pieces.append((here, size < 64 * 2 ** k) if k < len(factors) - 1 else (here, True))
    return Piecewise(*pieces)


#: Bytes one channel's chunk of the tree carries with Simple: src/init.cc DEFAULT_BUFFSIZE (4 MiB) over NCCL_STEPS = 8
#: steps, one step a chunk outside the Simple ring (enqueue.cc calcCollChunking: chunkSteps = 1).
_TREE_SIMPLE_CHUNK = 524288


def _tree_time(proto: str, size: sympy.Expr, q: sympy.Expr, nodes: sympy.Expr, nics: sympy.Expr,
               fill: bool = True) -> sympy.Expr:
    """Seconds of an all-reduce on NCCL's double binary tree (chain inside the node).

    Across nodes the bus bandwidth is the ring graph's, bounded by what the NICs carry in a tree
    (``_tree_net_factor``), then tuning.cc's refinements with the per-channel caps of its column for the node
    count; each network hop adds the network's latency (``_net_hop``). The bandwidth is corrected at medium
    sizes by NCCL's ``treeCorrectionFactor``: in the price as tuning.cc does, in the time (``fill``) never
    falling as the size grows (``_tree_corrected_bytes``).
    """
    channels = _sym("ring_channels")  # the tree graph is searched with the ring's channel count
    intra = channels * _sym("ring_channel_bw_bytes_per_s")
    simple = Piecewise((intra, nodes < 2), (Min(intra, _tree_net_factor(nodes) * _net_bus(nics)), True))
    bus = Min(sympy.Rational(92, 100) * simple, channels * _by_nodes("tree_channel_max_bw_bytes_per_s", nodes))
    if proto == "ll":
        bus = Min(bus / sympy.Rational(38, 10), _by_nodes("ll_max_bw_bytes_per_s", nodes))
    elif proto == "ll128":
        factor = Piecewise((sympy.Rational(7, 9), nodes < 2), (sympy.Rational(120, 128), True))
        bus = Min(bus * factor, channels * _by_nodes("tree_ll128_channel_max_bw_bytes_per_s", nodes))
    latency = _sym(f"alpha_tree_{proto}_s") + 2 * (
        (q - 1) * _sym(f"hop_nvlink_tree_{proto}_s") + sympy.log(nodes, 2) * _net_hop("tree", proto, fill))
    moved = _tree_corrected_bytes(proto, size, fill)
    if fill and proto == "simple":
        # The pipeline's fill, as NVLS-tree's (``_nvls_tree_time``): with Simple a network hop hands a chunk on only
        # whole, at both ends (src/transport/net.cc), so the last chunk of every channel ends 2 log2(nodes) chunk
        # times (up the tree and down) after the bytes' own time. With LL and LL128 the receiver reads lines as they
        # land; the sender's wait for a whole step, at a rate no source states, is not priced (docs/time.md).
        moved = moved + 2 * sympy.log(nodes, 2) * Min(size, _sym("ring_channels") * _TREE_SIMPLE_CHUNK)
    return latency + moved / (bus / 2)


#: src/include/device.h NCCL_MAX_NVLS_ARITY: the most NVLS heads (GPU:NIC pairs) one NVLS-tree channel serves.
_NVLS_MAX_HEADS = 32
#: enqueue.cc calcCollChunking, NVLS-tree: the chunk after its halvings is ``min(largest, step)``, the step by the
#: message's bytes per channel and head: (below this many bytes, this chunk). NCCL halves to 32 KiB below 1 chunk
#: of 64 KiB per channel and head, to 64 KiB below 4 of 128 KiB, to 128 KiB below 16 of 256 KiB, and to 256 KiB
#: below 32 of the largest chunk (``_nvls_tree_loop``: that threshold reads the largest chunk, the others are fixed).
_NVLSTREE_CHUNK_STEPS = ((65536, 32768), (4 * 131072, 65536), (16 * 262144, 131072))
_NVLSTREE_HALVED_CHUNK = 262144


def _nvls_tree_loop(size: sympy.Expr, q: sympy.Expr, nodes: sympy.Expr) -> sympy.Expr:
    """Bytes of the message NVLS-tree moves in one loop of all its channels: ``nvlsChannels × nHeads × chunk``.

    src/device/all_reduce.h (``RunWorkColl<…, NCCL_ALGO_NVLS_TREE, …>``): each channel walks its share of the message
    in loops of one chunk per NVLS head (``loopCount = nHeads · chunkCount``); the heads are the node's GPU:NIC pairs
    (one per rank, at most ``NCCL_MAX_NVLS_ARITY``). The channels (``nvlstree_channels_*``) and the largest chunk
    (``nvlstree_chunk_*``: ``min(nvlsChunkSize, nvlsTreeMaxChunkSize)``, nvls.cc) are the generation's; enqueue.cc
    ``calcCollChunking`` then halves the chunk where the message holds few chunks of every channel and head
    (``_NVLSTREE_CHUNK_STEPS``).
    """
    channels = Piecewise((_sym("nvlstree_channels_n2"), nodes < 3), (_sym("nvlstree_channels_n4"), True))
    ops = channels * Min(q, _NVLS_MAX_HEADS)  # calcCollChunking's concurrentOps
    largest = Piecewise((_sym("nvlstree_chunk_n2_bytes"), nodes < 4), (_sym("nvlstree_chunk_n4_bytes"), True))
    step = Piecewise(*((chunk, size < below * ops) for below, chunk in _NVLSTREE_CHUNK_STEPS),
                     (_NVLSTREE_HALVED_CHUNK, size < 32 * largest * ops), (largest, True))
    return ops * Min(largest, step)


def _nvls_tree_time(size: sympy.Expr, n: sympy.Expr, q: sympy.Expr, nodes: sympy.Expr,
                    nics: sympy.Expr, fill: bool = True) -> sympy.Expr:
    """Seconds of an all-reduce on NVLS-tree: NVLink SHARP inside each node, a tree across nodes; ``oo`` where it
    does not run (no NVLS, one node, or fewer than two ranks per node: tuning.cc needs two channels).

    tuning.cc (lines 303-318, 421-422): the NVLS graph has one channel per rank of the node (search.cc), each at the
    NVLS channel speed ``s`` inside the node; per channel ``intraBw = s · nvlsEfficiency · (ch − 1)/ch · 2`` (the
    all-reduce pipelines two operations), ``interBw`` the channel's share of the node's NICs (times 2 on two nodes,
    ``_tree_net_factor``), ``bw = min(intraBw, interBw, perChMaxNVLSTreeBw)``; ``busBw = ch · bw``, converted with
    ``n / nsteps``. Latency: NVLS's NVLink latency plus ``2 log2(nodes)`` network hops, each with the network's
    Simple latency (``_net_hop``: the tuner's in the price, the network's in the time). On x86 hosts of GPUs of
    compute capability 10.0 and above (``nvlstree_size_correction`` = 1) NCCL corrects the bandwidth at medium sizes
    by the tree's ``treeCorrectionFactor`` (Simple, all 24 entries; ``ncclTopoGetAlgoTime``, NCCL 2.29): the price
    as NCCL has it, the time never falling as the size grows (``_tree_corrected_bytes``).

    The time adds the pipeline's fill, which the tuner leaves out: a loop's chunks (``_nvls_tree_loop``) cross the
    tree's ``2 log2(nodes)`` network hops (up to the root and down again) one after the other, and Simple hands a
    step on only whole, at both ends of a hop (src/transport/net.cc: the sending proxy posts a step the GPU has
    written, the receiving GPU reads one the proxy reports arrived), so the last loop ends ``2 log2(nodes)`` loop
    times after the bytes' own time, at the same bus bandwidth: ``2 log2(nodes) · min(size, loop)`` more bytes. The
    NVLink stages of a loop (scatter, NVLS reduce, multicast, gather) run on faster links and are not counted in
    that fill. Nor do the bytes move faster than the node's own NVLS all-reduce moves them (``_nvls_algbw`` over its
    ``q`` ranks): NVLS-tree runs that all-reduce's scatter, NVLink SHARP reduce, multicast and gather in full on
    every node (src/device/all_reduce.h, ``RunWorkColl<…, NCCL_ALGO_NVLS_TREE, …>``: scatter and gather warps over
    ``nvls->up``, reduce and broadcast warps over ``nvls->down``, as ``NCCL_ALGO_NVLS`` runs them, with the tree's
    network hops between), where the tuner's ``min(intraBw, interBw, cap)`` can exceed it (``interBw`` doubled on two
    nodes, ``intraBw`` with NVLS-tree's own channels), so the time takes the lower of the two algorithm bandwidths.
    The price keeps the tuner's figure.
    """
    channels = q
    speed = Min(_sym("nvls_channel_max_bw_bytes_per_s"), _sym("nvlink_nccl_bw_bytes_per_s") / sympy.Max(q - 1, 1))
    intra = speed * _sym("nvls_efficiency") * (channels - 1) / channels * 2
    inter = _tree_net_factor(nodes) * _net_bus(nics) / channels
    # perChMaxNVLSTreeBws has no one-node column in use (NCCL disables NVLS-tree on one node).
    cap = Piecewise((_sym("nvlstree_channel_max_bw_n2_bytes_per_s"), nodes < 3),
                    (_sym("nvlstree_channel_max_bw_n4_bytes_per_s"), True))
    bus = channels * Min(intra, inter, cap)
    latency = _sym("hop_nvlink_nvls_s") + 2 * sympy.log(nodes, 2) * _net_hop("nvlstree", "simple", fill)
    moved = Piecewise((_tree_corrected_bytes("simple", size, fill, "nvlstree"), _sym("nvlstree_size_correction") > 0),
                      (size, True))
    if fill:
        moved = moved + 2 * sympy.log(nodes, 2) * Min(size, _nvls_tree_loop(size, q, nodes))
        # Algorithm bandwidth no higher than the node's own NVLS all-reduce over its q ranks reaches.
        time = latency + moved / Min(n * bus / _nsteps("all_reduce", n), _nvls_algbw("all_reduce", q))
    else:
        time = latency + moved * _nsteps("all_reduce", n) / (n * bus)
    available = sympy.And(_sym("nvls") > 0, nodes > 1, q > 1)
    return Piecewise((time, available), (_MANY, True))


def _nvls_algbw(op: str, n: sympy.Expr) -> sympy.Expr:
    """Algorithm bandwidth (bytes/s) of *op* on NVLink SHARP over *n* ranks of one node.

    tuning.cc: the NVLS graph has one channel per rank (search.cc: minChannels = maxChannels =
    ranks on one node) at speed ``s``; ``intraBw = s · nvlsEfficiency · (n − 1)/n``, times 2 for
    all-reduce (two pipelined operations) or ``(n − 1)/n`` for all-gather / reduce-scatter;
    ``bw = min(intraBw, s)``; ``busBw = n · bw``; all-reduce converts with ``n / nsteps``, all-gather
    and reduce-scatter keep ``busBw`` as algorithm bandwidth.
    """
    # Max(n − 1, 1): equal for every group NVLS serves (n >= 2), and defined at n = 1.
    speed = Min(_sym("nvls_channel_max_bw_bytes_per_s"), _sym("nvlink_nccl_bw_bytes_per_s") / sympy.Max(n - 1, 1))
    intra = speed * _sym("nvls_efficiency") * (n - 1) / n
    if op == "all_reduce":
        return n * n * Min(2 * intra, speed) / _nsteps(op, n)
    return n * Min(intra * (n - 1) / n, speed)


def _nvls_time(op: str, size: sympy.Expr, n: sympy.Expr, nodes: sympy.Expr) -> sympy.Expr:
    """Seconds on NVLink SHARP inside one node (its latency and :func:`_nvls_algbw`); ``oo`` where NVLS is not
    available."""
    time = _sym("hop_nvlink_nvls_s") + size / _nvls_algbw(op, n)
    available = sympy.And(_sym("nvls") > 0, n > 1, nodes < 2)
    return Piecewise((time, available), (_MANY, True))


def _pat_time(size: sympy.Expr, n: sympy.Expr, q: sympy.Expr, nodes: sympy.Expr, nics: sympy.Expr,
              fill: bool = True) -> sympy.Expr:
    """Seconds of an all-gather or reduce-scatter on NCCL's PAT (parallel aggregated trees); ``oo`` where it does not
    run: PAT needs one GPU per node (tuning.cc ``ncclPatEnable``: ``nNodes == nRanks``), Simple only.

    tuning.cc (lines 295-302, 337, 429-433): PAT prices on the tree graph (``init.cc``: ``graphs[NCCL_ALGO_PAT]`` is
    the tree's), here the ring's channels bounded by the NICs as for the Simple ring; ``busBw × 0.75``, kept as the
    algorithm bandwidth (NCCL converts no bus bandwidth of an all-gather or reduce-scatter but the ring's), so the
    time moves S at it; latency ``baseLat + log2(nodes) · interLat / 3.5 + nRanks · 2.8 µs``, ``interLat`` the
    tree's Simple network hop with the network's latency (one rank per node: tuning.cc's ``ppn == 1`` case).
    ``log2i`` is relaxed to ``log2``. Its time is its price with the network's own hop latency in place of the
    plugin's (``_net_hop``); no pipeline fill is added (no shipped sweep runs one GPU per node to measure one).
    """
    bus = sympy.Rational(3, 4) * _ring_bus_simple(nodes, nics)
    hops = sympy.log(nodes, 2) * _net_hop("tree", "simple", fill) / sympy.Rational(7, 2)
    latency = _sym("alpha_pat_simple_s") + hops + n * _sym("pat_rank_latency_s")
    available = sympy.And(sympy.Eq(q, 1), nodes > 1)
    return Piecewise((latency + size / bus, available), (_MANY, True))


def _best_ring(op: str, size: sympy.Expr, n: sympy.Expr, q: sympy.Expr, nodes: sympy.Expr,
               nics: sympy.Expr, fill: bool = True) -> sympy.Expr:
    return Min(*(_ring_time(op, p, size, n, q, nodes, nics, fill) for p in _PROTOCOLS))


def _hierarchical(op: str, fill: bool = True) -> sympy.Expr:
    """Intra-node reduce-scatter / all-gather around the collective across nodes; ``oo`` on one node.

    Not an NCCL algorithm, so NCCL's tuner gives it no price. Its time is the ``fill=True`` form (each phase at
    its fastest real time: within one phase the protocol is picked by real time, a simplification of nesting
    the tuner's pick); ``codegen.pricing.collective.choose`` takes it where that time is below the time of
    NCCL's own pick. The ``fill=False`` form (each phase at its cheapest tuned price, the phases' prices
    added) is what the tuner would price it at, shown beside the candidates' prices.
    """
    q, nodes = _Q, _NODES
    one = sympy.Integer(1)
    # Across nodes: ranks_per_node concurrent rings of `nodes` ranks, one rank per node each, every
    # ring with its share of the node's NICs, each on 1/ranks_per_node of the data.
    share = _sym("nics_used") / q
    if op == "all_reduce":
        inner = (_best_ring("reduce_scatter", _S, q, q, one, one, fill)
                 + _best_ring("all_gather", _S, q, q, one, one, fill))
        outer = Min(_best_ring("all_reduce", _S / q, nodes, one, nodes, share, fill),
                    *(_tree_time(p, _S / q, one, nodes, share, fill) for p in _PROTOCOLS))
    else:
        # All-gather: across nodes first (each rank gathers its peers' shards), then inside the node on
        # the gathered data; reduce-scatter the mirror image. Both move S/q per rank inside the node.
        inner = _best_ring(op, _S, q, q, one, one, fill)
        outer = _best_ring(op, _S / q, nodes, one, nodes, share, fill)
    return Piecewise((inner + outer, (nodes > 1) & (q > 1)), (_MANY, True))


@functools.cache
def _candidates(op: str, fill: bool = True) -> dict[str, sympy.Expr]:
    """Every candidate of *op*, in NCCL's order (``topoGetAlgoInfo`` loops over algorithms TREE, RING, …,
    NVLS, NVLS_TREE, PAT, then protocols LL, LL128, SIMPLE, and keeps the first strict minimum); hierarchical last.

    ``fill=True``: the real time (tuning.cc's model plus the ring loop's pipeline fill); ``fill=False``:
    tuning.cc's price, what the tuner compares. Built once per process (``candidate_labels`` reads the
    labels again); callers do not mutate the dict.
    """
    out: dict[str, sympy.Expr] = {}
    nics = _sym("nics_used")
    if op == "all_reduce":
        for p in _PROTOCOLS:
            out[f"tree_{p}"] = _tree_time(p, _S, _Q, _NODES, nics, fill)
    for p in _PROTOCOLS:
        out[f"ring_{p}"] = _ring_time(op, p, _S, _N, _Q, _NODES, nics, fill)
    if op in ("all_reduce", "all_gather", "reduce_scatter"):
        out["nvls_simple"] = _nvls_time(op, _S, _N, _NODES)
    if op == "all_reduce":
        out["nvlstree_simple"] = _nvls_tree_time(_S, _N, _Q, _NODES, nics, fill)
    if op in ("all_gather", "reduce_scatter"):
        out["pat_simple"] = _pat_time(_S, _N, _Q, _NODES, nics, fill)
    if op in ("all_reduce", "all_gather", "reduce_scatter"):
        out["hierarchical"] = _hierarchical(op, fill)
    return out


def _p2p_candidates(op: str) -> dict[str, sympy.Expr]:
    """All-to-all and send/recv: NCCL's grouped point-to-point, which its tuner does not price.

    The protocol is NCCL's rule, not a minimum: LL when the bytes sent to one peer are at most
    ``P2P_LL_THRESHOLD`` (src/enqueue.cc, default 16384), Simple above (p2p never uses LL128); the other
    candidate is ``oo``. Priced with the ring constants of one step: base latency plus one NVLink step
    (one network step across nodes). All-to-all sends ``S/n`` to each of the ``q − 1`` peers inside the node
    and the ``n − q`` outside, concurrently; the slower side sets the time. Inside the node Simple moves the
    bytes with NCCL's point-to-point blocks (``_p2p_nvlink``: ``p2pnChannels / n`` blocks per peer, half a
    ring channel each, one FIFO step of fill); LL at the ring's LL bus bandwidth. Through the NICs each of
    the node's ranks has its share of them. Send/recv moves S to one peer: NVLink inside a node (the ring
    bus bandwidth, half of S added as fill with Simple), one NIC across nodes (half of one ``P2P_NET_CHUNKSIZE``
    step added as fill with Simple).
    """
    out: dict[str, sympy.Expr] = {}
    nvlink_only = _NODES < 2
    per_peer = _S / _N if op == "all_to_all" else _S
    small = per_peer <= _sym("p2p_ll_threshold_bytes")
    for p in ("ll", "simple"):
        base = _sym(f"alpha_ring_{p}_s")
        hop = Piecewise((_sym(f"hop_nvlink_ring_{p}_s"), nvlink_only), (_net_hop("ring", p), True))
        intra = _ring_bus(p, sympy.Integer(1), sympy.Integer(1))
        fill = _P2P_FILL if p == "simple" else sympy.Integer(0)
        if op == "all_to_all":
            # The node's ranks_per_node ranks send off-node at once and share its NICs.
            share = _sym("nics_used") / _Q
            inter = _ring_bus(p, sympy.Integer(2), share) if p != "simple" else _net_bus(share)
            if p == "simple":
                # No NVLink peers (one rank per node): nothing moves inside the node.
                nvlink = Min(_Q - 1, 1) * _p2p_nvlink(_S / _N, _N, _Q)
            else:
                nvlink = _S * (_Q - 1) / _N / intra
            move = sympy.Max(nvlink, _S * (_N - _Q) / _N / inter)
        else:
            # Across nodes the bytes stream through the network proxy in P2P_NET_CHUNKSIZE steps: the fill is the
            # last step's, not a share of S (the NVLink form's half of S is kept where no sweep measures it).
            inter = Min(intra, _net_bus(sympy.Integer(1)))
            net_fill = fill * Min(_S, _sym("p2p_net_chunk_bytes"))
            move = Piecewise((_S * (1 + fill) / intra, nvlink_only), ((_S + net_fill) / inter, True))
        time = base + hop + move
        out[f"p2p_{p}"] = Piecewise((time, small), (_MANY, True)) if p == "ll" else Piecewise((_MANY, small),
                                                                                               (time, True))
    return out


def _dedup_candidates() -> dict[str, sympy.Expr]:
    """The expert dispatch (and combine) of DeepEP's normal kernels and Hybrid-EP: a token once per node and rank.

    ``msg_bytes`` is the NCCL all-to-all's S of the same call (a rank's tokens times its ``k = n_chosen_exp``
    copies), so one token's row is ``S / k`` bytes. A token goes once to each *node* holding one of its k experts,
    over RDMA to the rank of its own local index there, which forwards it over NVLink to each other rank of that
    node holding one (deepseek-ai/DeepEP README: "Normal kernels with NVLink and RDMA forwarding", the dispatch
    layout's ``num_tokens_per_rdma_rank``, ``num_tokens_per_rank`` and ``is_token_in_rank``); on one node it goes
    once to each *rank* holding one. Experts are placed ``n_exp / ranks`` per rank and a token's k are taken as
    independent uniform picks (the router balanced; picks with replacement: at 8 of 128 experts on 8 ranks a rank
    is hit 1.7 % less often than without): a given rank holds one of them with probability ``1 − (1 − 1/n)^k``, a
    given node ``1 − (1 − 1/nodes)^k``. Per rank and call, in bytes:

    * network: its tokens to the ``nodes − 1`` other nodes, ``S/k · (nodes − 1)(1 − (1 − 1/nodes)^k)``, through its
      share of the node's NICs (``nics_used / ranks_per_node``, at the network bandwidth every candidate uses);
    * NVLink: its tokens to the ``q − 1`` other ranks of its node plus those it received over RDMA from each other
      node to the same ranks, ``S/k · nodes (q − 1)(1 − (1 − 1/n)^k)``, at NCCL's ring bus bandwidth inside the node
      (DeepEP measures 153-158 GB/s on H800s whose NVLink reaches about 160: the copy kernels run at the link's
      achievable rate, which is what the ring bus bandwidth stands for).

    Group-limited routing (DeepSeek-V3's node-limited routing: ``n_group`` G groups of consecutive experts, a token's
    experts from its best ``topk_group`` g of them; Megatron-Core's ``moe_router_num_groups``,
    ``moe_router_group_topk``) caps the nodes a token reaches: the EP ranks of a node hold consecutive experts, so g
    groups span at most ``M = min(nodes, g · max(1, nodes / G))`` nodes. A token's experts are taken as uniform over
    M such nodes: each of them is hit with probability ``1 − (1 − 1/M)^k``, a rank on one ``1 − (1 − 1/(M q))^k``,
    and ``M (nodes − 1)/nodes`` of them are remote, so per token ``M (nodes − 1)/nodes (1 − (1 − 1/M)^k)`` rows
    cross the network and ``M (q − 1)(1 − (1 − 1/(M q))^k)`` cross NVLink. Without groups (G = g = 1) M = nodes and
    these are the forms above. Exact under the uniform picks where the groups are nodes or span whole nodes
    (G ≤ nodes, G dividing nodes); with several groups per node a token's g groups may share nodes and reach fewer.

    The two are pipelined (the forwarders start as tokens arrive), so the slower sets the time, after the latency of
    the all-to-all's Simple path (its base latency and one NVLink or network hop). The combine moves the same rows
    back, summed on the way; its time is taken as the dispatch's. Not modelled: the kernels' SM share, the CPU wait
    for the received count.
    """
    k = _sym("n_chosen_exp")
    row = _S / sympy.Max(k, 1)  # (k = 0, no routed expert, sends nothing: S is 0 then)
    reach = Min(_NODES, _sym("n_route_groups_topk") * sympy.Max(1, _NODES / _sym("n_route_groups")))
    rank_hit = 1 - (1 - 1 / (reach * _Q)) ** k
    node_hit = 1 - (1 - 1 / reach) ** k
    nvlink = row * reach * (_Q - 1) * rank_hit / _ring_bus("simple", sympy.Integer(1), sympy.Integer(1))
    network = row * reach * (_NODES - 1) / _NODES * node_hit / _net_bus(_sym("nics_used") / _Q)
    hop = Piecewise((_sym("hop_nvlink_ring_simple_s"), _NODES < 2), (_net_hop("ring", "simple"), True))
    return {"dedup": _sym("alpha_ring_simple_s") + hop + sympy.Max(nvlink, network)}


OPS = _OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "send_recv",
              "ep_dispatch")

_DOC = {
    "all_reduce": "an all-reduce of S bytes",
    "all_gather": "an all-gather whose gathered buffer is S bytes",
    "reduce_scatter": "a reduce-scatter whose input buffer is S bytes",
    "broadcast": "a broadcast of S bytes from one root",
    "reduce": "a reduce of S bytes to one root",
    "all_to_all": "an all-to-all whose per-rank send buffer is S bytes",
    "send_recv": "one send/recv of S bytes to one peer",
    "ep_dispatch": "an expert dispatch (or combine) whose NCCL all-to-all would send S bytes per rank (k copies of "
                   "its tokens)",
}

_BUSBW_FACTOR = {
    "all_reduce": 2 * (_N - 1) / _N,
    "all_gather": (_N - 1) / _N,
    "reduce_scatter": (_N - 1) / _N,
    "all_to_all": (_N - 1) / _N,
    "ep_dispatch": (_N - 1) / _N,
    "broadcast": sympy.Integer(1),
    "reduce": sympy.Integer(1),
    "send_recv": sympy.Integer(1),
}

_CANDIDATE_SOURCE = {
    "ring": f"{_TUNING}: ring bandwidth refinements (lines 327-329), bus-to-algorithm ratio (lines 376-382), "
            f"ring latency (lines 393-413), ncclTopoGetAlgoTime (line 653); ring loop fill: Simple SLICESTEPS/"
            f"CHUNKSTEPS from NCCL src/device/collectives.h, LL/LL128 one chunk step (src/device/all_gather.h, "
            f"reduce_scatter.h, all_reduce.h runRing; prims_ll.h, prims_ll128.h)",
    "tree": f"{_TUNING}: tree bandwidth refinements (lines 330-336), bus-to-algorithm ratio 0.5 (lines 376-382), "
            f"tree latency (lines 414-418)",
    "nvlstree": f"{_TUNING}: NVLS-tree bandwidth (lines 303-318: intraBw, interBw x 2 on two nodes, "
                "perChMaxNVLSTreeBws), bus-to-algorithm ratio (lines 376-382), latency (lines 421-422); the network "
                "plugin's latency (graph latencyInter, lines 391-393)",
    "pat": f"{_TUNING}: PAT enabled at one GPU per node (ncclPatEnable, lines 215-223), Simple only (lines 295-303), "
           "busBw x 0.75 (line 337), no bus-to-algorithm conversion off the ring (lines 376-382), latency (lines "
           "429-433); src/init.cc (PAT on the tree graph)",
    "nvls": f"{_TUNING}: NVLS bandwidth (lines 307-323), nvlsEfficiency (line 139), latency (lines 424-426); "
            "src/graph/search.cc (NVLS channels = ranks, totalBw x n/(n-1), line 1168)",
    "dedup": "deepseek-ai/DeepEP README (normal kernels with NVLink and RDMA forwarding, 153-158 GB/s over NVLink on "
             "H800; the dispatch layout: tokens per RDMA rank and per rank, is_token_in_rank); NVIDIA's Hybrid-EP in "
             "DeepEP (RDMA across nodes, NVLink inside: the same routes); Megatron-Core's flex token dispatcher "
             "(moe_flex_dispatcher_backend deepep, hybridep); group-limited routing: DeepSeek-V3 technical report "
             "(arXiv:2412.19437) Sec. 2.1.2 (node-limited routing), Megatron-Core's moe_router_num_groups and "
             "moe_router_group_topk (groups of consecutive experts, the best groups' top-k)",
    "hierarchical": "intra-node reduce-scatter, inter-node collective on 1/ranks_per_node of the data, "
                    "intra-node all-gather (Thakur, Rabenseifner, Gropp 2005, Sec. 4; NCCL's tree is its "
                    "2-level form)",
    "p2p": f"{_TUNING} ring constants for one step; NCCL src/enqueue.cc P2P_LL_THRESHOLD (LL up to 16384 bytes "
           "per peer, else Simple); nccl-tests doc/PERFORMANCE.md (alltoall busbw); NCCL runs "
           "all-to-all and send/recv as grouped point-to-point, which ncclTopoTuneModel does not price; "
           "all-to-all Simple: p2pnChannels (src/graph/connect.cc ncclTopoPostset, src/graph/paths.cc "
           "ncclTopoComputeP2pChannels), blocks per peer (src/enqueue.cc scheduleP2pTasksToPlan, "
           "src/include/channel.h ncclP2pChannelBaseForRound), half a channel per direction (src/device/sendrecv.h), "
           "P2P_NVL_CHUNKSIZE steps (src/init.cc, src/device/prims_simple.h)",
}


def _name(op: str, algorithm: str, what: str, unit: str) -> str:
    return f"collective_{op}_{algorithm}_{what}_{unit}"


def candidate_labels(op: str) -> tuple[str, ...]:
    """The candidates of *op* in NCCL's order (the order ties are broken in: the first one wins)."""
    if op in ("all_to_all", "send_recv"):
        return tuple(_p2p_candidates(op))
    if op == "ep_dispatch":
        return tuple(_dedup_candidates())
    labels = tuple(_candidates(op))
    # tuning.cc (line 294): broadcast and reduce run on the ring only.
    return tuple(k for k in labels if k.startswith("ring_")) if op in _ROOTED else labels


def _build() -> tuple[Formula, ...]:
    out: list[Formula] = []
    for op in _OPS:
        if op in ("all_to_all", "send_recv"):
            cands = _p2p_candidates(op)
            prices = cands  # NCCL's rule (the P2P LL threshold) leaves one finite candidate: no price to compare
        elif op == "ep_dispatch":
            cands = prices = _dedup_candidates()  # one kernel, no tuner
        else:
            cands, prices = _candidates(op), _candidates(op, fill=False)
        labels = candidate_labels(op)
        for label in labels:
            expr = cands[label]
            family = label.split("_")[0]
            out.append(Formula(
                name=_name(op, label, "time", "s"), expr=expr, dimension="collective", algorithm=label, unit="s",
                doc=(f"Predicted seconds of {_DOC[op]} over `ranks` ranks with DeepEP's or Hybrid-EP's kernels, "
                     f"which send a token once per destination node and rank." if op == "ep_dispatch" else
                     f"Predicted seconds of {_DOC[op]} over `ranks` ranks with NCCL's {label.replace('_', ' ')} "
                     f"(algorithm and protocol), the time it really takes; infinite where the candidate is not "
                     f"available."),
                source=_CANDIDATE_SOURCE[family], variant=(("op", op), ("candidate", label), ("what", "time"))))
            if prices[label] != expr:
                out.append(Formula(
                    name=_name(op, label, "price", "s"), expr=prices[label], dimension="collective",
                    algorithm=label, unit="s",
                    doc=f"NCCL's tuned price, seconds, of {_DOC[op]} over `ranks` ranks with "
                        f"{label.replace('_', ' ')}: tuning.cc's latency + bytes / bandwidth without the ring "
                        f"loop's pipeline fill the real time adds (what topoGetAlgoInfo compares; the candidate with the "
                        f"smallest price is run and takes collective_{op}_{label}_time_s). Where a candidate has "
                        f"no price formula its price is its time.",
                    source=f"{_TUNING} ncclTopoGetAlgoTime; NCCL src/enqueue.cc topoGetAlgoInfo"
                    if family != "hierarchical" else _CANDIDATE_SOURCE[family] + "; priced by its phases' tuned prices",
                    variant=(("op", op), ("candidate", label), ("what", "price"))))
        out.append(Formula(
            name=_name(op, "nccl", "busbw_factor", "ratio"), expr=_BUSBW_FACTOR[op], dimension="collective",
            algorithm="nccl", unit="1",
            doc=f"nccl-tests' busbw / algbw factor of {_DOC[op].split(' of ')[0].split(' whose ')[0]} over `ranks` ranks.",
            source="nccl-tests doc/PERFORMANCE.md"))
    return tuple(out)


#: What a candidate's time is differentiated in: the call's two variables (the placement held).
CALL_VARIABLES = ("msg_bytes", "ranks")
#: Candidates whose derivatives are not generated (a nest of Min over phases: SymPy takes minutes on the
#: all-reduce's); the pricer takes a central difference of their generated time form instead.
NOT_DIFFERENTIATED = ("hierarchical",)


def _slopes(formulas: tuple[Formula, ...]) -> tuple[Formula, ...]:
    """Per candidate time form: ``∂t/∂msg_bytes``, ``∂t/∂ranks`` and ``∂t/∂λ`` per level parameter (nonzero ones).

    Named ``<time form>__d_<variable>`` and ``<time form>__scale_<level parameter>``; unit "derivative"
    (seconds per byte, per rank, per unit of λ). Almost everywhere: ``Min``/``Max``/``Piecewise`` by their
    active branch (``symbolic.sensitivity``).
    """
    from .sensitivity import derivative, derivative_expr

    out: list[Formula] = []
    for f in formulas:
        pairs = dict(f.variant)
        if pairs.get("what") != "time" or pairs["candidate"] in NOT_DIFFERENTIATED:
            continue
        for x in CALL_VARIABLES:
            d = derivative(f, x)
            if d.expr != 0:
                out.append(dataclasses.replace(d, variant=(*f.variant[:2], ("what", "slope"), ("by", x))))
        for level, names in LEVEL_PARAMETERS.items():
            expr = sympy.Add(*(_sym(n) * derivative_expr(f.expr, n) for n in names if f.expr.has(_sym(n))))
            if expr != 0:
                out.append(Formula(
                    name=f"{f.name}__scale_{level}", expr=expr, dimension=f.dimension, algorithm=f.algorithm,
                    unit="derivative",
                    doc=f"Derivative of {f.name} (seconds) in a relative scale of the {level.replace('_', ' ')} "
                        f"symbols ({', '.join(names)}) all multiplied together, at scale 1: "
                        f"sum of symbol x d t / d symbol, seconds per unit of the scale (almost everywhere).",
                    source=f"{f.source}; differentiated by symbolic.sensitivity",
                    variant=(*f.variant[:2], ("what", "slope"), ("by", level))))
    return tuple(out)


_CANDIDATE_FORMULAS = _build()
FORMULAS: tuple[Formula, ...] = _CANDIDATE_FORMULAS + _slopes(_CANDIDATE_FORMULAS)
