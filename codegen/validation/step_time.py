"""Step time against measured Megatron-LM iteration times (``data/megatron_iteration_times.csv``).

Each row's columns give a GPT model (``hidden, ffn, layers, heads, head_dim, vocab, seq``; a
two-matrix GeLU MLP, biases and LayerNorm as Megatron-LM builds GPT, the same model
``codegen.validation.memory`` builds), its layout (``d, t, p, pipeline_interleaving`` → ``vp``,
``micro_batch`` → ``b``, ``m = global_batch / (d·b)``, ``sequence_parallel``) and its recompute mode
(``recompute_mode``: ``full…`` → full, ``selective…`` → selective, else none). The system column is
matched to a catalog system (:data:`SYSTEMS`); the step time is :class:`codegen.pricing.step_time.
StepTimePricer`'s: the slowest stage's compute (matrix-multiply FLOPs over the GPU's peak × its
generation's GEMM efficiency plus memory-bound HBM bytes over the peak bandwidth × its HBM efficiency plus
element-wise FLOPs over the vector unit's peak × its vector efficiency, one constant each per GPU generation
from Calculon's published system files, never fitted to these rows;
no FlashAttention and dropout on, as Megatron-LM ran in 2022), the pipeline bubble, and the exposed
communication of the time family (``codegen.pricing.time``).

Public API::

    DEFAULT_DATA, SYSTEMS
    step_time_rows(path=DEFAULT_DATA, system=None) -> list[dict]
    summary_json(rows) -> str
    run_step_time_validation(data=None, system=None) -> int
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..configs import Layout, ModelConfig
from ..pricing.chunks import Chunk, Setting
from ..pricing.step_time import StepTimePricer, time_family_comm
from .csvfile import DATA_DIR, read_rows

__all__ = ["DEFAULT_DATA", "SYSTEMS", "REQUIRED", "step_time_rows", "summary_json", "run_step_time_validation"]

#: The shipped copy of the measured runs (provenance in ``data/README.md``).
DEFAULT_DATA = DATA_DIR / "megatron_iteration_times.csv"

#: A word of a row's ``system`` column → the catalog system that describes it.
SYSTEMS = {"Selene": "selene_a100"}

REQUIRED = ("model", "recompute_mode", "sequence_parallel", "gpus", "t", "p", "d", "pipeline_interleaving",
            "global_batch", "micro_batch", "seq", "hidden", "ffn", "layers", "heads", "head_dim", "vocab", "system",
            "measured_iteration_s")


def _whole(row: Mapping[str, str], name: str, line: int) -> int:
    text = (row.get(name) or "").strip()
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"line {line}, column {name}: expected a whole number >= 1, got {text!r}") from None
    if not np.isfinite(value) or value != int(value) or value < 1:
        raise ValueError(f"line {line}, column {name}: expected a whole number >= 1, got {text!r}")
    return int(value)


def _positive(row: Mapping[str, str], name: str, line: int) -> float:
    text = (row.get(name) or "").strip()
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"line {line}, column {name}: expected a positive number, got {text!r}")
    return value


def _recompute(text: str) -> str:
    word = text.strip().lower()
    if word.startswith("full"):
        return "full"
    if word.startswith("selective"):
        return "selective"
    return "none"


def _system(text: str, line: int, override: str | None) -> str:
    if override:
        return override
    for word, name in SYSTEMS.items():
        if word.lower() in text.lower():
            return name
    raise ValueError(f"line {line}, column system: no catalog system for {text!r}; known: "
                     f"{', '.join(f'{w} -> {n}' for w, n in SYSTEMS.items())} (or pass --system)")


def _read(path: Path) -> list[dict[str, str]]:
    return read_rows(path, REQUIRED)[1]


def step_time_rows(path: Path = DEFAULT_DATA, system: str | None = None) -> list[dict[str, Any]]:
    """Measured and predicted iteration time of each row, with the prediction's parts (seconds)."""
    out = []
    for line, row in enumerate(_read(Path(path)), start=2):
        h, ffn, n_lay, a = (_whole(row, k, line) for k in ("hidden", "ffn", "layers", "heads"))
        s, v, dh = (_whole(row, k, line) for k in ("seq", "vocab", "head_dim"))
        d, t, p = (_whole(row, k, line) for k in ("d", "t", "p"))
        vp, gb, b, gpus = (_whole(row, k, line) for k in ("pipeline_interleaving", "global_batch", "micro_batch",
                                                          "gpus"))
        if d * t * p != gpus:
            raise ValueError(f"line {line}: d·t·p = {d}·{t}·{p} = {d * t * p}, but gpus = {gpus}")
        if gb % (d * b):
            raise ValueError(f"line {line}: global_batch {gb} is not a multiple of d·micro_batch = {d * b}")
        m = gb // (d * b)
        measured = _positive(row, "measured_iteration_s", line)
        mode = _recompute(row["recompute_mode"])
        sp = row["sequence_parallel"].strip().lower() in ("true", "1", "yes")
        layout = Layout(d=d, t=t, p=p, m=m, b=b, vp=vp, sp=sp)
        model = ModelConfig(name=row["model"], source=str(path), s=s, h=h, a=a, n_kv=a, dh=float(dh), hff=ffn, v=v,
                            n_lay=n_lay, layout=layout, n_ffMM=2, qkv_bias=True, o_bias=True, mlp_bias=True,
                            norm_bias=True, tie_emb_out=True)
        name = _system(row["system"], line, system)
        # Megatron-LM of 2022 (no FlashAttention: the s-by-s scores pass through HBM; dropout 0.1 on).
        pricer = StepTimePricer(model, system=name, comm=time_family_comm(model, name), flash_attention=0.0,
                                dropout=1.0)
        values = {k: np.array([x], dtype=np.int64) for k, x in
                  dict(d=d, t=t, p=p, cp=1, ep=1, etp=1, vp=vp, b=b, m=m).items()}
        # Megatron-LM's distributed optimizer was not used in these runs: ZeRO level 0.
        chunk = Chunk(Setting(mode, 0, layout.cp_algo), values, np.zeros(1, np.int64), model)
        got = {k: float(x[0]) for k, x in pricer.price(values, mode, chunk).items()}
        predicted = got["step_time_s"]
        out.append({"model": row["model"], "recompute_mode": row["recompute_mode"], "gpus": gpus, "system": name,
                    "measured_s": measured, "predicted_s": predicted, "compute_s": got["compute_s"],
                    "bubble_s": got["bubble_s"], "comm_s": got["comm_s"],
                    "rel_err": (predicted - measured) / measured})
    if not out:
        raise ValueError(f"--data {path}: no rows")
    return out


