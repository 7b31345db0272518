"""The knowledge base in Chinese: every rule and code has its Chinese text, and no translation
loses a flag, a variable, a command token or a placeholder that the English has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine import i18n
from engine.data import load_yaml
from engine.triage.codes import explain
from engine.triage.faultcodes import device_fault
from engine.triage.localize import code_title, localized_code, localized_fault
from engine.triage.rules import load_rules

# What a translation must carry over unchanged: `backticked` text, --flags, ENV_VARS and
# CONSTANT_NAMES, {placeholders}, %s, hex codes, and the error codes an operator greps for
# (CANN's EZ9999 / EI0005, ACL's 507011, torch_npu's ERR00100).
TOKENS = re.compile(
    r"`[^`]+`|(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]|\b[A-Z][A-Z0-9]*_[A-Z0-9_]*[A-Z0-9]\b|\{[a-z_]+\}|%[sd]|\b0x[0-9A-Fa-f]+\b"
    r"|\bE[A-Z0-9]\d{4}\b|\b[1-5]\d{5}\b|\bERR\d{5}\b"
)


def lost_tokens(english: str, chinese: str) -> list[str]:
    return sorted({t for t in TOKENS.findall(english) if t not in chinese})


def zh(name: str):
    return load_yaml("engine.triage.zh", name)


@pytest.fixture(autouse=True)
def _no_language_choice():
    yield
    i18n.set_language(None)


# -- the language ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "en"),
        ({"LANG": "zh_CN.UTF-8"}, "zh"),
        ({"LANG": "zh_TW.UTF-8"}, "zh"),
        ({"LANG": "C"}, "en"),
        ({"LANG": "POSIX"}, "en"),
        ({"LANG": "en_US.UTF-8"}, "en"),
        ({"LANG": "zh_CN.UTF-8", "LC_ALL": "C"}, "en"),  # LC_ALL wins, as for every Linux tool
        ({"LANG": "C", "LC_MESSAGES": "zh_CN.UTF-8"}, "zh"),
        ({"LANG": "zh_CN.UTF-8", "LC_ALL": ""}, "zh"),  # an empty variable does not decide
        ({"LANG": "zh_CN.UTF-8", "ASCENDCTL_LANG": "en"}, "en"),
        ({"LC_ALL": "C", "ASCENDCTL_LANG": "zh"}, "zh"),
    ],
)
def test_language_follows_the_locale(monkeypatch, env, expected):
    for var in ("LANG", "LC_ALL", "LC_MESSAGES", "ASCENDCTL_LANG"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    i18n.set_language(None)
    assert i18n.language() == expected


def test_lang_option_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("LANG", "C")
    i18n.set_language("zh")
    assert i18n.language() == "zh"


def test_english_reads_no_catalogue():
    assert i18n.catalogue("engine.triage", "rules.yaml", "en") == {}
    rule = load_rules()[0]
    assert rule.text("title", "en") == rule.title


# -- the glossary ------------------------------------------------------------------------------


def test_catalogues_use_the_glossary_terms():
    """docs/zh-glossary.md's "avoid" table: one idea, one word, in every Chinese catalogue."""
    from helpers import ROOT

    text = (ROOT / "docs" / "zh-glossary.md").read_text(encoding="utf-8")
    section = text.split("## 不用的写法", 1)[1].split("\n## ", 1)[0]
    pairs = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("|") and not line.startswith(("| avoid", "|---"))
    ]
    assert len(pairs) >= 5
    found = []
    for name in ("rules.yaml", "codes.yaml", "faultcodes.yaml"):
        body = (ROOT / "engine" / "triage" / "zh" / name).read_text(encoding="utf-8")
        found += [f"{name}: {avoid} (use {use})" for avoid, use in pairs if avoid in body]
    assert not found, "Chinese catalogues use words the glossary avoids: " + "; ".join(found)


def test_catalogues_space_chinese_as_the_glossary_says():
    """docs/zh-glossary.md's style: a space between Chinese and a Latin word, none between two
    Chinese characters nor before Chinese punctuation ("释放 设备内存" reads as a typo and is what a
    word swapped in by hand leaves behind)."""
    from helpers import ROOT

    cjk = "\u4e00-\u9fff"
    odd = re.compile(f"[{cjk}] +[{cjk}]| +[，；：（）、。]")
    found = []
    for name in ("rules.yaml", "codes.yaml", "faultcodes.yaml"):
        body = (ROOT / "engine" / "triage" / "zh" / name).read_text(encoding="utf-8")
        for n, line in enumerate(body.splitlines(), 1):
            found += [f"{name}:{n}: {m.group(0)!r}" for m in odd.finditer(line)]
    assert not found, "Chinese texts spaced against the glossary: " + "; ".join(found)


