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
from codegen.configs import LayoutBatch, derive_fields, load_model, parse_layout
from codegen.pricing.memory import DEFAULT_SETTINGS, MODEL_WIDTHS, PARTS, MemoryPricer, stage_memory
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
    # (the default reserve is already off the base headroom: one byte more than both leaves -1)
    reserve = dataclasses.replace(DEFAULT_SETTINGS, reserve_bytes=DEFAULT_SETTINGS.reserve_bytes + base["headroom"] + 1.0)
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


# ---------------------------------------------------------------- byte widths: the model file's


def _llama_with_dtypes(tmp_path: Path) -> Path:
    """Llama 2 7B trained without mixed precision (fp32 weights from param_init_type), fp32 activations and
    16-bit gradient reduction: byte widths the old memory defaults (2, 2, 4) did not have."""
    text = (ROOT / "codegen" / "configs" / "bundled" / "llama2-7b.yaml").read_text()
    for old, new in (("compute_dtype: bfloat16", "compute_dtype: float32"), ("enabled: true", "enabled: false"),
                     ("reduce_dtype: float32", "reduce_dtype: bfloat16")):
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "llama2-7b-fp32.yaml"
    path.write_text(text)
    return path


LLAMA = "d=8,t=1,p=2,m=8"


def test_memory_takes_the_model_files_byte_widths(tmp_path):
    model, base_model = load_model(str(_llama_with_dtypes(tmp_path))), load_model("llama2-7b")
    assert (model.bytes_compute, model.bytes_p, model.bytes_grad) == (4.0, 4.0, 2.0)
    layout = parse_layout(LLAMA, model.layout)
    mem = stage_memory(model, layout, system="dgx_h100")
    base = stage_memory(base_model, parse_layout(LLAMA, base_model.layout), system="dgx_h100")
    assert mem["widths_from"] == {"bytes_compute": "model", "bytes_p": "model", "bytes_grad": "model"}
    # The widths the communication families read (the model's fields) are the memory family's.
    fields = derive_fields(model, layout)
    assert {name: mem["settings"][name] for name in MODEL_WIDTHS} == {name: fields[name] for name in MODEL_WIDTHS}
    for row, other in zip(mem["stages"], base["stages"]):
        assert_close(row["weights"], 2 * other["weights"], rtol=1e-12, atol=0)  # 4 bytes a weight, not 2
        assert_close(row["gradients"], other["gradients"] / 2, rtol=1e-12, atol=0)  # 2 bytes a gradient, not 4
        assert row["optimizer"] == other["optimizer"]  # K = 12 is a setting, no model-file field
        assert row["activations"] > other["activations"]  # 4-byte activations
    # The batch pricer resolves the same widths.
    prices = MemoryPricer(model, system="dgx_h100").price_batch(LayoutBatch.from_layouts([layout]))
    assert prices.peak_total[0] == max(row["total"] for row in mem["stages"])


def test_a_given_byte_width_overrides_the_model_and_is_stated(tmp_path, capsys):
    path = str(_llama_with_dtypes(tmp_path))
    given = _memory(capsys, "--model", path, "--layout", LLAMA, "--device", "dgx_h100", "--bytes-param", "2",
                    "--bytes-grad", "4")
    base = _memory(capsys, "--model", "llama2-7b", "--layout", LLAMA, "--device", "dgx_h100")
    assert given["widths_from"] == {"bytes_compute": "model", "bytes_p": "given", "bytes_grad": "given"}
    assert (given["settings"]["bytes_p"], given["settings"]["bytes_grad"], given["settings"]["bytes_compute"]) == \
        (2.0, 4.0, 4.0)
    for row, other in zip(given["stages"], base["stages"]):
        assert (row["weights"], row["gradients"], row["optimizer"]) == \
            (other["weights"], other["gradients"], other["optimizer"])
    assert main(["eval", "--model", path, "--layout", LLAMA, "--device", "dgx_h100", "--memory",
                 "--bytes-param", "2"]) == 0
    footer = capsys.readouterr().out.strip().splitlines()[-1]
    assert "weights 2 (given), gradients 2 (model file)" in footer and "activations 4 bytes (model file)" in footer


def test_a_models_byte_width_out_of_range_names_the_field():
    model = dataclasses.replace(load_model("llama2-7b"), bytes_grad=-1.0)
    with pytest.raises(ValueError, match="bytes_grad"):
        stage_memory(model, model.layout, system="dgx_h100")
    assert DEFAULT_SETTINGS.for_model(load_model("llama2-7b")).bytes_grad == 4.0
    assert dataclasses.replace(DEFAULT_SETTINGS, bytes_grad=3.0).for_model(model).bytes_grad == 3.0
