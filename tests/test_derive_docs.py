"""Readable closed forms (symcost derive) and the generated formula reference (docs/formulas.md)."""

from __future__ import annotations

import functools
import math
import random
import time
from dataclasses import dataclass

import pytest
import sympy
from sympy import Min, Ne, Piecewise, Rational

from symbolic.vocabulary import STAGE_COUNT_NAMES
from codegen.cli import main
from codegen.cli.derive import STAGE_NAMES
from codegen.compiler import UNLISTED
from codegen.docs import DOCS_PATH, check_formulas_doc, latex, render_formulas_doc, write_formulas_doc
from conftest import CASES, assert_close
from symbolic import registry, simplify
from symbolic.simplify import PASSES, closed_form, collect_linear, size
from symbolic.symbols import SPECS, symbol, syms
from symbolic.variants import FAMILIES

s, b, h, a, t, cp, dh, dhr, n_kv, hff, mb = syms("s", "b", "h", "a", "t", "cp", "dh", "dhr", "n_kv", "hff", "mb")
bytes_compute, comm_t, n_gather = syms("bytes_compute", "comm_t", "n_gather")


# ---------------------------------------------------------------- random valid values


def _draw(name: str, rng: random.Random) -> sympy.Expr:
    """A value valid for the symbol's declared kind; a nonnegative one is 0 a quarter of the time (fallbacks)."""
    kind = SPECS[name].kind
    if name == "nodes":  # one node half the time: NVLS and the single-node branches of the time model
        return sympy.Integer(rng.choice([1, 1, 2, 4]))
    if name == "ranks_per_node":  # one rank per node a third of the time: PAT and the ring's one-rank latency
        return sympy.Integer(rng.choice([1, 2, 8]))
    if name == "p2p_ll_threshold_bytes":  # both sides of NCCL's p2p LL threshold (LL below, Simple above)
        return sympy.Float(rng.choice([0.01, 100.0]))
    if kind == "positive_integer":
        return sympy.Integer(rng.randint(1, 12))
    if kind == "nonnegative_integer":
        return sympy.Integer(0 if rng.random() < 0.25 else rng.randint(1, 9))
    if kind == "positive":
        return sympy.Float(rng.uniform(0.5, 6.0))
    return sympy.Float(0 if rng.random() < 0.25 else rng.uniform(0.1, 6.0))


def _substituted(expr: sympy.Basic, point: dict[sympy.Symbol, sympy.Expr],
                 done: dict[sympy.Basic, tuple[sympy.Basic, bool]]) -> tuple[sympy.Basic, bool]:
    """``expr.xreplace(point)`` and whether anything was replaced, as SymPy's ``Basic._xreplace`` computes
    them (each node rebuilt from its rebuilt arguments where one changed), each distinct subexpression once
    per point: *done* holds those of the point's earlier calls.

    The expressions checked share most of their pieces (a pass's input and output, the passes of one round,
    a stage total and its terms): the passes' checks visit some 480 000 nodes per point, under 10 000 of
    them distinct, and rebuilding a node (a Min, a Piecewise on numbers) is what costs. Equal expressions
    (``==``: the same types and arguments; a Float is never equal to an Integer) rebuild to the same
    value, so a remembered one is the one xreplace would compute again.
    """
    if expr in point:
        return point[expr], True
    if not expr.args:
        return expr, False
    known = done.get(expr)
    if known is None:
        args, changed = [], False
        for arg in expr.args:
            if getattr(arg, "_xreplace", None) is None:  # (as Basic._xreplace: a non-SymPy argument is kept)
                args.append(arg)
                continue
            new, replaced = _substituted(arg, point, done)
            args.append(new)
            changed |= replaced
        known = done[expr] = (expr.func(*args), True) if changed else (expr, False)
    return known


