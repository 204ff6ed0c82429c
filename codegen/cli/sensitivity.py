"""``symcost sensitivity``: how a layout's communication cost responds to each parallel degree.

For a model, a layout and the run settings of ``symcost eval``, and for each
degree or size ``x`` of ``t, cp, ep, d, p, m, b, s``:

* **value** of the objective: the bottleneck stage's total (``max``, the
  default: a pipeline runs at its slowest stage) or the sum of the stage
  totals (``sum``), in the original's mixed units (see ``symcost eval``);
  ``--with-recomp`` prices the recompute sums instead.
* **derivative** ``∂objective/∂x``: the partial derivative of the stage
  closed forms (``symbolic.model.stage_formulas``) in ``x``'s symbol, with
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
  embedding and output layers stay where they are. That is the bottleneck
  stage's slope (``max``); for ``sum`` the relaxation cancels — ``p`` stages of
  ``n/p`` layers hold the same layers for every ``p`` — and only an explicit
  ``p`` in the closed forms (FSDP's tied embedding) is differentiated.
  For ``max`` the derivative is that of the stage attaining the maximum
  (a.e.); where several stages tie, the largest of their derivatives (the
  right derivative of the maximum). For ``sum``, the sum of the stages'.
  The evaluators are the derivative formulas compiled through the code
  generator (``codegen.kernels.formula_functions``), over all stages at once.
* **elasticity** ``x / objective · derivative`` (0 where the objective is 0):
  percent change of the cost per percent change of ``x``.
* **doubling ratio** ``objective(x·2) / objective``: the layout with ``x``
  doubled in ``--layout`` priced from scratch exactly as ``symcost eval``
  would (every field re-derived, stages rebuilt); ``null`` when the doubled
  layout is invalid, with the violated constraint as the reason (shown in the
  table; on stderr with ``--json``).

The table is ranked by ``|elasticity|``, ties by ``|log doubling ratio|``.

Command line::

    symcost sensitivity --model NAME [--layout K=V,…] [--device D] [--fsdp] [--recompute R] [--with-recomp]
                        [--ttype FLOP|TIME] [--objective max|sum] [--degrees t,cp,…] [--json] [--plot FILE.png]

``--json`` prints ``{"objective", "value", "degrees": {x: {"value", "derivative", "elasticity",
"doubling_ratio"}}}``; ``--plot`` draws the objective against each degree over the powers of two
that give valid layouts (:func:`objective_curve`) and needs matplotlib (the ``plot`` extra).

Public API::

    Settings(device="A2", fsdp=False, recompute=None, with_recomp=False, ttype="FLOP", objective="max")
    sensitivity(model, layout_text, settings=Settings(), degrees=DEGREES) -> Sensitivity
    stage_derivatives(inputs, settings, degrees=DEGREES) -> (stage totals, {degree: stage derivatives})
    objective_curve(model, layout_text, degree, settings=Settings()) -> list[tuple[int, float]]
    DegreeSensitivity, Sensitivity, OBJECTIVES
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from symbolic import model as stage_model
from symbolic.formula import Formula
from symbolic.sensitivity import DEGREES, derivative, split_derivative

from ..reference.adapters.fields import Fields
from ..reference.adapters.model import evaluate_stages, stage_bindings, variant_of
from ..kernels import formula_functions
from ..configs.layouts import Layout, build_stages, derive_fields, parse_layout, validate
from ..configs.models import ModelConfig, load_model, model_names

__all__ = ["OBJECTIVES", "Settings", "DegreeSensitivity", "Sensitivity", "sensitivity", "stage_derivatives",
           "objective_curve", "register", "run"]

#: How stage totals combine into one number: the bottleneck stage, or all stages together.
OBJECTIVES = ("max", "sum")

#: Stage counts that are a share of the body layers, relaxed as ∝ 1/p for the p derivative.
BODY_COUNTS = ("n_body", "n_extra", "n_extra_sel", "n_full_rec", "n_sel_rec")

_TTYPES = ("FLOP", "TIME")

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
        objective: ``max`` (the bottleneck stage) or ``sum`` (over the stages).
    """

    device: str = "A2"
    fsdp: bool = False
    recompute: str | None = None
    with_recomp: bool = False
    ttype: str = "FLOP"
    objective: str = "max"

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective: expected one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        if self.ttype not in _TTYPES:
            raise ValueError(f"ttype: expected one of {', '.join(_TTYPES)}, got {self.ttype!r}")


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


