"""``symcost eval --model NAME --layout …``: each pipeline stage's communication and its parts.

With ``--memory``, also each stage's memory per rank (``codegen.pricing.memory.stage_memory``).
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from typing import Any, Iterable

from symbolic.vocabulary import (DEFAULT_EP_DISPATCHER, DEFAULT_OVERLAP, EP_DISPATCHERS, OVERLAPS, PRECISIONS,
                                 RECOMPUTE_MODES, RECOMPUTE_MODULES)

from . import COMMANDS
from ..configs import (Layout, LayoutBatch, LayoutError, ModelConfig, accounted, accounted_split_offset,
                       interleaving_notes, load_model, model_names, parse_layout, validate)
from ..runtime.inputs import COUNT_MAX, DEVICES_MAX, finite, json_text, parse_number, parse_whole
from ..pricing.exposure import overlap_names
from ..pricing.memory import DEFAULT_SETTINGS, MemorySettings, NoCapacityError, stage_memory
from ..pricing.placement import DEFAULT_ORDER
from ..pricing.pricer import StagePricer
from ..pricing.recompute import recompute_modules
from ..pricing.step_comm import gathered_in
from ._step import print_step_time, step_time_result

DIMS = (("DP", "dp"), ("TP", "tp"), ("EP", "ep"), ("CP", "cp"))

#: What the numbers are in: the footer of the table and ``"units"`` of ``--json``.
UNITS = {"FLOP": "units as the original sums them: DP in parameters (bytes under --fsdp), dense TP in elements, "
                 "EP/CP/MoE TP in bytes (see docs)",
         "TIME": "units as the original scores them: DP, TP and CP as level scores (TIME path), EP in bytes "
                 "(see docs)"}


def devices_count(text: str) -> int:
    """``--devices``: a whole number in ASCII digits within ``codegen.runtime.inputs.DEVICES_MAX``."""
    return parse_whole("--devices", text, minimum=1, maximum=DEVICES_MAX)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help=COMMANDS["eval"],
                       description="Evaluate the closed-form stage totals of a model for one parallel layout: "
                                   "each pipeline stage's total and its DP/TP/EP/CP parts, in the original's "
                                   "mixed units by default; --convention consistent gives bytes per rank per "
                                   "step, --cost time seconds per step on a system, and --memory the memory "
                                   "per rank against the GPU's HBM (see docs).")
    p.add_argument("--model", required=True, help=f"a bundled model ({', '.join(model_names())}) or a YAML path")
    p.add_argument("--layout", default="", help="e.g. d=32,t=4,p=8,cp=1,ep=1,m=144,b=1 (keys left out keep the "
                                                "model file's own layout)")
    p.add_argument("--device", "--system", dest="device", default="A2",
                   help="the catalog system (a name or an alias) of the level model, the memory and the time costs; "
                        "default A2; --system is the same option, as search, collective and validate name it")
    p.add_argument("--devices", help="total device count the layout must fill (d*t*cp*p)")
    p.add_argument("--recompute", help=f"{', '.join(RECOMPUTE_MODES)}, or fully recomputed layers per stage N,N,...")
    p.add_argument("--fsdp", action="store_true", help="price DP as FSDP traffic (grad_shard_as_params)")
    p.add_argument("--with-recomp", action="store_true",
                   help="add each recomputed layer's traffic again (the original's with_recomp sum; the original "
                        "convention only)")
    p.add_argument("--ttype", choices=("FLOP", "TIME"), default=None,
                   help="FLOP (volumes; default) or TIME (level scores for DP, TP, CP); the original convention only")
    p.add_argument("--memory", action="store_true",
                   help="also print each stage's memory per rank by part against the --device GPU's HBM "
                        "(GiB; bytes under --json); needs a --device with GPU facts, e.g. dgx_h100")
    p.add_argument("--cost", choices=("volume", "time", "step-time"), default="volume",
                   help="volume (default: the --convention's volumes), time: each stage's communication seconds "
                        "per step by dimension and collective on NCCL's model, or step-time: the step's compute, "
                        "bubble and exposed communication and each stage's memory, as the search prices them "
                        "(time and step-time need a --device with GPU and network facts, e.g. dgx_h100)")
    p.add_argument("--seq-len", default=None, metavar="N",
                   help="the run's sequence length, overriding the model file's (as s=N in --layout)")
    p.add_argument("--precision", default=None, choices=tuple(PRECISIONS),
                   help="with --cost step-time or --memory: the linear layers' GEMM precision (default bf16; "
                        "docs/search.md), and in memory their quantized saved inputs and weight copies "
                        "(docs/memory.md); with --cost time or --convention consistent (and in step-time): the "
                        "width the data-parallel ranks gather the weights at (FP8: 1 byte a parameter, unless "
                        "--bf16-weights)")
    p.add_argument("--overlap", default=None, metavar="LIST",
                   help=f"with --cost step-time: the communication the run overlaps with compute, "
                        f"{', '.join(OVERLAPS)} (comma-separated) or none (default {','.join(DEFAULT_OVERLAP)}; "
                        f"docs/search.md)")
    p.add_argument("--ep-dispatcher", default=None, choices=tuple(EP_DISPATCHERS),
                   help="with --cost time or step-time: how the experts' tokens move (default alltoall: NCCL's "
                        "all-to-all; deepep, hybridep: DeepEP's / Hybrid-EP's kernels, a token once per node and "
                        "rank holding its experts; docs/time.md)")
    p.add_argument("--convention", choices=("original", "consistent"), default=None,
                   help="volumes as the original sums them (default) or consistent: bytes per rank per step by "
                        "dimension and collective")
    p.add_argument("--order", default=None,
                   help=f"rank order for --cost time, innermost first (default Megatron's {DEFAULT_ORDER})")
    add_pipeline_split_options(p)
    add_memory_options(p, "--memory")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


# ----------------------------------------------------------------- memory settings (eval --memory, sensitivity)

#: The memory options, their ``MemorySettings`` field and what they hold.
MEMORY_AMOUNTS = {"--reserve": ("reserve_bytes", "GiB"), "--bytes-param": ("bytes_p", "bytes per parameter"),
                  "--bytes-grad": ("bytes_grad", "bytes per parameter"),
                  "--bytes-optimizer": ("bytes_optimizer", "bytes per parameter")}


def add_memory_options(p: argparse.ArgumentParser, needs: str) -> None:
    """The run settings of the memory formulas (``MemorySettings``), for the option *needs* that turns memory on."""
    d = DEFAULT_SETTINGS
    group = p.add_argument_group(f"memory settings (with {needs})")
    group.add_argument("--reserve", metavar="GIB", help="device memory per GPU kept back from the model (CUDA "
                                                        "context, NCCL buffers, fragmentation), GiB; default "
                                                        f"{d.reserve_bytes / 2 ** 30:g} (docs/memory.md)")
    group.add_argument("--bytes-param", metavar="B", help="bytes per weight (default: the model file's, "
                                                          "train.mixed_precision.param_dtype or model.param_init_type)")
    group.add_argument("--bytes-grad", metavar="B", help="bytes per gradient (default: the model file's, "
                                                         "train.mixed_precision.reduce_dtype)")
    group.add_argument("--bytes-optimizer", metavar="K", help=f"optimizer-state bytes per parameter (default "
                                                              f"{d.bytes_optimizer:g}: Adam's fp32 master weight "
                                                              "and two moments)")
    group.add_argument("--no-flash-attention", action="store_true",
                       help="keep the s-by-s attention scores for the backward pass (no fused attention kernel)")
    group.add_argument("--zero-level", metavar="Z", help="ZeRO stage 0-3 of every layout (default: from the "
                                                         "layout: fsdp 3, op with grad_shard 2, op 1, else 0)")
    group.add_argument("--recompute-modules", metavar="LIST",
                       help=f"modules every layer not fully recomputed recomputes in its backward pass, "
                            f"{', '.join(RECOMPUTE_MODULES)} (comma-separated) or none (default none; Megatron-Core's "
                            f"recompute_modules; also read by eval --cost step-time; docs/memory.md)")
    group.add_argument("--bf16-weights", action="store_true",
                       help="with a --precision other than bf16: keep the linear layers' weights in BF16 with Transformer "
                            "Engine's cached quantized copies beside them (Megatron-Core's fp8_param_gather = False; "
                            "default: the quantized weights are the primary ones, as NVIDIA's FP8 recipes set it)")


#: Every memory option (``add_memory_options``), in the order a message names the first one given; the recompute
#: modules are a setting of ``eval --cost step-time`` too.
MEMORY_OPTIONS = (*MEMORY_AMOUNTS, "--no-flash-attention", "--zero-level", "--bf16-weights", "--recompute-modules")
#: The memory settings no communication cost reads (``--bf16-weights`` is read by both: the width the data-parallel
#: ranks gather the weights at).
MEMORY_ONLY_OPTIONS = tuple(o for o in MEMORY_OPTIONS if o != "--bf16-weights")


def given_options(args: argparse.Namespace, options: Iterable[str]) -> list[str]:
    """The *options* the command line gave, each as it was written (``--order zz``; a flag alone).

    Options whose default is ``None`` (or ``False`` for a flag) tell given from not given; a run that
    does not read an option refuses it when given (:func:`refuse_options`) rather than ignoring it.
    """
    given = []
    for option in options:
        value = getattr(args, option[2:].replace("-", "_"), None)
        if value is None or value is False:
            continue
        given.append(option if value is True else f"{option} {shlex.quote(str(value))}")
    return given


def refuse_options(args: argparse.Namespace, options: Iterable[str], why: str) -> None:
    """Refuse the first of *options* given: one line naming it and its value, then *why* it does not apply.

    Raises:
        ValueError: ``"--order zz: <why>"``.
    """
    given = given_options(args, options)
    if given:
        raise ValueError(f"{given[0]}: {why}")


def _amount(option: str, text: str, unit: str) -> float:
    """A memory amount through the gate: ASCII decimal notation, finite, from 0 to ``COUNT_MAX``."""
    return parse_number(option, text, minimum=0.0, maximum=COUNT_MAX)


def memory_settings(args: argparse.Namespace, needs: str, wanted: bool) -> MemorySettings:
    """``MemorySettings`` from the memory options; *wanted* says whether the option *needs* is on.

    Raises:
        ValueError: one line naming the option: a negative, NaN, infinite or unreadable number, a
            ZeRO stage other than 0-3, or a memory option without *needs*.
    """
    given = {option: getattr(args, option[2:].replace("-", "_"), None) for option in MEMORY_AMOUNTS}
    zero = getattr(args, "zero_level", None)
    flash_off = bool(getattr(args, "no_flash_attention", False))
    if not wanted:
        refuse_options(args, MEMORY_OPTIONS, f"a memory setting; it needs {needs}")
    changes: dict[str, Any] = {}
    for option, text in given.items():
        if text is not None:
            field, unit = MEMORY_AMOUNTS[option]
            value = _amount(option, text, unit)
            changes[field] = value * 2.0 ** 30 if option == "--reserve" else value
    if zero is not None:
        if zero.strip() not in ("0", "1", "2", "3"):
            raise ValueError(f"--zero-level: expected a ZeRO stage 0, 1, 2 or 3, got {zero!r}")
        changes["zero_level"] = int(zero)
    if flash_off:
        changes["flash_attention"] = 0.0
    if wanted and getattr(args, "precision", None) is not None:
        changes["precision"] = args.precision
    if getattr(args, "bf16_weights", False):
        if changes.get("precision", "bf16") == "bf16":
            raise ValueError("--bf16-weights: a setting of a low-precision run (eval --memory with --precision "
                             "fp8, fp8-cs, mxfp8 or nvfp4)")
        changes["lowp_primary_weights"] = False
    if getattr(args, "recompute_modules", None) is not None:
        changes["recompute_modules"] = recompute_modules("--recompute-modules", args.recompute_modules)
    return dataclasses.replace(DEFAULT_SETTINGS, **changes)


def add_pipeline_split_options(p: argparse.ArgumentParser) -> None:
    """``--account-for-embedding-in-pipeline-split`` and ``--account-for-loss-in-pipeline-split`` (eval, search)."""
    for part, place in (("embedding", "first stage's first"), ("loss", "last stage's last")):
        p.add_argument(f"--account-for-{part}-in-pipeline-split", action="store_true",
                       help=f"split the pipeline as Megatron-Core's account_for_{part}_in_pipeline_split does: the "
                            f"{part} counts as one layer, the {place} model chunk builds one decoder layer fewer, "
                            f"and the layers so counted must divide over p and vp (docs/model.md)")


def accounted_model(model: ModelConfig, args: argparse.Namespace) -> ModelConfig:
    """*model* with the pipeline split of the ``--account-for-*-in-pipeline-split`` flags (added to the switches its
    file sets, never clearing one).

    Raises:
        LayoutError: naming the flags, where the model file's offset splits its own pipeline too (Megatron-Core
            refuses both at once).
    """
    on = {part: bool(getattr(args, f"account_for_{part}_in_pipeline_split", False)) for part in ("embedding", "loss")}
    if not any(on.values()):
        return model
    if model.layout.offset is not None:
        flags = " and ".join(f"--account-for-{part}-in-pipeline-split" for part, o in on.items() if o)
        raise LayoutError(f"{flags}: the model file's offset splits its pipeline already; drop one of them")
    return dataclasses.replace(model, **{f"account_for_{part}_in_pipeline_split": True for part, o in on.items() if o})


def run_model(args: argparse.Namespace) -> ModelConfig:
    """The model of ``--model``, its layout's sequence length set by ``--seq-len`` where given (which every family
    then reads, as ``s=N`` in ``--layout``; both at once is an error), its pipeline split Megatron-Core's accounted
    one where ``--account-for-*-in-pipeline-split`` say so.

    Raises:
        ValueError: naming ``--seq-len`` and its value, or the model file's error.
    """
    model = accounted_model(load_model(args.model), args)
    if getattr(args, "seq_len", None) is None:
        return model
    seq = parse_whole("--seq-len", args.seq_len, minimum=1, maximum=COUNT_MAX)
    if any(part.strip().startswith("s=") for part in (args.layout or "").split(",")):
        raise ValueError(f"--seq-len {args.seq_len}: --layout states s= already: give the sequence length once")
    return model.with_sequence_length(seq)


def run_layout(args: argparse.Namespace, model: ModelConfig) -> Layout:
    """The command line's layout: ``--layout`` over the model file's, with ``--fsdp`` and ``--recompute``.

    Raises:
        LayoutError: naming the ``--account-for-*-in-pipeline-split`` flags (or the model file's switches) *model*
            was read with (:func:`run_model`), where the layers they count do not divide over the pipeline.
    """
    layout = parse_layout(args.layout, model.layout, fsdp=True if args.fsdp else None, recompute=args.recompute)
    embedding, loss = accounted(model)
    if not (embedding or loss):
        return layout
    given = [f"--account-for-{part}-in-pipeline-split" for part in ("embedding", "loss")
             if getattr(args, f"account_for_{part}_in_pipeline_split", False)]
    flags = " and ".join(given) or "the model file's account_for_*_in_pipeline_split"
    try:
        accounted_split_offset(model.n_lay, model.n_mtp, layout.p, layout.vp, embedding, loss)
    except LayoutError as exc:
        raise LayoutError(f"{flags}: {exc}") from None
    return layout


def stage_results(args: argparse.Namespace) -> dict[str, Any]:
    """The stage totals and per-dimension lists for the command's arguments, from the one pricer."""
    model = run_model(args)
    settings = memory_settings(args, "--memory", getattr(args, "memory", False))
    devices = None if args.devices is None else devices_count(args.devices)
    layout = run_layout(args, model)
    pricer = StagePricer(model, device=args.device, with_recomp=args.with_recomp, ttype=_ttype(args))
    validate(model, layout, devices)
    stages = pricer.price_batch(LayoutBatch.from_layouts([layout]), per_stage=True, validated=True).stages
    per_dim = {label: finite(f"stage {label} cost", stages[key][0, :layout.p]).tolist() for label, key in DIMS}
    totals = finite("stage total", stages["total"][0, :layout.p]).tolist()
    res = {"model": args.model, "layout": str(layout), "device": args.device, "stages": totals, "per_dim": per_dim}
    if getattr(args, "memory", False):
        try:
            res["memory"] = stage_memory(model, layout, system=args.device, settings=settings)
        except NoCapacityError as exc:
            # The Ascend levels (A2, A3) describe links only; memory needs a catalog GPU's HBM.
            raise ValueError(f"--memory: {exc}; choose a --device with a GPU, e.g. --device dgx_h100") from None
    return res


#: Column headings of the memory table, by part of ``stage_memory``'s stages.
MEMORY_HEADINGS = {"weights": "weights", "gradients": "grads", "optimizer": "optimizer",
                   "activations": "activations", "recompute_workspace": "workspace", "total": "total",
                   "capacity": "capacity", "headroom": "headroom"}
GIB = 2.0 ** 30


def print_memory(memory: dict[str, Any]) -> None:
    """The memory table: one row per stage, GiB per rank, and a footer with the units and settings."""
    cols = list(MEMORY_HEADINGS)
    print()
    print(f"{'stage':>5}  " + "  ".join(f"{MEMORY_HEADINGS[c]:>11}" for c in cols) + f"  {'fits':>4}")
    for row in memory["stages"]:
        print(f"{row['stage']:>5}  " + "  ".join(f"{row[c] / GIB:>11.3f}" for c in cols)
              + f"  {'yes' if row['fits'] else 'no':>4}")
    print(f"memory per rank in GiB (2^30 bytes): capacity is the GPU's HBM, headroom = capacity - reserve "
          f"({memory['reserve_bytes'] / GIB:g} GiB) - total; ZeRO stage {memory['zero_level']}, "
          f"variant {memory['variant']}; workspace is what a recomputed layer holds again in its backward pass.")
    if "settings" in memory:
        m, origin = memory["settings"], memory.get("widths_from", {})
        where = {name: " (model file)" if origin.get(name) == "model" else " (given)" if origin.get(name) else ""
                 for name in ("bytes_p", "bytes_grad", "bytes_compute")}
        print(f"bytes per parameter: weights {m['bytes_p']:g}{where['bytes_p']}, gradients {m['bytes_grad']:g}"
              f"{where['bytes_grad']}, optimizer {m['bytes_optimizer']:g}; activations {m['bytes_compute']:g} bytes"
              f"{where['bytes_compute']}; flash attention {'on' if m['flash_attention'] else 'off'}.")
    if "precision" in memory:  # a low-precision run (docs/memory.md, "Low precision")
        m = memory["settings"]
        copies = ", ".join(f"{row['weight_copies'] / GIB:.3f}" for row in memory["stages"])
        kind = "primary weights, no BF16 copy" if m["lowp_primary_weights"] else "cached beside the BF16 weights"
        print(f"precision {memory['precision']}: linear layers' saved inputs {m['bytes_lowp_input']:g} bytes per "
              f"element; quantized weights {m['bytes_lowp_weight']:g} bytes per parameter, {kind} (of the weights, "
              f"GiB per stage: {copies}); output projection's own copy {'yes' if m['lowp_proj_copy'] else 'no'}.")


TIME_UNITS = ("seconds per training step per rank (stage), NCCL's predicted time of each call times the calls per "
              "step; no overlap with compute; the bottleneck is the stage with the most seconds")
CONSISTENT_UNITS = "bytes one rank sends per training step (calls x the collective's share of nccl-tests size S)"


def gathered_model(args: argparse.Namespace, model: ModelConfig, run: str) -> ModelConfig:
    """*model* with its weights gathered over the data-parallel ranks at the width of ``--precision``'s run (at 16
    bits with ``--bf16-weights``; ``codegen.pricing.step_comm.gathered_in``), for the communication *run* prices.

    Raises:
        ValueError: ``--bf16-weights`` without a low ``--precision``, naming *run*.
    """
    precision = args.precision or "bf16"
    if args.bf16_weights and precision == "bf16":
        raise ValueError(f"--bf16-weights: a setting of a low-precision run (its weights gathered at 16 bits); "
                         f"{run} needs --precision fp8, fp8-cs, mxfp8 or nvfp4 with it")
    return gathered_in(model, precision, not args.bf16_weights)


def _consistent(args: argparse.Namespace) -> dict[str, Any]:
    """Per stage, by dimension and collective: seconds (``--cost time``) or bytes per rank per step."""
    from ..pricing.time import TIME_DIMENSIONS, TimePricer

    model = run_model(args)
    devices = None if args.devices is None else devices_count(args.devices)
    layout = run_layout(args, model)
    time = args.cost == "time"
    order = DEFAULT_ORDER if args.order is None else args.order
    precision = args.precision or "bf16"
    gathered = gathered_model(args, model, "--cost time" if time else "--convention consistent")
    pricer = TimePricer(gathered, system=args.device, order=order, volumes_only=not time,
                        ep_dispatcher=args.ep_dispatcher or DEFAULT_EP_DISPATCHER)
    validate(model, layout, devices)
    batch = LayoutBatch.from_layouts([layout])
    if time:
        prices = pricer.price_batch(batch, validated=True, per_stage=True)
        table, what = prices.stages, "time_s"
    else:
        table, what = pricer.volumes(batch, validated=True), "step_bytes"
    stages = []
    for i in range(layout.p):
        row: dict[str, Any] = {"stage": i}
        by_coll = {key: float(finite(f"stage {i} {key}", table[what][key][0, i])) for key in table[what]}
        by_dim = {dim: sum(v for k, v in by_coll.items() if k.split(".")[0] == dim) for dim in TIME_DIMENSIONS}
        key = "total_s" if time else "total_bytes"
        row[key] = sum(by_dim.values())
        row["by_dimension"] = by_dim
        row["by_collective"] = by_coll
        row["calls"] = {k: float(table["calls_count"][k][0, i]) for k in table["calls_count"]}
        row["msg_bytes"] = {k: float(table["msg_bytes"][k][0, i]) for k in table["msg_bytes"]}
        if time:
            row["step_bytes"] = {k: float(table["step_bytes"][k][0, i]) for k in table["step_bytes"]}
        stages.append(row)
    res: dict[str, Any] = {"model": args.model, "layout": str(layout), "device": args.device, "cost": args.cost,
                           "convention": "consistent", "order": order, "precision": precision,
                           "gather_bytes_per_param": float(gathered.bytes_p), "stages": stages,
                           "units": TIME_UNITS if time else CONSISTENT_UNITS}
    if time:
        res["ep_dispatcher"] = pricer.ep_dispatcher
        b = int(prices.bottleneck_stage[0])
        res["bottleneck"] = {"stage": b, "seconds": float(prices.bottleneck_s[0]),
                             "by_dimension": {d: float(v[0]) for d, v in prices.by_dimension.items()}}
    return res


def _print_consistent(res: dict[str, Any]) -> None:
    time = res["cost"] == "time"
    scale, unit = (1e3, "ms") if time else (2.0 ** -30, "GiB")
    total = "total_s" if time else "total_bytes"
    dims = list(res["stages"][0]["by_dimension"]) if res["stages"] else []
    print(f"model {res['model']}  layout {res['layout']}  device {res['device']}  order {res['order']}"
          + (f"  EP dispatcher {res['ep_dispatcher']}" if time else "")
          + (f"  precision {res['precision']} (weights gathered at {res['gather_bytes_per_param']:g} "
             f"byte{'' if res['gather_bytes_per_param'] == 1 else 's'} a parameter)" if res["precision"] != "bf16"
             else ""))
    print(f"{'stage':>5}  {'total ' + unit:>12}  " + "  ".join(f"{d.upper() + ' ' + unit:>12}" for d in dims))
    for row in res["stages"]:
        print(f"{row['stage']:>5}  {row[total] * scale:>12.4f}  "
              + "  ".join(f"{row['by_dimension'][d] * scale:>12.4f}" for d in dims))
    colls = [k for k in (res["stages"][0]["by_collective"] if res["stages"] else {})
             if any(row["by_collective"][k] for row in res["stages"])]
    if colls:
        print()
        print(f"{'stage':>5}  " + "  ".join(f"{k:>22}" for k in colls))
        for row in res["stages"]:
            print(f"{row['stage']:>5}  " + "  ".join(f"{row['by_collective'][k] * scale:>22.4f}" for k in colls))
    if time:
        b = res["bottleneck"]
        print(f"bottleneck: stage {b['stage']}, {b['seconds'] * 1e3:.4f} ms of communication per step")
    print(f"{unit}: {res['units']}.")


def _ttype(args: argparse.Namespace) -> str:
    return "FLOP" if args.ttype is None else args.ttype


def check_applies(args: argparse.Namespace) -> None:
    """Refuse an option the run does not read, given explicitly: each belongs to one output.

    ============================  ==============================================================
    output                        reads, besides --model --layout --device --devices --recompute
                                  --fsdp --json
    ============================  ==============================================================
    the original convention       --ttype, --with-recomp, --memory (and with it the memory
    (default)                     options: --reserve, --bytes-*, --no-flash-attention, --zero-level)
    --convention consistent       --precision, --bf16-weights (bytes per rank per step: no rank
                                  order, no hardware time; the weights gathered at the run's width)
    --cost time                   --order, --ep-dispatcher (and what --convention consistent reads,
                                  which it is)
    ============================  ==============================================================

    Raises:
        ValueError: one line naming the first option given that the run does not read, and its value.
    """
    if args.cost == "step-time":
        refuse_options(args, ("--convention", "--ttype", "--with-recomp", "--order",
                              *(o for o in MEMORY_OPTIONS if o != "--recompute-modules")),
                       "--cost step-time prices the step as the search does (memory with the model's widths and "
                       "the layout's ZeRO level, Megatron's rank order): drop it")
        if getattr(args, "memory", False):
            raise ValueError("--memory: --cost step-time prints each stage's memory already: drop --memory")
        return
    time = args.cost == "time"
    consistent = time or args.convention == "consistent"
    if not getattr(args, "memory", False) and not consistent:
        refuse_options(args, ("--precision",), "the precision of --cost step-time, --cost time, --convention "
                                               "consistent and --memory; the original's volumes do not read it: drop "
                                               "it or add one of those")
    refuse_options(args, ("--overlap",), "the overlap of --cost step-time's exposed communication; the volumes and "
                                         "--cost time do not read it: drop it or add --cost step-time")
    if not time:
        refuse_options(args, ("--ep-dispatcher",), "the expert dispatcher of --cost time and step-time; the volumes "
                                                   "do not read it: drop it or add --cost time or step-time")
    if time and args.convention == "original":
        raise ValueError("--convention original: --cost time prices seconds per rank per step by collective, "
                         "the consistent convention; drop --convention original or --cost time")
    run = "--cost time" if time else "--convention consistent" if args.convention == "consistent" else None
    if run is not None:
        if getattr(args, "memory", False):
            raise ValueError(f"--memory: prints with the original convention only; drop {run} or --memory")
        refuse_options(args, MEMORY_ONLY_OPTIONS,
                       f"a memory setting (read with --memory, under the original convention only); {run} does not "
                       f"read it: drop it")
        refuse_options(args, ("--ttype", "--with-recomp"), f"a setting of the original convention; {run} does not "
                                                           "read it: drop it")
    if not time:
        refuse_options(args, ("--order",), "the rank order places the groups of --cost time; the volumes do not "
                                           "read it: drop it or add --cost time")


def run(args: argparse.Namespace) -> int:
    check_applies(args)
    if args.cost == "step-time":
        model = run_model(args)
        devices = None if args.devices is None else devices_count(args.devices)
        layout = run_layout(args, model)
        validate(model, layout, devices)
        overlap = overlap_names("--overlap", DEFAULT_OVERLAP if args.overlap is None else args.overlap)
        modules = recompute_modules("--recompute-modules", args.recompute_modules or ())
        res = step_time_result(model, layout, args.device, args.precision or "bf16", overlap, modules,
                               args.ep_dispatcher or DEFAULT_EP_DISPATCHER)
        notes = interleaving_notes(model, layout)  # priced all the same; the search leaves such layouts out
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        if args.json:
            print(json_text(res | {"model": args.model, "layout": str(layout), "notes": list(notes)}))
        else:
            print_step_time(res, args.model, str(layout))
        return 0
    if args.cost == "time" or args.convention == "consistent":
        res = _consistent(args)
        if args.json:
            print(json_text({k: v for k, v in res.items() if k not in ("model", "layout", "device")}
                            | {"model": res["model"], "layout": res["layout"], "device": res["device"]}))
        else:
            _print_consistent(res)
        return 0
    res = stage_results(args)
    if args.json:
        out: dict[str, Any] = {"stages": res["stages"], "per_dim": res["per_dim"], "units": UNITS[_ttype(args)]}
        if "memory" in res:
            out["memory"] = res["memory"]
        print(json_text(out))
        return 0
    print(f"model {res['model']}  layout {res['layout']}  device {res['device']}")
    print(f"{'stage':>5}  {'total':>14}  " + "  ".join(f"{label:>14}" for label, _ in DIMS))
    for i, total in enumerate(res["stages"]):
        parts = "  ".join(f"{res['per_dim'][label][i]:>14.6g}" for label, _ in DIMS)
        print(f"{i:>5}  {total:>14.6g}  {parts}")
    print(UNITS[_ttype(args)] + ".")
    if "memory" in res:
        print_memory(res["memory"])
    return 0
