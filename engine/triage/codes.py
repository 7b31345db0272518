"""Code tables: ACL / runtime / aclnn return codes, CANN error-message codes, torch_npu ERR codes.

`explain("507011")` answers the on-call question "what is this number"; `find_codes(line)` pulls
the codes out of a log line so the scanner can name them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from engine.data import load_yaml
from engine.errors import BadInput

CODES_FILE = "codes.yaml"

# Shapes in which codes appear in logs (any hit sends the line through the slow path).
# "errorCode" is how Ascend's samples, and the inference apps built from them, print an ACL return
# code ("acl init failed, errorCode = 100002").
CODE_LITERALS = ("error code", "ErrCode=", "retCode is", "runtime result = ", "errorCode")
CODE_REGEXES = (r"\bE[0-9A-Z][0-9]{4}\b", r"ERR[0-9]{5}")
# The regexes loosened for Python's `re` (a leading literal is searched fast); hits are then
# confirmed against the exact ones.
CODE_LOOSE = r"E(?:[0-9A-Z][0-9]{4}|RR[0-9]{5})"
_ACL_CONTEXT = re.compile(
    # `error code is 507011`, `error code: 507011`, the bare `error code 207001`, `errorCode = 100002`
    r"(?:error code(?: is|:)?|ErrCode=|retCode is|runtime result = |errorCode ?[=:])\s*(?P<code>[1-5][0-9]{5})\b"
)
_CANN = re.compile(r"(?<![A-Za-z0-9])(?P<code>E[0-9A-Z][0-9]{4})(?![0-9])")
_TORCH_NPU = re.compile(r"\b(?P<code>ERR[0-9]{5})\b")


@dataclass(frozen=True)
class CodeInfo:
    code: str  # "507011", "EZ9999", "ERR00100"
    kind: str  # "acl" | "cann" | "torch_npu"
    name: str  # constant or readable name, "" when unknown
    meaning: str
    severity: str
    fix: str
    family: str  # the range the code belongs to, e.g. "runtime: execution / driver failure"
    generic: str = ""  # why the code names no cause (a catch-all: the line beside it does); "" when specific
    same_as: str = ""  # the code a log names this very failure by as well (the driver's E-code of a runtime code)

    @property
    def issue_id(self) -> str:
        return f"{self.kind}-{self.code.lower()}"

    @property
    def title(self) -> str:
        """ "ACL 507011 ACL_ERROR_RT_AICORE_EXCEPTION": how a report or a marked log line names it."""
        kind = self.kind.upper() if self.kind != "torch_npu" else "torch_npu"
        title = f"{kind} {self.code}" + (f" {self.name}" if self.name else "")
        # a catch-all names no cause: it points at the lines that do
        return title + (" (generic): see the lines around it" if self.generic else "")


def _tables() -> dict[str, Any]:
    data = load_yaml("engine.triage", CODES_FILE)
    if not isinstance(data, dict):
        raise BadInput(f"{CODES_FILE}: expected a mapping", "fix the code table")
    return data


def _family(code: str, families: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The narrowest range holding the code (107xxx sits inside AscendCL's 100000-148999)."""
    hits = [f for f in families if str(f["from"]) <= code <= str(f["to"]) and len(code) == len(str(f["from"]))]
    return min(hits, key=lambda f: _span(str(f["from"]), str(f["to"])), default=None)


def _span(lo: str, hi: str) -> int:
    return int(hi, 36) - int(lo, 36)


@lru_cache(maxsize=4096)
def explain(code: str) -> CodeInfo | None:
    """What a code means; None when it has no known shape. Unknown codes of a known family get
    the family's meaning."""
    code = code.strip().upper()
    t = _tables()
    if re.fullmatch(r"[0-9]{6}", code):
        kind, table, fams = "acl", t.get("acl", {}), t.get("acl_families", [])
    elif re.fullmatch(r"E[0-9A-Z][0-9]{4}", code):
        kind, table, fams = "cann", t.get("cann", {}), t.get("cann_modules", [])
    elif re.fullmatch(r"ERR[0-9]{5}", code):
        return _explain_torch_npu(code, t)
    else:
        return None
    fam = _family(code, fams)
    entry = table.get(code if kind == "cann" else int(code)) or {}
    if not entry and fam is None:
        return None
    family = fam["meaning"] if fam else ""
    meaning = entry.get("meaning", "")
    if kind == "cann" and not meaning and fam:
        digits = int(code[2:])
        meaning = f"{fam['meaning']} error ({'internal: report it with the plog' if digits >= 9000 else 'usually fixable by the user'})"
    return CodeInfo(
        code=code,
        kind=kind,
        name=entry.get("name", ""),
        meaning=meaning or family,
        severity=entry.get("severity", (fam or {}).get("severity", "error")),
        fix=entry.get("fix", (fam or {}).get("fix", "")),
        family=family,
        generic=_generic(entry, t) if entry else str(t.get("generic_unlisted", "")),
        same_as=str(entry.get("same_as", "")),
    )


def _generic(entry: dict[str, Any], t: dict[str, Any]) -> str:
    """The entry's reason for being generic: its own, or the shared one its `generic:` names."""
    why = entry.get("generic", "")
    return " ".join(str(t.get("generic_reasons", {}).get(why, why)).split())


def _explain_torch_npu(code: str, t: dict[str, Any]) -> CodeInfo | None:
    subs = t.get("torch_npu_submodules", {})
    kinds = t.get("torch_npu_kinds", {})
    sub, kind = code[3:5], code[5:]
    if sub not in subs and kind not in kinds:
        return None
    entry = kinds.get(kind, {})
    return CodeInfo(
        code=code,
        kind="torch_npu",
        name=f"{subs.get(sub, '?')} {entry.get('name', '?')}",
        meaning=entry.get("meaning", ""),
        severity=entry.get("severity", "error"),
        fix=entry.get("fix", ""),
        family=f"torch_npu {subs.get(sub, 'unknown')} submodule",
        generic=" ".join(str(t.get("torch_npu_generic", "")).split()),
    )


def find_codes(line: str) -> list[CodeInfo]:
    """Codes in a log line that the tables can explain, in order, each once. A code that is
    `same_as` another is found as that one: the driver's EL0014 and the runtime's 207000 printed
    for one refused call are one failure, and a report names it once."""
    found: dict[str, CodeInfo] = {}
    for rx in (_ACL_CONTEXT, _CANN, _TORCH_NPU):
        for m in rx.finditer(line):
            info = explain(m.group("code"))
            if info is not None:
                info = reported_as(info)
                found.setdefault(info.code, info)
    return list(found.values())


def reported_as(info: CodeInfo) -> CodeInfo:
    """The entry a report names this code's failure by: the code it is `same_as`, else itself."""
    return (explain(info.same_as) or info) if info.same_as else info


def all_codes() -> list[CodeInfo]:
    """Every code the tables name, for `--list`."""
    t = _tables()
    out = [explain(str(c)) for c in t.get("acl", {})] + [explain(str(c)) for c in t.get("cann", {})]
    out += [explain(f"ERR00{k}") for k in t.get("torch_npu_kinds", {})]
    return [c for c in out if c is not None]
