"""Bundles of a hostile or careless machine: secrets and site names in odd places, links out of
the run folder, an --out that is a device or a folder, a log too big to redact in time."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import time
from pathlib import Path

import pytest
from helpers import FIXTURES

from ascendctl.cli import main
from engine.bundle import builder
from engine.bundle.builder import BundleOptions, build_bundle
from engine.bundle.layout import MANIFEST
from engine.bundle.redactor import Redactor
from engine.errors import BadInput
from engine.redact import redact_value
from engine.system.recorded import recorded_host

HOSTS = FIXTURES / "hosts"
PLANTED = [
    "BEARERTOKEN1",
    "BEARERTOKEN2",
    "COOKIE3",
    "PRIVATEKEYLINE4",
    "ENVBEARER5",
    "corp.example",
    "svcuser",
    "ops-team",
    "alice.smith",
    "wJalrXUtnFEMI",
    "gpu7",
]


def make_run(state: Path, log: str, argv: list[str], profile: str) -> Path:
    d = state / "runs" / "r1"
    d.mkdir(parents=True)
    (d / "engine.log").write_text(log)
    (d / "profile.yaml").write_text(profile)
    run = {"run_id": "r1", "directory": str(d), "pid": None, "url": "http://127.0.0.1:8000", "profile": "p"}
    (d / "run.json").write_text(json.dumps({**run, "argv": argv}))
    return d


def unpacked(out: Path) -> Path:
    dest = out.parent / (out.name + ".x")
    with tarfile.open(out) as tar:
        tar.extractall(dest, filter="tar")
    (top,) = list(dest.iterdir())
    return top


def everything(top: Path) -> str:
    """Every name and every byte of an unpacked bundle, as one text to search."""
    parts = []
    for p in top.rglob("*"):
        parts.append(str(p.relative_to(top)))
        if p.is_file() and not p.is_symlink():
            parts.append(p.read_text("utf-8", "replace"))
    return "\n".join(parts)


def test_secrets_in_headers_cookies_pem_and_prose_are_masked():
    text = redact_value(
        "DEBUG Authorization: Bearer BEARERTOKEN1opaque\n"
        "headers: {'Authorization': 'Bearer BEARERTOKEN2opaque', 'Cookie': 'sessionid=COOKIE3; csrf=x'}\n"
        'curl -H "Authorization: Basic YWxpY2U6c2VjcmV0"\n'
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAPRIVATEKEYLINE4xx\n-----END RSA PRIVATE KEY-----\n"
        "the aws secret is wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY, rotate it\n"
        "Basic checks passed; bearer tokens count 40 of them; sha 2fd4e1c67a2d28fced849ee1bb76e7391b93eb12\n"
    )
    for planted in ("BEARERTOKEN1", "BEARERTOKEN2", "COOKIE3", "YWxpY2U6", "PRIVATEKEYLINE4", "wJalrXUtnFEMI"):
        assert planted not in text
    # Prose and checksums are not credentials.
    assert "Basic checks passed; bearer tokens count 40 of them" in text
    assert "2fd4e1c67a2d28fced849ee1bb76e7391b93eb12" in text


def test_every_domain_name_email_and_url_user_is_replaced_and_files_and_modules_are_not():
    red = Redactor()
    red.learn_env({"NO_PROXY": ".corp.example,localhost", "VLLM_DP_MASTER_IP": "gpu7", "HCCL_PEERS": "n1.lan,n2.lan"})
    out = red.text(
        "peer gpu-node-3.dc2.corp.example and gpu7 via n2.lan; mail ops-team@corp.example, alice.smith@corp.example\n"
        "pull https://svcuser:pw@registry.corp.example/m s3://team-bucket/w from https://huggingface.co/Qwen/x\n"
        "File loggers.py line 3 in vllm.v1.engine.core, README.md, version.info, install.sh, np.int\n"
        "ssh-rsa AAAAB3Nza bob@laptop\n"
    )
    for planted in ("corp.example", "gpu7", "n2.lan", "ops-team", "alice", "svcuser", "team-bucket", "bob@laptop"):
        assert planted not in out, (planted, out)
    for kept in ("huggingface.co", "loggers.py", "vllm.v1.engine.core", "README.md", "version.info", "np.int"):
        assert kept in out
    assert "email-2@example.invalid" in out and "user-" in out and "host-" in out
    # The same name gets the same placeholder everywhere, and the mapping keeps the way back.
    assert red.text("gpu-node-3.dc2.corp.example") in out
    assert "alice.smith@corp.example" in red.mapping()["email"].values()


def test_planted_secrets_and_site_names_leave_no_trace_in_the_archive(tmp_path):
    log = (
        "INFO starting on node-17.corp.example, peer gpu-node-3.dc2.corp.example and gpu7\n"
        "DEBUG Authorization: Bearer BEARERTOKEN1opaque\n"
        "DEBUG request headers: {'Authorization': 'Bearer BEARERTOKEN2opaque', 'Cookie': 'sessionid=COOKIE3'}\n"
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAPRIVATEKEYLINE4xxxxxxxx\n-----END RSA PRIVATE KEY-----\n"
        "INFO contact ops-team@corp.example or alice.smith@corp.example\n"
        "WARN aws secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"
        "ERROR EZ9999 something failed\n"
    )
    argv = ["vllm", "serve", "/models/m", "--served-model-name", "https://svcuser:ARGVPW@registry.corp.example/m"]
    run = make_run(tmp_path / "state", log, argv, "env:\n  MASTER_ADDR: node-17.corp.example\n")
    tree = tmp_path / "tree"
    shutil.copytree(HOSTS / "cpu-host", tree, symlinks=True)
    plogs = tree / "var" / "log" / "plog" / "debug" / "plog"
    plogs.mkdir(parents=True)
    (plogs / "plog-1234_node-19.corp.example.log").write_text("[ERROR] EZ9999 on node-18.corp.example\n")
    env = (tree / ".recorded" / "env").read_text() if (tree / ".recorded" / "env").exists() else ""
    env += (
        "ASCEND_PROCESS_LOG_PATH=/var/log/plog\nVLLM_DP_MASTER_IP=gpu7\n"
        "HCCL_PEERS=node-21.corp.example,node-22.corp.example\nNO_PROXY=.corp.example,node-23.corp.example\n"
        "VLLM_NOTE=Authorization: Bearer ENVBEARER5opaque\n"
    )
    (tree / ".recorded").mkdir(exist_ok=True)
    (tree / ".recorded" / "env").write_text(env)
    host, _ = recorded_host(tree)
    out = tmp_path / "b.tar.gz"
    build_bundle(BundleOptions(out=out, run=str(run), since_s=None), host=host, live=False)
    top = unpacked(out)
    text = everything(top)
    assert "EZ9999" in text and "process_log" in text  # the logs are there...
    leaks = [p for p in PLANTED if p in text]
    assert not leaks, leaks  # ...and nothing planted survived, in contents or file names


def test_links_out_of_the_run_and_plog_folders_are_not_followed(tmp_path, monkeypatch):
    secret = tmp_path / "outside_secret"
    secret.write_text("root:$6$salt$OUTSIDEHASH0001:19000:0:99999:7:::\n")
    run = make_run(tmp_path / "state", "", ["vllm"], "")
    for name in ("engine.log", "profile.yaml"):
        (run / name).unlink()
        (run / name).symlink_to(secret)
    plogs = tmp_path / "plog" / "debug" / "plog"
    plogs.mkdir(parents=True)
    (plogs / "plog-9999_1.log").symlink_to(secret)
    (plogs / "plog-1_1.log").write_text("[ERROR] EZ9999 real plog\n")
    monkeypatch.setenv("ASCENDCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("ASCEND_PROCESS_LOG_PATH", str(tmp_path / "plog"))
    out = tmp_path / "b.tar.gz"
    result = build_bundle(BundleOptions(out=out, run=str(run), since_s=None, timeout_s=5))
    text = everything(unpacked(out))
    assert "OUTSIDEHASH0001" not in text
    assert "real plog" in text
    rows = {s.name: s for s in result.sources}
    assert "not followed" in rows["serve run"].why and "engine.log" in rows["serve run"].why
    assert "1 symbolic link(s) not followed" in rows["CANN plogs"].why


def test_out_that_is_a_device_fifo_or_unwritable_is_refused_before_collecting(tmp_path, monkeypatch, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    collected = []
    monkeypatch.setattr(builder._Builder, "build", lambda self, staging: collected.append(1))
    # A FIFO stands in for /dev/null: never point a test at the machine's own devices.
    for bad in (fifo, Path("/proc/x.tar.gz")):
        assert main(["bundle", "--out", str(bad)]) == 2
        err = capsys.readouterr().err
        assert str(bad) in err and "fix:" in err
    assert fifo.is_fifo()
    assert collected == [] and not (tmp_path / "fifo.map.json").exists()


def test_out_that_is_a_folder_gets_the_default_name_inside(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCENDCTL_STATE_DIR", str(tmp_path / "state"))
    host, known = recorded_host(HOSTS / "cpu-host")
    result = build_bundle(BundleOptions(out=tmp_path), host=host, live=False, env_known=known)
    assert result.archive.parent == tmp_path and result.archive.name.startswith("ascendctl-bundle-")
    assert tarfile.is_tarfile(result.archive)


def test_an_existing_archive_is_replaced_with_a_warning_and_a_missing_run_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ASCENDCTL_STATE_DIR", str(tmp_path / "state"))
    out = tmp_path / "b.tar.gz"
    out.write_bytes(b"old")
    assert main(["bundle", "--root", str(HOSTS / "cpu-host"), "--out", str(out), "--timeout", "2"]) == 0
    assert "replacing the existing" in capsys.readouterr().err and tarfile.is_tarfile(out)
    with pytest.raises(BadInput, match="no such run"):
        builder.find_run("no-such-run")
    assert main(["bundle", "--run", "no-such-run", "--out", str(tmp_path / "c.tar.gz")]) == 2
    assert not (tmp_path / "c.tar.gz").exists()


def test_a_log_too_big_to_redact_in_time_keeps_its_tail_and_says_so(tmp_path, monkeypatch):
    line = "INFO 12-07 01:01:01 [loggers.py:123] Avg generation throughput: 45.6 tokens/s, peer 10.1.2.3\n"
    run = make_run(tmp_path / "state", line * 80_000 + "LAST LINE 10.9.8.7\n", ["vllm"], "")
    monkeypatch.setattr(builder, "REDACT_SHARE", 0.0)  # no time at all: one block, the newest
    host, known = recorded_host(HOSTS / "cpu-host")
    out = tmp_path / "b.tar.gz"
    result = build_bundle(BundleOptions(out=out, run=str(run), timeout_s=5), host=host, live=False, env_known=known)
    row = next(s for s in result.sources if s.name == "serve run")
    assert row.status == "cut" and "redaction time limit" in row.why
    assert "run/engine.log" in row.members
    log = (unpacked(out) / "run" / "engine.log").read_text()
    assert log.endswith("LAST LINE 192.0.2.2\n") or log.rstrip().endswith("LAST LINE 192.0.2.1")
    assert 0 < len(log) < len(line) * 80_000 / 2 and "10.9.8.7" not in log


def test_a_collector_that_ran_out_of_time_writes_nothing_into_the_archive(tmp_path):
    host, known = recorded_host(HOSTS / "cpu-host")

    def slow_metrics(self, src):
        self.stage.write("run/early.txt", b"half", src)
        time.sleep(0.8)
        self.stage.write("run/metrics.txt", b"late", src)

    original = builder._Builder.metrics
    builder._Builder.metrics = slow_metrics
    try:
        out = tmp_path / "b.tar.gz"
        result = build_bundle(BundleOptions(out=out, timeout_s=0.1), host=host, live=False, env_known=known)
        time.sleep(1.0)  # the abandoned thread tries its late write now
    finally:
        builder._Builder.metrics = original
    names = tarfile.open(out).getnames()
    assert not any(n.endswith(("run/metrics.txt", "run/early.txt")) for n in names)
    row = next(s for s in result.sources if s.name == "metrics")
    assert row.status == "failed" and row.members == []


def test_only_folders_doctor_listed_are_listed_and_never_tmp_or_home(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(HOSTS / "healthy-910b", tree, symlinks=True)
    for planted in ("etc/shadow", "etc/sudoers", "tmp/customer-secret-plan.txt", "home/alice/notes.txt"):
        (tree / planted).parent.mkdir(parents=True, exist_ok=True)
        (tree / planted).write_text("x\n")
    host, known = recorded_host(tree)
    out = tmp_path / "b.tar.gz"
    build_bundle(BundleOptions(out=out), host=host, live=False, env_known=known)
    names = [n.split("/", 1)[1] for n in tarfile.open(out).getnames() if "/" in n]
    for planted in ("etc/shadow", "etc/sudoers", "tmp/customer-secret-plan.txt", "home/alice", "alice"):
        assert not any(n == planted or n.startswith(planted + "/") for n in names), planted
    assert any(n.startswith("dev/davinci") for n in names)  # what doctor lists is still there
    assert "etc/os-release" in names
    # ... and doctor --root of the bundle still gives the original verdicts.
    from engine.doctor import run_doctor

    def verdicts(report):
        return {c.id: c.status.value for c in report.checks}

    assert verdicts(run_doctor(root=out)) == verdicts(run_doctor(root=tree))
    assert json.loads((unpacked(out) / MANIFEST).read_text())["kind"] == "ascendctl-bundle"


def test_sigterm_mid_bundle_leaves_no_archive_part_or_staging_folder(tmp_path):
    """`kill` (SIGTERM, as systemd or a batch system stops a job) cleans up as Ctrl-C does."""
    import signal
    import subprocess
    import sys

    from helpers import ROOT

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pidfile = tmp_path / "npu-smi.pid"
    (bin_dir / "npu-smi").write_text(f'#!/bin/sh\necho $$ >> "{pidfile}"\nexec sleep 60\n')  # a stuck driver
    (bin_dir / "npu-smi").chmod(0o755)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "TMPDIR": str(scratch),
        "ASCENDCTL_STATE_DIR": str(tmp_path / "state"),
        "PYTHONPATH": str(ROOT),
    }
    out = tmp_path / "b.tar.gz"
    cmd = [sys.executable, "-m", "ascendctl", "bundle", "--out", str(out), "--timeout", "30"]
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not pidfile.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert pidfile.exists(), "the bundle never reached npu-smi"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in pidfile.read_text().split() if pidfile.exists() else []:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert proc.returncode == 130, err
    assert not out.exists() and not list(tmp_path.glob(".b.tar.gz*")) and not list(tmp_path.glob("*.map.json"))
    assert not list(scratch.glob(".ascendctl-bundle-*"))
