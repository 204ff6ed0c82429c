"""``symcost search``: rank every valid layout of a model on N devices (docs/search.md).

``symcost search --model M --devices N --system S --global-batch B [--objective step-time|original]
[--top K] [--fix t=8] [--max p=16] [--recompute none,selective,full] [--zero 1] [--cp-algo NAME,…]
[--tp-cross-node] [--any-interleaving] [--keep-infeasible] [--no-memory] [--reserve GIB]
[--out FILE.csv|FILE.parquet] [--plot FILE.png] [--scheduler tcp://HOST:PORT]
[--scheduler-timeout S] [--engine numpy|dask] [--chunk N] [--json]`` prints the top K layouts (degrees, settings, step time
and its parts, memory per rank and headroom of the slowest stage from ``codegen.pricing.memory``),
then a summary line. Layouts whose memory per rank (at each layout's peak stage, ``codegen.pricing.memory.MemoryPricer``)
exceeds the GPU's HBM less the reserve (``--reserve GIB``, default 2) are dropped unless
``--keep-infeasible``. ``--out`` streams every feasible layout with its figures (CSV always; Parquet
with the optional ``pyarrow``); an existing file is never overwritten. ``--plot`` draws step time
against peak memory of the top layouts and their Pareto front (optional ``matplotlib``). A progress
bar (``tqdm``, optional) appears on searches longer than a second; Ctrl-C prints the best so far.
``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split`` walk Megatron-Core's
pipeline split (the summary line and the JSON's ``pipeline_split`` say which split the search walked).

Every option, the output paths and the scheduler are checked before any work (``codegen.search.options``), each
problem one line naming the option and the value, exit status 2: lists are merged (a recompute mode, ZeRO level
or CP algorithm given twice, or a CP algorithm by a label and an alias, is tried once), a ``--fix``/``--max``
key states one value, numbers keep the layout keys' bounds, ``--system`` takes a catalog name or alias,
``--chunk`` is at least 1,024, and a scheduler must answer Dask's handshake within ``--scheduler-timeout``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from symbolic.vocabulary import (DEFAULT_EP_DISPATCHER, DEFAULT_OVERLAP, EP_DISPATCHERS, OVERLAPS, PRECISIONS,
                                 RECOMPUTE_MODES, RECOMPUTE_MODULES, SEARCH_KEYS, SEARCH_SETTINGS, ZERO_LEVELS)

from . import COMMANDS
from ..configs import LayoutError, accounted, load_model, model_names
from ..pricing.exposure import overlap_names
from ..pricing.recompute import recompute_modules
from ..runtime.inputs import COUNT_MAX, DEVICES_MAX, parse_number, parse_whole
from ._output import PLOT_FORMATS, create, new_file, pyplot
from .eval import accounted_model, add_pipeline_split_options

OUT_COLUMNS = ("rank", *SEARCH_KEYS, *SEARCH_SETTINGS)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("search", help=COMMANDS["search"],
                       description="Enumerate every valid parallel layout of a model on N devices for a global "
                                   "batch, price each (step time or the original's cost) and print the best.")
    p.add_argument("--model", required=True, help=f"a bundled model ({', '.join(model_names())}) or a YAML path")
    p.add_argument("--devices", required=True,
                   help="N: devices of every layout (d·t·cp·p), at most 2**30; every degree is at most 2**20, so "
                        "past 2**20 devices the layouts are those whose degrees stay within it")
    p.add_argument("--system", required=True,
                   help="hardware catalog system or one of its aliases (GPU peak and efficiency, node size)")
    p.add_argument("--global-batch", required=True, help="samples per step: m = global_batch / (d·b) must be whole")
    p.add_argument("--objective", default="step-time", choices=("step-time", "comm-time", "original"),
                   help="step-time (compute + bubble + exposed comm; default), comm-time, or the original's cost")
    p.add_argument("--original-device", default="A2",
                   help="catalog device of the original's cost under --objective original (default A2)")
    p.add_argument("--top", default="10", help="layouts printed (default 10, at most 1,000,000)")
    p.add_argument("--fix", action="append", metavar="KEY=N",
                   help="pin a degree, e.g. --fix t=8 (repeatable; a key stated twice must have one value)")
    p.add_argument("--max", action="append", metavar="KEY=N",
                   help="bound a degree, e.g. --max p=16 (repeatable; a key stated twice must have one value)")
    p.add_argument("--recompute", default=",".join(RECOMPUTE_MODES),
                   help="uniform recompute modes to try (a mode given twice is tried once)")
    p.add_argument("--zero", "--zero-level", dest="zero", default="1",
                   help=f"ZeRO levels to try, e.g. {','.join(map(str, ZERO_LEVELS))} (default 1: optimizer states; a "
                        f"level given twice is tried once); --zero-level is the same option, as eval and sensitivity "
                        f"name the one level they price")
    p.add_argument("--cp-algo", default=None,
                   help="CP algorithms to try (default: the model's own); one named twice, or by a label and an "
                        "alias (ulysses,ulysses_cp), is tried once, under the first name")
    p.add_argument("--seq-len", default=None, metavar="N",
                   help="the run's sequence length, overriding the model file's (as s=N in eval's --layout)")
    add_pipeline_split_options(p)
    p.add_argument("--precision", default="bf16", choices=tuple(PRECISIONS),
                   help="the run's GEMM precision (default bf16): fp8, fp8-cs (Hopper and newer), mxfp8, nvfp4 "
                        "(Blackwell) run the linear layers' GEMMs at that precision's peak, and the memory filter "
                        "counts Transformer Engine's quantized saved inputs and weight copies (docs/search.md, "
                        "docs/memory.md)")
    p.add_argument("--overlap", default=None, metavar="LIST",
                   help=f"the communication the run overlaps with compute: {', '.join(OVERLAPS)} (comma-separated) "
                        f"or none (default {','.join(DEFAULT_OVERLAP)}: the data-parallel overlap of Megatron-Bridge's "
                        f"recipes and, with vp > 1, their pipeline one; tp: Transformer Engine's TP overlap; ep: "
                        f"Megatron-Core's EP all-to-all overlap; docs/search.md)")
    p.add_argument("--ep-dispatcher", default=DEFAULT_EP_DISPATCHER, choices=tuple(EP_DISPATCHERS),
                   help="how the experts' tokens move (default alltoall: NCCL's all-to-all, one copy per chosen "
                        "expert; deepep, hybridep: DeepEP's / Hybrid-EP's kernels, a token once per node and rank "
                        "holding its experts; docs/time.md)")
    p.add_argument("--recompute-modules", metavar="LIST", default=None,
                   help=f"modules every layer not fully recomputed recomputes in its backward pass, in every layout: "
                        f"{', '.join(RECOMPUTE_MODULES)} (comma-separated) or none (default none; Megatron-Core's "
                        f"recompute_modules: less activation memory, their forward again; docs/memory.md)")
    p.add_argument("--tp-cross-node", action="store_true", help="let t exceed the devices of a node")
    p.add_argument("--any-interleaving", action="store_true",
                   help="also try vp > 1 where Megatron-Core's interleaved pipeline needs settings beyond the degrees: "
                        "layers not filling the p·vp model chunks evenly (a stated pipeline layout) or m no multiple "
                        "of p (a micro-batch group size other than p); default: neither, but for a vp pinned by --fix")
    p.add_argument("--keep-infeasible", action="store_true",
                   help="rank layouts whose memory per rank exceeds the GPU's HBM too (flagged); default: dropped")
    p.add_argument("--no-memory", action="store_true", help="do not price memory (no feasibility filter)")
    p.add_argument("--reserve", metavar="GIB", default=None,
                   help="device memory per GPU kept back from the model (CUDA context, NCCL buffers, "
                        "fragmentation), GiB; default 2 (docs/memory.md)")
    p.add_argument("--bytes-grad", metavar="B", default=None, dest="bytes_grad",
                   help="bytes per gradient in the memory filter (default: the model file's, "
                        "train.mixed_precision.reduce_dtype; 2 where a recipe keeps gradients in BF16)")
    p.add_argument("--out", metavar="FILE.csv|FILE.parquet",
                   help="write every valid layout with the figures the search prices (a new file)")
    p.add_argument("--plot", metavar="FILE.png", help="plot step time against peak memory of the top layouts into FILE "
                                                     "(a new .png, .svg or .pdf; needs matplotlib)")
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="run on a dask.distributed scheduler")
    p.add_argument("--scheduler-timeout", default="5", metavar="SECONDS",
                   help="seconds the scheduler has to answer Dask's handshake (default 5, at most 600)")
    p.add_argument("--engine", default="numpy", choices=("numpy", "dask"),
                   help="numpy (in process, default) or dask (dask.array blocks, local threads)")
    p.add_argument("--chunk", default=str(1 << 18),
                   help="grid points per chunk, from 1,024 (below, a chunk's fixed cost outweighs its layouts) to "
                        "2**26 (memory is proportional; default 2**18)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the top rows as one JSON object")
    p.set_defaults(func=run)


#: Formats ``--out`` writes, by the file's suffix.
TABLE_FORMATS = {".csv": "csv", ".parquet": "parquet"}


def _parquet(option: str, path: Path) -> None:
    """Refuse a Parquet file without the optional pyarrow, before any work."""
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise ValueError(f"{option} {path}: Parquet needs the optional extra pyarrow (pip install "
                         f"symcost[search]); CSV needs nothing") from None


class _Writer:
    """Streams every chunk's table to CSV, or to Parquet through pyarrow: the columns the search prices
    (``codegen.search.priced_columns``; one it does not price would be NaN in every row)."""

    def __init__(self, path: Path, spec: Any):
        from ..search import priced_columns

        self.path, self.spec, self.rows = path, spec, 0
        self.columns = priced_columns(spec)
        self.parquet = TABLE_FORMATS[path.suffix.lower()] == "parquet"
        if self.parquet:
            _parquet("--out", path)
        self._writer: Any = None
        self._file: Any = None
        self._labels: dict[str, tuple[Any, ...]] | None = None

    def __call__(self, table: dict[str, np.ndarray]) -> None:
        if self._labels is None:  # the search's context is built by now: its labels cost nothing
            from ..search import setting_labels

            self._labels = setting_labels(self.spec)
        named = {key: column for key, column in table.items() if key in self.columns}
        for key in ("recompute", "cp_algo"):
            names = np.array(self._labels[key], dtype=object)
            named[key] = names[table[key]]
        if self.parquet:
            import pyarrow as pa
            import pyarrow.parquet as pq

            arrays = pa.table({k: (pa.array(v.astype(str)) if v.dtype == object else pa.array(v))
                               for k, v in named.items()})
            if self._writer is None:
                self._file = create(self.path, "--out")
                self._writer = pq.ParquetWriter(self._file, arrays.schema)
            self._writer.write_table(arrays)
        else:
            if self._file is None:
                self._file = io.TextIOWrapper(create(self.path, "--out"), encoding="utf-8", newline="")
                self._csv = csv.writer(self._file)
                self._csv.writerow(list(named))
            columns = [named[k].tolist() for k in named]
            self._csv.writerows(zip(*columns))
        self.rows += len(table["index"])

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()  # a Parquet writer given a file object leaves it open
        if self._file is not None:
            self._file.close()


def _memory(model: Any, row: dict[str, Any], system: str, precision: str, modules: tuple[str, ...]
            ) -> tuple[float, float] | None:
    """(peak bytes per rank, least headroom) of a row's layout in a run of *precision* recomputing *modules*, from
    codegen.pricing.memory; None without GPU facts."""
    from ..pricing.memory import DEFAULT_SETTINGS, NoCapacityError, stage_memory
    from dataclasses import replace
    from ..configs import RecomputePlan

    layout = replace(model.layout, **{k: int(row[k]) for k in SEARCH_KEYS},
                     cp_algo=row["cp_algo"], recompute=RecomputePlan(row["recompute"]), offset=None,
                     **ZERO_LEVELS[int(row["zero"])])
    if model.layout.offset is not None and (layout.p, layout.vp) == (model.layout.p, model.layout.vp):
        layout = replace(layout, offset=model.layout.offset)
    if layout.os is not None and layout.d % layout.os:
        layout = replace(layout, os=None)
    try:
        got = stage_memory(model, layout, system=system, settings=replace(DEFAULT_SETTINGS, precision=precision,
                                                                         recompute_modules=modules))
    except (NoCapacityError, LayoutError):
        return None
    totals = [s["total"] for s in got["stages"]]
    return max(totals), min(s["headroom"] for s in got["stages"])


def _progress(enabled: bool):
    state: dict[str, Any] = {"bar": None, "start": time.perf_counter()}
    if not enabled:
        return None, state

    def update(done: int, total: int) -> None:
        if state["bar"] is False:  # tqdm, the optional extra, is not installed: no bar
            return
        if state["bar"] is None:
            if time.perf_counter() - state["start"] < 1.0 and done < total:
                return
            if done >= total:
                return
            try:  # imported only when a search runs longer than a second
                from tqdm import tqdm
            except ImportError:
                state["bar"] = False
                return
            state["bar"] = tqdm(total=total, unit="layout", unit_scale=True, file=sys.stderr, leave=False)
            state["bar"].update(done)
            state["last"] = done
            return
        state["bar"].update(done - state["last"])
        state["last"] = done

    return update, state


def run(args: argparse.Namespace) -> int:
    from ..search import SearchSpec, check_scheduler, pareto_front, search, search_context
    from ..search.options import (CHUNK_MAX, CHUNK_MIN, GLOBAL_BATCH_MAX, TOP_MAX, cp_algorithms, parse_restrictions,
                                  recompute_modes, split_names, system_name, zero_levels)

    # Every option is checked, and every file path and the scheduler too, before any work.
    devices = parse_whole("--devices", args.devices, minimum=1, maximum=DEVICES_MAX)
    global_batch = parse_whole("--global-batch", args.global_batch, minimum=1, maximum=GLOBAL_BATCH_MAX)
    top = parse_whole("--top", args.top, minimum=1, maximum=TOP_MAX)
    chunk = parse_whole("--chunk", args.chunk, minimum=CHUNK_MIN, maximum=CHUNK_MAX)
    timeout = parse_whole("--scheduler-timeout", args.scheduler_timeout, minimum=1, maximum=600)
    system = system_name("--system", args.system)
    original_device = system_name("--original-device", args.original_device)
    zero = zero_levels("--zero", tuple(parse_whole("--zero", z, minimum=min(ZERO_LEVELS), maximum=max(ZERO_LEVELS))
                                      for z in split_names("--zero", args.zero)))
    recompute = recompute_modes("--recompute", split_names("--recompute", args.recompute))
    algos = cp_algorithms("--cp-algo", split_names("--cp-algo", args.cp_algo)) if args.cp_algo is not None else None
    fix = tuple(sorted(parse_restrictions(args.fix, "--fix").items()))
    maximum = tuple(sorted(parse_restrictions(args.max, "--max").items()))
    if args.out is not None and (args.scheduler is not None or args.engine == "dask"):
        raise ValueError("--out: writes every layout from the in-process search; drop --scheduler and --engine dask "
                         "to use it")
    out = new_file(args.out, "--out", TABLE_FORMATS)[0] if args.out is not None else None
    plot = new_file(args.plot, "--plot", PLOT_FORMATS) if args.plot is not None else None
    plt = pyplot("--plot") if plot is not None else None
    if args.precision != "bf16" and args.objective != "step-time":
        raise ValueError(f"--precision {args.precision}: prices the compute of --objective step-time; "
                         f"--objective {args.objective} has none")
    overlap = overlap_names("--overlap", DEFAULT_OVERLAP if args.overlap is None else args.overlap)
    if args.overlap is not None and overlap and args.objective == "original":
        raise ValueError(f"--overlap {args.overlap}: hides communication behind the compute of --objective step-time "
                         f"or comm-time; --objective original has none: add --overlap none or drop it")
    if args.ep_dispatcher != DEFAULT_EP_DISPATCHER and args.objective == "original":
        raise ValueError(f"--ep-dispatcher {args.ep_dispatcher}: prices the expert dispatch of --objective step-time "
                         f"or comm-time; --objective original has none")
    modules = recompute_modules("--recompute-modules", args.recompute_modules or ())
    if modules and args.objective != "step-time" and args.no_memory:
        raise ValueError(f"--recompute-modules {args.recompute_modules}: changes the memory filter and the step time's "
                         f"compute; --objective {args.objective} with --no-memory reads neither: drop it")
    reserve = None
    if args.reserve is not None:
        if args.no_memory:
            raise ValueError(f"--reserve {args.reserve}: a memory setting; drop --no-memory to use it")
        reserve = parse_number("--reserve", args.reserve, minimum=0.0, maximum=COUNT_MAX) * 2.0 ** 30
    bytes_grad = None
    if args.bytes_grad is not None:
        if args.no_memory:
            raise ValueError(f"--bytes-grad {args.bytes_grad}: a memory setting; drop --no-memory to use it")
        bytes_grad = parse_number("--bytes-grad", args.bytes_grad, minimum=0.0, maximum=COUNT_MAX)
        if not bytes_grad > 0:
            raise ValueError(f"--bytes-grad: expected bytes per gradient > 0, got {args.bytes_grad!r}")
    model = accounted_model(load_model(args.model), args)
    if args.seq_len is not None:
        # (the layout's s overrides the model file's for every family, as eval's --layout s=N does)
        seq = parse_whole("--seq-len", args.seq_len, minimum=1, maximum=COUNT_MAX)
        model = model.with_sequence_length(seq)
    spec = SearchSpec(model, devices, global_batch, system, objective=args.objective, fix=fix, maximum=maximum,
                      recompute=recompute, zero_levels=zero, cp_algos=algos, tp_cross_node=args.tp_cross_node,
                      any_interleaving=args.any_interleaving, original_device=original_device,
                      memory=not args.no_memory, keep_infeasible=args.keep_infeasible, precision=args.precision,
                      reserve_bytes=reserve,
                      overlap=overlap, bytes_grad=bytes_grad, recompute_modules=modules,
                      ep_dispatcher=args.ep_dispatcher)
    if args.scheduler is not None:
        check_scheduler(args.scheduler, "--scheduler", timeout)
    context = search_context(spec)  # the space and pricers the search will use (built once)
    space = context.space
    writer = _Writer(out, spec) if out is not None else None
    update, state = _progress(not args.no_progress and not args.json)
    try:
        result = search(spec, top=top, chunk=chunk, engine=args.engine, scheduler=args.scheduler,
                        progress=update, sink=writer, scheduler_timeout=timeout)
    finally:
        if writer is not None:
            writer.close()
        if state["bar"]:
            state["bar"].close()
    labels = result.labels
    rows = result.rows()
    split = ",".join(part for part, on in zip(("embedding", "loss"), accounted(model)) if on)
    for row in rows:
        if row["fits"] < 0:  # not priced by the search (--no-memory): the one-layout evaluation
            mem = _memory(model, row, system, args.precision, spec.recompute_modules)
            row["memory_peak_bytes"], row["headroom_bytes"] = mem if mem is not None else (None, None)
            row["fits"] = None if mem is None else int(mem[1] >= 0)
    if args.json:
        print(json.dumps({"model": model.name, "devices": devices, "system": spec.system,
                          "objective": args.objective, "pipeline_split": split or "even",
                          "layouts": result.layouts, "grid": result.grid,
                          "interrupted": result.interrupted, "seconds": round(result.seconds, 3),
                          "top": [{k: (None if isinstance(v, float) and not np.isfinite(v) else v)
                                   for k, v in row.items()} for row in rows]}))
    else:
        _print(rows, args.objective, len(labels["cp_algo"]))
        note = " (interrupted by Ctrl-C: the best so far)" if result.interrupted else ""
        written = ("" if writer is None else f"; no layout to write to {out}" if not writer.rows else
                   f"; wrote {writer.rows:,} layouts (the feasible ones unless --keep-infeasible) to {out}")
        missing = (" Communication is not in this build's step time (0 s): see docs/search.md."
                   if context.step is not None and context.step.comm is None else "")
        counted = " and ".join(f"the {part}" for part in split.split(",")) if split else ""
        under = (f" under Megatron-Core's pipeline split ({counted} counted as "
                 f"{'layers' if ',' in split else 'a layer'})" if split else "")
        # (the interleaving policy, said where a pipeline was possible: the flag that lifts it is otherwise unseen)
        piped = bool(np.any(space.base["p"] > 1))
        policy = (" (vp > 1 as Megatron-Core interleaves from the degrees alone; --any-interleaving for the rest)"
                  if space.plain_interleaving and piped else "")
        print(f"{result.layouts:,} valid layouts{under}{policy} in {result.seconds:.2f} s{note}{written}.{missing}")
        if not result.layouts:
            print(space.why_empty() or
                  f"No layout of {devices:,} devices meets the constraints: the degrees' product is the device "
                  f"count, t divides the attention heads (and fits a node without --tp-cross-node), ep the experts, "
                  f"p·vp at most the layers, the global batch splits into whole micro-batches, every degree is at most "
                  f"2**20; check --fix and --max.")
        elif not rows and not result.interrupted:
            print("No valid layout fits in memory on this system; --keep-infeasible lists them, flagged.")
    if plot is not None:
        _plot(plt, rows, *plot, pareto_front)
        print(f"wrote {plot[0]}", file=sys.stderr if args.json else sys.stdout)
    return 130 if result.interrupted else 0


def _gib(value: Any) -> str:
    return "-" if value is None else f"{value / 2**30:.1f}"


def _print(rows: list[dict[str, Any]], objective: str, cp_algos: int) -> None:
    # The CP algorithm is a column when the search tried several (--cp-algo a,b): else every row has the same.
    algo = max((len(r["cp_algo"]) for r in rows), default=0) if cp_algos > 1 else 0
    head = (f"{'#':>3} {'d':>6} {'t':>3} {'p':>3} {'cp':>3} {'ep':>4} {'etp':>3} {'vp':>3} {'b':>3} {'m':>5} "
            f"{'recompute':>9} {'zero':>4}  " + (f"{'cp_algo':<{algo}}  " if algo else ""))
    if objective == "original":
        head += f"{'original cost':>14}"
    else:
        head += f"{'step s':>9} {'compute':>9} {'bubble':>8} {'comm':>7}"
    head += f" {'mem GiB':>8} {'headroom':>8} {'fits':>4}"
    print(head)
    for i, r in enumerate(rows, 1):
        line = (f"{i:>3} {r['d']:>6} {r['t']:>3} {r['p']:>3} {r['cp']:>3} {r['ep']:>4} {r['etp']:>3} {r['vp']:>3} "
                f"{r['b']:>3} {r['m']:>5} {r['recompute']:>9} {r['zero']:>4}  " +
                (f"{r['cp_algo']:<{algo}}  " if algo else ""))
        if objective == "original":
            line += f"{r['original_cost']:>14.6g}"
        else:
            line += f"{r['step_time_s']:>9.4f} {r['compute_s']:>9.4f} {r['bubble_s']:>8.4f} {r['comm_s']:>7.4f}"
        fits = {None: "-", 0: "no", 1: "yes"}[r["fits"]]
        line += f" {_gib(r['memory_peak_bytes']):>8} {_gib(r['headroom_bytes']):>8} {fits:>4}"
        print(line)


def _plot(plt: Any, rows: list[dict[str, Any]], path: Path, fmt: str, pareto_front: Any) -> None:
    pts = [(r["objective"], r["memory_peak_bytes"] / 2**30) for r in rows if r["memory_peak_bytes"] is not None]
    fig, ax = plt.subplots(figsize=(6, 4))
    if pts:
        x, y = (np.array(v) for v in zip(*pts))
        ax.scatter(x, y, s=12, label="top layouts")
        front = pareto_front(x, y)
        ax.plot(x[front], y[front], "r.-", label="Pareto front")
    ax.set_xlabel("objective (step time, s)")
    ax.set_ylabel("peak memory per rank (GiB)")
    ax.legend()
    fig.tight_layout()
    with create(path, "--plot") as handle:  # a file object and its format: matplotlib writes exactly *path*
        fig.savefig(handle, format=fmt)
    plt.close(fig)
