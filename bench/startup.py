"""How long does a cold start take, beside ``python3 -c "import numpy"``?

Each way runs in a fresh interpreter, bytecode caching as the environment has it (with
``PYTHONDONTWRITEBYTECODE`` set and no ``__pycache__`` left by an earlier run, every module imported
is compiled from source on each start: hence ``generated.FORMULAS`` is a JSON file read on first
use, and a model's stage terms sit in one module per variant, so a pricer compiles only its own),
alternated round by round so that a slow spell of the machine hits each alike:

* ``import_numpy``: ``python3 -c "import numpy"``, the floor every way pays;
* ``price_one_each``: import the pricer and price one layout (each model file's own) of each
  bundled model and, where ``../shared/models`` is beside the repository, of each HyperParallel
  YAML there, checking that SymPy was never imported;
* ``help``, ``eval``, ``sensitivity``: the console commands ``symcost --help``, ``symcost eval``
  on one layout and ``symcost sensitivity`` on it (``python3 -m codegen.cli …``).

Prints a table of median seconds and their ratio to ``import_numpy``, then one JSON line::

    {"rounds": R, "seconds": {WAY: S, …}, "ratio_to_numpy": {WAY: X, …}}

Usage: ``python3 bench/startup.py [--rounds 7]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PRICE_ONE_EACH = f"""
import sys
from pathlib import Path
from codegen.configs.models import model_names
from codegen.pricing.pricer import StagePricer
shared = Path({str(ROOT.parent / "shared" / "models")!r})
for name in [*model_names(), *map(str, sorted(shared.glob("*.yaml")))]:
    pricer = StagePricer(name, device="A2")
    pricer(**{{key: [getattr(pricer.model.layout, key)] for key in ("d", "t", "p", "m", "cp", "ep", "b")}})
assert "sympy" not in sys.modules, "sympy imported"
"""

WAYS = {
    "import_numpy": [sys.executable, "-c", "import numpy"],
    "price_one_each": [sys.executable, "-c", PRICE_ONE_EACH],
    "help": [sys.executable, "-m", "codegen.cli", "--help"],
    "eval": [sys.executable, "-m", "codegen.cli", "eval", "--model", "qwen3-72b",
             "--layout", "d=32,t=4,p=8,cp=1,ep=1,m=144,b=1"],
    "sensitivity": [sys.executable, "-m", "codegen.cli", "sensitivity", "--model", "qwen3-72b",
                    "--layout", "d=32,t=4,p=8,m=144"],
}


def _seconds(command: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])}… failed:\n{done.stderr}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    for _ in range(args.rounds):
        for way, command in WAYS.items():
            times[way].append(_seconds(command))
    median = {way: statistics.median(values) for way, values in times.items()}
    floor = median["import_numpy"]
    print(f"cold starts, median of {args.rounds} alternated rounds")
    print(f"{'way':<16} {'seconds':>9} {'x numpy':>8}")
    for way, seconds in median.items():
        print(f"{way:<16} {seconds:>9.3f} {seconds / floor:>8.2f}")
    print(json.dumps({"rounds": args.rounds, "seconds": {w: round(s, 4) for w, s in median.items()},
                      "ratio_to_numpy": {w: round(s / floor, 2) for w, s in median.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
