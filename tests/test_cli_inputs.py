"""Bad input on the command line: one line naming the field and the value, exit 2, never a traceback."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import types
from unittest import mock

import numpy as np
import pytest

from codegen.cli import build_parser, main, version

LLAMA = ["--model", "llama2-7b"]


def _error(capsys, argv):
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2, (argv, captured.out, captured.err)
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"symcost {argv[0]}: error: "), captured.err
    assert "Traceback" not in captured.err
    return lines[0]


@pytest.mark.parametrize("layout, fragment", [
    ("d=٨,t=1,p=1,m=1", "layout d: expected a whole number, got '٨'"),
    ("d=1_0,t=1,p=1,m=1", "layout d: expected a whole number, got '1_0'"),
    ("d=" + "9" * 30 + ",t=1,p=1,m=1", "layout d: must be at most 2**20"),
    ("d=9223372036854775808,t=1,p=1,m=1", "layout d: must be at most 2**20"),
    ("d=1048576,t=1048576,p=1,m=1", "devices: d·t·cp·p = 1048576·1048576·1·1 = 1099511627776 exceeds 2**30"),
    ("m=100000000000000000000", "layout m: must be at most 2**32"),
    ("s=4294967297", "layout s: must be at most 2**32"),
])
def test_eval_layout_numbers(capsys, layout, fragment):
    assert fragment in _error(capsys, ["eval", *LLAMA, "--layout", layout])


@pytest.mark.parametrize("devices, fragment", [
    ("٨", "--devices: expected a whole number, got '٨'"),
    ("0", "--devices: must be a whole number >= 1, got 0"),
    (str(2**64), "--devices: must be at most 2**30"),
    ("16", "d·t·cp·p must equal the device count: 4·2·1·2 = 16"),  # llama's own layout has 16: accepted below
])
def test_eval_devices(capsys, devices, fragment):
    if devices == "16":
        assert main(["eval", *LLAMA, "--devices", devices]) == 0
        capsys.readouterr()
        assert "= 16, devices = 8" in _error(capsys, ["eval", *LLAMA, "--devices", "8"])
        return
    assert fragment in _error(capsys, ["eval", *LLAMA, "--devices", devices])


def test_eval_json_is_json_with_units(capsys):
    assert main(["eval", *LLAMA, "--json"]) == 0
    out = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert set(out) == {"stages", "per_dim", "units"} and "bytes" in out["units"]


def test_eval_overflow_is_an_error_not_inf(capsys, monkeypatch):
    from codegen.cli import eval as eval_cli

    real = eval_cli.stage_results.__globals__["StagePricer"].price_batch

    def overflowing(self, *args, **kwargs):
        prices = real(self, *args, **kwargs)
        prices.stages["total"][0, 0] = np.inf
        return prices

    monkeypatch.setattr(eval_cli.StagePricer, "price_batch", overflowing)
    for extra in ([], ["--json"]):
        assert "stage total: the result is not finite (inf)" in _error(capsys, ["eval", *LLAMA, *extra])


def test_sensitivity_json_has_units_and_no_nan(capsys):
    assert main(["sensitivity", *LLAMA, "--degrees", "t,p", "--json"]) == 0
    out = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert set(out["units"]) == {"value", "derivative", "elasticity", "doubling_ratio"}


def test_version_and_models(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"symcost {version()}"
    assert version()[0].isdigit()
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:4] == ["model", "layers", "hidden", "heads"]
    assert any(line.split()[:5] == ["llama2-7b", "32", "4096", "32", "32"] for line in out.splitlines())
    assert main(["models", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["deepseek-v3"]["experts"] == 256 and rows["qwen3-72b"]["kv_heads"] == 8


@pytest.mark.parametrize("text, fragment", [
    ('{"format": 1, "cases": []}', "holds no cases"),
    ('{"format": 2, "cases": [{"id": "x", "function": "f", "inputs": {}, "output": 1}]}', "unknown format 2"),
    ('{"format": true, "cases": [{"id": "x", "function": "f", "inputs": {}, "output": 1}]}', "unknown format True"),
    ('{"format": 1, "cases": [{"id": "x", "function": "f", "inputs": {"t": NaN}, "output": 1}]}', "NaN"),
    ('{"format": 1, "cases": [{"id": "x", "function": "f", "inputs": {"t": 1e400}, "output": 1}]}', "1e400"),
    ('{"format": 1, "cases": [{"id": "x", "function": "f", "inputs": {"t": 1e20}, "output": 1}]}', "inputs.t"),
    ('{"format": 1, "cases": [{"id": 3, "function": "f", "inputs": {}, "output": 1}]}', "must be strings"),
    ('[1, 2]', "is not a case file"),
])
def test_check_case_files(capsys, tmp_path, text, fragment):
    path = tmp_path / "cases.json"
    path.write_text(text)
    line = _error(capsys, ["check", "--cases", str(path)])
    assert str(path) in line and fragment in line


def test_check_binary_and_directory_name_the_file(capsys, tmp_path):
    path = tmp_path / "bin.json"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\xff")
    assert str(path) in _error(capsys, ["check", "--cases", str(path)])
    assert str(tmp_path) in _error(capsys, ["check", "--cases", str(tmp_path)])


@pytest.mark.parametrize("name", ["", "dir", "x.txt", "missing/x.png", "mine.png"])
def test_plot_path_refused_before_pricing(capsys, tmp_path, name):
    (tmp_path / "dir").mkdir()
    (tmp_path / "mine.png").write_bytes(b"mine")
    target = "" if name == "" else str(tmp_path / name)
    assert "--plot" in _error(capsys, ["sensitivity", *LLAMA, "--degrees", "t", "--plot", target])
    assert (tmp_path / "mine.png").read_bytes() == b"mine"


def _fake_matplotlib(written: list):
    """A stand-in matplotlib whose figure records where and in which format it is saved."""
    matplotlib = types.ModuleType("matplotlib")
    matplotlib.use = lambda backend: None
    pyplot = types.ModuleType("matplotlib.pyplot")

    def subplots(rows=1, columns=1, squeeze=True, **kwargs):
        fig = mock.MagicMock()

        def savefig(target, format=None, **kw):
            written.append((getattr(target, "name", target), format))
            target.write(b"fake " + format.encode())

        fig.savefig.side_effect = savefig
        axes = np.empty((rows, columns), dtype=object)  # filled one by one: a MagicMock looks like a sequence
        for index in np.ndindex(axes.shape):
            axes[index] = mock.MagicMock()
        return fig, axes[0, 0] if squeeze and axes.size == 1 else axes

    pyplot.subplots = subplots
    pyplot.close = lambda fig: None
    matplotlib.pyplot = pyplot
    return matplotlib, pyplot


def test_plot_writes_exactly_the_path_given_and_says_so(capsys, tmp_path, monkeypatch):
    written: list = []
    matplotlib, pyplot = _fake_matplotlib(written)
    monkeypatch.setitem(sys.modules, "matplotlib", matplotlib)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", pyplot)
    path = tmp_path / "curve.SVG"
    assert main(["sensitivity", *LLAMA, "--degrees", "t", "--plot", str(path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote {path}"
    assert written == [(str(path), "svg")] and path.read_bytes() == b"fake svg"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curve.SVG"]
    # A plot of an earlier run is a file like any other: refused before pricing, kept as it was.
    line = _error(capsys, ["sensitivity", *LLAMA, "--degrees", "t", "--plot", str(path), "--json"])
    assert line.endswith(f"--plot {path}: the file exists; symcost never overwrites a file (remove it first)")
    assert path.read_bytes() == b"fake svg" and len(written) == 1
    other = tmp_path / "other.pdf"
    assert main(["sensitivity", *LLAMA, "--degrees", "t", "--plot", str(other), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["objective"] and captured.err.splitlines()[-1] == f"wrote {other}"
    assert written[-1] == (str(other), "pdf")


@pytest.mark.parametrize("command", ["sensitivity", "search"])
def test_a_plot_file_that_appears_meanwhile_is_kept(capsys, tmp_path, monkeypatch, command):
    # The path is checked before pricing and created exclusively after it: a file someone writes in between
    # is not overwritten (one line, exit 2) by either command that plots.
    matplotlib, pyplot = _fake_matplotlib([])
    monkeypatch.setitem(sys.modules, "matplotlib", matplotlib)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", pyplot)
    path = tmp_path / "late.png"
    from codegen.cli import _output

    checked = _output.new_file

    def check_then_race(text, option, formats):
        found = checked(text, option, formats)
        path.write_bytes(b"theirs")
        return found

    monkeypatch.setattr(f"codegen.cli.{command}.new_file", check_then_race)
    argv = {"sensitivity": [*LLAMA, "--degrees", "t"],
            "search": [*LLAMA, "--devices", "8", "--system", "dgx_a100", "--global-batch", "16", "--no-progress",
                       "--top", "2"]}[command]
    line = _error(capsys, [command, *argv, "--plot", str(path)])
    assert line.endswith(f"--plot {path}: the file exists; symcost never overwrites a file (remove it first)")
    assert path.read_bytes() == b"theirs"


def test_derive_reads_numbers_and_algorithms_as_eval_does(capsys):
    assert "levels: a hierarchy of 1 to 3 levels" in _error(capsys, ["derive", "estimate_comm_score", "--levels", "٢"])
    assert "cp_algo: unknown CP algorithm 'hybird'" in _error(capsys, ["derive", "cp_traffic", "--algo", "hybird",
                                                                      "--attention", "gqa"])
    assert "cp_algo: unknown CP algorithm 'hybird'" in _error(capsys, ["eval", *LLAMA, "--layout", "cp_algo=hybird"])
    for alias in ("hybird_cp", "hybrid"):  # the original's misspelling and the short name: both, everywhere
        assert main(["derive", "cp_traffic", "--algo", alias, "--attention", "gqa"]) == 0
        assert main(["eval", *LLAMA, "--layout", f"cp_algo={alias}"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("kind", ["collectives", "memory", "step-time"])
def test_validate_data_files_name_the_file(capsys, tmp_path, kind):
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00bad")
    header = {"collectives": "system,op,n_gpus,bytes,time_us",
              "memory": "model,recompute,h,a,L,t,p,seq,micro_batch,params_and_optimizer_GiB_per_gpu,"
                        "activations_GiB_per_gpu",
              "step-time": "model,recompute_mode,sequence_parallel,gpus,t,p,d,pipeline_interleaving,global_batch,"
                           "micro_batch,seq,hidden,ffn,layers,heads,head_dim,vocab,system,measured_iteration_s"}[kind]
    empty = tmp_path / "empty.csv"
    empty.write_text(header + "\n")
    for path, fragment in ((tmp_path / "absent.csv", "cannot read: No such file or directory"),
                           (tmp_path, "cannot read: Is a directory"),
                           (binary, "not a UTF-8 CSV file")):
        assert f"--data {path}: {fragment}" in _error(capsys, ["validate", kind, "--data", str(path)])
    assert f"--data {empty}: no rows below the header" in _error(capsys, ["validate", kind, "--data", str(empty)])


@pytest.mark.parametrize("argv, fragment", [
    (["eval", *LLAMA, "--cost", "money"], "argument --cost: invalid choice: 'money'"),
    (["eval", "--layout", "d=2"], "the following arguments are required: --model"),
    (["collective", "all_gather", "--system", "dgx_a100", "--ranks", "2.5", "--bytes", "4MiB"],
     "argument --ranks: invalid int value: '2.5'"),
    (["sensitivity", *LLAMA, "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
])
def test_argument_errors_are_one_line_too(capsys, argv, fragment):
    # argparse's own errors (a bad choice, a missing or unknown argument) print its usage first; here they keep
    # the project's form, the usage one --help away.
    line = _error(capsys, argv)
    assert fragment in line and line.endswith(f"(see symcost {argv[0]} --help)")


def test_a_command_is_required_and_named(capsys):
    for argv, fragment in (([], "the following arguments are required: COMMAND"),
                           (["evaluate"], "argument COMMAND: invalid choice: 'evaluate'")):
        assert main(argv) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("symcost: error: ") and fragment in lines[0]


def _command_paths(parser, path=()):
    """Every command and sub-command of the parser, as the argv that names it."""
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _command_paths(child, (*path, name))


def test_every_command_prints_its_help(capsys):
    # argparse %-formats each sub-command's one-line help when its parent prints --help: a bare '%' there
    # ('2 %') was a traceback. Every level is asked, the top one included.
    paths = list(_command_paths(build_parser()))
    assert ("validate", "memory") in paths and len(paths) > 12
    for path in paths:
        assert main([*path, "--help"]) == 0, path
        captured = capsys.readouterr()
        assert captured.out.startswith(f"usage: {' '.join(('symcost', *path))}") and not captured.err, path


def test_only_the_command_run_is_imported():
    # `symcost --help` lists every command from their names and help alone, as the whole parser does; running one
    # command imports its own module and no other command's (each brings its pricers or validation tables).
    assert build_parser(()).format_help() == build_parser().format_help()
    code = ("import sys\nfrom codegen.cli import COMMANDS, main\n"
            "for argv in (['--help'], ['--catalog', '.', 'models', '--help']):\n"
            "    main(argv)\n"
            "    print(sorted(n for n in COMMANDS if f'codegen.cli.{n}' in sys.modules), 'numpy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "['models'] True", done.stdout
    assert "[] False" in done.stdout.splitlines(), done.stdout  # --help: no command, not even NumPy


@pytest.mark.parametrize("extra, fragment", [
    (["--ranks", "1", "--bytes", "4MiB"], "ranks: a collective needs a whole number of ranks from 2 to 2**30"),
    (["--ranks", str(2**30 + 1), "--bytes", "4MiB"], f"got {2**30 + 1}"),
    (["--ranks", "8", "--bytes", "1e20"], "bytes: must be a size > 0 and at most 2**53"),
    (["--ranks", "8", "--bytes", "4MiB", "--dtype", "foo"], "dtype: unknown data type 'foo'"),
    # 12 ranks on nodes of 8 would be priced as two full nodes: the placement is asked for instead.
    (["--ranks", "12", "--bytes", "4MiB"], "--ranks 12: spans dgx_a100 nodes of 8 GPUs without filling them"),
])
def test_collective_ranks_bytes_and_dtype_are_checked_for_every_op(capsys, extra, fragment):
    # The dtype only changes a reduction's candidates, but a misspelt name is an error for an all-gather too.
    assert fragment in _error(capsys, ["collective", "all_gather", "--system", "dgx_a100", *extra])


_SPLIT = ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
_405B = ["eval", "--model", "llama3.1-405b", "--device", "dgx_h100", "--cost", "step-time", "--json"]


def _step_json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_megatrons_accounted_pipeline_split_states_what_the_even_split_cannot(capsys):
    # 126 layers over PP 16 x VP 8: the even split leaves a chunk empty; with the embedding and the loss counted
    # as layers (Megatron-Core) each chunk holds one, the first and the last none.
    layout = ["--layout", "d=8,t=8,p=16,vp=8,m=64,b=1"]
    assert "leaves a chunk empty" in _error(capsys, [*_405B, *layout])
    res = _step_json(capsys, [*_405B, *layout, *_SPLIT])
    assert len(res["memory"]) == 16 and res["step_time_s"] > 0
    assert "127 do not divide over p = 16" in _error(capsys, [*_405B, *layout, _SPLIT[1]])
    assert _error(capsys, [*_405B, *layout, _SPLIT[1]]).startswith(f"symcost eval: error: {_SPLIT[1]}: ")


def test_sensitivity_reads_the_accounted_pipeline_split(capsys):
    # The same layout as above: refused on the even split, priced on Megatron-Core's; doubling p (32 stages of 4
    # counted layers over VP 8) is reported invalid under the split, naming it.
    base = ["sensitivity", "--model", "llama3.1-405b", "--device", "dgx_h100", "--cost", "time", "--json",
            "--layout", "d=8,t=8,p=16,vp=8,m=64,b=1"]
    assert "leaves a chunk empty" in _error(capsys, base)
    res = _step_json(capsys, [*base, *_SPLIT])
    assert res["value"] > 0 and res["degrees"]["p"]["doubling_ratio"] is None
    assert _error(capsys, [*base, _SPLIT[1]]).startswith(f"symcost sensitivity: error: {_SPLIT[1]}: ")
    # Where both splits agree (two stages of 63 decoder layers), the answers are the same.
    agree = [*base[:-1], "d=32,t=8,p=2,m=16,b=1"]
    assert _step_json(capsys, [*agree, *_SPLIT]) == _step_json(capsys, agree)


def test_the_accounted_split_prices_as_the_even_split_where_they_agree(capsys):
    # 126 + 2 over two stages: 63 decoder layers each, as the even split gives them. Only the notes differ: the
    # model's vp 8 makes 16 chunks, which Megatron-Core builds evenly from 126 + 2 counted layers, not from 126.
    layout = ["--layout", "d=32,t=8,p=2,m=16,b=1"]
    accounted, even = _step_json(capsys, [*_405B, *layout, *_SPLIT]), _step_json(capsys, [*_405B, *layout])
    assert accounted.pop("notes") == [] and even.pop("notes")[0].startswith("126 layers do not fill p·vp = 16")
    assert accounted == even


def test_the_step_time_names_a_recompute_list_that_does_not_fit(capsys):
    # qwen3-72b's pipeline: 8 stages of 10 layers (tests/test_recompute_list_step_time.py prices lists that fit).
    base = ["eval", "--model", "qwen3-72b", "--device", "dgx_h100", "--cost", "step-time", "--recompute"]
    assert "stage 0 holds 10 layers, cannot fully recompute 11" in _error(capsys, [*base, "11,0,0,0,0,0,0,0"])
    assert "needs one entry per stage: 2 entries [1, 2], p = 8" in _error(capsys, [*base, "1,2"])
