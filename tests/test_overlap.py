"""Communication overlapped with compute (codegen.pricing.exposure, docs/search.md "Exposed communication"): the
exposed seconds against hand derivations, the settings through the pricer, the search, eval and the step-time
rows, and one clear line for a name no overlap has."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from codegen.configs import load_model
from codegen.pricing.chunks import Chunk, Setting
from codegen.pricing.exposure import exposed_comm, forward_shares, overlap_names
from codegen.pricing.step_time import StepTimePricer, time_family_comm
from codegen.runtime.inputs import InputError
from codegen.validation.csvfile import DATA_DIR, read_table
from codegen.validation.step_rows import read_rows
from symbolic.vocabulary import DEFAULT_OVERLAP, OVERLAPS

NEMO = DATA_DIR / "nemo_step_times.csv"

#: A bottleneck stage's seconds by dimension (made up, round numbers for hand sums).
PARTS = {"tp": np.array([3.0]), "cp": np.array([0.0]), "ep": np.array([2.0]), "pp": np.array([0.5]),
         "dp": np.array([1.0])}


def test_without_overlap_every_dimension_is_exposed_as_before():
    assert exposed_comm(PARTS, "none")[0] == 6.5
    # full recompute repeats the forward half of TP's and EP's calls (2 of 4 each): 3·1.5 + 2·1.5 + 0.5 + 1
    assert forward_shares()["tp"] == forward_shares()["ep"] == 0.5
    assert exposed_comm(PARTS, "full")[0] == 9.0


@pytest.mark.parametrize("overlap,zero,want", [
    # dp at ZeRO 1: a window of one micro-batch's compute, 4 / 4 = 1 s: the 1 s of DP hidden: 3 + 2 + 0.5
    (("dp",), 1, 5.5),
    # dp at ZeRO 1 with 2 s of compute: window 0.5 s, 0.5 s of DP left: 5.5 + 0.5 (compute 2 below)
    (("dp",), 1, 6.0),
    # FSDP (ZeRO 3): every micro-batch's compute, 4 s: the DP second hidden
    (("dp",), 3, 5.5),
    # all three: windows dp 1, tp 4, ep 4·3/4 = 3; none exceeded, but together 6 s of them beside 4 s of compute
    # leave 2 s: 0.5 (pp) + 2
    (("dp", "tp", "ep"), 1, 2.5),
    # tp alone: 3 s within 4 s of compute: 2 + 0.5 + 1
    (("tp",), 1, 3.5),
])
def test_overlap_hides_a_dimension_up_to_its_window(overlap, zero, want):
    compute = 2.0 if want == 6.0 else 4.0
    got = exposed_comm(PARTS, "none", overlap=overlap, compute_s=np.array([compute]), m=np.array([4]), zero=zero)
    assert got[0] == pytest.approx(want, rel=1e-15)


def test_ep_overlap_needs_a_second_micro_batch_and_full_recompute_counts_in_the_window():
    one = exposed_comm(PARTS, "none", overlap=("ep",), compute_s=np.array([4.0]), m=np.array([1]))
    assert one[0] == 6.5  # m = 1: no other micro-batch to run beside
    # full recompute: TP 4.5 s, EP 3 s; tp overlapped beside 4 s of compute leaves 0.5: 3 + 0.5 + 1 + 0.5
    full = exposed_comm(PARTS, "full", overlap=("tp",), compute_s=np.array([4.0]), m=np.array([4]))
    assert full[0] == pytest.approx(5.0, rel=1e-15)


@pytest.mark.parametrize("dp,p,vp,want_dp", [
    # u = 4 / (4·2) = 0.5; window 0.5·(1 + 2·1) = 1.5 hides the 1 s; the last chunk's 0.5 s behind its 0.5 s
    (1.0, 2, 2, 0.0),
    # 3 s: 1.5 s beyond the window; the last chunk's floor 1.5 − 0.5 = 1 s is less
    (3.0, 2, 2, 1.5),
    # p 4 × vp 4: u = 0.25, window 0.25·13 = 3.25 hides all 3 s but the last chunk's 0.75 − 0.25 = 0.5 s
    (3.0, 4, 4, 0.5),
    # vp 1: one micro-batch's compute, 1 s, whatever p
    (3.0, 4, 1, 2.0),
])
def test_an_interleaved_pipeline_reduces_each_chunk_behind_the_chunks_after_it(dp, p, vp, want_dp):
    parts = dict(PARTS, dp=np.array([dp]))
    got = exposed_comm(parts, "none", overlap=("dp",), compute_s=np.array([4.0]), m=np.array([4]), zero=1,
                       p=np.array([p]), vp=np.array([vp]))
    assert got[0] == pytest.approx(3.0 + 2.0 + 0.5 + want_dp, rel=1e-15)
    # FSDP's window is the whole compute, interleaved or not
    fsdp = exposed_comm(parts, "none", overlap=("dp",), compute_s=np.array([4.0]), m=np.array([4]), zero=3,
                        p=np.array([p]), vp=np.array([vp]))
    assert fsdp[0] == pytest.approx(5.5, rel=1e-15)


def test_pipeline_sends_hide_in_an_interleaved_pipeline_only():
    """pp: Megatron-Core's overlap_p2p_comm runs in the interleaved schedule; without it the sends are batched and
    exposed, bit for bit as when pp is not overlapped."""
    parts = dict(PARTS, pp=np.array([1.5]))
    flat = exposed_comm(parts, "none", overlap=("dp",), compute_s=np.array([4.0]), m=np.array([4]), p=np.array([2]),
                        vp=np.array([1]))
    same = exposed_comm(parts, "none", overlap=("dp", "pp"), compute_s=np.array([4.0]), m=np.array([4]),
                        p=np.array([2]), vp=np.array([1]))
    assert same[0] == flat[0] == 3.0 + 2.0 + 1.5  # dp: 1 s within one micro-batch's 1 s
    # vp 2: u = 0.5, dp's window 0.5·(1 + 2) = 1.5 hides its 1 s; pp's 1.5 s within the 4 s of compute, which the two
    # share (2.5 s): only TP and EP left
    interleaved = exposed_comm(parts, "none", overlap=("dp", "pp"), compute_s=np.array([4.0]), m=np.array([4]),
                               p=np.array([2]), vp=np.array([2]))
    assert interleaved[0] == pytest.approx(5.0, rel=1e-15)
    # with tp overlapped too, 3 + 1 + 1.5 s beside 4 s of compute: 1.5 s left besides EP's 2
    more = exposed_comm(parts, "none", overlap=("dp", "tp", "pp"), compute_s=np.array([4.0]), m=np.array([4]),
                        p=np.array([2]), vp=np.array([2]))
    assert more[0] == pytest.approx(2.0 + 1.5, rel=1e-15)


def test_overlap_names_are_checked():
    assert overlap_names("x", "tp, dp") == ("dp", "tp")  # the vocabulary's order, each once
    assert overlap_names("x", "none") == overlap_names("x", "") == overlap_names("x", ()) == ()
    assert DEFAULT_OVERLAP == ("dp", "pp") and set(OVERLAPS) == {"dp", "tp", "ep", "pp"}
    for bad in ("dp,cp", 3, ("dp", 1)):
        with pytest.raises(InputError, match="overlap"):
            overlap_names("overlap", bad)
    with pytest.raises(InputError, match="compute seconds"):
        exposed_comm(PARTS, "none", overlap=("dp",))


def test_the_pricer_applies_its_overlap_to_the_time_familys_seconds():
    """StepTimePricer.price: exposed = exposed_comm of the time family's seconds with the pricer's overlap and the
    priced compute; the default is the recipes' data-parallel overlap, which never exposes more."""
    model = load_model("llama3-8b")
    values = {k: np.array([v], dtype=np.int64) for k, v in dict(d=8, t=1, p=1, cp=1, ep=1, etp=1, vp=1, b=1,
                                                                 m=16).items()}
    chunk = Chunk(Setting("none", 3, model.layout.cp_algo), values, np.zeros(1, np.int64), model)
    comm = time_family_comm(model, "dgx_h100")
    seconds = comm(chunk)
    got = {}
    for overlap in ((), ("dp",), ("dp", "tp", "ep")):
        pricer = StepTimePricer(model, system="dgx_h100", comm=comm, precision="fp8", overlap=overlap)
        parts = pricer.price(values, "none", chunk, zero=3)
        want = exposed_comm(seconds, "none", overlap=overlap, compute_s=parts["compute_s"], m=values["m"], zero=3)
        assert parts["comm_s"][0] == want[0]
        got[overlap] = parts["comm_s"][0]
    assert got[()] == pytest.approx(sum(float(v[0]) for v in seconds.values()), rel=1e-15)
    assert got[("dp",)] < got[()]  # FSDP's gathers and reductions (16 micro-batches) largely hidden
    assert StepTimePricer(model, system="dgx_h100").overlap == DEFAULT_OVERLAP


