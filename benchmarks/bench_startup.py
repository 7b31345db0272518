"""How fast the CLI answers: `--version`, `--help` and `doctor` against bare Python start-up and
against `python -m torch.utils.collect_env`, all in the same run.

Bare Python (`python -c pass`, the same interpreter and environment) is the floor no Python CLI
can beat, so the goals are ratios to it: on a machine where Python starts in 0.035 s they read
`--version` <= 0.10 s, `--help` <= 0.15 s, doctor <= 0.15 s. collect_env is what PyTorch and
vLLM issue templates ask for (it imports torch); doctor answers a larger question without
importing anything heavy: goal doctor / collect_env <= 0.06. Each command runs as a user runs it,
in a fresh process; the commands take turns (round-robin) so that a busy machine slows them all
alike, and medians are compared.

    .venv/bin/python benchmarks/bench_startup.py             # 9 rounds, collect_env in 3
    .venv/bin/python benchmarks/bench_startup.py --runs 21
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASCENDCTL = Path(sys.executable).with_name("ascendctl")
BARE_REFERENCE_S = 0.035  # bare Python where the goals were set, to print them in seconds
# name -> (arguments of ascendctl, goal as a multiple of bare Python's start-up)
COMMANDS = {
    "--version": (["--version"], 0.10 / BARE_REFERENCE_S),
    "--help": (["--help"], 0.15 / BARE_REFERENCE_S),
    "doctor": (["doctor"], 0.15 / BARE_REFERENCE_S),
}
GOAL_COLLECT_ENV = 0.06

# A user's Python caches bytecode; some sandboxes switch that off, which would charge every run
# for compiling ascendctl from source. Measure what users get.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


CPU: dict[str, list[float]] = {}  # CPU seconds (user + system, children included) per command


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], name: str = "") -> tuple[float, int]:
    cpu, started = _cpu(), time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=ENV)
    wall = time.perf_counter() - started
    CPU.setdefault(name, []).append(_cpu() - cpu)
    return wall, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="rounds (collect_env runs in a third of them, at least 2)")
    parser.add_argument("--no-collect-env", action="store_true", help="skip collect_env (it takes seconds)")
    args = parser.parse_args()

    cli = [str(ASCENDCTL)] if ASCENDCTL.exists() else [sys.executable, "-m", "ascendctl"]
    argvs = {"python -c pass": [sys.executable, "-c", "pass"]}
    argvs.update({f"ascendctl {name}": [*cli, *extra] for name, (extra, _) in COMMANDS.items()})
    collect = [sys.executable, "-m", "torch.utils.collect_env"]

    for argv in argvs.values():  # warm the page cache and the bytecode cache
        timed(argv)
    times: dict[str, list[float]] = {name: [] for name in argvs}
    codes: dict[str, int] = {}
    collect_times: list[float] = []
    every = max(1, args.runs // max(2, args.runs // 3))
    for i in range(args.runs):
        for name, argv in argvs.items():
            seconds, codes[name] = timed(argv, name)
            times[name].append(seconds)
        if not args.no_collect_env and i % every == 0:
            seconds, code = timed(collect, "collect_env")
            if code != 0:
                print(f"collect_env failed (exit {code}): is torch installed in {sys.executable}?", file=sys.stderr)
                return 2
            collect_times.append(seconds)

    med = {name: statistics.median(ts) for name, ts in times.items()}
    bare = med["python -c pass"]
    print(f"{'command':<24} {'median':>8} {'x bare':>7} {'goal':>6}  runs (s)")
    print(
        f"{'python -c pass':<24} {bare:7.3f}s {1.0:6.2f}x {'':>6}  {', '.join(f'{t:.3f}' for t in times['python -c pass'])}"
    )
    met = True
    for name, (_, goal) in COMMANDS.items():
        key = f"ascendctl {name}"
        ratio = med[key] / bare
        ok = ratio <= goal
        met &= ok
        print(
            f"{key:<24} {med[key]:7.3f}s {ratio:6.2f}x {goal:5.2f}x  {', '.join(f'{t:.3f}' for t in times[key])}"
            f"  {'met' if ok else 'NOT met'}{'' if codes[key] == 0 else f' (exit {codes[key]})'}"
        )
    if collect_times:
        collect_s = statistics.median(collect_times)
        ratio = med["ascendctl doctor"] / collect_s
        met &= ratio <= GOAL_COLLECT_ENV
        print(
            f"{'collect_env':<24} {collect_s:7.3f}s {collect_s / bare:6.1f}x {'':>6}  {', '.join(f'{t:.3f}' for t in collect_times)}"
        )
        print(
            f"doctor / collect_env     {ratio:.3f} (goal <= {GOAL_COLLECT_ENV})  {'met' if ratio <= GOAL_COLLECT_ENV else 'NOT met'}"
        )
        # on a busy host collect_env's wall time (seconds of torch imports) stretches more than
        # doctor's: the CPU-time ratio is the steadier figure, printed beside the goal's
        cpu_ratio = statistics.median(CPU["ascendctl doctor"]) / statistics.median(CPU["collect_env"])
        print(f"doctor / collect_env CPU {cpu_ratio:.3f} (user + sys of each)")

    # CPU time does not grow when other processes share the cores: a steadier figure on a busy host
    cpu_bare = statistics.median(CPU["python -c pass"])
    print(
        "CPU time (user + sys) x bare: "
        + ", ".join(f"{n} {statistics.median(CPU[f'ascendctl {n}']) / cpu_bare:.2f}x" for n in COMMANDS)
        + f" (bare {cpu_bare:.3f} s)"
    )

    # doctor's own share (probes and checks) versus the CLI start-up around it
    report = subprocess.run([*argvs["ascendctl doctor"], "--json"], capture_output=True, text=True, cwd=ROOT, env=ENV)
    try:
        print(f"doctor's probes + checks {json.loads(report.stdout)['facts']['elapsed_s']:.3f} s of its wall time")
    except (ValueError, KeyError, TypeError):
        pass
    print(
        f"goals at {BARE_REFERENCE_S} s bare Python: "
        + ", ".join(f"{n} <= {g * BARE_REFERENCE_S:.2f} s" for n, (_, g) in COMMANDS.items())
    )
    print("all goals met" if met else "some goals NOT met")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
