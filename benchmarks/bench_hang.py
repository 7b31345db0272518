"""The hang verdict on the real CPU engine: no false verdict under load and idle, the time from a
hang to the verdict and from the verdict to ready again, and what the probes cost an idle engine.

    .venv/bin/python benchmarks/bench_hang.py [--idle S] [--long-doc S] [--load S] [--fast]

One `ascendctl serve -p cpu-tiny --restart on-failure` run (run it under the engine lock):

1. idle for --idle seconds (default 3600): hang verdicts (goal 0), probes sent, and the CPU time
   of the engine's process tree per minute, against its own floor in the same minutes (the median
   second: what the probes and the watch's /metrics reads add on top, per probe);
2. the long-doc scenario of `ascendctl bench` for --long-doc seconds (default 0: skipped): its
   longest prefills (clamped to the profile's max_model_len); hang verdicts (goal 0);
3. saturated for --load seconds (default 600): 16 streams against max_num_seqs 8, so the queue
   stays long while tokens flow; hang verdicts (goal 0), probes sent (goal 0), and when each was;
4. the EngineCore is SIGSTOPped once 4 streams' requests show in /metrics (running or waiting,
   15 s at most): seconds to the verdict, against the bound the thresholds give
   (hang_probe_interval_s + hang_probe_failures x (interval + timeout) + a tick); seconds from the
   verdict to ready again, against the first start's time to ready in the same run (goal: the
   ratio <= 1.5: a restart costs a start, the grace period and the backoff).

Probes are counted by the engine itself: its `vllm:request_params_max_tokens` histogram's
`le="1.0"` bucket (a probe asks for one token; the bench's own requests for 64 or more).

--fast shortens the thresholds (--set diagnostics.hang_*) so the whole run takes minutes; its
figures then say how the mechanism behaves, not the defaults' latency.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil

from engine.health.hang import HangLimits, probe_timeout, ttft_max
from engine.metrics.prom import parse_metrics

ASCENDCTL = str(Path(sys.executable).with_name("ascendctl"))
FAST = {"hang_probe_interval_s": 5, "hang_probe_timeout_s": 5, "hang_probe_failures": 2, "hang_progress_s": 20}
DEFAULTS = {"hang_probe_interval_s": 30, "hang_probe_timeout_s": 10, "hang_probe_failures": 3}
TICK_S = 5.0
RESTART_GOAL = 1.5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Serve:
    def __init__(self, port: int, sets: dict[str, float]) -> None:
        argv = [ASCENDCTL, "--json", "serve", "-p", "cpu-tiny", "--set", f"server.port={port}"]
        for k, v in sets.items():
            argv += ["--set", f"diagnostics.{k}={v}"]
        argv += ["--restart", "on-failure", "--grace", "5", "--no-engine-output"]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.events: list[tuple[float, dict]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.events.append((time.monotonic(), json.loads(line)))

    def of(self, kind: str) -> list[tuple[float, dict]]:
        return [(t, e) for t, e in list(self.events) if e.get("event") == kind]

    def wait(self, kind: str, count: int, timeout: float) -> tuple[float, dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.of(kind)
            if len(found) >= count:
                return found[count - 1]
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise SystemExit(f"no {kind} event #{count} within {timeout} s")

    def stop(self) -> None:
        """SIGINT (serve stops its engine's group), then whatever of the tree is left, killed."""
        try:
            tree = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            tree = []
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for p in tree:
            try:
                p.kill()
            except psutil.Error:
                pass


def probes_done(url: str) -> float:
    """Requests that asked for one token (the hang probes), by the engine's own histogram."""
    text = httpx.get(url + "/metrics", timeout=30, trust_env=False).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:request_params_max_tokens_bucket") and 'le="1.0"' in line
    )


class ProbeTimes(threading.Thread):
    """When probes went out during a phase: the probe count every 10 s, the steps noted."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.started = url, time.monotonic()
        self.halt = threading.Event()
        self.steps: list[str] = []
        self.unread = 0

    def run(self) -> None:
        last = None
        while not self.halt.wait(10):
            try:
                now = probes_done(self.url)
            except httpx.HTTPError:
                self.unread += 1
                continue
            if last is not None and now > last:
                self.steps.append(f"+{now - last:.0f} by {time.monotonic() - self.started:.0f} s")
            last = now


def in_flight(url: str, timeout: float) -> bool:
    """Wait until the engine's /metrics shows requests running or waiting (False at the timeout)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            metrics = parse_metrics(httpx.get(url + "/metrics", timeout=10, trust_env=False).text)
            if (metrics.running or 0) + (metrics.waiting or 0) > 0:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


