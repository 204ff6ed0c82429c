"""Reading a measurement CSV for ``symcost validate``: one error line naming ``--data`` and the path."""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Sequence

__all__ = ["DATA_DIR", "read_rows"]

#: The measurement tables shipped with the package (package data; provenance in ``data/README.md``),
#: found beside this module so that a wheel install reads them as a source checkout does.
DATA_DIR = Path(__file__).resolve().parent / "data"


def read_rows(path: str | os.PathLike[str], required: Sequence[str] = ()) -> tuple[list[str], list[dict[str, str]]]:
    """The column names and the rows of the CSV file *path* (UTF-8, a header line first).

    Raises:
        ValueError: one line naming ``--data`` and the path when the file cannot be read, is not UTF-8
            text, lacks a column of *required* (each missing one named) or has no rows.
    """
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            columns = list(reader.fieldnames or ())
            missing = [c for c in required if c not in columns]
            if missing:
                rest = f" (it needs {', '.join(required)})" if len(missing) < len(required) else ""
                raise ValueError(f"--data {path}: missing columns {', '.join(missing)}{rest}")
            rows = list(reader)
    except OSError as exc:
        raise ValueError(f"--data {path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"--data {path}: not a UTF-8 CSV file") from None
    except csv.Error as exc:
        raise ValueError(f"--data {path}: not a CSV file: {exc}") from None
    if not rows:
        raise ValueError(f"--data {path}: no rows below the header")
    return columns, rows
