"""``symcost models [--json]``: the bundled models, one line each (name, layers, hidden, heads, experts)."""

from __future__ import annotations

import argparse

from . import COMMANDS
from ..configs import load_model, model_names
from ..runtime.inputs import json_text

__all__ = ["register", "run", "rows"]

COLUMNS = (("name", "model"), ("layers", "layers"), ("hidden", "hidden"), ("heads", "heads"),
           ("kv_heads", "kv heads"), ("experts", "experts"), ("seq_len", "seq len"))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help=COMMANDS["models"],
                       description="List the bundled model configs (usable as --model NAME): body layers (plus "
                                   "MTP layers), hidden width, attention and key/value heads, routed experts "
                                   "(1 for a dense model) and sequence length.")
    p.add_argument("--json", action="store_true", help="print one JSON list")
    p.set_defaults(func=run)


def rows() -> list[dict[str, object]]:
    """One row per bundled model, by :data:`COLUMNS`."""
    out = []
    for name in model_names():
        m = load_model(name)
        out.append({"name": name, "layers": m.n_lay, "mtp_layers": m.n_mtp, "hidden": m.h, "heads": m.a,
                    "kv_heads": m.n_kv, "experts": m.n_exp, "seq_len": m.s})
    return out


def run(args: argparse.Namespace) -> int:
    table = rows()
    if args.json:
        print(json_text(table))
        return 0
    cells = [[f"{r['layers']}+{r['mtp_layers']} MTP" if key == "layers" and r["mtp_layers"] else str(r[key])
              for key, _ in COLUMNS] for r in table]
    widths = [max(len(title), *(len(row[i]) for row in cells)) for i, (_, title) in enumerate(COLUMNS)]
    print("  ".join(f"{title:<{w}}" if i == 0 else f"{title:>{w}}" for i, ((_, title), w) in
                    enumerate(zip(COLUMNS, widths))))
    for row in cells:
        print("  ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(row, widths))))
    print("layers: body layers (+ multi-token-prediction layers); experts: routed experts (1: dense); "
          "seq len in tokens. Use a name as --model NAME.")
    return 0