def _value(expr: sympy.Expr, point: dict[sympy.Symbol, sympy.Expr],
           done: dict[sympy.Basic, tuple[sympy.Basic, bool]]) -> float | None:
    """*expr* at *point*, None where it is undefined (a division by 0 in a branch taken); *done*: see
    ``_substituted``."""
    value, _ = _substituted(sympy.sympify(expr), point, done)
    if not value.is_number or value.has(sympy.zoo, sympy.nan) or not value.is_finite:
        return None
    return float(value)


@functools.cache
def _points(n: int, seed: int) -> tuple[dict[sympy.Symbol, sympy.Expr], ...]:
    # One stream per symbol, seeded by its name: declaring a new symbol leaves the others' values as they were.
    rngs = {name: random.Random(f"{seed}:{name}") for name in SPECS}
    return tuple({symbol(name): _draw(name, rngs[name]) for name in SPECS} for _ in range(n))


@functools.cache
def _substitutions(n: int, seed: int) -> tuple[dict[sympy.Basic, tuple[sympy.Basic, bool]], ...]:
    # Per point of _points(n, seed): every subexpression substituted so far (``_substituted``), for the module.
    return tuple({} for _ in range(n))


@functools.cache
def _values(expr: sympy.Expr, n: int, seed: int) -> tuple[float | None, ...]:
    # Once per expression: the passes of a round all start from the same one.
    return tuple(_value(expr, point, done) for point, done in zip(_points(n, seed), _substitutions(n, seed)))


@functools.cache
def _shown(n: int, seed: int) -> tuple[str, ...]:
    # The points as text for the failure messages, once: one point (every symbol) takes milliseconds to print.
    return tuple(str(point) for point in _points(n, seed))


def _assert_same_value(before: sympy.Expr, after: sympy.Expr, what: str, *, n: int = 6, seed: int) -> None:
    """*after* equals *before* at *n* random valid points (drawn from *seed*) wherever *before* is defined."""
    checked = 0
    for point, shown, want, got in zip(_points(n, seed), _shown(n, seed), _values(before, n, seed),
                                       _values(after, n, seed)):
        if want is None or not math.isfinite(want):
            continue
        assert got is not None, f"{what}: undefined at {point} where the original is {want}"
        assert_close(got, want, rtol=1e-9, atol=1e-9, msg=f"{what} at {shown}")
        checked += 1
    assert checked, f"{what}: no point where the original is defined"


# ---------------------------------------------------------------- LaTeX goldens


def _eta() -> sympy.Expr:
    # docs/formulas.md, "Context parallelism (CP)": η = dh if dh ≠ 0 else h / max(1, a); for the positive
    # integers the values are drawn from, max(1, a) = a.
    return Piecewise((dh, Ne(dh, 0)), (h / a, True))


def _rho() -> sympy.Expr:
    return (cp - 1) / cp


