"""The hang verdict (engine/health/hang.py) on replayed figures: what makes a hang, what never does
(a long prefill, a saturated queue with tokens flowing, an idle engine), and the thresholds it
reads, which refuse numbers that would make a rule or an alert that never fires."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest
from top_fakes import ReplayRunner, npu_text

from engine.errors import BadInput
from engine.health.hang import EngineProc, HangLimits, HangMonitor
from engine.metrics import parse_metrics
from engine.telemetry.thresholds import Thresholds, load_thresholds

LIMITS = HangLimits(
    probe_interval_s=30, probe_timeout_s=10, probe_failures=3, progress_s=90, cpu_s=60, device_s=60, device_idle_pct=5
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Engine:
    """Replayed figures of one engine: its /metrics, its process tree, its answer to a probe."""

    def __init__(self, answer: str = "ok") -> None:
        self.running = 0
        self.waiting = 0
        self.tokens = 0.0
        self.cpu = 100.0
        self.answer = answer  # ok | timeout | 500
        self.probes = 0
        self.core_alive = True

    def metrics(self):
        return parse_metrics(
            f"vllm:num_requests_running {self.running}\nvllm:num_requests_waiting {self.waiting}\n"
            f"vllm:generation_tokens_total {self.tokens}\n"
        )

    def procs(self, _pid):
        core = [EngineProc(4711, "VLLM::EngineCore", self.cpu, "sleeping")] if self.core_alive else []
        return True, core

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.probes += 1
        if self.answer == "timeout":
            raise httpx.ReadTimeout("no token", request=request)
        if self.answer == "500":
            return httpx.Response(500, json={"error": "boom"})
        return httpx.Response(200, text='data: {"choices": [{"text": "x"}]}\n\ndata: [DONE]\n\n')


def _monitor(engine: Engine, clock: Clock, devices=None, limits: HangLimits = LIMITS) -> HangMonitor:
    return HangMonitor(
        "http://engine",
        limits,
        pid=1,
        model="m",
        client=httpx.Client(transport=httpx.MockTransport(engine.handler)),
        clock=clock,
        read_procs=engine.procs,
        scrape=engine.metrics,
        devices=devices,
    )


def _run(monitor: HangMonitor, clock: Clock, seconds: int, step: int = 5, each=None) -> list:
    verdicts = []
    for _ in range(seconds // step):
        if each is not None:
            each()
        verdicts.append(monitor.tick())
        clock.now += step
    return verdicts


def test_requests_stuck_and_probes_timing_out_make_a_hang_that_names_what_was_seen():
    engine, clock = Engine("timeout"), Clock()
    engine.running = 12
    monitor = _monitor(engine, clock)
    verdicts = _run(monitor, clock, 120)
    hung = next(v for v in verdicts if v.hung)
    assert "probe timed out 3x in 60 s" in hung.summary
    assert "12 requests running, no token for" in hung.summary
    assert not verdicts[0].hung  # one failed probe is not a hang yet


def test_a_completion_that_always_fails_with_health_ok_is_a_hang():
    engine, clock = Engine("500"), Clock()
    verdicts = _run(_monitor(engine, clock), clock, 120)  # the first look reads a baseline
    assert verdicts[-1].hung and "probe failed (HTTP 500) 3x" in verdicts[-1].summary


def test_enginecore_gone_while_the_api_server_lives_is_a_hang_at_once():
    engine, clock = Engine(), Clock()
    monitor = _monitor(engine, clock)
    assert not monitor.tick().hung
    engine.core_alive = False
    clock.now += 5
    verdict = monitor.tick()
    assert verdict.hung and "EngineCore pid 4711 gone while the API server lives" in verdict.summary


def test_enginecore_using_no_cpu_while_requests_wait_and_no_token_is_a_hang():
    engine, clock = Engine("ok"), Clock()
    engine.waiting = 3
    # probes never answered in time would be enough; here only progress + CPU speak
    monitor = _monitor(engine, clock, limits=HangLimits(**{**LIMITS.__dict__, "probe_interval_s": 10_000}))
    verdicts = _run(monitor, clock, 120)
    assert verdicts[-1].hung
    assert "3 waiting, no token for" in verdicts[-1].summary and "no CPU time used" in verdicts[-1].summary


def test_a_long_prefill_is_not_a_hang():
    """One request prefilling for five minutes: no token, but its EngineCore computes and the
    probe is answered (chunked prefill lets it in)."""
    engine, clock = Engine("ok"), Clock()
    engine.running = 1

    def compute():
        engine.cpu += 5

    verdicts = _run(_monitor(engine, clock), clock, 300, each=compute)
    assert not any(v.hung for v in verdicts)


def test_a_saturated_queue_with_tokens_flowing_is_never_probed_nor_a_hang():
    engine, clock = Engine("timeout"), Clock()  # a probe would time out: it must not be sent
    engine.running, engine.waiting = 8, 120

    def flow():
        engine.tokens += 400

    monitor = _monitor(engine, clock)
    verdicts = _run(monitor, clock, 600, each=flow)
    assert not any(v.hung for v in verdicts)
    assert engine.probes == 0  # not even at the first look: it reads the counter only


def test_an_idle_engine_is_probed_on_the_interval_and_never_hung():
    engine, clock = Engine("ok"), Clock()

    def probe_token():
        engine.tokens = engine.probes  # each answered probe generates its one token

    verdicts = _run(_monitor(engine, clock), clock, 3600, each=probe_token)
    assert not any(v.hung for v in verdicts)
    assert engine.probes == 3600 // 30 - 1  # the first look reads the counter; a probe 30 s later


class Flaky(Engine):
    """An engine whose /metrics fails at the looks listed (under load a page can take longer
    than the monitor's deadline), and whose probes generate their one token."""

    def __init__(self, fail_at: set[int]) -> None:
        super().__init__("ok")
        self.fail_at = fail_at
        self.looks = 0

    def metrics(self):
        self.looks += 1
        if self.looks in self.fail_at:
            raise httpx.ReadTimeout("/metrics took too long")
        return super().metrics()

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.tokens += 1
        return super().handler(request)


def test_a_saturated_phase_after_idle_probes_is_never_probed_even_when_metrics_fail():
    """The sequence of the ten-minute saturated bench: idle (probed on the interval), then 16
    streams with tokens flowing, and /metrics too slow to answer at some looks. A look that cannot
    read the counter is no proof of silence; the look after must still compare with the count of
    the last probe (not with nothing), and requests that just came in get a second look."""
    engine, clock = Flaky(fail_at=set()), Clock()
    monitor = _monitor(engine, clock)
    _run(monitor, clock, 120)  # idle: probes answered
    idle_probes = engine.probes
    assert idle_probes >= 3
    looks = engine.looks
    # the load starts 1 s before a look, with the first tokens still prefilling at that look
    engine.running, engine.waiting = 8, 8
    monitor.tick()
    clock.now += 5
    engine.fail_at = {looks + n for n in (2, 9, 10, 16, 40, 41, 42, 43, 44)}  # 25 s at most

    def flow():
        engine.tokens += 400

    verdicts = _run(monitor, clock, 600, each=flow)
    assert not any(v.hung for v in verdicts)
    assert engine.probes == idle_probes, f"{engine.probes - idle_probes} probes while tokens flowed"


def test_metrics_unreadable_for_a_whole_interval_is_probed_and_a_wedged_server_found():
    """An API server that answers nothing at all (its /metrics neither): the probe waits one
    interval for the counter, then goes out, and its failures make the verdict."""
    engine, clock = Flaky(fail_at=set(range(1, 1000))), Clock()
    engine.answer = "timeout"
    monitor = _monitor(engine, clock)
    verdicts = _run(monitor, clock, 200)
    first = next(i for i, v in enumerate(verdicts) if any(e.part == "probe" for e in v.parts))
    assert first * 5 >= 30  # not before the counter was unreadable for an interval
    hung = next(v for v in verdicts if v.hung)
    assert "probe timed out 3x in 60 s" in hung.summary and "/metrics unreadable" in hung.summary


def test_a_restart_under_load_is_not_probed_at_the_first_look_but_one_look_is():
    engine, clock = Engine("timeout"), Clock()  # a probe would time out: it must not be sent
    engine.running, engine.waiting, engine.tokens = 8, 8, 5000
    monitor = _monitor(engine, clock)
    assert not monitor.tick().parts or all(e.part != "probe" for e in monitor.last.parts)
    assert engine.probes == 0
    once = _monitor(engine, clock)
    once.probe_first = True  # `ascendctl probe`: one look, the probe in it
    once.tick()
    assert engine.probes == 1


def _npu(rel: str):
    from engine.devices import NpuSmiSource

    return NpuSmiSource(ReplayRunner(npu_text(rel), None), usages=False).sample


def test_npus_idle_with_hbm_unchanged_while_requests_run_witness_a_stall():
    """Recorded npu-smi of a vLLM DP engine whose chips show AI Core 0 with 60 GB held."""
    engine, clock = Engine("ok"), Clock()
    engine.running = 4
    limits = HangLimits(**{**LIMITS.__dict__, "probe_interval_s": 10_000, "cpu_s": 10_000})
    monitor = _monitor(engine, clock, devices=_npu("info/s02_910b2_25.2.0_vllm_dp.txt"), limits=limits)

    def compute():
        engine.cpu += 5  # the host side spins: only the device part can tell

    verdicts = _run(monitor, clock, 120, each=compute)
    assert verdicts[-1].hung and "AI Core <= 5% and HBM unchanged" in verdicts[-1].summary


def test_busy_npus_are_no_witness():
    engine, clock = Engine("ok"), Clock()
    engine.running = 4
    limits = HangLimits(**{**LIMITS.__dict__, "probe_interval_s": 10_000, "cpu_s": 10_000})
    monitor = _monitor(engine, clock, devices=_npu("info/s04_a3_25.2.3_multiproc.txt"), limits=limits)
    verdicts = _run(monitor, clock, 300, each=lambda: setattr(engine, "cpu", engine.cpu + 5))
    assert not any(v.hung for v in verdicts)


def test_a_real_stopped_process_is_named_and_its_cpu_time_stalls():
    """A real child under SIGSTOP, titled as vLLM titles its EngineCore."""
    from engine.health.hang import engine_procs

    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "subprocess.Popen(['VLLM::EngineCore', '-c', 'import time; time.sleep(60)'], executable=sys.executable)\n"
            "time.sleep(60)\n",
        ]
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not engine_procs(parent.pid)[1]:
            time.sleep(0.05)
        _, procs = engine_procs(parent.pid)
        assert [p.title for p in procs] == ["VLLM::EngineCore"]
        import os
        import signal

        os.kill(procs[0].pid, signal.SIGSTOP)
        time.sleep(0.2)
        engine, clock = Engine("ok"), Clock()
        engine.running = 2
        limits = HangLimits(**{**LIMITS.__dict__, "probe_interval_s": 10_000})
        monitor = HangMonitor(
            "http://engine", limits, pid=parent.pid, model="m", clock=clock, scrape=engine.metrics,
            client=httpx.Client(transport=httpx.MockTransport(engine.handler)),
        )  # fmt: skip
        verdicts = _run(monitor, clock, 100)
        assert verdicts[-1].hung
        assert f"EngineCore pid {procs[0].pid} stopped (SIGSTOP)" in verdicts[-1].summary
        os.kill(procs[0].pid, signal.SIGKILL)
    finally:
        import psutil

        for child in psutil.Process(parent.pid).children(recursive=True):
            child.kill()
        parent.kill()
        parent.wait()


