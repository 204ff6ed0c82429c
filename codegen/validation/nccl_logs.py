"""Reading raw nccl-tests output: the text ``all_reduce_perf`` and friends print (``symcost validate --logs``).

A log may hold several runs (sweeps). What is read, and from where (NVIDIA/nccl-tests ``src/util.cu``):

* the table: ``size count type redop [root] time algbw busbw #wrong time algbw busbw #wrong`` (the first
  ``time`` is out-of-place, the second in-place; older versions print no ``root`` column and an ``error``
  column instead of ``#wrong``; ``N/A`` where validation is off). Columns are placed by the header line when
  there is one, else by the row itself (a ``root`` is a whole number below 10,000, a time of that size is not
  printed without a fraction);
* the op: the binary's name on the launcher line (``all_reduce_perf``, ``all_gather_perf_mpi``, …) or on
  ``# Collective test starting:``; else the table's shape (``redop``, ``root``, ``count`` × type size against
  ``size``, busbw/algbw), else the caller's *op*;
* ranks: ``# Rank N … on HOST device …`` lines (the largest N + 1: logs are often abridged), the launcher's
  ``-np``/``-n`` (or ``-H`` slots) × ``nThread`` × ``nGpus``, and the table itself (size / (count × type
  size) for all-gather, reduce-scatter and all-to-all, busbw/algbw for those and all-reduce); sources that
  disagree are an error;
* nodes: distinct hosts on the rank lines (when there is a line for every rank), ``mpirun -H h1:8,h2:8``,
  ``mpirun -N``/``-npernode``/``--map-by ppr:N:node`` or ``srun -N``; else the caller's *gpus_per_node*; else an
  error saying to pass it;
* ``NCCL version X``, the GPU named on the rank lines, and ``NCCL_*`` variables: ``-x NAME=VALUE`` (or a
  ``NAME=VALUE`` word) on the launcher line applies to that run, ``[export] NAME=VALUE`` lines to every
  later run.

A new sweep starts where a run's preamble (a launcher line, ``# nThread``, ``# Using devices``, rank lines,
``NCCL version``, a table header) follows rows, or rows follow ``# Avg bus bandwidth``. Prefixes of
``mpirun --tag-output`` (``[1,0]<stdout>:``), ``srun -l`` (``0: ``) and Markdown quotes are removed; a line
ending in ``\\`` continues on the next. Every other line (NCCL INFO, annotations starting with ``##``,
prose) is skipped. Every number passes the input gate (``codegen.runtime.inputs``): a bad one is one
:class:`InputError` naming the file, the line and the value.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple

from ..runtime.inputs import DEVICES_MAX, VALUE_MAX, InputError, instance, one_of, parse_real, parse_whole, whole
import numpy as np

import hardware

from .clusters import nccl_settings
from .collectives import OPS, Clusters, Measurements

__all__ = ["LogRow", "measurements", "parse_log", "read_logs"]


@dataclass(frozen=True)
class LogRow:
    """One size row of an nccl-tests sweep, with what the log says about its run.

    Attributes:
        op: the time model's name (``codegen.validation.collectives.OPS``): all_reduce, all_gather, ….
        dtype: nccl-tests' type column (``float``, ``half``, ``bfloat16``, …).
        bytes: nccl-tests' size column.
        time_us: the out-of-place time (µs); ``in_place_time_us`` the in-place one, ``None`` if not printed.
        nodes, gpus_per_node, ranks: the run's placement (``ranks == nodes * gpus_per_node``).
        nccl_version: as ``NCCL version X`` prints it (``2.26.2``), ``""`` if not printed.
        nccl_env: the run's ``NCCL_*`` settings, ``NAME=VALUE`` sorted by name and joined by ``;``.
        gpu: the GPU named on the ``# Rank`` lines, ``""`` if none.
        hosts: the host names of the rank lines (or of ``mpirun -H``), in order.
        path, line: the file and the 1-based line of this row; ``sweep`` is ``<file stem>#<k>``.
        wrong: the larger of the out-of-place and in-place ``#wrong`` counts (elements the collective got wrong);
            ``None`` where not printed (``N/A``, old ``error`` column).
    """

    op: str
    dtype: str
    bytes: int
    time_us: float
    in_place_time_us: float | None
    nodes: int
    gpus_per_node: int
    ranks: int
    nccl_version: str
    nccl_env: str
    gpu: str
    hosts: tuple[str, ...]
    path: str
    line: int
    sweep: str
    wrong: int | None


#: nccl-tests' type names (``src/common.cu`` test_typenames, and older spellings) → bytes per element.
_TYPE_BYTES = {"int8": 1, "uint8": 1, "char": 1, "f8e4m3": 1, "f8e5m2": 1, "half": 2, "bfloat16": 2, "int32": 4,
              "uint32": 4, "int": 4, "float": 4, "int64": 8, "uint64": 8, "double": 8}
_REDOPS = frozenset({"sum", "prod", "max", "min", "avg", "mulsum", "premulsum", "none"})
_REDUCING, _GATHERING = ("all_reduce", "reduce_scatter", "reduce"), ("all_gather", "all_to_all", "broadcast")
#: busbw/algbw as nccl-tests computes it (``*GetBw`` in its src/*.cu) for *n* ranks: (c·(n−1)/n, c).
_BUS_FACTOR = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0}

_PREFIX = re.compile(r"^\s*(?:\[\d+,\d+\]<std(?:out|err)>:|\d+:\s|>\s?)?")
_RANK = re.compile(r"#?\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s*(.*)")
_NTHREAD = re.compile(r"#?\s*nThread\s+(\S+)\s+nGpus\s+(\S+)")
_VERSION = re.compile(r"NCCL version (\d+(?:\.\d+)+)")
_ENV = re.compile(r"(?:export\s+)?(NCCL_[A-Za-z0-9_]+)=(.*)")
_BINARY = re.compile(r"(?:^|/)([a-z0-9]+(?:_[a-z0-9]+)*?)_perf(?:_mpi)?")
_LAUNCHERS = frozenset({"mpirun", "mpiexec", "orterun", "srun"})
_PREAMBLE = re.compile(r"#?\s*(?:Using devices|nccl-tests version|Collective test starting)")
_FOOTER = re.compile(r"#?\s*(?:Avg bus bandwidth|Out of bounds values|Collective test concluded)")
_WHOLE = re.compile(r"[0-9]+")
_ROOT = re.compile(r"-?[0-9]{1,4}")  # nccl-tests prints a root rank or -1; a time without a fraction is >= 10,000


class _Cells(NamedTuple):
    """One table row as read; a bandwidth is (value, half the unit of its last printed digit)."""

    line: int
    dtype: str
    redop: str
    root: int
    size: int
    count: int
    time: float
    algbw: tuple[float, float]
    busbw: tuple[float, float]
    in_place: float | None
    wrong: int | None


@dataclass
class _Sweep:
    """What one run's text says, gathered line by line."""

    start: int
    launcher: str = ""
    processes: int | None = None  # -np (None: not given, or a shell variable the log does not expand)
    per_node: tuple[int, str] | None = None  # (-N value, the option's name)
    srun_nodes: int | None = None
    host_slots: list[tuple[str, int | None]] = field(default_factory=list)
    threads: int = 1
    gpus: int = 1
    binary: str = ""
    run_env: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    ranks: dict[int, str] = field(default_factory=dict)
    gpu_names: dict[str, None] = field(default_factory=dict)
    version: str = ""
    header: list[str] | None = None
    rows: list[_Cells] = field(default_factory=list)
    closed: bool = False


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based line, content) of *text* without launcher prefixes, continued lines joined, ``##`` lines left out."""
    pending, first = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        if raw.lstrip().startswith("##"):
            continue
        content = raw[_PREFIX.match(raw).end():].strip()
        if content.endswith("\\"):
            pending, first = pending + content[:-1] + " ", first or number
            continue
        yield (first or number), pending + content
        pending, first = "", 0
    if pending:
        yield first, pending


