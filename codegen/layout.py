"""Parallel layouts: parse and check them, derive the config fields they imply, build the pipeline stages.

A :class:`Layout` is one training run's parallel strategy (degrees, micro-batches,
optimizer sharding, FSDP, recompute plan). Together with a
:class:`codegen.modelcfg.ModelConfig` it fixes every configuration field the
communication formulas read (FORMULAS.md §1), which :func:`derive_fields`
computes, and the pipeline layout the stage walk visits (FORMULAS.md §8),
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

Public API::

    Layout, RecomputePlan, LayoutError, StageLayerCounts
    parse_layout(text, defaults=None, *, fsdp=None, recompute=None) -> Layout
    parse_recompute(text) -> RecomputePlan
    validate(model, layout, devices=None) -> None
    chunk_layer_counts(model, layout) -> list[list[int]]
    derive_fields(model, layout, *, network=None) -> dict[str, Any]
    build_stages(model, layout) -> list[list[list[str]]]
    stage_layer_counts(stages, n_lay) -> list[StageLayerCounts]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from hardware import System

    from .modelcfg import ModelConfig

__all__ = [
    "BODY_KINDS",
    "CP_ALGORITHMS",
    "EMBEDDING_LAYER",
    "FULL_REC_LAYER",
    "LAYER_KINDS",
    "Layout",
    "LayoutError",
    "NOT_REC_LAYER",
    "ORIGINAL_CP_NETWORK",
    "OUTPUT_LAYER",
    "RecomputePlan",
    "SEL_REC_LAYER",
    "StageLayerCounts",
    "build_stages",
    "chunk_layer_counts",
    "derive_fields",
    "parse_layout",
    "parse_recompute",
    "stage_layer_counts",
    "validate",
]

# Layer types of a pipeline layout, spelled as the original's LayerType members and the case file.
EMBEDDING_LAYER = "EMBEDDING_LAYER"
OUTPUT_LAYER = "OUTPUT_LAYER"
NOT_REC_LAYER = "NOT_REC_LAYER"
FULL_REC_LAYER = "FULL_REC_LAYER"
SEL_REC_LAYER = "SEL_REC_LAYER"
BODY_KINDS = (NOT_REC_LAYER, FULL_REC_LAYER, SEL_REC_LAYER)
LAYER_KINDS = (EMBEDDING_LAYER, OUTPUT_LAYER) + BODY_KINDS

#: CP algorithms the formulas know (FORMULAS.md §4). The original also accepts the typo
#: ``hybird_cp`` and reads any unknown name as colossalai; a layout names one of these.
CP_ALGORITHMS = ("colossalai_cp", "hybrid_cp", "ulysses_cp")

#: The CP topology inputs the original's cost-model config holds by default, independent of
#: the device: every end-to-end reference case records these three values, for A2 and A3
#: alike (a later published version of ``_cost_model_variables.py`` defaults ``bw_intra`` to
#: 400). They equal A2's 8 devices per node and the NODE / CLUSTER figures of the original's
#: unused ``level_bandwidth`` helper, not A2's or A3's level bandwidths.
ORIGINAL_CP_NETWORK: Mapping[str, float] = {"device_per_node": 8.0, "bw_intra": 300.0, "bw_inter": 25.0}

# The original's transitional overlap fractions (derive_comm_flags; FORMULAS.md §10 item 13).
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
            for i, n in enumerate(counts):
                if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                    raise LayoutError(f"recompute: full layers of stage {i} must be a whole number >= 0, got {n!r}")
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
    if not word or not all(item.isdigit() for item in items):
        raise LayoutError(f"--recompute: expected full, selective, none or whole numbers N,N,… "
                          f"(fully recomputed layers per stage), got {text!r}")
    return RecomputePlan("none", tuple(int(item) for item in items))


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LayoutError(f"{name}: must be a whole number >= 1, got {value!r}")
    return value


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
        cp_algo: one of :data:`CP_ALGORITHMS`.
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
        for name in ("d", "t", "p", "m", "cp", "ep", "b", "vp", "etp"):
            _positive_int(name, getattr(self, name))
        if self.os is not None:
            _positive_int("os", self.os)
        if self.s is not None:
            _positive_int("s", self.s)
        for name in ("op", "grad_shard", "sp", "fsdp", "reshards"):
            if not isinstance(getattr(self, name), bool):
                raise LayoutError(f"{name}: must be true or false, got {getattr(self, name)!r}")
        if self.cp_algo not in CP_ALGORITHMS:
            raise LayoutError(f"cp_algo: must be one of {', '.join(CP_ALGORITHMS)}, got {self.cp_algo!r}")
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
    for n in flat:
        if isinstance(n, bool) or not isinstance(n, int):
            raise LayoutError(f"offset: entries must be whole numbers, got {n!r} in {offset!r}")
    return rows


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
            if not value.lstrip("+-").isdigit():
                raise LayoutError(f"layout {key}: expected a whole number, got {value!r}")
            number = int(value)
            if number < 1:
                raise LayoutError(f"layout {key}: a degree or count must be >= 1, got {number}")
            values[key] = number
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


# --------------------------------------------------------------------------- expert degrees


def _expert_degrees(model: ModelConfig, layout: Layout) -> tuple[int, int]:
    """(t_exp, d_exp): the TP and DP degrees an expert layer runs with.

    HyperParallel's ``derive_expert_degrees`` (published derive.py): with ``etp > 1`` the
    experts run ``etp``-way TP and ``d·t·cp / (etp·ep)``-way DP. Otherwise EP is carved out
    of DP while it fits (``t_exp = t``, ``d_exp = d / ep``); past DP it borrows TP's ranks and
    the experts run without TP (``t_exp = 1``, ``d_exp = d·t / ep``). A dense model is the
    ``ep = 1`` case: ``t_exp = t``, ``d_exp = d``. Confirmed by every case that holds them
    (e.g. DeepSeek d=16, t=4, ep=8 → 4, 2; d=8, t=8, cp=2, ep=16 → 1, 4). The original
    floors and clamps to 1; :func:`validate` rejects layouts where the division is not exact.
    """
    d, t, cp, ep = layout.d, layout.t, layout.cp, layout.ep
    if layout.etp > 1:
        t_exp = layout.etp
        d_exp = d * t * cp // (t_exp * ep)
    elif d >= ep:
        t_exp, d_exp = t, d // ep
    else:
        t_exp, d_exp = 1, d * t // ep
    return t_exp, max(1, d_exp)


def _optimizer_ranks(layout: Layout) -> int:
    """Ranks the optimizer shards a parameter over, beyond TP (and CP): ``optimizer_ranks``.

    ``os`` when it divides DP, the whole DP group otherwise (MindSpore's rule, published
    derive.py); 1 without optimizer sharding. Note that the original parser reads an unset
    ``optimizer_weight_shard_size`` through ``max(1, size) or dp``, which is 1, not DP; a
    layout here says ``os=None`` for "the whole DP group" instead.
    """
    if not layout.op:
        return 1
    os = layout.os
    return os if os is not None and layout.d % os == 0 else layout.d


# --------------------------------------------------------------------------- validation


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
    p, vp = layout.p, layout.vp
    total = model.n_lay + model.n_mtp
    slots = p * vp
    base = total // slots
    if layout.offset is None:
        if base < 1:
            raise LayoutError(f"p·vp <= n_lay + n_mtp: {p}·{vp} = {slots} pipeline chunks for "
                              f"{total} layers ({model.n_lay} + {model.n_mtp} MTP) leaves a chunk empty")
        extra = total % slots
        return [[base + (1 if c * p + s < extra else 0) for c in range(vp)] for s in range(p)]
    offset = layout.offset
    nested = bool(offset) and isinstance(offset[0], tuple)
    if vp == 1 and not nested:
        if len(offset) != p:
            raise LayoutError(f"offset has {len(offset)} entries, but p = {p} stages: {list(offset)}")
        rows = [[base + n] for n in offset]  # type: ignore[operator]
    else:
        if not nested or len(offset) != vp or any(len(row) != p for row in offset):  # type: ignore[arg-type]
            raise LayoutError(f"offset must be vp = {vp} lists of p = {p} integers (chunk, then stage), "
                              f"got {offset!r}")
        rows = [[base + offset[c][s] for c in range(vp)] for s in range(p)]  # type: ignore[index]
    for s, row in enumerate(rows):
        for c, n in enumerate(row):
            if n < 0:
                raise LayoutError(f"offset gives stage {s} chunk {c} {n} layers (even split {base} + offset)")
    placed = sum(sum(row) for row in rows)
    if placed != total:
        raise LayoutError(f"offset places {placed} layers, but the model has n_lay + n_mtp = "
                          f"{model.n_lay} + {model.n_mtp} = {total}: offset {offset!r} over an even split of {base}")
    return rows


def validate(model: ModelConfig, layout: Layout, devices: int | None = None) -> None:
    """Check that *layout* can run *model*.

    Constraints (each error names it and the values):

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
    d, t, p, cp, ep = layout.d, layout.t, layout.p, layout.cp, layout.ep
    if devices is not None:
        if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
            raise LayoutError(f"devices: must be a whole number >= 1, got {devices!r}")
        if layout.devices != devices:
            raise LayoutError(f"d·t·cp·p must equal the device count: {d}·{t}·{cp}·{p} = {layout.devices}, "
                              f"devices = {devices}")
    if model.a % t:
        raise LayoutError(f"t must divide the attention heads a: a = {model.a}, t = {t}")
    if model.dc_kv == 0:
        kv = model.n_kv
        if (kv >= t and kv % t) or (kv < t and t % kv):
            raise LayoutError(f"t must divide the KV heads n_kv (or n_kv divide t, KV heads replicated): "
                              f"n_kv = {kv}, t = {t}")
    s = layout.s or model.s
    if s % cp:
        raise LayoutError(f"cp must divide the sequence length s: s = {s}, cp = {cp}")
    if layout.cp_algo == "ulysses_cp" and (model.a // t) % cp:
        raise LayoutError(f"Ulysses CP splits each TP rank's heads: cp must divide a/t = {model.a}/{t} = "
                          f"{model.a // t}, cp = {cp}")
    if layout.vp > 1 and p == 1:
        raise LayoutError(f"vp > 1 (virtual pipeline chunks) needs p > 1: vp = {layout.vp}, p = {p}")
    counts = chunk_layer_counts(model, layout)
    if model.n_exp <= 1:
        if ep != 1:
            raise LayoutError(f"ep must be 1 for a dense model (n_exp = {model.n_exp}), got ep = {ep}")
    else:
        if model.n_exp % ep:
            raise LayoutError(f"ep must divide the routed experts n_exp: n_exp = {model.n_exp}, ep = {ep}")
        if ep > d * t:
            raise LayoutError(f"ep <= d·t: the experts spread over a stage's DP×TP ranks; ep = {ep}, "
                              f"d·t = {d}·{t} = {d * t}")
        if layout.etp > 1:
            if (d * t * cp) % (layout.etp * ep):
                raise LayoutError(f"etp·ep must divide d·t·cp (expert DP = d·t·cp/(etp·ep)): etp = {layout.etp}, "
                                  f"ep = {ep}, d·t·cp = {d * t * cp}")
        elif ep <= d and d % ep:
            raise LayoutError(f"ep must divide d (expert DP = d/ep while ep <= d): d = {d}, ep = {ep}")
        elif ep > d and (d * t) % ep:
            raise LayoutError(f"ep must divide d·t (expert DP = d·t/ep once ep > d): d·t = {d * t}, ep = {ep}")
        t_exp, _ = _expert_degrees(model, layout)
        if model.hff_exp % t_exp:
            raise LayoutError(f"the expert TP degree t_exp must divide the expert width hff_exp: "
                              f"hff_exp = {model.hff_exp}, t_exp = {t_exp}")
    if layout.os is not None and d % layout.os:
        raise LayoutError(f"os (optimizer shard ranks) must divide d: d = {d}, os = {layout.os}")
    plan = layout.recompute
    if plan.full_per_stage is not None:
        if len(plan.full_per_stage) != p:
            raise LayoutError(f"the recompute list needs one entry per stage: {len(plan.full_per_stage)} entries "
                              f"{list(plan.full_per_stage)}, p = {p}")
        for stage, (n, row) in enumerate(zip(plan.full_per_stage, counts)):
            if n > sum(row):
                raise LayoutError(f"recompute: stage {stage} holds {sum(row)} layers, cannot fully recompute {n}")


# --------------------------------------------------------------------------- derived fields


def derive_fields(model: ModelConfig, layout: Layout, *, network: System | None = None) -> dict[str, Any]:
    """Every configuration field the communication formulas read, by the original's names.

    The result is a case-style ``inputs`` mapping (FORMULAS.md §1): numbers as floats,
    switches as 0.0 / 1.0, ``cp_algo`` as text and ``rec_op`` as a mapping of switches. Add
    ``stages`` (:func:`build_stages`), ``device``, ``mode`` and ``ttype`` for a stage walk.

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
    validate(model, layout)
    t_exp, d_exp = _expert_degrees(model, layout)
    ranks = _optimizer_ranks(layout)
    d, t, p, cp, ep = layout.d, layout.t, layout.p, layout.cp, layout.ep
    level = 3.0 if layout.grad_shard else 2.0
    fields_: dict[str, Any] = model.fields()
    if layout.s is not None:
        fields_["s"] = float(layout.s)
    fields_.update({
        "b": float(layout.b), "m": float(layout.m),
        "d": float(d), "t": float(t), "p": float(p), "cp": float(cp), "ep": float(ep),
        "vp": float(layout.vp), "etp": float(layout.etp),
        "t_exp": float(t_exp), "d_exp": float(d_exp),
        "sp": float(t if layout.sp else 1),
        "os_max_shard": float(ranks),
        "comm_t": float(t > 1),
        "comm_ep": float(ep > 1 or model.n_exp > 1),
        "comm_cp": float(cp > 1),
        "comm_d_non_exp": 0.0 if d == 1 or not layout.op else level,
        "comm_d_exp": 0.0 if d_exp == 1 or not layout.op else level,
        "comm_dp_overlap": _DP_OVERLAP,
        "comm_tp_overlap": _TP_OVERLAP,
        "shard_p_os_non_exp_partial": float(ranks * t * cp),
        "shard_p_os_exp": float((d_exp if layout.op else 1) * cp * t_exp),
        "shard_p_os_exp_partial": float(math.gcd(model.n_exp, ranks * t_exp)),
        "shard_embed": float(ranks * (1 if p == 1 else t)),
        "gather_embed": float(ranks),
        "grad_shard_as_params": float(layout.fsdp),
        "reshards": float(layout.reshards),
        "shard_spans_cp": 0.0,
        "rec_op": dict(_SELECTIVE_REC_OP) if layout.recompute.selective else dict.fromkeys(_SELECTIVE_REC_OP, 1.0),
        "cp_algo": layout.cp_algo,
        "layer_stack": 0.0,
    })
    if network is None:
        fields_.update(ORIGINAL_CP_NETWORK)
    else:
        bindings = network.bindings()
        for key in ("device_per_node", "bw_intra", "bw_inter", "device_intra_node_num"):
            fields_[key] = float(bindings[key])
    return fields_


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
    rest = SEL_REC_LAYER if plan.mode == "selective" else NOT_REC_LAYER
    stages: list[list[list[str]]] = []
    for s, row in enumerate(counts):
        if plan.full_per_stage is not None:
            full = plan.full_per_stage[s]
        else:
            full = sum(row) if plan.mode == "full" else 0
        kinds = [FULL_REC_LAYER] * full + [rest] * (sum(row) - full)
        chunks, start = [], 0
        for n in row:
            chunks.append(kinds[start:start + n])
            start += n
        stages.append(chunks)
    stages[0][0].insert(0, EMBEDDING_LAYER)
    stages[-1][-1].append(OUTPUT_LAYER)
    return stages


@dataclass(frozen=True)
class StageLayerCounts:
    """One stage's layers by type, split as the stage walk prices them (FORMULAS.md §8).

    Attributes:
        embedding: embedding layers on the stage (0 or 1).
        output: output layers on the stage (0 or 1).
        body: layers with a kind entry (the first ``n_lay`` body layers in model order),
            by layer type (every key of :data:`BODY_KINDS` present): the walk prices them at
            NOT_REC with a DP term, and the recompute sum adds their FULL / SEL traffic again.
        beyond: body layers past ``n_lay`` (the MTP layers), by layer type: priced at their own
            type, with no DP term.
    """

    embedding: int
    output: int
    body: Mapping[str, int]
    beyond: Mapping[str, int]


def _model_order(stages: Sequence[Sequence[Sequence[str]]]) -> list[tuple[int, int, int]]:
    """Positions (stage, chunk, index) of the body layers in model order: chunk-major, then stage."""
    order = []
    chunks = max((len(stage) for stage in stages), default=0)
    for c in range(chunks):
        for s, stage in enumerate(stages):
            if c < len(stage):
                order.extend((s, c, i) for i, kind in enumerate(stage[c]) if kind in BODY_KINDS)
    return order


def stage_layer_counts(stages: Sequence[Sequence[Sequence[str]]], n_lay: int) -> list[StageLayerCounts]:
    """Per stage, how many layers of each type it holds, body layers with and without a kind entry apart.

    Body layers are numbered in model order (chunk 0 of every stage, then chunk 1, …); the
    first *n_lay* get a kind entry (FORMULAS.md §8), the rest (MTP) do not.

    Raises:
        LayoutError: for a layer type outside :data:`LAYER_KINDS` or a negative *n_lay*.
    """
    if isinstance(n_lay, bool) or not isinstance(n_lay, int) or n_lay < 0:
        raise LayoutError(f"n_lay: must be a whole number >= 0, got {n_lay!r}")
    for s, stage in enumerate(stages):
        for c, chunk in enumerate(stage):
            for i, kind in enumerate(chunk):
                if kind not in LAYER_KINDS:
                    raise LayoutError(f"stages[{s}][{c}][{i}]: unknown layer type {kind!r}; "
                                      f"known: {', '.join(LAYER_KINDS)}")
    with_entry = set(_model_order(stages)[:n_lay])
    result = []
    for s, stage in enumerate(stages):
        body = dict.fromkeys(BODY_KINDS, 0)
        beyond = dict.fromkeys(BODY_KINDS, 0)
        embedding = output = 0
        for c, chunk in enumerate(stage):
            for i, kind in enumerate(chunk):
                if kind == EMBEDDING_LAYER:
                    embedding += 1
                elif kind == OUTPUT_LAYER:
                    output += 1
                elif (s, c, i) in with_entry:
                    body[kind] += 1
                else:
                    beyond[kind] += 1
        result.append(StageLayerCounts(embedding, output, body, beyond))
    return result
