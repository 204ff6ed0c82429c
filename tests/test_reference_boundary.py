"""Boundary cases of ``cp_traffic``: unset (0) heads, head width and hidden size, MLA on and off, the CP and TP
degrees at their edge. The expected numbers are derived by hand from the original's lines (the seed printout of
``perf_estimation/comm_time.py``, lines 145-168, and ``compute_kv_dim`` as docs/formulas.md and the shared
FORMULAS.md §2 restate it), not from our evaluators; each case goes through the path ``symcost check`` takes.

The lines that matter (seed numbering):

* 157 ``cp, t = ccfg.cp, max(1, ccfg.t)``; 158 ``ring = (cp - 1) / cp``;
* 159 ``head = ccfg.dh or ccfg.h / max(1, ccfg.a)``: an unset ``a`` reads as 1 here, and only here;
* 160 ``kv_width = compute_kv_dim(ccfg)``: MLA ``n_kv (2 dh + dhr) / (2 t')`` with the raw ``dh``, MHA ``h / t'``;
* 163-164 Ulysses: ``widths = a (head + rope) / t + 2 kv_width + a head / t``, ``2 ring s / cp b widths bytes``;
* 167 a linear-attention layer: ``2 a / t head head 4``; 168 otherwise ``2 ring s b 2 kv_width bytes``.

With ``a`` unset every term that reads the head width is multiplied by ``a = 0``: the original gives a finite
number (0 for the linear state), where ``h / a`` made ours NaN.
"""

from __future__ import annotations

import itertools

import pytest

from codegen.reference.adapters import ADAPTERS
from codegen.reference.cases import RTOL, Case, run_check, worst_error

#: An MLA layer of DeepSeek-V3's shape (dc_kv > 0 makes it MLA), one micro-batch of 4096 tokens, bf16, cp = 2.
MLA = {"s": 4096.0, "b": 1.0, "bytes_compute": 2.0, "cp": 2.0, "t": 1.0, "h": 7168.0, "a": 128.0, "dh": 128.0,
       "n_kv": 128.0, "dhr": 64.0, "dc_kv": 512.0, "n_linrec": 0.0}
#: An MHA layer: dc_kv = 0 and n_kv not below a (with a = n_kv = 0 the original detects MHA).
MHA = {**MLA, "dc_kv": 0.0, "dhr": 0.0, "h": 4096.0, "a": 32.0, "n_kv": 32.0}

BOUNDARY = [
    # MLA, a and dh unset, Ulysses. 159: head = 0 or 7168 / max(1, 0) = 7168; 160: kv_width = 128 (0 + 64) / 2 = 4096;
    # 163: widths = 0 (7168 + 64) / 1 + 2 4096 + 0 = 8192; 164: 2 (1/2) (4096 / 2) 1 8192 2.
    ("mla a,dh unset ulysses", MLA, {"a": 0.0, "dh": 0.0}, "ulysses_cp", 2 * 0.5 * (4096 / 2) * 1 * 8192 * 2),
    # The same with h unset too: 159 gives head = 0 / 1 = 0, multiplied by a = 0 all the same.
    ("mla h,a,dh unset ulysses", MLA, {"h": 0.0, "a": 0.0, "dh": 0.0}, "ulysses_cp", 2 * 0.5 * 2048 * 8192 * 2),
    # MLA, a and dh unset, a linear-attention layer (n_linrec set), colossalai: 167: 2 0 / 1 7168 7168 4 = 0.
    ("mla a,dh unset linear", MLA, {"a": 0.0, "dh": 0.0, "n_linrec": 1.0}, "colossalai_cp", 0.0),
    ("mla h,a,dh unset linear", MLA, {"h": 0.0, "a": 0.0, "dh": 0.0, "n_linrec": 1.0}, "hybrid_cp", 0.0),
    # MLA, a and dh unset, the ring (168 reads no head width): 2 (1/2) 4096 1 2 4096 2.
    ("mla a,dh unset ring", MLA, {"a": 0.0, "dh": 0.0}, "colossalai_cp", 2 * 0.5 * 4096 * 1 * 2 * 4096 * 2),
    # MLA, t unset (157: t' = 1) and cp = 3 (158: ring = 2/3), a and dh unset, Ulysses:
    # 2 (2/3) (4096 / 3) 1 8192 2.
    ("mla t,a,dh unset cp=3 ulysses", MLA, {"t": 0.0, "cp": 3.0, "a": 0.0, "dh": 0.0}, "ulysses_cp",
     2 * (2 / 3) * (4096 / 3) * 1 * 8192 * 2),
    # MLA, TP 4 (160: kv_width = 128 64 / 8 = 1024), a and dh unset, Ulysses: widths = 2048; 2 (1/2) 2048 2048 2.
    ("mla a,dh unset t=4 ulysses", MLA, {"t": 4.0, "a": 0.0, "dh": 0.0}, "ulysses_cp", 2 * 0.5 * 2048 * 1 * 2048 * 2),
    # cp = 1 (158: ring = 0): nothing moves, whatever is unset.
    ("mla a,dh unset cp=1 ulysses", MLA, {"cp": 1.0, "a": 0.0, "dh": 0.0}, "ulysses_cp", 0.0),
    ("mha h,a,dh unset cp=1 ring", MHA, {"cp": 1.0, "h": 0.0, "a": 0.0, "dh": 0.0, "n_kv": 0.0}, "colossalai_cp", 0.0),
    # MHA with h, a and dh unset (n_kv unset too: 0 < 0 is false, so MHA): 159: head = 0 / 1 = 0; 160: kv_width =
    # h / t' = 0; Ulysses 163: widths = 0; linear 167: 0; ring 168: 0.
    ("mha h,a,dh unset ulysses", MHA, {"h": 0.0, "a": 0.0, "dh": 0.0, "n_kv": 0.0}, "ulysses_cp", 0.0),
    ("mha h,a,dh unset linear", MHA, {"h": 0.0, "a": 0.0, "dh": 0.0, "n_kv": 0.0, "n_linrec": 1.0}, "colossalai_cp",
     0.0),
    ("mha h,a,dh unset ring", MHA, {"h": 0.0, "a": 0.0, "dh": 0.0, "n_kv": 0.0}, "hybrid_cp", 0.0),
    # MHA with a and dh unset, h set: 159: head = 4096; 160: kv_width = 4096; Ulysses 163: widths = 0 + 8192 + 0;
    # 164: 2 (1/2) 2048 1 8192 2. Linear 167: 2 0 4096 4096 4 = 0.
    ("mha a,dh unset ulysses", MHA, {"a": 0.0, "dh": 0.0, "n_kv": 0.0}, "ulysses_cp", 2 * 0.5 * 2048 * 8192 * 2),
    ("mha a,dh unset linear", MHA, {"a": 0.0, "dh": 0.0, "n_kv": 0.0, "n_linrec": 1.0}, "colossalai_cp", 0.0),
    # Controls away from the boundary: MLA with dh set and a unset, Ulysses: 159: head = 128; 160: kv_width =
    # 128 (256 + 64) / 2 = 20480; widths = 40960; 2 (1/2) 2048 1 40960 2. And the recorded shape, a = 128:
    # widths = 128 (128 + 64) + 2 20480 + 128 128 = 81920.
    ("mla a unset ulysses", MLA, {"a": 0.0}, "ulysses_cp", 2 * 0.5 * 2048 * 40960 * 2),
    ("mla ulysses", MLA, {}, "ulysses_cp", 2 * 0.5 * 2048 * 81920 * 2),
]


