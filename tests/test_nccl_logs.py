"""Reading raw nccl-tests output (codegen/validation/nccl_logs.py): real published logs and small made-up ones.

The real logs (tests/data/nccl_logs/, provenance in tests/data/README.md) are compared with the rows transcribed
from them (the shipped codegen/validation/data/nccl_multinode.csv) and with the facts their sources state (the ``##META`` annotations,
which the reader itself skips).
"""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen.runtime.inputs import InputError
from codegen.validation.csvfile import DATA_DIR
from codegen.validation.nccl_logs import LogRow, parse_log, read_logs

DATA = Path(__file__).resolve().parent / "data"
MULTINODE = DATA_DIR / "nccl_multinode.csv"
LOGS = sorted((DATA / "nccl_logs").glob("*.txt"))
#: Sweeps at more ranks than the shared logs hold (GB200 NVL72 racks), excerpts with one '# Rank' line each.
LARGE = sorted((DATA / "nccl_logs_large").glob("*.txt"))
SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "measurements"

#: Logs whose text names no nccl-tests binary, and whose all-gather table an all-to-all would print alike.
OP_NOT_IN_TEXT = {"dstack_gcp_a3high_h100_2n_ag_tcpx": "all_gather", "dstack_gcp_a3mega_h100_2n_ag_tcpxo": "all_gather"}
#: Sweeps whose text names neither the host of every rank (``# Rank`` lines) nor ``mpirun -H``/``-N`` with a number:
#: the reader needs ``gpus_per_node`` for them, and for no other.
NODES_NOT_IN_TEXT = {"awsdt_readme_p4de_2n_ar#1", "awsdt_readme_p5_2n_ar#1", "deepops_dgxa100_k8s_2n_ar_ring#1",
                     "deepops_dgxa100_slurm_4n_ar#1", "dstack_crusoe_a100_2n_ar#1",
                     "dstack_gcp_a3high_h100_2n_ag_tcpx#1", "dstack_gcp_a3mega_h100_2n_ag_tcpxo#1",
                     "nccltests_i309_h100_ib400#3", "skypilot_nebius_h100_2n_ar#1", "skypilot_nebius_h100_2n_ar#2",
                     "ocioke_b48_a100_2n_ar_nccl2293#1"}  # its rank lines: 4 of 16, first and last of each host


def _sweeps(rows: list[LogRow]) -> dict[str, list[LogRow]]:
    out: dict[str, list[LogRow]] = defaultdict(list)
    for row in rows:
        out[row.sweep].append(row)
    return dict(out)


def _read(path: Path, gpus_per_node: int | None = 8) -> list[LogRow]:
    return read_logs([path], gpus_per_node=gpus_per_node, op=OP_NOT_IN_TEXT.get(path.stem))


def _meta(path: Path) -> list[dict[str, str]]:
    """The ``##META`` annotations of each sweep of *path* (a ``##SWEEP`` line starts the next)."""
    blocks: list[dict[str, str]] = [{}]
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("##SWEEP"):
            blocks.append(dict(blocks[0]))
        elif line.startswith("##META "):
            key, _, value = line[7:].partition("=")
            blocks[-1][key] = value
    return blocks


