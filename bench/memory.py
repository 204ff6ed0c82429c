"""Is memory per rank as cheap for a searcher as communication? MemoryPricer against StagePricer.

On the same random valid layouts of each model (``qwen3-72b``, dense with
GQA; ``deepseek-v3``, MoE with MLA and MTP; the model file's recompute plan;
drawn as ``bench/model.py`` draws them), two pricers are timed side by side,
alternated round by round so that a slow spell of the machine hits both alike:

* ``stage``: ``codegen.pricing.pricer.StagePricer`` (device A2, FLOP path),
  ``price_batch(batch, validated=True)``: each layout's bottleneck and sum of
  the stages' communication.
* ``memory``: ``codegen.pricing.memory.MemoryPricer`` (system ``dgx_h100``,
  the default settings), ``price_batch(batch, validated=True)``: each
  layout's peak stage, its total, headroom and fits (the peak stage's parts
  are evaluated when first read, which a feasibility search does not do;
  they are not timed).

Both get the same ``LayoutBatch`` (built and checked before the clock starts),
as a searcher that has already kept valid layouts calls them. Before timing,
the memory pricer's prices of the whole batch (grouped as any batch of 4096
layouts or more is: ``MemoryPricer`` evaluates each group of layouts with
equal keys once) are compared with ``stage_memory`` (one layout at a time) on
its first layouts, exactly, parts included. Prints a table, then one JSON line::

    {"n": N, "models": {"qwen3-72b": {"stage": R, "memory": R, "memory_over_stage": X,
                                      "stage_ms_per_call": T, "memory_ms_per_call": T}, "deepseek-v3": {…}}}

with rates in layouts per second and milliseconds per ``price_batch`` call of
N layouts (``--n 1000`` shows the cost per call of a small batch; below
200,000 layouts each round times ``200,000 // N`` calls and divides).

Usage: ``python3 bench/memory.py [--n 1000000] [--repeat 3] [--check-n 50] [--seed 0]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:  # run as a script from anywhere
        sys.path.insert(0, str(path))

from codegen.configs import LayoutBatch, load_model  # noqa: E402
from codegen.pricing.memory import PARTS, MemoryPricer, stage_memory  # noqa: E402
from codegen.pricing.pricer import StagePricer  # noqa: E402
from model import MODELS, random_layouts  # noqa: E402

SYSTEM = "dgx_h100"


def _seconds(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _check(model: Any, batch: LayoutBatch, pricer: MemoryPricer, k: int) -> None:
    """The batch pricer on the whole batch against stage_memory on its first *k* layouts, exactly."""
    got = pricer.price_batch(batch, validated=True)
    for i in range(min(k, len(batch))):
        stages = stage_memory(model, batch.layout(i), system=SYSTEM)["stages"]
        peak = max(range(len(stages)), key=lambda j: (stages[j]["total"], -j))
        row = stages[peak]
        want = [peak, row["total"], *(row[part] for part in PARTS), row["headroom"]]
        have = [got.peak_stage[i], got.peak_total[i], *(got.parts()[part][i] for part in PARTS), got.headroom[i]]
        if want != have:
            raise SystemExit(f"{model.name} layout {i}: MemoryPricer {have} != stage_memory {want}")


def _model_rates(name: str, n: int, repeat: int, check_n: int, seed: int) -> dict[str, float]:
    model = load_model(name)
    arrays = random_layouts(model, n, np.random.default_rng(seed))
    batch = LayoutBatch.from_arrays(model.layout, **arrays)
    stage = StagePricer(model, device="A2")
    memory = MemoryPricer(model, system=SYSTEM)
    _check(model, batch, memory, check_n)
    calls = max(1, 200_000 // n)  # a small batch: several calls per round, timed together

    def repeated(pricer: Any) -> Callable[[], None]:
        def run() -> None:
            for _ in range(calls):
                pricer.price_batch(batch, validated=True)
        return run

    ways = {"stage": repeated(stage), "memory": repeated(memory)}
    for fn in ways.values():  # warm the caches (stage counts, plans) outside the clock
        fn()
    times: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(repeat):  # alternately, so that both see the same state of the machine
        for way, fn in ways.items():
            times[way].append(_seconds(fn) / calls)
    rates = {way: n / statistics.median(t) for way, t in times.items()}
    rates["memory_over_stage"] = rates["memory"] / rates["stage"]
    rates.update({f"{way}_ms_per_call": 1e3 * statistics.median(t) for way, t in times.items()})
    return rates


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="layouts per model")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--check-n", type=int, default=50, help="layouts compared with stage_memory first")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    models = {name: _model_rates(name, args.n, args.repeat, args.check_n, args.seed) for name in MODELS}
    print(f"{args.n:,} random valid layouts per model; StagePricer (A2, FLOP) and MemoryPricer ({SYSTEM}), "
          f"validated=True; layouts per second, median of {args.repeat} alternated rounds")
    print(f"{'model':<12} {'stage':>14} {'memory':>14} {'memory/stage':>13} {'stage ms/call':>14} "
          f"{'memory ms/call':>15}")
    for name, rates in models.items():
        print(f"{name:<12} {rates['stage']:>14,.0f} {rates['memory']:>14,.0f} {rates['memory_over_stage']:>13.2f} "
              f"{rates['stage_ms_per_call']:>14.3f} {rates['memory_ms_per_call']:>15.3f}")
    print(json.dumps({"n": args.n, "models": {name: {way: round(rate, 1 if way in ("stage", "memory") else 4)
                                                      for way, rate in rates.items()}
                                               for name, rates in models.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
