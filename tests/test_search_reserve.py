"""``symcost search --reserve GIB``: the device memory kept back from each GPU before a layout fits.

The search's memory pricer keeps the memory family's default reserve (2 GiB, docs/memory.md "The reserve")
unless ``--reserve`` (``SearchSpec.reserve_bytes``) says otherwise; the headroom of every row moves by the
difference exactly, and a layout that fits only without the reserve leaves the ranking. Bad input is one line
naming the option and the value, exit status 2.
"""

from __future__ import annotations

import json

import pytest

from codegen.cli import main
from codegen.configs import load_model
from codegen.pricing.memory import DEFAULT_RESERVE_BYTES
from codegen.runtime.inputs import InputError
from codegen.search import SearchSpec

GIB = 2 ** 30
#: (The data-parallel overlap alone: a ranking whose fastest layout fits only without the reserve.)
ARGV = ["search", "--model", "llama3-70b", "--devices", "64", "--system", "dgx_h100", "--global-batch", "128",
        "--top", "5", "--json", "--no-progress", "--overlap", "dp"]


def _top(capsys, *extra):
    assert main([*ARGV, *extra]) == 0
    return {tuple(r[k] for k in ("d", "t", "p", "cp", "vp", "b")): r for r in json.loads(capsys.readouterr().out)["top"]}


def test_the_reserve_comes_off_every_headroom_and_drops_what_only_fits_without_it(capsys):
    default, none = _top(capsys), _top(capsys, "--reserve", "0")
    both = set(default) & set(none)
    assert both
    for key in both:
        assert default[key]["memory_peak_bytes"] == none[key]["memory_peak_bytes"]
        assert none[key]["headroom_bytes"] - default[key]["headroom_bytes"] == pytest.approx(DEFAULT_RESERVE_BYTES,
                                                                                              abs=1.0)
    # Without the reserve the fastest layout keeps under 2 GiB free; with it, that layout does not fit.
    tight = [key for key, r in none.items() if 0 <= r["headroom_bytes"] < DEFAULT_RESERVE_BYTES]
    assert tight and not set(tight) & set(default)
    assert all(r["headroom_bytes"] >= 0 for r in default.values())


@pytest.mark.parametrize("extra, fragment", [
    (["--reserve", "-1"], "--reserve: must be >= 0, got '-1'"),
    (["--reserve", "nan"], "--reserve: expected a number, got 'nan'"),
    (["--reserve", "1", "--no-memory"], "--reserve 1: a memory setting; drop --no-memory to use it"),
])
def test_bad_reserve_is_one_line(capsys, extra, fragment):
    assert main([*ARGV, *extra]) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("value", [True, "2", -1.0, float("inf")])
def test_spec_reserve_of_another_kind_names_it(value):
    with pytest.raises(InputError, match="^reserve_bytes: "):
        SearchSpec(load_model("llama3-8b"), 8, 128, "dgx_h100", reserve_bytes=value)


def test_spec_reserve_needs_memory():
    with pytest.raises(InputError, match="^reserve_bytes: a memory setting"):
        SearchSpec(load_model("llama3-8b"), 8, 128, "dgx_h100", reserve_bytes=GIB, memory=False)


def test_bytes_grad_is_a_memory_setting_of_the_search():
    """--bytes-grad 2 (the recipes' BF16 gradients) prices less memory than the model file's fp32 gradients, layout
    for layout: by 2 bytes for each gradient a rank keeps (its weights over TP and PP; ZeRO 1 keeps them whole);
    bad values are one clear error."""
    from codegen.search import search

    model = load_model("llama3-8b")
    fix = (("d", 8), ("t", 1), ("p", 1), ("cp", 1), ("b", 1))
    rows = {grad: search(SearchSpec(model, 8, 128, "dgx_h100", fix=fix, recompute=("none",), keep_infeasible=True,
                                    bytes_grad=grad), top=1).rows()[0] for grad in (None, 2.0)}
    assert model.bytes_grad == 4.0
    # Llama 3 8B: 8.03e9 weights, all on the one stage of the one TP rank: 2 bytes less each
    saved = rows[None]["memory_peak_bytes"] - rows[2.0]["memory_peak_bytes"]
    assert saved == pytest.approx(2 * 8.03e9, rel=0.01)
    for bad in (0, -1.0, True, "2"):
        with pytest.raises(ValueError, match="bytes_grad"):
            SearchSpec(model, 8, 128, "dgx_h100", bytes_grad=bad)
    with pytest.raises(ValueError, match="bytes_grad"):
        SearchSpec(model, 8, 128, "dgx_h100", bytes_grad=2.0, memory=False)
