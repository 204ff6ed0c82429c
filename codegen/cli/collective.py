"""``symcost collective OP --system S --ranks N --bytes SIZE``: one collective's predicted time.

Prints the predicted time, algbw and busbw (nccl-tests conventions, GB = 1e9 bytes) and the algorithm and
protocol NCCL's tuner would pick, for N consecutive ranks of catalog system S (a name or an alias), then the
group's placement and every candidate the tuner weighed (its price and time). Where the time falls at a larger
size (NCCL's pick switches there to a candidate that runs faster), it says where, between which candidates and
by which of NCCL's rules (docs/time.md, "Where the time falls as S grows"). SIZE is nccl-tests' size S in
bytes, with an optional binary suffix (K, M, G = 2^10, 2^20, 2^30) or decimal one (KB, MB, GB = 1e3, 1e6,
1e9). ``--dtype T`` (nccl-tests' ``-d`` name) matters for reductions: NVLS cannot reduce 8-bit types.
``ep_dispatch --top-k K`` is the expert dispatch of DeepEP's or Hybrid-EP's kernels, no NCCL collective (S: the NCCL
all-to-all's, K copies of each token; docs/time.md "Expert dispatch"). ``--json`` prints one JSON object.
"""

from __future__ import annotations

import argparse
import decimal
import json
import math
import re

import numpy as np

import hardware

from . import COMMANDS
from ..pricing.collective import Fall, next_fall
from ..runtime.inputs import DEVICES_MAX, VALUE_MAX, InputError, parse_whole
from ..validation import collectives

_SIZE = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]*)?(?:[eE][0-9]+)?)\s*(?P<unit>[KMG]i?B?|[kKMG]B|B)?")
_UNITS = {None: 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "kB": 10**3, "KB": 10**3, "MB": 10**6, "GB": 10**9}


def parse_size(text: str) -> float:
    """Bytes from ``"512"``, ``"4M"`` / ``"4MiB"`` (2^20) or ``"4MB"`` (1e6): a whole number of bytes from 1 to
    2**53 (``"1.5K"`` is 1536 bytes; ``"0.5"`` or ``"1.3K"`` is no whole number of bytes), as a float.

    The number is read exactly (decimal, ASCII digits only), so no rounding makes a fraction whole.

    Raises:
        InputError: naming ``--bytes`` and the text.
    """
    match = _SIZE.fullmatch(text.strip()) if isinstance(text, str) and text.isascii() else None
    if not match or match["unit"] not in _UNITS:
        raise InputError(f"--bytes: not a size, got {text!r} (e.g. 512, 4M, 4MiB, 4MB)")
    number = decimal.Decimal(match["number"])
    if number.adjusted() > 30:  # far past 2**53 bytes whatever the unit: not multiplied out
        value = decimal.Decimal(VALUE_MAX) + 1
    else:
        with decimal.localcontext() as exact:
            exact.prec = 80  # 31 digits times a unit of 10 digits: every product exact
            value = number * _UNITS[match["unit"]]
    if not 0 < value <= VALUE_MAX:
        raise InputError(f"--bytes: must be a size > 0 and at most 2**53 bytes (whole numbers exact in float64), "
                         f"got {text!r}")
    if value != value.to_integral_value():
        raise InputError(f"--bytes: a whole number of bytes, got {text!r} ({value.normalize():f} bytes)")
    return float(value)


