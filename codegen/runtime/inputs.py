"""The one input gate: every number that enters symcost is checked here, the same way from every entry point.

The command line (``--layout``, ``--devices``), model files (YAML), reference case files,
the Python API (``Layout``, ``LayoutBatch.from_arrays``, ``StagePricer(...)(d=...)``) and
``codegen.runtime.kernels.evaluate`` all hand their numbers to these functions, which raise one
:class:`InputError` (a ``ValueError``; callers may ask for their own subclass) naming the field,
the value and the rule it breaks. Nothing is wrapped, truncated or silently converted:

* whole numbers from text are ASCII digits only (``int("٨")`` is 8 in Python; here it is an
  error), from Python only ``int`` and NumPy integers (and, where a file format writes ``1e3``,
  floats without a fraction); ``bool``, ``str``, ``None`` are never numbers;
* arrays are converted by their dtype: signed and unsigned integers are range-checked as
  exact integers before any cast (a ``uint64`` 2**64-1 is rejected, not read as -1), floats
  must be finite (and whole where whole numbers are asked for), booleans, strings and
  objects other than Python integers are rejected;
* products of degrees (the device count d·t·cp·p) are checked in exact integers, or in
  float64 against a bound far below 2**53, never in int64 that could wrap;
* the Python API's other arguments too: a name among a fixed set (:func:`one_of`), a list of such
  names (:func:`names`; one string is not a list: ``"tp"`` is not ``t`` and ``p``), a set of such names
  written as a list or one comma-separated text (:func:`name_set`), a switch or
  share in ``[0, 1]`` (:func:`share`), an object of the type a function takes (:func:`instance`,
  so that a ``dict`` where a ``LayoutBatch`` is meant fails here, not deep inside with an
  ``AttributeError``), a catalog system (:func:`system`), seconds or bytes that must be finite
  and ``>= 0`` (:func:`nonnegative`);
* results are checked too: :func:`finite` turns an infinite or NaN result into an error
  naming what overflowed, and :func:`json_text` writes only valid JSON.

Bounds, and why (docs/model.md, "Input bounds", holds the same table):

=====================  ===============  ==========================================================
what                   bound            reason
=====================  ===============  ==========================================================
a parallel degree      ``2**20``        ~10^6 ranks along one axis, beyond any machine; products of
(d t p cp ep etp vp                     two degrees stay below 2**40, exact in int64 and float64
os)
devices d·t·cp·p       ``2**30``        ~10^9 devices; every product of degrees the rules form
                                        (d·t·cp·etp·ep at most) stays below 2**63
layers n_lay + n_mtp   ``2**10``        8x the deepest published model; the pricer builds a table
(and offsets, full                      per pipeline depth up to p (p ≤ layers), quadratic in p:
recompute counts)                       p = 1024 prices in seconds, p = 16384 would take hours
any other whole        ``2**32``        sizes (s, h, hff, v, head widths), heads, experts,
number of a model or                    micro-batches m and b: the largest product an evaluator
layout                                  forms (about ten such factors) stays below 2**330 ≪ 1e308
any input of           ``2**53``        whole numbers stay exact in float64; a formula whose
``evaluate``           (degrees and     result still overflows is reported by :func:`finite`
                       layers as above)
=====================  ===============  ==========================================================

The bounds of the layout keys (which keys are degrees, :data:`DEGREE_MAX` and the other limits) are
declared once, in ``symbolic.vocabulary``; this module applies them. It stays free of SymPy: it reads
``symbolic.symbols.SPECS`` and the vocabulary, plain data.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Mapping

import numpy as np

from symbolic.symbols import SPECS
from symbolic.vocabulary import COUNT_MAX, DEGREE_MAX, DEVICES_MAX, LAYERS_MAX, LAYOUT_DEGREES

__all__ = [
    "COUNT_MAX",
    "DEGREE_FIELDS",
    "DEGREE_MAX",
    "DEVICES_MAX",
    "InputError",
    "LAYERS_MAX",
    "LAYER_FIELDS",
    "VALUE_MAX",
    "VALUE_MIN",
    "bound",
    "check_devices",
    "check_inputs",
    "finite",
    "flag",
    "instance",
    "int_array",
    "json_text",
    "name_set",
    "names",
    "nonnegative",
    "one_of",
    "parse_flag",
    "parse_number",
    "parse_real",
    "parse_reals",
    "parse_whole",
    "share",
    "system",
    "whole",
]


class InputError(ValueError):
    """A value that no valid configuration has."""


#: Largest magnitude of any input of ``evaluate`` (whole numbers exact in float64).
VALUE_MAX = float(1 << 53)
#: The least number a measured or published cell may hold (``parse_real``): 2**-53, so that a ratio of two read
#: numbers (a relative error, a bandwidth) stays below 2**106, finite; a subnormal cell would make it infinite.
VALUE_MIN = 1.0 / VALUE_MAX

#: Fields (layout keys and symbols) that are parallel degrees, bounded by :data:`DEGREE_MAX`: the layout keys
#: ``symbolic.vocabulary`` declares degrees, and the degrees derived from them.
DEGREE_FIELDS = frozenset(LAYOUT_DEGREES) | {"t_exp", "d_exp", "sp", "os_max_shard"}
#: Fields that count layers: bounded by :data:`LAYERS_MAX`.
LAYER_FIELDS = frozenset({"n_lay", "n_mtp", "n_body", "n_extra", "n_extra_sel", "n_full_rec", "n_sel_rec",
                          "n_embedding", "n_output", "layers"})

_WHY = {DEGREE_MAX: "the largest parallel degree symcost prices",
        DEVICES_MAX: "the largest device count symcost prices",
        LAYERS_MAX: "the largest layer count symcost prices",
        COUNT_MAX: "the largest size or count symcost prices",
        VALUE_MAX: "the largest input symcost evaluates (whole numbers exact in float64)"}

_ASCII_WHOLE = re.compile(r"[+-]?[0-9]+")


def bound(field: str) -> int | float:
    """The upper bound of *field* (a layout key, a model field or a symbol), by the table above."""
    if field in DEGREE_FIELDS:
        return DEGREE_MAX
    if field in LAYER_FIELDS:
        return LAYERS_MAX
    return COUNT_MAX


def _show(value: object) -> str:
    """*value* for a message: a number of many digits is shortened to its size."""
    text = repr(value)
    if isinstance(value, int) and len(text) > 24:
        return f"{text[:8]}… (a {len(text.lstrip('-'))}-digit number)"
    return text if len(text) <= 80 else text[:77] + "..."


def _bound_text(maximum: int | float) -> str:
    why = _WHY.get(maximum)
    exact = int(maximum) if float(maximum).is_integer() else 0
    if exact > 8 and exact & (exact - 1) == 0:  # a power of two is shown as one, with its digits beside it
        text = f"2**{exact.bit_length() - 1} = {exact:,}"
    else:
        text = f"{int(maximum):,}" if float(maximum).is_integer() else f"{maximum:g}"
    return text + (f", {why}" if why else "")


def _range(field: str, value: int, minimum: int, maximum: int | float | None, error: type[ValueError]) -> int:
    if value < minimum:
        raise error(f"{field}: must be a whole number >= {minimum}, got {_show(value)}")
    if maximum is not None and value > maximum:
        raise error(f"{field}: must be at most {_bound_text(maximum)}; got {_show(value)}")
    return value


def whole(field: str, value: object, *, minimum: int = 1, maximum: int | float | None = None,
          floats: bool = False, error: type[ValueError] = InputError) -> int:
    """*value* as a Python ``int`` within ``[minimum, maximum]``.

    Accepts ``int`` and NumPy integers, with *floats* also floats without a fraction (a file
    format's ``1e3``). ``bool``, ``None``, strings and anything else are rejected.

    Raises:
        error: naming *field* and the value.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer, float, np.floating)):
        raise error(f"{field}: must be a whole number, got {_show(value)}")
    if isinstance(value, (float, np.floating)):
        if not floats or not math.isfinite(value) or not float(value).is_integer():
            raise error(f"{field}: must be a whole number, got {_show(value)}")
    return _range(field, int(value), minimum, maximum, error)


