"""Every valid layout of a model on N devices, in chunks of arrays (no SymPy, no Python loop per layout).

A search space numbers its valid layouts ``0 .. size − 1`` without listing them. Its parts:

* the structure rows: the ``(t, cp, p, vp)`` rows whose ``t·cp·p`` divides the device count
  (``d`` is the quotient) and ``p·vp`` fits the layers, crossed with the ``ep`` and ``etp``
  candidates and filtered once by :func:`codegen.configs.layout_violations` (the very
  constraints ``check_batch`` applies), per CP algorithm. The rules are elementwise and read none
  of ``b`` and ``m`` (``_constraint_rules``), so a layout is valid exactly when its structure row
  is; the table's size depends on the divisors of N, never on the grid;
* per row, the micro-batch sizes ``b`` that make ``m = global_batch / (d·b)`` whole (and meet
  ``--fix``/``--max`` on ``m``), as offsets into the numbering;
* the run settings a :class:`LayoutBatch` shares (the recompute mode, the ZeRO level, the CP
  algorithm), outermost.

:meth:`SearchSpace.block` decodes a range of numbers (a binary search in the offsets and gathers)
into a :class:`Chunk` per setting; nothing holds the whole grid.

Public API::

    ZERO_LEVELS, RECOMPUTE_MODES, SEARCH_KEYS  (symbolic.vocabulary's, which the space reads)
    SearchSpace(model, devices, global_batch, *, fix=None, maximum=None, recompute=RECOMPUTE_MODES,
                zero_levels=(1,), cp_algos=None, devices_per_node=None, tp_cross_node=False,
                any_interleaving=False)
    space.size -> int;  space.chunks(chunk=1 << 18, start=0, stop=None) -> Iterator[Chunk]
    space.why_empty() -> str | None     # an empty grid's reason: the --fix value and the rule it breaks
    space.block(start, stop, keys=None) -> list[Chunk];  space.decode(index, setting, keys=None) -> dict[str, ndarray]
    Chunk(setting, values, index, model): .batch (a LayoutBatch, built on first use)
    parse_restrictions(items, option) -> dict[str, int]
"""

from __future__ import annotations

import math
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np

from symbolic.vocabulary import RECOMPUTE_MODES, SEARCH_KEYS, layout_key

from ..configs import (LayoutBatch, LayoutError, ModelConfig, layout_violations, split_layers, uneven_chunks,
                       ungrouped_microbatches)
from ..pricing.chunks import Chunk, Setting, distinct_sorted
from ..runtime.inputs import DEVICES_MAX, InputError, flag, int_array, whole
from .options import GLOBAL_BATCH_MAX, cp_algorithms, parse_restrictions, recompute_modes, restrictions
from .options import zero_levels as checked_zero_levels

__all__ = ["SearchSpace", "parse_restrictions"]