@pytest.mark.parametrize("label, base, changes, algo, expected", BOUNDARY, ids=[b[0] for b in BOUNDARY])
def test_cp_traffic_boundary_cases_reproduce_the_original(label, base, changes, algo, expected):
    case = Case(f"cp_traffic/{label}", "cp_traffic", {**base, **changes, "algo": algo, "model": label}, expected)
    report = run_check([case])
    rep = report.functions["cp_traffic"]
    assert rep.cases == 1 and not rep.failures, (label, ADAPTERS["cp_traffic"](case.inputs), expected)


# ------------------------------------------------------------------------------ every zero, against the lines


def _kv_width(i: dict) -> float:
    """compute_kv_dim (FORMULAS.md §2): MLA if dc_kv > 0, GQA if n_kv < a, else MHA; t' = max(1, t)."""
    t = max(1, i["t"])
    if i["dc_kv"] > 0:
        return i["n_kv"] * (2 * i["dh"] + i["dhr"]) / (2 * t)
    if i["n_kv"] < i["a"]:
        return min(i["n_kv"] if i["n_kv"] > 0 else i["a"], i["a"]) * i["dh"] / t
    return i["h"] / t


def _original_cp_traffic(i: dict, algo: str) -> float:
    """comm_time.py lines 157-168, transcribed."""
    cp, t = i["cp"], max(1, i["t"])
    ring = (cp - 1) / cp
    head = i["dh"] or i["h"] / max(1, i["a"])
    kv_width = _kv_width(i)
    if algo == "ulysses_cp":
        rope = i["dhr"] if i["dc_kv"] > 0 else 0
        widths = i["a"] * (head + rope) / t + 2 * kv_width + i["a"] * head / t
        return 2 * ring * i["s"] / cp * i["b"] * widths * i["bytes_compute"]
    if i["n_linrec"]:
        return 2 * i["a"] / t * head * head * 4
    return 2 * ring * i["s"] * i["b"] * 2 * kv_width * i["bytes_compute"]


ZEROS = {"h": (0.0, 7168.0), "a": (0.0, 128.0), "dh": (0.0, 128.0), "n_kv": (0.0, 1.0, 128.0),
         "dc_kv": (0.0, 512.0), "dhr": (0.0, 64.0), "t": (0.0, 1.0, 4.0), "cp": (1.0, 2.0, 3.0), "n_linrec": (0.0, 1.0)}


def test_the_transcription_agrees_with_the_recorded_cases():
    from conftest import CASES

    cases = [c for c in CASES if c.function == "cp_traffic"]
    assert len(cases) >= 50
    for case in cases:
        inputs = {k: case.inputs.get(k, 0.0) for k in (*ZEROS, "s", "b", "bytes_compute")}
        algo = case.inputs.get("algo", "colossalai_cp")
        algo = algo if algo in ("ulysses_cp", "hybrid_cp", "hybird_cp", "colossalai_cp") else "colossalai_cp"
        assert worst_error(_original_cp_traffic(inputs, algo), case.output)[0] <= RTOL, case.id


@pytest.mark.parametrize("algo", ["colossalai_cp", "hybrid_cp", "ulysses_cp"])
def test_cp_traffic_with_any_field_unset_is_the_originals(algo):
    base = {"s": 4096.0, "b": 1.0, "bytes_compute": 2.0}
    checked = 0
    for values in itertools.product(*ZEROS.values()):
        inputs = {**base, **dict(zip(ZEROS, values))}
        want = _original_cp_traffic(inputs, algo)
        got = ADAPTERS["cp_traffic"]({**inputs, "algo": algo})
        assert worst_error(got, want)[0] <= RTOL, (inputs, want, got)
        checked += 1
    assert checked == 2 ** 6 * 3 ** 3
