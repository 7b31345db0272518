"""Which English a Chinese text was translated from: a fingerprint per rule, code and device
fault, so that one whose English changes later shows up as a stale translation instead of
passing unnoticed.

Each entry of the catalogues in engine/triage/zh/ carries `from_en: "<crc32>"`, the fingerprint
of the English it translates: a rule's title, cause, fix, generic reason and likely causes
(rules.yaml); an ACL, CANN or torch_npu code's meaning, fix and generic reason (codes.yaml); a
device fault's name, meaning and fix, an action class's meaning and what to do (faultcodes.yaml).
tests/unit/test_triage_zh.py fails, naming them, when the English no longer has the fingerprint
its Chinese was made from. After updating the Chinese of such an entry, stamp it again:

    python -m engine.triage.zh_stamp KEY...     # rule ids, codes (507011, EZ9999, 001), fault codes
    python -m engine.triage.zh_stamp --all      # every entry (only after checking them all)
"""

from __future__ import annotations

import re
import sys
import zlib
from pathlib import Path
from typing import Any

FOLDER = Path(__file__).with_name("zh")
_TOP = re.compile(r"^([A-Za-z_][\w.-]*):")
_RULE = re.compile(r"^([A-Za-z0-9][\w.-]*):\s*$")
_BLOCK = re.compile(r'^  "?([0-9A-Za-z]+)"?:\s*$')  # a mapping below a section: faults, actions
_FLOW = re.compile(r'^(  "?([0-9A-Za-z]+)"?: \{)(.*)$')  # a code's one-line mapping
_STAMPED = re.compile(r'from_en: "[0-9a-f]{8}",? ?')


def _crc(parts: list[Any]) -> str:
    text = "\x1f".join(" ".join(str(p or "").split()) for p in parts)
    return f"{zlib.crc32(text.encode('utf-8')):08x}"


def fingerprint(rule: Any) -> str:
    """What a person reads of the rule in English, as 8 hex digits (crc32, whitespace folded)."""
    parts = [rule.title, rule.cause, rule.fix, rule.generic]
    for c in rule.likely:  # a candidate that is a rule reads as that rule's title: its own entry
        parts += [c.evidence] if c.rule else [c.cause, c.evidence]
    return _crc(parts)


def code_fingerprint(entry: dict[str, Any]) -> str:
    """An entry of codes.yaml (acl, cann, torch_npu_kinds): its meaning, fix and generic reason."""
    return _crc([entry.get("meaning"), entry.get("fix"), entry.get("generic")])


def fault_fingerprint(entry: dict[str, Any]) -> str:
    """An entry of faultcodes.yaml: a fault's name, meaning and fix, or an action's means and do."""
    return _crc([entry.get("name"), entry.get("meaning"), entry.get("fix"), entry.get("means"), entry.get("do")])


def expected() -> dict[str, dict[tuple[str, str], str]]:
    """catalogue file -> (section, key) -> the fingerprint of today's English ("" section: rules)."""
    from engine.data import load_yaml
    from engine.triage.rules import load_rules

    codes = load_yaml("engine.triage", "codes.yaml")
    faults = load_yaml("engine.triage", "faultcodes.yaml")
    return {
        "rules.yaml": {("", r.id): fingerprint(r) for r in load_rules()},
        "codes.yaml": {
            (section, str(k)): code_fingerprint(v)
            for section in ("acl", "cann", "torch_npu_kinds")
            for k, v in codes[section].items()
        },
        "faultcodes.yaml": {
            **{("meanings", str(k).upper()): fault_fingerprint(v) for k, v in faults["meanings"].items()},
            **{("actions", str(k)): fault_fingerprint(v) for k, v in faults["actions"].items()},
        },
    }


def stamp(keys: set[str] | None, folder: Path = FOLDER) -> list[str]:
    """Write `from_en:` (today's English's fingerprint) into the entries named by `keys` (all when
    None) of the three catalogues; the keys stamped."""
    done: list[str] = []
    for name, prints in expected().items():
        path = folder / name
        out: list[str] = []
        section = ""
        current: tuple[str, str] | None = None
        for line in path.read_text(encoding="utf-8").splitlines():
            top = _TOP.match(line)
            if name == "rules.yaml":
                m = _RULE.match(line)
                current = ("", m.group(1)) if m else current
            elif top:
                section, current = top.group(1), None
            elif name == "faultcodes.yaml" and (m := _BLOCK.match(line)):
                current = (section, m.group(1).upper() if section == "meanings" else m.group(1))
            wanted = current is not None and current in prints and (keys is None or current[1] in keys)
            if name == "codes.yaml" and (m := _FLOW.match(line)) and (section, m.group(2)) in prints:
                key = (section, m.group(2))
                if keys is None or key[1] in keys:
                    out.append(f'{m.group(1)}from_en: "{prints[key]}", {_STAMPED.sub("", m.group(3))}')
                    done.append(key[1])
                    continue
            if line.startswith(("  from_en:", "    from_en:")) and wanted:
                continue  # the old stamp, replaced below the entry's key
            out.append(line)
            below = _RULE if name == "rules.yaml" else _BLOCK if name == "faultcodes.yaml" else None
            if wanted and below is not None and below.match(line):
                indent = "  " if name == "rules.yaml" else "    "
                out.append(f'{indent}from_en: "{prints[current]}"')
                done.append(current[1])
        path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return done


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 2
    keys = None if argv == ["--all"] else set(argv)
    done = stamp(keys)
    missing = sorted((keys or set()) - set(done))
    print(f"stamped {len(done)} entries" + (f"; not in the catalogues: {', '.join(missing)}" if missing else ""))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