def _count(where: str, option: str, text: str) -> int | None:
    """A launcher's whole-number option; ``None`` for a word (a shell variable such as ``$DSTACK_GPUS_NUM``, or prose's
    ``-np N``) the log does not expand."""
    return parse_whole(f"{where}, {option}", text, maximum=DEVICES_MAX) if re.match(r"[+-]?[0-9]", text) else None


def _command(sweep: _Sweep, words: list[str], where: str) -> None:
    """Read a launcher / nccl-tests command line into *sweep* (options nccl-tests does not print are skipped)."""
    i, binary_at = 0, len(words)
    while i < len(words):
        word = words[i]
        found = _BINARY.search(word) if not word.startswith("-") and "=" not in word else None
        if os.path.basename(word) in _LAUNCHERS and not sweep.launcher and i < binary_at:
            sweep.launcher = os.path.basename(word)
        elif found and found.end() == len(word) and binary_at == len(words):
            sweep.binary, binary_at = found.group(1), i
        if _ENV.fullmatch(word):  # NAME=VALUE before the command (or after env)
            _setting(sweep.run_env, word)
            i += 1
            continue
        option, _, value = word.partition("=") if word.startswith("--") else (word, "", "")
        step = 1 if value else 2
        value = value or (words[i + 1] if i + 1 < len(words) else "")
        if not value:
            pass
        elif i > binary_at:  # nccl-tests' own options
            if option in ("-t", "--nthreads"):
                sweep.threads = _count(where, option, value) or sweep.threads
            elif option in ("-g", "--ngpus"):
                sweep.gpus = _count(where, option, value) or sweep.gpus
            else:
                step = 1
        elif option in ("-x", "-genv"):
            _setting(sweep.run_env, value)
        elif option in ("-np", "--np", "-n", "--n", "--ntasks"):
            sweep.processes = _count(where, option, value)
        elif option in ("-N", "--nodes") and sweep.launcher == "srun":
            sweep.srun_nodes = _count(where, option, value)
        elif option in ("-N", "-npernode", "--npernode", "-ppn", "--ppn", "--ntasks-per-node", "--map-by", "-map-by"):
            number = _count(where, option, value.split(":")[1] if re.fullmatch(r"ppr:[^:]+:node", value) else value)
            sweep.per_node = (number, option) if number else sweep.per_node
        elif option in ("-H", "--host", "-host", "-hosts", "--hosts"):
            for entry in value.split(","):
                host, _, slots = entry.partition(":")
                sweep.host_slots.append((host, _count(where, option, slots) if slots else None))
        else:
            step = 1
        i += step


