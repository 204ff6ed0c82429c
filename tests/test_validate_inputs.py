"""``symcost validate collectives|memory|step-time`` on bad measurement tables, large ones and repeated rows.

Every cell passes the input gate (``codegen.runtime.inputs``) and every row the layout rules of ``symcost eval``:
a bad one is one error line naming the file, the line, the column (for a cell) and the value, exit status 2,
never a traceback, a non-finite figure or a silently wrong one. A table of repeated rows gives each row the
single row's figures, and each validation says how many rows it read.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from codegen.cli import main
from codegen.runtime.inputs import InputError, parse_flag, parse_real, parse_reals
from codegen.validation import collectives, memory, step_time
from codegen.validation.csvfile import DATA_DIR, read_table, recompute_mode
from conftest import read_csv, write_csv

SHIPPED = {"collectives": DATA_DIR / "nccl_single_node.csv", "memory": DATA_DIR / "megatron_memory_figure1.csv",
           "step-time": DATA_DIR / "megatron_iteration_times.csv"}


def _rows(kind: str) -> tuple[list[str], list[dict[str, str]]]:
    return read_csv(SHIPPED[kind])


def _one_row_changed(tmp_path: Path, kind: str, changes: dict[str, str]) -> Path:
    """The shipped table's first row, then the same row with *changes* (so the bad row is on line 3)."""
    header, rows = _rows(kind)
    return write_csv(tmp_path / f"{kind}.csv", header, [rows[0], dict(rows[0], **changes)])


def _error(capsys, argv: list[str]) -> str:
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2, (argv, captured.out[-300:], captured.err)
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("symcost validate: error: "), captured.err
    for never in ("Traceback", "could not convert", "array(", "nan%", "inf%"):
        assert never not in lines[0], lines[0]
    return lines[0]


# ------------------------------------------------------------------ every bad input, by name

MEMORY_CELLS = [
    ({"m": "2.5"}, "column m: expected a whole number, got '2.5'"),
    ({"vocab": "51200.5"}, "column vocab: expected a whole number, got '51200.5'"),
    ({"vocab": "0"}, "column vocab: must be a whole number >= 1, got 0"),
    ({"vocab": "-5"}, "column vocab: must be a whole number >= 1, got -5"),
    ({"ffn": "-1"}, "column ffn: must be a whole number >= 1, got -1"),
    ({"d": "0"}, "column d: must be a whole number >= 1, got 0"),
    ({"h": "inf"}, "column h: expected a whole number, got 'inf'"),
    ({"t": "1e30"}, "column t: expected a whole number, got '1e30'"),
    ({"L": "1" + "0" * 30}, "column L: must be at most 2**10"),
    ({"h": "9" * 12}, "column h: must be at most 2**32"),
    ({"seq": "٨"}, "column seq: expected a whole number, got '٨'"),
    ({"micro_batch": "1_0"}, "column micro_batch: expected a whole number, got '1_0'"),
    ({"params_and_optimizer_GiB_per_gpu": "0"}, "column params_and_optimizer_GiB_per_gpu: must be a number > 0"),
    ({"params_and_optimizer_GiB_per_gpu": "-45.5"}, "column params_and_optimizer_GiB_per_gpu: must be a number > 0"),
    ({"activations_GiB_per_gpu": "nan"}, "column activations_GiB_per_gpu: expected a number, got 'nan'"),
    ({"activations_GiB_per_gpu": "abc"}, "column activations_GiB_per_gpu: expected a number, got 'abc'"),
    ({"activations_GiB_per_gpu": "1e400"}, "column activations_GiB_per_gpu: must be at most 2**53"),
    ({"sequence_parallel": "maybe"}, "column sequence_parallel: must be true or false (or yes/no, 1/0), got 'maybe'"),
    ({"recompute": "sometimes"}, "column recompute: cannot read 'sometimes' as a recompute mode"),
]
MEMORY_RULES = [
    ({"model": "x", "t": "3"}, "t must divide the attention heads a: a = 64, t = 3"),
    ({"model": "x", "h": "6145"}, "h must be a multiple of the heads a (as a model file's hidden_size): 6145 % 64"),
    ({"model": "x", "p": "64"}, "64·1 = 64 pipeline chunks for 48 layers"),
    ({"model": "x", "global_batch": "5"}, "global_batch 5 is not a multiple of d·micro_batch = 1·4"),
    ({"h": "4096"}, "megatron-22B: h = 4096 but the run table"),
]


