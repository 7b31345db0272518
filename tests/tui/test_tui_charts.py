"""The charts view of `top` and replay keys: snapshot tests on a fixed feed with known series
(tests/top_fakes.chart_feed: chips of recorded npu-smi tables, waves of known period), Pilot
tests of c, w, and of the replay keys on a fake clock."""

from __future__ import annotations

import math
import time

import pytest
from rich.style import Style
from textual.geometry import Region
from top_fakes import chart_feed

from ascendctl.tui.app import TopApp
from ascendctl.tui.chart import ChartPanel, ChartView, Line, lines_for, plot
from engine.telemetry.history import CHARTS, History
from engine.telemetry.replay import Replay

pytestmark = pytest.mark.timeout(120)

A3 = "info/s04_a3_25.2.3_multiproc.txt"


@pytest.fixture
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def charts_app(info: str = "info/s02_910b2_25.2.0_vllm_dp.txt", **kw) -> TopApp:
    snaps = chart_feed(info, **kw)
    app = TopApp(lambda: snaps[-1], interval=None, charts=True)
    for snap in snaps:
        app.history.add(snap)
    return app


def text_of(widget) -> str:
    return "\n".join(strip.text for strip in widget.render_lines(Region(0, 0, *widget.size)))


async def settle(pilot, app):
    for _ in range(100):
        await pilot.pause(0.02)
        if app.latest is not None and not app._polling:
            await pilot.pause(0.05)
            return
    raise AssertionError("no snapshot arrived")


def test_charts_view_snapshot(snap_compare, utc):
    assert snap_compare(charts_app(), terminal_size=(160, 50), run_before=lambda pilot: pilot.pause(0.3))


def test_sixteen_dies_draw_max_mean_min_snapshot(snap_compare, utc):
    assert snap_compare(charts_app(A3), terminal_size=(120, 50), run_before=lambda pilot: pilot.pause(0.3))


def test_narrow_terminal_keeps_the_table_view_snapshot(snap_compare, utc):
    assert snap_compare(charts_app(), terminal_size=(70, 40), run_before=lambda pilot: pilot.pause(0.3))


async def test_c_toggles_the_charts_and_w_cycles_the_window(utc):
    app = charts_app()
    app.charts_view = False
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app)
        assert app.query_one("#main").display and not app.query_one("#charts").display
        await pilot.press("c")
        await pilot.pause(0.1)
        assert app.query_one("#charts").display and not app.query_one("#main").display
        panels = list(app.query(ChartPanel))
        assert [p.subject for p in panels] == [None, "engine-1", "engine-2"]
        assert "8 chips · last 5 min" in text_of(panels[0].query_one("TextPanel"))
        assert "charts 5 min" in text_of(app.query_one("#status"))
        chart = panels[0].query(ChartView).first()
        assert "HBM used %" in text_of(chart) and "08:11" in text_of(chart) and "08:14" in text_of(chart)
        await pilot.press("w")
        await pilot.pause(0.1)
        assert "last 15 min" in text_of(panels[0].query_one("TextPanel")) and "charts 15 min" in text_of(
            app.query_one("#status")
        )
        assert "08:05" in text_of(chart) and "08:11" not in text_of(chart)  # a tick every 5 minutes
        await pilot.press("w")
        await pilot.press("w")
        await pilot.pause(0.1)
        assert app.window == 300.0
        await pilot.press("c")
        await pilot.pause(0.1)
        assert app.query_one("#main").display and "npu7" in text_of(app.query_one("#devices"))


async def test_a_narrow_terminal_says_why_there_are_no_charts(utc):
    app = charts_app()
    async with app.run_test(size=(70, 40)) as pilot:
        await settle(pilot, app)
        assert app.query_one("#main").display and "charts need 80 columns" in text_of(app.query_one("#status"))
        await pilot.resize_terminal(120, 40)
        await pilot.pause(0.2)
        assert app.query_one("#charts").display and "charts 5 min" in text_of(app.query_one("#status"))


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_replay_keys_change_speed_and_jump(utc):
    snaps = chart_feed(seconds=1800)
    clock = FakeClock()
    replay = Replay(snaps, speed=1, clock=clock)
    app = TopApp(None, interval=None, replay=replay, charts=True)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app)
        status = text_of(app.query_one("#status"))
        assert "replay 2027-01-15 08:00:00 x1" in status and app.shown.seq == 1
        await pilot.press("plus")
        await pilot.press("plus")
        assert "x60" in text_of(app.query_one("#status"))
        clock.now = 10.0  # ten seconds at 60x: ten minutes of the recording
        await pilot.press("r")
        await settle(pilot, app)
        assert app.shown.seq == 601 and app.history.series("npu0", "hbm_bw", 900)[0][0] < snaps[10].time
        await pilot.press("right_square_bracket")  # 5 min ahead: the frames between are fed, no reset
        await settle(pilot, app)
        generation = app.history.generation
        assert app.shown.seq == 901 and "08:15:00" in text_of(app.query_one("#status"))
        await pilot.press("left_square_bracket")  # back: the history is refilled up to there
        await settle(pilot, app)
        assert app.shown.seq == 601 and app.history.generation == generation + 1
        assert app.history.latest == snaps[600].time
        await pilot.press("minus")
        assert "x10" in text_of(app.query_one("#status"))
        await pilot.press("end")
        await settle(pilot, app)
        assert app.shown.seq == 1800 and "(end)" in text_of(app.query_one("#status"))
        await pilot.press("home")
        await settle(pilot, app)
        assert app.shown.seq == 1 and app.history.latest == snaps[0].time


