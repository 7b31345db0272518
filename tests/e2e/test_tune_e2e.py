"""`ascendctl tune sweep` on the real vLLM CPU engine: a 2 x 2 grid on cpu-tiny where two
combinations do not fit the plan (a 64 KiB KV cache holds less than one 512-token request: never
started), one crashes at start-up (max_num_batched_tokens 4 below max_num_seqs 8: vLLM refuses
it) and one is measured, with a workload whose shared system prompt the prefix cache reuses. A
SIGINT in the middle, then --resume, repeats nothing; the written profile serves. About 80 s
alone on a quiet 2-core host (two engine starts that get ready, two that die)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from helpers import engine_env, free_port, serve_events, stop_serve, wait_event

from engine.tune.sweep import read_results

pytestmark = pytest.mark.e2e
ASCENDCTL = str(Path(sys.executable).with_name("ascendctl"))


def test_sweep_skips_records_a_crash_resumes_and_writes_a_profile_that_serves(tiny_model, tmp_path, monkeypatch):
    env = engine_env(ASCENDCTL_STATE_DIR=str(tmp_path / "state"), ASCENDCTL_CACHE_DIR=str(tmp_path / "cache"))
    monkeypatch.setenv("ASCENDCTL_STATE_DIR", env["ASCENDCTL_STATE_DIR"])
    # Short questions after a shared 256-token system prompt (two blocks of the CPU engine's 128):
    # what the prefix cache reuses in production, and what the capacity must be measured with.
    (tmp_path / "shared.yaml").write_text(
        "name: shared-system-prompt\napi: chat\nphases: [{name: steady, duration_s: 3, concurrency: 2}]\n"
        "prompt_tokens: 8\nmax_tokens: 12\nprefix: {share: 0.8, tokens: 256}\n"
    )
    results = tmp_path / "sweep.jsonl"
    overlay = tmp_path / "best.yaml"
    argv = [
        ASCENDCTL, "tune", "sweep", "-p", "cpu-tiny", "--model", str(tiny_model),
        "--set", f"server.port={free_port()}",
        "--sweep", "engine.kv_cache_memory_bytes=3145728,65536",
        "--sweep", "engine.max_num_batched_tokens=512,4",
        "-s", str(tmp_path / "shared.yaml"), "--by", "concurrency", "--start", "2", "--max-load", "8",
        "--slo", "ttft_p99=3s,itl_p99=1s", "--step-duration", "3", "--repeats", "1", "--max-steps", "4",
        "--results", str(results), "--ready-timeout", "420",
    ]  # fmt: skip

    # 1. Interrupted once the first combination is measured (the second one is starting).
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 480
        while not read_results(results) and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert read_results(results), first.stderr.read() if first.poll() is not None else "no result in time"
        first.send_signal(signal.SIGINT)
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 130, err
    assert "--resume" in err
    kept = read_results(results)
    measured = [d for d in kept if d["status"] == "measured"]
    assert len(measured) == 1 and measured[0]["combination"] == {
        "engine.kv_cache_memory_bytes": 3145728,
        "engine.max_num_batched_tokens": 512,
    }
    cap = measured[0]["capacity"]
    at = cap["at_capacity"]["figures"]
    assert cap["capacity"] >= 2 and cap["by"] == "concurrency" and at["output_tokens_per_s"] > 0
    # The shared prefix reached the engine as shared: its prefix cache answered most prompt tokens.
    assert at["prefix_cache_hit_share"] > 0.3, at
    assert "2 do not fit and will not start" in err  # the plan, before any start

    # 2. Resumed: nothing measured again; the crash is a result and the sweep goes on.
    done = subprocess.run(
        [*argv, "--resume", "--write-profile", str(overlay), "--json"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"resuming: {len(kept)} of 4 combinations already done" in done.stderr
    assert "[1/4] kv_cache_memory_bytes=3145728 max_num_batched_tokens=512: starting" not in done.stderr
    lines = read_results(results)
    assert len(lines) == 4 and len({d["id"] for d in lines}) == 4
    by_status = {}
    for d in lines:
        by_status.setdefault(d["status"], []).append(d)
    assert len(by_status["measured"]) == 1 and len(by_status["skipped"]) == 2 and len(by_status["crashed"]) == 1
    assert all("KV cache holds" in d["reason"] for d in by_status["skipped"])
    crash = by_status["crashed"][0]
    assert crash["combination"]["engine.max_num_batched_tokens"] == 4 and crash["when"] == "start-up"
    assert "max_num_batched_tokens" in crash["diagnosis"] and Path(crash["run_dir"]).is_dir()
    doc = json.loads(done.stdout)
    assert doc["best"]["id"] == measured[0]["id"]

    # 3. The written profile serves, and says what was measured.
    text = overlay.read_text()
    assert "Measured capacity:" in text and "max_num_batched_tokens: 512" in text
    port = free_port()
    serve = subprocess.Popen(
        [ASCENDCTL, "serve", "-p", str(overlay), "--model", str(tiny_model), "--set", f"server.port={port}", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    engines: list[int] = []
    try:
        q = serve_events(serve)
        engines.append(wait_event(q, "started", 60)["pid"])
        ready = wait_event(q, "ready", 420)
        reply = httpx.post(
            f"{ready['url']}/v1/completions", timeout=60, json={"model": "tiny", "prompt": "hi", "max_tokens": 4}
        )
        assert reply.status_code == 200
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(90) == 130
    finally:
        stop_serve(serve, engines)
