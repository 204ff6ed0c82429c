"""Step time against measured Megatron-LM iteration times (``data/megatron_iteration_times.csv``).

Each row's columns give a GPT model (``hidden, ffn, layers, heads, head_dim, vocab, seq``; a
two-matrix GeLU MLP, biases and LayerNorm as Megatron-LM builds GPT, the same model
``codegen.validation.memory`` builds), its layout (``d, t, p, pipeline_interleaving`` → ``vp``,
``micro_batch`` → ``b``, ``m = global_batch / (d·b)``, ``sequence_parallel``) and its recompute mode
(``recompute_mode``: a cell naming one of ``full``, ``selective``, ``none``, e.g. ``full_recompute_no_seqpar``
→ full; any other cell is an error). Every cell passes the input gate (whole numbers within their bounds,
``sequence_parallel`` true or false, the measured time a finite number > 0) and every row the layout rules of
``symcost eval`` (``t`` divides the heads, ``d·t·p = gpus``, ``p·vp <=`` layers, ...). The system column is
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

A file whose header names ``measured_step_s`` is of the other format, one run per row with its model's shape,
layout, precision and run settings (``nemo_step_times.csv``, ``layout_sweeps.csv``): :mod:`.step_rows` reads
and reports it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..configs import Layout, LayoutError, ModelConfig, validate
from ..pricing.chunks import Chunk, Setting
from ..pricing.step_time import StepTimePricer, time_family_comm
from ..runtime.inputs import DEGREE_MAX, DEVICES_MAX, LAYERS_MAX, finite, parse_flag
from .csvfile import DATA_DIR, Table, first_error, no_cyclic_gc, mode_cell, read_table, rows_read, whole_cells

__all__ = ["DEFAULT_DATA", "SYSTEMS", "REQUIRED", "step_time_rows", "summary_json", "run_step_time_validation"]

#: The shipped copy of the measured runs (provenance in ``data/README.md``).
DEFAULT_DATA = DATA_DIR / "megatron_iteration_times.csv"

#: A word of a row's ``system`` column → the catalog system that describes it.
SYSTEMS = {"Selene": "selene_a100"}

REQUIRED = ("model", "recompute_mode", "sequence_parallel", "gpus", "t", "p", "d", "pipeline_interleaving",
            "global_batch", "micro_batch", "seq", "hidden", "ffn", "layers", "heads", "head_dim", "vocab", "system",
            "measured_iteration_s")


#: The bound of each whole-number column (``codegen.runtime.inputs``): degrees, layers, devices; else sizes and counts.
_BOUNDS = {"d": DEGREE_MAX, "t": DEGREE_MAX, "p": DEGREE_MAX, "pipeline_interleaving": DEGREE_MAX, "layers": LAYERS_MAX,
           "gpus": DEVICES_MAX}

#: The columns a row's prediction depends on: rows that agree on them are priced once.
_CONFIG = tuple(name for name in REQUIRED if name != "measured_iteration_s")


#: A whole-number cell within its column's bound.
_whole = whole_cells(_BOUNDS)
_mode = mode_cell


def _system(text: str) -> str:
    for word, name in SYSTEMS.items():
        if word.lower() in text.lower():
            return name
    raise ValueError(f"no catalog system for {text!r}; known: "
                     f"{', '.join(f'{w} -> {n}' for w, n in SYSTEMS.items())} (or pass --system)")


def _predict(table: Table, i: int, system: str | None) -> dict[str, Any]:
    """The predicted step time and its parts (seconds) of row index *i*.

    Raises:
        ValueError: naming the file, line and column of a bad cell, or the file and line of a row whose
            layout breaks one of ``eval``'s rules (``codegen.configs.validate``).
    """
    h, ffn, n_lay, a = (table.cell(i, k, _whole) for k in ("hidden", "ffn", "layers", "heads"))
    s, v, dh = (table.cell(i, k, _whole) for k in ("seq", "vocab", "head_dim"))
    d, t, p = (table.cell(i, k, _whole) for k in ("d", "t", "p"))
    vp, gb, b, gpus = (table.cell(i, k, _whole) for k in ("pipeline_interleaving", "global_batch", "micro_batch",
                                                          "gpus"))
    mode = table.cell(i, "recompute_mode", _mode)
    sp = bool(table.cell(i, "sequence_parallel", parse_flag))
    name = system or table.cell(i, "system", lambda field, text: _located(field, text, _system))
    if gb % (d * b):
        raise table.refuse(i, f"global_batch {gb} is not a multiple of d·micro_batch = {d}·{b} = {d * b}")
    m = gb // (d * b)
    if h % a:
        raise table.refuse(i, f"hidden must be a multiple of the heads (as a model file's hidden_size): "
                              f"{h} % {a} != 0")
    try:
        layout = Layout(d=d, t=t, p=p, m=m, b=b, vp=vp, sp=sp)
        model = ModelConfig(name=table.cells("model")[i], source=str(table.path), s=s, h=h, a=a, n_kv=a, dh=float(dh),
                            hff=ffn, v=v, n_lay=n_lay, layout=layout, n_ffMM=2, qkv_bias=True, o_bias=True,
                            mlp_bias=True, norm_bias=True, tie_emb_out=True)
        validate(model, layout, devices=gpus)  # the rules symcost eval applies, and d·t·p = gpus
    except LayoutError as exc:
        raise table.refuse(i, str(exc)) from None
    # Megatron-LM of 2022 (no FlashAttention: the s-by-s scores pass through HBM; dropout 0.1 on; no communication
    # overlapped with compute: the runs predate --overlap-grad-reduce).
    pricer = StepTimePricer(model, system=name, comm=time_family_comm(model, name), flash_attention=0.0,
                            dropout=1.0, overlap=())
    values = {k: np.array([x], dtype=np.int64)
              for k, x in dict(d=d, t=t, p=p, cp=1, ep=1, etp=1, vp=vp, b=b, m=m).items()}
    # Megatron-LM's distributed optimizer was not used in these runs: ZeRO level 0.
    chunk = Chunk(Setting(mode, 0, layout.cp_algo), values, np.zeros(1, np.int64), model)
    got = {k: float(x[0]) for k, x in pricer.price(values, mode, chunk).items()}
    try:
        finite(f"{model.name}: the predicted step time", [got[k] for k in ("step_time_s", "compute_s", "bubble_s",
                                                                            "comm_s")])
    except ValueError as exc:
        raise table.refuse(i, str(exc)) from None
    return dict(got, gpus=gpus, system=name)


def _located(field: str, text: str, read: Any) -> Any:
    try:
        return read(text)
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from None


def step_time_rows(path: Path = DEFAULT_DATA, system: str | None = None) -> list[dict[str, Any]]:
    """Measured and predicted iteration time of each row, with the prediction's parts (seconds).

    Every cell passes the input gate and every row the layout rules of ``symcost eval``; rows with the same
    configuration (every column but the measured time) are priced once.

    Raises:
        ValueError: naming the file, line (and column) and value of the earliest bad cell or row.
    """
    table = read_table(Path(path), REQUIRED)
    first: dict[tuple[str, ...], int] = {}
    with no_cyclic_gc():
        keys = list(zip(*(table.cells(name) for name in _CONFIG)))
        config = [first.setdefault(key, len(first)) for key in keys]
    rows = np.unique(config, return_index=True)[1]  # each configuration's first row (codes in order of appearance)
    (measured, got), error = first_error(lambda: table.real("measured_iteration_s"),
                                         lambda: [_predict(table, i, system) for i in rows.tolist()])
    if error is not None:
        raise error
    out = []
    models, modes = table.cells("model"), table.cells("recompute_mode")
    with no_cyclic_gc():
        for i, (c, seconds) in enumerate(zip(config, measured.tolist())):
            row = got[c]
            predicted = row["step_time_s"]
            out.append({"model": models[i], "recompute_mode": modes[i], "gpus": row["gpus"], "system": row["system"],
                        "measured_s": seconds, "predicted_s": predicted, "compute_s": row["compute_s"],
                        "bubble_s": row["bubble_s"], "comm_s": row["comm_s"],
                        "rel_err": (predicted - seconds) / seconds})
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
    """``symcost validate step-time [--data FILE] [--system NAME]``: how many rows were read, each row's measured
    and predicted seconds and its parts, then one JSON line (:func:`summary_json`)."""
    path = Path(data) if data else DEFAULT_DATA
    if data:
        from .step_rows import is_step_rows_table, print_report, step_rows

        table = read_table(path)
        if is_step_rows_table(table):  # the layout-by-layout format (NeMo's tables, layout sweeps)
            print_report(path, step_rows(table, system))
            return 0
    rows = step_time_rows(path, system)
    print(rows_read(path, len(rows)))
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
