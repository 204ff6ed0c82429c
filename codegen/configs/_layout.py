"""A parallel layout and its run settings: the types, and how text and values become them.

A :class:`Layout` is one training run's parallel strategy (degrees, micro-batches, optimizer
sharding, FSDP, recompute plan); its keys, their bounds and defaults are declared once, in
``symbolic.vocabulary.LAYOUT_KEYS``, and checked against the class when this module is imported.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

import numpy as np

from symbolic.vocabulary import (LAYERS_MAX, LAYOUT_KEYS, RECOMPUTE_MODES, REQUIRED, REQUIRED_KEYS, TEXT_KEYS,
                                 layout_key, resolve_algorithm)

from ..runtime.inputs import DEGREE_MAX, bound, check_devices, parse_whole, whole

__all__ = ["Layout", "LayoutError", "RecomputePlan", "normalise_offset", "parse_layout", "parse_recompute",
           "positive_int"]


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

    mode: str = RECOMPUTE_MODES[0]
    full_per_stage: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.mode not in RECOMPUTE_MODES:
            raise LayoutError(f"recompute: mode must be one of {', '.join(RECOMPUTE_MODES)}, got {self.mode!r}")
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
        text: a mode of :data:`symbolic.vocabulary.RECOMPUTE_MODES`, or ``N,N,…``: fully recomputed layers per
            pipeline stage (the first ones of each stage), the rest not recomputed.

    Raises:
        LayoutError: naming the text.
    """
    word = text.strip().lower()
    if word in RECOMPUTE_MODES:
        return RecomputePlan(word)
    items = [item.strip() for item in word.split(",")]
    if not word or not all(item.isascii() and item.isdigit() for item in items):
        raise LayoutError(f"--recompute: expected {', '.join(RECOMPUTE_MODES)} or whole numbers N,N,… "
                          f"(fully recomputed layers per stage, ASCII digits), got {text!r}")
    return RecomputePlan("none", tuple(parse_whole(f"--recompute stage {i}", item, minimum=0, maximum=LAYERS_MAX,
                                                   error=LayoutError) for i, item in enumerate(items)))


def positive_int(name: str, value: object, maximum: int | None = None) -> int:
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
        for name in _WHOLE_KEYS:
            if getattr(self, name) is not None or layout_key(name).default is not None:
                object.__setattr__(self, name, positive_int(name, getattr(self, name), bound(name)))
        check_devices(self.d, self.t, self.cp, self.p, error=LayoutError)
        for name in _FLAG_KEYS:
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
            object.__setattr__(self, "offset", normalise_offset(self.offset))

    @property
    def devices(self) -> int:
        """Devices the layout occupies: d·t·cp·p (EP and ETP are carved out of these)."""
        return self.d * self.t * self.cp * self.p

    def __str__(self) -> str:
        """The degrees and sizes as ``--layout`` spells them, every one (a model's own layout may set ``vp`` or
        ``etp`` other than 1, so a key left out would not read back the same), and ``s`` where the layout overrides
        the model's sequence length; the run settings (``cp_algo``, the optimizer sharding, …) stay out."""
        text = (f"d={self.d},t={self.t},p={self.p},cp={self.cp},ep={self.ep},m={self.m},b={self.b},vp={self.vp},"
                f"etp={self.etp}")
        if self.s is not None:
            text += f",s={self.s}"
        return text


def normalise_offset(offset: object) -> tuple[int, ...] | tuple[tuple[int, ...], ...]:
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


# The keys of each kind (symbolic.vocabulary.LAYOUT_KEYS), in the declaration's order.
_WHOLE_KEYS = tuple(key.name for key in LAYOUT_KEYS if key.kind == "whole")
_FLAG_KEYS = tuple(key.name for key in LAYOUT_KEYS if key.kind == "flag")


def parse_layout(text: str, defaults: Layout | None = None, *, fsdp: bool | None = None,
                 recompute: str | RecomputePlan | None = None) -> Layout:
    """A layout from ``key=value,key=value`` text, over a model's default layout.

    Keys: those of ``symbolic.vocabulary.TEXT_KEYS``: ``d, t, p, m, cp, ep, b, vp, etp, os, s``
    (whole numbers >= 1), ``op, grad_shard, sp, reshards`` (0 or 1), ``cp_algo`` (a name of
    :data:`CP_ALGORITHMS`).
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
        kind = layout_key(key).kind if key in TEXT_KEYS else None
        if kind == "whole":
            values[key] = parse_whole(f"layout {key}", value, minimum=layout_key(key).minimum, maximum=bound(key),
                                      error=LayoutError)
        elif kind == "flag":
            if value not in ("0", "1"):
                raise LayoutError(f"layout {key}: expected 0 or 1, got {value!r}")
            values[key] = value == "1"
        elif kind == "text":
            values[key] = value
        else:
            raise LayoutError(f"layout key {key!r} is unknown; known keys: {', '.join(TEXT_KEYS)}")
    if defaults is None:
        missing = [key for key in REQUIRED_KEYS if key not in values]
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


def _check_against_declaration() -> None:
    """:class:`Layout`'s fields are the declared keys, in order, with the declared defaults (checked at import)."""
    declared = [(key.name, key.default) for key in LAYOUT_KEYS]
    found = [(f.name, REQUIRED if f.default is MISSING and f.default_factory is MISSING
              else f.default_factory().mode if f.default_factory is not MISSING else f.default) for f in fields(Layout)]
    if found != declared:
        raise AssertionError(f"Layout's fields {found} differ from symbolic.vocabulary.LAYOUT_KEYS {declared}")
    for key in LAYOUT_KEYS:
        if key.kind == "whole" and (key.minimum, key.maximum) != (1, bound(key.name)):
            raise AssertionError(f"layout key {key.name}: declared bounds [{key.minimum}, {key.maximum}], "
                                 f"the input gate's [1, {bound(key.name)}]")


_check_against_declaration()
