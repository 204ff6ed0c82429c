"""The committed ``generated/`` tree: up to date, right, importable without SymPy, broadcasting."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
import sympy

import generated
from codegen.runtime import kernels
from codegen.backends import NUMPY
from codegen.compiler import (DEFAULT_DIRECTORY, SPLIT_DIMENSIONS, compare_tree, lower_formulas, module_of,
                               reference_anchor, render_tree)
from codegen.docs import DOCS_PATH
from symbolic.fingerprints import formula_fingerprint
from symbolic import registry
from symbolic.symbols import SPECS
from conftest import ROOT, assert_close

NAMES = list(registry.FORMULAS)

# Values a valid layout may take, per declared kind. cp and device_per_node are chosen so that
# cp = 1, 1 < cp <= device_per_node and cp > device_per_node (r = 1 and r > 1) all occur.
_SPECIAL = {
    "cp": (1, 1, 2, 3, 4, 8, 12, 16),
    "device_per_node": (1, 2, 4, 8),
}


def valid_values(arguments, n: int, seed: int) -> dict[str, np.ndarray]:
    """*n* seeded valid values per argument, from each symbol's declaration in ``symbolic/symbols.py``.

    Positive integers (degrees, counts) are 1..16, non-negative integers 0..16 (0 is "unset"),
    positive reals in [0.25, 16), non-negative reals the same with a share of exact zeros.
    """
    rng = np.random.default_rng(seed)
    out = {}
    for name in arguments:
        spec = SPECS[name]
        if name in _SPECIAL:
            values = rng.choice(np.asarray(_SPECIAL[name], dtype=float), n)
        elif spec.integer:
            values = rng.integers(1 if spec.positive else 0, 17, n).astype(float)
        else:
            values = rng.uniform(0.25, 16.0, n)
            if not spec.positive:
                values[rng.random(n) < 0.25] = 0.0
        out[name] = values
    return out


def reference(name: str, values) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lambdify's select computes dead branches
        return np.asarray(kernels.lambdified(name)(**values), dtype=float)


def assert_agrees(got, want, name: str) -> None:
    # Relative 1e-12, with a floor of 1e-12 of the largest magnitude for values that cancel to ~0.
    want = np.asarray(want, dtype=float)
    finite = np.abs(want[np.isfinite(want)])  # (an inf in the scale would make the floor inf: no check at all)
    scale = finite.max() if finite.size else 1.0
    assert_close(np.asarray(got, dtype=float), want, rtol=1e-12, atol=1e-12 * max(scale, 1.0),
                 msg=f"{name}: generated code differs from lambdify")


# The tests that lower every formula share one xdist worker (``--dist loadgroup``), the in-sync test first
# (conftest's _FIRST): with a cold lowering cache (CI) the others then read what it lowered instead of lowering
# everything again beside it on the other worker (about two minutes of this machine each).
_LOWERING = pytest.mark.xdist_group("lowering")


@_LOWERING
def test_committed_tree_matches_the_registry():
    diff = compare_tree(render_tree(), DEFAULT_DIRECTORY)
    assert diff.ok, "\n" + diff.report("generated")


@_LOWERING
def test_every_registered_formula_is_exported_with_metadata():
    assert set(generated.FORMULAS) == set(NAMES), "generated/ is stale: run `symcost compile`"
    lowered = lower_formulas(list(registry.FORMULAS.values()), [NUMPY])["numpy"]  # as render_tree lowers them
    for name, formula in registry.FORMULAS.items():
        meta = generated.FORMULAS[name]
        assert meta["dimension"] == formula.dimension
        assert meta["algorithm"] == formula.algorithm
        assert meta["unit"] == formula.unit
        assert meta["arguments"] == formula.arguments
        assert meta["ops"] == lowered[name].ops
        assert meta["fingerprint"] == formula_fingerprint(formula)
        assert meta["source"] == " ".join(formula.source.split())
        assert meta["module"] == module_of(formula)
        fn = getattr(generated, name)
        assert fn.__module__ == f"generated.{module_of(formula)}"


@pytest.mark.parametrize("name", NAMES)
def test_generated_agrees_with_lambdify(name):
    values = valid_values(registry.get(name).arguments, 400, seed=len(name))
    got = getattr(generated, name)(**values)
    assert got.shape == ((400,) if values else ()) and got.dtype == np.float64
    assert_agrees(got, reference(name, values), name)


def test_both_cp_topology_branches_occur():
    values = valid_values(("cp", "device_per_node"), 400, seed=len("cp_topology_effective_bandwidth_gbps"))
    cp, dpn = values["cp"], values["device_per_node"]
    assert (cp == 1).any() and ((cp > 1) & (cp <= dpn)).any()
    assert ((cp > dpn) & (dpn == 1)).any() and ((cp > dpn) & (dpn > 1)).any()


@pytest.mark.parametrize("name", ["cp_ulysses_mla_traffic_bytes", "cp_ring_gqa_record_total_comm_time_ms",
                                  "cp_record_effective_bandwidth_gbps", "cp_ulysses_mla_record_comm_volume_bytes",
                                  "cp_topology_code", "attention_head_width_elements"])
@pytest.mark.parametrize("order", ["random", "sorted"])
def test_blocks_give_the_same_numbers(name, order, monkeypatch):
    # Small blocks, so that 203 layouts run as several full blocks and a partial last one; sorted by
    # cp, whole blocks have cp = 1 (or cp <= device_per_node) and skip the Piecewise's default branch.
    values = valid_values(registry.get(name).arguments, 203, seed=7)
    if order == "sorted" and "cp" in values:
        values = {k: v[np.argsort(values["cp"], kind="stable")] for k, v in values.items()}
    whole = getattr(generated, name)(**values)
    monkeypatch.setattr(generated._runtime, "BLOCK", 16)
    blocked = getattr(generated, name)(**values)
    np.testing.assert_array_equal(blocked, whole)
    assert_agrees(blocked, reference(name, values), name)


def test_scalars_arrays_and_broadcasting():
    fn = generated.cp_ulysses_mla_traffic_bytes
    scalars = dict(a=128, b=1, bytes_compute=2, cp=4, dh=128, dhr=64, h=7168, n_kv=128, s=4096, t=8)
    one = fn(**scalars)
    assert isinstance(one, np.ndarray) and one.shape == ()
    assert_agrees(one, reference("cp_ulysses_mla_traffic_bytes", scalars), "scalars")
    grid = dict(scalars, s=np.array([[4096.0], [8192.0]]), cp=np.array([1.0, 2.0, 4.0]))
    out = fn(**grid)
    assert out.shape == (2, 3)
    assert_agrees(out, reference("cp_ulysses_mla_traffic_bytes", grid), "grid")
    assert out[:, 0].tolist() == [0.0, 0.0]  # cp = 1 moves nothing


def test_constant_formula_returns_the_broadcast_shape():
    assert generated.cp_record_overlap_ratio().shape == ()
    assert float(generated.cp_record_overlap_ratio()) == 0.5
    steps = generated.cp_ulysses_record_ring_steps_count()
    assert steps.shape == () and float(steps) == 0.0
    directions = generated.cp_record_ring_directions_count(cp=np.array([1.0, 2.0, 8.0]))
    assert directions.tolist() == [0.0, 2.0, 2.0]


def test_bad_arguments_name_the_field():
    fn = generated.cp_ring_mha_traffic_bytes
    good = dict(b=1, bytes_compute=2, cp=2, h=4096, s=4096, t=1)
    with pytest.raises(TypeError, match="positional"):
        fn(1, 2, 2, 4096, 4096, 1)
    with pytest.raises(TypeError, match="argument h must be a number"):
        fn(**dict(good, h="wide"))
    with pytest.raises(ValueError, match=r"do not broadcast.*s \(3,\)"):
        fn(**dict(good, s=np.ones(3), b=np.ones(4)))


@_LOWERING
def test_signatures_docstrings_and_op_lines():
    text = "".join((DEFAULT_DIRECTORY / f"{m}.py").read_text() for m in {module_of(f) for f in registry.FORMULAS.values()})
    lowered = lower_formulas(list(registry.FORMULAS.values()), [NUMPY])["numpy"]
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', DOCS_PATH.read_text(encoding="utf-8")))
    for name, formula in registry.FORMULAS.items():
        fn = getattr(generated, name)
        params = inspect.signature(fn).parameters
        assert tuple(params) == formula.arguments
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())
        # What it counts, its unit and source; the closed form and the symbols are docs/formulas.md's, where
        # the docstring points (the anchor is there), not repeated.
        doc = " ".join(fn.__doc__.split())
        assert doc.startswith(" ".join(formula.doc.split())), name
        assert f"Unit: {formula.unit}." in doc and f"Source: {' '.join(formula.source.split())}" in doc, name
        anchor = reference_anchor(formula)
        assert f"``docs/formulas.md#{anchor}``" in doc and anchor in anchors, name
        assert sympy.sstr(formula.expr) not in doc or len(sympy.sstr(formula.expr)) < 12, name
        assert f"# ops: {lowered[name].ops} " in text


def test_header_says_command_template_fingerprint_and_do_not_edit():
    for path in sorted(DEFAULT_DIRECTORY.glob("*.py")):
        text = path.read_text()
        head = text[:text.index("\n\n")].splitlines()
        assert head[0].startswith("# Generated by `symcost compile` from codegen/templates/"), path.name
        assert head[-1].startswith("# Do not edit"), path.name
        assert all(line.startswith("# ") for line in head), path.name
    init_head = (DEFAULT_DIRECTORY / "__init__.py").read_text().splitlines()[1]
    from symbolic.fingerprints import fingerprint
    assert init_head.endswith(fingerprint(registry.FORMULAS.values()))


def test_metadata_table_is_json_read_on_first_use():
    # The table is a JSON file (a Python literal of its size is compiled from source on every start
    # without a bytecode cache); it holds the registry's fingerprint and reads back with tuples.
    import json

    from codegen.compiler import TABLE
    from symbolic.fingerprints import fingerprint

    text = (DEFAULT_DIRECTORY / TABLE).read_text(encoding="utf-8")
    data = json.loads(text)
    assert data["fingerprint"] == fingerprint(registry.FORMULAS.values())
    assert list(data["formulas"]) == NAMES and list(generated.FORMULAS) == NAMES
    assert len((DEFAULT_DIRECTORY / "__init__.py").read_text()) < 10_000  # no table in the module itself
    for name, formula in registry.FORMULAS.items():
        meta = generated.FORMULAS[name]
        assert type(meta["arguments"]) is tuple
        assert meta.get("variant", ()) == formula.variant and type(meta.get("variant", ())) is tuple
    assert generated.__all__ == ["FORMULAS", "MODULES", *NAMES]
    code = ("import sys, generated; assert 'FORMULAS' not in vars(generated); "
            "from generated import FORMULAS; assert type(FORMULAS['cp_ring_mla_traffic_bytes']['arguments']) is tuple; "
            "assert generated.cp_ring_mla_traffic_bytes.__module__ == 'generated.cp'")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_stage_terms_are_one_module_per_variant():
    # A cold pricer compiles the modules of its model's variants only.
    for name, formula in registry.FORMULAS.items():
        if formula.dimension in SPLIT_DIMENSIONS:
            assert module_of(formula) == f"{formula.dimension}__{formula.algorithm}"
            assert (DEFAULT_DIRECTORY / f"{module_of(formula)}.py").is_file()
    assert not (DEFAULT_DIRECTORY / "stage.py").exists()
    # a model's memory forms likewise: the BF16 and the low-precision ones of its variant, not the others'
    assert {"memory__standard_dense", "memory__standard_dense_lowp"} <= {
        module_of(f) for f in registry.FORMULAS.values() if f.dimension == "memory"}
    code = ("import sys, generated; generated.stage_tp_dense_layer; "
            "assert not [m for m in sys.modules if m.startswith('generated.stage') and m != 'generated.stage__dense'], "
            "sorted(sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_import_needs_no_sympy():
    # How fast a cold start is, bench/startup.py measures beside `import numpy` (a timing here would
    # only measure how busy the machine is).
    code = "import sys; import generated; assert 'sympy' not in sys.modules, 'sympy imported'"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_evaluator_is_the_generated_function():
    kernels.evaluator.cache_clear()
    try:
        assert kernels.evaluator("cp_ring_mla_traffic_bytes") is generated.cp_ring_mla_traffic_bytes
    finally:
        kernels.evaluator.cache_clear()


def test_stale_generated_function_falls_back_to_lambdify_with_a_warning(monkeypatch):
    name = "cp_ring_mla_traffic_bytes"
    monkeypatch.setitem(generated.FORMULAS[name], "fingerprint", "0" * 16)
    kernels.evaluator.cache_clear()
    try:
        with pytest.warns(UserWarning, match="symcost compile"):
            fn = kernels.evaluator(name)
        assert fn is not generated.cp_ring_mla_traffic_bytes
        values = valid_values(registry.get(name).arguments, 20, seed=3)
        assert_agrees(fn(**values), generated.cp_ring_mla_traffic_bytes(**values), name)
    finally:
        kernels.evaluator.cache_clear()