def _setting(env: dict[str, str], text: str) -> None:
    """Record ``NCCL_NAME=VALUE`` of *text* (quotes removed) in *env*; other variables and ``$`` values are not
    facts of the log."""
    found = _ENV.fullmatch(text.strip())
    if not found:
        return
    try:
        value = " ".join(shlex.split(found.group(2)))
    except ValueError:
        value = found.group(2).strip()
    if "$" not in value:
        env[found.group(1)] = value


def _row(sweep: _Sweep, words: list[str], number: int, where: str) -> _Cells:
    """The cells of a table row at line *number*, each number through the gate."""
    if sweep.header is not None:
        times = [k for k, word in enumerate(sweep.header) if word in ("time", "cputime")]
        at, in_place = times[0], (times[1] if len(times) > 1 else None)
        after = sweep.header[at + 3] if at + 3 < len(sweep.header) else ""
        has_root = "root" in sweep.header[:at]
    else:
        has_root = bool(_ROOT.fullmatch(words[4]))
        at = 5 if has_root else 4
        in_place, after = at + 4, "#wrong" if _WHOLE.fullmatch(words[at + 3] if at + 3 < len(words) else "") else ""
    if len(words) < max(at, 4 + has_root) + 3:
        raise InputError(f"{where}: {len(words)} columns, but the table needs size, count, type, redop"
                         f"{', root' if has_root else ''}, time, algbw and busbw")
    size = parse_whole(f"{where}, column size", words[0], maximum=VALUE_MAX)
    count = parse_whole(f"{where}, column count", words[1], minimum=0, maximum=VALUE_MAX)
    root = parse_whole(f"{where}, column root", words[4], minimum=-1, maximum=DEVICES_MAX) if has_root else -1
    time = parse_real(f"{where}, column time", words[at])
    algbw, busbw = (_bandwidth(f"{where}, column {name}", words[at + k]) for k, name in ((1, "algbw"), (2, "busbw")))
    inplace = (parse_real(f"{where}, column time (in-place)", words[in_place])
               if in_place is not None and in_place < len(words) else None)
    counts = [_wrong(words[k], where) for k in (at + 3, None if in_place is None else in_place + 3)
              if after == "#wrong" and k is not None and k < len(words) and words[k] != "N/A"]
    wrong = max(counts) if counts else None
    return _Cells(number, words[2], words[3].lower(), root, size, count, time, algbw, busbw, inplace, wrong)


