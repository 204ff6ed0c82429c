"""The fused (numba) target: the scalar printer, the rendered files, and the same numbers as the NumPy target.

Tests that run fused code skip without numba (``pip install -e '.[fast]'``);
each compiles a handful of kernels only, and numba's on-disk cache makes
later runs cheap.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import numpy as np
import pytest
import sympy
from sympy import Eq, Max, Min, Mod, Piecewise, Rational, ceiling, floor, sqrt

import generated
from codegen.runtime import kernels
import jinja2

from codegen.backends import NUMBA, NUMPY, by_name, render_kernel
from codegen.compiler import render_tree, write_tree
from codegen.printer import print_scalar
from symbolic import registry
from symbolic.formula import Formula
from symbolic.symbols import syms
from conftest import ROOT, assert_close
from test_generated import valid_values

NO_NUMBA = "the fused target needs numba: pip install -e '.[fast]'"

#: Same numbers as the NumPy target to this relative tolerance (they differ only in operation order).
RTOL = 1e-12

#: A handful of registered formulas covering Piecewise, Min/Max, floor and the CP topology branches.
SAMPLE = (
    "cp_ulysses_mla_traffic_bytes",
    "cp_record_gqa_kv_dim_elements",
    "cp_ring_gqa_record_exposed_comm_time_ms",
    "dp_zero2_zero2_layer_params",
    "fsdp_tied_embedding_traffic_bytes",
)

s, b, h, cp, dpn = syms("s", "b", "h", "cp", "device_per_node")


def formula(name: str, expr) -> Formula:
    return Formula(name=name, expr=sympy.sympify(expr), dimension="model", algorithm="test", unit="1",
                   doc="A test expression.", source="tests")


@pytest.fixture(scope="module")
def fused():
    pytest.importorskip("numba", reason=NO_NUMBA)
    return importlib.import_module("generated.fused")


# ------------------------------------------------------------------ without numba


@pytest.mark.parametrize("expr, code", [
    (Piecewise((s, cp <= dpn), (b, Eq(cp, 1)), (1, True)),
     "(s[i] if (cp[i] <= device_per_node[i]) else (b[i] if (cp[i] == 1) else 1))"),
    (Piecewise((s, cp <= 1)), "(s[i] if (cp[i] <= 1) else numpy.nan)"),
    (Max(s, b, cp) - Min(s, b), "numpy.maximum(b[i], numpy.maximum(cp[i], s[i])) - numpy.minimum(b[i], s[i])"),
    (floor(s / 49) + ceiling(2 * b / 3), "numpy.ceil(2*b[i]/3) + numpy.floor(s[i]/49)"),
    (floor(s / 4), "numpy.floor(0.25*s[i])"),
    (sympy.And(cp > 1, s >= b / 3), "((cp[i] > 1) and (s[i] >= b[i]/3))"),
    (sympy.Not(s > b), "(s[i] <= b[i])"),
    (s**2 / h**3, "(s[i]*s[i])/(h[i]*h[i]*h[i])"),
    (Rational(1, 3) * s, "0.3333333333333333*s[i]"),
])
def test_scalar_printer_golden(expr, code):
    assert print_scalar(expr, frozenset({"s", "b", "h", "cp", "device_per_node"})) == code


def test_fused_files_sit_beside_the_numpy_ones_and_numpy_output_is_unchanged():
    subset = [registry.get(n) for n in SAMPLE[:2]]
    both = render_tree(subset)
    numpy_only = render_tree(subset, backends=(NUMPY,))
    assert {p: t for p, t in both.items() if not p.startswith("fused/")} == numpy_only
    fused_files = sorted(p for p in both if p.startswith("fused/"))
    assert fused_files == ["fused/__init__.py", "fused/_runtime.py", "fused/cp.py"]
    assert "codegen/templates/numba/module.py.jinja" in both["fused/cp.py"].splitlines()[0]
    assert "@_runtime.kernel" in both["fused/cp.py"] and "import numba" not in both["cp.py"]
    assert by_name("numba") is NUMBA
    with pytest.raises(ValueError, match="unknown backend 'jax'"):
        by_name("jax")


def test_run_time_kernels_are_numba_templates_rendered_by_the_strict_environment():
    # The fused pricer's kernels are the NUMBA backend's: one entry renders them, strictly.
    assert NUMBA.templates.kernels == ("pricer.py.jinja", "pricer_keys.py.jinja") and NUMPY.templates.kernels == ()
    context = dict(key="k", functions=["stage_x"], groups=[("stage_x",)], arguments=("cp",), per_layout=["cp"],
                   args={"stage_x": ("cp",)})
    text = render_kernel(NUMBA, "pricer.py.jinja", **context)
    assert "from generated.fused.stage import _stage_x_at\n" in text and "_stage_x_at(cp[i])" in text
    compile(text, "<kernel>", "exec")
    with pytest.raises(jinja2.UndefinedError, match="per_layout"):
        render_kernel(NUMBA, "pricer.py.jinja", **{k: v for k, v in context.items() if k != "per_layout"})
    with pytest.raises(ValueError, match=r"backend 'numpy' has no kernel template 'pricer.py.jinja'"):
        render_kernel(NUMPY, "pricer.py.jinja", **context)


def test_the_backends_are_data_the_run_time_reads_without_sympy():
    # codegen.backends imports neither SymPy nor the lowering (which imports it): no cycle, and the fused
    # pricer renders its kernels without SymPy.
    code = ("import sys, codegen.backends, codegen.pricing.fused; "
            "print(sorted(m for m in sys.modules if m == 'sympy' or m.startswith(('codegen.lowering', "
            "'codegen.printer', 'codegen.compiler'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_generated_never_imports_numba_and_fused_says_how_to_get_it():
    # A process where numba cannot be imported, whether or not it is installed here.
    code = ("import sys; sys.modules['numba'] = None; import generated; "
            "assert generated.cp_ring_mha_traffic_bytes(b=1, bytes_compute=2, cp=2, h=8, s=4, t=1) == 128.0\n"
            "try:\n    import generated.fused\nexcept ImportError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "pip install -e '.[fast]'" in out.stdout
    with pytest.raises(ValueError, match="unknown backend"):
        kernels.evaluator("cp_ring_mha_traffic_bytes", backend="cuda")  # type: ignore[arg-type]


# ------------------------------------------------------------------ with numba


@pytest.mark.parametrize("name", SAMPLE)
def test_fused_agrees_with_the_numpy_target(fused, name):
    values = valid_values(registry.get(name).arguments, 2000, seed=17)
    with np.errstate(all="ignore"):
        want = getattr(generated, name)(**values)
    assert_close(getattr(fused, name)(**values), want, rtol=RTOL, atol=0.0)


def test_fused_broadcasts_like_the_numpy_target(fused):
    name = "cp_ulysses_mla_traffic_bytes"
    args = registry.get(name).arguments
    scalars = {a: 8.0 for a in args}
    grid = dict(scalars, s=np.array([[4096.0], [8192.0], [16384.0]]), cp=np.array([1.0, 2.0, 4.0, 8.0]),
                dh=np.array([0.0, 64.0, 128.0, 0.0]))
    strided = dict(scalars, s=np.arange(1.0, 41.0)[::2], cp=2)
    for values in (scalars, grid, strided):
        want = getattr(generated, name)(**values)
        got = getattr(fused, name)(**values)
        assert got.shape == want.shape and got.dtype == np.float64
        assert_close(got, want, rtol=RTOL, atol=0.0)
    with pytest.raises(ValueError, match="do not broadcast"):
        getattr(fused, name)(**dict(scalars, s=np.ones(3), cp=np.ones(4)))
    with pytest.raises(TypeError, match="argument h must be a number"):
        getattr(fused, name)(**dict(scalars, h="wide"))


def test_evaluator_selects_the_backend(fused):
    name = "cp_ring_mha_traffic_bytes"
    kernels.evaluator.cache_clear()
    try:
        assert kernels.evaluator(name) is getattr(generated, name)
        assert kernels.evaluator(name, backend="numba") is getattr(fused, name)
        assert kernels.evaluator(name, backend="auto") is getattr(fused, name)
    finally:
        kernels.evaluator.cache_clear()


#: Every rule of the scalar printer, run: what the NumPy target computes, the fused one must too.
SYNTHETIC = [
    formula("model_fused_rules_1", Max(s, b, cp) - Min(s, b) + sqrt(s) - s ** Rational(3, 2) / h + Mod(s, b)),
    formula("model_fused_rules_2", Piecewise((s, (cp <= 1) | (b > 2)), (h, sympy.Not(s > b)), (1, True))),
    formula("model_fused_rules_3", Piecewise((s, cp <= dpn), (b, Eq(cp, 1)))),  # no default: nan
    formula("model_fused_rules_4", floor(s / 3) + ceiling(b / 2) + floor(2 * s / (7 * b)) + 1 / (cp - 1)),
    formula("model_fused_rules_5", Rational(7, 3)),
]


def test_every_scalar_rule_agrees_with_the_numpy_target(fused, tmp_path):
    write_tree(render_tree(SYNTHETIC), tmp_path / "fused_synthetic")
    sys.path.insert(0, str(tmp_path))
    try:
        numpy_pkg = importlib.import_module("fused_synthetic")
        fused_pkg = importlib.import_module("fused_synthetic.fused")
    finally:
        sys.path.remove(str(tmp_path))
    rng = np.random.default_rng(23)
    n = 400
    # Integers, so that floor/ceiling of exact quotients (s = 21: s/3 = 7) and cp = 1 (1/0) occur.
    values = {"s": rng.integers(1, 50, n).astype(float), "b": rng.integers(1, 6, n).astype(float),
              "h": rng.uniform(0.5, 9.0, n), "cp": rng.choice([1.0, 2.0, 4.0], n),
              "device_per_node": rng.choice([1.0, 4.0], n)}
    for f in SYNTHETIC:
        args = {a: values[a] for a in f.arguments}
        with np.errstate(all="ignore"):
            want = getattr(numpy_pkg, f.name)(**args)
        got = getattr(fused_pkg, f.name)(**args)
        assert_close(got, want, rtol=RTOL, atol=0.0, msg=f.name)
    assert np.isinf(getattr(fused_pkg, "model_fused_rules_4")(s=3, b=2, cp=1))  # 1/0 is inf, as in NumPy

