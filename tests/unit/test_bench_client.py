"""The client against servers that misbehave: every request is accounted for, nothing crashes.

The misbehaving server here is written on the standard library's http.server, a different HTTP
implementation from both the bench client's transport and the engine's asyncio stub."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from helpers import free_port

from engine.bench.client import endpoint, request_body, stream_request
from engine.bench.runner import BenchRunner
from engine.bench.scenario import load_scenario
from engine.bench.stub import StubConfig, StubThread
from engine.bench.transport import LeanTransport
from engine.errors import BadInput, Unreachable

_EVENT = b'data: {"choices":[{"index":0,"text":" x","finish_reason":null}]}\n\n'
_USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}\n\n'


class _Flaky(BaseHTTPRequestHandler):
    """Rotates through: HTTP 500, a dropped connection, garbage in the stream, a good answer."""

    protocol_version = "HTTP/1.1"
    counter = 0
    lock = threading.Lock()

    def log_message(self, *args):  # keep the test output clean
        pass

    def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/v1/models":
            self._send(200, json.dumps({"data": [{"id": "flaky", "max_model_len": 2048}]}).encode())
        else:
            self._send(404, b'{"detail":"Not Found"}')

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.path != "/v1/completions":
            self._send(404, b'{"detail":"Not Found"}')
            return
        assert json.loads(body)["stream"] is True
        with self.lock:
            n = _Flaky.counter
            _Flaky.counter += 1
        kind = n % 4
        if kind == 0:
            self._send(500, b'{"error":{"message":"engine is dead"}}')
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        if kind == 1:  # two tokens, then the connection is gone
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for _ in range(2):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(_EVENT), _EVENT))
            self.wfile.flush()
            self.close_connection = True
            return
        # The rest end the body by closing the connection (no length, no chunks).
        self.send_header("connection", "close")
        self.end_headers()
        if kind == 2:
            self.wfile.write(_EVENT + b"data: {not json at all\n\n" + b"data: [DONE]\n\n")
        else:
            for _ in range(3):
                self.wfile.write(_EVENT)
                self.wfile.flush()
                time.sleep(0.002)
            self.wfile.write(_USAGE + b"data: [DONE]\n\n")
        self.close_connection = True


@pytest.fixture()
def flaky_url():
    _Flaky.counter = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    server.daemon_threads = True
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _scenario(tmp_path, text: str):
    f = tmp_path / "s.yaml"
    f.write_text(text, encoding="utf-8")
    return load_scenario(str(f))


def test_errors_and_dropped_connections_are_counted_not_fatal(tmp_path, flaky_url):
    sc = _scenario(
        tmp_path,
        """\
name: flaky
phases: [{name: run, duration_s: 30, concurrency: 4}]
prompt_tokens: 20
max_tokens: 3
max_requests: 40
slo: {error_rate: 0.01}
""",
    )
    report = asyncio.run(BenchRunner(flaky_url, sc).run())
    assert report.requests == 40 and report.cancelled == 0
    assert report.completed == 10 and report.failed == 30
    assert report.errors == {"http_500": 10, "dropped": 10, "bad_response": 10}
    assert "engine is dead" in report.error_examples["http_500"]
    assert report.error_rate == pytest.approx(0.75)
    assert report.output_tokens == 30  # the usage records of the ten good answers
    assert report.ttft_ms.count == 10 and report.ttft_ms.p99 < report.e2e_ms.p99
    assert not report.passed and not report.slo[0].ok
    assert any("/tokenize" in n for n in report.notes)  # sized by estimate, and it says so
    assert any("/metrics" in n for n in report.notes)
    assert report.server is None and report.prompt_tokens_sizing == "estimate"


def test_the_stub_with_injected_faults_through_the_same_path(tmp_path):
    sc = _scenario(
        tmp_path,
        """\