def test_the_copies_are_the_16_shared_logs():
    assert len(LOGS) == 16
    if not SHARED.exists():
        pytest.skip("the shared measurements folder is not beside this clone")
    for path in LOGS:
        assert path.read_bytes() == (SHARED / "nccl_logs" / path.name).read_bytes(), path.name
    assert MULTINODE.read_bytes() == (SHARED / "nccl_multinode.csv").read_bytes()


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.stem)
def test_every_log_parses(path):
    rows = _read(path)
    assert rows
    for row in rows:
        assert row.path == str(path) and row.sweep.startswith(path.stem + "#")
        assert row.ranks == row.nodes * row.gpus_per_node and row.nodes >= 2
        assert row.time_us > 0 and row.bytes >= 1 and row.dtype == "float"
        assert row.wrong in (0, None)
        line = path.read_text(encoding="utf-8").splitlines()[row.line - 1]
        assert str(row.bytes) in line.split(), (row.line, line)  # the row's own line


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.stem)
def test_rows_agree_with_the_transcribed_table(path):
    """Each sweep of the CSV (in the order of its numbers) is the log's sweep of the same order; each CSV row is
    a parsed row of the same size with the same time, op, ranks, nodes and GPUs per node."""
    table: dict[str, list[dict[str, str]]] = defaultdict(list)
    with MULTINODE.open(newline="", encoding="utf-8") as handle:
        for record in csv.DictReader(handle):
            stem, _, k = record["sweep_id"].partition("#")
            if stem == path.stem:
                table[k].append(record)
    parsed = list(_sweeps(_read(path)).values())
    transcribed = [table[k] for k in sorted(table, key=int)]
    assert len(parsed) == len(transcribed)
    for rows, records in zip(parsed, transcribed):
        by_size = {row.bytes: row for row in rows}
        assert len(by_size) == len(rows)
        for record in records:
            row = by_size[int(record["bytes"])]
            assert (row.op, row.dtype, row.ranks, row.nodes, row.gpus_per_node) == (
                record["op"], record["dtype"], int(record["ranks"]), int(record["nodes"]), int(record["gpus_per_node"]))
            assert row.time_us == float(record["time_us"])
            if row.nccl_version:  # printed by NCCL in the log: the transcription took it from there
                assert row.nccl_version == record["nccl_version"]
        assert len(records) == len(rows)


def test_settings_on_the_mpirun_line_are_the_transcribed_ones():
    """Where the transcription took NCCL settings from the log's own mpirun line, the reader finds the same."""
    rows = _sweeps(read_logs(LOGS, gpus_per_node=8, op="all_gather"))  # (op only where the log cannot tell)
    table = {}
    with MULTINODE.open(newline="", encoding="utf-8") as handle:
        for record in csv.DictReader(handle):
            table.setdefault(record["sweep_id"], record["nccl_env"])
    for parsed, transcribed in [("nccltests_i309_h100_ib400#1", "#1"), ("nccltests_i309_h100_ib400#2", "#2"),
                                ("nccltests_i309_h100_ib400#5", "#7"), ("dstack_crusoe_a100_2n_ar#1", "#1")]:
        assert rows[parsed][0].nccl_env == table[parsed.split("#")[0] + transcribed]
    assert rows["nccltests_i309_h100_ib400#5"][0].nccl_env.startswith("NCCL_ALGO=Ring;")
    assert rows["nccltests_i309_h100_ib400#3"][0].nccl_env == ""  # -x applies to its own run only
    assert rows["gcp_a3mega_h100_2n_ar_tcpxo#1"][0].gpu == "NVIDIA H100 80GB HBM3"
    assert rows["ocioke_b48_a100_2n_ar_nccl2293#1"][0].nccl_version == "2.29.3"
    assert rows["nccltests_i309_h100_ib400#2"][0].hosts == ("spt01", "spt02", "pt01", "pt02")


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.stem)
def test_nodes_and_ranks_from_the_text_match_the_annotations(path):
    """Ranks always come from the nccl-tests text; nodes too, but for the sweeps that name no hosts. Those alone
    need gpus_per_node: a wrong one changes nothing elsewhere, and without one they fail with one clear line."""
    metas = _meta(path)
    sweeps = list(_sweeps(_read(path, gpus_per_node=8)).items())
    assert len(sweeps) == len(metas)
    guessed = _sweeps(_read(path, gpus_per_node=4))
    for (name, rows), meta in zip(sweeps, metas):
        assert (rows[0].nodes, rows[0].ranks) == (int(meta["nodes"]), int(meta["ranks"])), name
        assert guessed[name][0].ranks == rows[0].ranks
        assert (guessed[name][0].nodes != rows[0].nodes) == (name in NODES_NOT_IN_TEXT), name
    if any(name in NODES_NOT_IN_TEXT for name, _ in sweeps):
        with pytest.raises(InputError, match=r"--gpus-per-node") as caught:
            _read(path, gpus_per_node=None)
        assert str(path) in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("path", LARGE, ids=lambda p: p.stem)
