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
import sys
from dataclasses import dataclass
from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..configs import Layout, LayoutError, ModelConfig, RecomputePlan, pipeline_stage_counts, validate
# The evaluation of the stage formulas is shared with ``symcost eval --memory``; validation only
# adds the paper's settings, its models and its rows.
from ..pricing.memory import MemorySettings, call as _call, evaluate_stages, stage_inputs
from ..runtime.inputs import DEGREE_MAX, LAYERS_MAX, VALUE_MAX, finite, parse_flag, parse_real
from .csvfile import DATA_DIR, Table, first_error, no_cyclic_gc, mode_cell, read_table, rows_read, whole_cells

__all__ = ["DATA_DIR", "MEGATRON_CSV", "RUNS_CSV", "ZERO_CSV", "MemorySettings", "PAPER_SETTINGS",
           "ACTIVATIONS_BOUND", "STATES_BOUND", "printed", "zero_table1_rows", "megatron_rows",
           "run_memory_validation"]

#: The shipped copies of the published figures (provenance: ``codegen/validation/data/README.md``).
ZERO_CSV = DATA_DIR / "zero_table1.csv"
MEGATRON_CSV = DATA_DIR / "megatron_memory_figure1.csv"
RUNS_CSV = DATA_DIR / "megatron_iteration_times.csv"

#: The relative errors the Megatron rows are held to: activations, parameters + optimizer.
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


# ---------------------------------------------------------------- ZeRO Table 1


def printed(value: float, like: str, mode: str) -> str:
    """*value* printed with as many decimals as the published cell *like*, rounded half up or truncated."""
    decimals = len(like.split(".")[1]) if "." in like else 0
    quantum = Decimal(1).scaleb(-decimals)
    rounding = ROUND_HALF_UP if mode == "rounded" else ROUND_DOWN
    # repr() keeps the float's shortest exact decimal, so 41.25 rounds to 41.3 and not to 41.2.
    return str(Decimal(repr(value)).quantize(quantum, rounding=rounding))


def _published(field: str, text: str) -> str:
    """A published cell as printed: empty (not published) or a number > 0 (``parse_real``), kept as its text."""
    if text.strip():
        parse_real(field, text)
    return text.strip()


def _known(choices: Mapping[str, Any], what: str) -> Any:
    def read(text: str) -> str:
        if text not in choices:
            raise ValueError(f"unknown {what} {text!r}; known: {', '.join(map(repr, choices))}")
        return text
    return read


def zero_table1_rows(path: Path = ZERO_CSV) -> list[dict[str, Any]]:
    """Every cell of ZeRO's Table 1 (``zero_table1.csv``) beside the model's value and its printing.

    Returns:
        One dict per row: ``model, params, dp_degree, stage, K, per_device_GB`` (the model's value),
        ``per_device_GB_formula`` and ``per_device_GB_published`` (text, empty for the baseline
        column the table does not print), ``printed`` (the model's value printed like the published
        cell) and ``matches`` (printed == published; ``None`` where nothing is published).

    Raises:
        ValueError: naming the file, line, column and value of a bad cell.
    """
    table = read_table(path, ("model", "params", "dp_degree", "stage", "K", "per_device_GB_published",
                              "per_device_GB_formula"))
    (models, params, dp, stages, k, formula, published), error = first_error(
        lambda: table.choice("model", _known(ZERO_PRINTING, "model")),
        lambda: table.whole("params", maximum=VALUE_MAX), lambda: table.whole("dp_degree", maximum=DEGREE_MAX),
        lambda: table.choice("stage", _known(ZERO_STAGES, "stage")), lambda: table.real("K"),
        lambda: table.real("per_device_GB_formula"), lambda: table.convert("per_device_GB_published", _published))
    if error is not None:
        raise error
    rows = []
    for i in range(len(table)):
        value = float(_call("memory_part_model_states_bytes", {
            "part_size": float(params[i]), "part_computed": 1.0, "part_sharded": float(dp[i]),
            "zero_level": ZERO_STAGES[stages[i]], "bytes_p": 2.0, "bytes_grad": 2.0, "bytes_optimizer": float(k[i]),
        })) / GB
        shown = printed(value, published[i], ZERO_PRINTING[models[i]]) if published[i] else None
        rows.append({
            "model": models[i], "params": float(params[i]), "dp_degree": int(dp[i]), "stage": stages[i],
            "K": float(k[i]), "per_device_GB": value, "per_device_GB_formula": float(formula[i]),
            "per_device_GB_published": published[i],
            "printed": shown, "matches": None if shown is None else Decimal(shown) == Decimal(published[i]),
        })
    return rows


