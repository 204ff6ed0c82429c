"""Batches of layouts: N layouts of one run as int64 columns, built from arrays or layouts without a Python loop.

Searchers price millions of layouts of one model at once: a :class:`LayoutBatch` holds their
per-layout keys (``symbolic.vocabulary.PER_LAYOUT_KEYS``) as read-only int64 arrays and the run
settings they share (``SHARED_KEYS``) once, through the one input gate (``codegen.runtime.inputs``).
"""

from __future__ import annotations

import copy
import functools
from dataclasses import MISSING, InitVar, dataclass, field, fields, replace
from typing import Any, Callable, Sequence

import numpy as np

from symbolic.vocabulary import LAYOUT_KEYS, PER_LAYOUT_KEYS, REQUIRED_KEYS, SHARED_KEYS

from ..runtime.inputs import DEVICES_MAX, bound, check_devices, flag, int_array
from ._layout import Layout, LayoutError, RecomputePlan, parse_recompute, positive_int

__all__ = ["ARRAY_KEYS", "LayoutBatch", "WHOLE_DP_GROUP", "inherit_os", "key_columns"]

#: The integer keys a :class:`LayoutBatch` holds one value of per layout (``symbolic.vocabulary.PER_LAYOUT_KEYS``).
ARRAY_KEYS = PER_LAYOUT_KEYS

#: The keys whose product is the devices a layout occupies (:func:`codegen.runtime.inputs.check_devices`).
_DEVICE_KEYS = ("d", "t", "cp", "p")

#: :attr:`LayoutBatch.os` of a layout that shards the optimizer over the whole DP group
#: (``Layout.os = None``).
WHOLE_DP_GROUP = 0


def _int_column(name: str, values: Any, minimum: int) -> np.ndarray:
    """*values* as a read-only one-dimensional int64 array, each value in ``[minimum, bound(name)]``.

    Through the one input gate (``codegen.runtime.inputs.int_array``): unsigned and too large values are
    rejected before the cast, never wrapped; floats, booleans and strings are not whole numbers here.
    """
    if type(values) is np.ndarray and values.dtype == np.int64 and values.ndim == 1 and len(values):
        # The usual column (an enumerator's int64 array, or a broadcast default): one min and one max
        # decide the gate; the general path below gives the same answer and the error message.
        probe = values[:1] if values.strides == (0,) else values
        if int(probe.min()) >= minimum and int(probe.max()) <= bound(name):
            column = values.view()
            column.flags.writeable = False
            return column
    if np.ndim(values) != 1 and not (values is None or isinstance(values, (str, bytes))):
        raise LayoutError(f"{name}: expected one value per layout (a one-dimensional array), "
                          f"got shape {np.shape(values)}")
    array = int_array(name, values, minimum=minimum, maximum=bound(name), error=LayoutError)
    if array.ndim != 1:
        raise LayoutError(f"{name}: expected one value per layout (a one-dimensional array), got shape {array.shape}")
    column = array.astype(np.int64, copy=False).view()  # a view: freezing it leaves the caller's array writable
    column.flags.writeable = False
    return column


def _per_value(rule: Callable[[np.ndarray], Any], column: np.ndarray) -> np.ndarray:
    """``rule(column)`` for an elementwise rule of one column of whole numbers >= 0.

    When the column is long and its values small (a degree), the rule runs once per value
    ``0..max`` and each element looks its answer up: one gather instead of, say, an integer
    division per element.
    """
    if column.ndim != 1 or len(column) < 2 * _VALUE_TABLE_LIMIT or column.strides == (0,):
        return rule(column)
    top = int(column.max())
    if top >= _VALUE_TABLE_LIMIT:
        return rule(column)
    with np.errstate(divide="ignore", invalid="ignore"):  # entries no element reads may divide by 0
        table = np.broadcast_to(rule(np.arange(top + 1)), (top + 1,))
    return np.take(table, column, mode="clip")  # every value is within the table: no bounds check


