"""A hang on the real vLLM CPU engine: SIGSTOP of its EngineCore keeps /health at 200 while every
completion waits. `serve --restart on-failure` finds it, saves a py-spy stack dump in the run
directory, stops the group and restarts it, and the load's later requests succeed again; then the
new EngineCore is SIGKILLed and the group comes back once more.

One engine, three start-ups (about two minutes of both cores): the thresholds are shortened
with --set so the verdict comes in seconds, not minutes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest
from helpers import engine_env, free_port

pytestmark = pytest.mark.e2e
ASCENDCTL = str(Path(sys.executable).with_name("ascendctl"))
FAST = (
    "diagnostics.hang_probe_interval_s=4",
    "diagnostics.hang_probe_timeout_s=4",
    "diagnostics.hang_probe_failures=2",
    "diagnostics.hang_progress_s=15",
    "diagnostics.hang_cpu_s=10",
)


class Load(threading.Thread):
    """Streamed completions one after another, each outcome kept with its time."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.results: list[tuple[float, bool]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        body = {"model": "tiny", "prompt": "hello there", "max_tokens": 32, "stream": True}
        with httpx.Client(trust_env=False) as client:
            while not self.stop.is_set():
                ok = False
                try:
                    with client.stream("POST", self.url + "/v1/completions", json=body, timeout=10) as resp:
                        ok = resp.status_code == 200 and any(line.startswith("data: {") for line in resp.iter_lines())
                except httpx.HTTPError:
                    self.stop.wait(0.5)
                self.results.append((time.monotonic(), ok))


