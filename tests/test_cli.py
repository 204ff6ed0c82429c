"""The command line: check and derive."""

from __future__ import annotations

import dataclasses
import json

import pytest

from codegen.cli import main
from conftest import CASES_FILE

CP_FUNCTIONS = {"_cp_resolve_topology", "cp_traffic", "cp_comm_layer_detailed"}


def _write_cases(tmp_path, cases):
    path = tmp_path / "cases.json"
    path.write_text(json.dumps({"format": 1, "count": len(cases), "cases": cases}))
    return path


@pytest.fixture(scope="module")
def cp_cases():
    data = json.loads(CASES_FILE.read_text())
    return [c for c in data["cases"] if c["function"] in CP_FUNCTIONS]


def test_check_passes_every_cp_case(tmp_path, cp_cases, capsys):
    assert main(["check", "--cases", str(_write_cases(tmp_path, cp_cases))]) == 0
    out = capsys.readouterr().out
    for name in CP_FUNCTIONS:
        assert name in out
    assert f"checked {len(cp_cases)} cases of 3 functions" in out


def test_check_fails_on_a_wrong_number(tmp_path, cp_cases, capsys):
    bad = json.loads(json.dumps(cp_cases))
    target = next(c for c in bad if c["function"] == "cp_traffic" and c["output"] > 0)
    target["output"] *= 1 + 1e-6
    assert main(["check", "--cases", str(_write_cases(tmp_path, bad))]) == 1
    assert target["id"] in capsys.readouterr().out


def test_check_fails_on_a_wrong_label(tmp_path, cp_cases, capsys):
    bad = json.loads(json.dumps(cp_cases))
    target = next(c for c in bad if c["function"] == "_cp_resolve_topology")
    target["output"]["topology"] = "cross-node" if target["output"]["topology"] != "cross-node" else "mixed"
    assert main(["check", "--cases", str(_write_cases(tmp_path, bad))]) == 1


def test_check_fails_on_an_unknown_function_unless_allowed(tmp_path, cp_cases, capsys):
    cases = cp_cases[:3] + [{"id": "nope#0", "function": "no_such_function", "inputs": {}, "output": 0.0}]
    path = _write_cases(tmp_path, cases)
    assert main(["check", "--cases", str(path)]) == 1
    assert "not implemented: no_such_function (1)" in capsys.readouterr().out
    assert main(["check", "--cases", str(path), "--allow-missing"]) == 0