def _wrong(text: str, where: str) -> int:
    """A ``#wrong`` cell: nccl-tests prints the count with %g (1e+06 is a million wrong elements)."""
    if _WHOLE.fullmatch(text):
        return parse_whole(f"{where}, column #wrong", text, minimum=0, maximum=VALUE_MAX)
    return whole(f"{where}, column #wrong", parse_real(f"{where}, column #wrong", text), minimum=0, floats=True)


def _bandwidth(field_name: str, text: str) -> tuple[float, float]:
    """A printed GB/s figure and half the unit of its last digit (nccl-tests rounds to 2, 1 or 0 decimals)."""
    value = 0.0 if re.fullmatch(r"0+\.?0*", text) else parse_real(field_name, text)
    mantissa, _, exponent = text.lower().partition("e")  # (%6.0e past 999,999.5)
    return value, 0.5 * 10.0 ** (int(exponent or 0) - len(mantissa.partition(".")[2]))


def _sweeps(text: str, path: str) -> list[_Sweep]:
    """The runs of *text* in order, each with its rows (runs without rows are dropped)."""
    sweeps: list[_Sweep] = []
    shell_env: dict[str, str] = {}
    current = _Sweep(0)

    def preamble(number: int) -> _Sweep:
        nonlocal current
        if current.rows or current.closed:
            if current.rows:
                sweeps.append(current)
            current = _Sweep(number)
        return current

    for number, content in _lines(text):
        where = f"{path} line {number}"
        words = content.split()
        if not words:
            continue
        if "NCCL INFO" in content or "NCCL WARN" in content:
            found = _VERSION.search(content)
            if found and not current.rows and not current.version:
                current.version = found.group(1)
            continue
        if _FOOTER.match(content):
            current.closed = True
        elif (found := _RANK.fullmatch(content)):
            sweep = preamble(number)
            sweep.ranks[int(found.group(1))] = found.group(2)
            if found.group(3).strip():
                sweep.gpu_names[found.group(3).strip()] = None
        elif (found := _NTHREAD.match(content)):
            sweep = preamble(number)
            sweep.threads = parse_whole(f"{where}, nThread", found.group(1), maximum=DEVICES_MAX)
            sweep.gpus = parse_whole(f"{where}, nGpus", found.group(2), maximum=DEVICES_MAX)
        elif (found := _VERSION.match(content.lstrip("# "))):
            preamble(number).version = found.group(1)
        elif {"size", "count", "type"} <= set(words) and ({"time", "cputime"} & set(words)):
            preamble(number).header = content.lstrip("#").split()
        elif _PREAMBLE.match(content):
            found = _BINARY.search(words[-1]) if "starting" in content else None
            sweep = preamble(number)
            if found and not sweep.binary:
                sweep.binary = found.group(1)
        elif _ENV.fullmatch(content):
            _setting(shell_env, content)
        elif not content.startswith("#") and len(words) >= 7 and words[3].lower() in _REDOPS:
            if current.closed:
                preamble(number)
            if not current.rows:
                current.start, current.env = number, {**shell_env, **current.run_env}
            current.rows.append(_row(current, words, number, where))
        elif not content.startswith("#"):
            try:
                tokens = shlex.split(content)
            except ValueError:
                tokens = words
            names = [os.path.basename(w) for w in tokens if "=" not in w]
            if any(n in _LAUNCHERS for n in names) or any(_BINARY.fullmatch(n) for n in names):
                _command(preamble(number), tokens, where)
    if current.rows:
        sweeps.append(current)
    return sweeps