def test_larger_runs_read_with_their_placement(path):
    """A log with every rank's '# Rank' line counts its nodes by host; an excerpt keeping one (the NVL72 racks) takes
    them from --gpus-per-node alone, its ranks from that line and the table."""
    (meta,) = _meta(path)
    placement = {("all_reduce", int(meta["ranks"]), int(meta["nodes"]))}
    rows = _read(path, gpus_per_node=int(meta["gpus_per_node"]))
    assert {(r.op, r.ranks, r.nodes) for r in rows} == placement
    rank_lines = sum(line.startswith("#  Rank") for line in path.read_text(encoding="utf-8").splitlines())
    if rank_lines == int(meta["ranks"]):
        assert {(r.op, r.ranks, r.nodes) for r in _read(path, gpus_per_node=None)} == placement
    else:
        with pytest.raises(InputError, match="pass --gpus-per-node"):
            _read(path, gpus_per_node=None)


def test_a_rank_line_that_contradicts_the_table_is_refused():
    """The source's own rank line of the two-rack run ('Rank 143') against its table's busbw/algbw of 128 ranks."""
    (path,) = [p for p in LARGE if "2racks" in p.stem]
    text = path.read_text(encoding="utf-8").replace(
        "#\n", "#  Rank 143 Group  0 Pid  14840 on slurm-gb200-207-171 device  3 [0x01] NVIDIA Graphics Device\n#\n", 1)
    with pytest.raises(InputError, match="disagrees on its ranks: 144 by the '# Rank' lines, 128 by the all_reduce"):
        parse_log(text, path.name, gpus_per_node=64)


# Small made-up logs ---------------------------------------------------------------------------------------------

HEADER = ("#      size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw"
          " #wrong")
RANK = "#  Rank {r:2d} Group  0 Pid {p:6d} on {host} device {d:2d} [0x{d:02x}] NVIDIA H100 80GB HBM3"


def _rows(ranks: int, sizes=(1048576, 2097152), time=100.0, op="all_reduce") -> list[str]:
    """Rows as nccl-tests prints them for *op* (all_reduce or all_gather) on *ranks* ranks."""
    factor, redop, per = (2 * (ranks - 1) / ranks, "sum", 4) if op == "all_reduce" else ((ranks - 1) / ranks, "none",
                                                                                         4 * ranks)
    return [f"{s:12d}  {s // per:12d}     float  {redop:>6s}      -1  {time * (1 + i):7.1f}  {s / time / 1e3:6.2f}  "
            f"{s / time / 1e3 * factor:6.2f}      0  {time:7.1f}  {s / time / 1e3:6.2f}  "
            f"{s / time / 1e3 * factor:6.2f}      0" for i, s in enumerate(sizes)]


def _ranks(nodes: int, per_node: int) -> list[str]:
    return [RANK.format(r=n * per_node + d, p=100 + d, host=f"node{n}", d=d)
            for n in range(nodes) for d in range(per_node)]


