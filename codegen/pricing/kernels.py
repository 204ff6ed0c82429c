"""Generated functions evaluated through their kernels, with the arguments a caller keeps bound once.

A call of a generated function converts its keyword arguments, finds the output's shape, allocates the
output and its scratch buffers and enters ``numpy.errstate`` (``generated._runtime.Call``): 10-25 µs a
call, more than the arithmetic itself on the small arrays the time pricer and NCCL's pick evaluate
(tens to a few thousand elements, thousands of calls in a search). The kernel of the function
(``function.kernel``: ``invariants`` once, then ``block`` on views) lets a caller do that part once:
:class:`BoundKernel` computes the invariants from the *shared* arguments (those that stay while the
caller lives: the hardware's constants, the model's fields) and keeps them, and the shared arguments,
as float64 0-d arrays (a ufunc takes those without converting a Python float on every call); a call
then passes the arguments that vary and a caller's output and scratch buffers.

The numbers are the function's, to the bit: the block runs the same statements on the same float64
values (a Python float and a 0-d float64 array of it are the same number to a ufunc), and the
invariants come from the same values the function would pass them. Arguments of different shapes that
broadcast to the output's are passed as they are, as ``Call.blocks`` itself does for an output of no more
than ``BLOCK`` elements: the statements are ufuncs with ``out=``, ``numpy.copyto`` and
``numpy.where``, which broadcast.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from generated import BLOCK

from .folding import constant_output

__all__ = ["BLOCK", "BoundKernel", "scratch"]


class BoundKernel:
    """A generated function's kernel with its shared arguments and its invariants bound (:meth:`bind`).

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
        """Fill *out* (a float64 array of no more than ``BLOCK`` elements) with the function of *values*.

        *values* binds :attr:`varying` to float64 arrays (0-d or of shapes that broadcast to *out*'s);
        *reals* and *masks* are float64 and boolean arrays of *out*'s shape, at least :attr:`reals` and
        :attr:`masks` of them (their contents are overwritten). Returns *out*.
        """
        arguments = self.template.copy()
        for i, name in self.slots:
            arguments[i] = values[name]
        self.block(out, *reals[:self.reals], *masks[:self.masks], *arguments)
        return out


def scratch(shape: tuple[int, ...], reals: int, masks: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """*reals* float64 and *masks* boolean buffers of *shape* for :meth:`BoundKernel.into`."""
    return [np.empty(shape) for _ in range(reals)], [np.empty(shape, dtype=bool) for _ in range(masks)]