def parse_whole(field: str, text: str, *, minimum: int = 1, maximum: int | float | None = None,
                error: type[ValueError] = InputError) -> int:
    """A whole number from *text*: ASCII digits with an optional sign, nothing else (no ``_``, no ``٨``).

    Raises:
        error: naming *field* and the text.
    """
    if not isinstance(text, str):
        raise error(f"{field}: expected a whole number as text, got {_show(text)}")
    stripped = text.strip()
    if not stripped.isascii() or not _ASCII_WHOLE.fullmatch(stripped):
        raise error(f"{field}: expected a whole number, got {_show(text)} (ASCII digits 0-9 only)")
    digits = stripped.lstrip("+-").lstrip("0")
    if len(digits) > 40:  # far past every bound; int() of thousands of digits is refused by Python itself
        sign = "-" if stripped.startswith("-") else ""
        value = int(sign + digits[:41])
    else:
        value = int(stripped)
    return _range(field, value, minimum, maximum, error)


def flag(field: str, value: object, *, error: type[ValueError] = InputError) -> bool:
    """*value* if it is a real boolean (``True``/``False``, NumPy's too); ``"no"``, 0 or ``None`` are not.

    Raises:
        error: naming *field* and the value.
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise error(f"{field}: must be true or false (a bool), got {_show(value)}")


def _first(array: np.ndarray, bad: np.ndarray) -> tuple[object, str]:
    """The first offending element of *array* and where it is (empty for a scalar)."""
    if array.ndim == 0:
        return array.item(), ""
    index = np.unravel_index(int(np.argmax(bad)), array.shape)
    at = index[0] if len(index) == 1 else tuple(int(i) for i in index)
    return array[index].item(), f" at index {at}"


def int_array(field: str, values: Any, *, minimum: int = 1, maximum: int | float | None = None,
              floats: bool = False, error: type[ValueError] = InputError) -> np.ndarray:
    """*values* (an array, a sequence or a scalar) as an int64 array, each within ``[minimum, maximum]``.

    Integer dtypes (signed or unsigned) are range-checked before the cast, so nothing wraps;
    float dtypes only with *floats* (and then finite and whole); Python integers too large for
    int64 are reported with the bound; ``bool``, strings, ``None`` and other objects are rejected.

    Raises:
        error: naming *field*, the first offending value and its index.
    """
    if values is None or isinstance(values, (str, bytes)):
        raise error(f"{field}: expected whole numbers, got {_show(values)}")
    if maximum is None or maximum > _INT64_MAX:  # the result is int64: nothing past it may wrap or overflow
        maximum = _INT64_MAX
    try:
        array = values if isinstance(values, np.ndarray) else np.asarray(values)
    except (ValueError, TypeError, OverflowError) as exc:
        raise error(f"{field}: expected whole numbers, got {_show(values)} ({exc})") from None
    kind = array.dtype.kind
    if kind == "O":  # Python integers beyond int64, or mixed objects: checked one by one
        flat = array.ravel()
        for i, item in enumerate(flat):
            try:
                whole(field, item, minimum=minimum, maximum=maximum, floats=floats, error=error)
            except ValueError as exc:
                at = f" at index {i}" if array.ndim else ""
                raise error(f"{exc}{at}") from None
        return np.array(flat.tolist(), dtype=np.int64).reshape(array.shape)
    if kind not in "iuf" or (kind == "f" and not floats):
        raise error(f"{field}: expected whole numbers, got {array.dtype} values")
    if array.size == 0:
        return array.astype(np.int64)
    probe = array[:1] if array.ndim == 1 and array.strides == (0,) else array  # a broadcast value: once
    if kind == "f":
        bad = ~np.isfinite(probe) | (probe != np.floor(probe))
        if bad.any():
            value, at = _first(probe, bad)
            raise error(f"{field}: must be a whole number, got {_show(value)}{at}")
    low, high = probe.min(), probe.max()
    if int(low) < minimum:
        value, at = _first(probe, probe < minimum)
        raise error(f"{field}: every value must be a whole number >= {minimum}, got {_show(_num(value))}{at}")
    if maximum is not None and (int(high) > maximum):
        value, at = _first(probe, probe > maximum)
        raise error(f"{field}: every value must be at most {_bound_text(maximum)}; got {_show(_num(value))}{at}")
    return array.astype(np.int64, copy=False)


#: The largest int64 (:func:`int_array`'s results are int64 arrays).
_INT64_MAX = (1 << 63) - 1


def _num(value: object) -> object:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def check_devices(d: Any, t: Any, cp: Any, p: Any, *, maximum: int = DEVICES_MAX,
                  error: type[ValueError] = InputError) -> None:
    """Reject layouts whose device count d·t·cp·p exceeds *maximum*, computed without wrapping.

    Scalars multiply as Python integers; arrays (each degree ≤ :data:`DEGREE_MAX`, checked
    first) multiply in float64, whose rounding cannot move a product across a bound of 2**30.
    """
    if all(np.ndim(x) == 0 for x in (d, t, cp, p)):
        devices = int(d) * int(t) * int(cp) * int(p)
        if devices > maximum:
            raise error(f"devices: d·t·cp·p = {d}·{t}·{cp}·{p} = {_show(devices)} exceeds {_bound_text(maximum)}")
        return
    tops = [(int(x.max()) if x.size else 1) if isinstance(x, np.ndarray) else int(np.max(x)) if np.size(x) else 1
            for x in (d, t, cp, p)]
    if math.prod(tops) <= maximum:  # the usual case, from four maxima: no product of N elements
        return
    product = np.asarray(d, dtype=float) * t * cp * p
    bad = product > maximum
    if np.any(bad):
        i = int(np.argmax(np.broadcast_to(bad, np.shape(product))))
        vals = [int(np.broadcast_to(x, np.shape(product))[i]) for x in (d, t, cp, p)]
        raise error(f"devices: d·t·cp·p = {'·'.join(map(str, vals))} = {math.prod(vals)} exceeds "
                    f"{_bound_text(maximum)}, at index {i}")


def finite(what: str, value: Any, *, error: type[ValueError] = InputError) -> Any:
    """*value* (a number or an array) if every element is finite; else an error naming *what*.

    Raises:
        error: "*what* is not finite (inf)" with the first offending index.
    """
    array = np.asarray(value, dtype=float)
    bad = ~np.isfinite(array)
    if bad.any():
        item, at = _first(array, bad)
        raise error(f"{what}: the result is not finite ({item}){at}: the inputs overflow float64; "
                    f"use smaller sizes or degrees")
    return value


def _assert_finite_tree(obj: Any, where: str) -> None:
    if isinstance(obj, float):
        finite(where or "value", obj)
    elif isinstance(obj, dict):
        for key, item in obj.items():
            _assert_finite_tree(item, f"{where}.{key}" if where else str(key))
    elif isinstance(obj, (list, tuple)):
        for i, item in enumerate(obj):
            _assert_finite_tree(item, f"{where}[{i}]")


def json_text(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` that never writes ``NaN`` or ``Infinity`` (not JSON): an error names the value instead."""
    _assert_finite_tree(obj, "")
    return json.dumps(obj, allow_nan=False, **kwargs)