def test_check_rejects_a_malformed_file(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    assert main(["check", "--cases", str(path)]) == 2
    assert "is not JSON" in capsys.readouterr().err
    assert main(["check", "--cases", str(tmp_path / "missing.json")]) == 2


def test_derive_prints_a_closed_form(capsys):
    assert main(["derive", "cp_traffic", "--algo", "ulysses_cp", "--attention", "gqa"]) == 0
    out = capsys.readouterr().out
    assert "cp_ulysses_gqa_traffic_bytes  [bytes]" in out
    assert "bytes_compute" in out and "source:" in out


def test_derive_latex(capsys):
    assert main(["derive", "cp_traffic", "--algo", "colossalai_cp", "--attention", "mha", "--latex"]) == 0
    out = capsys.readouterr().out
    assert "\\frac{" in out


@pytest.mark.parametrize("argv,fragment", [
    (["derive", "cp_traffic", "--algo", "magic_cp", "--attention", "gqa"], "cp_algo: unknown CP algorithm 'magic_cp'"),
    (["derive", "cp_traffic", "--algo", "ulysses_cp", "--attention", "linear"], "attention: unknown attention type"),
    (["derive", "cp_traffic", "--algo", "ulysses_cp"], "needs --attention"),
    (["derive", "no_such_formula"], "unknown formula or function 'no_such_formula'"),
])
def test_derive_bad_input(argv, fragment, capsys):
    assert main(argv) == 2
    assert fragment in capsys.readouterr().err


def test_eval_cost_step_time_prices_one_layout_as_the_search_does(capsys):
    """--cost step-time: the step time and its parts of one layout as StepTimePricer prices it with the time
    family's communication, step = compute + bubble + exposed communication, and each stage's memory as
    stage_memory gives it in the run's precision; --precision applies here and to --memory only."""
    import numpy as np

    from codegen.configs import load_model, parse_layout
    from codegen.pricing.chunks import Chunk, Setting
    from codegen.pricing.memory import DEFAULT_SETTINGS, stage_memory
    from codegen.pricing.step_time import StepTimePricer, time_family_comm

    args = ["eval", "--model", "llama2-7b", "--layout", "d=8,t=2,p=2,m=16,b=1", "--device", "dgx_h100",
            "--cost", "step-time", "--recompute", "selective", "--json"]
    assert main([*args, "--precision", "fp8"]) == 0
    got = json.loads(capsys.readouterr().out)
    model = load_model("llama2-7b")
    layout = parse_layout("d=8,t=2,p=2,m=16,b=1", model.layout, recompute="selective")
    values = {k: np.array([getattr(layout, k)]) for k in ("d", "t", "p", "cp", "ep", "etp", "vp", "b", "m")}
    comm = time_family_comm(model, "dgx_h100")
    chunk = Chunk(Setting("selective", 1, layout.cp_algo), values, np.zeros(1, np.int64), model)
    want = StepTimePricer(model, system="dgx_h100", comm=comm, precision="fp8").price(values, "selective", chunk)
    for key in ("step_time_s", "compute_s", "bubble_s", "comm_s", "stage_flops"):
        assert got[key] == float(want[key][0])
    assert abs(got["step_time_s"] - (got["compute_s"] + got["bubble_s"] + got["comm_s"])) <= 1e-12 * got["step_time_s"]
    assert got["exposed_comm_s"] == got["comm_s"] > 0 and got["precision"] == "fp8"
    fp8 = dataclasses.replace(DEFAULT_SETTINGS, precision="fp8")  # (the memory of the run's precision)
    assert [row["total_bytes"] for row in got["memory"]] == [
        row["total"] for row in stage_memory(model, layout, system="dgx_h100", settings=fp8)["stages"]]
    for extra, message in ((["--order", "tp-cp-ep-dp-pp"], "--order tp-cp-ep-dp-pp: --cost step-time"),
                           (["--memory"], "--memory: --cost step-time prints"),
                           (["--zero-level", "2"], "--zero-level 2: --cost step-time")):
        assert main([*args, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1
    assert main(["eval", "--model", "llama2-7b", "--precision", "fp8"]) == 2
    assert "--precision fp8: the precision of --cost step-time, --cost time" in capsys.readouterr().err
    assert main(["eval", "--model", "llama2-7b", "--device", "A2", "--cost", "step-time"]) == 2
    assert "--device A2: the catalog entry has no [gpu] table" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["eval", "--model", "llama2-7b", "--layout", "d=8,t=2,p=2,m=16,b=1", "--cost", "step-time", "--json"],
    ["eval", "--model", "llama2-7b", "--layout", "d=8,t=2,p=2,m=16,b=1", "--cost", "time", "--json"],
    ["sensitivity", "--model", "llama2-7b", "--layout", "d=8,t=2,p=2,m=16,b=1", "--cost", "time", "--json"],
    ["derive", "--model", "llama2-7b", "--layout", "d=8,t=2,p=2,m=16,b=1"],
])
def test_system_is_the_same_option_as_device(argv, capsys):
    """search, collective, validate and calibrate name the catalog system --system; eval, sensitivity and derive
    take it under that name too, as the same option as their --device: the same output for either spelling, and
    the one error line for a system without GPU facts."""
    outputs = []
    for flag in ("--device", "--system"):
        assert main([*argv, flag, "dgx_h100"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and outputs[0]
    if "derive" not in argv:
        assert main([*argv, "--system", "A3"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "A3" in err


def test_eval_seq_len_is_the_layouts_s(capsys):
    """--seq-len N prices as s=N in --layout does, for the volumes and the step time alike; both at once, or a
    length not in ASCII digits, is one error line."""
    base = ["eval", "--model", "llama2-7b", "--json"]
    for extra in ([], ["--device", "dgx_h100", "--cost", "step-time"]):
        assert main([*base, "--layout", "d=4,t=2,p=2", "--seq-len", "8192", *extra]) == 0
        by_option = json.loads(capsys.readouterr().out)
        assert main([*base, "--layout", "d=4,t=2,p=2,s=8192", *extra]) == 0
        by_layout = json.loads(capsys.readouterr().out)
        assert main([*base, "--layout", "d=4,t=2,p=2", *extra]) == 0
        default = json.loads(capsys.readouterr().out)
        assert by_option == by_layout != default
    for extra, message in ((["--layout", "s=8192", "--seq-len", "4096"], "--seq-len 4096: --layout states s="),
                           (["--seq-len", "8k"], "--seq-len: expected a whole number, got '8k'")):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1
