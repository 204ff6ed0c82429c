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

The small grid (ZeRO level 1, one CP algorithm, 1,442,856 layouts) is timed in process too
(``small_grid_in_process``: its own layouts per second).

Prints a table, then one JSON line::

    {"layouts": N, "grid": G, "rates": {"in_process": R, "dask_local": R, "small_grid_in_process": R}, "cpu_rates": {...},
     "peak_bytes": {"grid": P, "small_grid": P}, "identical": true, "cold": {...}}

rates are valid layouts priced per second (enumeration included). Without Dask (the optional extra
``symcost[search]``) the in-process figures are measured alone: the table says Dask is missing, ``dask_local``
is absent from the JSON, ``"dask": "missing"`` and ``identical`` is null. ``cold`` is the wall and CPU time of
``symcost search --model deepseek-v3 --devices 16384 --system dgx_h100 --global-batch 4096`` and of
``symcost eval --model deepseek-v3 --device dgx_h100`` (one layout), each in a fresh process, the median of
``--cold-rounds`` alternated runs, with Python's bytecode cache off (``PYTHONDONTWRITEBYTECODE=1``) and on,
and their ratios (the CPU ratio is the steadier one on a shared machine). ``--cold-only`` runs only that.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from codegen.configs import load_model  # noqa: E402
from codegen.search import SearchSpec, search  # noqa: E402


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEARCH = ["search", "--model", "deepseek-v3", "--devices", "16384", "--system", "dgx_h100", "--global-batch", "4096",
          "--no-progress"]
EVAL = ["eval", "--model", "deepseek-v3", "--device", "dgx_h100"]


