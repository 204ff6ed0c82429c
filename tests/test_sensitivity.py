"""Sensitivity: almost-everywhere derivatives, elasticities, the model-level analysis and its command."""

from __future__ import annotations

import contextlib
import io
import json
import sys

import numpy as np
import pytest
import sympy

from codegen.reference.adapters.model import evaluate_stages
from codegen.cli import main
from codegen.pricing.sensitivity import Settings, sensitivity, stage_derivatives
from conftest import formula_functions
from codegen.configs import build_stages, derive_fields, load_model, parse_layout
from conftest import assert_close
from symbolic import registry
from symbolic.formula import Formula
from symbolic.vocabulary import DEGREES
from symbolic.sensitivity import (FORBIDDEN, derivative, derivative_expr, elasticity, elasticity_expr,
                                  split_derivative)
from symbolic.symbols import SPECS, syms

EXAMPLE = ["--model", "qwen3-72b", "--layout", "d=32,t=4,p=8,m=144"]

CP_TRAFFIC = [n for n in registry.FORMULAS if n.startswith("cp_") and n.endswith("_traffic_bytes")]
LAYER_FORMULAS = [n for n in registry.FORMULAS if n.startswith(("dp_", "tp_", "ep_")) and "legacy" not in n]
FSDP_FORMULAS = ["fsdp_part_traffic_bytes", "fsdp_part_reduce_traffic_bytes", "fsdp_layer_traffic_bytes"]
SAMPLE = CP_TRAFFIC + LAYER_FORMULAS + FSDP_FORMULAS + ["cp_topology_effective_bandwidth_gbps"]


# --------------------------------------------------------------------------- the differentiation rules


def test_rules_for_non_smooth_nodes():
    t, cp, s = syms("t", "cp", "s")
    assert derivative_expr(sympy.floor(t / 8) * s, "t") == 0
    assert derivative_expr(sympy.ceiling(s / t), "t") == 0
    got = derivative_expr(sympy.Max(t ** 2, 3 * t), "t")
    assert isinstance(got, sympy.Piecewise)
    assert float(got.subs(t, 2)) == 3.0 and float(got.subs(t, 5)) == 10.0  # the active branch
    # On a tie the second argument (in SymPy's order) gives the derivative.
    tie = sympy.Max(t, 2 * s)
    second = tie.args[1]
    assert derivative_expr(tie, "t").subs({t: 8, s: 4}) == derivative_expr(second, "t").subs({t: 8, s: 4})
    d_min = derivative_expr(sympy.Min(t, 2 * s), "t")
    assert float(d_min.subs({t: 1, s: 4})) == 1.0 and float(d_min.subs({t: 9, s: 4})) == 0.0
    pw = sympy.Piecewise((t ** 3, cp > 2), (5 * t, True))
    d_pw = derivative_expr(pw, "t")
    assert d_pw == sympy.Piecewise((3 * t ** 2, cp > 2), (5, True))
    assert derivative_expr(sympy.Abs(t - s), "t").subs({t: 1, s: 4}) == -1


def test_sympy_diff_alone_would_leave_distributions():
    # Why the module differentiates non-smooth nodes itself: SymPy answers Max with Heaviside.
    part = registry.get("fsdp_part_traffic_bytes").expr
    assert sympy.diff(part, syms("part_held")[0]).has(sympy.Heaviside)
    assert not derivative_expr(part, "part_held").has(*FORBIDDEN)


@pytest.mark.parametrize("name", list(registry.FORMULAS))
def test_no_unevaluated_or_infinite_nodes_in_any_derivative(name):
    formula = registry.get(name)
    for x in DEGREES:
        d = derivative(formula, x)
        assert not d.expr.has(*FORBIDDEN), f"{d.name}: {d.expr}"
        assert d.name.isidentifier() and d.unit == "derivative"
    if name in SAMPLE:
        for x in DEGREES:
            e = elasticity(formula, x)
            assert not e.expr.has(*FORBIDDEN, sympy.zoo), f"{e.name}: {e.expr}"


def test_unknown_symbol_is_named():
    with pytest.raises(KeyError, match="nope"):
        derivative(registry.get("cp_ring_gqa_traffic_bytes"), "nope")
    with pytest.raises(KeyError, match="nope"):
        elasticity_expr(registry.get("cp_ring_gqa_traffic_bytes").expr, "nope")


# --------------------------------------------------------------------------- against finite differences