phases: [{name: run, duration_s: 30, concurrency: 3}]
prompt_tokens: 16
max_tokens: 5
max_requests: 30
""",
    )
    with StubThread(StubConfig(fail_every=5, drop_every=7, token_delay_s=0.001)) as stub:
        report = asyncio.run(BenchRunner(stub.url, sc).run())
        served = stub.counters.generation_tokens
    assert report.requests == 30
    assert report.errors["http_500"] == 6  # requests 5, 10, ..., 30
    assert report.errors["dropped"] == 4  # 7, 14, 21, 28
    assert report.completed == 20 and report.output_tokens == 100
    # The engine's counter covers the good answers plus the tokens streamed before each drop; the
    # warm-up request before the run (5 tokens) is outside the figures.
    assert report.server.generation_tokens == 100 + 4 * 2
    assert served == 100 + 4 * 2 + 5


def test_latencies_follow_a_server_paced_at_a_known_rate(tmp_path):
    """First token after 80 ms, then one every 15 ms: each figure must be at least that (a clock
    started late or a first token taken for a later one would read less) and they must not be
    mixed up. Only lower bounds: a loaded machine can add delay, it cannot remove it."""
    sc = _scenario(
        tmp_path, "phases: [{duration_s: 30, concurrency: 2}]\nprompt_tokens: 8\nmax_tokens: 5\nmax_requests: 6\n"
    )
    with StubThread(StubConfig(first_token_delay_s=0.08, token_delay_s=0.015)) as stub:
        report = asyncio.run(BenchRunner(stub.url, sc).run())
    assert report.completed == 6
    assert report.ttft_ms.min >= 79 and report.ttft_ms.p50 < report.e2e_ms.p50
    assert report.tpot_ms.min >= 14 and report.itl_ms.p50 >= 14
    assert report.e2e_ms.min >= 79 + 4 * 14
    assert report.itl_ms.p50 < report.ttft_ms.min  # the wait for the first token is not a gap


def test_unreachable_server_raises_unreachable(tmp_path):
    sc = _scenario(tmp_path, "phases: [{duration_s: 1, concurrency: 1}]\nprompt_tokens: 8\nmax_tokens: 2\n")
    with pytest.raises(Unreachable) as err:
        asyncio.run(BenchRunner(f"http://127.0.0.1:{free_port()}", sc).run())
    assert "cannot reach" in err.value.cause and "curl" in err.value.fix


def test_unknown_model_is_bad_input(tmp_path, flaky_url):
    sc = _scenario(tmp_path, "phases: [{duration_s: 1, concurrency: 1}]\nprompt_tokens: 8\nmax_tokens: 2\n")
    with pytest.raises(BadInput, match="does not serve a model named 'gpt'") as err:
        asyncio.run(BenchRunner(flaky_url + "/v1/", sc, model="gpt").run())
    assert err.value.fix == "use --model flaky"


def test_transport_reuses_connections_and_streams_as_data_arrives():
    async def go(url: str):
        transport = LeanTransport()
        async with httpx.AsyncClient(base_url=url, transport=transport) as c:
            results = [
                await stream_request(
                    c,
                    endpoint(c, "completions"),
                    request_body("completions", "stub", "a b c", 6, True),
                    time.perf_counter,
                )
                for _ in range(5)
            ]
            chat = await stream_request(
                c, endpoint(c, "chat"), request_body("chat", "stub", "你好", 4, True), time.perf_counter
            )
            models = (await c.get("/v1/models")).json()
            idle = sum(len(v) for v in transport._idle.values())
        return results, chat, models, idle

    with StubThread(StubConfig(token_delay_s=0.02)) as stub:
        results, chat, models, idle = asyncio.run(go(stub.url))
    assert all(r.ok and r.output_tokens == 6 and r.prompt_tokens == 3 for r in results)
    assert chat.ok and chat.output_tokens == 4 and chat.prompt_tokens == 2
    assert idle == 1  # one connection served every request in turn
    assert models["data"][0]["id"] == "stub"
    # Tokens paced 20 ms apart arrive spread out, not in one lump at the end: the transport does
    # not buffer the stream. (A buffered stream shows gaps of microseconds; a loaded machine may
    # delay one token and bunch the next, so single gaps are not compared.)
    gaps = [g for r in results for g in r.itl_s]
    assert len(gaps) == 25 and sorted(gaps)[len(gaps) // 2] > 0.01
    assert all(sum(r.itl_s) > 0.05 for r in results)  # 5 gaps of 20 ms each, ~0 if buffered


class _NotStreaming(_Flaky):
    """Ignores stream=true and answers one JSON document."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self._send(200, b'{"choices":[{"text":"all at once"}],"usage":{"completion_tokens":3}}')


def test_an_answer_that_is_not_an_event_stream_is_a_bad_response(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotStreaming)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sc = _scenario(
        tmp_path, "phases: [{duration_s: 5, concurrency: 2}]\nprompt_tokens: 8\nmax_tokens: 3\nmax_requests: 6\n"
    )
    try:
        report = asyncio.run(BenchRunner(f"http://127.0.0.1:{server.server_address[1]}", sc).run())
    finally:
        server.shutdown()
        server.server_close()
    assert report.errors == {"bad_response": 6}
    assert "not an event stream" in report.error_examples["bad_response"]


def test_stop_ends_an_open_loop_run_waiting_on_its_concurrency_cap(tmp_path):
    sc = _scenario(
        tmp_path,
        """\
phases: [{name: capped, duration_s: 300, rate: 50, max_concurrency: 2}]
prompt_tokens: 8
max_tokens: 3000
""",
    )

    async def go(url: str):
        stop = asyncio.Event()
        runner = BenchRunner(url, sc)
        task = asyncio.create_task(runner.run(stop))
        while runner._in_flight < 2:  # both slots taken; the dispatcher now waits for one
            await asyncio.sleep(0.05)
        stop.set()
        # Each answer takes 30 s: a run that waited for them (or for the cap) would still be going.
        return await asyncio.wait_for(task, 15.0)

    with StubThread(StubConfig(token_delay_s=0.01, max_model_len=100_000)) as stub:
        report = asyncio.run(go(stub.url))
    assert report.interrupted and not report.passed
    assert report.completed == 0 and report.cancelled == 2
    assert report.requests == 2


def test_a_slow_metrics_page_is_placed_where_it_was_made_not_where_it_arrived():
    # Under a burst on 2 cores vLLM's /metrics takes seconds: stamped on arrival, a reading taken
    # inside an 8 s burst lands after it, and the report said the burst was never sampled.
    from types import SimpleNamespace

    now = [10.0]
    runner = BenchRunner("http://127.0.0.1:1", load_scenario("burst"), metrics_every_s=0.01, clock=lambda: now[0])
    runner._t0 = 0.0
    calls = 0

    async def slow_scrape():
        nonlocal calls
        calls += 1
        if calls > 1:
            await asyncio.Event().wait()  # the next page never comes: the test cancels
        now[0] += 4.0  # the page took 4 s
        return SimpleNamespace(waiting=7.0, running=8.0, kv_usage=0.5)

    runner._scrape = slow_scrape

    async def one_sample():
        task = asyncio.create_task(runner._sample_metrics())
        while calls < 2:
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(one_sample())
    runner._scraper.close()
    assert runner._samples == [(12.0, 7.0)]