def _run(command: str, *, ranks: int, body: list[str] | None = None, op: str = "all_reduce") -> list[str]:
    preamble = [command] if command else []
    return (preamble + ["# nThread 1 nGpus 1 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5",
                        "#", "# Using devices"] + (body or []) + ["NCCL version 2.21.5+cuda12.4", HEADER]
            + _rows(ranks, op=op) + ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 20.1"])


def test_several_runs_in_one_file():
    text = "\n".join(
        ["$ mpirun -np 16 -N 8 ./all_reduce_perf -b 1M -e 2M"] + _run("", ranks=16)
        + ["", "some prose between runs"]
        + _run("mpirun -np 8 -H a:4,b:4 -x NCCL_ALGO=Tree ./build/all_gather_perf_mpi -b 1M -e 2M", ranks=8,
               op="all_gather")
        + [HEADER] + _rows(16, sizes=(1048576,)))  # a third run: only its header and a row
    rows = parse_log(text, "runs.log", gpus_per_node=8)
    sweeps = _sweeps(rows)
    assert list(sweeps) == ["runs#1", "runs#2", "runs#3"]
    assert [(r[0].op, r[0].ranks, r[0].nodes) for r in sweeps.values()] == [
        ("all_reduce", 16, 2), ("all_gather", 8, 2), ("all_reduce", 16, 2)]
    assert sweeps["runs#2"][0].nccl_env == "NCCL_ALGO=Tree" and sweeps["runs#3"][0].nccl_env == ""
    assert sweeps["runs#2"][0].hosts == ("a", "b") and sweeps["runs#1"][0].nccl_version == "2.21.5"
    assert [r.line for r in rows][:2] == [7, 8] and rows[0].in_place_time_us == 100.0 and rows[1].time_us == 200.0


def test_rows_after_the_footer_start_a_new_sweep_and_annotations_are_skipped():
    text = "\n".join([HEADER] + _rows(16) + ["# Avg bus bandwidth    : 1.0", "##SWEEP", "##META nodes=99"] + _rows(16)
                     + ["[1,0]<stdout>:" + line for line in [HEADER] + _rows(16)])
    rows = parse_log(text, gpus_per_node=8)
    assert [r.sweep for r in rows] == ["<text>#1"] * 2 + ["<text>#2"] * 2 + ["<text>#3"] * 2
    assert {r.nodes for r in rows} == {2}


@pytest.mark.parametrize("command, body, gpus_per_node", [
    ("", _ranks(2, 8), None),                                       # host names on the rank lines
    ("mpirun -np 16 -N 8 --hostfile hosts ./all_reduce_perf", [], None),
    ("mpirun -npernode 8 -np 16 all_reduce_perf", [], None),
    ("mpirun --map-by ppr:4:node -np 8 all_reduce_perf -g 2", [], None),   # 4 processes × 2 GPUs per node
    ("mpirun -H host1:8,host2:8 ./all_reduce_perf", [], None),       # -H: two hosts, 16 slots
    ("srun -N 2 --ntasks-per-node=8 all_reduce_perf_mpi", [], None),
    ("", [], 8),                                                    # only --gpus-per-node
    ("mpirun --np 16 --hostfile hosts ./all_reduce_perf", [], 8),   # a hostfile says nothing
])
def test_nodes_from_hosts_mpirun_or_gpus_per_node(command, body, gpus_per_node):
    text = "\n".join(_run(command, ranks=16, body=body))
    if "-g 2" in command:
        text = text.replace("nGpus 1", "nGpus 2")
    rows = parse_log(text, gpus_per_node=gpus_per_node)
    assert {(r.ranks, r.nodes, r.gpus_per_node, r.op) for r in rows} == {(16, 2, 8, "all_reduce")}
    if body:
        assert rows[0].hosts == ("node0", "node1") and rows[0].gpu == "NVIDIA H100 80GB HBM3"


def test_an_abridged_rank_list_names_hosts_but_does_not_count_the_nodes():
    # A README that keeps the last rank line of a 144-rank run over two racks of 72 (one host of the second rack).
    last = [RANK.format(r=143, p=140, host="tray-171", d=3)]
    rows = parse_log("\n".join(_run("", ranks=144, body=last)), "racks.log", gpus_per_node=72)
    assert {(r.ranks, r.nodes, r.gpus_per_node) for r in rows} == {(144, 2, 72)}
    with pytest.raises(InputError, match="no '# Rank' line for every rank"):
        parse_log("\n".join(_run("", ranks=144, body=last)), "racks.log")
    trays = [RANK.format(r=r, p=100 + r, host=f"tray{r // 4}", d=r % 4) for r in (0, 3, 4, 71)]  # 3 trays, 1 rack
    rows = parse_log("\n".join(_run("", ranks=72, body=trays)), "rack.log", gpus_per_node=72)
    assert {(r.nodes, r.hosts) for r in rows} == {(1, ("tray0", "tray1", "tray17"))}


def test_nccl_settings_from_mpirun_and_exports():
    text = "\n".join(["export NCCL_PROTO=Simple", "NCCL_DEBUG=INFO", "export OTHER=1"]
                     + _run("mpirun -np 16 -N 8 -x NCCL_ALGO=Ring -x LD_LIBRARY_PATH -x NCCL_IB_HCA=$HCAS \\", ranks=16)
                     [:1] + ["   -x NCCL_MIN_CTAS=24 ./all_reduce_perf -b 1M"] + _run("", ranks=16)
                     + _run("mpirun -np 16 -N 8 ./all_reduce_perf", ranks=16))
    sweeps = _sweeps(parse_log(text, "env.log"))
    assert sweeps["env#1"][0].nccl_env == "NCCL_ALGO=Ring;NCCL_DEBUG=INFO;NCCL_MIN_CTAS=24;NCCL_PROTO=Simple"
    assert sweeps["env#2"][0].nccl_env == "NCCL_DEBUG=INFO;NCCL_PROTO=Simple"  # -x held for its own run only


def test_missing_node_information_is_one_error_naming_the_file_and_the_option():
    text = "\n".join(_run("mpirun -np 16 ./all_reduce_perf", ranks=16))
    with pytest.raises(InputError) as caught:
        parse_log(text, "cluster.log")
    message = str(caught.value)
    assert message.startswith("cluster.log line ") and "--gpus-per-node" in message and "16 ranks" in message
    assert "\n" not in message


@pytest.mark.parametrize("bad, value", [("  1048576", "-1048576"), ("1048576", "1048576x"), ("100.0", "nan"),
                                        ("100.0", "-100.0"), ("100.0", "inf"), ("100.0", "fast"), ("  0", "7.5")])
def test_a_malformed_row_is_one_error_naming_file_line_and_value(bad, value):
    lines = _run("mpirun -np 16 -N 8 all_reduce_perf", ranks=16)
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("2097152"))
    words = lines[at].split()
    column = {"  1048576": 0, "1048576": 0, "100.0": 5, "  0": 8}[bad]
    words[column] = value
    lines[at] = "  ".join(words)
    with pytest.raises(InputError) as caught:
        parse_log("\n".join(lines), "bad.log")
    message = str(caught.value)
    assert message.startswith(f"bad.log line {at + 1}, column ") and value in message and "\n" not in message


