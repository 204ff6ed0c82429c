"""Reading a measurement CSV for ``symcost validate``: every cell through the one input gate.

A file that cannot be read is one error line naming ``--data`` and the path; a cell that is not what
its column holds is one error line naming the file, the line, the column and the value (the gate's
words, ``codegen.runtime.inputs``): ``data.csv line 7, column m: expected a whole number, got '2.5'``.

Columns are read whole, each distinct text once (a file of a million rows repeats most cells), so a
table is read in time linear in its rows.
"""

from __future__ import annotations

import csv
import gc
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, NoReturn, Sequence

import numpy as np

from symbolic.vocabulary import RECOMPUTE_MODES

from ..runtime.inputs import COUNT_MAX, parse_real, parse_reals, parse_whole

__all__ = ["DATA_DIR", "Table", "first_error", "mode_cell", "no_cyclic_gc", "read_table",
           "recompute_mode", "rows_read", "whole_cells"]

#: The measurement tables shipped with the package (package data; provenance in ``data/README.md``),
#: found beside this module so that a wheel install reads them as a source checkout does.
DATA_DIR = Path(__file__).resolve().parent / "data"


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while a table's rows are built: a million rows of strings, numbers
    and dicts hold no reference cycles, yet every few hundred allocations would set off a scan of them all
    (reading and reporting grow from seconds to minutes)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Table:
    """The cells of a CSV file column by column; :meth:`where` gives the line a row starts on.

    The converters (:meth:`whole`, :meth:`real`, :meth:`choice`, :meth:`convert`) check a whole column
    and return its values; a bad cell raises ``ValueError`` naming the file, line, column and value.

    Attributes:
        path: the file as the user named it.
        names: the header's column names.
    """

    def __init__(self, path: Path, names: Sequence[str], rows: list[list[str]]):
        self.path = path
        self.names = list(names)
        self._rows = rows
        self._index = {name: j for j, name in enumerate(self.names)}
        self._columns: dict[str, Sequence[str]] | None = None
        self._lines: list[int] | None = None

    def __len__(self) -> int:
        return len(self._rows)

    def has(self, name: str) -> bool:
        """Whether the file has column *name*."""
        return name in self._index

    def cells(self, name: str) -> Sequence[str]:
        """The texts of column *name*, ``""`` for every row when the file has no such column."""
        if name not in self._index:
            return [""] * len(self)
        if self._columns is None:  # every column in one pass over the rows
            with no_cyclic_gc():
                self._columns = dict(zip(self.names, zip(*self._rows)))
        return self._columns[name]

    def line(self, row: int) -> int:
        """The line of the file row index *row* starts on (1 is the header), found by reading the file again."""
        if self._lines is None:
            lines: list[int] = []
            with self.path.open(newline="", encoding="utf-8") as handle:
                reader = csv.reader(handle)
                next(reader, None)
                end = reader.line_num
                for record in reader:
                    start, end = end + 1, reader.line_num
                    if record:
                        lines.append(start)
            self._lines = lines
        return self._lines[row]

    def where(self, row: int, name: str | None = None) -> str:
        """``PATH line N`` (and ``, column NAME``) of row index *row*, for an error message."""
        return f"{self.path} line {self.line(row)}" + (f", column {name}" if name else "")

    def convert(self, name: str, read: Callable[[str, str], Any]) -> list[Any]:
        """Column *name* read cell by cell with ``read(field, text)`` (each distinct text once).

        Raises:
            ValueError: for the first row whose cell *read* refuses, naming the file, line, column and value.
        """
        cells = self.cells(name)
        distinct = set(cells)
        seen: dict[str, Any] = {}
        for text in distinct:
            try:
                seen[text] = read(name, text)
            except ValueError:
                pass
        if len(seen) < len(distinct):
            self._refuse(next(i for i, text in enumerate(cells) if text not in seen), name, read)
        with no_cyclic_gc():
            return list(map(seen.__getitem__, cells))

    def cell(self, row: int, name: str, read: Callable[[str, str], Any]) -> Any:
        """The cell of row index *row*, column *name*, read with ``read(field, text)``.

        Raises:
            ValueError: as *read* does, naming the file, line, column and value.
        """
        try:
            return read(name, self.cells(name)[row])
        except ValueError:
            self._refuse(row, name, read)

    def refuse(self, row: int, message: str) -> ValueError:
        """The error for row index *row* that breaks a rule of its row as a whole: ``PATH line N: message``."""
        error = ValueError(f"{self.where(row)}: {message}")
        error.row = row  # type: ignore[attr-defined]  # for first_error: the earliest row is reported
        return error

    def _refuse(self, row: int, name: str, read: Callable[[str, str], Any]) -> NoReturn:
        try:
            read(self.where(row, name), self.cells(name)[row])  # raises again, now naming the file, line, column
        except ValueError as exc:
            exc.row = row  # type: ignore[attr-defined]
            raise
        raise AssertionError(f"{name}: a converter refused a cell once only")  # pragma: no cover

    def whole(self, name: str, *, minimum: int = 1, maximum: int | float = COUNT_MAX) -> np.ndarray:
        """Column *name* as whole numbers in ``[minimum, maximum]`` (ASCII digits only), an int64 array."""
        return np.array(self.convert(name, lambda field, text: parse_whole(field, text, minimum=minimum,
                                                                          maximum=maximum)), dtype=np.int64)

    def real(self, name: str, **bounds: Any) -> np.ndarray:
        """Column *name* as finite numbers > 0 (``parse_real``), a float array.

        Measured columns hold a distinct text in nearly every row: they are checked at once (``parse_reals``)
        and, only when that refuses one, cell by cell to name the first bad row.
        """
        cells = self.cells(name)
        distinct = list(set(cells))
        try:
            values = dict(zip(distinct, parse_reals(name, distinct, **bounds)))
        except ValueError:
            return np.array(self.convert(name, lambda field, text: parse_real(field, text, **bounds)), dtype=float)
        with no_cyclic_gc():
            return np.array(list(map(values.__getitem__, cells)), dtype=float)

    def choice(self, name: str, read: Callable[[str], Any]) -> list[Any]:
        """Column *name* through *read(text)*, whose ``ValueError`` message is prefixed with the file, line and column.

        For vocabularies (an op, a system, a recompute mode) whose reader names the value but not where it is.
        """
        def located(field: str, text: str) -> Any:
            try:
                return read(text)
            except ValueError as exc:
                if field == name:
                    raise
                message = str(exc).removeprefix(f"{name}: ")  # the reader's own naming of the column: once is enough
                raise ValueError(f"{field}: {message}") from None
        return self.convert(name, located)


