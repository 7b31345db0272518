"""The proxy in front of a prefill / decode layout, or the balancer in front of external-dp ranks.

    python -m engine.pdproxy --port 8080 --prefiller-hosts H --prefiller-ports 13700 \
        --decoder-hosts H --decoder-ports 13701
    python -m engine.pdproxy --port 8000 --backends 127.0.0.1:7100 127.0.0.1:7101

It takes the flags of vllm-ascend's example proxy (examples/disaggregated_prefill_v1/
load_balance_proxy_server_example.py), which is not installed with any package, and does what it
does for a completion: the request goes to a prefiller with max_tokens 1 and
`kv_transfer_params: {do_remote_decode: true, ...}`, then to a decoder with the
`kv_transfer_params` the prefiller answered (Mooncake / NIXL find the KV with them; a connector
that shares storage, such as ExampleConnector, finds it by the prompt), and the decoder's answer,
streamed or not, goes back to the client. With --backends each request goes to the next backend in
turn. Standard library only: it runs on any Python the host has, beside the engine or not.

Backends that die are routed around, and come back by themselves: a thread reads every backend's
/health each --check-interval seconds, and a backend that refuses a connection, or answers a
server error while its /health fails, is marked down at once. A request goes only to backends that
are up (one that refuses the connection is marked down and the next one is tried: the request had
not reached it). With no decoder up, a completion is refused at once with 503 and the reason,
before any prefill is spent on it; with no prefiller up, likewise. A restarted instance is taken
back as soon as its /health answers: the proxy keeps nothing of it (the KV it must fetch is named
by the prefiller's answer to each request, with that prefiller's engine_id of the moment).

GET /health answers 200 while every role has a backend up (`degraded` lists the ones down), 503
when a role has none; GET /metrics counts the requests per backend
(ascendctl_proxy_requests_total{role, backend}), the failures, the requests refused for want of a
backend (ascendctl_proxy_refused_total{role}) and whether each backend is up
(ascendctl_proxy_backend_up{role, backend}).
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

COMPLETIONS = ("/v1/completions", "/v1/chat/completions")
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


Backend = tuple[str, int]


class Pool:
    """Backends of one role, taken in turn among those up; counts what each got. A backend is up
    until it is seen down (`down`), and up again when its /health answers (`up`)."""

    def __init__(self, role: str, backends: list[Backend]):
        self.role = role
        self.backends = backends
        self._next = itertools.cycle(range(len(backends)))
        self._lock = threading.Lock()
        self.requests = {b: 0 for b in backends}
        self.failures = {b: 0 for b in backends}
        self.refused = 0  # requests answered 503: no backend of this role was up
        # backend -> (since when, why): the ones down. Every backend starts up: the first health
        # check follows at once, and a refused connection marks one down on the spot.
        self.down_since: dict[Backend, tuple[float, str]] = {}

    def take(self, skip: tuple[Backend, ...] = ()) -> Backend | None:
        """The next backend that is up (and not in `skip`), counted; None when there is none."""
        with self._lock:
            for _ in range(len(self.backends)):
                backend = self.backends[next(self._next)]
                if backend not in self.down_since and backend not in skip:
                    self.requests[backend] += 1
                    return backend
            return None

    def failed(self, backend: Backend) -> None:
        with self._lock:
            self.failures[backend] += 1

    def refuse(self) -> str:
        """Count a request refused for want of a backend; the reason, each backend's."""
        with self._lock:
            self.refused += 1
            now = time.monotonic()
            why = [f"{h}:{p} {reason}, down {now - t:.0f} s" for (h, p), (t, reason) in self.down_since.items()]
        return f"no {self.role} instance is up ({'; '.join(why)})"

    def down(self, backend: Backend, reason: str) -> None:
        with self._lock:
            if backend in self.down_since:
                return
            self.down_since[backend] = (time.monotonic(), reason)
            left = len(self.backends) - len(self.down_since)
        tail = f"{left} {self.role} instance(s) left" if left else f"no {self.role} instance left: requests get 503"
        _say(f"{self.role} {backend[0]}:{backend[1]} down ({reason}); {tail}")

    def up(self, backend: Backend) -> None:
        with self._lock:
            was = self.down_since.pop(backend, None)
        if was is not None:
            _say(f"{self.role} {backend[0]}:{backend[1]} back after {time.monotonic() - was[0]:.0f} s down")

    def any_up(self) -> bool:
        with self._lock:
            return len(self.down_since) < len(self.backends)