def test_an_older_table_without_root_or_wrong_columns():
    old = ["#                                                     out-of-place                       in-place",
           "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error",
           "#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
           "     1048576        262144   float     sum    135.3    7.75   15.02  7e-07    132.7    7.90   15.31  7e-07",
           "  4294967296    1073741824   float     sum    43557   98.61  191.05  1e-06    43440   98.87  191.56  1e-06"]
    rows = parse_log("\n".join(old), gpus_per_node=8)
    assert [(r.bytes, r.time_us, r.in_place_time_us, r.wrong) for r in rows] == [
        (1048576, 135.3, 132.7, None), (4294967296, 43557.0, 43440.0, None)]
    assert {(r.op, r.ranks, r.nodes) for r in rows} == {("all_reduce", 32, 4)}  # ranks: busbw/algbw = 2·31/32
    headerless = parse_log("\n".join(line for line in old if not line.startswith("#")), gpus_per_node=8)
    assert headerless == [LogRow(**{**vars(r), "line": r.line - 3}) for r in rows]
    na = parse_log("\n".join([HEADER] + [line.replace("      0", "    N/A") for line in _rows(16)]), gpus_per_node=8)
    assert [r.wrong for r in na] == [None, None] and na[0].time_us == 100.0


def test_wrong_counts_are_read_for_the_caller_to_judge():
    rows = _rows(16, sizes=(1048576, 2097152, 4194304))
    rows[1] = rows[1].replace("      0  ", "      3  ", 1)
    rows[2] = rows[2].replace("      0  ", "  1e+06  ", 1)
    read = parse_log("\n".join(["mpirun -np 16 -N 8 ./all_reduce_perf", HEADER] + rows))
    assert [r.wrong for r in read] == [0, 3, 1000000]
    with pytest.raises(InputError, match=r"<text> line 4, column #wrong: must be a whole number, got 2.5"):
        parse_log("\n".join([HEADER] + rows[:2] + [rows[2].replace("1e+06", "  2.5")]), gpus_per_node=8)


