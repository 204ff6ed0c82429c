"""The stage pricer's fused backend: its numbers from one numba kernel per model variant.

``StagePricer(..., backend="numba")`` (``codegen.pricing.pricer``) hands its ``per_stage=False``
calls to a :class:`FusedBackend`, which evaluates the pricer's own plan in compiled loops instead of
its NumPy passes. The backend holds the pricer, not its code: it reads the plan through the pricer's
public methods (:class:`StagePlanner`: ``terms``, ``pipeline_shapes``, ``plan``,
``argument_values``) and returns ``(bottleneck, sum)`` arrays, which the pricer returns as
``StagePrices``; ``per_stage``, the slopes and every error stay the pricer's.

**Called with key arrays** (``pricer(d=…, t=…, …)``, int64 columns or single numbers, at least
``_KEYS_FROM`` layouts, or fewer in the ``_WARM_CALLS``-th call of one shape on): the whole pricer is one loop
over the layouts
(``codegen/templates/numba/pricer_keys.py.jinja``) that reads each layout's keys once and does the
input gate (bounds and device count), the validation (``validated=False``), the derived fields,
the TIME path's level scores, the stage terms, their groups, the weights of each kind of stage by
the layout's pipeline index, and writes the bottleneck and the sum over stages. What follows from
the keys alone — the first broken constraint, each derived field or score factor, and a term
group's sum when the values its keys take are few (``_PART_TABLE_LIMIT``) — comes from tables over
the values present of the keys it reads (``LAYOUT_FIELD_KEYS``, ``constraint_keys``), which the
NumPy code fills once per set of values: ``layout_violations``, ``derive_fields_batch`` and
``stages.bind`` (with ``levels.score_factors``), the generated NumPy terms. The kernel looks a
layout's entry up by the codes of its key values; a group with too many values is computed in the
kernel from its arguments by the compiler's term arithmetic. The values present come from a scan of
the keys (``generated.fused.seen_values``) on the first call of a shape; later calls run the
last plan straight away and scan only when a layout holds a value it lacks. An invalid layout (or a
value outside the gate) makes the kernel stop and name it; the batch path then raises
``StagePricer``'s error, word for word.

**Called with a batch** (``price_batch``, or key arrays the kernel above does not take): the
derived fields and the validation run in NumPy before a kernel (``pricer.py.jinja``) that
evaluates the terms, the groups, the stage weights, the bottleneck and the sum.

The pieces come from one place each:

* the term arithmetic is the compiler's: ``generated/fused/stage.py`` holds, per stage formula,
  ``_<name>_at(i, …)`` — the lowered CSE form of one element, the same statements as its loop
  kernel, inlined by numba into the caller; tabulated groups are the NumPy target's terms;
* the plan (which terms, how they group, the weight tables over the pipeline shapes ``(p, vp)``)
  is the engine's (``engine.PipelineShapes``, ``engine.stage_tables``), as the pricer keeps it
  (``StagePricer.plan``), not restated;
* the derived fields (expert degrees, optimizer shards, levels, …) and the validation are
  ``codegen.configs``' and ``codegen.pricing.stages``': the NumPy code stays the one
  source of truth for them, run on the tables' grids, so an invalid layout raises the same
  ``LayoutError`` as ``StagePricer``.

Which terms a variant holds depends on the model file (run-time data), and the compiler's room
imports no pricing code, so each variant's kernel is rendered on first use — from a kernel
template of the compiler's ``NUMBA`` backend, through ``codegen.backends.render_kernel`` and the
compiler's one strict Jinja2 environment — into a per-user cache directory (``$SYMCOST_CACHE``, else
``$XDG_CACHE_HOME/symcost`` or ``~/.cache/symcost``), named by a hash of its text, and compiled
there by numba with ``cache=True`` (later processes load the machine code).

Needs numba (``pip install -e '.[fast]'``); without it ``StagePricer(..., backend="numba")`` raises
ImportError naming the extra.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

from ..backends import NUMBA, render_kernel
from ..runtime import cache
from ..configs import (ARRAY_KEYS, LAYOUT_FIELD_KEYS, LayoutBatch, LayoutError, ModelConfig, constraint_keys,
                       layout_violations)
from ..runtime.inputs import DEVICES_MAX, bound
from .engine import (KERNEL_BLOCK, PipelineShapes, StageTables, TermGroups, add_parts, blocks, group_arguments,
                     term_arguments, term_function)
from .levels import SCORE_FACTORS
from .stages import BIND_SOURCES, Terms

__all__ = ["FusedBackend", "StagePlanner", "available"]

#: Fewest layouts a call prices by reading the key columns in one kernel (:meth:`FusedBackend.price_keys`)
#: at once; fewer go the batch path, whose first call costs less than the scan and the plan (some 40-70 ms).
_KEYS_FROM = 1 << 12

#: Calls of one shape (settings, shared keys, varying key names) below ``_KEYS_FROM`` layouts after which the
#: shape is a searcher's loop and takes the key kernel too: a warm call of 1,000 layouts then costs some 60 us
#: against some 200-600 us on the batch path (``python3 bench/model.py``, ``fused_n1000``).
_WARM_CALLS = 16

#: A scanned key's values lie in ``0 .. _VALUES - 1`` (larger ones take the batch path).
_VALUES = 1 << 12

#: Most entries of a table over the values present of the keys a field or the constraints read.
_TABLE_LIMIT = 1 << 18

#: Most entries of a table of a term group's sum (:meth:`FusedBackend._key_plan`); larger groups are computed
#: in the kernel from their arguments.
_PART_TABLE_LIMIT = 1 << 16

#: Keys ``stages.bind`` reads for an argument beyond the fields of ``BIND_SOURCES`` (it takes ``ep`` as one value).
_BIND_KEYS: dict[str, tuple[str, ...]] = {"max_rank_tokens": ("ep",)}


def available() -> bool:
    """Whether numba (the ``fast`` extra) is installed."""
    return importlib.util.find_spec("numba") is not None


def _cache_dir() -> Path:
    return cache.directory("fused")


_KERNELS: dict[Any, Any] = {}


@functools.cache
def _per_layout_names() -> frozenset[str]:
    from symbolic.symbols import PER_LAYOUT  # names only: symbolic.symbols is imported by generated/ too

    return frozenset(getattr(x, "name", x) for x in PER_LAYOUT)


def _module(template: str, **context: Any) -> Any:
    """The module rendered from *template* (a kernel template of the ``NUMBA`` backend) with *context*,
    written into the cache folder (named by a hash of its text and of the committed term kernels) and
    imported; numba compiles its kernel on first call
    (``cache=True``: later processes load the machine code)."""
    text = render_kernel(NUMBA, template, **context)
    import generated.fused.stage as stage  # the committed term kernels, fingerprinted

    digest = hashlib.sha256((text + stage.__doc__ + Path(stage.__file__).read_text()[:400]).encode()
                            ).hexdigest()[:20]
    directory = _cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{template.split('.')[0]}_{digest}.py"
    if not path.exists() or path.read_text() != text:
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(text)
        os.replace(temporary, path)
    module_name = f"_symcost_fused_{template.split('.')[0]}_{digest}"
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return module


def _kernel(names: tuple[tuple[str, ...], ...], per_layout: frozenset[str]) -> tuple[Any, tuple[str, ...]]:
    """The compiled kernel for the term groups *names* with the arguments *per_layout* as arrays (the
    others numbers), and the argument names it reads after the tables."""
    arguments = tuple(sorted({a for group in names for name in group for a in term_arguments(name)}))
    per_layout = frozenset(per_layout) & frozenset(arguments)
    kernel = _KERNELS.get((names, per_layout))
    if kernel is None:
        functions = sorted({name for group in names for name in group})
        module = _module("pricer.py.jinja", key=repr(names), functions=functions, groups=names, arguments=arguments,
                         per_layout=sorted(per_layout), args={name: term_arguments(name) for name in functions})
        kernel = _KERNELS[(names, per_layout)] = module.price
    return kernel, arguments


def _matrix(weights: Sequence[Any], width: int) -> np.ndarray:
    """Rows of weights (None → 0, a number → the same in every column, a table → its entries)."""
    out = np.zeros((len(weights), width))
    for j, w in enumerate(weights):
        if w is None:
            continue
        if isinstance(w, np.ndarray):
            out[j, :len(w)] = w
        else:
            out[j, :] = w
    return out


def _tables(tables: StageTables) -> tuple[np.ndarray, ...]:
    """The weight tables as arrays indexed ``[group, pipeline]`` (kinds: ``[kind, group, pipeline]``)."""
    every = [*tables.total, *(w for kind in (*tables.every.kinds, *tables.front.kinds) for w in kind),
             *tables.every.common, *tables.front.common]
    width = max([len(w) for w in every if isinstance(w, np.ndarray)], default=1)
    total = _matrix(tables.total, width)
    front_w = np.stack([_matrix(kind, width) for kind in tables.front.kinds])
    every_w = np.stack([_matrix(kind, width) for kind in tables.every.kinds])
    return total, front_w, _matrix(tables.front.common, width), every_w, _matrix(tables.every.common, width)


class StagePlanner(Protocol):
    """What :class:`FusedBackend` reads of its pricer: ``pricer.StagePricer``'s public plan (see its methods)."""

    model: ModelConfig
    fsdp: bool | None
    recompute: str | None
    ttype: str
    outputs: tuple[str, ...]

    def terms(self, batch: LayoutBatch, degrees: Sequence[str] = ()) -> Terms: ...

    def pipeline_shapes(self, batch: LayoutBatch) -> PipelineShapes: ...

    def plan(self, terms: Terms, block: LayoutBatch, pipelines: PipelineShapes) -> tuple[TermGroups, StageTables]: ...

    def argument_values(self, batch: LayoutBatch, needed: frozenset[str] | set[str] | Sequence[str]
                        ) -> dict[str, Any]: ...


