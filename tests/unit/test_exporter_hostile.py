"""The exporter facing hostile clients and hostile engines: a silent TLS client, half-sent
requests, bursts, engine pages that would break the scrape, and credentials that must never
leave the process."""

from __future__ import annotations

import json
import re
import socket
import ssl
import subprocess
import time

import bcrypt
import httpx
import pytest
from helpers import require_tool
from hostile_pages import VLLM_PAGE, HostileServer

from engine.errors import BadInput
from engine.exporter import server as server_mod
from engine.exporter.collect import EngineExtra, Exporter, ExporterState
from engine.exporter.server import ExporterServer, Renderer, snapshot_document
from engine.exporter.webconfig import WebConfig, load_web_config
from engine.telemetry.collector import Collector, Target


def _exporter() -> Exporter:
    return Exporter(with_runs=False, doctor=False, plogs=False)


@pytest.fixture
def tls_config(tmp_path):
    openssl = require_tool("openssl")
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-keyout", str(tmp_path / "k.pem"), "-out", str(tmp_path / "c.pem")],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    cfg = tmp_path / "web.yml"
    cfg.write_text("tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n")
    return load_web_config(cfg)


def test_a_tls_client_that_never_says_hello_blocks_no_scrape(tls_config):
    exp = _exporter()
    server = ExporterServer(exp, "127.0.0.1", 0, tls_config)
    server.start()
    idle = socket.create_connection(("127.0.0.1", server.port))  # connects, never sends a ClientHello
    try:
        time.sleep(0.3)
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        resp = httpx.get(f"https://127.0.0.1:{server.port}/metrics", verify=ctx, timeout=5)
        assert resp.status_code == 200 and "ascendctl_source_up" in resp.text
    finally:
        idle.close()
        server.shutdown()
        exp.close()


def test_a_half_sent_request_is_closed_after_the_idle_timeout(monkeypatch):
    monkeypatch.setattr(server_mod, "IDLE_TIMEOUT_S", 0.5)
    exp = _exporter()
    server = ExporterServer(exp, "127.0.0.1", 0)
    server.start()
    conn = socket.create_connection(("127.0.0.1", server.port))
    try:
        conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # the headers never end
        conn.settimeout(5)
        start = time.monotonic()
        assert conn.recv(100) == b""  # closed by the server, not held for ever
        assert time.monotonic() - start < 3
    finally:
        conn.close()
        server.shutdown()
        exp.close()


def test_past_the_connection_cap_a_new_connection_is_closed_and_scrapes_resume(monkeypatch):
    monkeypatch.setattr(server_mod, "MAX_CONNECTIONS", 2)
    exp = _exporter()
    server = ExporterServer(exp, "127.0.0.1", 0)
    server.start()
    held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(2)]
    try:
        time.sleep(0.3)
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=3)
        for c in held:
            c.close()
        time.sleep(0.3)
        assert httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=3).status_code == 200
    finally:
        for c in held:
            c.close()
        server.shutdown()
        exp.close()


def test_the_listen_backlog_holds_a_burst_of_scrapes():
    ss = require_tool("ss", "iproute2")
    exp = _exporter()
    server = ExporterServer(exp, "127.0.0.1", 0)
    try:
        out = subprocess.run([ss, "-ltnH", f"sport = :{server.port}"], capture_output=True, text=True, timeout=10)
        backlog = int(out.stdout.split()[2])
        assert backlog >= 128  # Python's default is 5: a burst of 200 then waits for SYN retransmits
    finally:
        server.httpd.server_close()  # never served: shutdown() would wait for serve_forever
        exp.close()


def _page(extra: str) -> str:
    return VLLM_PAGE + "# HELP vllm:adv_x x\n" + extra


HOSTILE_PAGES = {
    "hostlabel": '# TYPE vllm:adv_x gauge\nvllm:adv_x{host="evil",model_name="m"} 1\n',
    "spaceengine": '# TYPE vllm:adv_x gauge\nvllm:adv_x{model_name="m", engine="0"} 1\n',
    "badlabel": "# TYPE vllm:adv_x gauge\nvllm:adv_x{garbage} 1\n",
    "badtype": '# TYPE vllm:adv_x banana\nvllm:adv_x{model_name="m"} 1\n',
    "badvalue": '# TYPE vllm:adv_x gauge\nvllm:adv_x{model_name="m"} one\n',
    "junk": '# TYPE vllm:adv_x gauge\nvllm:adv_x{model_name="m"} 1 2 3 4\n',
    "badescape": '# TYPE vllm:adv_x gauge\nvllm:adv_x{model_name="a\\qb"} 1\n',
    "twice": '# TYPE vllm:adv_x gauge\nvllm:adv_x{a="1",a="2"} 1\n',
    "bucket": '# TYPE vllm:adv_x histogram\nvllm:adv_x_bucket{model_name="m"} 1\n',
}