def test_ops_from_the_binary_name_or_the_table():
    def op_of(command: str, redop: str = "sum", sizes=(1048576,), op=None, count_div=4) -> str:
        row = _rows(16, sizes)[0].replace("   sum", f"{redop:>6s}")
        if count_div != 4:
            row = row.replace(f"{sizes[0] // 4:12d}", f"{sizes[0] // count_div:12d}")
        text = "\n".join(([command] if command else []) + [HEADER, row])
        return parse_log(text, gpus_per_node=8, op=op)[0].op

    assert op_of("mpirun -np 16 -N 8 ./alltoall_perf_mpi", "none", count_div=64) == "all_to_all"
    assert op_of("mpirun -np 16 -N 8 ./sendrecv_perf") == "send_recv"
    assert op_of("# Collective test starting: reduce_scatter_perf", count_div=64) == "reduce_scatter"
    assert op_of("", "sum") == "all_reduce"                                   # busbw above algbw, count × 4 = size
    assert op_of("", "sum", count_div=64) == "reduce_scatter"                 # count × 4 × 16 ranks = size
    assert op_of("", "none", count_div=64, op="all_gather") == "all_gather"
    with pytest.raises(InputError, match=r"could be all_gather or all_to_all; pass the op \(--op\)"):
        op_of("", "none", count_div=64)
    with pytest.raises(InputError, match=r"an all_reduce table with redop 'none'"):
        op_of("", "none", count_div=64, op="all_reduce")
    with pytest.raises(InputError, match=r"hypercube_perf is not a collective the time model prices"):
        op_of("mpirun -np 16 -N 8 ./hypercube_perf")
    assert op_of("mpirun -np 16 -N 8 ./reduce_perf") == "reduce"
    with pytest.raises(InputError, match=r"op: expected one of"):
        op_of("", "none", count_div=64, op="allgather")


def test_a_reduce_to_a_root_is_read_as_reduce():
    """reduce_perf prints its root (0 by default) and a reduction op; busbw = algbw, so the ranks come from the
    rank lines or the launcher, not from the table."""
    row = _rows(16)[0].replace("   sum      -1", "   sum       0")
    rows = parse_log("\n".join(["mpirun -np 16 -N 8 ./reduce_perf -b 1M -e 1M", HEADER, row]))
    assert [(r.op, r.ranks, r.nodes) for r in rows] == [("reduce", 16, 2)]
    by_shape = parse_log("\n".join(_ranks(2, 8) + [HEADER, row]))  # no binary named: a reduction with a root
    assert [(r.op, r.ranks, r.nodes) for r in by_shape] == [("reduce", 16, 2)]
    with pytest.raises(InputError, match=r"does not say how many ranks ran it"):
        parse_log("\n".join([HEADER, row]), gpus_per_node=8)  # nothing but the table, which cannot tell


def test_sources_that_disagree_on_ranks_are_an_error():
    text = "\n".join(_run("mpirun -np 8 -N 8 ./all_reduce_perf", ranks=16, body=_ranks(2, 8)))
    with pytest.raises(InputError, match=r"disagrees on its ranks: 16 by the '# Rank' lines, 8 by mpirun's 8 proc"):
        parse_log(text)
    lying = "\n".join(_run("", ranks=16, body=_ranks(1, 8)))  # 8 rank lines, a table of 16 ranks
    with pytest.raises(InputError, match=r"ranks: 8 by the '# Rank' lines, 16 by the all_reduce table"):
        parse_log(lying)


def test_ranks_spread_unevenly_over_the_hosts_are_an_error():
    body = [RANK.format(r=r, p=100 + r, host=f"node{min(r // 6, 2)}", d=r % 8) for r in range(16)]  # 6 + 6 + 4
    with pytest.raises(InputError, match=r"uneven.log line \d+ \(sweep 1\): 16 ranks cannot be spread evenly over 3"):
        parse_log("\n".join(_run("", ranks=16, body=body)), "uneven.log")


@pytest.mark.parametrize("content, expected", [
    (b"just prose\nno table here\n", r"no nccl-tests table"),
    (b"#  size count type redop root time algbw busbw\n\xff\xfe\n", r"not UTF-8 text \(byte 0xff at offset"),
])
def test_a_file_without_a_table_or_not_text_is_one_error_naming_it(tmp_path, content, expected):
    path = tmp_path / "run.log"
    path.write_bytes(content)
    with pytest.raises(InputError, match=expected) as caught:
        read_logs([path])
    assert str(path) in str(caught.value)
    with pytest.raises(InputError, match=r"--logs .*missing.log: cannot read"):
        read_logs([tmp_path / "missing.log"])


