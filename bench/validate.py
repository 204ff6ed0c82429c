"""How long do ``symcost validate collectives|memory|step-time`` take on large measurement files?

Writes a CSV of N rows for each validation by repeating the shipped rows (the published figures varied a
little per row, so that no two rows are the same text, while the configurations the model prices repeat,
as they do in real sweeps), runs the command on it in a fresh process and reports the seconds. Nothing
large is committed: the files go to a temporary directory (``--keep DIR`` to keep them).

    python3 bench/validate.py                       # collectives --curves 10**6, memory 10**6, step-time 10**5
    python3 bench/validate.py --which memory --rows 1000

Prints one line per run and then one JSON line ``{"runs": [{"which", "rows", "seconds", "status"}]}``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "codegen" / "validation" / "data"

#: The shipped file each validation reads, the column varied per row, and the default row count.
SOURCES = {
    "collectives": ("nccl_single_node.csv", "time_us", 10**6, ["--curves"]),
    "memory": ("megatron_memory_figure1.csv", "activations_GiB_per_gpu", 10**6, []),
    "step-time": ("megatron_iteration_times.csv", "measured_iteration_s", 10**5, []),
}


def write_rows(which: str, rows: int, path: Path) -> None:
    """*rows* rows for *which*: the shipped rows over and over, the measured column scaled by 1 + k·1e-9."""
    name, column, _default, _options = SOURCES[which]
    with (DATA / name).open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        header, shipped = list(reader.fieldnames or ()), list(reader)
    out = io.StringIO()
    writer = csv.DictWriter(out, header, lineterminator="\n")
    writer.writeheader()
    for k in range(rows):
        row = dict(shipped[k % len(shipped)])
        row[column] = repr(float(row[column]) * (1 + (k // len(shipped)) * 1e-9))
        writer.writerow(row)
    path.write_text(out.getvalue(), encoding="utf-8")


def run(which: str, path: Path) -> tuple[float, int]:
    """Seconds and exit status of ``symcost validate WHICH --data PATH`` in a fresh process."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "codegen.cli", "validate", which, "--data", str(path),
                           *SOURCES[which][3]], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        print(done.stderr.strip(), file=sys.stderr)
    return seconds, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--which", choices=sorted(SOURCES), action="append", help="default: all three")
    parser.add_argument("--rows", type=int, default=None, help="rows per file (default: per validation, above)")
    parser.add_argument("--keep", type=Path, default=None, help="write the files here and keep them")
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        for which in args.which or list(SOURCES):
            rows = args.rows or SOURCES[which][2]
            path = folder / f"{which}_{rows}.csv"
            write_rows(which, rows, path)
            seconds, status = run(which, path)
            print(f"validate {which:<12} {rows:>9,} rows  {seconds:8.2f} s  exit {status}")
            runs.append({"which": which, "rows": rows, "seconds": round(seconds, 3), "status": status})
    print(json.dumps({"runs": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
