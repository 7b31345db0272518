"""Every built-in scenario, shrunk, against the real vLLM CPU engine."""

from __future__ import annotations

import json

import pytest

from ascendctl.cli import main

pytestmark = pytest.mark.e2e


def _bench(capsys, url: str, *argv: str) -> dict:
    code = main(["bench", url, "--json", *argv])
    cap = capsys.readouterr()
    report = json.loads(cap.out)
    # 0 or 1: the CPU engine may miss SLOs written for NPUs; anything else is a failure of the run.
    assert code == (0 if report["passed"] else 1), cap.err
    return report


def _sane(report: dict) -> None:
    assert report["completed"] > 0
    assert report["failed"] == 0, report["error_examples"]
    ttft, e2e = report["ttft_ms"], report["e2e_ms"]
    assert 0 < ttft["p50"] < e2e["p50"] and ttft["max"] < e2e["max"] and ttft["p99"] <= e2e["p99"]
    assert report["itl_ms"]["count"] > 0 and report["output_tokens_per_s"] > 0
    # The tokens the client saw are the tokens the engine says it generated.
    assert report["output_tokens"] == report["server"]["generation_tokens"]
    assert report["server"]["requests_ok"] == report["completed"]
    assert report["prompt_tokens_sizing"] == "tokenizer"


def test_chat_qa_small(capsys, vllm_server):
    r = _bench(capsys, vllm_server.url, "--scenario", "chat-qa", "--scale", "0.1", "--duration", "6")
    _sane(r)
    assert r["api"] == "chat" and r["generator"]["offered_rate"] == pytest.approx(3.2)
    assert r["output_tokens"] == 13 * r["completed"]  # ignore_eos: every answer runs to max_tokens


def test_long_doc_small_is_clamped_to_the_context(capsys, vllm_server):
    r = _bench(capsys, vllm_server.url, "--scenario", "long-doc", "--scale", "0.25", "--duration", "8")
    _sane(r)
    assert any("max_model_len 512" in n for n in r["notes"])
    assert r["prompt_tokens"]["max"] + 128 <= 512
    # Prompts land on their token target: the server's count is the tag + body we sized.
    assert r["prompt_tokens"]["min"] >= 1


def test_burst_small_measures_the_queue(capsys, vllm_server):
    # 16 -> 64 concurrent against max_num_seqs 8: on an idle host the engine queues requests during
    # the burst (peak 56 waiting, drained in 6 s). On a 2-core host that is also busy elsewhere the
    # API server's own backlog keeps the engine's queue empty (peak 0, seen in CI and with a CPU hog
    # beside the test): then the report must say the queue did not form, not invent a drain time.
    r = _bench(capsys, vllm_server.url, "--scenario", "burst", "--scale", "1", "--duration", "24")
    _sane(r)
    q = r["queue"]
    # Four /metrics samples a second are asked for; an engine saturated on a 2-core runner answers
    # some late, so fewer come back (5 of 72 with a CPU hog when each scrape had 2 s; 5 again in a
    # whole-suite run on 2 cores with 15 s per scrape). Four still draw the burst's rise and fall.
    assert q["after_phase"] == "burst" and q["samples"] >= 4
    if q["peak"] is None:  # no reading came back during the burst: the report says so, no drain time
        assert q["formed"] is None and q["drain_s"] is None
    else:
        assert q["formed"] == (q["peak"] > q["baseline"])
    if q["formed"]:
        assert q["drain_s"] is not None and q["drain_s"] >= 0
    else:
        assert q["drain_s"] is None
    assert [p["load"] for p in r["phases"]] == ["16 concurrent", "64 concurrent", "16 concurrent"]
    # vLLM reports its KV cache usage: the burst's figure is measured (N/A only when it stayed flat),
    # from the same readings as the queue's.
    if q["peak"] is not None:
        assert q["kv_peak"] is not None and (q["kv_drain_s"] is not None or not q["kv_formed"])
    assert len(r["samples"]["sent_s"]) == r["completed"] + r["failed"]