@pytest.mark.parametrize("name", sorted(HOSTILE_PAGES))
def test_one_bad_engine_line_never_makes_the_scrape_invalid(name):
    page = _page(HOSTILE_PAGES[name]).replace("# HELP vllm:adv_x x", "# HELP vllm:adv_x x \\q")
    state = ExporterState("h", engines={"e": EngineExtra("e", "http://e", passthrough=page)})
    text = Renderer(cache=False).render(state)[0].decode()
    from prometheus_client.parser import text_string_to_metric_families

    names = {f.name for f in text_string_to_metric_families(text)}  # raises on invalid text
    assert "vllm:num_requests_running" in names  # the engine's good series stay
    for line in text.splitlines():
        if line.startswith("vllm:"):
            names = re.findall(r'[{,]\s*([a-zA-Z_][a-zA-Z0-9_]*)="', line)
            assert names.count("host") == 1 and names.count("engine") == 1 and len(set(names)) == len(names)
    if name in ("spaceengine", "hostlabel"):  # renamed, kept
        assert 'vllm_engine="0"' in text and ("exported_host" in text or name == "spaceengine")
    else:
        assert re.search(r'^ascendctl_passthrough_dropped_lines\{engine="e",host="h"\} [12]$', text, re.M)
        assert "vllm:adv_x{" not in text


def test_promtool_accepts_every_hostile_engine_page():
    promtool = require_tool("promtool")
    pages = "".join(_page(t) for t in HOSTILE_PAGES.values())
    state = ExporterState("h", engines={"e": EngineExtra("e", "http://e", passthrough=pages)})
    for accept in ("", "application/openmetrics-text; version=1.0.0"):
        text = Renderer(cache=False).render(state, accept)[0]
        result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=60)
        assert b"parsing error" not in result.stdout + result.stderr, (result.stdout + result.stderr).decode()


SECRETS = ("URLPW0", "DOWNPW9", "LOGURLPW1", "LOGPW2", "LOGBEARER3", "MODELPW4")


def test_no_credential_leaves_the_exporter_or_a_recording(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text(
        "INFO start\n[ERROR] EZ9999: Inner Error! fetching https://bob:LOGURLPW1@hf.example/x "
        "password=LOGPW2 Authorization: Bearer LOGBEARER3\n"
    )
    page = VLLM_PAGE.replace('model_name="tiny"', 'model_name="http://m:MODELPW4@hub/m"')
    with HostileServer({"ok": page}) as pages:
        ok = pages.url.replace("://", "://alice:URLPW0@") + "/ok"
        exp = Exporter([ok, "http://carol:DOWNPW9@127.0.0.1:1/x"], with_runs=False, doctor=False, plogs=False)
        try:
            state = exp.run_once()
            served = json.dumps(snapshot_document(exp, 1))
            metrics = Renderer(cache=False).render(state)[0].decode()
        finally:
            exp.close()
        # the same collector is what `top --json` prints and `top --record` writes
        collector = Collector([Target(ok, "run-1", str(log))], timeout=2.0)
        try:
            collector.poll()
            recorded = collector.poll().to_json(schema_version=1)
        finally:
            collector.close()
    assert "127.0.0.1" in served and "EZ9999" in recorded
    for text in (served, metrics, recorded):
        assert not [s for s in SECRETS if s in text], text


def test_web_config_mistakes_are_refused_at_start(tmp_path):
    good = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()
    cases = {
        "basic_auth_users:\n  prom: '$2b$10$short'\n": "not a valid bcrypt hash",
        f"basic_auth_users:\n  a: '{good}'\nbasic_auth_users:\n  b: '{good}'\n": "duplicate key",
        f"basic_auth_users:\n  'user:colon': '{good}'\n": "cannot hold ':'",
        "http_server_config:\n  http2: false\n": "http_server_config (http2) is not supported",
    }
    for text, words in cases.items():
        cfg = tmp_path / "web.yml"
        cfg.write_text(text)
        with pytest.raises(BadInput) as err:
            load_web_config(cfg)
        assert words in err.value.cause


def test_an_unknown_user_costs_a_bcrypt_round_as_a_known_one():
    web = WebConfig(users={"prometheus": bcrypt.hashpw(b"pw", bcrypt.gensalt(8))})
    web.check("nobody", "x")  # the dummy hash is made once

    def timed(user: str) -> float:
        start = time.perf_counter()
        assert not web.check(user, "wrong")
        return time.perf_counter() - start

    known = min(timed("prometheus") for _ in range(3))
    unknown = min(timed("nobody") for _ in range(3))
    assert unknown > known / 3  # without the dummy round, an unknown user answers ~100x faster
