"""Property-based tests of the input gate: no input gives a traceback, a hang or a non-finite result.

Each entry point is fed generated input (text, YAML, JSON, arrays of every dtype) and must
either give a finite result or raise its documented error type, naming the field or file.
"""

from __future__ import annotations

import json
import math
import time
import warnings

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from codegen.configs import Layout, LayoutError, ModelConfigError, load_model, parse_layout
from codegen.runtime.inputs import DEGREE_MAX, DEVICES_MAX, InputError, check_inputs, int_array
from codegen.runtime.kernels import evaluate
from codegen.pricing.pricer import StagePricer
from codegen.reference.cases import CaseFileError, load_cases, run_check
from symbolic.vocabulary import TEXT_KEYS

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])

#: Numbers of every awkward kind: huge, negative, fractional, non-finite, and non-numbers.
awkward_numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=0, max_value=64).map(lambda e: 2**e),
    st.sampled_from([2**63, 2**64 - 1, 10**400, -1, 0]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e300, 1.5, 2.0, -0.0]),
)
non_numbers = st.one_of(st.booleans(), st.none(), st.text(max_size=5), st.lists(st.integers(), max_size=2))


def _slow(start: float) -> None:
    assert time.perf_counter() - start < 10, "an input took more than 10 s: bounds do not bound the work"


# --------------------------------------------------------------------------- the layout parser

layout_keys = st.sampled_from([*TEXT_KEYS, "x", ""])
layout_values = st.one_of(st.integers(min_value=-5, max_value=2**70).map(str),
                          st.text(alphabet="0123456789٨൬+-_. e", max_size=12), st.text(max_size=6))


@FAST
@given(items=st.lists(st.tuples(layout_keys, layout_values), max_size=8), raw=st.text(max_size=30),
       use_raw=st.booleans())
def test_parse_layout_accepts_or_names_the_problem(items, raw, use_raw):
    text = raw if use_raw else ",".join(f"{k}={v}" for k, v in items)
    defaults = Layout(d=1, t=1, p=1, m=1)
    try:
        layout = parse_layout(text, defaults)
    except LayoutError as exc:  # the documented error: one line
        assert "\n" not in str(exc)
        return
    for name in ("d", "t", "p", "cp", "ep", "vp", "etp"):
        assert 1 <= getattr(layout, name) <= DEGREE_MAX
    assert layout.devices <= DEVICES_MAX
    for key, value in items if not use_raw else ():
        if key in ("d", "t", "p", "m") and value.strip().lstrip("+").isdigit():
            assert value.strip().isascii()


# --------------------------------------------------------------------------- the YAML loader

BASE = {"model": {"config_overrides": {"num_hidden_layers": 4, "hidden_size": 1024, "num_attention_heads": 8,
                                       "intermediate_size": 2816, "vocab_size": 32000}},
        "data": {"max_seq_len": 2048},
        "train": {"micro_batch_size": 1, "accelerator": {"tp_degree": 2, "dp_replicate": 2}}}
PLACES = [("model", "config_overrides", k) for k in ("num_hidden_layers", "hidden_size", "num_attention_heads",
                                                       "intermediate_size", "vocab_size", "num_key_value_heads",
                                                       "num_experts", "mtp_depth", "offset", "full_rec")] + \
         [("data", "max_seq_len"), ("train", "micro_batch_size"), ("train", "micro_batch_num"),
          ("train", "accelerator", "tp_degree"), ("train", "accelerator", "pp_size"),
          ("train", "accelerator", "context_parallel_algo")]


@FAST
@given(changes=st.lists(st.tuples(st.sampled_from(PLACES), st.one_of(awkward_numbers, non_numbers)), max_size=3),
       duplicate=st.booleans(), garbage=st.one_of(st.none(), st.binary(max_size=40)))
def test_yaml_loader_accepts_or_names_the_file(tmp_path_factory, changes, duplicate, garbage):
    import copy

    doc = copy.deepcopy(BASE)
    for place, value in changes:
        node = doc
        for key in place[:-1]:
            node = node[key]
        node[place[-1]] = value
    path = tmp_path_factory.mktemp("yaml") / "model.yaml"
    if garbage is not None:
        path.write_bytes(garbage)
    else:
        text = yaml.safe_dump(doc)
        if duplicate:
            text = text.replace("data:\n", "data:\n  max_seq_len: 2048\n", 1)
        path.write_text(text)
    start = time.perf_counter()
    try:
        model = load_model(path)
    except ModelConfigError as exc:
        assert str(path) in str(exc)
        if duplicate and garbage is None:
            assert "given twice" in str(exc) or str(path) in str(exc)
        return
    finally:
        _slow(start)
    assert not (duplicate and garbage is None), "a duplicate key was accepted"
    assert all(math.isfinite(v) for v in model.fields().values())
    prices = StagePricer(model)(d=model.layout.d, t=model.layout.t, p=model.layout.p, m=model.layout.m)
    assert np.isfinite(prices.sum).all()


