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

GET /health answers 200 once every backend's /health does; GET /metrics counts the requests per
backend (ascendctl_proxy_requests_total{role, backend}) and the failures.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

COMPLETIONS = ("/v1/completions", "/v1/chat/completions")
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


class Pool:
    """Backends of one role, taken in turn; counts what each got."""

    def __init__(self, role: str, backends: list[tuple[str, int]]):
        self.role = role
        self.backends = backends
        self._next = itertools.cycle(range(len(backends)))
        self._lock = threading.Lock()
        self.requests = {b: 0 for b in backends}
        self.failures = {b: 0 for b in backends}

    def take(self) -> tuple[str, int]:
        with self._lock:
            backend = self.backends[next(self._next)]
            self.requests[backend] += 1
            return backend

    def failed(self, backend: tuple[str, int]) -> None:
        with self._lock:
            self.failures[backend] += 1


def _request(backend: tuple[str, int], method: str, path: str, body: bytes | None, headers: dict, timeout: float):
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

    def _reply(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = urlsplit(self.path).path
        if path == "/health":
            bad = [f"{h}:{p}" for h, p in self.server.all_backends() if not _healthy((h, p))]
            body = json.dumps({"unhealthy": bad}).encode()
            self._reply(503 if bad else 200, body)
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
        backend = prefill.take()
        try:
            conn, answer = _request(
                backend, "POST", path, json.dumps(first).encode(), self._headers(), self.server.timeout_s
            )
            data = answer.read()
            conn.close()
        except OSError as exc:
            prefill.failed(backend)
            self._reply(502, json.dumps({"error": f"prefiller {backend[0]}:{backend[1]}: {exc}"}).encode())
            return
        if answer.status != 200:
            prefill.failed(backend)
            self._reply(answer.status, data)
            return
        params = (json.loads(data or b"{}") or {}).get("kv_transfer_params")
        if params:
            request["kv_transfer_params"] = params
        self._relay(decode, "POST", path, json.dumps(request).encode())

    def _relay(self, pool: Pool, method: str, path: str, body: bytes | None) -> None:
        backend = pool.take()
        try:
            conn, answer = _request(backend, method, path, body, self._headers(), self.server.timeout_s)
        except OSError as exc:
            pool.failed(backend)
            self._reply(502, json.dumps({"error": f"{pool.role} {backend[0]}:{backend[1]}: {exc}"}).encode())
            return
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
        except OSError:
            pool.failed(backend)
        finally:
            conn.close()


def _healthy(backend: tuple[str, int]) -> bool:
    try:
        conn, answer = _request(backend, "GET", "/health", None, {}, 5)
        answer.read()
        conn.close()
        return answer.status == 200
    except OSError:
        return False


class ProxyServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], pools: list[Pool], timeout_s: float):
        super().__init__(address, Handler)
        self.pools = pools
        self.timeout_s = timeout_s

    def all_backends(self) -> list[tuple[str, int]]:
        return [b for pool in self.pools for b in pool.backends]

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
    server = ProxyServer((args.host, args.port), pools, args.timeout)
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
