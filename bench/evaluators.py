"""How fast are the generated evaluators? Configurations per second, six ways, same layouts.

For each timed formula, on the same N random valid layouts in one process:

* ``scalar_loop``: one Python call per layout, written the way the original
  planner computes it (floats, ``max``, ``or`` fallbacks), on a subset of the
  layouts (``--loop-n``), reported as a rate;
* ``lambdify_cse``: ``sympy.lambdify(symbols, expr, "numpy", cse=True)``;
* ``hand_numpy``: a vectorised NumPy version written by hand as an expert
  would, straightforwardly;
* ``generated``: the function ``symcost compile`` writes (NumPy target);
* ``fused``: its twin in ``generated/fused`` (numba target; ``null`` when
  numba is not installed), compiled before timing;
* ``memory_floor``: not an evaluator but the least any can do: one pass over
  the same inputs, each read once (``numpy.add.reduce``) and the output
  written once (``fill``). A fused kernel near this rate is memory-bound.

Every evaluator's numbers are checked against the generated ones first
(relative 1e-9). Timing alternates the ways round by round (one call of
each per round, ``--repeat`` rounds after a warm-up round), so that a slow
spell of the machine hits every way alike; each rate is N over the median
of a way's rounds. The table is followed by one JSON line::

    {"n": N, "formulas": {NAME: {"scalar_loop": R, "lambdify_cse": R, "hand_numpy": R, "generated": R,
                                 "fused": R, "memory_floor": R}}}

Formulas timed:

* ``cp_ulysses_mla_traffic_bytes`` (``cp_traffic``, Ulysses, MLA), from ``generated/``;
* a MoE layer's DP + TP + EP + CP volume (``MOE_LAYER_PARTS``, the original's
  mixed-unit per-layer sum), built here from the registered per-layer
  formulas and compiled by the same code generator into a temporary package.
  >>> MARKED PLACE: when the registry holds such a per-layer sum itself
  (e.g. from ``symbolic/model.py``), put its name in ``MOE_LAYER_REGISTERED``
  and the benchmark times the committed function instead.

Usage: ``python3 bench/evaluators.py [--n 1000000] [--repeat 7] [--loop-n 20000] [--seed 0]``
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
import sympy

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from codegen.compiler import render_tree, write_tree  # noqa: E402
from symbolic import registry  # noqa: E402
from symbolic.formula import Formula  # noqa: E402
from symbolic.symbols import SPECS  # noqa: E402

Values = Mapping[str, np.ndarray]

# ----------------------------------------------------------------- layouts

#: Choices per symbol for realistic layouts (typical model and cluster sizes); others by their declared kind.
_CHOICES: dict[str, tuple[float, ...]] = {
    "s": (4096, 8192, 16384, 32768, 65536, 131072),
    "b": (1, 2, 3, 4),
    "a": (16, 32, 64, 128),
    "h": (2048, 4096, 5120, 7168, 8192),
    "dh": (0, 64, 128),  # 0: unset, the h/a fallback
    "dhr": (0, 64),
    "t": (1, 2, 4, 8),
    "cp": (1, 2, 4, 8, 16),
    "ep": (1, 2, 4, 8, 16, 32, 64),
    "t_exp": (1, 2, 4, 8),
    "bytes_compute": (1, 2, 4),
    "comm_t": (0, 1),
    "comm_ep": (0, 1),
    "n_gather": (4,),
    "n_attMM": (4,),
    "n_ffMM": (2, 3),
    "n_exp": (8, 16, 64, 160, 256),
    "n_shared_exp": (0, 1, 2),
    "n_chosen_exp": (1, 2, 4, 6, 8),
    "hff_exp": (1024, 1408, 2048, 4096),
    "mb": (1, 2, 4, 8),
}


def layouts(arguments: tuple[str, ...], n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """*n* random valid values per argument, as float64 arrays."""
    out: dict[str, np.ndarray] = {}
    for name in arguments:
        if name in _CHOICES:
            out[name] = rng.choice(np.asarray(_CHOICES[name], dtype=float), n)
        elif name == "n_kv":
            out[name] = rng.integers(1, 129, n).astype(float)
        elif name in ("P_ne", "P_r", "P_s"):
            # Parameter counts of one layer; experts absent (0) in some layouts.
            values = rng.integers(1, 2**31, n).astype(float)
            if name != "P_ne":
                values[rng.random(n) < 0.2] = 0.0
            out[name] = values
        else:
            spec = SPECS[name]
            lo = 1 if spec.positive else 0
            out[name] = (rng.integers(lo, 17, n).astype(float) if spec.integer
                         else rng.uniform(lo, 16, n))
    return out


# ----------------------------------------------------------------- cp_traffic, Ulysses, MLA


def cp_traffic_scalar(*, s, b, a, h, dh, dhr, n_kv, t, cp, bytes_compute):
    """One layout at a time, as the planner does it: Python floats, ``max`` and an ``or`` fallback."""
    tp = max(1, t)
    share = (cp - 1) / cp
    head = dh or h / max(1, a)
    kv = n_kv * (2 * dh + dhr) / (2 * tp)  # MLA: mean of key (dh + dhr) and value (dh) widths
    per_token = a * (head + dhr) / tp + 2 * kv + a * head / tp
    return 2 * share * s / cp * b * per_token * bytes_compute


def cp_traffic_hand(v: Values) -> np.ndarray:
    a, dh, dhr, t, cp = v["a"], v["dh"], v["dhr"], v["t"], v["cp"]
    head = np.where(dh != 0, dh, v["h"] / a)
    kv = v["n_kv"] * (2 * dh + dhr) / (2 * t)
    per_token = a * (2 * head + dhr) / t + 2 * kv
    return 2 * (cp - 1) / (cp * cp) * v["s"] * v["b"] * per_token * v["bytes_compute"]


# ----------------------------------------------------------------- MoE layer: DP + TP + EP + CP

#: The registered per-layer formulas whose sum a MoE layer adds in the stage walk:
#: DP at ZeRO level 2 for both parameter groups, TP of a MoE layer, balanced EP, and the CP record's
#: comm_volume for Ulysses with MLA (0 at cp <= 1, as the walk counts it).
MOE_LAYER_PARTS = (
    "dp_zero2_zero2_layer_params",
    "tp_moe_layer_bytes",
    "ep_balanced_layer_bytes",
    "cp_ulysses_mla_record_comm_volume_bytes",
)

#: >>> MARKED PLACE: the name of a registered per-layer MoE sum, once the registry has one.
MOE_LAYER_REGISTERED: str | None = None


def moe_layer_formula() -> Formula:
    """The sum of ``MOE_LAYER_PARTS`` as one formula (mixed units, like the original's stage sum)."""
    parts = [registry.get(n) for n in MOE_LAYER_PARTS]
    return Formula(
        name="model_moe_layer_dp_tp_ep_cp_mixed",
        expr=sympy.Add(*[p.expr for p in parts]),
        dimension="model",
        algorithm="ulysses",
        unit="mixed",
        doc="DP + TP + EP + CP volume of one MoE layer per micro-batch (benchmark only).",
        source="sum of " + ", ".join(MOE_LAYER_PARTS),
    )


def moe_layer_scalar(*, P_ne, P_r, P_s, a, b, bytes_compute, comm_ep, comm_t, cp, dh, dhr, ep, h, hff_exp,
                     mb, n_attMM, n_chosen_exp, n_exp, n_ffMM, n_gather, n_kv, n_shared_exp, s, t, t_exp):
    """One layout at a time, one function per dimension as the planner's walk adds them."""
    experts = P_r + P_s
    dp = P_ne / (cp * t) + P_ne / t
    if experts != 0:
        dp += experts / (cp * t_exp * ep) + experts / max(ep, t_exp)
    tp = comm_t * (n_gather / 4 * h * h * bytes_compute * n_attMM
                   + n_gather / 4 * h * bytes_compute * n_ffMM * (n_exp / ep + n_shared_exp) * hff_exp) / cp
    moe = 0.0
    if ep > 1 and comm_ep != 0:
        moe = mb * n_chosen_exp * s * b / cp * (ep - 1) / ep * h * bytes_compute * 2 * comm_ep
    context = 0.0
    if cp > 1:
        context = cp_traffic_scalar(s=s, b=b, a=a, h=h, dh=dh, dhr=dhr, n_kv=n_kv, t=t, cp=cp,
                                    bytes_compute=bytes_compute)
    return dp + tp + moe + context


def moe_layer_hand(v: Values) -> np.ndarray:
    cp, t, ep, t_exp = v["cp"], v["t"], v["ep"], v["t_exp"]
    h, bc = v["h"], v["bytes_compute"]
    experts = v["P_r"] + v["P_s"]
    dp = v["P_ne"] * (1 + 1 / cp) / t + np.where(experts == 0, 0.0,
                                                 experts / (cp * ep * t_exp) + experts / np.maximum(ep, t_exp))
    tp = v["comm_t"] * v["n_gather"] / 4 * h * bc * (
        h * v["n_attMM"] + v["n_ffMM"] * v["hff_exp"] * (v["n_exp"] / ep + v["n_shared_exp"])) / cp
    moe = np.where((v["comm_ep"] == 0) | (ep <= 1), 0.0,
                   2 * v["mb"] * v["n_chosen_exp"] * v["s"] * v["b"] * v["comm_ep"] * h * bc * (ep - 1) / (cp * ep))
    context = np.where(cp <= 1, 0.0, cp_traffic_hand(v))
    return dp + tp + moe + context


# ----------------------------------------------------------------- timing


def _rates(ways: Mapping[str, Callable[[], object]], sizes: Mapping[str, int], repeat: int) -> dict[str, float]:
    """Layouts per second of each way: one warm-up round, then *repeat* rounds of one call per way."""
    times: dict[str, list[float]] = {w: [] for w in ways}
    for fn in ways.values():
        fn()  # warm up: first touch of buffers, caches, a kernel's compilation
    for _ in range(repeat):
        for way, fn in ways.items():
            start = time.perf_counter()
            fn()
            times[way].append(time.perf_counter() - start)
    return {w: sizes[w] / statistics.median(t) for w, t in times.items()}


def _agree(name: str, way: str, got: np.ndarray, want: np.ndarray) -> None:
    if not np.allclose(got, want, rtol=1e-9, atol=1e-9):
        i = int(np.argmax(~np.isclose(got, want, rtol=1e-9, atol=1e-9)))
        raise SystemExit(f"{name}: {way} disagrees with the generated function at layout {i}: "
                         f"{np.ravel(got)[i]!r} vs {np.ravel(want)[i]!r}")


def time_formula(formula: Formula, generated: Callable[..., np.ndarray], fused: Callable[..., np.ndarray] | None,
                 scalar: Callable[..., float], hand: Callable[[Values], np.ndarray], n: int, loop_n: int,
                 repeat: int, rng: np.random.Generator) -> dict[str, float | None]:
    """Rates (layouts per second) of every way on the same layouts; ``fused`` is None without numba."""
    args = formula.arguments
    values = layouts(args, n, rng)
    symbols = sorted(formula.expr.free_symbols, key=lambda x: x.name)
    lam = sympy.lambdify(symbols, formula.expr, modules="numpy", cse=True)
    positional = [values[s.name] for s in symbols]

    want = generated(**values)
    with np.errstate(divide="ignore", invalid="ignore"):  # lambdify's select evaluates dead branches
        _agree(formula.name, "lambdify_cse", lam(*positional), want)
    _agree(formula.name, "hand_numpy", hand(values), want)
    if fused is not None:
        _agree(formula.name, "fused", fused(**values), want)
    m = min(loop_n, n)
    rows = [dict(zip(args, row)) for row in zip(*(values[a][:m].tolist() for a in args))]
    _agree(formula.name, "scalar_loop", np.array([scalar(**r) for r in rows]), want[:m])

    def loop() -> None:
        for r in rows:
            scalar(**r)

    def lambdified() -> None:
        with np.errstate(divide="ignore", invalid="ignore"):
            lam(*positional)

    inputs = list(values.values())
    floor_out = np.empty(n)

    def memory_floor() -> None:
        for a in inputs:
            np.add.reduce(a)
        floor_out.fill(0.0)

    ways: dict[str, Callable[[], object]] = {
        "lambdify_cse": lambdified,
        "hand_numpy": lambda: hand(values),
        "generated": lambda: generated(**values),
        "memory_floor": memory_floor,
    }
    if fused is not None:
        ways["fused"] = lambda: fused(**values)
    rates: dict[str, float | None] = dict(_rates(ways, dict.fromkeys(ways, n), repeat))
    # The scalar loop is orders of magnitude slower: timed on its own, on its subset, fewer rounds.
    rates.update(_rates({"scalar_loop": loop}, {"scalar_loop": m}, max(1, repeat // 2)))
    rates.setdefault("fused", None)
    return rates


def _moe_generated(formula: Formula, workdir: Path, with_fused: bool
                   ) -> tuple[Callable[..., np.ndarray], Callable[..., np.ndarray] | None]:
    """The code generator's NumPy and fused functions for *formula*, from a package written under *workdir*."""
    if MOE_LAYER_REGISTERED is not None:
        import generated

        fused = getattr(importlib.import_module("generated.fused"), MOE_LAYER_REGISTERED) if with_fused else None
        return getattr(generated, MOE_LAYER_REGISTERED), fused
    package = "symcost_bench_generated"
    write_tree(render_tree([formula]), workdir / package)
    sys.path.insert(0, str(workdir))
    module = importlib.import_module(package)
    fused = getattr(importlib.import_module(f"{package}.fused"), formula.name) if with_fused else None
    return getattr(module, formula.name), fused


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="layouts per formula (default 1,000,000)")
    parser.add_argument("--repeat", type=int, default=7, help="timed rounds (one call per way each); the median counts")
    parser.add_argument("--loop-n", type=int, default=20_000, help="layouts the scalar loop runs on")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.n < 1 or args.repeat < 1 or args.loop_n < 1:
        parser.error("--n, --repeat and --loop-n must be positive")

    import generated
    from codegen.runtime.kernels import fused_available

    with_fused = fused_available()
    fused_cp = None
    if with_fused:
        import generated.fused

        fused_cp = generated.fused.cp_ulysses_mla_traffic_bytes
    else:
        print("numba is not installed: no fused column (pip install -e '.[fast]')", file=sys.stderr)
    rng = np.random.default_rng(args.seed)
    results: dict[str, dict[str, float | None]] = {}
    cp_formula = registry.get("cp_ulysses_mla_traffic_bytes")
    results[cp_formula.name] = time_formula(cp_formula, generated.cp_ulysses_mla_traffic_bytes, fused_cp,
                                            cp_traffic_scalar, cp_traffic_hand, args.n, args.loop_n,
                                            args.repeat, rng)
    moe = registry.get(MOE_LAYER_REGISTERED) if MOE_LAYER_REGISTERED else moe_layer_formula()
    with tempfile.TemporaryDirectory(prefix="symcost-bench-") as tmp:
        moe_generated, moe_fused = _moe_generated(moe, Path(tmp), with_fused)
        results[moe.name] = time_formula(moe, moe_generated, moe_fused, moe_layer_scalar, moe_layer_hand,
                                         args.n, args.loop_n, args.repeat, rng)

    ways = ("scalar_loop", "lambdify_cse", "hand_numpy", "generated", "fused", "memory_floor")
    width = max(len(n) for n in results)
    print(f"{'formula':<{width}}  " + "  ".join(f"{w:>13}" for w in ways) + "  gen/hand  fused/floor")
    for name, rates in results.items():
        cells = "  ".join(f"{rates[w]:>13,.0f}" if rates[w] is not None else f"{'n/a':>13}" for w in ways)
        floor_share = f"{rates['fused'] / rates['memory_floor']:>10.2f}x" if rates["fused"] else f"{'n/a':>11}"
        print(f"{name:<{width}}  {cells}  {rates['generated'] / rates['hand_numpy']:>7.2f}x  {floor_share}")
    print(f"(configurations per second; N = {args.n:,}, median of {args.repeat} alternated rounds; scalar "
          f"loop on {min(args.loop_n, args.n):,} layouts; memory_floor: every input read once, the output "
          "written once)")
    print(json.dumps({"n": args.n, "formulas": {
        k: {w: (round(v[w], 1) if v[w] is not None else None) for w in ways} for k, v in results.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
