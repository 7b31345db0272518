"""The program's messages in Chinese (gettext): every message marked for translation has its
Chinese text, no translation drops a placeholder the English has, the shipped .mo is compiled
from the .po as it is now, and English or --json runs read no catalogue at all."""

from __future__ import annotations

import gettext
import json
import os
import re
import string
import subprocess
import sys

import pytest
from helpers import FIXTURES, ROOT

from engine import i18n

babel = pytest.importorskip("babel", reason="Babel (a dev dependency) extracts the catalogue")
from babel.messages.extract import extract_from_dir  # noqa: E402
from babel.messages.frontend import parse_mapping_cfg  # noqa: E402
from babel.messages.pofile import read_po  # noqa: E402

LOCALE = ROOT / "engine" / "locale"
PO = LOCALE / "zh_CN" / "LC_MESSAGES" / "ascendctl.po"
MO = PO.with_suffix(".mo")
PRINTF = re.compile(r"%(?:\([a-z_]+\))?[-#0 +]*\d*(?:\.\d+)?[sdifr%]")


def po_catalog():
    with PO.open("rb") as fh:
        return read_po(fh, locale="zh_CN")


def extracted() -> set[str]:
    """What `pybabel extract -F babel.cfg` finds in the source tree now."""
    with (ROOT / "babel.cfg").open() as fh:
        method_map, options_map = parse_mapping_cfg(fh)
    ids = set()
    for _filename, _lineno, message, _comments, _context in extract_from_dir(
        str(ROOT), method_map, options_map, strip_comment_tags=True
    ):
        if isinstance(message, tuple):
            message = message[0]
        ids.add(message)
    return ids


def placeholders(text: str) -> list[str]:
    """`{name}` / `{name:.1f}` fields and printf `%s`-style ones, each as written."""
    fields = []
    for _literal, name, spec, conv in string.Formatter().parse(text):
        if name is not None:
            fields.append("{" + name + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}")
    return sorted(fields + [m for m in PRINTF.findall(text) if m != "%%"])


def test_every_marked_message_has_a_chinese_text():
    catalog = po_catalog()
    translated = {m.id for m in catalog if m.id and m.string and not m.fuzzy}
    missing = sorted(extracted() - translated)
    assert not missing, (
        f"{len(missing)} message(s) without Chinese text in {PO.relative_to(ROOT)} "
        "(docs/README.md, 'Language', says how to update it):\n  " + "\n  ".join(missing)
    )


def test_the_extractor_finds_the_messages_of_each_kind():
    """babel.cfg covers the engine, the shell and the phase labels of serve (YAML data)."""
    ids = extracted()
    assert "no profile named {name}" in ids  # engine, _()
    assert "Every NPU chip reports Health OK" in ids  # engine, N_() (a doctor check's title)
    assert "run directory: {path}" in ids  # shell
    assert "compile and warm-up" in ids  # engine/launcher/phases.yaml


def test_every_commands_help_has_a_chinese_text():
    """Each command's and subcommand's help and each option's, as Click holds them: a command or
    an option added with English help only fails here (and in the test above, through babel.cfg)."""
    from ascendctl.cli import COMMANDS
    from ascendctl.lazy import command_tree, help_id, help_texts

    translated = {m.id for m in po_catalog() if m.id and m.string and not m.fuzzy}
    with i18n.english():
        texts = {(" ".join(path), help_id(t)) for path, command in command_tree(COMMANDS) for t in help_texts(command)}
    assert len(texts) > 150 and {p for p, _t in texts} >= {"serve", "deploy k8s", "tune sweep", "profile validate"}
    missing = sorted(f"{path}: {text[:70]!r}" for path, text in texts if text not in translated)
    assert not missing, f"{len(missing)} help text(s) without Chinese:\n  " + "\n  ".join(missing)


def test_the_extractor_finds_each_commands_help():
    ids = extracted()
    assert "Address to serve on." in ids  # an option's help (exporter --listen)
    assert any(i.startswith("Start the engine from a profile and supervise it:") for i in ids)  # serve's docstring
    assert "Write the Compose file to FILE, not stdout." in ids  # a subcommand's option
    assert "Usage: " in ids and "Options" in ids and "Show this message and exit." in ids  # Click's words
    # "10% of" would read as a printf placeholder (% o): help texts keep a percent sign as %%
    assert any("within 10%% of" in i for i in ids) and not any("within 10% of" in i for i in ids)


