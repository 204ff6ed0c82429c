"""How fast does a searcher price whole layouts? A per-layer walk against the one pricer, per model.

On the same random valid layouts of each model (``qwen3-72b``, dense with
GQA; ``deepseek-v3``, MoE with MLA and MTP; FLOP path, no FSDP, the model
file's recompute plan, device A2), three ways are timed, alternated round by
round so that a slow spell of the machine hits each alike:

* ``scalar_walk``: the original's way (``estimate_from_mem_comm``;
  docs/model.md, "From a layer to a stage"): one layout at a time, visit every
  layer of every stage and add its DP, TP, EP and CP volumes one call at a
  time, then convert each stage (``tests/walk.py``, the reference
  the tests hold the closed forms to). Each per-layer volume is the registered
  formula as a plain-Python function of floats (``sympy.lambdify`` with the
  ``math`` module), as the original computes in Python floats. Each layout's
  config is derived before the clock starts, so the walk is timed for its
  pricing alone (a favour to it). Run on a subset (``--walk-n``) and reported
  as a rate, not gated.
* ``generated``: ``codegen.pricing.pricer.StagePricer`` on all N layouts as
  arrays, everything inside the clock: from the arrays to the batch (every
  value through the input gate), the fields the generated stage terms read
  derived, the terms evaluated, the stages formed, each layout's bottleneck and
  sum returned. The layouts come from a generator that keeps only valid ones
  (``validate_batch``), so the call says so (``validated=True``), as a
  searcher's enumerator of valid layouts may; the check it skips is timed as
  ``generated_checked``.
* ``generated_n1000``: the same pricer called on chunks of 1,000 layouts, as a
  searcher that prices as it enumerates would: what the per-call overhead
  costs.
* ``generated_checked``: as ``generated``, with every layout checked again
  (``validated=False``, the pricer's default for layouts of unknown origin).
* ``fused``: ``StagePricer(..., backend="numba")`` (the fused target,
  ``codegen.pricing.fused.FusedBackend``) on all N layouts, called as
  ``generated`` is (``validated=True``): one numba kernel per variant reads
  the key columns once and does the input gate, the derived fields, the
  level scores, the terms, the groups, the stage tables, the bottleneck and
  the sum; what follows from the keys alone is tabulated over the values
  present by the NumPy rules (the kernel's plan, made with the kernel's
  compilation on the comparison calls before the clock, and reused by later
  calls holding the same values, as a searcher's calls do).
  ``fused_checked``: the same with ``validated=False`` (the constraints
  checked in the same pass). ``fused_n1000``: the fused pricer on chunks of
  1,000, as ``generated_n1000`` (after ``_WARM_CALLS`` calls of one shape the
  chunks take the kernel over the keys: the batch path's per-call Python is
  what a chunk of 1,000 would otherwise pay). Left out, with a note, when
  numba is not installed.
* ``memory_floor``: not a pricer but the least any can do with the same
  input arrays: one pass that reads every layout's keys once and writes one
  number per layout (a numba loop summing the columns; without numba,
  ``numpy.add.reduce`` over each column and one ``fill``). ``fused`` near this
  rate is memory-bound.

Before timing, the bottleneck of every way is compared with the pricer's on the
subset (relative 1e-9). Prints a table, then one JSON line::

    {"n": N, "rates": {"scalar_walk": R, "generated": R, "fused": R, "memory_floor": R},
     "models": {"qwen3-72b": {"scalar_walk": R, "generated": R, "generated_n1000": R,
                              "generated_checked": R, "fused": R, "fused_n1000": R, "fused_checked": R,
                              "memory_floor": R}, "deepseek-v3": {…}}}

with rates in layouts per second (``rates`` repeats qwen3-72b).

Usage: ``python3 bench/model.py [--n 1000000] [--walk-n 50] [--repeat 5] [--seed 0]``
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "tests"):  # run as a script from anywhere; the walk is the tests' reference
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from codegen.configs import LayoutBatch, ModelConfig, build_stages, derive_fields, load_model, validate_batch  # noqa: E402
from codegen.pricing import fused as fused_pricer  # noqa: E402
from codegen.pricing.pricer import StagePricer  # noqa: E402
from walk import walk  # noqa: E402

MODELS = ("qwen3-72b", "deepseek-v3")
CHUNK = 1000


def random_layouts(model: ModelConfig, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """N random layouts the model admits, drawn from powers of two and kept when valid."""
    out: dict[str, list[np.ndarray]] = {}
    have = 0
    while have < n:
        k = 2 * (n - have) + 64
        draw = {
            "d": rng.choice([1, 2, 4, 8, 16, 32, 64], k),
            "t": rng.choice([1, 2, 4, 8], k),
            "p": rng.choice([1, 2, 4, 8, 16], k),
            "cp": rng.choice([1, 2, 4, 8, 16], k),
            "m": rng.integers(1, 257, k),
            "b": rng.choice([1, 2, 4], k),
        }
        if model.is_moe:
            draw["ep"] = rng.choice([1, 2, 4, 8, 16, 32], k)
        keep = validate_batch(model, LayoutBatch.from_arrays(model.layout, **draw))
        for key, values in draw.items():
            out.setdefault(key, []).append(values[keep])
        have += int(keep.sum())
    return {key: np.concatenate(parts)[:n] for key, parts in out.items()}


def plain_python_walk() -> None:
    """Point the reference adapters at plain-Python float versions of the registered formulas.

    The adapters price one layer per call through ``codegen.runtime.kernels.evaluator`` (NumPy on one
    number, which costs microseconds per call); the original computes in Python floats, so the
    baseline does too.
    """
    import sympy

    from codegen.reference import adapters
    from symbolic import registry

    @functools.cache
    def plain(name: str) -> Callable[..., float]:
        formula = registry.get(name)
        symbols = sorted(formula.expr.free_symbols, key=lambda s: s.name)
        function = sympy.lambdify(symbols, formula.expr, modules="math")
        names = [s.name for s in symbols]
        return lambda **values: function(*(values[n] for n in names))

    for module in vars(adapters).values():
        if hasattr(module, "evaluator"):
            module.evaluator = plain


def _seconds(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _memory_floor(arrays: dict[str, np.ndarray]) -> Callable[[], Any]:
    """One pass over the layouts' key columns: each read once, one number per layout written."""
    columns = tuple(np.ascontiguousarray(values) for values in arrays.values())
    out = np.empty(len(columns[0]))
    if not fused_pricer.available():
        def numpy_floor() -> None:
            for column in columns:
                np.add.reduce(column)
            out.fill(0.0)

        return numpy_floor
    import numba

    @numba.njit(nogil=True)
    def floor(out: np.ndarray, columns: tuple[np.ndarray, ...]) -> None:
        for i in range(out.shape[0]):
            total = 0
            for column in columns:
                total += column[i]
            out[i] = total

    floor(out, columns)  # compiled before the clock
    np.testing.assert_array_equal(out, sum(columns))
    return lambda: floor(out, columns)


