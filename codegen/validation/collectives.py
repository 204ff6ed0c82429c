"""Collective times predicted by the generated evaluators, and compared with nccl-tests measurements.

``predict`` evaluates every candidate of that op (from ``generated/``, no SymPy) for a catalog
system and a group, picks the one NCCL's tuner would pick (the smallest tuned price,
``codegen.pricing.collective.choose``) and reports its real time. ``validate`` predicts every row of a measurement table and
groups the relative errors by system, collective and size band.

Measurement tables are CSV files with at least the columns ``system`` (a catalog name or alias:
``a100_sxm``, ``h100_sxm``, …), ``op`` (nccl-tests' names: ``all_reduce``, ``all_gather``,
``reduce_scatter``, ``alltoall``, ``broadcast``, ``reduce``, ``sendrecv``), ``n_gpus``, ``bytes`` (nccl-tests'
size S) and ``time_us``; an optional ``dtype`` column (nccl-tests' ``-d`` names: ``half``, ``int8``, …)
decides whether NVLink SHARP can reduce the row's data (``nvls_reduces``); other columns are ignored. All
GPUs of a row are in one node unless ``n_gpus`` exceeds the system's node size.

Multi-node tables (the format of ``data/nccl_multinode.csv``) name the ranks ``ranks`` and state each row's
cluster: ``nodes``, ``gpus_per_node``, the network (``nics_per_node``, ``nic_gbps``, ``transport``) and the run's
NCCL settings (``nccl_env``; ``NCCL_ALGO`` and ``NCCL_PROTO`` are honoured), read by ``codegen.validation.clusters``;
an optional ``nccl_version`` leaves out the algorithms its NCCL did not have yet (NVLS before 2.17, NVLS-tree before
2.18, PAT before 2.23). An optional ``nvlink_domain_gpus`` states the GPUs that share one NVLink domain (blank, or
no such column: the catalog node's, ``gpus_per_node`` times the hosts its NVLink domain spans,
``System.hosts_per_node``): where it holds several hosts (a GB200 NVL72 rack of 18 trays of 4 GPUs), the hosts of
one domain are one node to NCCL (multi-node NVLink) and to the model, their NICs together its NICs. A node that runs
fewer ranks than it holds drives the NICs of its ranks' GPUs (``nics_in_use``). Their groups are (system, transport,
nodes, op, band), ``nodes`` the hosts as the table counts them.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np

import generated
import hardware

from ..runtime.inputs import DEVICES_MAX, VALUE_MAX, parse_real, parse_whole
from ..pricing.collective import choose, enabled_on
from .clusters import cluster, cluster_of, nccl_settings, nccl_version_algorithms, nccl_version_before
from .csvfile import DATA_DIR, Table, read_table

__all__ = ["BAND_EDGE_BYTES", "EP_DISPATCH", "OPS", "DEFAULT_DATA", "Clusters", "Curve", "Group", "Measurements",
           "Prediction", "curves", "groups_json", "load_measurements", "nics_in_use", "overall", "predict",
           "predicted_rows", "predicted_times", "validate"]

#: Messages below 1 MiB are "small", the rest "large" (the two bands docs/time.md reports).
BAND_EDGE_BYTES = 1 << 20

#: nccl-tests' collective names → the time model's.
OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
       "alltoall": "all_to_all", "all_to_all": "all_to_all", "broadcast": "broadcast", "reduce": "reduce",
       "sendrecv": "send_recv", "send_recv": "send_recv"}

#: The expert dispatch of DeepEP's and Hybrid-EP's kernels (docs/time.md, "Expert dispatch"): no nccl-tests binary
#: and no NCCL collective, but priced per call as one (``predict`` with the copies of a token, ``top_k``).
EP_DISPATCH = "ep_dispatch"

#: The shipped copy of the measurements (provenance in codegen/validation/data/README.md).
DEFAULT_DATA = DATA_DIR / "nccl_single_node.csv"

_REQUIRED = ("system", "op", "n_gpus", "bytes", "time_us")

#: NCCL's ``ncclNvlsSupported`` (src/include/device.h, v2.27-v2.30; enqueue.cc: ``nvlsSupport = comm->nvlsSupport &&
#: (ncclNvlsSupported(op, type) || func == AllGather)``): the NVLS switch reduces 32- and 64-bit integers, half and
#: bfloat16 (sum, min/max) and float, double (sum) only; 8-bit types (int8, uint8, fp8) never. So an all-reduce or
#: reduce-scatter of those runs without NVLS even where the system has it; an all-gather (no reduction) keeps it.
#: Keys: nccl-tests' ``-d`` type names and NCCL's own; value: NVLS reduces it with nccl-tests' default op, sum.
NVLS_REDUCES_DTYPE = {
    "int8": False, "char": False, "uint8": False, "f8e4m3": False, "f8e5m2": False, "fp8_e4m3": False,
    "fp8_e5m2": False, "int32": True, "int": True, "uint32": True, "int64": True, "uint64": True, "half": True,
    "float16": True, "bfloat16": True, "float": True, "float32": True, "double": True, "float64": True,
}
_REDUCING = ("all_reduce", "reduce_scatter")


def nvls_reduces(dtype: str | None) -> bool:
    """Whether NCCL's NVLS can run a reduction of *dtype* (``None``: unknown, taken as yes).

    Raises:
        ValueError: *dtype* is not a type name nccl-tests or NCCL uses (naming the field and value).
    """
    if dtype is None:
        return True
    try:
        return NVLS_REDUCES_DTYPE[dtype.strip().lower()]
    except KeyError:
        raise ValueError(f"dtype: unknown data type {dtype!r}; known: {', '.join(sorted(NVLS_REDUCES_DTYPE))}") from None


def _log2(bound: int | float) -> int:
    """The exponent of a power-of-two bound of ``codegen.runtime.inputs``, for a message that names it."""
    return int(bound).bit_length() - 1


def _op(name: str) -> str:
    if name == EP_DISPATCH:
        return name
    try:
        return OPS[name]
    except KeyError:
        raise ValueError(f"op: unknown collective {name!r}; known: {', '.join(sorted([*OPS, EP_DISPATCH]))}") from None


def _call(name: str, values: dict[str, object]) -> np.ndarray:
    args = generated.FORMULAS[name]["arguments"]
    with np.errstate(divide="ignore", invalid="ignore"):
        return getattr(generated, name)(**{a: values[a] for a in args})


@dataclass(frozen=True)
class Prediction:
    """Predicted seconds of one collective (arrays broadcast over the inputs).

    Attributes:
        time_s: the real time of the candidate NCCL's tuner would pick (the smallest tuned price).
        algbw_bytes_per_s: S / time.
        busbw_bytes_per_s: algbw times nccl-tests' factor for the collective.
        algorithm: the chosen candidate's label ("ring_ll", "nvls_simple", "tree_simple", …), per element.
        candidates: every candidate's real time, by label (``inf`` where unavailable).
        prices: every candidate's tuned price (what NCCL compares), by label.
        placement: the group's ``ranks_per_node``, ``nodes`` and ``nics_used`` (``symbolic/placement.py``).
    """

    time_s: np.ndarray
    algbw_bytes_per_s: np.ndarray
    busbw_bytes_per_s: np.ndarray
    algorithm: np.ndarray
    candidates: dict[str, np.ndarray]
    prices: dict[str, np.ndarray]
    placement: dict[str, np.ndarray] = field(default_factory=dict)


def nics_in_use(system: hardware.System, gpus_per_node: int) -> int:
    """The NICs of one *system* node that a run of *gpus_per_node* ranks on it drives: those of its GPUs in use,
    ``nics_per_node × gpus_per_node / devices_per_node`` rounded down, at least one.

    NCCL builds a node's topology from the GPUs of the communicator's ranks on it (src/graph/topo.cc: the XML of
    the ranks of one host, fused) and lists a GPU's NICs nearest first (src/graph/search.cc, ncclTopoSelectNets): a
    NIC past the GPU's own PCIe switch is reached through that GPU's one PCIe link, or through a peer GPU (PXN) only
    where the peer is a rank of the communicator. On a rail-optimised node (one NIC per GPU, DGX/HGX) a node
    running one rank drives one NIC's worth, not the eight the node holds; where NICs are fewer than GPUs (AWS
    P4: 4 EFA NICs for 8 GPUs) a rank keeps the one it shares.
    """
    return max(1, system.nics_per_node * gpus_per_node // system.devices_per_node)


def group_values(system: hardware.System, ranks: object, msg_bytes: object,
                 gpus_per_node: int | None = None, nics: int | None = None) -> dict[str, object]:
    """Every input of the collective formulas for a group of *ranks* consecutive ranks on *system*, its nodes
    holding *gpus_per_node* of them (``None``: the system's node size) and driving *nics* NICs each (``None``:
    those GPUs' NICs, :func:`nics_in_use`)."""
    base = hardware.time_bindings(system)
    if gpus_per_node is not None:
        base["gpus_per_node"] = gpus_per_node
        base["nics_per_node"] = nics_in_use(system, gpus_per_node)
    if nics is not None:
        base["nics_per_node"] = nics
    n = np.asarray(ranks, dtype=float)
    values: dict[str, object] = dict(base, msg_bytes=np.asarray(msg_bytes, dtype=float), ranks=n,
                                     group_size=n, group_stride=1.0)
    placement = {k: _call(f"placement_group_{k}_count", values) for k in ("ranks_per_node", "nodes", "nics_used")}
    values.update(placement)
    return values


def predict(system: str | hardware.System, op: str, ranks: object, msg_bytes: object,
            dtype: str | None = None, *, algorithms: Iterable[str] | None = None,
            protocols: Iterable[str] | None = None, gpus_per_node: int | None = None,
            top_k: int | None = None, nccl_version: str = "", nics: int | None = None) -> Prediction:
    """Predicted time of *op* over *ranks* consecutive ranks of *system* for nccl-tests size *msg_bytes*.

    *dtype* (nccl-tests' ``-d`` name, ``None`` = unknown): an all-reduce or reduce-scatter of a type NVLS
    cannot reduce (``nvls_reduces``: 8-bit types) gets no NVLS candidate, as NCCL's enqueue does.
    *algorithms*, *protocols*: what ``NCCL_ALGO`` / ``NCCL_PROTO`` enable (``codegen.pricing.collective.allowed``),
    within what the system's transport runs (``hardware.transport``); ``None`` = NCCL's choice. *gpus_per_node*:
    ranks per node when the run used fewer GPUs of each node than it has, each node then driving its ranks' NICs
    (:func:`nics_in_use`). *nics*: the NICs one node drives, where the caller counts them itself (the hosts of a
    multi-node NVLink domain in use together). *top_k*: for the expert dispatch (``EP_DISPATCH``, whose S is the
    NCCL all-to-all's, *top_k* copies of each token) the experts each token is routed to; read by no other op.
    *nccl_version* (as nccl-tests prints it; ``""``: the current NCCL): the algorithms its release did not have are
    left out (``clusters.nccl_version_algorithms``), and before 2.29 NVLS-tree takes no medium-size correction.

    Raises:
        ValueError: an unknown op or dtype, a rank count below 2 or above 2**30, a size not > 0 or above 2**53
            (naming the field and value), a *top_k* missing for the expert dispatch, given for another op or not a
            whole number from 1 to 1024, *nics* not a whole number from 1 to 2**30, or a system without the GPU
            facts the time model needs.
    """
    op = _op(op)
    if (op == EP_DISPATCH) != (top_k is not None):
        raise ValueError(f"top_k: {op} needs the experts each token is routed to (--top-k K)" if op == EP_DISPATCH
                         else f"top_k: only {EP_DISPATCH} reads it; {op} is NCCL's collective, got {top_k!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer))
                              or not 1 <= top_k <= 1024):
        raise ValueError(f"top_k: a whole number of experts per token from 1 to 1024, got {top_k!r}")
    reduces = nvls_reduces(dtype)  # checked for every op: an unknown name is an error, not ignored
    sys_ = system if isinstance(system, hardware.System) else hardware.load(system)
    n, size = np.asarray(ranks, dtype=float), np.asarray(msg_bytes, dtype=float)
    if np.any(~(n >= 2)) or np.any(n != np.floor(n)) or np.any(n > DEVICES_MAX):
        raise ValueError(f"ranks: a collective needs a whole number of ranks from 2 to 2**{_log2(DEVICES_MAX)} (the "
                         f"largest device count symcost prices), got {ranks!r}")
    if np.any(~np.isfinite(size)) or np.any(size <= 0) or np.any(size > VALUE_MAX):
        raise ValueError(f"bytes: must be a size > 0 and at most 2**{_log2(VALUE_MAX)} (whole numbers exact in "
                         f"float64), got {msg_bytes!r}")
    if gpus_per_node is not None and (isinstance(gpus_per_node, bool)
                                      or not isinstance(gpus_per_node, (int, np.integer))
                                      or not 1 <= gpus_per_node <= sys_.devices_per_node):
        raise ValueError(f"gpus_per_node: a whole number from 1 to {sys_.devices_per_node} (a {sys_.name} node), "
                         f"got {gpus_per_node!r}")
    if nics is not None and (isinstance(nics, bool) or not isinstance(nics, (int, np.integer))
                             or not 1 <= nics <= DEVICES_MAX):
        raise ValueError(f"nics: a whole number of NICs from 1 to 2**{_log2(DEVICES_MAX)}, got {nics!r}")
    values = group_values(sys_, n, size, gpus_per_node, nics)
    if top_k is not None:  # (the expert dispatch: no routing groups here, every node reachable)
        values.update(n_chosen_exp=float(top_k), n_route_groups=1.0, n_route_groups_topk=1.0)
    if op in _REDUCING and not reduces:
        values["nvls"] = 0.0  # NCCL enqueue.cc: nvlsSupport needs ncclNvlsSupported(op, type)
    algorithms = None if algorithms is None else set(algorithms)
    has = nccl_version_algorithms(nccl_version)
    if has is not None:
        algorithms = set(has) if algorithms is None else algorithms & has
        if nccl_version_before(nccl_version, (2, 29)):  # ncclTopoGetAlgoTime's NVLS-tree correction: NCCL 2.29.2
            values["nvlstree_size_correction"] = 0.0
    protocols = None if protocols is None else set(protocols)
    pick = choose(op, values, enabled_on(sys_, op, algorithms, protocols))
    if np.any(np.isinf(pick.time_s)):
        runs = hardware.transport(sys_)
        raise ValueError(f"algorithms: {', '.join(sorted(algorithms)) if algorithms else 'any'} with protocols "
                         f"{', '.join(sorted(protocols)) if protocols else 'any'} leave no candidate of {op} on "
                         f"{sys_.name} (whose network runs {', '.join(runs.algorithms)} with "
                         f"{', '.join(runs.protocols)}) that the model prices")
    algbw = values["msg_bytes"] / pick.time_s
    factor = _call(f"collective_{op}_nccl_busbw_factor_ratio", values)
    return Prediction(time_s=pick.time_s, algbw_bytes_per_s=algbw, busbw_bytes_per_s=factor * algbw,
                      algorithm=pick.algorithm, candidates=dict(zip(pick.labels, pick.times)),
                      prices=dict(zip(pick.labels, pick.prices)),
                      placement={k: values[k] for k in ("ranks_per_node", "nodes", "nics_used")})


@dataclass(frozen=True)
class Measurements:
    """Measured rows, column-wise: system (as the file names it), op (the model's name), ranks, bytes, seconds,
    and the data type (nccl-tests' name; ``""`` where the file has no ``dtype`` column or leaves it empty);
    ``rows_read``: how many rows the file held (0 when the arrays were built in Python)."""

    system: np.ndarray
    op: np.ndarray
    ranks: np.ndarray
    msg_bytes: np.ndarray
    time_s: np.ndarray
    path: str
    dtype: np.ndarray | None = None
    rows_read: int = 0
    clusters: "Clusters | None" = None

    def dtypes(self) -> np.ndarray:
        """The data type of every row (``""`` where unknown)."""
        return self.dtype if self.dtype is not None else np.full(self.system.shape, "", dtype=object)

    def settings(self) -> np.ndarray:
        """Each row's cluster and NCCL settings as one text (``""`` on a one-node table): rows with the same text are
        priced on the same system with the same settings."""
        if self.clusters is None:
            return np.full(self.system.shape, "", dtype=object)
        c = self.clusters
        per_domain, nics = c.nccl_nodes()
        versions = c.nccl_version if c.nccl_version is not None else np.full(c.nodes.shape, "", dtype=object)
        return np.array([f"{t}|{k}|{g:g}|{q}|{e}|{v}" for t, k, g, q, e, v in zip(
            c.transport, nics, c.nic_gbps, per_domain, c.nccl_env, versions)], dtype=object)


@dataclass(frozen=True)
class Clusters:
    """The cluster of every row of a multi-node table (``codegen.validation.clusters``): nodes (hosts), GPUs per
    node, the network's transport, NICs per node and Gb/s per NIC (NaN: the catalog node's), the run's NCCL settings,
    the GPUs of one NVLink domain (``None``: each host its own) and the NCCL version as printed (``None`` or ``""``:
    the current one)."""

    nodes: np.ndarray
    gpus_per_node: np.ndarray
    transport: np.ndarray
    nics_per_node: np.ndarray
    nic_gbps: np.ndarray
    nccl_env: np.ndarray
    nvlink_domain_gpus: np.ndarray | None = None
    nccl_version: np.ndarray | None = None

    def nccl_nodes(self) -> tuple[np.ndarray, np.ndarray]:
        """Per row, the ranks and the NICs of one node as NCCL sees it: a host, or, where an NVLink domain spans
        several hosts (multi-node NVLink), the domain's hosts in use together (the hosts split evenly over the
        domains they fill, which the reader checks)."""
        if self.nvlink_domain_gpus is None:
            return self.gpus_per_node, self.nics_per_node
        hosts = self.nvlink_domain_gpus // self.gpus_per_node  # hosts a domain holds
        domains = -(-self.nodes // hosts)
        in_domain = self.nodes // domains  # hosts of one domain in use
        return in_domain * self.gpus_per_node, in_domain * self.nics_per_node


def _system_name(name: str) -> str:
    """*name* if the catalog has it (a system name or alias), else the name of the system it spells another way
    (``DGX-H100``: ``hardware.load``)."""
    try:
        system = hardware.load(name)
    except hardware.HardwareSpecError as exc:
        raise ValueError(str(exc)) from None
    return name if name == system.name or name in system.aliases else system.name


def _dtype_name(text: str) -> str:
    dtype = text.strip()
    if dtype:
        nvls_reduces(dtype)
    return dtype


def load_measurements(path: str | os.PathLike[str] = DEFAULT_DATA) -> Measurements:
    """Read a measurement CSV (columns: see the module docstring), each cell through the input gate.

    ``n_gpus`` is a whole number from 2 to 2**30 and ``bytes`` one from 1 to 2**53 (ASCII digits only),
    ``time_us`` a finite number > 0; ``system``, ``op`` and ``dtype`` are names the catalog and NCCL know.

    Raises:
        ValueError: one line naming the file, the line, the column and the value of the first bad cell;
            a file that cannot be read, is not UTF-8 text or lacks a column: one line naming ``--data``.
    """
    path = Path(path)
    header = _header(path)
    if {"ranks", "nodes"} <= header and "n_gpus" not in header:
        return _load_multinode(path)
    table = read_table(path, _REQUIRED)
    return _measurements(table, path, "n_gpus")


def _measurements(table: Table, path: Path, ranks_column: str, clusters: Clusters | None = None) -> Measurements:
    """The columns every table has (system, op, dtype, the ranks, bytes, time_us), each cell through the gate."""
    systems = table.choice("system", _system_name)
    ops = table.choice("op", _op)
    dtypes = table.choice("dtype", _dtype_name) if table.has("dtype") else [""] * len(table)
    ranks = table.whole(ranks_column, minimum=2, maximum=DEVICES_MAX)
    msg_bytes = table.whole("bytes", minimum=1, maximum=VALUE_MAX)
    time_us = table.real("time_us")
    return Measurements(system=np.asarray(systems), op=np.asarray(ops), ranks=ranks.astype(float),
                        msg_bytes=msg_bytes.astype(float), time_s=time_us * 1e-6, path=str(path),
                        dtype=np.asarray(dtypes, dtype=object), rows_read=len(table), clusters=clusters)


def _header(path: Path) -> set[str]:
    """The column names of *path*'s first line (empty where it cannot be read: ``read_table`` says why)."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            return {name.strip() for name in next(csv.reader([f.readline()]), [])}
    except (OSError, UnicodeError, csv.Error):
        return set()


_MULTINODE_REQUIRED = ("system", "op", "ranks", "nodes", "gpus_per_node", "nics_per_node", "transport", "bytes",
                       "time_us")


def _transport_name(text: str) -> str:
    name = text.strip().lower()
    if name not in hardware.TRANSPORTS:
        raise ValueError(f"transport: unknown transport {text!r}; known: {', '.join(hardware.TRANSPORTS)}")
    return name


def _gbps(text: str) -> float:
    return parse_real("nic_gbps", text) if text.strip() else float("nan")


def _load_multinode(path: Path) -> Measurements:
    """A multi-node table (module docstring): each cell through the gate, the placement checked row by row."""
    table = read_table(path, _MULTINODE_REQUIRED)
    nodes = table.whole("nodes", minimum=1, maximum=DEVICES_MAX)
    per_node = table.whole("gpus_per_node", minimum=1, maximum=DEVICES_MAX)
    nics = table.whole("nics_per_node", minimum=1, maximum=DEVICES_MAX)
    transports = table.choice("transport", _transport_name)
    gbps = np.array(table.choice("nic_gbps", _gbps) if table.has("nic_gbps") else [float("nan")] * len(table))
    envs = table.choice("nccl_env", lambda text: (nccl_settings(text), text)[1]) if table.has("nccl_env") \
        else [""] * len(table)
    systems = table.choice("system", _system_name)
    loaded = {name: hardware.load(name) for name in set(systems)}
    node_size, hosts = (np.array([getattr(loaded[name], key) for name in systems], dtype=np.int64)
                        for key in ("devices_per_node", "hosts_per_node"))
    # The catalog node's domain: a row counting hosts of a domain that spans several (NVL72 trays) holds its hosts'
    # GPUs times the hosts; a row counting larger units (a rack as a node) is its own domain.
    domain = np.where(per_node <= node_size // hosts, per_node * hosts, per_node)
    if table.has("nvlink_domain_gpus"):
        stated = np.array(table.convert("nvlink_domain_gpus", lambda field, text: parse_whole(
            field, text, minimum=1, maximum=DEVICES_MAX) if text.strip() else 0), dtype=np.int64)
        domain = np.where(stated > 0, stated, domain)
    versions = table.choice("nccl_version", lambda text: (nccl_version_algorithms(text), text.strip())[1]) \
        if table.has("nccl_version") else None
    clusters = Clusters(nodes=nodes, gpus_per_node=per_node, transport=np.asarray(transports, dtype=object),
                        nics_per_node=nics, nic_gbps=gbps, nccl_env=np.asarray(envs, dtype=object),
                        nvlink_domain_gpus=None if np.array_equal(domain, per_node) else domain,
                        nccl_version=None if versions is None else np.asarray(versions, dtype=object))
    data = _measurements(table, path, "ranks", clusters)
    spanned = np.maximum(domain // np.maximum(per_node, 1), 1)  # hosts of one domain
    uneven = (nodes > spanned) & (nodes % spanned != 0)
    # Checked column-wise; the first bad row (in file order) is the one named.
    bad = np.flatnonzero((data.ranks != nodes * per_node) | (per_node > node_size) | (domain < per_node)
                         | (domain % per_node != 0) | (domain > node_size) | uneven)
    if len(bad):
        i = int(bad[0])
        where = f"{path}: line {table.line(i)}"
        if data.ranks[i] != nodes[i] * per_node[i]:
            raise ValueError(f"{where}: ranks {int(data.ranks[i])} is not nodes {nodes[i]} x gpus_per_node "
                             f"{per_node[i]}")
        if per_node[i] > node_size[i]:
            raise ValueError(f"{where}: gpus_per_node {per_node[i]} is more than a {systems[i]} node holds "
                             f"({node_size[i]})")
        if domain[i] > node_size[i]:
            raise ValueError(f"{where}: nvlink_domain_gpus {domain[i]} is more than a {systems[i]} NVLink domain "
                             f"holds ({node_size[i]})")
        if domain[i] < per_node[i] or domain[i] % per_node[i]:
            raise ValueError(f"{where}: nvlink_domain_gpus {domain[i]} is not a whole number of hosts of "
                             f"gpus_per_node {per_node[i]}")
        raise ValueError(f"{where}: nodes {nodes[i]} do not fill NVLink domains of {spanned[i]} hosts evenly")
    return data


@dataclass(frozen=True)
class Group:
    """Relative errors |predicted − measured| / measured of one (system, collective, band); on a multi-node table
    also by transport and nodes."""

    system: str
    op: str
    band: str
    n: int
    median_rel_err: float
    worst_rel_err: float
    transport: str = ""
    nodes: int = 0


def _codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct *values* (sorted) and each row's index among them."""
    distinct, codes = np.unique(values, return_inverse=True)
    return distinct, codes.ravel()


def _runs(key: np.ndarray) -> Iterable[np.ndarray]:
    """The rows of each distinct *key* (ascending key; each run's rows in file order), from one stable sort."""
    order = np.argsort(key, kind="stable")
    ranked = key[order]
    cuts = np.flatnonzero(ranked[1:] != ranked[:-1]) + 1
    return np.split(order, cuts) if len(order) else []


def predicted_rows(data: Measurements, nodes: Mapping[str, hardware.System] | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The predicted seconds and the chosen candidate of every row, per (system, op, dtype) over its rows at once.

    *nodes*: systems at hand to price rows naming them with, instead of the catalog's (a calibration's trials).

    Rows are grouped by one sort of their (system, op, dtype) codes, so the time is linear in the rows.
    """
    out = np.empty_like(data.time_s)
    algorithm = np.empty(data.time_s.shape, dtype=object)
    systems, system = _codes(data.system)
    ops, op = _codes(data.op)
    dtypes, dtype = _codes(data.dtypes().astype(str))
    settings, setting = _codes(data.settings().astype(str))
    loaded: dict[int, hardware.System] = {}
    key = ((system * len(settings) + setting) * len(ops) + op) * len(dtypes) + dtype
    for rows in _runs(key):
        first = rows[0]
        options: dict[str, object] = {}
        if data.clusters is not None:
            c = data.clusters
            name = str(systems[system[first]])
            per_node, nics = c.nccl_nodes()
            args = (str(c.transport[first]), int(nics[first]), float(c.nic_gbps[first]))
            sys_ = cluster_of(nodes[name], *args) if nodes and name in nodes else cluster(name, *args)
            options["algorithms"], options["protocols"] = nccl_settings(str(c.nccl_env[first]))
            options["nccl_version"] = str(c.nccl_version[first]) if c.nccl_version is not None else ""
            options["gpus_per_node"] = int(per_node[first])
            if c.nvlink_domain_gpus is not None and sys_.hosts_per_node > 1:
                # An NVLink domain of several hosts (NVL72 trays): its hosts in use together, their NICs as the
                # table counts them; a node of one host drives its ranks' NICs (predict, nics_in_use).
                options["nics"] = int(nics[first])
        else:
            if system[first] not in loaded:
                name = str(systems[system[first]])
                loaded[system[first]] = nodes[name] if nodes and name in nodes else hardware.load(name)
            sys_ = loaded[system[first]]
        p = predict(sys_, str(ops[op[first]]), data.ranks[rows], data.msg_bytes[rows],
                    str(dtypes[dtype[first]]) or None, **options)  # type: ignore[arg-type]
        out[rows] = p.time_s
        algorithm[rows] = p.algorithm
    return out, algorithm


def predicted_times(data: Measurements) -> np.ndarray:
    """The predicted seconds of every row (its data type decides NVLS for reductions, ``predict``)."""
    return predicted_rows(data)[0]


def validate(data: Measurements, predicted: np.ndarray | None = None, *, bands: bool = True) -> list[Group]:
    """Per (system, op, band): count, median and worst relative error of the predicted time; with *bands* false, per
    (system, op) over every size (band ``"all"``: the groups docs/time.md's multi-node bounds are stated on).

    *predicted*: the rows' predicted seconds when already at hand (:func:`predicted_times`), else computed.
    """
    error = np.abs((predicted_times(data) if predicted is None else predicted) - data.time_s) / data.time_s
    systems, system = _codes(data.system)
    ops, op = _codes(data.op)
    # "small" sorts before "large", as printed; without bands every row is in one.
    large = (data.msg_bytes >= BAND_EDGE_BYTES).astype(np.int64) if bands else np.zeros(error.shape, np.int64)
    c = data.clusters
    transports, transport = _codes(c.transport.astype(str) if c is not None else np.full(error.shape, ""))
    nodes = c.nodes if c is not None else np.zeros(error.shape, dtype=np.int64)
    counts, node = _codes(nodes)
    key = (((system * len(transports) + transport) * len(counts) + node) * len(ops) + op) * 2 + large
    groups: list[Group] = []
    for rows in _runs(key):
        first = rows[0]
        band = ("large" if large[first] else "small") if bands else "all"
        groups.append(Group(str(systems[system[first]]), str(ops[op[first]]), band,
                            len(rows), float(np.median(error[rows])), float(error[rows].max()),
                            str(transports[transport[first]]), int(counts[node[first]])))
    return groups


def overall(data: Measurements, predicted: np.ndarray) -> dict[str, float]:
    """Every row's relative error at once: ``{"n", "median_rel_err"}``."""
    error = np.abs(predicted - data.time_s) / data.time_s
    return {"n": int(error.size), "median_rel_err": round(float(np.median(error)), 6) if error.size else 0.0}


def groups_json(groups: Iterable[Group], total: dict[str, float] | None = None,
                op_groups: Iterable[Group] | None = None) -> str:
    """The one-line JSON object ``{"groups": [...]}`` that ``symcost validate collectives`` ends with; groups of a
    multi-node table carry their ``transport`` and ``nodes``, *total* (:func:`overall`) is its ``"overall"`` and
    *op_groups* (:func:`validate` without bands) its ``"op_groups"``."""
    def record(g: Group) -> dict[str, object]:
        return {"system": g.system, **({"transport": g.transport, "nodes": g.nodes} if g.nodes else {}),
                "op": g.op, "band": g.band, "n": g.n, "median_rel_err": round(g.median_rel_err, 6),
                "worst_rel_err": round(g.worst_rel_err, 6)}

    out: dict[str, object] = {"groups": [record(g) for g in groups]}
    if op_groups is not None:
        out["op_groups"] = [record(g) for g in op_groups]
    if total is not None:
        out["overall"] = total
    return json.dumps(out)


@dataclass(frozen=True)
class Curve:
    """Measured against predicted time of one (system, collective, ranks) sweep, size by size.

    Attributes:
        msg_bytes: nccl-tests' sizes S, ascending.
        measured_s: the median measured seconds at each size (over dtypes, versions and repeats).
        predicted_s: the median predicted seconds at each size, over the same rows (each row predicted with
            its data type).
        algorithm: the candidate NCCL's tuner would pick at each size ("ring_ll", "nvls_simple", …); where the
            rows' data types lead to different picks, all of them joined by "/".
        cluster: on a multi-node table, the rows' network and NCCL settings (``Measurements.settings``), else "".
    """

    system: str
    op: str
    ranks: int
    msg_bytes: np.ndarray
    measured_s: np.ndarray
    predicted_s: np.ndarray
    algorithm: np.ndarray
    cluster: str = ""

    def busbw_bytes_per_s(self, which: str = "measured") -> np.ndarray:
        """nccl-tests' bus bandwidth of the measured (or ``"predicted"``) times, bytes/s."""
        n = self.ranks
        factor = 2 * (n - 1) / n if self.op == "all_reduce" else (n - 1) / n if self.op in (
            "all_gather", "reduce_scatter", "all_to_all") else 1.0
        time = self.measured_s if which == "measured" else self.predicted_s
        return factor * self.msg_bytes / time


def _group_starts(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The order that sorts rows by *keys* (first key slowest) and where each run of equal keys starts in it."""
    order = np.lexsort(keys[::-1])
    change = np.zeros(len(order), dtype=bool)
    change[:1] = True
    for key in keys:
        ranked = key[order]
        change[1:] |= ranked[1:] != ranked[:-1]
    return order, np.flatnonzero(change)


def _medians(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """``np.median`` of each run ``values[starts[i]:starts[i+1]]`` of a group-sorted array, in one pass.

    Each run is sorted by value (one lexsort); the median is its middle value, or the mean of its two middle
    values computed as ``np.median`` does (their sum halved), so the numbers are the same to the bit.
    """
    group = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(values))))
    ranked = values[np.lexsort((values, group))]
    sizes = np.diff(np.append(starts, len(values)))
    low, high = ranked[starts + (sizes - 1) // 2], ranked[starts + sizes // 2]
    return np.where(sizes % 2 == 1, high, (low + high) / 2)


def curves(data: Measurements, rows: tuple[np.ndarray, np.ndarray] | None = None) -> list[Curve]:
    """Every (system, op, ranks) sweep of *data* (and cluster, on a multi-node table): median measured and predicted
    time per size.

    *rows*: :func:`predicted_rows` of *data* when already at hand, else computed.

    Rows are sorted once by (system, op, ranks, size), so the time is linear in the rows (and a sort).
    """
    out: list[Curve] = []
    predicted, picked = predicted_rows(data) if rows is None else rows
    if not len(data.time_s):
        return out
    system_codes = np.unique(data.system, return_inverse=True)[1].ravel()
    op_codes = np.unique(data.op, return_inverse=True)[1].ravel()
    settings, setting_codes = _codes(data.settings().astype(str))
    order, starts = _group_starts(system_codes, setting_codes, op_codes, data.ranks, data.msg_bytes)
    measured = _medians(data.time_s[order], starts)
    median = _medians(predicted[order], starts)
    sizes = data.msg_bytes[order][starts]
    ends = np.append(starts[1:], len(order))
    labels = np.array(["/".join(sorted(set(picked[order[a:b]]))) for a, b in zip(starts, ends)])
    # A sweep is a run of (system, op, ranks); its sizes are the runs within it, already ascending.
    first = order[starts]
    sweep = np.ones(len(starts), dtype=bool)
    sweep[1:] = ((system_codes[first][1:] != system_codes[first][:-1]) | (op_codes[first][1:] != op_codes[first][:-1])
                 | (data.ranks[first][1:] != data.ranks[first][:-1])
                 | (setting_codes[first][1:] != setting_codes[first][:-1]))
    bounds = np.append(np.flatnonzero(sweep), len(starts))
    for a, b in zip(bounds[:-1], bounds[1:]):
        row = first[a]
        out.append(Curve(str(data.system[row]), str(data.op[row]), int(data.ranks[row]), sizes[a:b], measured[a:b],
                         median[a:b], labels[a:b], str(settings[setting_codes[row]])))
    return out