# -- thresholds --------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["-1", "0", ".nan", ".inf", "-.inf", "abc", "true"])
@pytest.mark.parametrize("key", Thresholds.keys())
def test_every_threshold_refuses_what_would_never_fire_with_file_and_line(tmp_path, key, bad):
    path = tmp_path / "t.yaml"
    path.write_text(f"# mine\nwarn_pct: 70\n{key}: {bad}\n")
    with pytest.raises(BadInput) as err:
        load_thresholds(path)
    assert f"{path}:3" in err.value.cause and key in err.value.cause


@pytest.mark.parametrize("bad", ["nan", "inf", "-5", "0"])
def test_set_refuses_the_same(bad):
    with pytest.raises(BadInput) as err:
        load_thresholds(overrides=[f"hang_progress_s={bad}"])
    assert "hang_progress_s" in err.value.cause


def test_hang_thresholds_come_from_the_yaml_and_a_profile_overrides_them():
    from types import SimpleNamespace

    from engine.profiles.schema import Diagnostics
    from engine.telemetry.thresholds import profile_thresholds

    assert HangLimits.from_thresholds(Thresholds.defaults()) == LIMITS
    prof = SimpleNamespace(diagnostics=Diagnostics(hang_progress_s=20, hang_probe_failures=2), engine=None)
    limits = HangLimits.from_thresholds(load_thresholds(base=profile_thresholds(prof)))
    assert limits.progress_s == 20 and limits.probe_failures == 2 and limits.cpu_s == 60


