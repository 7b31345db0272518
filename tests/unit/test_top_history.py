"""The charts' history: bounded rings fed by snapshot time, bucket maths, gaps, and the replay
clock (speeds, jumps) on a fake clock."""

from __future__ import annotations

import math
import tracemalloc

import pytest

from engine.devices.sample import DeviceSample
from engine.metrics.rates import EngineRates, KvPool, Percentiles
from engine.telemetry.history import FIGURES, History
from engine.telemetry.replay import REFILL_S, Replay
from engine.telemetry.snapshot import EngineView, Snapshot, SourceStatus


def snap(t: float, bw: float | None = 50.0, running: float | None = 4.0, chips: int = 2, seq: int = 0) -> Snapshot:
    devices = tuple(
        DeviceSample(f"npu{i}", "npu", "910B2", mem_used_mb=32768, mem_total_mb=65536, mem_bw_pct=bw, util_pct=bw)
        for i in range(chips)
    )
    engine = EngineView(
        url="http://e1",
        label="e1",
        status=SourceStatus("e1", running is not None),
        running=running,
        waiting=0.0,
        kv=KvPool(1000, 250, 0.25),
        rates=EngineRates(prompt_tps=100.0, generation_tps=40.0, ttft=Percentiles(p99=0.25)),
    )
    return Snapshot(t, seq, devices=devices, engines=(engine,))


def test_figures_are_read_with_their_scale_and_nan_is_a_gap():
    s = snap(0.0)
    assert FIGURES["hbm_used"].value(s.devices[0]) == 50.0
    assert FIGURES["kv_usage"].value(s.engines[0]) == 25.0
    assert FIGURES["ttft_p99"].value(s.engines[0]) == 250.0
    assert FIGURES["itl_p99"].value(s.engines[0]) is None  # no ITL observations
    assert FIGURES["hbm_bw"].value(snap(0.0, bw=math.nan).devices[0]) is None


def test_one_second_samples_show_as_they_are_in_the_short_window():
    h = History()
    for i in range(10):
        h.add(snap(1000.0 + i, bw=float(i)))
    times, values = h.series("npu0", "hbm_bw", 300)
    assert values == [float(i) for i in range(10)]
    assert times[0] == 1000.5 and times[-1] == 1009.0  # bucket middles; the newest clamped to its snapshot


def test_longer_windows_merge_coarser_buckets_by_mean_or_by_max():
    h = History()
    for i in range(24):  # 1008..1031: two 12 s buckets, eight 3 s buckets
        h.add(snap(1008.0 + i, bw=float(i), running=float(i)))
    assert h.series("npu0", "hbm_bw", 3600)[1] == [5.5, 17.5]  # bandwidth: mean
    assert h.series("e1", "running", 3600)[1] == [5.5, 17.5]
    assert h.series("npu0", "hbm_bw", 900)[1] == [1.0, 4.0, 7.0, 10.0, 13.0, 16.0, 19.0, 22.0]
    # A chart whose dots are 3 s apart reads the 3 s ring even in the 5 minute window.
    assert len(h.series("npu0", "hbm_bw", 300, resolution=3.4)[1]) == 8
    assert len(h.series("npu0", "hbm_bw", 300, resolution=0.9)[1]) == 24
    assert h.last("npu0", "hbm_bw") == 23.0
    h2 = History()
    for i, v in enumerate([1, 9, 2, 3, 1, 0, 0, 4, 0, 0, 0, 0, 0]):
        view = EngineView(url="u", label="e", status=SourceStatus("e", True), waiting=float(v))
        h2.add(Snapshot(1008.0 + i, i, engines=(view,)))
    assert h2.series("e", "pending", 3600)[1] == [9.0, 0.0]  # a queue spike is kept: max


def test_gaps_stay_gaps():
    h = History()
    for i in range(5):
        h.add(snap(1000.0 + i))
    for i in range(5, 8):  # the engine is down: its figures are None
        h.add(snap(1000.0 + i, running=None))
    for i in range(60, 63):  # then nothing at all for 52 s (the tool was not running)
        h.add(snap(1000.0 + i))
    _, running = h.series("e1", "running", 300)
    assert [v == v for v in running] == [True] * 5 + [False] * 3 + [False] + [True] * 3
    _, bw = h.series("npu0", "hbm_bw", 300)
    assert [v == v for v in bw] == [True] * 8 + [False] + [True] * 3  # chips were fine while the engine was down


def test_a_two_second_interval_is_not_read_as_gaps():
    h = History()
    for i in range(0, 20, 2):
        h.add(snap(1000.0 + i))
    _, values = h.series("npu0", "hbm_bw", 300)
    assert len(values) == 10 and all(v == 50.0 for v in values)


