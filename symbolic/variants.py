"""The original's function names, resolved to the formulas of one variant.

``symcost derive cp_traffic --algo ulysses_cp --attention gqa`` goes through
here: the variant is chosen in Python from a few options, then the registered
formulas it selects are returned. Names of registered formulas resolve to
themselves and take no option.

The options (``Variant`` fields; the command line spells them ``--algo``, …):

* ``algo``: CP algorithm (``colossalai_cp``, ``hybrid_cp`` / ``hybird_cp``, ``ulysses_cp``);
* ``attention``: ``mha``, ``gqa``, ``mqa`` or ``mla``; for the parameter
  counts mha/gqa/mqa are the standard layout and mla has a query latent
  unless ``q_direct``;
* ``linear``: a linear-attention layer (``n_linrec ≠ 0``);
* ``ffn``: ``dense`` or ``moe`` (the original's ``n_exp > 1``);
* ``layer``: a layer type (``NOT_REC_LAYER``, ``SEL_REC_LAYER``,
  ``FULL_REC_LAYER``, ``EMBEDDING_LAYER``, ``OUTPUT_LAYER``): the TP node
  (``ctx.current_node``), the recomputed layer, the FSDP table;
* ``zero``: DP levels ``comm_d_non_exp,comm_d_exp`` (0, 2 or 3; one number sets both);
* ``routing``: EP routing, ``balanced`` (default) or ``imbalanced``;
* ``levels``: depth of the device hierarchy the level score runs over (1-3);
* ``reshards``, ``spans_cp``, ``tied``: the FSDP switches ``reshards``,
  ``shard_spans_cp`` and ``tie_emb_out``.

A family of per-layer DP or FSDP volumes is written over the layer's
parameter counts ``P_ne, P_r, P_s``; given ``attention`` (and ``ffn``) the
formulas of those counts (``EvalBody.num_params_layer``) follow the volume.

An option the family does not read is an error naming it, so that a typo or
a misplaced switch does not pass silently.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable, NamedTuple

from . import cp, dp, ep, fsdp, params, recompute, registry, score, tp
from .attention import Attention, parse_attention
from .formula import Formula
from .vocabulary import LayerType, parse_layer_type
from .vocabulary import CpAlgorithm, resolve_algorithm

__all__ = ["Variant", "Family", "FAMILIES", "OPTION_FLAGS", "resolve"]

#: How the command line spells each ``Variant`` field.
OPTION_FLAGS: dict[str, str] = {
    "algo": "--algo", "attention": "--attention", "linear": "--linear", "ffn": "--moe/--dense",
    "q_direct": "--q-direct", "layer": "--layer", "zero": "--zero", "routing": "--routing", "levels": "--levels",
    "reshards": "--reshards", "spans_cp": "--shard-spans-cp", "tied": "--tied",
}

_FFN = ("dense", "moe")
_ZERO = {"0": dp.ZeroLevel.NONE, "2": dp.ZeroLevel.ZERO2, "3": dp.ZeroLevel.ZERO3}


@dataclass(frozen=True)
class Variant:
    """The choices a family of formulas may need; None or False where not given (see the module docstring)."""

    algo: str | None = None
    attention: str | None = None
    linear: bool = False
    ffn: str | None = None
    q_direct: bool = False
    layer: str | None = None
    zero: str | None = None
    routing: str | None = None
    levels: str | int | None = None
    reshards: bool = False
    spans_cp: bool = False
    tied: bool = False

    def given(self) -> tuple[str, ...]:
        """The fields that were set, in declaration order."""
        return tuple(f.name for f in fields(self) if getattr(self, f.name) not in (None, False))


class _Reader:
    """Reads a ``Variant`` for one family, checking each value and recording which options it read."""

    def __init__(self, variant: Variant, family: str):
        self.variant = variant
        self.family = family
        self.read: set[str] = set()

    def _get(self, name: str) -> object:
        self.read.add(name)
        return getattr(self.variant, name)

    def _needs(self, name: str, choices: str) -> ValueError:
        return ValueError(f"{self.family} needs {OPTION_FLAGS[name]} ({choices})")

    def flag(self, name: str) -> bool:
        return bool(self._get(name))

    def algorithm(self) -> CpAlgorithm:
        value = self._get("algo")
        if value is None:
            raise self._needs("algo", "one of " + ", ".join(a.value for a in CpAlgorithm))
        return resolve_algorithm(value)

    def attention(self) -> Attention:
        value = self._get("attention")
        if value is None:
            raise self._needs("attention", "one of " + ", ".join(a.value for a in Attention))
        return parse_attention(str(value))

    def has_attention(self) -> bool:
        return self._get("attention") is not None

    def param_attention(self) -> params.AttentionParams:
        """The parameter-count layout: standard for mha/gqa/mqa, MLA with or without a query latent."""
        attention = self.attention()
        q_direct = self.flag("q_direct")
        if attention is not Attention.MLA:
            if q_direct:
                raise ValueError(f"q_direct: only MLA attention has a query latent to leave out, "
                                 f"got --attention {attention.value}")
            return params.AttentionParams.STANDARD
        return params.AttentionParams.MLA_Q_DIRECT if q_direct else params.AttentionParams.MLA_Q_LATENT

    def moe(self) -> bool:
        value = self._get("ffn")
        if value is None:
            raise self._needs("ffn", "dense or MoE layer")
        if value not in _FFN:
            raise ValueError(f"ffn: expected dense or moe, got {value!r}")
        return value == "moe"

    def layer(self) -> LayerType:
        value = self._get("layer")
        if value is None:
            raise self._needs("layer", "one of " + ", ".join(x.value for x in LayerType))
        return parse_layer_type(value, "layer")

    def optional_layer(self) -> LayerType | None:
        return None if self.variant.layer is None else self.layer()

    def zero_levels(self) -> tuple[dp.ZeroLevel, dp.ZeroLevel]:
        value = self._get("zero")
        if value is None:
            raise self._needs("zero", "DP levels comm_d_non_exp,comm_d_exp: 0, 2 or 3, e.g. 2 or 3,2")
        items = [item.strip() for item in str(value).split(",")]
        if len(items) == 1:
            items *= 2
        if len(items) != 2 or any(item not in _ZERO for item in items):
            raise ValueError(f"zero: expected a DP level 0, 2 or 3, or two of them as comm_d_non_exp,comm_d_exp "
                             f"(e.g. 3,2), got {value!r}")
        return _ZERO[items[0]], _ZERO[items[1]]

    def routing(self) -> ep.Routing:
        value = self._get("routing")
        if value is None:
            return ep.Routing.BALANCED
        try:
            return ep.Routing(str(value).lower())
        except ValueError:
            known = ", ".join(r.value for r in ep.Routing)
            raise ValueError(f"routing: unknown EP routing {value!r}; expected one of {known}") from None

    def levels(self) -> int:
        value = self._get("levels")
        if value is None:
            raise self._needs("levels", f"hierarchy depth 1 to {score.MAX_LEVELS}")
        text = str(value).strip()
        if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= score.MAX_LEVELS:  # ASCII: "٢" too is isdigit()
            raise ValueError(f"levels: a hierarchy of 1 to {score.MAX_LEVELS} levels is supported, got {value!r}")
        return int(text)


def _with_param_counts(formula: Formula, v: _Reader) -> list[Formula]:
    """*formula*, then the formulas of ``P_ne, P_r, P_s`` of the chosen layer when ``attention`` is given.

    The counts are listed beside the volume rather than substituted into it: substituted, they
    also fill the volume's ``P_r + P_s = 0`` condition, and the closed form no longer reads.
    """
    if not v.has_attention():
        return [formula]
    return [formula, *params.layer_formulas(v.param_attention(), v.moe())]


def _get(*names: str) -> list[Formula]:
    return [registry.get(name) for name in names]


def _cp_traffic(v: _Reader) -> list[Formula]:
    return [cp.traffic_formula(v.algorithm(), v.attention(), linear=v.flag("linear"))]


def _cp_detailed(v: _Reader) -> list[Formula]:
    return list(cp.record_formulas(v.algorithm(), v.attention(), linear=v.flag("linear")).values())


def _cp_topology(v: _Reader) -> list[Formula]:
    return _get("cp_topology_effective_bandwidth_gbps", "cp_topology_code")


def _kv_width(v: _Reader) -> list[Formula]:
    return _get(f"attention_{v.attention().value}_kv_width_elements")


def _tp_layer(v: _Reader) -> list[Formula]:
    return [tp.layer_formula(v.moe(), v.layer())]


def _ep_layer(v: _Reader) -> list[Formula]:
    return [ep.layer_formula(v.routing())]


def _dp_layer(v: _Reader) -> list[Formula]:
    non_expert, expert = v.zero_levels()
    return _with_param_counts(dp.layer_formula(non_expert, expert, moe=v.moe()), v)


def _num_params(v: _Reader) -> list[Formula]:
    return list(params.layer_formulas(v.param_attention(), v.moe()))


def _fsdp_table(layer: LayerType, tied: bool) -> str:
    if layer is LayerType.EMBEDDING_LAYER:
        return "tied_embedding" if tied else "embedding"
    return "output"


def _fsdp_traffic(what: str) -> Callable[[_Reader], list[Formula]]:
    """``fsdp_traffic`` or ``fsdp_reduce_traffic`` (*what*: "traffic" or "reduce_traffic")."""
    def build(v: _Reader) -> list[Formula]:
        layer = v.optional_layer()
        if layer is None:
            return _get(f"fsdp_part_{what}_bytes")
        if layer in (LayerType.EMBEDDING_LAYER, LayerType.OUTPUT_LAYER):
            return _get(f"fsdp_{_fsdp_table(layer, v.flag('tied'))}_{what}_bytes")
        return _with_param_counts(registry.get(f"fsdp_layer_{what}_bytes"), v)
    return build


def _fsdp_layer_parts(v: _Reader) -> list[Formula]:
    return _get("fsdp_routed_part_size_params", "fsdp_non_expert_part_held_count", "fsdp_routed_part_held_count",
                "fsdp_shared_part_held_count")


def _fsdp_root_parts(v: _Reader) -> list[Formula]:
    layer = v.layer()
    if layer is not LayerType.EMBEDDING_LAYER:  # every layer type but the embedding prices the output table
        return _get("fsdp_output_part_size_params", "fsdp_non_expert_part_held_count")
    computed = _get("fsdp_embedding_part_computed_count", "fsdp_embedding_part_held_count")
    if not v.flag("tied"):
        return _get("fsdp_embedding_part_size_params") + computed
    (part,) = fsdp.root_parts(fsdp.RootTable.EMBEDDING, tied=True)
    size = Formula(
        name="fsdp_tied_embedding_part_size_params", expr=part.size, dimension="fsdp", algorithm="fsdp",
        unit="params",
        doc=("Parameters of an embedding table tied to the output layer: h * v, or 0 where p <= 1 (the output "
             "layer holds it and the original returns no part)."),
        source="HyperParallel SAPP-ND perf_estimation/comm_time.py lines 518-529 (fsdp_root_parts)",
        variant=(("table", "tied_embedding"),))
    return [size] + computed


def _fsdp_rounds(v: _Reader) -> list[Formula]:
    reshards, spans = v.flag("reshards"), v.flag("spans_cp")
    gathers = ("fsdp_resharded_layer_gathers_count", "fsdp_resharded_root_gathers_count") if reshards else (
        "fsdp_kept_gathers_count", "fsdp_kept_gathers_count")
    return _get(*gathers, f"fsdp_cp_{'spanning' if spans else 'separate'}_reduces_count")


def _recomputed(v: _Reader) -> list[Formula]:
    layer, moe, routing = v.layer(), v.moe(), v.routing()
    return list(recompute.layer_formulas(layer, moe=moe, routing=routing, cp_algorithm=v.algorithm(),
                                         attention=v.attention(), linear=v.flag("linear")))


def _score(v: _Reader) -> list[Formula]:
    return _get(score.formula_name(v.levels()))


def _fixed(*names: str) -> Callable[[_Reader], list[Formula]]:
    return lambda v: _get(*names)


class Family(NamedTuple):
    """One function of the original: how its formulas are chosen, and the options that choose them."""

    build: Callable[[_Reader], list[Formula]]
    options: str


#: Original function name (as the reference cases spell it) -> how to pick its formulas.
FAMILIES: dict[str, Family] = {
    "cp_traffic": Family(_cp_traffic, "--algo --attention [--linear]"),
    "cp_comm_layer_detailed": Family(_cp_detailed, "--algo --attention [--linear]"),
    "_cp_resolve_topology": Family(_cp_topology, ""),
    "compute_kv_dim": Family(_kv_width, "--attention"),
    "EvalBody.num_params_layer": Family(_num_params, "--attention [--q-direct] --moe|--dense"),
    "EvalLayerComm.dp_comm_layer": Family(_dp_layer, "--zero --moe|--dense [--attention [--q-direct]]"),
    "EvalLayerComm.tp_comm_layer": Family(_tp_layer, "--moe|--dense --layer"),
    "EvalLayerComm.ep_comm_layer": Family(_ep_layer, "[--routing]"),
    "EvalLayerComm.fsdp_traffic": Family(_fsdp_traffic("traffic"),
                                         "[--layer [--tied | --attention [--q-direct] --moe|--dense]]"),
    "EvalLayerComm.fsdp_reduce_traffic": Family(_fsdp_traffic("reduce_traffic"),
                                                "[--layer [--tied | --attention [--q-direct] --moe|--dense]]"),
    "EvalLayerComm.fsdp_layer_parts": Family(_fsdp_layer_parts, ""),
    "fsdp_root_parts": Family(_fsdp_root_parts, "--layer [--tied]"),
    "_fsdp_rounds": Family(_fsdp_rounds, "[--reshards] [--shard-spans-cp]"),
    "_recomputed_comm": Family(_recomputed, "--layer --moe|--dense --algo --attention [--linear] [--routing]"),
    "estimate_comm_score": Family(_score, "--levels"),
    "fill_dp_table": Family(_fixed("dp_legacy_att_mm_bytes", "dp_legacy_ff_mm_bytes", "dp_legacy_norm_op_bytes",
                                   "dp_legacy_exp_ff_mm_bytes"), ""),
    "fill_tp_table": Family(_fixed("tp_legacy_gather_bytes", "tp_legacy_exp_gather_bytes"), ""),
    "fill_ep_table": Family(_fixed("ep_legacy_ff_mm_bytes"), ""),
    "dp_ratio": Family(_fixed("dp_legacy_ratio"), ""),
    "comm_embed_ouput": Family(_fixed("model_legacy_embed_bytes", "model_legacy_output_elements"), ""),
}


def resolve(name: str, variant: Variant | None = None) -> list[Formula]:
    """The formulas *name* stands for: a registered formula, or a family of the original for *variant*.

    Raises:
        KeyError: naming *name* when it is neither.
        ValueError: naming the option when the family needs a choice the
            variant does not make, gets a value it does not know, or is
            given an option it does not read.
    """
    variant = variant or Variant()
    given = variant.given()
    if name in registry.FORMULAS:
        if given:
            raise ValueError(f"{name} is one registered formula and takes no variant option; got "
                             + ", ".join(OPTION_FLAGS[g] for g in given))
        return [registry.get(name)]
    if name not in FAMILIES:
        raise KeyError(f"unknown formula or function {name!r}; `symcost derive --list` lists them")
    reader = _Reader(variant, name)
    formulas = FAMILIES[name].build(reader)
    unused = [g for g in given if g not in reader.read]
    if unused:
        raise ValueError(f"{name} does not read " + ", ".join(OPTION_FLAGS[g] for g in unused)
                         + (f" here (it takes {FAMILIES[name].options})" if FAMILIES[name].options
                            else " (it takes no option)"))
    return formulas
