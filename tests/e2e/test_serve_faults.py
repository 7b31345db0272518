"""`ascendctl serve` under faults, on the real vLLM CPU engine: each ends with a clear message, the
documented exit code and no process left.

Start-ups are the cost (about a minute each on a busy host), so one engine that gets ready is
shared: a second serve of its port and a taken port are tried while it loads, then its EngineCore
is killed. Two more start-ups are cut short: ascendctl killed, and a SIGTERM, both while the
engine loads its model (where vLLM ignores SIGTERM and its children are not ascendctl's).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from helpers import engine_env, free_port

from engine.launcher import group_members

pytestmark = pytest.mark.e2e
ASCENDCTL = str(Path(sys.executable).with_name("ascendctl"))


class Serve:
    """One `ascendctl serve` run in the background, its stderr collected line by line."""

    def __init__(self, model: Path, port: int, env: dict[str, str], *extra: str) -> None:
        self.port = port
        argv = [ASCENDCTL, "serve", "-p", "cpu-tiny", "--model", str(model), "--set", f"server.port={port}"]
        self.proc = subprocess.Popen(
            [*argv, "--no-engine-output", *extra], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    @property
    def err(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, text: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if text in line:
                    return line
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.2)
        raise AssertionError(f"no {text!r} from serve within {timeout} s:\n{self.err}")

    def engine_pid(self) -> int:
        return int(self.wait_for("engine started, pid", 60).rsplit(" ", 1)[1])

    def exit_code(self, timeout: float) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _engine_core(pgid: int, timeout: float) -> int:
    """The EngineCore process of the engine's group, once vLLM has started it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in group_members(pgid):
            try:
                if "EngineCore" in " ".join(psutil.Process(pid).cmdline()):
                    return pid
            except psutil.Error:
                continue
        time.sleep(0.2)
    raise AssertionError(f"no EngineCore in process group {pgid} within {timeout} s")


def _gone(pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = group_members(pgid)
    for pid in left:  # a failed test must not leave a real engine behind
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return not left


@pytest.fixture(scope="module")
def state(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("faults")


@pytest.fixture(scope="module")
def env(state: Path) -> dict[str, str]:
    # Every serve of this module shares one state directory: the port lock lives there.
    return engine_env(ASCENDCTL_STATE_DIR=str(state / "state"), ASCENDCTL_CACHE_DIR=str(state / "cache"))


@pytest.fixture(scope="module")
def first(tiny_model, env):
    """The engine that gets ready (shared): started, not waited for."""
    serve = Serve(tiny_model, free_port(), env)
    try:
        serve.pgid = serve.engine_pid()
        yield serve
    finally:
        serve.kill()
    assert _gone(serve.pgid, 30)


def test_a_second_serve_of_the_same_port_exits_2_naming_the_first(first, tiny_model, env, state):
    run_id = next((state / "state" / "runs").iterdir()).name
    second = Serve(tiny_model, first.port, env)
    try:
        assert second.exit_code(60) == 2, second.err
    finally:
        second.kill()  # (and its engine, through the watchdog) when it did start after all
    assert f"port {first.port} is already served by ascendctl run {run_id} (pid {first.proc.pid})" in second.err
    assert f"kill -TERM {first.proc.pid}" in second.err
    assert "engine started" not in second.err
    assert len(list((state / "state" / "runs").iterdir())) == 1  # nothing of the second was created


def test_a_taken_port_exits_2(tiny_model, env):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        serve = Serve(tiny_model, port, env)
        try:
            code = serve.exit_code(60)
        finally:
            serve.kill()
    assert code == 2, serve.err
    assert f"port {port} on 127.0.0.1 is already in use" in serve.err and "engine started" not in serve.err


def test_a_killed_engine_core_exits_1_with_the_diagnosis_and_leaves_nothing(first, state):
    first.wait_for("ready in", 420)
    os.kill(_engine_core(first.pgid, 10), signal.SIGKILL)
    assert first.exit_code(90) == 1, first.err
    assert "the engine exited while serving" in first.err
    assert "The engine died while serving" in first.err  # triage's vllm-engine-dead, with its fix
    assert "full log:" in first.err and "exited cleanly" not in first.err
    assert _gone(first.pgid, 10)
    run = json.loads(next((state / "state" / "runs").iterdir()).joinpath("run.json").read_text())
    assert run["ended_at"] is not None and run["exit_code"] is not None


def test_sigkill_of_ascendctl_while_the_engine_loads_leaves_no_process(tiny_model, env):
    serve = Serve(tiny_model, free_port(), env)
    try:
        pgid = serve.engine_pid()
        _engine_core(pgid, 120)  # the API server's children exist: they are not ascendctl's
        serve.proc.kill()  # SIGKILL: nothing can be forwarded
        serve.proc.wait()
        assert _gone(pgid, 5), "the engine outlived ascendctl"
    finally:
        serve.kill()
    watchdogs = [p for p in psutil.process_iter(["cmdline"]) if "watchdog.py" in " ".join(p.info["cmdline"] or [])]
    assert not [p for p in watchdogs if str(pgid) in p.info["cmdline"]]


def test_sigterm_while_the_engine_loads_ends_when_the_engine_does_not_after_the_grace(tiny_model, env):
    """vLLM drops a SIGTERM while it starts (or hangs once its EngineCore died of it): serve
    forwards an interrupt then, and returns once the group is gone, long before a generous grace
    period would have it SIGKILLed."""
    serve = Serve(tiny_model, free_port(), env, "--grace", "120")
    try:
        pgid = serve.engine_pid()
        _engine_core(pgid, 120)  # where a SIGTERM used to hang until the grace period ended
        started = time.monotonic()
        serve.proc.send_signal(signal.SIGTERM)
        assert serve.exit_code(150) == 130, serve.err
        assert time.monotonic() - started < 60, serve.err
        assert "stopped by SIGTERM" in serve.err and "SIGKILL)" not in serve.err
        assert _gone(pgid, 5)
    finally:
        serve.kill()