@pytest.mark.parametrize("changes, fragment", MEMORY_CELLS + MEMORY_RULES)
def test_validate_memory_bad_rows(capsys, tmp_path, changes, fragment):
    header, rows = _rows("memory")
    extra = [c for c in ("m", "vocab", "ffn", "d", "sequence_parallel", "global_batch") if c not in header]
    path = write_csv(tmp_path / "data.csv", header + extra, [rows[0], dict(rows[0], **changes)])
    line = _error(capsys, ["validate", "memory", "--data", str(path)])
    assert f"{path} line 3" in line and fragment in line, line


STEP_TIME = [
    ({"t": "3", "gpus": "3"}, "line 3: t must divide the attention heads a: a = 64, t = 3"),
    ({"hidden": "6145"}, "line 3: hidden must be a multiple of the heads"),
    ({"p": "64", "gpus": "512"}, "line 3: p·vp <= n_lay + n_mtp: 64·1 = 64 pipeline chunks for 48 layers"),
    ({"gpus": "16"}, "line 3: d·t·cp·p must equal the device count: 1·8·1·1 = 8, devices = 16"),
    ({"global_batch": "5"}, "line 3: global_batch 5 is not a multiple of d·micro_batch"),
    ({"d": "0"}, "line 3, column d: must be a whole number >= 1, got 0"),
    ({"layers": "1e30"}, "line 3, column layers: expected a whole number, got '1e30'"),
    ({"layers": "1" + "0" * 30}, "line 3, column layers: must be at most 2**10"),
    ({"hidden": "1" + "0" * 30}, "line 3, column hidden: must be at most 2**32"),
    ({"seq": "2048.0"}, "line 3, column seq: expected a whole number, got '2048.0'"),
    ({"vocab": "51200.5"}, "line 3, column vocab: expected a whole number, got '51200.5'"),
    ({"recompute_mode": "sometimes"}, "line 3, column recompute_mode: cannot read 'sometimes'"),
    ({"sequence_parallel": "maybe"}, "line 3, column sequence_parallel: must be true or false"),
    ({"sequence_parallel": ""}, "line 3, column sequence_parallel: must be true or false"),
    ({"measured_iteration_s": "nan"}, "line 3, column measured_iteration_s: expected a number, got 'nan'"),
    ({"measured_iteration_s": "-1.4"}, "line 3, column measured_iteration_s: must be a number > 0"),
    ({"measured_iteration_s": "0"}, "line 3, column measured_iteration_s: must be a number > 0"),
    ({"system": "Frontier"}, "line 3, column system: no catalog system for 'Frontier'"),
]


@pytest.mark.parametrize("changes, fragment", STEP_TIME)
def test_validate_step_time_bad_rows(capsys, tmp_path, changes, fragment):
    path = _one_row_changed(tmp_path, "step-time", changes)
    line = _error(capsys, ["validate", "step-time", "--data", str(path)])
    assert f"{path} {fragment}" in line, line