#: Largest table of values :func:`_per_value` evaluates a rule on.
_VALUE_TABLE_LIMIT = 1 << 12


def _pipeline_is(pipeline: tuple[int, int] | None, p: Any, vp: Any) -> Any:
    """Whether layouts of pipeline shape (p, vp) are *pipeline* (``None`` matches every shape)."""
    if pipeline is None:
        return True
    return (p == pipeline[0]) & (vp == pipeline[1])


def _inherited_os(os: int, d: Any) -> Any:
    """The ``os`` a layout of DP degree *d* inherits from a default layout's *os*: that value where it
    divides ``d``, else :data:`WHOLE_DP_GROUP` (as :func:`parse_layout` drops it)."""
    # For a power of two, d & (os - 1) is d % os (floor modulo, negative d too) without a division.
    rest = d & (os - 1) if os & (os - 1) == 0 else d % os
    return np.where(rest == 0, os, WHOLE_DP_GROUP)


def inherit_os(os: int, d: Any) -> Any:
    """The ``os`` of layouts of DP degree *d* that inherit a default layout's *os* (as
    :meth:`LayoutBatch.from_arrays` derives the column): *os* where it divides ``d``, else the whole DP group."""
    return _inherited_os(os, np.asarray(d))


def _gate_together(batch: Any, reduce: bool = True) -> dict[str, int | None]:
    """The keys of *batch* whose columns pass the input gate, found with one reduction over them all,
    each with its column's largest value (without *reduce*: every int64 column of the batch's
    length, its largest value ``None``, for columns a caller vouches for).

    A batch of N layouts usually arrives as several int64 columns of one length: stacked, their
    minima and maxima come from two reductions instead of two per column. A key is named only
    when its column is a one-dimensional int64 array of that length within its bounds; every
    other column (and the error message of a bad one) goes through :func:`_int_column` as before.
    """
    names, columns = [], []
    length = -1
    for name in ARRAY_KEYS:
        column = getattr(batch, name)
        if (type(column) is np.ndarray and column.dtype == np.int64 and column.ndim == 1 and column.strides != (0,)
                and id(column) not in _DEFAULT_COLUMN_IDS.get(name, ())):
            if length < 0:
                length = len(column)
            elif len(column) != length:
                return {}
            names.append(name)
            columns.append(column)
    if not reduce:
        return dict.fromkeys(names)
    if len(columns) < 2 or not length:
        return {}
    # One copy (concatenate: np.stack costs several times as much at this size), one maximum per
    # column, and one minimum over them all: at least 1 passes every key's lower bound (os's is 0);
    # only below it are the columns' own minima needed.
    stacked = np.concatenate(columns).reshape(len(columns), length)
    highs = stacked.max(axis=1).tolist()
    lows = [1] * len(columns) if stacked.min() >= 1 else stacked.min(axis=1).tolist()
    return {name: high for name, low, high in zip(names, lows, highs)
            if _LOWEST[name] <= low and high <= _HIGHEST[name]}


#: Per integer key, the least and the largest value the input gate lets through.
_LOWEST = {name: 0 if name == "os" else 1 for name in ARRAY_KEYS}
_HIGHEST = {name: bound(name) for name in ARRAY_KEYS}


def _default_column(value: int, length: int) -> np.ndarray:
    """The read-only broadcast column of a default key *value* over *length* layouts, made once.

    A searcher calls :meth:`LayoutBatch.from_arrays` many times with the same defaults and
    length: the column is made and gated once (``int_array``), and a batch that gets this very
    array skips the gate.
    """
    key = (value, length)
    column = _DEFAULT_COLUMNS.get(key)
    if column is None:
        if len(_DEFAULT_COLUMNS) >= 256:
            _DEFAULT_COLUMNS.clear()
            _DEFAULT_COLUMN_IDS.clear()
        column = np.broadcast_to(np.int64(value), (length,))  # read-only: no caller can change it later
        _DEFAULT_COLUMNS[key] = column
        for name in ARRAY_KEYS:
            if int(value) >= (0 if name == "os" else 1) and int(value) <= bound(name):
                _DEFAULT_COLUMN_IDS.setdefault(name, set()).add(id(column))
    return column


