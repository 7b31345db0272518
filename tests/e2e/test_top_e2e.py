"""`ascendctl top --json` against the real vLLM CPU engine while load is sent to it."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from ascendctl.cli import main


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_top_json_shows_running_requests_under_load(vllm_server, capsys):
    stop = threading.Event()

    body = {
        "model": vllm_server.served_name,
        "prompt": "count to one hundred: " * 8,
        # long answers: each request stays in the engine for a while, so a one-second sample
        # finds it running even when a busy host's API server hands requests over slowly
        # (128 tokens: 0 running in all 6 samples once in CI)
        "max_tokens": 384,
        "ignore_eos": True,
    }

    def client():
        with httpx.Client(timeout=120) as c:
            while not stop.is_set():
                try:
                    c.post(f"{vllm_server.url}/v1/completions", json=body)
                except httpx.HTTPError:  # load only: a dropped connection costs a request, not the thread
                    continue

    workers = [threading.Thread(target=client, daemon=True) for _ in range(4)]
    for w in workers:
        w.start()
    try:
        rc = main(["top", vllm_server.url, "--json", "--interval", "1", "--count", "8", "--no-devices"])
    finally:
        stop.set()
        for w in workers:
            w.join(180)
    snaps = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rc == 0 and len(snaps) == 8
    engines = [s["engines"][0] for s in snaps]
    assert all(e["status"]["ok"] for e in engines), [e["status"] for e in engines]
    assert max(e["running"] for e in engines) >= 1
    assert max(e["rates"]["generation_tps"] or 0 for e in engines) > 0
    kv = engines[-1]["kv"]
    assert kv["total_blocks"] and kv["total_blocks"] > 0 and kv["source"] == "metrics"
    assert engines[-1]["model"] == "tiny"


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_the_demos_background_load_moves_the_dashboard_and_stops_with_it(vllm_server):
    """What `ascendctl demo` runs while its dashboard is open: the dashboard's collector sees
    requests completing and tokens generated, with nobody sending them; once closed, none."""
    import time

    from engine.demo.load import BackgroundLoad
    from engine.metrics import scrape
    from engine.telemetry import Collector, Target

    before = scrape(vllm_server.url).requests_ok
    collector = Collector([Target(vllm_server.url)])
    seen_tps, answered = 0.0, 0.0
    try:
        with BackgroundLoad(vllm_server.url, vllm_server.served_name) as load:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not (seen_tps > 0 and answered >= 3):
                time.sleep(1)
                view = collector.poll().engines[0]
                seen_tps = max(seen_tps, view.rates.generation_tps or 0.0)
                answered = scrape(vllm_server.url).requests_ok - before
        assert not load.running
    finally:
        collector.close()
    assert seen_tps > 0 and answered >= 3, (seen_tps, answered)
    time.sleep(1)  # requests cut at the close settle
    done = scrape(vllm_server.url).requests_ok
    time.sleep(3)
    assert scrape(vllm_server.url).requests_ok == done  # closed: nothing more is sent