def test_a_profile_refuses_a_zero_hang_threshold(tmp_path):
    from engine.profiles import load_profile

    path = tmp_path / "p.yaml"
    path.write_text(
        "name: p\nplatform: cpu\nmodel:\n  path: /nonexistent\ndiagnostics:\n  hang_progress_s: 0\n", encoding="utf-8"
    )
    with pytest.raises(BadInput) as err:
        load_profile(str(path))
    assert "hang_progress_s" in str(err.value.cause) + str(err.value.fix)


def test_verdict_json_round_trip():
    engine, clock = Engine("timeout"), Clock()
    verdicts = _run(_monitor(engine, clock), clock, 120)
    data = json.loads(json.dumps(verdicts[-1].as_dict()))
    assert data["hung"] and data["parts"][0]["part"] == "probe"


class AfterABusyHour(Engine):
    """An engine whose TTFT histogram holds a busy hour: requests that waited 10 to 20 s in the
    queue before their first token (the ten-minute saturated bench left exactly that)."""

    def metrics(self):
        ttft = (
            'vllm:time_to_first_token_seconds_bucket{le="1.0"} 9000\n'
            'vllm:time_to_first_token_seconds_bucket{le="10.0"} 13900\n'
            'vllm:time_to_first_token_seconds_bucket{le="20.0"} 13979\n'
            'vllm:time_to_first_token_seconds_bucket{le="+Inf"} 13979\n'
            "vllm:time_to_first_token_seconds_count 13979\nvllm:time_to_first_token_seconds_sum 40000\n"
        )
        return parse_metrics(
            f"vllm:num_requests_running {self.running}\nvllm:num_requests_waiting {self.waiting}\n"
            f"vllm:generation_tokens_total {self.tokens}\n" + ttft
        )