class FusedBackend:
    """The fused target of a stage pricer: its ``per_stage=False`` prices from numba kernels (see the module).

    ``StagePricer(..., backend="numba")`` makes one and hands it its calls; the plan (terms, groups, stage
    tables, bound arguments) is the pricer's, read through *pricer*'s public methods (:class:`StagePlanner`).

    Args:
        pricer: the stage pricer whose plan the kernels evaluate.

    Raises:
        ImportError: naming the ``fast`` extra when numba is not installed.
    """

    #: Layouts per call of the batch kernel (``engine.KERNEL_BLOCK``; the NumPy passes' block is the pricer's).
    kernel_block: int = KERNEL_BLOCK

    def __init__(self, pricer: StagePlanner):
        if not available():
            raise ImportError("backend='numba' (the fused target) needs numba: pip install -e '.[fast]' "
                              "(or use backend='numpy')")
        self.pricer = pricer
        self._arrays: dict[int, tuple[np.ndarray, ...]] = {}
        self._key_plans: dict[Any, Any] = {}
        self._scanned: dict[Any, tuple[str, ...]] = {}
        self._current: dict[Any, Any] = {}
        self._heads: dict[Any, tuple[LayoutBatch, tuple[Any, ...]]] = {}
        self._calls: dict[Any, int] = {}

    def price_keys(self, arrays: dict[str, Any], validated: bool) -> tuple[np.ndarray, np.ndarray] | None:
        """``(bottleneck, sum)`` of the layouts given as key arrays (``StagePricer.__call__``'s) from one pass of a
        kernel over the key columns, or ``None`` where the pricer's batch path must price them (or raise its error).

        The kernel takes a call whose every key is an int64 array (or one whole number) of at least
        ``_KEYS_FROM`` layouts, or fewer once the same shape was priced ``_WARM_CALLS`` times.

        The keys' values are scanned first (``generated.fused.seen_values``: the input gate's bounds and the
        values present); what follows from the keys alone — the first broken constraint
        (``layout_violations``), the derived fields and the TIME path's score factors (``derive_fields_batch``
        and ``bind``, hence the level assignment of ``levels``) — is computed by the NumPy rules on the
        grid of the values present of the keys it reads (``LAYOUT_FIELD_KEYS``, ``constraint_keys``), and
        the kernel looks each layout's entry up. ``None`` (the batch path then prices, or raises its error)
        for keys given otherwise, a value outside the scan's range, too large a table, or an invalid layout.
        """
        columns: dict[str, np.ndarray] = {}
        keys: dict[str, Any] = {}
        n = None
        for name, value in arrays.items():
            if name not in ARRAY_KEYS:
                continue
            if type(value) is np.ndarray and value.ndim == 1:
                if value.strides == (0,) and len(value):
                    value = value[:1]
                elif value.dtype != np.int64 or not value.flags.c_contiguous:
                    return None
                else:
                    columns[name] = value
                if n is not None and len(value) != n and name in columns:
                    return None
                n = len(value) if name in columns else n
                keys[name] = value[:1]
            elif isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
                keys[name] = value
            else:
                return None
        if not n or any(len(c) != n for c in columns.values()):
            return None  # no key column, or no layout
        settings = {name: value for name, value in arrays.items() if name not in ARRAY_KEYS}
        shape = self._head(settings, keys, columns)
        if shape is None:
            return None  # the batch path raises the same error, naming the layout
        head, layout_key = shape[0], (*shape[1], validated)
        from generated.fused import seen_values

        if n < _KEYS_FROM and layout_key not in self._current:
            calls = self._calls[layout_key] = self._calls.get(layout_key, 0) + 1
            if calls < _WARM_CALLS:
                return None
            if len(self._calls) >= 256:
                self._calls.clear()
        scanned = self._scanned.get(layout_key)
        if scanned is None:
            if len(self._scanned) >= 256:
                self._scanned.clear()
            scanned = self._scanned[layout_key] = self._scanned_keys(head, keys, tuple(columns), validated)
        bottleneck, total = np.empty(n), np.empty(n)
        current = self._current.get(layout_key)
        if current is not None:
            # The plan of the last call of this shape: its kernel finds out whether every value is one the
            # plan tabulated (a searcher's calls mostly hold the same values), so that no scan is needed.
            kernel, before, after = current[1]
            found = kernel(bottleneck, total, *before, *columns.values(), *after)
            if found == -1:
                return bottleneck, total
            if found >= 0:
                return None  # an invalid layout: the batch path raises its error
        seen: dict[str, np.ndarray] = {}
        for name in scanned:
            marks = np.zeros(_VALUES, dtype=np.uint8)
            if seen_values(columns[name], marks, 0 if name == "os" else 1):
                return None
            seen[name] = marks
        plan = None
        if current is not None:  # the values of the last plan and these: the plans grow to what the calls hold
            plan = self._plan_of(layout_key, head, settings, keys, columns, scanned,
                                 {name: marks | current[0][name] for name, marks in seen.items()}, validated)
        if plan is None:
            plan = self._plan_of(layout_key, head, settings, keys, columns, scanned, seen, validated)
        if plan is None:
            return None
        kernel, before, after = plan[1]
        found = kernel(bottleneck, total, *before, *columns.values(), *after)
        if found != -1:
            return None  # an invalid layout (the batch path raises its error); no other value is possible
        if len(self._current) >= 256:
            self._current.clear()
        self._current[layout_key] = plan
        return bottleneck, total

    def _plan_of(self, layout_key: Any, head: LayoutBatch, settings: dict[str, Any], keys: dict[str, Any],
                 columns: dict[str, np.ndarray], scanned: tuple[str, ...], seen: dict[str, np.ndarray],
                 validated: bool) -> tuple[dict[str, np.ndarray], Any] | None:
        """``(seen, (kernel, before, after))`` for the values marked in *seen*, or ``None`` where the batch path
        must price (too large a device count or table)."""
        values = {name: np.flatnonzero(marks) for name, marks in seen.items()}
        top = {name: int(values[name][-1]) if name in values else int(getattr(head, name)[0]) for name in ARRAY_KEYS}
        if top["d"] * top["t"] * top["cp"] * top["p"] > DEVICES_MAX:
            return None
        plan_key = (layout_key, tuple((name, values[name].tobytes()) for name in scanned))
        plan = self._key_plans.get(plan_key)
        if plan is None:
            try:
                plan = self._key_plan(head, settings, keys, tuple(columns), scanned, values, seen, validated)
            except (LayoutError, ValueError):
                plan = False  # the batch path raises the error, or prices what the tables cannot
            if len(self._key_plans) >= 256:
                self._key_plans.clear()
            self._key_plans[plan_key] = plan
        return None if plan is False else (seen, plan)

    def _head(self, settings: dict[str, Any], keys: dict[str, Any], columns: dict[str, np.ndarray]
              ) -> tuple[LayoutBatch, tuple[Any, ...]] | None:
        """The one-layout batch of the call's first layout and the call's shape, or ``None`` when it is invalid.

        The shape is what every layout of the call shares: the settings and the keys given as one number or
        left to the model's layout (os left to it follows d: it is the first layout's, not every layout's),
        by value, and the names of the varying keys. Only the head's settings and shared keys are read (the
        kernel gates and checks each layout itself), so both are kept per call signature: building the head
        costs more than pricing 1,000 layouts in the kernel. Settings that cannot be a dictionary key (arrays)
        build them every call.
        """
        try:
            given = tuple((name, int(value[0]) if isinstance(value, np.ndarray) else int(value))
                          for name, value in keys.items() if name not in columns)
            signature: Any = (tuple(settings.items()), given, tuple(columns))
            kept = self._heads.get(signature)
        except TypeError:  # an unhashable setting
            signature, kept = None, None
        if kept is not None:
            return kept
        try:
            head = self._batch(settings, keys)
        except (LayoutError, TypeError, ValueError):
            return None
        shared = tuple((name, int(getattr(head, name)[0])) for name in ARRAY_KEYS
                       if name not in columns and (name in keys or name != "os"))
        kept = (head, (head.settings(), shared, tuple(columns)))
        if signature is not None:
            if len(self._heads) >= 256:
                self._heads.clear()
            self._heads[signature] = kept
        return kept

    def _batch(self, settings: dict[str, Any], keys: dict[str, Any]) -> LayoutBatch:
        """The batch of *keys* (arrays or numbers) over the model's layout, as ``__call__`` makes it."""
        pricer = self.pricer
        return LayoutBatch.from_arrays(pricer.model.layout, fsdp=pricer.fsdp, recompute=pricer.recompute, **settings,
                                       **keys)

    def _reads(self, name: str, keys: dict[str, Any], varying: Sequence[str]) -> tuple[str, ...]:
        """The varying keys the value of argument (or field) *name* follows from, in ``ARRAY_KEYS`` order."""
        if self.pricer.ttype == "FLOP" and name in SCORE_FACTORS:
            return ()  # bind: 1 on the FLOP path
        reads = {key for source in BIND_SOURCES.get(name, (name,)) for key in
                 (*LAYOUT_FIELD_KEYS.get(source, ()), *_BIND_KEYS.get(source, ()))}
        return self._key_reads(reads, keys, varying)

    def _key_reads(self, reads: set[str] | frozenset[str], keys: dict[str, Any], varying: Sequence[str]
                   ) -> tuple[str, ...]:
        # Without an os of its own, a batch takes the model layout's where it divides d (from_arrays): os then
        # follows d, and what reads os reads d.
        if "os" in reads and "os" not in keys and self.pricer.model.layout.os is not None:
            reads = set(reads) | {"d"}
        return tuple(key for key in ARRAY_KEYS if key in reads and key in varying)

    def _scanned_keys(self, head: LayoutBatch, keys: dict[str, Any], varying: tuple[str, ...],
                      validated: bool) -> tuple[str, ...]:
        """The varying keys whose values present a plan needs: those a term's argument, the pipeline or the
        constraints read (the kernel checks the others' bounds itself)."""
        terms = self.pricer.terms(head)
        needed = terms.arguments({output.removesuffix("_recomputed") for output in self.pricer.outputs})
        reads = {key for name in needed for key in self._reads(name, keys, varying)}
        reads |= {"p", "vp"}
        if not validated:
            reads |= set(self._key_reads(constraint_keys(self.pricer.model, head), keys, varying))
        return tuple(key for key in ARRAY_KEYS if key in reads and key in varying)

    def _key_plan(self, head: LayoutBatch, settings: dict[str, Any], keys: dict[str, Any], varying: tuple[str, ...],
                  scanned: tuple[str, ...], values: dict[str, np.ndarray], seen: dict[str, np.ndarray],
                  validated: bool) -> tuple[Any, tuple[Any, ...], tuple[Any, ...]]:
        """The kernel of :meth:`price_keys` and its arguments before and after the key columns."""
        shared = {name: int(getattr(head, name)[0]) for name in ARRAY_KEYS}
        given = {name: shared[name] for name in keys}  # keys not given take the model's layout in every batch

        def key_reads(reads: set[str]) -> tuple[str, ...]:
            return self._key_reads(reads, keys, varying)

        pricer = self.pricer
        terms = pricer.terms(head)
        probe = self._batch(settings, {**given, **{name: np.array([values[name][0], values[name][-1]])
                                                  for name in ("p", "vp") if name in varying}})
        pipelines = pricer.pipeline_shapes(probe)
        sums, tables = pricer.plan(terms, probe, pipelines)
        weights = _tables(tables)
        if pipelines.index is None:
            radix, pipeline = 0, "0"
        elif "vp" in varying:
            radix = int(values["vp"][-1]) + 1
            pipeline = ("v_p" if "p" in varying else str(shared["p"])) + "*radix + v_vp"
        else:
            radix, pipeline = 0, "v_p"

        def grid(names: tuple[str, ...]) -> tuple[LayoutBatch, dict[str, int]]:
            sizes = [len(values[name]) for name in names]
            size = int(np.prod(sizes)) if sizes else 1
            if size > _TABLE_LIMIT:
                raise ValueError(f"a table of {size} entries")
            strides, grid_columns = {}, {}
            for j, name in enumerate(names):
                inner = int(np.prod(sizes[j + 1:])) if j + 1 < len(sizes) else 1
                strides[name] = inner
                grid_columns[name] = np.tile(np.repeat(values[name], inner), size // (inner * sizes[j]))
            return self._batch(settings, {**given, **grid_columns}), strides

        bound_values = pricer.argument_values

        check = None
        check_args: tuple[Any, ...] = ()
        coded: set[str] = set()
        if not validated:
            read = key_reads(set(constraint_keys(pricer.model, head)))
            batch, strides = grid(read)
            first = layout_violations(pricer.model, batch)
            if not read:
                if first[0] >= 0:
                    raise LayoutError("every layout breaks a constraint")  # the batch path names it
            else:
                check = read
                check_args = (np.ascontiguousarray(first), *(strides[name] for name in read))
                coded |= set(read)
        expressions: dict[str, str] = {}
        groups: dict[tuple[str, ...], list[str]] = {}
        scalars: list[str] = []
        # A term group whose arguments follow from few values of the keys is tabulated whole: the generated
        # NumPy terms (StagePricer's arithmetic, in its order) on the grid of those values, one entry a layout.
        parts: list[str | None] = []
        part_tables: list[tuple[tuple[str, ...], np.ndarray]] = []
        computed: set[str] = set()
        for group in sums.names:
            arguments = sorted({a for name in group for a in term_arguments(name)})
            reads = self._key_reads({key for a in arguments for key in self._reads(a, keys, varying)}, keys, varying)
            size = int(np.prod([len(values[key]) for key in reads])) if reads else 1
            if size > _PART_TABLE_LIMIT:
                parts.append(None)
                computed.update(arguments)
                continue
            batch, strides = grid(reads)
            found = bound_values(batch, arguments)
            part = add_parts([term_function(name)(**{a: found[a] for a in term_arguments(name)}) for name in group])
            parts.append(f"ptab{len(part_tables)}")
            part_tables.append((reads, np.broadcast_to(np.asarray(part, dtype=np.float64), (size,))[None, :]))
        for name in sorted(computed):
            reads = self._reads(name, keys, varying)
            if name in ARRAY_KEYS and name not in LAYOUT_FIELD_KEYS:
                raise ValueError(f"{name}: a key that is no field")
            if not reads:
                scalars.append(name)
                expressions[name] = f"s_{name}"
            elif name in ARRAY_KEYS:
                expressions[name] = f"float(v_{name})"
            else:
                groups.setdefault(reads, []).append(name)
        table_args: list[Any] = []
        table_keys: list[tuple[str, ...]] = []
        for j, (names, members) in enumerate(groups.items()):
            batch, strides = grid(names)
            size = len(batch)
            found = bound_values(batch, members)
            table_args.append(np.stack([np.broadcast_to(np.asarray(found[m], dtype=np.float64), (size,))
                                        for m in members]))
            table_args.extend(strides[name] for name in names)
            table_keys.append(names)
            coded |= set(names)
            for row, member in enumerate(members):
                expressions[member] = f"tab{j}[{row}, g{j}]"
        for j, (names, table) in enumerate(part_tables, start=len(groups)):
            _batch, strides = grid(names)
            table_args.append(np.ascontiguousarray(table))
            table_args.extend(strides[name] for name in names)
            table_keys.append(names)
            coded |= set(names)
            parts[parts.index(f"ptab{j - len(groups)}")] = f"tab{j}[0, g{j}]"
        found = bound_values(head, scalars) if scalars else {}
        scalar_values = tuple(float(np.asarray(found[name], dtype=np.float64).reshape(-1)[0]) for name in scalars)
        coded_keys = scanned  # every scanned key's value is checked to be one the plan holds (code >= 0)
        codes = tuple(np.where(seen[name], np.cumsum(seen[name], dtype=np.int64) - 1, -1) for name in coded_keys)
        functions = sorted({name for group, part in zip(sums.names, parts) if part is None for name in group})
        gates = [(name, 0 if name == "os" else 1, bound(name)) for name in varying if name not in scanned]
        degrees = ("d", "t", "cp", "p")
        devices = None
        if any(name in varying and name not in scanned for name in degrees):
            devices = "*".join(f"float(v_{name})" if name in varying else f"{float(shared[name])!r}"
                               for name in degrees)
        module = _module("pricer_keys.py.jinja", key=repr(sums.names), functions=functions, groups=sums.names,
                         parts=parts, args={name: term_arguments(name) for name in functions}, columns=list(varying),
                         coded=list(coded_keys), tables=table_keys, check=check, pipeline=pipeline, gates=gates,
                         devices=devices, devices_max=DEVICES_MAX, front_kinds=len(weights[1]),
                         every_kinds=len(weights[3]), scalars=[f"s_{name}" for name in scalars],
                         expressions=expressions)
        before = (*weights, radix)
        after = (*codes, *table_args, *check_args, *scalar_values)
        return module.price, before, after


    def price_batch(self, batch: LayoutBatch, terms: Terms) -> tuple[np.ndarray, np.ndarray]:
        """``(bottleneck, sum)`` of the layouts of *batch* (checked, or vouched for, by the pricer) with the
        variant's *terms* (``StagePricer.terms``): per block of :attr:`kernel_block` layouts, the pricer's plan
        for the block's pipeline shapes and its bound arguments, and one kernel over the terms, the groups, the
        stage weights, the bottleneck and the sum."""
        pricer = self.pricer
        n = len(batch)
        bottleneck, total_sum = np.empty(n), np.empty(n)
        for rows in blocks(n, self.kernel_block):
            block = batch.subset(rows) if n > self.kernel_block else batch
            m = len(block)
            pipelines = pricer.pipeline_shapes(block)
            sums, tables = pricer.plan(terms, block, pipelines)
            values = pricer.argument_values(block, group_arguments(sums))
            # Arrays for the fields that vary by layout (by name, so that the kernel stays the same from
            # block to block), numbers for the model's and the run's; an array where a number was
            # expected makes its own kernel.
            varying = _per_layout_names() | {a for a, v in values.items() if np.ndim(v) and np.size(v) > 1}
            kernel, arguments = _kernel(sums.names, frozenset(varying))
            arrays = self._arrays.get(id(tables))
            if arrays is None or arrays[0] is not tables:
                arrays = self._arrays[id(tables)] = (tables, *_tables(tables))
            index = (np.zeros(1, dtype=np.int64) if pipelines.index is None
                     else np.ascontiguousarray(pipelines.index, dtype=np.int64))
            if pipelines.index is None:
                index = np.broadcast_to(index, (m,))
            kernel(index, *arrays[1:], bottleneck[rows], total_sum[rows],
                   *(_as_array(values[a], m) if a in varying else float(np.asarray(values[a]).reshape(-1)[0])
                     for a in arguments))
        return bottleneck, total_sum


def _as_array(value: Any, m: int) -> np.ndarray:
    """A float64 array of *m* elements (a stride-0 view for one number; no copy for a float64 array)."""
    array = np.asarray(value, dtype=np.float64)
    if array.ndim == 0 or array.size == 1:
        return np.broadcast_to(array.reshape(1), (m,))
    return array
