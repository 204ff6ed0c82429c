"""A search's options, checked once, the same way for the command line and the Python API.

Every function takes the *field* to name in its error (an option of ``symcost search`` such as ``--zero``, or
an argument of :class:`codegen.search.SearchSpec` such as ``zero_levels``) and raises one
:class:`codegen.runtime.inputs.InputError` (a ``ValueError``) naming it and the value; numbers go through the
project's input gate (``codegen.runtime.inputs``: ASCII digits only from text, ``bool`` and floats refused from
Python, the bounds of ``symbolic.vocabulary``).

Lists are merged, never searched twice: a recompute mode or ZeRO level given twice is tried once, and so is a
CP algorithm named twice or by two of its names (a label and an alias, ``symbolic.vocabulary.CP_ALIASES``:
``ulysses,ulysses_cp`` is one algorithm), under the first name given. A restriction (``--fix``, ``--max``)
states each key once: the same value again is merged, another value is an error naming the key.

Public API::

    TOP_MAX, CHUNK_MIN, CHUNK_MAX, GLOBAL_BATCH_MAX, SCHEDULER_TIMEOUT_S
    recompute_modes(field, values) -> tuple[str, ...]
    zero_levels(field, values) -> tuple[int, ...]
    cp_algorithms(field, values) -> tuple[str, ...]
    restrictions(field, pairs) -> tuple[tuple[str, int], ...]     # sorted by key
    parse_restrictions(items, option) -> dict[str, int]           # ["t=8", "p=2,cp=1"] from the command line
    system_name(field, name) -> str                               # a catalog name or alias, as its system's name
    split_names(field, text) -> tuple[str, ...]                   # "a,b" from the command line
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from symbolic.vocabulary import RECOMPUTE_MODES, SEARCH_KEYS, ZERO_LEVELS, layout_key, resolve_algorithm

from ..runtime.inputs import InputError, parse_whole, whole

__all__ = ["TOP_MAX", "CHUNK_MIN", "CHUNK_MAX", "GLOBAL_BATCH_MAX", "SCHEDULER_TIMEOUT_S", "recompute_modes",
           "zero_levels", "cp_algorithms", "restrictions", "parse_restrictions", "system_name", "split_names"]

#: Most rows a search keeps (``--top``): every kept row is held, priced and merged by every chunk.
TOP_MAX = 1_000_000
#: Fewest grid points of a chunk (``--chunk``): each chunk costs about a millisecond beside its layouts (its
#: setting's decode, a call of each pricer), which below 2**10 points outweighs their pricing (``--chunk 1``
#: took 10 s for 6,057 layouts, one chunk per layout; the default 2**18 prices them in 0.1 s).
CHUNK_MIN = 1 << 10
#: Most grid points of a chunk: memory is proportional to it (about a kilobyte a point at most).
CHUNK_MAX = 1 << 26
#: Largest global batch (samples per step) a search splits.
GLOBAL_BATCH_MAX = 1 << 40
#: Seconds a ``--scheduler`` has to answer Dask's handshake: a scheduler answers in milliseconds, so a few
#: seconds allow a slow network and still turn an address that is no Dask scheduler into one line at once.
SCHEDULER_TIMEOUT_S = 5


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _sequence(field: str, values: object, what: str) -> tuple[Any, ...]:
    """*values* as a tuple of items: a list, a tuple or another iterable that is not text, of at least one item."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise InputError(f"{field}: expected a sequence of {what} (a list or a tuple), got {_show(values)}")
    items = tuple(values)
    if not items:
        raise InputError(f"{field}: expected at least one of {what}, got none")
    return items


def recompute_modes(field: str, values: object) -> tuple[str, ...]:
    """The uniform recompute modes to try (of :data:`RECOMPUTE_MODES`), each once, in the order first given."""
    out: dict[str, None] = {}
    for mode in _sequence(field, values, f"recompute modes ({', '.join(RECOMPUTE_MODES)})"):
        if not isinstance(mode, str) or mode not in RECOMPUTE_MODES:
            raise InputError(f"{field}: one of {', '.join(RECOMPUTE_MODES)}, got {_show(mode)}")
        out[mode] = None
    return tuple(out)


def zero_levels(field: str, values: object) -> tuple[int, ...]:
    """The ZeRO levels to try (of :data:`ZERO_LEVELS`, as ``int``), each once, in the order first given."""
    out: dict[int, None] = {}
    known = ", ".join(map(str, ZERO_LEVELS))
    for level in _sequence(field, values, f"ZeRO levels ({known})"):
        try:
            number = whole(field, level, minimum=-(1 << 62))
        except InputError:
            raise InputError(f"{field}: one of {known}, got {_show(level)}") from None
        if number not in ZERO_LEVELS:
            raise InputError(f"{field}: one of {known}, got {_show(level)}")
        out[number] = None
    return tuple(out)


