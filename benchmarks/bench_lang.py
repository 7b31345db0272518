"""What Chinese output costs: each command under LANG=zh_CN.UTF-8 against the same command under
LANG=C, in the same run, and the Chinese catalogues' own load time.

Two kinds of Chinese text, two groups of commands (docs/README.md, "Language"):
- `messages`: the program's own messages, a compiled gettext catalogue (engine/i18n.py) read once
  on the first Chinese message. `--version` and `doctor --json` read none, so they cost what
  English costs (zh/en <= 1.10, the noise of a shared host); `--help`, a command's `--help` and a
  doctor report read it once (zh/en <= 1.15); it loads in <= 5 ms.
- `triage`: the knowledge base's texts (engine/triage/zh/, YAML read through the data cache).
  `--version` and `triage --json` read none (zh/en <= 1.10); a Chinese report reads three
  catalogues (zh/en <= 1.25), which load in <= 10 ms once cached.

Each command runs as a user runs it, in a fresh process; the English and the Chinese runs take
turns (round-robin) so that a busy machine slows both alike, and medians are compared.

    .venv/bin/python benchmarks/bench_lang.py                    # both groups, 11 rounds
    .venv/bin/python benchmarks/bench_lang.py --group messages   # the gettext catalogue only
    .venv/bin/python benchmarks/bench_lang.py --group triage --runs 21
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
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
LOG = str(ROOT / "tests" / "fixtures" / "vllm" / "fail_kv_too_small.log")
HOST = str(ROOT / "tests" / "fixtures" / "hosts" / "setenv-not-sourced")
# group -> name -> (arguments of ascendctl, goal for the Chinese / English ratio)
GROUPS = {
    "messages": {
        "--version": (["--version"], 1.10),
        "--help": (["--help"], 1.15),
        "serve --help": (["serve", "--help"], 1.15),
        "doctor --json": (["doctor", "--json", "--root", HOST], 1.10),
        "doctor": (["doctor", "--root", HOST], 1.15),
    },
    "triage": {
        "--version": (["--version"], 1.10),
        "triage --json": (["triage", "--json", "--fail-on", "never", LOG], 1.10),
        "triage (report)": (["triage", "--fail-on", "never", LOG], 1.25),
    },
}
GOAL_MO_MS = 5.0  # the gettext catalogue (messages)
GOAL_YAML_MS = 10.0  # the knowledge base's catalogues, from the data cache (triage)
LANGS = {"en": "C", "zh": "zh_CN.UTF-8"}
# What a user's shell has: no language forced, and bytecode cached (some sandboxes switch that off).
ENV = {
    k: v
    for k, v in os.environ.items()
    if k not in ("LC_ALL", "LC_MESSAGES", "LANG", "ASCENDCTL_LANG", "PYTHONDONTWRITEBYTECODE")
}
LOAD_MO = (
    "import time\nfrom engine import i18n\ni18n.set_language('zh')\nt = time.perf_counter()\n"
    "i18n._('ok')\nprint((time.perf_counter() - t) * 1000)"
)
LOAD_YAML = (
    "import time, engine.triage\nfrom engine.data import load_yaml\nt = time.perf_counter()\n"
    "for n in ('rules.yaml', 'codes.yaml', 'faultcodes.yaml'):\n    load_yaml('engine.triage.zh', n)\n"
    "print((time.perf_counter() - t) * 1000)"
)


def timed(argv: list[str], lang: str) -> float:
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env={**ENV, "LANG": lang})
    return time.perf_counter() - started


def load_ms(code: str, env: dict[str, str]) -> float:
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env).stdout)


def catalogue_mo() -> tuple[str, float, float]:
    load = statistics.median(load_ms(LOAD_MO, ENV) for _ in range(7))
    return f"catalogue load (gettext, zh_CN .mo): {load:.2f} ms", load, GOAL_MO_MS


def catalogues_yaml() -> tuple[str, float, float]:
    with tempfile.TemporaryDirectory() as cache:  # the first read parses; the next ones hit the cache
        env = {**ENV, "ASCENDCTL_CACHE_DIR": cache}
        loads = [load_ms(LOAD_YAML, env) for _ in range(5)]
    cached = statistics.median(loads[1:])
    what = f"catalogues (rules, codes, faultcodes): first read {loads[0]:.1f} ms (parse), then {cached:.1f} ms from the cache"
    return what, cached, GOAL_YAML_MS


LOADS: dict[str, Callable[[], tuple[str, float, float]]] = {"messages": catalogue_mo, "triage": catalogues_yaml}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11, help="rounds")
    parser.add_argument("--group", choices=[*GROUPS, "all"], default="all", help="which commands (default: all)")
    args = parser.parse_args()
    groups = list(GROUPS) if args.group == "all" else [args.group]
    commands = {name: spec for group in groups for name, spec in GROUPS[group].items()}
    cli = [sys.executable, "-m", "ascendctl"]
    for extra, _goal in commands.values():  # warm the page, bytecode and data caches
        for lang in LANGS.values():
            timed([*cli, *extra], lang)
    times: dict[tuple[str, str], list[float]] = {(n, lang): [] for n in commands for lang in LANGS}
    for _round in range(args.runs):
        for name, (extra, _goal) in commands.items():
            for lang, value in LANGS.items():
                times[(name, lang)].append(timed([*cli, *extra], value))
    met = True
    print(f"{'command':<18} {'en':>8} {'zh':>8} {'zh/en':>6} {'goal':>6}")
    for name, (_extra, goal) in commands.items():
        en, zh = (statistics.median(times[(name, lang)]) for lang in LANGS)
        ok = zh / en <= goal
        met &= ok
        print(f"{name:<18} {en:7.3f}s {zh:7.3f}s {zh / en:6.2f} {goal:6.2f}  {'met' if ok else 'NOT met'}")
    for group in groups:
        what, ms, goal = LOADS[group]()
        ok = ms <= goal
        met &= ok
        print(f"{what} (goal <= {goal:.0f} ms)  {'met' if ok else 'NOT met'}")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print("all goals met" if met else "some goals NOT met")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
