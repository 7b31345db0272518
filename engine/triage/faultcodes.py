"""Device fault codes (`0x80E18402`): what the NPU reports, and what on-call does about it.

    device_fault("80e18402")  # DeviceFault(code="0x80E18402", action="SeparateNPU", verb="isolate", ...)
    action_verbs()            # {"SeparateNPU": "isolate", ..., "unknown": "unknown"}

The code -> action class table is MindCluster's (faultcodes.yaml says which file and commit);
meanings and fixes for the common codes are ours, each citing its source. A code the table does
not list is answered with action and verb "unknown", never dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from engine.data import load_yaml
from engine.errors import BadInput

FAULTCODES_FILE = "faultcodes.yaml"
UNKNOWN = "unknown"
# MindCluster's classes, most serious first: a code listed in two takes the first (the device
# plugin's GetFaultTypeByCode checks them in this order).
ACTIONS = (
    "SeparateNPU",
    "PreSeparateNPU",
    "RestartNPU",
    "FreeRestartNPU",
    "RestartBusiness",
    "RestartRequest",
    "SubHealth",
    "NotHandle",
)
VERBS = ("isolate", "reset-npu", "restart-engine", "watch", "ignore", UNKNOWN)
_HEX = re.compile(r"(?:0[xX])?([0-9A-Fa-f]{1,16})")


@dataclass(frozen=True)
class DeviceFault:
    code: str  # "0x80E18402": upper-case hex digits after 0x, as npu-smi prints it
    action: str  # MindCluster's class (ACTIONS) or "unknown"
    verb: str  # ours, what on-call does: ignore | restart-engine | reset-npu | isolate | watch | unknown
    meaning: str | None
    fix: str | None
    source: str | None  # where the meaning / fix come from (URL)
    name: str | None = None  # a short name for reports ("HBM multi-bit ECC"); None when unknown

    @property
    def severity(self) -> str:
        """ok | warning | error: how doctor and triage rank it."""
        return str(_tables()["actions"][self.action]["severity"])

    @property
    def means(self) -> str:
        """What the code's action class means (MindCluster's definition, in our words)."""
        return str(_tables()["actions"][self.action]["means"])

    @property
    def todo(self) -> str:
        """What to do, as a phrase: the code's own fix, else its class's ("isolate this NPU")."""
        return self.fix or str(_tables()["actions"][self.action]["do"])

    @property
    def title(self) -> str:
        """ "0x80E18402 HBM multi-bit ECC" (the code alone when its name is unknown)."""
        return f"{self.code} {self.name}" if self.name else self.code

    def headline(self) -> str:
        """ "0x80E18402 HBM multi-bit ECC -> isolate this NPU (SeparateNPU)" """
        do = str(_tables()["actions"][self.action]["do"])
        if self.action == UNKNOWN:
            return f"{self.title} -> unknown code: {do}"
        return f"{self.title} -> {do} ({self.action})"


def code_value(code: str | int) -> int:
    """The code's number. Accepts 0x80e18402, 80E18402 and 2162787330; BadInput for anything else."""
    if isinstance(code, bool) or not isinstance(code, (str, int)):
        raise BadInput(f"not a device fault code: {code!r}", "give the hex code npu-smi prints, e.g. 0x80E18402")
    if isinstance(code, int):
        if code < 0:
            raise BadInput(f"not a device fault code: {code}", "give the hex code npu-smi prints, e.g. 0x80E18402")
        return code
    match = _HEX.fullmatch(code.strip())
    if match is None:
        raise BadInput(f"not a device fault code: {code!r}", "give the hex code npu-smi prints, e.g. 0x80E18402")
    return int(match.group(1), 16)


def code_text(value: int) -> str:
    """ "0x80E18402": at least eight upper-case hex digits, as npu-smi and the driver print them."""
    return f"0x{value:08X}"


def _tables() -> dict[str, Any]:
    data = load_yaml("engine.triage", FAULTCODES_FILE)
    if not isinstance(data, dict) or "classes" not in data or "actions" not in data:
        raise BadInput(f"{FAULTCODES_FILE}: expected actions and classes", "regenerate it (faultcodes_import)")
    return data


def class_codes() -> dict[str, list[str]]:
    """Action class -> its codes exactly as faultCode.json lists them (repeats kept)."""
    out: dict[str, list[str]] = {}
    for action, rows in _tables()["classes"].items():
        out[action] = [str(c) for row in rows or [] for c in (row if isinstance(row, list) else [row])]
    return out


@lru_cache(maxsize=1)
def _by_value() -> dict[int, str]:
    table: dict[int, str] = {}
    codes = class_codes()
    for action in reversed(ACTIONS):  # the most serious class is written last and wins
        for code in codes.get(action, []):
            table[int(code, 16)] = action
    return table


@lru_cache(maxsize=1)
def _meanings() -> dict[int, dict[str, Any]]:
    return {int(str(k), 16): v for k, v in (_tables().get("meanings") or {}).items()}


def action_verbs() -> dict[str, str]:
    """Action class -> verb, "unknown" included."""
    return {name: str(entry["verb"]) for name, entry in _tables()["actions"].items()}


@lru_cache(maxsize=4096)
def device_fault(code: str | int) -> DeviceFault:
    """What a device fault code means and what to do. An unlisted code gives action "unknown"."""
    value = code_value(code)
    action = _by_value().get(value, UNKNOWN)
    about = _meanings().get(value, {})
    return DeviceFault(
        code=code_text(value),
        action=action,
        verb=action_verbs()[action],
        meaning=about.get("meaning"),
        fix=about.get("fix"),
        source=about.get("source"),
        name=about.get("name"),
    )


def triage_severity(action: str) -> str:
    """The severity triage gives a device fault of this class (critical ... info)."""
    return str(_tables()["actions"][action]["triage"])


def triage_explains() -> tuple[str, ...]:
    """Rule ids a serious device fault is the cause behind (faultcodes.yaml `explains`)."""
    return tuple(str(r) for r in _tables().get("explains") or ())


def all_faults() -> list[DeviceFault]:
    """Every code MindCluster's table lists, once each, in code order."""
    return [device_fault(v) for v in sorted(_by_value())]


__all__ = [
    "ACTIONS",
    "VERBS",
    "DeviceFault",
    "action_verbs",
    "all_faults",
    "class_codes",
    "device_fault",
    "triage_explains",
    "triage_severity",
]