def _valid_values(arguments, x: str, n: int, seed: int) -> dict[str, np.ndarray]:
    """Seeded valid values by each symbol's declaration; the differentiated symbol is kept > 0."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in arguments:
        spec = SPECS[name]
        if name == "cp":
            values = rng.choice([1.0, 2.0, 3.0, 4.0, 8.0, 12.0, 16.0], n)
        elif spec.integer:
            values = rng.integers(1 if spec.positive or name == x else 0, 17, n).astype(float)
        else:
            values = rng.uniform(0.25, 16.0, n)
            if not spec.positive and name != x:
                values[rng.random(n) < 0.25] = 0.0
        out[name] = values
    return out


def _symbols_to_check(formula) -> list[str]:
    """The degrees a formula reads, or for an FSDP part (none) the part's sizes, where its Max nodes are."""
    degrees = [a for a in formula.arguments if a in DEGREES or a in ("t_exp", "d_exp")]
    return degrees or [a for a in formula.arguments if a.startswith("part_")]


@pytest.fixture(scope="module")
def sample_functions():
    formulas = [registry.get(n) for n in SAMPLE]
    slopes = [derivative(f, x) for f in formulas for x in _symbols_to_check(f)]
    return formula_functions(formulas + slopes)


# One worker (--dist loadgroup) builds the fixture's evaluators: the derivatives are not registered formulas,
# so they are lowered here, and a cold lowering cache (CI) made each worker lower them.
@pytest.mark.xdist_group("sensitivity_sample")
@pytest.mark.parametrize("name", SAMPLE)
def test_derivative_matches_central_difference(name, sample_functions):
    formula = registry.get(name)
    f = sample_functions[name]
    for k, x in enumerate(_symbols_to_check(formula)):
        slope = sample_functions[derivative(formula, x).name]
        values = _valid_values(formula.arguments, x, 200, seed=k + 7 * len(name))
        h = 1e-6 * values[x]
        at = {**values}
        up, down = {**values, x: values[x] + h}, {**values, x: values[x] - h}
        f0, fu, fd = (np.asarray(f(**v), dtype=float) for v in (at, up, down))
        forward, backward, central = (fu - f0) / h, (f0 - fd) / h, (fu - fd) / (2 * h)
        # Rounding of the differences is ~eps·|f|/h; a kink or jump within a step shows as one-sided
        # slopes that disagree by more than the tolerance: those points are skipped.
        floor = 1e-8 * np.abs(f0) / values[x]
        smooth = np.abs(forward - backward) <= 1e-5 * np.maximum(np.abs(forward), np.abs(backward)) + floor
        assert smooth.mean() >= 0.5, f"{name} in {x}: {smooth.mean():.0%} of the points are near a kink"
        got = np.broadcast_to(np.asarray(slope(**{a: at[a] for a in derivative(formula, x).arguments}),
                                         dtype=float), f0.shape)
        bad = smooth & (np.abs(got - central) > 1e-5 * np.abs(central) + floor)
        assert not bad.any(), f"d {name} / d {x}: {got[bad][:3]} vs central differences {central[bad][:3]}"


# --------------------------------------------------------------------------- elasticities


def _elasticity_at(name: str, x: str, values) -> tuple[np.ndarray, np.ndarray]:
    """The generated elasticity of formula *name* in *x* at *values*, and the formula's own value."""
    formula = registry.get(name)
    e = elasticity(formula, x)
    functions = formula_functions([formula, e])
    got = np.asarray(functions[e.name](**{a: values[a] for a in e.arguments}), dtype=float)
    return got, np.asarray(functions[name](**{a: values[a] for a in formula.arguments}), dtype=float)


