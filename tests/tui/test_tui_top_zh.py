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