def test_the_queue_waits_of_a_busy_hour_do_not_stretch_the_probe_of_an_idle_engine():
    """Stopped after a saturated hour with nothing in flight: the probe times out at the floor,
    not at four times the 20 s the queue once made a request wait (80 s, and a verdict in six
    minutes instead of two and a half)."""
    engine, clock = AfterABusyHour("timeout"), Clock()
    monitor = _monitor(engine, clock)
    verdicts = _run(monitor, clock, 160)
    hung = next(v for v in verdicts if v.hung)
    assert "probe timed out 3x" in hung.summary
    assert monitor.failures[0][1] == "timed out after 10 s"


def test_the_queue_waits_of_a_busy_hour_do_not_stretch_the_probe_of_requests_stuck_now():
    """Requests in flight on an engine that reports no first token any more (stuck): the busy
    hour's 20 s waits are past, the probe times out at the floor and the verdict comes at the
    defaults' pace (it took 80 s a probe when every wait the engine had ever reported counted)."""
    engine, clock = AfterABusyHour("timeout"), Clock()
    engine.running = 2
    monitor = _monitor(engine, clock)
    verdicts = _run(monitor, clock, 160)
    hung = next(v for v in verdicts if v.hung)
    assert monitor.failures[0][1] == "timed out after 10 s"
    assert "probe timed out 3x" in hung.summary and "2 requests running, no token for" in hung.summary


class QueueWaitsNow(AfterABusyHour):
    """Requests reaching their first token after 10 to 20 s in the queue, now: the TTFT
    histogram's 20 s bucket grows at every look."""

    def metrics(self):
        self.slow = getattr(self, "slow", 13979) + 1
        ttft = (
            'vllm:time_to_first_token_seconds_bucket{le="1.0"} 9000\n'
            'vllm:time_to_first_token_seconds_bucket{le="10.0"} 13900\n'
            f'vllm:time_to_first_token_seconds_bucket{{le="20.0"}} {self.slow}\n'
            f'vllm:time_to_first_token_seconds_bucket{{le="+Inf"}} {self.slow}\n'
            f"vllm:time_to_first_token_seconds_count {self.slow}\nvllm:time_to_first_token_seconds_sum 40000\n"
        )
        return parse_metrics(
            f"vllm:num_requests_running {self.running}\nvllm:num_requests_waiting {self.waiting}\n"
            f"vllm:generation_tokens_total {self.tokens}\n" + ttft
        )


def test_queue_waits_of_the_last_minutes_stretch_the_probe_while_requests_are_in_flight():
    engine, clock = QueueWaitsNow("timeout"), Clock()
    engine.running = 2
    monitor = _monitor(engine, clock)
    _run(monitor, clock, 40)
    assert monitor.failures and monitor.failures[0][1] == "timed out after 80 s"
    # One look (ascendctl probe) has no earlier reading: all the engine has reported counts.
    once = _monitor(AfterABusyHour("ok"), clock)
    once.tick()
    once.progress.requests = 2
    assert once.timeout_now() == 80.0


def test_the_probe_timeout_follows_the_probes_own_answers():
    engine, clock = Engine("ok"), Clock()
    monitor = _monitor(engine, clock)
    for seconds in (0.05, 3.0, 0.04):
        monitor.answers.append(seconds)
    assert monitor.timeout_now() == 12.0  # 4 x the slowest of the last answers, above the 10 s floor
