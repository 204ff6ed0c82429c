"""The one pricer's core: a pipeline stage's outputs from generated per-layer terms, weighed by layer counts.

Every stage output is linear in the stage's layer counts (``symbolic.model``):

    output = Σ_count count · term(role)

with the roles of ``symbolic.vocabulary.STAGE_TERMS``. The terms are
registered formulas that ``symcost compile`` generated ahead of time; each
carries its identity as data (``generated.FORMULAS[name]["variant"]``:
output, role and the variant fields it depends on), so a model's variant
picks its terms by look-up — no SymPy, no name parsing. The numeric choices
(ZeRO levels, FSDP's ``reshards`` / ``shard_spans_cp``, the TIME path's score
factors, a system's ``original_stage_cost_scale``) are arguments of the terms,
bound here.

Who calls it: :class:`codegen.pricing.pricer.StagePricer` (arrays of layouts
of one model, for ``symcost eval``, ``sensitivity`` and searchers) and the
reference check's end-to-end functions (the original's case inputs). Both
bind fields with :func:`bind` and weigh terms with :func:`stage_outputs`.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

import generated
from symbolic.vocabulary import (DEGREES, RECOMPUTE_COUNT_NAMES, STAGE_COUNT_NAMES, STAGE_DIMENSIONS, STAGE_OUTPUTS,
                                 STAGE_TERMS, CpAlgorithm, LayerType, attention_variant, detect_attention, resolve_algorithm,
                                 routing)

from ..configs import Layout, LayoutBatch, ModelConfig, derive_fields_batch, load_model
from ..runtime import inputs
from .engine import term_arguments, term_function
from .families import FamilySpec
from .levels import SCORE_FACTORS, score_factors

__all__ = ["Fields", "Variant", "variant_of", "Terms", "terms_of", "bind", "stage_counts", "stage_outputs", "price",
           "evaluate_terms", "gather_switch", "max_rank_tokens", "TTYPES", "OUTPUTS", "BIND_SOURCES", "field_sources",
           "volumes_family", "model_argument", "batch_argument", "layout_argument", "per_stage_argument",
           "degrees_argument", "arrays_argument"]

#: The original's two stage conversions: volumes (FLOP) or level scores of DP, TP and CP (TIME).
TTYPES = ("FLOP", "TIME")

#: Degrees the TIME path's level scores depend on.
_SCORE_DEGREES = ("d", "t", "cp", "p")


class Fields:
    """Config fields read the way the original reads its config: an unset field is 0, a boolean 0/1.

    The original's config hands out 0 for any attribute it was never given, including
    ``getattr(cfg, name, None)``; a value may be a number or an array (one per layout).
    """

    def __init__(self, inputs: Mapping[str, Any]):
        self.raw = inputs

    def __getitem__(self, name: str) -> Any:
        value = self.raw.get(name, 0)
        if isinstance(value, bool):
            return float(value)
        return value

    def num(self, name: str) -> Any:
        """The field as a float, or a float array; a text or a mapping is an error naming the field."""
        value = self[name]
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
            return value.astype(np.float64, copy=False)
        raise inputs.InputError(f"{name}: expected a number, got {value!r}")

    def values(self, names: Iterable[str]) -> dict[str, Any]:
        """The named fields as numbers (or arrays), for an evaluator's keyword arguments."""
        return {n: self.num(n) for n in names}

    def scalar(self, name: str) -> float:
        """The field as one float: it picks a variant, which one call prices for every layout alike."""
        value = self.num(name)
        if isinstance(value, np.ndarray):
            if value.size == 0 or not np.all(value == value.flat[0]):
                raise inputs.InputError(f"{name}: must be one value for every layout priced together")
            return float(value.flat[0])
        return value


def gather_switch(inputs: Mapping[str, Any]) -> float:
    """``rec_op.gather`` as 0 or 1 (unset reads 0).

    Raises:
        ValueError: naming ``rec_op.gather`` when it is not a 0/1 switch: the original bit-ors it
            with a flag, which means nothing for other values.
    """
    rec_op = inputs.get("rec_op", 0)
    value = rec_op.get("gather", 0) if isinstance(rec_op, Mapping) else 0
    if value not in (0, 1):  # True/False compare equal to 1/0
        raise ValueError(f"rec_op.gather: expected a 0/1 switch, got {value!r}")
    return float(value)