# Expected strings written from docs/formulas.md, in SymPy's canonical factor order and with the
# reference's symbol spelling: one letter as is, x_rest as x_{\mathrm{rest}}, other names upright.
GOLDENS = {
    # Ring: V = 2·ρ·s·b·2W·bytes_compute with the GQA width W = min(n_kv if n_kv > 0 else a, a)·dh/t.
    "cp_ring_gqa_traffic_bytes": (
        2 * _rho() * s * b * 2 * (Piecewise((Min(n_kv, a), n_kv > 0), (a, True)) * dh / t) * bytes_compute,
        r"\frac{4 b \mathrm{bytes\_compute} \mathrm{dh} s \left(\mathrm{cp} - 1\right) \left(\begin{cases} "
        r"\min\left(a, n_{\mathrm{kv}}\right) & \text{for}\: n_{\mathrm{kv}} > 0 \\a & \text{otherwise} "
        r"\end{cases}\right)}{\mathrm{cp} t}",
    ),
    # Ulysses MLA: V = 2·ρ·(s/cp)·b·[a(η + dhr)/t + 2W + a·η/t]·bytes_compute, W = n_kv(2dh + dhr)/(2t);
    # η's fallback keeps the original's max(1, a) (line 159), as max(1, a - dh) where dh = 0: with a unset the
    # head terms are 0, as the original computes them.
    "cp_ulysses_mla_traffic_bytes": (
        2 * _rho() * (s / cp) * b * (a * (_eta() + dhr) / t + 2 * (n_kv * (2 * dh + dhr) / (2 * t))
                                     + a * _eta() / t) * bytes_compute,
        r"\frac{2 b \mathrm{bytes\_compute} s \left(\mathrm{cp} - 1\right) \left(a \left(\mathrm{dhr} + "
        r"\begin{cases} \mathrm{dh} & \text{for}\: \mathrm{dh} \neq 0 \\\frac{h}{\max\left(1, a - "
        r"\mathrm{dh}\right)} & \text{otherwise} \end{cases}\right) + a \left(\begin{cases} \mathrm{dh} & "
        r"\text{for}\: \mathrm{dh} \neq 0 \\\frac{h}{\max\left(1, a - \mathrm{dh}\right)} & "
        r"\text{otherwise} \end{cases}\right) + n_{\mathrm{kv}} \left(2 \mathrm{dh} + "
        r"\mathrm{dhr}\right)\right)}{\mathrm{cp}^{2} t}",
    ),
    # Dense TP at a non-selective node (κ = 1): comm_t·(¼·n_gather·s·b·h·mb + ¼·n_gather·s·b·hff·mb)/cp.
    "tp_dense_layer_elements": (
        comm_t * (Rational(1, 4) * n_gather * s * b * h * mb + Rational(1, 4) * n_gather * s * b * hff * mb) / cp,
        r"\frac{b \mathrm{comm\_t} \mathrm{mb} n_{\mathrm{gather}} s \left(h + \mathrm{hff}\right)}{4 \mathrm{cp}}",
    ),
}


@pytest.mark.parametrize("name", sorted(GOLDENS))
def test_latex_golden(name):
    independent, expected = GOLDENS[name]
    formula = registry.get(name)
    # The golden is the formula as the original states it (independently written here): same value as the registered one ...
    _assert_same_value(independent, formula.expr, name, n=40, seed=7)
    # ... and printed as expected once the cheap passes have run.
    assert latex(closed_form(formula.expr)) == expected


def test_latex_names_read_as_fields():
    assert latex(symbol("cp") * symbol("t")) == r"\mathrm{cp} t"  # cp is one name, not c·p
    assert latex(symbol("n_kv")) == r"n_{\mathrm{kv}}"
    assert latex(symbol("bytes_compute")) == r"\mathrm{bytes\_compute}"


# ---------------------------------------------------------------- simplification passes

# The formulas docs/formulas.md shows in closed form (the mechanical derivatives are not listed), less
# the minimums over many collective algorithms or ZeRO pieces (over 16 Min/Max nodes): each pass costs
# seconds on those, and their pieces are here one by one (every collective candidate, every DP part).
FORMULA_NAMES = tuple(n for n in registry.names() if registry.get(n).dimension not in UNLISTED
                      and registry.get(n).expr.count(sympy.Min) + registry.get(n).expr.count(sympy.Max) <= 16)


#: The tests that compute the closed form of every listed formula share one xdist worker (``--dist
#: loadgroup``): the formula reference's renderings then read the in-process cache that ``closed_forms``
#: fills (the docs' workers are forked from it) instead of simplifying every formula again beside it.
CLOSED_FORMS = pytest.mark.xdist_group("closed_forms")


@dataclass(frozen=True)
class ClosedForms:
    """The closed form of each formula in FORMULA_NAMES, and each pass's rewrites on the way."""

    outputs: dict[str, sympy.Expr]
    #: pass name -> every (formula name, input, output) with output != input the pass gave, in the rounds
    #: ``closed_form`` ran: each pass on the expressions it meets in use, the registered ones included.
    rewrites: dict[str, list[tuple[str, sympy.Expr, sympy.Expr]]]


