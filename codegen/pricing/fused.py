"""The fused pricer: the stage pricer's numbers from one numba kernel per model variant.

``FusedPricer`` is ``StagePricer`` (same constructor, ``__call__``/``price_batch`` and
``StagePrices``) with its block loop replaced, for ``per_stage=False``, by one compiled loop over
the layouts that evaluates every stage term of the variant, adds the term groups, gathers the
groups' weights in each kind of stage by the layout's pipeline index, and writes the bottleneck
(the largest stage, plus the weights common to every kind) and the sum over stages. Each layout's
values are read once and two numbers written: no temporary array per term or per group.

The pieces come from one place each:

* the term arithmetic is the compiler's: ``generated/fused/stage.py`` holds, per stage formula,
  ``_<name>_at(i, …)`` — the lowered CSE form of one element, the same statements as its loop
  kernel, inlined by numba into the caller;
* the plan (which terms, how they group, the weight tables over the pipeline shapes ``(p, vp)``)
  is ``StagePricer``'s (``_plan``, ``_Pipelines``), imported, not restated;
* the derived fields (expert degrees, optimizer shards, levels, …) and the validation are
  ``codegen.configs.layouts``' (``derive_fields_batch``, ``check_batch``): the NumPy code stays the
  one source of truth for them, so an invalid layout raises the same ``LayoutError`` as
  ``StagePricer``. They run before the kernel, over the fields the terms read.

Which terms a variant holds depends on the model file (run-time data), and the compiler's room
imports no pricing code, so each variant's kernel is rendered on first use from the Jinja2
template ``codegen/templates/numba/pricer.py.jinja`` into a per-user cache directory
(``$SYMCOST_CACHE``, else ``$XDG_CACHE_HOME/symcost`` or ``~/.cache/symcost``), named by a hash of
its text, and compiled there by numba with ``cache=True`` (later processes load the machine code).

Needs numba (``pip install -e '.[fast]'``); without it constructing a ``FusedPricer`` raises
ImportError naming the extra.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .. import cache
from ..configs.layouts import LayoutBatch, check_batch
from ..inputs import flag
from .pricer import StagePrices, StagePricer, _arguments, _needed, _Pipelines, _StageTables, _Sums

__all__ = ["FusedPricer", "available"]

#: Layouts per call of the kernel: the derived-field arrays of a block stay in the processor's cache.
_BLOCK = 1 << 16

_TEMPLATES = Path(__file__).resolve().parent.parent / "templates" / "numba"


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


def _kernel(names: tuple[tuple[str, ...], ...], per_layout: frozenset[str]) -> tuple[Any, tuple[str, ...]]:
    """The compiled kernel for the term groups *names* with the arguments *per_layout* as arrays (the
    others numbers), and the argument names it reads after the tables."""
    arguments = tuple(sorted({a for group in names for name in group for a in _arguments(name)}))
    per_layout = frozenset(per_layout) & frozenset(arguments)
    kernel = _KERNELS.get((names, per_layout))
    if kernel is None:
        import jinja2

        env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(_TEMPLATES)), trim_blocks=True,
                                 lstrip_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
        functions = sorted({name for group in names for name in group})
        key = repr(names)
        text = env.get_template("pricer.py.jinja").render(
            key=key, functions=functions, groups=names, arguments=arguments, per_layout=sorted(per_layout),
            args={name: _arguments(name) for name in functions})
        import generated.fused.stage as stage  # the committed term kernels, fingerprinted

        digest = hashlib.sha256((text + stage.__doc__ + Path(stage.__file__).read_text()[:400]).encode()
                                ).hexdigest()[:20]
        directory = _cache_dir()
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"pricer_{digest}.py"
        if not path.exists() or path.read_text() != text:
            temporary = path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(text)
            os.replace(temporary, path)
        module_name = f"_symcost_fused_pricer_{digest}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
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


def _tables(tables: _StageTables) -> tuple[np.ndarray, ...]:
    """The weight tables as arrays indexed ``[group, pipeline]`` (kinds: ``[kind, group, pipeline]``)."""
    every = [*tables.total, *(w for kind in (*tables.every.kinds, *tables.front.kinds) for w in kind),
             *tables.every.common, *tables.front.common]
    width = max([len(w) for w in every if isinstance(w, np.ndarray)], default=1)
    total = _matrix(tables.total, width)
    front_w = np.stack([_matrix(kind, width) for kind in tables.front.kinds])
    every_w = np.stack([_matrix(kind, width) for kind in tables.every.kinds])
    return total, front_w, _matrix(tables.front.common, width), every_w, _matrix(tables.every.common, width)


class FusedPricer(StagePricer):
    """``StagePricer`` whose bottleneck and sum come from one numba kernel per variant (see the module).

    The same arguments and results; ``per_stage`` (every stage's parts) is priced as by
    ``StagePricer``. Raises ImportError naming the ``fast`` extra when numba is not installed.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        if not available():
            raise ImportError("FusedPricer needs numba: pip install -e '.[fast]' (or use StagePricer)")
        super().__init__(*args, **kwargs)
        self._arrays: dict[int, tuple[np.ndarray, ...]] = {}

    def price_batch(self, batch: LayoutBatch, *, per_stage: bool | Sequence[str] = False,
                    validated: bool = False) -> StagePrices:
        """Prices of the layouts of *batch*; as ``StagePricer.price_batch``."""
        if per_stage is not False or len(batch) == 0:
            return super().price_batch(batch, per_stage=per_stage, validated=validated)
        validated = flag("validated", validated)
        n = len(batch)
        if not validated:
            check_batch(self.model, batch)
        terms = self._terms(batch)
        bottleneck, total_sum = np.empty(n), np.empty(n)
        for start in range(0, n, _BLOCK):
            rows = slice(start, start + _BLOCK)
            block = batch.subset(rows) if n > _BLOCK else batch
            m = len(block)
            pipelines = _Pipelines.of(block, lambda p, vp, _b=block: self._stage_counts(_b, p, vp), self._pipelines)
            sums, tables = self._plan(terms, block, pipelines)
            values = self._values(block, _needed(sums))
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
        return StagePrices(bottleneck=bottleneck, sum=total_sum, stages=None)


def _as_array(value: Any, m: int) -> np.ndarray:
    """A float64 array of *m* elements (a stride-0 view for one number; no copy for a float64 array)."""
    array = np.asarray(value, dtype=np.float64)
    if array.ndim == 0 or array.size == 1:
        return np.broadcast_to(array.reshape(1), (m,))
    return array