def _cold(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one ``python -m codegen.cli ARGV`` in a new process."""
    before = os.times()
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "codegen.cli", *argv], cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   env=env)
    wall = time.perf_counter() - started
    after = os.times()
    return wall, (after.children_user - before.children_user) + (after.children_system - before.children_system)


def _cold_ratio(rounds: int) -> dict[str, dict[str, float]]:
    """Wall and CPU time of ``symcost search`` (DeepSeek-V3 on 16,384 H100s) and ``symcost eval`` on one layout, each in
    a new process, alternated round by round; the median of *rounds* each, with Python's bytecode cache off
    (``PYTHONDONTWRITEBYTECODE=1``: every module compiled from source) and on (a warm ``__pycache__``)."""
    out = {}
    for label, off in (("no_bytecode_cache", True), ("bytecode_cache", False)):
        env = dict(os.environ)
        if off:  # nothing written, and an empty cache folder to read from: every module compiled from source
            env["PYTHONDONTWRITEBYTECODE"] = "1"
            env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="symcost-no-pycache-")
        else:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            for argv in (SEARCH, EVAL):  # write the caches once, untimed
                _cold(argv, env)
        got = {"search": [], "eval": []}
        for _ in range(rounds):
            for key, argv in (("search", SEARCH), ("eval", EVAL)):
                got[key].append(_cold(argv, env))
        med = {key: (float(np.median([w for w, _ in v])), float(np.median([c for _, c in v]))) for key, v in got.items()}
        out[label] = {"search_s": round(med["search"][0], 3), "eval_s": round(med["eval"][0], 3),
                      "ratio": round(med["search"][0] / med["eval"][0], 3),
                      "search_cpu_s": round(med["search"][1], 3), "eval_cpu_s": round(med["eval"][1], 3),
                      "cpu_ratio": round(med["search"][1] / med["eval"][1], 3)}
    return out


def _print_cold(cold: dict[str, dict[str, float]]) -> None:
    for label, c in cold.items():
        print(f"  cold process ({label}): symcost search {c['search_s']:.2f} s, symcost eval {c['eval_s']:.2f} s, "
              f"ratio {c['ratio']:.2f} (CPU {c['search_cpu_s']:.2f} s / {c['eval_cpu_s']:.2f} s = {c['cpu_ratio']:.2f})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=1 << 18)
    parser.add_argument("--cold-rounds", type=int, default=5, help="cold processes of each command (median)")
    parser.add_argument("--cold-only", action="store_true", help="only the cold-process ratio")
    args = parser.parse_args()
    if args.cold_only:
        cold = _cold_ratio(args.cold_rounds)
        _print_cold(cold)
        print(json.dumps({"cold": cold}))
        return 0
    dask = _dask_missing()
    if dask:
        print(f"Dask is missing ({dask}): the dask_local figures are left out; pip install symcost[search] for them.")
    model = load_model("deepseek-v3")
    # Every interleaving admitted: the grid the figures of docs/search.md "Speed" were measured on (14.5 million
    # layouts), larger than the search's default (interleaving as Megatron-Core runs it from the degrees alone).
    spec = SearchSpec(model, 16384, 4096, "dgx_h100", zero_levels=(0, 1, 2, 3),
                      cp_algos=("colossalai_cp", "hybrid_cp", "ulysses_cp"), any_interleaving=True)
    small = SearchSpec(model, 16384, 4096, "dgx_h100", zero_levels=(1,), any_interleaving=True)
    search(small, top=10, chunk=args.chunk)  # warm: imports, the space's structure tables
    runs = [("in_process", "numpy", spec), ("dask_local", "dask", spec), ("small_grid_in_process", "numpy", small)]
    if dask:
        runs = [run for run in runs if run[1] != "dask"]
    best = {name: float("inf") for name, _, _ in runs}
    best_cpu = dict(best)
    results = {}
    for _ in range(args.rounds):
        for name, engine, s in runs:
            started, cpu = time.perf_counter(), time.process_time()
            results[name] = search(s, top=10, chunk=args.chunk, engine=engine)
            best[name] = min(best[name], time.perf_counter() - started)
            best_cpu[name] = min(best_cpu[name], time.process_time() - cpu)
    a, b = results["in_process"], results.get("dask_local")
    same = None if b is None else (a.layouts == b.layouts and all(np.array_equal(a.table[k], b.table[k], equal_nan=True)
                                                                   for k in a.table))
    peaks = {}
    for label, s in (("grid", spec), ("small_grid", small)):
        tracemalloc.start()
        search(s, top=10, chunk=args.chunk)
        peaks[label] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    size = {k: results[k].layouts for k in best}
    rates = {k: size[k] / v for k, v in best.items()}
    cpu_rates = {k: size[k] / v for k, v in best_cpu.items()}
    cold = _cold_ratio(args.cold_rounds)
    print(f"grid {a.grid:,} points, {a.layouts:,} valid layouts; chunk {args.chunk:,}")
    for k, v in best.items():
        print(f"  {k:<21} {v:7.2f} s  {rates[k]:12,.0f} layouts/s  (CPU {best_cpu[k]:.2f} s, "
              f"{cpu_rates[k]:,.0f} layouts/s; {size[k]:,} layouts)")
    compared = "not compared (Dask is missing)" if same is None else same
    print(f"  peak traced memory: full grid {peaks['grid'] / 2**20:.1f} MiB, small grid "
          f"{peaks['small_grid'] / 2**20:.1f} MiB; top K identical: {compared}")
    _print_cold(cold)
    print(json.dumps({"layouts": a.layouts, "grid": a.grid, "rates": {k: round(v) for k, v in rates.items()},
                      "cpu_rates": {k: round(v) for k, v in cpu_rates.items()},
                      "peak_bytes": peaks, "identical": same, "cold": cold,
                      **({"dask": "missing"} if dask else {})}))
    return 1 if same is False else 0


def _dask_missing() -> str | None:
    """Why the Dask engine cannot run here (its import's error), or None when it can."""
    try:
        import dask  # noqa: F401
        import dask.array  # noqa: F401
    except ImportError as exc:
        return str(exc) or type(exc).__name__
    return None


if __name__ == "__main__":
    sys.exit(main())
