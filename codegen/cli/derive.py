"""``symcost derive``: the closed form of a formula, of a function of the original, or of a model's stage total.

``NAME`` is a registered formula, or a function of the original (``cp_traffic``,
``EvalLayerComm.tp_comm_layer``, …) resolved for the variant the options choose
(``symbolic.variants``). ``--model`` derives a pipeline stage's output for the
variant a bundled model and a layout select, built as ``symcost eval`` builds it
(``codegen.configs.derive_fields`` then ``codegen.pricing.stages.variant_of``) and
laid out as Σ layer count × per-layer cost. Closed forms go through the cheap
passes of ``symbolic.simplify`` only; printed as text, LaTeX or Markdown
(``codegen.docs``).
"""

from __future__ import annotations

import argparse
import dataclasses

from typing import TYPE_CHECKING

from symbolic.vocabulary import STAGE_COUNT_NAMES, STAGE_OUTPUTS

from . import COMMANDS

if TYPE_CHECKING:  # pragma: no cover
    import sympy

    from symbolic.formula import Formula
    from symbolic.variants import Variant

__all__ = ["register", "run", "STAGE_NAMES"]

#: Names that stand for a stage output of a model (they need ``--model``): ``stage_<output>`` for each
#: output of ``symbolic.vocabulary.STAGE_OUTPUTS``, and the original's stage functions (their total).
STAGE_NAMES: tuple[str, ...] = (*(f"stage_{o}" for o in STAGE_OUTPUTS), "estimate_from_mem_comm",
                                "estimate_comm")

# The model options, with the value that means "not given".
_MODEL_OPTIONS = {"layout": ("--layout", None), "fsdp": ("--fsdp", False), "device": ("--device", None),
                  "ttype": ("--ttype", None), "with_recomp": ("--with-recomp", False)}

