"""The dashboard in Chinese (LANG=zh_CN.UTF-8): labels, keys and column heads translated, wide
characters measured as two columns so the device table lines up and nothing is cut mid-character.
Snapshots at 80 and 160 columns, from the same recordings as test_tui_top.py."""

from __future__ import annotations

import time

import pytest
from top_fakes import BUSY, IDLE, down_error, make_collector, settle, text_of

from ascendctl.style import cells
from ascendctl.tui.app import TopApp
from engine import i18n

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def chinese(monkeypatch):
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    i18n.set_language(None)


def _app() -> TopApp:
    collector = make_collector({"http://a:8000": [IDLE, BUSY], "http://b:8000": [IDLE, down_error()]})
    snaps = [collector.poll(), collector.poll()]
    feed = iter(snaps)
    return TopApp(lambda: next(feed, snaps[-1]), interval=None)


async def _second(pilot):
    await pilot.pause(0.2)
    await pilot.press("r")
    await pilot.pause(0.3)


@pytest.mark.parametrize("columns", [80, 160])
def test_main_screen_in_chinese_snapshot(snap_compare, columns):
    assert snap_compare(_app(), terminal_size=(columns, 48), run_before=_second)


async def test_device_columns_line_up_under_their_chinese_heads():
    app = _app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, app, 1)
        devices = text_of(app, "#devices").splitlines()
        engines = text_of(app, "#engines")
        footer = {active.binding.description for active in app.screen.active_bindings.values()}
    head, first = devices[1], devices[2]
    assert head.startswith("设备") and "健康" in head and "内存 GiB" in head and "功耗" in head
    # Each head starts in the terminal column where its figures start (a Chinese character is two).
    assert cells(head[: head.index("健康")]) == cells(first[: first.index("OK")])
    # Right-aligned heads end where their figures end: procs is the last column.
    assert cells(head.rstrip()) == cells(first.rstrip())
    assert "运行中" in engines and "KV 块" in engines and "输出" in engines
    assert "退出" in footer and "帮助" in footer  # the keys' descriptions, translated per instance


async def test_help_screen_in_chinese():
    app = _app()
    async with app.run_test(size=(100, 48)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("question_mark")
        await pilot.pause(0.1)
        shown = text_of(app.screen, "#help")
    assert "按键" in shown and "暂停显示（采集继续进行）" in shown and "当前阈值" in shown


def _threshold_diagnostics():
    """What the threshold rules say about a hot chip with its AI CPU busy and a chip with an
    HBM ECC fault, in the language of the run (Chinese here)."""
    from engine.devices.sample import DeviceSample
    from engine.severity import Severity
    from engine.telemetry import Thresholds
    from engine.telemetry.rules import RuleEngine

    hot = DeviceSample("npu3", "npu", "910B2", health="OK", temp_c=92, util_pct=40, aicpu_pct=95)
    faulty = DeviceSample("npu5", "npu", "910B2", health="Critical", error_codes=("0x80E18402",))
    rules = RuleEngine(Thresholds.defaults())
    levels = {"npu3": {"temp_c": Severity.CRITICAL}, "npu5": {"health": Severity.CRITICAL}}
    rules.evaluate(0.0, [hot, faulty], levels, [])
    return rules.evaluate(61.0, [hot, faulty], levels, [])


def _column_start(line: str, column: int) -> str | None:
    """The part of `line` left of terminal column `column`; None when a wide character straddles it."""
    width = 0
    for i, ch in enumerate(line):
        if width == column:
            return line[:i]
        width += cells(ch)
        if width > column:
            return None
    return line if width == column else None


@pytest.mark.parametrize("columns", [80, 160])
async def test_threshold_diagnostics_in_chinese_line_up(columns):
    diagnostics = _threshold_diagnostics()
    assert {d.id for d in diagnostics} >= {"temperature-high", "aicpu-high", "device-fault"}
    app = _app()
    async with app.run_test(size=(columns, 48)) as pilot:
        await settle(pilot, app, 1)
        app.query_one("#diagnostics").show(diagnostics)
        await pilot.pause(0.1)
        shown = text_of(app, "#diagnostics")
    lines = [line for line in shown.splitlines() if line.strip()]
    text = "".join(shown.split())
    # Titles and fixes in Chinese, the commands and the fault code as written.
    assert "npu3温度92C" in text and "npu3AICPU占用95%" in text and "npu5：故障0x80E18402" in text
    assert "检查机箱的风扇和风道" in text and "`npu-smi" in text
    assert "stayed" not in shown and "check the fans" not in shown and "find them" not in shown
    # Every line fits the terminal, measured in columns (a Chinese character takes two)...
    assert all(cells(line) <= columns for line in lines)
    # ...and the fix column starts in the same terminal column on every line: no wide
    # character straddles its left edge, and the issue text never runs into it.
    head = lines[0]
    fix_at = cells(head[: head.index("处理")])
    for line in lines[1:]:
        left = _column_start(line, fix_at)
        assert left is not None and (left == line or left.endswith(" ")), line
