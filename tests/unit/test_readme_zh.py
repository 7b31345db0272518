"""The Chinese README: beside the English one, linked from it, with the same two commands."""

from __future__ import annotations

import re

from helpers import ROOT

README = ROOT / "README.md"
README_ZH = ROOT / "README.zh-CN.md"


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def test_the_english_readme_links_the_chinese_one():
    assert "](README.zh-CN.md)" in README.read_text(encoding="utf-8")
    assert "](README.md)" in README_ZH.read_text(encoding="utf-8")


def test_the_chinese_readme_has_the_same_two_commands():
    english = README.read_text(encoding="utf-8").split("## Two commands", 1)[1].split("\n## ", 1)[0]
    commands = _blocks(english, "bash")
    assert len(commands) == 2  # install + demo, install --dev + the tests
    assert _blocks(README_ZH.read_text(encoding="utf-8"), "bash")[:2] == commands


def test_the_chinese_readme_example_is_what_triage_prints(capsys, monkeypatch):
    """Its --explain example is the real output under LANG=zh_CN.UTF-8, not a hand-made one."""
    from ascendctl.cli import main
    from engine import i18n

    for var in ("LC_ALL", "LC_MESSAGES", "ASCENDCTL_LANG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    i18n.set_language(None)
    try:
        main(["triage", "--explain", "507011"])
    finally:
        i18n.set_language(None)
    printed = capsys.readouterr().out
    example = next(b for b in _blocks(README_ZH.read_text(encoding="utf-8"), "text") if "--explain 507011" in b)
    assert example.split("\n", 1)[1] == printed
