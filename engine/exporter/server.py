"""The exporter's HTTP endpoint: /metrics (Prometheus text, or OpenMetrics when the scraper asks
for it: prometheus_client picks by the Accept header), /api/snapshot (what `top` reads from a
remote host), / (a page linking the rest), /dashboard.json and /rules.yml.

A scrape renders the latest state the background groups left; it never runs a tool itself.
"""

from __future__ import annotations

import base64
import binascii
import html
import json
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from engine.exporter import passthrough
from engine.exporter.collect import Exporter, ExporterState
from engine.exporter.families import engine_name, families
from engine.exporter.webconfig import WebConfig
from engine.telemetry.snapshot import REMOTE_KIND as SNAPSHOT_KIND
from engine.telemetry.snapshot import REMOTE_PATH as SNAPSHOT_PATH


def encoder_for(accept: str):
    """(render function, content type) for the scraper's Accept header.

    prometheus_client 0.26 rewrites `vllm:x` sample names to `vllm_x` in OpenMetrics with its
    default escaping (the HELP and TYPE lines keep the colon), so Prometheus files every vLLM
    sample under a name no dashboard asks for. All our names are legacy-valid, so rendering with
    allow-utf-8 escaping writes them unchanged.
    """
    from functools import partial

    from prometheus_client import openmetrics
    from prometheus_client.openmetrics import exposition as om

    encoder, ctype = choose_encoder(accept)
    if ctype.startswith("application/openmetrics-text"):
        return partial(om.generate_latest, escaping=openmetrics.exposition.ALLOWUTF8), om.CONTENT_TYPE_LATEST
    return encoder, ctype


class _Families:
    def __init__(self, **parts: bool) -> None:
        self.parts = parts
        self.state: ExporterState | None = None  # the state of the render under way

    def collect(self):
        return families(self.state, **self.parts) if self.state is not None else iter(())


_EOF = b"# EOF\n"


class Renderer:
    """Renders a scrape: our families (prometheus_client encodes them), the engines' vllm:*
    series (relabelled text, `passthrough`), then the sources' health.

    What the groups collected changes only when a group runs again, so it is rendered once per
    collection and format; the sources' ages move with the clock and are rendered every time.
    """

    def __init__(self, cache: bool = True) -> None:
        self._collected = _Families(collected=True, sources=False)
        self._sources = _Families(collected=False, sources=True)
        self._collected_reg = CollectorRegistry(auto_describe=False)
        self._collected_reg.register(self._collected)
        self._sources_reg = CollectorRegistry(auto_describe=False)
        self._sources_reg.register(self._sources)
        self._cache: dict[str, tuple[tuple, bytes]] | None = {} if cache else None
        self._lock = threading.Lock()

    def render(self, state: ExporterState, accept: str = "") -> tuple[bytes, str]:
        encoder, ctype = encoder_for(accept)
        openmetrics = ctype.startswith("application/openmetrics-text")
        generation = tuple((s.name, s.runs) for s in state.statuses)
        with self._lock:
            cached = self._cache.get(ctype) if self._cache is not None else None
            if cached is None or cached[0] != generation or not generation:
                self._collected.state = state
                body = encoder(self._collected_reg)
                if body.endswith(_EOF):  # OpenMetrics: one EOF, at the very end
                    body = body[: -len(_EOF)]
                bodies = [(engine_name(label), e.passthrough) for label, e in state.engines.items() if e.passthrough]
                dropped: dict[str, int] = {}
                merged = passthrough.merge(bodies, state.host, dropped)
                body += passthrough.render(merged, openmetrics).encode()
                body += passthrough.render_dropped(dropped, state.host).encode()
                cached = (generation, body)
                if self._cache is not None:
                    self._cache[ctype] = cached
            self._sources.state = state
            return cached[1] + encoder(self._sources_reg), ctype


def snapshot_document(exporter: Exporter, schema_version: int) -> dict:
    state = exporter.state()
    snap = state.snapshot
    return {
        "kind": SNAPSHOT_KIND,
        "schema_version": schema_version,
        "host": state.host,
        "snapshot": snap.to_dict() if snap is not None else None,
    }


