"""``symcost sensitivity``: parse the options, print the table, the JSON or the plot (``codegen.pricing.sensitivity``).

Command line::

    symcost sensitivity --model NAME [--layout K=V,…] [--device D] [--fsdp] [--recompute R] [--with-recomp]
                        [--ttype FLOP|TIME] [--objective max|sum|memory] [--degrees t,cp,…] [--json] [--plot FILE.png]
                        [--cost volume|time] [--order tp-cp-ep-dp-pp] [--ep-dispatcher alltoall|deepep|hybridep]
                        [--account-for-embedding-in-pipeline-split] [--account-for-loss-in-pipeline-split]
                        [memory settings: --precision P --reserve GIB --bytes-param B --bytes-grad B
                         --bytes-optimizer K --no-flash-attention --zero-level Z --recompute-modules L --bf16-weights]

``--json`` prints ``{"objective", "value", "degrees": {x: {"value", "derivative", "elasticity",
"doubling_ratio"}}, "units"}``; with ``--cost time`` (communication seconds per step on NCCL's model, a
catalog system with GPU facts as ``--device``) also ``"cost": "time"``, ``"system"``, ``"order"``,
``"ep_dispatcher"`` and ``"levels": {L: {"symbols", "derivative", "elasticity"}}`` for each network level's α and
β; ``--plot FILE`` draws the objective against each degree over the powers of two that give valid layouts into
exactly FILE (a ``.png``, ``.svg`` or ``.pdf``, which must not exist yet: ``codegen.cli._output``) and needs
matplotlib (the ``plot`` extra).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import hardware
from symbolic.vocabulary import DEFAULT_EP_DISPATCHER, DEGREES, EP_DISPATCHERS, PRECISIONS, RECOMPUTE_MODES

from . import COMMANDS
from ..configs import ModelConfig, load_model, model_names
from ..runtime.inputs import finite, json_text
from ._output import PLOT_FORMATS, create, new_file, pyplot
from .eval import (MEMORY_ONLY_OPTIONS, UNITS, accounted_model, add_memory_options, add_pipeline_split_options,
                   gathered_model, memory_settings, refuse_options, run_layout)
from ..pricing.sensitivity import (Sensitivity, Settings, TimeSensitivity, check_degrees, objective_curve,
                                   sensitivity, time_sensitivity)

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sensitivity", help=COMMANDS["sensitivity"],
                       description="How a layout's communication cost (bottleneck stage or sum over stages; "
                                   "volumes, or seconds with --cost time) or its memory per rank "
                                   "(--objective memory) responds to each parallel degree and size: the "
                                   "partial derivative of the stage closed forms with derived fields held, the "
                                   "elasticity, and the ratio after doubling the degree and re-pricing from "
                                   "scratch. Ranked by |elasticity|.")
    p.add_argument("--model", required=True, help=f"a bundled model ({', '.join(model_names())}) or a YAML path")
    p.add_argument("--layout", default="", help="e.g. d=32,t=4,p=8,m=144 (keys left out keep the model's layout)")
    p.add_argument("--device", "--system", dest="device", default="A2",
                   help="the catalog system (a name or an alias) of the level model, the memory and the time costs; "
                        "default A2; --system is the same option, as search, collective and validate name it")
    p.add_argument("--recompute", help=f"{', '.join(RECOMPUTE_MODES)}, or fully recomputed layers per stage N,N,...")
    p.add_argument("--fsdp", action="store_true", help="price DP as FSDP traffic (grad_shard_as_params)")
    p.add_argument("--with-recomp", action="store_true", help="price the recompute sums (as symcost eval)")
    p.add_argument("--ttype", default=None, help="FLOP (volumes; default) or TIME (level scores); the communication "
                                                 "volume objectives (max, sum) only")
    p.add_argument("--objective", default="max", help="max (bottleneck stage; default), sum (over stages) or memory "
                                                      "(the peak stage's memory per rank, bytes)")
    p.add_argument("--degrees", default=",".join(DEGREES), help=f"comma-separated subset of {','.join(DEGREES)}")
    p.add_argument("--cost", choices=("volume", "time"), default="volume",
                   help="volume: the original's stage totals (default); time: communication seconds per step on "
                        "NCCL's model (needs a --device with GPU facts, e.g. dgx_h100), with each network level's "
                        "alpha (latencies) and beta (bandwidths)")
    p.add_argument("--order", default=None, help="rank order for --cost time, innermost first (default Megatron's "
                                                 "tp-cp-ep-dp-pp)")
    p.add_argument("--precision", default=None, choices=tuple(PRECISIONS),
                   help="with --objective memory: the run's GEMM precision, its linear layers' quantized saved inputs "
                        "and weight copies in memory (default bf16; docs/memory.md, \"Low precision\"); with --cost "
                        "time: the width its data-parallel ranks gather the weights at (FP8: 1 byte a parameter, "
                        "unless --bf16-weights)")
    add_memory_options(p, "--objective memory")
    p.add_argument("--ep-dispatcher", default=None, choices=tuple(EP_DISPATCHERS),
                   help="with --cost time: how the experts' tokens move (default alltoall: NCCL's all-to-all; deepep, "
                        "hybridep: a token once per node and rank holding its experts; docs/time.md)")
    add_pipeline_split_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", metavar="FILE.png", help="write the objective against each degree into FILE (.png, "
                                                      ".svg or .pdf; a new file; needs matplotlib)")
    p.set_defaults(func=run)


def _settings(args: argparse.Namespace) -> Settings:
    ttype = "FLOP" if args.ttype is None else args.ttype
    return Settings(device=args.device, fsdp=args.fsdp, recompute=args.recompute, with_recomp=args.with_recomp,
                    ttype=ttype, objective=args.objective,
                    memory=memory_settings(args, "--objective memory", args.objective == "memory"))


def _fmt(value: float | None) -> str:
    return "null" if value is None else f"{value:.6g}"


def _check_finite(result: Sensitivity) -> None:
    """No inf or NaN is printed as a cost or a sensitivity: name what overflowed instead."""
    finite("objective", result.value)
    for d in result.degrees.values():
        finite(f"derivative by {d.name}", d.derivative)
        finite(f"elasticity of {d.name}", d.elasticity)
        if d.doubling_ratio is not None:
            finite(f"doubling ratio of {d.name}", d.doubling_ratio)


#: What ``--objective memory`` prices.
MEMORY_UNITS = "bytes per rank (memory of the peak pipeline stage)"


#: ``"units"`` of ``--json``.
def units(settings: Settings) -> dict[str, str]:
    if settings.objective == "memory":
        return {"value": MEMORY_UNITS, "derivative": "bytes per rank per unit of the degree",
                "elasticity": "dimensionless (relative change of the value per relative change of the degree)",
                "doubling_ratio": "dimensionless (value with the degree doubled / value)"}
    return {"value": UNITS[settings.ttype], "derivative": "the value's units per unit of the degree",
            "elasticity": "dimensionless (relative change of the value per relative change of the degree)",
            "doubling_ratio": "dimensionless (value with the degree doubled / value)"}


#: ``"units"`` of ``--cost time --json``.
TIME_UNITS = {
    "value": "seconds of communication per training step (bottleneck stage for max, all stages for sum)",
    "derivative": "seconds per unit of the degree",
    "elasticity": "dimensionless (relative change of the value per relative change of the degree)",
    "doubling_ratio": "dimensionless (value with the degree doubled / value)",
    "levels.derivative": "seconds per unit of the level's relative scale (all its symbols multiplied together)",
    "levels.elasticity": "dimensionless (relative change of the value per relative change of the level's scale)",
}


def _run_time(args: argparse.Namespace) -> int:
    if args.objective == "memory":
        raise ValueError("--objective memory: applies to the volume cost only; drop it or --cost time")
    refuse_options(args, ("--ttype", "--with-recomp", "--plot"),
                   "applies to the volume cost only; --cost time does not read it: drop it or --cost time")
    refuse_options(args, MEMORY_ONLY_OPTIONS,
                   "a memory setting (read with --objective memory, under the volume cost); --cost time does not "
                   "read it: drop it")
    precision = args.precision or "bf16"
    degrees = check_degrees([item.strip() for item in args.degrees.split(",") if item.strip()])
    model = gathered_model(args, _model(args), "--cost time")
    result = time_sensitivity(model, args.layout, system=args.device, order=args.order, fsdp=args.fsdp,
                              recompute=args.recompute, objective=args.objective, degrees=degrees,
                              ep_dispatcher=args.ep_dispatcher or DEFAULT_EP_DISPATCHER)
    _check_finite(result)
    for lv in result.levels.values():
        finite(f"derivative by {lv.name}", lv.derivative)
    if args.json:
        print(json_text({**result.as_json(), "precision": precision, "units": TIME_UNITS}))
        for d in result.degrees.values():
            if d.reason is not None:
                print(f"note: doubling {d.name} ({d.doubled_layout}): {d.reason}", file=sys.stderr)
        return 0
    _print_table(args.model, Settings(device=args.device, objective=args.objective), result, precision)
    print(f"{'level':>13}  {'derivative s':>13}  {'elasticity':>11}  symbols scaled together")
    for lv in sorted(result.levels.values(), key=lambda lv: -abs(lv.elasticity)):
        print(f"{lv.name:>13}  {lv.derivative:>13.6g}  {lv.elasticity:>11.4g}  {', '.join(lv.symbols)}")
    print("level derivative: seconds per unit of a relative scale of the level's symbols (1 = as bound); "
          "alpha: latencies, beta: bandwidths. Group placement held; the chosen NCCL algorithm's slope (a.e.).")
    return 0


def _model(args: argparse.Namespace) -> ModelConfig:
    """The model of ``--model`` with the pipeline split of ``--account-for-*-in-pipeline-split``; the layout is
    checked against that split here so that an error names the flags (``codegen.cli.eval.run_layout``)."""
    model = accounted_model(load_model(args.model), args)
    run_layout(args, model)
    return model


def run(args: argparse.Namespace) -> int:
    """Options a run does not read are refused when given: ``--order`` and ``--ep-dispatcher`` belong to ``--cost
    time``; ``--ttype`` and ``--with-recomp`` to the communication objectives (``max``, ``sum``), not to
    ``--objective memory``; the memory options to ``--objective memory`` (``memory_settings``)."""
    if args.cost == "time":
        return _run_time(args)
    refuse_options(args, ("--order",), "the rank order places the groups of --cost time; the volume cost does not "
                                       "read it: drop it or add --cost time")
    refuse_options(args, ("--ep-dispatcher",), "the expert dispatcher of --cost time; the volume cost does not read "
                                               "it: drop it or add --cost time")
    if args.objective == "memory":
        refuse_options(args, ("--ttype", "--with-recomp"), "a setting of the communication volumes; --objective "
                                                           "memory does not read it: drop it")
    else:
        refuse_options(args, ("--precision",), "the precision of --objective memory (its quantized saved inputs and "
                                               "weight copies); the communication volumes do not read it: drop it or "
                                               "add --objective memory")
    settings = _settings(args)
    if settings.memory.precision != "bf16" and hardware.load(args.device).gpu is None:
        raise ValueError(f"--precision {settings.memory.precision}: the bytes of its quantized copies are its GPU's; "
                         f"{args.device} has no GPU facts in the hardware catalog: choose a --device with a GPU, "
                         f"e.g. --device dgx_h100")
    degrees = check_degrees([item.strip() for item in args.degrees.split(",") if item.strip()])
    target = new_file(args.plot, "--plot", PLOT_FORMATS) if args.plot is not None else None
    plt = pyplot("--plot") if target is not None else None
    model = _model(args)
    result = sensitivity(model, args.layout, settings, degrees)
    _check_finite(result)
    if args.json:
        extra = {"precision": settings.memory.precision} if settings.objective == "memory" else {}
        print(json_text({**result.as_json(), **extra, "units": units(settings)}))
        for d in result.degrees.values():
            if d.reason is not None:
                print(f"note: doubling {d.name} ({d.doubled_layout}): {d.reason}", file=sys.stderr)
    else:
        _print_table(args.model, settings, result)
    if plt is not None and target is not None:
        path, fmt = target
        _plot(plt, model, args.layout, settings, result, path, fmt)
        print(f"wrote {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _print_table(name: str, settings: Settings, result: Sensitivity, precision: str = "bf16") -> None:
    timed = isinstance(result, TimeSensitivity)
    where = (f"bottleneck stage {', '.join(map(str, result.bottleneck))}" if settings.objective == "max"
             else f"sum over {len(result.stages)} stages")
    if settings.objective == "memory":
        where = f"peak stage {', '.join(map(str, result.bottleneck))}"
        precision = settings.memory.precision
    print(f"model {name}  layout {result.layout}  device {settings.device}"
          + (f"  precision {precision}" if precision != "bf16" else ""))
    print(f"objective {settings.objective} = {result.value:.6g} ({where}); ranked by |elasticity|")
    print(f"{'degree':>6}  {'value':>7}  {'derivative':>13}  {'elasticity':>11}  {'x2 ratio':>9}  note")
    for d in result.ranked():
        note = f"x2 invalid: {d.reason}" if d.reason else ""
        print(f"{d.name:>6}  {d.value:>7}  {d.derivative:>13.6g}  {d.elasticity:>11.4g}  "
              f"{_fmt(d.doubling_ratio):>9}  {note}")
    value_units = TIME_UNITS["value"] if timed else MEMORY_UNITS if settings.objective == "memory" else UNITS[
        settings.ttype]
    print(f"value: {value_units}; derivative: value units per unit of the degree.")
    held = ("sp, t_exp, the ZeRO stage, shard sizes" if settings.objective == "memory"
            else "sp, t_exp, d_exp, ZeRO levels, group placement" if timed
            else "comm_*, t_exp, d_exp, ZeRO levels, shards")
    print(f"derivative: d objective / d degree with derived fields ({held}, layer counts) held; p through layer "
          "counts ∝ 1/p. x2 ratio: doubled layout re-priced from scratch.")


def _plot(plt: Any, model: ModelConfig, layout_text: str, settings: Settings, result: Sensitivity,
          path: Path, fmt: str) -> None:
    names = list(result.degrees)
    columns = min(4, len(names))
    rows = math.ceil(len(names) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 3.0 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names):
        points = objective_curve(model, layout_text, name, settings)
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        ax.plot(xs, ys, marker="o", markersize=3)
        current = result.degrees[name].value
        ax.plot([current], [result.value], marker="*", markersize=10, color="tab:red", linestyle="none")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(name)
        ax.set_title(f"{name} (elasticity {result.degrees[name].elasticity:.3g})", fontsize=9)
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    axes.flat[0].set_ylabel(f"{settings.objective} stage total")
    fig.suptitle(f"{model.name} {result.layout}: {settings.objective} objective per degree", fontsize=10)
    fig.tight_layout()
    # A file object and an explicit format: matplotlib then writes exactly *path* (given a name
    # without a suffix it would append one and write elsewhere).
    with create(path, "--plot") as handle:
        fig.savefig(handle, format=fmt, dpi=120)
    plt.close(fig)
