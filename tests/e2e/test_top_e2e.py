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

    def client():
        with httpx.Client(timeout=120) as c:
            while not stop.is_set():
                c.post(
                    f"{vllm_server.url}/v1/completions",
                    json={
                        "model": vllm_server.served_name,
                        "prompt": "count to one hundred: " * 8,
                        "max_tokens": 128,
                        "ignore_eos": True,
                    },
                )

    workers = [threading.Thread(target=client, daemon=True) for _ in range(4)]
    for w in workers:
        w.start()
    try:
        rc = main(["top", vllm_server.url, "--json", "--interval", "1", "--count", "6", "--no-devices"])
    finally:
        stop.set()
        for w in workers:
            w.join(180)
    snaps = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rc == 0 and len(snaps) == 6
    engines = [s["engines"][0] for s in snaps]
    assert all(e["status"]["ok"] for e in engines)
    assert max(e["running"] for e in engines) >= 1
    assert max(e["rates"]["generation_tps"] or 0 for e in engines) > 0
    kv = engines[-1]["kv"]
    assert kv["total_blocks"] and kv["total_blocks"] > 0 and kv["source"] == "metrics"
    assert engines[-1]["model"] == "tiny"
