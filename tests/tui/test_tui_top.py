"""The Textual dashboard, driven by App.run_test + Pilot with snapshots built from recordings."""

from __future__ import annotations

import json
import time

import pytest
from textual.geometry import Region
from textual.widgets import DataTable
from top_fakes import BUSY, IDLE, down_error, make_collector, seq_bodies, settle, text_of

from ascendctl.tui.app import HelpScreen, TopApp
from ascendctl.tui.diagnostics import DetailScreen

pytestmark = pytest.mark.timeout(120)

DOWN = down_error()


async def test_panels_update_on_new_snapshots():
    collector = make_collector({"http://a:8000": [IDLE, BUSY]})
    app = TopApp(collector.poll, interval=None)
    async with app.run_test(size=(140, 50)) as pilot:
        await settle(pilot, app, 1)
        devices = text_of(app, "#devices")
        assert "npu0" in devices and "npu7" in devices and "910B2" in devices and "58.7/64G" in devices
        assert "generation N/A" in text_of(app, "#engines")
        await pilot.press("r")
        await settle(pilot, app, 2)
        engines = text_of(app, "#engines")
        assert "a:8000 up" in engines and "TTFT p50 35ms" in engines and "total 8192" in engines
        assert "tick 2" in text_of(app, "#status")


async def test_a_narrow_terminal_crops_lines_and_a_resize_redraws_them():
    collector = make_collector({"http://a:8000": [BUSY]})
    app = TopApp(collector.poll, interval=None)
    async with app.run_test(size=(50, 50)) as pilot:
        await settle(pilot, app, 1)
        narrow = text_of(app, "#devices").splitlines()
        assert len(narrow) == 10  # title, header, 8 cards: cropped, never wrapped onto more lines
        assert narrow[2].startswith("npu0") and narrow[2].endswith("…") and "98W" not in narrow[2]
        await pilot.resize_terminal(140, 50)
        await pilot.pause(0.05)
        wide = text_of(app, "#devices").splitlines()
        assert len(wide) == 10 and "98W" in wide[2] and "…" not in wide[2]


async def test_a_theme_change_repaints_the_panels_in_its_colours():
    collector = make_collector({"http://a:8000": [BUSY]})
    app = TopApp(collector.poll, interval=None)
    async with app.run_test(size=(140, 50)) as pilot:
        await settle(pilot, app, 1)
        panel = app.query_one("#devices")

        def heading_style():
            return next(iter(panel.render_lines(Region(0, 0, *panel.size))[0])).style

        dark = heading_style()
        app.theme = "textual-light"
        await pilot.pause(0.05)
        light = heading_style()
        assert light.color != dark.color and light.bgcolor != dark.bgcolor


