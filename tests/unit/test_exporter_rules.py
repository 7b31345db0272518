"""The shipped alerting rules: promtool checks them, and `promtool test rules` fires each alert on
series that should fire it and keeps it quiet on series that should not."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml
from helpers import require_tool

from engine.exporter.alerts import alerts, rules_yaml
from engine.telemetry.thresholds import Thresholds

E = {"engine": "run-1", "host": "node1"}
CHIP = {"id": "0", "model_name": "910B2", "pcie_bus_info": "0000:C1:00.0", "host": "node1"}

# alert -> (series name, labels, firing values, quiet values, evaluated at, labels the alert carries)
CASES = {
    "AscendctlEngineDown": ("ascendctl_engine_up", E, "0x10", "1x10", "5m", E),
    "AscendctlEngineStalled": ("ascendctl_engine_stalled", E, "1x10", "0x10", "5m", E),
    "AscendctlPendingRequestsHigh": ("vllm:num_requests_waiting", {**E, "model_name": "m"}, "40x20", "3x20", "10m", E),
    "AscendctlHbmBandwidthSaturated": ("npu_chip_info_hbm_bandwidth_utilization", CHIP, "99x20", "50x20", "10m", CHIP),
    "AscendctlNpuUnhealthy": ("npu_chip_info_health_status", CHIP, "0x10", "1x10", "5m", CHIP),
    "AscendctlNpuTemperatureHigh": ("npu_chip_info_temperature", CHIP, "95x20", "60x20", "10m", CHIP),
    "AscendctlEngineRestarting": ("ascendctl_engine_restarts_total", E, "0+1x10", "0x10", "9m", E),
    "AscendctlEngineHung": ("ascendctl_engine_hangs_total", E, "0x5 1x5", "2x10", "7m", E),
    "AscendctlNpuLinkDown": ("npu_chip_info_link_status", CHIP, "0x10", "1x10", "5m", CHIP),
    "AscendctlSourceDown": ("ascendctl_source_up", {"source": "npu-smi", "host": "node1"}, "0x10", "1x10", "8m", None),
    "AscendctlDoctorCheckFailed": (
        "ascendctl_doctor_check_status",
        {"check": "toolkit", "category": "stack", "host": "node1"},
        "3x20",
        "2x20",
        "15m",
        None,
    ),
}


def _series(name: str, labels: dict) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _annotations(alert: str, labels: dict, value: str) -> dict:
    """The annotations Prometheus renders: {{ $labels.x }} and {{ $value }} filled in."""
    a = next(x for x in alerts() if x.name == alert)
    summary = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], a.summary)
    return {"summary": summary.replace("{{ $value }}", value), "fix": a.fix}


def _case(alert: str, series: list[dict], at: str, exp_labels: dict | None) -> dict:
    value = re.match(r"[0-9.]+", series[0]["values"]).group(0)
    expected = (
        []
        if exp_labels is None
        else [{"exp_labels": exp_labels, "exp_annotations": _annotations(alert, exp_labels, value)}]
    )
    return {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": expected}],
    }


def _tests(severity: dict[str, str]) -> list[dict]:
    tests = []
    for alert, (name, labels, firing, quiet, at, carried) in CASES.items():
        carried = labels if carried is None else carried
        tests.append(
            _case(
                alert,
                [{"series": _series(name, labels), "values": firing}],
                at,
                {**carried, "severity": severity[alert]},
            )
        )
        tests.append(_case(alert, [{"series": _series(name, labels), "values": quiet}], at, None))
    # Two series together: KV nearly full AND preemptions.
    kv, pre = "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total"
    full = [{"series": _series(kv, E), "values": "0.99x20"}, {"series": _series(pre, E), "values": "0+5x20"}]
    roomy = [{"series": _series(kv, E), "values": "0.50x20"}, {"series": _series(pre, E), "values": "0+5x20"}]
    calm = [{"series": _series(kv, E), "values": "0.99x20"}, {"series": _series(pre, E), "values": "0x20"}]
    tests.append(_case("AscendctlKvCachePressure", full, "15m", {**E, "severity": "warning"}))
    tests.append(_case("AscendctlKvCachePressure", roomy, "15m", None))
    tests.append(_case("AscendctlKvCachePressure", calm, "15m", None))
    issue = {"id": "acl-507011", "severity": "critical", "subject": "run-1", "source": "log", "host": "node1"}
    warn = {**issue, "severity": "warning"}
    tests.append(
        _case(
            "AscendctlCriticalKnownIssue",
            [{"series": _series("ascendctl_diagnostic_active", issue), "values": "1x5"}],
            "2m",
            issue,
        )
    )
    tests.append(
        _case(
            "AscendctlCriticalKnownIssue",
            [{"series": _series("ascendctl_diagnostic_active", warn), "values": "1x5"}],
            "2m",
            None,
        )
    )
    leak = {"id": "hbm-leak", "severity": "warning", "subject": "npu0", "source": "rule", "host": "node1"}
    tests.append(
        _case(
            "AscendctlMemoryLeak",
            [{"series": _series("ascendctl_diagnostic_active", leak), "values": "1x5"}],
            "2m",
            {**leak, "severity": "warning"},
        )
    )
    other = {**leak, "id": "kv-cache-pressure"}  # another threshold rule: not a leak
    tests.append(
        _case(
            "AscendctlMemoryLeak",
            [{"series": _series("ascendctl_diagnostic_active", other), "values": "1x5"}],
            "2m",
            None,
        )
    )
    return tests


# A device fault by the verb of its action class: each alert fires on its own verb only.
FAULT = {"id": "3", "code": "0x80E18402", "action": "SeparateNPU", "verb": "isolate", "host": "node1"}
FAULT_ALERTS = {
    "AscendctlNpuFaultIsolate": FAULT,
    "AscendctlNpuFaultReset": {**FAULT, "code": "0x80E24E00", "action": "RestartNPU", "verb": "reset-npu"},
    "AscendctlNpuFaultRestartEngine": {
        **FAULT,
        "code": "0x80E01801",
        "action": "RestartBusiness",
        "verb": "restart-engine",
    },
}


def _fault_tests(severity: dict[str, str]) -> list[dict]:
    tests = []
    for alert, labels in FAULT_ALERTS.items():
        series = [{"series": _series("ascendctl_device_fault", labels), "values": "1x5"}]
        tests.append(_case(alert, series, "2m", {**labels, "severity": severity[alert]}))
        for other, other_labels in FAULT_ALERTS.items():  # another class's fault: quiet
            if other != alert:
                quiet = [{"series": _series("ascendctl_device_fault", other_labels), "values": "1x5"}]
                tests.append(_case(alert, quiet, "2m", None))
        unknown = {**labels, "code": "0xDEADBEEF", "action": "unknown", "verb": "unknown"}
        tests.append(
            _case(alert, [{"series": _series("ascendctl_device_fault", unknown), "values": "1x5"}], "2m", None)
        )
    return tests


def test_every_alert_has_a_firing_and_a_quiet_case():
    tested = set(CASES) | set(FAULT_ALERTS)
    tested |= {"AscendctlKvCachePressure", "AscendctlCriticalKnownIssue", "AscendctlMemoryLeak"}
    assert {a.name for a in alerts()} == tested


def test_rules_pass_promtool_check(tmp_path):
    promtool = require_tool("promtool")
    (tmp_path / "rules.yml").write_text(rules_yaml())
    result = subprocess.run([promtool, "check", "rules", str(tmp_path / "rules.yml")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(alerts())} rules found" in result.stdout


def test_every_alert_fires_and_stays_quiet_under_promtool(tmp_path):
    promtool = require_tool("promtool")
    (tmp_path / "rules.yml").write_text(rules_yaml())
    severity = {a.name: a.severity for a in alerts()}
    doc = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": _tests(severity) + _fault_tests(severity)}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", str(tmp_path / "test.yml")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_profile_thresholds_reach_the_rules():
    raised = Thresholds.defaults().updated({"pending_requests": 64})
    assert "vllm:num_requests_waiting) > 64" in rules_yaml(raised)
    assert "vllm:num_requests_waiting) > 16" in rules_yaml()


@pytest.mark.parametrize("alert", [a.name for a in alerts()])
def test_every_alert_says_what_to_do(alert):
    a = next(x for x in alerts() if x.name == alert)
    assert a.fix.strip() and a.summary.strip() and a.severity in ("warning", "critical")
    assert a.probe in a.expr or a.probe.replace(" ", "") in a.expr.replace(" ", "")
