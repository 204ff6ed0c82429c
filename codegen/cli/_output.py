"""Files the commands write (``search --out``, ``search --plot``, ``sensitivity --plot``): one rule for all.

The path is checked before any work is done, so a bad one costs nothing: it must name a file (not a
directory), end in a suffix that names its format, sit in a directory that exists and can be written, and
not exist yet — symcost never overwrites a file, a plot of an earlier run included — and be one the directory
lets symcost create (tried at once, and removed again). The file is then created exclusively
(``open(…, "x")``), so one that appears in between is not overwritten either. Each problem is one
``ValueError`` line naming the option and the path. (``compile --out``, a directory of generated files,
has its own rule: ``codegen.compiler``.)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO, Mapping

#: Formats matplotlib writes, by the file's suffix.
PLOT_FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}


def new_file(text: str, option: str, formats: Mapping[str, str]) -> tuple[Path, str]:
    """The file *text* names and its format (``formats[suffix]``, the suffix in any case), checked for writing.

    Raises:
        ValueError: an empty path, a directory, a suffix of no known format, an existing file or link, a
            missing or read-only directory; the message names *option* and the path.
    """
    if not text or not text.strip():
        raise ValueError(f"{option}: expected a file path, got {text!r}")
    path = Path(text)
    try:
        return _checked(path, option, formats)
    except OSError as exc:  # a path the system cannot look at (a name too long, a loop of links, ...)
        raise ValueError(f"{option} {path}: cannot use this path: {exc.strerror or exc}") from None


def _checked(path: Path, option: str, formats: Mapping[str, str]) -> tuple[Path, str]:
    example = path / f"out{next(iter(formats))}"
    if path.is_dir():
        raise ValueError(f"{option} {path}: is a directory; name a file in it, e.g. {example}")
    fmt = formats.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"{option} {path}: expected a file ending in {' or '.join(formats)} (the suffix names "
                         f"the format)")
    if os.path.lexists(path):
        raise ValueError(_exists(option, path))
    parent = path.parent
    if not parent.is_dir():
        raise ValueError(f"{option} {path}: no such directory {parent}")
    if not os.access(parent, os.W_OK):
        raise ValueError(f"{option} {path}: the directory {parent} is not writable")
    _try_create(path, option)
    return path, fmt


def _try_create(path: Path, option: str) -> None:
    """Create *path* exclusively and remove it again: a directory that admits no new file (``/proc``, a read-only
    file system, a full disk's quota, a name too long) is refused now, before any work, not after it.

    The file did not exist and this call made it, so removing it loses nothing of anyone's.
    """
    try:
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
        raise ValueError(_exists(option, path)) from None
    except OSError as exc:
        raise ValueError(f"{option} {path}: cannot create the file: {exc.strerror or exc}") from None
    os.close(handle)
    os.unlink(path)


def create(path: Path, option: str) -> BinaryIO:
    """*path* opened for writing bytes, created by this call: a file that appeared since ``new_file`` is kept."""
    try:
        return open(path, "xb")
    except FileExistsError:
        raise ValueError(_exists(option, path)) from None


def pyplot(option: str) -> Any:
    """matplotlib's pyplot on the file-only Agg backend, loaded when *option* asks for a plot.

    Raises:
        ValueError: matplotlib is not installed (the optional ``plot`` extra).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot as plt
    except ImportError:
        raise ValueError(f"{option}: needs matplotlib, which is not installed; install the optional extra: "
                         f"pip install 'symcost[plot]'") from None
    return plt


def _exists(option: str, path: Path) -> str:
    return f"{option} {path}: the file exists; symcost never overwrites a file (remove it first)"
