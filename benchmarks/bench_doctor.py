"""doctor's wall time against `python -m torch.utils.collect_env`, in the same run.

collect_env is what PyTorch and vLLM issue templates ask for; it imports torch. doctor answers a
larger question (CANN, driver, devices, the engine's versions) without importing anything heavy.
Both run as a user runs them, in a fresh process, several times; medians are compared.

    .venv/bin/python benchmarks/bench_doctor.py            # 5 runs of doctor, 2 of collect_env
    .venv/bin/python benchmarks/bench_doctor.py --runs 11

Goals: doctor under 0.5 s on a CPU host; doctor / collect_env <= 0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASCENDCTL = Path(sys.executable).with_name("ascendctl")
GOAL_SECONDS = 0.5
GOAL_RATIO = 0.1


# A user's Python caches bytecode; some sandboxes switch that off, which would charge every run
# for compiling ascendctl from source. Measure what users get.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(argv: list[str]) -> tuple[float, int]:
    started = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=ENV)
    return time.perf_counter() - started, proc.returncode


def median_of(argv: list[str], runs: int) -> tuple[float, list[float], int]:
    times, code = [], 0
    for _ in range(runs):
        seconds, code = timed(argv)
        times.append(seconds)
    return statistics.median(times), times, code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs", type=int, default=5, help="runs of doctor (collect_env runs half as often, at least 2)"
    )
    args = parser.parse_args()

    doctor_cmd = [
        str(ASCENDCTL) if ASCENDCTL.exists() else sys.executable,
        *([] if ASCENDCTL.exists() else ["-m", "ascendctl"]),
        "doctor",
    ]
    collect_cmd = [sys.executable, "-m", "torch.utils.collect_env"]

    timed(doctor_cmd)  # warm the page cache for both, so neither pays for a cold disk
    doctor_s, doctor_all, doctor_rc = median_of(doctor_cmd, args.runs)
    help_s, _, _ = median_of([*doctor_cmd[:-1], "--help"], args.runs)
    collect_s, collect_all, collect_rc = median_of(collect_cmd, max(2, args.runs // 2))
    if collect_rc != 0:
        print(f"collect_env failed (exit {collect_rc}): is torch installed in {sys.executable}?", file=sys.stderr)
        return 2

    # doctor's own share (probing and checks) versus the CLI start-up around it
    report = subprocess.run([*doctor_cmd, "--json"], capture_output=True, text=True, cwd=ROOT, env=ENV)
    try:
        checks_s = json.loads(report.stdout)["facts"]["elapsed_s"]
    except (ValueError, KeyError, TypeError):
        checks_s = None

    ratio = doctor_s / collect_s
    print(
        f"ascendctl doctor            median {doctor_s:6.3f} s  runs {', '.join(f'{t:.3f}' for t in doctor_all)}  (exit {doctor_rc})"
    )
    print(f"torch.utils.collect_env     median {collect_s:6.3f} s  runs {', '.join(f'{t:.3f}' for t in collect_all)}")
    print(
        f"ratio doctor / collect_env  {ratio:.3f}   (goal <= {GOAL_RATIO})  {'met' if ratio <= GOAL_RATIO else 'NOT met'}"
    )
    if checks_s is not None:
        print(
            f"  of which probes + checks  {checks_s:6.3f} s; `ascendctl --help` alone takes {help_s:.3f} s (CLI start-up)"
        )
    print(
        f"doctor wall time            {doctor_s:.3f} s (goal < {GOAL_SECONDS} s)  {'met' if doctor_s < GOAL_SECONDS else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