# --------------------------------------------------------------------------- the case loader

leaf = st.one_of(st.integers(min_value=-(2**80), max_value=2**80), st.floats(allow_nan=False, allow_infinity=False),
                 st.text(max_size=4), st.booleans(), st.none())
cases_strategy = st.lists(st.fixed_dictionaries({
    "id": st.one_of(st.text(max_size=4), st.integers()),
    "function": st.sampled_from(["cp_traffic", "_fsdp_rounds", "dp_ratio", "nope"]),
    "inputs": st.dictionaries(st.sampled_from(["s", "b", "t", "a", "m", "h", "dh", "cp", "n_kv", "algo"]), leaf,
                              max_size=6),
    "output": leaf}), max_size=3)


@FAST
@given(fmt=st.one_of(st.just(1), st.integers(), st.text(max_size=2)), cases=cases_strategy,
       extra=st.sampled_from(["", "NaN", "Infinity", "1e400", "9" * 5000]), binary=st.binary(max_size=30),
       use_binary=st.booleans())
def test_case_loader_accepts_or_names_the_file(tmp_path_factory, fmt, cases, extra, binary, use_binary):
    path = tmp_path_factory.mktemp("cases") / "cases.json"
    if use_binary:
        path.write_bytes(binary)
    else:
        text = json.dumps({"format": fmt, "cases": cases})
        if extra and cases:
            text = text.replace('"output": ', f'"output": {extra}, "x": ', 1)
        path.write_text(text)
    try:
        loaded = load_cases(path)
    except CaseFileError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc)
        return
    assert loaded and fmt == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_check(loaded)  # a case that fails is a reported miss, never an exception


# --------------------------------------------------------------------------- the evaluator gate

FORMULA = "cp_ulysses_gqa_traffic_bytes"
GOOD_INPUTS = dict(s=32768, b=1, h=8192, a=64, n_kv=8, dh=128, t=4, cp=2, bytes_compute=2)
dtypes = st.sampled_from([np.int8, np.int64, np.uint8, np.uint64, np.float32, np.float64, np.bool_, object])


@st.composite
def awkward_arrays(draw):
    dtype = draw(dtypes)
    values = draw(st.lists(st.one_of(st.integers(min_value=0, max_value=2**64 - 1), st.floats()), min_size=1,
                           max_size=3))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.array(values, dtype=dtype)
    except (OverflowError, ValueError, TypeError):
        assume(False)


@FAST
@given(changes=st.dictionaries(st.sampled_from(sorted(GOOD_INPUTS)),
                               st.one_of(awkward_numbers, non_numbers, awkward_arrays()), max_size=3))
def test_evaluate_gives_a_finite_result_or_names_the_input(changes):
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a RuntimeWarning of an overflow would be a gap in the gate
            out = evaluate(FORMULA, **{**GOOD_INPUTS, **changes})
    except InputError as exc:
        assert "\n" not in str(exc) and any(str(exc).startswith(f"{k}:") for k in (*changes, FORMULA)), str(exc)
        return
    finally:
        _slow(start)
    assert np.isfinite(out).all()


@FAST
@given(value=st.one_of(awkward_numbers, non_numbers, awkward_arrays()))
def test_int_array_never_wraps(value):
    try:
        out = int_array("x", value, minimum=1, maximum=DEGREE_MAX)
    except InputError:
        return
    assert out.dtype == np.int64
    as_python = np.asarray(value, dtype=object).ravel().tolist()
    assert [int(v) for v in as_python] == out.ravel().tolist()  # the same numbers, not wrapped ones


def test_unsigned_extremes_are_rejected_not_wrapped():
    with pytest.raises(InputError, match="18446744073709551615"):
        check_inputs({"cp": np.array([2, 2**64 - 1], dtype=np.uint64)})
    with pytest.raises(LayoutError, match="18446744073709551615"):
        StagePricer("llama2-7b")(d=np.array([2**64 - 1], dtype=np.uint64), t=2, p=2, m=8)


# --------------------------------------------------------------------------- the pricer's API

@FAST
@given(arrays=st.dictionaries(st.sampled_from(["d", "t", "p", "m", "cp", "b"]),
                              st.one_of(awkward_numbers, non_numbers, awkward_arrays()), max_size=3))
def test_pricer_gives_finite_prices_or_names_the_field(arrays):
    pricer = _pricer()
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prices = pricer(**arrays)
    except (LayoutError, InputError) as exc:
        assert "\n" not in str(exc)
        return
    finally:
        _slow(start)
    assert np.isfinite(prices.bottleneck).all() and np.isfinite(prices.sum).all()


_PRICER: list[StagePricer] = []


def _pricer() -> StagePricer:
    if not _PRICER:
        _PRICER.append(StagePricer("llama2-7b"))
    return _PRICER[0]
