"""The exporter end to end: a real Prometheus scrapes `ascendctl exporter`, which watches a live
vLLM CPU engine (as a run `ascendctl serve` recorded) and replays recorded npu-smi tables and
views and hccn_tool answers (faulty ones: an error code, RoCE errors) through fakes on PATH. Every
PromQL query of the shipped dashboard and every alert's probe must return series from that
Prometheus, and Prometheus fires the fault's alert from the shipped rules."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from helpers import (
    FAULTY_VIEWS,
    FIXTURES,
    ROOT,
    fake_hccn_tool,
    fake_npu_smi,
    free_port,
    recorded_nic_answers,
    require_tool,
    stop_group,
)

from engine.exporter.alerts import alerts, rules_yaml
from engine.exporter.dashboard import queries
from engine.triage import load_rules


def _run_record(state: Path, server, tiny_model: Path) -> str:
    """A run directory as `ascendctl serve` leaves it, around the session's engine: its log with
    one known-issue line appended (a rule's own sample), and its resolved profile."""
    run_id = "20261130-120000-cpu-tiny"
    d = state / "runs" / run_id
    d.mkdir(parents=True)
    sample = next(r for r in load_rules() if r.id == "vllm-no-kv-cache-memory").samples[0]
    (d / "engine.log").write_text(server.log_path.read_text(errors="replace") + sample + "\n")
    profile = (ROOT / "profiles" / "cpu-tiny.yaml").read_text().replace("${cache}/models/qwen3-tiny", str(tiny_model))
    (d / "profile.yaml").write_text(profile)
    record = {
        "run_id": run_id,
        "directory": str(d),
        "pid": server.proc.pid,
        "url": server.url,
        "profile": "cpu-tiny",
        "argv": ["vllm", "serve", str(tiny_model)],
        "started_at": time.time() - 60,
        "phase": "ready",
        "ready_seconds": 41.5,
        "restarts": 0,
    }
    (d / "run.json").write_text(json.dumps(record))
    return run_id


def _wait(url: str, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{what} did not answer {url} within {timeout} s")


def _query(prom: str, expr: str, patience: float = 10.0) -> list:
    """The query's result; an empty one is asked again for up to `patience` seconds: on a loaded
    runner one scrape may miss Prometheus's 1 s timeout, and every series is stale until the next."""
    deadline = time.monotonic() + patience
    while True:
        resp = httpx.get(f"{prom}/api/v1/query", params={"query": expr}, timeout=10)
        body = resp.json()
        assert body.get("status") == "success", f"{expr}: {body}"
        if body["data"]["result"] or time.monotonic() > deadline:
            return body["data"]["result"]
        time.sleep(0.5)


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_prometheus_gets_series_for_every_dashboard_query_and_alert(vllm_server, tiny_model, tmp_path):
    prometheus = require_tool("prometheus")
    promtool = require_tool("promtool")
    state = Path(os.environ["ASCENDCTL_STATE_DIR"])
    run_id = _run_record(state, vllm_server, tiny_model)
    bin_dir = tmp_path / "bin"
    # npu-smi's table, usages and views, and hccn_tool's NICs, replayed from faulty recordings:
    # every chip's health view carries 80E01801 (RestartBusiness), NICs 5 and 6 count RoCE errors.
    fake_npu_smi(bin_dir, views=FAULTY_VIEWS)
    fake_hccn_tool(bin_dir, recorded_nic_answers())
    exp_port, prom_port = free_port(), free_port()
    plogs = tmp_path / "ascend-log"
    (plogs / "debug" / "plog").mkdir(parents=True)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ASCEND_PROCESS_LOG_PATH": str(plogs)}
    exporter = subprocess.Popen(
        [sys.executable, "-m", "ascendctl", "exporter", "--listen", f"127.0.0.1:{exp_port}",
         "--interval", "devices=1", "--interval", "engines=1", "--interval", "plogs=1"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    config = tmp_path / "prometheus.yml"
    (tmp_path / "rules.yml").write_text(rules_yaml())
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: ['rules.yml']\n"
        f"scrape_configs:\n  - job_name: ascendctl\n    static_configs:\n      - targets: ['127.0.0.1:{exp_port}']\n"
    )
    prom = subprocess.Popen(
        [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    prom_url = f"http://127.0.0.1:{prom_port}"
    stop = threading.Event()

    def load():
        with httpx.Client(timeout=60) as c:
            while not stop.is_set():
                c.post(f"{vllm_server.url}/v1/completions",
                       json={"model": vllm_server.served_name, "prompt": "hello " * 16, "max_tokens": 16})  # fmt: skip

    client = threading.Thread(target=load, daemon=True)
    try:
        _wait(f"http://127.0.0.1:{exp_port}/metrics", exporter, "the exporter")
        _wait(f"{prom_url}/-/ready", prom, "prometheus")
        client.start()
        # The plog follower reads files that exist at its first poll from their end: wait for that
        # poll, so the line below is new to it however late a loaded runner ran it.
        deadline = time.monotonic() + 60
        plogs_up = re.compile(r'ascendctl_source_up\{[^}]*source="plogs"[^}]*\} 1')
        while not plogs_up.search(httpx.get(f"http://127.0.0.1:{exp_port}/metrics").text):
            assert time.monotonic() < deadline, "the exporter never polled the plogs"
            time.sleep(0.5)
        # A CANN error line written while the exporter runs (a recorded plog line, as it is).
        coded = next(
            ln for ln in (FIXTURES / "logs" / "plog_mixed_modules.log").read_text().splitlines() if "507051" in ln
        )
        (plogs / "debug" / "plog" / "plog-1.log").write_text(coded + "\n")
        # promtool lints a live scrape: our families must be clean (vLLM's own are what vLLM writes).
        scrape = httpx.get(f"http://127.0.0.1:{exp_port}/metrics").content
        lint = subprocess.run([promtool, "check", "metrics"], input=scrape, capture_output=True, timeout=60)
        assert not [ln for ln in lint.stdout.decode().splitlines() if not ln.startswith("vllm:")], lint.stdout

        # Wait until Prometheus holds a minute of the engine's token counters (rates need two points).
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if _query(prom_url, "rate(vllm:generation_tokens_total[1m]) > 0", 0) and _query(
                prom_url, "ascendctl_doctor_check_status", 0
            ):
                break
            time.sleep(1)
        missing = []
        for title, expr in queries():
            promql = expr.replace("$__rate_interval", "1m")
            promql = re.sub(r'=~"\$\w+"', '=~".*"', promql)
            if not _query(prom_url, promql):
                missing.append(f"{title}: {expr}")
        for a in alerts():
            if not _query(prom_url, a.probe):
                missing.append(f"alert {a.name}: {a.probe}")
        assert not missing, "no series for:\n" + "\n".join(missing)

        # What only ascendctl knows, for the run it found.
        info = _query(prom_url, f'ascendctl_engine_info{{engine="{run_id}"}}')
        assert info and info[0]["metric"]["model"] == "tiny" and info[0]["metric"]["profile"] == "cpu-tiny"
        assert info[0]["metric"]["vllm_version"]
        assert _query(prom_url, f'ascendctl_engine_ready_seconds{{engine="{run_id}"}}')[0]["value"][1] == "41.5"
        issue = _query(prom_url, 'ascendctl_known_issue_events_total{rule="vllm-no-kv-cache-memory"}')
        assert issue and float(issue[0]["value"][1]) >= 1
        assert _query(prom_url, 'ascendctl_plog_error_codes_total{code="507051"}')
        blocks = {r["metric"]["source"] for r in _query(prom_url, "ascendctl_engine_kv_blocks")}
        assert blocks == {"planned", "actual"}

        # The device views under npu-exporter's names, and the fault with its action class.
        assert _query(prom_url, 'npu_chip_roce_tx_err_pkt_num{id="6"} == 77')
        assert _query(prom_url, 'npu_chip_info_aicore_current_freq{id="0"} == 1800')
        fault = _query(prom_url, 'ascendctl_device_fault{id="0"}')
        assert fault and fault[0]["metric"]["action"] == "RestartBusiness"
        assert fault[0]["metric"]["code"] == "0x80E01801" and fault[0]["metric"]["verb"] == "restart-engine"
        # Prometheus itself, evaluating the shipped rules on those series, fires the class's alert.
        deadline = time.monotonic() + 60
        firing: list = []
        while time.monotonic() < deadline and not firing:
            alerts_now = httpx.get(f"{prom_url}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
            firing = [
                a
                for a in alerts_now
                if a["labels"]["alertname"] == "AscendctlNpuFaultRestartEngine" and a["state"] == "firing"
            ]
            time.sleep(1)
        assert firing, "AscendctlNpuFaultRestartEngine never fired"
        assert not [a for a in alerts_now if a["labels"]["alertname"] == "AscendctlNpuFaultIsolate"]
    finally:
        stop.set()
        stop_group(exporter, grace=10)
        stop_group(prom, grace=10)
        client.join(timeout=120) if client.is_alive() else None
    assert exporter.returncode is not None and prom.returncode is not None
