"""Parallel layouts: parse and check them, derive the config fields they imply, build the pipeline stages.

A :class:`Layout` is one training run's parallel strategy (degrees, micro-batches,
optimizer sharding, FSDP, recompute plan). Together with a
:class:`codegen.configs.models.ModelConfig` it fixes every configuration field the
communication formulas read (docs/model.md, "Config fields"), which :func:`derive_fields`
computes, and the pipeline layout the stage walk visits (docs/model.md, "From a layer to a stage"),
which :func:`build_stages` builds.

Where the fields come from. The original planner derives them in its
HyperParallel config parser and its ``derive`` step, which the seed printout
does not contain; the published versions of
``nd/common/derive.py`` (``derive_expert_degrees``, ``optimizer_ranks``,
``derive_optimizer_sharding``, ``derive_comm_flags``, ``hyper_rec_op``) and of
``framework_parsers/cost_model_parser_hyper.py`` (``_balanced_offset``,
``_parse_recompute``) state the rules, and the reference cases
(``estimate_from_mem_comm`` / ``estimate_comm`` / ``fsdp_layer_parts`` /
``fsdp_root_parts`` inputs) confirm them for every layout they hold. Each
function's docstring says which field is confirmed by the cases and which is
inferred.

Searchers price millions of layouts of one model at once: a :class:`LayoutBatch` holds
them as int64 arrays, and :func:`validate_batch`, :func:`derive_fields_batch` and
:func:`pipeline_stage_counts` give masks, fields and stage counts without a Python loop
over layouts. Each rule is written once, in NumPy form (``_expert_degrees``,
``_optimizer_ranks``, …, ``_constraint_rules``, ``_slot_layers``): the one-layout
functions run it on a batch of one.

Public API::

    Layout, RecomputePlan, LayoutError, LayoutBatch
    parse_layout(text, defaults=None, *, fsdp=None, recompute=None) -> Layout
    parse_recompute(text) -> RecomputePlan
    validate(model, layout, devices=None) -> None
    chunk_layer_counts(model, layout) -> list[list[int]]
    derive_fields(model, layout, *, network=None) -> dict[str, Any]
    build_stages(model, layout) -> list[list[list[str]]]
    LayoutBatch.from_arrays(defaults=None, *, d=…, t=…, …, fsdp=None, recompute=None, …) -> LayoutBatch
    LayoutBatch.from_layouts(layouts) -> LayoutBatch;  batch.layout(i) -> Layout;  batch.subset(mask) -> LayoutBatch
    validate_batch(model, batch, devices=None) -> np.ndarray[bool]
    layout_violations(model, batch, devices=None) -> np.ndarray[int16]  (index into LAYOUT_CONSTRAINTS, -1 valid)
    violation_message(model, batch, index, devices=None) -> str | None
    derive_fields_batch(model, batch, *, network=None, names=None, validated=False, compact=False)
        -> dict[str, np.ndarray | float | str | dict]
    pipeline_stage_counts(model, p, vp=1, *, recompute=None, offset=None) -> dict[str, np.ndarray]
    dp_comm_level_values(batch) -> tuple[int, ...]
"""

from __future__ import annotations

import copy
import functools
from dataclasses import InitVar, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from symbolic.vocabulary import STAGE_COUNT_NAMES, LayerType, resolve_algorithm

from ..runtime.inputs import DEGREE_MAX, DEVICES_MAX, LAYERS_MAX, bound, check_devices, flag, int_array, parse_whole, whole

if TYPE_CHECKING:  # pragma: no cover
    from hardware import System

    from .models import ModelConfig

__all__ = [
    "ARRAY_KEYS",
    "LAYOUT_CONSTRAINTS",
    "LAYOUT_FIELD_KEYS",
    "LAYOUT_FIELD_NAMES",
    "Layout",
    "LayoutBatch",
    "LayoutError",
    "ORIGINAL_CP_NETWORK",
    "RecomputePlan",
    "WHOLE_DP_GROUP",
    "build_stages",
    "check_batch",
    "chunk_layer_counts",
    "constraint_keys",
    "derive_fields",
    "derive_fields_batch",
    "direct_column",
    "dp_comm_level_values",
    "layout_violations",
    "parse_layout",
    "parse_recompute",
    "pipeline_stage_counts",
    "batch_stage_counts",
    "validate",
    "validate_batch",
    "violation_message",
]

#: The CP topology inputs the original's cost-model config holds by default, independent of
#: the device: every end-to-end reference case records these three values, for A2 and A3
#: alike (a later published version of ``_cost_model_variables.py`` defaults ``bw_intra`` to
#: 400). They equal A2's 8 devices per node and the NODE / CLUSTER figures of the original's
#: unused ``level_bandwidth`` helper, not A2's or A3's level bandwidths.
ORIGINAL_CP_NETWORK: Mapping[str, float] = {"device_per_node": 8.0, "bw_intra": 300.0, "bw_inter": 25.0}

# The original's transitional overlap fractions (derive_comm_flags; docs/model.md, oddity 13).
_DP_OVERLAP = 0.9
_TP_OVERLAP = 0.5

# HyperParallel's selective activation checkpointing: 1 keeps the op's activation, 0 recomputes it
# (published derive.py, HYPER_SELECTIVE_REC_OP). A run that is not selective keeps every op.
_SELECTIVE_REC_OP = {"attBMM": 1.0, "headCast": 0.0, "dropout": 0.0, "softmax": 0.0,
                     "normOp": 0.0, "gather": 0.0, "ffAct": 0.0}

_RECOMPUTE_MODES = ("full", "selective", "none")


class LayoutError(ValueError):
    """A layout that cannot run the model; the message names the constraint and the values."""


@dataclass(frozen=True)
class RecomputePlan:
    """Which body layers are recomputed, as the original's ``full_rec`` / ``sel_rec`` pair says.

    Attributes:
        mode: ``"full"`` (every body layer fully recomputed), ``"selective"`` (every body layer
            selectively recomputed) or ``"none"``.
        full_per_stage: when given, stage ``i`` fully recomputes its first
            ``full_per_stage[i]`` body layers (in stage order: chunk 0 first) and the rest as
            ``"selective"`` says (selective if ``mode == "selective"``, else not recomputed);
            ``mode == "full"`` with a list means the list wins, as the original's ``full_rec``
            override of ``activation_checkpoint: full`` does. The reference cases confirm
            "first layers of the stage" for one chunk per stage; with several chunks the
            first layers in stage order is our reading.
    """

    mode: str = "none"
    full_per_stage: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.mode not in _RECOMPUTE_MODES:
            raise LayoutError(f"recompute: mode must be one of {', '.join(_RECOMPUTE_MODES)}, got {self.mode!r}")
        if self.full_per_stage is not None:
            counts = tuple(self.full_per_stage)
            if len(counts) > DEGREE_MAX:
                raise LayoutError(f"recompute: {len(counts)} stages listed; at most {DEGREE_MAX} (the largest "
                                  f"pipeline degree)")
            for i, n in enumerate(counts):
                whole(f"recompute: full layers of stage {i}", n, minimum=0, maximum=LAYERS_MAX, error=LayoutError)
            counts = tuple(int(n) for n in counts)
            object.__setattr__(self, "full_per_stage", counts)

    @property
    def selective(self) -> bool:
        """Whether the run recomputes selectively (the original's ``sel_rec``): decides ``rec_op``."""
        return self.mode == "selective"

    def uniform(self) -> RecomputePlan:
        """The same plan without its per-stage list: what it says for a pipeline of another depth."""
        return RecomputePlan(self.mode)

    def __str__(self) -> str:
        if self.full_per_stage is None:
            return self.mode
        text = ",".join(str(n) for n in self.full_per_stage)
        return text if self.mode != "selective" else f"{text} (rest selective)"


def parse_recompute(text: str) -> RecomputePlan:
    """A recompute plan from its command-line spelling.

    Args:
        text: ``full``, ``selective``, ``none``, or ``N,N,…``: fully recomputed layers per
            pipeline stage (the first ones of each stage), the rest not recomputed.

    Raises:
        LayoutError: naming the text.
    """
    word = text.strip().lower()
    if word in _RECOMPUTE_MODES:
        return RecomputePlan(word)
    items = [item.strip() for item in word.split(",")]
    if not word or not all(item.isascii() and item.isdigit() for item in items):
        raise LayoutError(f"--recompute: expected full, selective, none or whole numbers N,N,… "
                          f"(fully recomputed layers per stage, ASCII digits), got {text!r}")
    return RecomputePlan("none", tuple(parse_whole(f"--recompute stage {i}", item, minimum=0, maximum=LAYERS_MAX,
                                                   error=LayoutError) for i, item in enumerate(items)))


def _positive_int(name: str, value: object, maximum: int | None = None) -> int:
    """*value* as a whole number >= 1 (and at most *maximum*): ``codegen.runtime.inputs.whole``, as a LayoutError."""
    return whole(name, value, minimum=1, maximum=maximum, error=LayoutError)


