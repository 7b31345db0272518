"""Wall time of `ascendctl bundle` on this host, as a user runs it (a fresh process each time).

    .venv/bin/python benchmarks/bench_bundle.py            # 3 runs
    .venv/bin/python benchmarks/bench_bundle.py --runs 5

Prints the median, the archive size and the slowest collectors of the last run. Goal: a few
seconds on a CPU host (no npu-smi, one engine interpreter asked for its versions and pip freeze).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASCENDCTL = Path(sys.executable).with_name("ascendctl")
GOAL_SECONDS = 5.0
# A user's Python caches bytecode; measure what users get.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    times: list[float] = []
    summary: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            out = Path(tmp) / f"b{i}.tar.gz"
            started = time.perf_counter()
            proc = subprocess.run(
                [str(ASCENDCTL), "bundle", "--json", "--out", str(out)],
                capture_output=True,
                text=True,
                cwd=ROOT,
                env=ENV,
            )
            times.append(time.perf_counter() - started)
            if proc.returncode != 0:
                print(proc.stderr, file=sys.stderr)
                return proc.returncode
            summary = json.loads(proc.stdout)
    median = statistics.median(times)
    slowest = sorted(summary["sources"], key=lambda s: s["duration_s"], reverse=True)[:4]
    print(f"bundle of this host: median {median:.2f} s over {args.runs} runs (goal < {GOAL_SECONDS:g} s)")
    print(f"archive {summary['bytes']} bytes, {summary['collected_bytes']} collected; statuses {summary['counts']}")
    for s in slowest:
        print(f"  {s['duration_s']:6.2f} s  {s['name']} ({s['status']})")
    return 0 if median < GOAL_SECONDS else 1


if __name__ == "__main__":
    raise SystemExit(main())
