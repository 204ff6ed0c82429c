"""The pricers' Python API fails like the command line: one documented error type naming the argument and the value.

Every public entry point of the step-time, time, memory and stage pricers and of the sensitivity analyses raises a
``ValueError`` subclass (``codegen.runtime.inputs.InputError``, or ``LayoutError`` / ``NoComputeFactsError`` /
``NoCapacityError`` / ``HardwareSpecError`` where those apply) whose one-line message names the argument and the
value; never an ``AttributeError``, ``KeyError``, ``IndexError`` or ``TypeError`` from inside. The property tests
feed the pricers generated arguments and hold that each either raises that error or gives finite prices >= 0.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codegen.configs import LayoutBatch, LayoutError, ModelConfigError, load_model
from codegen.pricing import sensitivity as sens
from codegen.pricing.chunks import Chunk, Setting
from codegen.pricing.memory import (DEFAULT_SETTINGS, MemoryPricer, MemorySettings, NoCapacityError, stage_memory,
                                    stage_slopes, stage_totals, variant_key, zero_level_of)
from codegen.pricing.pricer import StagePricer
from codegen.pricing.step_time import NoComputeFactsError, StepTimePricer, stage_layer_counts
from codegen.pricing.time import TimePricer
from codegen.runtime.inputs import InputError
from hardware import HardwareSpecError

#: The documented error types (each a ValueError).
DOCUMENTED = (InputError, LayoutError, NoComputeFactsError, NoCapacityError, HardwareSpecError, ModelConfigError)

SYSTEM = "dgx_h100"
MODEL = load_model("llama2-7b")  # 32 layers, 32 heads, dense
KEYS = ("d", "t", "p", "cp", "ep", "etp", "vp", "b", "m")


def _values(**kw):
    """One valid layout of MODEL as the step-time pricer takes it, with *kw* replacing keys."""
    return {k: np.array([x]) for k, x in {**dict(d=2, t=2, p=2, cp=1, ep=1, etp=1, vp=1, b=1, m=8), **kw}.items()}


def _batch():
    return LayoutBatch.from_arrays(MODEL.layout, **_values())


def _chunk(values=None, recompute="none", zero=1):
    values = _values() if values is None else values
    return Chunk(Setting(recompute, zero, MODEL.layout.cp_algo), values, np.arange(len(values["p"])), MODEL)


_PRICERS: dict[str, object] = {}


def _pricer(kind):
    """One pricer of each kind for every test (built once: a pricer caches its tables)."""
    if kind not in _PRICERS:
        _PRICERS[kind] = {"step": lambda: StepTimePricer(MODEL, system=SYSTEM),
                          "time": lambda: TimePricer(MODEL, system=SYSTEM),
                          "memory": lambda: MemoryPricer(MODEL, system=SYSTEM),
                          "stage": lambda: StagePricer(MODEL)}[kind]()
    return _PRICERS[kind]


def _negative_comm(_chunk):
    return {"tp": np.array([-0.5])}


def _nan_comm(_chunk):
    return {"dp": np.array([np.nan])}


#: (entry point and bad argument, the call, what the message must name: the argument, then the value).
CASES = [
    # StepTimePricer
    ("StepTimePricer model name", lambda: StepTimePricer("llama2-7b", system=SYSTEM), "model", "'llama2-7b'"),
    ("StepTimePricer system=None", lambda: StepTimePricer(MODEL, system=None), "system", "None"),
    ("StepTimePricer system=5", lambda: StepTimePricer(MODEL, system=5), "system", "5"),
    ("StepTimePricer flash_attention=5", lambda: StepTimePricer(MODEL, system=SYSTEM, flash_attention=5),
     "flash_attention", "5"),
    ("StepTimePricer dropout=True", lambda: StepTimePricer(MODEL, system=SYSTEM, dropout=True), "dropout", "True"),
    ("StepTimePricer dropout=nan", lambda: StepTimePricer(MODEL, system=SYSTEM, dropout=float("nan")), "dropout",
     "nan"),
    ("StepTimePricer comm=5", lambda: StepTimePricer(MODEL, system=SYSTEM, comm=5), "comm", "5"),
    ("price p=0", lambda: _pricer("step").price(_values(p=0), "none"), "p", "0"),
    ("price p=-1", lambda: _pricer("step").price(_values(p=-1), "none"), "p", "-1"),
    ("price m=0", lambda: _pricer("step").price(_values(m=0), "none"), "m", "0"),
    ("price p beyond the layers", lambda: _pricer("step").price(_values(p=64), "none"), "p", "64"),
    ("price t not dividing the heads", lambda: _pricer("step").price(_values(t=3, d=1), "none"), "t", "3"),
    ("price float t", lambda: _pricer("step").price({**_values(), "t": np.array([2.0])}, "none"), "t", "float"),
    ("price uint64 huge", lambda: _pricer("step").price({**_values(), "b": np.array([2**64 - 1], np.uint64)}, "none"),
     "b", "18446744"),
    ("price string key", lambda: _pricer("step").price({**_values(), "m": "8"}, "none"), "m", "'8'"),
    ("price None key", lambda: _pricer("step").price({**_values(), "m": None}, "none"), "m", "None"),
    ("price mismatched lengths", lambda: _pricer("step").price({**_values(), "m": np.array([4, 8, 16])}, "none"),
     "m", "3"),
    ("price unknown key", lambda: _pricer("step").price({**_values(), "tp": np.array([2])}, "none"), "values",
     "'tp'"),
    ("price no keys", lambda: _pricer("step").price({}, "none"), "values", "no layout keys"),
    ("price values list", lambda: _pricer("step").price([1, 2], "none"), "values", "[1, 2]"),
    ("price recompute=5", lambda: _pricer("step").price(_values(), 5), "recompute", "5"),
    ("price recompute=zz", lambda: _pricer("step").price(_values(), "zz"), "recompute", "'zz'"),
    ("price zero=9", lambda: _pricer("step").price(_values(), "none", zero=9), "zero", "9"),
    ("price zero=1.5", lambda: _pricer("step").price(_values(), "none", zero=1.5), "zero", "1.5"),
    ("price chunk=dict", lambda: _pricer("step").price(_values(), "none", {"a": 1}), "chunk", "{'a': 1}"),
    ("price chunk of other layouts", lambda: _pricer("step").price(_values(), "none", _chunk(_values(m=16))),
     "chunk", "'m'"),
    ("price chunk of another mode", lambda: _pricer("step").price(_values(), "none", _chunk(recompute="full")),
     "recompute", "'full'"),
    ("price negative comm", lambda: StepTimePricer(MODEL, system=SYSTEM, comm=_negative_comm).price(
        _values(), "none", _chunk()), "comm", "-0.5"),
    ("price NaN comm", lambda: StepTimePricer(MODEL, system=SYSTEM, comm=_nan_comm).price(
        _values(), "none", _chunk()), "comm", "nan"),
    ("price parts garbage", lambda: _pricer("step").price(_values(), "none", parts=[1]), "parts", "[1]"),
    ("price negative parts", lambda: _pricer("step").price(
        _values(), "none", parts=[(np.array([1.0]), None, np.array([-1.0]), np.array([1.0]))]), "parts[0][2]", "-1.0"),
    ("price validated='no'", lambda: _pricer("step").price(_values(), "none", validated="no"), "validated", "'no'"),
    ("compute p=0", lambda: _pricer("step").compute(_values(p=0), "none"), "p", "0"),
    ("compute zero=-1", lambda: _pricer("step").compute(_values(), "none", -1), "zero", "-1"),
    ("stage_flops vp=0", lambda: _pricer("step").stage_flops(_values(vp=0), "none"), "vp", "0"),
    ("stage_flops recompute=None", lambda: _pricer("step").stage_flops(_values(), None), "recompute", "None"),
    ("step_time negative compute", lambda: _pricer("step").step_time(np.array([-1.0]), _values(), np.zeros(1)),
     "compute_s", "-1.0"),
    ("step_time negative comm", lambda: _pricer("step").step_time(np.ones(1), _values(), np.array([-2.0])),
     "comm", "-2.0"),
    ("step_time inf comm", lambda: _pricer("step").step_time(np.ones(1), _values(), np.array([np.inf])),
     "comm", "inf"),
    ("step_time comm of other length", lambda: _pricer("step").step_time(np.ones(1), _values(), np.zeros(3)),
     "comm", "(3,)"),
    ("stage_layer_counts p=2**40", lambda: stage_layer_counts(MODEL, np.array([2**40]), np.array([1])), "p",
     "1099511627776"),
    ("stage_layer_counts vp beyond the layers", lambda: stage_layer_counts(MODEL, np.array([1]), np.array([33])),
     "vp", "33"),
    ("stage_layer_counts p=0", lambda: stage_layer_counts(MODEL, np.array([0]), np.array([1])), "p", "0"),
    ("stage_layer_counts float p", lambda: stage_layer_counts(MODEL, np.array([2.0]), np.array([1])), "p", "float"),
    ("stage_layer_counts shapes", lambda: stage_layer_counts(MODEL, np.array([1, 2]), np.array([1, 1, 1])), "vp",
     "(3,)"),
    # TimePricer
    ("TimePricer model=5", lambda: TimePricer(5, system=SYSTEM), "model", "5"),
    ("TimePricer system=None", lambda: TimePricer(MODEL, system=None), "system", "None"),
    ("TimePricer fsdp='no'", lambda: TimePricer(MODEL, system=SYSTEM, fsdp="no"), "fsdp", "'no'"),
    ("TimePricer recompute=5", lambda: TimePricer(MODEL, system=SYSTEM, recompute=5), "recompute", "5"),
    ("TimePricer volumes_only=1", lambda: TimePricer(MODEL, system=SYSTEM, volumes_only=1), "volumes_only", "1"),
    ("TimePricer order=5", lambda: TimePricer(MODEL, system=SYSTEM, order=5), "order", "5"),
    ("TimePricer.price_batch(dict)", lambda: _pricer("time").price_batch(_values()), "batch", "{'d'"),
    ("TimePricer.volumes(dict)", lambda: _pricer("time").volumes(_values()), "batch", "{'d'"),
    ("TimePricer per_stage=['zz']", lambda: _pricer("time")(per_stage=["zz"], **_values()), "per_stage", "['zz']"),
    ("TimePricer float t", lambda: _pricer("time")(**{**_values(), "t": np.array([2.0])}), "t", "float"),
    ("TimePricer p=-1", lambda: _pricer("time")(**_values(p=-1)), "p", "-1"),
    ("TimePricer etp past the dense grid", lambda: _pricer("time")(**_values(d=1, t=1, p=1, etp=2)), "t_exp", "0.5"),
    ("TimePricer dimensions", lambda: _pricer("time").price_batch(_batch(), dimensions=("zz",)), "dimensions",
     "('zz',)"),
    ("TimePricer.stage_slopes degrees='tp'", lambda: _pricer("time").stage_slopes(_batch(), "tp"), "degrees",
     "'tp'"),
    ("TimePricer.stage_slopes unknown degree", lambda: _pricer("time").stage_slopes(_batch(), ("zz",)), "degrees",
     "'zz'"),
    ("TimePricer.stage_slopes no degree", lambda: _pricer("time").stage_slopes(_batch(), ()), "degrees", "t, cp"),
    ("TimePricer.stage_slopes(dict)", lambda: _pricer("time").stage_slopes(_values(), ("t",)), "batch", "{'d'"),
    # MemoryPricer and the memory functions
    ("MemoryPricer model=5", lambda: MemoryPricer(5, system=SYSTEM), "model", "5"),
    ("MemoryPricer system=None", lambda: MemoryPricer(MODEL, system=None), "system", "None"),
    ("MemoryPricer settings=5", lambda: MemoryPricer(MODEL, system=SYSTEM, settings=5), "settings", "5"),
    ("MemoryPricer.price_batch(dict)", lambda: _pricer("memory").price_batch(_values()), "batch", "{'d'"),
    ("stage_memory model name", lambda: stage_memory("llama2-7b", MODEL.layout, system=SYSTEM), "model",
     "'llama2-7b'"),
    ("stage_memory system=None", lambda: stage_memory(MODEL, MODEL.layout, system=None), "system", "None"),
    ("stage_memory layout text", lambda: stage_memory(MODEL, "d=1", system=SYSTEM), "layout", "'d=1'"),
    ("stage_memory settings=dict", lambda: stage_memory(MODEL, MODEL.layout, system=SYSTEM, settings={}),
     "settings", "{}"),
    ("stage_totals model name", lambda: stage_totals("llama2-7b", MODEL.layout), "model", "'llama2-7b'"),
    ("memory stage_slopes unknown degree", lambda: stage_slopes(MODEL, MODEL.layout, ["zz"]), "degrees", "'zz'"),
    ("memory stage_slopes degrees='tp'", lambda: stage_slopes(MODEL, MODEL.layout, "tp"), "degrees", "'tp'"),
    ("memory stage_slopes relax_p", lambda: stage_slopes(MODEL, MODEL.layout, ["t"], relax_p="no"), "relax_p",
     "'no'"),
    ("zero_level_of(5)", lambda: zero_level_of(5), "layout", "5"),
    ("variant_key(name)", lambda: variant_key("llama2-7b"), "model", "'llama2-7b'"),
    ("MemorySettings zero_level=5", lambda: MemorySettings(**{**DEFAULT_SETTINGS.__dict__, "zero_level": 5}),
     "zero_level", "5"),
    ("MemorySettings dropout=2", lambda: MemorySettings(**{**DEFAULT_SETTINGS.__dict__, "dropout": 2}),
     "dropout", "2"),
    # StagePricer
    ("StagePricer model=5", lambda: StagePricer(5), "model", "5"),
    ("StagePricer.price_batch(dict)", lambda: _pricer("stage").price_batch(_values()), "batch", "{'d'"),
    ("StagePricer per_stage=['zz']", lambda: _pricer("stage")(per_stage=["zz"], **_values()), "per_stage", "'zz'"),
    ("StagePricer per_stage='tp'", lambda: _pricer("stage")(per_stage="tp", **_values()), "per_stage", "'tp'"),
    ("StagePricer unknown key", lambda: _pricer("stage")(tp=np.array([2]), **_values()), "tp", "tp"),
    ("TimePricer unknown key", lambda: _pricer("time")(tp=np.array([2]), **_values()), "tp", "tp"),
    ("StagePricer float t", lambda: _pricer("stage")(**{**_values(), "t": np.array([2.0])}), "t", "float"),
    ("StagePricer.stage_slopes unknown degree", lambda: _pricer("stage").stage_slopes(_batch(), ["zz"]), "degrees",
     "'zz'"),
    ("StagePricer.stage_slopes degrees='tp'", lambda: _pricer("stage").stage_slopes(_batch(), "tp"), "degrees",
     "'tp'"),
    ("StagePricer.stage_slopes(dict)", lambda: _pricer("stage").stage_slopes(_values(), ["t"]), "batch", "{'d'"),
    # the sensitivity analyses
    ("sensitivity model name", lambda: sens.sensitivity("llama2-7b", "d=2"), "model", "'llama2-7b'"),
    ("sensitivity layout None", lambda: sens.sensitivity(MODEL, None), "layout_text", "None"),
    ("sensitivity degrees='tp'", lambda: sens.sensitivity(MODEL, "d=2", degrees="tp"), "degrees", "'tp'"),
    ("sensitivity settings=5", lambda: sens.sensitivity(MODEL, "d=2", settings=5), "settings", "5"),
    ("Settings device=None", lambda: sens.Settings(device=None), "device", "None"),
    ("Settings recompute=5", lambda: sens.Settings(recompute=5), "recompute", "5"),
    ("Settings objective=zz", lambda: sens.Settings(objective="zz"), "objective", "'zz'"),
    ("stage_derivatives unknown degree", lambda: sens.stage_derivatives(MODEL, MODEL.layout, sens.Settings(),
                                                                         degrees=("zz",)), "degrees", "'zz'"),
    ("stage_derivatives layout text", lambda: sens.stage_derivatives(MODEL, "d=2", sens.Settings()), "layout",
     "'d=2'"),
    ("objective_curve unknown degree", lambda: sens.objective_curve(MODEL, "d=2", "zz"), "degrees", "'zz'"),
    ("objective_curve degree=5", lambda: sens.objective_curve(MODEL, "d=2", 5), "degree", "5"),
    ("time_sensitivity system=None", lambda: sens.time_sensitivity(MODEL, "d=2", system=None), "system", "None"),
    ("time_sensitivity recompute=5", lambda: sens.time_sensitivity(MODEL, "d=2", system=SYSTEM, recompute=5),
     "recompute", "5"),
    ("time_sensitivity fsdp='no'", lambda: sens.time_sensitivity(MODEL, "d=2", system=SYSTEM, fsdp="no"), "fsdp",
     "'no'"),
    ("time_sensitivity objective", lambda: sens.time_sensitivity(MODEL, "d=2", system=SYSTEM, objective="memory"),
     "objective", "'memory'"),
    ("time_sensitivity degrees='tp'", lambda: sens.time_sensitivity(MODEL, "d=2", system=SYSTEM, degrees="tp"),
     "degrees", "'tp'"),
]


@pytest.mark.parametrize("call,field,value", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_each_entry_point_raises_the_documented_error_naming_argument_and_value(call, field, value):
    with pytest.raises(ValueError) as info:
        call()
    assert isinstance(info.value, DOCUMENTED), f"{type(info.value).__name__}: {info.value}"
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    assert re.search(rf"(^|\W){re.escape(field)}(\W|$)", message), message
    assert value in message, message


def test_the_valid_calls_next_to_the_cases_price():
    """The cases' valid layout prices: each error above is the bad argument's, not the layout's."""
    step = _pricer("step").price(_values(), "none", _chunk())
    assert all(np.isfinite(v).all() and (v >= 0).all() for v in step.values())
    assert np.isfinite(_pricer("time").price_batch(_batch()).bottleneck_s).all()
    assert np.isfinite(_pricer("memory").price_batch(_batch()).peak_total).all()
    assert np.isfinite(_pricer("stage").price_batch(_batch()).bottleneck).all()
    assert stage_layer_counts(MODEL, np.array([32]), np.array([1]))[0].tolist() == [1]