def cp_algorithms(field: str, values: object) -> tuple[str, ...]:
    """The CP algorithms to try, each once under the first name given: a label or an alias of one algorithm
    (``symbolic.vocabulary.resolve_algorithm``, any case) names it, and a second name of it is merged."""
    out: dict[Any, str] = {}
    for name in _sequence(field, values, "CP algorithm names"):
        if not isinstance(name, str):
            raise InputError(f"{field}: expected CP algorithm names, got {_show(name)}")
        try:
            algorithm = resolve_algorithm(name, field=field)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        out.setdefault(algorithm, name)
    return tuple(out.values())


def _restriction_value(field: str, key: str, value: object, *, text: bool) -> int:
    top = layout_key(key).maximum
    if text:
        return parse_whole(f"{field} {key}", value, minimum=1, maximum=top)  # type: ignore[arg-type]
    return whole(f"{field} {key}", value, minimum=1, maximum=top)


def _add(out: dict[str, int], field: str, key: object, value: int) -> None:
    if key in out and out[key] != value:  # type: ignore[comparison-overlap]
        raise InputError(f"{field} {key}: given twice with different values, {out[key]} and {value}; "  # type: ignore[index]
                         f"state it once")
    out[key] = value  # type: ignore[index]


def _key(field: str, key: object, example: str) -> str:
    if not isinstance(key, str) or key not in SEARCH_KEYS:
        raise InputError(f"{field} {_show(key)}: expected {example} with KEY one of {', '.join(SEARCH_KEYS)}")
    return key


def restrictions(field: str, pairs: object) -> tuple[tuple[str, int], ...]:
    """``{key: value}`` or ``((key, value), …)`` (``fix``, ``maximum``) as ``((key, value), …)`` sorted by key.

    Each key is one of :data:`SEARCH_KEYS`, each value a whole number from 1 to the key's bound (``2**20`` for
    a degree, ``2**32`` for ``b`` and ``m``: ``symbolic.vocabulary.LAYOUT_KEYS``). A key given twice with the
    same value is merged; with another value it is an error naming the key.
    """
    if pairs is None:
        return ()
    items = pairs.items() if isinstance(pairs, Mapping) else pairs
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise InputError(f"{field}: expected {{key: value}} or ((key, value), ...), got {_show(pairs)}")
    out: dict[str, int] = {}
    for item in items:
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise InputError(f"{field}: expected (key, value) pairs, got {_show(item)}")
        key = _key(field, item[0], "(KEY, N)")
        _add(out, field, key, _restriction_value(field, key, item[1], text=False))
    return tuple(sorted(out.items()))


def parse_restrictions(items: Iterable[str] | None, option: str) -> dict[str, int]:
    """``["t=8", "p=4,cp=1"]`` (repeated ``--fix``/``--max``, each a comma-separated list) as ``{"t": 8, …}``.

    Values are ASCII digits within the key's bound (:func:`restrictions`); a key repeated with the same value is
    merged, with another an error naming *option* and the key.
    """
    if isinstance(items, (str, bytes)):
        raise InputError(f"{option}: expected a list of KEY=N texts, got {_show(items)}")
    out: dict[str, int] = {}
    for item in items or ():
        if not isinstance(item, str):
            raise InputError(f"{option}: expected KEY=N text, got {_show(item)}")
        for part in item.split(","):
            key, sep, value = part.strip().partition("=")
            key = key.strip()
            if not sep:
                raise InputError(f"{option} {part.strip()!r}: expected KEY=N with KEY one of {', '.join(SEARCH_KEYS)}")
            key = _key(option, key, "KEY=N")
            _add(out, option, key, _restriction_value(option, key, value, text=True))
    return out


def system_name(field: str, name: object) -> str:
    """The catalog's name of the system *name* names: a system's own name or one of its aliases, as every
    command reads ``--system`` and ``--device`` (``hardware.load``)."""
    import hardware

    if not isinstance(name, str) or not name.strip():
        raise InputError(f"{field}: expected a hardware catalog system name, got {_show(name)}")
    try:
        return hardware.load(name).name
    except ValueError:
        raise InputError(f"{field} {name!r}: unknown system; known: {', '.join(hardware.names())} "
                         f"(or an alias: `symcost hardware show NAME` lists a system's aliases)") from None


def split_names(field: str, text: str) -> tuple[str, ...]:
    """A comma-separated list of the command line (``--recompute none,full``), its items stripped."""
    items = tuple(w.strip() for w in text.split(",") if w.strip())
    if not items:
        raise InputError(f"{field}: expected a comma-separated list, got {text!r}")
    return items
