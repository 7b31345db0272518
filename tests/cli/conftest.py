"""Fixtures of the CLI tests."""

import pytest


@pytest.fixture
def zh_locale(monkeypatch):
    """A Chinese desktop: LANG=zh_CN.UTF-8, the language chosen again from it (and again after)."""
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    from engine import i18n

    i18n.set_language(None)
    yield
    i18n.set_language(None)
