"""The code generator: printer goldens, lowering, rendering, errors, determinism, writing and --check."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import os
import pickle
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import jinja2
import numpy as np
import pytest
import sympy
from sympy import Abs, Eq, Max, Min, Mod, Piecewise, Rational, ceiling, floor, sqrt

from codegen import cli, compiler
from codegen.compiler import compare_tree, render_tree, write_tree
from codegen.lowering import CodegenError, lower
from codegen.printer import float_literal, print_numpy
from codegen.render import TEMPLATES_DIR, WIDTH, environment, pycall
from symbolic import registry
from symbolic.formula import Formula
from symbolic.symbols import syms
from conftest import ROOT, assert_close

s, b, h, a, cp, dpn, t, dh, mb = syms("s", "b", "h", "a", "cp", "device_per_node", "t", "dh", "mb")


def formula(name: str, expr, **meta) -> Formula:
    fields = dict(dimension="model", algorithm="test", unit="1", doc="A test expression.", source="tests")
    fields.update(meta)
    return Formula(name=name, expr=sympy.sympify(expr), **fields)


# ------------------------------------------------------------------ printer goldens


@pytest.mark.parametrize("expr, code", [
    (Piecewise((dh, sympy.Ne(dh, 0)), (h / a, True)), "numpy.where(numpy.not_equal(dh, 0), dh, h/a)"),
    (Piecewise((1, cp <= dpn), (2, Eq(cp, 1)), (3, True)),
     "numpy.where(numpy.less_equal(cp, device_per_node), 1, numpy.where(numpy.equal(cp, 1), 2, 3))"),
    (Piecewise((s, cp <= dpn)), "numpy.where(numpy.less_equal(cp, device_per_node), s, numpy.nan)"),
    (Max(s, b, cp), "numpy.maximum(b, numpy.maximum(cp, s))"),
    (Min(s, b), "numpy.minimum(b, s)"),
    (floor(s / b), "numpy.floor(s/b)"),
    (ceiling(s / b), "numpy.ceil(s/b)"),
    (floor(s / 49), "numpy.floor(s/49)"),
    (floor(2 * s / (3 * b)), "numpy.floor(2*s/(3*b))"),
    (floor(s / 4), "numpy.floor(0.25*s)"),
    (s**2, "(s*s)"),
    (s**-1, "1/s"),
    (s**-3, "1/(s*s*s)"),
    (h**2 / a**2, "(h*h)/(a*a)"),
    (Rational(1, 3), "0.3333333333333333"),
    (s / 10, "0.1*s"),
    (-2 * s / 3, "-0.6666666666666666*s"),
    (cp <= dpn, "numpy.less_equal(cp, device_per_node)"),
    (sympy.And(cp > 1, s >= b), "numpy.logical_and(numpy.greater_equal(s, b), numpy.greater(cp, 1))"),
])
def test_printer_golden(expr, code):
    assert print_numpy(expr) == code


@pytest.mark.parametrize("p, q", [(1, 3), (2, 3), (1, 10), (1, 125000), (7, 1 << 60), (10**30 + 1, 3), (-5, 7)])
def test_rationals_print_as_the_nearest_float(p, q):
    literal = float_literal(Rational(p, q))
    assert float(literal) == float(Fraction(p, q))  # Fraction -> float is correctly rounded
    assert "/" not in literal


# ------------------------------------------------------------------ lowering


def test_lowered_form_is_plain_frozen_strings():
    low = lower(registry.get("cp_ulysses_mla_traffic_bytes"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        low.name = "other"  # type: ignore[misc]
    assert low.arguments == tuple(sorted(low.arguments)) == registry.get(low.name).arguments
    names = [n for n, _ in low.temporaries]
    # CSE temporaries tmp<i>, and inv<i> for what is hoisted out of the blocks (model fields alone).
    assert len(set(names)) == len(names) and all(re.fullmatch(r"(tmp|inv)\d+", n) for n in names)
    for name, code in low.temporaries:
        assert isinstance(name, str) and isinstance(code, str)
    assert low.quiet  # the dh fallback is a Piecewise
    assert low.steps[-1].name == "out" and low.steps[-1].code == low.result
    assert low.calls == sum(len(st.statements) for st in low.steps)
    assert all(st.startswith("numpy.") for step in low.steps for st in step.statements)


def test_a_choice_among_branches_made_by_model_fields_alone_is_made_once_per_call():
    """Branches that share a per-layout condition and differ in a model-only condition and factor
    become one branch whose model-only choice is hoisted; a hoisted condition the blocks read as a
    mask is computed there again. Same numbers as the registered expression, every branch taken."""
    from codegen.compiler import _render_function
    from generated import _runtime as runtime

    z, n_exp, ep = syms("zero3_non_exp", "n_exp", "ep")
    expr = Piecewise((h * s / t, Eq(z, 1) & sympy.Ne(dh, 0)), (h * a / t, Eq(z, 1)), (0, True)) + Piecewise(
        (Rational(1, 16) * cp, Eq(n_exp, 1)), (cp / Max(1, ep), True))
    low = lower(formula("model_test_invariant_pieces", expr))
    assert low.rewrite.startswith("invariant_pieces")
    hoisted = dict(low.hoisted)
    assert any("numpy.not_equal(dh, 0)" in code for code in hoisted.values())  # dh ≠ 0 decided once per call
    assert not any("dh" in st.code for st in low.steps)
    namespace = {"numpy": np, "_runtime": runtime}
    exec(_render_function(environment(), low), namespace)
    rng = np.random.default_rng(3)
    n = 50
    layouts = {"t": rng.integers(1, 9, n).astype(float), "cp": rng.integers(1, 9, n).astype(float),
               "ep": rng.integers(1, 9, n).astype(float), "zero3_non_exp": rng.integers(0, 2, n).astype(float)}
    symbols = sorted(expr.free_symbols, key=lambda x: x.name)
    reference = sympy.lambdify(symbols, expr, "math")  # one layout at a time, in Python floats
    for model in ({"dh": 0.0, "n_exp": 1.0}, {"dh": 128.0, "n_exp": 1.0}, {"dh": 0.0, "n_exp": 8.0},
                  {"dh": 64.0, "n_exp": 256.0}):
        args = {"s": 4096.0, "h": 7168.0, "a": 128.0, **model, **layouts}
        want = [reference(*(float(np.broadcast_to(args[x.name], (n,))[i]) for x in symbols)) for i in range(n)]
        assert_close(namespace[low.name](**args), want, rtol=1e-13, atol=0.0, msg=str(model))


def test_op_count_is_count_ops_of_the_cse_form():
    low = lower(formula("model_test_ops_1", s * b + s * b * h))
    temps = {n: sympy.sympify(c.replace("numpy.", "")) for n, c in low.temporaries}
    expected = sum(sympy.count_ops(e) for e in temps.values()) + sympy.count_ops(
        sympy.sympify(low.result, locals={n: sympy.Symbol(n) for n in temps}))
    assert low.ops == expected


def test_rewrite_is_kept_only_when_cheaper():
    # 1/t three times: factor_terms pulls it out, one division instead of three (per-layout symbols
    # only, so that nothing is hoisted out of the blocks).
    low = lower(formula("model_test_rewrite_1", cp / t + b / t + mb / t))
    assert low.calls == 3 and low.rewrite != "registered"
    plain = lower(formula("model_test_rewrite_2", s * b))
    assert plain.rewrite == "registered" and plain.calls == 1


# ------------------------------------------------------------------ every emitter rule, run

SYNTHETIC = [
    formula("model_test_powers_1", s**5 / b**3 - 2 * cp),
    formula("model_test_roots_1", sqrt(s) + Rational(1, 3) * b - s ** Rational(3, 2) / h),
    formula("model_test_negate_1", -s),
    formula("model_test_minus_only_1", -s - 2 * b),
    formula("model_test_reciprocal_1", 1 / (s * b)),
    formula("model_test_extrema_1", Max(s, b, cp) - Min(s, b)),
    formula("model_test_no_default_1", Piecewise((s, cp <= dpn), (b, Eq(cp, 1)))),
    formula("model_test_logic_1", Piecewise((s, (cp <= 1) | (b > 2)), (h, sympy.Not(s > b)), (1, True))),
    formula("model_test_nested_1", Piecewise((0, cp <= 1), (s / (cp - 1) * Piecewise((b, cp <= dpn), (h, True)), True))),
    formula("model_test_rounding_1", floor(s / 3) + ceiling(b / 2) + Abs(s - 5 * b)),
    formula("model_test_fallback_1", Mod(s, b) + 1),  # no in-place rule: the printer's code, copied
    formula("model_test_constant_1", Rational(7, 3)),
    formula("model_test_constant_args_1", Piecewise((Rational(1, 2), cp <= 1), (Rational(1, 2), True),
                                                    evaluate=False)),
    formula("model_test_cse_1", (s + b) ** 2 * (s + b + h) + (s + b) * h / (s + b + h)),
]


def _load(files: dict[str, str], root: Path, package: str):
    write_tree(files, root / package)
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module(package)
    finally:
        sys.path.remove(str(root))


def test_synthetic_formulas_agree_with_lambdify(tmp_path):
    module = _load(render_tree(SYNTHETIC), tmp_path, "synthetic_generated")
    rng = np.random.default_rng(5)
    n = 300
    values = {"s": rng.integers(1, 40, n).astype(float), "b": rng.integers(1, 6, n).astype(float),
              "h": rng.uniform(0.5, 9.0, n), "cp": rng.choice([1.0, 2.0, 4.0, 8.0], n),
              "device_per_node": rng.choice([1.0, 4.0], n)}
    for f in SYNTHETIC:
        symbols = sorted(f.expr.free_symbols, key=lambda x: x.name)
        args = {x.name: values[x.name] for x in symbols}
        with np.errstate(all="ignore"):
            want = np.broadcast_to(sympy.lambdify(symbols, f.expr, "numpy")(*args.values()), (n,) if args else ())
            got = getattr(module, f.name)(**args)
        assert got.shape == want.shape, f.name
        assert_close(got, want, rtol=1e-12, atol=1e-12, msg=f.name)


def test_floor_of_an_exact_quotient_is_exact(tmp_path):
    # 49 * fl(1/49) < 1: a floor of s*(1/49) is one too small where s/49 is a whole number.
    f = formula("model_test_floor_exact_1", floor(s / 49) + ceiling(2 * b / 49) + floor(Rational(2, 3) * s / b))
    module = _load(render_tree([f]), tmp_path, "floor_generated")
    k = np.arange(1, 3000, dtype=float)
    got = module.model_test_floor_exact_1(s=49 * k, b=49 * k)
    np.testing.assert_array_equal(got, k + 2 * k + np.floor(2 * 49 * k / (3 * 49 * k)))
    assert (np.floor(49 * k * (1 / 49)) != k).any()  # the trap is real


def test_constant_formula_broadcasts_to_its_arguments(tmp_path):
    module = _load(render_tree(SYNTHETIC[-2:]), tmp_path, "constant_generated")
    out = module.model_test_constant_args_1(cp=np.ones((2, 3)))
    assert out.shape == (2, 3) and (out == 0.5).all()


# ------------------------------------------------------------------ errors name the formula


def test_unprintable_formula_is_named():
    bad = formula("model_test_unprintable_1", sympy.zeta(s) + b)
    with pytest.raises(CodegenError, match="formula model_test_unprintable_1: cannot print"):
        render_tree([bad])


def _env_with(**overrides: str) -> jinja2.Environment:
    sources = {p.name: p.read_text() for p in TEMPLATES_DIR.glob("*.jinja")}
    sources.update(overrides)
    return environment(jinja2.DictLoader(sources))


def test_template_error_names_the_formula():
    env = _env_with(**{"function.py.jinja": "def {{ f.name }}():\n    return {{ f.no_such_field }}\n"})
    with pytest.raises(CodegenError, match=r"formula cp_ring_mha_traffic_bytes: template function\.py\.jinja: "
                                           r"UndefinedError"):
        render_tree([registry.get("cp_ring_mha_traffic_bytes")], env=env)


def test_template_making_bad_python_names_the_formula():
    env = _env_with(**{"function.py.jinja": "def {{ f.name }}(:\n"})
    with pytest.raises(CodegenError, match="formula cp_ring_mha_traffic_bytes: generated code does not compile"):
        render_tree([registry.get("cp_ring_mha_traffic_bytes")], env=env)


def test_compile_command_reports_the_formula(monkeypatch, tmp_path, capsys):
    bad = formula("model_test_unprintable_2", sympy.zeta(s))
    monkeypatch.setattr(registry, "FORMULAS", {bad.name: bad})
    assert cli.main(["compile", "--out", str(tmp_path / "out")]) == 2
    assert "formula model_test_unprintable_2" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ determinism


def test_rendering_twice_gives_the_same_bytes():
    subset = [f for f in registry.FORMULAS.values() if f.dimension in ("cp", "attention")]
    first = render_tree(subset)
    lower.cache_clear()
    assert render_tree(subset) == first


#: Formulas the hash-seed test renders in a fresh process: per dimension its smallest formula and the
#: one of at most median size with the most Piecewise/Min/Max nodes (chosen once by that rule; the
#: whole registry takes minutes to lower from an empty cache). Every dimension must be here.
HASH_SEED_SAMPLE = (
    "attention_mqa_kv_width_elements", "collective_broadcast_nccl_busbw_factor_ratio",
    "collective_all_to_all_p2p_ll_time_s", "compute_output_forward_flop", "compute_mla_q_direct_dense_layer_forward_flop",
    "cp_ulysses_record_ring_steps_count", "cp_record_topology_code", "dp_none_none_layer_params",
    "dp_expert_reduce_scatter_stage_calls_count", "ep_all_to_all_calls_count", "ep_all_to_all_stage_calls_count",
    "fsdp_resharded_layer_gathers_count", "fsdp_embedding_part_computed_count", "memory_embedding_activations_bytes",
    "memory_mla_q_direct_moe_layer_weights_bytes", "memory_mla_q_direct_moe_stage_total_bytes__d_ep",
    "memory_standard_moe_stage_total_bytes__d_ep", "model_legacy_output_elements", "params_dense_routed_experts_params",
    "params_mla_q_direct_moe_non_expert_params", "placement_group_ranks_per_node_count", "pp_send_recv_calls_count",
    "pp_send_recv_stage_calls_count", "recompute_ep_selective_bytes", "recompute_cp_linear_state_full_bytes",
    "score_levels1_comm_score", "stage_ep_imbalanced_full_again", "stage_cp_hybrid_cp_gqa_softmax_layer",
    "stage_cp_colossalai_cp_mqa_softmax_layer__d_b", "stage_cp_hybrid_cp_gqa_softmax_layer__d_s",
    "tp_all_reduce_calls_count", "tp_reduce_scatter_stage_calls_count",
)


def test_hash_seed_sample_covers_every_dimension_and_branchy_forms():
    sample = [registry.get(name) for name in HASH_SEED_SAMPLE]  # a renamed formula fails here
    assert {f.dimension for f in sample} == {f.dimension for f in registry.FORMULAS.values()}
    assert sum(f.expr.has(sympy.Piecewise) for f in sample) >= 10
    assert sum(f.expr.has(sympy.Min) or f.expr.has(sympy.Max) for f in sample) >= 5


def test_rendering_does_not_depend_on_the_hash_seed(tmp_path):
    # The other process gets the sample's formulas pickled (building the whole registry there takes
    # most of a minute): their expressions are rebuilt under its hash seed, and it lowers and renders
    # them itself from an empty cache (a cached form would hide a dependence on the seed).
    sample = [registry.get(name) for name in HASH_SEED_SAMPLE]
    (tmp_path / "sample.pickle").write_bytes(pickle.dumps(sample))
    code = ("import hashlib, pickle, sys; from codegen.compiler import render_tree; "
            "files = render_tree(pickle.loads(open(sys.argv[1], 'rb').read())); "
            "print(hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest())")
    here = hashlib.sha256(repr(sorted(render_tree(sample).items())).encode()).hexdigest()
    env = dict(os.environ, PYTHONHASHSEED="12345", SYMCOST_CACHE=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "sample.pickle")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == here


def test_header_has_command_templates_fingerprint_and_nothing_else():
    files = render_tree([registry.get("cp_ring_mha_traffic_bytes")])
    head = files["cp.py"].split("\n\n")[0].splitlines()
    assert head[0] == ("# Generated by `symcost compile` from codegen/templates/module.py.jinja, "
                       "codegen/templates/function.py.jinja.")
    assert re.fullmatch(r"# Fingerprint \(sha256 of the sorted formulas' srepr\): [0-9a-f]{64}", head[1])
    assert head[2] == "# Do not edit: change the formulas under symbolic/ and run `symcost compile`."
    assert len(head) == 3  # no time stamp, no version


# ------------------------------------------------------------------ writing and --check


@pytest.fixture
def small_registry(monkeypatch):
    chosen = {n: registry.get(n) for n in ("cp_ring_mha_traffic_bytes", "attention_mha_kv_width_elements")}
    monkeypatch.setattr(registry, "FORMULAS", chosen)
    return chosen


def test_write_is_complete_removes_stale_files_and_skips_when_unchanged(small_registry, tmp_path):
    out = tmp_path / "gen"
    files = render_tree()
    write_tree({**files, "old_dimension.py": "# Generated by `symcost compile` ...\n"}, out)  # an earlier run
    diff = write_tree(files, out)
    assert diff.stale == ("old_dimension.py",)
    assert compiler.read_tree(out) == files
    stamp = (out / "cp.py").stat().st_mtime_ns
    assert write_tree(files, out).ok and (out / "cp.py").stat().st_mtime_ns == stamp
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gen"]  # no staging or backup left behind


def test_failed_swap_leaves_the_old_tree(small_registry, tmp_path, monkeypatch):
    out = tmp_path / "gen"
    write_tree({"cp.py": "old\n"}, out)
    real_rename = os.rename

    def failing_rename(src, dst):
        if Path(src).name.startswith(".gen.new-"):  # the swap of the new tree into place
            raise OSError("disk full")
        return real_rename(src, dst)

    monkeypatch.setattr(compiler.os, "rename", failing_rename)
    with pytest.raises(OSError, match="disk full"):
        write_tree(render_tree(), out)
    assert compiler.read_tree(out) == {"cp.py": "old\n"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gen"]


def test_check_fails_with_a_diff_and_the_command_then_passes(small_registry, tmp_path, capsys):
    out = tmp_path / "gen"
    assert cli.main(["compile", "--out", str(out), "--check"]) == 1
    assert "missing:" in capsys.readouterr().out
    assert cli.main(["compile", "--out", str(out)]) == 0
    assert cli.main(["compile", "--out", str(out), "--check"]) == 0
    capsys.readouterr()
    text = (out / "cp.py").read_text()
    (out / "cp.py").write_text(text.replace("numpy.multiply", "numpy.add", 1))
    (out / "stale.py").write_text("")
    assert cli.main(["compile", "--out", str(out), "--check"]) == 1
    report = capsys.readouterr().out
    lines = report.splitlines()
    assert any(line.startswith("--- ") for line in lines) and any(line.startswith("+++ ") for line in lines)
    assert any(line.startswith("-") and "numpy.add" in line for line in lines)
    assert any(line.startswith("+") and "numpy.multiply" in line for line in lines)
    assert "stale" in report and "stale.py" in report
    assert report.rstrip().endswith("run `symcost compile` to regenerate it.")
    assert compare_tree(render_tree(), out).changed.keys() == {"cp.py"}


# ------------------------------------------------------------------ random expressions, run


def _expressions():
    from hypothesis import strategies as st

    leaves = st.sampled_from([s, b, h, cp, sympy.Integer(2), sympy.Integer(-3), Rational(1, 3), Rational(5, 2)])

    def grow(children):
        pair = st.tuples(children, children)
        conds = st.tuples(children, children).map(lambda p: p[0] <= p[1]) | \
            st.tuples(children, children).map(lambda p: sympy.Ne(p[0], p[1]))
        return st.one_of(
            pair.map(lambda p: p[0] + p[1]),
            pair.map(lambda p: p[0] - p[1]),
            pair.map(lambda p: p[0] * p[1]),
            pair.map(lambda p: p[0] / (p[1] ** 2 + 1)),
            st.tuples(children, st.integers(-3, 4)).map(lambda p: (p[0] ** 2 + 1) ** p[1]),
            pair.map(lambda p: Max(p[0], p[1])),
            pair.map(lambda p: Min(p[0], p[1], cp)),
            st.tuples(children, conds, children).map(lambda p: Piecewise((p[0], p[1]), (p[2], True))),
        )

    tree = st.recursive(leaves, grow, max_leaves=12)
    cond = st.tuples(tree, tree).map(lambda p: p[0] <= p[1])
    pieces = st.tuples(tree, cond, tree, cond, tree).map(
        lambda p: Piecewise((p[0], p[1]), (p[2], p[3]), (p[4], True)) * (p[0] + 1))
    return st.one_of(tree, pieces, tree.map(lambda e: floor(e / 7)))


def test_random_expressions_agree_with_lambdify():
    from hypothesis import HealthCheck, Phase, given, settings

    import generated._runtime as runtime
    from codegen.compiler import _render_function

    env = environment()
    rng = np.random.default_rng(11)
    # Non-integer values: a floor or a comparison then never sits exactly on a boundary, where the
    # reference's own rounding (x*(1/7) for x/7) could decide it differently.
    values = {name: rng.uniform(0.5, 6.0, 64) for name in ("s", "b", "h", "cp")}

    checked = []

    @settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck),
              phases=[Phase.generate])
    @given(_expressions())
    def check(expr):
        if not isinstance(expr, sympy.Expr) or expr.has(sympy.zoo, sympy.nan, sympy.oo):
            return
        checked.append(expr)
        f = formula("model_test_random_1", expr)
        namespace = {"numpy": np, "_runtime": runtime}
        exec(_render_function(env, lower(f)), namespace)
        args = {name: values[name] for name in f.arguments}
        symbols = sorted(expr.free_symbols, key=lambda x: x.name)
        with np.errstate(all="ignore"):
            want = np.broadcast_to(sympy.lambdify(symbols, expr, "numpy")(*args.values()), (64,) if args else ())
            got = namespace[f.name](**args)
        assert_close(got, want, rtol=1e-9, atol=1e-9, msg=sympy.sstr(expr))

    check()
    assert len(checked) >= 20 and sum(e.has(Piecewise) for e in checked) >= 5


def test_pycall_keeps_a_call_on_one_line_when_it_fits_and_fills_the_lines_otherwise():
    assert pycall(["1", "b=2"], "x = f", "    ") == "    x = f(1, b=2)"
    arguments = [f"argument_{i}={i}" for i in range(12)]
    text = pycall(arguments, "x = f", "    ")
    lines = text.splitlines()
    assert lines[0] == "    x = f(" and lines[-1] == "    )" and len(lines) > 3
    assert all(len(line) <= WIDTH and line.startswith("        ") for line in lines[1:-1])
    assert " ".join(" ".join(lines[1:-1]).split()) == " ".join(f"{a}," for a in arguments)
    compile(f"def f(**k): pass\ndef g():\n{text}\n", "<pycall>", "exec")