# -- the rules -------------------------------------------------------------------------------


def test_every_rule_has_chinese_title_cause_and_fix():
    table = zh("rules.yaml")
    missing = []
    for rule in load_rules():
        entry = table.get(rule.id) or {}
        fields = ["title", "cause", "fix"] + (["generic"] if rule.generic else [])
        if any(not str(entry.get(f) or "").strip() for f in fields):
            missing.append(rule.id)
    assert not missing, (
        f"{len(missing)} rules lack a Chinese title/cause/fix in engine/triage/zh/rules.yaml: " + ", ".join(missing)
    )


def test_no_chinese_text_is_older_than_its_english():
    """Each Chinese entry names the English it translates (`from_en`, engine/triage/zh_stamp.py):
    a rule, code or device fault whose English changed since is listed as stale."""
    from engine.triage.zh_stamp import expected

    stale = []
    for name, prints in expected().items():
        table = zh(name)
        for (section, key), fingerprint in prints.items():
            entries = table if not section else table.get(section) or {}
            entry = entries.get(key) or entries.get(int(key) if key.isdigit() and not key.startswith("0") else key)
            if (entry or {}).get("from_en") != fingerprint:
                stale.append(f"{name}:{key}")
    assert not stale, (
        f"{len(stale)} entries' English changed since their Chinese was written (or were never stamped): "
        + ", ".join(stale)
        + "; update engine/triage/zh/, then python -m engine.triage.zh_stamp KEY..."
    )


def test_catalogues_read_the_same_without_libyaml():
    """engine.data falls back on PyYAML's pure-Python loader where libyaml is missing, which is
    stricter about plain scalars (a `?` in a flow mapping): the catalogues must read the same."""
    import yaml

    for name in ("rules.yaml", "codes.yaml", "faultcodes.yaml"):
        text = (Path(i18n.__file__).parent / "triage" / "zh" / name).read_text(encoding="utf-8")
        assert yaml.load(text, Loader=yaml.SafeLoader) == zh(name), name


def test_chinese_rule_entries_hold_only_what_a_person_reads():
    allowed = {"title", "cause", "fix", "generic", "likely", "from_en"}
    odd = {f"{rid}.{k}" for rid, entry in zh("rules.yaml").items() for k in entry if k not in allowed}
    assert not odd, f"unknown keys in engine/triage/zh/rules.yaml: {sorted(odd)}"


def test_no_chinese_entry_for_a_rule_that_does_not_exist():
    ids = {r.id for r in load_rules()}
    stray = sorted(set(zh("rules.yaml")) - ids)
    assert not stray, f"engine/triage/zh/rules.yaml names rules rules.yaml lacks: {', '.join(stray)}"


def test_rule_translations_keep_flags_variables_and_commands():
    table = zh("rules.yaml")
    lost = []
    for rule in load_rules():
        entry = table.get(rule.id) or {}
        for field in ("title", "cause", "fix", "generic"):
            if entry.get(field):
                gone = lost_tokens(getattr(rule, field), str(entry[field]))
                if gone:
                    lost.append(f"{rule.id}.{field}: {' '.join(gone)}")
    assert not lost, "Chinese texts drop what the English has:\n" + "\n".join(lost)


def test_every_symptom_rule_lists_its_likely_causes_in_chinese():
    """A report led by a symptom says "likely one of" its causes: each needs its Chinese cause
    (unless it is a rule of the database, which reads as that rule's title) and evidence."""
    from engine.triage.localize import localized_likely

    table = zh("rules.yaml")
    bad = []
    for rule in load_rules():
        if not rule.likely:
            continue
        texts = (table.get(rule.id) or {}).get("likely") or []
        if len(texts) != len(rule.likely):
            bad.append(f"{rule.id}: {len(texts)} Chinese candidates for {len(rule.likely)}")
            continue
        for n, (c, shown) in enumerate(zip(rule.likely, localized_likely(rule.id, rule.likely, "zh"))):
            for field in ("cause", "evidence"):
                english, chinese = getattr(c, field), getattr(shown, field)
                if chinese == english or lost_tokens(english, chinese):
                    bad.append(f"{rule.id}.likely[{n}].{field}")
    assert not bad, "symptom rules without (whole) Chinese candidates: " + ", ".join(bad)


