"""``symcost eval --cost step-time``: one layout's step time, its parts and its memory per rank.

The step-time family as the search prices it (``codegen.pricing.step_time.StepTimePricer``: the slowest
stage's compute, the pipeline bubble, the exposed communication of the time family's bottleneck stage),
for one layout, with each stage's memory per rank (``codegen.pricing.memory.stage_memory``) beside it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from symbolic.vocabulary import DEFAULT_EP_DISPATCHER, DEFAULT_OVERLAP, SEARCH_KEYS

from ..configs import Layout, ModelConfig
from ..pricing.chunks import Chunk, Setting
from ..pricing.memory import DEFAULT_SETTINGS, stage_memory, zero_level_of
from ..pricing.step_time import NoComputeFactsError, StepTimePricer, time_family_comm
from ..runtime.inputs import finite

__all__ = ["step_time_result", "print_step_time"]


def step_time_result(model: ModelConfig, layout: Layout, system: str, precision: str,
                     overlap: tuple[str, ...] = DEFAULT_OVERLAP, recompute_modules: tuple[str, ...] = (),
                     ep_dispatcher: str = DEFAULT_EP_DISPATCHER) -> dict[str, Any]:
    """One layout's step time and parts (seconds), its exposed communication by dimension and each stage's memory,
    under the run's *precision*, *overlap* (``symbolic.vocabulary.OVERLAPS`` names), *recompute_modules*
    (``symbolic.vocabulary.RECOMPUTE_MODULES`` names) and *ep_dispatcher* (``symbolic.vocabulary.EP_DISPATCHERS``).

    A recompute list per stage (``N,N,…``: stage i fully recomputes its first N_i layers, the rest as the plan's
    mode says) prices every stage with its own counts; the slowest stage's compute is the step's, and the forward
    collectives its fully recomputed layers repeat are its share of them (``StepTimePricer.price_plan``).

    Raises:
        ValueError: naming a system without the facts the step time or the memory needs, or a precision its GPU
            cannot run.
    """
    # The pricers read the run's settings that no search key holds (the sequence length, the pipeline split's
    # offset) from the model's layout: *layout*'s are set there.
    model = replace(model, layout=replace(layout, s=layout.s or model.layout.s))
    comm = time_family_comm(model, system, precision, ep_dispatcher=ep_dispatcher)
    try:
        pricer = StepTimePricer(model, system=system, comm=comm, precision=precision, overlap=overlap,
                                recompute_modules=recompute_modules)
    except NoComputeFactsError as exc:  # (eval names the system --device)
        raise NoComputeFactsError(str(exc).replace("--system", "--device", 1)) from None
    values = {k: np.array([getattr(layout, k)], dtype=np.int64) for k in SEARCH_KEYS}
    zero = zero_level_of(layout)
    plan = layout.recompute
    mode = plan.mode
    chunk = Chunk(Setting(mode, zero, layout.cp_algo), values, np.zeros(1, np.int64), model)
    parts = pricer.price_plan(values, plan, chunk)
    by_dimension = comm(chunk) if comm is not None else {}
    out: dict[str, Any] = {k: float(finite(k, v[0])) for k, v in parts.items()}
    out["comm_by_dimension_s"] = {k: float(finite(k, np.asarray(v).reshape(-1)[0])) for k, v in by_dimension.items()}
    out["exposed_comm_s"] = out["comm_s"]
    memory = stage_memory(model, layout, system=system, settings=replace(DEFAULT_SETTINGS, precision=precision,
                                                                         recompute_modules=pricer.recompute_modules))
    # Every stage's compute (the step takes the slowest's): where a recompute list or an uneven split puts the load.
    stages, _, _ = pricer.listed_stage_parts(values, plan, zero)
    seconds = [float(finite("stage compute", pricer.slowest([stage])[0][0])) for stage in stages]
    out["memory"] = [{"stage": row["stage"], "compute_s": seconds[row["stage"]], "total_bytes": row["total"],
                      "headroom_bytes": row["headroom"], "fits": row["fits"]} for row in memory["stages"]]
    out.update(system=system, precision=precision, overlap=list(pricer.overlap), ep_dispatcher=ep_dispatcher,
               recompute=str(plan),
               recompute_modules=list(pricer.recompute_modules), zero_level=zero,
               units="seconds per training step; memory in bytes per rank")
    return out


def print_step_time(res: dict[str, Any], model: str, layout: str) -> None:
    """The table form of :func:`step_time_result`."""
    print(f"model {model}  layout {layout}  system {res['system']}  precision {res['precision']}  "
          f"recompute {res['recompute']}" + (f" (modules {','.join(res['recompute_modules'])})"
                                             if res["recompute_modules"] else "")
          + f"  ZeRO {res['zero_level']}  overlap {','.join(res['overlap']) or 'none'}"
          + f"  EP dispatcher {res['ep_dispatcher']}")
    print(f"step {res['step_time_s']:.4f} s = compute {res['compute_s']:.4f} s + bubble {res['bubble_s']:.4f} s "
          f"(fraction {res['bubble']:.4f}) + exposed communication {res['comm_s']:.4f} s")
    print(f"slowest stage: {res['stage_flops'] / 1e12:.2f} TFLOP per rank per step at the reference GEMM efficiency "
          f"(a GEMM under 16 GFLOP counted over its size's efficiency: docs/search.md, Compute)")
    if res["comm_by_dimension_s"]:
        print("communication of the bottleneck stage, by dimension (s): "
              + ", ".join(f"{k.upper()} {v:.4f}" for k, v in res["comm_by_dimension_s"].items()))
    print(f"{'stage':>5}  {'compute s':>10}  {'memory GiB':>11}  {'headroom GiB':>13}  fits")
    for row in res["memory"]:
        print(f"{row['stage']:>5}  {row['compute_s']:>10.4f}  {row['total_bytes'] / 2**30:>11.2f}  "
              f"{row['headroom_bytes'] / 2**30:>13.2f}  {'yes' if row['fits'] else 'no'}")