def _inputs(model: ModelConfig, layout: Layout, settings: Settings) -> dict[str, Any]:
    """The case-style inputs ``symcost eval`` prices (``cmd_eval.stage_results``)."""
    return {**derive_fields(model, layout), "stages": build_stages(model, layout), "device": settings.device,
            "mode": "with_recomp" if settings.with_recomp else "plain", "ttype": settings.ttype}


def _stage_totals(inputs: Mapping[str, Any], settings: Settings) -> np.ndarray:
    out = evaluate_stages(inputs)
    return np.asarray(out["total_recomputed" if settings.with_recomp else "total"], dtype=float)


def _combine(totals: np.ndarray, objective: str) -> float:
    return float(totals.max() if objective == "max" else totals.sum())


def _degree_value(model: ModelConfig, layout: Layout, name: str) -> int:
    if name == "s":
        return int(layout.s or model.s)
    return int(getattr(layout, name))


def _with_key(text: str, key: str, value: int) -> str:
    """*text* with ``key=value`` replacing the key's item, or appended."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    kept = [item for item in items if item.partition("=")[0].strip() != key]
    return ",".join(kept + [f"{key}={value}"])


def _check_degrees(degrees: Sequence[str]) -> tuple[str, ...]:
    names = tuple(degrees)
    unknown = [n for n in names if n not in DEGREES]
    if unknown:
        raise ValueError(f"degrees: unknown degree {unknown[0]!r}; known: {', '.join(DEGREES)}")
    if not names:
        raise ValueError(f"degrees: give at least one of {', '.join(DEGREES)}")
    return names


# --------------------------------------------------------------------------- derivatives


def _parts(settings: Settings, formulas: stage_model.StageFormulas) -> tuple[Formula, ...]:
    """The converted parts whose sum is the priced stage total (as ``evaluate_stages`` adds them)."""
    suffix = "_recomputed" if settings.with_recomp else ""
    return (formulas.dp, getattr(formulas, "tp" + suffix), getattr(formulas, "ep" + suffix),
            getattr(formulas, "cp" + suffix))


def _bindings(inputs: Mapping[str, Any], names: set[str], device: str) -> dict[str, Any]:
    """Values of *names* at the layout, bound exactly as ``evaluate_stages`` binds them."""
    return stage_bindings({**inputs, "device": device}, names)


def _evaluate(formulas: Sequence[Formula], values: Mapping[str, Any], stages: int) -> dict[str, np.ndarray]:
    """Each formula over the stages, through the generated code (zero expressions need no code)."""
    live = [f for f in formulas if f.expr != 0]
    functions = formula_functions(live) if live else {}
    out: dict[str, np.ndarray] = {}
    for f in formulas:
        if f.expr == 0:
            out[f.name] = np.zeros(stages)
        else:
            value = functions[f.name](**{a: values[a] for a in f.arguments})
            out[f.name] = np.broadcast_to(np.asarray(value, dtype=float), (stages,))
    return out


def _derivative_formula(part: Formula, degree: str, objective: str) -> Formula:
    if degree == "p" and objective == "max":
        return split_derivative(part, "p", BODY_COUNTS)
    # For the sum over stages, p stages of n/p body layers each hold the same layers whatever p is:
    # the counts' relaxation cancels, and only an explicit p in the closed forms remains.
    return derivative(part, degree)


def stage_derivatives(inputs: Mapping[str, Any], settings: Settings,
                      degrees: Sequence[str] = DEGREES) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Each stage's priced total and its derivative in each degree, as arrays over the stages.

    Args:
        inputs: case-style inputs with ``stages`` (as ``symcost eval`` builds them).
        settings: the run settings; the objective decides the ``p`` derivative (per stage, counts
            ∝ 1/p, for ``max``; the explicit ``p`` alone for ``sum``, see the module docstring).
        degrees: names of :data:`DEGREES`.

    Raises:
        ValueError: naming an unknown degree.
        RuntimeError: if the parts evaluated here do not add up to ``evaluate_stages``'s totals.
    """
    degrees = _check_degrees(degrees)
    variant = variant_of(Fields(inputs), settings.device)
    parts = _parts(settings, stage_model.stage_formulas(variant))
    slopes = {(part.name, x): _derivative_formula(part, x, settings.objective) for part in parts for x in degrees}
    every = list(parts) + list(slopes.values())
    values = _bindings(inputs, {a for f in every for a in f.arguments}, settings.device)
    stages = len(inputs["stages"])
    evaluated = _evaluate(every, values, stages)
    totals = sum(evaluated[part.name] for part in parts)
    reference = _stage_totals(inputs, settings)
    if not np.allclose(totals, reference, rtol=1e-12, atol=0.0):
        raise RuntimeError(f"stage parts bound here give {totals.tolist()}, evaluate_stages gives "
                           f"{reference.tolist()}: the two bindings of the stage formulas have drifted apart")
    per_degree = {x: sum(evaluated[slopes[(part.name, x)].name] for part in parts) for x in degrees}
    return reference, per_degree


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
    import hardware

    degrees = _check_degrees(degrees)
    hardware.load(settings.device)  # an unknown device is an error naming it, before any work
    layout = _layout(model, layout_text, settings)
    inputs = _inputs(model, layout, settings)
    totals, slopes = stage_derivatives(inputs, settings, degrees)
    value = _combine(totals, settings.objective)
    top = totals.max()
    bottleneck = tuple(int(i) for i in np.flatnonzero(totals >= top - _TIE * abs(top)))
    result: dict[str, DegreeSensitivity] = {}
    for x in degrees:
        current = _degree_value(model, layout, x)
        slope = _objective_slope(totals, slopes[x], settings.objective)
        elastic = current * slope / value if value != 0 else 0.0
        doubled_text = _with_key(layout_text, x, 2 * current)
        ratio, reason = _doubling_ratio(model, doubled_text, settings, value)
        result[x] = DegreeSensitivity(name=x, value=current, derivative=slope, elasticity=float(elastic),
                                      doubling_ratio=ratio, doubled_layout=doubled_text, reason=reason)
    return Sensitivity(objective=settings.objective, value=value, layout=str(layout),
                       stages=tuple(float(v) for v in totals), bottleneck=bottleneck, degrees=result)


