"""The command line: check and derive."""

from __future__ import annotations

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
