"""Triage names the NPUs' own fault codes: the code, the NPU, MindCluster's action and ours.

Inputs are recorded public outputs (tests/fixtures/logs/PROVENANCE.md, tests/fixtures/msnpureport):
an npu-smi transcript with a `-t health` answer, a host kernel log with the driver's heartbeat
loss, a tsdaemon device-OS log, and a whole msnpureport export.
"""

from __future__ import annotations

import json

from helpers import FIXTURES

from ascendctl.cli import main
from engine.triage import diagnose_lines, scan_paths
from engine.triage.devicefaults import DeviceCodeReader

DEVICE = FIXTURES / "logs" / "device"
TRANSCRIPT = DEVICE / "npu_info_after.txt"
DMESG = DEVICE / "messages_0x40F84E00"
TSDAEMON = DEVICE / "device-os_20231031164139951.log"
EXPORT = FIXTURES / "msnpureport" / "export"
HCCL_WATCHDOG = FIXTURES / "logs" / "e04_sglang_30453_hccl_watchdog.log"


def faults(report):
    return {(i.npu, i.code): (i.action, i.verb, i.severity) for i in report.device_faults()}


def test_npu_smi_health_codes_are_named_with_the_npu_and_the_action():
    report = scan_paths([str(TRANSCRIPT)])
    # `npu-smi info -i 0 -c 0 -t health` answered Alarm with three codes: each one, none dropped
    assert faults(report) == {
        (0, "0x8C03A000"): ("RestartNPU", "reset-npu", "critical"),
        (0, "0x8C084E00"): ("FreeRestartNPU", "reset-npu", "error"),
        (0, "0xA4025021"): ("NotHandle", "ignore", "info"),
    }
    root = report.root_cause()
    assert root.id == "device-npu0-0x8c03a000"
    assert root.title == (
        "NPU 0: 0x8C03A000 process manager heartbeat lost -> reset this NPU (npu-smi set -t reset), "
        "then restart the engine (RestartNPU)"
    )
    # the transcript's hccn_tool link history is read by the link rule
    assert "npu-roce-link-down-record" in {i.id for i in report.issues}


def test_device_os_logs_of_an_msnpureport_export_name_code_npu_and_action():
    report = scan_paths([str(EXPORT)])
    found = faults(report)
    # the black box (hisi_logs/device-0) and the device-OS kernel log (devid=1) both name the TS exception
    assert found[(0, "0xB4060007")] == ("RestartBusiness", "restart-engine", "error")
    assert found[(1, "0xB4060007")] == ("RestartBusiness", "restart-engine", "error")
    assert found[(0, "0xA8028802")] == ("RestartBusiness", "restart-engine", "error")
    # the black box's multi-bit ECC (critical) leads; the hwts timeout the device logged is a
    # consequence, listed after the device faults
    assert report.root_cause().id == "npu-os-hbm-multi-bit-ecc"
    ids = [i.id for i in report.issues]
    assert ids.index("hwts-timeout") > ids.index("device-npu0-0xb4060007")
    assert {"npu-os-ts-exception", "npu-os-hbm-multi-bit-ecc"} <= set(ids)


def test_the_drivers_heartbeat_loss_is_the_cause_behind_an_hccl_timeout():
    # the host kernel log beside an engine log that ends in HCCL's watchdog timeout
    report = scan_paths([str(HCCL_WATCHDOG), str(DMESG)])
    assert report.root_cause().id == "device-npu1-0x40f84e00"
    assert faults(report)[(1, "0x40F84E00")] == ("RestartNPU", "reset-npu", "critical")
    ids = [i.id for i in report.issues]
    assert ids.index("npu-driver-heartbeat-lost") < ids.index("hccl-watchdog-timeout")
    # without the kernel log the watchdog timeout is what the engine log names
    assert "device" not in {i.kind for i in scan_paths([str(HCCL_WATCHDOG)]).issues}


def test_a_device_log_without_a_device_id_says_the_npu_is_unknown():
    report = scan_paths([str(TSDAEMON)])
    (issue,) = report.device_faults()
    assert (issue.npu, issue.code, issue.action) == (None, "0x8C17A005", "FreeRestartNPU")
    assert issue.title.startswith("NPU ?: 0x8C17A005 AI CPU scheduler not released -> ")
    assert "npu-os-aicpu-process-not-released" in {i.id for i in report.issues}


def test_an_unknown_code_is_shown_as_unknown_never_dropped():
    # a health answer's shape with a code MindCluster's table does not list (parser test)
    lines = ["npu-smi info -t health -i 5 -c 0", "        Error Code                     : 80E18402 7FFFFFFF"]
    report = diagnose_lines(lines, "health.txt")
    assert faults(report) == {
        (5, "0x80E18402"): ("SeparateNPU", "isolate", "critical"),
        (5, "0x7FFFFFFF"): ("unknown", "unknown", "warning"),
    }


def test_the_reader_keeps_each_inputs_npu_apart():
    reader = DeviceCodeReader()
    assert reader.read("npu-smi info -t health -i 3 -c 0", "a") == []
    assert reader.read("Error Code : 80E18402", "b") == [(None, 0x80E18402)]
    assert reader.read("Error Code : NA", "a") == []
    assert reader.read("Error Code : 80E18402", "a") == [(3, 0x80E18402)]