def _say(message: str) -> None:
    print(f"pdproxy: {message}", file=sys.stderr, flush=True)


def _request(backend: Backend, method: str, path: str, body: bytes | None, headers: dict, timeout: float):
    conn = http.client.HTTPConnection(backend[0], backend[1], timeout=timeout)
    conn.request(method, path, body=body, headers=headers)
    return conn, conn.getresponse()


class Handler(BaseHTTPRequestHandler):
    server: ProxyServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        sys.stderr.write(f"proxy: {self.address_string()} {format % args}\n")

    def _headers(self) -> dict:
        out = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        out["Content-Type"] = "application/json"
        return out

    def _reply(self, code: int, body: bytes, kind: str = "application/json", extra: dict | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = urlsplit(self.path).path
        if path == "/health":
            status, body = self.server.health()
            self._reply(status, json.dumps(body).encode())
        elif path == "/metrics":
            self._reply(200, self.server.metrics().encode(), "text/plain; version=0.0.4")
        else:
            pool = self.server.pools[-1]
            self._relay(pool, "GET", self.path, None)

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        path = urlsplit(self.path).path
        if len(self.server.pools) == 2 and path in COMPLETIONS:
            self._disaggregated(path, body)
        else:
            self._relay(self.server.pools[-1], "POST", self.path, body)

    def _disaggregated(self, path: str, body: bytes) -> None:
        prefill, decode = self.server.pools
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            self._reply(400, b'{"error": "the body is not JSON"}')
            return
        first = dict(request)
        first.update(max_tokens=1, stream=False)
        if "max_completion_tokens" in first:
            first["max_completion_tokens"] = 1
        first.pop("stream_options", None)
        first["kv_transfer_params"] = {
            "do_remote_decode": True,
            "do_remote_prefill": False,
            "remote_engine_id": None,
            "remote_block_ids": None,
            "remote_host": None,
            "remote_port": None,
        }
        # No decoder up: refuse now rather than spend a prefill whose KV nobody would fetch.
        if not decode.any_up():
            self._refuse(decode)
            return
        got = self._send(prefill, "POST", path, json.dumps(first).encode())
        if got is None:
            return
        backend, conn, answer = got
        try:
            data = answer.read()
        except OSError as exc:
            prefill.failed(backend)
            self._reply(502, json.dumps({"error": f"prefiller {backend[0]}:{backend[1]}: {exc}"}).encode())
            return
        finally:
            conn.close()
        if answer.status != 200:
            prefill.failed(backend)
            self._server_error(prefill, backend, answer.status)
            self._reply(answer.status, data)
            return
        params = (json.loads(data or b"{}") or {}).get("kv_transfer_params")
        if params:
            request["kv_transfer_params"] = params
        self._relay(decode, "POST", path, json.dumps(request).encode())

    def _refuse(self, pool: Pool) -> None:
        why = pool.refuse()
        raw = json.dumps({"error": f"{why}: the request was not sent; retry once it is back"}).encode()
        self._reply(503, raw, extra={"Retry-After": str(max(1, round(self.server.check_interval)))})

    def _send(self, pool: Pool, method: str, path: str, body: bytes | None):
        """(backend, connection, answer) from the first backend of `pool` that takes the request.
        One that refuses the connection never saw it: it is marked down and the next is tried.
        None once the client has been answered (no backend up: 503; an error: 502)."""
        tried: tuple[Backend, ...] = ()
        while True:
            backend = pool.take(tried)
            if backend is None:
                self._refuse(pool)
                return None
            try:
                conn, answer = _request(backend, method, path, body, self._headers(), self.server.timeout_s)
                return backend, conn, answer
            except ConnectionRefusedError as exc:
                pool.failed(backend)
                pool.down(backend, f"connection refused: {exc.strerror or exc}")
                tried += (backend,)
            except OSError as exc:
                pool.failed(backend)
                self._reply(502, json.dumps({"error": f"{pool.role} {backend[0]}:{backend[1]}: {exc}"}).encode())
                return None

    def _server_error(self, pool: Pool, backend: Backend, status: int) -> None:
        """A 5xx from a backend: look at its /health now (a dead EngineCore answers 500 for a
        moment before its API server exits) rather than at the next check."""
        if status >= 500:
            self.server.check(pool, backend)

    def _relay(self, pool: Pool, method: str, path: str, body: bytes | None) -> None:
        got = self._send(pool, method, path, body)
        if got is None:
            return
        backend, conn, answer = got
        if answer.status >= 500:
            pool.failed(backend)
            self._server_error(pool, backend, answer.status)
        try:
            self.send_response(answer.status)
            for key, value in answer.getheaders():
                if key.lower() not in HOP:
                    self.send_header(key, value)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            while chunk := answer.read1(65536):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (OSError, http.client.HTTPException) as exc:
            # The backend died mid-answer (or the client left): the answer stays unterminated and
            # the connection is closed, so the client sees an error instead of waiting for the rest.
            pool.failed(backend)
            self.close_connection = True
            _say(f"{pool.role} {backend[0]}:{backend[1]}: the answer broke off: {exc or type(exc).__name__}")
        finally:
            conn.close()


def _health_of(backend: Backend, timeout: float = 5.0) -> str | None:
    """None when the backend's /health answers 200; else why not."""
    try:
        conn, answer = _request(backend, "GET", "/health", None, {}, timeout)
        answer.read()
        conn.close()
    except ConnectionRefusedError:
        return "connection refused"
    except (TimeoutError, socket.timeout):
        return f"/health unanswered in {timeout:g} s"
    except OSError as exc:
        return f"/health: {exc.strerror or exc}"
    return None if answer.status == 200 else f"/health answered {answer.status}"


class ProxyServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], pools: list[Pool], timeout_s: float, check_interval: float = 2.0):
        super().__init__(address, Handler)
        self.pools = pools
        self.timeout_s = timeout_s
        self.check_interval = check_interval
        self._checking = threading.Event()
        self._closed = threading.Event()
        if check_interval > 0:
            threading.Thread(target=self._check_loop, name="pdproxy-health", daemon=True).start()

    def check(self, pool: Pool, backend: Backend) -> bool:
        """Read one backend's /health and mark it up or down; True when up."""
        why = _health_of(backend, min(5.0, max(1.0, self.check_interval * 2)))
        if why is None:
            pool.up(backend)
        else:
            pool.down(backend, why)
        return why is None

    def check_all(self) -> None:
        for pool in self.pools:
            for backend in pool.backends:
                self.check(pool, backend)
        self._checking.set()

    def _check_loop(self) -> None:
        while not self._closed.is_set():
            try:
                self.check_all()
            except Exception as exc:  # noqa: BLE001 - the checks must outlive any one failure
                _say(f"health check failed: {exc}")
            self._closed.wait(self.check_interval)

    def server_close(self) -> None:
        self._closed.set()
        super().server_close()

    def health(self) -> tuple[int, dict]:
        """200 while every role has a backend up, else 503; the backends down and why."""
        if self.check_interval > 0:
            self._checking.wait(10)  # the first round of checks, at start
        else:
            self.check_all()
        now = time.monotonic()
        down = {
            f"{h}:{p}": {"role": pool.role, "reason": reason, "down_s": round(now - t, 1)}
            for pool in self.pools
            for (h, p), (t, reason) in list(pool.down_since.items())
        }
        missing = [pool.role for pool in self.pools if not pool.any_up()]
        body: dict = {"status": "down" if missing else "degraded" if down else "ok", "down": down}
        if missing:
            body["no_instance_up"] = missing
        return (503 if missing else 200), body

    def metrics(self) -> str:
        lines = [
            "# HELP ascendctl_proxy_requests_total Requests the proxy sent to each backend.",
            "# TYPE ascendctl_proxy_requests_total counter",
        ]
        for pool in self.pools:
            for (host, port), count in pool.requests.items():
                lines.append(f'ascendctl_proxy_requests_total{{role="{pool.role}",backend="{host}:{port}"}} {count}')
        lines += [
            "# HELP ascendctl_proxy_failures_total Requests to a backend that failed (no answer, or an error).",
            "# TYPE ascendctl_proxy_failures_total counter",
        ]
        for pool in self.pools:
            for (host, port), count in pool.failures.items():
                lines.append(f'ascendctl_proxy_failures_total{{role="{pool.role}",backend="{host}:{port}"}} {count}')
        lines += [
            "# HELP ascendctl_proxy_refused_total Requests answered 503 because no backend of the role was up.",
            "# TYPE ascendctl_proxy_refused_total counter",
        ]
        lines += [f'ascendctl_proxy_refused_total{{role="{pool.role}"}} {pool.refused}' for pool in self.pools]
        lines += [
            "# HELP ascendctl_proxy_backend_up Whether the proxy routes to the backend (its /health answers).",
            "# TYPE ascendctl_proxy_backend_up gauge",
        ]
        for pool in self.pools:
            for host, port in pool.backends:
                up = int((host, port) not in pool.down_since)
                lines.append(f'ascendctl_proxy_backend_up{{role="{pool.role}",backend="{host}:{port}"}} {up}')
        return "\n".join(lines) + "\n"


