"""How fast does a searcher price whole layouts? Scalar per-layer walk vs the generated stage evaluator.

On the same N random valid layouts of one dense model (default ``qwen3-72b``,
FLOP path, no FSDP, the model file's recompute plan, device A2):

* ``scalar_walk``: the original's way (``estimate_from_mem_comm``, FORMULAS.md
  §8): one layout at a time, lay out its stages (``build_stages``, which checks
  the layout), derive its config (the rules of ``derive_fields`` on a batch of
  one, without checking the layout a second time), then visit every layer of
  every stage and add the per-layer DP, TP, EP and CP volumes computed in
  plain Python floats, then convert each stage. Run on a subset
  (``--walk-n``) and reported as a rate.
* ``generated``: ``codegen.pricing.pricer.StagePricer`` on the N layouts as arrays:
  from the arrays to the batch, every layout checked, the fields the
  specialised coefficient sums read derived in NumPy, the sums evaluated by
  generated code once per layout, the stages formed from per-pipeline weight
  tables (see ``codegen/search.py``).

Both ways check each layout once and return each layout's bottleneck stage.
Before timing, their bottleneck values are compared on the subset (relative
1e-9). The two are then timed in alternation, ``--repeat`` times each, and
each rate is the median, so that a slow spell of the machine hits both alike.
Prints a table, then one JSON line::

    {"n": N, "rates": {"scalar_walk": R, "generated": R}}

with rates in layouts per second.

Usage: ``python3 bench/model.py [--n 1000000] [--walk-n 300] [--repeat 5] [--model qwen3-72b] [--seed 0]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from codegen.configs.layouts import Layout, LayoutBatch, build_stages, derive_fields_batch, parse_layout  # noqa: E402
from codegen.configs.models import ModelConfig, load_model  # noqa: E402
from codegen.pricing.pricer import StagePricer  # noqa: E402

DEVICE_PER_NODE = 8  # A2's level-0 bound, what the original's conversion divides by


# ----------------------------------------------------------------- the scalar walk, in the original's style

def _params_dense_standard(c: dict) -> float:
    """EvalBody.num_params_layer for a dense layer with standard (non-MLA) attention: P_ne."""
    head = c["dh"] or c["h"] / c["a"]
    d_q = c["a"] * head
    q = 2 if c["attn_output_gate"] else 1
    quarter = c["n_attMM"] / 4
    qkv_bias = 1 if c["qkv_bias"] else 0
    attn = (quarter * (q * c["h"] * d_q + qkv_bias * q * d_q)
            + quarter * (c["h"] * d_q + (c["h"] if c["o_bias"] else 0))
            + 2 * quarter * (c["h"] * c["n_kv"] * head + qkv_bias * c["n_kv"] * head)
            + c["attn_extra_p"])
    vectors = c["layer_norms"] * (2 if c["norm_bias"] else 1)
    norm = vectors * c["h"] + c["n_qknorm"] * 2 * head
    bias = ((c["n_ffMM"] - 1) * c["hff"] + c["h"]) if c["mlp_bias"] else 0
    ffn = (c["n_exp"] + c["n_shared_exp"]) * (c["n_ffMM"] * c["hff"] * c["h"] + bias)
    return attn + norm + ffn


def _dp_layer(c: dict) -> float:
    p = _params_dense_standard(c)
    if c["comm_d_non_exp"] == 2:
        return p / (c["cp"] * c["t"]) + p / c["t"]
    if c["comm_d_non_exp"] == 3:
        return p / c["t"]
    return 0.0


def _tp_layer(c: dict, node: str) -> float:
    kept = 1 if node != "SEL_REC_LAYER" else c["rec_op"]["gather"]
    quarter = c["n_gather"] / 4
    volume = quarter * c["s"] * c["b"] * c["h"] + quarter * c["s"] * c["b"] * c["hff"]
    return kept * c["comm_t"] * volume / c["cp"]


def _cp_layer(c: dict) -> float:
    cp = c["cp"]
    if cp <= 1:
        return 0.0
    t = max(1, c["t"])
    if c["n_kv"] < c["a"]:
        heads = min(c["n_kv"] if c["n_kv"] > 0 else c["a"], c["a"])
        width = heads * c["dh"] / t
    else:
        width = c["h"] / t
    return 2 * (cp - 1) / cp * c["s"] * c["b"] * 2 * width * c["bytes_compute"]


def one_layout_fields(model: ModelConfig, layout: Layout) -> dict:
    """``derive_fields(model, layout)`` without its check of the layout: ``build_stages`` checks it.

    The same rules on a batch of one, as ``derive_fields`` runs them, read back as floats.
    Checking each layout once, as the generated path does, keeps the comparison fair.
    """
    fields = derive_fields_batch(model, LayoutBatch.from_layouts([layout]), validated=True)
    return {name: float(value[0]) if isinstance(value, np.ndarray) else value for name, value in fields.items()}


def scalar_walk(model: ModelConfig, layout: Layout) -> float:
    """The bottleneck stage's total of one layout, walked layer by layer (dense model, ep = 1, FLOP path)."""
    stages = build_stages(model, layout)  # checks the layout
    c = one_layout_fields(model, layout)
    n_lay, seen = int(c["n_lay"]), 0
    worst = 0.0
    for stage in stages:  # one chunk per stage here (vp = 1), so model order is stage order
        dp = tp = cp = 0.0
        for chunk in stage:
            for layer in chunk:
                node = layer
                body = layer not in ("EMBEDDING_LAYER", "OUTPUT_LAYER")
                if body and seen < n_lay:
                    node = "NOT_REC_LAYER"
                    dp += _dp_layer(c)
                if body:
                    seen += 1
                    cp += _cp_layer(c)
                tp += _tp_layer(c, node)
        tp *= max(1, int(c["t"]) // DEVICE_PER_NODE) * (1 - c["comm_tp_overlap"])
        cp *= max(1, int(c["cp"]) // DEVICE_PER_NODE)
        dp *= 1 - c["comm_dp_overlap"]
        worst = max(worst, dp + tp + cp)
    return worst


# ----------------------------------------------------------------- layouts

def random_layouts(model: ModelConfig, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """N random layouts that the model admits (t divides heads and KV heads, p at most the layers)."""
    ts = np.array([t for t in (1, 2, 4, 8) if model.a % t == 0 and (model.n_kv % t == 0 or t % model.n_kv == 0)])
    ps = np.array([p for p in (1, 2, 4, 8, 16) if p <= model.n_lay])
    return {
        "d": rng.choice([1, 2, 4, 8, 16, 32, 64], n),
        "t": rng.choice(ts, n),
        "p": rng.choice(ps, n),
        "cp": rng.choice([1, 2, 4, 8, 16], n),
        "m": rng.integers(1, 257, n),
        "b": rng.choice([1, 2, 4], n),
    }


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="layouts for the generated evaluator")
    ap.add_argument("--walk-n", type=int, default=300, help="layouts for the scalar walk (a subset)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--model", default="qwen3-72b")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    model = load_model(args.model)
    if model.is_moe:
        raise SystemExit(f"--model: the scalar walk here covers dense models; {args.model} routes to experts")
    rng = np.random.default_rng(args.seed)
    arrays = random_layouts(model, args.n, rng)
    pricer = StagePricer(model, device="A2")

    def generated() -> np.ndarray:
        return pricer(**arrays).bottleneck

    want = generated()  # also compiles the coefficient evaluators before timing
    k = min(args.walk_n, args.n)
    subset = [_layout(model, {key: int(arrays[key][i]) for key in arrays}) for i in range(k)]
    walked = np.array([scalar_walk(model, lay) for lay in subset])
    np.testing.assert_allclose(walked, want[:k], rtol=1e-9, err_msg="scalar walk and generated disagree")

    walks, gens = [], []
    for _ in range(args.repeat):  # alternately, so that both ways see the same state of the machine
        walks.append(_seconds(lambda: [scalar_walk(model, lay) for lay in subset]))
        gens.append(_seconds(generated))
    rates = {"scalar_walk": k / statistics.median(walks), "generated": args.n / statistics.median(gens)}
    print(f"model {args.model}, {args.n:,} random layouts (scalar walk on {k:,} of them), device A2, FLOP path")
    print(f"{'way':<12} {'layouts/s':>16}")
    for way, rate in rates.items():
        print(f"{way:<12} {rate:>16,.0f}")
    print(f"generated / scalar_walk: {rates['generated'] / rates['scalar_walk']:,.0f}x")
    print(json.dumps({"n": args.n, "rates": {w: round(r, 1) for w, r in rates.items()}}))
    return 0


def _layout(model: ModelConfig, values: dict[str, int]) -> Layout:
    text = ",".join(f"{k}={v}" for k, v in values.items())
    return parse_layout(text, model.layout)


if __name__ == "__main__":
    sys.exit(main())