async def test_p_pauses_the_replay_clock(utc):
    snaps = chart_feed(seconds=120)
    clock = FakeClock()
    app = TopApp(None, interval=None, replay=Replay(snaps, speed=10, clock=clock))
    async with app.run_test(size=(140, 50)) as pilot:
        await settle(pilot, app)
        await pilot.press("p")
        clock.now = 5.0
        await pilot.press("p")
        await pilot.press("r")
        await settle(pilot, app)
        assert app.shown.seq == 1  # paused for those five seconds: the recording did not move
        await pilot.press("p", "right_square_bracket")
        await settle(pilot, app)
        assert app.paused and app.shown.seq == 120  # a jump while paused is shown (to the end: 2 min recorded)
        await pilot.press("c")
        await pilot.press("c")
        assert app.focused is app.query_one("#engines")  # back from the charts, the engines have the keys


async def test_replay_keys_do_nothing_live_and_end_scrolls_the_charts():
    app = charts_app()
    async with app.run_test(size=(160, 30)) as pilot:
        await settle(pilot, app)
        await pilot.press("plus", "right_square_bracket", "home")
        assert app.is_running and "replay" not in text_of(app.query_one("#status"))
        await pilot.press("end")
        await pilot.pause(0.2)
        assert app.query_one("#charts").scroll_y > 0


def test_a_gap_in_the_data_is_a_gap_in_the_line():
    h = History()
    for snap in chart_feed(seconds=600, down=(400, 460)):
        h.add(snap)
    latency = next(c for c in CHARTS if c.title == "latency p99")
    lines = lines_for(h, latency, ("engine-2",), 900)
    assert any(math.isnan(v) for v in lines[0].values)
    strips = plot(latency, lines, h.latest, 900, 86, 9, Style())
    columns = ["".join(strip.text[6 + x] for strip in strips[:-1]) for x in range(80)]
    drawn = [bool(c.strip()) for c in columns]
    # 400..460 s of 600 s, in a 900 s window over 80 columns: about columns 62-67 stay blank.
    assert drawn[55] and not any(drawn[63:66]) and drawn[72]


def test_a_line_connects_its_points_and_stays_inside_the_axes():
    line = Line("x", "#ffffff", [0.0, 50.0, 100.0], [0.0, 100.0, 0.0])
    chart = next(c for c in CHARTS if c.title == "KV cache")
    strips = plot(chart, [line], 100.0, 100.0, 26, 6, Style())
    body = [s.text for s in strips[:-1]]
    assert body[0].startswith("  100┤") and body[-1].startswith("    0┤")
    assert all(len(s.text) == 26 for s in strips)
    # A peak: every row has dots (the line is connected), and the top row only in the middle third.
    assert all(row[6:].strip() for row in body)
    top = [x for x, ch in enumerate(body[0][6:]) if ch != " "]
    assert top and min(top) >= 6 and max(top) <= 13


async def test_the_charts_view_says_when_the_diagnostics_table_has_rows(utc):
    import dataclasses

    from engine.telemetry.snapshot import Diagnostic

    snaps = chart_feed(seconds=60)
    down = Diagnostic("engine-unreachable", "critical", "engine-2", "engine-2 unreachable", "c", "start it")
    last = dataclasses.replace(snaps[-1], diagnostics=(down,))
    app = TopApp(lambda: last, interval=None, charts=True)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, app)
        assert "1 diagnostic (c: tables)" in text_of(app.query_one("#status"))
        await pilot.press("question_mark")
        help_text = text_of(app.screen.query_one("#help"))
        assert "chart window: 5, 15, 60 minutes" in help_text and "replay: jump 5 min ahead / back" in help_text


def _host_history(kind: str = "cpu") -> History:
    from types import SimpleNamespace

    from engine.devices.sample import DeviceSample

    h = History()
    for s in range(30):
        host = DeviceSample(key="host", kind=kind, name="host", util_pct=40.0, mem_used_mb=1000.0, mem_total_mb=4000.0)
        h.add(SimpleNamespace(time=1_800_000_000.0 + s, devices=(host,), engines=()))
    return h


def test_a_cpu_host_charts_say_host_memory_and_cpu_and_skip_bandwidth():
    panel = ChartPanel(_host_history(), "device")
    assert [c.title for c in panel.charts] == ["host memory used", "CPU"]
    assert "host" in panel._heading().plain
    npu = ChartPanel(_host_history("npu"), "device")
    assert [c.title for c in npu.charts] == ["HBM used", "HBM bandwidth", "AI Core"]


def test_an_engine_started_by_serve_is_named_by_its_profile_not_its_run_id():
    from ascendctl.tui.render import engine_head
    from engine.telemetry.snapshot import EngineView, SourceStatus

    label = "20261207-035315-cpu-tiny"
    head = engine_head(EngineView(url="http://127.0.0.1:8000", label=label, status=SourceStatus(label, True)))
    assert head.plain.startswith("cpu-tiny ") and "2026" not in head.plain
    assert ChartPanel(History(), "engine", label)._heading().plain.startswith("cpu-tiny ·")