# ---------------------------------------------------------------- Megatron-LM Figure 1

_REQUIRED = ("model", "a", "h", "L", "t", "p", "seq", "micro_batch", "recompute",
             "params_and_optimizer_GiB_per_gpu", "activations_GiB_per_gpu")


#: The columns a row's configuration is read from (its own, else the run table's, else the paper's setup):
#: rows that agree on these are one configuration, priced once.
_CONFIG = ("model", "a", "h", "L", "t", "p", "seq", "micro_batch", "recompute", "sequence_parallel", "vocab", "d",
           "vp", "pipeline_interleaving", "ffn", "global_batch", "m")

#: Figure 1's columns as the run table (Table 3) names them, checked equal where a row joins it.
_RUN_NAMES = {"h": "hidden", "a": "heads", "L": "layers", "t": "t", "p": "p", "seq": "seq",
              "micro_batch": "micro_batch"}

#: The bound of each whole-number column (``codegen.runtime.inputs``): degrees, layers, sizes and counts.
_BOUNDS = {"t": DEGREE_MAX, "p": DEGREE_MAX, "d": DEGREE_MAX, "vp": DEGREE_MAX, "pipeline_interleaving": DEGREE_MAX,
           "L": LAYERS_MAX, "layers": LAYERS_MAX}


#: A whole-number cell within its column's bound.
_whole = whole_cells(_BOUNDS)
_mode = mode_cell


def _sequence_parallel(table: Table, i: int) -> bool:
    """Row *i*'s sequence parallelism: its ``sequence_parallel`` cell where given (true/false, yes/no, 1/0),
    else the figure's spelling of ``recompute`` (``sequence_parallel+selective``)."""
    if table.cells("sequence_parallel")[i].strip():
        return bool(table.cell(i, "sequence_parallel", parse_flag))
    words = table.cells("recompute")[i].strip().lower().replace("-", "_")
    return ("sequence_parallel" in words or "seq_parallel" in words) and "no_seqpar" not in words


def _run_table(path: Path) -> dict[str, tuple[Table, int]]:
    """The paper's run configurations by model (Table 3): its table and row, or nothing when the file is absent."""
    if not path.is_file():
        return {}
    table = read_table(path, ("model",))
    runs: dict[str, tuple[Table, int]] = {}
    for i, model in enumerate(table.cells("model")):
        runs.setdefault(model, (table, i))
    return runs


def _setting(table: Table, i: int, run: tuple[Table, int] | None, names: tuple[str, ...]) -> int | None:
    """A run setting: the row's own column, else the run table's, else ``None`` (the paper's default)."""
    for source, row in ((table, i), run or (None, 0)):
        for name in names:
            if source is not None and source.cells(name)[row].strip():
                return source.cell(row, name, _whole)
    return None


def _layers_only(values: Mapping[str, Any], part: str) -> float:
    """The first stage's *part* counting its transformer layers alone (no embedding, no output layer)."""
    return float(np.ravel(_call(_STAGE.format(part), dict(values, n_embedding=0.0, n_output=0.0)))[0])


