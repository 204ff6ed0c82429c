"""The options of the commands that read raw nccl-tests output (``validate collectives --logs``, ``calibrate``)."""

from __future__ import annotations

import argparse

from ..runtime.inputs import InputError, parse_whole
from ..validation.collectives import OPS


def log_options(args: argparse.Namespace) -> tuple[int | None, str | None]:
    """``--gpus-per-node`` (a whole number) and ``--op`` (an nccl-tests collective name, as the time model names it),
    ``None`` where not given.

    Raises:
        InputError: naming the option and its value.
    """
    per_node = None if args.gpus_per_node is None else parse_whole("--gpus-per-node", args.gpus_per_node)
    if args.op is None:
        return per_node, None
    if args.op not in OPS:
        raise InputError(f"--op: unknown collective {args.op!r}; known: {', '.join(sorted(OPS))}")
    return per_node, OPS[args.op]