COLLECTIVES = [
    ({"n_gpus": "٨"}, "column n_gpus: expected a whole number, got '٨'"),
    ({"n_gpus": "８"}, "column n_gpus: expected a whole number, got '８'"),
    ({"n_gpus": "1_6"}, "column n_gpus: expected a whole number, got '1_6'"),
    ({"n_gpus": "1"}, "column n_gpus: must be a whole number >= 2, got 1"),
    ({"n_gpus": "2.5"}, "column n_gpus: expected a whole number, got '2.5'"),
    ({"bytes": "0.5"}, "column bytes: expected a whole number, got '0.5'"),
    ({"bytes": "1e30"}, "column bytes: expected a whole number, got '1e30'"),
    ({"bytes": "9" * 20}, "column bytes: must be at most 2**53"),
    ({"bytes": "-5"}, "column bytes: must be a whole number >= 1, got -5"),
    ({"time_us": "inf"}, "column time_us: expected a number, got 'inf'"),
    ({"time_us": "NaN"}, "column time_us: expected a number, got 'NaN'"),
    ({"time_us": "0"}, "column time_us: must be a number > 0"),
    ({"time_us": "1_000"}, "column time_us: expected a number, got '1_000'"),
    ({"op": "all_sum"}, "column op: unknown collective 'all_sum'"),
    ({"system": "nope"}, "column system: unknown hardware system 'nope'"),
    ({"dtype": "int7"}, "column dtype: unknown data type 'int7'"),
]


@pytest.mark.parametrize("changes, fragment", COLLECTIVES)
def test_validate_collectives_bad_rows(capsys, tmp_path, changes, fragment):
    path = _one_row_changed(tmp_path, "collectives", changes)
    for extra in ([], ["--curves"]):
        line = _error(capsys, ["validate", "collectives", "--data", str(path), *extra])
        assert f"{path} line 3, {fragment}" in line, line


def test_the_first_bad_line_is_reported_whatever_its_column(capsys, tmp_path):
    header, rows = _rows("memory")
    path = write_csv(tmp_path / "data.csv", header, [rows[0], dict(rows[0], activations_GiB_per_gpu="-1"),
                                                  dict(rows[0], model="x", t="3")])
    assert f"{path} line 3, column activations_GiB_per_gpu" in _error(capsys, ["validate", "memory", "--data",
                                                                                str(path)])
    path = write_csv(tmp_path / "data.csv", header, [rows[0], dict(rows[0], model="x", t="3"),
                                                  dict(rows[0], activations_GiB_per_gpu="-1")])
    assert f"{path} line 3: t must divide" in _error(capsys, ["validate", "memory", "--data", str(path)])


def test_rows_with_more_or_fewer_cells_than_the_header(capsys, tmp_path):
    lines = SHIPPED["step-time"].read_text(encoding="utf-8").splitlines()
    path = tmp_path / "data.csv"
    path.write_text("\n".join([lines[0], lines[1], "", lines[2] + ",extra"]) + "\n", encoding="utf-8")
    # The blank line 3 is skipped, and counted: the long row is on line 4.
    assert f"{path} line 4: 33 cells, but the header has 32" in _error(capsys, ["validate", "step-time", "--data",
                                                                              str(path)])
    header = "system,op,n_gpus,bytes,time_us,system"
    path.write_text(header + "\nh100_sxm,all_reduce,8,1024,30.1,h100_sxm\n", encoding="utf-8")
    assert "names 'system' more than once" in _error(capsys, ["validate", "collectives", "--data", str(path)])


# ------------------------------------------------------------------ repeated rows, counts