def _table_ranks(op: str, rows: list[tuple]) -> int | None:
    """The ranks nccl-tests' table implies: size = count × type size × ranks for the gathering ops, else the one
    whole *n* whose busbw/algbw factor fits every row's printed (rounded) figures; ``None`` where it cannot tell."""
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        last = rows[-1]
        per_rank = last.count * _TYPE_BYTES.get(last.dtype, 0)
        if per_rank and last.size % per_rank == 0:
            return last.size // per_rank
    if op not in _BUS_FACTOR:
        return None
    c, low, high = _BUS_FACTOR[op], 1.0, math.inf
    for (algbw, da), (busbw, db) in ((row.algbw, row.busbw) for row in rows):
        if algbw - da <= 0:
            continue
        r_low, r_high = max(busbw - db, 0.0) / (algbw + da), (busbw + db) / (algbw - da)
        low = max(low, c / (c - r_low) if r_low < c else math.inf)
        high = min(high, c / (c - r_high) if r_high < c else math.inf)
    if not low <= high < math.inf:
        return None
    candidates = range(max(2, math.ceil(low - 1e-9)), math.floor(high + 1e-9) + 1)
    return candidates[0] if len(candidates) == 1 else None


def _op(sweep: _Sweep, where: str, forced: str | None) -> str:
    """The sweep's op: the binary's name, else the table's shape, else *forced*; checked against the redop column."""
    first = sweep.rows[0]
    redop, root = first.redop, first.root
    if sweep.binary:
        if sweep.binary not in OPS:
            raise InputError(f"{where}: {sweep.binary}_perf is not a collective the time model prices "
                             f"(it prices {', '.join(sorted(set(OPS.values())))})")
        op = OPS[sweep.binary]
    elif redop != "none" and root >= 0:
        op = "reduce"
    elif redop != "none" and first.dtype in _TYPE_BYTES and first.size > first.count * _TYPE_BYTES[first.dtype]:
        op = "reduce_scatter"
    elif redop == "none" and root >= 0:
        op = "broadcast"
    elif redop != "none" and any(r.busbw[0] - r.busbw[1] > r.algbw[0] + r.algbw[1] for r in sweep.rows):
        op = "all_reduce"  # busbw above algbw: 2(n-1)/n > 1; send_recv prints busbw = algbw
    elif forced is None:
        could = "all_gather or all_to_all" if redop == "none" else "all_reduce (2 ranks) or send_recv"
        raise InputError(f"{where}: the log does not name its nccl-tests binary, and its table could be {could}; "
                         f"pass the op (--op)")
    else:
        op = forced
    if (op in _REDUCING and redop == "none") or (op in _GATHERING and redop != "none"):
        raise InputError(f"{where}: an {op} table with redop {redop!r}: the log's rows are not of that op")
    return op


