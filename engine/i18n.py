"""The output language: English (the default and the fallback) or Simplified Chinese.

    language()          # "zh" under LANG=zh_CN.UTF-8, "en" under LANG=C or with no locale set
    set_language("zh")  # what `--lang zh` does; ASCENDCTL_LANG=zh does the same from the environment

Chosen the way Linux tools choose it: an explicit choice (`--lang`, then `ASCENDCTL_LANG`), then
the first of LC_ALL, LC_MESSAGES, LANG that is set and not empty (POSIX's order); any `zh*` value
is Chinese, anything else (C, POSIX, en_US.UTF-8, de_DE) English. Only what a person reads is
translated: `--json`, exit codes, rule ids and quoted log lines stay as they are.

The knowledge base's Chinese texts live in catalogues beside the English data (engine/triage/zh/);
`catalogue()` reads one only when it is asked for, so an English run, or `--json`, never parses one.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

LANGUAGES = ("en", "zh")
DEFAULT = "en"
ENV = "ASCENDCTL_LANG"
_LOCALE_VARS = ("LC_ALL", "LC_MESSAGES", "LANG")

_chosen: str | None = None  # set by --lang; wins over the environment


def normalize(value: str | None) -> str | None:
    """ "zh" for any zh* locale or language name (zh_CN.UTF-8, zh_TW, zh), "en" for the rest;
    None for an empty value (the next variable decides)."""
    if value is None or not value.strip():
        return None
    return "zh" if value.strip().lower().startswith("zh") else "en"


def set_language(lang: str | None) -> None:
    """The language given on the command line (`--lang`); None goes back to the environment."""
    global _chosen
    if lang is not None and lang not in LANGUAGES:
        from engine.errors import BadInput

        raise BadInput(f"--lang {lang!r} is not one of {', '.join(LANGUAGES)}", "use --lang en or --lang zh")
    _chosen = lang
    _from_environment.cache_clear()


def language() -> str:
    """The language to write in: "en" or "zh"."""
    return _chosen or _from_environment()


@lru_cache(maxsize=1)
def _from_environment() -> str:
    explicit = normalize(os.environ.get(ENV))
    if explicit is not None:
        return explicit
    for var in _LOCALE_VARS:
        lang = normalize(os.environ.get(var))
        if lang is not None:
            return lang
    return DEFAULT


def catalogue(package: str, name: str, lang: str) -> dict[str, Any]:
    """The `lang` catalogue `name` of `package` (e.g. "engine.triage", "rules.yaml", "zh" reads
    engine/triage/zh/rules.yaml); {} for English, which is the data itself."""
    if lang == DEFAULT:
        return {}
    from engine.data import load_yaml

    data = load_yaml(f"{package}.{lang}", name)
    return data if isinstance(data, dict) else {}


def pick(entry: Any, key: str, english: str) -> str:
    """The translation `entry[key]`, or the English when there is none (the fallback)."""
    if isinstance(entry, dict):
        text = entry.get(key)
        if isinstance(text, str) and text.strip():
            return " ".join(text.split())
    return english
