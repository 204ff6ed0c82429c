"""``symcost eval --memory`` and ``codegen.pricing.memory.stage_memory``: per-stage memory per rank."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

import hardware
from codegen.cli import main
from codegen.configs import load_model, parse_layout
from codegen.pricing.memory import DEFAULT_SETTINGS, PARTS, stage_memory
from conftest import assert_close

ROOT = Path(__file__).resolve().parents[1]
DSV3 = ["--model", "deepseek-v3", "--layout", "d=64,t=8,p=16,ep=8,m=64"]
KEYS = set(PARTS) | {"stage", "total", "capacity", "headroom", "fits"}


def _memory(capsys, *argv: str) -> dict:
    assert main(["eval", *argv, "--memory", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"stages", "per_dim", "units"} <= set(out), "the communication keys stay beside memory"
    return out["memory"]


def test_json_has_every_stage_and_part_and_the_parts_add_up(capsys):
    mem = _memory(capsys, *DSV3, "--device", "dgx_h100")
    assert mem["units"] == "bytes"
    assert [row["stage"] for row in mem["stages"]] == list(range(16))
    for row in mem["stages"]:
        assert set(row) == KEYS
        assert all(row[part] >= 0 for part in PARTS)
        assert row["weights"] > 0 and row["optimizer"] > 0 and row["activations"] > 0
        assert_close(sum(row[part] for part in PARTS), row["total"], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", ["dgx_h100", "dgx_a100", "dgx_b200"])
def test_capacity_is_the_catalog_hbm(capsys, device):
    mem = _memory(capsys, "--model", "llama2-7b", "--layout", "d=8,t=1,p=1,m=8", "--device", device)
    hbm = hardware.load(device).gpu.hbm_bytes
    assert mem["capacity_bytes"] == hbm
    assert all(row["capacity"] == hbm for row in mem["stages"])


@pytest.mark.parametrize("layout, fits", [("d=64,t=8,p=16,ep=8,m=64", True),
                                          ("d=1,t=1,p=2,ep=1,m=2", False)])
def test_fits_agrees_with_headroom(capsys, layout, fits):
    # DeepSeek-V3 on 8,192 GPUs fits an H100; on two it cannot (hundreds of GB of experts per rank).
    mem = _memory(capsys, "--model", "deepseek-v3", "--layout", layout, "--device", "dgx_h100")
    for row in mem["stages"]:
        assert_close(row["headroom"], row["capacity"] - mem["reserve_bytes"] - row["total"], rtol=1e-12, atol=1e-12)
        assert row["fits"] is (row["headroom"] >= 0)
    assert all(row["fits"] is fits for row in mem["stages"])


def test_reserve_comes_off_the_headroom():
    model = load_model("llama2-7b")
    layout = parse_layout("d=8,t=1,p=1,m=8", model.layout)
    base = stage_memory(model, layout, system="dgx_h100")["stages"][0]
    reserve = dataclasses.replace(DEFAULT_SETTINGS, reserve_bytes=base["headroom"] + 1.0)
    kept = stage_memory(model, layout, system="dgx_h100", settings=reserve)["stages"][0]
    assert base["fits"] and not kept["fits"]
    assert_close(kept["headroom"], -1.0, rtol=0.0, atol=1e-3)
    assert kept["total"] == base["total"]


def _totals(capsys, layout: str, *extra: str) -> list[dict]:
    return _memory(capsys, "--model", "qwen3-72b", "--layout", layout, "--device", "dgx_h100", *extra)["stages"]


@pytest.mark.parametrize("less, more, extra", [
    # The model file shards the optimizer over os = 8 ranks; os follows d here so that d shards more.
    ("d=8,t=4,p=8,m=64,os=8", "d=32,t=4,p=8,m=64,os=32", ("--fsdp",)),  # FSDP: weights, grads, states
    ("d=8,t=4,p=8,m=64,os=8", "d=32,t=4,p=8,m=64,os=32", ()),           # ZeRO-1 (op on): optimizer states
    ("d=8,t=1,p=8,m=64", "d=8,t=8,p=8,m=64", ()),             # tensor parallel: layers' weights over t
])
def test_more_sharding_never_needs_more_memory(capsys, less, more, extra):
    few, many = _totals(capsys, less, *extra), _totals(capsys, more, *extra)
    for a, b in zip(few, many):
        assert b["total"] <= a["total"]
        assert b["weights"] + b["gradients"] + b["optimizer"] < a["weights"] + a["gradients"] + a["optimizer"]


def test_a_system_without_gpu_facts_is_one_line_naming_device(capsys):
    assert main(["eval", *DSV3, "--device", "A2", "--memory", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "--device" in lines[0] and "A2" in lines[0]


def test_table_is_in_gib_with_a_footer(capsys):
    assert main(["eval", *DSV3, "--device", "dgx_h100", "--memory"]) == 0
    out = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(out) if line.split()[:2] == ["stage", "weights"])
    rows = out[head + 1:head + 17]
    assert [int(r.split()[0]) for r in rows] == list(range(16))
    assert_close(float(rows[0].split()[7]), 80.0, rtol=1e-6, atol=1e-12)   # capacity column: 80 GiB of HBM
    assert "GiB" in out[head + 17]


def test_memory_runs_without_sympy():
    code = ("import sys; from codegen.cli import main; "
            "main(['eval','--model','deepseek-v3','--layout','d=64,t=8,p=16,ep=8,m=64','--device','dgx_h100',"
            "'--memory','--json']); print('sympy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    lines = done.stdout.strip().splitlines()
    assert "memory" in json.loads(lines[0])
    assert lines[-1] == "False"
