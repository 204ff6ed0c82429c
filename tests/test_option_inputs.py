"""Options of ``collective``, ``eval`` and ``sensitivity``: numbers through the gate, and options a run does not read
refused when given (one line naming the option and its value, exit 2), never ignored."""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from codegen.cli import main
from codegen.cli.collective import parse_size
from codegen.runtime.inputs import InputError, parse_number

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ["--model", "llama2-7b", "--layout", "d=2,t=2,p=2"]
GPU = ["--device", "dgx_h100"]


def _error(capsys, argv: list[str]) -> str:
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2, (argv, captured.out, captured.err)
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"symcost {argv[0]}: error: "), captured.err
    assert "Traceback" not in captured.err and not captured.out
    return lines[0]


# ----------------------------------------------------------------------------------------- collective


@pytest.mark.parametrize("ranks", ["٨", "８", "1_6", "2.5", "8 8", "", "0x8", "+"])
def test_collective_ranks_are_ascii_digits(capsys, ranks):
    line = _error(capsys, ["collective", "all_reduce", "--system", "dgx_h100", "--ranks", ranks, "--bytes", "4M"])
    assert f"argument --ranks: invalid int value: {ranks!r}" in line


@pytest.mark.parametrize("per", ["٨", "1.5", "", "+"])
def test_collective_ranks_per_node_are_ascii_digits(capsys, per):
    line = _error(capsys, ["collective", "all_gather", "--system", "dgx_h100", "--ranks", "16", "--ranks-per-node",
                           per, "--bytes", "4M"])
    assert f"argument --ranks-per-node: invalid int value: {per!r}" in line


@pytest.mark.parametrize("size, fragment", [
    ("0.5", "--bytes: a whole number of bytes, got '0.5' (0.5 bytes)"),
    ("1.3K", "--bytes: a whole number of bytes, got '1.3K' (1331.2 bytes)"),
    ("0.0000000001GB", "--bytes: a whole number of bytes, got '0.0000000001GB' (0.1 bytes)"),
    ("٥", "--bytes: not a size, got '٥'"),
    ("1_0", "--bytes: not a size, got '1_0'"),
    ("0", "--bytes: must be a size > 0"),
    ("1e400", "--bytes: must be a size > 0 and at most 2**53 bytes (whole numbers exact in float64), got '1e400'"),
    ("1e999999999999999999", "got '1e999999999999999999'"),
    (str(2**53 + 1), f"got '{2**53 + 1}'"),
])
def test_collective_bytes_are_whole_and_bounded(capsys, size, fragment):
    line = _error(capsys, ["collective", "all_reduce", "--system", "dgx_h100", "--ranks", "8", "--bytes", size])
    assert fragment in line


