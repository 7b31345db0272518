"""The known-issue database: load `rules.yaml`, validate it, and index it for fast matching.

Each rule carries its own test lines (`samples` must match, `counter_samples` must not); a
broken regex, a missing field or a pattern that cannot be pre-filtered is reported at load time
with the rule id, never discovered halfway through a 2 GB log.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, fields, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from engine.errors import BadInput
from engine.runs import cache_dir
from engine.triage.codes import CODES_FILE, explain
from engine.triage.model import SEVERITIES, Candidate
from engine.yamlfile import Problem, duplicate_keys, line_of, load, quote

RULES_FILE = "rules.yaml"
MIN_KEYWORD = 4  # shorter literals hit too many lines to be worth a pre-filter
_REQUIRED = ("id", "title", "severity", "patterns", "cause", "fix", "samples")
_ID = re.compile(r"^[a-z0-9][a-z0-9-]*[a-z0-9]$")
# Patterns must stay inside what Python re, RE2 and `grep -E` (after \d -> [0-9]) share.
_UNPORTABLE = re.compile(r"\(\?[=!<]|\\[1-9]|\(\?P=|\(\?[aiLmsux]")
# Numbers that decide whether a rule's line is a problem and that live with another check, one
# place each (`below:`): the name a rule gives, and the module and constant that hold it.
LIMITS = {"open-files": ("engine.doctor.limits", "ENOUGH")}
# A symptom's `likely:` list: enough causes to choose between, few enough to check each.
LIKELY_MIN, LIKELY_MAX = 2, 3
# When a rule's `likely:` list applies: always, or only when the same process logged an error
# before the rule's first line (a crash after an error is mostly that error's consequence).
LIKELY_WHEN = ("always", "after-error")


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    severity: str
    component: str
    patterns: tuple[str, ...]
    keywords: tuple[str, ...]  # literals: a line can only match if it contains one of them
    cause: str
    fix: str
    links: tuple[str, ...]
    samples: tuple[str, ...]
    counter_samples: tuple[str, ...]
    symptom: bool = False  # a consequence of another problem, listed after the root causes
    explains: tuple[str, ...] = ()  # rules this one is the cause behind: listed after it when both are seen
    generic: str = ""  # why the rule names a class of failure, not its cause (a wrapper code); "" when specific
    codes: tuple[str, ...] = ()  # table codes that mean this very failure: a hit of one is reported as this rule
    # The line says a stop was asked for (a signal from serve, the demo or an operator): what the
    # same input logs after it is the engine's shutdown, not a crash (see Scanner, "after a stop").
    stop: bool = False
    # The causes this failure can have when its line is all the log shows (`likely:`): a report
    # it leads says "likely one of" them, each with the evidence that decides, instead of one name.
    likely: tuple[Candidate, ...] = ()
    likely_when: str = "always"  # one of LIKELY_WHEN
    # (pattern with one number group, a LIMITS name): the line is this rule's problem only while
    # the number it prints is below that limit (`below:`); () for every rule that has no such key
    below: tuple[str, ...] = ()

    def holds(self, text: str) -> bool:
        """Whether a line this rule matched is its problem: always, except for a `below:` rule whose
        line prints a number at or above its limit (or no number: then the words decide)."""
        if not self.below:
            return True
        m = re.search(self.below[0], text)
        return m is None or int(m.group(1)) < limit(self.below[1])

    @property
    def compiled(self) -> tuple[re.Pattern[str], ...]:
        return _compile(self.patterns)

    def match(self, text: str) -> bool:
        return any(p.search(text) for p in self.compiled)

    def text(self, field: str, lang: str | None = None) -> str:
        """Its title, cause, fix or generic reason in `lang` (default: the output language,
        engine/i18n.py); the English when the catalogue has no translation. By id: for an
        operator's own rule that replaces a bundled one, use the attribute itself."""
        from engine.i18n import language
        from engine.triage.localize import rule_text

        return rule_text(self.id, field, getattr(self, field), lang or language())


@lru_cache(maxsize=None)
def limit(name: str) -> int:
    """A LIMITS number, read from the module that owns it (imported only when a line needs it)."""
    import importlib

    module, attr = LIMITS[name]
    return int(getattr(importlib.import_module(module), attr))


