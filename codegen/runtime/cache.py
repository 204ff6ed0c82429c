"""A per-user cache directory for work that is pure in its inputs (lowered formulas, fused kernels).

``$SYMCOST_CACHE``, else ``$XDG_CACHE_HOME/symcost``, else ``~/.cache/symcost``. Entries are named by
a hash of everything that decides them, so a stale entry is never read: a change of the inputs is a
different name. Reading or writing it may fail (a read-only home, a full disk): callers then work
without it.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["directory", "load", "store", "source_digest"]


def directory(kind: str) -> Path:
    """The cache folder for entries of *kind* (not created here)."""
    root = os.environ.get("SYMCOST_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "symcost")
    return Path(root) / kind


def source_digest(*paths: Path, extra: str = "") -> str:
    """sha256 of the files' bytes (in order) and *extra*: a version of the code that makes an entry."""
    digest = hashlib.sha256(extra.encode())
    for path in paths:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def load(kind: str, key: str) -> Any | None:
    """The entry *key* of *kind*, or None when it is absent or unreadable."""
    try:
        with open(directory(kind) / f"{key}.pickle", "rb") as handle:
            return pickle.load(handle)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError, ValueError):
        return None


def store(kind: str, key: str, value: Any) -> None:
    """Write *value* as entry *key* of *kind* (atomically: a reader sees all of it or none); errors pass."""
    folder = directory(kind)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        with os.fdopen(fd, "wb") as handle:
            pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, folder / f"{key}.pickle")
    except OSError:
        pass
