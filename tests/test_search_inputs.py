"""symcost search and codegen.search's API on bad input: one line naming the option (exit 2) or one InputError
naming the argument, never a traceback, a hang, a double count or a silently wrong result."""

from __future__ import annotations

import csv
import http.server
import json
import math
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codegen.cli import main
from codegen.configs import load_model
from codegen.runtime.inputs import InputError
from codegen.search import (SearchSpace, SearchSpec, check_scheduler, chunk_best, merge_top, pareto_front,
                            parse_restrictions, price_chunk, priced_columns, reduce_top, search, search_context,
                            setting_labels)
from conftest import ROOT

SMALL = ["search", "--model", "llama2-7b", "--devices", "8", "--system", "dgx_a100", "--global-batch", "16",
         "--no-progress"]


def _error(capsys, argv):
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2, (argv, captured.out, captured.err)
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("symcost search: error: "), captured.err
    assert "Traceback" not in captured.err
    return lines[0]


def _json(capsys, argv):
    assert main([*argv, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    got.pop("seconds")
    return got


# ------------------------------------------------------------------ lists: merged once, never counted twice

@pytest.mark.parametrize("option, repeated, single", [
    ("--zero", "1,1", "1"),
    ("--zero", "0,1,0", "0,1"),
    ("--recompute", "none,none", "none"),
    ("--cp-algo", "ulysses_cp,ulysses_cp", "ulysses_cp"),
    ("--cp-algo", "ulysses,ulysses_cp", "ulysses"),       # a short name and the label: one algorithm
    ("--cp-algo", "ring,colossalai_cp,hybrid,hybird_cp", "ring,hybrid"),
])
def test_a_value_given_twice_is_searched_once(capsys, option, repeated, single):
    twice = _json(capsys, [*SMALL, "--top", "50", option, repeated])
    once = _json(capsys, [*SMALL, "--top", "50", option, single])
    assert twice == once
    indices = [row["index"] for row in twice["top"]]
    assert len(indices) == len(set(indices)) > 0  # no layout listed twice


def test_zero_level_is_the_same_option_as_zero(capsys):
    """eval and sensitivity name a layout's ZeRO level --zero-level; search takes the levels it tries under that
    name too: the same top layouts as --zero, and the same one-line refusal of a level out of range."""
    assert _json(capsys, [*SMALL, "--top", "20", "--zero-level", "0,3"]) == _json(
        capsys, [*SMALL, "--top", "20", "--zero", "0,3"])
    assert main([*SMALL, "--zero-level", "5"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "must be at most 3; got 5" in err


def test_repeated_list_values_merge_in_the_api():
    model = load_model("llama2-7b")
    spec = SearchSpec(model, 8, 16, "dgx_a100", recompute=["none", "none", "full"], zero_levels=(1, 1, 0),
                      cp_algos=("ulysses", "ULYSSES_CP", "ring"))
    assert (spec.recompute, spec.zero_levels, spec.cp_algos) == (("none", "full"), (1, 0), ("ulysses", "ring"))
    space = SearchSpace(model, 8, 16, recompute=("none", "none"), zero_levels=(1, 1), cp_algos=("hybrid", "hybrid_cp"))
    assert len(space.settings) == 1
    assert space.size == SearchSpace(model, 8, 16, recompute=("none",), cp_algos=("hybrid",)).size
    assert search(spec, top=5).layouts == search(SearchSpec(model, 8, 16, "dgx_a100", recompute=("none", "full"),
                                                            zero_levels=(1, 0), cp_algos=("ulysses", "ring")),
                                                 top=5).layouts


# ------------------------------------------------------------------ --fix and --max

def test_fix_values_keep_the_bounds_and_a_key_states_one_value(capsys):
    line = _error(capsys, [*SMALL, "--fix", "t=9223372036854775808"])
    assert "--fix t: must be at most 2**20 = 1,048,576" in line and "9223372036854775808" in line
    assert "--max m: must be at most 2**32" in _error(capsys, [*SMALL, "--max", "m=4294967297"])
    assert "--fix t: expected a whole number, got '٢'" in _error(capsys, [*SMALL, "--fix", "t=٢"])
    line = _error(capsys, [*SMALL, "--fix", "t=2", "--fix", "t=4"])
    assert "--fix t: given twice with different values, 2 and 4" in line
    assert "--max p: given twice" in _error(capsys, [*SMALL, "--max", "p=2,p=4"])
    assert _json(capsys, [*SMALL, "--fix", "t=2", "--fix", "t=2"]) == _json(capsys, [*SMALL, "--fix", "t=2"])


def test_fix_in_the_api():
    model = load_model("llama2-7b")
    with pytest.raises(InputError, match="fix t: given twice with different values, 2 and 4"):
        SearchSpec(model, 8, 16, "dgx_a100", fix=(("t", 2), ("t", 4)))
    assert SearchSpec(model, 8, 16, "dgx_a100", fix=(("t", 2), ("t", 2))).fix == (("t", 2),)
    assert SearchSpec(model, 8, 16, "dgx_a100", fix={"t": 2, "p": 1}).fix == (("p", 1), ("t", 2))
    with pytest.raises(InputError, match=r"fix t: must be at most 2\*\*20"):
        SearchSpec(model, 8, 16, "dgx_a100", fix={"t": 2**63})
    with pytest.raises(InputError, match="--fix t: given twice"):
        parse_restrictions(["t=2", "t=3"], "--fix")
    assert parse_restrictions(["t=2", "t=2,p=1"], "--fix") == {"t": 2, "p": 1}


# ------------------------------------------------------------------ the scheduler: a few seconds, one line

def _silent_server():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held = []

    def accept():
        while True:
            try:
                held.append(server.accept()[0])  # accepted, never answered
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return server, f"tcp://127.0.0.1:{server.getsockname()[1]}"


class _Quiet(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_a_scheduler_that_never_answers_fails_in_seconds(capsys):
    pytest.importorskip("distributed", reason="the optional extra distributed is not installed")
    server, address = _silent_server()
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _Quiet)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        for target in (address, f"tcp://127.0.0.1:{httpd.server_address[1]}"):
            started = time.perf_counter()
            line = _error(capsys, [*SMALL, "--scheduler", target, "--scheduler-timeout", "1"])
            assert time.perf_counter() - started < 4
            assert line.endswith(f"--scheduler {target}: no answer from a Dask scheduler within 1 s (a port that "
                                 f"accepts and never answers, or another server)")
        with pytest.raises(InputError, match=f"scheduler {address}: no answer"):
            search(SearchSpec(load_model("llama2-7b"), 8, 16, "dgx_a100"), scheduler=address, scheduler_timeout=1)
    finally:
        server.close()
        httpd.shutdown()


def test_a_refused_scheduler_and_a_malformed_one(capsys):
    pytest.importorskip("distributed", reason="the optional extra distributed is not installed")
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    line = _error(capsys, [*SMALL, "--scheduler", f"tcp://127.0.0.1:{port}", "--scheduler-timeout", "1"])
    # (the cause is the refusal, or, where distributed's retries of it outlast the timeout on a loaded machine,
    # the time-out: either way one line naming the option and the address)
    assert f"--scheduler tcp://127.0.0.1:{port}: cannot connect to a Dask scheduler" in line
    assert "refused" in line or "Timed out" in line
    started = time.perf_counter()
    line = _error(capsys, [*SMALL, "--scheduler", "inproc://nothing"])
    assert line.startswith("symcost search: error: --scheduler inproc://nothing: an inproc:// address names a "
                           "scheduler inside this Python process")
    assert "--scheduler: expected [PROTOCOL://]HOST:PORT" in _error(capsys, [*SMALL, "--scheduler", "tcp://host"])
    assert "port from 1 to 65535" in _error(capsys, [*SMALL, "--scheduler", "tcp://host:0"])
    assert "--scheduler-timeout: must be a whole number >= 1, got 0" in _error(
        capsys, [*SMALL, "--scheduler", "tcp://h:1", "--scheduler-timeout", "0"])
    assert time.perf_counter() - started < 2


def test_the_command_exits_at_once_after_a_scheduler_error():
    # A half-made dask Client blocked the interpreter's exit for 20 s and printed a traceback from its finaliser.
    pytest.importorskip("distributed", reason="the optional extra distributed is not installed")
    server, address = _silent_server()
    try:
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "codegen.cli", *SMALL, "--scheduler", address,
                               "--scheduler-timeout", "1"], cwd=ROOT, capture_output=True, text=True, timeout=60)
        elapsed = time.perf_counter() - started
    finally:
        server.close()
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [f"symcost search: error: --scheduler {address}: no answer from a Dask "
                                        f"scheduler within 1 s (a port that accepts and never answers, or another "
                                        f"server)"]
    assert elapsed < 15  # Python's start, the imports, one second of waiting: not 20 s more at exit


def test_the_scheduler_argument_of_the_api():
    spec = SearchSpec(load_model("llama2-7b"), 8, 16, "dgx_a100")
    for bad in (1, b"tcp://h:1", ["tcp://h:1"]):
        with pytest.raises(InputError, match="scheduler: expected an address such as tcp://HOST:PORT"):
            search(spec, scheduler=bad)
    with pytest.raises(InputError, match="scheduler: expected"):
        search(spec, scheduler="")
    with pytest.raises(InputError, match="timeout: must be a whole number"):
        check_scheduler("tcp://h:1", "scheduler", 0.5)


# ------------------------------------------------------------------ --chunk, --devices, --system, --out, --plot

def test_chunk_has_a_floor(capsys):
    assert "--chunk: must be a whole number >= 1024, got 1" in _error(capsys, [*SMALL, "--chunk", "1"])
    assert "--chunk: must be at most 2**26" in _error(capsys, [*SMALL, "--chunk", str(1 << 27)])
    with pytest.raises(InputError, match="chunk: must be a whole number >= 1024, got 1"):
        search(SearchSpec(load_model("llama2-7b"), 8, 16, "dgx_a100"), chunk=1)


def test_devices_past_the_largest_degree_keep_the_layouts_within_it(capsys):
    got = _json(capsys, [*SMALL[:4], "2097152", "--system", "dgx_h100", "--global-batch", "2097152", "--no-progress",
                         "--recompute", "none", "--top", "5"])
    assert got["layouts"] > 0 and got["top"]
    for row in got["top"]:
        assert row["d"] * row["t"] * row["cp"] * row["p"] == 2097152
        assert max(row[k] for k in ("d", "t", "p", "cp", "ep", "etp", "vp")) <= 1 << 20
    # Pinned past the bound: why the grid is empty, with the bound and its reason.
    pinned = _json(capsys, [*SMALL[:4], "2097152", "--system", "dgx_h100", "--global-batch", "2097152",
                            "--no-progress", "--recompute", "none", "--fix", "d=1048576,t=1,cp=1,p=2"])
    assert pinned["layouts"] > 0 and {row["d"] for row in pinned["top"]} == {1 << 20}
    line = _error(capsys, [*SMALL[:4], "2097152", "--system", "dgx_h100", "--global-batch", "16", "--fix",
                           "d=2097152"])
    assert "--fix d: must be at most 2**20 = 1,048,576, the largest parallel degree symcost prices" in line


def test_the_system_takes_an_alias_as_every_command_does(capsys):
    by_name = _json(capsys, [*SMALL[:6], "dgx_h100", *SMALL[7:], "--top", "5"])
    by_alias = _json(capsys, [*SMALL[:6], "h100_sxm", *SMALL[7:], "--top", "5"])
    assert by_alias == by_name
    assert SearchSpec(load_model("llama2-7b"), 8, 16, "h100_sxm").system == "dgx_h100"
    line = _error(capsys, [*SMALL[:6], "h100", *SMALL[7:]])
    assert line.startswith("symcost search: error: --system 'h100': unknown system; known: A2,")
    assert "--original-device 'B9': unknown system" in _error(capsys, [*SMALL, "--original-device", "B9"])


@pytest.mark.parametrize("option, path, fragment", [
    ("--out", "/proc/x.csv", "cannot create the file: No such file or directory"),
    ("--plot", "/proc/x.png", "cannot create the file: No such file or directory"),
    ("--out", "/tmp/" + "a" * 300 + ".csv", "cannot use this path: File name too long"),
])
def test_output_paths_are_checked_before_the_search(capsys, monkeypatch, option, path, fragment):
    import codegen.search.run as run

    def no_search(*args, **kwargs):
        raise AssertionError("the search ran before the path was checked")

    monkeypatch.setattr(run, "search_context", no_search)
    assert _error(capsys, [*SMALL, option, path]).endswith(f"{option} {path}: {fragment}")


@pytest.mark.parametrize("extra, absent", [
    ([], {"original_cost"}),
    (["--objective", "original"], {"step_time_s", "compute_s", "bubble_s", "comm_s", "stage_flops"}),
    (["--no-memory"], {"original_cost", "memory_peak_bytes", "headroom_bytes", "fits"}),
])
def test_out_writes_only_the_columns_the_search_prices(capsys, tmp_path, extra, absent):
    path = tmp_path / "all.csv"
    assert main([*SMALL, "--top", "3", "--out", str(path), *extra]) == 0
    capsys.readouterr()
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows and not absent & set(rows[0])
    for column in rows[0]:  # every column written holds a figure somewhere: none is NaN in every row
        assert any(row[column] not in ("nan", "") for row in rows), column
    if "--objective" not in extra:
        assert all(math.isfinite(float(row["step_time_s"])) for row in rows)


def test_priced_columns_follow_the_spec():
    model = load_model("llama2-7b")
    time_spec = SearchSpec(model, 8, 16, "dgx_a100")
    assert "original_cost" not in priced_columns(time_spec) and "step_time_s" in priced_columns(time_spec)
    original = SearchSpec(model, 8, 16, "dgx_a100", objective="original")
    assert "original_cost" in priced_columns(original) and "comm_s" not in priced_columns(original)


# ------------------------------------------------------------------ the Python API: one documented error

def test_booleans_are_booleans():
    model = load_model("llama2-7b")
    for name in ("memory", "keep_infeasible", "tp_cross_node"):
        for bad in ("no", 0, 1, None, "False"):
            with pytest.raises(InputError, match=f"{name}: must be true or false"):
                SearchSpec(model, 8, 16, "dgx_a100", **{name: bad})
    assert SearchSpec(model, 8, 16, "dgx_a100", memory=np.bool_(False)).memory is False


def test_a_cache_never_skips_the_check():
    model = load_model("llama2-7b")
    search(SearchSpec(model, 8, 16, "dgx_a100"), top=2)  # the equal integer search first: its context is cached
    for bad in (8.0, True, "8", np.float64(8)):
        with pytest.raises(InputError, match="devices: must be a whole number"):
            SearchSpec(model, bad, 16, "dgx_a100")
    spec = SearchSpec(model, np.int64(8), np.int32(16), "dgx_a100")
    assert type(spec.devices) is int and spec == SearchSpec(model, 8, 16, "dgx_a100")
    for bad in ([], {"d": 1}, 3):
        with pytest.raises(InputError, match="spec: expected a SearchSpec"):
            search_context(bad)


def test_reduce_top_gates_top():
    table = search(SearchSpec(load_model("llama2-7b"), 8, 16, "dgx_a100", keep_infeasible=True), top=9).table
    assert len(table["index"]) == 9
    for bad in (-1, 0, 2.0, True, "3", None):
        with pytest.raises(InputError, match="top: must be a whole number"):
            reduce_top(table, bad)
        with pytest.raises(InputError, match="top: must be a whole number"):
            merge_top(table, table, bad)
    assert len(reduce_top(table, 7)["index"]) == 7
    with pytest.raises(InputError, match="table: expected a result table"):
        reduce_top([1, 2], 2)
    with pytest.raises(InputError, match="y: every value must be finite"):
        pareto_front(np.array([1.0, 2.0]), np.array([np.nan, 1.0]))


def test_decoding_past_the_end_of_the_space():
    space = SearchSpace(load_model("llama2-7b"), 8, 16, recompute=("none", "full"))
    last = len(space.settings) - 1
    good = space.decode(np.array([space.size - 1]), last)
    assert good["t"].shape == (1,)
    for index, setting, fragment in (([space.size], last, "index: every value must be at most"),
                                     ([0], last, "index: every value must be a whole number >="),
                                     ([-1], 0, "index: every value must be a whole number >= 0"),
                                     ([0.5], 0, "index: expected whole numbers"),
                                     ([0], 2, "setting: must be at most 1"),
                                     ([0], -1, "setting: must be a whole number >= 0")):
        with pytest.raises(InputError, match=fragment):
            space.decode(np.array(index), setting)
    # Indices in any order decode as one by one.
    mixed = np.array([3, 0, 2, 1])
    assert (space.decode(mixed, 0)["b"] == [space.decode(np.array([i]), 0)["b"][0] for i in mixed]).all()


@pytest.mark.parametrize("call, fragment", [
    (lambda s: SearchSpec("llama2-7b", 8, 16, "dgx_a100"), "model: expected a ModelConfig"),
    (lambda s: SearchSpec(s.model, 8, 16, None), "system: expected a hardware catalog system name"),
    (lambda s: SearchSpec(s.model, 8, 16, "dgx_a100", objective=["x"]), "objective: one of"),
    (lambda s: SearchSpec(s.model, 8, 16, "dgx_a100", recompute="none"), "recompute: expected a sequence"),
    (lambda s: SearchSpec(s.model, 8, 16, "dgx_a100", recompute=()), "recompute: expected at least one"),
    (lambda s: SearchSpec(s.model, 8, 16, "dgx_a100", zero_levels=(True,)), "zero_levels: one of 0, 1, 2, 3"),
    (lambda s: SearchSpec(s.model, 8, 16, "dgx_a100", zero_levels=(1.0,)), "zero_levels: one of 0, 1, 2, 3"),
    (lambda s: SearchSpec(s.model, 8, 16, "dgx_a100", cp_algos=("x",)), "cp_algos: unknown CP algorithm 'x'"),
    (lambda s: SearchSpec(s.model, 8, 16, "dgx_a100", cp_algos=(3,)), "cp_algos: expected CP algorithm names"),
    (lambda s: SearchSpec(s.model, 8, 16, "dgx_a100", fix=(("q", 1),)), "fix 'q': expected"),
    (lambda s: SearchSpec(s.model, 8, 16, "dgx_a100", fix="t=2"), "fix: expected"),
    (lambda s: SearchSpec(s.model, 8, 16, "dgx_a100", original_device=5), "original_device: expected"),
    (lambda s: SearchSpec(s.model, 0, 16, "dgx_a100"), "devices: must be a whole number >= 1"),
    (lambda s: SearchSpec(s.model, 8, 2**41, "dgx_a100"), "global_batch: must be at most 2**40"),
    (lambda s: search("spec"), "spec: expected a SearchSpec"),
    (lambda s: search(s, top=0), "top: must be a whole number >= 1"),
    (lambda s: search(s, top=10**7), "top: must be at most"),
    (lambda s: search(s, engine=3), "engine: one of numpy, dask"),
    (lambda s: search(s, engine="spark"), "engine: one of numpy, dask"),
    (lambda s: search(s, sink=3), "sink: expected a callable"),
    (lambda s: search(s, progress="x"), "progress: expected a callable"),
    (lambda s: search(s, scheduler=1), "scheduler: expected an address"),
    (lambda s: search(s, engine="dask", sink=print), "sink (--out): writes every layout"),
    (lambda s: setting_labels(3), "spec: expected a SearchSpec"),
    (lambda s: priced_columns(None), "spec: expected a SearchSpec"),
    (lambda s: price_chunk(s, 3), "chunk: expected a Chunk"),
    (lambda s: chunk_best(s, 3, 5), "chunk: expected a Chunk"),
    (lambda s: chunk_best(s, next(search_context(s).space.chunks()), -1), "top: must be a whole number"),
    (lambda s: parse_restrictions("t=2", "--fix"), "--fix: expected a list of KEY=N texts"),
    (lambda s: SearchSpace(s.model, 8.0, 16), "devices: must be a whole number"),
    (lambda s: SearchSpace(s.model, 8, 16, cp_algos=()), "cp algorithm: expected at least one"),
    (lambda s: SearchSpace(s.model, 8, 16, devices_per_node="8"), "devices_per_node: must be a whole number"),
    (lambda s: list(SearchSpace(s.model, 8, 16).chunks(0)), "chunk: must be a whole number >= 1"),
])
def test_each_public_entry_point_raises_the_documented_error(call, fragment):
    spec = SearchSpec(load_model("llama2-7b"), 8, 16, "dgx_a100")
    with pytest.raises(InputError) as caught:
        call(spec)
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


# ------------------------------------------------------------------ properties: any input, one clear outcome

_NUMBERS = st.one_of(st.integers(-3, 40).map(str), st.sampled_from(["٨", "８", "1_6", "0x10", "1e3", "2.5", "", " ",
                                                                    "inf", "nan", "99999999999999999999999", "-0",
                                                                    "+8", "08"]))
_LISTS = st.lists(st.sampled_from(["none", "selective", "full", "0", "1", "2", "3", "4", "ulysses", "ulysses_cp",
                                   "ring", "hybrid", "HYBRID_CP", "colossalai", "x", "", " "]),
                  min_size=0, max_size=4).map(",".join)
_RESTRICTION = st.tuples(st.sampled_from(["d", "t", "p", "cp", "ep", "etp", "vp", "b", "m", "q", ""]),
                         _NUMBERS).map(lambda kv: f"{kv[0]}={kv[1]}")


def _options():
    return st.fixed_dictionaries({}, optional={
        "--devices": st.sampled_from(["1", "2", "4", "8", "12", "16", "0", "٨", "3"]),
        "--global-batch": st.sampled_from(["1", "8", "16", "24", "0", "1e1"]),
        "--top": _NUMBERS, "--chunk": st.sampled_from(["1", "1024", "1023", "4096", "x"]),
        "--zero": _LISTS, "--recompute": _LISTS, "--cp-algo": _LISTS,
        "--fix": _RESTRICTION, "--max": _RESTRICTION,
        "--system": st.sampled_from(["dgx_a100", "a100_sxm", "h100_sxm", "A2", "nope", ""]),
        "--objective": st.sampled_from(["step-time", "comm-time", "original"]),
        "--scheduler": st.sampled_from(["inproc://x", "tcp://h", "tcp://h:0", "h:99999", "tcp://:1"]),
    })


def _check_numbers(rows, columns=None):
    for row in rows:
        for key, value in row.items():
            if isinstance(value, float) and (columns is None or key in columns):
                assert math.isfinite(value), (key, row)
                if key != "headroom_bytes":  # negative headroom is an infeasible layout's, flagged
                    assert value >= 0, (key, row)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(options=_options(), flags=st.sets(st.sampled_from(["--keep-infeasible", "--no-memory", "--tp-cross-node"])))
def test_any_options_give_a_table_or_one_line(capsys, options, flags):
    argv = ["search", "--model", "llama2-7b", "--devices", "8", "--system", "dgx_a100", "--global-batch", "16",
            "--no-progress", "--json", *sorted(flags)]
    for option, value in options.items():
        argv += [option, value]
    started = time.perf_counter()
    code = main(argv)
    captured = capsys.readouterr()
    assert time.perf_counter() - started < 30
    assert "Traceback" not in captured.err
    if code == 2:
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("symcost search: error: "), captured.err
        return
    assert code == 0, captured.err
    got = json.loads(captured.out)
    indices = [row["index"] for row in got["top"]]
    assert len(indices) == len(set(indices))  # no layout twice
    _check_numbers(got["top"])


_ANY = st.one_of(st.none(), st.booleans(), st.integers(-2, 20), st.floats(allow_nan=True), st.text(max_size=4),
                 st.lists(st.integers(0, 4), max_size=2), st.just(np.int64(8)))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changes=st.dictionaries(st.sampled_from(["devices", "global_batch", "system", "objective", "fix", "maximum",
                                                "recompute", "zero_levels", "cp_algos", "tp_cross_node", "memory",
                                                "keep_infeasible", "original_device"]), _ANY, max_size=2))
def test_any_spec_arguments_give_a_table_or_one_error(changes):
    arguments = {"devices": 8, "global_batch": 16, "system": "dgx_a100", **changes}
    try:
        spec = SearchSpec(load_model("llama2-7b"), **arguments)
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    try:
        result = search(spec, top=5)
    except InputError as exc:  # e.g. a system without the step-time facts: one line too
        assert "\n" not in str(exc)
        return
    except ValueError as exc:  # the pricers' own documented errors (a system without the step-time facts)
        assert "\n" not in str(exc)
        return
    _check_numbers(result.rows(), priced_columns(spec))  # the others are NaN: not priced
    indices = result.table["index"].tolist()
    assert len(indices) == len(set(indices))