def _placement(sweep: _Sweep, op: str, where: str, gpus_per_node: int | None) -> tuple[int, int]:
    """(ranks, nodes) from every source the text offers, which must agree; *gpus_per_node* only where none says."""
    per_process, slots = sweep.threads * sweep.gpus, [n for _, n in sweep.host_slots]
    processes = sweep.processes or (sum(slots) if slots and all(slots) else None)  # type: ignore[arg-type]
    threads, launcher = f"nThread {sweep.threads} × nGpus {sweep.gpus}", sweep.launcher or "the launcher"
    said = [(max(sweep.ranks) + 1, "the '# Rank' lines")] if sweep.ranks else []
    if processes:
        said.append((processes * per_process, f"{launcher}'s {processes} processes × {threads}"))
    if (table := _table_ranks(op, sweep.rows)) is not None:
        said.append((table, f"the {op} table (size/count, busbw/algbw)"))
    if not said:
        raise InputError(f"{where}: the log does not say how many ranks ran it (no '# Rank' lines, no -np on an "
                         f"mpirun line, and its table cannot tell)")
    ranks = _agree(said, "ranks", where)
    # The hosts count the nodes only where every rank's line is there: an abridged list (a README that keeps the
    # last line) names some of the hosts, not how many there are; nor is a host a node where one NVLink domain
    # spans several (GB200 NVL72's trays, counted in racks by --gpus-per-node 72), so it bounds nothing either.
    whole_list = len(sweep.ranks) == ranks
    nodes_said = [(len(set(sweep.ranks.values())), "the host names on the '# Rank' lines")] if whole_list else []
    if sweep.host_slots:
        nodes_said.append((len(dict.fromkeys(host for host, _ in sweep.host_slots)), f"{launcher} -H"))
    if sweep.srun_nodes:
        nodes_said.append((sweep.srun_nodes, "srun -N"))
    if sweep.per_node:
        per_node = sweep.per_node[0] * per_process
        if ranks % per_node:
            raise InputError(f"{where}: {ranks} ranks do not fill nodes of {per_node} ({sweep.per_node[1]} "
                             f"{sweep.per_node[0]} × {threads})")
        nodes_said.append((ranks // per_node, f"{sweep.per_node[1]} {sweep.per_node[0]}"))
    if nodes_said:
        nodes = _agree(nodes_said, "nodes", where)
    elif gpus_per_node is not None:
        nodes = max(1, ranks // gpus_per_node)
        if ranks > gpus_per_node and ranks % gpus_per_node:
            raise InputError(f"{where}: {ranks} ranks do not fill nodes of --gpus-per-node {gpus_per_node}")
    else:
        raise InputError(f"{where}: the log does not say how many nodes ran its {ranks} ranks (no '# Rank' line "
                         f"for every rank, no -H or -N on an mpirun line); pass --gpus-per-node")
    if ranks % nodes:
        raise InputError(f"{where}: {ranks} ranks cannot be spread evenly over {nodes} nodes")
    return ranks, nodes


def _agree(said: list[tuple[int, str]], what: str, where: str) -> int:
    if len({value for value, _ in said}) > 1:
        raise InputError(f"{where}: the log disagrees on its {what}: "
                         + ", ".join(f"{value} by {source}" for value, source in said))
    return said[0][0]


def parse_log(text: str, path: str = "<text>", gpus_per_node: int | None = None, op: str | None = None) -> list[LogRow]:
    """The size rows of every sweep of the nccl-tests output *text* (read as the file *path*).

    Args:
        text: nccl-tests output, with launcher lines, rank lines and anything else around it.
        path: the file's name for messages and :attr:`LogRow.path`; its stem names the sweeps.
        gpus_per_node: ranks per node where the log names neither hosts nor ``-H``/``-N`` (``--gpus-per-node``).
        op: the collective where the log names no binary and its table cannot tell (``all_gather``,
            ``all_to_all``, …; nccl-tests' names or the time model's).

    Raises:
        InputError: one line naming the file, the line and the value: a malformed row, a log without a table,
            an op the time model does not price, ranks or nodes the log does not state or contradicts.
    """
    gpn = None if gpus_per_node is None else whole("gpus_per_node", gpus_per_node, maximum=DEVICES_MAX)
    forced = None if op is None else OPS[one_of("op", op, OPS)]
    stem = Path(path).stem
    out: list[LogRow] = []
    sweeps = _sweeps(text, path)
    if not sweeps:
        raise InputError(f"{path}: no nccl-tests table (rows of size, count, type, redop, time, algbw, busbw)")
    for k, sweep in enumerate(sweeps, 1):
        where = f"{path} line {sweep.start} (sweep {k})"
        name = _op(sweep, where, forced)
        ranks, nodes = _placement(sweep, name, where, gpn)
        hosts = tuple(dict.fromkeys([sweep.ranks[i] for i in sorted(sweep.ranks)]
                                    or [host for host, _ in sweep.host_slots]))
        env = ";".join(f"{key}={value}" for key, value in sorted(sweep.env.items()))
        out += [LogRow(op=name, dtype=row.dtype, bytes=row.size, time_us=row.time, in_place_time_us=row.in_place,
                       nodes=nodes, gpus_per_node=ranks // nodes, ranks=ranks, nccl_version=sweep.version,
                       nccl_env=env, gpu=", ".join(sweep.gpu_names), hosts=hosts, path=path, line=row.line,
                       sweep=f"{stem}#{k}", wrong=row.wrong) for row in sweep.rows]
    return out


def read_logs(paths: Iterable[str | os.PathLike[str]], gpus_per_node: int | None = None,
              op: str | None = None, argument: str = "--logs") -> list[LogRow]:
    """:func:`parse_log` of each file of *paths* (UTF-8 text), their rows in order; *argument* is how an error
    names where the paths came from (``--logs`` of ``validate collectives``, ``LOG`` of ``calibrate``).

    Raises:
        InputError: naming the file that cannot be read or is not UTF-8 text, or as :func:`parse_log` does.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    rows: list[LogRow] = []
    for path in paths:
        instance("paths", path, (str, os.PathLike), "a file name")
        try:
            text = Path(path).read_bytes().decode("utf-8-sig")
        except OSError as exc:
            raise InputError(f"{argument} {path}: cannot read: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise InputError(f"{argument} {path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
                             f"{exc.start})") from None
        rows += parse_log(text, str(path), gpus_per_node, op)
    return rows


def measurements(rows: list[LogRow], system: str) -> Measurements:
    """*rows* as a multi-node table (``codegen.validation.collectives``) of the catalog system *system*: every row's
    placement and NCCL settings its own, the network *system*'s (its transport, NICs, NIC speed, stated plugin
    latency and efficiency).

    Raises:
        hardware.HardwareSpecError: *system* is not a catalog system (or an alias) with GPU facts.
        InputError: a row's ``nccl_env`` sets NCCL_ALGO / NCCL_PROTO to a value NCCL does not know, or a row ran
            more GPUs per node than a node of *system* holds (naming the file and line).
    """
    node = hardware.load(system)
    if node.gpu is None:
        raise hardware.HardwareSpecError(f"--system {system}: system {node.name!r} has no GPU facts for the time model")
    # A host is a node but where the system's NVLink domain spans hosts (GB200 NVL72: 18 trays of 4 GPUs), whose
    # hosts NCCL joins into one node (multi-node NVLink): `hosts` of them share a domain. A run counted in larger
    # units (--gpus-per-node 72: a rack) is its own domain.
    hosts = node.hosts_per_node
    per_host = node.devices_per_node // hosts
    for row in rows:
        if row.gpus_per_node > node.devices_per_node:
            raise InputError(f"{row.path} line {row.line}: {row.gpus_per_node} GPUs per node, more than a {system} "
                             f"node holds ({node.devices_per_node})")
        try:
            nccl_settings(row.nccl_env)
        except ValueError as exc:
            raise InputError(f"{row.path} line {row.line}: {exc}") from None
    n = len(rows)
    gbps = node.nic_bandwidth_bytes_per_s * 8 / 1e9
    clusters = Clusters(nodes=np.array([r.nodes for r in rows], dtype=np.int64),
                        gpus_per_node=np.array([r.gpus_per_node for r in rows], dtype=np.int64),
                        transport=np.full(n, node.network.transport or "ib", dtype=object),
                        nics_per_node=np.array([max(1, node.nics_per_node * r.gpus_per_node // node.devices_per_node)
                                                if hosts > 1 else node.nics_per_node for r in rows], dtype=np.int64),
                        nic_gbps=np.full(n, gbps), nccl_env=np.array([r.nccl_env for r in rows], dtype=object),
                        nccl_version=np.array([r.nccl_version for r in rows], dtype=object),
                        nvlink_domain_gpus=np.array([r.gpus_per_node * (hosts if r.gpus_per_node <= per_host else 1)
                                                     for r in rows], dtype=np.int64) if hosts > 1 else None)
    return Measurements(system=np.full(n, system, dtype=object), op=np.array([r.op for r in rows], dtype=object),
                        ranks=np.array([r.ranks for r in rows], dtype=float),
                        msg_bytes=np.array([r.bytes for r in rows], dtype=float),
                        time_s=np.array([r.time_us for r in rows], dtype=float) * 1e-6,
                        path=", ".join(dict.fromkeys(r.path for r in rows)),
                        dtype=np.array([r.dtype for r in rows], dtype=object), rows_read=n, clusters=clusters)
