"""How fast does the time pricer price layouts, against the one pricer of the original's volumes?

On the same valid layouts of each model (``qwen3-72b``, ``deepseek-v3``) on ``dgx_h100``, both
pricers take the same ``LayoutBatch`` (``validated=True``, everything else inside the clock) and are
timed alternately round by round, so that a slow spell of the shared machine hits each alike:

* ``stage``: ``codegen.pricing.pricer.StagePricer`` (FLOP path): the original's stage volumes;
* ``time``: ``codegen.pricing.time.TimePricer``: each stage's seconds per step on NCCL's model;
* ``ungrouped``: the same pricer with its grouping off (``group_from`` past the batch: every item's
  forms and NCCL's pick evaluated on every layout's row), the numbers identical (checked).

The aim is a time pricer not slower per layout than the stage pricer (docs/time.md); the ratio
``time / stage`` (seconds per layout) is printed, best of the rounds, then one JSON line. Two batches
per model: ``tiled`` (the grid's valid layouts repeated to ``--n``, as before) and ``distinct`` (each
valid layout once, shuffled: no layout repeats, only the items' inputs do).

    python3 bench/time.py [--n 200000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codegen.configs import LayoutBatch, validate_batch  # noqa: E402
from codegen.pricing.pricer import StagePricer  # noqa: E402
from codegen.pricing.time import TimePricer  # noqa: E402


def _layouts(model, n: int) -> LayoutBatch:
    pow2 = [1, 2, 4, 8, 16, 32, 64]
    grid = np.array(list(itertools.product(pow2, [1, 2, 4, 8], [1, 2, 4, 8, 16], [1, 2], pow2, [1, 2])), dtype=np.int64)
    arrays = dict(zip(("d", "t", "p", "cp", "ep", "b"), grid.T))
    ok = validate_batch(model, LayoutBatch.from_arrays(model.layout, **arrays))
    reps = -(-n // int(ok.sum()))
    return LayoutBatch.from_arrays(model.layout, **{k: np.tile(v[ok], reps)[:n] for k, v in arrays.items()})


def _distinct(model) -> LayoutBatch:
    """Each valid layout of a wider grid (micro-batches and interleaving too) once, shuffled."""
    pow2 = [1, 2, 4, 8, 16, 32, 64]
    grid = np.array(list(itertools.product(pow2, [1, 2, 4, 8], [1, 2, 4, 8, 16], [1, 2], pow2, [1, 2], [1, 4, 16, 64],
                                           [1, 2])), dtype=np.int64)
    arrays = dict(zip(("d", "t", "p", "cp", "ep", "b", "m", "vp"), grid.T))
    ok = validate_batch(model, LayoutBatch.from_arrays(model.layout, **arrays))
    order = np.random.default_rng(0).permutation(np.flatnonzero(ok))
    return LayoutBatch.from_arrays(model.layout, **{k: v[order] for k, v in arrays.items()})


def _ungrouped(pricer: TimePricer, batch: LayoutBatch):
    saved = pricer.group_from
    pricer.group_from = len(batch) + 1
    try:
        return pricer.price_batch(batch, validated=True)
    finally:
        pricer.group_from = saved


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    out = {}
    print(f"{'model':<12} {'batch':<9} {'n':>8} {'stage us/layout':>16} {'time us/layout':>15} {'ratio':>7} "
          f"{'ungrouped us':>13} {'speed-up':>9}")
    for name in ("qwen3-72b", "deepseek-v3"):
        timer = TimePricer(name, system="dgx_h100")
        stage = StagePricer(timer.model, device="dgx_h100")
        for kind, batch in (("tiled", _layouts(timer.model, args.n)), ("distinct", _distinct(timer.model))):
            timer.price_batch(batch.subset(slice(0, 100)), validated=True)  # warm the caches alike
            stage.price_batch(batch.subset(slice(0, 100)), validated=True)
            a, b = timer.price_batch(batch, validated=True), _ungrouped(timer, batch)
            if not (np.array_equal(a.bottleneck_s, b.bottleneck_s)
                    and all(np.array_equal(a.by_dimension[k], b.by_dimension[k]) for k in a.by_dimension)):
                print(f"{name} {kind}: grouped and ungrouped prices differ", file=sys.stderr)
                return 1
            best = {"stage": np.inf, "time": np.inf, "ungrouped": np.inf}
            for _ in range(args.rounds):
                for label, run in (("stage", lambda: stage.price_batch(batch, validated=True)),
                                   ("time", lambda: timer.price_batch(batch, validated=True)),
                                   ("ungrouped", lambda: _ungrouped(timer, batch))):
                    start = time.perf_counter()
                    run()
                    best[label] = min(best[label], time.perf_counter() - start)
            per = {k: v / len(batch) * 1e6 for k, v in best.items()}
            row = {"n": len(batch), "us_per_layout": per, "ratio": per["time"] / per["stage"],
                   "speedup": per["ungrouped"] / per["time"]}
            out[f"{name}/{kind}"] = row
            print(f"{name:<12} {kind:<9} {len(batch):>8} {per['stage']:>16.3f} {per['time']:>15.3f} {row['ratio']:>7.1f} "
                  f"{per['ungrouped']:>13.3f} {row['speedup']:>9.1f}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