def test_collective_sizes_with_a_fraction_that_make_whole_bytes_are_taken(capsys):
    assert parse_size("1.5K") == 1536 and parse_size("0.5KiB") == 512 and parse_size("1.5KB") == 1500
    assert parse_size("1e3") == 1000 and parse_size(str(2**53)) == 2.0**53
    assert main(["collective", "all_reduce", "--system", "dgx_h100", "--ranks", "8", "--bytes", "1.5K", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bytes"] == 1536


@settings(max_examples=60, deadline=None)
@given(st.decimals(min_value=Decimal("0.001"), max_value=Decimal(10**6), places=3),
       st.sampled_from(["", "B", "K", "KiB", "KB", "M", "MB"]))
def test_parse_size_takes_exactly_the_whole_byte_counts(number, unit):
    scale = {"": 1, "B": 1, "K": 1024, "KiB": 1024, "KB": 1000, "M": 2**20, "MB": 10**6}[unit]
    exact = number * scale
    if exact == exact.to_integral_value() and exact > 0:
        assert parse_size(f"{number}{unit}") == float(exact)
    else:
        with pytest.raises(InputError, match="--bytes"):
            parse_size(f"{number}{unit}")


# ----------------------------------------------------------------------------------------- the number gate


@pytest.mark.parametrize("text", ["٥", "５", "1_0", "inf", "-inf", "nan", "1e400", "", "1.2.3", "0x10", "1e", "-1"])
def test_parse_number_refuses_what_float_would_take(text):
    with pytest.raises(InputError, match="^--reserve: ") as info:
        parse_number("--reserve", text)
    assert repr(text) in str(info.value)


def test_parse_number_reads_ascii_decimal_notation():
    assert parse_number("x", "6.5") == 6.5 and parse_number("x", " .5 ") == 0.5 and parse_number("x", "1e3") == 1e3
    assert parse_number("x", "2.") == 2.0 and parse_number("x", "-1", minimum=-2) == -1.0
    with pytest.raises(InputError, match=r"x: must be at most 2\*\*32"):
        parse_number("x", "5e9", maximum=2**32)


# ----------------------------------------------------------------------------------------- eval


@pytest.mark.parametrize("extra, fragment", [
    # memory settings under --cost time / --convention consistent: read with --memory only
    ([*GPU, "--cost", "time", "--zero-level", "9"], "--zero-level 9: a memory setting"),
    ([*GPU, "--cost", "time", "--convention", "consistent", "--bytes-param", "-1"], "--bytes-param -1: a memory setting"),
    ([*GPU, "--cost", "time", "--reserve", "2"], "--reserve 2: a memory setting"),
    ([*GPU, "--cost", "time", "--no-flash-attention"], "--no-flash-attention: a memory setting"),
    (["--convention", "consistent", "--bytes-optimizer", "8"], "--bytes-optimizer 8: a memory setting"),
    (["--convention", "consistent", "--zero-level", "1"], "--convention consistent does not read it"),
    # the original convention's settings elsewhere
    ([*GPU, "--cost", "time", "--ttype", "TIME"], "--ttype TIME: a setting of the original convention"),
    ([*GPU, "--cost", "time", "--ttype", "FLOP"], "--ttype FLOP: a setting of the original convention"),
    ([*GPU, "--cost", "time", "--with-recomp"], "--with-recomp: a setting of the original convention"),
    (["--convention", "consistent", "--ttype", "TIME"], "--ttype TIME: a setting of the original convention"),
    ([*GPU, "--cost", "time", "--convention", "original"], "--convention original: --cost time prices seconds"),
    # the rank order without --cost time
    (["--order", "zz"], "--order zz: the rank order places the groups of --cost time"),
    (["--order", "tp-cp-ep-dp-pp"], "--order tp-cp-ep-dp-pp: the rank order"),
    (["--convention", "consistent", "--order", "tp-cp-ep-dp-pp"], "--order tp-cp-ep-dp-pp: the rank order"),
    ([*GPU, "--memory", "--order", "zz"], "--order zz: the rank order"),
    # memory settings without --memory, and their numbers
    (["--zero-level", "2"], "--zero-level 2: a memory setting; it needs --memory"),
    ([*GPU, "--memory", "--reserve", "٥"], "--reserve: expected a number, got '٥'"),
    ([*GPU, "--memory", "--reserve", "1_0"], "--reserve: expected a number, got '1_0'"),
    ([*GPU, "--memory", "--reserve", "1e400"], "--reserve: must be a finite number, got '1e400'"),
    ([*GPU, "--memory", "--bytes-grad", "5e9"], "--bytes-grad: must be at most 2**32"),
    ([*GPU, "--memory", "--bytes-param", "２"], "--bytes-param: expected a number, got '２'"),
])
def test_eval_options_that_do_not_apply_or_do_not_parse(capsys, extra, fragment):
    assert fragment in _error(capsys, ["eval", *LLAMA, *extra])


def test_eval_options_are_read_where_they_apply(capsys):
    def run(*extra):
        assert main(["eval", *LLAMA, *extra, "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    default = run(*GPU, "--cost", "time")
    assert run(*GPU, "--cost", "time", "--order", "tp-cp-ep-dp-pp") == default  # the default order, given
    assert run(*GPU, "--cost", "time", "--convention", "consistent") == default  # what --cost time is
    assert default["order"] == "tp-cp-ep-dp-pp"
    wide = ["--layout", "d=4,t=8,p=2"]  # 64 GPUs over 8 nodes: which groups stay inside a node depends on the order
    assert (run(*GPU, "--cost", "time", *wide, "--order", "dp-tp-cp-ep-pp")["stages"]
            != run(*GPU, "--cost", "time", *wide)["stages"])
    assert run("--ttype", "TIME")["units"] != run("--ttype", "FLOP")["units"] == run()["units"]
    assert run(*GPU, "--memory", "--reserve", "6.5")["memory"]["reserve_bytes"] == 6.5 * 2**30
    assert run("--convention", "consistent")["convention"] == "consistent"


# ----------------------------------------------------------------------------------------- sensitivity


@pytest.mark.parametrize("extra, fragment", [
    ([*GPU, "--cost", "time", "--zero-level", "3"], "--zero-level 3: a memory setting"),
    ([*GPU, "--cost", "time", "--reserve", "1"], "--reserve 1: a memory setting"),
    ([*GPU, "--cost", "time", "--ttype", "FLOP"], "--ttype FLOP: applies to the volume cost only"),
    ([*GPU, "--cost", "time", "--objective", "memory"], "--objective memory: applies to the volume cost only"),
    (["--order", "zz"], "--order zz: the rank order places the groups of --cost time"),
    ([*GPU, "--objective", "memory", "--order", "tp-cp-ep-dp-pp"], "--order tp-cp-ep-dp-pp: the rank order"),
    ([*GPU, "--objective", "memory", "--ttype", "TIME"], "--ttype TIME: a setting of the communication volumes"),
    ([*GPU, "--objective", "memory", "--with-recomp"], "--with-recomp: a setting of the communication volumes"),
    ([*GPU, "--objective", "memory", "--reserve", "٥"], "--reserve: expected a number, got '٥'"),
    (["--bytes-grad", "2"], "--bytes-grad 2: a memory setting; it needs --objective memory"),
])
def test_sensitivity_options_that_do_not_apply_or_do_not_parse(capsys, extra, fragment):
    assert fragment in _error(capsys, ["sensitivity", *LLAMA, "--degrees", "t", *extra])


def test_sensitivity_options_are_read_where_they_apply(capsys):
    def run(*extra):
        assert main(["sensitivity", *LLAMA, "--degrees", "t", *extra, "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    timed = run(*GPU, "--cost", "time")
    assert run(*GPU, "--cost", "time", "--order", "tp-cp-ep-dp-pp") == timed
    assert run("--ttype", "FLOP") == run()
    assert run(*GPU, "--objective", "memory", "--reserve", "2")["objective"] == "memory"


def test_a_refused_option_is_one_line_without_a_traceback_from_the_command_line():
    argv = [sys.executable, "-m", "codegen.cli", "eval", *LLAMA, *GPU, "--cost", "time", "--zero-level", "9"]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and not proc.stdout
    assert proc.stderr.strip().splitlines() == [
        "symcost eval: error: --zero-level 9: a memory setting (read with --memory, under the original convention "
        "only); --cost time does not read it: drop it"]