def _model_rates(name: str, n: int, walk_n: int, repeat: int, seed: int) -> dict[str, float]:
    model = load_model(name)
    arrays = random_layouts(model, n, np.random.default_rng(seed))
    pricer = StagePricer(model, device="A2")
    chunks = [{key: values[start:start + CHUNK] for key, values in arrays.items()} for start in range(0, n, CHUNK)]
    k = min(walk_n, n)
    batch = LayoutBatch.from_arrays(model.layout, **{key: values[:k] for key, values in arrays.items()})
    cases = []
    for i in range(k):
        layout = batch.layout(i)
        cases.append({**derive_fields(model, layout), "stages": build_stages(model, layout), "device": "A2",
                      "ttype": "FLOP", "mode": "plain"})

    def scalar_walk() -> np.ndarray:
        return np.array([max(walk(case)["totals"]) for case in cases])

    def generated() -> np.ndarray:
        return pricer(**arrays, validated=True).bottleneck

    def generated_n1000() -> None:
        for chunk in chunks:
            pricer(**chunk, validated=True)

    def generated_checked() -> np.ndarray:
        return pricer(**arrays).bottleneck

    want = generated_checked()
    np.testing.assert_array_equal(generated(), want, err_msg=f"{name}: the check changed a price")
    np.testing.assert_allclose(scalar_walk(), want[:k], rtol=1e-9, err_msg=f"{name}: the walk and the pricer disagree")
    np.testing.assert_allclose(np.concatenate([pricer(**chunk).bottleneck for chunk in chunks]), want, rtol=0,
                               err_msg=f"{name}: chunked and whole calls disagree")
    ways = {"scalar_walk": (scalar_walk, k), "generated": (generated, n), "generated_n1000": (generated_n1000, n),
            "generated_checked": (generated_checked, n)}
    if fused_pricer.available():
        fast = StagePricer(model, device="A2", backend="numba")

        def fused() -> np.ndarray:
            return fast(**arrays, validated=True).bottleneck

        for validated in (False, True):  # compiles (or loads) both kernels and makes their plans before the clock
            got = fast(**arrays, validated=validated)
            np.testing.assert_allclose(got.bottleneck, want, rtol=1e-12, atol=0,
                                       err_msg=f"{name}: fused and NumPy disagree")
            np.testing.assert_allclose(got.sum, pricer(**arrays).sum, rtol=1e-12, atol=0,
                                       err_msg=f"{name}: fused and NumPy sums disagree")

        def fused_checked() -> np.ndarray:
            return fast(**arrays).bottleneck

        def fused_n1000() -> None:
            for chunk in chunks:
                fast(**chunk, validated=True)

        fused_n1000()  # warm: the chunks' shape repeats, so its plan is made before the clock
        np.testing.assert_allclose(np.concatenate([fast(**chunk, validated=True).bottleneck for chunk in chunks]),
                                   want, rtol=1e-12, atol=0, err_msg=f"{name}: fused chunks and NumPy disagree")
        ways["fused"] = (fused, n)
        ways["fused_n1000"] = (fused_n1000, n)
        ways["fused_checked"] = (fused_checked, n)
    ways["memory_floor"] = (_memory_floor(arrays), n)
    times: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(repeat):  # alternately, so that every way sees the same state of the machine
        for way, (fn, _count) in ways.items():
            times[way].append(_seconds(fn))
    return {way: count / statistics.median(times[way]) for way, (_fn, count) in ways.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="layouts per model for the pricer")
    ap.add_argument("--walk-n", type=int, default=50, help="layouts for the scalar walk (a subset)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    plain_python_walk()
    models = {name: _model_rates(name, args.n, args.walk_n, args.repeat, args.seed) for name in MODELS}
    print(f"{args.n:,} random valid layouts per model (scalar walk on {min(args.walk_n, args.n):,}), device A2, "
          f"FLOP path; layouts per second, median of {args.repeat} alternated rounds")
    if not fused_pricer.available():
        print("fused: left out (numba is not installed: pip install -e '.[fast]')")
    print(f"{'model':<12} {'scalar_walk':>14} {'generated':>14} {'generated_n1000':>16} {'fused':>14} {'n1000/n':>8} "
          f"{'fused_n1000':>14} {'fn1000/fn':>9} {'fused/gen':>9} {'gen/walk':>9} {'checked':>14} "
          f"{'fused_checked':>14} {'memory_floor':>14} {'fused/floor':>11}")
    for name, rates in models.items():
        fast, fast_n1000 = rates.get("fused", float("nan")), rates.get("fused_n1000", float("nan"))
        print(f"{name:<12} {rates['scalar_walk']:>14,.0f} {rates['generated']:>14,.0f} "
              f"{rates['generated_n1000']:>16,.0f} {fast:>14,.0f} {rates['generated_n1000'] / rates['generated']:>8.2f} "
              f"{fast_n1000:>14,.0f} {fast_n1000 / fast:>9.2f} "
              f"{fast / rates['generated']:>9.2f} {rates['generated'] / rates['scalar_walk']:>9,.0f} "
              f"{rates['generated_checked']:>14,.0f} {rates.get('fused_checked', float('nan')):>14,.0f} "
              f"{rates['memory_floor']:>14,.0f} {fast / rates['memory_floor']:>11.2f}")
    first = models[MODELS[0]]
    print(json.dumps({"n": args.n,
                      "rates": {way: round(first[way], 1) for way in ("scalar_walk", "generated", "fused", "memory_floor")
                                if way in first},
                      "models": {name: {w: round(r, 1) for w, r in rates.items()} for name, rates in models.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
