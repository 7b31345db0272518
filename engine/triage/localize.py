"""The knowledge base in the reader's language: rules, codes and device faults in Chinese.

The English texts stay where they are (rules.yaml, codes.yaml, faultcodes.yaml): they are what
`--json` writes and what the tests match. The Chinese ones are catalogues beside them, keyed by
rule id or code (engine/triage/zh/*.yaml, see their header comments); anything a catalogue lacks
is shown in English. For English nothing here reads a catalogue.

    rule.text("cause", "zh")          # a rule's cause in Chinese (English when untranslated)
    localized_code(explain("507011"), "zh")
    localized_fault(device_fault("0x80E18402"), "zh")
    localized_issue(issue, "zh")      # a report's issue with its texts in Chinese
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from engine.i18n import DEFAULT, catalogue, pick

if TYPE_CHECKING:
    from engine.triage.codes import CodeInfo
    from engine.triage.faultcodes import DeviceFault
    from engine.triage.model import Candidate, IssueSummary

PACKAGE = "engine.triage"
RULE_FIELDS = ("title", "cause", "fix", "generic")


def rules_catalogue(lang: str) -> dict[str, Any]:
    return catalogue(PACKAGE, "rules.yaml", lang)


def codes_catalogue(lang: str) -> dict[str, Any]:
    return catalogue(PACKAGE, "codes.yaml", lang)


def faults_catalogue(lang: str) -> dict[str, Any]:
    return catalogue(PACKAGE, "faultcodes.yaml", lang)


def rule_text(rule_id: str, field: str, english: str, lang: str) -> str:
    """A rule's `field` in `lang`; the English when the catalogue has none (or lang is English)."""
    if lang == DEFAULT or not english:
        return english
    return pick(rules_catalogue(lang).get(rule_id), field, english)


# -- codes ---------------------------------------------------------------------------------


def _entry(table: Any, key: str) -> Any:
    """A catalogue entry by code, whether YAML read the key as a number or a string."""
    if not isinstance(table, dict):
        return None
    hit = table.get(key)
    if hit is None and key.isdigit():
        hit = table.get(int(key))
    return hit


def localized_code(info: CodeInfo, lang: str) -> CodeInfo:
    """The code's meaning, fix, family and generic reason in `lang` (its name and code stay)."""
    if lang == DEFAULT:
        return info
    from engine.triage.codes import _family, _tables

    cat = codes_catalogue(lang)
    t = _tables()
    if info.kind == "torch_npu":
        entry = _entry(cat.get("torch_npu_kinds"), info.code[5:])
        return replace(
            info,
            meaning=pick(entry, "meaning", info.meaning),
            fix=pick(entry, "fix", info.fix),
            family=pick(cat.get("torch_npu_family"), "text", info.family).replace(
                "{submodule}", info.family.split()[1] if len(info.family.split()) > 2 else info.code[3:5]
            ),
            generic=pick(cat, "torch_npu_generic", info.generic) if info.generic else "",
        )
    families = t.get("acl_families" if info.kind == "acl" else "cann_modules", [])
    fam = _family(info.code, families)
    family = pick(cat.get("families"), str(fam["from"]), info.family) if fam else info.family
    entry = _entry(cat.get(info.kind), info.code)
    english = _entry(t.get(info.kind), info.code) or {}
    if entry is None and not english and fam is not None and info.kind == "cann":
        # a code known by its module alone: "<module> error (usually fixable by the user)"
        which = "internal" if int(info.code[2:]) >= 9000 else "user"
        meaning = pick(cat.get("unlisted"), which, info.meaning).replace("{family}", family)
    else:
        meaning = pick(entry, "meaning", info.meaning) if english.get("meaning") else family
    generic = info.generic
    if generic:
        why = english.get("generic", "") if english else ""
        reasons = cat.get("generic_reasons") or {}
        if not english:
            generic = pick(cat, "generic_unlisted", generic)
        elif why in reasons:
            generic = pick(reasons, why, generic)
        else:
            generic = pick(entry, "generic", generic)
    return replace(
        info,
        meaning=meaning,
        fix=pick(entry, "fix", info.fix),
        family=family,
        generic=generic,
    )


def code_title(info: CodeInfo, lang: str) -> str:
    """ "ACL 507011 ACL_ERROR_RT_MODEL_EXECUTE (generic): see the lines around it", in `lang`."""
    if lang == DEFAULT or not info.generic:
        return info.title
    english = info.title
    suffix = " (generic): see the lines around it"
    head = english[: -len(suffix)] if english.endswith(suffix) else english
    return head + pick(codes_catalogue(lang), "generic_title", suffix)


def code_cause(info: CodeInfo, lang: str) -> str:
    """What a report's code issue says as its cause: the meaning, and why it names no cause."""
    loc = localized_code(info, lang)
    if not loc.generic:
        return loc.meaning
    joiner = "; generic: " if lang == DEFAULT else pick(codes_catalogue(lang), "generic_joiner", "; generic: ")
    return loc.meaning + joiner + loc.generic


# -- device faults ---------------------------------------------------------------------------


@lru_cache(maxsize=4)
def _fault_entries(lang: str) -> dict[int, Any]:
    table = faults_catalogue(lang).get("meanings") or {}
    return {int(str(k), 16): v for k, v in table.items()}


def action_text(action: str, key: str, english: str, lang: str) -> str:
    """An action class's `means` or `do` in `lang`."""
    if lang == DEFAULT:
        return english
    return pick((faults_catalogue(lang).get("actions") or {}).get(action), key, english)