def test_validated_skips_the_checks_and_gives_the_same_numbers():
    """``validated=True`` (a search's vouched-for chunks) prices what the checked call prices, to the bit."""
    values = {k: np.array(v) for k, v in dict(d=[2, 4, 1], t=[2, 1, 8], p=[2, 2, 4], cp=[1, 1, 1], ep=[1, 1, 1],
                                               etp=[1, 1, 1], vp=[1, 2, 1], b=[1, 2, 1], m=[8, 4, 16]).items()}
    pricer = _pricer("step")
    for mode in ("none", "selective", "full"):
        checked = pricer.price(values, mode, zero=1)
        vouched = pricer.price(values, mode, zero=1, validated=True)
        for key in checked:
            np.testing.assert_array_equal(checked[key], vouched[key])
        np.testing.assert_array_equal(pricer.step_time(checked["compute_s"], values, np.zeros(3)),
                                      pricer.step_time(checked["compute_s"], values, np.zeros(3), validated=True))
        np.testing.assert_array_equal(pricer.stage_flops(values, mode), pricer.stage_flops(values, mode,
                                                                                           validated=True))


# ------------------------------------------------------------------------------------------ properties

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: Whole numbers of every size (0, negatives, past every bound), floats, and non-numbers.
awkward = st.one_of(
    st.integers(min_value=1, max_value=8),
    st.sampled_from([0, -1, 16, 32, 33, 64, 2**20, 2**31, 2**40, 2**63 - 1, 2**64]),
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.sampled_from([None, "2", True, b"1", [1, 2], {"a": 1}]),
)
small = st.sampled_from([1, 2, 4, 8])


