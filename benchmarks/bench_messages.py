"""What the program's messages in Chinese cost (gettext, engine/i18n.py): each command under
LANG=zh_CN.UTF-8 against the same command under LANG=C, in the same run, and the compiled
catalogue's own load time.

Commands run as a user runs them, each in a fresh process, English and Chinese taking turns so a
busy machine slows both alike; medians are compared. Goals: `--version` and `doctor --json` read
no catalogue, so they cost what English costs (zh/en <= 1.10, the noise of a shared host); `--help`
and `doctor` in Chinese read the catalogue once (zh/en <= 1.15), which loads in <= 5 ms.

    .venv/bin/python benchmarks/bench_messages.py             # 11 rounds
    .venv/bin/python benchmarks/bench_messages.py --runs 21
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOST = str(ROOT / "tests" / "fixtures" / "hosts" / "setenv-not-sourced")
# name -> (arguments of ascendctl, goal for the Chinese / English ratio)
COMMANDS = {
    "--version": (["--version"], 1.10),
    "--help": (["--help"], 1.15),
    "doctor --json": (["doctor", "--json", "--root", HOST], 1.10),
    "doctor": (["doctor", "--root", HOST], 1.15),
}
GOAL_LOAD_MS = 5.0
LANGS = {"en": "C", "zh": "zh_CN.UTF-8"}
ENV = {k: v for k, v in os.environ.items() if k not in ("LC_ALL", "LC_MESSAGES", "LANG", "ASCENDCTL_LANG")}
LOAD = (
    "import time\nfrom engine import i18n\ni18n.set_language('zh')\nt = time.perf_counter()\n"
    "i18n._('ok')\nprint((time.perf_counter() - t) * 1000)"
)


def run_once(argv: list[str], lang: str) -> float:
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env={**ENV, "LANG": lang})
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11, help="rounds")
    args = parser.parse_args()
    cli = [sys.executable, "-m", "ascendctl"]
    for extra, _goal in COMMANDS.values():  # warm the page and bytecode caches
        for lang in LANGS.values():
            run_once([*cli, *extra], lang)
    times: dict[tuple[str, str], list[float]] = {(n, lang): [] for n in COMMANDS for lang in LANGS}
    for _round in range(args.runs):
        for name, (extra, _goal) in COMMANDS.items():
            for lang, value in LANGS.items():
                times[(name, lang)].append(run_once([*cli, *extra], value))
    met = True
    print(f"{'command':<16} {'en':>8} {'zh':>8} {'zh/en':>6} {'goal':>6}")
    for name, (_extra, goal) in COMMANDS.items():
        en, zh = (statistics.median(times[(name, lang)]) for lang in LANGS)
        ok = zh / en <= goal
        met &= ok
        print(f"{name:<16} {en:7.3f}s {zh:7.3f}s {zh / en:6.2f} {goal:6.2f}  {'met' if ok else 'NOT met'}")
    loads = [
        float(subprocess.run([sys.executable, "-c", LOAD], capture_output=True, text=True, cwd=ROOT, env=ENV).stdout)
        for _ in range(7)
    ]
    load = statistics.median(loads)
    ok = load <= GOAL_LOAD_MS
    met &= ok
    print(
        f"catalogue load (gettext, zh_CN .mo): {load:.2f} ms (goal <= {GOAL_LOAD_MS:.0f} ms)  {'met' if ok else 'NOT met'}"
    )
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print("all goals met" if met else "some goals NOT met")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
