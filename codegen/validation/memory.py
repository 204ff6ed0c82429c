"""Memory per rank against published figures: ZeRO's Table 1 and Megatron-LM's Figure 1.

Two checks, on the generated evaluators (``generated``; no SymPy):

* :func:`zero_table1_rows`: per-device model-state memory of Rajbhandari et
  al. 2020, Table 1 (Ψ parameters, N_d data-parallel ranks, K = 12), from
  ``memory_part_model_states_bytes`` with one part (N = Ψ, c = 1, k = N_d),
  printed as the paper prints it: the 7.5B column rounded, the 128B and 1T
  columns truncated to the digits shown.
* :func:`megatron_rows`: the first pipeline stage's memory per GPU of the
  Megatron-LM runs of Korthikanti et al. 2022, Figure 1 — parameters and
  optimizer state, and activations — from the ``memory_standard_dense_stage_*``
  evaluators, under the paper's assumptions stated once in
  :data:`PAPER_SETTINGS`. Figure 1's activations are the transformer layers'
  alone: every value equals Table 2's per-layer bytes times the layers the
  first stage holds and its in-flight micro-batches (Eq. 5 with the
  interleaving factor of §4.2.3), e.g. 22B without recompute
  ``sbhL(10 + 24/t + 5as/(ht))`` = 59.25 GiB and with SP + selective
  ``34sbhL/t`` = 9.5625 GiB. So the figure is compared with the stage
  evaluator's layers (embedding and output layer counted 0), and the
  stage's whole activations — which add §4.3's embedding dropout mask and,
  where the stage holds it, the output layer (final LayerNorm and projection
  inputs, fp32 logits) — are reported beside it.

Each row of a CSV with the columns of ``megatron_memory_figure1.csv`` (model,
a, h, L, t, p, seq, micro_batch, recompute) becomes a GPT model (learned
biases, LayerNorm, a 4h GeLU MLP, embedding tied to the output layer) and a
layout. Run settings the figure does not list — vocabulary, data-parallel
degree, interleaving, micro-batches per step, FFN width — come from optional
columns of the row (``vocab``, ``d``, ``vp``, ``m``, ``ffn``), else from the
same paper's run table (``megatron_iteration_times.csv``, Table 3, joined on
``model``), else from the paper's shared setup (vocabulary 51,200; d = 1;
no interleaving; m = p, enough micro-batches to fill the pipeline; ffn = 4h).

Public API::

    zero_table1_rows(path=ZERO_CSV) -> list[dict]
    megatron_rows(path=MEGATRON_CSV, settings=PAPER_SETTINGS) -> list[dict]
    run_memory_validation(data=None) -> int
"""

from __future__ import annotations

import json
import math
from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..configs import Layout, ModelConfig, RecomputePlan, pipeline_stage_counts
# The evaluation of the stage formulas is shared with ``symcost eval --memory``; validation only
# adds the paper's settings, its models and its rows.
from ..pricing.memory import MemorySettings, call as _call, evaluate_stages, stage_inputs
from .csvfile import DATA_DIR, read_rows

__all__ = ["DATA_DIR", "MEGATRON_CSV", "RUNS_CSV", "ZERO_CSV", "MemorySettings", "PAPER_SETTINGS",
           "ACTIVATIONS_BOUND", "STATES_BOUND", "printed", "zero_table1_rows", "megatron_rows",
           "run_memory_validation"]

#: The shipped copies of the published figures (provenance: ``codegen/validation/data/README.md``).
ZERO_CSV = DATA_DIR / "zero_table1.csv"
MEGATRON_CSV = DATA_DIR / "megatron_memory_figure1.csv"
RUNS_CSV = DATA_DIR / "megatron_iteration_times.csv"

#: Relative errors the issue asks for on the Megatron rows: activations, parameters + optimizer.
ACTIVATIONS_BOUND = 0.02
STATES_BOUND = 0.05

GIB = 2.0 ** 30
GB = 1e9

#: How Table 1 prints each model's column (the published cells are rounded for 7.5B, truncated for
#: 128B and 1T, as a comparison of every cell with its exact formula value shows).
ZERO_PRINTING = {"7.5B": "rounded", "128B": "truncated", "1T": "truncated"}

#: Table 1's columns as ZeRO stages: the baseline replicates everything; P_os, P_os+g, P_os+g+p.
ZERO_STAGES = {"baseline (standard DP)": 0, "P_os": 1, "P_os+g": 2, "P_os+g+p": 3}

