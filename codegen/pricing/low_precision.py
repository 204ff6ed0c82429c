"""The bytes of a low-precision run's quantized tensors, the values the memory family's ``_lowp`` forms read.

``symbolic.vocabulary.Precision`` holds each recipe's facts (``input_bytes``, ``weight_copy_bytes``,
``own_proj_copy``, with their Transformer Engine sources); :func:`low_precision_values` resolves them for one GPU
(docs/memory.md, "Low precision"). ``codegen.pricing.memory`` re-exports both names.

Public API::

    LOW_PRECISION_VALUES
    precision_name(field, value) -> str          # a name of PRECISIONS, else one error naming *field*
    low_precision_values(precision, system) -> dict[str, float]
    require_capability(precision, system, error=InputError) -> Precision   # the GPU can run it, else one error
"""

from __future__ import annotations

from hardware import System
from symbolic.vocabulary import PRECISIONS, Precision

from ..runtime import inputs

__all__ = ["LOW_PRECISION_VALUES", "precision_name", "low_precision_values", "require_capability"]

#: The values the low-precision forms read, besides the BF16 forms' (``symbolic.memory``): 0 in none of them.
LOW_PRECISION_VALUES = ("bytes_lowp_input", "bytes_lowp_weight", "lowp_proj_copy", "lowp_primary_weights")


def precision_name(field: str, value: object) -> str:
    """*value* if it names a precision (``symbolic.vocabulary.PRECISIONS``).

    Raises:
        InputError: naming *field*, the precisions and the value.
    """
    if isinstance(value, str) and value in PRECISIONS:
        return value
    raise inputs.InputError(f"{field}: one of {', '.join(PRECISIONS)}, got {value!r}")


def require_capability(precision: str, system: System, error: type[ValueError] = inputs.InputError) -> Precision:
    """The recipe of *precision* (a name of ``PRECISIONS``) if *system*'s GPU (not ``None``) can run it.

    Raises:
        error: naming the precision, the GPU, its compute capability and the one the precision needs.
    """
    chosen, have = PRECISIONS[precision], system.gpu.compute_capability
    if have < (need := chosen.min_capability):
        raise error(f"--precision {precision}: the {system.gpu.model} of {system.name} (compute capability "
                    f"{have // 10}.{have % 10}) cannot run it; it needs {need // 10}.{need % 10} or newer")
    return chosen


def low_precision_values(precision: str, system: System | str) -> dict[str, float]:
    """The bytes of a low-precision run's quantized tensors on *system*'s GPU (``symbolic.vocabulary.Precision``):
    ``bytes_lowp_input`` per saved input element, ``bytes_lowp_weight`` per linear weight parameter (FP8 keeps a
    transpose on Hopper, not on Blackwell), ``lowp_proj_copy``; ``{}`` for BF16 (docs/memory.md, "Low precision").

    Raises:
        InputError: naming an unknown precision, or one the GPU cannot run (its compute capability).
        hardware.HardwareSpecError: naming an unknown system.
    """
    if precision_name("--precision", precision) == "bf16":
        return {}
    net = inputs.system("system", system)
    if net.gpu is None:
        raise inputs.InputError(f"system: {net.name} has no GPU facts in the hardware catalog (no compute capability)")
    chosen, have = require_capability(precision, net), net.gpu.compute_capability
    return {"bytes_lowp_input": chosen.input_bytes, "bytes_lowp_weight": chosen.weight_copy_bytes(have),
            "lowp_proj_copy": float(chosen.own_proj_copy)}
