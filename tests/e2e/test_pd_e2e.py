"""Prefill / decode disaggregation and external data parallel on the real vLLM CPU engine, every
part on this machine (127.0.0.1), each under its own `ascendctl serve --role R`:

- pd: a prefill and a decode instance of the demo model passing KV through vLLM's ExampleConnector
  (files in a shared directory), ascendctl's proxy in front; a completion through the proxy, both
  roles' logs show their side of the transfer, SIGTERM to each part leaves no process behind.
- the decode instance's EngineCore SIGKILLed: the proxy answers every request at once (503 naming
  the decode instance, no prefill spent) instead of hanging, and routes to the instance again once
  its serve has restarted it.
- external-dp: two API servers (one per rank) and the balancer; requests spread over both.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import psutil
import pytest
from helpers import engine_env, free_port, serve_events, stop_serve, wait_event

from engine import runs
from engine.launcher import group_members

pytestmark = pytest.mark.e2e
ASCENDCTL = str(Path(sys.executable).with_name("ascendctl"))

BASE = """\
platform: cpu
device:
  kind: cpu
  count: 2
model:
  path: {model}
  served_name: tiny
engine:
  dtype: float32
  max_model_len: 512
  max_num_seqs: 4
  kv_cache_memory_bytes: 3145728
  enforce_eager: true
env:
  TOKENIZERS_PARALLELISM: "false"
server:
  host: 127.0.0.1
  port: {port}