@pytest.mark.parametrize("name", [n for n in CP_TRAFFIC if "_ring_" in n])
def test_ring_traffic_elasticity_is_minus_one_in_t_and_one_over_cp_minus_one_in_cp(name):
    # Ring traffic per rank is (cp-1)/cp · (…)/t: x^-1 in t, and cp·d/dcp log((cp-1)/cp) = 1/(cp-1).
    values = _valid_values(registry.get(name).arguments, "t", 64, seed=3)
    got, value = _elasticity_at(name, "t", values)
    traffic = value != 0
    assert traffic.sum() >= 16 and np.all(value[values["cp"] == 1] == 0)
    assert_close(got[traffic], -1.0, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(got[~traffic], 0.0)  # no traffic (cp = 1 or a zero width): elasticity 0
    got, _ = _elasticity_at(name, "cp", values)
    assert_close(got[traffic], 1.0 / (values["cp"][traffic] - 1.0), rtol=1e-12, atol=0)


@pytest.mark.parametrize("name", [n for n in CP_TRAFFIC if "_ulysses_" in n])
def test_ulysses_traffic_elasticity_is_one_in_s(name):
    values = _valid_values(registry.get(name).arguments, "s", 64, seed=5)
    got, value = _elasticity_at(name, "s", values)
    traffic = value != 0
    assert traffic.sum() >= 16
    assert_close(got[traffic], 1.0, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(got[~traffic], 0.0)


def test_elasticity_of_a_monomial_is_its_exponent_symbolically():
    t, s, b = syms("t", "s", "b")
    assert elasticity_expr(7 * s ** 2 * b / t ** 3, "t") == -3
    assert elasticity_expr(7 * s ** 2 * b / t ** 3, "s") == 2
    assert elasticity_expr(7 * s ** 2 * b / t ** 3, "cp") == 0


def test_split_derivative_relaxes_counts_as_one_over_p():
    n_body, n_embedding, p, t = syms("n_body", "n_embedding", "p", "t")
    stage = Formula(name="stage_probe", expr=n_body * 5 / t + n_embedding * 3, dimension="model",
                    algorithm="probe", unit="mixed", doc="a stage of body and embedding layers", source="test")
    got = split_derivative(stage, "p", ["n_body"]).expr
    assert sympy.simplify(got - (-(n_body * 5 / t) / p)) == 0


# --------------------------------------------------------------------------- the model-level analysis


def _model_layout(model_name: str, text: str, settings: Settings):
    model = load_model(model_name)
    return model, parse_layout(text, model.layout, fsdp=True if settings.fsdp else None, recompute=settings.recompute)


def _inputs(model_name: str, text: str, settings: Settings, **overrides):
    model, layout = _model_layout(model_name, text, settings)
    inputs = {**derive_fields(model, layout), "stages": build_stages(model, layout), "device": settings.device,
              "ttype": settings.ttype}
    inputs.update(overrides)
    return inputs


def _totals(inputs, settings):
    return np.asarray(evaluate_stages(inputs)["total_recomputed" if settings.with_recomp else "total"])


# Layouts where no degree sits on a kink of its stage forms (cp = 1 would: CP traffic starts there).
# FSDP reads d and m (shard and round counts); the MoE model reads ep. Fewer degrees compile faster.
MODEL_CASES = [
    ("qwen3-72b", "d=16,t=2,p=8,cp=2,m=64,b=2", Settings(), ("t", "cp", "ep", "d", "m", "b", "s")),
    ("qwen3-72b", "d=16,t=2,p=8,cp=2,m=64", Settings(fsdp=True, with_recomp=True, objective="sum"),
     ("d", "m", "cp")),
    ("deepseek-v3", "d=16,t=2,p=16,cp=2,ep=8,m=32", Settings(), ("ep", "t", "s")),
]


@pytest.mark.parametrize("model_name,text,settings,degrees", MODEL_CASES)
def test_model_derivative_matches_finite_difference_with_held_fields(model_name, text, settings, degrees):
    inputs = _inputs(model_name, text, settings)
    totals, slopes = stage_derivatives(*_model_layout(model_name, text, settings), settings, degrees)
    assert_close(totals, _totals(inputs, settings), rtol=1e-12, atol=0)
    if settings.fsdp:
        assert np.any(slopes["d"] != 0) and np.any(slopes["m"] != 0)  # the FD check below is not vacuous
    for x in degrees:
        # Perturb the degree's own field only: every derived field of the inputs stays as it is.
        h = 1e-6 * inputs[x]
        up = _totals({**inputs, x: inputs[x] + h}, settings)
        down = _totals({**inputs, x: inputs[x] - h}, settings)
        forward, backward = (up - totals) / h, (totals - down) / h
        floor = 1e-8 * np.abs(totals) / inputs[x]
        assert np.all(np.abs(forward - backward) <= 1e-5 * np.abs(forward) + floor), f"{x} sits on a kink"
        central = (up - down) / (2 * h)
        assert np.all(np.abs(slopes[x] - central) <= 1e-5 * np.abs(central) + floor), \
            f"d total / d {x}: {slopes[x]} vs {central}"


def test_pipeline_derivative_is_the_body_share_over_p():
    # Linear in the layer counts, with the body counts ∝ 1/p: dV/dp = -(V - V_without_body)/p.
    settings = Settings()
    inputs = _inputs("qwen3-72b", "d=16,t=2,p=8,cp=2,m=64", settings)
    model, layout = _model_layout("qwen3-72b", "d=16,t=2,p=8,cp=2,m=64", settings)
    totals, slopes = stage_derivatives(model, layout, settings, ["p"])
    roots_only = [[[layer for layer in chunk if layer in ("EMBEDDING_LAYER", "OUTPUT_LAYER")] for chunk in stage]
                  for stage in inputs["stages"]]
    without_body = _totals({**inputs, "stages": roots_only}, settings)
    assert_close(slopes["p"], -(totals - without_body) / inputs["p"], rtol=1e-12, atol=0)
    # The sum over stages holds the same layers for every p: no count effect is left.
    _, summed = stage_derivatives(model, layout, Settings(objective="sum"), ["p"])
    np.testing.assert_array_equal(summed["p"], 0.0)


def _eval_json(capsys, text: str, *extra: str) -> list[float]:
    assert main(["eval", "--model", "qwen3-72b", "--layout", text, "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)["stages"]


@pytest.fixture(scope="module")
def example():
    """The README example, run once: exit code, its JSON and its stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["sensitivity", *EXAMPLE, "--json"])
    return code, json.loads(out.getvalue()), err.getvalue()


def test_doubling_ratios_are_two_eval_runs(example, capsys):
    code, result, _ = example
    assert code == 0
    base = max(_eval_json(capsys, "d=32,t=4,p=8,m=144"))
    assert result["value"] == base
    for x, text in (("t", "d=32,t=8,p=8,m=144"), ("p", "d=32,t=4,p=16,m=144"), ("d", "d=64,t=4,p=8,m=144"),
                    ("s", "d=32,t=4,p=8,m=144,s=8192"), ("cp", "d=32,t=4,p=8,m=144,cp=2")):
        doubled = max(_eval_json(capsys, text))
        assert_close(result["degrees"][x]["doubling_ratio"], doubled / base, rtol=1e-12, atol=0.0, msg=x)


def test_invalid_doubling_is_null_with_the_constraint_as_reason():
    result = sensitivity(load_model("qwen3-72b"), "d=32,t=4,p=8,m=144", degrees=["ep"])
    ep = result.degrees["ep"]
    assert ep.doubling_ratio is None and ep.doubled_layout.endswith("ep=2")
    assert "ep must be 1 for a dense model" in ep.reason  # the validate() message of that constraint


def test_sum_objective_doubling_with_settings(capsys):
    result = sensitivity(load_model("qwen3-72b"), "d=32,t=4,p=8,m=144",
                         Settings(objective="sum", with_recomp=True), degrees=["t", "b"])
    base = sum(_eval_json(capsys, "d=32,t=4,p=8,m=144", "--with-recomp"))
    assert_close(result.value, base, rtol=1e-12, atol=0.0)
    doubled = sum(_eval_json(capsys, "d=32,t=4,p=8,m=144,b=2", "--with-recomp"))
    assert_close(result.degrees["b"].doubling_ratio, doubled / base, rtol=1e-12, atol=0.0)
    assert list(result.degrees) == ["t", "b"]


def test_example_json_shape_and_consistency(example):
    _, out, err = example
    assert set(out) == {"objective", "value", "degrees", "units"}
    assert out["objective"] == "max" and out["value"] > 0
    assert list(out["degrees"]) == list(DEGREES)
    for name, entry in out["degrees"].items():
        assert set(entry) == {"value", "derivative", "elasticity", "doubling_ratio"}
        assert_close(entry["elasticity"], entry["value"] * entry["derivative"] / out["value"], rtol=1e-12, atol=1e-12)
    assert out["degrees"]["t"]["value"] == 4 and out["degrees"]["s"]["value"] == 4096
    assert out["degrees"]["ep"]["doubling_ratio"] is None and "doubling ep" in err
    # Nothing in the stage forms reads m without FSDP: no slope, and doubling it changes nothing.
    assert out["degrees"]["m"]["derivative"] == 0 and out["degrees"]["m"]["doubling_ratio"] == 1


def test_table_is_ranked_by_absolute_elasticity(capsys):
    assert main(["sensitivity", *EXAMPLE, "--degrees", "t,p,b,ep"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "ranked by |elasticity|" in lines[1]
    rows = [line.split() for line in lines[3:7]]
    elasticities = [abs(float(row[3])) for row in rows]
    assert elasticities == sorted(elasticities, reverse=True)
    assert {row[0] for row in rows} == {"t", "p", "b", "ep"}
    assert "x2 invalid" in lines[6]


@pytest.mark.parametrize("argv,field", [
    (["--degrees", "t,foo"], "foo"),
    (["--objective", "mean"], "objective"),
    (["--layout", "d=32,t=3,p=8,m=144"], "t must divide the attention heads"),
    (["--layout", "d=32,t=4,p=8,m=144,zz=1"], "zz"),
    (["--device", "Z9"], "Z9"),
])
def test_bad_input_exits_2_naming_the_field(argv, field, capsys):
    base = {"--model": "qwen3-72b", "--layout": "d=32,t=4,p=8,m=144"}
    for flag, value in zip(argv[::2], argv[1::2]):
        base[flag] = value
    args = [item for pair in base.items() for item in pair]
    assert main(["sensitivity", *args]) == 2
    assert field in capsys.readouterr().err


def test_plot_without_matplotlib_exits_2(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    assert main(["sensitivity", *EXAMPLE, "--plot", str(tmp_path / "s.png")]) == 2
    assert "matplotlib" in capsys.readouterr().err
    assert not (tmp_path / "s.png").exists()


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "s.png"
    assert main(["sensitivity", "--model", "llama2-7b", "--degrees", "t,p", "--plot", str(path)]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