def _price_text(model: ModelConfig, text: str, settings: Settings) -> float:
    layout = _layout(model, text, settings)
    return _combine(_stage_totals(_inputs(model, layout, settings), settings), settings.objective)


def _doubling_ratio(model: ModelConfig, doubled_text: str, settings: Settings,
                    value: float) -> tuple[float | None, str | None]:
    try:
        doubled = _price_text(model, doubled_text, settings)
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
    (degree,) = _check_degrees([degree])
    layout = _layout(model, layout_text, settings)
    current = _degree_value(model, layout, degree)
    low, high = max(1, current // 64), 16 * current
    candidates = {current} | {2 ** k for k in range(int(math.log2(high)) + 1) if 2 ** k >= low}
    points = []
    for x in sorted(candidates):
        try:
            points.append((x, _price_text(model, _with_key(layout_text, degree, x), settings)))
        except ValueError:
            continue
    return points


# --------------------------------------------------------------------------- command line


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sensitivity", help="derivative, elasticity and doubling ratio of the cost per degree",
                       description="How a layout's communication cost (bottleneck stage or sum over stages) "
                                   "responds to each parallel degree and size: the partial derivative of the "
                                   "stage closed forms with derived fields held, the elasticity, and the ratio "
                                   "after doubling the degree and re-pricing from scratch. Ranked by "
                                   "|elasticity|.")
    p.add_argument("--model", required=True, help=f"a bundled model ({', '.join(model_names())}) or a YAML path")
    p.add_argument("--layout", default="", help="e.g. d=32,t=4,p=8,m=144 (keys left out keep the model's layout)")
    p.add_argument("--device", default="A2", help="device of the level model (hardware catalog name; default A2)")
    p.add_argument("--recompute", help="full, selective, none, or fully recomputed layers per stage N,N,...")
    p.add_argument("--fsdp", action="store_true", help="price DP as FSDP traffic (grad_shard_as_params)")
    p.add_argument("--with-recomp", action="store_true", help="price the recompute sums (as symcost eval)")
    p.add_argument("--ttype", default="FLOP", help="FLOP (volumes; default) or TIME (level scores)")
    p.add_argument("--objective", default="max", help="max (bottleneck stage; default) or sum (over stages)")
    p.add_argument("--degrees", default=",".join(DEGREES), help=f"comma-separated subset of {','.join(DEGREES)}")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", metavar="FILE.png", help="write the objective against each degree (needs matplotlib)")
    p.set_defaults(func=run)


