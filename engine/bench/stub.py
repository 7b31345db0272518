"""A minimal OpenAI-style streaming server on raw asyncio, for checking the load generator itself.

It answers /v1/models, /tokenize, /metrics, /v1/completions and /v1/chat/completions (streamed,
with a usage record), as fast as the event loop allows or at a set pace per token. Faults can be
injected: every k-th request answered with HTTP 500, or its connection dropped mid-stream, or
every request accepted and never answered (a hung engine). Used by
the tests and by `benchmarks/bench_loadgen.py`; run it alone with
`python -m engine.bench.stub --port 8100`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
from dataclasses import dataclass

_CJK = range(0x3000, 0xA000)


def stub_token_count(text: str) -> int:
    """The stub's notion of tokens: one per CJK character, one per run of other non-space characters."""
    cjk = sum(1 for ch in text if ord(ch) in _CJK)
    return cjk + len("".join(" " if ord(ch) in _CJK else ch for ch in text).split())


@dataclass
class StubConfig:
    model: str = "stub"
    max_model_len: int = 4096
    token_delay_s: float = 0.0  # pause between streamed tokens
    first_token_delay_s: float | None = None  # pause before the first token (None: token_delay_s)
    fail_every: int = 0  # every k-th generation request gets HTTP 500
    drop_every: int = 0  # every k-th generation request loses its connection after two tokens
    tokenize: bool = True  # serve /tokenize (False: 404, like a server without it)
    # At most this many paced answers at once, the rest wait (vllm:num_requests_waiting) as in an
    # engine with max_num_seqs; the KV usage gauge is running / max_running. 0: no limit.
    max_running: int = 0
    # Accept every generation request and never answer it (a hung engine whose /health answers).
    never_answer: bool = False


@dataclass
class StubCounters:
    requests: int = 0
    generation_tokens: int = 0
    prompt_tokens: int = 0
    succeeded: int = 0
    running: int = 0
    waiting: int = 0


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _response(status: str, body: bytes, ctype: bytes = b"application/json") -> bytes:
    return (
        b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n" % (status.encode(), ctype, len(body))
    ) + body


_STREAM_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


class StubServer:
    def __init__(self, config: StubConfig | None = None) -> None:
        self.config = config or StubConfig()
        self.counters = StubCounters()
        self._server: asyncio.AbstractServer | None = None
        self.port = 0
        self.answering: set[asyncio.Future] = set()  # paced answers in flight
        self.slots: asyncio.Semaphore | None = None  # made on the server's loop (max_running)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Conn(self), host, port, backlog=4096)
        self.port = self._server.sockets[0].getsockname()[1]
        if self.config.max_running:
            self.slots = asyncio.Semaphore(self.config.max_running)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self.answering):  # or they would be destroyed pending with the loop
            task.cancel()
        await asyncio.gather(*self.answering, return_exceptions=True)

    # ------------------------------------------------------------------ routes

    def metrics_text(self) -> bytes:
        c = self.counters
        lines = []
        for name, kind, value in (
            ("vllm:num_requests_running", "gauge", c.running),
            ("vllm:num_requests_waiting", "gauge", c.waiting),
            (
                "vllm:kv_cache_usage_perc",
                "gauge",
                c.running / self.config.max_running if self.config.max_running else 0,
            ),
            ("vllm:generation_tokens_total", "counter", c.generation_tokens),
            ("vllm:prompt_tokens_total", "counter", c.prompt_tokens),
            ("vllm:request_success_total", "counter", c.succeeded),
        ):
            lines.append(f"# TYPE {name} {kind}")
            lines.append(f'{name}{{model_name="{self.config.model}"}} {float(value)}')
        return ("\n".join(lines) + "\n").encode()

    def simple(self, method: bytes, path: bytes, body: bytes) -> bytes | None:
        """Answer a non-streaming route, or None for the generation routes."""
        if path == b"/v1/models":
            doc = {
                "object": "list",
                "data": [{"id": self.config.model, "object": "model", "max_model_len": self.config.max_model_len}],
            }
            return _response("200 OK", json.dumps(doc).encode())
        if path == b"/health":
            return _response("200 OK", b"")
        if path == b"/metrics":
            return _response("200 OK", self.metrics_text(), b"text/plain; version=0.0.4")
        if path == b"/tokenize" and self.config.tokenize and method == b"POST":
            prompt = json.loads(body).get("prompt", "")
            return _response(
                "200 OK",
                json.dumps({"count": stub_token_count(prompt), "max_model_len": self.config.max_model_len}).encode(),
            )
        if path in (b"/v1/completions", b"/v1/chat/completions") and method == b"POST":
            return None
        return _response("404 Not Found", b'{"detail":"Not Found"}')