def summary_json(rows: list[dict[str, Any]]) -> str:
    """The last line: ``{"rows": [{model, recompute_mode, gpus, measured_s, predicted_s, rel_err}], "mean_abs_rel_err"}``."""
    keep = ("model", "recompute_mode", "gpus", "measured_s", "predicted_s", "rel_err")
    return json.dumps({"rows": [{k: r[k] for k in keep} for r in rows],
                       "mean_abs_rel_err": float(np.mean([abs(r["rel_err"]) for r in rows]))})


def _has_time_family() -> bool:
    try:
        from ..pricing import time  # noqa: F401
    except ImportError:
        return False
    return True


def run_step_time_validation(data: Path | None = None, system: str | None = None) -> int:
    rows = step_time_rows(Path(data) if data else DEFAULT_DATA, system)
    print(f"{'model':<12} {'recompute':<34} {'gpus':>5} {'measured':>9} {'predicted':>9} {'compute':>8} "
          f"{'bubble':>7} {'comm':>6} {'rel err':>8}   (seconds per iteration)")
    for r in rows:
        print(f"{r['model']:<12} {r['recompute_mode']:<34} {r['gpus']:>5} {r['measured_s']:>9.3f} "
              f"{r['predicted_s']:>9.3f} {r['compute_s']:>8.3f} {r['bubble_s']:>7.3f} {r['comm_s']:>6.3f} "
              f"{r['rel_err']:>8.1%}")
    if not _has_time_family():
        print("comm: 0 in this build (the time family, codegen.pricing.time, is not in it; docs/search.md)")
    print(summary_json(rows))
    return 0