def _as_float_array(name: str, raw: object, top: float) -> np.ndarray:
    """*raw* as a float array, by its dtype: integers range-checked before the cast, nothing wraps."""
    if raw is None or isinstance(raw, (bool, np.bool_, str, bytes)):
        raise InputError(f"{name}: expected a number, got {_show(raw)}")
    try:
        array = np.asarray(raw)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{name}: expected a number, got {_show(raw)}") from None
    kind = array.dtype.kind
    if kind == "O":
        flat = array.ravel()
        for i, item in enumerate(flat):
            if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, float, np.integer, np.floating)):
                raise InputError(f"{name}: expected a number, got {_show(item)}" + (f" at index {i}" if array.ndim else ""))
            if isinstance(item, int) and abs(item) > top:
                raise InputError(f"{name}: must be at most {_bound_text(top)}; got {_show(item)}"
                                 + (f" at index {i}" if array.ndim else ""))
        return np.array([float(x) for x in flat.tolist()], dtype=float).reshape(array.shape)
    if kind in "iu":
        if array.size:
            low, high = int(array.min()), int(array.max())
            if max(abs(low), abs(high)) > top:
                bad = np.abs(array.astype(object)) > top
                item, at = _first(array, bad)
                raise InputError(f"{name}: must be at most {_bound_text(top)}; got {_show(item)}{at}")
        return array.astype(float)
    if kind == "f":
        return array.astype(float, copy=False)
    raise InputError(f"{name}: expected numbers, got {array.dtype} values")