def test_cli_text_and_json_name_code_npu_action_and_verb(capsys):
    code = main(["triage", str(TRANSCRIPT)])
    out = capsys.readouterr().out
    assert code == 1
    assert "Device faults" in out
    assert "NPU 0: 0x8C03A000 process manager heartbeat lost -> reset this NPU" in out
    main(["triage", "--json", "--fail-on", "never", str(TRANSCRIPT)])
    data = json.loads(capsys.readouterr().out)
    assert data["root_cause"] == "device-npu0-0x8c03a000"
    rows = {(f["npu"], f["code"], f["action"], f["verb"]) for f in data["device_faults"]}
    assert (0, "0x8C03A000", "RestartNPU", "reset-npu") in rows and len(rows) == 3
    issue = next(i for i in data["issues"] if i["id"] == "device-npu0-0x8c084e00")
    assert (issue["npu"], issue["code"], issue["action"], issue["verb"]) == (
        0,
        "0x8C084E00",
        "FreeRestartNPU",
        "reset-npu",
    )


def test_explain_a_device_code(capsys):
    assert main(["triage", "--explain", "0x80e18402"]) == 0
    out = capsys.readouterr().out
    assert "0x80E18402  HBM multi-bit ECC" in out and "SeparateNPU (isolate)" in out
    main(["--json", "triage", "--explain", "7FFFFFFF"])
    data = json.loads(capsys.readouterr().out)
    assert (data["device_fault"]["action"], data["device_fault"]["verb"]) == ("unknown", "unknown")


def test_only_a_command_line_sets_the_npu_of_what_follows():
    reader = DeviceCodeReader()
    assert reader.read("$ npu-smi info -t health -i 2", "a") == []
    # a log line that quotes the command is no command line
    assert reader.read("fix: run `npu-smi info -t health -i 7 -c 0` by hand", "a") == []
    assert reader.read("Error Code : 80E18402", "a") == [(2, 0x80E18402)]


def test_the_fault_managers_event_id_as_huaweis_troubleshooting_page_quotes_it():
    # the keyword of the HBM ECC case (hiascend troubleshooting_0008), in a device-OS log of device 2
    line = "[fault_manager] event_id: [0x80E01809]"
    assert DeviceCodeReader().read(line, "report/hisi_logs/device-2/x.log") == [(2, 0x80E01809)]
    assert DeviceCodeReader().read(line, "slog/dev-os-3/run/device-os/device-os_1.log") == [(None, 0x80E01809)]


def _bundle_with_mapping(tmp_path, mapping: str):
    """A bundle's top with its npu-smi transcript holding an `npu-smi info -m` answer."""
    from engine.bundle.layout import MANIFEST, NPU_INFO_FILE
    from engine.system.recorded import RECORD_DIR, write_transcript

    top = tmp_path / "bundle"
    (top / RECORD_DIR).mkdir(parents=True)
    (top / MANIFEST).write_text("{}")
    (top / NPU_INFO_FILE).parent.mkdir(parents=True, exist_ok=True)
    text = (FIXTURES / "npu_smi" / "mapping" / mapping).read_text()
    (top / NPU_INFO_FILE).write_text(write_transcript([(["npu-smi", "info", "-m"], text)]))
    return top


def test_a_device_logs_logic_id_is_named_by_the_npu_id_npu_smi_shows(tmp_path):
    from engine.bundle.layout import device_ids
    from engine.triage import Scanner

    # A 310P3 card whose NPU ID is 4 and whose chip's logic id is 0 (the recorded `npu-smi info -m`):
    # the export's black box under device-0 is that card's, and the operator knows it as NPU 4.
    ids = device_ids(_bundle_with_mapping(tmp_path, "mp2_310p3_doc.txt"))
    found = faults(scan_paths([str(EXPORT)], scanner=Scanner(device_ids=ids)))
    assert found[(4, "0xB4060007")] == ("RestartBusiness", "restart-engine", "error")
    assert (0, "0xB4060007") not in found
    # a logic id the mapping does not list (devid=1) is left as the log names it
    assert (1, "0xB4060007") in found


def test_on_a_910b_host_logic_ids_and_npu_ids_agree(tmp_path):
    from engine.bundle.layout import device_ids
    from engine.triage import Scanner

    ids = device_ids(_bundle_with_mapping(tmp_path, "mp1_910b4_blog.txt"))
    assert faults(scan_paths([str(EXPORT)], scanner=Scanner(device_ids=ids))) == faults(scan_paths([str(EXPORT)]))


def test_the_cli_reads_the_mapping_of_a_bundle(tmp_path, capsys):
    import shutil

    top = _bundle_with_mapping(tmp_path, "mp2_310p3_doc.txt")
    log = top / "device-os.log"
    shutil.copy(TSDAEMON, log)
    from ascendctl.commands.triage import _device_ids

    assert {logic: (c.npu, c.chip) for logic, c in _device_ids([str(top)]).items()} == {0: (4, 0)}
    assert _device_ids([str(log)]) == {}  # a plain log is no bundle
