"""doctor's devices.faults: a chip's active fault code, by MindCluster's action class.

The recorded machine npu-fault-heartbeat-910b (tests/fixtures/hosts/PROVENANCE.md) answers
`npu-smi info -t health -i 0 -c 0` with a real Alarm answer (FaultDiag's test input); the
verdicts per class are checked on the code table itself.
"""

from __future__ import annotations

import json

import pytest
from helpers import FIXTURES

from ascendctl.cli import main
from engine.doctor import run_doctor
from engine.doctor.device_checks import fault_outcome
from engine.doctor.model import Status
from engine.triage.faultcodes import device_fault

HOSTS = FIXTURES / "hosts"


def faults_check(name):
    return next(c for c in run_doctor(HOSTS / name).checks if c.id == "devices.faults")


def test_a_chip_to_reset_is_an_error_naming_the_npu_code_and_action():
    check = faults_check("npu-fault-heartbeat-910b")
    assert check.status is Status.ERROR
    # the most serious code first, every code shown (the NotHandle one too)
    assert check.summary.startswith(
        "NPU 0: 0x8C03A000 process manager heartbeat lost -> reset this NPU (npu-smi set -t reset), "
        "then restart the engine (RestartNPU)"
    )
    assert "0x8C084E00 ADDA daemon heartbeat lost" in check.summary and "(FreeRestartNPU)" in check.summary
    assert "NPU 0: 0xA4025021 -> nothing to do (NotHandle)" in check.summary
    assert check.fix == "stop the engine on NPU 0, reset it with `npu-smi set -t reset -i 0 -c 0`, start it again"


def test_healthy_chips_have_no_fault_code():
    check = faults_check("healthy-910b")
    assert (check.status, check.summary) == (Status.OK, "no fault code: all 8 chip(s) report Health OK")


def test_cli_json_carries_the_check(capsys):
    assert (
        main(["doctor", "--root", str(HOSTS / "npu-fault-heartbeat-910b"), "--json", "--check", "devices.faults"]) == 1
    )
    data = json.loads(capsys.readouterr().out)
    (check,) = data["checks"]
    assert check["id"] == "devices.faults" and check["status"] == "error" and "RestartNPU" in check["summary"]


@pytest.mark.parametrize(
    ("code", "status", "words"),
    [
        ("80E18402", Status.ERROR, "NPU 3: 0x80E18402 HBM multi-bit ECC -> isolate this NPU (SeparateNPU)"),
        ("80E0020B", Status.ERROR, "(SeparateNPU)"),
        ("81078603", Status.OK, "NPU 3: 0x81078603 network port link down -> nothing to do (NotHandle)"),
        ("80E20207", Status.WARN, "SoC over-temperature -> watch this NPU"),
        ("80E01801", Status.WARN, "(RestartBusiness)"),
        ("7FFFFFFF", Status.WARN, "NPU 3: 0x7FFFFFFF -> unknown code: look the code up"),
    ],
)
def test_verdict_per_action_class(code, status, words):
    outcome = fault_outcome([("NPU 3", 3, 0, device_fault(code))], [])
    assert outcome.status is status and words in outcome.summary


def test_the_fix_takes_each_npus_worst_code():
    seen = [
        ("NPU 1", 1, 0, device_fault("80E20207")),  # SubHealth
        ("NPU 2", 2, 0, device_fault("80C98008")),  # RestartRequest
        ("NPU 1", 1, 0, device_fault("80E18402")),  # SeparateNPU
    ]
    outcome = fault_outcome(seen, [])
    assert outcome.status is Status.ERROR
    assert outcome.summary.startswith("NPU 1: 0x80E18402")
    assert outcome.fix == (
        "take NPU 1 out of service (ASCEND_RT_VISIBLE_DEVICES without it) and have it repaired; "
        "restart the engine on NPU 2"
    )


def test_codes_that_cannot_be_read_are_a_warning_not_silence():
    outcome = fault_outcome([], ["NPU 4 (Alarm)"])
    assert outcome.status is Status.WARN and "codes not readable for NPU 4 (Alarm)" in outcome.summary


def test_a_bundle_of_the_machine_carries_the_codes_to_doctor_and_triage(tmp_path, capsys):
    from engine.bundle.builder import BundleOptions, build_bundle
    from engine.system.recorded import recorded_host

    host, env_known = recorded_host(HOSTS / "npu-fault-heartbeat-910b")
    out = tmp_path / "b.tar.gz"
    build_bundle(BundleOptions(out=out), host=host, live=False, env_known=env_known)
    # doctor replays the bundle: the health answer it asked for travelled with it
    assert main(["doctor", "--root", str(out), "--json", "--check", "devices.faults"]) == 1
    (check,) = json.loads(capsys.readouterr().out)["checks"]
    assert check["status"] == "error" and check["summary"].startswith("NPU 0: 0x8C03A000")
    # triage of the bundle reads the npu-smi transcript's health answer
    main(["triage", "--json", "--fail-on", "never", str(out)])
    data = json.loads(capsys.readouterr().out)
    rows = {(f["npu"], f["code"], f["action"]) for f in data["device_faults"]}
    assert rows == {
        (0, "0x8C03A000", "RestartNPU"),
        (0, "0x8C084E00", "FreeRestartNPU"),
        (0, "0xA4025021", "NotHandle"),
    }