class _Conn(asyncio.Protocol):
    def __init__(self, server: StubServer) -> None:
        self.server = server
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._next()

    def _next(self) -> None:
        while self.transport is not None and not self.transport.is_closing():
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end]
            length = 0
            low = head.lower()
            i = low.find(b"content-length:")
            if i >= 0:
                length = int(low[i + 15 : low.find(b"\r\n", i) if low.find(b"\r\n", i) > 0 else None])
            total = end + 4 + length
            if len(self.buf) < total:
                return
            body = self.buf[end + 4 : total]
            self.buf = self.buf[total:]
            method, path = head.split(b" ", 2)[:2]
            simple = self.server.simple(method, path, body)
            if simple is not None:
                self.transport.write(simple)
                continue
            delayed = self._generate(path, body)
            if delayed is not None:
                self.busy = True
                task = asyncio.ensure_future(delayed)
                self.server.answering.add(task)
                task.add_done_callback(self.server.answering.discard)
                return

    def _generate(self, path: bytes, body: bytes):
        srv, cfg = self.server, self.server.config
        c = srv.counters
        c.requests += 1
        n = c.requests
        req = json.loads(body)
        chat = path.endswith(b"chat/completions")
        prompt = req["messages"][-1]["content"] if chat else req.get("prompt", "")
        prompt_tokens = stub_token_count(prompt)
        max_tokens = int(req.get("max_tokens") or 16)
        if cfg.never_answer:
            return self._never()
        if cfg.fail_every and n % cfg.fail_every == 0:
            self.transport.write(_response("500 Internal Server Error", b'{"error":{"message":"injected failure"}}'))
            return None
        drop = bool(cfg.drop_every and n % cfg.drop_every == 0)
        if chat:
            tok = (
                b'data: {"object":"chat.completion.chunk","model":"%s","choices":[{"index":0,"delta":{"content":" w"},"finish_reason":null}]}\n\n'
                % cfg.model.encode()
            )
        else:
            tok = (
                b'data: {"object":"text_completion","model":"%s","choices":[{"index":0,"text":" w","finish_reason":null}]}\n\n'
                % cfg.model.encode()
            )
        tail = b'data: {"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}\n\n' % (
            prompt_tokens,
            max_tokens,
            prompt_tokens + max_tokens,
        )
        c.prompt_tokens += prompt_tokens
        if cfg.token_delay_s <= 0 and not cfg.first_token_delay_s and not drop:
            c.generation_tokens += max_tokens
            c.succeeded += 1
            self.transport.write(
                _STREAM_HEAD + _chunk(tok) * max_tokens + _chunk(tail) + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
            )
            return None
        return self._paced(tok, tail, max_tokens, drop)

    async def _paced(self, tok: bytes, tail: bytes, max_tokens: int, drop: bool) -> None:
        c, cfg = self.server.counters, self.server.config
        t = self.transport
        slots = self.server.slots
        if slots is not None:
            c.waiting += 1
            try:
                await slots.acquire()
            finally:
                c.waiting -= 1
        c.running += 1
        try:
            t.write(_STREAM_HEAD)
            first = cfg.token_delay_s if cfg.first_token_delay_s is None else cfg.first_token_delay_s
            for i in range(max_tokens):
                delay = first if i == 0 else cfg.token_delay_s
                if delay > 0:
                    await asyncio.sleep(delay)
                if t.is_closing():
                    return
                t.write(_chunk(tok))
                c.generation_tokens += 1
                if drop and i == 1:
                    t.abort()  # the connection dies mid-answer, as when a server process crashes
                    return
            t.write(_chunk(tail) + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            c.succeeded += 1
        finally:
            c.running -= 1
            if slots is not None:
                slots.release()
            self.busy = False
        self._next()

    async def _never(self) -> None:
        """Hold the request as running until the client gives up (never_answer)."""
        c = self.server.counters
        c.running += 1
        try:
            while self.transport is not None and not self.transport.is_closing():
                await asyncio.sleep(0.05)
        finally:
            c.running -= 1
            self.busy = False

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


class StubThread:
    """The stub on its own event loop in a daemon thread (tests): `with StubThread(cfg) as stub:`."""

    def __init__(self, config: StubConfig | None = None) -> None:
        self.server = StubServer(config)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self.server.start())
        self._ready.set()
        self._loop.run_forever()

    def __enter__(self) -> StubServer:
        self._thread.start()
        self._ready.wait(10)
        return self.server

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Minimal OpenAI-style streaming server (load generator checks).")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--token-delay", type=float, default=0.0, help="seconds between tokens")
    ap.add_argument("--first-token-delay", type=float, help="seconds before the first token (default: --token-delay)")
    ap.add_argument("--fail-every", type=int, default=0)
    ap.add_argument("--drop-every", type=int, default=0)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--max-running", type=int, default=0, help="answers at once; the rest wait (0: no limit)")
    ap.add_argument("--never-answer", action="store_true", help="accept every completion and never answer it")
    args = ap.parse_args(argv)
    cfg = StubConfig(
        token_delay_s=args.token_delay,
        first_token_delay_s=args.first_token_delay,
        fail_every=args.fail_every,
        drop_every=args.drop_every,
        max_model_len=args.max_model_len,
        max_running=args.max_running,
        never_answer=args.never_answer,
    )

    async def serve() -> None:
        srv = StubServer(cfg)
        await srv.start(port=args.port)
        print(f"listening on {srv.url}", flush=True)
        await asyncio.Event().wait()

    try:
        import uvloop  # optional: a faster event loop when installed

        uvloop.run(serve())
    except ImportError:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