#: The stage evaluators one Megatron row reads; a GPT layer has standard attention and a dense MLP.
_STAGE = "memory_standard_dense_stage_{}_bytes"


#: Korthikanti et al. 2022's assumptions, stated, not fitted: 16-bit activations with 1-byte dropout
#: masks and no fused attention (their Table 2 and §4.1), fp32 logits for the loss (§4.3), and
#: Megatron-LM's mixed-precision Adam: 16-bit weights, fp32 gradient accumulation buffers (main_grad)
#: and K = 12 bytes of optimizer state (fp32 master weights and two moments) — Megatron-LM's own
#: accounting of 18 bytes per parameter for 16-bit parameters with fp32 gradients and no distributed
#: optimizer (Megatron Core documentation, "Distributed Optimizer"). The 2022 runs shard no optimizer
#: state (ZeRO stage 0).
PAPER_SETTINGS = MemorySettings(bytes_compute=2.0, dropout=1.0, flash_attention=0.0, bytes_logits=4.0,
                                bytes_p=2.0, bytes_grad=4.0, bytes_optimizer=12.0, zero_level=0)


def _read_csv(path: Path) -> list[dict[str, str]]:
    return read_rows(path)[1]


# ---------------------------------------------------------------- ZeRO Table 1


def printed(value: float, like: str, mode: str) -> str:
    """*value* printed with as many decimals as the published cell *like*, rounded half up or truncated."""
    decimals = len(like.split(".")[1]) if "." in like else 0
    quantum = Decimal(1).scaleb(-decimals)
    rounding = ROUND_HALF_UP if mode == "rounded" else ROUND_DOWN
    # repr() keeps the float's shortest exact decimal, so 41.25 rounds to 41.3 and not to 41.2.
    return str(Decimal(repr(value)).quantize(quantum, rounding=rounding))


def zero_table1_rows(path: Path = ZERO_CSV) -> list[dict[str, Any]]:
    """Every cell of ZeRO's Table 1 (``zero_table1.csv``) beside the model's value and its printing.

    Returns:
        One dict per row: ``model, params, dp_degree, stage, K, per_device_GB`` (the model's value),
        ``per_device_GB_formula`` and ``per_device_GB_published`` (text, empty for the baseline
        column the table does not print), ``printed`` (the model's value printed like the published
        cell) and ``matches`` (printed == published; ``None`` where nothing is published).
    """
    rows = []
    for row in _read_csv(path):
        value = float(_call("memory_part_model_states_bytes", {
            "part_size": float(row["params"]), "part_computed": 1.0, "part_sharded": float(row["dp_degree"]),
            "zero_level": ZERO_STAGES[row["stage"]], "bytes_p": 2.0, "bytes_grad": 2.0,
            "bytes_optimizer": float(row["K"]),
        })) / GB
        published = row["per_device_GB_published"].strip()
        shown = printed(value, published, ZERO_PRINTING[row["model"]]) if published else None
        rows.append({
            "model": row["model"], "params": float(row["params"]), "dp_degree": int(row["dp_degree"]),
            "stage": row["stage"], "K": float(row["K"]), "per_device_GB": value,
            "per_device_GB_formula": float(row["per_device_GB_formula"]), "per_device_GB_published": published,
            "printed": shown, "matches": None if shown is None else Decimal(shown) == Decimal(published),
        })
    return rows


# ---------------------------------------------------------------- Megatron-LM Figure 1

_REQUIRED = ("model", "a", "h", "L", "t", "p", "seq", "micro_batch", "recompute",
             "params_and_optimizer_GiB_per_gpu", "activations_GiB_per_gpu")


def _recompute(text: str, sequence_parallel: str | None) -> tuple[str, bool]:
    """(recompute mode, sequence parallel) from the figure's spelling, e.g. ``sequence_parallel+selective``."""
    words = text.strip().lower().replace("-", "_")
    if "full" in words:
        mode = "full"
    elif "selective" in words:
        mode = "selective"
    elif words in ("", "none") or words.startswith("none"):
        mode = "none"
    else:
        raise ValueError(f"recompute: cannot read {text!r}; expected none, selective, full, optionally "
                         "with +sequence_parallel")
    if sequence_parallel not in (None, ""):
        sp = str(sequence_parallel).strip().lower() in ("1", "true", "yes")
    else:
        sp = ("sequence_parallel" in words or "seq_parallel" in words) and "no_seqpar" not in words
    return mode, sp