def test_the_pricer_gives_the_exposure_its_pipeline_depths():
    """An interleaved layout's data-parallel window comes from its own p and vp (StepTimePricer.price)."""
    model = load_model("nemotron4-340b")  # NVIDIA's layout on 128 B200: the DP reduction crosses nodes
    values = {k: np.array([v], dtype=np.int64) for k, v in dict(d=4, t=8, p=4, cp=1, ep=1, etp=1, vp=12, b=1,
                                                                 m=8).items()}
    chunk = Chunk(Setting("none", 1, model.layout.cp_algo), values, np.zeros(1, np.int64), model)
    comm = time_family_comm(model, "dgx_b200")
    pricer = StepTimePricer(model, system="dgx_b200", comm=comm, precision="fp8", overlap=("dp",))
    parts = pricer.price(values, "none", chunk, zero=1)
    seconds = comm(chunk)
    want = exposed_comm(seconds, "none", overlap=("dp",), compute_s=parts["compute_s"], m=values["m"], zero=1,
                        p=values["p"], vp=values["vp"])
    flat = exposed_comm(seconds, "none", overlap=("dp",), compute_s=parts["compute_s"], m=values["m"], zero=1)
    assert parts["comm_s"][0] == want[0] < flat[0]
    # the default overlap hides this interleaved layout's pipeline sends as well (Megatron-Bridge's overlap_p2p_comm)
    default = StepTimePricer(model, system="dgx_b200", comm=comm, precision="fp8")
    assert default.overlap == ("dp", "pp")
    hidden = default.price(values, "none", chunk, zero=1)["comm_s"][0]
    assert hidden == exposed_comm(seconds, "none", overlap=("dp", "pp"), compute_s=parts["compute_s"],
                                  m=values["m"], zero=1, p=values["p"], vp=values["vp"])[0]
    assert seconds["pp"][0] > 0 and hidden < parts["comm_s"][0]