@dataclass(frozen=True)
class Layout:
    """A parallel layout and the run settings the communication model reads.

    Attributes:
        d, t, p, cp, ep: data-, tensor-, pipeline-, context- and expert-parallel degrees.
        m: micro-batches per step. b: micro-batch size (samples).
        vp: virtual pipeline chunks per stage (HyperParallel's ``pp_interleave_num``).
        etp: expert tensor-parallel degree; at most 1 means "the expert layers follow
            ``t`` where EP fits into DP" (HyperParallel's default for a MoE model is 1).
        os: ranks the optimizer shards a parameter over (MindSpore's
            ``optimizer_weight_shard_size``, HyperParallel's ``dp_shard``); ``None`` shards
            over the whole DP group.
        op: whether optimizer sharding is on (``enable_parallel_optimizer``).
        grad_shard: whether gradients are sharded too (``gradient_accumulation_shard``):
            DP communication level 3 instead of 2.
        sp: sequence parallelism (activations split over the TP group).
        fsdp: FSDP holds gradients sharded as the parameters (``grad_shard_as_params``).
        reshards: FSDP frees gathered parameters after each pass (``reshard_after_forward``
            and ``reshard_after_backward``).
        cp_algo: one of :data:`CP_ALGORITHMS` or an alias of ``symbolic.vocabulary.CP_ALIASES``.
        s: sequence length, overriding the model file's; ``None`` keeps it.
        offset: layers each stage holds beyond the even split of ``n_lay + n_mtp``: one
            integer per stage, or with ``vp > 1`` one tuple per chunk of one integer per
            stage (HyperParallel / MindFormers ``offset``); ``None`` is the even split.
        recompute: the recompute plan.
    """

    d: int
    t: int
    p: int
    m: int
    cp: int = 1
    ep: int = 1
    b: int = 1
    vp: int = 1
    etp: int = 1
    os: int | None = None
    op: bool = True
    grad_shard: bool = False
    sp: bool = False
    fsdp: bool = False
    reshards: bool = True
    cp_algo: str = "colossalai_cp"
    s: int | None = None
    offset: tuple[int, ...] | tuple[tuple[int, ...], ...] | None = None
    recompute: RecomputePlan = field(default_factory=RecomputePlan)

    def __post_init__(self) -> None:
        # The one input gate (codegen.runtime.inputs): whole numbers within their documented bounds.
        for name in ("d", "t", "p", "m", "cp", "ep", "b", "vp", "etp", "os", "s"):
            if getattr(self, name) is not None or name not in ("os", "s"):
                object.__setattr__(self, name, _positive_int(name, getattr(self, name), bound(name)))
        check_devices(self.d, self.t, self.cp, self.p, error=LayoutError)
        for name in ("op", "grad_shard", "sp", "fsdp", "reshards"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise LayoutError(f"{name}: must be true or false, got {getattr(self, name)!r}")
            object.__setattr__(self, name, bool(getattr(self, name)))
        try:  # the one set of names and aliases (symbolic.vocabulary); stored as the canonical label
            object.__setattr__(self, "cp_algo", resolve_algorithm(self.cp_algo).value)
        except ValueError as exc:
            raise LayoutError(str(exc)) from None
        if not isinstance(self.recompute, RecomputePlan):
            raise LayoutError(f"recompute: must be a RecomputePlan, got {self.recompute!r}")
        if self.offset is not None:
            object.__setattr__(self, "offset", _normalise_offset(self.offset))

    @property
    def devices(self) -> int:
        """Devices the layout occupies: d·t·cp·p (EP and ETP are carved out of these)."""
        return self.d * self.t * self.cp * self.p

    def __str__(self) -> str:
        text = f"d={self.d},t={self.t},p={self.p},cp={self.cp},ep={self.ep},m={self.m},b={self.b}"
        if self.vp != 1:
            text += f",vp={self.vp}"
        return text


def _normalise_offset(offset: object) -> tuple[int, ...] | tuple[tuple[int, ...], ...]:
    if isinstance(offset, (list, tuple)) and offset and all(isinstance(row, (list, tuple)) for row in offset):
        rows = tuple(tuple(row) for row in offset)
        flat = [n for row in rows for n in row]
    elif isinstance(offset, (list, tuple)):
        rows = tuple(offset)
        flat = list(rows)
    else:
        raise LayoutError(f"offset: must be a list of integers (one per stage) or of lists (one per chunk), "
                          f"got {offset!r}")
    if len(flat) > LAYERS_MAX:
        raise LayoutError(f"offset: {len(flat)} entries; at most {LAYERS_MAX} (the largest layer count)")
    for n in flat:
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
            raise LayoutError(f"offset: entries must be whole numbers, got {n!r}")
        whole("offset entry", n, minimum=-LAYERS_MAX, maximum=LAYERS_MAX, error=LayoutError)
    if isinstance(rows[0] if rows else None, tuple):
        return tuple(tuple(int(n) for n in row) for row in rows)
    return tuple(int(n) for n in rows)


# Keys of the layout text and their kinds.
_INT_KEYS = ("d", "t", "p", "cp", "ep", "m", "b", "vp", "etp", "os", "s")
_FLAG_KEYS = ("sp", "op", "grad_shard", "reshards")
_TEXT_KEYS = ("cp_algo",)
_REQUIRED_WITHOUT_DEFAULTS = ("d", "t", "p", "m")


def parse_layout(text: str, defaults: Layout | None = None, *, fsdp: bool | None = None,
                 recompute: str | RecomputePlan | None = None) -> Layout:
    """A layout from ``key=value,key=value`` text, over a model's default layout.

    Keys: ``d, t, p, cp, ep, m, b, vp, etp, os, s`` (whole numbers >= 1), ``sp, op,
    grad_shard, reshards`` (0 or 1), ``cp_algo`` (a name of :data:`CP_ALGORITHMS`).
    Keys left out keep the defaults' values. When ``p`` or ``vp`` differs from the
    defaults, their per-stage lists no longer fit: the offset falls back to the even split
    and a per-stage recompute list to its plan's mode (:meth:`RecomputePlan.uniform`),
    as the original's search regenerates both for another pipeline. Likewise an inherited
    ``os`` that does not divide a new ``d`` falls back to the whole DP group, MindSpore's rule;
    an ``os`` the text states must divide ``d`` (:func:`validate`).

    Args:
        text: e.g. ``"d=32,t=4,p=8,cp=1,ep=1,m=144,b=1"``; may be empty when *defaults* is given.
        defaults: usually ``load_model(name).layout``; without it ``d, t, p, m`` are required
            and the rest take the :class:`Layout` defaults.
        fsdp: when not ``None``, sets :attr:`Layout.fsdp` (the ``--fsdp`` switch).
        recompute: when not ``None``, the recompute plan, as text for :func:`parse_recompute`
            or a :class:`RecomputePlan`.

    Raises:
        LayoutError: for an unknown or repeated key, a malformed item, a value that is not a
            whole number (or 0/1, or a known name), a non-positive degree, or a missing key.
    """
    values: dict[str, Any] = {}
    for raw in (item.strip() for item in text.split(",")):
        if not raw:
            continue
        key, sep, value = raw.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise LayoutError(f"layout item {raw!r}: expected key=value")
        if key in values:
            raise LayoutError(f"layout key {key!r} is given twice")
        if key in _INT_KEYS:
            values[key] = parse_whole(f"layout {key}", value, minimum=1, maximum=bound(key), error=LayoutError)
        elif key in _FLAG_KEYS:
            if value not in ("0", "1"):
                raise LayoutError(f"layout {key}: expected 0 or 1, got {value!r}")
            values[key] = value == "1"
        elif key in _TEXT_KEYS:
            values[key] = value
        else:
            known = ", ".join(_INT_KEYS + _FLAG_KEYS + _TEXT_KEYS)
            raise LayoutError(f"layout key {key!r} is unknown; known keys: {known}")
    if defaults is None:
        missing = [key for key in _REQUIRED_WITHOUT_DEFAULTS if key not in values]
        if missing:
            raise LayoutError(f"layout {text!r} lacks {', '.join(missing)} (no model defaults to fall back on)")
        layout = Layout(**values)
    else:
        layout = replace(defaults, **values)
        if (layout.p, layout.vp) != (defaults.p, defaults.vp):
            layout = replace(layout, offset=None, recompute=defaults.recompute.uniform())
        if "os" not in values and layout.os is not None and layout.d % layout.os:
            layout = replace(layout, os=None)
    if fsdp is not None:
        layout = replace(layout, fsdp=fsdp)
    if recompute is not None:
        plan = recompute if isinstance(recompute, RecomputePlan) else parse_recompute(recompute)
        layout = replace(layout, recompute=plan)
    return layout



# --------------------------------------------------------------------------- batches of layouts

# Integer keys a batch holds one value of per layout, and the run settings its layouts share.
_ARRAY_KEYS = ("d", "t", "p", "m", "cp", "ep", "b", "vp", "etp", "os")
#: The integer keys a :class:`LayoutBatch` holds one value of per layout.
ARRAY_KEYS = _ARRAY_KEYS
_SHARED_KEYS = ("op", "grad_shard", "sp", "fsdp", "reshards", "cp_algo", "s", "offset", "recompute")

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
    for name in _ARRAY_KEYS:
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
_LOWEST = {name: 0 if name == "os" else 1 for name in _ARRAY_KEYS}
_HIGHEST = {name: bound(name) for name in _ARRAY_KEYS}


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
        for name in _ARRAY_KEYS:
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
_OS_INDEX = _ARRAY_KEYS.index("os")


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
    for name, value, given in zip(_ARRAY_KEYS, values, signature):
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
    for name, given in zip(_ARRAY_KEYS, signature):
        if given is True:
            state[name] = None
    if signature[_OS_INDEX] is None and defaults.os is not None and signature[0] is True:
        state["os"] = None
    if len(_KNOWN_SHAPES) >= 64:
        _KNOWN_SHAPES.clear()
    _KNOWN_SHAPES[key] = (defaults, state)


def _checked_settings(values: tuple[Any, ...], pipelines: tuple[Any, Any] = (None, None)) -> Any:
    """The normalised offset of run settings (in :data:`_SHARED_KEYS` order) that pass Layout's own checks,
    with the batch's ``offset_pipeline`` and ``recompute_pipeline`` (*pipelines*: None or pairs of
    whole numbers >= 1).

    A searcher builds many batches with the same settings: each set is checked once. The key holds
    each value's type and repr, so that ``1`` never stands in for ``True`` (they compare equal).

    Raises:
        LayoutError: as :class:`Layout` does, naming the setting.
    """
    # Settings hash as they are, with their types (so that 1 and True differ); the offset and the
    # pipelines by their repr, since a nested True would equal a 1 inside a tuple.
    key = tuple((type(value), repr(value) if name == "offset" else value) for name, value in zip(_SHARED_KEYS, values))
    key += (repr(pipelines),)
    offset = _SETTINGS_CHECKED.get(key, _UNCHECKED)
    if offset is _UNCHECKED:
        offset = Layout(d=1, t=1, p=1, m=1, **dict(zip(_SHARED_KEYS, values))).offset
        for name, pipeline in zip(("offset_pipeline", "recompute_pipeline"), pipelines):
            if pipeline is not None:
                if not isinstance(pipeline, tuple) or len(pipeline) != 2:
                    raise LayoutError(f"{name}: expected None or a pair (p, vp), got {pipeline!r}")
                for k, value in zip(("p", "vp"), pipeline):
                    _positive_int(f"{name} {k}", value)
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
        for name in _ARRAY_KEYS:
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
        object.__setattr__(self, "offset", _checked_settings(tuple(getattr(self, name) for name in _SHARED_KEYS),
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
        given = {name: value for name, value in zip(_ARRAY_KEYS, (d, t, p, m, cp, ep, b, vp, etp, os))
                 if value is not None}
        if defaults is None:
            missing = [key for key in _REQUIRED_WITHOUT_DEFAULTS if key not in given]
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
        for name in _ARRAY_KEYS:
            if name not in given:
                columns[name] = _default_column(getattr(template, name) or 0, length)
            elif ndim[name] >= 1:
                columns[name] = given[name]
            else:
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
            for name in _SHARED_KEYS:
                if getattr(layout, name) != getattr(first, name):
                    raise LayoutError(f"layouts[{i}].{name} = {getattr(layout, name)!r} differs from layouts[0].{name} "
                                      f"= {getattr(first, name)!r}: the layouts of a batch share their run settings")
        columns = {name: np.array([getattr(layout, name) for layout in layouts], dtype=np.int64)
                   for name in _ARRAY_KEYS if name != "os"}
        columns["os"] = np.array([layout.os or WHOLE_DP_GROUP for layout in layouts], dtype=np.int64)
        return cls(**columns, **{name: getattr(first, name) for name in _SHARED_KEYS})

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
            known = (tuple(getattr(self, name) for name in _SHARED_KEYS)
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
                          for column in (state[name] if name in state else getattr(self, name) for name in _ARRAY_KEYS))
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
        values = {name: int(getattr(self, name)[index]) for name in _ARRAY_KEYS}
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
            for name in _ARRAY_KEYS:
                if name in self.__dict__:  # (an os not derived yet is derived from the view's own d)
                    object.__setattr__(view, name, self.__dict__[name][selector])
            return view
        picked = replace(self, **{name: getattr(self, name)[selector] for name in _ARRAY_KEYS})
        if self.os_inherited_from() is not None:  # (os and d picked alike: os still follows from d)
            object.__setattr__(picked, "_os_rule", self.os_inherited_from())
        return picked


# --------------------------------------------------------------------------- derivation rules
#
# Each rule that turns layout keys into a config field is written once, here, in NumPy form:
# it takes whole numbers or int64 arrays (broadcast together) and gives the same, so that
# derive_fields (one layout) and derive_fields_batch (N layouts) run the same code. Shared run
# settings (op, sp, grad_shard) arrive as Python bools and are resolved before any arithmetic;
# so is any condition that is one value for the whole batch.


def _expert_degrees(d: Any, t: Any, cp: Any, ep: Any, etp: Any) -> tuple[np.ndarray, np.ndarray]:
    """(t_exp, d_exp): the TP and DP degrees an expert layer runs with.

    HyperParallel's ``derive_expert_degrees`` (published derive.py): with ``etp > 1`` the
    experts run ``etp``-way TP and ``d·t·cp / (etp·ep)``-way DP. Otherwise EP is carved out
    of DP while it fits (``t_exp = t``, ``d_exp = d / ep``); past DP it borrows TP's ranks and
    the experts run without TP (``t_exp = 1``, ``d_exp = d·t / ep``). A dense model is the
    ``ep = 1`` case: ``t_exp = t``, ``d_exp = d``. Confirmed by every case that holds them
    (e.g. DeepSeek d=16, t=4, ep=8 → 4, 2; d=8, t=8, cp=2, ep=16 → 1, 4). The original
    floors and clamps to 1; :func:`validate` rejects layouts where the division is not exact.
    """
    # A key or run setting the whole batch shares decides a branch before any arithmetic: the
    # branches not taken (integer divisions over millions of layouts) are never computed.
    expert_tp = etp > 1
    if np.ndim(ep) == 0 and ep <= 1:  # a dense model: EP fits in every DP group (d is at least 1)
        within_dp, t_exp_dp, d_exp_dp = True, t, d
    else:
        within_dp = d >= ep
        # (one integer division of what each layout divides: the same numbers as dividing both)
        t_exp_dp, d_exp_dp = np.where(within_dp, t, 1), np.where(within_dp, d, d * t) // ep
    if np.ndim(expert_tp) == 0 and not expert_tp:
        t_exp, d_exp = t_exp_dp, d_exp_dp
    else:
        t_exp, d_exp = np.where(expert_tp, etp, t_exp_dp), np.where(expert_tp, d * t * cp // (etp * ep), d_exp_dp)
    return t_exp, np.maximum(d_exp, 1)


def _optimizer_ranks(d: Any, os: Any, op: bool) -> np.ndarray:
    """Ranks the optimizer shards a parameter over, beyond TP (and CP): ``optimizer_ranks``.

    ``os`` when it divides DP, the whole DP group otherwise (MindSpore's rule, published
    derive.py); 1 without optimizer sharding. Note that the original parser reads an unset
    ``optimizer_weight_shard_size`` through ``max(1, size) or dp``, which is 1, not DP; a
    layout here says ``os=None`` (a batch :data:`WHOLE_DP_GROUP`) for "the whole DP group" instead.
    """
    if not op:
        return np.ones_like(d)
    stated = os != WHOLE_DP_GROUP
    if np.ndim(os) == 0:
        return np.where(d % os == 0, os, d) if stated else d
    divides = d % np.where(stated, os, 1) == 0  # the 1 only keeps the modulo defined where os is unset
    return np.where(stated & divides, os, d)


def _sequence_split(t: Any, sp: bool) -> np.ndarray:
    """``sp``: the TP degree with sequence parallelism (activations split over the TP group), else 1."""
    return t if sp else np.ones_like(t)


def _comm_t(t: Any) -> Any:
    """``comm_t = [t > 1]``: the layer communicates over TP."""
    return t > 1


def _comm_ep(ep: Any, n_exp: int) -> Any:
    """``comm_ep = [ep > 1 or n_exp > 1]``: the layer communicates over EP."""
    return (ep > 1) | (n_exp > 1)


def _comm_cp(cp: Any) -> Any:
    """``comm_cp = [cp > 1]``: the layer communicates over CP."""
    return cp > 1


def _dp_comm_level(degree: Any, op: bool, grad_shard: bool) -> np.ndarray:
    """``comm_d_non_exp`` of DP degree ``d`` (``comm_d_exp`` of ``d_exp``): 0 without DP (the degree
    is 1) or without optimizer sharding, else 3 with gradient sharding and 2 without."""
    if not op:
        return np.zeros_like(degree)
    return (degree != 1) * (3 if grad_shard else 2)


def dp_comm_level_values(batch: LayoutBatch) -> tuple[int, ...]:
    """The values ``comm_d_non_exp`` and ``comm_d_exp`` can take in *batch*, ascending.

    The rule (:func:`_dp_comm_level`) run on a DP degree of 1 and one of 2: 0, and the level
    the batch's shared ``op`` and ``grad_shard`` give (3 with gradient sharding, 2 without);
    only 0 without optimizer sharding.
    """
    return tuple(sorted({int(v) for v in np.ravel(_dp_comm_level(np.array([1, 2]), batch.op, batch.grad_shard))}))


def _optimizer_shards(ranks: Any, t: Any, cp: Any, t_exp: Any, d_exp: Any, n_exp: int,
                      op: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(shard_p_os_non_exp_partial, shard_p_os_exp, shard_p_os_exp_partial), published
    ``derive_optimizer_sharding``: ``R·t·cp``; ``d_exp·cp·t_exp`` (``cp·t_exp`` without
    optimizer sharding); ``gcd(n_exp, R·t_exp)``, with R the optimizer's ranks."""
    exp_dp = d_exp if op else 1
    return ranks * t * cp, exp_dp * cp * t_exp, np.gcd(n_exp, ranks * t_exp)


def _embedding_shards(ranks: Any, t: Any, p: Any) -> tuple[np.ndarray, Any]:
    """(shard_embed, gather_embed): ``R·t``, or ``R`` when ``p = 1`` (HyperParallel runs the
    vocabulary embedding data-parallel without pipelining); ``R``."""
    return np.where(p == 1, ranks, ranks * t), ranks


#: The fields :func:`derive_fields_batch` derives from the layout keys, one value per layout.
LAYOUT_FIELD_NAMES = (
    "b", "m", "d", "t", "p", "cp", "ep", "vp", "etp", "t_exp", "d_exp", "sp", "os_max_shard",
    "comm_t", "comm_ep", "comm_cp", "comm_d_non_exp", "comm_d_exp",
    "shard_p_os_non_exp_partial", "shard_p_os_exp", "shard_p_os_exp_partial", "shard_embed", "gather_embed",
)


def _key_columns(batch: LayoutBatch, compact: bool) -> dict[str, Any]:
    """The batch's integer keys by name; with *compact*, a key every layout shares is one value.

    A key shares one value when its column is a broadcast (stride 0): what
    :meth:`LayoutBatch.from_arrays` makes of a key given as one number or left to the defaults.
    The value is a NumPy integer, so that ``~``, ``&`` and ``|`` on the rules' comparisons stay
    logical, as on arrays.
    """
    if not compact:
        return {name: getattr(batch, name) for name in _ARRAY_KEYS}
    # (a shared key: a broadcast column, as LayoutBatch.shared_keys finds once per batch)
    state = batch.__dict__
    keys = _KeyColumns({name: state[name] if value is None else state[name][0]
                        for name, value in zip(_ARRAY_KEYS, batch.shared_keys()) if name in state})
    keys.batch = batch
    return keys


class _KeyColumns(dict):
    """The key columns of :func:`_key_columns`; a key the batch has not derived yet (a lazy ``os``) is read
    from the batch when a rule first asks for it."""

    batch: LayoutBatch

    def __missing__(self, name: str) -> Any:
        value = self[name] = getattr(self.batch, name)
        return value


class _Derivation:
    """The layout keys of one batch and the rule groups computed from them so far (each at most once)."""

    __slots__ = ("model", "batch", "keys", "groups")

    def __init__(self, model: ModelConfig, batch: LayoutBatch, compact: bool):
        self.model, self.batch = model, batch
        self.keys = _key_columns(batch, compact)
        self.groups: dict[str, Any] = {}

    def group(self, name: str) -> Any:
        if name not in self.groups:
            self.groups[name] = _RULE_GROUPS[name](self)
        return self.groups[name]


# Rules that give several fields at once, by group name; each reads keys and earlier groups.
_RULE_GROUPS: dict[str, Callable[[_Derivation], Any]] = {
    "experts": lambda x: _expert_degrees(x.keys["d"], x.keys["t"], x.keys["cp"], x.keys["ep"], x.keys["etp"]),
    "ranks": lambda x: _optimizer_ranks(x.keys["d"], x.keys["os"], x.batch.op),
    "shards": lambda x: _optimizer_shards(x.group("ranks"), x.keys["t"], x.keys["cp"], *x.group("experts"),
                                          x.model.n_exp, x.batch.op),
}

# Each layout field from the keys and the rule groups.
_FIELD_RULES: dict[str, Callable[[_Derivation], Any]] = {
    **{key: (lambda x, key=key: x.keys[key]) for key in ("b", "m", "d", "t", "p", "cp", "ep", "vp", "etp")},
    "t_exp": lambda x: x.group("experts")[0],
    "d_exp": lambda x: x.group("experts")[1],
    "sp": lambda x: _sequence_split(x.keys["t"], x.batch.sp),
    "os_max_shard": lambda x: x.group("ranks"),
    # (each switch alone: a pricer usually reads one or two of them)
    "comm_t": lambda x: _comm_t(x.keys["t"]),
    "comm_ep": lambda x: _comm_ep(x.keys["ep"], x.model.n_exp),
    "comm_cp": lambda x: _comm_cp(x.keys["cp"]),
    "comm_d_non_exp": lambda x: _dp_comm_level(x.keys["d"], x.batch.op, x.batch.grad_shard),
    "comm_d_exp": lambda x: _dp_comm_level(x.group("experts")[1], x.batch.op, x.batch.grad_shard),
    "shard_p_os_non_exp_partial": lambda x: x.group("shards")[0],
    "shard_p_os_exp": lambda x: x.group("shards")[1],
    "shard_p_os_exp_partial": lambda x: x.group("shards")[2],
    "shard_embed": lambda x: _embedding_shards(x.group("ranks"), x.keys["t"], x.keys["p"])[0],
    "gather_embed": lambda x: x.group("ranks"),
}
assert tuple(_FIELD_RULES) == LAYOUT_FIELD_NAMES

#: The layout keys each layout field follows from (the keys its rule above reads, through the rule
#: groups): a field of layouts that agree on these keys is the same. A compiled pricer tabulates a
#: field over the values of these keys alone (``codegen.pricing.fused``); tests/test_fused_pricer.py
#: checks the declaration against the rules.
LAYOUT_FIELD_KEYS: dict[str, tuple[str, ...]] = {
    **{key: (key,) for key in ("b", "m", "d", "t", "p", "cp", "ep", "vp", "etp")},
    "t_exp": ("d", "t", "cp", "ep", "etp"),
    "d_exp": ("d", "t", "cp", "ep", "etp"),
    "sp": ("t",),
    "os_max_shard": ("d", "os"),
    "comm_t": ("t",),
    "comm_ep": ("ep",),
    "comm_cp": ("cp",),
    "comm_d_non_exp": ("d",),
    "comm_d_exp": ("d", "t", "cp", "ep", "etp"),
    "shard_p_os_non_exp_partial": ("d", "os", "t", "cp"),
    "shard_p_os_exp": ("d", "t", "cp", "ep", "etp"),
    "shard_p_os_exp_partial": ("d", "os", "t", "cp", "ep", "etp"),
    "shard_embed": ("d", "os", "t", "p"),
    "gather_embed": ("d", "os"),
}
assert tuple(LAYOUT_FIELD_KEYS) == LAYOUT_FIELD_NAMES


def direct_column(model: ModelConfig, batch: LayoutBatch, name: str, level: float | None = None
                  ) -> Callable[[LayoutBatch, dict[str, Any]], np.ndarray] | None:
    """How to write layout field *name* of a batch shaped like *batch* as a fresh float64 column straight
    from its key columns, where the rules above allow it without a whole derivation; ``None`` elsewhere.

    With *level*, the column is the field's switch for that level (1.0 where the field has it), the
    form the ZeRO terms read. The result takes a batch and a dictionary the writers of one call share
    (what several of them read is computed once there), and holds for every batch of *model* with the
    same run settings (``LayoutBatch.settings``) whose column of the field's keys are arrays where
    *batch*'s are. In one NumPy pass over one key column: a key field as it is (``b``, ``t``, …),
    ``comm_t``, ``comm_cp`` and ``comm_ep`` (the degree above 1; ``comm_ep`` is 1 throughout in a model
    of several experts) and the switch of ``comm_d_non_exp`` at the level the settings give (``d`` above
    1); from the expert degrees (:func:`_expert_degrees`, once per call): ``t_exp``, ``d_exp`` and the
    switch of ``comm_d_exp`` (``d_exp`` above 1). A pricer writes the columns its kernels read this way;
    the numbers are the rules' (tests/test_pricer_fast_paths.py).
    """
    # The level a DP degree above 1 has under the settings (0 without optimizer sharding: no switch is on).
    sharded = max(dp_comm_level_values(batch))
    if level is None and name in LAYOUT_FIELD_KEYS and LAYOUT_FIELD_KEYS[name] == (name,):
        return lambda batch, _memo: getattr(batch, name).astype(np.float64)
    if level is None and name == "comm_ep" and model.n_exp > 1:
        return lambda batch, _memo: np.ones(len(batch))
    if level is None and name in ("comm_t", "comm_cp", "comm_ep"):
        return _compare_with_one(LAYOUT_FIELD_KEYS[name][0], np.greater)
    if level is not None and name == "comm_d_non_exp" and sharded and level == sharded:
        return _compare_with_one("d", np.not_equal)
    if level is None and name in ("t_exp", "d_exp"):
        which = 0 if name == "t_exp" else 1
        return lambda batch, memo: _expert_columns(model, batch, memo)[which].astype(np.float64)
    if level is not None and name == "comm_d_exp" and sharded and level == sharded:
        def switch(batch: LayoutBatch, memo: dict[str, Any]) -> np.ndarray:
            d_exp = _expert_columns(model, batch, memo)[1]
            return np.not_equal(d_exp, 1, out=np.empty(np.shape(d_exp)))
        return switch
    return None


def _compare_with_one(key: str, compare: Callable[..., np.ndarray]) -> Callable[[LayoutBatch, dict[str, Any]], np.ndarray]:
    def column(batch: LayoutBatch, _memo: dict[str, Any]) -> np.ndarray:
        values = getattr(batch, key)
        return compare(values, 1, out=np.empty(len(values)))  # (0/1 written straight as float64)
    return column


def _expert_columns(model: ModelConfig, batch: LayoutBatch, memo: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """``(t_exp, d_exp)`` of every layout of *batch* (arrays of its length): the derivation's ``experts`` rule
    group, evaluated once per *memo*."""
    found = memo.get("experts")
    if found is None:
        found = memo["experts"] = tuple(x if type(x) is np.ndarray and x.ndim else np.full(len(batch), x)
                                        for x in _Derivation(model, batch, compact=True).group("experts"))
    return found


def _layout_fields(model: ModelConfig, batch: LayoutBatch, names: Sequence[str] | None = None, *,
                   compact: bool = False) -> dict[str, Any]:
    """The config fields that follow from the layout keys, as int or bool arrays over the batch.

    Args:
        names: the fields wanted (others are not computed); ``None``: all of
            :data:`LAYOUT_FIELD_NAMES`. Names that are no layout field are skipped.
        compact: keys every layout shares are one value (:func:`_key_columns`), and so is each
            field that follows from such keys alone.
    """
    derivation = _Derivation(model, batch, compact)
    wanted = LAYOUT_FIELD_NAMES if names is None else [name for name in names if name in _FIELD_RULES]
    return {name: _FIELD_RULES[name](derivation) for name in wanted}


def _shared_fields(batch: LayoutBatch, network: System | None) -> dict[str, Any]:
    """The config fields the run settings alone fix: the same for every layout of the batch."""
    out: dict[str, Any] = {
        "comm_dp_overlap": _DP_OVERLAP,
        "comm_tp_overlap": _TP_OVERLAP,
        "grad_shard_as_params": float(batch.fsdp),
        "reshards": float(batch.reshards),
        "shard_spans_cp": 0.0,
        "rec_op": dict(_SELECTIVE_REC_OP) if batch.recompute.selective else dict.fromkeys(_SELECTIVE_REC_OP, 1.0),
        "cp_algo": batch.cp_algo,
        "layer_stack": 0.0,
    }
    if network is None:
        out.update(ORIGINAL_CP_NETWORK)
    else:
        bindings = network.bindings()
        for key in ("device_per_node", "bw_intra", "bw_inter", "device_intra_node_num"):
            out[key] = float(bindings[key])
    return out


def _float_column(value: Any, length: int) -> np.ndarray:
    """*value* (an array over the batch, or one value for all of it) as a fresh float64 array of *length*."""
    if type(value) is np.ndarray and value.shape == (length,):  # the usual column
        return value.astype(np.float64)
    array = np.asarray(value)
    return array.astype(np.float64) if array.shape == (length,) else np.full(length, array, dtype=np.float64)


@functools.lru_cache(maxsize=256)
def _layout_only(names: tuple[str, ...]) -> bool:
    """Whether every one of *names* is a layout field (:data:`LAYOUT_FIELD_NAMES`)."""
    return all(name in _FIELD_RULES for name in names)


def _all_fields(model: ModelConfig, batch: LayoutBatch, network: System | None,
                names: Sequence[str] | None = None, *, compact: bool = False) -> dict[str, Any]:
    """The fields of :func:`derive_fields_batch` (all, or *names*), without validating the batch."""
    n = len(batch)
    if names is not None and _layout_only(tuple(names)):
        # Layout fields alone (a pricer that keeps the shared ones from an earlier call of the same
        # settings): nothing of the model or the run settings to assemble.
        # (the usual column converted in place of the call: a pricer derives a few fields per call)
        return {name: value.astype(np.float64) if type(value) is np.ndarray and value.shape == (n,)
                else float(value) if compact and (type(value) is not np.ndarray or not value.ndim)
                else _float_column(value, n) for name, value in _layout_fields(model, batch, names, compact=compact).items()}
    out: dict[str, Any] = model.fields()
    if batch.s is not None:
        out["s"] = float(batch.s)
    shared = _shared_fields(batch, network)
    if names is not None:
        unknown = sorted(set(names) - set(out) - set(shared) - set(LAYOUT_FIELD_NAMES))
        if unknown:
            known = sorted(set(out) | set(shared) | set(LAYOUT_FIELD_NAMES))
            raise ValueError(f"names: no such field {', '.join(map(repr, unknown))}; the fields are {', '.join(known)}")
    for name, value in _layout_fields(model, batch, names, compact=compact).items():
        out[name] = float(value) if compact and np.ndim(value) == 0 else _float_column(value, n)
    out.update(shared)
    if names is None:
        return out
    return {name: out[name] for name in names}


# --------------------------------------------------------------------------- pipeline split


def _even_split_leaves_empty(total: int, p: Any, vp: Any) -> Any:
    """Whether an even split of *total* layers over ``p·vp`` chunks leaves a chunk without one."""
    return p * vp > total


def _offset_pipeline(offset: tuple[int, ...] | tuple[tuple[int, ...], ...]) -> tuple[int, int]:
    """``(p, vp)`` an offset is written for: one entry per stage, or one row of p per chunk (0: ragged)."""
    if offset and isinstance(offset[0], tuple):
        widths = {len(row) for row in offset}  # type: ignore[arg-type]
        return (widths.pop() if len(widths) == 1 else 0), len(offset)
    return len(offset), 1


def _slot_layers(model: ModelConfig, p: int, vp: int,
                 offset: tuple[int, ...] | tuple[tuple[int, ...], ...] | None) -> np.ndarray:
    """Body layers per (stage, chunk) slot, shape ``(p, vp)``: see :func:`chunk_layer_counts`."""
    total = model.n_lay + model.n_mtp
    slots = p * vp
    if offset is None:
        if _even_split_leaves_empty(total, p, vp):
            raise LayoutError(f"p·vp <= n_lay + n_mtp: {p}·{vp} = {slots} pipeline chunks for "
                              f"{total} layers ({model.n_lay} + {model.n_mtp} MTP) leaves a chunk empty")
        # Slot (stage s, chunk c) is number c·p + s in model order; the first total % slots get one more.
        order = np.arange(vp) * p + np.arange(p)[:, None]
        return total // slots + (order < total % slots).astype(np.int64)
    base = total // slots
    nested = bool(offset) and isinstance(offset[0], tuple)
    if vp == 1 and not nested:
        if len(offset) != p:
            raise LayoutError(f"offset has {len(offset)} entries, but p = {p} stages: {list(offset)}")
        rows = base + np.array(offset, dtype=np.int64)[:, None]
    else:
        if not nested or _offset_pipeline(offset) != (p, vp):
            raise LayoutError(f"offset must be vp = {vp} lists of p = {p} integers (chunk, then stage), "
                              f"got {offset!r}")
        rows = base + np.array(offset, dtype=np.int64).T
    negative = np.argwhere(rows < 0)
    if len(negative):
        s, c = (int(i) for i in negative[0])
        raise LayoutError(f"offset gives stage {s} chunk {c} {rows[s, c]} layers (even split {base} + offset)")
    placed = int(rows.sum())
    if placed != total:
        raise LayoutError(f"offset places {placed} layers, but the model has n_lay + n_mtp = "
                          f"{model.n_lay} + {model.n_mtp} = {total}: offset {offset!r} over an even split of {base}")
    return rows


def chunk_layer_counts(model: ModelConfig, layout: Layout) -> list[list[int]]:
    """Body layers per stage and chunk: ``counts[stage][chunk]``, MTP layers included.

    ``n_lay + n_mtp`` layers (HyperParallel puts the MTP layers into the offset balancing
    whenever the model has them, ``mtp_in_offset``). Without an offset, each (chunk, stage)
    slot holds ``total // (p·vp)`` layers and the first ``total % (p·vp)`` slots in model
    order (chunk 0's stages first) one more: for one chunk that is "the first stages one
    more each", HyperParallel's ``_balanced_offset``, confirmed by the DeepSeek cases
    (62 layers over 16 stages: 14 × 4, then 3, 3). With several chunks and a remainder the
    order is our reading. With an offset: ``total // (p·vp) + offset[...]``.

    Raises:
        LayoutError: when the offset's shape does not fit ``p`` and ``vp``, its layers do not
            add up to ``n_lay + n_mtp``, a slot would hold fewer than 0 layers, or the even
            split would leave a slot empty.
    """
    return _slot_layers(model, layout.p, layout.vp, layout.offset).tolist()


def _recompute_list_error(plan: RecomputePlan, p: int, stage_layers: Sequence[int] | None) -> str | None:
    """Why the plan's per-stage list does not fit a pipeline of *p* stages holding *stage_layers*; ``None`` if it does."""
    counts = plan.full_per_stage
    if counts is None:
        return None
    if len(counts) != p:
        return f"the recompute list needs one entry per stage: {len(counts)} entries {list(counts)}, p = {p}"
    for stage, (n, layers) in enumerate(zip(counts, stage_layers or ())):
        if n > layers:
            return f"recompute: stage {stage} holds {layers} layers, cannot fully recompute {n}"
    return None


def _full_recompute_per_stage(plan: RecomputePlan, stage_layers: np.ndarray) -> np.ndarray:
    """Fully recomputed body layers of each stage (its first ones, in stage order)."""
    if plan.full_per_stage is not None:
        return np.array(plan.full_per_stage, dtype=np.int64)
    return stage_layers if plan.mode == "full" else np.zeros_like(stage_layers)


# --------------------------------------------------------------------------- validation

#: Names of the constraints a layout must meet, in the order :func:`validate` checks them;
#: :func:`layout_violations` gives, per layout, the index of the first one it breaks.
LAYOUT_CONSTRAINTS = (
    "devices", "heads", "kv_heads", "sequence", "ulysses_heads", "virtual_pipeline", "pipeline_split",
    "dense_ep", "experts", "ep_within_dp_tp", "expert_dp_with_etp", "ep_divides_d", "ep_divides_dt",
    "expert_width", "optimizer_shard", "recompute_list_length", "recompute_list_layers",
)


def _check_devices(devices: int | None) -> None:
    if devices is not None:
        whole("devices", devices, minimum=1, maximum=DEVICES_MAX, error=LayoutError)


def _succeeds(compute: Any) -> bool:
    try:
        compute()
    except LayoutError:
        return False
    return True


def _constraint_rules(model: ModelConfig, batch: LayoutBatch,
                      devices: int | None) -> list[tuple[str, tuple[str, ...], Callable[..., Any]]]:
    """The constraints of :data:`LAYOUT_CONSTRAINTS` that apply, in order, as ``(name, keys read, rule)``.

    ``rule(*keys)`` takes the keys it reads (whole numbers or arrays, broadcast together) and
    says where they break the constraint (a bool or bool array). It is elementwise: a
    layout's answer depends on its own keys only, so it may be evaluated on a table of key
    values instead of the layouts (:func:`layout_violations`). A constraint is only
    meaningful where the earlier ones hold (as :func:`validate`'s checks run in order);
    elsewhere its rule may say anything, but never fails to compute.
    """
    s = batch.s or model.s
    total = model.n_lay + model.n_mtp
    rules: list[tuple[str, tuple[str, ...], Callable[..., Any]]] = []
    if devices is not None:
        rules.append(("devices", ("d", "t", "cp", "p"), lambda d, t, cp, p: d * t * cp * p != devices))
    rules.append(("heads", ("t",), lambda t: model.a % t != 0))
    if model.dc_kv == 0:
        kv = model.n_kv
        rules.append(("kv_heads", ("t",), lambda t: np.where(kv >= t, kv % t != 0, t % kv != 0)))
    rules.append(("sequence", ("cp",), lambda cp: s % cp != 0))
    if batch.cp_algo == "ulysses_cp":
        rules.append(("ulysses_heads", ("t", "cp"), lambda t, cp: (model.a // t) % cp != 0))
    rules.append(("virtual_pipeline", ("p", "vp"), lambda p, vp: (vp > 1) & (p == 1)))

    def pipeline_split(p: Any, vp: Any) -> Any:
        broken = _even_split_leaves_empty(total, p, vp)
        if batch.offset is None:
            return broken
        offset_applies, _ = batch.stage_lists_apply(p, vp)
        shape = _offset_pipeline(batch.offset)
        offset_fits = (p == shape[0]) & (vp == shape[1]) & \
            (shape[0] >= 1 and _succeeds(lambda: _slot_layers(model, *shape, batch.offset)))
        return np.where(offset_applies, np.logical_not(offset_fits), broken)

    rules.append(("pipeline_split", ("p", "vp"), pipeline_split))

    if model.n_exp <= 1:
        rules.append(("dense_ep", ("ep",), lambda ep: ep != 1))
    else:
        rules += [
            ("experts", ("ep",), lambda ep: model.n_exp % ep != 0),
            ("ep_within_dp_tp", ("ep", "d", "t"), lambda ep, d, t: ep > d * t),
            ("expert_dp_with_etp", ("etp", "d", "t", "cp", "ep"),
             lambda etp, d, t, cp, ep: (etp > 1) & ((d * t * cp) % (etp * ep) != 0)),
            ("ep_divides_d", ("etp", "ep", "d"), lambda etp, ep, d: ~(etp > 1) & (ep <= d) & (d % ep != 0)),
            ("ep_divides_dt", ("etp", "ep", "d", "t"),
             lambda etp, ep, d, t: ~(etp > 1) & (ep > d) & ((d * t) % ep != 0)),
            ("expert_width", ("d", "t", "cp", "ep", "etp"),
             lambda d, t, cp, ep, etp: model.hff_exp % _expert_degrees(d, t, cp, ep, etp)[0] != 0),
        ]
    rules.append(("optimizer_shard", ("d", "os"),
                  lambda d, os: (os != WHOLE_DP_GROUP) & (d % np.where(os != WHOLE_DP_GROUP, os, 1) != 0)))

    plan = batch.recompute
    if plan.full_per_stage is not None:
        stages = len(plan.full_per_stage)

        def list_length(p: Any, vp: Any) -> Any:
            return batch.stage_lists_apply(p, vp)[1] & (p != stages)

        def list_layers(p: Any, vp: Any) -> Any:
            # The list's own pipeline depth fixes p; the stage sizes then vary only with vp.
            listed = batch.stage_lists_apply(p, vp)[1] & (p == stages)
            if np.ndim(vp):
                chunk_values = np.unique(vp[listed]).tolist()  # a single True or False picks all or none
            else:
                chunk_values = [int(vp)] if np.any(listed) else []
            too_many: Any = False
            for chunks in chunk_values:
                with_offset, _ = batch.stage_lists_apply(stages, chunks)
                try:
                    slots = _slot_layers(model, stages, chunks, batch.offset if with_offset else None)
                except LayoutError:
                    continue  # pipeline_split rejects these layouts first
                if _recompute_list_error(plan, stages, slots.sum(axis=1).tolist()) is not None:
                    too_many = too_many | (listed & (vp == chunks))
            return too_many

        rules += [("recompute_list_length", ("p", "vp"), list_length),
                  ("recompute_list_layers", ("p", "vp"), list_layers)]
    return rules


def constraint_keys(model: ModelConfig, batch: LayoutBatch, devices: int | None = None) -> frozenset[str]:
    """The layout keys the constraints of *model* and *batch*'s settings read (:func:`validate_batch`'s):
    layouts that agree on these keys are all valid or break the same first constraint."""
    return frozenset(key for _name, reads, _rule in _constraint_rules(model, batch, devices) for key in reads)


def _violation_message(model: ModelConfig, layout: Layout, devices: int | None, constraint: str) -> str:
    """The error text of *constraint* for one layout that breaks it, naming the values."""
    d, t, p, cp, ep = layout.d, layout.t, layout.p, layout.cp, layout.ep
    if constraint == "devices":
        return (f"d·t·cp·p must equal the device count: {d}·{t}·{cp}·{p} = {layout.devices}, "
                f"devices = {devices}")
    if constraint == "heads":
        return f"t must divide the attention heads a: a = {model.a}, t = {t}"
    if constraint == "kv_heads":
        return (f"t must divide the KV heads n_kv (or n_kv divide t, KV heads replicated): "
                f"n_kv = {model.n_kv}, t = {t}")
    if constraint == "sequence":
        return f"cp must divide the sequence length s: s = {layout.s or model.s}, cp = {cp}"
    if constraint == "ulysses_heads":
        return (f"Ulysses CP splits each TP rank's heads: cp must divide a/t = {model.a}/{t} = "
                f"{model.a // t}, cp = {cp}")
    if constraint == "virtual_pipeline":
        return f"vp > 1 (virtual pipeline chunks) needs p > 1: vp = {layout.vp}, p = {p}"
    if constraint == "pipeline_split":
        try:
            chunk_layer_counts(model, layout)
        except LayoutError as exc:
            return str(exc)
    if constraint == "dense_ep":
        return f"ep must be 1 for a dense model (n_exp = {model.n_exp}), got ep = {ep}"
    if constraint == "experts":
        return f"ep must divide the routed experts n_exp: n_exp = {model.n_exp}, ep = {ep}"
    if constraint == "ep_within_dp_tp":
        return f"ep <= d·t: the experts spread over a stage's DP×TP ranks; ep = {ep}, d·t = {d}·{t} = {d * t}"
    if constraint == "expert_dp_with_etp":
        return (f"etp·ep must divide d·t·cp (expert DP = d·t·cp/(etp·ep)): etp = {layout.etp}, "
                f"ep = {ep}, d·t·cp = {d * t * cp}")
    if constraint == "ep_divides_d":
        return f"ep must divide d (expert DP = d/ep while ep <= d): d = {d}, ep = {ep}"
    if constraint == "ep_divides_dt":
        return f"ep must divide d·t (expert DP = d·t/ep once ep > d): d·t = {d * t}, ep = {ep}"
    if constraint == "expert_width":
        t_exp, _ = _expert_degrees(d, t, cp, ep, layout.etp)
        return (f"the expert TP degree t_exp must divide the expert width hff_exp: "
                f"hff_exp = {model.hff_exp}, t_exp = {int(t_exp)}")
    if constraint == "optimizer_shard":
        return f"os (optimizer shard ranks) must divide d: d = {d}, os = {layout.os}"
    if constraint in ("recompute_list_length", "recompute_list_layers"):
        layers = None
        if len(layout.recompute.full_per_stage or ()) == p:  # the stages' sizes matter once the length fits
            layers = [sum(row) for row in chunk_layer_counts(model, layout)]
        message = _recompute_list_error(layout.recompute, p, layers)
        if message is not None:
            return message
    raise AssertionError(f"layout {layout} breaks no constraint {constraint!r}")  # pragma: no cover


_CONSTRAINT_CODES = {name: code for code, name in enumerate(LAYOUT_CONSTRAINTS)}

#: Largest table of key values :func:`layout_violations` evaluates the rules on, instead of the layouts.
_RULE_TABLE_LIMIT = 1 << 16

#: The first broken constraint of a layout that breaks none, as uint16: -1 once viewed as int16.
_NO_VIOLATION = np.uint16(0xFFFF)


def _key_grid(keys: Mapping[str, Any], varying: Sequence[str], tops: Sequence[int]) -> dict[str, Any]:
    """*keys* with each *varying* key replaced by its value in every combination of values ``0..top-1``.

    The first key varies slowest, so that combination ``((v0·top1 + v1)·top2 + v2)…`` is entry
    ``v0, v1, v2, …``. Keys are at least 1 (``os`` at least 0): a 0 stands in as 1, so that no
    entry divides by it; no layout reads those entries.
    """
    grid = dict(keys)
    for i, key in enumerate(varying):
        values = np.arange(tops[i], dtype=np.int64)
        if key != "os":
            values[0] = 1
        grid[key] = np.broadcast_to(values.reshape((-1,) + (1,) * (len(varying) - 1 - i)), tuple(tops)).ravel()
    return grid


#: Layouts per block of :func:`layout_violations`: its per-layout temporaries stay in cache.
_VALIDATION_BLOCK = 1 << 16

#: Batches shorter than this are checked rule by rule over their layouts (no table pays off).
_SMALL_BATCH = 1 << 10

#: Tables of first broken constraints already built, by model, run settings, device count, keys
#: and their ranges: a searcher checking its layouts block by block builds each once.
_RULE_TABLES: dict[tuple[Any, ...], np.ndarray] = {}
_RULE_TABLES_KEPT = 256


def _rule_table(model: ModelConfig, batch: LayoutBatch, devices: int | None, keys: Mapping[str, Any],
                varying: tuple[str, ...], tops: list[int],
                members: Sequence[tuple[int, tuple[str, ...], Callable[..., Any]]]) -> np.ndarray:
    """The first constraint of *members* broken at each combination of the *varying* keys' values (cached)."""
    settings = batch.settings()
    shared = tuple((key, int(value)) for key, value in keys.items() if np.ndim(value) == 0)
    cache_key = (model, settings, devices, shared, varying, tuple(tops))
    table = _RULE_TABLES.get(cache_key)
    if table is None:
        grid = _key_grid(keys, varying, tops)
        size = len(next(iter(grid[key] for key in varying)))
        table = np.full(size, _NO_VIOLATION)
        for code, reads, rule in reversed(members):  # the earliest broken constraint is written last
            table[np.broadcast_to(rule(*(grid[key] for key in reads)), (size,))] = code
        if len(_RULE_TABLES) >= _RULE_TABLES_KEPT:
            _RULE_TABLES.clear()
        _RULE_TABLES[cache_key] = table
    return table


def layout_violations(model: ModelConfig, batch: LayoutBatch, devices: int | None = None) -> np.ndarray:
    """Per layout, the first constraint it breaks: an index into :data:`LAYOUT_CONSTRAINTS`, or -1.

    The constraints are :func:`validate`'s, checked in its order over the whole batch at once
    (:func:`_violation_blocks` block by block; a short batch, such as the one layout of
    :func:`validate`, runs every rule over its layouts at once).

    Raises:
        LayoutError: for a device count that is not a whole number >= 1.
    """
    _check_devices(devices)
    n = len(batch)
    if n >= _SMALL_BATCH:
        first = np.empty(n, dtype=np.int16)
        for rows, codes in _violation_blocks(model, batch, devices, block=_VALIDATION_BLOCK):
            first[rows] = codes
        return first
    keys = _key_columns(batch, compact=False)
    first = np.full(n, -1, dtype=np.int16)
    for name, reads, rule in reversed(_constraint_rules(model, batch, devices)):  # the earliest is written last
        mask = rule(*[keys[key] for key in reads])
        if np.ndim(mask) == 0:
            if mask:
                first[:] = _CONSTRAINT_CODES[name]
        else:
            first[mask] = _CONSTRAINT_CODES[name]
    return first


def _violation_blocks(model: ModelConfig, batch: LayoutBatch, devices: int | None = None, *,
                            block: int = _VALIDATION_BLOCK) -> Iterator[tuple[slice, np.ndarray]]:
    """:func:`layout_violations` of consecutive blocks of *block* layouts: ``(rows, codes)`` per block.

    Each block's keys are read once, and its temporaries stay in cache.

    How: keys every layout shares (:func:`_key_columns`) are single values, and the rules
    (:func:`_constraint_rules`) that read the same varying keys form a group. When those
    keys' values in a block span a small table (their ranges multiplied: at most
    ``_RULE_TABLE_LIMIT`` entries and half the block), the group's rules run once per entry
    (the table is kept for later blocks and batches of the same model and settings) and each
    layout looks its answer up — one gather instead of integer divisions per rule and layout,
    and exact, because each rule is elementwise. Otherwise the rules run over the layouts.

    Raises:
        LayoutError: for a device count that is not a whole number >= 1, or a block below 1.
    """
    _check_devices(devices)
    _positive_int("block", block)
    keys = _key_columns(batch, compact=True)
    groups: dict[tuple[str, ...], list[tuple[int, tuple[str, ...], Callable[..., Any]]]] = {}
    for name, reads, rule in _constraint_rules(model, batch, devices):
        varying = tuple(key for key in _ARRAY_KEYS if key in reads and np.ndim(keys[key]))
        groups.setdefault(varying, []).append((_CONSTRAINT_CODES[name], reads, rule))
    constant = _NO_VIOLATION  # the first broken constraint the shared values decide alone
    for code, reads, rule in groups.pop((), []):
        if rule(*(keys[key] for key in reads)):
            constant = np.uint16(code)
            break
    tables: dict[tuple[Any, ...], np.ndarray] = {}
    n = len(batch)
    for start in range(0, n, block):
        rows = slice(start, min(start + block, n))
        part = {key: value[rows] if np.ndim(value) else value for key, value in keys.items()}
        out = np.full(rows.stop - rows.start, constant)
        for varying, members in groups.items():
            tops = [int(part[key].max()) + 1 for key in varying]
            if int(np.prod(tops)) <= min(_RULE_TABLE_LIMIT, len(out) // 2):
                table = tables.get((varying, *tops))
                if table is None:
                    table = tables[(varying, *tops)] = _rule_table(model, batch, devices, keys, varying, tops, members)
                index = part[varying[0]]
                for top, key in zip(tops[1:], varying[1:]):
                    index = index * top + part[key]
                np.minimum(out, np.take(table, index, mode="clip"), out=out)  # in range: the table spans the maxima
            else:
                codes = np.full(len(out), _NO_VIOLATION)
                for code, reads, rule in reversed(members):  # the earliest broken constraint is written last
                    codes[np.broadcast_to(rule(*(part[key] for key in reads)), codes.shape)] = code
                np.minimum(out, codes, out=out)
        yield rows, out.view(np.int16)


def validate_batch(model: ModelConfig, batch: LayoutBatch, devices: int | None = None) -> np.ndarray:
    """A bool array: which layouts of *batch* can run *model* (the constraints of :func:`validate`).

    Raises:
        LayoutError: for a device count that is not a whole number >= 1.
    """
    return layout_violations(model, batch, devices) < 0


def violation_message(model: ModelConfig, batch: LayoutBatch, index: int, devices: int | None = None) -> str | None:
    """The error :func:`validate` gives for layout *index* of *batch*, or ``None`` when it is valid."""
    layout = batch.layout(index)
    code = int(layout_violations(model, batch.subset([index]), devices)[0])
    return None if code < 0 else _violation_message(model, layout, devices, LAYOUT_CONSTRAINTS[code])


def validate(model: ModelConfig, layout: Layout, devices: int | None = None) -> None:
    """Check that *layout* can run *model*.

    Constraints (each error names it and the values; :data:`LAYOUT_CONSTRAINTS` in this
    order, the same rules as :func:`validate_batch`):

    * ``d·t·cp·p == devices`` when a device count is given;
    * ``t`` divides the heads ``a``; for non-MLA attention ``t`` divides ``n_kv`` when
      ``n_kv >= t``, else ``n_kv`` divides ``t`` (KV heads replicated, as MQA);
    * ``cp`` divides ``s``; Ulysses CP splits each TP rank's heads: ``cp`` divides ``a / t``;
    * ``vp > 1`` needs ``p > 1``; the stage split of :func:`chunk_layer_counts` holds
      (``p·vp <= n_lay + n_mtp`` or a consistent offset);
    * a dense model has ``ep = 1``; a MoE model has ``ep`` dividing ``n_exp`` and
      ``ep <= d·t`` (the original's ``moe_valid``), with an exact expert DP degree
      (:func:`_expert_degrees`: ``ep`` divides ``d`` while ``ep <= d``, else ``d·t``; with
      ``etp > 1``, ``etp·ep`` divides ``d·t·cp``), and ``t_exp`` divides ``hff_exp``
      (the original's C1, C2);
    * an explicit ``os`` divides ``d``;
    * a per-stage recompute list has ``p`` entries, each at most its stage's layers.

    Raises:
        LayoutError: for the first constraint that fails.
    """
    _validate_one(model, layout, LayoutBatch.from_layouts([layout]), devices)


def _validate_one(model: ModelConfig, layout: Layout, batch: LayoutBatch, devices: int | None) -> None:
    """:func:`validate` for *layout*, given as the batch of one it makes."""
    code = int(layout_violations(model, batch, devices)[0])
    if code >= 0:
        raise LayoutError(_violation_message(model, layout, devices, LAYOUT_CONSTRAINTS[code]))


# --------------------------------------------------------------------------- derived fields


def derive_fields(model: ModelConfig, layout: Layout, *, network: System | None = None) -> dict[str, Any]:
    """Every configuration field the communication formulas read, by the original's names.

    The result is a case-style ``inputs`` mapping (docs/model.md, "Config fields"): numbers as floats,
    switches as 0.0 / 1.0, ``cp_algo`` as text and ``rec_op`` as a mapping of switches. Add
    ``stages`` (:func:`build_stages`), ``device``, ``mode`` and ``ttype`` for a stage walk.
    The same rules as :func:`derive_fields_batch`, on a batch of one.

    Model fields come from *model* (``s`` from the layout when it states one). Derived
    fields, confirmed against the reference cases' inputs unless marked *inferred*:

    * ``t_exp``, ``d_exp``: :func:`_expert_degrees` (confirmed).
    * ``sp``: ``t`` with sequence parallelism, else 1 (confirmed by ``fill_dp_table`` cases).
    * ``os_max_shard``: the optimizer's ranks (:func:`_optimizer_ranks`); only the legacy
      tables read it (*inferred*: no end-to-end case holds it).
    * ``comm_t = [t > 1]``, ``comm_ep = [ep > 1 or n_exp > 1]``, ``comm_cp = [cp > 1]``
      (confirmed, ``comm_cp`` inferred: no case reads it).
    * ``comm_d_non_exp``: 0 if ``d = 1`` or no optimizer sharding, else 3 with gradient
      sharding and 2 without; ``comm_d_exp`` likewise with ``d_exp = 1`` (confirmed: 2, and
      0 for DeepSeek d=32, t=2, ep=32 where ``d_exp = 1``; level 3 inferred).
    * ``comm_dp_overlap = 0.9``, ``comm_tp_overlap = 0.5`` (confirmed).
    * ``shard_p_os_non_exp_partial = R·t·cp`` with R the optimizer's ranks;
      ``shard_p_os_exp = d_exp·cp·t_exp`` (``cp·t_exp`` without optimizer sharding);
      ``shard_p_os_exp_partial = gcd(n_exp, R·t_exp)`` (published ``derive_optimizer_sharding``;
      all three confirmed, including the optimizer-off layout d=16, t=4 of the FSDP cases).
    * ``gather_embed = R``; ``shard_embed = R·t``, or ``R`` when ``p = 1`` (HyperParallel runs
      the vocabulary embedding data-parallel without pipelining). The cases confirm ``R·t`` for
      ``p > 1`` and ``R`` for ``p = 1, t = 1``; the ``p = 1, t > 1`` branch follows the
      published ``derive_embedding_sharding`` and is *inferred*.
    * ``grad_shard_as_params``, ``reshards`` from the layout; ``shard_spans_cp = 0`` (every
      case records false); ``tie_emb_out`` from the model (confirmed).
    * ``rec_op``: HyperParallel's selective switches (gather 0, …) for a selective plan,
      every switch 1 otherwise (confirmed).
    * ``cp_algo`` from the layout; ``device_per_node``, ``bw_intra``, ``bw_inter``: the
      original's fixed config defaults :data:`ORIGINAL_CP_NETWORK` (confirmed: every case
      records 8, 300, 25 for A2 and A3 alike), or *network*'s ``bindings()`` when a
      :class:`hardware.System` is given (then also ``device_intra_node_num``).
    * ``layer_stack = 0``: no per-layer kinds, as in every case; the model's first dense
      layers (``first_k_dense``) are therefore priced like the others, as the original does.

    Raises:
        LayoutError: when :func:`validate` rejects the layout.
    """
    batch = LayoutBatch.from_layouts([layout])
    _validate_one(model, layout, batch, None)
    fields_ = _all_fields(model, batch, network)
    return {name: float(value[0]) if isinstance(value, np.ndarray) else value for name, value in fields_.items()}


def derive_fields_batch(model: ModelConfig, batch: LayoutBatch, *, network: System | None = None,
                        names: Sequence[str] | None = None, validated: bool = False,
                        compact: bool = False) -> dict[str, Any]:
    """Every field :func:`derive_fields` gives, for all layouts of *batch* at once.

    Fields that follow from the layout keys (``d, t, …, t_exp, d_exp, sp, os_max_shard,
    comm_*`` switches and levels, ``shard_*``, ``gather_embed``: :data:`LAYOUT_FIELD_NAMES`)
    are float64 arrays of length N, one value per layout, even where a run setting makes them
    constant; the model's fields, ``s`` and the fields the run settings fix (overlaps,
    ``grad_shard_as_params``, ``reshards``, ``rec_op``, ``cp_algo``, the CP network, …) are
    plain values as in :func:`derive_fields`. ``derive_fields_batch(model, batch)[k][i]``
    equals ``derive_fields(model, batch.layout(i))[k]``.

    Args:
        network: as :func:`derive_fields`.
        names: only these fields, in this order (the others are not computed); ``None``: all.
        validated: the caller has already kept only the layouts :func:`validate_batch` accepts,
            so the constraints are not checked again. The fields of a layout that breaks one
            are then unspecified (they follow the rules' floors and clamps).
        compact: a layout field that is the same for every layout because each key it follows
            from is (a key :meth:`LayoutBatch.from_arrays` got as one number or took from the
            defaults: a stride-0 column) is one float instead of an array.

    Raises:
        LayoutError: when a layout breaks a constraint of :func:`validate`, naming the first
            such layout, its index and the constraint (filter with :func:`validate_batch`).
        ValueError: for a name in *names* that is no field.
    """
    if not validated:
        check_batch(model, batch)
    return _all_fields(model, batch, network, names, compact=compact)


def check_batch(model: ModelConfig, batch: LayoutBatch) -> None:
    """Check every layout of *batch* once, deriving nothing.

    Raises:
        LayoutError: naming the first invalid layout, its index, the constraint and how many are
            invalid (filter with :func:`validate_batch`).
    """
    codes = layout_violations(model, batch)
    if len(codes) and codes.max() >= 0:  # one reduction over valid batches, the usual case
        invalid = np.flatnonzero(codes >= 0)
        index = int(invalid[0])
        layout = batch.layout(index)
        message = _violation_message(model, layout, None, LAYOUT_CONSTRAINTS[codes[index]])
        raise LayoutError(f"layout {index} of the batch ({layout}): {message}; {invalid.size} of {len(batch)} "
                          f"layouts are invalid (validate_batch gives the mask)")


# --------------------------------------------------------------------------- stages


def build_stages(model: ModelConfig, layout: Layout) -> list[list[list[str]]]:
    """The pipeline layout the stage walk visits: ``stages[stage][chunk]`` = layer types.

    Body layers per chunk as :func:`chunk_layer_counts` says (the MTP layers are the last in
    model order, so they land on the last stage's last chunk); the embedding opens stage 0's
    first chunk and the output closes the last stage's last chunk. Each stage's body layers,
    in stage order, are recomputed as the plan says (:class:`RecomputePlan`): the reference
    cases confirm the even split, the MTP placement, embedding first and output last, and
    a per-stage ``full_rec`` list recomputing the *first* layers of each stage.

    Raises:
        LayoutError: when :func:`validate` rejects the layout.
    """
    validate(model, layout)
    counts = chunk_layer_counts(model, layout)
    plan = layout.recompute
    rest = LayerType.SEL_REC_LAYER.value if plan.mode == "selective" else LayerType.NOT_REC_LAYER.value
    full_per_stage = _full_recompute_per_stage(plan, np.array([sum(row) for row in counts])).tolist()
    stages: list[list[list[str]]] = []
    for row, full in zip(counts, full_per_stage):
        kinds = [LayerType.FULL_REC_LAYER.value] * full + [rest] * (sum(row) - full)
        chunks, start = [], 0
        for n in row:
            chunks.append(kinds[start:start + n])
            start += n
        stages.append(chunks)
    stages[0][0].insert(0, LayerType.EMBEDDING_LAYER.value)
    stages[-1][-1].append(LayerType.OUTPUT_LAYER.value)
    return stages


def stage_layers(counts: Mapping[str, np.ndarray]) -> np.ndarray:
    """Body and MTP layers of each stage (recomputed or not), from :func:`pipeline_stage_counts`' counts."""
    return counts["n_body"] + counts["n_extra"] + counts["n_extra_sel"]


def pipeline_stage_counts(model: ModelConfig, p: int, vp: int = 1, *,
                          recompute: str | RecomputePlan | None = None,
                          offset: Sequence[int] | Sequence[Sequence[int]] | None = None) -> dict[str, np.ndarray]:
    """Per stage, how many layers of each kind a pipeline of *p* stages holds, without building it.

    The counts ``codegen.reference.adapters.model.stage_counts(build_stages(model, layout), model.n_lay)``
    gives for a layout with this pipeline, computed from the slot sizes of
    :func:`chunk_layer_counts` alone: ``n_embedding`` (stage 0) and ``n_output`` (the last
    stage); ``n_body``, the body layers with a kind entry (the first ``n_lay`` in model order:
    chunk 0 of every stage, then chunk 1, …); ``n_extra`` / ``n_extra_sel``, the layers past
    ``n_lay`` (MTP) not / selectively recomputed; ``n_full_rec`` / ``n_sel_rec``, the fully /
    selectively recomputed layers, the first ones of each stage in stage order fully
    (:class:`RecomputePlan`).

    Args:
        model: the model (``n_lay``, ``n_mtp``).
        p, vp: pipeline stages and virtual chunks per stage.
        recompute: the plan (text for :func:`parse_recompute` or a :class:`RecomputePlan`);
            ``None`` recomputes nothing.
        offset: layers beyond the even split, as :attr:`Layout.offset`; ``None``: the even split.

    Returns:
        Read-only float arrays of shape ``(p,)`` under the keys of :data:`STAGE_COUNT_NAMES` (counted once per
        process and pipeline, shared by every caller).

    Raises:
        LayoutError: for ``p`` or ``vp`` below 1, a split :func:`chunk_layer_counts` rejects,
            or a recompute list that does not fit the stages.
    """
    _positive_int("p", p)
    _positive_int("vp", vp)
    plan = RecomputePlan() if recompute is None else \
        recompute if isinstance(recompute, RecomputePlan) else parse_recompute(recompute)
    offset = None if offset is None else _normalise_offset(offset)
    # A search asks for the same few pipelines again and again, from several pricers (one per run setting and
    # family): each is counted once per process (its arrays read-only, in a new dict per call).
    key = (model, int(p), int(vp), plan, offset)
    known = _STAGE_COUNTS.get(key)
    if known is None:
        if len(_STAGE_COUNTS) >= _STAGE_COUNTS_KEEP:
            _STAGE_COUNTS.clear()
        known = _STAGE_COUNTS[key] = _count_stages(model, int(p), int(vp), plan, offset)
    return dict(known)


def batch_stage_counts(model: ModelConfig, batch: LayoutBatch, p: int, vp: int,
                       memo: dict[Any, Mapping[str, np.ndarray] | None]) -> Mapping[str, np.ndarray] | None:
    """:func:`pipeline_stage_counts` for the layouts of *batch* with pipeline (p, vp), with their offset and
    recompute list where these apply (:meth:`LayoutBatch.stage_lists`); ``None`` when no layout can have that
    pipeline. *memo* is the caller's (a pricer's, for its one model): unlike the process-wide memo it keeps the
    ``None`` of a pipeline that fails, which a search asks about again on every block."""
    plan, offset = batch.stage_lists(p, vp)
    key = (p, vp, plan, offset)
    if key not in memo:
        try:
            memo[key] = pipeline_stage_counts(model, p, vp, recompute=plan, offset=offset)
        except LayoutError:
            memo[key] = None  # no valid layout has this pipeline
    return memo[key]


#: pipeline_stage_counts' memo by (model, p, vp, plan, offset), at most _STAGE_COUNTS_KEEP entries.
_STAGE_COUNTS: dict[tuple[Any, ...], dict[str, np.ndarray]] = {}
_STAGE_COUNTS_KEEP = 4096


def _count_stages(model: ModelConfig, p: int, vp: int, plan: RecomputePlan,
                  offset: tuple[int, ...] | tuple[tuple[int, ...], ...] | None) -> dict[str, np.ndarray]:
    """:func:`pipeline_stage_counts` of a parsed plan and a normalised offset (its arrays read-only)."""
    slots = _slot_layers(model, p, vp, offset)  # (p, vp)
    stage_layers = slots.sum(axis=1)
    error = _recompute_list_error(plan, p, stage_layers.tolist())
    if error is not None:
        raise LayoutError(error)
    # Model order runs slot (stage s, chunk c) as number c·p + s: each slot's first layer's position.
    in_model_order = slots.T.ravel()
    first_position = (np.cumsum(in_model_order) - in_model_order).reshape(vp, p).T
    with_entry = np.clip(model.n_lay - first_position, 0, slots)  # a slot's first layers have a kind entry
    first_in_stage = np.cumsum(slots, axis=1) - slots  # stage order: chunk 0's layers first
    full = _full_recompute_per_stage(plan, stage_layers)
    if plan.selective:
        # The slot's layers past n_lay run from first_in_stage + with_entry; the selective ones start at `full`.
        extra_start = np.maximum(first_in_stage + with_entry, full[:, None])
        extra_sel = np.maximum(first_in_stage + slots - extra_start, 0).sum(axis=1)
        sel_rec = stage_layers - full
    else:
        extra_sel = sel_rec = np.zeros(p, dtype=np.int64)
    body = with_entry.sum(axis=1)
    stage = np.arange(p)
    counts = {
        "n_embedding": stage == 0,
        "n_output": stage == p - 1,
        "n_body": body,
        "n_extra": stage_layers - body - extra_sel,
        "n_extra_sel": extra_sel,
        "n_full_rec": full,
        "n_sel_rec": sel_rec,
    }
    out = {name: counts[name].astype(np.float64) for name in STAGE_COUNT_NAMES}
    for array in out.values():
        array.flags.writeable = False
    return out