def tree_cpu(pid: int) -> float:
    total = 0.0
    try:
        root = psutil.Process(pid)
        for p in [root, *root.children(recursive=True)]:
            t = p.cpu_times()
            total += t.user + t.system
    except psutil.Error:
        pass
    return total


def idle_seconds(pid: int, seconds: float) -> list[float]:
    """The engine tree's CPU time in each second of an idle phase (psutil: nothing is asked of the
    engine, so the sampling adds no load to what it measures)."""
    per_second = []
    end = time.monotonic() + seconds
    last = tree_cpu(pid)
    while time.monotonic() < end:
        time.sleep(1.0)
        now = tree_cpu(pid)
        per_second.append(max(0.0, now - last))
        last = now
    return per_second


def load(url: str, seconds: float, streams: int = 16) -> int:
    stop = time.monotonic() + seconds
    done = [0]

    def one() -> None:
        body = {"model": "tiny", "prompt": "a long enough question " * 20, "max_tokens": 64, "stream": True}
        with httpx.Client(trust_env=False) as client:
            while time.monotonic() < stop:
                try:
                    with client.stream("POST", url + "/v1/completions", json=body, timeout=60) as resp:
                        for _ in resp.iter_lines():
                            pass
                    done[0] += 1
                except httpx.HTTPError:
                    time.sleep(0.5)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--idle", type=float, default=3600)
    ap.add_argument("--long-doc", type=float, default=0, help="seconds of the long-doc scenario (0: skipped)")
    ap.add_argument("--load", type=float, default=600)
    ap.add_argument("--fast", action="store_true", help="shortened hang_* thresholds (minutes, not an hour)")
    args = ap.parse_args()
    limits = {**DEFAULTS, **(FAST if args.fast else {})}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    serve = Serve(port, FAST if args.fast else {})
    stopped = None
    try:
        t_ready, _ = serve.wait("ready", 1, 600)
        first_ready = t_ready - serve.started
        pid = serve.of("started")[0][1]["pid"]
        print(f"first start: ready in {first_ready:.1f} s")

        started = time.monotonic()
        done = subprocess.run([ASCENDCTL, "probe", url], capture_output=True, text=True)
        print(
            f"ascendctl probe (a fresh process, idle engine): exit {done.returncode} in {time.monotonic() - started:.2f} s: {done.stdout.strip()}"
        )
        before_req, before_cpu = probes_done(url), tree_cpu(pid)
        seconds = idle_seconds(pid, args.idle)
        probes = probes_done(url) - before_req
        cpu = tree_cpu(pid) - before_cpu
        hangs_idle = len(serve.of("hung"))
        print(
            f"idle {args.idle:.0f} s: {hangs_idle} hang verdicts (goal 0); {probes:.0f} probes "
            f"({60 * probes / args.idle:.2f}/min); engine tree CPU {60 * cpu / args.idle:.2f} s/min"
        )
        if seconds:
            # The baseline, from the same minutes: the engine's CPU in its quiet seconds (the
            # median second), against what the seconds with a probe or the watch's /metrics
            # read add on top of it.
            floor = statistics.median(seconds)
            extra = sum(max(0.0, s - floor) for s in seconds)
            added = extra / len(seconds)
            per_probe = f", {extra / probes:.2f} s per probe" if probes else ""
            ratio = f" (ratio to the floor {(floor + added) / floor:.2f})" if floor > 0 else ""
            print(
                f"  the idle engine's own floor (its median second): {60 * floor:.2f} s/min; the probes and the "
                f"watch's /metrics reads add {60 * added:.2f} s/min{per_probe}{ratio}"
            )

        before_req = probes_done(url)
        times = ProbeTimes(url)
        times.start()
        answered = load(url, args.load)
        times.halt.set()
        served = probes_done(url) - before_req
        hangs_load = len(serve.of("hung")) - hangs_idle
        print(
            f"saturated {args.load:.0f} s, 16 streams on max_num_seqs 8: {answered} completions, "
            f"{hangs_load} hang verdicts (goal 0), {served:.0f} probes (goal 0)"
            + (f" ({', '.join(times.steps)})" if times.steps else "")
            + (f"; /metrics unread by the bench at {times.unread} looks" if times.unread else "")
        )

        core = next(p for p in psutil.Process(pid).children(recursive=True) if "EngineCore" in " ".join(p.cmdline()))
        stopped = core.pid
        threading.Thread(target=load, args=(url, 30, 4), daemon=True).start()  # requests in flight
        in_flight(url, 15)  # the engine has taken them: the gauges show them when it stops
        os.kill(stopped, signal.SIGSTOP)
        hung_at = time.monotonic()
        # The probe's timeout in force (engine.health.hang.probe_timeout): the floor, or 4x the
        # slowest answered probe; 4x the longest time to first token of the last ten minutes when
        # the (frozen) gauges show requests in flight. The bound takes the longest the engine ever
        # reported, which is never shorter. The probes answered in well under a second here.
        time.sleep(TICK_S)
        metrics = parse_metrics(httpx.get(url + "/metrics", timeout=30, trust_env=False).text)
        busy = (metrics.running or 0) + (metrics.waiting or 0) > 0
        floor = HangLimits(0, limits["hang_probe_timeout_s"], 0, 0, 0, 0, 0)  # the one limit probe_timeout reads
        timeout = probe_timeout(floor, ttft_max(metrics) if busy else None)
        t_verdict, verdict = serve.wait("hung", hangs_idle + hangs_load + 1, 900)
        t_back, _ = serve.wait("ready", 2, 900)
        to_verdict = t_verdict - hung_at
        bound = (
            limits["hang_probe_interval_s"]
            + limits["hang_probe_failures"] * (limits["hang_probe_interval_s"] + timeout)
            + TICK_S
        )
        back = t_back - t_verdict
        print(f"verdict: {verdict['summary']}")
        stacks = (Path(verdict["evidence_dir"]) / "stacks.txt").read_text()
        print(f"evidence: {verdict['evidence_dir']} ({verdict['stacks']} processes dumped); stacks.txt begins:")
        print("\n".join(stacks.splitlines()[:12]))
        print(
            f"hang -> verdict: {to_verdict:.1f} s (bound from the thresholds and the probe timeout in force, "
            f"{timeout:g} s{' (requests in flight)' if busy else ''}: {bound:.0f} s, ratio {to_verdict / bound:.2f})"
        )
        ratio = back / first_ready
        print(
            f"verdict -> ready again: {back:.1f} s (first start {first_ready:.1f} s, ratio {ratio:.2f}, "
            f"goal <= {RESTART_GOAL})"
        )
        hangs_doc = 0
        if args.long_doc > 0:
            before_req = probes_done(url)
            cmd = [ASCENDCTL, "--json", "bench", url, "--scenario", "long-doc", "--duration", f"{args.long_doc:g}"]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.long_doc + 600)
            probes_doc = probes_done(url) - before_req
            hangs_doc = len(serve.of("hung")) - hangs_idle - hangs_load - 1
            try:
                report = json.loads(done.stdout)
                ttft, prompt = report["ttft_ms"], report["prompt_tokens"]
                seen = (
                    f"{report['completed']} completed, {report['failed']} failed; prompts up to "
                    f"{prompt['max']:.0f} tokens; TTFT p99 {ttft['p99']:.0f} ms, max {ttft['max']:.0f} ms"
                )
            except (ValueError, KeyError, TypeError):
                seen = f"exit {done.returncode}: {done.stdout[-300:]!r} {done.stderr[-300:]!r}"
            print(
                f"long-doc {args.long_doc:.0f} s on the restarted engine (ascendctl bench --scenario long-doc): {seen}; {hangs_doc} hang verdicts (goal 0), {probes_doc:.0f} probes"
            )

        ok = hangs_idle == 0 and hangs_doc == 0 and hangs_load == 0 and served == 0
        ok = ok and to_verdict <= bound and ratio <= RESTART_GOAL
        return 0 if ok else 1
    finally:
        serve.stop()
        if stopped is not None and psutil.pid_exists(stopped):
            try:
                os.kill(stopped, signal.SIGKILL)
            except ProcessLookupError:
                pass


if __name__ == "__main__":
    sys.exit(main())