@pytest.fixture(scope="module")
def closed_forms() -> ClosedForms:
    """``closed_form`` of every formula in FORMULA_NAMES, computed once, with each pass's rewrites recorded.

    The passes are wrapped for the computation only; every closed form is computed here (the cache is
    emptied first), so each pass application is seen. A pass is a function of its input: one met again
    (the passes after a round's last improvement see the same expression in the next round) gives the
    output it gave, recorded again, without being computed again.
    """
    rewrites: dict[str, list[tuple[str, sympy.Expr, sympy.Expr]]] = {name: [] for name, _ in PASSES}
    current = [""]
    given: dict[tuple[str, sympy.Expr], sympy.Expr] = {}

    def recorded(pass_name, fn):
        def run(expr):
            out = given.get((pass_name, expr))
            if out is None:
                out = given[pass_name, expr] = fn(expr)  # a pass that raises is skipped by closed_form, as before
            if out != expr:
                rewrites[pass_name].append((current[0], expr, out))
            return out
        return run

    simplify._closed_form.cache_clear()
    outputs = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(simplify, "PASSES", tuple((n, recorded(n, fn)) for n, fn in PASSES))
        for name in FORMULA_NAMES:
            current[0] = name
            outputs[name] = closed_form(registry.get(name).expr)
    return ClosedForms(outputs, rewrites)


@CLOSED_FORMS
@pytest.mark.parametrize("pass_name", [n for n, _ in PASSES])
def test_each_pass_keeps_the_value(pass_name, closed_forms):
    rewrites = closed_forms.rewrites[pass_name]
    for name, before, after in rewrites:  # (a repeated rewrite reads its values from _values' cache)
        _assert_same_value(before, after, f"{pass_name} on {name}", seed=11)
    # cancel and together skip anything with a Piecewise, factor also Min, Max and floor: they need not change
    # a thing; the others must.
    if pass_name in ("absorb_into_piecewise", "cancel_pieces", "factor_terms", "piecewise_fold"):
        assert rewrites


@CLOSED_FORMS
def test_closed_form_keeps_the_value_and_never_grows(closed_forms):
    shrunk = 0
    for name, out in closed_forms.outputs.items():
        expr = registry.get(name).expr
        if out == expr:
            continue
        before, after = size(expr), size(out)  # (each prints the expression: once)
        assert after <= before, f"{name}: {after} > {before}"
        shrunk += after < before
        _assert_same_value(expr, out, name, seed=13)
    assert shrunk > 20  # the passes do make a difference


def test_collect_linear_lays_a_stage_out_by_layer_kind():
    from codegen.pricing.stages import Fields, variant_of
    from codegen.configs import derive_fields, parse_layout
    from codegen.configs.models import load_model
    from symbolic.model import StageVariant, stage_formulas

    cfg = load_model("llama2-7b")
    variant = StageVariant.from_data(variant_of(Fields(derive_fields(cfg, parse_layout("", cfg.layout)))))
    total = stage_formulas(variant).total.expr
    counts = syms(*STAGE_COUNT_NAMES)
    laid_out = closed_form(total, linear_in=counts)
    assert isinstance(laid_out, sympy.Add)
    first_factors = [term.args[0] for term in laid_out.args]
    assert symbol("n_body") in first_factors
    assert symbol("n_embedding") + symbol("n_output") in first_factors  # equal per-layer costs are grouped
    _assert_same_value(total, laid_out, "stage total", seed=17)


def test_collect_linear_refuses_a_nonlinear_expression():
    n_body, n_output = syms("n_body", "n_output")
    assert collect_linear(n_body * n_output * h, (n_body, n_output)) is None
    assert collect_linear(sympy.Max(1, n_body) * h, (n_body,)) is None
    assert collect_linear(Piecewise((h, n_body > 2), (s, True)), (n_body,)) is None


# ---------------------------------------------------------------- symcost derive