def test_no_translation_drops_or_invents_a_placeholder():
    wrong = []
    for m in po_catalog():
        if m.id and m.string and placeholders(m.id) != placeholders(m.string):
            wrong.append(f"{m.id!r}: {placeholders(m.id)} -> {m.string!r}: {placeholders(m.string)}")
    assert not wrong, "\n".join(wrong)


def test_the_placeholder_check_catches_a_dropped_placeholder():
    assert placeholders("cannot read {path}: {error}") != placeholders("无法读取：{error}")
    assert placeholders("%s is not %d") != placeholders("%s 不是")
    assert placeholders(" in {seconds:.2f} s") == placeholders("，用时 {seconds:.2f} 秒")


def test_the_shipped_mo_is_compiled_from_the_po_as_it_is():
    """The .mo ships in the package (no compile step at install time): stale, it would show an
    older translation, or English, for what the .po says. `pybabel compile` fixes it."""
    with MO.open("rb") as fh:
        mo = gettext.GNUTranslations(fh)
    # a message in a context (C_) is keyed "context\x04id" in the .mo, as gettext's pgettext reads it
    po = {
        (f"{m.context}\x04{m.id}" if m.context else m.id): m.string
        for m in po_catalog()
        if m.id and m.string and not m.fuzzy
    }
    stale = sorted(k for k, v in po.items() if mo._catalog.get(k) != v)  # noqa: SLF001
    extra = sorted(k for k in mo._catalog if k and k not in po)  # noqa: SLF001
    assert not stale and not extra, f"run pybabel compile: stale {stale[:5]}, removed {extra[:5]}"


def test_chinese_text_is_counted_as_two_columns():
    from ascendctl.style import cells, ljust_cells

    assert cells("错误") == 4 and cells("ok") == 2
    assert ljust_cells("跳过", 5) == "跳过 " and ljust_cells("warn", 5) == "warn "


# -- laziness: what an English or a --json run pays -------------------------------------------

PROBE = """
import sys
from ascendctl.cli import main
code = main(sys.argv[1:])
from engine import i18n
print("LOADS", i18n.loads, file=sys.stderr)
"""


def probe(*argv: str, lang: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LC_ALL", "LC_MESSAGES", "ASCENDCTL_LANG")}
    env.update(LANG=lang, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    line = [x for x in proc.stderr.splitlines() if x.startswith("LOADS")][-1].split()
    return int(line[1]), proc.stdout


@pytest.mark.parametrize(
    ("argv", "lang"),
    [
        (("--version",), "C.UTF-8"),
        (("--help",), "C.UTF-8"),
        (("doctor", "--help"), "C.UTF-8"),
        (("doctor", "--root", str(FIXTURES / "hosts" / "healthy-910b")), "C.UTF-8"),
        (("doctor", "--json", "--root", str(FIXTURES / "hosts" / "healthy-910b")), "zh_CN.UTF-8"),
    ],
)
def test_english_and_json_runs_read_no_catalogue(argv, lang):
    # (Click imports the gettext module for its own use: the count of catalogues read is the test.)
    loads, _out = probe(*argv, lang=lang)
    assert loads == 0, f"{argv} under LANG={lang} read the catalogue"


def test_a_chinese_run_reads_the_catalogue_once():
    loads, out = probe("doctor", "--root", str(FIXTURES / "hosts" / "healthy-910b"), lang="zh_CN.UTF-8")
    assert loads == 1
    assert "可以提供服务" in out


def test_untranslated_text_falls_back_to_english(monkeypatch):
    i18n.set_language("zh")
    assert i18n._("a message nobody translated {x}") == "a message nobody translated {x}"
    assert i18n._("ready to serve") == "可以提供服务"
    i18n.set_machine_output(True)
    assert i18n._("ready to serve") == "ready to serve"


def test_a_catalogue_entry_is_json_safe():
    """The .po is UTF-8 and says so: gettext decodes it by its header."""
    assert "charset=utf-8" in PO.read_text(encoding="utf-8").lower()
    json.dumps(i18n._("ok"))


def test_translations_use_the_glossary_words():
    """docs/zh-glossary.md's "avoid" column (one idea, one word) holds for the messages too."""
    text = (ROOT / "docs" / "zh-glossary.md").read_text(encoding="utf-8")
    section = text.split("## 不用的写法", 1)[1].split("\n## ", 1)[0]
    avoid = [row.split("|")[1].strip() for row in section.splitlines() if row.startswith("| ") and "avoid" not in row]
    assert avoid, "the glossary's avoid table moved"
    bad = [(m.id, word) for m in po_catalog() if m.string for word in avoid if word in m.string]
    assert not bad, bad