def test_repeated_rows_give_the_single_rows_figures(capsys, tmp_path):
    for kind in ("memory", "step-time"):
        header, rows = _rows(kind)
        one = write_csv(tmp_path / f"one-{kind}.csv", header, rows[-1:])
        many = write_csv(tmp_path / f"many-{kind}.csv", header, rows[-1:] * 40)
        outputs = []
        for path, n in ((one, 1), (many, 40)):
            assert main(["validate", kind, "--data", str(path)]) == 0
            out = capsys.readouterr().out.splitlines()
            assert out[0] == f"{path.name}: {n} row{'s' if n > 1 else ''} read"
            outputs.append((out, json.loads(out[-1])["rows"]))
        (one_out, one_json), (many_out, many_json) = outputs
        assert len(many_json) == 40 and all(r == one_json[0] for r in many_json)
        assert many_out[2:-1] == one_out[2:3] * 40
    header, rows = _rows("collectives")
    one = write_csv(tmp_path / "one.csv", header, rows[:300])
    many = write_csv(tmp_path / "many.csv", header, rows[:300] * 3)
    a, b = collectives.load_measurements(one), collectives.load_measurements(many)
    assert (a.rows_read, b.rows_read) == (300, 900)
    for x, y in zip(collectives.curves(a), collectives.curves(b)):
        assert np.array_equal(x.measured_s, y.measured_s) and np.array_equal(x.predicted_s, y.predicted_s)
        assert list(x.algorithm) == list(y.algorithm)
    assert [(g.n * 3, g.median_rel_err) for g in collectives.validate(a)] == \
        [(g.n, g.median_rel_err) for g in collectives.validate(b)]
    assert main(["validate", "collectives", "--data", str(many)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "many.csv: 900 rows read"


def test_memory_reports_the_layers_model_states_beside_the_stages():
    """Figure 1 counts the transformer layers' model states: 18 bytes per parameter of the first stage's layers
    (12h² weights, 13h biases and LayerNorm per layer); the stage adds the word embedding."""
    for r in memory.megatron_rows():
        h, n_lay, t, p = {"megatron-22B": (6144, 48, 8, 1), "gpt3-175B": (12288, 96, 8, 8)}[r["model"]]
        layers = 18 * (12 * h * h + 13 * h) * (n_lay // p) / t / 2**30
        assert math.isclose(r["params_and_optimizer_layers_GiB"], layers, rel_tol=1e-12)
        published = r["params_and_optimizer_published_GiB"]
        assert r["params_and_optimizer_layers_rel_err"] == (layers - published) / published or math.isclose(
            r["params_and_optimizer_layers_rel_err"], (layers - published) / published, rel_tol=1e-12)
        assert r["params_and_optimizer_GiB"] > r["params_and_optimizer_layers_GiB"]


def test_curves_are_the_medians_of_each_size():
    """curves() in one sort gives what a mask per (system, op, ranks, size) gives, to the bit."""
    rng = np.random.default_rng(7)
    n = 400
    data = collectives.Measurements(
        system=rng.choice(["dgx_h100", "dgx_a100"], n), op=rng.choice(["all_reduce", "all_gather"], n),
        ranks=rng.choice([2.0, 4.0, 8.0], n), msg_bytes=rng.choice([1024.0, 2.0**20, 2.0**26], n),
        time_s=rng.uniform(1e-5, 1e-2, n), path="random")
    predicted, picked = collectives.predicted_rows(data)
    got = collectives.curves(data)
    expected = []
    for system in np.unique(data.system):
        for op in np.unique(data.op[data.system == system]):
            for ranks in np.unique(data.ranks[(data.system == system) & (data.op == op)]):
                rows = (data.system == system) & (data.op == op) & (data.ranks == ranks)
                sizes = np.unique(data.msg_bytes[rows])
                at = [rows & (data.msg_bytes == s) for s in sizes]
                expected.append((system, op, int(ranks), sizes, [np.median(data.time_s[m]) for m in at],
                                 [np.median(predicted[m]) for m in at], ["/".join(sorted(set(picked[m]))) for m in at]))
    assert len(got) == len(expected)
    for c, (system, op, ranks, sizes, measured, median, labels) in zip(got, expected):
        assert (c.system, c.op, c.ranks) == (system, op, ranks)
        assert c.msg_bytes.tolist() == sizes.tolist() and c.measured_s.tolist() == measured
        assert c.predicted_s.tolist() == median and c.algorithm.tolist() == labels


# ------------------------------------------------------------------ the gate's text readers

def test_text_readers_of_the_gate():
    assert parse_real("x", " 1.5 ") == 1.5 and parse_real("x", "2e-3") == 0.002 and parse_real("x", ".5") == 0.5
    for bad, fragment in (("inf", "expected a number"), ("nan", "expected a number"), ("1_0", "expected a number"),
                          ("٣", "expected a number"), ("0", "> 0"), ("-1", "> 0"), ("1e400", "at most 2**53")):
        with pytest.raises(InputError, match=f"x: .*{re.escape(fragment)}"):
            parse_real("x", bad)
    assert parse_reals("x", ["1", "2.5", "3e2"]) == [1.0, 2.5, 300.0]
    with pytest.raises(InputError, match="x: must be a number > 0, got '0' at index 1"):
        parse_reals("x", ["1", "0", "nan"])
    assert [parse_flag("f", w) for w in ("True", "no", "1", " FALSE ")] == [True, False, True, False]
    for bad in ("maybe", "", "2", "t"):
        with pytest.raises(InputError, match="f: must be true or false"):
            parse_flag("f", bad)
    assert [recompute_mode(w) for w in ("none", "", "sequence_parallel+selective", "full_recompute_no_seqpar")] == \
        ["none", "none", "selective", "full"]
    for bad in ("sometimes", "full+selective", "fullish"):
        with pytest.raises(ValueError, match="recompute mode"):
            recompute_mode(bad)


# ------------------------------------------------------------------ random malformed cells and rows

#: Texts a cell may hold: numbers of every shape, words, other scripts' digits, empty, quotes and separators.
CELLS = st.one_of(
    st.integers(min_value=-10**40, max_value=10**40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", " ", "0", "-0", "1e30", "2.5", "inf", "NaN", "٨", "８", "1_6", "true", "maybe", "none",
                     "full", "sometimes", "selective", "\"", ",", "\n", "Selene", "h100_sxm", "all_reduce"]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12),
)


def _check_run(capsys, kind: str, path: Path) -> None:
    """One run: exit 2 with one line naming the file (and the line, for a cell), or finite positive figures."""
    code = main(["validate", kind, "--data", str(path)])
    captured = capsys.readouterr()
    if code == 2:
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("symcost validate: error: "), captured.err
        assert str(path) in lines[0], lines[0]
        for never in ("Traceback", "could not convert", "array("):
            assert never not in lines[0]
        return
    assert code in (0, 1), captured
    assert captured.err == ""
    summary = json.loads(captured.out.splitlines()[-1])
    numbers = [v for r in summary.get("rows", summary.get("groups", [])) for v in r.values()
               if isinstance(v, float)]
    assert all(math.isfinite(v) for v in numbers), summary
    if kind == "step-time":
        assert all(r["predicted_s"] > 0 and r["measured_s"] > 0 for r in summary["rows"])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["memory", "step-time", "collectives"]), column=st.integers(0, 40), cell=CELLS,
       row=st.integers(0, 2))