@st.composite
def layout_values(draw):
    """A mapping of layout keys to arrays: mostly valid-looking small degrees, some keys awkward, some arrays of
    another length or dtype, some keys left out or unknown."""
    n = draw(st.integers(min_value=1, max_value=3))
    out = {}
    for key in KEYS:
        kind = draw(st.sampled_from(["valid", "valid", "valid", "valid", "awkward", "length", "float", "missing"]))
        if kind == "missing":
            continue
        if kind == "valid":
            out[key] = np.array(draw(st.lists(small, min_size=n, max_size=n)), dtype=np.int64)
        elif kind == "length":
            out[key] = np.array(draw(st.lists(small, min_size=n + 1, max_size=n + 2)), dtype=np.int64)
        elif kind == "float":
            out[key] = np.array(draw(st.lists(st.floats(0, 8), min_size=n, max_size=n)))
        else:
            value = draw(awkward)
            out[key] = value if draw(st.booleans()) else [value] * n
    if draw(st.integers(0, 9)) == 0:
        out[draw(st.sampled_from(["tp", "dp", "x", 5]))] = np.ones(n, dtype=np.int64)
    return out


recompute_modes = st.one_of(st.sampled_from(["none", "selective", "full"]), st.sampled_from([5, None, "zz", ""]))


