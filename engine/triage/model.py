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
    #                     "symptom": a consequence (engine died, start-up failed) of another issue


@dataclass(frozen=True)
class Template:
    """Unmatched error lines that differ only by numbers, ids, paths: one cluster."""

    template: str
    count: int
    example: str


@dataclass(frozen=True)
class TriageReport:
    issues: list[IssueSummary]  # most severe first; root causes, then codes, then symptoms
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
        """The issue to show first when one line must do (serve's crash diagnosis)."""
        return self.issues[0] if self.issues else None

    def at_or_above(self, severity: str) -> list[IssueSummary]:
        floor = severity_rank(severity)
        return [i for i in self.issues if severity_rank(i.severity) >= floor]
