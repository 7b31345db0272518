"""`ascendctl serve` and `ascendctl demo` on the real vLLM CPU engine (one start each; a broken
model directory dies in seconds)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest
from helpers import engine_env, free_port, serve_events, stop_serve, wait_event

from engine import runs
from engine.launcher import group_members

pytestmark = pytest.mark.e2e
ASCENDCTL = str(Path(sys.executable).with_name("ascendctl"))


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    env = {"ASCENDCTL_STATE_DIR": str(tmp_path / "state"), "ASCENDCTL_CACHE_DIR": str(tmp_path / "cache")}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return engine_env(**env)


def test_serve_cpu_tiny_answers_keeps_its_run_dir_and_leaves_nothing_after_sigterm(tiny_model, dirs):
    port = free_port()
    proc = subprocess.Popen(
        [
            ASCENDCTL,
            "serve",
            "--profile",
            "cpu-tiny",
            "--model",
            str(tiny_model),
            "--set",
            f"server.port={port}",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dirs,
    )
    engines: list[int] = []
    try:
        q = serve_events(proc)
        started = wait_event(q, "started", 60)
        engines.append(started["pid"])
        ready = wait_event(q, "ready", 420)
        assert ready["url"] == f"http://127.0.0.1:{port}"
        phases = [p["phase"] for p in ready["phases"]]
        assert phases[:2] == ["config", "engine"] and {"weights", "kv_cache", "api"} <= set(phases)

        reply = httpx.post(
            f"{ready['url']}/v1/completions",
            timeout=60,
            json={"model": "tiny", "prompt": "The KV cache", "max_tokens": 8},
        )
        assert reply.status_code == 200
        assert reply.json()["usage"]["completion_tokens"] > 0

        info = runs.list_runs()[0]
        assert info.pid == started["pid"] and info.alive() and info.url == ready["url"]
        assert "Application startup complete." in info.log_path.read_text(errors="replace")
        assert "max_model_len: 512" in (Path(info.directory) / runs.PROFILE_FILE).read_text()

        members = group_members(started["pid"])
        assert len(members) >= 2  # the API server and the engine core (and its worker)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(90) == 130
        rest = []
        while (event := q.get(timeout=10)) is not None:
            rest.append(event)
        assert rest[-1]["event"] == "end" and rest[-1]["stopped_by"] == "SIGTERM"
        assert group_members(started["pid"]) == []
        assert not [p for p in members if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        assert runs.read_run(Path(info.directory)).ended_at is not None
    finally:
        stop_serve(proc, engines)


def test_a_broken_model_directory_exits_1_with_a_diagnosis(tiny_model, dirs, tmp_path):
    broken = tmp_path / "broken-model"
    shutil.copytree(tiny_model, broken)
    (broken / "config.json").write_text('{"architectures": ["Qwen3ForCausalLM"], "hidden_size": ', encoding="utf-8")
    result = subprocess.run(
        [
            ASCENDCTL,
            "serve",
            "--profile",
            "cpu-tiny",
            "--model",
            str(broken),
            "--set",
            f"server.port={free_port()}",
            "--no-engine-output",
        ],
        capture_output=True,
        text=True,
        env=dirs,
        timeout=300,
    )
    assert result.returncode == 1, result.stderr
    assert "the engine exited before it was ready (exit code 1)" in result.stderr
    assert "cause: OSError: It looks like the config file at" in result.stderr
    assert "full log:" in result.stderr
    info = runs.list_runs()[0]
    assert info.exit_code == 1 and "not a valid JSON file" in info.log_path.read_text(errors="replace")


def test_demo_batch_serves_answers_and_stops(tiny_model, dirs):
    result = subprocess.run(
        [ASCENDCTL, "demo", "--batch", "--requests", "2", "--model", str(tiny_model), "--port", str(free_port())],
        capture_output=True,
        text=True,
        env=dirs,
        timeout=480,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("tokens,") == 2  # one line per answer: "(n → m tokens, t s)"
    assert "      chat What does the KV cache hold?" in result.stdout
    assert "completion Serving large language models" in result.stdout
    assert "demo over; the engine is stopped" in result.stderr
    info = runs.list_runs()[0]
    assert info.exit_code is not None and not info.alive()
    assert group_members(info.pid) == []