#: Default columns by (value, length), and per key the ids of those within its bounds (the cache
#: holds every array it names, so an id cannot be reused while it is listed).
_DEFAULT_COLUMNS: dict[tuple[int, int], np.ndarray] = {}
_DEFAULT_COLUMN_IDS: dict[str, set[int]] = {}


#: The state of a batch :meth:`LayoutBatch.from_arrays` built from vouched-for columns, by the shape of
#: the call (see :func:`_known_shape_batch`), without the columns each call brings:
#: ``key -> (defaults, state)``.
_KNOWN_SHAPES: dict[tuple[Any, ...], tuple[Any, dict[str, Any]]] = {}
_INT64 = np.dtype(np.int64)
_OS_INDEX = ARRAY_KEYS.index("os")


def _known_shape_batch(defaults: Layout, values: tuple[Any, ...], settings: tuple[Any, ...]
                       ) -> tuple[LayoutBatch | None, tuple[Any, ...] | None]:
    """The batch ``LayoutBatch.from_arrays(defaults, validated=True, …)`` gives for the key *values* and
    run *settings*, made from an earlier call's batch of the same shape, and the shape's key.

    A shape is the same defaults object, settings and length, the same keys given as int64
    columns and the same given as Python ints (with their values). The earlier batch's checked
    settings, default and broadcast columns, shared keys and ``_tops`` (those of the default
    columns alone, as a vouched-for batch has) are kept; the new columns go in as read-only
    views, an inherited ``os`` derived from the new ``d``. ``(None, key)`` for a shape not yet
    seen (the caller builds the batch the full way and keeps it with :func:`_keep_shape`);
    ``(None, None)`` for a call of no such shape, so that this path never decides a value alone.
    """
    length = -1
    signature: list[Any] = []
    for value in values:
        if value is None:
            signature.append(None)
        elif type(value) is np.ndarray and value.dtype is _INT64 and value.ndim == 1 and value.strides != (0,):
            if length < 0:
                length = len(value)
            elif len(value) != length:
                return None, None
            signature.append(True)
        elif type(value) is int:  # (a bool is no int here: the full way rejects it)
            signature.append((value,))
        else:
            return None, None
    if length < 0:
        return None, None
    key = (id(defaults), length, tuple(signature), settings, tuple(map(type, settings)))
    try:
        entry = _KNOWN_SHAPES.get(key)
    except TypeError:  # an unhashable setting: the full way names it
        return None, None
    if entry is None or entry[0] is not defaults:
        return None, key
    batch = object.__new__(LayoutBatch)
    state = batch.__dict__
    state.update(entry[1])
    for name, value, given in zip(ARRAY_KEYS, values, signature):
        if given is True:
            column = value.view()  # read-only, the caller's array left writable
            column.setflags(write=False)
            state[name] = column
    if signature[_OS_INDEX] is None and defaults.os is not None and signature[0] is True:
        # Derived from the new d when first read (LayoutBatch.__getattr__): a pricer that reads no field of
        # os (the communication terms read none) never pays for it.
        del state["os"]
    return batch, None


def _keep_shape(key: tuple[Any, ...], defaults: Layout, batch: LayoutBatch) -> None:
    """Keep the state of *batch*, just built the full way from vouched-for columns, as the template of
    later calls of its shape *key* (:func:`_known_shape_batch`), with what it derives once already
    derived."""
    batch.settings()
    batch.shared_keys()
    state = dict(batch.__dict__)
    # Not the caller's columns (nor the os derived from them), which every later call replaces: the
    # template must not keep a searcher's first arrays alive.
    signature = key[2]
    for name, given in zip(ARRAY_KEYS, signature):
        if given is True:
            state[name] = None
    if signature[_OS_INDEX] is None and defaults.os is not None and signature[0] is True:
        state["os"] = None
    if len(_KNOWN_SHAPES) >= 64:
        _KNOWN_SHAPES.clear()
    _KNOWN_SHAPES[key] = (defaults, state)