def _settings(args: argparse.Namespace) -> Settings:
    return Settings(device=args.device, fsdp=args.fsdp, recompute=args.recompute, with_recomp=args.with_recomp,
                    ttype=args.ttype, objective=args.objective)


def _fmt(value: float | None) -> str:
    return "null" if value is None else f"{value:.6g}"


def run(args: argparse.Namespace) -> int:
    settings = _settings(args)
    degrees = _check_degrees([item.strip() for item in args.degrees.split(",") if item.strip()])
    pyplot = None
    if args.plot:
        try:
            import matplotlib

            matplotlib.use("Agg")
            from matplotlib import pyplot
        except ImportError:
            print("symcost sensitivity: error: --plot needs matplotlib, which is not installed; "
                  "install the optional extra: pip install 'symcost[plot]'", file=sys.stderr)
            return 2
    model = load_model(args.model)
    result = sensitivity(model, args.layout, settings, degrees)
    if args.json:
        print(json.dumps(result.as_json()))
        for d in result.degrees.values():
            if d.reason is not None:
                print(f"note: doubling {d.name} ({d.doubled_layout}): {d.reason}", file=sys.stderr)
    else:
        _print_table(args.model, settings, result)
    if pyplot is not None:
        _plot(pyplot, model, args.layout, settings, result, args.plot)
        if not args.json:
            print(f"wrote {args.plot}")
    return 0


def _print_table(name: str, settings: Settings, result: Sensitivity) -> None:
    where = (f"bottleneck stage {', '.join(map(str, result.bottleneck))}" if settings.objective == "max"
             else f"sum over {len(result.stages)} stages")
    print(f"model {name}  layout {result.layout}  device {settings.device}")
    print(f"objective {settings.objective} = {result.value:.6g} ({where}); ranked by |elasticity|")
    print(f"{'degree':>6}  {'value':>7}  {'derivative':>13}  {'elasticity':>11}  {'x2 ratio':>9}  note")
    for d in result.ranked():
        note = f"x2 invalid: {d.reason}" if d.reason else ""
        print(f"{d.name:>6}  {d.value:>7}  {d.derivative:>13.6g}  {d.elasticity:>11.4g}  "
              f"{_fmt(d.doubling_ratio):>9}  {note}")
    print("derivative: d objective / d degree with derived fields (comm_*, t_exp, d_exp, ZeRO levels, shards, "
          "layer counts) held; p through layer counts ∝ 1/p. x2 ratio: doubled layout re-priced from scratch.")


def _plot(pyplot: Any, model: ModelConfig, layout_text: str, settings: Settings, result: Sensitivity,
          path: str) -> None:
    names = list(result.degrees)
    columns = min(4, len(names))
    rows = math.ceil(len(names) / columns)
    fig, axes = pyplot.subplots(rows, columns, figsize=(3.6 * columns, 3.0 * rows), squeeze=False)
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
    fig.savefig(path, dpi=120)
    pyplot.close(fig)
