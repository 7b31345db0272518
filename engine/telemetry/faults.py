"""The active faults of each chip and what they mean for the engine on it: the codes npu-smi
reports (`-t health`'s Error Code, asked for an unhealthy chip and by the exporter's health view)
looked up in the fault-code table (engine/triage/faultcodes.py), worded once for top, doctor and
the exporter:

    NPU 3: 0x80E18402 HBM multi-bit ECC -> isolate this NPU (SeparateNPU); the engine on NPUs 0-7 must move
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from engine.data import load_yaml
from engine.devices.sample import DeviceSample
from engine.errors import BadInput

if TYPE_CHECKING:
    from engine.triage.faultcodes import DeviceFault

# What on-call does, most urgent first: a chip with several codes is shown by its most urgent.
# An unknown code ranks above sub-health: it could be anything, and someone must look it up.
VERB_ORDER = ("isolate", "reset-npu", "restart-engine", "unknown", "watch", "ignore")


@dataclass(frozen=True)
class ChipFault:
    key: str  # the DeviceSample key: npu3, npu0.1
    npu_id: str  # the id npu-exporter labels it with (device id)
    fault: DeviceFault

    @property
    def rank(self) -> int:
        return VERB_ORDER.index(self.fault.verb) if self.fault.verb in VERB_ORDER else len(VERB_ORDER)


def npu_id(d: DeviceSample) -> str:
    """npu-exporter's `id` of a chip: its device id (physical chip id on A3), else its NPU ID."""
    return str(d.device_id if d.device_id is not None else d.key.removeprefix("npu"))


def _lookup(code: str) -> DeviceFault | None:
    from engine.triage.faultcodes import device_fault

    try:
        return device_fault(code)
    except BadInput:  # npu-smi printed something that is not a code: not a fault of ours to name
        return None


def chip_faults(d: DeviceSample, extra_codes: Iterable[str] = ()) -> list[ChipFault]:
    """The chip's faults, most urgent first; each code once. A code the table does not list is
    kept with action "unknown"."""
    seen: dict[str, ChipFault] = {}
    for code in (*d.error_codes, *extra_codes):
        fault = _lookup(code)
        if fault is not None and fault.code not in seen:
            seen[fault.code] = ChipFault(d.key, npu_id(d), fault)
    return sorted(seen.values(), key=lambda f: f.rank)


def worst(faults: Sequence[ChipFault]) -> ChipFault | None:
    """The one that decides what to do (ignored codes never do)."""
    acted = [f for f in faults if f.fault.verb != "ignore"]
    return min(acted, key=lambda f: f.rank) if acted else None


def chip_mark(d: DeviceSample) -> tuple[str, str] | None:
    """What the devices panel writes beside a faulty chip: ("isolate 0x80E18402 (SeparateNPU)", severity)."""
    f = worst(chip_faults(d)) if d.kind == "npu" and d.error_codes else None
    if f is None:
        return None
    return f"{f.fault.verb} {f.fault.code} ({f.fault.action})", SEVERITY.get(f.fault.verb, "warning")


def npu_ranges(ids: Iterable[str]) -> str:
    """ "0-7", "0-3,6": numeric ids as ranges, others as they are."""
    nums = sorted({int(i) for i in ids if str(i).isdigit()})
    words = sorted({str(i) for i in ids if not str(i).isdigit()})
    parts: list[str] = []
    start = prev = None
    for n in nums:
        if start is None:
            start = prev = n
        elif n == prev + 1:
            prev = n
        else:
            parts.append(f"{start}-{prev}" if prev != start else str(start))
            start = prev = n
    if start is not None:
        parts.append(f"{start}-{prev}" if prev != start else str(start))
    return ",".join(parts + words)


def held_npus(pid: int | None, devices: Sequence[DeviceSample]) -> list[str]:
    """The NPUs (npu-exporter ids) whose process table lists a process of `pid`'s tree."""
    if pid is None or not any(d.procs for d in devices):
        return []
    from engine.system.proctree import tree_pids

    pids = tree_pids(pid)
    held = {npu_id(d) for d in devices if any(p.pid in pids for p in d.procs)}
    return sorted(held, key=lambda k: (len(k), k))


def engine_fault_lines(npus: Sequence[str] | None, devices: Sequence[DeviceSample]) -> list[str]:
    """The faults of the NPUs an engine uses, one line each, most urgent first: the engine
    screen's "faults" line and the engine's diagnostic."""
    if not npus:
        return []
    found = [worst(chip_faults(d)) for d in devices if d.kind == "npu" and npu_id(d) in npus]
    return [fault_line(f, npus) for f in sorted((f for f in found if f is not None), key=lambda f: f.rank)]


def _consequences() -> Mapping[str, str]:
    return load_yaml("engine.devices", "views.yaml")["engine_consequence"]


def fault_texts(f: ChipFault) -> dict[str, str]:
    """The fault's texts a person reads (meaning, todo, headline) in the messages' language:
    English under --json and in the exporter, the knowledge base's Chinese otherwise."""
    from engine.i18n import message_language
    from engine.triage.localize import localized_fault

    return localized_fault(f.fault, message_language())


def fault_line(f: ChipFault, engine_npus: Sequence[str] | None = None) -> str:
    """ "NPU 3: 0x80E18402 HBM multi-bit ECC -> isolate this NPU (SeparateNPU); the engine on NPUs
    0-7 must move". `engine_npus`: the NPUs of the engine that uses this chip, when one does."""
    from engine.i18n import _

    line = f"NPU {f.npu_id}: {fault_texts(f)['headline']}"
    then = _consequences().get(f.fault.verb)
    if then and engine_npus:
        many = len(engine_npus) > 1
        engines = (_("the engine on NPUs {npus}") if many else _("the engine on NPU {npus}")).format(
            npus=npu_ranges(engine_npus)
        )
        line += _("; ") + _(then).format(engines=engines)
    return line


# Diagnostic severity of a fault, by its verb.
SEVERITY = {"isolate": "critical", "reset-npu": "critical", "restart-engine": "error", "unknown": "warning"}

__all__ = [
    "SEVERITY",
    "VERB_ORDER",
    "ChipFault",
    "chip_faults",
    "chip_mark",
    "engine_fault_lines",
    "fault_line",
    "fault_texts",
    "held_npus",
    "npu_id",
    "npu_ranges",
    "worst",
]
