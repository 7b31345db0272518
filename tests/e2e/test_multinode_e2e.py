"""A two-host data-parallel layout on the real vLLM CPU engine, both "hosts" on this machine
(127.0.0.1): node 0 serves the API, node 1 runs a headless rank, each under its own
`ascendctl serve --node-rank K`. A completion comes back through node 0, and SIGTERM leaves no
process on either side."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import psutil
import pytest
from helpers import engine_env, free_port, serve_events, stop_serve, wait_event

from engine import runs
from engine.launcher import group_members
from engine.telemetry import targets_from_runs

pytestmark = pytest.mark.e2e
ASCENDCTL = str(Path(sys.executable).with_name("ascendctl"))


def _profile(path: Path, model: Path, port: int, rpc_port: int) -> Path:
    path.write_text(
        textwrap.dedent(
            f"""\
            name: cpu-tiny-dp2
            description: the demo model over two local "hosts" (vLLM data parallel, one rank each)
            platform: cpu
            device:
              kind: cpu
            model:
              path: {model}
              served_name: tiny
            engine:
              dtype: float32
              max_model_len: 512
              max_num_seqs: 8
              cpu_kvcache_space_gib: 1
              enforce_eager: true
            env:
              TOKENIZERS_PARALLELISM: "false"
            server:
              host: 127.0.0.1
              port: {port}
            nodes:
              count: 2
              mode: dp
              addresses: [127.0.0.1, 127.0.0.1]
              dp_rpc_port: {rpc_port}
            """
        ),
        encoding="utf-8",
    )
    return path


def _serve(profile: Path, rank: int, env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [ASCENDCTL, "serve", "--profile", str(profile), "--node-rank", str(rank), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_two_local_hosts_serve_one_model_and_stop_cleanly(tiny_model, tmp_path):
    state = {"ASCENDCTL_STATE_DIR": str(tmp_path / "state"), "ASCENDCTL_CACHE_DIR": str(tmp_path / "cache")}
    env = engine_env(**state)
    port = free_port()
    profile = _profile(tmp_path / "dp2.yaml", tiny_model, port, free_port())
    # Node 1 first, as an operator would start the workers: node 0 waits for it at start-up.
    node1 = _serve(profile, 1, env)
    node0 = _serve(profile, 0, env)
    procs, engines = [node0, node1], []
    try:
        q1, q0 = serve_events(node1), serve_events(node0)
        started1 = wait_event(q1, "started", 60)
        started0 = wait_event(q0, "started", 60)
        engines += [started1["pid"], started0["pid"]]
        ready = wait_event(q0, "ready", 420)
        assert ready["url"] == f"http://127.0.0.1:{port}"

        reply = httpx.post(
            f"{ready['url']}/v1/completions",
            timeout=60,
            json={"model": "tiny", "prompt": "Two hosts", "max_tokens": 8},
        )
        assert reply.status_code == 200
        assert reply.json()["usage"]["completion_tokens"] > 0
        # Both ranks are in the answer's engine: node 0's API reports data parallel size 2.
        assert "dp2" in reply.json().get("system_fingerprint", "")

        headless = next(r for r in runs.list_runs() if r.pid == started1["pid"])
        assert "in headless mode" in headless.log_path.read_text(errors="replace")
        # `top` / the exporter on the headless host poll only what serves an API: node 0's run here.
        assert headless.serves_api is False
        skipped: list[str] = []
        assert [t.url for t in targets_from_runs(skipped)] == [ready["url"]]
        assert any(headless.run_id in note and "headless" in note for note in skipped)

        members = group_members(started0["pid"]) + group_members(started1["pid"])
        assert len(members) >= 3
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            assert proc.wait(90) == 130
        assert group_members(started0["pid"]) == [] and group_members(started1["pid"]) == []
        assert not [p for p in members if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    finally:
        for proc in procs:
            stop_serve(proc, engines)
