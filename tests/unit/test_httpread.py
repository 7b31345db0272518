"""Every page ascendctl reads has a total deadline and a size cap, and one slow engine never holds
the others (the engines are fetched concurrently)."""

from __future__ import annotations

import time

import pytest
from hostile_pages import VLLM_PAGE, HostileServer

from engine.errors import Unreachable
from engine.httpread import read_page
from engine.metrics.prom import scrape
from engine.telemetry.collector import Collector, Target, fetch_remote


@pytest.fixture
def server():
    with HostileServer({"ok": VLLM_PAGE}) as s:
        yield s


def test_a_page_is_read_whole(server):
    page = read_page(None, server.url + "/ok/metrics", deadline=2.0)
    assert page.status_code == 200 and "vllm:num_requests_running" in page.text


@pytest.mark.parametrize("path", ["trickle", "slowheaders", "silent"])
def test_a_server_that_trickles_or_stalls_is_cut_at_the_deadline(server, path):
    start = time.monotonic()
    with pytest.raises(Unreachable, match="did not answer in full within 0.8 s"):
        read_page(None, f"{server.url}/{path}/metrics", deadline=0.8)
    assert time.monotonic() - start < 2.5


def test_an_endless_page_stops_at_the_size_cap(server):
    with pytest.raises(Unreachable, match="sent more than 1 MiB"):
        read_page(None, server.url + "/endless/metrics", deadline=10.0, max_bytes=1024 * 1024)


def test_errors_name_the_url_without_its_credentials(server):
    with pytest.raises(Unreachable) as caught:
        scrape("http://carol:DOWNPW9@127.0.0.1:1/x", timeout=1.0)
    assert "DOWNPW9" not in caught.value.cause and "carol" not in caught.value.cause
    with pytest.raises(Unreachable) as caught:
        scrape(server.url.replace("://", "://alice:URLPW0@") + "/trickle", timeout=0.5)
    assert "URLPW0" not in caught.value.cause


def test_one_trickling_engine_never_holds_the_others(server):
    targets = [Target(server.url + "/trickle", "slow"), Target(server.url + "/ok", "fast")]
    collector = Collector(targets, timeout=1.0)
    try:
        start = time.monotonic()
        snap = collector.poll()
        took = time.monotonic() - start
    finally:
        collector.close()
    by_label = {e.label: e for e in snap.engines}
    assert by_label["fast"].status.ok and by_label["fast"].running == 0
    assert not by_label["slow"].status.ok and "did not answer in full" in by_label["slow"].status.error
    assert took < 2.5  # the deadline once, not once per engine


def test_a_remote_snapshot_nested_too_deep_is_not_an_exporter(server):
    server.pages["deep"] = '{"kind": "ascendctl-exporter-snapshot", "snapshot": ' + "[" * 100000 + "]" * 100000 + "}"
    from engine.errors import BadInput

    with pytest.raises(BadInput, match="not an ascendctl exporter snapshot"):
        fetch_remote(server.url + "/deep", None, 2.0)
