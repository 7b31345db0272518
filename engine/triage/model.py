"""The data triage hands out: plain frozen dataclasses, shared by the CLI, `serve` and `top`."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.severity import Severity
from engine.severity import rank as severity_rank

# What a rule may be: every severity but "ok" (a known problem is never fine).
SEVERITIES: tuple[str, ...] = tuple(s.value for s in Severity if s is not Severity.OK)


@dataclass(frozen=True)
class IssueSummary:
    """One known problem found in the input, grouped over all its occurrences."""

    id: str
    title: str
    severity: str  # a Severity word: "critical" | "error" | "warning" | "info"
    count: int  # events (a traceback counts once)
    first_seen: str | None  # timestamp as printed by the log, normalised; None when lines carry none
    last_seen: str | None
    cause: str
    fix: str
    links: tuple[str, ...]
    example: str  # the first line that matched, without the log prefix
    sources: tuple[str, ...] = ()  # the first few inputs it was seen in
    kind: str = "rule"  # "rule": a known problem; "code": an ACL / CANN / torch_npu code explained;
    #                     "symptom": a consequence (engine died, start-up failed) of another issue;
    #                     "device": a device fault code an NPU reported (npu-smi health, device logs)
    generic: str = ""  # why it names no cause (a catch-all code such as EZ9999, a wrapper); "" when specific
    # A device fault only: the NPU (None when the text does not say), the code ("0x80E18402"),
    # MindCluster's action class and what on-call does (engine/triage/faultcodes.py).
    npu: int | None = None
    code: str | None = None
    action: str | None = None
    verb: str | None = None

    def names_cause(self) -> bool:
        """A specific cause: not a consequence, not a catch-all code or wrapper."""
        return self.kind != "symptom" and not self.generic


@dataclass(frozen=True)
class Template:
    """Unmatched error lines that differ only by numbers, ids, paths: one cluster."""

    template: str
    count: int
    example: str


@dataclass(frozen=True)
class TriageReport:
    issues: list[IssueSummary]  # in the order of ranking.rank: specific causes first (see docs/triage.md)
    unknown: list[Template]  # most frequent first
    lines: int = 0  # lines seen
    events: int = 0  # error events (lines or whole tracebacks) looked at
    bytes: int = 0
    inputs: list[str] = field(default_factory=list)  # inputs read (files, "-")
    unreadable: list[str] = field(default_factory=list)  # "path: reason" of inputs we could not read
    notes: list[str] = field(default_factory=list)  # e.g. "x.bin: binary data, scanned as text"
    root_line: str | None = None  # the first error event of the process that failed last

    def worst(self) -> str | None:
        """The highest severity among the issues, or None when there are none."""
        if not self.issues:
            return None
        return max((i.severity for i in self.issues), key=severity_rank)

    def root_cause(self) -> IssueSummary | None:
        """The issue a one-line diagnosis names, or None when nothing names the cause with
        confidence: a wrong name is worse than none. The first issue of the ranking, when it is a
        specific cause of error severity or above; a warning only in a log with no error event
        (otherwise the unnamed error, `root_line`, is the better lead)."""
        top = self.issues[0] if self.issues else None
        if top is None or not top.names_cause():
            return None
        if severity_rank(top.severity) < severity_rank("error") and self.root_line is not None:
            return None
        return top

    def device_faults(self) -> list[IssueSummary]:
        """The device fault codes seen (kind "device"), in the report's order."""
        return [i for i in self.issues if i.kind == "device"]

    def at_or_above(self, severity: str) -> list[IssueSummary]:
        floor = severity_rank(severity)
        return [i for i in self.issues if severity_rank(i.severity) >= floor]