@lru_cache(maxsize=None)
def _compile(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    # On first use, not at load: a run names a handful of rules, and compiling all ~600 patterns
    # was a third of `triage`'s start-up. Load still checks that every pattern compiles.
    return tuple(re.compile(p) for p in patterns)


def required_literals(pattern: str) -> list[str] | None:
    """One literal per top-level alternative that any match must contain (the longest run).

    A tiny walk over the regex text: runs of plain characters at nesting depth 0, broken by
    groups, classes, escapes such as \\d, and shortened by optional quantifiers. Returns None
    when some alternative has no literal of MIN_KEYWORD characters.
    """
    alternatives: list[list[str]] = [[]]
    run: list[str] = []

    def close_run() -> None:
        if run:
            alternatives[-1].append("".join(run))
            run.clear()

    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "|":
            close_run()
            alternatives.append([])
            i += 1
            continue
        if c in "([":
            close_run()
            i = _skip_group(pattern, i)
            i = _skip_quantifier(pattern, i)
            continue
        if c in ".^$":
            close_run()
            i = _skip_quantifier(pattern, i + 1)
            continue
        if c == "\\" and i + 1 < n:
            nxt = pattern[i + 1]
            if nxt.isalnum():  # \d \s \b \w ...: not a literal
                close_run()
                i = _skip_quantifier(pattern, i + 2)
                continue
            char, i = nxt, i + 2
        else:
            char, i = c, i + 1
        if i < n and pattern[i] in "?*{":
            close_run()  # the char may be absent: it cannot be part of a required literal
            i = _skip_quantifier(pattern, i)
            continue
        run.append(char)
        if i < n and pattern[i] == "+":
            close_run()
            i = _skip_quantifier(pattern, i)
    close_run()
    out = []
    for runs in alternatives:
        best = max(runs, key=len, default="")
        if len(best) < MIN_KEYWORD:
            return None
        out.append(best)
    return out


def _skip_group(pattern: str, i: int) -> int:
    """Index just past the group or class that starts at i."""
    if pattern[i] == "[":
        j = i + 1
        if j < len(pattern) and pattern[j] == "^":
            j += 1
        if j < len(pattern) and pattern[j] == "]":
            j += 1
        while j < len(pattern) and pattern[j] != "]":
            j += 2 if pattern[j] == "\\" else 1
        return j + 1
    depth, j = 0, i
    while j < len(pattern):
        c = pattern[j]
        if c == "\\":
            j += 2
            continue
        if c == "[":
            j = _skip_group(pattern, j)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return j


def _skip_quantifier(pattern: str, i: int) -> int:
    if i < len(pattern) and pattern[i] in "?*+":
        i += 1
    elif i < len(pattern) and pattern[i] == "{":
        close = pattern.find("}", i)
        i = close + 1 if close > 0 else i + 1
    if i < len(pattern) and pattern[i] == "?":  # lazy
        i += 1
    return i


# refuse(key, index in that key's list or None, message, fix): the error naming the rule and line.
Refuse = Callable[[str, int | None, str, str], BadInput]


def _as_list(value: Any, refuse: Refuse, key: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise refuse(key, None, f"must be a string or a list of strings, got {quote(value)}", "fix the rules file")


def _build_rule(raw: Any, origin: str, number: int, line: int | None) -> Rule:
    if not isinstance(raw, dict):
        raise BadInput(
            str(Problem(origin, line, f"rule #{number}", "each rule must be a mapping")), "fix the rules file"
        )
    missing = [k for k in _REQUIRED if not raw.get(k)]
    if missing:
        raise BadInput(
            str(Problem(origin, line, f"rule #{number}", f"missing {', '.join(missing)}")),
            "every rule needs " + ", ".join(_REQUIRED),
        )
    rid = str(raw["id"])

    def refuse(key: str, index: int | None, message: str, fix: str) -> BadInput:
        at = line_of(raw[key], index) if index is not None else None
        return BadInput(str(Problem(origin, at or line_of(raw, key), f"{rid}.{key}", message)), fix)

    if not _ID.match(rid):
        raise refuse("id", None, "must be lowercase words joined by '-'", "rename the rule")
    if raw["severity"] not in SEVERITIES:
        raise refuse(
            "severity", None, f"{quote(raw['severity'])} is not one of {', '.join(SEVERITIES)}", "fix the severity"
        )
    patterns = _as_list(raw["patterns"], refuse, "patterns")
    for i, p in enumerate(patterns):
        if _UNPORTABLE.search(p):
            raise refuse(
                "patterns",
                i,
                f"{quote(p)} uses lookaround, backreferences or inline flags",
                "rules must stay in the RE2 / grep -E subset",
            )
        try:
            re.compile(p)
        except re.error as exc:
            raise refuse("patterns", i, f"bad regex {quote(p)}: {exc}", "fix the pattern") from None
    keywords = _as_list(raw.get("keywords"), refuse, "keywords")
    if not keywords:
        for i, p in enumerate(patterns):
            lits = required_literals(p)
            if lits is None:
                raise refuse(
                    "patterns",
                    i,
                    f"cannot find a literal of {MIN_KEYWORD}+ characters in {quote(p)} to pre-filter on",
                    "add `keywords:` (literals that every matching line contains)",
                )
            keywords.extend(lits)
    rule = Rule(
        id=rid,
        title=str(raw["title"]),
        severity=str(raw["severity"]),
        component=str(raw.get("component", "")),
        patterns=tuple(patterns),
        keywords=tuple(dict.fromkeys(keywords)),
        cause=" ".join(str(raw["cause"]).split()),
        fix=str(raw["fix"]).strip(),
        links=tuple(_as_list(raw.get("links"), refuse, "links")),
        samples=tuple(_as_list(raw["samples"], refuse, "samples")),
        counter_samples=tuple(_as_list(raw.get("counter_samples"), refuse, "counter_samples")),
        symptom=bool(raw.get("symptom", False)),
        explains=tuple(_as_list(raw.get("explains"), refuse, "explains")),
        generic=" ".join(str(raw.get("generic") or "").split()),
        codes=tuple(c.upper() for c in _as_list(raw.get("codes"), refuse, "codes")),
        stop=bool(raw.get("stop", False)),
        likely=_candidates(raw.get("likely"), refuse),
        likely_when=str(raw.get("likely_when") or "always"),
        below=_below(raw.get("below"), refuse),
    )
    if rule.likely_when not in LIKELY_WHEN:
        raise refuse("likely_when", None, f"must be one of {', '.join(LIKELY_WHEN)}", "fix the value")
    if "likely_when" in raw and not rule.likely:
        raise refuse("likely_when", None, "given without a `likely:` list", "add the candidates, or drop the key")
    for i, c in enumerate(rule.codes):
        if explain(c) is None:
            raise refuse(
                "codes", i, f"{quote(c)} is not a code of engine/triage/codes.yaml", "name a code the tables know"
            )
    if "generic" in raw and (not isinstance(raw["generic"], str) or not rule.generic):
        raise refuse("generic", None, "must say why the rule names no cause", "write the reason, or drop the key")
    for i, s in enumerate(rule.samples):
        if not any(k in s for k in rule.keywords):
            raise refuse(
                "samples",
                i,
                f"sample contains none of the keywords {list(rule.keywords)}: {quote(s)}",
                "fix `keywords:`",
            )
    return rule


def _below(value: Any, refuse: Refuse) -> tuple[str, ...]:
    """`below: {number: 'REGEX with one ([0-9]+) group', limit: NAME}` -> (regex, name)."""
    if value is None:
        return ()
    ok = isinstance(value, dict) and set(value) == {"number", "limit"} and value["limit"] in LIMITS
    try:
        ok = ok and re.compile(str(value["number"])).groups == 1
    except re.error:
        ok = False
    if not ok:
        raise refuse(
            "below",
            None,
            f"must be {{number: a regex with one number group, limit: one of {', '.join(LIMITS)}}}",
            "fix the key",
        )
    return (str(value["number"]), str(value["limit"]))


def _candidates(value: Any, refuse: Refuse) -> tuple[Candidate, ...]:
    """A rule's `likely:` list: 2-3 mappings, each `rule:` (an id of the same file) or `cause:`
    (words, for a cause no rule names), and the `evidence:` that tells it from the others."""
    if value is None:
        return ()
    if not isinstance(value, list) or not LIKELY_MIN <= len(value) <= LIKELY_MAX:
        raise refuse(
            "likely",
            None,
            f"must list {LIKELY_MIN} to {LIKELY_MAX} candidate causes",
            "name the causes this symptom can have, each with its evidence",
        )
    out = []
    for i, item in enumerate(value):
        ok = isinstance(item, dict) and set(item) <= {"rule", "cause", "evidence"}
        if not ok or bool(item.get("rule")) == bool(item.get("cause")) or not item.get("evidence"):
            raise refuse(
                "likely",
                i,
                "each candidate needs `rule:` (an id) or `cause:` (words), and `evidence:`",
                "write e.g. {rule: hccp-port-in-use, evidence: npu-smi info lists another process}",
            )
        out.append(
            Candidate(
                cause=" ".join(str(item.get("cause") or "").split()),
                evidence=" ".join(str(item["evidence"]).split()),
                rule=str(item.get("rule") or ""),
            )
        )
    return tuple(out)


def parse_rules(text: str, origin: str) -> tuple[Rule, ...]:
    data = load(text, origin)
    for problem in duplicate_keys(data, origin):
        raise BadInput(str(problem), "keep one of the two")
    items = data.get("rules") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise BadInput(
            str(Problem(origin, line_of(data, "rules"), "", "expected a top-level `rules:` list")),
            "see engine/triage/rules.yaml for the format",
        )
    rules = [_build_rule(raw, origin, n + 1, line_of(items, n)) for n, raw in enumerate(items)]
    first: dict[str, int | None] = {}
    for raw, r in zip(items, rules):
        line = line_of(raw, "id")
        if r.id in first:
            raise BadInput(
                str(Problem(origin, line, f"{r.id}.id", f"duplicate rule id (first at line {first[r.id]})")),
                "give each rule its own id",
            )
        first[r.id] = line
    folded: dict[str, str] = {}
    for raw, r in zip(items, rules):
        for code in r.codes:
            if code in folded:
                raise BadInput(
                    str(
                        Problem(
                            origin, line_of(raw, "codes"), f"{r.id}.codes", f"{code} is already named by {folded[code]}"
                        )
                    ),
                    "one code, one rule",
                )
            folded[code] = r.id
    for raw, r in zip(items, rules):
        for other in r.explains:
            if other not in first or other == r.id:
                raise BadInput(
                    str(Problem(origin, line_of(raw, "explains"), f"{r.id}.explains", f"no other rule {quote(other)}")),
                    "name rules of this file",
                )
    titles = {r.id: r.title for r in rules}
    for n, (raw, r) in enumerate(zip(items, rules)):
        for c in r.likely:
            if c.rule and (c.rule not in titles or c.rule == r.id):
                raise BadInput(
                    str(Problem(origin, line_of(raw, "likely"), f"{r.id}.likely", f"no other rule {quote(c.rule)}")),
                    "name rules of this file, or write the cause in words (`cause:`)",
                )
        if any(c.rule for c in r.likely):  # a rule candidate reads as that rule's title
            rules[n] = replace(r, likely=tuple(replace(c, cause=titles[c.rule]) if c.rule else c for c in r.likely))
    return tuple(rules)


# Checked rules are kept in the user's cache dir, keyed by the rules text, the code table and
# this module (whose checks and fields they passed): reading and checking ~400 rules took most of
# `triage`'s start-up, which is most of its time on a small log. Any trouble with the cache
# (unwritable, torn, stale) only means the rules are checked again.
_KEEP_CACHED = 8  # rules files (the bundled one, a user's own): older cache files are removed


def _cache_file(text: str) -> Path:
    digest = hashlib.sha256(text.encode("utf-8"))
    digest.update(Path(__file__).read_bytes())
    digest.update(resources.files("engine.triage").joinpath(CODES_FILE).read_bytes())
    return cache_dir() / "triage" / f"rules-{digest.hexdigest()[:32]}.json"


def _from_cache(path: Path) -> tuple[Rule, ...] | None:
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
        # JSON gives lists back where a Rule holds tuples, and mappings where it holds candidates
        return tuple(
            Rule(
                **{
                    f.name: tuple(Candidate(**c) for c in item[f.name])
                    if f.name == "likely"
                    else _tuple_if_list(item[f.name])
                    for f in fields(Rule)
                }
            )
            for item in items
        )
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _tuple_if_list(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _to_cache(path: Path, rules: tuple[Rule, ...]) -> None:
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".rules-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump([asdict(r) for r in rules], f)
        os.replace(tmp, path)
        tmp = None
        kept = sorted(path.parent.glob("rules-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in kept[_KEEP_CACHED:]:
            old.unlink(missing_ok=True)
    except OSError:
        if tmp is not None:  # a full disk: leave no half-written file behind
            Path(tmp).unlink(missing_ok=True)


def _checked(text: str, origin: str) -> tuple[Rule, ...]:
    """parse_rules, or its answer from the last time this very text was checked."""
    path = _cache_file(text)
    rules = _from_cache(path)
    if rules is None:
        rules = parse_rules(text, origin)
        _to_cache(path, rules)
    return rules


@lru_cache(maxsize=None)
def _builtin() -> tuple[Rule, ...]:
    text = resources.files("engine.triage").joinpath(RULES_FILE).read_text(encoding="utf-8")
    return _checked(text, RULES_FILE)


def load_rules(path: str | Path | None = None) -> tuple[Rule, ...]:
    """The bundled database, or a user's own rules file in the same format."""
    if path is None:
        return _builtin()
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read rules file {p}: {exc}", "pass a readable YAML file") from None
    return _checked(text, str(p))


def rule_set(add: str | Path | None = None, only: str | Path | None = None) -> tuple[Rule, ...]:
    """The rules a triage runs with: the bundled database; plus an operator's own file (`add`:
    a rule of the same id replaces the bundled one, the others are added, as FaultDiag's
    `entity --update` does); or that file alone (`only`)."""
    if add is not None and only is not None:
        raise BadInput("--rules and --rules-only both given", "use --rules FILE to add, --rules-only FILE to replace")
    if only is not None:
        return load_rules(only)
    if add is None:
        return load_rules()
    own = load_rules(add)
    mine = {r.id for r in own}
    kept = [r for r in load_rules() if r.id not in mine]
    named = {c: r.id for r in kept for c in r.codes}
    for r in own:
        for c in r.codes:
            if c in named:
                raise BadInput(
                    f"{add}: {r.id}.codes: {c} is already named by the bundled rule {named[c]}",
                    f"drop the code, or name your rule {named[c]} to replace that one",
                )
    return (*kept, *own)
