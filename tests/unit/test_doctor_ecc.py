"""doctor's devices.ecc: HBM pages isolated after multi-bit ECC errors, against the count at which
the chip must be isolated (views.yaml ecc_isolated_pages, from FaultDiag's knowledge base)."""

from __future__ import annotations

import shutil

from helpers import FIXTURES

from engine.doctor import run_doctor
from engine.doctor.ecc_checks import ecc_limits, ecc_verdict

HOSTS = FIXTURES / "hosts"
ECC = (FIXTURES / "npu_smi" / "ecc" / "e1_faultdiag_doc.txt").read_text()


def _ecc(report):
    return next(c for c in report.checks if c.id == "devices.ecc")


def test_a_host_whose_npu_smi_answers_ecc_reads_every_chip(tmp_path):
    root = tmp_path / "host"
    shutil.copytree(HOSTS / "healthy-910b", root)
    for npu in range(8):  # the recorded all-zero answer (FaultDiag guide) for each of its 8 NPUs
        (root / ".recorded" / "commands" / f"npu-smi_info_-t_ecc_-i_{npu}.out").write_text(ECC)
    check = _ecc(run_doctor(root))
    assert check.status.value == "ok"
    assert "8 chip(s): at most 0 HBM page(s) isolated" in check.summary and "limit 64" in check.summary


def test_a_recording_without_ecc_answers_is_skipped_not_judged():
    assert _ecc(run_doctor(HOSTS / "healthy-910b")).status.value == "skip"


def test_pages_near_the_limit_warn_and_at_the_limit_name_isolation():
    limits = ecc_limits()
    assert (limits["warn"], limits["limit"]) == (16, 64)
    near = ecc_verdict({"NPU 0 chip 0": 0, "NPU 3 chip 0": 20}, limits)
    assert near.status.value == "warning" and "NPU 3 chip 0: 20" in near.summary and "64" in near.summary
    worn = ecc_verdict({"NPU 3 chip 0": 64}, limits)
    assert worn.status.value == "error" and "isolate this NPU" in worn.fix
    assert ecc_verdict({"NPU 0 chip 0": 15}, limits).status.value == "ok"


def test_newer_drivers_answer_is_read_and_pages_pending_the_next_reset_count(tmp_path):
    # The newer form (no DDR, no Chip ID; Atlas 350 npu-smi reference) is read on every NPU.
    root = tmp_path / "host"
    shutil.copytree(HOSTS / "healthy-910b", root)
    newer = (FIXTURES / "npu_smi" / "ecc" / "e2_950_doc.txt").read_text()
    for npu in range(8):
        (root / ".recorded" / "commands" / f"npu-smi_info_-t_ecc_-i_{npu}.out").write_text(newer)
    check = _ecc(run_doctor(root))
    assert check.status.value == "ok" and "8 chip(s)" in check.summary
    # Next-isolated pages are isolated at the chip's next reset: a reset must not surprise anyone.
    limits = ecc_limits()
    assert ecc_verdict({"NPU 3 chip 0": 10}, limits, {"NPU 3 chip 0": 0}).status.value == "ok"
    soon = ecc_verdict({"NPU 3 chip 0": 10}, limits, {"NPU 3 chip 0": 8})
    assert soon.status.value == "warning" and "NPU 3 chip 0: 10 (+8 at the next reset)" in soon.summary
    over = ecc_verdict({"NPU 3 chip 0": 60}, limits, {"NPU 3 chip 0": 4})
    assert over.status.value == "error" and "isolate this NPU" in over.fix