def _predict(table: Table, i: int, run: tuple[Table, int] | None, settings: MemorySettings) -> dict[str, Any]:
    """The first stage's model states and activations (bytes per GPU) of row index *i* of a figure table.

    Raises:
        ValueError: naming the file, line and column of a bad cell, or the file and line of a row whose
            layout breaks one of ``eval``'s rules (``codegen.configs.validate``).
    """
    h, a, n_lay, t, p, s, b = (table.cell(i, k, _whole) for k in ("h", "a", "L", "t", "p", "seq", "micro_batch"))
    mine = {"h": h, "a": a, "L": n_lay, "t": t, "p": p, "seq": s, "micro_batch": b}
    if run is not None:
        for name, theirs in _RUN_NAMES.items():
            if run[0].cell(run[1], theirs, _whole) != mine[name]:
                raise table.refuse(i, f"{table.cells('model')[i]}: {name} = {mine[name]} but the run table "
                                      f"({run[0].where(run[1], theirs)}) says {run[0].cells(theirs)[run[1]]}")
    v = _setting(table, i, run, ("vocab",)) or 51200
    d = _setting(table, i, run, ("d",)) or 1
    vp = _setting(table, i, run, ("vp", "pipeline_interleaving")) or 1
    hff = _setting(table, i, run, ("ffn",)) or 4 * h
    global_batch = _setting(table, i, run, ("global_batch",))
    m = _setting(table, i, None, ("m",))
    if m is None and global_batch is not None:
        if global_batch % (b * d):
            raise table.refuse(i, f"global_batch {global_batch} is not a multiple of d·micro_batch = {d}·{b}")
        m = global_batch // (b * d)
    m = p if m is None else m
    mode, sp = table.cell(i, "recompute", _mode), _sequence_parallel(table, i)
    if h % a:
        raise table.refuse(i, f"h must be a multiple of the heads a (as a model file's hidden_size): {h} % {a} != 0")
    try:
        layout = Layout(d=d, t=t, p=p, m=m, b=b, vp=vp, sp=sp, op=settings.zero_level > 0,
                        recompute=RecomputePlan(mode))
        # GPT as Megatron-LM builds it: biases on every projection, LayerNorm (weight and bias), a
        # two-matrix GeLU MLP, the word embedding shared with the output layer.
        model = ModelConfig(name=table.cells("model")[i], source="csv", s=s, h=h, a=a, n_kv=a, dh=h / a, hff=hff,
                            v=v, n_lay=n_lay, layout=layout, n_ffMM=2, qkv_bias=True, o_bias=True, mlp_bias=True,
                            norm_bias=True, tie_emb_out=True)
        validate(model, layout)  # the rules symcost eval applies (t divides a, p·vp <= layers, ...)
    except LayoutError as exc:
        raise table.refuse(i, str(exc)) from None
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
    # Its model states too count the transformer layers alone (18 bytes for each of the 12h² weights per
    # layer); the first stage also holds the word embedding: both are reported, the stage compared.
    out = {"params_and_optimizer": parts["weights"] + parts["gradients"] + parts["optimizer"],
           "params_and_optimizer_layers": sum(_layers_only(values, k) for k in ("weights", "gradients", "optimizer")),
           "activations": parts["activations"], "activations_layers": _layers_only(values, "activations")}
    try:
        finite(f"{table.cells('model')[i]}: the predicted memory", list(out.values()))
    except ValueError as exc:
        raise table.refuse(i, str(exc)) from None
    return dict(out, vp=vp, m=m, d=d, v=v, sp=sp, mode=mode)


