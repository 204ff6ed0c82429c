"""How fast does ``symcost search`` rank layouts, and does its memory stay flat as the grid grows?

The search of ``deepseek-v3`` on 16,384 H100s (``dgx_h100``), global batch 4,096, every uniform recompute
mode, every ZeRO level 0-3 and the three CP algorithms (more than 1e7 valid layouts), step-time objective, top 10, is timed
end to end — enumeration (decode, the m-whole filter), pricing (the compiled compute closed forms) and the
top-K reduction — in process on one core and through ``dask.array`` blocks on the local threaded
scheduler, alternated round by round so that a slow spell of the shared machine hits both alike. The
two top-K tables are compared (identical, else exit 1).

Memory: the peak of traced allocations (``tracemalloc``, NumPy's arrays included) of the in-process
search on the full grid and on a small one (ZeRO level 1, one CP algorithm: about a twentieth), in separate untimed runs: a flat
peak means memory does not grow with the grid (it is proportional to ``--chunk``).

Prints a table, then one JSON line::

    {"layouts": N, "grid": G, "rates": {"in_process": R, "dask_local": R}, "peak_bytes": {"grid": P, "small_grid": P},
     "identical": true}

rates are valid layouts priced per second (enumeration included); ``cold`` is the wall time of the
issue's ``symcost search --model deepseek-v3 --devices 16384 --system dgx_h100 --global-batch 4096`` and of
``symcost eval --model deepseek-v3`` (one layout), each in a fresh process, and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from codegen.configs.models import load_model  # noqa: E402
from codegen.pricing.search import SearchSpec, search  # noqa: E402


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEARCH = ["search", "--model", "deepseek-v3", "--devices", "16384", "--system", "dgx_h100", "--global-batch", "4096",
          "--no-progress"]
EVAL = ["eval", "--model", "deepseek-v3"]


def _cold_ratio(rounds: int) -> dict[str, float]:
    """Wall time of ``symcost search`` (the issue's command) and ``symcost eval`` on one layout, each in a new
    process, alternated; the best of *rounds* each."""
    best = {"search_s": float("inf"), "eval_s": float("inf")}
    for _ in range(rounds):
        for key, argv in (("search_s", SEARCH), ("eval_s", EVAL)):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "codegen.cli", *argv], cwd=ROOT, check=True,
                           stdout=subprocess.DEVNULL)
            best[key] = min(best[key], time.perf_counter() - started)
    return {**{k: round(v, 3) for k, v in best.items()}, "ratio": round(best["search_s"] / best["eval_s"], 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=1 << 18)
    args = parser.parse_args()
    model = load_model("deepseek-v3")
    spec = SearchSpec(model, 16384, 4096, "dgx_h100", zero_levels=(0, 1, 2, 3), cp_algos=("colossalai_cp", "hybrid_cp", "ulysses_cp"))
    small = SearchSpec(model, 16384, 4096, "dgx_h100", zero_levels=(1,))
    search(small, top=10, chunk=args.chunk)  # warm: imports, the space's structure tables
    best = {"in_process": float("inf"), "dask_local": float("inf")}
    results = {}
    for _ in range(args.rounds):
        for name, engine in (("in_process", "numpy"), ("dask_local", "dask")):
            started = time.perf_counter()
            results[name] = search(spec, top=10, chunk=args.chunk, engine=engine)
            best[name] = min(best[name], time.perf_counter() - started)
    a, b = results["in_process"], results["dask_local"]
    same = a.layouts == b.layouts and all(np.array_equal(a.table[k], b.table[k], equal_nan=True) for k in a.table)
    peaks = {}
    for label, s in (("grid", spec), ("small_grid", small)):
        tracemalloc.start()
        search(s, top=10, chunk=args.chunk)
        peaks[label] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    rates = {k: a.layouts / v for k, v in best.items()}
    cold = _cold_ratio(args.rounds)
    print(f"grid {a.grid:,} points, {a.layouts:,} valid layouts; chunk {args.chunk:,}")
    for k, v in best.items():
        print(f"  {k:<11} {v:7.2f} s  {rates[k]:12,.0f} layouts/s")
    print(f"  peak traced memory: full grid {peaks['grid'] / 2**20:.1f} MiB, small grid "
          f"{peaks['small_grid'] / 2**20:.1f} MiB; top K identical: {same}")
    print(f"  cold process: symcost search {cold['search_s']:.2f} s, symcost eval {cold['eval_s']:.2f} s, "
          f"ratio {cold['ratio']:.2f}")
    print(json.dumps({"layouts": a.layouts, "grid": a.grid, "rates": {k: round(v) for k, v in rates.items()},
                      "peak_bytes": peaks, "identical": same, "cold": cold}))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