def ranks_count(text: str) -> int:
    """``--ranks``: a whole number in ASCII digits (the gate's ``parse_whole``); its range, 2 to 2**30, is
    ``collectives.predict``'s to check.

    Raises:
        argparse.ArgumentTypeError: ``argument --ranks: invalid int value: '٨' (…)``.
    """
    try:
        return parse_whole("--ranks", text, minimum=-(2**63))
    except InputError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r} (a whole number in ASCII digits 0-9)") from None


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("collective", help=COMMANDS["collective"],
                       description=__doc__.split("\n\n")[1])
    p.add_argument("op", metavar="OP", help=f"collective: {', '.join(sorted(collectives.OPS))}, or "
                                            f"{collectives.EP_DISPATCH} (DeepEP's / Hybrid-EP's expert dispatch)")
    p.add_argument("--system", required=True, help="catalog system or alias, e.g. dgx_h100 or h100_sxm")
    p.add_argument("--ranks", required=True, type=ranks_count, help="ranks in the communicator (consecutive ranks)")
    p.add_argument("--ranks-per-node", type=ranks_count, default=None, dest="ranks_per_node", metavar="N",
                   help="ranks of the communicator on each node (default: the node's GPUs); 1 for a group with one "
                        "rank per node, such as a data-parallel group across nodes of tensor-parallel 8 (NCCL may "
                        "then run PAT); a node drives the NICs of its ranks' GPUs only")
    p.add_argument("--bytes", required=True, dest="size", help="nccl-tests size S, e.g. 512, 4M, 1GiB, 1GB")
    p.add_argument("--dtype", default=None,
                   help="data type (nccl-tests -d name: half, bfloat16, float, int8, ...); 8-bit types rule out "
                        "NVLS for all_reduce and reduce_scatter; default: any type NVLS reduces")
    p.add_argument("--algo", metavar="LIST", default=None,
                   help="NCCL_ALGO: the algorithms NCCL may run (Ring, Tree, NVLS, NVLSTree, PAT; comma-separated, a "
                        "leading ^ excludes them), as the environment variable restricts them")
    p.add_argument("--proto", metavar="LIST", default=None,
                   help="NCCL_PROTO: the protocols NCCL may run (LL, LL128, Simple; same syntax)")
    p.add_argument("--nccl-version", metavar="X.Y.Z", default=None, dest="nccl_version",
                   help="the NCCL release the run uses (default: the current one): algorithms it did not have yet "
                        "are left out (NVLS before 2.17, NVLS-tree before 2.18, PAT before 2.23)")
    p.add_argument("--top-k", type=ranks_count, default=None, dest="top_k", metavar="K",
                   help=f"with {collectives.EP_DISPATCH}: the experts each token is routed to (S holds K copies of "
                        f"each token, as the NCCL all-to-all's)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _settings(args: argparse.Namespace) -> dict[str, object]:
    """--algo / --proto as ``predict``'s algorithms and protocols (NCCL_ALGO / NCCL_PROTO's syntax), --nccl-version as
    its ``nccl_version``."""
    from ..validation.clusters import algorithms, nccl_version_algorithms, protocols

    out: dict[str, object] = {"algorithms": None, "protocols": None}
    for flag, key, read in (("--algo", "algorithms", algorithms), ("--proto", "protocols", protocols)):
        value = getattr(args, flag[2:])
        if value is not None:
            try:
                out[key] = read(value)
            except ValueError as exc:
                raise ValueError(f"{flag}: {exc}") from None
    if args.nccl_version is not None:
        try:
            nccl_version_algorithms(args.nccl_version)
        except ValueError as exc:
            raise ValueError(f"--nccl-version: {str(exc).removeprefix('nccl_version: ')}") from None
        out["nccl_version"] = args.nccl_version
    return out


def _ranks_per_node(args: argparse.Namespace) -> int | None:
    """``--ranks-per-node``, checked against ``--ranks`` (a whole number of nodes) and the system's node; without
    it, a group spanning nodes must fill them (the time model places whole nodes of equal ranks: 12 ranks on nodes
    of 8 would be priced as two full nodes)."""
    per = args.ranks_per_node
    if per is None:
        node = hardware.load(args.system).devices_per_node
        if node < args.ranks <= DEVICES_MAX and args.ranks % node:  # (a count out of range is predict's to name)
            fits = [n for n in range(node, 0, -1) if args.ranks % n == 0]
            raise ValueError(f"--ranks {args.ranks}: spans {args.system} nodes of {node} GPUs without filling them; "
                             f"the model prices nodes of equal ranks: give --ranks-per-node (e.g. {fits[0]})")
        return None
    if per < 1:
        raise ValueError(f"--ranks-per-node {per}: a whole number of ranks on each node, at least 1")
    node = hardware.load(args.system).devices_per_node
    if per > node:
        raise ValueError(f"--ranks-per-node {per}: a {args.system} node has {node} GPUs")
    if args.ranks % per:
        raise ValueError(f"--ranks-per-node {per}: does not divide --ranks {args.ranks} (whole nodes)")
    return per


def run(args: argparse.Namespace) -> int:
    size = parse_size(args.size)
    dispatch = args.op == collectives.EP_DISPATCH
    if dispatch and args.top_k is None:
        raise ValueError(f"--top-k: {collectives.EP_DISPATCH} needs the experts each token is routed to, "
                         f"e.g. --top-k 8")
    if not dispatch and args.top_k is not None:
        raise ValueError(f"--top-k {args.top_k}: only {collectives.EP_DISPATCH} reads it ({args.op} is NCCL's "
                         f"collective): drop it")
    if dispatch and not 1 <= args.top_k <= 1024:
        raise ValueError(f"--top-k: a whole number of experts per token from 1 to 1024, got {args.top_k}")
    if dispatch:
        for flag in ("--algo", "--proto", "--dtype", "--nccl-version"):
            value = getattr(args, flag[2:].replace("-", "_"))
            if value is not None:
                raise ValueError(f"{flag} {value}: {collectives.EP_DISPATCH} runs DeepEP's or Hybrid-EP's kernels, "
                                 f"not NCCL's algorithms and protocols: drop it")
        result = collectives.predict(args.system, args.op, args.ranks, size, top_k=args.top_k,
                                     gpus_per_node=_ranks_per_node(args))
        return _print_dispatch(args, size, result)
    result = collectives.predict(args.system, args.op, args.ranks, size, args.dtype, top_k=args.top_k,
                                 gpus_per_node=_ranks_per_node(args), **_settings(args))
    placement = {k: int(v) for k, v in result.placement.items()}
    # Every candidate NCCL's tuner weighs, cheapest price first; None (JSON null) where it cannot run here.
    candidates = {label: {"price_s": _finite(result.prices[label]), "time_s": _finite(result.candidates[label])}
                  for label in sorted(result.prices, key=lambda label: float(result.prices[label]))}
    fall = _fall(args, size)
    record = {"op": collectives.OPS[args.op], "system": args.system, "ranks": args.ranks, "bytes": size,
              "time_s": float(result.time_s), "algbw_GBps": float(result.algbw_bytes_per_s) / 1e9,
              "busbw_GBps": float(result.busbw_bytes_per_s) / 1e9, "algorithm": str(result.algorithm),
              "dtype": args.dtype, "placement": placement, "candidates": candidates,
              "falls_at": None if fall is None else {"bytes": fall.msg_bytes, "time_s": fall.time_s,
                                                     "from": fall.before, "to": fall.after, "rule": fall.rule}}
    if args.json:
        print(json.dumps(record))
        return 0
    print(f"{record['op']} of {size:g} bytes over {args.ranks} ranks of {args.system}:")
    print(f"  time      {record['time_s'] * 1e6:.2f} us")
    print(f"  algbw     {record['algbw_GBps']:.2f} GB/s  (S / t, GB = 1e9 bytes)")
    print(f"  busbw     {record['busbw_GBps']:.2f} GB/s  (nccl-tests bus bandwidth)")
    print(f"  algorithm {record['algorithm']}  (the smallest tuned price, as NCCL's tuner picks; the hierarchical "
          "schedule below is no NCCL algorithm, shown for comparison)")
    if fall is not None:
        print(f"  falls     to {fall.time_s * 1e6:.2f} us at {fall.msg_bytes:.0f} bytes, where NCCL switches from "
              f"{fall.before} to {fall.after}: {fall.rule}")
    _print_placement(placement)
    print("  candidates: NCCL's tuned price and the predicted time, us")
    for label, pair in candidates.items():
        if pair["price_s"] is None:
            print(f"    {label:<14} not available here")
            continue
        mark = "  <- picked" if label == record["algorithm"] else ""
        print(f"    {label:<14} {pair['price_s'] * 1e6:>12.2f} {pair['time_s'] * 1e6:>12.2f}{mark}")
    return 0


def _print_placement(placement: dict[str, int]) -> None:
    """The placement line of a collective's table: one node (NVLink only), or nodes, ranks and NICs in use."""
    if placement["nodes"] == 1:
        print(f"  placement one node, {placement['ranks_per_node']} ranks (consecutive ranks: NVLink only)")
    else:
        print(f"  placement {placement['nodes']} nodes x {placement['ranks_per_node']} ranks, "
              f"{placement['nics_used']} NIC(s) per node in use (consecutive ranks)")


def _print_dispatch(args: argparse.Namespace, size: float, result: collectives.Prediction) -> int:
    """The expert dispatch's time, bandwidths (the all-to-all's conventions) and placement: one kernel, no pick."""
    placement = {k: int(v) for k, v in result.placement.items()}
    record = {"op": collectives.EP_DISPATCH, "system": args.system, "ranks": args.ranks, "bytes": size,
              "top_k": args.top_k, "time_s": float(result.time_s),
              "algbw_GBps": float(result.algbw_bytes_per_s) / 1e9, "busbw_GBps": float(result.busbw_bytes_per_s) / 1e9,
              "algorithm": str(result.algorithm), "placement": placement}
    if args.json:
        print(json.dumps(record))
        return 0
    print(f"{record['op']} of {size:g} bytes ({args.top_k} copies of each token, the NCCL all-to-all's size) over "
          f"{args.ranks} ranks of {args.system}:")
    print(f"  time      {record['time_s'] * 1e6:.2f} us")
    print(f"  algbw     {record['algbw_GBps']:.2f} GB/s  (S / t, GB = 1e9 bytes)")
    print(f"  busbw     {record['busbw_GBps']:.2f} GB/s  (the all-to-all's bus bandwidth convention)")
    print("  kernels   DeepEP's or Hybrid-EP's: a token once per node (RDMA) and rank (NVLink) holding its experts "
          "(docs/time.md, Expert dispatch)")
    _print_placement(placement)
    return 0


def _fall(args: argparse.Namespace, size: float) -> Fall | None:
    """Where the time of NCCL's pick first falls below its time at *size* as the size grows, if it does."""
    def pick_at(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        result = collectives.predict(args.system, args.op, args.ranks, sizes, args.dtype,
                                     gpus_per_node=_ranks_per_node(args), **_settings(args))
        return np.broadcast_to(result.time_s, sizes.shape), np.broadcast_to(result.algorithm, sizes.shape)
    return next_fall(pick_at, size, top=VALUE_MAX)


def _finite(value: object) -> float | None:
    number = float(value)  # type: ignore[arg-type]
    return number if math.isfinite(number) else None
