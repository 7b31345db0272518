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
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Iterator

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


# -- the program's own messages: gettext catalogues -----------------------------------------------
#
# Errors, fixes, doctor's rows, serve's phases and the dashboard's labels are marked in the source
# with `_()` (translated where they are made) or `N_()` (a constant translated where it is shown),
# extracted with Babel into engine/locale/ascendctl.pot and translated in
# engine/locale/zh_CN/LC_MESSAGES/ascendctl.po; the compiled .mo beside it ships in the package and
# is read with the standard library's gettext, once, on the first Chinese message. An English run,
# and every `--json` run (machine_output), reads no catalogue at all. docs/README.md says how to
# update them (pybabel extract / update / compile).

DOMAIN = "ascendctl"
_LOCALES = {"zh": "zh_CN"}  # our language -> the catalogue's folder under engine/locale/

_machine = False  # --json: what we write is read by a program, so it stays English
_catalogues: dict[str, Any] = {}
loads = 0  # catalogues read in this process (tests check that English and --json read none)


def set_machine_output(on: bool) -> None:
    """`--json`: messages stay English whatever the language (a script greps them)."""
    global _machine
    _machine = on


@contextmanager
def english() -> Iterator[None]:
    """Messages in English while it lasts: what is written for programs and for support (a
    bundle's reports) reads the same whatever the locale of the person who made it."""
    global _machine
    before, _machine = _machine, True
    try:
        yield
    finally:
        _machine = before


def message_language() -> str:
    """The language of the program's messages: language(), except English under --json."""
    return DEFAULT if _machine else language()


def locale_dir() -> str:
    import os.path

    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "locale")


def _translations(lang: str) -> Any:
    global loads
    found = _catalogues.get(lang)
    if found is None:
        import gettext

        loads += 1
        found = gettext.translation(DOMAIN, locale_dir(), languages=[_LOCALES[lang]], fallback=True)
        _catalogues[lang] = found
    return found


def _(message: str) -> str:
    """`message` in the messages' language; the English itself when it has no translation.
    Placeholders are named and filled after: _("cannot read {path}").format(path=p)."""
    lang = message_language()
    if lang == DEFAULT or not message:
        return message
    return _translations(lang).gettext(message)


def C_(context: str, message: str) -> str:
    """`message` in the messages' language, in a context: one English word that needs two Chinese
    ones (a table's "name" column is a chip's 型号 in top, a profile's 名称 in `profile list`)."""
    lang = message_language()
    if lang == DEFAULT or not message:
        return message
    return _translations(lang).pgettext(context, message)


def N_(message: str) -> str:
    """Marks a constant for the catalogue without translating it (a table of labels, a check's
    title): the code that shows it calls _() on it then."""
    return message


def spaced(label: str) -> str:
    """A translated label (`fix:`, `note:`) and the space after it: English writes "fix: ...",
    Chinese "处理：..." with no space after the full-width colon."""
    return label if label.endswith("：") else label + " "


class Msg(str):
    """An English message that remembers how it was made: what JSON, result files and logs keep
    is the English text itself (a str), and `shown()` is the same message in the messages'
    language, for the line a person reads. Msg(N_("{n} requests were unfinished"), n=3)."""

    def __new__(cls, template: str, **args: Any) -> "Msg":
        text = super().__new__(cls, template.format(**args) if args else template)
        text.template, text.args = template, args
        return text

    @classmethod
    def pair(cls, english: str, translated: str) -> "Msg":
        """A text made twice, once in English (what files keep) and once for a person: a
        sentence whose parts were translated where they were made (a plan's reasons)."""
        text = cls(english)
        text.translated = translated
        return text

    def shown(self) -> str:
        if getattr(self, "translated", None) is not None:
            return self.translated
        if not self.args:
            return _(self.template)
        return _(self.template).format(**{k: shown(v) for k, v in self.args.items()})

    @classmethod
    def join(cls, sep: str, items: Any) -> "Msg":
        """`sep.join(items)` that keeps each item's Msg (a list of loads, each translated)."""
        items = list(items)
        return cls(sep.join("{i%d}" % n for n in range(len(items))), **{f"i{n}": v for n, v in enumerate(items)})


def shown(text: Any) -> Any:
    """A text for a person: a Msg in the messages' language, any other value as it is."""
    return text.shown() if isinstance(text, Msg) else text


def extract_yaml(fileobj: Any, keywords: Any, comment_tags: Any, options: dict[str, str]) -> Any:
    """A Babel extraction method for the texts a person reads in our YAML data (serve's phase
    labels): the values of the keys that babel.cfg names (`keys = label`), one message each.
    The code that shows such a value translates it with _()."""
    import re

    import yaml

    keys = [k.strip() for k in options.get("keys", "").split(",") if k.strip()]
    line = re.compile(r"^\s*(?:-\s+)?(" + "|".join(map(re.escape, keys)) + r"):\s*(\S.*)$")
    for lineno, raw in enumerate(fileobj.read().decode("utf-8").splitlines(), 1):
        found = line.match(raw)
        if found is None:
            continue
        value = yaml.safe_load(found.group(2))
        if isinstance(value, str) and value.strip():
            yield lineno, "", value, []