@dataclass(frozen=True)
class _Figure1:
    """A Figure-1-style table priced: its rows' texts and published figures, each configuration's prediction
    (bytes per GPU) and which configuration each row has."""

    models: list[str]
    recompute: list[str]
    config: np.ndarray
    predictions: list[dict[str, Any]]
    published_states: np.ndarray
    published_activations: np.ndarray

    def gib(self, name: str) -> np.ndarray:
        """The prediction *name* of every row, in GiB."""
        return np.array([got[name] for got in self.predictions])[self.config] / GIB

    def columns(self) -> dict[str, np.ndarray]:
        """Every row's figures of :func:`megatron_rows`, column by column (the same arithmetic, elementwise)."""
        states, act = self.published_states, self.published_activations
        states_gib, states_layers_gib = self.gib("params_and_optimizer"), self.gib("params_and_optimizer_layers")
        layers_gib, stage_gib = self.gib("activations_layers"), self.gib("activations")
        return {"params_and_optimizer_GiB": states_gib, "params_and_optimizer_published_GiB": states,
                "params_and_optimizer_rel_err": (states_gib - states) / states,
                "activations_GiB": layers_gib, "activations_published_GiB": act,
                "activations_rel_err": (layers_gib - act) / act,
                "activations_stage_GiB": stage_gib, "activations_stage_rel_err": (stage_gib - act) / act,
                "params_and_optimizer_layers_GiB": states_layers_gib,
                "params_and_optimizer_layers_rel_err": (states_layers_gib - states) / states}


def _figure1(path: Path, settings: MemorySettings, runs: Path | None) -> _Figure1:
    """The rows of *path* priced, each configuration (:data:`_CONFIG`) once; see :func:`megatron_rows`."""
    table = read_table(path, _REQUIRED)
    run_table = _run_table(runs) if runs is not None else {}
    first: dict[tuple[str, ...], int] = {}
    with no_cyclic_gc():
        keys = list(zip(*(table.cells(name) for name in _CONFIG if table.has(name))))
        config = np.array([first.setdefault(key, len(first)) for key in keys], dtype=np.int64)
    rows = np.unique(config, return_index=True)[1]  # each configuration's first row (codes in order of appearance)

    def predictions() -> list[dict[str, Any]]:
        return [_predict(table, i, run_table.get(table.cells("model")[i]), settings) for i in rows.tolist()]

    (states, act, got), error = first_error(
        lambda: table.real("params_and_optimizer_GiB_per_gpu"), lambda: table.real("activations_GiB_per_gpu"),
        predictions)
    if error is not None:
        raise error
    return _Figure1(table.cells("model"), table.cells("recompute"), config, got, states, act)


def megatron_rows(path: Path = MEGATRON_CSV, settings: MemorySettings = PAPER_SETTINGS, *,
                  runs: Path | None = RUNS_CSV) -> list[dict[str, Any]]:
    """Each row of a Figure-1-style CSV with the model's first-stage prediction and relative errors.

    ``activations_*`` are the first stage's transformer layers, what Figure 1 plots;
    ``activations_stage_*`` the whole stage's, embedding and output layer included.
    ``params_and_optimizer_*`` are the first stage's model states (the word embedding included), and
    ``params_and_optimizer_layers_*`` its transformer layers' alone, what Figure 1 counts.
    Rows with the same configuration (:data:`_CONFIG`) are priced once.

    Args:
        path: a CSV with the columns of ``megatron_memory_figure1.csv``.
        settings: the run settings the formulas need (:data:`PAPER_SETTINGS` by default).
        runs: the run table to join on ``model`` (``None``: none).

    Raises:
        ValueError: naming a missing column, or the file, line (and column) of a bad cell or of a row
            whose layout breaks a rule of ``symcost eval``; the earliest such line.
    """
    figure = _figure1(Path(path), settings, runs)
    columns = {name: values.tolist() for name, values in figure.columns().items()}
    layouts = [{k: got[k] for k in ("d", "vp", "m", "v", "sp", "mode")} for got in figure.predictions]
    with no_cyclic_gc():
        return [_row(i, figure.models[i], figure.recompute[i], columns, layouts[c])
                for i, c in enumerate(figure.config.tolist())]