#: One valid option set per function of the original.
FAMILY_OPTIONS = {
    "cp_traffic": ["--algo", "ulysses_cp", "--attention", "mla"],
    "cp_comm_layer_detailed": ["--algo", "hybird_cp", "--attention", "gqa", "--linear"],
    "_cp_resolve_topology": [],
    "compute_kv_dim": ["--attention", "mqa"],
    "EvalBody.num_params_layer": ["--attention", "mla", "--q-direct", "--moe"],
    "EvalLayerComm.dp_comm_layer": ["--zero", "3,2", "--moe", "--attention", "gqa"],
    "EvalLayerComm.tp_comm_layer": ["--dense", "--node", "SEL_REC_LAYER"],
    "EvalLayerComm.ep_comm_layer": ["--routing", "imbalanced"],
    "EvalLayerComm.fsdp_traffic": ["--layer", "EMBEDDING_LAYER", "--tied"],
    "EvalLayerComm.fsdp_reduce_traffic": ["--layer", "NOT_REC_LAYER"],
    "EvalLayerComm.fsdp_layer_parts": [],
    "fsdp_root_parts": ["--layer", "OUTPUT_LAYER"],
    "_fsdp_rounds": ["--shard-spans-cp"],
    "_recomputed_comm": ["--layer", "SEL_REC_LAYER", "--moe", "--algo", "colossalai_cp", "--attention", "mla"],
    "estimate_comm_score": ["--levels", "3"],
    "fill_dp_table": [],
    "fill_tp_table": [],
    "fill_ep_table": [],
    "dp_ratio": [],
    "comm_embed_ouput": [],
}


def test_every_function_of_the_reference_cases_can_be_derived():
    functions = {case.function for case in CASES}
    assert functions <= set(FAMILIES) | set(STAGE_NAMES), functions - set(FAMILIES) - set(STAGE_NAMES)
    assert set(FAMILY_OPTIONS) == set(FAMILIES)


@pytest.mark.parametrize("name", sorted(FAMILY_OPTIONS))
@pytest.mark.parametrize("style", [[], ["--latex"], ["--markdown"]], ids=["text", "latex", "markdown"])
def test_derive_every_function(name, style, capsys):
    assert main(["derive", name, *FAMILY_OPTIONS[name], *style]) == 0
    out = capsys.readouterr().out
    assert out.strip()
    if style == ["--markdown"]:
        assert "```math" in out and "| Symbol |" in out or "No symbols" in out