@example(kind="memory", column=9, cell="1.1125369292536007e-308", row=0)  # a subnormal: its ratios were infinite
def test_random_malformed_cells(capsys, tmp_path, kind, column, cell, row):
    header, rows = _rows(kind)
    rows = [dict(r) for r in rows[:3]]
    name = header[column % len(header)]
    rows[row][name] = cell
    path = write_csv(tmp_path / f"{kind}.csv", header, rows)
    _check_run(capsys, kind, path)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["memory", "step-time", "collectives"]), keep=st.integers(0, 40),
       extra=st.lists(CELLS, max_size=3), repeat=st.integers(1, 3))
def test_random_malformed_rows(capsys, tmp_path, kind, keep, extra, repeat):
    """Rows cut short or grown, repeated: one error line naming the file and line, or the figures."""
    header, rows = _rows(kind)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for r in rows[:2] * repeat:
        writer.writerow([r[c] for c in header])
    writer.writerow([rows[0][c] for c in header][:keep] + extra)
    path = tmp_path / f"{kind}.csv"
    path.write_text(out.getvalue(), encoding="utf-8")
    _check_run(capsys, kind, path)


def test_python_api_errors_name_the_file_line_and_column(tmp_path):
    path = _one_row_changed(tmp_path, "memory", {"micro_batch": "2.5"})
    with pytest.raises(ValueError, match=r"line 3, column micro_batch: expected a whole number, got '2.5'"):
        memory.megatron_rows(path)
    path = _one_row_changed(tmp_path, "step-time", {"t": "3", "gpus": "3"})
    with pytest.raises(ValueError, match=r"line 3: t must divide the attention heads"):
        step_time.step_time_rows(path)
    table = read_table(SHIPPED["memory"])
    assert len(table) == 4 and table.where(3, "h").endswith("megatron_memory_figure1.csv line 5, column h")