def check_inputs(values: Mapping[str, object]) -> dict[str, np.ndarray]:
    """*values* as float arrays, after checking each against its symbol's declaration and bound.

    Rejects booleans, strings, ``None`` and other objects; NaN and infinities; integers that
    do not fit (an unsigned 2**64-1 is not -1); non-positive values of positive symbols,
    negative values of non-negative ones, fractions where the symbol is an integer (a degree
    of 2.5 ranks); and magnitudes past the bound (:func:`bound` for degrees and layer counts,
    :data:`VALUE_MAX` for the rest).

    Raises:
        InputError: naming the field and the first offending value.
        KeyError: for a name that is no symbol of the model.
    """
    out: dict[str, np.ndarray] = {}
    for name, raw in values.items():
        if name not in SPECS:
            raise KeyError(f"unknown input field {name!r}")
        spec = SPECS[name]
        top = bound(name) if name in DEGREE_FIELDS | LAYER_FIELDS else VALUE_MAX
        arr = _as_float_array(name, raw, top)
        bad = ~np.isfinite(arr)
        if bad.any():
            raise InputError(f"{name}: must be a finite number, got {_first(arr, bad)[0]!r}")
        bad = arr <= 0 if spec.positive else arr < 0
        if bad.any():
            need = "> 0" if spec.positive else ">= 0"
            raise InputError(f"{name}: must be {need} ({spec.meaning}), got {_first(arr, bad)[0]!r}")
        if spec.integer:
            bad = arr != np.floor(arr)
            if bad.any():
                raise InputError(f"{name}: must be a whole number ({spec.meaning}), got {_first(arr, bad)[0]!r}")
        bad = arr > top
        if bad.any():
            item, at = _first(arr, bad)
            raise InputError(f"{name}: must be at most {_bound_text(top)}; got {_show(_num(item))}{at}")
        out[name] = arr
    return out


