"""How fast does the time pricer price layouts, against the one pricer of the original's volumes?

On the same valid layouts of each model (``qwen3-72b``, ``deepseek-v3``) on ``dgx_h100``, both
pricers take the same ``LayoutBatch`` (``validated=True``, everything else inside the clock) and are
timed alternately round by round, so that a slow spell of the shared machine hits each alike:

* ``stage``: ``codegen.pricing.pricer.StagePricer`` (FLOP path): the original's stage volumes;
* ``time``: ``codegen.pricing.time.TimePricer``: each stage's seconds per step on NCCL's model.

The target of issue 11 is a time pricer not slower per layout than the stage pricer; the ratio
``time / stage`` (seconds per layout) is printed, best of the rounds, then one JSON line.

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

from codegen.configs.layouts import LayoutBatch, validate_batch  # noqa: E402
from codegen.pricing.pricer import StagePricer  # noqa: E402
from codegen.pricing.time import TimePricer  # noqa: E402


def _layouts(model, n: int) -> LayoutBatch:
    pow2 = [1, 2, 4, 8, 16, 32, 64]
    grid = np.array(list(itertools.product(pow2, [1, 2, 4, 8], [1, 2, 4, 8, 16], [1, 2], pow2, [1, 2])), dtype=np.int64)
    arrays = dict(zip(("d", "t", "p", "cp", "ep", "b"), grid.T))
    ok = validate_batch(model, LayoutBatch.from_arrays(model.layout, **arrays))
    reps = -(-n // int(ok.sum()))
    return LayoutBatch.from_arrays(model.layout, **{k: np.tile(v[ok], reps)[:n] for k, v in arrays.items()})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    out = {}
    print(f"{'model':<12} {'n':>8} {'stage us/layout':>16} {'time us/layout':>15} {'ratio':>7}")
    for name in ("qwen3-72b", "deepseek-v3"):
        timer = TimePricer(name, system="dgx_h100")
        stage = StagePricer(timer.model, device="dgx_h100")
        batch = _layouts(timer.model, args.n)
        timer.price_batch(batch.subset(slice(0, 100)), validated=True)  # warm the caches alike
        stage.price_batch(batch.subset(slice(0, 100)), validated=True)
        best = {"stage": np.inf, "time": np.inf}
        for _ in range(args.rounds):
            for label, pricer in (("stage", stage), ("time", timer)):
                start = time.perf_counter()
                pricer.price_batch(batch, validated=True)
                best[label] = min(best[label], time.perf_counter() - start)
        per = {k: v / len(batch) * 1e6 for k, v in best.items()}
        out[name] = {"n": len(batch), "us_per_layout": per, "ratio": per["time"] / per["stage"]}
        print(f"{name:<12} {len(batch):>8} {per['stage']:>16.3f} {per['time']:>15.3f} {out[name]['ratio']:>7.1f}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
