"""The data triage hands out: plain frozen dataclasses, shared by the CLI, `serve` and `top`."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.severity import Severity
from engine.severity import rank as severity_rank

# What a rule may be: every severity but "ok" (a known problem is never fine).
SEVERITIES: tuple[str, ...] = tuple(s.value for s in Severity if s is not Severity.OK)


@dataclass(frozen=True)
class Candidate:
    """One cause a symptom can have (a rule's `likely:` list), with what tells it from the others."""

    cause: str  # the cause in words (for a rule of the database: its title)
    evidence: str  # what to look at to decide for or against it
    rule: str = ""  # the rule that names this cause, when there is one


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
    # The causes this evidence can have, when it is only a symptom of one of them: a report led by
    # it says "likely one of" these instead of naming one (see TriageReport.likely); () otherwise.
    likely: tuple[Candidate, ...] = ()

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
        (otherwise the unnamed error, `root_line`, is the better lead). Not an issue whose evidence
        is only a symptom of several causes: that report is `likely`."""
        top = self._lead()
        return None if top is None or top.likely else top

    def likely(self) -> IssueSummary | None:
        """The issue that leads the report when its evidence is only a symptom that several causes
        produce (an HCCP start-up failure, a crash after an unnamed error): the report then says
        "likely one of" its `likely` candidates instead of naming one. Also a catch-all or a
        consequence of error severity that leads a report naming no cause, when it lists them."""
        top = self._lead()
        if top is not None:
            return top if top.likely else None
        if not self.issues or self.issues[0].names_cause():
            return None  # nothing at all, or a warning beside an unnamed error
        first = self.issues[0]
        return first if first.likely and severity_rank(first.severity) >= severity_rank("error") else None

    def verdict(self) -> dict[str, object]:
        """What the report concludes, for --json and the bundle: the one cause named
        (`root_cause`), or the causes it is `likely` to be, or neither."""
        root, likely = self.root_cause(), self.likely()
        return {
            "root_cause": root.id if root else None,
            "likely": None
            if likely is None
            else {
                "issue": likely.id,
                "title": likely.title,
                "candidates": [
                    {"cause": c.cause, "rule": c.rule or None, "evidence": c.evidence} for c in likely.likely
                ],
            },
        }

    def _lead(self) -> IssueSummary | None:
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