def _checked_settings(values: tuple[Any, ...], pipelines: tuple[Any, Any] = (None, None)) -> Any:
    """The normalised offset of run settings (in :data:`SHARED_KEYS` order) that pass Layout's own checks,
    with the batch's ``offset_pipeline`` and ``recompute_pipeline`` (*pipelines*: None or pairs of
    whole numbers >= 1).

    A searcher builds many batches with the same settings: each set is checked once. The key holds
    each value's type and repr, so that ``1`` never stands in for ``True`` (they compare equal).

    Raises:
        LayoutError: as :class:`Layout` does, naming the setting.
    """
    # Settings hash as they are, with their types (so that 1 and True differ); the offset and the
    # pipelines by their repr, since a nested True would equal a 1 inside a tuple.
    key = tuple((type(value), repr(value) if name == "offset" else value) for name, value in zip(SHARED_KEYS, values))
    key += (repr(pipelines),)
    offset = _SETTINGS_CHECKED.get(key, _UNCHECKED)
    if offset is _UNCHECKED:
        offset = Layout(d=1, t=1, p=1, m=1, **dict(zip(SHARED_KEYS, values))).offset
        for name, pipeline in zip(("offset_pipeline", "recompute_pipeline"), pipelines):
            if pipeline is not None:
                if not isinstance(pipeline, tuple) or len(pipeline) != 2:
                    raise LayoutError(f"{name}: expected None or a pair (p, vp), got {pipeline!r}")
                for k, value in zip(("p", "vp"), pipeline):
                    positive_int(f"{name} {k}", value)
        if len(_SETTINGS_CHECKED) >= 256:
            _SETTINGS_CHECKED.clear()
        _SETTINGS_CHECKED[key] = offset
    return offset


_SETTINGS_CHECKED: dict[tuple[Any, ...], Any] = {}
_UNCHECKED = object()


