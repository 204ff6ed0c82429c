"""The config fields a layout implies: each rule written once, in NumPy form, for one layout or N at once.

Together with a :class:`codegen.configs.ModelConfig`, a layout fixes every configuration field the
communication formulas read (docs/model.md, "Config fields"). Where the fields come from: the
original planner derives them in its HyperParallel config parser and its ``derive`` step, which the
seed printout does not contain; the published versions of ``nd/common/derive.py``
(``derive_expert_degrees``, ``optimizer_ranks``, ``derive_optimizer_sharding``, ``derive_comm_flags``,
``hyper_rec_op``) and of ``framework_parsers/cost_model_parser_hyper.py`` (``_balanced_offset``,
``_parse_recompute``) state the rules, and the reference cases (``estimate_from_mem_comm`` /
``estimate_comm`` / ``fsdp_layer_parts`` / ``fsdp_root_parts`` inputs) confirm them for every layout
they hold. Each rule's docstring says which field is confirmed by the cases and which is inferred.

Each rule takes whole numbers or int64 arrays (broadcast together) and gives the same, so that
``derive_fields`` (one layout) and ``derive_fields_batch`` (N layouts) run the same code. Shared run
settings (op, sp, grad_shard) arrive as Python bools and are resolved before any arithmetic; so is
any condition that is one value for the whole batch.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from symbolic.vocabulary import LAYOUT_DEGREES

from ._batch import ARRAY_KEYS, WHOLE_DP_GROUP, LayoutBatch, key_columns
from ._model import ModelConfig

if TYPE_CHECKING:  # pragma: no cover
    from hardware import System

__all__ = ["LAYOUT_FIELD_KEYS", "LAYOUT_FIELD_NAMES", "ORIGINAL_CP_NETWORK", "all_fields", "direct_column",
           "dp_comm_level_values", "expert_degrees"]

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


def expert_degrees(d: Any, t: Any, cp: Any, ep: Any, etp: Any) -> tuple[np.ndarray, np.ndarray]:
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


#: The per-layout keys that are config fields as they are, in the order the fields list them: the
#: micro-batch size and count, then the degrees (every one but ``os``, whose field is ``os_max_shard``).
_KEY_FIELDS = ("b", "m", *(key for key in LAYOUT_DEGREES if key != "os"))
assert sorted(_KEY_FIELDS) == sorted(set(ARRAY_KEYS) - {"os"})

#: The fields :func:`derive_fields_batch` derives from the layout keys, one value per layout.
LAYOUT_FIELD_NAMES = (
    *_KEY_FIELDS, "t_exp", "d_exp", "sp", "os_max_shard",
    "comm_t", "comm_ep", "comm_cp", "comm_d_non_exp", "comm_d_exp",
    "shard_p_os_non_exp_partial", "shard_p_os_exp", "shard_p_os_exp_partial", "shard_embed", "gather_embed",
)


class _Derivation:
    """The layout keys of one batch and the rule groups computed from them so far (each at most once)."""

    __slots__ = ("model", "batch", "keys", "groups")

    def __init__(self, model: ModelConfig, batch: LayoutBatch, compact: bool):
        self.model, self.batch = model, batch
        self.keys = key_columns(batch, compact)
        self.groups: dict[str, Any] = {}

    def group(self, name: str) -> Any:
        if name not in self.groups:
            self.groups[name] = _RULE_GROUPS[name](self)
        return self.groups[name]


# Rules that give several fields at once, by group name; each reads keys and earlier groups.
_RULE_GROUPS: dict[str, Callable[[_Derivation], Any]] = {
    "experts": lambda x: expert_degrees(x.keys["d"], x.keys["t"], x.keys["cp"], x.keys["ep"], x.keys["etp"]),
    "ranks": lambda x: _optimizer_ranks(x.keys["d"], x.keys["os"], x.batch.op),
    "shards": lambda x: _optimizer_shards(x.group("ranks"), x.keys["t"], x.keys["cp"], *x.group("experts"),
                                          x.model.n_exp, x.batch.op),
}

# Each layout field from the keys and the rule groups.
_FIELD_RULES: dict[str, Callable[[_Derivation], Any]] = {
    **{key: (lambda x, key=key: x.keys[key]) for key in _KEY_FIELDS},
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
    **{key: (key,) for key in _KEY_FIELDS},
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
    1); from the expert degrees (:func:`expert_degrees`, once per call): ``t_exp``, ``d_exp`` and the
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
        compact: keys every layout shares are one value (:func:`codegen.configs._batch.key_columns`), and so is each
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


def all_fields(model: ModelConfig, batch: LayoutBatch, network: System | None,
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