def first_error(*steps: Callable[[], Any]) -> tuple[list[Any], ValueError | None]:
    """Each step's result (``None`` where it failed) and, of the steps that failed, the error of the earliest row.

    Each step reads a column or checks rows of one table, and stops at its own first bad row; running them
    all and keeping the earliest row's error reports the file's first bad line, whatever the column.
    """
    results: list[Any] = []
    errors: list[ValueError] = []
    for step in steps:
        try:
            results.append(step())
        except ValueError as exc:
            results.append(None)
            errors.append(exc)
    return results, min(errors, key=lambda exc: getattr(exc, "row", -1)) if errors else None


def recompute_mode(text: str) -> str:
    """The recompute mode a measurement table's cell names, e.g. ``full_recompute_no_seqpar`` → full,
    ``sequence_parallel+selective`` → selective, ``none`` or an empty cell → none.

    Raises:
        ValueError: the cell names no mode, or more than one.
    """
    words = set(re.split(r"[^a-z]+", text.strip().lower()))
    named = [mode for mode in RECOMPUTE_MODES if mode in words]
    if len(named) == 1:
        return named[0]
    if not named and not text.strip():
        return "none"
    raise ValueError(f"cannot read {text!r} as a recompute mode; expected one of {', '.join(RECOMPUTE_MODES)} "
                     f"(words joined by _ or +, e.g. full_recompute or sequence_parallel+selective)")


def read_table(path: str | os.PathLike[str], required: Sequence[str] = ()) -> Table:
    """The CSV file *path* (UTF-8, a header line first) as a :class:`Table`; blank lines are skipped.

    Raises:
        ValueError: one line naming ``--data`` and the path when the file cannot be read, is not UTF-8
            text, lacks a column of *required* (each missing one named), names a column twice or has no
            rows; or naming the file and line of a row whose number of cells differs from the header's.
    """
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as handle, no_cyclic_gc():
            reader = csv.reader(handle)
            names = next(reader, [])
            missing = [c for c in required if c not in names]
            if missing:
                rest = f" (it needs {', '.join(required)})" if len(missing) < len(required) else ""
                raise ValueError(f"--data {path}: missing columns {', '.join(missing)}{rest}")
            repeated = sorted({c for c in names if names.count(c) > 1})
            if repeated:
                raise ValueError(f"--data {path}: the header names {', '.join(map(repr, repeated))} more than once")
            rows = list(reader)
            if not all(rows):
                rows = [row for row in rows if row]
    except OSError as exc:
        raise ValueError(f"--data {path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"--data {path}: not a UTF-8 CSV file") from None
    except csv.Error as exc:
        raise ValueError(f"--data {path}: not a CSV file: {exc}") from None
    if not rows:
        raise ValueError(f"--data {path}: no rows below the header")
    table = Table(path, names, rows)
    if len(set(map(len, rows))) > 1 or len(rows[0]) != len(names):
        row = next(i for i, cells in enumerate(rows) if len(cells) != len(names))
        raise ValueError(f"{table.where(row)}: {len(rows[row])} cells, but the header has {len(names)}")
    return table


def rows_read(path: str | os.PathLike[str], n: int) -> str:
    """The line each validation prints first: how many rows it read, and from which file (its name)."""
    return f"{Path(path).name}: {n:,} row{'s' if n != 1 else ''} read"


def whole_cells(bounds: Mapping[str, int]) -> Callable[[str, str], int]:
    """A parser of a table's whole-number cells: each ``>= 1`` and at most its column's bound in *bounds* (by
    column name; ``COUNT_MAX`` for another column). Its *field* may carry the file and line before ``column C``.
    """
    def whole(field: str, text: str) -> int:
        return parse_whole(field, text, minimum=1, maximum=bounds.get(field.rsplit("column ", 1)[-1], COUNT_MAX))

    return whole


def mode_cell(field: str, text: str) -> str:
    """:func:`recompute_mode` of a cell, its error naming *field* (the file, line and column)."""
    try:
        return recompute_mode(text)
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from None
