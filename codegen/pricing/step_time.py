"""Step time of a batch of layouts: compute of the slowest stage, the pipeline bubble, exposed communication.

The closed forms are ``symbolic.compute``'s, compiled into ``generated.compute``:
``compute_<variant>_stage_flop`` (FLOPs one rank of a stage computes per step),
``compute_<variant>_stage_hbm_bytes`` (HBM bytes of its memory-bound work),
``compute_<variant>_stage_vector_flop`` (FLOPs of its element-wise work on the vector unit),
``compute_<variant>_stage_lowp_flop`` (the FLOPs of its GEMMs in the run's low precision, FP8 and the like),
``compute_stage_time_s`` (FLOPs over the GPU's peak × its generation's GEMM efficiency, the low-precision ones
over that precision's, plus bytes over the peak HBM bandwidth × its HBM efficiency plus vector FLOPs over the
vector unit's peak × its vector efficiency, all from the hardware catalog's ``[gpu]``), ``compute_pipeline_bubble``
(``(p − 1)/(vp·m)``) and ``compute_step_time_s``. This module only counts a stage's layers (the even
split of :func:`codegen.configs.chunk_layer_counts`, or the model's own offset for its own
pipeline) and picks the slowest stage: the first (it holds the extra layers of an uneven split) or the
last (it holds the output layer). A model with a published layer structure (``ModelConfig.has_layer_kinds``:
leading dense layers of a MoE model, multi-token-prediction heads, sliding-window layers) has those layers
priced where they are (``codegen.pricing.layer_kinds``), and three stages are priced: the first, the heaviest
other one but the last, and the last.

Communication. :class:`StepTimePricer` adds what the compute does not hide of the seconds a ``comm`` callable
returns per layout (``comm(chunk) -> {"tp", "cp", "ep", "dp", "pp": (n,) seconds}``), under the run's overlap
(``codegen.pricing.exposure.exposed_comm``, docs/search.md "Exposed communication"): a dimension not overlapped
is exposed entirely, one overlapped (``dp`` and, in an interleaved pipeline, ``pp`` by default, the recipes';
``tp``, ``ep``) only beyond its window of the stage's compute; full recompute repeats the forward TP, EP and CP collectives (the shares
``symbolic.stage_time``'s items declare, :func:`forward_shares`). Without ``comm`` the communication part is 0
and is reported as such.

Public API::

    NoComputeFactsError
    StepTimePricer(model, *, system, comm=None, flash_attention=1.0, dropout=0.0, precision="bf16",
                   overlap=DEFAULT_OVERLAP)
    pricer.exposed(by_dimension, recompute, cp_algo, compute_s, m, zero, p=1, vp=1) -> exposed s under its overlap
    pricer.price(values, recompute, chunk=None, zero=None, parts=None, *, validated=False, full_share=None)
        -> dict[str, ndarray]   # PARTS
    pricer.listed_stage_parts(values, plan, zero=1) -> (every stage's parts, layers, fully recomputed layers)
    pricer.price_plan(values, plan, chunk=None, zero=None) -> PARTS of one layout under a RecomputePlan
    pricer.compute(values, recompute, zero=1) -> (compute seconds, FLOPs, HBM bytes, vector FLOPs)
    pricer.stage_flops(values, recompute) -> FLOPs;  pricer.step_time(compute_s, values, comm) -> seconds
    (price, compute, stage_flops and step_time check their arguments unless validated=True: a search's own calls)
    compute_family(system, ...), step_time_family(system, comm=None, ...) -> FamilySpec;  compute_terms(model)
    exposed_time_comm(model, system, overlap=…, precision=…, ep_dispatcher=…) -> comm(batch, compute_s)
    pricer.bound_forms(p, vp, stages) -> per row of fixed b·m, the compute bound's linear forms in m
    pricer.compute_bound(forms, row, m) -> compute × (1 + bubble), a lower bound of the step time
    exposed_comm(parts, recompute, cp_algo=None, *, overlap=(), compute_s=None, m=None, zero=1, p=1, vp=1)
        -> exposed seconds (re-exported from codegen.pricing.exposure)
    forward_shares(cp_algo=None) -> {dimension: share of its calls a layer's forward pass runs}
    stage_layer_counts(model, p, vp) -> (first, last) arrays
    time_family_comm(model, system, precision="bf16", *, lowp_primary_weights=True, ep_dispatcher="alltoall")
        -> comm callable (.stage_seconds(chunk), .item_keys), or None without codegen.pricing.time
    time_item_keys(model) -> {item: keys and settings its seconds per stage follow from}
    (these two re-exported from codegen.pricing.step_comm)
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Mapping, Sequence

import numpy as np

import hardware
from hardware import System
from symbolic.vocabulary import DEFAULT_EP_DISPATCHER, DEFAULT_OVERLAP, attention_variant

from ..configs import (LayoutBatch, LayoutError, ModelConfig, RecomputePlan, accounted, accounted_stage_layers,
                       chunk_layer_counts, pipeline_stage_counts, stage_layer_kinds, stage_layers)
from ..runtime import inputs
from .engine import distinct_rows, term_arguments, term_function
from .exposure import exposed_comm, forward_shares, overlap_names
from .families import FamilySpec
from .layer_kinds import combined_flops, combined_parts, kind_inputs, kind_stages
from .low_precision import precision_name, require_capability
from .memory import zero_level_of
from .recompute import module_values
from .recompute import recompute_modules as module_names
from .step_comm import gathered_in, time_family_comm, time_item_keys

__all__ = ["NoComputeFactsError", "PARTS", "StepTimePricer", "compute_family", "compute_terms", "step_time_family",
           "exposed_time_comm", "exposed_comm", "forward_shares", "stage_layer_counts",
           "time_family_comm", "time_item_keys"]

#: What :meth:`StepTimePricer.price` returns per layout: step time and its parts (seconds), the
#: bottleneck stage's FLOPs per rank at the reference GEMM efficiency (``COMPUTE_PARTS``: a GEMM below 16 GFLOP
#: counts its FLOPs 1.5 or 9 times) and the bubble fraction.
PARTS = ("step_time_s", "compute_s", "bubble_s", "comm_s", "stage_flops", "bubble")

#: :meth:`StepTimePricer.compute_bound` is lowered by this relative amount: its linear forms round in another
#: order than pricing a layout does (a few units in the last place, far below this).
BOUND_SLACK = 1e-12


class NoComputeFactsError(ValueError):
    """A system whose catalog entry lacks the GPU peak or compute efficiency the step time needs."""


def stage_layer_counts(model: ModelConfig, p: np.ndarray, vp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Body layers (MTP included) of the most loaded non-last stage and of the last stage, per layout.

    Even split (``chunk_layer_counts``): each of the ``p·vp`` slots holds ``L // (p·vp)`` layers and the first
    ``L % (p·vp)`` slots in model order one more, so stage 0 holds ``vp·base + min(vp, ⌈rem/p⌉)`` (the most of
    any stage) and stage ``p − 1`` holds ``vp·base + min(vp, ⌊rem/p⌋)``. Layouts with the model's own ``(p, vp)``
    and an offset take the offset's counts; a model whose split counts the embedding or the loss as layers takes
    that split's (``codegen.configs.accounted_stage_layers``). The counts come from a table over every ``(p, vp)``
    up to the largest asked for; *p* and *vp* beyond the model's layers ``n_lay + n_mtp`` (at most ``LAYERS_MAX``
    = 2**10) are refused, so the table holds at most 2**20 entries (8 MiB an array) whatever the layouts.

    Raises:
        InputError: naming *p* or *vp* when not whole numbers from 1 to the model's layers, or of other shapes.
    """
    total = model.n_lay + model.n_mtp
    p, vp = _pipeline_depths(model, p, vp)
    if any(accounted(model)):
        return accounted_stage_layers(model, p)
    top_p, top_vp = int(np.max(p, initial=1)), int(np.max(vp, initial=1))
    pp, vv = np.meshgrid(np.arange(1, top_p + 1), np.arange(1, top_vp + 1), indexing="ij")
    base, rem = np.divmod(total, pp * vv)  # one entry per (p, vp) value, gathered per layout below
    first = (vv * base + np.minimum(vv, (rem + pp - 1) // pp))[p - 1, vp - 1]
    last = (vv * base + np.minimum(vv, rem // pp))[p - 1, vp - 1]
    own = model.layout
    if own.offset is not None:
        counts = [sum(row) for row in chunk_layer_counts(model, own)]
        mine = (p == own.p) & (vp == own.vp)
        if np.any(mine):
            head = max(counts[:-1]) if len(counts) > 1 else counts[0]
            first = np.where(mine, head, first)
            last = np.where(mine, counts[-1], last)
    return first, last


def _gpu_facts(system: System | str, precision: str = "bf16"
               ) -> tuple[float, float, float, float, float, float, str, float, float]:
    """(BF16 peak, GEMM efficiency, HBM bandwidth, HBM efficiency, vector peak, vector efficiency, system name,
    low-precision peak, low-precision efficiency) of *system* for a run in *precision* (``bf16``: the BF16 pair).

    Raises:
        NoComputeFactsError: naming the system and the fact it lacks, or the precision its GPU cannot run.
        ValueError: naming an unknown precision.
    """
    precision_name("--precision", precision)
    spec = inputs.system("system", system)
    gpu = spec.gpu
    if gpu is None:
        raise NoComputeFactsError(f"--system {spec.name}: the catalog entry has no [gpu] table (peak FLOP/s), so no "
                                  f"compute time; systems with one: "
                                  f"{', '.join(n for n in hardware.names() if hardware.load(n).gpu is not None)}")
    for name in ("compute_efficiency", "hbm_bytes_per_s", "hbm_efficiency", "vector_flops_per_s", "vector_efficiency"):
        if getattr(gpu, name) is None:
            raise NoComputeFactsError(f"--system {spec.name}: its GPU {gpu.model} has no {name} in the catalog (no "
                                      f"published figure for its generation), so no compute time")
    chosen = require_capability(precision, spec, NoComputeFactsError)
    for name in (chosen.peak, chosen.efficiency):
        if getattr(gpu, name) is None:
            raise NoComputeFactsError(f"--precision {precision}: the {gpu.model} of --system {spec.name} has no "
                                      f"{name} in the catalog, so no compute time in {precision}")
    return (gpu.peak_flops_bf16_per_s, gpu.compute_efficiency, gpu.hbm_bytes_per_s, gpu.hbm_efficiency,
            gpu.vector_flops_per_s, gpu.vector_efficiency, spec.name, getattr(gpu, chosen.peak),
            getattr(gpu, chosen.efficiency))


#: The compute family's parts: the generated stage forms of ``symbolic.compute`` by what they count (the FLOPs of
#: the GEMMs in a low precision, a part of the stage's FLOPs, are read only in a run that has them). The FLOPs are
#: the GEMMs' at the reference efficiency: each GEMM's over its size's efficiency ratio (``stage_gemm_flop``,
#: docs/search.md "Compute"), the FLOPs whose seconds at peak × ``compute_efficiency`` are the GEMMs' seconds.
COMPUTE_PARTS = {"flops": "stage_gemm_flop", "lowp_flops": "stage_lowp_gemm_flop", "hbm_bytes": "stage_hbm_bytes",
                 "vector_flops": "stage_vector_flop"}
#: The parts whose terms count FLOPs at the reference efficiency (``..._gemm_flop``): their real FLOPs are the same
#: name's ``..._flop`` form (:meth:`StepTimePricer.stage_flops`).
REAL_FLOP_PARTS = ("flops", "dense_flops", "window_saved_flops")


def _attention_ratio(system: System | str) -> float:
    """The fused attention kernel's efficiency over the reference GEMM efficiency on *system*'s GPU
    (``attention_efficiency / compute_efficiency``; ``symbolic.compute.score_gemm_ratio``), 1 where the catalog states
    no kernel figure (the scores' matmuls then sized as GEMMs). Call after :func:`_gpu_facts` has checked the GPU."""
    gpu = inputs.system("system", system).gpu
    if gpu is None or gpu.attention_efficiency is None or not gpu.compute_efficiency:
        return 1.0
    return gpu.attention_efficiency / gpu.compute_efficiency


def compute_terms(model: ModelConfig, _batch: LayoutBatch | None = None, *, precision: str = "bf16"
                  ) -> dict[str, str]:
    """The compute family's stage terms of *model* (its attention variant and whether it has experts pick them;
    the model alone): FLOPs, HBM bytes and vector FLOPs one rank of a stage runs per step, and the FLOPs of its
    GEMMs in the run's low precision unless *precision* is ``bf16``; for a model with experts and leading dense
    layers, the same four of those layers (``dense_*``); for a model with sliding-window layers, the score FLOPs
    their windows save (``window_saved_flops``). Every FLOP term is its GEMMs' at the reference efficiency
    (``..._gemm_flop``, ``COMPUTE_PARTS``)."""
    variant = attention_variant(dc_kv=float(model.dc_kv), dc_q=float(model.dc_q)).value
    kind = f"{variant}_{'moe' if model.is_moe else 'dense'}"
    out = {part: f"compute_{kind}_{suffix}" for part, suffix in COMPUTE_PARTS.items()
           if part != "lowp_flops" or precision != "bf16"}
    if model.is_moe and model.first_k_dense:
        out.update({f"dense_{part}": f"compute_{variant}_moe_dense_layers_{suffix}" for part, suffix in
                    COMPUTE_PARTS.items() if part != "lowp_flops" or precision != "bf16"})
    if model.window_layers:
        out["window_saved_flops"] = f"compute_{variant}_window_saved_gemm_flop"
    return out


def _compute_inputs(counts: Mapping[str, float], stage: int) -> dict[str, float]:
    """A stage's inputs of the compute forms from its counts (``pipeline_stage_counts``, with the
    ``stage_layer_kinds`` the family engine adds): its transformer layers (body and MTP, as
    :func:`stage_layer_counts` counts them; the leading dense layers apart, :func:`kind_inputs`), whether it holds
    the output layer (and the MTP modules' heads, which share it), and how many of its layers it recomputes fully or
    selectively."""
    layers = counts["n_body"] + counts["n_extra"] + counts["n_extra_sel"]
    kinds = kind_inputs(layers, counts.get("n_dense", 0.0), counts.get("n_window", 0.0), counts["n_full_rec"],
                        counts["n_sel_rec"])
    return {**{k: float(v) for k, v in kinds.items()},
            "n_output": counts["n_output"] + counts.get("n_mtp_heads", 0.0), "pp_rank": float(stage)}


def _compute_seconds(parts: Mapping[str, np.ndarray], values: Mapping[str, Any]) -> np.ndarray:
    """A stage's compute seconds from its parts and the GPU's facts (``compute_stage_time_s``)."""
    flops, lowp, moved, vector = combined_parts(parts)
    return term_function("compute_stage_time_s")(
        stage_flops=flops, peak_flops_per_s=values["peak_flops_per_s"],
        compute_efficiency=values["compute_efficiency"], stage_lowp_flops=0.0 if lowp is None else lowp,
        lowp_peak_flops_per_s=values["lowp_peak_flops_per_s"], lowp_efficiency=values["lowp_efficiency"],
        stage_hbm_bytes=moved,
        hbm_bytes_per_s=values["hbm_bytes_per_s"], hbm_efficiency=values["hbm_efficiency"],
        stage_vector_flops=vector, vector_flops_per_s=values["vector_flops_per_s"],
        vector_efficiency=values["vector_efficiency"])


def compute_family(system: System | str, *, flash_attention: float = 1.0, dropout: float = 0.0,
                   zero: int | None = None, precision: str = "bf16",
                   recompute_modules: Sequence[str] | str = ()) -> FamilySpec:
    """The compute family as a spec (``codegen.pricing.families``): a stage's value is the seconds one rank
    computes per step (``compute_stage_time_s`` of its FLOPs, HBM bytes and vector FLOPs), the step's the slowest
    stage's. *zero*: the ZeRO level the optimizer update is sharded by (default the batch's run settings');
    *precision*: the run's (``symbolic.vocabulary.PRECISIONS``); *recompute_modules*: the modules every layer not
    fully recomputed recomputes (``symbolic.vocabulary.RECOMPUTE_MODULES``). :class:`StepTimePricer` reads its
    terms from here.

    Raises:
        NoComputeFactsError: for a system without GPU peak, GEMM efficiency, HBM or vector-unit facts, or whose
            GPU cannot run *precision*.
    """
    peak, efficiency, hbm, hbm_efficiency, vector, vector_efficiency, _name, lowp, lowp_efficiency = _gpu_facts(
        system, precision)
    facts = {"peak_flops_per_s": peak, "compute_efficiency": efficiency, "hbm_bytes_per_s": hbm,
             "hbm_efficiency": hbm_efficiency, "vector_flops_per_s": vector, "vector_efficiency": vector_efficiency,
             "lowp_peak_flops_per_s": lowp, "lowp_efficiency": lowp_efficiency,
             "attention_ratio": _attention_ratio(system),
             **module_values(module_names("recompute_modules", recompute_modules))}

    def settings(_model: ModelConfig, batch: LayoutBatch) -> dict[str, float]:
        level = zero_level_of(batch) if zero is None else zero
        return {**facts, "flash_attention": float(flash_attention), "dropout": float(dropout),
                "zero_level": float(level), "sliding_window": float(_model.sliding_window)}

    return FamilySpec(name="compute", unit="seconds", stage=_compute_seconds, step="max", settings=settings,
                      terms=functools.partial(compute_terms, precision=precision), stage_inputs=_compute_inputs)


def step_time_family(system: System | str, *, comm: Callable[[LayoutBatch], np.ndarray] | None = None,
                     flash_attention: float = 1.0, dropout: float = 0.0, zero: int | None = None,
                     precision: str = "bf16", recompute_modules: Sequence[str] | str = ()) -> FamilySpec:
    """The step-time family as a spec: the compute family's slowest stage, times one plus the pipeline bubble
    (``compute_pipeline_bubble``), plus the exposed communication ``comm(batch, compute_s)`` (seconds per layout,
    given the slowest stage's compute seconds, e.g. :func:`exposed_time_comm`; 0 without). The step as
    :meth:`StepTimePricer.price` forms it."""
    compute = compute_family(system, flash_attention=flash_attention, dropout=dropout, zero=zero, precision=precision,
                             recompute_modules=recompute_modules)

    def finish(step: np.ndarray, batch: LayoutBatch, _settings: Mapping[str, Any]) -> np.ndarray:
        bubble = term_function("compute_pipeline_bubble")(p=batch.p, vp=batch.vp, m=batch.m)
        exposed = comm(batch, step) if comm is not None else np.zeros_like(step)
        return step * (1 + bubble) + exposed

    return dataclasses.replace(compute, name="step_time", finish=finish)


def exposed_time_comm(model: ModelConfig, system: str, overlap: Sequence[str] | str = DEFAULT_OVERLAP,
                      precision: str = "bf16", ep_dispatcher: str = DEFAULT_EP_DISPATCHER) -> Callable[..., np.ndarray]:
    """``comm(batch, compute_s=None)``: the exposed communication seconds of each layout of a batch
    (:func:`exposed_comm` of the time family's bottleneck stage, ``codegen.pricing.time.TimePricer``), under the
    batch's recompute mode, CP algorithm and ZeRO level and the run's *overlap* (which needs the layouts'
    compute seconds *compute_s*; none without an overlap), its weights gathered as a *precision* run with
    quantized primary weights gathers them, its experts' tokens moved by *ep_dispatcher* (:func:`time_family_comm`).

    Raises:
        InputError: naming *overlap* when it names no overlap (``symbolic.vocabulary.OVERLAPS``); from ``comm``, for
            a batch whose recompute list per stage applies to a layout (the forward collectives it repeats are the
            slowest stage's share, which the step's compute alone does not tell: ``StepTimePricer.price_plan``).
    """
    from .time import TimePricer

    pricer = TimePricer(gathered_in(model, precision, True), system=system, ep_dispatcher=ep_dispatcher)
    overlap = overlap_names("overlap", overlap)

    def comm(batch: LayoutBatch, compute_s: np.ndarray | None = None) -> np.ndarray:
        if np.any(batch.stage_lists_apply(batch.p, batch.vp)[1]):
            raise inputs.InputError(f"recompute: {batch.recompute} layers per stage: the exposed communication of a "
                                    f"recompute list needs its slowest stage; price it with "
                                    f"StepTimePricer.price_plan")
        parts = pricer.price_batch(batch, validated=True).by_dimension
        return exposed_comm(parts, batch.recompute.mode, batch.cp_algo, overlap=overlap, compute_s=compute_s,
                            m=batch.m, zero=zero_level_of(batch), p=batch.p, vp=batch.vp)

    return comm


class StepTimePricer:
    """Step time of layouts of *model* on *system*: compute + bubble + exposed communication.

    Compute of a stage = its matrix-multiply FLOPs over the achieved GEMM FLOP/s plus its memory-bound HBM
    bytes over the achieved HBM bandwidth plus its element-wise FLOPs over the achieved vector-unit FLOP/s
    (``compute_stage_time_s``; docs/search.md).

    Args:
        model: the model. system: a catalog name or :class:`hardware.System` with GPU facts.
        comm: optional ``comm(chunk) -> {dimension: (n,) seconds}`` of the bottleneck stage; the exposed
            communication is :meth:`exposed` of it.
        overlap: the communication the run overlaps with compute (``symbolic.vocabulary.OVERLAPS`` names, or one
            comma-separated text; default ``DEFAULT_OVERLAP``, the data-parallel overlap of Megatron-Bridge's
            pretraining recipes and, in an interleaved pipeline, their pipeline one; ``()`` for none, as
            Megatron-LM ran in 2022).
        flash_attention: 1 when a fused attention kernel keeps the score matrices on chip (default), 0 when
            they pass through HBM (Megatron-LM before FlashAttention). dropout: 1 when the layers apply dropout.
            Each a number in ``[0, 1]`` (a switch, or the share of the layers it applies to, as
            ``MemorySettings`` takes them).
        recompute_modules: the modules every layer not fully recomputed recomputes in its backward pass
            (``symbolic.vocabulary.RECOMPUTE_MODULES``, as ``MemorySettings.recompute_modules``); none by default.

    Every public method checks its arguments and raises one error type, a ``ValueError`` naming the argument
    and the value (``codegen.runtime.inputs.InputError``, ``codegen.configs.LayoutError`` for a layout that
    breaks a layout rule, :class:`NoComputeFactsError`): :meth:`price`, :meth:`compute`, :meth:`stage_flops`
    and :meth:`step_time` take ``validated=True`` from a caller whose layouts are valid already (a search's
    chunks), which skips those checks. :meth:`stage_parts`, :meth:`stage_groups`, :meth:`bound_forms` and
    :meth:`compute_bound` are the search's pieces and take values already checked (``b`` may be fractional
    there: a search's slope at ``m = 2``).

    Raises:
        NoComputeFactsError: for a system without GPU peak, GEMM efficiency, HBM or vector-unit facts.
        InputError: naming an argument that is not of its kind (a model name where a ``ModelConfig`` is meant,
            ``system=None``, a ``comm`` that is not callable, ``flash_attention=5``).
    """

    def __init__(self, model: ModelConfig, *, system: System | str,
                 comm: Callable[[Any], Mapping[str, np.ndarray]] | None = None,
                 flash_attention: float = 1.0, dropout: float = 0.0, precision: str = "bf16",
                 overlap: Sequence[str] | str = DEFAULT_OVERLAP, recompute_modules: Sequence[str] | str = ()) -> None:
        model = inputs.instance("model", model, ModelConfig, "a ModelConfig (codegen.configs.load_model)")
        system = inputs.system("system", system)
        if comm is not None and not callable(comm):
            raise inputs.InputError(f"comm: expected None or a callable comm(chunk) -> {{dimension: seconds}}, "
                                    f"got {comm!r}")
        flash_attention = inputs.share("flash_attention", flash_attention)
        dropout = inputs.share("dropout", dropout)
        self.model = model
        (self.peak, self.efficiency, self.hbm, self.hbm_efficiency, self.vector, self.vector_efficiency,
         self.system, self.lowp_peak, self.lowp_efficiency) = _gpu_facts(system, precision)
        self.precision = precision
        self.comm = comm
        self.overlap = overlap_names("overlap", overlap)
        self.recompute_modules = module_names("recompute_modules", recompute_modules)
        terms = compute_terms(model, precision=precision)  # (the compute family's, declared once)
        self._flops, self._arguments = term_function(terms["flops"]), term_arguments(terms["flops"])
        # The FLOPs of the GEMMs in a low precision: none in BF16 (the form is not evaluated).
        self._lowp = term_function(terms["lowp_flops"]) if "lowp_flops" in terms else None
        self._lowp_arguments = term_arguments(terms["lowp_flops"]) if "lowp_flops" in terms else ()
        self._bytes, self._bytes_arguments = term_function(terms["hbm_bytes"]), term_arguments(terms["hbm_bytes"])
        self._vector = term_function(terms["vector_flops"])
        self._vector_arguments = term_arguments(terms["vector_flops"])
        # The parts of a model whose layers are priced apart (leading dense layers, windows): each term's function
        # and arguments, by part; none for another model (its stages priced as before, the same numbers).
        self._kinds = model.has_layer_kinds
        self._extra = {part: (term_function(name), term_arguments(name)) for part, name in terms.items()
                       if part not in COMPUTE_PARTS}
        # The FLOPs themselves (stage_flops): each FLOP term's own form, not its GEMMs' at the reference efficiency.
        real = {part: terms[part].replace("_gemm_flop", "_flop") for part in REAL_FLOP_PARTS if part in terms}
        self._real = {part: (term_function(name), term_arguments(name)) for part, name in real.items()}
        fields = model.fields()
        if model.layout.s is not None:
            fields["s"] = float(model.layout.s)
        fields["flash_attention"] = float(flash_attention)
        fields["dropout"] = float(dropout)
        fields["sliding_window"] = float(model.sliding_window)
        fields.update(module_values(self.recompute_modules))
        fields["attention_ratio"] = _attention_ratio(system)
        names = (set(self._arguments) | set(self._bytes_arguments) | set(self._vector_arguments)
                 | set(self._lowp_arguments)).union(*(arguments for _, arguments in self._extra.values()),
                                                    *(arguments for _, arguments in self._real.values()))
        self._names = frozenset(names)
        self._shared = {k: fields[k] for k in names if k in fields}
        self._sp = bool(model.layout.sp)

    def _stages(self, values: Mapping[str, np.ndarray], recompute: str, zero: int):
        """(layers, output) of the first and the last stage, and the arguments both formulas share, as float64
        (the forms' own dtype: whole numbers, exactly; an integer array would be cast again by each operation that
        reads it)."""
        extra = {"zero_level": zero, "sp": np.asarray(values["t"], dtype=np.float64) if self._sp else 1}
        if self._kinds:
            return kind_stages(self.model, values["p"], values["vp"]), extra
        first, last = stage_layer_counts(self.model, values["p"], values["vp"])
        first, last = first.astype(np.float64), last.astype(np.float64)
        single = (values["p"] == 1).astype(np.float64)
        return ((first, single), (last, np.ones_like(first))), extra

    def _per_stage(self, stage: tuple[np.ndarray, ...], recompute: str,
                   recomputed: tuple[Any, Any] | None = None) -> dict[str, Any]:
        """The per-stage inputs of the compute forms of one of :meth:`_stages`' stages under *recompute* (every
        layer in that mode), or with *recomputed* = (fully, selectively recomputed layers) of the stage."""
        layers, output = stage[0], stage[1]
        if recomputed is None:
            full = layers if recompute == "full" else 0
            selective = layers if recompute == "selective" else 0
        else:
            full, selective = recomputed
        if len(stage) == 2:
            return {"n_layers_stage": layers, "n_output": output, "n_full_rec": full, "n_sel_rec": selective}
        dense, window = stage[2], stage[3]
        zero = np.zeros_like(layers)
        return {**kind_inputs(layers, dense, window, zero + full, zero + selective), "n_output": output}

    def _floats(self, values: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """The integer columns of *values* the forms read, as float64 (once per call, not once per operation)."""
        return {k: (v.astype(np.float64) if isinstance(v, np.ndarray) and v.dtype.kind in "iub" else v)
                for k, v in values.items() if k in self._names}

    def _args(self, names, per, values, extra):
        return {k: (per[k] if k in per else values[k] if k in values else extra[k] if k in extra else self._shared[k])
                for k in names}

    def stage_flops(self, values: Mapping[str, np.ndarray], recompute: str, *, validated: bool = False
                    ) -> np.ndarray:
        """FLOPs per rank per step of the slowest stage by FLOPs (first or last) of each layout.

        Raises:
            InputError, LayoutError: as :meth:`price` (not checked with *validated*).
        """
        if not _vouched(validated):
            values, recompute, _ = _checked(self.model, values, recompute, 1)
        stages, extra = self._stages(values, recompute, 1)
        out = []
        for stage in stages:
            per = self._per_stage(stage, recompute)
            function, arguments = self._real["flops"]
            flops = function(**self._args(arguments, per, values, extra))
            for part, sign in (("dense_flops", 1.0), ("window_saved_flops", -1.0)):  # as combined_parts adds them
                if part in self._real:
                    function, arguments = self._real[part]
                    found = function(**self._args(arguments, per, values, extra))
                    flops = flops + found if sign > 0 else flops - found
            out.append(flops)
        return functools.reduce(np.maximum, out)

    def stage_parts(self, values: Mapping[str, np.ndarray], recompute: str, zero: int = 1, *,
                    hbm_only: bool = False, groups: Sequence[tuple[np.ndarray, np.ndarray]] | None = None,
                    flops_only: bool = False
                    ) -> list[tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None, np.ndarray | None]]:
        """(FLOPs, low-precision GEMM FLOPs, HBM bytes, vector FLOPs) per rank per step of the first and of the last
        stage of each layout; the second ``None`` in a BF16 run; with *hbm_only*, (None, None, HBM bytes, None); with
        *flops_only*, (FLOPs, low-precision GEMM FLOPs, None, None).

        *groups*: per stage, :meth:`stage_groups` of these layouts (or of layouts whose arrays are functions of
        theirs, row by row): each stage is then evaluated on its groups' representatives only, one value per
        group (a layout's is its group's: ``np.take(value, inverse)``, the same number).
        """
        if groups is None:
            return self._parts(values, recompute, zero, hbm_only, (0, 1, 2) if self._kinds else (0, 1), flops_only)
        out = []
        for i, (reps, _) in enumerate(groups):
            sub = {k: (v[reps] if isinstance(v, np.ndarray) and v.ndim else v) for k, v in values.items()}
            out.append(self._parts(sub, recompute, zero, hbm_only, (i,), flops_only)[0])
        return out

    def listed_stage_parts(self, values: Mapping[str, np.ndarray], plan: RecomputePlan, zero: int = 1
                           ) -> tuple[list[tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]],
                                      np.ndarray, np.ndarray]:
        """:meth:`stage_parts` of every stage of one layout (*values*: one layout, of the model's checked layout
        rules) under a recompute *plan*: one mode for every layer, or its list of fully recomputed layers per stage
        (``RecomputePlan.full_per_stage``: each stage its first ones, the rest as the plan's mode says), with each
        stage's layers and fully recomputed layers (``codegen.configs.pipeline_stage_counts``: the split of the
        model's layout, its offset for its own pipeline, the accounted split where the model counts the embedding
        or the loss). The slowest stage of
        a list need not be the first or the last, so every stage is priced (under one mode the slowest is
        :meth:`stage_parts`' first or last, the same numbers)."""
        p, vp = int(np.asarray(values["p"]).reshape(-1)[0]), int(np.asarray(values["vp"]).reshape(-1)[0])
        own = self.model.layout
        offset = own.offset if (p, vp) == (own.p, own.vp) else None
        counts = pipeline_stage_counts(self.model, p, vp, recompute=plan, offset=offset)
        layers = stage_layers(counts).astype(np.float64)
        output = np.zeros(p)
        output[-1] = 1.0 + (self.model.n_mtp if self._kinds else 0)  # (the MTP heads share the output layer)
        rows = [layers, output]
        if self._kinds:
            kinds = stage_layer_kinds(self.model, p, vp, offset)
            rows += [kinds["n_dense"].astype(np.float64), kinds["n_window"].astype(np.float64)]
        stages = [tuple(np.full(1, row[i]) for row in rows) for i in range(p)]
        full, selective = (counts[k].astype(np.float64) for k in ("n_full_rec", "n_sel_rec"))
        recomputed = [(np.full(1, full[i]), np.full(1, selective[i])) for i in range(p)]
        parts = self._parts(values, plan.mode, zero, False, range(p), listed=(stages, recomputed))
        return parts, layers, full  # type: ignore[return-value]

    def _parts(self, values: Mapping[str, np.ndarray], recompute: str, zero: int, hbm_only: bool,
               which: Sequence[int], flops_only: bool = False, listed: tuple[Any, Any] | None = None
               ) -> list[tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None, np.ndarray | None]]:
        """:meth:`stage_parts` of the stages *which* (0: first, 1: last) of every layout of *values*; with *listed*
        = (stages, recomputed), of those stages (:meth:`listed_stage_parts`)."""
        stages, extra = self._stages(values, recompute, zero)
        recomputed = None
        if listed is not None:
            stages, recomputed = listed
        values = self._floats(values)
        out = []
        for i in which:
            per = self._per_stage(stages[i], recompute, None if recomputed is None else recomputed[i])
            if flops_only:  # (a search's chunk: its FLOPs at its own micro-batch, codegen.search.bounds)
                lowp = (None if self._lowp is None
                        else self._lowp(**self._args(self._lowp_arguments, per, values, extra)))
                flops = self._flops(**self._args(self._arguments, per, values, extra))
                if self._extra:
                    parts = {part: function(**self._args(arguments, per, values, extra))
                             for part, (function, arguments) in self._extra.items()
                             if part in ("dense_flops", "window_saved_flops")
                             or (part == "dense_lowp_flops" and lowp is not None)}
                    flops, lowp = combined_flops({"flops": flops, "lowp_flops": lowp, **parts})
                out.append((flops, lowp, None, None))
                continue
            moved = self._bytes(**self._args(self._bytes_arguments, per, values, extra))
            if hbm_only:
                if "dense_hbm_bytes" in self._extra:
                    function, arguments = self._extra["dense_hbm_bytes"]
                    moved = moved + function(**self._args(arguments, per, values, extra))
                out.append((None, None, moved, None))
                continue
            lowp = None if self._lowp is None else self._lowp(**self._args(self._lowp_arguments, per, values, extra))
            found = (self._flops(**self._args(self._arguments, per, values, extra)), lowp, moved,
                     self._vector(**self._args(self._vector_arguments, per, values, extra)))
            if self._extra:
                parts = {part: function(**self._args(arguments, per, values, extra))
                         for part, (function, arguments) in self._extra.items()
                         if part != "dense_lowp_flops" or lowp is not None}
                found = combined_parts({"flops": found[0], "lowp_flops": lowp, "hbm_bytes": moved,
                                        "vector_flops": found[3], **parts})
            out.append(found)
        return out

    def stage_groups(self, values: Mapping[str, np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per stage (first, last), the layouts of *values* grouped by everything :meth:`stage_parts`' forms read
        that varies between them (``engine.distinct_rows``: ``(reps, inverse)``) — the layout arrays the forms
        take and the stage's layer counts and output flag, under any recompute mode and ZeRO level (the
        recomputed layers are the stage's layers or none). Layouts that differ only in what the forms do not
        read (the pipeline shape, past the stage's layers) share a group."""
        stages, extra = self._stages(values, "none", 1)
        read = [np.asarray(values[k]) for k in sorted(self._names & set(values))
                if isinstance(values[k], np.ndarray) and values[k].ndim]
        if isinstance(extra["sp"], np.ndarray):
            read.append(extra["sp"])
        return [distinct_rows([*read, *stage]) for stage in stages]

    def _seconds(self, flops: np.ndarray, lowp: np.ndarray | None, moved: np.ndarray, vector: np.ndarray
                 ) -> np.ndarray:
        return term_function("compute_stage_time_s")(stage_flops=flops, peak_flops_per_s=self.peak,
                                              compute_efficiency=self.efficiency,
                                              stage_lowp_flops=0.0 if lowp is None else lowp,
                                              lowp_peak_flops_per_s=self.lowp_peak,
                                              lowp_efficiency=self.lowp_efficiency, stage_hbm_bytes=moved,
                                              hbm_bytes_per_s=self.hbm, hbm_efficiency=self.hbm_efficiency,
                                              stage_vector_flops=vector, vector_flops_per_s=self.vector,
                                              vector_efficiency=self.vector_efficiency)

    def slowest(self, parts: list[tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(compute seconds, FLOPs, HBM bytes, vector FLOPs) of the slower stage of *parts* (:meth:`stage_parts`)."""
        best = None
        for flops, lowp, moved, vector in parts:
            found = np.broadcast_arrays(self._seconds(flops, lowp, moved, vector), flops, moved, vector)
            if best is None:
                best = tuple(found)
            else:
                slower = found[0] > best[0]
                best = tuple(np.where(slower, new, old) for new, old in zip(found, best))
        return best

    def bound_forms(self, p: np.ndarray, vp: np.ndarray,
                    stages: Sequence[tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]]
                    ) -> np.ndarray:
        """Per row of a fixed ``b·m`` (a search's structure row), the compute bound as a function of ``m``:
        columns ``(c, s)`` per stage of *stages* and ``q``, so that a stage computes ``c + s·m`` seconds and the
        step without communication takes ``max over the stages of (c + s·m) × (1 + q/m)`` (:meth:`compute_bound`).

        *stages*: per stage, each row's group and per group ``(FLOPs, low-precision GEMM FLOPs or None, HBM bytes
        at m = 0, HBM bytes per micro-batch, vector FLOPs)`` (at fixed ``b·m`` the HBM bytes vary with ``m``,
        affinely; the FLOPs at the reference GEMM efficiency grow with ``m`` as the GEMMs shrink, and the FLOPs given
        are ``m = 1``'s, the fewest: the forms are then a lower bound; rows whose forms read the same inputs share a
        group: ``codegen.search.run``).
        ``compute_stage_time_s`` is linear in its FLOPs, HBM bytes and vector FLOPs, so ``c`` is its value at
        the FLOPs, the bytes at m = 0 and the vector FLOPs and ``s`` at the per-micro-batch bytes alone;
        ``compute_pipeline_bubble`` is
        ``(p − 1)/(vp·m)``, so ``q`` is its value at ``m = 1``. Returns a ``(2·stages + 1, rows)`` array (each
        form one contiguous row: a layout's gather and the arithmetic on it run on contiguous arrays).
        """
        columns = []
        for group, (flops, lowp, base, slope, vector) in stages:
            zero = np.zeros(np.shape(slope))
            for column in (self._seconds(flops, lowp, base, vector), self._seconds(zero, None, slope, zero)):
                columns.append(np.take(np.broadcast_to(column, np.shape(slope)), group))
        columns.append(term_function("compute_pipeline_bubble")(p=p, vp=vp, m=1))
        return np.stack(np.broadcast_arrays(*columns))

    def compute_bound(self, forms: np.ndarray, row: np.ndarray, m: np.ndarray) -> np.ndarray:
        """A lower bound of the step time without communication (compute × (1 + bubble), :meth:`price`'s
        ``step_time_s`` with no ``comm``) of layouts of rows *row* (of :meth:`bound_forms`' *forms*) at *m*
        micro-batches.

        At ``m = 1`` the linear forms give the same number as pricing the layout, in another order of operations:
        it may differ by a few units in the last place, so it is lowered by ``BOUND_SLACK`` (relative; far above
        that rounding) and never exceeds the priced value. At ``m > 1`` the forms keep the row's FLOPs at the
        reference efficiency at ``m = 1`` (*stages*' FLOPs: ``codegen.search.bounds.row_stage_parts``), the
        fewest (its GEMMs are the largest: docs/search.md, Compute), so the bound is lower than the price or
        equal to it.
        """
        m = np.asarray(m, dtype=np.float64)
        seconds = None
        for k in range(0, len(forms) - 1, 2):
            new = np.take(forms[k + 1], row)
            new *= m
            new += np.take(forms[k], row)
            seconds = new if seconds is None else np.where(new > seconds, new, seconds)  # as slowest() picks
        bubble = np.take(forms[-1], row)
        bubble /= m
        bubble += 1.0
        seconds *= bubble
        seconds *= 1.0 - BOUND_SLACK
        return seconds

    def compute(self, values: Mapping[str, np.ndarray], recompute: str, zero: int = 1, *, validated: bool = False
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(compute seconds, FLOPs, HBM bytes, vector FLOPs) per rank per step of the slower of the first and last
        stage.

        Raises:
            InputError, LayoutError: as :meth:`price` (not checked with *validated*).
        """
        if not _vouched(validated):
            values, recompute, zero = _checked(self.model, values, recompute, zero)
        return self.slowest(self.stage_parts(values, recompute, zero))

    def exposed(self, by_dimension: Mapping[str, np.ndarray], recompute: str, cp_algo: str | None,
                compute_s: np.ndarray, m: np.ndarray, zero: int, p: Any = 1, vp: Any = 1,
                full_share: Any = None) -> np.ndarray:
        """The exposed communication seconds of layouts whose bottleneck stage's communication is *by_dimension*
        (``comm(chunk)``) and compute *compute_s*, with *m* micro-batches over *p* stages of *vp* model chunks,
        under this pricer's overlap (``codegen.pricing.exposure.exposed_comm``, its *full_share*)."""
        return exposed_comm(by_dimension, recompute, cp_algo, overlap=self.overlap, compute_s=compute_s, m=m,
                            zero=zero, p=p, vp=vp, full_share=full_share)

    def step_time(self, compute_s: np.ndarray, values: Mapping[str, np.ndarray], comm: np.ndarray, *,
                  validated: bool = False) -> np.ndarray:
        """Step seconds of layouts whose compute seconds and exposed communication are known.

        Raises:
            InputError, LayoutError: as :meth:`price`, and for *compute_s* or *comm* not finite numbers ``>= 0``,
                one per layout or one for all (not checked with *validated*).
        """
        if not _vouched(validated):
            values, _, _ = _checked(self.model, values, "none", 1)
            n = _length(values)
            compute_s = _per_layout("compute_s", compute_s, n)
            comm = _per_layout("comm", comm, n)
        bubble = term_function("compute_pipeline_bubble")(p=values["p"], vp=values["vp"], m=values["m"])
        return compute_s * (1 + bubble) + comm

    def price(self, values: Mapping[str, np.ndarray], recompute: str, chunk: Any = None, zero: int | None = None,
              parts: list[tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]] | None = None, *,
              validated: bool = False, full_share: Any = None) -> dict[str, np.ndarray]:
        """:data:`PARTS` per layout of *values* (``{key: (n,) int64}``, keys of ``LayoutBatch``).

        *values*: per layout key (``symbolic.vocabulary.PER_LAYOUT_KEYS``) one whole number per layout, all of
        one length (or one number for every layout); keys left out take the model's layout's value. The layouts
        must obey the layout rules ``symcost eval`` checks (``codegen.configs.check_batch``: among them ``p·vp``
        at most the model's layers, ``t`` dividing the heads), each key within its bound
        (``codegen.runtime.inputs``). *recompute*: one of ``symbolic.vocabulary.RECOMPUTE_MODES``.
        *chunk*: the layouts as a ``codegen.pricing.chunks.Chunk`` (its run settings; what ``comm`` prices).
        *zero*: the ZeRO level (the optimizer update is sharded over DP from level 1); default the chunk's, else 1.
        *parts*: the layouts' :meth:`stage_parts` (or :meth:`listed_stage_parts`) when the caller has them.
        *full_share*: the fraction of the slowest stage's layers fully recomputed, whose forward collectives the
        exposed communication repeats (``exposed_comm``; default 1 under ``"full"``, else 0).
        *validated*: the caller vouches for every argument (a search's chunks: valid by construction); nothing
        is checked, and a bad argument gives an unspecified result.

        Raises:
            InputError: naming the argument and the value: *values* not a mapping of layout keys to whole
                numbers within their bounds and of one length, an unknown *recompute* mode or ZeRO level, a
                *chunk* that is not a ``Chunk`` of these layouts, *parts* or the exposed communication ``comm``
                returns not finite and ``>= 0``, a *full_share* not in [0, 1].
            LayoutError: naming the first layout that breaks a layout rule and the rule.
        """
        validated = _vouched(validated)
        if not validated:
            values, recompute, zero = _checked(self.model, values, recompute, zero, chunk)
            if parts is not None:
                parts = _checked_parts(parts, _length(values))
            if full_share is not None:
                full_share = _per_layout("full_share", full_share, _length(values))
                if np.any(np.asarray(full_share) > 1):
                    raise inputs.InputError(f"full_share: a fraction of a stage's layers, at most 1, got "
                                            f"{full_share!r:.80}")
        if zero is None:
            zero = chunk.setting.zero if chunk is not None else 1
        compute, flops, _, _ = self.slowest(parts if parts is not None else self.stage_parts(values, recompute, zero))
        bubble = term_function("compute_pipeline_bubble")(p=values["p"], vp=values["vp"], m=values["m"])
        if self.comm is not None and chunk is not None:
            comm = self.exposed(self.comm(chunk), recompute, chunk.setting.cp_algo, compute, values["m"], zero,
                                values["p"], values["vp"], full_share)
            if not validated:  # a caller's comm: seconds, never negative (they would be subtracted) nor NaN
                comm = _per_layout("comm (the exposed communication the pricer's comm callable gives)", comm,
                                   len(flops))
            comm = np.broadcast_to(comm, flops.shape)
        else:
            comm = np.zeros_like(compute)
        step = compute * (1 + bubble) + comm
        return {"step_time_s": step, "compute_s": compute, "bubble_s": compute * bubble, "comm_s": comm,
                "stage_flops": flops, "bubble": np.broadcast_to(bubble, flops.shape)}

    def price_plan(self, values: Mapping[str, np.ndarray], plan: RecomputePlan, chunk: Any = None,
                   zero: int | None = None) -> dict[str, np.ndarray]:
        """:meth:`price` of one layout (*values*) under a recompute *plan*: its mode for every layer, or its list of
        fully recomputed layers per stage (``RecomputePlan.full_per_stage``, the rest as its mode says), which
        prices every stage with its own counts (:meth:`listed_stage_parts`): the slowest stage's compute is the
        step's, and the share of its layers recomputed in full repeats that share of the forward collectives.

        Raises:
            InputError, LayoutError: as :meth:`price`; a *plan* that is not a ``RecomputePlan``, or whose list
                does not fit the layout's pipeline (one entry per stage, each at most the stage's layers).
        """
        plan = inputs.instance("plan", plan, RecomputePlan, "a RecomputePlan")
        if plan.full_per_stage is None:
            return self.price(values, plan.mode, chunk, zero)
        values, recompute, zero = _checked(self.model, values, plan.mode, zero, chunk)
        if _length(values) != 1:
            raise inputs.InputError(f"values: a recompute list per stage prices one layout, got {_length(values)}")
        if zero is None:
            zero = chunk.setting.zero if chunk is not None else 1
        p = int(values["p"].reshape(-1)[0])
        if len(plan.full_per_stage) != p:
            raise LayoutError(f"recompute: the list needs one entry per stage: {len(plan.full_per_stage)} entries "
                              f"{list(plan.full_per_stage)}, p = {p}")
        stages, layers, full = self.listed_stage_parts(values, plan, zero)
        if np.any(full > layers):
            stage = int(np.argmax(full > layers))
            raise LayoutError(f"recompute: stage {stage} holds {int(layers[stage])} layers, cannot fully recompute "
                              f"{int(full[stage])}")
        slowest = int(np.argmax([self.slowest([stage])[0][0] for stage in stages]))
        return self.price(values, recompute, chunk, zero, parts=stages, full_share=full[slowest] / layers[slowest])


# ---------------------------------------------------------------- the checks of StepTimePricer's arguments


def _vouched(validated: object) -> bool:
    """*validated* as a real bool (``validated="no"`` must not skip the checks)."""
    return inputs.flag("validated", validated)


def _length(values: Mapping[str, Any]) -> int:
    """How many layouts checked *values* hold (:func:`_checked`'s columns: one length)."""
    return len(values["p"])


def _checked(model: ModelConfig, values: Any, recompute: Any, zero: Any, chunk: Any = None
             ) -> tuple[dict[str, np.ndarray], str, int | None]:
    """*values*, *recompute* and *zero* of a :class:`StepTimePricer` call, checked: the values as the layout keys'
    int64 columns of one length (those left out the model's layout's), every layout obeying the layout rules.

    Through the one gate: ``LayoutBatch.from_arrays`` (whole numbers within their bounds, one length; a float
    array, a bool, a string are no whole numbers) and ``check_batch`` (the rules ``symcost eval`` applies:
    among them ``p·vp`` at most the model's layers, so that :func:`stage_layer_counts` stays within its bound).
    The given int64 columns come back as they are (the same numbers to the bit).

    Raises:
        InputError: naming the argument and the value. LayoutError: naming the key or the layout and its rule.
    """
    from symbolic.vocabulary import PER_LAYOUT_KEYS, RECOMPUTE_MODES, ZERO_LEVELS

    from ..configs import check_batch
    from .chunks import Chunk

    recompute = inputs.one_of("recompute", recompute, RECOMPUTE_MODES)
    if zero is not None:
        zero = inputs.whole("zero", zero, minimum=min(ZERO_LEVELS), maximum=max(ZERO_LEVELS))
    values = inputs.instance("values", values, Mapping, "a mapping of layout keys to arrays ({key: (n,) int64})")
    unknown = [key for key in values if key not in PER_LAYOUT_KEYS]
    if unknown:
        raise inputs.InputError(f"values: {unknown[0]!r} is no layout key; the keys: {', '.join(PER_LAYOUT_KEYS)}")
    for key, value in values.items():
        if value is None:  # (from_arrays reads None as "left out": here it is a value, and no whole number)
            raise inputs.InputError(f"{key}: expected whole numbers, got None")
    cp_algo = None
    if chunk is not None:
        chunk = inputs.instance("chunk", chunk, Chunk, "None or a codegen.pricing.chunks.Chunk of the layouts")
        cp_algo = chunk.setting.cp_algo
        if chunk.setting.recompute != recompute:
            raise inputs.InputError(f"recompute: {recompute!r}, but the chunk's layouts run "
                                    f"{chunk.setting.recompute!r}")
        if zero is not None and chunk.setting.zero != zero:
            raise inputs.InputError(f"zero: {zero}, but the chunk's layouts run ZeRO level {chunk.setting.zero}")
    if not values:
        raise inputs.InputError("values: no layout keys given (a mapping of layout keys to arrays)")
    batch = LayoutBatch.from_arrays(model.layout, recompute=recompute, cp_algo=cp_algo, **values)
    n = len(batch)
    if n:
        check_batch(model, batch)
    if chunk is not None:
        if len(chunk) != n:
            raise inputs.InputError(f"chunk: {len(chunk)} layouts, but values hold {n}")
        checked = _checked(model, chunk.values, recompute, zero)[0]
        differ = [key for key in PER_LAYOUT_KEYS if not np.array_equal(checked[key], getattr(batch, key))]
        if differ:
            raise inputs.InputError(f"chunk: its layouts differ from values in {differ[0]!r}")
    # The caller's int64 columns as given (views: the same numbers); a key left out, the batch's column.
    return {key: getattr(batch, key) for key in PER_LAYOUT_KEYS}, recompute, zero


def _per_layout(field: str, value: Any, n: int) -> np.ndarray:
    """*value* (seconds: one per layout, or one for all) if finite and ``>= 0`` and of *n* layouts."""
    inputs.nonnegative(field, value)
    array = np.asarray(value, dtype=np.float64)
    if array.ndim > 1 or (array.ndim == 1 and len(array) != n):
        raise inputs.InputError(f"{field}: expected one value per layout ({n}) or one for all, got shape "
                                f"{array.shape}")
    return value if isinstance(value, np.ndarray) else array


def _checked_parts(parts: Any, n: int) -> list[tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]]:
    """A caller's :meth:`StepTimePricer.stage_parts`: per stage (FLOPs, low-precision GEMM FLOPs or None, HBM bytes,
    vector FLOPs), finite, ``>= 0``, one per layout or one for all."""
    if not isinstance(parts, (list, tuple)) or not parts or any(
            not isinstance(stage, (list, tuple)) or len(stage) != 4 for stage in parts):
        raise inputs.InputError(f"parts: expected per stage (FLOPs, low-precision FLOPs or None, HBM bytes, vector "
                                f"FLOPs) as StepTimePricer.stage_parts gives them, got {parts!r:.80}")
    return [tuple(None if j == 1 and x is None else _per_layout(f"parts[{i}][{j}]", x, n)  # type: ignore[misc]
                  for j, x in enumerate(stage)) for i, stage in enumerate(parts)]


def _pipeline_depths(model: ModelConfig, p: Any, vp: Any) -> tuple[np.ndarray, np.ndarray]:
    """*p* and *vp* of :func:`stage_layer_counts` as integer arrays of one shape (or one a single number), each
    from 1 to the model's layers (``n_lay + n_mtp``): a deeper pipeline leaves a chunk without a layer (the
    layout rule ``pipeline_split``)."""
    total = model.n_lay + model.n_mtp
    out = []
    for name, value in (("p", p), ("vp", vp)):
        array = inputs.int_array(name, value)  # whole numbers >= 1 (an integer array: one minimum, one maximum)
        if array.size and int(array.max()) > total:
            item, at = array.max(), np.unravel_index(int(np.argmax(array)), array.shape)
            where = f" at index {at[0] if len(at) == 1 else at}" if array.ndim else ""
            raise inputs.InputError(f"{name}: must be at most the model's {total} layers (n_lay + n_mtp of "
                                    f"{model.name}: a deeper pipeline leaves a chunk without a layer), "
                                    f"got {int(item)}{where}")
        out.append(array)
    if out[0].ndim and out[1].ndim and out[0].shape != out[1].shape:
        raise inputs.InputError(f"vp: expected one value per p (shape {out[0].shape}), got shape {out[1].shape}")
    return out[0], out[1]