def test_a_rule_speaks_chinese_when_asked():
    rule = next(r for r in load_rules() if r.id == "vllm-no-kv-cache-memory")
    assert rule.text("title", "zh") != rule.title and "KV cache" in rule.text("title", "zh")
    assert "--gpu-memory-utilization" in rule.text("fix", "zh")


# -- the codes -------------------------------------------------------------------------------


def _english_codes():
    t = load_yaml("engine.triage", "codes.yaml")
    for code in t["acl"]:
        yield str(code)
    yield from (str(c) for c in t["cann"])
    yield from (f"ERR00{k}" for k in t["torch_npu_kinds"])


def test_every_code_has_chinese_meaning_and_fix():
    missing, lost = [], []
    for code in _english_codes():
        info = explain(code)
        loc = localized_code(info, "zh")
        for field in ("meaning", "fix", "generic", "family"):
            english, chinese = getattr(info, field), getattr(loc, field)
            if english and (not chinese or (chinese == english and re.search("[a-z]{3} [a-z]{3}", english))):
                missing.append(f"{code}.{field}")
            elif english:
                gone = lost_tokens(english, chinese)
                if gone:
                    lost.append(f"{code}.{field}: {' '.join(gone)}")
    assert not missing, "codes without Chinese text in engine/triage/zh/codes.yaml: " + ", ".join(missing)
    assert not lost, "Chinese code texts drop what the English has:\n" + "\n".join(lost)


def test_every_family_and_module_has_chinese_text():
    t = load_yaml("engine.triage", "codes.yaml")
    fams = zh("codes.yaml")["families"]
    missing = [str(f["from"]) for f in t["acl_families"] + t["cann_modules"] if str(f["from"]) not in fams]
    assert not missing, "families without Chinese text: " + ", ".join(missing)
    stray = set(fams) - {str(f["from"]) for f in t["acl_families"] + t["cann_modules"]}
    assert not stray, f"Chinese families for no family of codes.yaml: {sorted(stray)}"


def test_no_chinese_entry_for_a_code_that_does_not_exist():
    t, z = load_yaml("engine.triage", "codes.yaml"), zh("codes.yaml")
    stray = [f"acl {c}" for c in z["acl"] if c not in t["acl"]]
    stray += [f"cann {c}" for c in z["cann"] if c not in t["cann"]]
    stray += [f"torch_npu {c}" for c in z["torch_npu_kinds"] if c not in t["torch_npu_kinds"]]
    stray += [f"reason {c}" for c in z["generic_reasons"] if c not in t["generic_reasons"]]
    assert not stray, "engine/triage/zh/codes.yaml names codes codes.yaml lacks: " + ", ".join(stray)


def test_code_texts_in_chinese():
    info = explain("507011")
    assert code_title(info, "zh") == "ACL 507011 ACL_ERROR_RT_MODEL_EXECUTE（通用码）：请看它前后的日志行"
    assert "E?9999" in localized_code(info, "zh").fix
    # a code the tables know by its module alone still reads in Chinese
    assert localized_code(explain("E19432"), "zh").meaning.startswith("CANN 图引擎（GE）")


# -- device faults ---------------------------------------------------------------------------


def test_every_device_fault_with_a_meaning_has_chinese_text():
    t, z = load_yaml("engine.triage", "faultcodes.yaml"), zh("faultcodes.yaml")
    ours = {str(k).upper() for k in z["meanings"]}
    missing, lost = [], []
    for code, entry in t["meanings"].items():
        if str(code).upper() not in ours:
            missing.append(str(code))
            continue
        texts = localized_fault(device_fault(str(code)), "zh")
        for field in ("name", "meaning", "fix"):
            if entry.get(field) and (texts[field] == entry[field] or lost_tokens(entry[field], texts[field])):
                lost.append(f"{code}.{field}")
    assert not missing, "device fault codes without Chinese text in engine/triage/zh/faultcodes.yaml: " + ", ".join(
        missing
    )
    assert not lost, "untranslated or damaged: " + ", ".join(lost)
    stray = ours - {str(k).upper() for k in t["meanings"]}
    assert not stray, f"Chinese entries for codes faultcodes.yaml lacks: {sorted(stray)}"
    assert set(z["actions"]) == set(t["actions"]) and {a["verb"] for a in t["actions"].values()} <= set(z["verbs"])


def test_device_fault_headline_in_chinese():
    texts = localized_fault(device_fault("0x80E18402"), "zh")
    assert texts["headline"] == "0x80E18402 HBM 多比特 ECC -> 隔离该 NPU (SeparateNPU)"