"""


def _serve(profile: Path, role: str, env: dict, *more: str) -> subprocess.Popen:
    return subprocess.Popen(
        [ASCENDCTL, "serve", "--profile", str(profile), "--role", role, "--node-rank", "0", "--json", *more],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _stop_all(procs: list[subprocess.Popen], pids: list[int]) -> None:
    members = [m for pid in pids for m in group_members(pid)]
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(90) == 130
    assert all(group_members(pid) == [] for pid in pids)
    assert not [p for p in members if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_prefill_and_decode_behind_the_proxy(tiny_model, tmp_path):
    env = engine_env(ASCENDCTL_STATE_DIR=str(tmp_path / "state"), ASCENDCTL_CACHE_DIR=str(tmp_path / "cache"))
    port, p_port, d_port = free_port(), free_port(), free_port()
    store = tmp_path / "kv"
    profile = tmp_path / "pd.yaml"
    profile.write_text(
        "name: cpu-tiny-pd-e2e\n"
        + BASE.format(model=tiny_model, port=port)
        + textwrap.dedent(
            f"""\
            nodes:
              mode: pd
              count: 1
              addresses: [127.0.0.1]
              kv_connector: ExampleConnector
              kv_connector_extra: {{shared_storage_path: {store}}}
              roles:
                - {{role: prefill, devices: [0], port: {p_port}}}
                - {{role: decode, devices: [1], port: {d_port}}}
            """
        ),
        encoding="utf-8",
    )
    procs = [_serve(profile, "prefill", env), _serve(profile, "decode", env), _serve(profile, "proxy", env)]
    pids: list[int] = []
    try:
        queues = [serve_events(p) for p in procs]
        pids += [wait_event(q, "started", 60)["pid"] for q in queues]
        ready = [wait_event(q, "ready", 420) for q in queues]
        assert ready[2]["url"] == f"http://127.0.0.1:{port}"
        print("pd ready s (prefill, decode, proxy):", [r["seconds"] for r in ready])

        # Token ids, 300 of them: ExampleConnector passes whole blocks only (128 tokens on the CPU
        # engine), keyed by the prompt's first blocks, so the decode can load 256 of them.
        prompt = [100 + i % 800 for i in range(300)]
        began = time.monotonic()
        reply = httpx.post(
            f"{ready[2]['url']}/v1/completions",
            timeout=120,
            json={"model": "tiny", "prompt": prompt, "max_tokens": 8, "temperature": 0},
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] > 0 and reply.json()["usage"]["prompt_tokens"] == 300
        print(f"pd completion through the proxy: {time.monotonic() - began:.2f} s")
        # The prefill instance wrote the prompt's KV; the decode instance read it back.
        assert any(store.rglob("*.safetensors"))
        logs = {r.profile: r.log_path.read_text(errors="replace") for r in runs.list_runs() if r.pid in pids}
        prefill_log = next(text for name, text in logs.items() if name.endswith("-prefill-0"))
        decode_log = next(text for name, text in logs.items() if name.endswith("-decode-0"))
        assert "kv_producer" in prefill_log and "kv_producer" not in decode_log
        # The decode instance found the prompt's KV in the store and loaded it instead of computing it.
        assert "External Cache Hit!" in decode_log
        assert "Inject KV cache of 256 tokens to the paged memory" in decode_log
        assert "External Cache Hit!" not in prefill_log
        # vLLM's own KV-fetch gauge of a KV consumer (the exporter passes it through per role).
        assert "vllm:num_requests_kv_fetch_by_stage" in httpx.get(f"{ready[1]['url']}/metrics", timeout=10).text
        metrics = httpx.get(f"{ready[2]['url']}/metrics", timeout=10).text
        assert f'role="prefill",backend="127.0.0.1:{p_port}"}} 1' in metrics
        assert f'role="decode",backend="127.0.0.1:{d_port}"}} 1' in metrics

        _stop_all(procs, pids)
    finally:
        for proc in procs:
            stop_serve(proc, pids)


def test_the_proxy_fails_fast_while_the_decoder_restarts_and_routes_to_it_again(tiny_model, tmp_path):
    env = engine_env(ASCENDCTL_STATE_DIR=str(tmp_path / "state"), ASCENDCTL_CACHE_DIR=str(tmp_path / "cache"))
    port, p_port, d_port = free_port(), free_port(), free_port()
    profile = tmp_path / "pd.yaml"
    profile.write_text(
        "name: cpu-tiny-pd-e2e\n"
        + BASE.format(model=tiny_model, port=port)
        + textwrap.dedent(
            f"""\
            nodes:
              mode: pd
              count: 1
              addresses: [127.0.0.1]
              kv_connector: ExampleConnector
              kv_connector_extra: {{shared_storage_path: {tmp_path / "kv"}}}
              roles:
                - {{role: prefill, devices: [0], port: {p_port}}}
                - {{role: decode, devices: [1], port: {d_port}}}
            """
        ),
        encoding="utf-8",
    )
    procs = [
        _serve(profile, "prefill", env),
        _serve(profile, "decode", env, "--restart", "on-failure"),
        _serve(profile, "proxy", env),
    ]
    pids: list[int] = []
    body = {"model": "tiny", "prompt": [100 + i for i in range(200)], "max_tokens": 4, "temperature": 0}
    try:
        queues = [serve_events(p) for p in procs]
        pids += [wait_event(q, "started", 60)["pid"] for q in queues]
        ready = [wait_event(q, "ready", 420) for q in queues]
        url = ready[2]["url"]
        assert httpx.post(f"{url}/v1/completions", json=body, timeout=120).status_code == 200
        prefilled = _proxy_count(url, "prefill")

        core = next(
            p for p in psutil.Process(pids[1]).children(recursive=True) if "EngineCore" in " ".join(p.cmdline())
        )
        core.kill()
        killed = time.monotonic()
        answers: list[tuple[float, int, str]] = []
        while time.monotonic() - killed < 120:
            began = time.monotonic()
            reply = httpx.post(f"{url}/v1/completions", json=body, timeout=120)
            answers.append((time.monotonic() - began, reply.status_code, reply.text))
            if reply.status_code == 503:
                break
            time.sleep(0.5)
        print("after the kill (seconds, status):", [(round(t, 2), code) for t, code, _ in answers])
        took, code, text = answers[-1]
        assert code == 503 and f"no decode instance is up (127.0.0.1:{d_port} " in text, answers
        assert took < 2, answers  # refused at once, not after a timeout
        assert all(t < 30 for t, _, _ in answers), answers  # nothing hung on the dead instance
        health = httpx.get(f"{url}/health", timeout=10)
        assert health.status_code == 503 and health.json()["no_instance_up"] == ["decode"]
        # The refused request cost no prefill (those before the proxy saw the decoder down may have).
        spent = _proxy_count(url, "prefill")
        assert httpx.post(f"{url}/v1/completions", json=body, timeout=120).status_code == 503
        assert _proxy_count(url, "prefill") == spent >= prefilled

        again = wait_event(queues[1], "ready", 420)  # serve --restart on-failure started it again
        deadline = time.monotonic() + 30
        while httpx.get(f"{url}/health", timeout=10).status_code != 200:
            assert time.monotonic() < deadline, "the proxy did not take the restarted decoder back"
            time.sleep(0.5)
        reply = httpx.post(f"{url}/v1/completions", json=body, timeout=120)
        assert reply.status_code == 200, reply.text
        print(f"decode ready again {time.monotonic() - killed:.1f} s after the kill ({again['seconds']} s start)")
        (decode,) = [r for r in runs.list_runs() if r.role == "decode"]
        (proxy,) = [r for r in runs.list_runs() if r.role == "proxy"]
        assert decode.restarts == 1 and decode.pid != pids[1]
        assert f"decode 127.0.0.1:{d_port} back after" in proxy.log_path.read_text(errors="replace")
        pids.append(decode.pid)
        _stop_all(procs, [pids[0], decode.pid, pids[2]])
    finally:
        for proc in procs:
            stop_serve(proc, pids)


def _proxy_count(url: str, role: str) -> int:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(int(n) for n in re.findall(rf'ascendctl_proxy_requests_total\{{role="{role}",[^}}]*\}} (\d+)', text))


def test_external_dp_spreads_requests_over_both_ranks(tiny_model, tmp_path):
    env = engine_env(ASCENDCTL_STATE_DIR=str(tmp_path / "state"), ASCENDCTL_CACHE_DIR=str(tmp_path / "cache"))
    port, first = free_port(), free_port()
    profile = tmp_path / "edp.yaml"
    profile.write_text(
        "name: cpu-tiny-edp-e2e\n"
        + BASE.format(model=tiny_model, port=port)
        + textwrap.dedent(
            f"""\
            nodes:
              mode: external-dp
              count: 1
              addresses: [127.0.0.1]
              instance_port: {first}
            """
        ),
        encoding="utf-8",
    )
    procs = [
        _serve(profile, "rank", env, "--instance", "0"),
        _serve(profile, "rank", env, "--instance", "1"),
        _serve(profile, "proxy", env),
    ]
    pids: list[int] = []
    try:
        queues = [serve_events(p) for p in procs]
        pids += [wait_event(q, "started", 60)["pid"] for q in queues]
        ready = [wait_event(q, "ready", 420) for q in queues]
        # The balancer is ready once one rank is; it takes the other once its /health answers
        # (read every 2 s): wait for both before counting where the requests went.
        deadline = time.monotonic() + 30
        while httpx.get(f"{ready[2]['url']}/health", timeout=10).json()["status"] != "ok":
            assert time.monotonic() < deadline, "the balancer never saw both ranks up"
            time.sleep(0.5)
        for i in range(4):
            reply = httpx.post(
                f"{ready[2]['url']}/v1/completions",
                timeout=120,
                json={"model": "tiny", "prompt": f"request {i}", "max_tokens": 4},
            )
            assert reply.status_code == 200, reply.text
        # Each rank's own engine served at least its two (serve's hang monitor adds 1-token probes).
        for url in (ready[0]["url"], ready[1]["url"]):
            text = httpx.get(f"{url}/metrics", timeout=10).text
            done = sum(
                float(m.group(1)) for m in re.finditer(r"^vllm:request_success_total\{[^}]*\} ([0-9.]+)", text, re.M)
            )
            assert done >= 2, (url, done)
        balanced = httpx.get(f"{ready[2]['url']}/metrics", timeout=10).text
        assert balanced.count('ascendctl_proxy_requests_total{role="rank"') == 2
        assert re.findall(r'ascendctl_proxy_requests_total\{role="rank",backend="[^"]+"\} (\d+)', balanced) == [
            "2",
            "2",
        ]
        _stop_all(procs, pids)
    finally:
        for proc in procs:
            stop_serve(proc, pids)