def test_step_rows_read_an_overlap_column(tmp_path):
    source = Path(__file__).resolve().parents[1] / "codegen" / "validation" / "data" / "nemo_step_times.csv"
    lines = source.read_text(encoding="utf-8").splitlines()
    path = tmp_path / "rows.csv"
    path.write_text("\n".join([lines[0] + ",overlap", lines[1] + ",dp;tp", lines[2] + ",none", lines[3] + ","])
                    + "\n", encoding="utf-8")
    rows = read_rows(read_table(path))
    assert [r["overlap"] for r in rows] == [("dp", "tp"), (), None]  # blank: the recipe's (recipe_overlap)
    path.write_text("\n".join([lines[0] + ",overlap", lines[1] + ",dp;sp"]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 2.*overlap.*'sp'"):
        read_rows(read_table(path))


def test_each_nvidia_row_takes_its_recipes_overlap():
    """The recipes' overlaps by release (codegen.validation.step_rows.RECIPE_OVERLAP): DeepSeek-V3's 26.04.01 run on
    B200 is Megatron-Bridge v0.4.2's B200 MXFP8 preset (its pipeline 8 x 2, EP 32 and global batch 4096), which
    overlaps the expert all-to-all (moe_a2a_overlap); its earlier runs' presets do not."""
    from codegen.validation.step_rows import recipe_overlap

    by_line = {r["line"]: r for r in read_rows(read_table(NEMO))}
    overlap, source = recipe_overlap(by_line[5])
    assert (by_line[5]["pp"], by_line[5]["vp"], by_line[5]["ep"], by_line[5]["release"]) == (8, 2, 32, "26.04.01")
    assert overlap == ("dp", "ep", "pp") and "v0.4.2" in source and "moe_a2a_overlap=True" in source
    assert all(recipe_overlap(by_line[line])[0] == DEFAULT_OVERLAP for line in (2, 3, 4))


@pytest.mark.parametrize("argv,named", [
    (["search", "--model", "llama3-8b", "--devices", "8", "--system", "dgx_h100", "--global-batch", "16",
      "--overlap", "dp,cp"], "--overlap"),
    (["search", "--model", "llama3-8b", "--devices", "8", "--system", "dgx_h100", "--global-batch", "16",
      "--objective", "original", "--overlap", "tp"], "--overlap tp"),
    (["eval", "--model", "llama3-8b", "--device", "dgx_h100", "--overlap", "dp"], "--overlap"),
    (["eval", "--model", "llama3-8b", "--device", "dgx_h100", "--cost", "step-time", "--overlap", "all"],
     "--overlap"),
])
def test_bad_overlap_is_one_line(argv, named):
    done = subprocess.run([sys.executable, "-m", "codegen.cli", *argv], capture_output=True, text=True)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and named in done.stderr and "Traceback" not in done.stderr


def test_eval_step_time_states_its_overlap():
    done = subprocess.run([sys.executable, "-m", "codegen.cli", "eval", "--model", "llama3-8b", "--device", "dgx_h100",
                           "--cost", "step-time", "--layout", "d=8,t=1,p=1,cp=1,m=16,b=1", "--overlap", "none",
                           "--json"], capture_output=True, text=True, check=True)
    assert '"overlap": []' in done.stdout