def test_a_day_of_samples_keeps_memory_flat():
    h = History()
    t0 = 1_800_000_000.0
    for i in range(600):
        h.add(snap(t0 + i, chips=8))
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for i in range(600, 86400, 29):  # a day, sampled sparsely to keep the test quick
        h.add(snap(t0 + i, bw=float(i % 100), chips=8))
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(
        s.size_diff for s in after.compare_to(before, "filename") if str(s.traceback).endswith("telemetry/history.py")
    )
    assert grown < 4096
    times, values = h.series("npu3", "hbm_bw", 3600)
    assert len(times) <= 330 and times[-1] - times[0] <= 3600 and all(v == v for v in values)
    assert h.series_count() == 8 * 3 + 7


def test_a_subject_gone_for_longer_than_the_history_is_forgotten():
    h = History()
    h.add(snap(1000.0, chips=4))
    for i in range(1, 4000, 10):
        h.add(snap(1000.0 + i, chips=2))
    assert h.subjects("device") == ("npu0", "npu1")
    assert h.series("npu3", "hbm_bw", 300) == ([], [])


def test_clear_forgets_everything():
    h = History()
    h.add(snap(1000.0))
    h.clear()
    assert h.series("npu0", "hbm_bw", 300) == ([], []) and h.latest is None


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def recording(n: int = 7200, t0: float = 1_800_000_000.0) -> list[Snapshot]:
    return [Snapshot(t0 + i, i + 1) for i in range(n)]


def test_replay_follows_recorded_time_divided_by_the_speed():
    clock = Clock()
    r = Replay(recording(), speed=10, clock=clock)
    first = r.take()
    assert first.current.seq == 1 and len(first.frames) == 1
    clock.now = 2.05  # 20.5 recorded seconds
    step = r.take()
    assert step.current.seq == 21 and [f.seq for f in step.frames] == list(range(2, 22)) and not step.reset
    r.faster()  # 10 -> 60
    clock.now = 3.05
    assert r.take().current.seq == 81 and r.speed == 60
    r.slower()
    r.slower()
    assert r.speed == 1.0 and r.slower() == 1.0


def test_pause_stops_the_replay_clock():
    clock = Clock()
    r = Replay(recording(), speed=60, clock=clock)
    r.take()
    r.set_paused(True)
    clock.now = 100.0
    assert r.take().frames == () and r.position == r.start
    r.set_paused(False)
    clock.now = 101.0
    assert r.take().current.seq == 61


def test_a_jump_back_refills_the_history_from_the_recording():
    clock = Clock()
    r = Replay(recording(), speed=60, clock=clock)
    clock.now = 100.0  # 6000 s in
    r.take()
    r.jump(-300)
    step = r.take()
    assert step.reset and step.current.seq == 5701
    assert len(step.frames) == REFILL_S + 1 and step.frames[0].time == step.current.time - REFILL_S
    r.jump(300)  # a short way ahead: the frames skipped, no reset
    step = r.take()
    assert not step.reset and len(step.frames) == 300 and step.current.seq == 6001


def test_home_and_end_and_the_end_of_the_recording():
    clock = Clock()
    r = Replay(recording(), clock=clock)
    r.take()
    r.seek(r.end)
    step = r.take()
    assert step.reset and step.current.seq == 7200 and r.at_end
    r.seek(r.start)
    step = r.take()
    assert step.reset and [f.seq for f in step.frames] == [1]


def test_speed_must_be_positive():
    with pytest.raises(ValueError):
        Replay(recording(10), speed=0)


def test_a_recording_is_indexed_in_time_order_and_decoded_when_played(tmp_path):
    import json

    from engine.telemetry.record import Recorder, RecordingIndex

    path = tmp_path / "rec.ndjson"
    recorder = Recorder(path, 1)
    for t in (1003.0, 1004.0, 1000.0, 1001.0):  # two recordings appended to one file
        recorder.write(snap(t, seq=int(t)))
    recorder.close()
    bad = json.loads(path.read_text().splitlines()[0])
    bad["devices"][0]["mem_used_mb"] = "lots"  # indexes (it has a time), fails when decoded
    bad["time"] = 1002.0
    with path.open("a") as f:
        f.write(json.dumps(bad) + "\n" + '{"schema_version": 1, "time": 10')  # and a cut last line
    skipped: list[str] = []
    index = RecordingIndex(path, 1, skipped)
    assert index.times == [1000.0, 1001.0, 1002.0, 1003.0, 1004.0]
    assert len(skipped) == 1 and ":6: not a top snapshot" in skipped[0]
    assert index[1].seq == 1001 and index[2] is None
    clock = Clock()
    replay = Replay(index, speed=1, clock=clock)
    clock.now = 10.0
    assert [f.seq for f in replay.take().frames] == [1000, 1001, 1003, 1004]  # the damaged one skipped
    index.close()