def max_rank_tokens(tokens_per_expert: Sequence[float], *, n_exp: int, ep: int) -> float:
    """Most tokens one EP rank receives per micro-batch: max over ranks of its contiguous experts' counts.

    Rank r holds experts ``r·E … r·E + E − 1`` with ``E = n_exp // ep`` (``n_exp`` of the config,
    not the list's length; entries past ``n_exp`` are not read).

    Raises:
        ValueError: naming ``tokens_per_expert`` when it holds fewer than ``n_exp`` counts or a
            count that is not a finite number >= 0.
    """
    n_exp, ep = int(n_exp), int(ep)
    counts = np.asarray(tokens_per_expert, dtype=float)
    if counts.ndim != 1 or counts.size < n_exp:
        raise ValueError(f"tokens_per_expert: expected at least n_exp = {n_exp} counts, got {counts.size}")
    counts = counts[:n_exp]
    if not np.all(np.isfinite(counts)) or np.any(counts < 0):
        raise ValueError("tokens_per_expert: counts must be finite numbers >= 0")
    return float(counts.reshape(ep, n_exp // ep).sum(axis=1).max())


# ----------------------------------------------------------------------------- variants and their terms

#: A model variant as data: variant field → value, the pairs ``symbolic.model.StageVariant.keys`` writes.
Variant = Mapping[str, str]


def variant_of(f: Fields) -> dict[str, str]:
    """The variant a configuration selects, each branch resolved as the original resolves it.

    Raises:
        ValueError: naming a field whose value differs between layouts priced together where it
            picks the variant, or an unreadable ``tokens_per_expert``.
    """
    moe = f.scalar("n_exp") > 1
    fsdp = bool(f.scalar("grad_shard_as_params"))
    return {
        "moe": "moe" if moe else "dense",
        "routing": routing(f["tokens_per_expert"], n_exp=f.scalar("n_exp"), ep=f.scalar("ep"),
                           comm_ep=f.scalar("comm_ep")).value,
        "cp_algorithm": resolve_algorithm(f["cp_algo"], lenient=True).value,
        "attention": detect_attention(dc_kv=f.scalar("dc_kv"), n_kv=f.scalar("n_kv"), a=f.scalar("a")).value,
        "linear": "linear" if f.scalar("n_linrec") != 0 else "softmax",
        "params": attention_variant(dc_kv=f.scalar("dc_kv"), dc_q=f.scalar("dc_q")).value,
        "fsdp": "fsdp" if fsdp else "zero",
        "tied": "tied" if f.scalar("tie_emb_out") else "untied",
    }


@functools.cache
def _term_index() -> dict[tuple[str, str, str | None], tuple[tuple[frozenset, str], ...]]:
    """(output, role, wrt) → ((variant pairs, function name), …) over the generated stage terms."""
    index: dict[tuple[str, str, str | None], list[tuple[frozenset, str]]] = {}
    for name, meta in generated.FORMULAS.items():
        if meta["dimension"] not in ("stage", "stage_slope"):
            continue
        pairs = dict(meta["variant"])
        key = (pairs.pop("output"), pairs.pop("role"), pairs.pop("wrt", None))
        index.setdefault(key, []).append((frozenset(pairs.items()), name))
    return {key: tuple(entries) for key, entries in index.items()}


@dataclass(frozen=True, eq=False)  # identity: one object per variant (cached), a dictionary key
class Terms:
    """The terms of one variant: output → count → generated function name (nonzero terms only).

    Attributes:
        by_output: ``dp``, ``tp``, ``ep``, ``cp`` (their recompute counts included), ``dp_unconverted``
            and ``dp_reduced``.
        slopes: per degree, the same for the derivatives of ``dp``, ``tp``, ``ep``, ``cp``.
    """

    by_output: Mapping[str, Mapping[str, str]]
    slopes: Mapping[str, Mapping[str, Mapping[str, str]]]

    def arguments(self, outputs: Iterable[str], slopes: Iterable[str] = ()) -> set[str]:
        """The generated functions' arguments for *outputs* (and the derivatives in *slopes*)."""
        names = [n for o in outputs for n in self.by_output[o].values()]
        names += [n for x in slopes for o in STAGE_DIMENSIONS for n in self.slopes[x][o].values()]
        return {a for n in names for a in term_arguments(n)}


_OUTPUT_TERMS = {"dp": "dp", "tp": "tp", "ep": "ep", "cp": "cp", "dp_unconverted": "dp", "dp_reduced": "dp"}


def _find(output: str, role: str, wrt: str | None, variant: frozenset) -> str | None:
    for pairs, name in _term_index().get((output, role, wrt), ()):
        if pairs <= variant:
            return name
    return None


@functools.lru_cache(maxsize=256)
def _terms(variant: frozenset, degrees: tuple[str, ...]) -> Terms:
    def table(wrt: str | None, outputs: Iterable[str]) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for output in outputs:
            out[output] = {}
            for count, role in STAGE_TERMS[_OUTPUT_TERMS[output]].items():
                name = _find(output, role, wrt, variant)
                if name is not None:
                    out[output][count] = name
        return out

    return Terms(table(None, _OUTPUT_TERMS), {x: table(x, STAGE_DIMENSIONS) for x in degrees})


def terms_of(variant: Variant, degrees: Sequence[str] = ()) -> Terms:
    """The generated terms of *variant* (and their derivatives in *degrees*).

    Raises:
        RuntimeError: if ``generated/`` holds no stage terms (run ``symcost compile``).
    """
    if not _term_index():
        raise RuntimeError("generated/ holds no stage terms; run `symcost compile`")
    return _terms(frozenset(variant.items()), tuple(degrees))


# ----------------------------------------------------------------------------- binding values


#: The ZeRO switches: each is 1 where its DP communication level field has the level, else 0.
ZERO_SWITCHES: dict[str, tuple[str, float]] = {
    f"zero{level}_{which}": (f"comm_d_{which}", float(level)) for level in (2, 3) for which in ("non_exp", "exp")}

#: The fields :func:`bind` reads for an argument that is no field itself (any other name is read as is).
BIND_SOURCES: dict[str, tuple[str, ...]] = {
    **{name: (source,) for name, (source, _level) in ZERO_SWITCHES.items()}, "gather": ("rec_op",),
    "level_bound_0": (), "stage_cost_scale": (), **{name: _SCORE_DEGREES for name in SCORE_FACTORS},
    "cp_ulysses": ("cp_algo",),
}


@functools.lru_cache(maxsize=256)
def _bind_order(names: frozenset[str]) -> tuple[str, ...]:
    """The names :func:`bind` binds, in its order (sorted; layer counts are no arguments it binds)."""
    return tuple(sorted(names - set(STAGE_COUNT_NAMES)))


def bind(f: Fields, names: Iterable[str], *, system: Any, ttype: str = "FLOP",
         score: Callable[..., Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The values of the terms' arguments *names* (count names excepted): numbers or per-layout arrays.

    Fields are read from *f*; the switches are derived from them (``zero2_non_exp`` is 1 where
    ``comm_d_non_exp`` is 2, …, ``cp_ulysses`` 1 where ``cp_algo`` is Ulysses); ``gather`` from ``rec_op``;
    ``max_rank_tokens`` from ``tokens_per_expert``; ``level_bound_0`` and ``stage_cost_scale`` from the
    *system* (``hardware.System``); the score factors are 1 on the FLOP path and the level scores of a unit
    volume on the TIME path (*score*, by default ``levels.score_factors`` on the system).

    Raises:
        ValueError: naming a field that is not a number, or an unknown *ttype*.
    """
    if ttype not in TTYPES:
        raise inputs.InputError(f"ttype: expected one of {', '.join(TTYPES)}, got {ttype!r}")
    values: dict[str, Any] = {}
    for name in _bind_order(names if isinstance(names, frozenset) else frozenset(names)):
        if name in values:
            continue
        if name in ZERO_SWITCHES:
            source, level = ZERO_SWITCHES[name]
            level_of = f.num(source)
            # (an array's 0/1 written straight into float64: one pass, the same numbers as astype)
            values[name] = (np.equal(level_of, level, out=np.empty(level_of.shape))
                            if isinstance(level_of, np.ndarray) else np.equal(level_of, level).astype(np.float64))
        elif name == "gather":
            values[name] = gather_switch(f.raw)
        elif name == "max_rank_tokens":
            values[name] = max_rank_tokens(f["tokens_per_expert"], n_exp=int(f.scalar("n_exp")),
                                           ep=int(f.scalar("ep")))
        elif name == "cp_ulysses":
            values[name] = float(f.raw.get("cp_algo") == CpAlgorithm.ULYSSES.value)
        elif name == "level_bound_0":
            values[name] = float(system.level_bounds()[0])
        elif name == "stage_cost_scale":
            values[name] = system.original_stage_cost_scale
        elif name in SCORE_FACTORS:
            if ttype == "FLOP":
                values[name] = 1.0
            else:
                factors = (score or functools.partial(score_factors, device=system.name))(
                    **{k: f.num(k) for k in _SCORE_DEGREES})
                values.update({k: v for k, v in factors.items() if k in SCORE_FACTORS})
        else:
            values[name] = f.num(name)
    return values


# ----------------------------------------------------------------------------- counts and outputs


def stage_counts(stages: Sequence[Sequence[Sequence[str]]], n_lay: int) -> dict[str, np.ndarray]:
    """Per stage, how many layers of each kind it holds (``symbolic.vocabulary.STAGE_COUNT_NAMES``).

    *stages* lists each stage's chunks and each chunk's layer labels. Body layers are numbered
    in model order — chunk by chunk, and within a chunk stage by stage — and the first
    ``n_lay`` of them count as ``n_body`` (docs/model.md, "From layer to stage"); the rest are
    the extra (MTP) layers.

    Raises:
        ValueError: naming ``stages`` for an unknown layer label.
    """
    counts = {name: np.zeros(len(stages)) for name in STAGE_COUNT_NAMES}
    chunks = max((len(stage) for stage in stages), default=0)
    position = 0
    for c in range(chunks):
        for s, stage in enumerate(stages):
            for label in stage[c] if c < len(stage) else ():
                try:
                    kind = LayerType(label)
                except ValueError:
                    raise ValueError(f"stages: unknown layer type {label!r}; expected one of "
                                     f"{', '.join(k.value for k in LayerType)}") from None
                if kind is LayerType.EMBEDDING_LAYER:
                    counts["n_embedding"][s] += 1
                    continue
                if kind is LayerType.OUTPUT_LAYER:
                    counts["n_output"][s] += 1
                    continue
                if position < n_lay:
                    counts["n_body"][s] += 1
                elif kind is LayerType.SEL_REC_LAYER:
                    counts["n_extra_sel"][s] += 1
                else:
                    counts["n_extra"][s] += 1
                position += 1
                if kind is LayerType.FULL_REC_LAYER:
                    counts["n_full_rec"][s] += 1
                elif kind is LayerType.SEL_REC_LAYER:
                    counts["n_sel_rec"][s] += 1
    return counts


def evaluate_terms(names: Iterable[str], values: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Each generated function of *names* on *values* (its arguments picked by name), once per name."""
    out: dict[str, np.ndarray] = {}
    for name in names:
        if name not in out:
            out[name] = term_function(name)(**{a: values[a] for a in term_arguments(name)})
    return out


def stage_outputs(terms: Terms, values: Mapping[str, Any], counts: Mapping[str, np.ndarray],
                  outputs: Sequence[str] = ("dp", "tp", "ep", "cp"), *, wrt: str | None = None
                  ) -> dict[str, np.ndarray]:
    """Every stage's *outputs*: ``Σ_count counts[count] · term``, broadcast over layouts and stages.

    Args:
        terms: the variant's terms (:func:`terms_of`).
        values: the terms' arguments (:func:`bind`): numbers or arrays of shape ``(N, 1)`` for N
            layouts (or ``(N,)`` with ``counts`` of shape ``(N,)``).
        counts: per count name, the layers of that kind per stage, shape ``(P,)`` or ``(N, P)``.
        outputs: names among ``dp, tp, ep, cp``, their ``*_recomputed`` sums, ``dp_unconverted``,
            ``dp_reduced``.
        wrt: a degree: weigh the terms' derivatives in it instead (``dp, tp, ep, cp`` and their
            recompute sums; the layer counts held, as ``terms_of(…, degrees)`` made them).

    Returns:
        output → array of the broadcast shape of values and counts.
    """
    by_output = terms.by_output if wrt is None else terms.slopes[wrt]
    evaluated = evaluate_terms((n for o in outputs for n in by_output[o.removesuffix("_recomputed")].values()), values)
    out: dict[str, np.ndarray] = {}
    for output in outputs:
        base = output.removesuffix("_recomputed")
        total: Any = 0.0
        for count, name in by_output[base].items():
            if count in RECOMPUTE_COUNT_NAMES and not output.endswith("_recomputed"):
                continue
            total = total + evaluated[name] * counts[count]
        shape = np.broadcast_shapes(*(np.shape(c) for c in counts.values()))
        out[output] = np.broadcast_to(np.asarray(total, dtype=np.float64), np.broadcast_shapes(np.shape(total), shape))
    return out


#: Every output :func:`price` can give (see :func:`stage_outputs`): the stage outputs less the totals,
#: which are sums of these.
OUTPUTS = tuple(name for name in STAGE_OUTPUTS if not name.startswith("total"))


def price(f: Fields, counts: Mapping[str, np.ndarray], *, system: Any, ttype: str = "FLOP",
          outputs: Sequence[str] = OUTPUTS) -> dict[str, np.ndarray]:
    """The stage *outputs* of the configuration *f* (numbers, or per-layout arrays of shape ``(N, 1)``).

    The one pricing path: the variant the fields select picks the generated terms, :func:`bind`
    binds their arguments, and :func:`stage_outputs` weighs them by the stages' layer *counts*.
    """
    terms = terms_of(variant_of(f))
    values = bind(f, terms.arguments({o.removesuffix("_recomputed") for o in outputs}), system=system, ttype=ttype)
    return stage_outputs(terms, values, counts, outputs)


@functools.lru_cache(maxsize=256)
def field_sources(names: frozenset[str]) -> tuple[str, ...]:
    """The fields :func:`bind` reads for the arguments *names* (layer counts are no fields)."""
    wanted = {source for name in names for source in BIND_SOURCES.get(name, (name,))}
    return tuple(sorted(wanted - set(STAGE_COUNT_NAMES)))


# ----------------------------------------------------------------------------- the family as a spec


def volumes_family(device: str = "A2", *, ttype: str = "FLOP", with_recomp: bool = False,
                   step: str = "max") -> FamilySpec:
    """The original's communication family as a spec (``codegen.pricing.families``): a stage's value is the sum
    over ``dp, tp, ep, cp`` of ``Σ_count count · term`` (:func:`stage_outputs`, the recompute counts with
    *with_recomp*), in the units of *ttype* (volumes, or the TIME path's level scores on *device*); the step is
    the bottleneck stage (``step="max"``) or the sum over the stages (``"sum"``); the slopes are the terms'
    generated derivatives, weighed alike. The variant's terms follow from the batch's run settings (one layout
    tells); :class:`codegen.pricing.pricer.StagePricer` prices the same numbers with its grouped fast path.

    Raises:
        ValueError: naming an unknown *device* or *ttype*.
    """
    import hardware

    if ttype not in TTYPES:
        raise inputs.InputError(f"ttype: expected one of {', '.join(TTYPES)}, got {ttype!r}")
    system = hardware.load(device)
    score = functools.partial(score_factors, device=device)

    def variant(model: ModelConfig, batch: LayoutBatch | None) -> Variant:
        if batch is None or not len(batch):
            raise ValueError(f"{model.name}: the original's terms follow from a batch's run settings; none given")
        return variant_of(Fields(derive_fields_batch(model, batch.subset(slice(0, 1)), validated=True, compact=True)))

    def parts(table: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
        # "dim:count" → term, in stage_outputs' order (dimension by dimension, count by count)
        return {f"{dim}:{count}": name for dim in STAGE_DIMENSIONS for count, name in table[dim].items()
                if with_recomp and dim != "dp" or count not in RECOMPUTE_COUNT_NAMES}

    def stage(values_of_parts: Mapping[str, np.ndarray], values: Mapping[str, Any]) -> np.ndarray:
        totals: dict[str, Any] = {}
        for key, value in values_of_parts.items():
            dim, count = key.split(":")
            totals[dim] = totals.get(dim, 0.0) + value * values[count]
        return sum(totals.get(dim, 0.0) for dim in STAGE_DIMENSIONS)  # (0 + dp + tp + ep + cp, as priced)

    def arguments(model: ModelConfig, block: LayoutBatch, names: frozenset[str]) -> dict[str, Any]:
        fields = derive_fields_batch(model, block, names=field_sources(names), validated=True, compact=True)
        return bind(Fields(fields), names, system=system, ttype=ttype, score=score)

    return FamilySpec(name="volumes", unit="bytes" if ttype == "FLOP" else "score", step=step,
                      terms=lambda model, batch: parts(terms_of(variant(model, batch)).by_output),
                      slopes=lambda model, batch, degree: parts(terms_of(variant(model, batch), (degree,)).slopes[degree])
                      or None,
                      stage=stage, arguments=arguments)



# ----------------------------------------------------------------------------- the pricers' arguments
# The checks the pricers' public entry points share: each raises codegen.runtime.inputs.InputError (a ValueError)
# naming the argument and the value, before any work, instead of an AttributeError or a KeyError from deep inside.


def model_argument(model: object, *, names: bool = True, field: str = "model") -> ModelConfig:
    """*model* as a :class:`ModelConfig`: itself, or with *names* a bundled model name or a YAML path
    (``load_model``, whose errors name the model).

    Raises:
        InputError: for anything else (``None``, a number, a name where *names* is false).
    """
    if isinstance(model, str) and names:
        return load_model(model)
    what = "a model name, a YAML path or a ModelConfig" if names else "a ModelConfig (codegen.configs.load_model)"
    return inputs.instance(field, model, ModelConfig, what)


def batch_argument(batch: object, *, field: str = "batch") -> LayoutBatch:
    """*batch* if it is a :class:`LayoutBatch` (a ``dict`` of arrays is not: ``LayoutBatch.from_arrays`` makes one).

    Raises:
        InputError: naming *field* and the value.
    """
    return inputs.instance(field, batch, LayoutBatch,
                           "a LayoutBatch (LayoutBatch.from_arrays or from_layouts makes one from arrays or layouts)")


def layout_argument(layout: object, *, field: str = "layout") -> Layout:
    """*layout* if it is a :class:`Layout` (``parse_layout`` makes one from ``--layout`` text).

    Raises:
        InputError: naming *field* and the value.
    """
    return inputs.instance(field, layout, Layout, "a Layout (codegen.configs.parse_layout makes one from text)")


def per_stage_argument(per_stage: object) -> bool | tuple[str, ...]:
    """``StagePricer``'s *per_stage*: a real bool, or a list of output names (:data:`OUTPUTS`) to add.

    Raises:
        InputError: naming the value, or the first name that is no output.
    """
    if isinstance(per_stage, (bool, np.bool_)):
        return bool(per_stage)
    if isinstance(per_stage, (list, tuple)):  # (an empty list adds nothing: no stages, as False)
        return inputs.names("per_stage", per_stage, OUTPUTS) if per_stage else False
    raise inputs.InputError(f"per_stage: expected true, false or a list of output names (of "
                            f"{', '.join(OUTPUTS)}), got {per_stage!r:.80}")


def arrays_argument(arrays: Mapping[str, Any], *, taken: Iterable[str] = ("fsdp", "recompute", "validated")) -> None:
    """The keyword arrays of a pricer's ``__call__`` (``LayoutBatch.from_arrays``'s keys and run settings, but those
    the pricer sets itself, *taken*): an unknown name (``tp`` for ``t``) is an error naming it, not a ``TypeError``.

    Raises:
        InputError: naming the first unknown key and the keys taken.
    """
    known = _ARRAY_ARGUMENTS - set(taken)
    unknown = [key for key in arrays if key not in known]
    if unknown:
        raise inputs.InputError(f"{unknown[0]}: no layout key or run setting of LayoutBatch.from_arrays; the keys: "
                                f"{', '.join(sorted(known))}")


#: The keyword arguments ``LayoutBatch.from_arrays`` takes (its keys and run settings; ``defaults`` is positional).
_ARRAY_ARGUMENTS = frozenset(name for name, parameter in inspect.signature(LayoutBatch.from_arrays).parameters.items()
                             if parameter.kind is inspect.Parameter.KEYWORD_ONLY)


def degrees_argument(degrees: object) -> tuple[str, ...]:
    """*degrees* of a sensitivity or a ``stage_slopes`` as a tuple of :data:`symbolic.vocabulary.DEGREES`, each once:
    a list, never one string (``"tp"`` is not ``t`` and ``p``); an unknown degree is an error, not a slope of 0.

    Raises:
        InputError: naming the first unknown degree, a string given whole, or none given.
    """
    return inputs.names("degrees", degrees, DEGREES)