def _run_table(path: Path) -> dict[str, dict[str, str]]:
    """The paper's run configurations by model (Table 3), or nothing when the file is absent."""
    if not path.is_file():
        return {}
    runs: dict[str, dict[str, str]] = {}
    for row in _read_csv(path):
        runs.setdefault(row["model"], row)
    return runs


def _setting(row: Mapping[str, str], run: Mapping[str, str] | None, names: tuple[str, ...],
             default: float) -> float:
    """A run setting: the row's own column, else the run table's, else the paper's default."""
    for source in (row, run or {}):
        for name in names:
            text = str(source.get(name) or "").strip()
            if text:
                return float(text)
    return default


def _int(row: Mapping[str, str], name: str) -> int:
    value = float(row[name])
    if value != int(value) or value < 1:
        raise ValueError(f"column {name}: expected a whole number >= 1, got {row[name]!r}")
    return int(value)


def _predict(row: Mapping[str, str], run: Mapping[str, str] | None, settings: MemorySettings) -> dict[str, float]:
    """The first stage's model states and activations (bytes per GPU) of one figure row."""
    h, a, n_lay, t, p = (_int(row, k) for k in ("h", "a", "L", "t", "p"))
    s, b = _int(row, "seq"), _int(row, "micro_batch")
    if run is not None:
        for mine, theirs in (("h", "hidden"), ("a", "heads"), ("L", "layers"), ("t", "t"), ("p", "p"),
                             ("seq", "seq"), ("micro_batch", "micro_batch")):
            if float(run[theirs]) != float(row[mine]):
                raise ValueError(f"{row['model']}: {mine} = {row[mine]} but the run table says {run[theirs]}")
    v = int(_setting(row, run, ("vocab",), 51200))
    d = int(_setting(row, run, ("d",), 1))
    vp = int(_setting(row, run, ("vp", "pipeline_interleaving"), 1))
    hff = int(_setting(row, run, ("ffn",), 4 * h))
    global_batch = _setting(row, run, ("global_batch",), 0)
    m = int(_setting(row, {}, ("m",), global_batch / (b * d) if global_batch else p))
    mode, sp = _recompute(row["recompute"], row.get("sequence_parallel"))

    layout = Layout(d=d, t=t, p=p, m=m, b=b, vp=vp, sp=sp, op=settings.zero_level > 0,
                    recompute=RecomputePlan(mode))
    # GPT as Megatron-LM builds it: biases on every projection, LayerNorm (weight and bias), a
    # two-matrix GeLU MLP, the word embedding shared with the output layer.
    model = ModelConfig(name=row["model"], source="csv", s=s, h=h, a=a, n_kv=a, dh=h / a, hff=hff, v=v,
                        n_lay=n_lay, layout=layout, n_ffMM=2, qkv_bias=True, o_bias=True, mlp_bias=True,
                        norm_bias=True, tie_emb_out=True)
    counts = pipeline_stage_counts(model, p, vp, recompute=RecomputePlan(mode))
    # The first stage only: the figure reports the first stage's GPU (pp_rank 0).
    values = stage_inputs(model, layout, settings, {name: column[:1] for name, column in counts.items()})
    # Megatron-LM's VocabParallelEmbedding splits the table over TP at every pipeline depth;
    # HyperParallel keeps it whole when p = 1, which derive_fields follows.
    values["shard_embed"] = values["gather_embed"] * t
    got = evaluate_stages("standard_dense", values, ("weights", "gradients", "optimizer", "activations"))
    parts = {part: float(column[0]) for part, column in got.items()}
    # The figure plots the transformer layers' activations (Table 2 times the in-flight micro-batches);
    # the stage also holds its embedding's and output layer's. Both are reported, the stage compared.
    layers_only = float(np.ravel(_call(_STAGE.format("activations"), dict(values, n_embedding=0.0, n_output=0.0)))[0])
    return {"params_and_optimizer": parts["weights"] + parts["gradients"] + parts["optimizer"],
            "activations": parts["activations"], "activations_layers": layers_only, "vp": vp, "m": m, "d": d, "v": v, "sp": sp, "mode": mode}


