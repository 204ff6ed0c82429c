"""Constant terms: a generated kernel whose output, for one shape of call, follows from the shared
arguments alone.

The pricer binds a term's arguments that every layout of a call shares (the model's and the run's
fields, and the keys a searcher fixes: ``ep = 1`` for a dense model, ``cp = 1``, …) once per shape
of call, and passes the rest per layout. Where the shared values decide the whole term (the EP
term of a dense model is 0 whatever ``b`` and ``cp`` are), evaluating it per layout repeats the
same number N times. :func:`constant_output` finds such terms by running the kernel's block once
on stand-ins: each shared argument as its value, each argument that varies as "unknown", every
buffer as "unknown" until a statement writes it. A statement whose inputs are all known is
computed (the same NumPy operation on the same float64 values: the same number each element of
the real block gets); any unknown input makes its result unknown. When ``out`` ends known, the
term is that number for every layout of the shape; otherwise it is evaluated as before.

The blocks are straight-line ufunc calls, ``numpy.copyto`` and ``numpy.where``, plus guards
``if not mask.all():`` that skip a branch whose results the mask then overwrites (the printer's
rule for ``Piecewise``): an unknown mask runs the branch, which is always correct. Anything else
in a block stops the fold (the term is then evaluated as before), as does a floating-point error
the real block would not ignore.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["constant_output"]


class _Unfoldable(Exception):
    """The block does something the stand-ins do not model."""


_UNKNOWN = object()


class _StandIn:
    """A buffer or a varying argument of a block: its known value (a 0-d array) or unknown (None)."""

    __slots__ = ("value", "dtype")

    def __init__(self, dtype: np.dtype, value: np.ndarray | None = None):
        self.dtype, self.value = dtype, value

    def all(self) -> bool:
        # An unknown mask: run the guarded branch (its results are masked after it either way).
        return False if self.value is None else bool(np.all(self.value))

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, out: Any = None, **kwargs: Any) -> Any:
        if method != "__call__" or kwargs:
            raise _Unfoldable
        values = [_known(x) for x in inputs]
        if out is None:  # an operand of another call (numpy.where's): a new stand-in
            dtype = ufunc(*(np.zeros((), dtype=_dtype(x)) for x in inputs)).dtype
            if any(v is _UNKNOWN for v in values):
                return _StandIn(dtype)
            value = np.asarray(ufunc(*values))
            return _StandIn(value.dtype, value)
        if len(out) != 1 or not isinstance(out[0], _StandIn):
            raise _Unfoldable
        target = out[0]
        if any(v is _UNKNOWN for v in values):
            target.value = None
        else:
            # Into a 0-d array of the buffer's dtype: the loop NumPy picks for the real buffer.
            result = np.empty((), dtype=target.dtype)
            ufunc(*values, out=result)
            target.value = result
        return target

    def __array_function__(self, func: Callable[..., Any], types: Any, args: Sequence[Any], kwargs: dict) -> Any:
        if func is np.copyto:
            _copyto(*args, **kwargs)
            return None
        if func is np.where and len(args) == 3 and not kwargs:
            condition, a, b = (_known(x) for x in args)
            if condition is _UNKNOWN or a is _UNKNOWN or b is _UNKNOWN:
                return _StandIn(np.dtype(bool) if _is_bool(args[1]) and _is_bool(args[2]) else np.dtype(np.float64))
            value = np.asarray(np.where(condition, a, b))
            return _StandIn(value.dtype, value)
        raise _Unfoldable


def _dtype(x: Any) -> np.dtype:
    return x.dtype if isinstance(x, _StandIn) else np.asarray(x).dtype


def _is_bool(x: Any) -> bool:
    return _dtype(x) == np.dtype(bool)


def _known(x: Any) -> Any:
    if isinstance(x, _StandIn):
        return _UNKNOWN if x.value is None else x.value
    return x


def _copyto(dst: Any, src: Any, casting: str = "same_kind", where: Any = True) -> None:
    if not isinstance(dst, _StandIn) or casting != "same_kind":
        raise _Unfoldable
    source, mask = _known(src), _known(where)
    if mask is _UNKNOWN:
        dst.value = None
        return
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != ():
        raise _Unfoldable
    if not mask:
        return  # nothing written
    if source is _UNKNOWN:
        dst.value = None
    else:
        value = np.empty((), dtype=dst.dtype)
        np.copyto(value, source)
        dst.value = value


def constant_output(block: Callable[..., None], reals: int, masks: int, template: Sequence[Any],
                    varying: Sequence[int], quiet: bool) -> float | None:
    """The number *block* fills ``out`` with whatever its varying arguments are, or None.

    Args:
        block: a kernel's block (``generated._runtime.Kernel.block``).
        reals, masks: its float64 and boolean buffer counts.
        template: its arguments after the buffers (arguments, then the invariants), with the shared
            ones bound (0-d float64 arrays) and anything at the *varying* positions.
        varying: the positions in *template* of the arguments that vary per layout.
        quiet: the kernel runs under ``errstate(divide="ignore", invalid="ignore")``.
    """
    arguments = list(template)
    for i in varying:
        arguments[i] = _StandIn(np.dtype(np.float64))
    out = _StandIn(np.dtype(np.float64))
    buffers = [_StandIn(np.dtype(np.float64)) for _ in range(reals)]
    buffers += [_StandIn(np.dtype(bool)) for _ in range(masks)]
    # What the real block would warn about (or, quiet, ignore) stops the fold rather than pass silently.
    errors = dict(divide="ignore", invalid="ignore", over="raise") if quiet else dict(all="raise", under="ignore")
    try:
        with np.errstate(**errors):
            block(out, *buffers, *arguments)
    except (_Unfoldable, FloatingPointError, TypeError, ValueError, AttributeError):
        return None  # (AttributeError: a stand-in asked for something it does not model)
    if out.value is None:
        return None
    return float(out.value)