def _finite_nonnegative(arrays):
    for value in arrays:
        value = np.asarray(value, dtype=float)
        assert np.isfinite(value).all() and (value >= 0).all(), value


@FAST
@given(values=layout_values(), recompute=recompute_modes,
       zero=st.one_of(st.none(), st.integers(-1, 4), st.sampled_from([1.0, "1", True])))
def test_step_time_pricer_gives_finite_prices_or_the_documented_error(values, recompute, zero):
    pricer = _pricer("step")
    try:
        got = pricer.price(values, recompute, zero=zero)
    except DOCUMENTED as exc:
        assert "\n" not in str(exc)
        return
    _finite_nonnegative(got.values())
    assert len({np.shape(v) for v in got.values()}) == 1


@FAST
@given(values=layout_values(), per_stage=st.one_of(st.booleans(), st.sampled_from([["zz"], "tp", 1, None])))
def test_time_pricer_gives_finite_prices_or_the_documented_error(values, per_stage):
    try:
        got = _pricer("time")(per_stage=per_stage, **{str(k): v for k, v in values.items()})
    except DOCUMENTED as exc:
        assert "\n" not in str(exc)
        return
    _finite_nonnegative([got.bottleneck_s, *got.by_dimension.values()])


@FAST
@given(values=layout_values(), per_stage=st.one_of(st.booleans(), st.sampled_from([["zz"], ["dp_reduced"], "tp", 1])))
def test_stage_pricer_gives_finite_prices_or_the_documented_error(values, per_stage):
    try:
        got = _pricer("stage")(per_stage=per_stage, **{str(k): v for k, v in values.items()})
    except DOCUMENTED as exc:
        assert "\n" not in str(exc)
        return
    _finite_nonnegative([got.bottleneck, got.sum])


@FAST
@given(values=layout_values())
def test_memory_pricer_gives_finite_prices_or_the_documented_error(values):
    try:
        batch = LayoutBatch.from_arrays(MODEL.layout, **{k: v for k, v in values.items() if k in KEYS})
        got = _pricer("memory").price_batch(batch)
    except DOCUMENTED as exc:
        assert "\n" not in str(exc)
        return
    _finite_nonnegative([got.peak_total])
    assert np.isfinite(got.headroom).all()


@FAST
@given(p=st.one_of(awkward, st.lists(small, min_size=1, max_size=3)), vp=st.one_of(awkward, small))
def test_stage_layer_counts_gives_counts_or_the_documented_error(p, vp):
    try:
        first, last = stage_layer_counts(MODEL, np.asarray(p) if isinstance(p, list) else p, vp)
    except DOCUMENTED as exc:
        assert "\n" not in str(exc)
        return
    assert (np.asarray(first) >= np.asarray(last)).all() and (np.asarray(last) >= 0).all()
    assert (np.asarray(first) <= MODEL.n_lay + MODEL.n_mtp).all()