_ASCII_REAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _ascii_float(field: str, text: object, error: type[ValueError]) -> float:
    """*text* as a float where it is a number in ASCII decimal notation (:data:`_ASCII_REAL`); its bounds are the
    caller's."""
    if not isinstance(text, str):
        raise error(f"{field}: expected a number as text, got {_show(text)}")
    stripped = text.strip()
    if not stripped.isascii() or not _ASCII_REAL.fullmatch(stripped):
        raise error(f"{field}: expected a number, got {_show(text)} (ASCII decimal notation, e.g. 1.5 or 2e-3)")
    return float(stripped)


def parse_real(field: str, text: str, *, maximum: float = VALUE_MAX, error: type[ValueError] = InputError) -> float:
    """A finite number from :data:`VALUE_MIN` to *maximum* from *text*: ASCII decimal notation only (``1.5``, ``2e-3``).

    ``float()`` alone would take ``inf``, ``nan``, ``1_000`` and other scripts' digits; here each is an error.

    Raises:
        error: naming *field* and the text.
    """
    value = _ascii_float(field, text, error)
    if not math.isfinite(value) or value > maximum:
        raise error(f"{field}: must be at most {_bound_text(maximum)}; got {_show(text)}")
    if value <= 0:
        raise error(f"{field}: must be a number > 0, got {_show(text)}")
    if value < VALUE_MIN:
        raise error(f"{field}: must be at least 2**-53 (a smaller number is no measurement, and ratios of it "
                    f"overflow); got {_show(text)}")
    return value


