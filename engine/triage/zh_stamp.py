"""Which English a Chinese rule text was translated from: a fingerprint per rule, so that a rule
whose English changes later shows up as a stale translation instead of passing unnoticed.

Each entry of engine/triage/zh/rules.yaml carries `from_en: "<crc32>"`, the fingerprint of the
English title, cause, fix, generic reason and likely causes it translates. tests/unit/test_triage_zh.py
fails, naming the rules, when a rule's English no longer has the fingerprint its Chinese was
made from. After updating the Chinese of such a rule, stamp it again:

    python -m engine.triage.zh_stamp RULE_ID...     # the rules whose Chinese you just updated
    python -m engine.triage.zh_stamp --all          # every rule (only after checking them all)
"""

from __future__ import annotations

import re
import sys
import zlib
from pathlib import Path
from typing import Any

CATALOGUE = Path(__file__).with_name("zh") / "rules.yaml"
_ENTRY = re.compile(r"^([A-Za-z0-9][\w.-]*):\s*$")


def fingerprint(rule: Any) -> str:
    """The crc32 (8 hex digits) of what a person reads of the rule in English, whitespace folded."""
    parts = [rule.title, rule.cause, rule.fix, rule.generic]
    for c in rule.likely:  # a candidate that is a rule reads as that rule's title: its own entry
        parts += [c.evidence] if c.rule else [c.cause, c.evidence]
    text = "\x1f".join(" ".join(str(p or "").split()) for p in parts)
    return f"{zlib.crc32(text.encode('utf-8')):08x}"


def stamp(ids: set[str] | None, path: Path = CATALOGUE) -> list[str]:
    """Write `from_en:` (the current English's fingerprint) into the entries of `ids` (all when
    None), right below each entry's id line; the ids stamped."""
    from engine.triage.rules import load_rules

    prints = {r.id: fingerprint(r) for r in load_rules()}
    out: list[str] = []
    done: list[str] = []
    current: str | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        m = _ENTRY.match(line)
        if m:
            current = m.group(1)
            out.append(line)
            if current in prints and (ids is None or current in ids):
                out.append(f'  from_en: "{prints[current]}"')
                done.append(current)
            continue
        if line.startswith("  from_en:") and current in prints and (ids is None or current in ids):
            continue  # the old stamp, replaced above
        out.append(line)
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return done


def main(argv: list[str]) -> int:
    if not argv or argv == ["-h"] or argv == ["--help"]:
        print(__doc__)
        return 2
    ids = None if argv == ["--all"] else set(argv)
    done = stamp(ids)
    missing = sorted((ids or set()) - set(done))
    print(f"stamped {len(done)} rule(s)" + (f"; not in the catalogue: {', '.join(missing)}" if missing else ""))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