def test_sigstop_of_enginecore_is_found_dumped_and_restarted(tiny_model, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = engine_env(ASCENDCTL_STATE_DIR=str(tmp_path / "state"), ASCENDCTL_CACHE_DIR=str(tmp_path / "cache"))
    argv = [ASCENDCTL, "--json", "serve", "-p", "cpu-tiny", "--model", str(tiny_model), "--set", f"server.port={port}"]
    for item in FAST:
        argv += ["--set", item]
    argv += ["--restart", "on-failure", "--grace", "5", "--no-engine-output"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    events: list[dict] = []
    reader = threading.Thread(target=lambda: events.extend(json.loads(line) for line in proc.stdout), daemon=True)
    reader.start()
    load = Load(url)
    stopped: int | None = None

    def wait_event(kind: str, count: int, timeout: float) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            found = [e for e in list(events) if e.get("event") == kind]
            if len(found) >= count:
                return found
            time.sleep(0.2)
        raise AssertionError(f"no {count} {kind!r} events within {timeout} s: {events}")

    try:
        wait_event("ready", 1, 420)  # a start took 240 s+ on a host saturated beside it
        engine_pid = [e for e in events if e.get("event") == "started"][0]["pid"]
        load.start()
        time.sleep(3)
        core = next(
            p for p in psutil.Process(engine_pid).children(recursive=True) if "EngineCore" in " ".join(p.cmdline())
        )
        stopped = core.pid
        os.kill(stopped, signal.SIGSTOP)
        hung_at = time.monotonic()
        hung = wait_event("hung", 1, 120)[0]
        found_in = time.monotonic() - hung_at
        assert hung["action"] == "restart"
        assert "probe timed out" in hung["summary"] or "no CPU time" in hung["summary"], hung
        stacks = (Path(hung["evidence_dir"]) / "stacks.txt").read_text()
        assert f"=== pid {stopped}" in stacks and "EngineCore" in stacks
        assert "Thread" in stacks or "ptrace is not allowed" in stacks, stacks
        wait_event("ready", 2, 420)
        back_at = time.monotonic()
        time.sleep(5)
        later = [ok for t, ok in load.results if t > back_at + 1]
        assert later and all(later), load.results[-10:]
        run_dir = Path(hung["evidence_dir"]).parent
        info = json.loads((run_dir / "run.json").read_text())
        assert info["restarts"] == 1 and info["restart_reason"] == "hang" and len(info["hangs"]) == 1
        print(f"hang found in {found_in:.1f} s; ready again {back_at - hung_at - found_in:.1f} s after the verdict")

        # The restarted engine's EngineCore SIGKILLed while the API server lives: found (the hang
        # watch's "gone", or the API server ending on its own), and the group restarted again.
        engine_pid = [e for e in events if e.get("event") == "started"][1]["pid"]
        core = next(
            p for p in psutil.Process(engine_pid).children(recursive=True) if "EngineCore" in " ".join(p.cmdline())
        )
        killed_at = time.monotonic()
        os.kill(core.pid, signal.SIGKILL)
        wait_event("ready", 3, 420)
        again_at = time.monotonic()
        time.sleep(5)
        later = [ok for t, ok in load.results if t > again_at + 1]
        assert later and all(later), load.results[-10:]
        info = json.loads((run_dir / "run.json").read_text())
        assert info["restarts"] == 2 and info["restart_reason"] in ("hang", "exit"), info
        print(
            f"EngineCore SIGKILLed: restarted as {info['restart_reason']!r}, ready again {again_at - killed_at:.1f} s later"
        )
    finally:
        load.stop.set()
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if stopped is not None and psutil.pid_exists(stopped):
            try:
                os.kill(stopped, signal.SIGKILL)
            except ProcessLookupError:
                pass
        reader.join(5)


def test_node_0_dying_takes_its_data_parallel_group_down_and_it_comes_back(tiny_model, tmp_path):
    """Two local "hosts" (vLLM data parallel, node 1 headless), both under --restart on-failure:
    node 0's API server is SIGKILLed. Node 0's serve restarts it; node 1 goes down with the group
    (its watch sees the group's API gone, or its rank ends on its own) and starts again; the group
    answers again. (A stopped EngineCore of one rank is not a hang of a dense model's group: the
    other rank keeps answering the probes.)"""
    from helpers import serve_events, stop_serve, wait_event
    from test_multinode_e2e import _profile

    env = engine_env(ASCENDCTL_STATE_DIR=str(tmp_path / "state"), ASCENDCTL_CACHE_DIR=str(tmp_path / "cache"))
    port = free_port()
    profile = _profile(tmp_path / "dp2.yaml", tiny_model, port, free_port())
    sets = [a for item in FAST for a in ("--set", item)]

    def serve(rank: int) -> subprocess.Popen:
        argv = [ASCENDCTL, "serve", "--profile", str(profile), "--node-rank", str(rank), "--json", *sets]
        argv += ["--restart", "on-failure", "--grace", "5"]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)

    node1 = serve(1)
    node0 = serve(0)
    engines: list[int] = []
    seen1: list[dict] = []
    try:
        q1, q0 = serve_events(node1), serve_events(node0)
        engines += [wait_event(q1, "started", 60)["pid"], wait_event(q0, "started", 60)["pid"]]
        wait_event(q0, "ready", 420)
        time.sleep(10)  # node 1's watch has seen the group's API answer
        os.kill(engines[1], signal.SIGKILL)
        engines.append(wait_event(q0, "started", 120)["pid"])  # node 0 restarted
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not any(e["event"] == "started" for e in seen1):
            try:
                seen1.append(q1.get(timeout=1))
            except Exception:  # noqa: BLE001 - queue.Empty: keep waiting
                continue
        again1 = [e for e in seen1 if e and e["event"] == "started"]
        assert again1, f"node 1 did not go down with its group: {seen1}"
        engines.append(again1[0]["pid"])
        wait_event(q0, "ready", 420)
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/completions",
            timeout=60,
            json={"model": "tiny", "prompt": "Two hosts again", "max_tokens": 8},
        )
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] > 0
        print("node 1:", [(e["event"], e.get("summary") or e.get("exit_code")) for e in seen1 if e])
    finally:
        for proc in (node0, node1):
            stop_serve(proc, engines)