def _page(version: str) -> bytes:
    links = [
        ("/metrics", "metrics (Prometheus text; OpenMetrics on request)"),
        ("/dashboard.json", "the Grafana dashboard"),
        ("/rules.yml", "the Prometheus alerting rules"),
        (SNAPSHOT_PATH, "the snapshot `ascendctl top` reads"),
    ]
    items = "".join(f'<li><a href="{href}">{html.escape(text)}</a></li>' for href, text in links)
    return (
        "<!doctype html><html><head><meta charset=utf-8><title>ascendctl exporter</title></head>"
        f"<body><h1>ascendctl exporter {html.escape(version)}</h1><ul>{items}</ul></body></html>"
    ).encode()


# A connection that sends nothing for this long is closed (a half-sent request, an idle
# keep-alive, a TLS client that never says hello); Prometheus opens a new one when it needs to.
IDLE_TIMEOUT_S = 15.0
# Connections served at once; past it a new connection is closed at once. A Prometheus keeps one
# per target, so this only bites a flood.
MAX_CONNECTIONS = 256
# The listen backlog: Python's default of 5 makes a burst of scrapes wait for SYN retransmits.
BACKLOG = 512


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = BACKLOG

    def __init__(self, *args, **kwargs) -> None:
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(*args, **kwargs)

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request, client_address) -> None:
        import sys

        # A client that goes away, stays silent or fails its TLS handshake is not our error.
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class _V6Server(_Server):
    address_family = socket.AF_INET6


class ExporterServer:
    """A threading HTTP server; `serve_forever()` in the caller's thread, or `start()` for one of
    its own (tests)."""

    def __init__(
        self,
        exporter: Exporter,
        host: str,
        port: int,
        web: WebConfig | None = None,
        version: str = "",
        schema_version: int = 1,
        dashboard: Callable[[], str] | None = None,
        rules: Callable[[], str] | None = None,
    ) -> None:
        self.exporter = exporter
        self.web = web or WebConfig()
        renderer = Renderer()
        page = _page(version)
        web_cfg = self.web
        files = {"/dashboard.json": (dashboard, "application/json"), "/rules.yml": (rules, "text/yaml")}

        class Handler(BaseHTTPRequestHandler):
            server_version = "ascendctl-exporter"
            sys_version = ""
            timeout = IDLE_TIMEOUT_S  # set on the connection before anything is read

            def setup(self) -> None:
                super().setup()
                # TLS: the handshake runs here, in this connection's thread and under its
                # timeout, never in the accept loop where one silent client would block all.
                if isinstance(self.connection, ssl.SSLSocket):
                    self.connection.do_handshake()

            def log_message(self, format, *args):  # noqa: A002 - access logs are noise here
                pass

            def _send(self, code: int, body: bytes, ctype: str, extra: dict | None = None) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _authorized(self) -> bool:
                if not web_cfg.users:
                    return True
                header = self.headers.get("Authorization", "")
                if header.startswith("Basic "):
                    try:
                        user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
                    except (binascii.Error, UnicodeDecodeError):
                        user, password = "", ""
                    if user and web_cfg.check(user, password):
                        return True
                self._send(
                    401, b"Unauthorized\n", "text/plain", {"WWW-Authenticate": 'Basic realm="ascendctl exporter"'}
                )
                return False

            def do_GET(self):  # noqa: N802 - the http.server API
                if not self._authorized():
                    return
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    scraped = getattr(exporter, "scraped", None)
                    if scraped is not None:
                        scraped()  # the groups place their next runs just before the next scrape
                    try:
                        body, ctype = renderer.render(exporter.state(), self.headers.get("Accept", ""))
                    except Exception as exc:  # noqa: BLE001 - a bug must answer 500, not kill the server
                        self._send(500, f"cannot render metrics: {type(exc).__name__}: {exc}\n".encode(), "text/plain")
                        return
                    self._send(200, body, ctype)
                elif path == "/":
                    self._send(200, page, "text/html; charset=utf-8")
                elif path == SNAPSHOT_PATH:
                    doc = snapshot_document(exporter, schema_version)
                    body = json.dumps(doc, ensure_ascii=False, allow_nan=False, default=str).encode()
                    self._send(200, body, "application/json")
                elif path in files and files[path][0] is not None:
                    make, ctype = files[path]
                    self._send(200, make().encode(), ctype)  # type: ignore[misc]
                else:
                    self._send(404, b"Not found: try /metrics\n", "text/plain")

            do_HEAD = do_GET

        server_class = _V6Server if ":" in host else _Server
        self.httpd = server_class((host, port), Handler)
        if self.web.tls is not None:
            self.httpd.socket = self.web.tls.wrap_socket(
                self.httpd.socket, server_side=True, do_handshake_on_connect=False
            )
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.5)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, name="exporter-http", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