#: The spellings :func:`parse_flag` reads, case aside.
FLAG_WORDS = {"true": True, "false": False, "yes": True, "no": False, "1": True, "0": False}


def parse_flag(field: str, text: str, *, error: type[ValueError] = InputError) -> bool:
    """A boolean from *text*: ``true``/``false``, ``yes``/``no`` or ``1``/``0`` (any case); anything else is an error.

    Raises:
        error: naming *field* and the text.
    """
    if isinstance(text, str) and text.strip().lower() in FLAG_WORDS:
        return FLAG_WORDS[text.strip().lower()]
    raise error(f"{field}: must be true or false (or yes/no, 1/0), got {_show(text)}")


_ASCII_REALS = re.compile(rf"(?:{_ASCII_REAL.pattern}\n)*{_ASCII_REAL.pattern}")


def parse_reals(field: str, texts: list[str], *, maximum: float = VALUE_MAX,
                error: type[ValueError] = InputError) -> list[float]:
    """:func:`parse_real` of each of *texts* (a table's column), checked at once: one pattern match over them
    all and one bound check, instead of a call per text.

    Raises:
        error: naming *field*, the first text refused and its index.
    """
    joined = "\n".join(texts)
    if texts and joined.isascii() and _ASCII_REALS.fullmatch(joined):
        values = list(map(float, texts))
        if min(values) >= VALUE_MIN and max(values) <= maximum:  # NaN cannot pass the pattern; inf exceeds the bound
            return values
    for i, text in enumerate(texts):
        try:
            parse_real(field, text, maximum=maximum, error=error)
        except ValueError as exc:
            raise error(f"{exc} at index {i}") from None
    return [parse_real(field, text, maximum=maximum, error=error) for text in texts]
def instance(field: str, value: Any, kind: type | tuple[type, ...], what: str, *,
             error: type[ValueError] = InputError) -> Any:
    """*value* if it is an instance of *kind*; else an error naming *field*, what it takes (*what*) and the value.

    Raises:
        error: ``"<field>: expected <what>, got <value> (<type>)"``.
    """
    if isinstance(value, kind):
        return value
    raise error(f"{field}: expected {what}, got {_show(value)} ({type(value).__name__})")


def one_of(field: str, value: object, choices: Any, *, error: type[ValueError] = InputError) -> str:
    """*value* if it is one of *choices* (names: strings); a number, ``None`` or another name is an error.

    Raises:
        error: naming *field*, the choices and the value.
    """
    if isinstance(value, str) and value in choices:
        return value
    raise error(f"{field}: expected one of {', '.join(map(str, choices))}, got {_show(value)}")


def names(field: str, values: object, choices: Any, *, error: type[ValueError] = InputError) -> tuple[str, ...]:
    """*values* (a list or tuple of names, at least one) as a tuple, each one of *choices*, each once in the order
    given. One string is not a list of names (``"tp"`` is not ``t`` and ``p``), nor is a mapping.

    Raises:
        error: naming *field* and the first value that is not one of *choices*, a string or mapping given
            whole, or no name given.
    """
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, (list, tuple)):
        raise error(f"{field}: expected a list of names (of {', '.join(map(str, choices))}), got {_show(values)}")
    out = []
    for item in values:
        out.append(one_of(field, item, choices, error=error))
    if not out:
        raise error(f"{field}: give at least one of {', '.join(map(str, choices))}")
    return tuple(dict.fromkeys(out))