@pytest.mark.parametrize("value", [0, -8, True, "8", 2.5, [8]])
def test_gpus_per_node_goes_through_the_gate(value):
    with pytest.raises(InputError, match=r"gpus_per_node"):
        parse_log("\n".join([HEADER] + _rows(16)), gpus_per_node=value)


_PIECES = st.sampled_from(["8", "-1", "0", "16", "1e3", "nan", "float", "sum", "none", "N/A", "#", "Rank", "on",
                           "device", "[0x1]", "mpirun", "-np", "-N", "-H", "a:8,b:8", "-x", "NCCL_ALGO=Ring",
                           "all_reduce_perf", "nThread", "nGpus", "size", "count", "type", "time", "##", "\\", "$X"])


_BASE = _run("mpirun -np 16 -N 8 -H a:8,b:8 -x NCCL_ALGO=Ring ./all_reduce_perf -g 1", ranks=16, body=_ranks(2, 8))


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(st.lists(_PIECES, max_size=14).map(" ".join), max_size=8),
       changes=st.lists(st.tuples(st.integers(0, len(_BASE) - 1), st.integers(0, 15), _PIECES), max_size=4),
       gpus_per_node=st.sampled_from([None, 8]))
def test_any_text_gives_rows_or_one_input_error(lines, changes, gpus_per_node):
    """Random lines, and a good log with words replaced: rows that keep the rules, or one InputError line."""
    base = [line.split() for line in _BASE]
    for line, word, piece in changes:
        if base[line]:
            base[line][word % len(base[line])] = piece
    for text in ("\n".join(lines), "\n".join(" ".join(words) for words in base)):
        try:
            rows = parse_log(text, "fuzz.log", gpus_per_node=gpus_per_node, op="all_reduce")
        except InputError as exc:
            assert "\n" not in str(exc) and str(exc).startswith("fuzz.log")
            continue
        for row in rows:
            assert row.ranks == row.nodes * row.gpus_per_node and row.time_us > 0 and row.bytes >= 1
            assert re.fullmatch(r"fuzz#\d+", row.sweep)


def test_trays_of_one_nvl72_rack_are_one_node_to_nccl():
    # GB200 NVL72 (gb200_nvl72.toml: 18 hosts of 4 GPUs in one NVLink domain): a log of two trays is 8 GPUs of one
    # NVLink domain, priced as NCCL's multi-node NVLink sees them, one node.
    from codegen.validation import collectives
    from codegen.validation.nccl_logs import measurements

    rows = parse_log("\n".join(_run("", ranks=8, body=_ranks(2, 4))), "gb200.log")
    assert {(r.ranks, r.nodes, r.gpus_per_node) for r in rows} == {(8, 2, 4)}
    data = measurements(rows, "gb200_nvl72")
    predicted, _ = collectives.predicted_rows(data)
    alone = collectives.predict("gb200_nvl72", "all_reduce", 8, data.msg_bytes)
    assert (alone.placement["nodes"] == 1).all()
    assert predicted == pytest.approx(alone.time_s, rel=1e-12)
    # Counted in racks (--gpus-per-node 72), two nodes are two NVLink domains across the network, each with its
    # 72 NICs; more than a rack per node is one line.
    racks = parse_log("\n".join(_run("mpirun -np 144 ./all_reduce_perf", ranks=144)), "gb200.log", gpus_per_node=72)
    predicted, _ = collectives.predicted_rows(measurements(racks, "gb200_nvl72"))
    across = collectives.predict("gb200_nvl72", "all_reduce", 144, data.msg_bytes, gpus_per_node=72)
    assert (across.placement["nodes"] == 2).all() and predicted == pytest.approx(across.time_s, rel=1e-12)
    too_many = parse_log("\n".join(_run("mpirun -np 288 ./all_reduce_perf", ranks=288)), "gb200.log",
                         gpus_per_node=144)
    with pytest.raises(InputError, match="144 GPUs per node, more than a gb200_nvl72 node holds \\(72\\)"):
        measurements(too_many, "gb200_nvl72")