def verb_text(verb: str, lang: str) -> str:
    """What on-call does, as a word a person reads ("isolate" -> "隔离")."""
    if lang == DEFAULT:
        return verb
    return pick(faults_catalogue(lang).get("verbs"), verb, verb)


def localized_fault(fault: DeviceFault, lang: str) -> dict[str, str]:
    """The fault's texts a person reads, in `lang`: name, title, meaning, fix, means, todo, headline."""
    from engine.triage.faultcodes import UNKNOWN, _tables

    action = _tables()["actions"][fault.action]
    entry = _fault_entries(lang).get(int(fault.code, 16)) if lang != DEFAULT else None
    name = pick(entry, "name", fault.name or "") or None
    title = f"{fault.code} {name}" if name else fault.code
    do = action_text(fault.action, "do", str(action["do"]), lang)
    meaning = pick(entry, "meaning", fault.meaning or "") or None
    fix = pick(entry, "fix", fault.fix or "") or None
    if fault.action == UNKNOWN:
        unknown = pick(faults_catalogue(lang), "unknown_code", "unknown code") if lang != DEFAULT else "unknown code"
        headline = f"{title} -> {unknown}: {do}"
    else:
        headline = f"{title} -> {do} ({fault.action})"
    return {
        "name": name or "",
        "title": title,
        "meaning": meaning or "",
        "fix": fix or "",
        "means": action_text(fault.action, "means", str(action["means"]), lang),
        "todo": fix or do,
        "headline": headline,
    }


# -- a report's issues -----------------------------------------------------------------------


def localized_issue(issue: IssueSummary, lang: str) -> IssueSummary:
    """The issue with its title, cause, fix and generic reason in `lang`. A rule is translated
    only while its English is the bundled one (an operator's own rule of the same id, from
    `--rules`, is shown as written); codes and device faults by their code."""
    if lang == DEFAULT:
        return issue
    if issue.kind in ("rule", "symptom"):
        return _localized_rule_issue(issue, lang)
    if issue.kind == "code":
        from engine.triage.codes import explain

        info = explain(issue.id.split("-", 1)[-1])
        if info is None or info.issue_id != issue.id:
            return issue
        loc = localized_code(info, lang)
        return replace(
            issue,
            title=code_title(info, lang),
            cause=code_cause(info, lang),
            fix=loc.fix,
            generic=loc.generic,
        )
    if issue.kind == "device" and issue.code:
        from engine.triage.faultcodes import device_fault

        texts = localized_fault(device_fault(issue.code), lang)
        where = f"NPU {issue.npu}" if issue.npu is not None else "NPU ?"
        return replace(
            issue,
            title=f"{where}: {texts['headline']}",
            cause=texts["meaning"] or texts["means"],
            fix=texts["todo"],
        )
    return issue


def is_bundled(rule_id: str, title: str, cause: str, fix: str) -> bool:
    """The rule of that id is the bundled one, as written: its catalogue entry translates it (an
    operator's own rule of the same id, from `--rules`, is not)."""
    from engine.triage.rules import load_rules

    bundled = _bundled(load_rules()).get(rule_id)
    return bundled is not None and (bundled.title, bundled.cause, bundled.fix) == (title, cause, fix)


def localized_title(rule: Any, lang: str) -> str:
    """A rule's title in `lang` (--list): the bundled rule's translation, an operator's own as written."""
    if lang == DEFAULT or not is_bundled(rule.id, rule.title, rule.cause, rule.fix):
        return rule.title
    return rule_text(rule.id, "title", rule.title, lang)


def _localized_rule_issue(issue: IssueSummary, lang: str) -> IssueSummary:
    if not is_bundled(issue.id, issue.title, issue.cause, issue.fix):
        return issue
    return replace(
        issue,
        title=rule_text(issue.id, "title", issue.title, lang),
        cause=rule_text(issue.id, "cause", issue.cause, lang),
        fix=rule_text(issue.id, "fix", issue.fix, lang),
        generic=rule_text(issue.id, "generic", issue.generic, lang),
        likely=localized_likely(issue.id, issue.likely, lang),
    )


def localized_likely(rule_id: str, likely: tuple[Candidate, ...], lang: str) -> tuple[Candidate, ...]:
    """A symptom rule's `likely:` candidates in `lang`: the catalogue's `likely:` list holds them in
    the English order (`cause`, `evidence`); a candidate that is a rule of the database reads as
    that rule's translated title. A list of another length than the English is not used."""
    if lang == DEFAULT or not likely:
        return likely
    entry = rules_catalogue(lang).get(rule_id)
    texts = entry.get("likely") if isinstance(entry, dict) else None
    if not isinstance(texts, list) or len(texts) != len(likely):
        texts = [None] * len(likely)
    return tuple(
        replace(
            c,
            cause=rule_text(c.rule, "title", c.cause, lang) if c.rule else pick(t, "cause", c.cause),
            evidence=pick(t, "evidence", c.evidence),
        )
        for c, t in zip(likely, texts)
    )


def localized_diagnosis(diagnosis: Any, lang: str) -> Any:
    """serve's crash diagnosis (engine.launcher.diagnosis.Diagnosis, which stands above triage) with its known issues (and a symptom's likely causes) in `lang`;
    its root error and log tail are quoted from the engine and stay as they are."""
    if lang == DEFAULT:
        return diagnosis
    return replace(
        diagnosis,
        findings=[localized_issue(f, lang) for f in diagnosis.findings],
        likely=localized_issue(diagnosis.likely, lang) if diagnosis.likely is not None else None,
    )


@lru_cache(maxsize=2)
def _bundled(rules: tuple[Any, ...]) -> dict[str, Any]:
    return {r.id: r for r in rules}