def _divisors(n: int) -> np.ndarray:
    """The divisors of *n*, ascending."""
    small = np.arange(1, int(np.sqrt(n)) + 1, dtype=np.int64)
    small = small[n % small == 0]
    return distinct_sorted(np.concatenate([small, n // small]))


def _within(key: str) -> tuple[Callable[[np.ndarray], np.ndarray], str]:
    """The rule that *key* is at most its declared bound, with the words of an error."""
    top = layout_key(key).maximum
    what = "parallel degree" if layout_key(key).degree else "size or count"
    return (lambda v: v <= top), f"be at most 2**{top.bit_length() - 1} = {top:,}, the largest {what} symcost prices"


class SearchSpace:
    """The grid of candidate layouts of *model* on *devices* devices for a global batch of *global_batch* samples.

    Args:
        model: the model; its default layout supplies every key the search does not vary (``os``,
            ``sp``, ``reshards``, the sequence length, …).
        devices: N, the product ``d·t·cp·p`` of every layout.
        global_batch: samples per step; ``m = global_batch / (d·b)`` must be whole.
        fix: ``{key: value}`` pins a degree (``--fix t=8``). maximum: ``{key: value}`` bounds it (``--max t=8``).
        recompute: uniform recompute modes to try. zero_levels: ZeRO levels to try (:data:`ZERO_LEVELS`).
        cp_algos: CP algorithms to try (default: the model's own).
        devices_per_node: devices of a node; ``t`` must not exceed it unless *tp_cross_node*.
        any_interleaving: also admit ``vp > 1`` where Megatron-Core's interleaved pipeline needs settings beyond
            the degrees: the layers not filling ``p·vp`` model chunks evenly (an explicit
            ``pipeline_model_parallel_layout``) or ``m`` no multiple of ``p`` (a micro-batch group size other than
            ``p``); by default a pinned ``vp`` alone admits them.

    Raises:
        ValueError: naming the field for a bad device count, global batch, key or setting.
    """

    def __init__(self, model: ModelConfig, devices: int, global_batch: int, *, fix: Mapping[str, int] | None = None,
                 maximum: Mapping[str, int] | None = None, recompute: Sequence[str] = RECOMPUTE_MODES,
                 zero_levels: Sequence[int] = (1,), cp_algos: Sequence[str] | None = None,
                 devices_per_node: int | None = None, tp_cross_node: bool = False,
                 any_interleaving: bool = False) -> None:
        if not isinstance(model, ModelConfig):
            raise InputError(f"model: expected a ModelConfig (codegen.configs.load_model(name)), got {model!r:.80}")
        self.model = model
        self.devices = whole("devices", devices, minimum=1, maximum=DEVICES_MAX)
        self.global_batch = whole("global batch", global_batch, minimum=1, maximum=GLOBAL_BATCH_MAX)
        self.fix, self.maximum = (dict(restrictions(option, table)) for option, table in (("--fix", fix),
                                                                                           ("--max", maximum)))
        # Each setting once: a mode or level given twice, or two names of one CP algorithm, would number the same
        # layouts twice (options.py merges them under the first name).
        recompute = recompute_modes("recompute", recompute)
        levels = checked_zero_levels("zero level", zero_levels)
        algos = cp_algorithms("cp algorithm", cp_algos) if cp_algos is not None else (model.layout.cp_algo,)
        for algo in algos:  # the layout's own check names an algorithm the model cannot run
            try:
                LayoutBatch.from_arrays(model.layout, d=[1], t=[1], p=[1], m=[1], cp_algo=algo)
            except LayoutError as exc:
                raise InputError(f"cp algorithm: {exc}") from None
        if devices_per_node is not None:
            devices_per_node = whole("devices_per_node", devices_per_node, minimum=1, maximum=DEVICES_MAX)
        tp_cross_node = flag("tp_cross_node", tp_cross_node)
        self.devices_per_node = devices_per_node
        self.tp_cross_node = tp_cross_node
        self.any_interleaving = flag("any_interleaving", any_interleaving)
        self.settings = tuple(Setting(r, z, a) for r in recompute for z in levels for a in algos)
        self._rules = self._key_rules()
        self._build_candidates()

    # ------------------------------------------------------------------ the grid
    def _allowed_mask(self, key: str, values: np.ndarray) -> np.ndarray:
        """Which of *values* of *key* the options allow."""
        mask = np.ones(values.shape, dtype=bool)
        if key in self.fix:
            mask &= values == self.fix[key]
        if key in self.maximum:
            mask &= values <= self.maximum[key]
        return mask

    def _key_rules(self) -> dict[str, tuple[tuple[Callable[[np.ndarray], np.ndarray], str], ...]]:
        """Per key, the rules a value keeps on its own, as vectorised tests with the words of an error: the grid
        takes the candidates that pass them all (:meth:`_build_candidates`), an empty one names the ``--fix`` value
        that fails one (:meth:`why_empty`)."""
        model, n, batch = self.model, self.devices, self.global_batch
        seq = model.layout.s or model.s
        layers = model.n_lay + model.n_mtp
        node = self.devices_per_node if self.devices_per_node and not self.tp_cross_node else None
        moe = model.n_exp > 1
        devices = (lambda v: n % v == 0, f"divide the {n:,} devices")
        whole_batch = (lambda v: batch % v == 0, f"divide the global batch, {batch:,}")
        within_layers = (lambda v: v <= layers, f"be at most the layers, {layers}")
        rules = {
            "d": (devices, whole_batch),  # m = global / (d·b) whole
            "t": (devices, (lambda v: model.a % v == 0, f"divide the attention heads a = {model.a}"),
                  (lambda v: v <= (node or n), f"fit a node of {node} devices (--tp-cross-node lifts this)")),
            "cp": (devices, (lambda v: seq % v == 0, f"divide the sequence length s = {seq:,}")),
            "p": (devices, within_layers),
            "vp": (within_layers,),
            "ep": ((lambda v: v <= n, f"be at most the {n:,} devices"),
                   (lambda v: model.n_exp % v == 0, f"divide the routed experts n_exp = {model.n_exp}") if moe
                   else (lambda v: v == 1, "be 1: the model has no routed experts")),
            "etp": (devices, (lambda v: v <= (self.devices_per_node or n),
                              f"be at most the devices of a node, {self.devices_per_node or n}")) if moe
                   else ((lambda v: v == 1, "be 1: the model has no routed experts"),),
            "b": (whole_batch,),
            "m": (whole_batch,),
        }
        # The bound of every layout key (symbolic.vocabulary.LAYOUT_KEYS; the layouts' own check): a degree at most
        # 2**20, b and m at most 2**32. A device count past 2**20 keeps its layouts whose degrees are within it.
        return {key: (*held, _within(key)) for key, held in rules.items()}

    def _candidate_mask(self, key: str, values: np.ndarray) -> np.ndarray:
        """Which *values* of *key* keep its rules and the options (``--fix``, ``--max``)."""
        keep = self._allowed_mask(key, values)
        for holds, _ in self._rules[key]:
            keep &= holds(values)
        return keep

    def _candidates(self, key: str, values: np.ndarray) -> np.ndarray:
        """The *values* of *key* that keep its rules and the options."""
        return values[self._candidate_mask(key, values)]

    def _build_candidates(self) -> None:
        model, n = self.model, self.devices
        divisors = _divisors(n)
        total_layers = model.n_lay + model.n_mtp
        t, cp, p = (self._candidates(key, divisors) for key in ("t", "cp", "p"))
        tt, cc, pp = (a.ravel() for a in np.meshgrid(t, cp, p, indexing="ij"))
        keep = n % (tt * cc * pp) == 0
        tt, cc, pp = tt[keep], cc[keep], pp[keep]
        dd = n // (tt * cc * pp)
        keep = self._candidate_mask("d", dd)
        tt, cc, pp, dd = tt[keep], cc[keep], pp[keep], dd[keep]
        # Pipeline chunks: p·vp within the layers, vp > 1 only with a pipeline (the layouts' own rules,
        # applied here so that the grid holds no (p, vp) pair they reject).
        vp = self._candidates("vp", np.arange(1, total_layers + 1, dtype=np.int64))
        # (the chunks of Megatron-Core's accounted split are the layers plus the embedding and the loss it counts)
        chunks = split_layers(model)
        pair = (pp[:, None] * vp[None, :] <= chunks) & ((vp[None, :] == 1) | (pp[:, None] > 1))
        #: Whether the search keeps to the interleaving Megatron-Core runs from the degrees alone (a policy of the
        #: search, not a layout rule: ``symcost eval`` prices the rest).
        self.plain_interleaving = not self.any_interleaving and "vp" not in self.fix
        if self.plain_interleaving:
            # Interleaving only where every model chunk holds as many layers (configs.uneven_chunks: as Megatron-Core
            # builds them without a stated pipeline layout), the chunks the bubble (p − 1)/(vp·m) is that of.
            pair &= ~uneven_chunks(self.model, pp[:, None], vp[None, :])
        rows, cols = np.nonzero(pair)
        self.base = {"t": tt[rows], "cp": cc[rows], "p": pp[rows], "d": dd[rows], "vp": vp[cols]}
        self.ep = self._candidates("ep", _divisors(model.n_exp) if model.n_exp > 1 else np.ones(1, np.int64))
        self.etp = self._candidates("etp", divisors if model.n_exp > 1 else np.ones(1, np.int64))
        self.b = self._candidates("b", _divisors(self.global_batch))
        # Which (base row, ep, etp) combinations the layout constraints accept, once per CP algorithm (the
        # only shared setting a rule reads besides offsets and per-stage lists, which a uniform plan has
        # not): the rules are elementwise and read none of b, m (codegen.configs._validation._constraint_rules),
        # so a grid point is valid exactly when its structure is.
        rows = len(self.base["t"])
        combo = np.arange(rows * len(self.ep) * len(self.etp), dtype=np.int64)
        r, e, x = np.unravel_index(combo, (rows, len(self.ep), len(self.etp)))
        structure = {key: column[r] for key, column in self.base.items()}
        structure["ep"], structure["etp"] = self.ep[e], self.etp[x]
        self.structures = {}
        #: Per CP algorithm, each structure row's base row (its ``(t, cp, p, vp)``, ``d``: a row of :attr:`base`).
        self.structure_base: dict[str, np.ndarray] = {}
        #: Per CP algorithm, each structure row's number among every (base row, ep, etp) combination: the same
        #: structure has the same number under every algorithm (``structure_count`` numbers in all).
        self.structure_id: dict[str, np.ndarray] = {}
        self.structure_count = len(combo)
        for algo in dict.fromkeys(s.cp_algo for s in self.settings):
            if not rows:
                self.structures[algo] = {key: column[:0] for key, column in structure.items()}
                self.structure_base[algo] = r[:0]
                self.structure_id[algo] = combo[:0]
                continue
            batch = LayoutBatch.from_arrays(self.model.layout, **structure, m=np.ones_like(r), cp_algo=algo,
                                            recompute="none")
            ok = layout_violations(self.model, batch, self.devices) < 0
            self.structures[algo] = {key: np.ascontiguousarray(column[ok]) for key, column in structure.items()}
            self.structure_base[algo] = np.ascontiguousarray(r[ok])
            self.structure_id[algo] = np.ascontiguousarray(combo[ok])
        # Micro-batch sizes per row: the b that make m = global / (d·b) whole (and meet --fix/--max m), as
        # offsets, so that every grid point is a valid layout: row r owns grid points [start[r], start[r+1]).
        # An interleaved row keeps to m a multiple of p (plain_interleaving): Megatron-Core runs its micro-batches
        # in groups of microbatch_group_size_per_vp_stage, p by default, and refuses a last group of fewer than p
        # (configs.ungrouped_microbatches), so the rows are keyed by (d, p, interleaved or not).
        self._b_tables = {}
        for algo, table in self.structures.items():
            # (the rule reads p only where vp > 1, and vp only as more than 1 or not: min(vp, 2) says which)
            interleaved = np.minimum(table["vp"], 2) if self.plain_interleaving else np.ones_like(table["d"])
            group = np.where(interleaved > 1, table["p"], 1)
            keys, where = np.unique(np.stack([table["d"], group, interleaved], axis=1), axis=0, return_inverse=True)
            where = where.reshape(-1)
            distinct = keys[:, 0]
            allowed = (self.global_batch % (distinct[:, None] * self.b[None, :]) == 0)
            m = self.global_batch // (distinct[:, None] * self.b[None, :])
            allowed &= ~ungrouped_microbatches(keys[:, 1, None], keys[:, 2, None], m)
            if "m" in self.fix:
                allowed &= m == self.fix["m"]
            if "m" in self.maximum:
                allowed &= m <= self.maximum["m"]
            allowed &= m <= layout_key("m").maximum  # m's bound, as the rules bound b
            width = int(allowed.sum(axis=1).max()) if len(distinct) else 0
            b_table = np.zeros((len(distinct), max(width, 1)), np.int64)
            bpos_table = np.zeros((len(distinct), max(width, 1)), np.int64)
            m_table = np.ones((len(distinct), max(width, 1)), np.int64)
            for i, row in enumerate(allowed):
                b_table[i, :row.sum()] = self.b[row]
                bpos_table[i, :row.sum()] = np.flatnonzero(row)
                m_table[i, :row.sum()] = m[i, row]
            per_row = allowed.sum(axis=1)[where]
            start = np.zeros(len(table["d"]) + 1, np.int64)
            np.cumsum(per_row, out=start[1:])
            self._b_tables[algo] = (b_table, where.astype(np.int64), start, bpos_table, m_table)
        self.setting_sizes = np.array([int(self._b_tables[s.cp_algo][2][-1]) for s in self.settings], np.int64)
        self.setting_start = np.zeros(len(self.settings) + 1, np.int64)
        np.cumsum(self.setting_sizes, out=self.setting_start[1:])
        self.size = int(self.setting_start[-1])

    def why_empty(self) -> str | None:
        """Why the grid is empty, when a ``--fix`` value can never hold on its own or the pinned degrees
        cannot multiply to the device count; ``None`` when the reason lies in how the constraints combine.

        The sentence names the option, the value and the rule it breaks (:meth:`_key_rules`, the grid's own).
        """
        if self.size:
            return None
        for key, value in self.fix.items():
            for holds, rule in self._rules.get(key, ()):
                if not holds(np.int64(value)):
                    return f"--fix {key}={value}: {key} must {rule}."
        pinned = [(key, self.fix[key]) for key in ("d", "t", "cp", "p") if key in self.fix]
        product = math.prod(value for _, value in pinned)  # Python integers: four degrees of 2**20 pass int64
        if len(pinned) > 1 and self.devices % product:
            names = "·".join(key for key, _ in pinned)
            return (f"--fix: {names} = {product:,} does not divide the {self.devices:,} devices "
                    f"(d·t·cp·p = {self.devices:,}).")
        return None

    # ------------------------------------------------------------------ chunks
    def decode(self, index: np.ndarray, setting: int, keys: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """``{key: values}`` of grid indices *index*, all of setting number *setting*; ``"row"``: their structure rows,
        ``"bpos"``: their ``b`` as a position in :attr:`b`. *keys*: only these of :data:`SEARCH_KEYS` (default all).

        Raises:
            InputError: a setting number outside ``[0, len(settings))``, or an index that is not a whole number of
                that setting's range ``[setting_start[setting], setting_start[setting + 1])`` (past the end of the
                space included), naming the first such value.
        """
        setting = whole("setting", setting, minimum=0, maximum=len(self.settings) - 1)
        lo, hi = int(self.setting_start[setting]), int(self.setting_start[setting + 1])
        if np.ndim(index) != 1:
            raise InputError(f"index: expected a one-dimensional array of grid indices, got {np.ndim(index)} "
                             f"dimensions")
        if hi <= lo and np.size(index):
            raise InputError(f"index: setting {setting} has no layouts, got {np.size(index)} indices")
        index = int_array("index", index, minimum=lo, maximum=hi - 1)  # of the setting, so within the space
        contiguous = (len(index) > 1 and int(index[-1] - index[0]) == len(index) - 1
                      and bool(np.all(np.diff(index) == 1)))
        return self._decode(index, setting, keys, contiguous)

    def _decode(self, index: np.ndarray, setting: int, keys: Sequence[str] | None, contiguous: bool
                ) -> dict[str, np.ndarray]:
        """:meth:`decode` of checked indices; *contiguous*: they are one ascending range."""
        algo = self.settings[setting].cp_algo
        b_table, where, start, bpos_table, m_table = self._b_tables[algo]
        local = index - self.setting_start[setting]
        # A grid point's entry of the b tables, as a flat position: its row's table row (where) times the width,
        # plus its place among the row's grid points (local - start).
        width = b_table.shape[1]
        if contiguous:  # a range: rows by repeat
            lo, hi = int(local[0]), int(local[-1]) + 1
            r0, r1 = (int(np.searchsorted(start, x, side="right")) - 1 for x in (lo, hi - 1))
            counts = np.minimum(start[r0 + 1:r1 + 2], hi) - np.maximum(start[r0:r1 + 1], lo)
            row = np.repeat(np.arange(r0, r1 + 1, dtype=np.int64), counts)
            at = np.repeat(where[r0:r1 + 1] * width - start[r0:r1 + 1], counts)
        else:
            row = np.searchsorted(start, local, side="right") - 1
            at = where[row] * width - start[row]
        at += local
        table = self.structures[algo]
        values = {key: column[row] for key, column in table.items() if keys is None or key in keys}
        if keys is None or "b" in keys:
            values["b"] = np.take(b_table.ravel(), at)
        if keys is None or "m" in keys:
            values["m"] = np.take(m_table.ravel(), at)
        values["row"] = row
        values["bpos"] = np.take(bpos_table.ravel(), at)
        return values

    def block(self, start: int, stop: int, keys: Sequence[str] | None = None) -> list[Chunk]:
        """The layouts of grid indices ``[start, stop)`` (every one valid), one :class:`Chunk` per setting they span;
        *keys*: only these of :data:`SEARCH_KEYS` in the chunks' values (default all; :meth:`decode` the rest)."""
        start = max(0, whole("start", start, minimum=-(1 << 62)))
        stop = min(whole("stop", stop, minimum=-(1 << 62)), self.size)
        out = []
        if stop <= start:
            return out
        first = int(np.searchsorted(self.setting_start, start, side="right")) - 1
        for k in range(first, len(self.settings)):
            lo, hi = max(start, int(self.setting_start[k])), min(stop, int(self.setting_start[k + 1]))
            if lo >= stop:
                break
            if hi <= lo:
                continue
            index = np.arange(lo, hi, dtype=np.int64)
            values = self._decode(index, k, keys, len(index) > 1)
            row, bpos = values.pop("row"), values.pop("bpos")
            out.append(Chunk(self.settings[k], values, index, self.model, row, bpos))
        return out

    def chunks(self, chunk: int = 1 << 18, start: int = 0, stop: int | None = None) -> Iterator[Chunk]:
        """Every valid layout of grid indices ``[start, stop)``, *chunk* grid points at a time."""
        chunk = whole("chunk", chunk, minimum=1)
        start = whole("start", start, minimum=0)
        stop = self.size if stop is None else min(whole("stop", stop, minimum=0), self.size)
        for lo in range(start, stop, chunk):
            yield from self.block(lo, min(lo + chunk, stop))
