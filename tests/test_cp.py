"""Context-parallel formulas: properties, exactness of the evaluators, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen.reference.adapters import cp as cp_adapters
from codegen.runtime.inputs import InputError
from codegen.runtime.kernels import evaluate, evaluator
from conftest import assert_close
from symbolic import cp, registry
from symbolic.attention import Attention, detect_attention, parse_attention
from symbolic.formula import Formula
from symbolic.symbols import symbol
from symbolic.vocabulary import CpAlgorithm, resolve_algorithm

ALL_VARIANTS = [(algo, att, lin) for algo in CpAlgorithm for att in Attention for lin in (False, True)]

BASE = dict(s=8192, b=2, h=4096, a=32, n_kv=8, dh=128, dhr=64, t=2, cp=4, bytes_compute=2,
            device_per_node=8, bw_intra=300.0, bw_inter=25.0)


def _eval(formula: Formula, **over) -> float:
    values = {**BASE, **over}
    return float(evaluate(formula.name, **{k: values[k] for k in formula.arguments}))


@pytest.mark.parametrize("algo,att,linear", ALL_VARIANTS)
def test_cp_one_moves_nothing_in_the_record(algo, att, linear):
    rec = cp.record_formulas(algo, att, linear=linear)
    for field in ("kv_volume_per_step", "total_kv_volume", "comm_volume", "total_comm_time", "kv_dim"):
        assert _eval(rec[field], cp=1) == 0.0, field


@pytest.mark.parametrize("att", list(Attention))
@pytest.mark.parametrize("algo", list(CpAlgorithm))
def test_cp_one_no_traffic_for_softmax_attention(algo, att):
    assert _eval(cp.traffic_formula(algo, att), cp=1) == 0.0


@pytest.mark.parametrize("att", list(Attention))
def test_ulysses_volume_scales_as_cp_minus_one_over_cp_squared(att):
    f = cp.traffic_formula(CpAlgorithm.ULYSSES, att)
    v2 = _eval(f, cp=2)
    for degree in (4, 8, 16, 64):
        expected = v2 * ((degree - 1) / degree**2) / (1 / 4)
        assert_close(_eval(f, cp=degree), expected, rtol=1e-12)


@pytest.mark.parametrize("att", list(Attention))
def test_ring_volume_same_for_colossalai_and_hybrid(att):
    a = cp.traffic(CpAlgorithm.COLOSSALAI, att)
    b = cp.traffic(CpAlgorithm.HYBRID, att)
    assert sympy.simplify(a - b) == 0
    inputs = {**BASE, "dc_kv": 512 if att is Attention.MLA else 0}
    outs = {name: cp_adapters.ADAPTERS["cp_traffic"]({**inputs, "algo": name})
            for name in ("colossalai_cp", "hybrid_cp", "hybird_cp")}
    assert len(set(outs.values())) == 1


def test_linear_state_is_independent_of_s_b_cp():
    f = cp.traffic_formula(CpAlgorithm.COLOSSALAI, Attention.GQA, linear=True)
    assert not ({"s", "b", "cp"} & set(f.arguments))
    # 2 directions x (a/t) heads x dh^2 state x 4 bytes, by hand.
    assert _eval(f) == 2 * (32 / 2) * 128 * 128 * 4


def test_ulysses_is_checked_before_linear_attention():
    lin = cp.traffic_formula(CpAlgorithm.ULYSSES, Attention.GQA, linear=True)
    assert lin is cp.traffic_formula(CpAlgorithm.ULYSSES, Attention.GQA)


def test_ring_gqa_by_hand():
    # all-gather K and V forward + reduce-scatter backward: 2 * (cp-1)/cp * s*b * 2*W * bytes, W = n_kv*dh/t
    w = 8 * 128 / 2
    want = 2 * (4 - 1) / 4 * 8192 * 2 * 2 * w * 2
    assert_close(_eval(cp.traffic_formula(CpAlgorithm.COLOSSALAI, Attention.GQA)), want, rtol=1e-15)


def test_topology_blend_by_hand():
    f = registry.get("cp_topology_effective_bandwidth_gbps")
    assert _eval(f, cp=8) == 300.0
    assert _eval(f, cp=16, device_per_node=1) == 25.0
    # 16 ranks over nodes of 8: 7 of 15 ring hops inside a node.
    assert_close(_eval(f, cp=16), 7 / 15 * 300 + 8 / 15 * 25, rtol=1e-15)


def test_mqa_is_gqa_with_one_kv_head():
    gqa = cp.traffic(CpAlgorithm.COLOSSALAI, Attention.GQA).subs(symbol("n_kv"), 1)
    mqa = cp.traffic(CpAlgorithm.COLOSSALAI, Attention.MQA)
    assert sympy.simplify(gqa - mqa) == 0
    assert Attention.MQA.label == "gqa"


def test_detect_attention_follows_the_original():
    assert detect_attention(dc_kv=512, n_kv=128, a=128) is Attention.MLA
    assert detect_attention(dc_kv=0, n_kv=8, a=64) is Attention.GQA
    assert detect_attention(dc_kv=0, n_kv=64, a=64) is Attention.MHA
    assert detect_attention(dc_kv=0, n_kv=0, a=64) is Attention.GQA  # unset n_kv reads 0


# ---- evaluator == the expression substituted exactly


def _valid_value(name: str, draw_int: int) -> int:
    return {"cp": 1 + draw_int % 32, "device_per_node": 1 + draw_int % 16, "t": 1 + draw_int % 8}.get(
        name, 1 + draw_int % 4096)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10**6), min_size=16, max_size=16),
       st.sampled_from([f for f in cp.FORMULAS if f.arguments]))
def test_evaluator_equals_exact_substitution(draws, formula):
    values = {name: _valid_value(name, draws[i % len(draws)] + i) for i, name in enumerate(formula.arguments)}
    exact = formula.expr.subs({symbol(k): sympy.Integer(v) for k, v in values.items()})
    want = float(sympy.N(exact, 30))
    got = float(evaluator(formula.name)(**values))
    assert_close(got, want, rtol=1e-12, atol=1e-12, msg=f"{formula.name} at {values}")


def test_evaluator_broadcasts_arrays():
    f = cp.traffic_formula(CpAlgorithm.ULYSSES, Attention.MLA)
    cps = np.array([1, 2, 4, 8])
    out = evaluator(f.name)(**{**{k: BASE[k] for k in f.arguments}, "cp": cps})
    assert out.shape == (4,)
    for i, c in enumerate(cps):
        assert_close(out[i], _eval(f, cp=int(c)), rtol=1e-15)


# ---- bad input


@pytest.mark.parametrize("field,value,fragment", [
    ("cp", 0, "cp: must be > 0"),
    ("t", -2, "t: must be > 0"),
    ("s", float("nan"), "s: must be a finite number"),
    ("cp", 2.5, "cp: must be a whole number"),
    ("dh", -1, "dh: must be >= 0"),
])
def test_bad_values_name_the_field(field, value, fragment):
    f = cp.traffic_formula(CpAlgorithm.ULYSSES, Attention.GQA)
    values = {k: BASE[k] for k in f.arguments}
    values[field] = value
    with pytest.raises(InputError, match=fragment):
        evaluate(f.name, **values)


def test_unknown_algorithm_and_attention_are_rejected():
    with pytest.raises(ValueError, match="cp_algo: unknown CP algorithm 'ring_attention_v2'"):
        resolve_algorithm("ring_attention_v2")
    with pytest.raises(ValueError, match="attention: unknown attention type 'sparse'"):
        parse_attention("sparse")
    # The check reproduces the original's silent fallback instead.
    assert resolve_algorithm("ring_attention_v2", lenient=True) is CpAlgorithm.COLOSSALAI
    assert resolve_algorithm(0.0, lenient=True) is CpAlgorithm.COLOSSALAI
    assert resolve_algorithm("hybird_cp") is CpAlgorithm.HYBRID


def test_record_with_no_heads_raises_like_the_original():
    with pytest.raises(ValueError, match="a: attention heads must be positive"):
        cp_adapters.ADAPTERS["cp_comm_layer_detailed"]({**BASE, "a": 0, "cp": 4})


def test_formula_rejects_non_identifier_names_and_unknown_symbols():
    with pytest.raises(ValueError, match="not a Python identifier"):
        Formula("cp-traffic", symbol("s"), "cp", "ring", "bytes", "doc", "src")
    with pytest.raises(ValueError, match="not declared"):
        Formula("cp_x_bytes", sympy.Symbol("zz"), "cp", "ring", "bytes", "doc", "src")
    with pytest.raises(KeyError, match="unknown symbol 'zz'"):
        symbol("zz")