def megatron_rows(path: Path = MEGATRON_CSV, settings: MemorySettings = PAPER_SETTINGS, *,
                  runs: Path | None = RUNS_CSV) -> list[dict[str, Any]]:
    """Each row of a Figure-1-style CSV with the model's first-stage prediction and relative errors.

    ``activations_*`` are the first stage's transformer layers, what Figure 1 plots;
    ``activations_stage_*`` the whole stage's, embedding and output layer included.

    Args:
        path: a CSV with the columns of ``megatron_memory_figure1.csv``.
        settings: the run settings the formulas need (:data:`PAPER_SETTINGS` by default).
        runs: the run table to join on ``model`` (``None``: none).

    Raises:
        ValueError: naming a missing column or an unreadable value.
    """
    table = read_rows(path, _REQUIRED)[1]
    run_table = _run_table(runs) if runs is not None else {}
    out = []
    for row in table:
        got = _predict(row, run_table.get(row["model"]), settings)
        states_gib = got["params_and_optimizer"] / GIB
        layers_gib = got["activations_layers"] / GIB
        stage_gib = got["activations"] / GIB
        want_states = float(row["params_and_optimizer_GiB_per_gpu"])
        want_act = float(row["activations_GiB_per_gpu"])
        out.append({
            "model": row["model"], "recompute": row["recompute"],
            "params_and_optimizer_GiB": states_gib, "params_and_optimizer_published_GiB": want_states,
            "params_and_optimizer_rel_err": (states_gib - want_states) / want_states,
            # What the figure counts: the transformer layers of the first stage (Table 2 × Eq. 5).
            "activations_GiB": layers_gib, "activations_published_GiB": want_act,
            "activations_rel_err": (layers_gib - want_act) / want_act,
            # The whole stage: also §4.3's embedding dropout mask and, where the stage holds it, the output layer.
            "activations_stage_GiB": stage_gib,
            "activations_stage_rel_err": (stage_gib - want_act) / want_act,
            "layout": {k: got[k] for k in ("d", "vp", "m", "v", "sp", "mode")},
        })
    return out


def run_memory_validation(data: Path | None = None) -> int:
    """``symcost validate memory [--data FILE]``: print each row with its relative errors, then one JSON line.

    With no *data*, first checks ZeRO's Table 1 (one summary line) and then the shipped Figure 1
    rows. Returns 1 when a Megatron row misses the issue's bounds (the layers' activations, what
    the figure plots, 2 %; parameters + optimizer 5 %) or a Table 1 cell does not print as
    published, else 0.
    """
    ok = True
    if data is None:
        zero = [r for r in zero_table1_rows() if r["matches"] is not None]
        wrong = [r for r in zero if not r["matches"]]
        print(f"ZeRO Table 1: {len(zero) - len(wrong)}/{len(zero)} published cells reproduced to their printing"
              + "".join(f"; {r['model']} N_d={r['dp_degree']} {r['stage']}: {r['printed']} != "
                        f"{r['per_device_GB_published']}" for r in wrong))
        ok = not wrong
    rows = megatron_rows(MEGATRON_CSV if data is None else Path(data))
    print(f"{'model':<12} {'recompute':<28} {'params+opt GiB':>15} {'published':>10} {'rel err':>8} "
          f"{'layers act GiB':>15} {'published':>10} {'rel err':>8} {'stage act GiB':>14} {'rel err':>8}")
    for r in rows:
        print(f"{r['model']:<12} {r['recompute']:<28} {r['params_and_optimizer_GiB']:>15.4f} "
              f"{r['params_and_optimizer_published_GiB']:>10.4f} {r['params_and_optimizer_rel_err']:>+8.2%} "
              f"{r['activations_GiB']:>15.4f} {r['activations_published_GiB']:>10.4f} "
              f"{r['activations_rel_err']:>+8.2%} {r['activations_stage_GiB']:>14.4f} "
              f"{r['activations_stage_rel_err']:>+8.2%}")
        ok &= abs(r["activations_rel_err"]) <= ACTIVATIONS_BOUND
        ok &= abs(r["params_and_optimizer_rel_err"]) <= STATES_BOUND
    summary = {"rows": [{"model": r["model"], "recompute": r["recompute"],
                         "params_and_optimizer_rel_err": _finite(r["params_and_optimizer_rel_err"]),
                         "activations_rel_err": _finite(r["activations_rel_err"]),
                         "activations_stage_rel_err": _finite(r["activations_stage_rel_err"])} for r in rows]}
    print(json.dumps(summary))
    return 0 if ok else 1


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) and not np.isnan(x) else None