async def test_pause_keeps_the_screen_while_collection_goes_on():
    collector = make_collector({"http://a:8000": [IDLE, BUSY]})
    app = TopApp(collector.poll, interval=None)
    async with app.run_test(size=(140, 50)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("p")
        assert "PAUSED" in text_of(app, "#status")
        await pilot.press("r")
        await settle(pilot, app, 2)
        assert app.shown.seq == 1 and "generation N/A" in text_of(app, "#engines")
        await pilot.press("p")
        assert app.shown.seq == 2 and "PAUSED" not in text_of(app, "#status")


async def test_source_down_shows_disconnected_then_recovers():
    collector = make_collector({"http://a:8000": [IDLE, BUSY], "http://b:8000": [IDLE, DOWN, DOWN, BUSY]})
    app = TopApp(collector.poll, interval=None)
    async with app.run_test(size=(140, 60)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("r")
        await settle(pilot, app, 2)
        engines = text_of(app, "#engines")
        assert "b:8000 DOWN" in engines and "s ago: cannot reach http://b:8000/metrics" in engines
        first_age = app.latest.engines[1].status.age_s
        assert "a:8000 up" in engines
        table = app.query_one("#diagnostics", DataTable)
        assert table.row_count == 1 and "b:8000 unreachable" in str(table.get_row_at(0)[2])
        await pilot.press("r")
        await settle(pilot, app, 3)
        assert app.latest.engines[1].status.age_s > first_age
        assert f"last ok {app.latest.engines[1].status.age_s:.0f}s ago" in text_of(app, "#engines")
        await pilot.press("r")
        await settle(pilot, app, 4)
        assert "b:8000 up" in text_of(app, "#engines")
        assert "nothing to report" in str(app.query_one("#diagnostics", DataTable).get_row_at(0)[2])


async def test_help_shows_thresholds_and_detail_shows_the_fix():
    collector = make_collector({"http://b:8000": [DOWN]})
    app = TopApp(collector.poll, interval=None)
    async with app.run_test(size=(140, 50)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        help_text = text_of(app.screen, "#help")
        assert "hbm_bw_pct" in help_text and "95" in help_text and "pause" in help_text
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        app.query_one("#diagnostics", DataTable).focus()
        await pilot.press("enter")
        assert isinstance(app.screen, DetailScreen)
        detail = text_of(app.screen, "#detail")
        assert "cause:" in detail and "ConnectError" in detail and "fix:" in detail and "start the engine" in detail
        await pilot.press("escape")


async def test_save_writes_the_snapshot_shown(tmp_path):
    collector = make_collector({"http://a:8000": [IDLE]})
    app = TopApp(collector.poll, interval=None, save_dir=tmp_path)
    async with app.run_test(size=(140, 50)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("s")
        await pilot.pause(0.05)
    saved = list(tmp_path.glob("top-snapshot-*.json"))
    assert len(saved) == 1
    data = json.loads(saved[0].read_text())
    assert data["seq"] == 1 and len(data["devices"]) == 8


async def test_timed_refresh_polls_without_overlap_and_q_quits():
    calls = []
    collector = make_collector({"http://a:8000": [b for _, b in seq_bodies()]})

    def slow_feed():
        calls.append(("start", time.monotonic()))
        time.sleep(0.15)  # slower than the refresh interval
        snap = collector.poll()
        calls.append(("end", time.monotonic()))
        return snap

    app = TopApp(slow_feed, interval=0.05)
    async with app.run_test(size=(140, 50)) as pilot:
        await settle(pilot, app, 3)
        await pilot.press("q")
    kinds = [k for k, _ in calls]
    # Strictly alternating start/end: a poll never began while another was running.
    assert all(a != b for a, b in zip(kinds, kinds[1:])) and kinds[0] == "start"


async def test_replay_feed_ends_cleanly():
    collector = make_collector({"http://a:8000": [IDLE, BUSY]})
    snaps = iter([collector.poll(), collector.poll()])
    app = TopApp(lambda: next(snaps, None), interval=0.05)
    async with app.run_test(size=(140, 50)) as pilot:
        for _ in range(100):
            await pilot.pause(0.02)
            if app.ended:
                break
        assert app.ended and "replay ended" in text_of(app, "#status") and app.shown.seq == 2


def _non_finite(body: str) -> str:
    import re

    body = re.sub(r"^(vllm:num_requests_running\{[^}]*\}) \S+$", r"\1 NaN", body, flags=re.M)
    body = re.sub(r"^(vllm:num_requests_waiting\{[^}]*\}) \S+$", r"\1 +Inf", body, flags=re.M)
    body = re.sub(r"^(vllm:kv_cache_usage_perc\{[^}]*\}) \S+$", r"\1 +Inf", body, flags=re.M)
    return body.replace('num_gpu_blocks="8192"', 'num_gpu_blocks="inf"')


async def test_nan_samples_and_hostile_text_never_take_the_dashboard_down():
    import dataclasses

    from engine.telemetry.snapshot import Diagnostic

    collector = make_collector({"http://a:8000": [_non_finite(IDLE), _non_finite(BUSY)]})
    hostile = Diagnostic("x", "error", "a:8000", "[/] boom [red]x\x1b[2J", "c\x1b]0;t\x07", "fix [/]", source="log")

    def feed():
        snap = collector.poll()
        engine = dataclasses.replace(
            snap.engines[0], history={"running": (1.0, float("nan"), float("inf")), "waiting": (float("nan"),)}
        )
        return dataclasses.replace(snap, engines=(engine,), diagnostics=(hostile,))

    app = TopApp(feed, interval=None)
    async with app.run_test(size=(140, 50)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("r")
        await settle(pilot, app, 2)
        assert app.is_running and "display failed" not in text_of(app, "#status")
        engines = text_of(app, "#engines")
        assert "running  N/A" in engines and "total N/A" in engines
        row = app.query_one("#diagnostics", DataTable).get_row_at(0)
        assert str(row[2]) == "[/] boom [red]x" and str(row[3]) == "fix [/]"
        app.query_one("#diagnostics", DataTable).focus()
        await pilot.press("enter")
        assert isinstance(app.screen, DetailScreen) and "[/] boom [red]x" in text_of(app.screen, "#detail")


def test_main_screen_snapshot(snap_compare, monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    collector = make_collector({"http://a:8000": [IDLE, BUSY], "http://b:8000": [IDLE, DOWN]})
    snaps = [collector.poll(), collector.poll()]
    feed = iter(snaps)
    app = TopApp(lambda: next(feed, snaps[-1]), interval=None)

    async def wait_for_second(pilot):
        await pilot.pause(0.2)
        await pilot.press("r")
        await pilot.pause(0.3)

    assert snap_compare(app, terminal_size=(130, 48), run_before=wait_for_second)


async def test_a_long_fix_wraps_in_the_diagnostics_table_at_80_columns():
    """The demo's first row, the open-file limit, with its whole fix on an 80-column terminal."""
    from textual.app import App

    from ascendctl.tui.diagnostics import DiagnosticsTable
    from engine.telemetry.snapshot import Diagnostic
    from engine.triage import load_rules

    rule = next(r for r in load_rules() if r.id == "vllm-fd-ulimit-low")
    row = Diagnostic(rule.id, rule.severity, "20261207-035433-cpu-tiny", rule.title, rule.cause, rule.fix, "log")

    class One(App):
        def compose(self):
            yield DiagnosticsTable(id="diagnostics")

    app = One()
    async with app.run_test(size=(80, 24)) as pilot:
        app.query_one(DiagnosticsTable).show([row])
        await pilot.pause()
        painted = text_of(app.screen, "#diagnostics")
    assert max(len(line.rstrip()) for line in painted.splitlines()) <= 80
    assert all(word in painted for word in rule.fix.split())  # the whole fix, wrapped, none cut off