def test_derive_markdown_section(capsys):
    assert main(["derive", "tp_dense_layer_elements", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("## `tp_dense_layer_elements`\n")
    assert "- **Unit:** elements" in out and "- **Source:**" in out
    assert "```math\n" + GOLDENS["tp_dense_layer_elements"][1] + "\n```" in out
    assert "| `n_gather` | $n_{\\mathrm{gather}}$ | TP gathers per layer | ops |" in out


def test_derive_dp_lists_the_parameter_counts(capsys):
    assert main(["derive", "EvalLayerComm.dp_comm_layer", "--zero", "2", "--dense", "--attention", "mha"]) == 0
    out = capsys.readouterr().out
    assert "dp_zero2_none_layer_params  [params]" in out  # a dense layer has no expert level
    assert "params_standard_dense_non_expert_params  [params]" in out


def test_derive_stage_total_of_a_model(capsys):
    start = time.perf_counter()
    assert main(["derive", "--model", "deepseek-v3", "--layout", "d=32,t=4,p=8", "--fsdp", "--ttype", "TIME"]) == 0
    assert time.perf_counter() - start < 30  # seconds (about 2 on an idle core): no blind simplify()
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.endswith("stage_total  [score]") and "_fsdp_" in first and "_time_" in first
    assert "n_body ×" in out and "(n_embedding + n_output) ×" not in out  # FSDP prices the two tables apart
    assert main(["derive", "estimate_comm", "--model", "llama2-7b", "--with-recomp", "--latex"]) == 0
    out = capsys.readouterr().out
    assert "stage_total_recomputed" in out and r"n_{\mathrm{full\_rec}} \cdot" in out


@pytest.mark.parametrize("argv,fragment", [
    (["EvalLayerComm.dp_comm_layer", "--zero", "5", "--moe"], "zero: expected a DP level 0, 2 or 3"),
    (["EvalLayerComm.tp_comm_layer", "--moe", "--layer", "TOP_LAYER"], "layer: unknown layer type 'TOP_LAYER'"),
    (["EvalLayerComm.tp_comm_layer", "--moe"], "EvalLayerComm.tp_comm_layer needs --layer"),
    (["EvalLayerComm.tp_comm_layer", "--layer", "NOT_REC_LAYER"], "needs --moe/--dense"),
    (["estimate_comm_score", "--levels", "7"], "levels: a hierarchy of 1 to 3 levels"),
    (["EvalLayerComm.ep_comm_layer", "--routing", "zigzag"], "routing: unknown EP routing 'zigzag'"),
    (["EvalBody.num_params_layer", "--attention", "gqa", "--q-direct", "--dense"], "q_direct: only MLA"),
    (["cp_traffic", "--algo", "ulysses_cp", "--attention", "gqa", "--levels", "2"], "does not read --levels"),
    (["tp_dense_layer_elements", "--moe"], "takes no variant option; got --moe/--dense"),
    (["stage_total"], "model: stage_total is a stage output and needs --model"),
    (["cp_traffic", "--algo", "ulysses_cp", "--attention", "gqa", "--layout", "d=2"], "model: --layout needs --model"),
    (["--model", "llama2-7b", "--algo", "ulysses_cp"], "model: the stage variant comes from the model"),
    (["--model", "llama2-7b", "--device", "Z80"], "device: unknown hardware system 'Z80'"),
    (["--model", "llama2-7b", "--layout", "t=0"], "layout t"),
    (["--model", "no-such-model"], "unknown model 'no-such-model'"),
    (["cp_topology_code", "--model", "llama2-7b"], "model: --model derives a stage output"),
    (["stage_dp", "--model", "llama2-7b", "--with-recomp"], "with_recomp: --with-recomp picks the recomputed"),
])
def test_derive_bad_options_name_the_field(argv, fragment, capsys):
    assert main(["derive", *argv]) == 2
    assert fragment in capsys.readouterr().err


# ---------------------------------------------------------------- docs/formulas.md


@CLOSED_FORMS
def test_formula_reference_is_up_to_date():
    report = check_formulas_doc(DOCS_PATH)
    assert report is None, (f"docs/formulas.md is stale: run `symcost compile` "
                            f"to rewrite it.\n{report}")


@CLOSED_FORMS
def test_formula_reference_content():
    doc = render_formulas_doc()
    assert doc == render_formulas_doc()  # deterministic
    head = doc.split("\n## Contents", 1)[0]
    assert "Generated by `symcost compile`" in head and "Do not edit" in head
    for name, f in registry.FORMULAS.items():
        if f.dimension in UNLISTED:  # derivatives of listed terms: generated, not listed
            assert f"\n### `{name}`\n" not in doc
            continue
        assert f"\n### `{name}`\n" in doc
        assert f"(#{name})" in doc  # listed in the table of contents
    for title in ("## Context parallelism (CP)", "## Data parallelism (DP)", "## Symbols"):
        assert f"\n{title}\n" in doc
    assert "```math\n" + GOLDENS["cp_ring_gqa_traffic_bytes"][1] + "\n```" in doc


@CLOSED_FORMS
def test_write_and_check_formula_reference(tmp_path):
    path = tmp_path / "docs" / "formulas.md"
    doc = render_formulas_doc()
    assert "missing" in check_formulas_doc(path, doc)
    assert write_formulas_doc(path, doc) is True
    assert write_formulas_doc(path, doc) is False  # unchanged: not rewritten
    assert check_formulas_doc(path, doc) is None
    assert [p.name for p in path.parent.iterdir()] == ["formulas.md"]  # no temporary file left behind
    path.write_text(doc.replace("Formula reference", "Formula notes"), encoding="utf-8")
    report = check_formulas_doc(path, doc)
    assert "stale" in report and "symcost compile" in report and "-# Formula notes" in report