def _row(i: int, model: str, recompute: str, columns: Mapping[str, list[float]],
         layout: Mapping[str, Any]) -> dict[str, Any]:
    """Row *i* of :func:`megatron_rows`."""
    row: dict[str, Any] = {"model": model, "recompute": recompute}
    # activations_*: what the figure counts, the transformer layers of the first stage (Table 2 × Eq. 5);
    # activations_stage_*: the whole stage, also §4.3's embedding dropout mask and, where the stage holds it,
    # the output layer; params_and_optimizer_layers_*: the model states of the first stage's layers alone.
    for name in ("params_and_optimizer_GiB", "params_and_optimizer_published_GiB", "params_and_optimizer_rel_err",
                 "activations_GiB", "activations_published_GiB", "activations_rel_err", "activations_stage_GiB",
                 "activations_stage_rel_err"):
        row[name] = columns[name][i]
    row["layout"] = dict(layout)
    row["params_and_optimizer_layers_GiB"] = columns["params_and_optimizer_layers_GiB"][i]
    row["params_and_optimizer_layers_rel_err"] = columns["params_and_optimizer_layers_rel_err"][i]
    return row


def run_memory_validation(data: Path | None = None) -> int:
    """``symcost validate memory [--data FILE]``: print each row with its relative errors, then one JSON line.

    With no *data*, first checks ZeRO's Table 1 (one summary line) and then the shipped Figure 1
    rows. Returns 1 when a Megatron row misses its bounds (the layers' activations, what
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
    path = MEGATRON_CSV if data is None else Path(data)
    figure = _figure1(path, PAPER_SETTINGS, RUNS_CSV)
    columns = figure.columns()
    ok &= bool(np.all(np.abs(columns["activations_rel_err"]) <= ACTIVATIONS_BOUND))
    ok &= bool(np.all(np.abs(columns["params_and_optimizer_rel_err"]) <= STATES_BOUND))
    print(rows_read(path, len(figure.config)))
    print(f"{'model':<12} {'recompute':<28} {'params+opt GiB':>15} {'published':>10} {'rel err':>8} "
          f"{'layers act GiB':>15} {'published':>10} {'rel err':>8} {'stage act GiB':>14} {'rel err':>8} "
          f"{'layers p+opt GiB':>17} {'rel err':>8}")
    with no_cyclic_gc():  # a row per line, and one JSON line of them all
        (states, want_states, states_err, act, want_act, act_err, stage, stage_err, layers, layers_err) = (
            columns[name].tolist() for name in (
                "params_and_optimizer_GiB", "params_and_optimizer_published_GiB", "params_and_optimizer_rel_err",
                "activations_GiB", "activations_published_GiB", "activations_rel_err", "activations_stage_GiB",
                "activations_stage_rel_err", "params_and_optimizer_layers_GiB", "params_and_optimizer_layers_rel_err"))
        models, recompute, config = figure.models, figure.recompute, figure.config.tolist()
        # A configuration's own figures print alike on each of its rows: formatted once per configuration.
        first = {c: i for i, c in reversed(list(enumerate(config)))}
        parts = {c: (f"{models[i]:<12} {recompute[i]:<28} {states[i]:>15.4f} ", f"{act[i]:>15.4f} ",
                     f"{stage[i]:>14.4f} ", f"{layers[i]:>17.4f} ") for c, i in first.items()}
        sys.stdout.writelines(
            f"{head}{want_states[i]:>10.4f} {states_err[i]:>+8.2%} {act_text}{want_act[i]:>10.4f} {act_err[i]:>+8.2%} "
            f"{stage_text}{stage_err[i]:>+8.2%} {layers_text}{layers_err[i]:>+8.2%}\n"
            for i, (head, act_text, stage_text, layers_text) in enumerate(map(parts.__getitem__, config)))
        # The JSON line as json.dumps writes it (its separators, repr of finite floats), row by row.
        text = {name: {value: json.dumps(value) for value in set(values)} for name, values in
                (("model", models), ("recompute", recompute))}
        sys.stdout.write('{"rows": [' + ", ".join(
            f'{{"model": {text["model"][models[i]]}, "recompute": {text["recompute"][recompute[i]]}, '
            f'"params_and_optimizer_rel_err": {states_err[i]!r}, "activations_rel_err": {act_err[i]!r}, '
            f'"activations_stage_rel_err": {stage_err[i]!r}, "params_and_optimizer_layers_rel_err": {layers_err[i]!r}}}'
            for i in range(len(models))) + "]}\n")
    return 0 if ok else 1
