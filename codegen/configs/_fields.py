"""The config fields of one layout or a batch, as the communication formulas read them, after the layouts' check."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ._batch import LayoutBatch
from ._derivation import all_fields
from ._layout import Layout
from ._model import ModelConfig
from ._validation import check_batch, validate_one

if TYPE_CHECKING:  # pragma: no cover
    from hardware import System

__all__ = ["derive_fields", "derive_fields_batch"]


def derive_fields(model: ModelConfig, layout: Layout, *, network: System | None = None) -> dict[str, Any]:
    """Every configuration field the communication formulas read, by the original's names.

    The result is a case-style ``inputs`` mapping (docs/model.md, "Config fields"): numbers as floats,
    switches as 0.0 / 1.0, ``cp_algo`` as text and ``rec_op`` as a mapping of switches. Add
    ``stages`` (:func:`build_stages`), ``device``, ``mode`` and ``ttype`` for a stage walk.
    The same rules as :func:`derive_fields_batch`, on a batch of one.

    Model fields come from *model* (``s`` from the layout when it states one). Derived
    fields, confirmed against the reference cases' inputs unless marked *inferred*:

    * ``t_exp``, ``d_exp``: :func:`codegen.configs._derivation.expert_degrees` (confirmed).
    * ``sp``: ``t`` with sequence parallelism, else 1 (confirmed by ``fill_dp_table`` cases).
    * ``os_max_shard``: the optimizer's ranks (``codegen.configs._derivation``); only the legacy
      tables read it (*inferred*: no end-to-end case holds it).
    * ``comm_t = [t > 1]``, ``comm_ep = [ep > 1 or n_exp > 1]``, ``comm_cp = [cp > 1]``
      (confirmed, ``comm_cp`` inferred: no case reads it).
    * ``comm_d_non_exp``: 0 if ``d = 1`` or no optimizer sharding, else 3 with gradient
      sharding and 2 without; ``comm_d_exp`` likewise with ``d_exp = 1`` (confirmed: 2, and
      0 for DeepSeek d=32, t=2, ep=32 where ``d_exp = 1``; level 3 inferred).
    * ``comm_dp_overlap = 0.9``, ``comm_tp_overlap = 0.5`` (confirmed).
    * ``shard_p_os_non_exp_partial = R·t·cp`` with R the optimizer's ranks;
      ``shard_p_os_exp = d_exp·cp·t_exp`` (``cp·t_exp`` without optimizer sharding);
      ``shard_p_os_exp_partial = gcd(n_exp, R·t_exp)`` (published ``derive_optimizer_sharding``;
      all three confirmed, including the optimizer-off layout d=16, t=4 of the FSDP cases).
    * ``gather_embed = R``; ``shard_embed = R·t``, or ``R`` when ``p = 1`` (HyperParallel runs
      the vocabulary embedding data-parallel without pipelining). The cases confirm ``R·t`` for
      ``p > 1`` and ``R`` for ``p = 1, t = 1``; the ``p = 1, t > 1`` branch follows the
      published ``derive_embedding_sharding`` and is *inferred*.
    * ``grad_shard_as_params``, ``reshards`` from the layout; ``shard_spans_cp = 0`` (every
      case records false); ``tie_emb_out`` from the model (confirmed).
    * ``rec_op``: HyperParallel's selective switches (gather 0, …) for a selective plan,
      every switch 1 otherwise (confirmed).
    * ``cp_algo`` from the layout; ``device_per_node``, ``bw_intra``, ``bw_inter``: the
      original's fixed config defaults :data:`ORIGINAL_CP_NETWORK` (confirmed: every case
      records 8, 300, 25 for A2 and A3 alike), or *network*'s ``bindings()`` when a
      :class:`hardware.System` is given (then also ``device_intra_node_num``).
    * ``layer_stack = 0``: no per-layer kinds, as in every case; the model's first dense
      layers (``first_k_dense``) are therefore priced like the others, as the original does.

    Raises:
        LayoutError: when :func:`validate` rejects the layout.
    """
    batch = LayoutBatch.from_layouts([layout])
    validate_one(model, layout, batch, None)
    fields_ = all_fields(model, batch, network)
    return {name: float(value[0]) if isinstance(value, np.ndarray) else value for name, value in fields_.items()}


def derive_fields_batch(model: ModelConfig, batch: LayoutBatch, *, network: System | None = None,
                        names: Sequence[str] | None = None, validated: bool = False,
                        compact: bool = False) -> dict[str, Any]:
    """Every field :func:`derive_fields` gives, for all layouts of *batch* at once.

    Fields that follow from the layout keys (``d, t, …, t_exp, d_exp, sp, os_max_shard,
    comm_*`` switches and levels, ``shard_*``, ``gather_embed``: :data:`LAYOUT_FIELD_NAMES`)
    are float64 arrays of length N, one value per layout, even where a run setting makes them
    constant; the model's fields, ``s`` and the fields the run settings fix (overlaps,
    ``grad_shard_as_params``, ``reshards``, ``rec_op``, ``cp_algo``, the CP network, …) are
    plain values as in :func:`derive_fields`. ``derive_fields_batch(model, batch)[k][i]``
    equals ``derive_fields(model, batch.layout(i))[k]``.

    Args:
        network: as :func:`derive_fields`.
        names: only these fields, in this order (the others are not computed); ``None``: all.
        validated: the caller has already kept only the layouts :func:`validate_batch` accepts,
            so the constraints are not checked again. The fields of a layout that breaks one
            are then unspecified (they follow the rules' floors and clamps).
        compact: a layout field that is the same for every layout because each key it follows
            from is (a key :meth:`LayoutBatch.from_arrays` got as one number or took from the
            defaults: a stride-0 column) is one float instead of an array.

    Raises:
        LayoutError: when a layout breaks a constraint of :func:`validate`, naming the first
            such layout, its index and the constraint (filter with :func:`validate_batch`).
        ValueError: for a name in *names* that is no field.
    """
    if not validated:
        check_batch(model, batch)
    return all_fields(model, batch, network, names, compact=compact)