def name_set(field: str, value: object, choices: Any, what: str, *, refused: Mapping[str, str] | None = None
             ) -> tuple[str, ...]:
    """*value* as names of *choices*, each once, in the order of *choices*: a sequence (or set) of names, or one
    text of names separated by commas (``"dp,tp"``; ``"none"`` or ``""`` for none). *what* names the kind in the
    error (``"overlap names"``); *refused* says, by name, why a name the caller knows of is not taken.

    Raises:
        InputError: naming *field* and the value: not text or a sequence of texts, a name of *refused* (with its
            reason), or a name not among *choices*.
    """
    if isinstance(value, str):
        text = value.strip()
        given = [] if text.lower() in ("", "none") else [part.strip() for part in text.split(",")]
    elif isinstance(value, (tuple, list, frozenset, set)):
        given = list(value)
    else:
        raise InputError(f"{field}: expected {what} ({', '.join(choices)}) or none, got {value!r}")
    for name in given:
        if refused and isinstance(name, str) and name in refused:
            raise InputError(f"{field}: {name!r} is {refused[name]}; the {what} are {', '.join(choices)}")
    chosen = {one_of(field, name, choices) for name in given}
    return tuple(name for name in choices if name in chosen)


def share(field: str, value: object, *, error: type[ValueError] = InputError) -> float:
    """*value* as a float in ``[0, 1]``: a switch (0 or 1) or a share between; ``bool``, strings, ``None``, NaN
    and values outside ``[0, 1]`` are errors.

    Raises:
        error: naming *field* and the value.
    """
    if (isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating))
            or not (0 <= value <= 1)):  # (NaN fails the comparison)
        raise error(f"{field}: must be a number between 0 and 1, got {_show(value)}")
    return float(value)


def nonnegative(field: str, value: Any, *, error: type[ValueError] = InputError) -> Any:
    """*value* (a number or an array of numbers: seconds, bytes) if every element is finite and ``>= 0``.

    Raises:
        error: naming *field* and the first offending value (and its index).
    """
    if value is None or isinstance(value, (bool, np.bool_, str, bytes)):
        raise error(f"{field}: expected numbers, got {_show(value)}")
    try:
        array = np.asarray(value, dtype=float)
    except (TypeError, ValueError, OverflowError):
        raise error(f"{field}: expected numbers, got {_show(value)}") from None
    bad = ~(array >= 0) | ~np.isfinite(array)
    if bad.any():
        item, at = _first(array, bad)
        raise error(f"{field}: must be finite and >= 0, got {item!r}{at}")
    return value


def system(field: str, value: object, *, error: type[ValueError] = InputError) -> Any:
    """The :class:`hardware.System` *value* names (a catalog name or alias), or *value* itself if it is one.

    Raises:
        error: for anything but a string or a ``hardware.System``; ``hardware.HardwareSpecError`` (a
            ``ValueError``) naming an unknown system and the known ones.
    """
    import hardware

    if isinstance(value, hardware.System):
        return value
    if not isinstance(value, str):
        raise error(f"{field}: expected a catalog system name (one of {', '.join(hardware.names())}) "
                    f"or a hardware.System, got {_show(value)}")
    return hardware.load(value)


def parse_number(field: str, text: str, *, minimum: float = 0.0, maximum: float | None = None,
                 error: type[ValueError] = InputError) -> float:
    """A finite real number from *text*: ASCII decimal notation (``6.5``, ``1e3``), nothing else.

    ``float()`` alone would also take ``"٥"``, ``"1_0"``, ``"inf"`` and ``"nan"``; here they are errors,
    as in :func:`parse_whole`.

    Raises:
        error: naming *field* and the text: not a number in ASCII digits, not finite, below *minimum*
            or above *maximum*.
    """
    value = _ascii_float(field, text, error)
    if not math.isfinite(value):
        raise error(f"{field}: must be a finite number, got {_show(text)}")
    if value < minimum:
        raise error(f"{field}: must be >= {minimum:g}, got {_show(text)}")
    if maximum is not None and value > maximum:
        raise error(f"{field}: must be at most {_bound_text(maximum)}; got {_show(text)}")
    return value