_EPILOG = """\
Variant options (a function of the original reads some of them; --list shows which):
  --algo ALGO         CP algorithm: colossalai_cp, hybrid_cp (hybird_cp), ulysses_cp
  --attention TYPE    mha, gqa, mqa or mla; for parameter counts mha/gqa/mqa are the
                      standard layout and mla has a query latent unless --q-direct
  --linear            a linear-attention layer (n_linrec != 0)
  --moe | --dense     the layer routes to experts (n_exp > 1) or not
  --layer TYPE        NOT_REC_LAYER, SEL_REC_LAYER, FULL_REC_LAYER, EMBEDDING_LAYER or
                      OUTPUT_LAYER: the TP node, the recomputed layer, the FSDP table
  --zero L[,L]        DP levels comm_d_non_exp,comm_d_exp (0, 2 or 3; one number sets both)
  --routing R         EP routing: balanced (default) or imbalanced
  --levels N          depth of the device hierarchy of estimate_comm_score (1-3)
  --reshards, --shard-spans-cp, --tied
                      the FSDP switches reshards, shard_spans_cp and tie_emb_out
Per-layer DP and FSDP volumes are written over the layer's parameter counts
P_ne, P_r, P_s; with --attention (and --moe/--dense) the formulas of those
counts for that layer follow the volume.

Stage totals: symcost derive --model NAME [--layout ...] [--fsdp] [--device A2]
[--ttype FLOP|TIME] [--with-recomp], or NAME = stage_total, stage_dp, ... or
estimate_comm / estimate_from_mem_comm with --model. The closed form is laid
out as a sum over layer kinds of (layer count x cost of one such layer).

Examples:
  symcost derive cp_traffic --algo ulysses_cp --attention gqa --latex
  symcost derive EvalLayerComm.tp_comm_layer --moe --layer SEL_REC_LAYER
  symcost derive EvalLayerComm.dp_comm_layer --zero 2 --moe --attention mla
  symcost derive _recomputed_comm --layer FULL_REC_LAYER --dense --algo colossalai_cp --attention gqa
  symcost derive estimate_comm_score --levels 2 --markdown
  symcost derive --model deepseek-v3 --layout d=32,t=4,p=8 --fsdp
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("derive", help=COMMANDS["derive"],
                       description="Print the simplified closed form of a registered formula, of a function of "
                                   "the original for one variant, or of a model's pipeline-stage total, as text, "
                                   "LaTeX or Markdown.",
                       epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", help="formula name, original function name, or a stage name (with --model)")
    p.add_argument("--algo", help="CP algorithm")
    p.add_argument("--attention", help="attention type: mha, gqa, mqa, mla")
    p.add_argument("--linear", action="store_true", help="a linear-attention layer (n_linrec != 0)")
    ffn = p.add_mutually_exclusive_group()
    ffn.add_argument("--moe", dest="ffn", action="store_const", const="moe", help="a MoE layer (n_exp > 1)")
    ffn.add_argument("--dense", dest="ffn", action="store_const", const="dense", help="a dense layer")
    p.add_argument("--q-direct", action="store_true", help="MLA without a query latent (dc_q = 0)")
    p.add_argument("--layer", "--node", dest="layer", metavar="TYPE", help="layer type (node)")
    p.add_argument("--zero", metavar="L[,L]", help="DP levels comm_d_non_exp,comm_d_exp")
    p.add_argument("--routing", help="EP routing: balanced or imbalanced")
    p.add_argument("--levels", help="hierarchy depth of the level score: 1, 2 or 3")
    p.add_argument("--reshards", action="store_true", help="FSDP reshards after each pass")
    p.add_argument("--shard-spans-cp", dest="spans_cp", action="store_true", help="the FSDP shard spans CP")
    p.add_argument("--tied", action="store_true", help="embedding tied to the output table (tie_emb_out)")
    p.add_argument("--model", help="a bundled model or a YAML path: derive its stage total")
    p.add_argument("--layout", default=None, help="with --model: e.g. d=32,t=4,p=8,cp=1,ep=1,m=144 (keys left out "
                                                  "keep the model file's layout)")
    p.add_argument("--fsdp", action="store_true", help="with --model: DP priced as FSDP traffic")
    p.add_argument("--device", "--system", dest="device", default=None,
                   help="with --model: the catalog system (a name or an alias; default A2); --system is the same "
                        "option, as search, collective and validate name it")
    p.add_argument("--ttype", choices=("FLOP", "TIME"), default=None, help="with --model: FLOP (default) or TIME")
    p.add_argument("--with-recomp", action="store_true",
                   help="with --model: the total with each recomputed layer's traffic added again")
    style = p.add_mutually_exclusive_group()
    style.add_argument("--latex", action="store_true", help="print LaTeX instead of text")
    style.add_argument("--markdown", action="store_true", help="print a Markdown section per formula")
    p.add_argument("--list", action="store_true", help="list formula, function and stage names")
    p.set_defaults(func=run)


def render(expr: sympy.Expr, latex_style: bool, linear_in: tuple[sympy.Symbol, ...] = ()) -> str:
    """*expr* as LaTeX or as 2-D text; *linear_in*: it is laid out as Σ count × cost over these symbols."""
    from ..docs import latex, text

    return latex(expr, linear_in) if latex_style else text(expr, linear_in)


def _variant(args: argparse.Namespace) -> Variant:
    from symbolic.variants import OPTION_FLAGS, Variant

    return Variant(**{name: getattr(args, name) for name in OPTION_FLAGS})


def _list() -> None:
    from symbolic import registry
    from symbolic.variants import FAMILIES

    print("functions of the original (their variant options):")
    for name, family in FAMILIES.items():
        print(f"  {name}  {family.options}".rstrip())
    print("stage outputs of a model (with --model; estimate_* give the total):")
    print("  " + ", ".join(STAGE_NAMES))
    print("formulas:")
    for name, f in registry.FORMULAS.items():
        print(f"  {name}  [{f.unit}]")


def _stage(args: argparse.Namespace) -> Formula:
    """The stage formula the model options select, its doc saying for which model, layout and device."""
    import sympy

    import hardware
    from symbolic import model as stage_model
    from symbolic.symbols import symbol
    from symbolic.variants import OPTION_FLAGS

    from ..configs import derive_fields, parse_layout
    from ..configs.models import load_model
    from ..pricing.stages import Fields, bind, variant_of

    name = args.name or "stage_total"
    if name not in STAGE_NAMES:
        raise ValueError(f"model: --model derives a stage output ({', '.join(STAGE_NAMES)}), not {name!r}")
    given = [OPTION_FLAGS[o] for o in OPTION_FLAGS if getattr(args, o) not in (None, False)]
    if given:
        raise ValueError(f"model: the stage variant comes from the model and its layout; {', '.join(given)} "
                         "does not apply (set cp_algo, sp, ... in --layout)")
    output = name.removeprefix("stage_") if name.startswith("stage_") else "total"
    if args.with_recomp:
        if output != "total":
            raise ValueError(f"with_recomp: --with-recomp picks the recomputed total; name stage_*_recomputed "
                             f"instead of combining it with {name}")
        output = "total_recomputed"
    device = args.device or "A2"
    try:
        hardware.load(device)
    except ValueError as exc:
        raise ValueError(f"device: {exc}") from None
    cfg = load_model(args.model)
    layout = parse_layout(args.layout or "", cfg.layout, fsdp=True if args.fsdp else None)
    ttype = args.ttype or "FLOP"
    fields = Fields(derive_fields(cfg, layout))
    variant = stage_model.StageVariant.from_data(variant_of(fields))
    formula = getattr(stage_model.stage_formulas(variant), output)
    # The switches and device factors are numbers for this layout: substituted, the closed form reads
    # as the layout's own (FLOP binds the score factors to 1; TIME keeps them as symbols).
    switches = [name for name in formula.arguments if name.startswith(("zero2_", "zero3_"))
                or name in ("reshards", "shard_spans_cp", "stage_cost_scale")
                or (ttype == "FLOP" and name.startswith("score_factor_"))]
    bound = bind(fields, switches, system=hardware.load(device), ttype=ttype)
    formula = dataclasses.replace(formula, expr=formula.expr.xreplace(
        {symbol(name): sympy.nsimplify(float(bound[name])) for name in switches}))
    if ttype == "TIME":  # DP, TP and CP are level scores: the path names the formula and its unit
        name_ = formula.name.replace("_stage_", "_time_stage_", 1)
        formula = dataclasses.replace(formula, name=name_, unit="score")
    counts = ", ".join(STAGE_COUNT_NAMES)
    where = (f"Model {args.model}, layout {layout}{' with FSDP' if layout.fsdp else ''}, device {device}, "
             f"{ttype} path: variant {stage_model.variant_key(variant)}. The counts ({counts}) are the layers "
             "of each kind the stage holds.")
    return dataclasses.replace(formula, doc=f"{formula.doc} {where}")


def run(args: argparse.Namespace) -> int:
    # SymPy and the formula registry load here, not when the command line is parsed.
    from symbolic.simplify import closed_form
    from symbolic.symbols import SPECS, syms
    from symbolic.variants import resolve

    from ..docs import formula_context, render_sections

    if args.list or (not args.name and not args.model):
        _list()
        return 0
    stage = args.model is not None or args.name in STAGE_NAMES
    if stage:
        if args.model is None:
            raise ValueError(f"model: {args.name} is a stage output and needs --model (a bundled model or a path)")
        formula = _stage(args)
        counts = syms(*STAGE_COUNT_NAMES)
        items = [(formula, closed_form(formula.expr, linear_in=counts), counts)]
    else:
        loose = [flag for key, (flag, unset) in _MODEL_OPTIONS.items() if getattr(args, key) != unset]
        if loose:
            raise ValueError(f"model: {', '.join(loose)} needs --model")
        items = [(f, closed_form(f.expr), ()) for f in resolve(args.name, _variant(args))]
    if args.markdown:
        print(render_sections([formula_context(f, expr, linear_in) for f, expr, linear_in in items]), end="")
        return 0
    for i, (f, expr, linear_in) in enumerate(items):
        if i:
            print()
        print(f"{f.name}  [{f.unit}]")
        print(f"  {f.doc}")
        print(f"  source: {f.source}")
        symbols = ", ".join(f"{a} ({SPECS[a].meaning})" for a in f.arguments)
        print(f"  symbols: {symbols or 'none'}")
        print()
        print(render(expr, args.latex, linear_in))
    return 0
