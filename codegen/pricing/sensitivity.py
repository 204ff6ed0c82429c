"""Sensitivity: how a layout's communication cost responds to each parallel degree (``symcost sensitivity``).

For a model, a layout and the run settings of ``symcost eval``, and for each
degree or size ``x`` of ``t, cp, ep, d, p, m, b, s``:

* **value** of the objective: the bottleneck stage's total (``max``, the
  default: a pipeline runs at its slowest stage) or the sum of the stage
  totals (``sum``), in the original's mixed units (see ``symcost eval``);
  ``--with-recomp`` prices the recompute sums instead. Objective ``memory``:
  the peak stage's memory per rank in bytes (``codegen.pricing.memory``).
* **derivative** ``∂objective/∂x``: the partial derivative of the stage
  closed forms (``symbolic.model``; their terms' derivatives are generated
  ahead of time as ``symbolic.model.SLOPES``) in ``x``'s symbol, with
  every *derived* field held at its value for this layout — the switches
  ``comm_t``, ``comm_ep``, ``comm_cp``, the expert degrees ``t_exp``,
  ``d_exp``, the ZeRO levels ``comm_d_*``, the shard sizes ``shard_*`` /
  ``gather_embed``, ``sp``, the measured ``max_rank_tokens``, the TIME
  path's level-score factors and the stage's layer counts. Most are step
  functions of the degrees, so holding them is their almost-everywhere
  derivative 0; a few (``d_exp = d/ep``, the shard sizes) are proportional to
  degrees within a branch but are held as well — they exist only at whole,
  valid layouts, and their effect shows in the doubling ratio. Floors, ``Max``,
  ``Min`` and ``Piecewise`` inside the closed forms follow
  ``symbolic.sensitivity``. So ``d`` and ``m``, which the stage forms read
  only through such fields (and through FSDP traffic), often have derivative
  0; the doubling ratio is the number that sees the steps.
  For ``p``, whose effect is through the layer counts per stage, the counts
  are relaxed continuously: each body-layer count of a stage (``n_body``,
  ``n_extra``, ``n_extra_sel``, ``n_full_rec``, ``n_sel_rec``) is its share of
  an even split, ``∝ 1/p`` (``symbolic.sensitivity.split_derivative``); the
  embedding and output layers stay where they are. (Under Megatron-Core's
  accounted split the counted layers are what is shared: exact for the stages
  between the first and the last; the first and the last, one decoder layer
  short, are given the same relative slope.) That is the bottleneck
  stage's slope (``max``); for ``sum`` the relaxation cancels — ``p`` stages of
  ``n/p`` layers hold the same layers for every ``p`` — and only an explicit
  ``p`` in the closed forms (FSDP's tied embedding) is differentiated.
  For ``max`` the derivative is that of the stage attaining the maximum
  (a.e.); where several stages tie, the largest of their derivatives (the
  right derivative of the maximum). For ``sum``, the sum of the stages'.
  Everything is priced by the one pricer (``codegen.pricing.pricer.StagePricer``),
  on the generated evaluators, without SymPy.
* **elasticity** ``x / objective · derivative`` (0 where the objective is 0):
  percent change of the cost per percent change of ``x``.
* **doubling ratio** ``objective(x·2) / objective``: the layout with ``x``
  doubled in ``--layout`` priced from scratch exactly as ``symcost eval``
  would (every field re-derived, stages rebuilt); ``null`` when the doubled
  layout is invalid, with the violated constraint as the reason (shown in the
  table; on stderr with ``--json``).

The table is ranked by ``|elasticity|``, ties by ``|log doubling ratio|``.

Public API::

    Settings(device="A2", fsdp=False, recompute=None, with_recomp=False, ttype="FLOP", objective="max")
    sensitivity(model, layout_text, settings=Settings(), degrees=DEGREES) -> Sensitivity
    stage_derivatives(model, layout, settings, degrees=DEGREES) -> (stage totals, {degree: stage derivatives})
    objective_curve(model, layout_text, degree, settings=Settings()) -> list[tuple[int, float]]
    DegreeSensitivity, Sensitivity, OBJECTIVES
    time_sensitivity(model, layout_text, *, system, order=None, fsdp=False, recompute=None, objective="max",
                     degrees=DEGREES, ep_dispatcher="alltoall") -> TimeSensitivity   (``--cost time``: seconds)
    LevelSensitivity, TimeSensitivity, TIME_OBJECTIVES
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from symbolic.vocabulary import DEFAULT_EP_DISPATCHER, DEGREES

from ..configs import Layout, LayoutBatch, ModelConfig, parse_layout, validate
from . import memory
from .pricer import StagePricer
from ..runtime import inputs
from .stages import TTYPES, degrees_argument, layout_argument, model_argument

__all__ = ["DEGREES", "OBJECTIVES", "Settings", "DegreeSensitivity", "Sensitivity", "sensitivity",
           "stage_derivatives", "objective_curve", "check_degrees", "LevelSensitivity", "TimeSensitivity",
           "TIME_OBJECTIVES", "time_sensitivity"]

#: How stage totals combine into one number: the bottleneck stage, or all stages together; ``memory``:
#: the peak stage's memory per rank in bytes (``codegen.pricing.memory``), its slopes generated as
#: ``symbolic.memory.stage_slopes`` (``p`` with the body-layer counts relaxed ∝ 1/p, as for ``max``).
OBJECTIVES = ("max", "sum", "memory")

#: Stages whose totals are within this relative distance of the maximum tie for the bottleneck.
_TIE = 1e-12


@dataclass(frozen=True)
class Settings:
    """The run settings of ``symcost eval`` and the objective.

    Attributes:
        device: hardware catalog name of the level model (A2 by default).
        fsdp: price DP as FSDP traffic (``--fsdp``).
        recompute: ``full``, ``selective``, ``none`` or ``N,N,…`` (``--recompute``); ``None`` keeps the model's.
        with_recomp: price the recompute sums (``--with-recomp``).
        ttype: ``FLOP`` (volumes) or ``TIME`` (level scores for DP, TP, CP).
        objective: ``max`` (the bottleneck stage), ``sum`` (over the stages) or ``memory`` (the peak
            stage's memory per rank, bytes).
        memory: the memory formulas' run settings (``objective="memory"``).
    """

    device: str = "A2"
    fsdp: bool = False
    recompute: str | None = None
    with_recomp: bool = False
    ttype: str = "FLOP"
    objective: str = "max"
    memory: memory.MemorySettings = memory.DEFAULT_SETTINGS

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise inputs.InputError(f"objective: expected one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        if self.ttype not in TTYPES:
            raise inputs.InputError(f"ttype: expected one of {', '.join(TTYPES)}, got {self.ttype!r}")
        for name in ("fsdp", "with_recomp"):
            if not isinstance(getattr(self, name), bool):
                raise inputs.InputError(f"{name}: expected true or false, got {getattr(self, name)!r}")
        inputs.instance("device", self.device, str, "a hardware catalog name")
        if self.recompute is not None:
            inputs.instance("recompute", self.recompute, str,
                            "None or recompute text (full, selective, none or N,N,…)")
        inputs.instance("memory", self.memory, memory.MemorySettings, "a MemorySettings")

    def pricer(self, model: ModelConfig) -> StagePricer:
        """The pricer of *model* under these settings (layouts come with fsdp and recompute applied)."""
        return StagePricer(model, device=self.device, with_recomp=self.with_recomp, ttype=self.ttype)


@dataclass(frozen=True)
class DegreeSensitivity:
    """The objective's response to one degree (see the module docstring for the definitions).

    Attributes:
        name: the degree (``t``, ``cp``, …). value: its value in the layout.
        derivative: ∂objective/∂x with the derived fields held. elasticity: x/objective · derivative.
        doubling_ratio: objective(x·2)/objective, or ``None`` (see *reason*).
        doubled_layout: the doubled ``--layout`` text. reason: why the ratio is ``None``.
    """

    name: str
    value: int
    derivative: float
    elasticity: float
    doubling_ratio: float | None
    doubled_layout: str
    reason: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"value": self.value, "derivative": self.derivative, "elasticity": self.elasticity,
                "doubling_ratio": self.doubling_ratio}


@dataclass(frozen=True)
class Sensitivity:
    """Every degree's sensitivity at one layout.

    Attributes:
        objective: ``max`` or ``sum``. value: the objective at the layout.
        layout: the layout as priced. stages: each stage's total. bottleneck: the stage(s) attaining the maximum.
        degrees: per degree, in the order asked.
    """

    objective: str
    value: float
    layout: str
    stages: tuple[float, ...]
    bottleneck: tuple[int, ...]
    degrees: dict[str, DegreeSensitivity] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"objective": self.objective, "value": self.value,
                "degrees": {name: d.as_json() for name, d in self.degrees.items()}}

    def ranked(self) -> list[DegreeSensitivity]:
        """The degrees by |elasticity|, largest first; ties by |log doubling ratio| (an invalid doubling last)."""
        def key(d: DegreeSensitivity) -> tuple[float, float]:
            ratio = d.doubling_ratio
            step = abs(math.log(ratio)) if ratio is not None and ratio > 0 else -1.0
            return (-abs(d.elasticity), -step)
        return sorted(self.degrees.values(), key=key)


# --------------------------------------------------------------------------- pricing a layout


def _layout(model: ModelConfig, text: str, settings: Settings) -> Layout:
    layout = parse_layout(text, model.layout, fsdp=True if settings.fsdp else None, recompute=settings.recompute)
    validate(model, layout)
    return layout


def _stage_totals(pricer: StagePricer, layout: Layout) -> np.ndarray:
    stages = pricer.price_batch(LayoutBatch.from_layouts([layout]), per_stage=True, validated=True).stages
    return stages["total"][0, :layout.p]


def _combine(totals: np.ndarray, objective: str) -> float:
    return float(totals.sum() if objective == "sum" else totals.max())


def _totals(pricer: StagePricer, model: ModelConfig, layout: Layout, settings: Settings) -> np.ndarray:
    """Each stage's total the objective combines: communication, or memory per rank (bytes)."""
    if settings.objective == "memory":
        return memory.stage_totals(model, layout, settings.memory, system=_lowp_system(settings))
    return _stage_totals(pricer, layout)


def _lowp_system(settings: Settings) -> str | None:
    """The GPU whose bytes a low-precision run's quantized copies take (``--device``); ``None`` in BF16."""
    return None if settings.memory.precision == "bf16" else settings.device


def _degree_value(model: ModelConfig, layout: Layout, name: str) -> int:
    if name == "s":
        return int(layout.s or model.s)
    return int(getattr(layout, name))


def _with_key(text: str, key: str, value: int) -> str:
    """*text* with ``key=value`` replacing the key's item, or appended."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    kept = [item for item in items if item.partition("=")[0].strip() != key]
    return ",".join(kept + [f"{key}={value}"])


def check_degrees(degrees: Sequence[str]) -> tuple[str, ...]:
    """*degrees* (a list or tuple, not one string: ``"tp"`` is not ``t`` and ``p``) as a tuple, each one of
    :data:`DEGREES`, each once (``codegen.pricing.stages.degrees_argument``).

    Raises:
        InputError: naming an unknown degree, a string given whole, or none given.
    """
    return degrees_argument(degrees)


def _arguments(model: Any, layout_text: Any, settings: Any) -> ModelConfig:
    """The model, after checking the arguments every analysis here takes (each an ``InputError`` naming it)."""
    inputs.instance("layout_text", layout_text, str, "--layout text such as 'd=32,t=4,p=8,m=144'")
    inputs.instance("settings", settings, Settings, "a Settings")
    return model_argument(model, names=False)


# --------------------------------------------------------------------------- derivatives


def stage_derivatives(model: ModelConfig, layout: Layout, settings: Settings,
                      degrees: Sequence[str] = DEGREES) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Each stage's priced total and its derivative in each degree, as arrays over the stages.

    Args:
        model, layout: a valid layout of the model (fsdp and recompute applied).
        settings: the run settings; the objective decides the ``p`` derivative (per stage, counts
            ∝ 1/p, for ``max``; the explicit ``p`` alone for ``sum``, see the module docstring).
        degrees: names of :data:`DEGREES`.

    Raises:
        ValueError: naming an unknown degree.
    """
    degrees = check_degrees(degrees)
    model_argument(model, names=False)
    layout_argument(layout)
    inputs.instance("settings", settings, Settings, "a Settings")
    if settings.objective == "memory":
        system = _lowp_system(settings)
        return memory.stage_totals(model, layout, settings.memory, system=system), memory.stage_slopes(
            model, layout, degrees, settings.memory, relax_p=True, system=system)
    pricer = settings.pricer(model)
    batch = LayoutBatch.from_layouts([layout])
    totals = _stage_totals(pricer, layout)
    # For the sum over stages, p stages of n/p body layers each hold the same layers whatever p is:
    # the counts' relaxation cancels, and only an explicit p in the closed forms remains.
    slopes = pricer.stage_slopes(batch, degrees, relax_p=settings.objective == "max")
    return totals, {x: slope[0, :layout.p] for x, slope in slopes.items()}


def _objective_slope(totals: np.ndarray, slopes: np.ndarray, objective: str) -> float:
    if objective == "sum":
        return float(slopes.sum())
    top = totals.max()
    tied = totals >= top - _TIE * abs(top)
    return float(slopes[tied].max())


# --------------------------------------------------------------------------- the analysis


def sensitivity(model: ModelConfig, layout_text: str, settings: Settings = Settings(),
                degrees: Sequence[str] = DEGREES) -> Sensitivity:
    """The objective, and per degree its derivative, elasticity and doubling ratio.

    Args:
        model: the model (``load_model``).
        layout_text: ``--layout`` text over the model's own layout, e.g. ``"d=32,t=4,p=8,m=144"``.
        settings: run settings and objective.
        degrees: names of :data:`DEGREES`, in the order to report them.

    Raises:
        ValueError: naming an unknown degree, an invalid layout's constraint (``LayoutError``),
            an unknown device or setting.
    """
    degrees = check_degrees(degrees)
    _arguments(model, layout_text, settings)
    pricer = settings.pricer(model)  # an unknown device is an error naming it, before any work
    layout = _layout(model, layout_text, settings)
    totals, slopes = stage_derivatives(model, layout, settings, degrees)
    value = _combine(totals, settings.objective)
    top = totals.max()
    bottleneck = tuple(int(i) for i in np.flatnonzero(totals >= top - _TIE * abs(top)))
    result: dict[str, DegreeSensitivity] = {}
    for x in degrees:
        current = _degree_value(model, layout, x)
        slope = _objective_slope(totals, slopes[x], settings.objective)
        elastic = current * slope / value if value != 0 else 0.0
        doubled_text = _with_key(layout_text, x, 2 * current)
        ratio, reason = _doubling_ratio(pricer, model, doubled_text, settings, value)
        result[x] = DegreeSensitivity(name=x, value=current, derivative=slope, elasticity=float(elastic),
                                      doubling_ratio=ratio, doubled_layout=doubled_text, reason=reason)
    return Sensitivity(objective=settings.objective, value=value, layout=str(layout),
                       stages=tuple(float(v) for v in totals), bottleneck=bottleneck, degrees=result)


def _price_text(pricer: StagePricer, model: ModelConfig, text: str, settings: Settings) -> float:
    return _combine(_totals(pricer, model, _layout(model, text, settings), settings), settings.objective)


def _doubling_ratio(pricer: StagePricer, model: ModelConfig, doubled_text: str, settings: Settings,
                    value: float) -> tuple[float | None, str | None]:
    try:
        doubled = _price_text(pricer, model, doubled_text, settings)
    except ValueError as exc:  # LayoutError and every input error of the pricing path
        return None, str(exc)
    if value == 0:
        return None, "the objective is 0 at the layout; the ratio is undefined"
    return doubled / value, None


def objective_curve(model: ModelConfig, layout_text: str, degree: str,
                    settings: Settings = Settings()) -> list[tuple[int, float]]:
    """The objective against one degree over its valid range: (value, objective) pairs, ascending.

    The range is the powers of two from ``current/64`` to ``16·current`` (at least 1), and the
    current value itself; each is priced as ``symcost eval`` would, and invalid layouts are left out.

    Raises:
        ValueError: naming an unknown degree, or an invalid layout at the current value.
    """
    inputs.instance("degree", degree, str, f"one of {', '.join(DEGREES)}")
    (degree,) = check_degrees([degree])
    _arguments(model, layout_text, settings)
    pricer = settings.pricer(model)
    layout = _layout(model, layout_text, settings)
    current = _degree_value(model, layout, degree)
    low, high = max(1, current // 64), 16 * current
    candidates = {current} | {2 ** k for k in range(int(math.log2(high)) + 1) if 2 ** k >= low}
    points = []
    for x in sorted(candidates):
        try:
            points.append((x, _price_text(pricer, model, _with_key(layout_text, degree, x), settings)))
        except ValueError:
            continue
    return points


# --------------------------------------------------------------------------- the sensitivity in seconds


@dataclass(frozen=True)
class LevelSensitivity:
    """The objective's response to a network level's α (latencies) or β (bandwidths), scaled together.

    Attributes:
        name: ``nvlink_alpha``, ``network_alpha``, ``nvlink_beta`` or ``network_beta``.
        symbols: the bound symbols the relative scale λ multiplies (λ = 1 as bound).
        derivative: ∂objective/∂λ at λ = 1, seconds per unit of λ. elasticity: derivative / objective.
    """

    name: str
    symbols: tuple[str, ...]
    derivative: float
    elasticity: float

    def as_json(self) -> dict[str, Any]:
        return {"symbols": list(self.symbols), "derivative": self.derivative, "elasticity": self.elasticity}


@dataclass(frozen=True)
class TimeSensitivity(Sensitivity):
    """:class:`Sensitivity` of the communication seconds (``--cost time``), plus the network levels'."""

    levels: dict[str, LevelSensitivity] = field(default_factory=dict)
    system: str = ""
    order: str = ""
    ep_dispatcher: str = DEFAULT_EP_DISPATCHER

    def as_json(self) -> dict[str, Any]:
        return {**super().as_json(), "cost": "time", "system": self.system, "order": self.order,
                "ep_dispatcher": self.ep_dispatcher,
                "levels": {name: lv.as_json() for name, lv in self.levels.items()}}


#: ``--cost time`` objectives: the bottleneck stage's communication seconds, or the sum over stages.
TIME_OBJECTIVES = ("max", "sum")


def time_sensitivity(model: ModelConfig, layout_text: str, *, system: str, order: str | None = None,
                     fsdp: bool = False, recompute: str | None = None, objective: str = "max",
                     degrees: Sequence[str] = DEGREES, ep_dispatcher: str = DEFAULT_EP_DISPATCHER) -> TimeSensitivity:
    """Per degree and network level, the derivative and elasticity of the communication seconds per step.

    The objective is the bottleneck stage's seconds (``max``) or the sum over stages (``sum``), priced by
    ``codegen.pricing.time.TimePricer`` (NCCL's pick per collective). Derivatives are the chain rule of
    ahead-of-time generated forms (``TimePricer.stage_slopes``): derived fields held as for the volume
    objective, the group's placement held, ``p`` through the stage's layer counts ∝ 1/p (``max``), the
    chosen algorithm's derivative (a.e.). The doubling ratio re-prices the doubled layout from scratch.
    A level's derivative is in seconds per unit of a relative scale λ of its symbols (λ = 1 as bound):
    ``−∂T/∂λ_β`` is the seconds a 1 % faster link saves, × 100. *ep_dispatcher*: how the experts' tokens move
    (``symbolic.vocabulary.EP_DISPATCHERS``; docs/time.md, "Expert dispatch").

    Raises:
        ValueError: an unknown degree, objective, system, expert dispatcher or a system without GPU facts (naming
            it), an invalid layout's constraint.
    """
    from .placement import DEFAULT_ORDER
    from .time import LEVELS, TimePricer
    from .collective import LEVEL_PARAMETERS

    degrees = check_degrees(degrees)
    inputs.instance("layout_text", layout_text, str, "--layout text such as 'd=32,t=4,p=8,m=144'")
    model_argument(model, names=False)
    inputs.one_of("objective", objective, TIME_OBJECTIVES)
    inputs.instance("system", system, str, "a hardware catalog name such as dgx_h100")
    fsdp = inputs.flag("fsdp", fsdp)
    if recompute is not None:
        inputs.instance("recompute", recompute, str, "None or recompute text (full, selective, none or N,N,…)")
    order = DEFAULT_ORDER if order is None else order
    pricer = TimePricer(model, system=system, order=order, fsdp=fsdp or None, recompute=recompute,
                        ep_dispatcher=ep_dispatcher)
    settings = Settings(fsdp=fsdp, recompute=recompute, objective=objective)
    layout = _layout(model, layout_text, settings)
    totals_all, slopes = pricer.stage_slopes(LayoutBatch.from_layouts([layout]), degrees,
                                             relax_p=objective == "max", validated=True)
    totals = totals_all[0, :layout.p]
    value = _combine(totals, objective)
    top = totals.max()
    bottleneck = tuple(int(i) for i in np.flatnonzero(totals >= top - _TIE * abs(top)))

    def price(text: str) -> float:
        doubled = _layout(model, text, settings)
        stages = pricer.price_batch(LayoutBatch.from_layouts([doubled]), per_stage=True, validated=True).stages
        return _combine(stages["total_s"][0, :doubled.p], objective)

    result: dict[str, DegreeSensitivity] = {}
    for x in degrees:
        current = _degree_value(model, layout, x)
        slope = _objective_slope(totals, slopes[x][0, :layout.p], objective)
        doubled_text = _with_key(layout_text, x, 2 * current)
        try:
            ratio, reason = (price(doubled_text) / value, None) if value != 0 else (
                None, "the objective is 0 at the layout; the ratio is undefined")
        except ValueError as exc:
            ratio, reason = None, str(exc)
        result[x] = DegreeSensitivity(name=x, value=current, derivative=slope,
                                      elasticity=float(current * slope / value) if value != 0 else 0.0,
                                      doubling_ratio=ratio, doubled_layout=doubled_text, reason=reason)
    levels = {}
    for name in LEVELS:
        slope = _objective_slope(totals, slopes[name][0, :layout.p], objective)
        levels[name] = LevelSensitivity(name=name, symbols=LEVEL_PARAMETERS[name], derivative=slope,
                                        elasticity=slope / value if value != 0 else 0.0)
    return TimeSensitivity(objective=objective, value=value, layout=str(layout),
                           stages=tuple(float(v) for v in totals), bottleneck=bottleneck, degrees=result,
                           levels=levels, system=system, order=order, ep_dispatcher=pricer.ep_dispatcher)