@dataclass(frozen=True, eq=False)
class LayoutBatch:
    """N layouts of one run, as int64 arrays: the input of :func:`derive_fields_batch`.

    The integer keys vary per layout; the run settings are shared by the whole batch.
    :meth:`from_arrays` builds a batch over a model's default layout the way
    :func:`parse_layout` builds one layout, and :meth:`layout` gives layout ``i`` back.

    Attributes:
        d, t, p, m, cp, ep, b, vp, etp: one whole number >= 1 per layout, as in :class:`Layout`;
            read-only int64 arrays of one length N.
        os: the optimizer's shard ranks per layout, :data:`WHOLE_DP_GROUP` (0) where it shards
            over the whole DP group (:attr:`Layout.os` ``None``).
        op, grad_shard, sp, fsdp, reshards, cp_algo, s: run settings of every layout, as in
            :class:`Layout`.
        offset: the per-stage offset of :class:`Layout`, for the layouts of ``offset_pipeline``.
        offset_pipeline: ``(p, vp)`` of the layouts the offset applies to; the others take the
            even split, as :func:`parse_layout` drops an offset for another pipeline. ``None``:
            it applies to every layout, and :func:`validate_batch` rejects those it does not fit.
        recompute: the recompute plan; its per-stage list applies to the layouts of
            ``recompute_pipeline`` (``None``: every layout), the others take ``recompute.uniform()``.
        recompute_pipeline: ``(p, vp)``, as ``offset_pipeline`` for the recompute list.
        validated: (construction only) the layouts are ones :func:`validate_batch` accepted, so
            their int64 columns are not range-checked again (as :meth:`from_arrays`).
    """

    d: np.ndarray
    t: np.ndarray
    p: np.ndarray
    m: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    b: np.ndarray
    vp: np.ndarray
    etp: np.ndarray
    os: np.ndarray
    op: bool = True
    grad_shard: bool = False
    sp: bool = False
    fsdp: bool = False
    reshards: bool = True
    cp_algo: str = "colossalai_cp"
    s: int | None = None
    offset: tuple[int, ...] | tuple[tuple[int, ...], ...] | None = None
    offset_pipeline: tuple[int, int] | None = None
    recompute: RecomputePlan = field(default_factory=RecomputePlan)
    recompute_pipeline: tuple[int, int] | None = None
    validated: InitVar[bool] = False

    def __post_init__(self, validated: bool) -> None:
        # Columns a caller vouches for (validated: validate_batch accepted these values) skip the range
        # reductions: whole, in range and within the device bound by that very check.
        passed = _gate_together(self, reduce=not validated)
        length = None
        tops: dict[str, int] = {}  # the largest value of each gated column, where known without a reduction
        for name in ARRAY_KEYS:
            column = getattr(self, name)
            if name in passed:
                column = column.view()  # read-only, the caller's array left writable
                column.flags.writeable = False
                if passed[name] is not None:
                    tops[name] = passed[name]
            elif id(column) in _DEFAULT_COLUMN_IDS.get(name, ()):  # a default from_arrays made passed already
                if len(column):
                    tops[name] = int(column[0])
            else:
                column = _int_column(name, column, minimum=_LOWEST[name])
            if length is None:
                length = len(column)
            elif len(column) != length:
                raise LayoutError(f"{name}: {len(column)} values, but d has {length}: a batch holds one value "
                                  f"of each key per layout")
            object.__setattr__(self, name, column)
        object.__setattr__(self, "_tops", tops)  # (a slice of the batch drops them: see subset)
        if not validated and (any(name not in tops for name in _DEVICE_KEYS) or (
                tops["d"] * tops["t"] * tops["cp"] * tops["p"] > DEVICES_MAX)):
            check_devices(self.d, self.t, self.cp, self.p, error=LayoutError)  # no int64 product may wrap later
        object.__setattr__(self, "offset", _checked_settings(tuple(getattr(self, name) for name in SHARED_KEYS),
                                                            (self.offset_pipeline, self.recompute_pipeline)))

    @classmethod
    def from_arrays(
        cls, defaults: Layout | None = None, *,
        d: Any = None, t: Any = None, p: Any = None, m: Any = None, cp: Any = None, ep: Any = None,
        b: Any = None, vp: Any = None, etp: Any = None, os: Any = None,
        op: bool | None = None, grad_shard: bool | None = None, sp: bool | None = None, fsdp: bool | None = None,
        reshards: bool | None = None, cp_algo: str | None = None, s: int | None = None,
        recompute: str | RecomputePlan | None = None, validated: bool = False,
    ) -> LayoutBatch:
        """A batch from per-layout arrays over a default layout, as :func:`parse_layout` reads text.

        Each integer key is a one-dimensional array (all of one length N) or a single whole
        number for every layout; keys left out take the defaults' value. As in
        :func:`parse_layout`, the defaults' offset and per-stage recompute list apply only to
        the layouts with the defaults' ``(p, vp)``, and an inherited ``os`` only where it
        divides ``d`` (elsewhere the whole DP group); an ``os`` array given here must divide
        ``d`` (:func:`validate_batch`), 0 meaning the whole DP group.

        Args:
            defaults: usually ``load_model(name).layout``; without it ``d, t, p, m`` are
                required and the rest take the :class:`Layout` defaults.
            d, t, p, m, cp, ep, b, vp, etp, os: the integer keys (:class:`LayoutBatch`).
            op, grad_shard, sp, fsdp, reshards, cp_algo, s: run settings; ``None`` keeps the defaults'.
            recompute: the recompute plan of every layout (text for :func:`parse_recompute`
                or a :class:`RecomputePlan`); ``None`` keeps the defaults'.
            validated: the values are layouts :func:`validate_batch` has accepted (a generator of
                valid layouts): their int64 columns skip the input gate's range check, which
                that check implies (a column that breaks it then gives unspecified results);
                other columns are gated as always.

        Raises:
            LayoutError: naming the key for a missing key, an array that is not one-dimensional,
                of another length or not of whole numbers, or the first value below 1 (0 for
                ``os``) with its index; or a bad run setting.
        """
        if validated is True and defaults is not None:
            # A searcher's generator calls this thousands of times with the same settings and new
            # columns: the batch its first such call built is copied with the new columns in.
            known, shape = _known_shape_batch(defaults, (d, t, p, m, cp, ep, b, vp, etp, os),
                                              (op, grad_shard, sp, fsdp, reshards, cp_algo, s, recompute))
            if known is not None:
                return known
        else:
            shape = None
        given = {name: value for name, value in zip(ARRAY_KEYS, (d, t, p, m, cp, ep, b, vp, etp, os))
                 if value is not None}
        if defaults is None:
            missing = [key for key in REQUIRED_KEYS if key not in given]
            if missing:
                raise LayoutError(f"from_arrays lacks {', '.join(missing)} (no default layout to fall back on)")
            template = Layout(d=1, t=1, p=1, m=1)
        elif isinstance(defaults, Layout):
            template = defaults
        else:
            raise LayoutError(f"defaults: must be a Layout or None, got {defaults!r}")
        ndim = {name: value.ndim if type(value) is np.ndarray else np.ndim(value) for name, value in given.items()}
        length = next((np.shape(given[name])[0] for name, k in ndim.items() if k >= 1), 1)
        columns = {}
        for name in ARRAY_KEYS:
            if name not in given:
                columns[name] = _default_column(getattr(template, name) or 0, length)
            elif ndim[name] >= 1:
                columns[name] = given[name]
            else:  # one value for every layout: gated as itself, so that the error shows it (not its dtype)
                int_array(name, given[name], minimum=_LOWEST[name], maximum=bound(name), error=LayoutError)
                columns[name] = np.broadcast_to(given[name], (length,))
        inherited = template.os if "os" not in given and template.os is not None else None
        if inherited is not None:
            dp = columns["d"]
            if not (type(dp) is np.ndarray and dp.dtype == np.int64 and dp.ndim == 1):
                # (an int64 column is used as it is: the batch gates it, and rejects it before this os is used)
                dp = _int_column("d", dp, minimum=1)
            columns["os"] = _per_value(functools.partial(_inherited_os, template.os), dp)
        stated = {"op": op, "grad_shard": grad_shard, "sp": sp, "fsdp": fsdp, "reshards": reshards,
                  "cp_algo": cp_algo, "s": s}
        settings = {name: getattr(template, name) if value is None else value for name, value in stated.items()}
        own_pipeline = (template.p, template.vp) if defaults is not None else None
        if recompute is None:
            plan = template.recompute
            plan_pipeline = own_pipeline if plan.full_per_stage is not None else None
        else:
            plan = recompute if isinstance(recompute, RecomputePlan) else parse_recompute(recompute)
            plan_pipeline = None
        batch = cls(**columns, **settings, offset=template.offset,
                    offset_pipeline=own_pipeline if template.offset is not None else None,
                    recompute=plan, recompute_pipeline=plan_pipeline, validated=flag("validated", validated, error=LayoutError))
        if inherited is not None:
            object.__setattr__(batch, "_os_rule", inherited)  # (kept by subset and by later calls of this shape)
        if shape is not None:
            _keep_shape(shape, template, batch)
        return batch

    @classmethod
    def from_layouts(cls, layouts: Sequence[Layout]) -> LayoutBatch:
        """The batch of *layouts*, which must share their run settings (offset and plan apply to all).

        Raises:
            LayoutError: for an empty sequence, an item that is no :class:`Layout`, or a run
                setting that differs from the first layout's, naming the item and the setting.
        """
        if not layouts:
            raise LayoutError("from_layouts: needs at least one layout")
        first = layouts[0]
        for i, layout in enumerate(layouts):
            if not isinstance(layout, Layout):
                raise LayoutError(f"layouts[{i}]: expected a Layout, got {layout!r}")
            for name in SHARED_KEYS:
                if getattr(layout, name) != getattr(first, name):
                    raise LayoutError(f"layouts[{i}].{name} = {getattr(layout, name)!r} differs from layouts[0].{name} "
                                      f"= {getattr(first, name)!r}: the layouts of a batch share their run settings")
        columns = {name: np.array([getattr(layout, name) for layout in layouts], dtype=np.int64)
                   for name in ARRAY_KEYS if name != "os"}
        columns["os"] = np.array([layout.os or WHOLE_DP_GROUP for layout in layouts], dtype=np.int64)
        return cls(**columns, **{name: getattr(first, name) for name in SHARED_KEYS})

    def __len__(self) -> int:
        return len(self.d)

    def __getattr__(self, name: str) -> Any:
        # Only for an attribute not set: the os column a batch of a known call shape derives from d when
        # first read (_known_shape_batch), read-only as every column, and kept.
        rule = self.__dict__.get("_os_rule")
        if name != "os" or rule is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        column = _per_value(functools.partial(_inherited_os, rule), self.__dict__["d"])
        column.flags.writeable = False
        object.__setattr__(self, "os", column)
        return column

    def settings(self) -> tuple[Any, ...]:
        """The run settings every layout of the batch shares (hashable): a key for what they decide."""
        # Made once per batch (the settings never change; a slice of the batch shares them).
        known = self.__dict__.get("_settings")
        if known is None:
            known = (tuple(getattr(self, name) for name in SHARED_KEYS)
                     + (self.offset_pipeline, self.recompute_pipeline))
            object.__setattr__(self, "_settings", known)
        return known

    def top(self, name: str) -> int:
        """The largest value of integer key *name* over the batch (known from the input gate, where it
        ran over that column, without another pass)."""
        known = self.__dict__.get("_tops")
        value = known.get(name) if known else None
        return int(getattr(self, name).max()) if value is None else value

    def shared_keys(self) -> tuple[int | None, ...]:
        """Per integer key (:data:`ARRAY_KEYS` order), its value where every layout shares it (a broadcast
        column: a key given as one number or left to the defaults), else ``None``: with
        :meth:`settings`, what decides which derived values are one number for the whole batch."""
        known = self.__dict__.get("_shared_keys")
        if known is None:
            state = self.__dict__
            known = tuple(int(column[0]) if column.strides == (0,) and len(column) else None
                          for column in (state[name] if name in state else getattr(self, name) for name in ARRAY_KEYS))
            object.__setattr__(self, "_shared_keys", known)
        return known

    def os_inherited_from(self) -> int | None:
        """The default layout's ``os`` that the batch's ``os`` column was derived from, layout by layout
        (:func:`inherit_os` of ``d``: then a function of ``d`` alone), or ``None`` where the column was given
        (or the batch was not made by :meth:`from_arrays`)."""
        return self.__dict__.get("_os_rule")

    @property
    def devices(self) -> np.ndarray:
        """Devices each layout occupies: d·t·cp·p."""
        return self.d * self.t * self.cp * self.p

    def stage_lists_apply(self, p: Any, vp: Any) -> tuple[Any, Any]:
        """Whether the offset and the recompute list apply to layouts of pipeline shape (p, vp).

        Args:
            p, vp: whole numbers or arrays (broadcast together).

        Returns:
            ``(offset_applies, recompute_list_applies)``, each a bool or a bool array.
        """
        offset = self.offset is not None and _pipeline_is(self.offset_pipeline, p, vp)
        listed = self.recompute.full_per_stage is not None and _pipeline_is(self.recompute_pipeline, p, vp)
        return offset, listed

    def stage_lists(self, p: int, vp: int) -> tuple[RecomputePlan, Any]:
        """The recompute plan and the offset that layouts of pipeline shape ``(p, vp)`` have: the batch's own
        where they apply (:meth:`stage_lists_apply`), else the plan's uniform part and the even split (None)."""
        offset_applies, list_applies = self.stage_lists_apply(p, vp)
        return (self.recompute if list_applies else self.recompute.uniform()), (self.offset if offset_applies else None)

    def layout(self, index: int) -> Layout:
        """Layout *index* of the batch, with the offset and recompute plan that apply to it.

        Raises:
            IndexError: for an index outside the batch.
        """
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not -len(self) <= index < len(self):
            raise IndexError(f"layout index {index!r} is outside the batch of {len(self)}")
        values = {name: int(getattr(self, name)[index]) for name in ARRAY_KEYS}
        values["os"] = values["os"] or None
        plan, offset = self.stage_lists(values["p"], values["vp"])
        return Layout(**values, op=self.op, grad_shard=self.grad_shard, sp=self.sp, fsdp=self.fsdp,
                      reshards=self.reshards, cp_algo=self.cp_algo, s=self.s, offset=offset, recompute=plan)

    def subset(self, selector: Any) -> LayoutBatch:
        """The layouts *selector* picks (a boolean mask of length N, indices, or a slice), settings kept.

        A slice gives views of this batch's columns (a broadcast key stays a broadcast).
        """
        if isinstance(selector, slice):
            # Views of columns and settings this batch has checked already: nothing to check again,
            # which matters to a caller walking millions of layouts block by block.
            view = copy.copy(self)
            view.__dict__.pop("_tops", None)  # the largest values of the whole batch, not of the slice
            for name in ARRAY_KEYS:
                if name in self.__dict__:  # (an os not derived yet is derived from the view's own d)
                    object.__setattr__(view, name, self.__dict__[name][selector])
            return view
        picked = replace(self, **{name: getattr(self, name)[selector] for name in ARRAY_KEYS})
        if self.os_inherited_from() is not None:  # (os and d picked alike: os still follows from d)
            object.__setattr__(picked, "_os_rule", self.os_inherited_from())
        return picked


