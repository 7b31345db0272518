"""The hang verdict's evidence in Chinese for a person (probe's line, serve's notice) while the
text kept for programs (--json, the run record) stays English."""

from __future__ import annotations

import json

from test_hang import Clock, Engine, _monitor, _run

from engine import i18n


def test_a_hang_reads_in_chinese_and_its_record_stays_english():
    engine, clock = Engine("timeout"), Clock()
    engine.running = 12
    i18n.set_language("zh")
    try:
        hung = next(v for v in _run(_monitor(engine, clock), clock, 120) if v.hung)
        shown = i18n.shown(hung.summary)
    finally:
        i18n.set_language(None)
    assert "探测请求在 60 秒内超时 3 次" in shown and "12 个请求正在运行，已" in shown, shown
    assert "probe" not in shown and "running" not in shown
    record = json.dumps(hung.as_dict(), ensure_ascii=False)
    assert "probe timed out 3x in 60 s" in record and "12 requests running, no token for" in record
    assert not any("\u4e00" <= ch <= "\u9fff" for ch in record)
