"""What a search is and what a process builds from it once.

A :class:`SearchSpec` is everything a worker needs (picklable: a Dask worker rebuilds the search from it);
:func:`search_context` builds its space and pricers once per process; :func:`setting_labels` names the setting
codes of a result table; :func:`decoded` and :func:`subchunk` take layouts of a chunk, with every key decoded
or with the keys it has.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from symbolic.vocabulary import DEFAULT_EP_DISPATCHER, DEFAULT_OVERLAP, EP_DISPATCHERS, RECOMPUTE_MODES, SEARCH_KEYS

from ..configs import ModelConfig
from ..pricing.chunks import Chunk
from ..pricing.exposure import overlap_names
from ..pricing.low_precision import precision_name
from ..pricing.recompute import recompute_modules
from ..runtime.inputs import DEVICES_MAX, InputError, flag, nonnegative, one_of, whole
from .options import GLOBAL_BATCH_MAX, cp_algorithms, recompute_modes, restrictions, system_name, zero_levels
from .space import SearchSpace
from .top import COLUMNS

if TYPE_CHECKING:
    from ..pricing.memory import MemoryPricer
    from ..pricing.pricer import StagePricer
    from ..pricing.step_time import StepTimePricer

__all__ = ["OBJECTIVES", "SearchSpec", "SearchContext", "search_context", "setting_labels", "priced_columns", "decoded",
           "subchunk"]

#: Objectives: the step time (compute + bubble + exposed communication), the communication time alone
#: (needs the time family, codegen.pricing.time), the original's cost (the largest stage total of
#: StagePricer, the original's units).
OBJECTIVES = ("step-time", "comm-time", "original")


@dataclass(frozen=True)
class SearchSpec:
    """Everything a worker needs to rebuild the search space and its pricers (picklable).

    Attributes mirror :class:`SearchSpace` and the pricers: *system* is a hardware catalog name or alias (kept
    as the system's own name); *original_device* the catalog device of the original's cost (``--objective
    original``; default *system*). *memory*: price memory per rank (``codegen.pricing.memory.MemoryPricer``)
    and drop the layouts that do not fit, unless *keep_infeasible* (then they are ranked too, ``fits`` = 0).
    *any_interleaving*: also try ``vp > 1`` where the layers do not split evenly into ``p·vp`` chunks or ``m`` is no
    multiple of ``p`` (:class:`SearchSpace`). *bytes_grad*: bytes per gradient in the memory filter (2 where a
    recipe keeps its gradients in BF16); ``None``, the model file's.
    *reserve_bytes*: device memory per GPU kept back from the capacity; ``None``, the memory family's default
    (``codegen.pricing.memory.DEFAULT_RESERVE_BYTES``, docs/memory.md "The reserve").

    Every argument is checked when the spec is made, before any search or cache sees it
    (``codegen.search.options``): *devices* and *global_batch* whole numbers (``int`` or a NumPy integer, not
    ``8.0`` or ``True``) within their bounds; *fix* and *maximum* ``{key: value}`` or ``((key, value), …)``
    pairs, kept sorted by key; *recompute*, *zero_levels* and *cp_algos* sequences, each value tried once (a
    value given twice, or two names of one CP algorithm, are merged under the first name); the switches real
    booleans. Lists and mappings are kept as tuples, so that a spec is hashable. *precision*: the run's
    (``symbolic.vocabulary.PRECISIONS``; the GEMMs Transformer Engine runs in it, ``StepTimePricer``), for the
    step-time objective, and the memory per rank (its quantized saved inputs and weight copies, ``MemoryPricer``).
    *overlap*: the communication the run overlaps with compute (``symbolic.vocabulary.OVERLAPS``
    names, or one comma-separated text; default ``DEFAULT_OVERLAP``, the data-parallel overlap of Megatron-Bridge's
    recipes and, in an interleaved pipeline, their pipeline one; ``codegen.pricing.exposure``).
    *recompute_modules*: the modules every layer not fully recomputed recomputes, in every layout tried
    (``symbolic.vocabulary.RECOMPUTE_MODULES``; a run setting as *precision*, in the memory per rank and the step
    time; none by default). *ep_dispatcher*: the expert dispatcher the run moves its tokens with
    (``symbolic.vocabulary.EP_DISPATCHERS``: NCCL's ``alltoall`` by default; ``deepep`` or ``hybridep``, docs/time.md
    "Expert dispatch"), in the step time's communication.

    Raises:
        InputError: a ``ValueError`` naming the argument and the value.
    """

    model: ModelConfig
    devices: int
    global_batch: int
    system: str
    objective: str = "step-time"
    fix: tuple[tuple[str, int], ...] = ()
    maximum: tuple[tuple[str, int], ...] = ()
    recompute: tuple[str, ...] = RECOMPUTE_MODES
    zero_levels: tuple[int, ...] = (1,)
    cp_algos: tuple[str, ...] | None = None
    tp_cross_node: bool = False
    any_interleaving: bool = False
    original_device: str | None = None
    memory: bool = True
    keep_infeasible: bool = False
    precision: str = "bf16"
    reserve_bytes: float | None = None
    overlap: tuple[str, ...] = DEFAULT_OVERLAP
    bytes_grad: float | None = None
    recompute_modules: tuple[str, ...] = ()
    ep_dispatcher: str = DEFAULT_EP_DISPATCHER

    def __post_init__(self) -> None:
        put = functools.partial(object.__setattr__, self)  # frozen: the checked values replace the given ones
        if not isinstance(self.model, ModelConfig):
            raise InputError(f"model: expected a ModelConfig (codegen.configs.load_model(name)), "
                             f"got {_show(self.model)}")
        put("devices", whole("devices", self.devices, minimum=1, maximum=DEVICES_MAX))
        put("global_batch", whole("global_batch", self.global_batch, minimum=1, maximum=GLOBAL_BATCH_MAX))
        put("system", system_name("system", self.system))
        if not isinstance(self.objective, str) or self.objective not in OBJECTIVES:
            raise InputError(f"objective: one of {', '.join(OBJECTIVES)}, got {_show(self.objective)}")
        put("fix", restrictions("fix", self.fix))
        put("maximum", restrictions("maximum", self.maximum))
        put("recompute", recompute_modes("recompute", self.recompute))
        put("zero_levels", zero_levels("zero_levels", self.zero_levels))
        if self.cp_algos is not None:
            put("cp_algos", cp_algorithms("cp_algos", self.cp_algos))
        if self.original_device is not None:
            put("original_device", system_name("original_device", self.original_device))
        for name in ("tp_cross_node", "any_interleaving", "memory", "keep_infeasible"):
            put(name, flag(name, getattr(self, name)))
        for name, what, zero_ok in (("reserve_bytes", "a number of bytes >= 0", True),
                                    ("bytes_grad", "bytes per gradient > 0", False)):
            if getattr(self, name) is not None:
                put(name, _memory_number(name, getattr(self, name), what, zero_ok, self.memory))
        precision_name("precision", self.precision)
        put("overlap", overlap_names("overlap", self.overlap))
        put("recompute_modules", recompute_modules("recompute_modules", self.recompute_modules))
        one_of("ep_dispatcher", self.ep_dispatcher, EP_DISPATCHERS)
        if self.ep_dispatcher != DEFAULT_EP_DISPATCHER and self.objective == "original":
            raise InputError(f"ep_dispatcher: {self.ep_dispatcher} prices the expert dispatch of --objective step-time "
                             f"or comm-time; --objective original has none")
        if self.precision != "bf16" and self.objective != "step-time":
            raise InputError(f"precision: {self.precision} prices the compute of --objective step-time; "
                             f"--objective {self.objective} has none")


def _memory_number(name: str, value: object, what: str, zero_ok: bool, memory: bool) -> float:
    """A memory setting's number (*what*: its unit and bound, for the error), checked: a real number, finite, ``>= 0``
    (``> 0`` unless *zero_ok*), and memory priced.

    Raises:
        InputError: naming *name* and the value.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise InputError(f"{name}: expected {what} or None, got {_show(value)}")
    number = float(nonnegative(name, value))
    if not (zero_ok or number > 0):
        raise InputError(f"{name}: expected {what}, got {_show(value)}")
    if not memory:
        raise InputError(f"{name}: a memory setting; it needs memory priced (memory=True)")
    return number


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class SearchContext(NamedTuple):
    """What a process builds from a :class:`SearchSpec` once (:func:`search_context`).

    Attributes:
        space: the valid layouts (:class:`SearchSpace`).
        step: the step-time pricer (``StepTimePricer``; its ``comm`` is None without the time family), or None
            for ``--objective original``.
        original: the original's cost (``StagePricer``) for ``--objective original``, else None.
        memory: the memory pricer (``MemoryPricer``) when the spec prices memory, else None.
    """

    space: SearchSpace
    step: StepTimePricer | None
    original: StagePricer | None
    memory: MemoryPricer | None


def search_context(spec: SearchSpec) -> SearchContext:
    """The space and the pricers of *spec*, built once per process (each worker keeps its own).

    Raises:
        InputError: *spec* is no :class:`SearchSpec` (checked before the cache sees it).
        ValueError: ``--objective comm-time`` in a build without the time family.
    """
    if not isinstance(spec, SearchSpec):
        raise InputError(f"spec: expected a SearchSpec, got {type(spec).__name__}")
    return _context(spec)


@functools.lru_cache(maxsize=8)
def _context(spec: SearchSpec) -> SearchContext:
    """:func:`search_context` of a checked spec, kept per spec (equal specs are equal searches: every argument
    was checked and normalised when the spec was made)."""
    import hardware

    from ..pricing.step_time import StepTimePricer, time_family_comm

    system = hardware.load(spec.system)
    space = SearchSpace(spec.model, spec.devices, spec.global_batch, fix=dict(spec.fix), maximum=dict(spec.maximum),
                        recompute=spec.recompute, zero_levels=spec.zero_levels, cp_algos=spec.cp_algos,
                        devices_per_node=system.devices_per_node, tp_cross_node=spec.tp_cross_node,
                        any_interleaving=spec.any_interleaving)
    step = None
    original = None
    if spec.objective == "original":
        from ..pricing.pricer import StagePricer

        original = StagePricer(spec.model, device=spec.original_device or spec.system)
    else:
        comm = time_family_comm(spec.model, spec.system, spec.precision, ep_dispatcher=spec.ep_dispatcher)
        if spec.objective == "comm-time" and comm is None:
            raise ValueError("--objective comm-time: needs the time family (codegen.pricing.time), not in this build")
        step = StepTimePricer(spec.model, system=system, comm=comm, precision=spec.precision, overlap=spec.overlap,
                              recompute_modules=spec.recompute_modules)
    memory = None
    if spec.memory:
        from ..pricing.memory import DEFAULT_SETTINGS, MemoryPricer

        # The NumPy evaluators: the same numbers as the fused (numba) ones, without numba's import and kernel
        # load (about a second in a cold process), and as fast on the few rows a top-K search prices.
        settings = dataclasses.replace(DEFAULT_SETTINGS, precision=spec.precision,  # (its quantized tensors' bytes)
                                       recompute_modules=spec.recompute_modules)
        if spec.reserve_bytes is not None:
            settings = dataclasses.replace(settings, reserve_bytes=spec.reserve_bytes)
        if spec.bytes_grad is not None:
            settings = dataclasses.replace(settings, bytes_grad=spec.bytes_grad)
        memory = MemoryPricer(spec.model, system=spec.system, settings=settings, backend="numpy")
    return SearchContext(space, step, original, memory)


def setting_labels(spec: SearchSpec) -> dict[str, tuple[str, ...]]:
    """The names of a result table's setting codes (``recompute``, ``cp_algo``), by code: the recompute modes,
    and the CP algorithms of the spec's space in the order of its settings (``zero`` is its own code)."""
    space = search_context(spec).space
    return {"recompute": RECOMPUTE_MODES, "cp_algo": tuple(dict.fromkeys(s.cp_algo for s in space.settings))}


def priced_columns(spec: SearchSpec) -> tuple[str, ...]:
    """The columns of a result table (:data:`codegen.search.COLUMNS`) a search of *spec* prices: the others are
    NaN in every row (``fits`` -1), so a table written out (``--out``) leaves them out.

    The step-time and comm-time objectives price the step time and its parts, not the original's cost (the
    original's model in its own units on ``--original-device``: pricing it too would run a second cost model
    for every layout); ``--objective original`` prices that cost alone; the memory columns are priced unless
    ``memory=False``.
    """
    if not isinstance(spec, SearchSpec):
        raise InputError(f"spec: expected a SearchSpec, got {type(spec).__name__}")
    skip = {"original_cost"} if spec.objective != "original" else {
        "step_time_s", "compute_s", "bubble_s", "comm_s", "stage_flops"}
    if not spec.memory:
        skip |= {"memory_peak_bytes", "headroom_bytes", "fits"}
    return tuple(name for name in COLUMNS if name not in skip)


def decoded(spec: SearchSpec, chunk: Chunk, rows: np.ndarray | None = None) -> Chunk:
    """The layouts *rows* of *chunk* (all by default) with every key decoded."""
    if all(key in chunk.values for key in SEARCH_KEYS):
        return chunk if rows is None else subchunk(spec, chunk, rows)
    space = search_context(spec).space
    index = chunk.index if rows is None else chunk.index[rows]
    values = space.decode(index, space.settings.index(chunk.setting))
    row, bpos = values.pop("row"), values.pop("bpos")
    return Chunk(chunk.setting, values, index, spec.model, row, bpos)


def subchunk(spec: SearchSpec, chunk: Chunk, rows: np.ndarray) -> Chunk:
    """The layouts *rows* of *chunk*, with the keys it has decoded."""
    return Chunk(chunk.setting, {k: v[rows] for k, v in chunk.values.items()}, chunk.index[rows], spec.model,
                 None if chunk.row is None else chunk.row[rows], None if chunk.bpos is None else chunk.bpos[rows])