def key_columns(batch: LayoutBatch, compact: bool) -> dict[str, Any]:
    """The batch's integer keys by name; with *compact*, a key every layout shares is one value.

    A key shares one value when its column is a broadcast (stride 0): what
    :meth:`LayoutBatch.from_arrays` makes of a key given as one number or left to the defaults.
    The value is a NumPy integer, so that ``~``, ``&`` and ``|`` on the rules' comparisons stay
    logical, as on arrays.
    """
    if not compact:
        return {name: getattr(batch, name) for name in ARRAY_KEYS}
    # (a shared key: a broadcast column, as LayoutBatch.shared_keys finds once per batch)
    state = batch.__dict__
    keys = _KeyColumns({name: state[name] if value is None else state[name][0]
                        for name, value in zip(ARRAY_KEYS, batch.shared_keys()) if name in state})
    keys.batch = batch
    return keys


class _KeyColumns(dict):
    """The key columns of :func:`key_columns`; a key the batch has not derived yet (a lazy ``os``) is read
    from the batch when a rule first asks for it."""

    batch: LayoutBatch

    def __missing__(self, name: str) -> Any:
        value = self[name] = getattr(self.batch, name)
        return value


def _check_against_declaration() -> None:
    """:class:`LayoutBatch`'s fields are the declared keys, in order, each run setting with :class:`Layout`'s
    default, the two pipelines of the stage lists after the lists (checked at import)."""
    found = [f for f in fields(LayoutBatch) if f.name not in ("offset_pipeline", "recompute_pipeline")]
    if [f.name for f in found] != [key.name for key in LAYOUT_KEYS]:
        raise AssertionError(f"LayoutBatch's fields {[f.name for f in found]} differ from the declared layout keys")
    layout = {f.name: f for f in fields(Layout)}
    for f in found:
        if f.name in SHARED_KEYS and (f.default, f.default_factory) != (layout[f.name].default,
                                                                         layout[f.name].default_factory):
            raise AssertionError(f"LayoutBatch.{f.name}: default differs from Layout.{f.name}'s")
        if f.name in ARRAY_KEYS and (f.default, f.default_factory) != (MISSING, MISSING):
            raise AssertionError(f"LayoutBatch.{f.name}: a column has no default")


_check_against_declaration()
