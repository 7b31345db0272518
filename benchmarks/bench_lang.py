"""What Chinese output costs: `ascendctl triage` under LANG=zh_CN.UTF-8 against the same command
under LANG=C, in the same run, and the Chinese catalogues' own load time.

Each command runs as a user runs it, in a fresh process; the English and the Chinese runs take
turns (round-robin) so that a busy machine slows both alike, and medians are compared. Goals:
`--version` and `triage --json` read no catalogue, so they cost what English costs (ratio <= 1.10,
the noise of a shared host); a Chinese report reads three catalogues from the data cache
(ratio <= 1.25, and the catalogues load in <= 10 ms once cached).

    .venv/bin/python benchmarks/bench_lang.py             # 11 rounds
    .venv/bin/python benchmarks/bench_lang.py --runs 21
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "tests" / "fixtures" / "vllm" / "fail_kv_too_small.log"
# name -> (arguments of ascendctl, goal: Chinese / English)
COMMANDS = {
    "--version": (["--version"], 1.10),
    "triage --json": (["triage", "--json", "--fail-on", "never", str(LOG)], 1.10),
    "triage (report)": (["triage", "--fail-on", "never", str(LOG)], 1.25),
}
GOAL_CATALOGUE_MS = 10.0
LANGS = {"en": "C", "zh": "zh_CN.UTF-8"}
ENV = {
    k: v
    for k, v in os.environ.items()
    if k not in ("LC_ALL", "LC_MESSAGES", "LANG", "ASCENDCTL_LANG", "PYTHONDONTWRITEBYTECODE")
}
LOAD = (
    "import time, engine.triage\nfrom engine.data import load_yaml\nt = time.perf_counter()\n"
    "for n in ('rules.yaml', 'codes.yaml', 'faultcodes.yaml'):\n    load_yaml('engine.triage.zh', n)\n"
    "print((time.perf_counter() - t) * 1000)"
)


def timed(argv: list[str], lang: str) -> float:
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env={**ENV, "LANG": lang})
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11, help="rounds")
    args = parser.parse_args()
    cli = [sys.executable, "-m", "ascendctl"]
    for extra, _ in COMMANDS.values():  # warm the page, bytecode and data caches
        for lang in LANGS.values():
            timed([*cli, *extra], lang)
    times: dict[tuple[str, str], list[float]] = {(n, lang): [] for n in COMMANDS for lang in LANGS}
    for _ in range(args.runs):
        for name, (extra, _) in COMMANDS.items():
            for lang, value in LANGS.items():
                times[(name, lang)].append(timed([*cli, *extra], value))
    met = True
    print(f"{'command':<18} {'en':>8} {'zh':>8} {'zh/en':>6} {'goal':>6}")
    for name, (_, goal) in COMMANDS.items():
        en, zh = (statistics.median(times[(name, lang)]) for lang in LANGS)
        ok = zh / en <= goal
        met &= ok
        print(f"{name:<18} {en:7.3f}s {zh:7.3f}s {zh / en:6.2f} {goal:6.2f}  {'met' if ok else 'NOT met'}")

    with tempfile.TemporaryDirectory() as cache:  # the first read parses; the next ones hit the cache
        env = {**ENV, "ASCENDCTL_CACHE_DIR": cache}
        loads = [
            float(subprocess.run([sys.executable, "-c", LOAD], capture_output=True, text=True, env=env).stdout)
            for _ in range(5)
        ]
    cached = statistics.median(loads[1:])
    ok = cached <= GOAL_CATALOGUE_MS
    met &= ok
    print(
        f"catalogues (rules, codes, faultcodes): first read {loads[0]:.1f} ms (parse), then {cached:.1f} ms "
        f"from the cache (goal <= {GOAL_CATALOGUE_MS:.0f} ms)  {'met' if ok else 'NOT met'}"
    )
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print("all goals met" if met else "some goals NOT met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
