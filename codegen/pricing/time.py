"""Communication seconds per training step of every pipeline stage, vectorised over layouts (no SymPy).

For arrays of layouts of one model on a catalog system with GPU and network facts, the
:class:`TimePricer` gives, per pipeline stage, per dimension (``tp, cp, ep, dp, pp``) and
collective: calls per step, the nccl-tests size S of one call, bytes per rank per step and
seconds per step. The first three are the generated forms of ``symbolic.stage_time``
(``<dim>_<collective>_stage_*``); seconds are ``calls × t(S, n)`` with ``t`` the real time of the
candidate NCCL's tuner picks for one call of S bytes over the item's group of n ranks
(``codegen.pricing.collective.choose`` on the generated per-candidate forms of
``symbolic.collective_time``), evaluated once per item.

How it binds them:

* the model's and the layout's fields come from ``derive_fields_batch`` through ``stages.bind``
  (the ZeRO switches follow from ``comm_d_non_exp`` / ``comm_d_exp``);
* every hardware-side symbol comes from ``hardware.time_bindings(system)`` (its declared names
  ``TIME_SYMBOLS``), read by name, so a constant the collective model adds flows through unchanged;
* each collective's group is placed by the rank order (``codegen.pricing.placement``; Megatron's
  ``tp-cp-ep-dp-pp`` by default): the dense groups with degrees ``tp = t, cp, ep = 1, dp = d, pp = p``
  (the data-parallel group spans dp and cp: Megatron's ``dp-cp`` group), the expert groups (EP and the
  expert data-parallel group) with ``tp = t_exp, cp = 1, ep, dp = d·t·cp / (t_exp·ep), pp = p``
  (Megatron's expert rank generator); PP prices the pair of neighbouring stages. The generated
  ``placement_group_*`` (``placement_group2_*``) forms give ranks per node, nodes spanned and NICs used;
* a stage holds ``n_body + n_extra + n_extra_sel`` transformer layers (body and MTP), all of them MoE
  layers in a model with experts but its leading dense layers (``first_k_dense``,
  ``codegen.configs.stage_layer_kinds``: no expert dispatch and combine there); per-layer items
  (TP, CP, EP) are evaluated once per layout and weighed by the counts; DP's gradient buffer grows
  with the stage's layers, so DP is evaluated on each distinct count of the pipeline.

Nothing overlaps: a stage's communication seconds are the sum over its collectives; the
bottleneck is the stage with the most.

Speed: an item's forms and NCCL's pick read few inputs, which a block of layouts repeats massively, so
each is evaluated once per distinct tuple of its own inputs (mixed-radix codes of the block's whole
columns, no sort) and gathered back; the numbers are those of evaluating every layout, to the bit
(``TimePricer._item``; docs/time.md, "Speed").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

import generated
from symbolic.vocabulary import DEFAULT_EP_DISPATCHER, EP_DISPATCHERS

from ..configs import (LayoutBatch, LayoutError, ModelConfig, batch_stage_counts, check_batch, derive_fields_batch,
                       parse_recompute, stage_layer_kinds, stage_layers)
from ..runtime import inputs
from ..runtime.inputs import flag
from .collective import LEVEL_PARAMETERS, Chooser, arguments as collective_arguments, choose, enabled_on, \
    slopes as collective_slopes
from .engine import (TIME_BLOCK, TIME_GROUP_FROM, KeyColumns, PipelineShapes, batch_blocks, term_arguments,
                     term_function)
from .families import FamilySpec
from .placement import DEFAULT_ORDER, group_strides
from .stages import BIND_SOURCES, Fields, arrays_argument, batch_argument, bind, degrees_argument, model_argument

__all__ = ["TimePricer", "TimePrices", "TIME_DIMENSIONS", "ITEMS", "WHATS", "LEVELS", "time_family"]

#: The network-level parameters :meth:`TimePricer.stage_slopes` differentiates in (relative scales of a
#: level's latencies, α, or bandwidths, β; ``codegen.pricing.collective.LEVEL_PARAMETERS``).
LEVELS = tuple(LEVEL_PARAMETERS)

#: The dimensions a stage's communication time is split by.
TIME_DIMENSIONS = ("tp", "cp", "ep", "dp", "pp")
#: What the per-stage arrays hold per item: calls per step, S of one call, bytes per rank per step, seconds.
WHATS = ("calls_count", "msg_bytes", "step_bytes", "time_s")
#: The generated forms of one item (``symbolic.stage_time``): the first three of ``WHATS`` and the group's ranks.
FORMS = ("calls_count", "msg_bytes", "step_bytes", "ranks_count")
_GROUP_SYMBOLS = ("ranks_per_node", "nodes", "nics_used")
#: The two rank grids groups are placed in (Megatron's dense and expert rank generators): per grid, each
#: dimension's degree of the rank order as the layout fields it is the product of, over those it is divided
#: by (None: 1, the grid has no such dimension). The expert grid folds CP into its data-parallel dimension,
#: ``d·t·cp / (t_exp·ep)`` (Megatron's expert data-parallel size, world / (etp·ep·pp)), so that both grids
#: hold every rank.
PLACEMENT_GRIDS: dict[str, dict[str, tuple[tuple[str, ...], tuple[str, ...]] | None]] = {
    "dense": {"tp": (("t",), ()), "cp": (("cp",), ()), "ep": None, "dp": (("d",), ()), "pp": (("p",), ())},
    "expert": {"tp": (("t_exp",), ()), "cp": None, "ep": (("ep",), ()), "dp": (("d", "t", "cp"), ("t_exp", "ep")),
               "pp": (("p",), ())},
}
#: Per group of the time items: its grid, the dimensions its ranks vary along there (one, or two for the
#: data-parallel group with CP, ``symbolic.placement``'s ``placement_group2_*``), and a size that is not
#: those dimensions' degrees (2: the pair of neighbouring stages a pipeline send joins).
PLACEMENT_GROUPS: dict[str, tuple[str, tuple[str, ...], float | None]] = {
    "tp": ("dense", ("tp",), None), "cp": ("dense", ("cp",), None), "dp": ("dense", ("dp", "cp"), None),
    "pp": ("dense", ("pp",), 2.0), "ep": ("expert", ("ep",), None), "etp": ("expert", ("tp",), None),
    "edp": ("expert", ("dp",), None),
}
#: The key columns that decide a group's placement: per dimension of the group, its size and its stride.
_PLACEMENT_KEYS = (("size", "stride"), ("size2", "stride2"))

#: NCCL's pick per collective and system constants, for every pricer (``TimePricer._chooser``).
_CHOOSERS: dict[tuple[Any, ...], Chooser] = {}
#: Most sets of pipeline shapes a pricer keeps the layer tables of (``TimePricer._shape_tables``).
_TABLES_KEEP = 256


@dataclass(frozen=True)
class TimePrices:
    """Communication seconds per step of N layouts.

    Attributes:
        bottleneck_s: seconds of the stage with the most communication seconds, ``(N,)``.
        by_dimension: per dimension of ``TIME_DIMENSIONS``, that stage's seconds, ``(N,)``.
        bottleneck_stage: the index of that stage, ``(N,)`` integers.
        stages: with ``per_stage=True``, ``what → "dim.collective" → (N, P_max)`` for ``what`` in
            ``WHATS`` (NaN past a layout's last stage), plus ``"total_s"`` → ``(N, P_max)`` (the
            stage's seconds over every collective); else ``None``.
    """

    bottleneck_s: np.ndarray
    by_dimension: dict[str, np.ndarray]
    bottleneck_stage: np.ndarray
    stages: dict[str, Any] | None = None


def _items() -> tuple[tuple[str, str, str, str], ...]:
    """(dimension, collective, group, weight) of every item of ``symbolic.stage_time``, from the generated table."""
    out = []
    for meta in generated.FORMULAS.values():
        pairs = dict(meta.get("variant", ()))
        if pairs.get("output") == "time" and pairs.get("what") == "calls_count":
            out.append((pairs["dimension"], pairs["collective"], pairs["group"], pairs["weight"]))
    return tuple(out)


def _ops() -> dict[str, str]:
    """``"dim.collective"`` → the NCCL collective it runs (``all_reduce``, ``send_recv``, …)."""
    out = {}
    for meta in generated.FORMULAS.values():
        pairs = dict(meta.get("variant", ()))
        if pairs.get("output") == "time" and pairs.get("what") == "calls_count":
            out[f"{pairs['dimension']}.{pairs['collective']}"] = pairs["op"]
    return out


OPS = _ops()


#: Per item of ``symbolic.stage_time``: (dimension, collective, group, weight), in registry order.
ITEMS = _items()


def _item_name(dim: str, coll: str, what: str) -> str:
    return f"{dim}_{coll}_stage_{what}"


_PARAMS = ("P_ne", "P_r")
#: What the collective forms read besides the hardware (``TIME_SYMBOLS``) and the group's placement.
_CALL_SYMBOLS = ("msg_bytes", "ranks")
#: Model constants a collective form reads (the expert dispatch: the copies of a token, top-k, and its routing
#: groups), bound with the hardware's constants for the ops that read them.
_MODEL_CALL_SYMBOLS = ("n_chosen_exp", "n_route_groups", "n_route_groups_topk")
#: The switches of the pricer's own run settings (not layout fields, so not ``bind``'s): the expert dispatcher's.
_SETTING_SYMBOLS = ("ep_dedup",)
#: The stage's layer counts a per-stage form reads (``(M, U)`` columns, functions of the pipeline shape).
_LAYER_SYMBOLS = ("n_layers_stage", "n_moe_layers_stage")


def _layer_params(f: Fields) -> dict[str, Any]:
    """``P_ne`` and ``P_r`` of one transformer layer (the generated ``params_*`` forms of the model's variant).

    The dense data-parallel group reduces every parameter that is not a routed expert, so ``P_ne``
    is bound with the shared experts included (``P_ne + P_s``); ``P_r`` is the routed experts'.
    """
    from symbolic.vocabulary import attention_variant

    att = attention_variant(dc_kv=f.scalar("dc_kv"), dc_q=f.scalar("dc_q")).value
    label = "moe" if f.scalar("n_exp") > 1 else "dense"
    out = {}
    for key, name in (("P_ne", f"params_{att}_{label}_non_expert_params"),
                      ("P_s", f"params_{label}_shared_experts_params"),
                      ("P_r", f"params_{label}_routed_experts_params")):
        out[key] = term_function(name)(**{a: f.num(a) for a in term_arguments(name)})
    return {"P_ne": out["P_ne"] + out["P_s"], "P_r": out["P_r"]}


def _broadcast(value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """*value* seen as *shape*: itself where it has that shape already (most calls; ``np.broadcast_to`` costs a few
    µs even then), else a read-only broadcast view. Nothing here writes into the arrays it passes on."""
    return value if value.shape == shape else np.broadcast_to(value, shape)


class TimePricer:
    """Prices the communication seconds of arrays of layouts of one model on one catalog system.

    Args:
        model: a bundled model name, a YAML path or a loaded ``ModelConfig``.
        system: a catalog system (or alias) with ``[gpu]`` facts, e.g. ``"dgx_h100"``.
        order: the rank order, dimensions innermost first (``tp-cp-ep-dp-pp``: Megatron's default).
        fsdp, recompute: run settings shared by every layout (``None`` keeps the model file's).
        volumes_only: only :meth:`volumes` will be asked for (calls, S, bytes: no hardware needed, so
            a system without GPU facts is accepted).
        ep_dispatcher: the expert dispatcher the run moves its tokens with (``symbolic.vocabulary.EP_DISPATCHERS``:
            ``alltoall``, NCCL's, the default; ``deepep`` or ``hybridep``, which send a token once per destination
            node and rank: docs/time.md, "Expert dispatch").

    Every public method checks its arguments and raises a ``ValueError`` naming the argument and the value
    (``codegen.runtime.inputs.InputError``; ``codegen.configs.LayoutError`` for a layout that breaks a rule).

    Raises:
        ValueError: naming an unknown model or system, a system without GPU facts (A2, A3), a
            malformed order, or a setting of another kind (``fsdp="no"``, ``recompute=5``, an unknown
            ``ep_dispatcher``).
    """

    #: Layouts per block (``engine.TIME_BLOCK``) and fewest layouts of a block grouped (``engine.TIME_GROUP_FROM``).
    block: int = TIME_BLOCK
    group_from: int = TIME_GROUP_FROM

    def __init__(self, model: str | ModelConfig, *, system: str, order: str = DEFAULT_ORDER, fsdp: bool | None = None,
                 recompute: str | None = None, volumes_only: bool = False, ep_dispatcher: str = DEFAULT_EP_DISPATCHER):
        import hardware
        from hardware import TIME_SYMBOLS, time_bindings

        model = model_argument(model)
        inputs.instance("system", system, str, "a hardware catalog name such as dgx_h100")
        self.ep_dispatcher = inputs.one_of("ep_dispatcher", ep_dispatcher, EP_DISPATCHERS)
        if fsdp is not None:
            fsdp = flag("fsdp", fsdp)
        if recompute is not None:  # the plan's text, parsed as every layout will be (a LayoutError naming it)
            inputs.instance("recompute", recompute, str, "None or recompute text (full, selective, none or N,N,…)")
            parse_recompute(recompute)
        volumes_only = flag("volumes_only", volumes_only)
        self.model = model
        self.system_name = system
        self.system = hardware.load(system)
        if self.system.gpu is None and not volumes_only:
            raise inputs.InputError(f"--device {system}: system {self.system.name!r} has no GPU and network facts "
                                    "([gpu] table); the time model needs a catalog system such as dgx_h100")
        self.volumes_only = bool(volumes_only)
        self.hardware = {} if self.system.gpu is None else {k: float(v) for k, v in time_bindings(self.system).items()}
        dims = order.split("-") if isinstance(order, str) else []
        if sorted(dims) != sorted(TIME_DIMENSIONS):
            raise inputs.InputError(f"order: the dimensions {', '.join(TIME_DIMENSIONS)} each once, joined by "
                                    f"'-', got {order!r}")
        self.order = order
        self.fsdp, self.recompute = fsdp, recompute
        self._counts: dict[Any, Mapping[str, np.ndarray] | None] = {}
        self._columns: dict[Any, tuple[np.ndarray, np.ndarray]] = {}
        self._tables: dict[Any, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self._choosers: dict[str, Chooser] = {}
        self._enabled_ops: dict[str, tuple[bool, ...] | None] = {}
        #: Per op, the model constants its forms read (bound with the hardware's: ``_shared``).
        self._model_call: dict[str, dict[str, float]] = {}
        for op in set(OPS.values()):  # the collective forms read the hardware, the placement, S, n and top-k only
            read = collective_arguments(op)
            extra = read - TIME_SYMBOLS - set(_GROUP_SYMBOLS) - set(_CALL_SYMBOLS) - set(_MODEL_CALL_SYMBOLS)
            if extra:
                raise RuntimeError(f"collective {op}: symbols neither hardware nor placement: {sorted(extra)}")
            self._model_call[op] = {name: float(getattr(model, name)) for name in _MODEL_CALL_SYMBOLS if name in read}
        names = [_item_name(dim, coll, what) for dim, coll, _, _ in ITEMS for what in FORMS]
        layout_args = {a for n in names for a in term_arguments(n)} - {"n_layers_stage", "n_moe_layers_stage"}
        self._needed = frozenset(layout_args)
        params = {a for n in generated.FORMULAS if n.startswith("params_") for a in term_arguments(n)}
        self._fields = tuple(sorted({s for n in layout_args - set(_PARAMS) - set(_SETTING_SYMBOLS)
                                     for s in BIND_SOURCES.get(n, (n,))}
                                    | {"t", "cp", "ep", "d", "p", "vp", "t_exp", "d_exp", "n_exp", "dc_kv", "dc_q"}
                                    | params))

    # ------------------------------------------------------------------ public

    def __call__(self, *, per_stage: bool = False, validated: bool = False, **arrays: Any) -> TimePrices:
        """Prices of the layouts given as arrays (``d, t, p, cp, ep, m, b``, …; ``LayoutBatch.from_arrays``)."""
        arrays_argument(arrays)
        batch = LayoutBatch.from_arrays(self.model.layout, fsdp=self.fsdp, recompute=self.recompute,
                                        validated=validated, **arrays)
        return self.price_batch(batch, per_stage=per_stage, validated=validated)

    def price_batch(self, batch: LayoutBatch, *, validated: bool = False, per_stage: bool = False,
                    dimensions: tuple[str, ...] = TIME_DIMENSIONS) -> TimePrices:
        """Communication seconds of the layouts of *batch*: the bottleneck stage's, by dimension.

        Args:
            validated: the caller kept only layouts ``validate_batch`` accepts (not checked again).
            per_stage: also every stage's calls, S, bytes and seconds per dimension and collective.
            dimensions: price these dimensions' collectives only (of ``TIME_DIMENSIONS``); the bottleneck is
                then the stage with the most seconds of these, and ``by_dimension`` (and ``stages``) holds them
                alone. Every stage's total over all dimensions is at least its total over some, so the
                bottleneck's seconds of a subset are a lower bound of the bottleneck's over all of them (a
                search's floors: ``codegen.search.run``), at the cost of that subset's collectives only.

        Raises:
            codegen.configs.LayoutError: naming the first invalid layout and its constraint.
            ValueError: naming an unknown dimension.
        """
        batch = batch_argument(batch)
        validated = flag("validated", validated)
        per_stage = flag("per_stage", per_stage)
        if self.volumes_only:
            raise inputs.InputError("TimePricer(volumes_only=True) prices volumes only: use volumes()")
        if dimensions is not TIME_DIMENSIONS:
            if not isinstance(dimensions, tuple) or not dimensions or any(d not in TIME_DIMENSIONS for d in dimensions):
                raise inputs.InputError(f"dimensions: a non-empty tuple of {', '.join(TIME_DIMENSIONS)}, "
                                        f"got {dimensions!r}")
            dimensions = tuple(d for d in TIME_DIMENSIONS if d in dimensions)  # in their order, each once
        return self._price(batch, validated, WHATS if per_stage else ("time_s",), per_stage, dimensions)

    def volumes(self, batch: LayoutBatch, *, validated: bool = False) -> dict[str, dict[str, np.ndarray]]:
        """Every stage's calls per step, S of one call and bytes per rank per step, per dimension and collective.

        Returns:
            ``what → "dim.collective" → (N, P_max)`` for ``what`` in ``calls_count, msg_bytes, step_bytes``
            (NaN past a layout's last stage). No hardware is read.
        """
        stages = self._price(batch_argument(batch), flag("validated", validated), WHATS[:3], True).stages
        assert stages is not None
        return {what: stages[what] for what in WHATS[:3]}

    def _price(self, batch: LayoutBatch, validated: bool, whats: tuple[str, ...], per_stage: bool,
               dimensions: tuple[str, ...] = TIME_DIMENSIONS) -> TimePrices:
        n = len(batch)
        if not validated and n:
            check_batch(self.model, batch)
        bottleneck = np.empty(n)
        stage_idx = np.zeros(n, dtype=np.int64)
        by_dim = {dim: np.empty(n) for dim in dimensions}
        items = ITEMS if dimensions == TIME_DIMENSIONS else tuple(item for item in ITEMS if item[0] in dimensions)
        p_max = int(batch.p.max()) if n else 0
        stages: dict[str, Any] | None = None
        if per_stage:
            stages = {what: {f"{dim}.{coll}": np.full((n, p_max), np.nan) for dim, coll, _, _ in items}
                      for what in whats}
            stages["total_s"] = np.full((n, p_max), np.nan)
        for rows, block in batch_blocks(batch, self.block):
            self._price_block(block, rows, whats, bottleneck, stage_idx, by_dim, stages, items)
        return TimePrices(bottleneck_s=bottleneck, by_dimension=by_dim, bottleneck_stage=stage_idx, stages=stages)

    # ------------------------------------------------------------------ internals

    def _pick_times(self, op: str, calls: list[dict[str, Any]]) -> list[np.ndarray]:
        """The time NCCL's pick of *op* takes for each of *calls* (S, n and the group's placement).

        One evaluation of the candidates over every call's elements (``Chooser.times``: the items of a
        collective in a block, three for an all-gather, are one call of each form instead of three), with the
        numbers of ``choose`` per call on the generated functions (the tests compare the two to the bit).
        """
        return self._chooser(op).times(calls)

    def _enabled(self, op: str) -> tuple[bool, ...] | None:
        """The candidates of *op* NCCL runs over this system's network (``enabled_on``), found once per op."""
        if op not in self._enabled_ops:
            self._enabled_ops[op] = enabled_on(self.system, op)
        return self._enabled_ops[op]

    def _chooser(self, op: str) -> Chooser:
        """NCCL's pick for *op* with this system's constants bound, made when first asked (``Chooser``: the
        numbers of ``choose``, without a generated function call's fixed cost per candidate form)."""
        chooser = self._choosers.get(op)
        shared = self._shared(op)
        if chooser is None or chooser.shared != shared:  # made again for new constants (a caller's scaling)
            # Shared by the pricers of one system (a search builds one per run setting); keyed by the constants'
            # exact bits (float.hex: 0.0 and -0.0 apart), as the kernels' invariants see them.
            key = (op, tuple((name, type(value), float.hex(value) if isinstance(value, float) else value)
                             for name, value in sorted(shared.items())), self._enabled(op))
            chooser = _CHOOSERS.get(key)
            if chooser is None:
                if len(_CHOOSERS) >= 64:
                    _CHOOSERS.clear()
                chooser = _CHOOSERS[key] = Chooser(op, shared, self._enabled(op))
            self._choosers[op] = chooser
        return chooser

    def _shared(self, op: str) -> dict[str, Any]:
        """The constants every call of *op* reads: the hardware's and, for the expert dispatch, the model's top-k."""
        model_call = self._model_call.get(op)
        return dict(self.hardware, **model_call) if model_call else self.hardware

    def _stage_counts(self, batch: LayoutBatch, p: int, vp: int) -> Mapping[str, np.ndarray]:
        counts = batch_stage_counts(self.model, batch, p, vp, self._counts)
        if counts is None:  # a pipeline the batch's layouts cannot have: not a layout validate_batch accepts
            raise LayoutError(f"{self.model.name}: no layout of the batch can have a pipeline of p = {p}, vp = {vp}")
        return counts

    def _values(self, batch: LayoutBatch) -> tuple[dict[str, Any], Fields]:
        derived = derive_fields_batch(self.model, batch, names=self._fields, validated=True, compact=True)
        f = Fields(derived)
        values = bind(f, self._needed - set(_PARAMS) - set(_SETTING_SYMBOLS), system=self.system)
        values.update(_layer_params(f))
        values.update(self.hardware)
        values["ep_dedup"] = float(EP_DISPATCHERS[self.ep_dispatcher][0])  # the run's expert dispatcher
        return values, f

    def _groups(self, f: Fields) -> dict[str, tuple[tuple[Any, Any], ...]]:
        """Per group (tp, cp, ep, dp, edp, pp): per dimension its ranks vary along, the ranks along it and the
        stride between them, numbers or arrays (:data:`PLACEMENT_GRIDS`, :data:`PLACEMENT_GROUPS`)."""
        def degree(spec: tuple[tuple[str, ...], tuple[str, ...]] | None) -> Any:
            if spec is None:
                return 1.0
            value: Any = 1.0
            for name in spec[0]:
                value = value * f.num(name)
            for name in spec[1]:
                value = value / f.num(name)
            return value

        degrees = {grid: {dim: degree(spec) for dim, spec in dims.items()} for grid, dims in PLACEMENT_GRIDS.items()}
        try:
            strides = {grid: group_strides(self.order, values) for grid, values in degrees.items()}
        except ValueError:
            raise self._unplaced(degrees) from None
        return {group: tuple((degrees[grid][dim] if size is None else size, strides[grid][dim]) for dim in dims)
                for group, (grid, dims, size) in PLACEMENT_GROUPS.items()}

    @staticmethod
    def _unplaced(degrees: Mapping[str, Mapping[str, Any]]) -> inputs.InputError:
        """The error for layouts whose rank grid has a degree below 1 (the expert grid of a layout with
        ``t_exp·ep > d·t·cp``, which no layout rule of a dense model refuses), naming the fields and the value."""
        for grid, values in degrees.items():
            for dim, value in values.items():
                bad = np.asarray(value) < 1
                if np.any(bad):
                    spec = PLACEMENT_GRIDS[grid][dim]
                    got = float(np.asarray(value).ravel()[int(np.argmax(bad))] if bad.ndim else value)
                    ratio = "·".join(spec[0]) + (f"/({'·'.join(spec[1])})" if spec[1] else "")
                    return inputs.InputError(
                        f"{', '.join(spec[0] + spec[1])}: the {grid} rank grid's {dim} degree {ratio} is {got:g} < 1 "
                        f"in a layout of the batch (t_exp is etp where given): its groups cannot be placed")
        return inputs.InputError(f"the rank grids' degrees: one below 1 in {dict(degrees)!r:.200}")

    @staticmethod
    def placement_fields() -> dict[str, frozenset[str]]:
        """Per group (tp, cp, ep, dp, edp, pp), the layout fields :meth:`_groups` reads to place it: its size and
        its stride (``group_strides`` of the rank order over its grid's degrees) follow from the degrees of its
        whole rank grid, each the product of the fields :data:`PLACEMENT_GRIDS` declares over those it divides by.
        """
        grids = {grid: frozenset(field for spec in dims.values() if spec is not None for field in (*spec[0], *spec[1]))
                 for grid, dims in PLACEMENT_GRIDS.items()}
        return {group: grids[grid] for group, (grid, _dims, _size) in PLACEMENT_GROUPS.items()}

    def _placements(self, f: Fields, groups: Mapping[str, tuple[tuple[Any, Any], ...]] | None = None
                    ) -> dict[str, dict[str, Any]]:
        """Per group (tp, cp, ep, dp, edp, pp): ranks_per_node, nodes and nics_used, numbers or arrays: the
        ``placement_group_*`` forms of the group's size and stride (``placement_group2_*`` for a group over two
        dimensions; :meth:`_groups`) and the node's GPUs and NICs."""
        groups = self._groups(f) if groups is None else groups
        node = {"gpus_per_node": self.hardware["gpus_per_node"], "nics_per_node": self.hardware["nics_per_node"]}
        out: dict[str, dict[str, Any]] = {}
        for group, parts in groups.items():
            args = dict(node, group_size=parts[0][0], group_stride=parts[0][1])
            prefix = "placement_group"
            if len(parts) == 2:
                args.update(group_size_2=parts[1][0], group_stride_2=parts[1][1])
                prefix = "placement_group2"
            out[group] = {key: term_function(f"{prefix}_{key}_count")(
                **{a: args[a] for a in term_arguments(f"{prefix}_{key}_count")}) for key in _GROUP_SYMBOLS}
        return out

    #: What a stage's layer columns (:meth:`_layer_columns`, which weigh every item) follow from: the pipeline shape
    #: and the recompute plan (the batch's recompute and offset lists, ``batch_stage_counts``).
    LAYER_KEYS = ("p", "vp", "recompute")

    def _layer_columns(self, batch: LayoutBatch, moe: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per layout, its stages' distinct (layers, MoE layers) columns and each stage's column.

        Returns:
            ``layers`` and ``moe_layers`` of shape (M, U) (a layout's distinct counts, padded with its
            first), ``where`` (M, P_max): each stage's column (0 past the layout's last stage), and
            ``inside`` (M, P_max): True for the layout's own stages. All four are functions of the
            layout's pipeline shape ``(p, vp)`` (the batch's run settings shared): rows of tables over the
            shapes present (``engine.PipelineShapes.used``), read at each layout's index.
        """
        shapes = PipelineShapes.used(batch.p, batch.vp)
        tables = self._shape_tables(batch, moe, shapes)
        index = np.zeros(len(batch), dtype=np.intp) if shapes.index is None else shapes.index
        return tuple(np.take(table, index, axis=0) for table in tables)  # type: ignore[return-value]

    def _shape_tables(self, batch: LayoutBatch, moe: bool, shapes: PipelineShapes
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`_layer_columns`' four tables, a row per index of the pipeline shapes present (*shapes*; rows
        of indexes no shape has are not read), once per pricer, run settings and set of shapes: a search's
        chunks repeat their few sets (read-only arrays)."""
        settings = (batch.recompute, batch.offset, batch.offset_pipeline, batch.recompute_pipeline, moe,
                    shapes.radix, tuple(shapes.present.items()))
        known = self._tables.get(settings)
        if known is not None:
            return known
        tables = {i: self._stage_columns(batch, pv, v, moe) for i, (pv, v) in shapes.present.items()}
        u_max = max(t[0].shape[1] for t in tables.values())
        p_max = max(pv for pv, _ in shapes.present.values())
        size = max(shapes.present) + 1
        lay = np.zeros((size, u_max))
        moe_lay = np.zeros((size, u_max))
        where = np.zeros((size, p_max), dtype=np.intp)
        inside = np.zeros((size, p_max), dtype=bool)
        for j, (distinct, w) in tables.items():
            u = distinct.shape[1]
            lay[j, :u], moe_lay[j, :u] = distinct
            lay[j, u:], moe_lay[j, u:] = distinct[0, 0], distinct[1, 0]
            where[j, :len(w)] = w
            inside[j, :len(w)] = True
        for table in (lay, moe_lay, where, inside):
            table.flags.writeable = False
        if len(self._tables) >= _TABLES_KEEP:
            self._tables.clear()
        self._tables[settings] = (lay, moe_lay, where, inside)
        return lay, moe_lay, where, inside

    def _stage_columns(self, batch: LayoutBatch, p: int, vp: int, moe: bool) -> tuple[np.ndarray, np.ndarray]:
        """One pipeline's distinct (layers, MoE layers) columns (2, U) and each stage's column, once per pricer."""
        key = (p, vp, *batch.stage_lists(p, vp), moe)
        if key not in self._columns:
            layers = stage_layers(self._stage_counts(batch, p, vp))  # (P,)
            if moe and self.model.first_k_dense:
                # The leading dense layers have no experts: a stage's MoE layers are its others
                # (stage_layer_kinds; the step time's published structure).
                moe_layers = layers - stage_layer_kinds(self.model, p, vp, batch.stage_lists(p, vp)[1])["n_dense"]
                pairs, where = np.unique(np.stack([layers, moe_layers], axis=1), axis=0, return_inverse=True)
                self._columns[key] = (np.ascontiguousarray(pairs.T), np.asarray(where).reshape(-1))
                return self._columns[key]
            # The distinct columns of (layers, MoE layers): the second row follows from the first, so they are the
            # distinct layer counts in order (a 1-D unique, a quarter of the cost of a column-wise one).
            counts_in_order, where = np.unique(layers, return_inverse=True)
            distinct = np.stack([counts_in_order, counts_in_order if moe else np.zeros_like(counts_in_order)])
            self._columns[key] = (distinct, np.asarray(where).reshape(-1))
        return self._columns[key]

    def _item(self, dim: str, coll: str, weight: str, args: Mapping[str, Any], placement: Mapping[str, Any],
              outputs: list[str], timed: bool, m: int, u: int, keys: KeyColumns, group: str,
              found_by: dict[frozenset[str], tuple[np.ndarray, np.ndarray] | None]
              ) -> tuple[dict[str, np.ndarray], tuple[dict[str, Any], Callable[[np.ndarray], None]] | None]:
        """One item's forms *outputs* (and with *timed* its seconds per layer or stage) over a block of *m*
        layouts: ``(m, 1)`` per layer or MoE layer, ``(m, U)`` per stage column.

        Each form reads few inputs (its arguments that vary over the block and, for a per-stage form, the
        pipeline's layer columns: functions of the pipeline shape, keys ``"p@shape"``, ``"vp@shape"``), and
        NCCL's pick reads those of S and n and the group's placement (not the micro-batches, say), and a
        block repeats them a lot. With *keys* (``engine.KeyColumns``: each varying value's whole ``(m,)`` column,
        ``None`` where not whole; the group's size and stride, which decide its placement, ``"size@<group>"``,
        ``"stride@<group>"``) the layouts are grouped by those inputs
        (``KeyColumns.group``; *found_by* keeps the block's groupings by key set, shared by the items) and
        each form and NCCL's pick evaluated once per group, then gathered back with one ``take``:
        element-wise forms on the same inputs give the same numbers, to the bit. Seconds are then
        ``calls × t`` per layout, as without grouping.

        Returns:
            the forms by ``what`` and, where *timed* and the collective runs, NCCL's call to pick (its S, n
            and placement) with the function that sets ``"time_s"`` from the picked time (the caller picks
            for every item of a collective at once: :meth:`_pick_times`).
        """
        shape = (m, u) if weight == "stage" else (m, 1)
        cols = {k: (v[:, None] if isinstance(v, np.ndarray) and v.ndim == 1 else v) for k, v in placement.items()}

        def rows(names: set[str], placed: bool) -> tuple[np.ndarray, np.ndarray] | None:
            if m < self.group_from or not keys.columns:
                return None
            key = {a for a in names if a not in _LAYER_SYMBOLS and isinstance(args[a], np.ndarray) and args[a].ndim}
            if weight == "stage" and names & set(_LAYER_SYMBOLS):
                key |= {"p@shape", "vp@shape"}
            if placed:  # the group's placement: by its sizes and strides (see _price_block)
                key |= {f"{k}@{group}" for pair in _PLACEMENT_KEYS for k in pair if f"{k}@{group}" in keys.columns}
            frozen = frozenset(key)
            if frozen not in found_by:
                found_by[frozen] = keys.group(sorted(frozen))
            return found_by[frozen]

        def evaluate(name: str, values: Mapping[str, Any], found: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
            if found is not None:
                values = {a: (values[a][found[0]] if isinstance(values[a], np.ndarray) and values[a].ndim
                              else values[a]) for a in term_arguments(name)}
            value = np.asarray(term_function(name)(**{a: values[a] for a in term_arguments(name)}), dtype=float)
            if value.ndim == 1 and len(shape) == 2:  # a per-layer form over the layouts: one column
                value = value[:, None]
            return _broadcast(value, shape if found is None else (len(found[0]), shape[1]))

        def gather(value: np.ndarray, found: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
            return value if found is None else np.take(value, found[1], axis=0)

        got: dict[str, np.ndarray] = {}
        for what in dict.fromkeys([*outputs, *(["calls_count"] if timed else [])]):
            name = _item_name(dim, coll, what)
            found = rows(set(term_arguments(name)), False)
            got[what] = gather(evaluate(name, args, found), found)
        if timed:
            calls = got["calls_count"]
            if not np.any(calls):  # the collective does not run here: 0 s, skip NCCL's model
                got["time_s"] = np.zeros(shape)
                return got, None
            size_name, ranks_name = _item_name(dim, coll, "msg_bytes"), _item_name(dim, coll, "ranks_count")
            found = rows(set(term_arguments(size_name)) | set(term_arguments(ranks_name)), True)
            sub = cols if found is None else {
                k: (v[found[0]] if isinstance(v, np.ndarray) and v.ndim else v) for k, v in cols.items()}
            call_values = dict(sub, msg_bytes=evaluate(size_name, args, found), ranks=evaluate(ranks_name, args, found))

            def finish(one: np.ndarray) -> None:
                got["time_s"] = np.where(calls > 0, calls * gather(_broadcast(
                    one, calls.shape if found is None else (len(found[0]), shape[1])), found), 0.0)

            return got, (call_values, finish)
        return got, None

    def _price_block(self, batch: LayoutBatch, rows: slice, whats: tuple[str, ...], bottleneck: np.ndarray,
                     stage_idx: np.ndarray, by_dim: dict[str, np.ndarray], stages: dict[str, Any] | None,
                     items_priced: tuple[tuple[str, str, str, str], ...] = ITEMS) -> None:
        """Price one block: every item of *items_priced* evaluated once per layout and distinct layer count of its
        stages.

        A stage's items depend on its layers alone, so each of a layout's stages is one of its distinct
        (layers, MoE layers) columns: the bottleneck is the largest column total, the stages gather
        their column.
        """
        values, f = self._values(batch)
        timed = "time_s" in whats
        groups = self._groups(f)
        if items_priced is not ITEMS:  # the groups these items run over (the others' placements not needed)
            used = {group for _, _, group, _ in items_priced}
            groups = {group: value for group, value in groups.items() if group in used}
        placed = self._placements(f, groups) if timed else {g: {} for g in groups}
        m = len(batch)
        lay, moe_lay, where, inside = self._layer_columns(batch, f.scalar("n_exp") > 1)
        u = lay.shape[1]
        col = {k: (v[:, None] if isinstance(v, np.ndarray) and v.ndim else v) for k, v in values.items()}
        keys = KeyColumns(m)  # per varying value, its whole (m,) column, made when first asked: the items' group keys
        if m >= self.group_from:
            keys.columns = {k: v for k, v in values.items() if isinstance(v, np.ndarray) and v.ndim == 1}
            keys.columns["p@shape"], keys.columns["vp@shape"] = batch.p, batch.vp  # the layer columns' (_layer_columns)
            # A group's placement follows from its size and stride alone (the node's GPUs and NICs fixed; those of
            # each of its two dimensions for the data-parallel group with CP): two columns to group NCCL's calls by
            # instead of the three placement values (and the size is often a column the forms read already).
            for group, parts in groups.items():
                for names, size_stride in zip(_PLACEMENT_KEYS, parts):
                    keys.columns.update({f"{k}@{group}": v for k, v in zip(names, size_stride)
                                         if isinstance(v, np.ndarray) and v.ndim == 1})
        per_column: dict[tuple[str, str], np.ndarray] = {}  # (item, what) -> (M, U)
        outputs = [w for w in FORMS if w in whats]
        found_by: dict[frozenset[str], tuple[np.ndarray, np.ndarray] | None] = {}
        items: list[tuple[str, str, dict[str, np.ndarray]]] = []
        picks: dict[str, list[tuple[dict[str, Any], Callable[[np.ndarray], None]]]] = {}  # by NCCL collective
        for dim, coll, group, weight in items_priced:
            key = f"{dim}.{coll}"
            if weight == "stage":
                args = dict(col, n_layers_stage=lay, n_moe_layers_stage=moe_lay)
            else:
                args = dict(values, n_layers_stage=1.0, n_moe_layers_stage=1.0)
            grp = placed[group] if timed else {}
            got, pick = self._item(dim, coll, weight, args, grp, outputs, timed, m, u, keys, group, found_by)
            items.append((key, weight, got))
            if pick is not None:
                picks.setdefault(OPS[key], []).append(pick)
        for op, asked in picks.items():
            for (_, finish), one in zip(asked, self._pick_times(op, [call for call, _ in asked])):
                finish(one)
        for key, weight, got in items:
            for what in whats:
                value = got[what]
                if weight != "stage" and what != "msg_bytes":
                    value = value * (lay if weight == "layer" else moe_lay)
                per_column[(key, what)] = _broadcast(value, (m, u))
        keys = [f"{dim}.{coll}" for dim, coll, _, _ in items_priced]
        if timed:
            dims = {dim: sum(per_column[(k, "time_s")] for k in keys if k.split(".")[0] == dim) for dim in by_dim}
            total = sum(dims.values())
            best = np.argmax(total, axis=1)
            pick = np.arange(m)
            bottleneck[rows] = total[pick, best]
            # The first stage with that column.
            stage_idx[rows] = np.argmax((where == best[:, None]) & inside, axis=1)
            for dim in by_dim:
                by_dim[dim][rows] = dims[dim][pick, best]
        if stages is not None:
            p_max = stages[whats[0]][keys[0]].shape[1]
            w = where[:, :p_max]
            for (key, what), value in per_column.items():
                stages[what][key][rows] = np.where(inside, np.take_along_axis(value, w, axis=1), np.nan)
            if timed:
                stages["total_s"][rows] = np.where(inside, np.take_along_axis(total, w, axis=1), np.nan)

    # ------------------------------------------------------------------ sensitivity

    def stage_slopes(self, batch: LayoutBatch, degrees: tuple[str, ...], *, relax_p: bool = True,
                     validated: bool = False) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Every stage's communication seconds and their derivatives, by chain rule on generated forms.

        Per item, seconds = W · calls · t(S, n) with W the stage's layers (TP, CP), MoE layers (EP) or 1
        (DP, PP, whose S holds the layer counts). For a degree x:
        ``∂/∂x = W · (∂calls/∂x · t + calls · (∂t/∂S · ∂S/∂x + ∂t/∂n · ∂n/∂x))`` with the item forms'
        derivatives (``symbolic.stage_time``, derived fields held) and the chosen candidate's
        (``codegen.pricing.collective.slopes``; the placement held). For ``p`` with *relax_p* the stage's
        layer counts are relaxed ∝ 1/p (``∂L/∂p = −L/p``, as ``symcost sensitivity`` does). For a level
        parameter of ``LEVELS``: ``W · calls · ∂t/∂λ``.

        Returns:
            ``totals`` (N, P_max) and ``{name: (N, P_max)}`` for each of *degrees* and ``LEVELS``
            (seconds per unit of the degree; seconds per unit of the level's relative scale); NaN past a
            layout's last stage.

        Raises:
            InputError: for a *batch* that is no ``LayoutBatch``, *degrees* not a list of
                ``symbolic.vocabulary.DEGREES`` (one string is not: ``"tp"`` is not ``t`` and ``p``).
            LayoutError: naming the first invalid layout (unless *validated*).
        """
        batch = batch_argument(batch)
        degrees = degrees_argument(degrees)
        relax_p = flag("relax_p", relax_p)
        n = len(batch)
        if not flag("validated", validated) and n:
            check_batch(self.model, batch)
        values, f = self._values(batch)
        placed = self._placements(f)
        lay, moe_lay, where, inside = self._layer_columns(batch, f.scalar("n_exp") > 1)
        m, u = len(batch), lay.shape[1]
        col = {k: (v[:, None] if isinstance(v, np.ndarray) and v.ndim else v) for k, v in values.items()}
        p = np.asarray(f.num("p"), dtype=float)
        p = p[:, None] if p.ndim else p
        names = (*degrees, *LEVELS)
        total = np.zeros((m, u))
        grads = {x: np.zeros((m, u)) for x in names}
        for dim, coll, group, weight in ITEMS:
            if weight == "stage":
                args = dict(col, n_layers_stage=lay, n_moe_layers_stage=moe_lay)
            else:
                args = dict(values, n_layers_stage=1.0, n_moe_layers_stage=1.0)

            def form(what: str, by: str | None = None) -> np.ndarray:
                name = _item_name(dim, coll, what) + (f"__d_{by}" if by else "")
                if name not in generated.FORMULAS:
                    return np.zeros(())
                value = np.asarray(term_function(name)(**{a: args[a] for a in term_arguments(name)}), dtype=float)
                return np.broadcast_to(value, (m,))[:, None] if weight != "stage" else value

            calls, size, ranks = form("calls_count"), form("msg_bytes"), form("ranks_count")
            d_calls = {x: form("calls_count", x) for x in degrees}
            if not np.any(calls) and not any(np.any(v) for v in d_calls.values()):
                continue  # off, and stays off nearby (a collective switching on at a degree of 1 is not skipped)
            grp = {k: (v[:, None] if isinstance(v, np.ndarray) and v.ndim else v) for k, v in placed[group].items()}
            call_values = dict(self._shared(OPS[f"{dim}.{coll}"]), **grp, msg_bytes=size, ranks=ranks)
            pick = choose(OPS[f"{dim}.{coll}"], call_values, self._enabled(OPS[f"{dim}.{coll}"]))
            on = calls > 0
            # Where the calls are 0 the time of one call still weighs their derivative (the right derivative at
            # a degree of 1: the collective switches on as the group grows).
            t_call = np.where(np.isfinite(pick.time_s), pick.time_s, 0.0)
            t = np.where(on, t_call, 0.0)
            dt = {k: np.where(on & np.isfinite(v), v, 0.0) for k, v in
                  collective_slopes(OPS[f"{dim}.{coll}"], call_values, pick.index).items()}
            w = lay if weight == "layer" else moe_lay if weight == "moe_layer" else 1.0
            total += w * calls * t
            for x in degrees:
                d_size = form("msg_bytes", x)
                if x == "p" and relax_p and weight == "stage":  # S holds the counts: through them
                    d_size = d_size + form("msg_bytes", "n_layers_stage") * (-lay / p) + form(
                        "msg_bytes", "n_moe_layers_stage") * (-moe_lay / p)
                g = w * (d_calls[x] * t_call + calls * (dt["msg_bytes"] * d_size
                                                               + dt["ranks"] * form("ranks_count", x)))
                if x == "p" and relax_p and weight != "stage":
                    g = g + calls * t * (-w / p)
                grads[x] += g
            for level in LEVELS:
                grads[level] += w * calls * dt[level]
        pick_cols = where[:, :int(batch.p.max())] if n else where

        def stage(value: np.ndarray) -> np.ndarray:
            return np.where(inside, np.take_along_axis(value, pick_cols, axis=1), np.nan)

        return stage(total), {x: stage(g) for x, g in grads.items()}


# ----------------------------------------------------------------------------- the family as a spec


def time_family(model: ModelConfig, system: str, *, order: str = DEFAULT_ORDER,
                ep_dispatcher: str = DEFAULT_EP_DISPATCHER) -> FamilySpec:
    """The collective-time family of *model* on *system* as a spec (``codegen.pricing.families``).

    Its parts are every item's generated forms (``symbolic.stage_time``: calls per step, the size S of one call,
    the group's ranks); its arguments the layouts' fields, the layer parameters, the hardware's constants and,
    per group, the placement under the rank *order* (``"<group>@ranks_per_node"``, ``…@nodes``, ``…@nics_used``);
    a stage's value is ``Σ_items calls × t(S, n)`` seconds with ``t`` the time of NCCL's pick for one call
    (``codegen.pricing.collective``), a per-layer item weighed by the stage's layers (or MoE layers); the step is
    the stage with the most seconds, the experts' tokens moved by *ep_dispatcher* (:class:`TimePricer`'s).
    :class:`TimePricer` prices the same numbers with its grouped fast path.
    """
    pricer = TimePricer(model, system=system, order=order, ep_dispatcher=ep_dispatcher)
    moe = model.is_moe

    def terms(_model: ModelConfig, _batch: LayoutBatch | None) -> dict[str, str]:
        return {f"{dim}.{coll}:{what}": _item_name(dim, coll, what) for dim, coll, _, _ in ITEMS
                for what in ("calls_count", "msg_bytes", "ranks_count")}

    def arguments(_model: ModelConfig, block: LayoutBatch, _names: frozenset[str]) -> dict[str, Any]:
        values, f = pricer._values(block)
        for group, placed in pricer._placements(f).items():
            values.update({f"{group}@{key}": value for key, value in placed.items()})
        return values

    def stage_inputs(counts: Mapping[str, float], stage: int) -> dict[str, float]:
        layers = float(stage_layers(counts))
        moe_layers = layers - counts.get("n_dense", 0.0) if moe else 0.0
        return {"n_layers_stage": layers, "n_moe_layers_stage": moe_layers, "pp_rank": float(stage)}

    def stage(parts: Mapping[str, np.ndarray], values: Mapping[str, Any]) -> np.ndarray:
        dims: dict[str, Any] = {}
        for dim, coll, group, weight in ITEMS:
            key = f"{dim}.{coll}"
            calls = parts[f"{key}:calls_count"]
            seconds = np.zeros(np.shape(calls))
            if np.any(calls):
                call = {name: values[f"{group}@{name}"] for name in _GROUP_SYMBOLS}
                call.update(msg_bytes=parts[f"{key}:msg_bytes"], ranks=parts[f"{key}:ranks_count"])
                seconds = np.where(calls > 0, calls * pricer._pick_times(OPS[key], [call])[0], 0.0)
            if weight != "stage":
                seconds = seconds * values["n_layers_stage" if weight == "layer" else "n_moe_layers_stage"]
            dims[dim] = dims.get(dim, 0) + seconds
        return sum(dims[dim] for dim in TIME_DIMENSIONS if dim in dims)  # (the pricer's order of additions)

    return FamilySpec(name="collective_time", unit="seconds", terms=terms, stage=stage, step="max",
                      arguments=arguments, stage_inputs=stage_inputs)
