"""The pricing engine: what every cost family's pricer does alike, written once.

Each family (the original's volumes, collective time, memory, compute, step time) prices arrays of layouts
the same way::

    blocks of layouts ─► group rows by the keys a term reads ─► call generated terms ─► pipeline-shape tables
    (blocks)             (group_rows, KeyColumns)                (term_function)         (PipelineShapes, StageTables)
                                                                                     ─► stages ─► step (combine)

* **Sizes** — the block and table sizes below, each declared once with the reason for its value.
* **Block loop** — :func:`blocks` (slices) and :func:`batch_blocks` (sub-batches): a pass over N layouts runs
  block by block, so that its temporaries stay in the processor's cache.
* **Grouping** — :func:`group_rows` numbers the rows of key columns (:class:`Digit`) as one mixed-radix number
  per row, renumbered by the numbers present whenever the next digit would outgrow a table; layouts with equal
  keys then share a group and a term is evaluated once per group (element-wise forms on equal inputs give
  equal numbers, to the bit). :class:`KeyColumns` keeps a block's digits for every grouping of it;
  :func:`distinct_rows` is the grouping that never gives up.
* **Calling generated code** — :func:`term_function` (NumPy or the fused target), :func:`term_arguments`,
  :func:`call_term`; a term with its shared arguments bound once is :func:`bound_term` (a :class:`BoundKernel`,
  run on a caller's buffers from :func:`bound_scratch`, on no more than :data:`BOUND_BLOCK` elements).
* **Pipeline shapes** — :class:`PipelineShapes` (each layout's index into tables over its ``(p, vp)``: ``of``
  every shape the model runs up to the batch's largest, ``used`` exactly the shapes the layouts have, ``index_of``
  a part's index), :func:`group_terms` and :func:`stage_tables` (each term group's weight in each kind of stage
  and over the stages), :func:`combine` (bottleneck and sum over the stages).
* **Families** — :class:`FamilySpec` (``codegen.pricing.families``): which generated terms a family reads, how
  its parts combine into stages and a step, its slopes; :func:`price_family` prices a batch from a spec alone.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence

import numpy as np

from generated import BLOCK as BOUND_BLOCK  # (the package's metadata only: no generated module is imported)
from symbolic.vocabulary import RECOMPUTE_COUNT_NAMES, STAGE_COUNT_NAMES

from ..configs import LayoutBatch
from .folding import constant_output

# ----------------------------------------------------------------- sizes

#: Layouts per block of the stage pricer's NumPy passes: a few float64 temporaries per term group of a block stay
#: in the processor's cache, and the Python cost per block (some 50 calls) is spread over enough layouts.
STAGE_BLOCK = 1 << 14
#: Layouts per block of the time pricer. Its generated forms block their own temporaries (``generated._runtime``);
#: a block this large repeats each item's inputs more (fewer groups, fewer calls of NCCL's pick per layout: the
#: search's pricing 1.1x faster than at 8,192), at about 10 % more per layout with grouping off (deepseek-v3,
#: 200,000 layouts: 0.47-0.51 s at 8,192, 0.54 s at 32,768).
TIME_BLOCK = 1 << 15
#: Layouts per call of a compiled kernel (the fused stage pricer) and per call of the memory family's generated
#: stage total: one call's derived-field arrays stay in cache, and the per-call cost (a kernel's dispatch, a
#: generated function's checks) is spread over many layouts. Also the block of :func:`group_rows`' passes.
KERNEL_BLOCK = 1 << 16
#: Largest table of group numbers :func:`group_rows` builds for the time pricer's blocks (at most
#: ``TIME_BLOCK`` rows, so the table is what bounds the renumberings) before it renumbers the groups so far.
GROUP_TABLE = 1 << 20
#: Largest table of group numbers for a whole batch (the memory pricer): its lookups stay in the processor's
#: cache over millions of layouts; past it a table may grow to four entries per layout before grouping gives up.
GROUP_TABLE_CACHED = 1 << 18
#: Fewest layouts of a time block grouped: below, finding the repeats costs more than it saves (measured on
#: distinct layouts of qwen3-72b and deepseek-v3: grouping is 1.1-1.4x slower at 300-1,000 layouts, about even at
#: 2,000, 1.2-1.6x faster at 4,000).
TIME_GROUP_FROM = 1 << 11
#: Fewest layouts of a batch the memory pricer groups: below, finding the groups costs more than it saves.
MEMORY_GROUP_FROM = 1 << 12
#: Widest range of a key column read as its offset from the lowest value in a time block (a few unused numbers
#: cost less than a table); wider ones are numbered by the values present.
NARROW = 64

_FLOAT64 = np.dtype(np.float64)


# ----------------------------------------------------------------- the block loop


def blocks(n: int, size: int) -> Iterator[slice]:
    """Slices ``[start, start + size)`` covering ``0 … n − 1`` in order (the last one shorter)."""
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


def batch_blocks(batch: LayoutBatch, size: int) -> Iterator[tuple[slice, LayoutBatch]]:
    """``(rows, sub-batch)`` per block of *size* layouts of *batch*; one block is the batch itself (no copy)."""
    n = len(batch)
    if n <= size:
        yield slice(0, n), batch
        return
    for rows in blocks(n, size):
        yield rows, batch.subset(rows)


# ----------------------------------------------------------------- calling generated code

#: The backends of :func:`term_function`: ``"numpy"`` (the generated NumPy functions), ``"numba"`` (the fused
#: target, ``generated.fused``, NumPy where a function has none) and ``"auto"`` (fused where numba is installed).
BACKENDS = ("auto", "numpy", "numba")


@functools.cache
def term_arguments(name: str) -> tuple[str, ...]:
    """The arguments of the generated function *name*, in its order (``generated.FORMULAS``)."""
    import generated  # (on first use: importing the pricing room stays cheap)

    return generated.FORMULAS[name]["arguments"]


def term_function(name: str, backend: str = "numpy") -> Callable[..., Any]:
    """The generated function *name* of *backend* (:data:`BACKENDS`). Both targets round every operation alike
    (no fastmath), so the numbers are the same.

    Raises:
        ValueError: naming an unknown backend.
    """
    import generated

    if backend == "numpy":
        return getattr(generated, name)
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected 'auto', 'numpy' or 'numba', got {backend!r}")
    from ..runtime.kernels import fused_available, fused_function

    if backend == "numba" or fused_available():
        return fused_function(name) or getattr(generated, name)
    return getattr(generated, name)


def call_term(name: str, values: Mapping[str, Any]) -> Any:
    """The generated function *name* (NumPy) on the values it reads (extra values ignored).

    Raises:
        KeyError: naming the first argument *values* does not hold.
    """
    arguments = term_arguments(name)
    missing = [a for a in arguments if a not in values]
    if missing:
        raise KeyError(f"{name}: no value for {', '.join(missing)}")
    return term_function(name)(**{a: values[a] for a in arguments})


# ----------------------------------------------------------------- bound terms: the kernels on a caller's buffers
#
# A call of a generated function converts its keyword arguments, finds the output's shape, allocates the output
# and its scratch buffers and enters ``numpy.errstate`` (``generated._runtime.Call``): 10-25 µs a call, more than
# the arithmetic itself on the small arrays the time pricer and NCCL's pick evaluate (tens to a few thousand
# elements, thousands of calls in a search). The kernel of the function (``function.kernel``: ``invariants``
# once, then ``block`` on views) lets a caller do that part once: a :class:`BoundKernel` computes the invariants
# from the *shared* arguments (those that stay while the caller lives: the hardware's constants, the model's
# fields) and keeps them, and the shared arguments, as float64 0-d arrays (a ufunc takes those without converting
# a Python float on every call); a call then passes the arguments that vary and a caller's output and buffers.
#
# The numbers are the function's, to the bit: the block runs the same statements on the same float64 values (a
# Python float and a 0-d float64 array of it are the same number to a ufunc), and the invariants come from the
# same values the function would pass them. Arguments of different shapes that broadcast to the output's are
# passed as they are, as ``Call.blocks`` itself does for an output of no more than ``BLOCK`` elements: the
# statements are ufuncs with ``out=``, ``numpy.copyto`` and ``numpy.where``, which broadcast.


class BoundKernel:
    """A generated function's kernel with its shared arguments and its invariants bound (:func:`bound_term`).

    Attributes:
        reals, masks: how many float64 and boolean scratch buffers :meth:`into` takes (at least).
        quiet: the statements must run under ``numpy.errstate(divide="ignore", invalid="ignore")`` (a
            ``Piecewise`` computes its dead branches too); :meth:`into` does not enter it.
        varying: the arguments :meth:`into` reads from its *values*, in the function's order.
    """

    __slots__ = ("block", "reals", "masks", "quiet", "template", "slots", "varying")

    def __init__(self, block: Callable[..., None], reals: int, masks: int, quiet: bool, template: list[Any],
                 slots: tuple[tuple[int, str], ...]) -> None:
        self.block, self.reals, self.masks, self.quiet = block, reals, masks, quiet
        self.template, self.slots = template, slots
        self.varying = tuple(name for _, name in slots)

    @classmethod
    def bind(cls, function: Callable[..., Any], shared: Mapping[str, Any]) -> BoundKernel | None:
        """*function*'s kernel with the arguments of *shared* bound, or ``None`` when the function has no
        kernel or its invariants read an argument that is not shared (then call the function itself)."""
        kernel = getattr(function, "kernel", None)
        if kernel is None or any(a not in shared for a in kernel.widened):
            return None
        passed: tuple[Any, ...] = ()
        if kernel.invariants is not None:  # from the very values the function would pass them
            with np.errstate(divide="ignore", invalid="ignore") if kernel.quiet else contextlib.nullcontext():
                passed = kernel.invariants(*(shared[a] for a in kernel.widened))
        template = [np.asarray(shared[a], dtype=np.float64) if a in shared else None for a in kernel.arguments]
        template += [np.asarray(value, dtype=np.float64) for value in passed]
        slots = tuple((i, a) for i, a in enumerate(kernel.arguments) if a not in shared)
        return cls(kernel.block, kernel.reals, kernel.masks, kernel.quiet, template, slots)

    def constant(self) -> float | None:
        """The number the function is for every value of :attr:`varying`, where the bound arguments decide it
        alone (``codegen.pricing.folding.constant_output``), else ``None``."""
        return constant_output(self.block, self.reals, self.masks, self.template, [i for i, _ in self.slots],
                               self.quiet)

    def into(self, out: np.ndarray, values: Mapping[str, np.ndarray], reals: Sequence[np.ndarray],
             masks: Sequence[np.ndarray]) -> np.ndarray:
        """Fill *out* (a float64 array of no more than :data:`BOUND_BLOCK` elements) with the function of *values*.

        *values* binds :attr:`varying` to float64 arrays (0-d or of shapes that broadcast to *out*'s);
        *reals* and *masks* are float64 and boolean arrays of *out*'s shape, at least :attr:`reals` and
        :attr:`masks` of them (their contents are overwritten). Returns *out*.
        """
        arguments = self.template.copy()
        for i, name in self.slots:
            arguments[i] = values[name]
        self.block(out, *reals[:self.reals], *masks[:self.masks], *arguments)
        return out


def bound_term(name: str, shared: Mapping[str, Any]) -> BoundKernel | None:
    """The generated NumPy function *name*'s kernel with the arguments of *shared* and its invariants bound, or
    ``None`` where the function has no kernel or its invariants read an argument *shared* does not hold (then
    call :func:`term_function`'s function itself)."""
    return BoundKernel.bind(term_function(name), shared)


def bound_scratch(shape: tuple[int, ...], reals: int, masks: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """*reals* float64 and *masks* boolean buffers of *shape* for :meth:`BoundKernel.into`."""
    return [np.empty(shape) for _ in range(reals)], [np.empty(shape, dtype=bool) for _ in range(masks)]


# ----------------------------------------------------------------- grouping rows by their keys


def by_table(number: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray]:
    """*number* (whole numbers below *total*) renumbered ``0 … k − 1`` by the numbers present, and those numbers,
    ascending (a table over ``0 … total − 1``, no sort)."""
    seen = np.zeros(total, dtype=bool)
    seen[number] = True
    present = np.flatnonzero(seen)
    table = np.empty(total, dtype=np.int64)
    table[present] = np.arange(len(present))
    return np.take(table, number), present


class Digit:
    """One key column (whole numbers) as a digit of a group number, below :attr:`width`.

    A row's digit is ``column − low`` (its offset from the lowest value), or, once :meth:`compact`, its rank
    among the values present (read through a table, ``codes[column − low]``; a column of one block, or too wide
    a range for a table, is replaced by its ranks outright).
    """

    __slots__ = ("column", "low", "width", "codes", "distinct")

    def __init__(self, column: np.ndarray, low: int, width: int, codes: np.ndarray | None = None,
                 distinct: np.ndarray | None = None) -> None:
        self.column, self.low, self.width, self.codes, self.distinct = column, low, width, codes, distinct

    @classmethod
    def of(cls, column: np.ndarray, *, compact_above: int) -> Digit:
        """The digit of a whole-number column (any integer dtype), numbered by the values present where its
        range is wider than *compact_above*."""
        low = int(column.min()) if len(column) else 0
        digit = cls(column, low, (int(column.max()) - low + 1) if len(column) else 1)
        if digit.width > compact_above:
            digit.compact()
        return digit

    @classmethod
    def ranks(cls, column: np.ndarray) -> Digit:
        """The digit of any column (fractions too): each row's rank among the distinct values (a sort)."""
        distinct, code = np.unique(column, return_inverse=True)
        return cls(np.asarray(code, dtype=np.int64).reshape(-1), 0, len(distinct), distinct=distinct)

    def compact(self) -> None:
        """Number the values the column holds ``0 … k − 1`` instead of their range: a table over the range where
        it is no wider than four entries per row (or 4,096), else a sort. A column of one block
        (``KERNEL_BLOCK`` rows or fewer) is replaced by its numbers (read again by every grouping of the block);
        a longer one keeps the table (no column of its length is written)."""
        if self.distinct is not None:
            return
        n = len(self.column)
        if self.width <= max(4 * n, 1 << 12):
            shifted = self.column - self.low if self.low else self.column
            if n <= KERNEL_BLOCK:
                self.column, present = by_table(shifted, self.width)
                self.distinct, self.low = present + self.low, 0
            else:
                seen = np.zeros(self.width, dtype=bool)
                seen[shifted] = True
                present = np.flatnonzero(seen)
                self.codes = np.empty(self.width, dtype=np.int64)
                self.codes[present] = np.arange(len(present))
                self.distinct = present + self.low
        else:
            self.distinct, code = np.unique(self.column, return_inverse=True)
            self.column, self.low = np.asarray(code, dtype=np.int64).reshape(-1), 0
        self.width = len(self.distinct)

    def digits(self, rows: slice, spare: np.ndarray) -> np.ndarray:
        """The digits of *rows*, less :attr:`low` where no table reads them (the caller subtracts the lows once);
        *spare*: an int64 buffer of the rows' length the table's lookup may write."""
        value = self.column[rows]
        if self.codes is None:
            return value
        np.subtract(value, self.low, out=spare)
        return np.take(self.codes, spare, out=spare, mode="clip")

    @property
    def offset(self) -> int:
        """What :meth:`digits` leaves in each digit: ``low`` for a plain digit, else 0."""
        return self.low if self.codes is None else 0

    def value(self, digit: np.ndarray) -> np.ndarray:
        """The key of each *digit*."""
        return digit + self.low if self.distinct is None else self.distinct[digit]


@dataclass(frozen=True, eq=False)
class RowGroups:
    """Rows with equal keys, numbered (:func:`group_rows`).

    Attributes:
        number: per row, its group's number, below ``size`` (int64; the numbers present need not be consecutive).
        size: the range of the numbers: a table over it gives each row its group's value.
        present: the numbers of the groups present, ascending.
    """

    number: np.ndarray
    size: int
    present: np.ndarray
    _decode: tuple[Any, ...] = ()  # per pass its digits (name, Digit), and between passes the numbers present

    def __len__(self) -> int:
        return len(self.present)

    def table(self, values: np.ndarray) -> np.ndarray:
        """A table over the group numbers holding *values* (one per group present) at the numbers present."""
        table = np.empty(self.size, dtype=values.dtype)
        table[self.present] = values
        return table

    def gather(self, values: np.ndarray) -> np.ndarray:
        """Each row's entry of *values* (one per group present)."""
        return np.take(self.table(values), self.number, mode="clip")  # every number is within the table

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """``(reps, inverse)``: one row of each group (in the order of ``present``) and each row's group
        ``0 … len − 1``, so that ``x[reps][inverse]`` is ``x`` for every key column (and every function of them)."""
        at = np.empty(self.size, dtype=np.int64)
        at[self.number] = np.arange(len(self.number))
        reps = at[self.present]
        at[self.present] = np.arange(len(self.present))
        return reps, np.take(at, self.number)

    @functools.cached_property
    def keys(self) -> dict[str, np.ndarray]:
        """Per key column, its value in each group present (in the order of ``present``), read back from the
        group numbers (a key of one value: that value)."""
        keys: dict[str, np.ndarray] = {}
        code = self.present
        for step in reversed(self._decode):
            if isinstance(step, np.ndarray):  # a renumbering: the number before it
                code = step[code]
                continue
            for name, digit in reversed(step):
                if digit.width == 1:
                    keys[name] = np.full(len(self.present), digit.value(np.zeros(1, dtype=np.int64))[0])
                    continue
                keys[name] = digit.value(code % digit.width)
                code = code // digit.width
        return keys


def group_rows(digits: Mapping[str, Digit], n: int, *, table: int, limit: int | None = None,
               most: int | None = None, exact: bool = False) -> RowGroups | None:
    """The groups of the *n* rows with equal values in every key column of *digits*.

    The digits are read as one mixed-radix number per row, each digit's width its radix; where the number would
    outgrow a table of *table* entries, the number so far is renumbered by the values present (a table lookup, no
    sort) and the digits go on from there; a digit whose range alone outgrows the table beside the groups so far
    is numbered by the values it holds (:meth:`Digit.compact`), and past that the table may grow to *limit*
    entries. Each pass runs block by block (``KERNEL_BLOCK`` rows, in cache).

    Args:
        table: the most entries of a table of group numbers, as a rule.
        limit: the most it may grow to when a digit does not fit beside the groups so far (default *table*).
        most: give up (``None``) when more groups than this are present: grouping would not pay.
        exact: never give up for want of a table: the numbers are then ranked by a sort instead.

    Returns:
        the :class:`RowGroups`, or ``None`` where a table of *limit* entries cannot number them (without *exact*)
        or more than *most* groups are present.
    """
    limit = table if limit is None else max(limit, table)
    bound, wide = table, False  # wide: numbers past any table, ranked by a sort (exact only)
    varying = [(name, digit) for name, digit in digits.items() if digit.width > 1]
    constant = tuple((name, digit) for name, digit in digits.items() if digit.width <= 1)
    if not varying:
        return RowGroups(np.zeros(n, dtype=np.int64), 1, np.zeros(1, dtype=np.int64), (constant,))
    number = np.empty(n, dtype=np.int64)
    scratch = np.empty(min(n, KERNEL_BLOCK), dtype=np.int64)
    codes: np.ndarray | None = None  # the renumbering of the number so far (None: none, or done already)
    carried = False  # the number holds groups of earlier passes
    size, i = 1, 0
    steps: list[Any] = [constant] if constant else []
    while True:
        segment, total = [], size
        cap = (1 << 62) if wide else bound
        while i < len(varying) and total * varying[i][1].width <= cap:
            total *= varying[i][1].width
            segment.append(varying[i])
            i += 1
        if not segment:  # the next key alone outgrows the table beside the groups so far
            digit = varying[i][1]
            if digit.distinct is None:  # number the values it holds instead of their range
                digit.compact()
            elif bound < limit:  # many groups: a table past the cache still beats a row at a time
                bound = limit
            elif exact and not wide:
                wide = True
            else:
                return None
            continue
        tabled = total <= limit
        seen = np.zeros(total, dtype=bool) if tabled else None
        offset = 0  # Σ low·radix of the plain digits, subtracted once per block
        for _name, digit in segment:
            offset = offset * digit.width + digit.offset
        for rows in blocks(n, KERNEL_BLOCK):
            x = number[rows]
            spare = scratch[:len(x)]
            for k, (_name, digit) in enumerate(segment):
                value = digit.digits(rows, spare)
                if k == 0 and not carried:
                    x[...] = value
                    continue
                if k == 0 and codes is not None:  # the groups so far, renumbered (each read before it is written)
                    np.take(codes, x, out=x, mode="clip")
                np.multiply(x, digit.width, out=x)
                np.add(x, value, out=x)
            if offset:
                np.subtract(x, offset, out=x)
            if seen is not None:
                seen[x] = True
        steps.append(tuple(segment))
        if seen is not None:
            present = np.flatnonzero(seen)
            codes = None
        else:  # too wide a range for a table: a sort ranks the numbers (the groups so far, done)
            present, ranked = np.unique(number, return_inverse=True)
            number[...] = np.asarray(ranked).reshape(-1)
        if most is not None and len(present) > most:
            return None
        if i == len(varying):
            if seen is None:
                steps.append(present)
                return RowGroups(number, len(present), np.arange(len(present)), tuple(steps))
            return RowGroups(number, total, present, tuple(steps))
        if seen is not None:
            codes = np.empty(total, dtype=np.int64)
            codes[present] = np.arange(len(present))
        carried = True
        size = len(present)
        steps.append(present)


def distinct_rows(columns: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The rows of equal-length 1-D *columns* grouped by their tuple of values: ``(reps, inverse)``, one row index
    per distinct tuple and each row's tuple number, so that ``x[reps][inverse]`` is ``x`` for every column ``x``
    (and for any array that is a function of the columns, row by row).

    Whole-number columns are digits by their offset (or their values present, where the range is wider than four
    per row); any other column by its rank among its distinct values; :func:`group_rows` never gives up here.
    """
    n = len(columns[0]) if columns else 0
    digits: dict[str, Digit] = {}
    for j, column in enumerate(columns):
        column = np.asarray(column)
        whole = whole_column(column) if column.dtype.kind == "f" else column.astype(np.int64, copy=False)
        digits[str(j)] = (Digit.ranks(column) if whole is None
                          else Digit.of(whole, compact_above=max(4 * n, NARROW)))
    groups = group_rows(digits, n, table=GROUP_TABLE, limit=max(GROUP_TABLE, 4 * n), exact=True)
    assert groups is not None
    return groups.rows()


def whole_column(value: np.ndarray) -> np.ndarray | None:
    """*value* (a 1-D column) as int64 when every entry is a whole number, else ``None`` (NaN and ±inf are not)."""
    with np.errstate(invalid="ignore"):
        whole = value.astype(np.int64)
    # np.array_equal's comparison, without its checks of shapes and types (the same by construction)
    return whole if bool((whole == value).all()) else None



class KeyColumns:
    """The varying values of a block of *m* rows by name (``columns``), each asked for as a whole int64 column
    (:meth:`whole`, ``None`` where not whole) and as a :class:`Digit` (:meth:`digit`), made once per block and
    shared by every grouping of it (:meth:`group`)."""

    def __init__(self, m: int = 0) -> None:
        self.m = m
        self.columns: dict[str, np.ndarray] = {}
        self._whole: dict[str, np.ndarray | None] = {}
        self._digits: dict[str, Digit | None] = {}
        self._by_column: dict[int, tuple[np.ndarray, Digit | None]] = {}  # id → (column, digit)

    def whole(self, name: str) -> np.ndarray | None:
        if name not in self._whole:
            column = self.columns.get(name)
            self._whole[name] = None if column is None else (
                column if column.dtype == np.int64 else whole_column(column))
        return self._whole[name]

    def digit(self, name: str) -> Digit | None:
        """The column's digit: its offset where its range is no wider than :data:`NARROW`, else numbered by the
        values present; ``None`` where the column is not whole."""
        if name not in self._digits:
            column = self.columns.get(name)
            known = self._by_column.get(id(column))
            if known is not None and known[0] is column:  # one array under two names (a group's size, a field)
                self._digits[name] = known[1]
                return known[1]
            whole = self.whole(name)
            self._digits[name] = None if whole is None else Digit.of(whole, compact_above=NARROW)
            if column is not None:
                self._by_column[id(column)] = (column, self._digits[name])
        return self._digits[name]

    def group(self, names: Sequence[str], *, table: int = GROUP_TABLE) -> tuple[np.ndarray, np.ndarray] | None:
        """``(reps, inverse)`` of the block's rows grouped by the columns *names* (:meth:`RowGroups.rows`);
        ``None`` when a column is not whole or grouping does not pay (more than half the rows distinct)."""
        digits = {}
        for name in names:
            digit = self.digit(name)
            if digit is None:
                return None
            digits[name] = digit
        found = group_rows(digits, self.m, table=table, most=self.m // 2)
        return None if found is None else found.rows()


# ----------------------------------------------------------------- pipeline shapes and stage tables


class TermsByOutput(Protocol):
    """What :func:`group_terms` reads of a variant's terms (``stages.Terms``): per output, count name → term."""

    by_output: Mapping[str, Mapping[str, str]]


@dataclass(frozen=True)
class TermGroups:
    """The variant's terms grouped by how the stages weigh them.

    Attributes:
        usage: per group, how many times it counts each layer of ``counts`` (its weight in a
            stage is ``usage · stage counts``).
        counts: the count names the usage vectors run over (those some stage holds).
        names: per group, the generated terms added into it.
    """

    usage: tuple[tuple[int, ...], ...]
    counts: tuple[str, ...]
    names: tuple[tuple[str, ...], ...]


def group_terms(terms: TermsByOutput, outputs: Sequence[str], counts: tuple[str, ...]) -> TermGroups:
    """Group the terms of *outputs* by their use of *counts* (a term used by two outputs counts twice)."""
    usage: dict[str, list[int]] = {}
    for output in outputs:
        base = output.removesuffix("_recomputed")
        for count, name in terms.by_output[base].items():
            if count in counts and (output.endswith("_recomputed") or count not in RECOMPUTE_COUNT_NAMES):
                usage.setdefault(name, [0] * len(counts))[counts.index(count)] += 1
    groups: dict[tuple[int, ...], list[str]] = {}
    for name, used in usage.items():
        groups.setdefault(tuple(used), []).append(name)
    return TermGroups(tuple(groups), counts, tuple(tuple(names) for names in groups.values()))


@dataclass(frozen=True)
class StageKinds:
    """Kinds of stages to take the largest of: per kind, per compiled sum, its weight (a number, the same
    for every pipeline, or a table over the pipeline index).

    Attributes:
        kinds: per kind of stage, per sum, its weight (``None`` for a common sum).
        common: per sum, its weight where it is the same in every kind (else ``None``): added once,
            outside the maximum.
    """

    kinds: tuple[tuple[Any, ...], ...]
    common: tuple[Any, ...]


@dataclass(frozen=True)
class StageTables:
    """Per compiled sum, its weights in a layout's stages.

    Attributes:
        total: per sum, its weight summed over a layout's stages.
        every: the distinct kinds of stages of each pipeline.
        front: of each pipeline, the kinds no other of its kinds outweighs in every sum (often one:
            the first stage). With sums that are not negative the bottleneck is one of them.
    """

    total: tuple[Any, ...]
    every: StageKinds
    front: StageKinds


def _stage_rows(weights: np.ndarray) -> list[int]:
    """The stages with distinct rows of *weights* (stages × sums): the first stage, the last, then
    the others in stage order, so that the kinds of stages line up across pipelines."""
    kept: list[int] = []
    for s in [0, len(weights) - 1, *range(1, len(weights) - 1)]:
        if not any(np.array_equal(weights[s], weights[k]) for k in kept):
            kept.append(s)
    return kept


StageCounts = Callable[[int, int], "Mapping[str, np.ndarray] | None"]


_PIPELINE_TOKENS = itertools.count()


@dataclass(frozen=True)
class PipelineShapes:
    """The pipeline shapes a batch can hold: each layout's index into tables over them, and the shapes.

    Attributes:
        key: what decides ``present`` (the ranges of ``p`` and ``vp``, the index's radix and the
            batch's stage lists): a key for the tables built over them. With *known*, a number that
            stands for that key (one per key, never reused: hashed once per call, not once per table).
        index: per layout, ``p`` (``p·(max vp + 1) + vp`` when vp varies); ``None`` when every
            layout has the same pipeline.
        present: index → ``(p, vp)`` for every pipeline up to the batch's largest ``p`` (and
            ``vp``) that the model can run: a superset of the layouts' pipelines, found from the
            maxima alone (no count of the layouts of each).
    """

    index: np.ndarray | None
    present: dict[int, tuple[int, int]]
    key: tuple[Any, ...] = ()
    #: How ``index`` reads a layout's ``(p, vp)`` (:meth:`index_of`): ``None`` when it is ``None`` (one pipeline),
    #: 0 for ``p``, else ``vp``'s radix in ``p·radix + vp``.
    radix: int | None = None

    @classmethod
    def of(cls, batch: LayoutBatch, stage_counts: StageCounts,
           known: dict[Any, tuple[dict[int, tuple[int, int]], int]] | None = None) -> PipelineShapes:
        """The pipelines of *batch*; *known* keeps the shapes found for each range of ``p`` and ``vp``."""
        p, vp = batch.p, batch.vp
        single_p = p.strides == (0,)
        p_range = (int(p[0]), int(p[0]) + 1) if single_p else (1, batch.top("p") + 1)
        if vp.strides == (0,):
            index, radix, vp_range = (None if single_p else p), 0, (int(vp[0]), int(vp[0]) + 1)
        else:
            radix = batch.top("vp") + 1
            index, vp_range = p * radix + vp, (1, radix)
        key = (p_range, vp_range, single_p, radix, batch.offset, batch.offset_pipeline, batch.recompute,
               batch.recompute_pipeline)
        entry = None if known is None else known.get(key)
        if entry is None:
            shapes = [(pv, v) for pv in range(*p_range) for v in range(*vp_range)]
            where = {shape: (0 if index is None else shape[0] * radix + shape[1] if radix else shape[0])
                     for shape in shapes}
            present = {where[shape]: shape for shape in shapes if stage_counts(*shape) is not None}
            if known is None:
                return cls(index, present, key)
            entry = known[key] = (present, next(_PIPELINE_TOKENS))
        return cls(index, *entry, radix=None if index is None else radix)

    @classmethod
    def used(cls, p: np.ndarray, vp: np.ndarray) -> PipelineShapes:
        """The pipelines the layouts with columns *p* and *vp* have, exactly: each layout's index as :meth:`of`
        numbers it (``None`` for one pipeline: both columns one broadcast value), and ``present`` holding the shapes
        some layout has and no other (a table over the index, no sort; no stage counts read). The columns may be
        one row per group of layouts, or a one-row column with the other (a key every group shares)."""
        single_vp = vp.strides == (0,) or len(vp) == 1
        if (p.strides == (0,) or len(p) == 1) and single_vp:
            return cls(None, {0: (int(p[0]), int(vp[0]))})
        if single_vp:
            radix, index, v = 0, p, int(vp[0])
        else:
            radix = int(vp.max()) + 1
            index = p * radix + vp
        seen = np.zeros(int(index.max()) + 1, dtype=bool)  # a table, no sort
        seen[index] = True
        present = {int(i): ((int(i), v) if radix == 0 else (int(i) // radix, int(i) % radix))
                   for i in np.flatnonzero(seen)}
        return cls(index, present, radix=radix)

    def index_of(self, p: np.ndarray, vp: np.ndarray) -> np.ndarray | None:
        """The pipeline index of layouts with columns *p* and *vp* (some of the layouts these shapes were found
        for), as ``index`` numbers them; ``None`` for one pipeline."""
        if self.radix is None:
            return None
        return p if self.radix == 0 else p * self.radix + vp

    def table(self, values: Mapping[int, float]) -> Any:
        """A weight per layout from its value per pipeline: one number when every pipeline has the same."""
        distinct = set(values.values())
        if len(distinct) == 1:
            return distinct.pop()
        table = np.zeros(max(values) + 1)
        for i, value in values.items():
            table[i] = value
        return table


def _kinds(pipelines: PipelineShapes, rows: Mapping[int, np.ndarray], sums: int) -> StageKinds:
    """Kinds of stages from each pipeline's rows of weights (kinds × sums), lined up by position."""
    depth = max(len(r) for r in rows.values())
    # Pad each pipeline's kinds with its first (a repeated stage does not change the maximum).
    padded = {i: np.concatenate([r, np.repeat(r[:1], depth - len(r), axis=0)]) for i, r in rows.items()}
    kinds: list[list[dict[int, float]]] = []
    for u in range(depth):
        kind = [{i: float(padded[i][u, j]) for i in padded} for j in range(sums)]
        if kind not in kinds:
            kinds.append(kind)
    common = [pipelines.table(kinds[0][j]) if len(kinds) > 1 and all(kind[j] == kinds[0][j] for kind in kinds)
              else None for j in range(sums)]
    return StageKinds(kinds=tuple(tuple(None if common[j] is not None else pipelines.table(kind[j]) for j in range(sums))
                              for kind in kinds),
                  common=tuple(common))


def stage_tables(stage_counts: StageCounts, pipelines: PipelineShapes, sums: TermGroups) -> StageTables:
    """The weight of each sum in each kind of stage and over all stages, per pipeline present."""
    usage = np.array(sums.usage, dtype=np.float64).T  # (counts, sums)
    every: dict[int, np.ndarray] = {}
    front: dict[int, np.ndarray] = {}
    totals: dict[int, np.ndarray] = {}
    for i, (p, vp) in pipelines.present.items():
        counts = stage_counts(p, vp)
        matrix = np.stack([counts[c] for c in sums.counts], axis=1) @ usage  # (stages, sums)
        kinds = matrix[_stage_rows(matrix)]
        every[i] = kinds
        outweighed = [any((other >= row).all() and (other > row).any() for other in kinds) for row in kinds]
        front[i] = kinds[[not o for o in outweighed]]
        totals[i] = matrix.sum(axis=0)
    n = len(sums.usage)
    return StageTables(total=tuple(pipelines.table({i: float(totals[i][j]) for i in totals}) for j in range(n)),
                        every=_kinds(pipelines, every, n), front=_kinds(pipelines, front, n))


@functools.lru_cache(maxsize=64)
def group_arguments(sums: TermGroups) -> frozenset[str]:
    """The arguments the term groups read."""
    return frozenset(a for group in sums.names for name in group for a in term_arguments(name))


@functools.lru_cache(maxsize=64)
def term_calls(sums: TermGroups) -> tuple[tuple[str, Callable[..., np.ndarray], tuple[str, ...]], ...]:
    """Each generated term the groups add, once: its name, its (NumPy) function and its arguments."""
    names = dict.fromkeys(name for group in sums.names for name in group)
    return tuple((name, term_function(name), term_arguments(name)) for name in names)


def accumulate(parts: Sequence[np.ndarray]) -> np.ndarray:
    """The sum of *parts*, added into the first where it has the sum's shape (the parts are the
    caller's own fresh float64 arrays); else as :func:`add_parts`."""
    out = parts[0]
    if type(out) is not np.ndarray or out.dtype is not _FLOAT64 or not out.ndim:
        return add_parts(parts)
    for part in parts[1:]:
        if part.shape != out.shape:
            return add_parts(parts)
    for part in parts[1:]:
        np.add(out, part, out=out)
    return out


def add_parts(parts: Sequence[np.ndarray]) -> np.ndarray:
    """The sum of *parts* (a new array; the first part is not written to)."""
    out = np.array(parts[0], dtype=np.float64)
    for part in parts[1:]:
        if part.shape == out.shape or out.shape == np.broadcast_shapes(out.shape, part.shape):
            np.add(out, part, out=out)
        else:
            out = out + part
    return out


def counts_used(stage_counts: StageCounts, pipelines: PipelineShapes) -> tuple[str, ...]:
    """The count names some stage of the pipelines present holds (the others weigh nothing)."""
    used: set[str] = set()
    for p, vp in pipelines.present.values():
        counts = stage_counts(p, vp)
        used |= {name for name in STAGE_COUNT_NAMES if counts[name].any()}
    return tuple(name for name in STAGE_COUNT_NAMES if name in used)


_minimum = np.minimum.reduce  # (the ufunc's own reduction: ndarray.min adds a Python wrapper per call)


def weighted_sum(parts: Sequence[np.ndarray], weights: Sequence[Any], out: np.ndarray, scratch: np.ndarray
                  ) -> np.ndarray | float:
    """``Σ weights[j] · parts[j]`` into *out* (weights None or 0 skipped); 0.0 when no term is left."""
    started = False
    for part, weight in zip(parts, weights):
        if weight is None or (not isinstance(weight, np.ndarray) and weight == 0):
            continue
        target = scratch if started else out
        if isinstance(weight, np.ndarray) or weight != 1:
            np.multiply(part, weight, out=target)
        elif not started:
            np.copyto(out, part)
        else:
            target = part
        if started:
            np.add(out, target, out=out)
        started = True
    return out if started else 0.0


def combine(parts: Sequence[np.ndarray], tables: StageTables, index: np.ndarray | None, bottleneck: np.ndarray,
             total: np.ndarray, scratch: np.ndarray, current: np.ndarray) -> None:
    """Fill *bottleneck* and *total* (the sum over stages) of M layouts from the evaluated sums.

    A table of weights becomes each layout's entry at its pipeline *index* (each table gathered
    once, and only when used). *scratch* and *current* are buffers of at least M values.
    """
    m = len(bottleneck)
    parts = [part if part.shape == (m,) else np.broadcast_to(part, (m,)) for part in parts]
    scratch, current = scratch[:m], current[:m]
    gathered: dict[int, np.ndarray] = {}

    def per_layout(weights: Sequence[Any]) -> list[Any]:
        out = []
        for w in weights:
            if isinstance(w, np.ndarray):
                if id(w) not in gathered:
                    # (every pipeline index is in the table; the method skips np.take's Python wrapper)
                    gathered[id(w)] = w.take(index, mode="clip")
                w = gathered[id(w)]
            out.append(w)
        return out

    value = weighted_sum(parts, per_layout(tables.total), total, scratch)
    if not isinstance(value, np.ndarray):
        total.fill(value)
    # With sums that are not negative, a stage another outweighs in every sum is never the bottleneck.
    kinds = tables.front if all(_minimum(part) >= 0 for part in parts) else tables.every
    started = False
    for kind in kinds.kinds:
        stage = weighted_sum(parts, per_layout(kind), current if started else bottleneck, scratch)
        if not started:
            if not isinstance(stage, np.ndarray):
                bottleneck.fill(stage)
            started = True
        else:
            np.maximum(bottleneck, stage, out=bottleneck)
    common = weighted_sum(parts, per_layout(kinds.common), current, scratch)
    if not started:
        bottleneck[...] = common
    elif isinstance(common, np.ndarray):
        np.add(bottleneck, common, out=bottleneck)