def _pairs(hosts: list[str], ports: list[int], what: str) -> list[tuple[str, int]]:
    if len(hosts) == 1:
        hosts = hosts * len(ports)
    if len(hosts) != len(ports):
        raise SystemExit(f"pdproxy: {len(hosts)} {what} hosts for {len(ports)} ports")
    return list(zip(hosts, ports))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m engine.pdproxy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--prefiller-hosts", nargs="+", default=[])
    parser.add_argument("--prefiller-ports", type=int, nargs="+", default=[])
    parser.add_argument("--decoder-hosts", nargs="+", default=[])
    parser.add_argument("--decoder-ports", type=int, nargs="+", default=[])
    parser.add_argument("--backends", nargs="+", default=[], help="HOST:PORT of each API server to balance")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for a backend's answer")
    parser.add_argument(
        "--check-interval", type=float, default=2.0, help="seconds between two reads of every backend's /health"
    )
    args = parser.parse_args(argv)
    if args.backends:
        backends = [(b.rpartition(":")[0], int(b.rpartition(":")[2])) for b in args.backends]
        pools = [Pool("rank", backends)]
    else:
        pools = [
            Pool("prefill", _pairs(args.prefiller_hosts, args.prefiller_ports, "prefiller")),
            Pool("decode", _pairs(args.decoder_hosts, args.decoder_ports, "decoder")),
        ]
        if not pools[0].backends or not pools[1].backends:
            raise SystemExit("pdproxy: give --prefiller-hosts/--prefiller-ports and --decoder-hosts/--decoder-ports")
    server = ProxyServer((args.host, args.port), pools, args.timeout, args.check_interval)
    where = ", ".join(f"{p.role} " + " ".join(f"{h}:{q}" for h, q in p.backends) for p in pools)
    print(f"pdproxy: listening on {args.host}:{args.port}: {where}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
