"""Doctor's data: each check is a record with a status, a one-line summary and the exact fix."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Status(str, enum.Enum):
    """A check's result. The words are those of `engine.severity` (so one colour map serves
    doctor, triage and top), plus "skip" for a check that did not apply."""

    OK = "ok"
    WARN = "warning"
    ERROR = "error"
    SKIP = "skip"


@dataclass(frozen=True)
class Outcome:
    """What a check function returns; the runner adds the check's id and category."""

    status: Status
    summary: str
    fix: str = ""


def ok(summary: str) -> Outcome:
    return Outcome(Status.OK, summary)


def warn(summary: str, fix: str) -> Outcome:
    return Outcome(Status.WARN, summary, fix)


def error(summary: str, fix: str) -> Outcome:
    return Outcome(Status.ERROR, summary, fix)


def skip(summary: str) -> Outcome:
    return Outcome(Status.SKIP, summary)


@dataclass(frozen=True)
class CheckResult:
    id: str
    category: str
    status: Status
    summary: str
    fix: str = ""

    @property
    def cause(self) -> str:
        """One line naming the check, for callers that print errors as cause + fix (serve's preflight)."""
        return f"{self.id}: {self.summary}"


@dataclass(frozen=True)
class CheckInfo:
    """An entry of `--list-checks`."""

    id: str
    category: str
    title: str
    needs_profile: bool = False


@dataclass(frozen=True)
class DoctorReport:
    platform: str  # "ascend" | "cuda" | "cpu"
    headline: str
    root: str
    live: bool
    checks: tuple[CheckResult, ...]
    facts: dict[str, Any] = field(default_factory=dict)
    profile: str | None = None
    # Categories whose rows are advice on how fast the host serves, not whether it can: shown and
    # counted, but left out of the verdict and the exit code (`--check perf` alone judges them).
    advisory: tuple[str, ...] = ()

    def count(self, status: Status) -> int:
        return sum(1 for c in self.checks if c.status is status)

    def _judged(self, status: Status) -> int:
        return sum(1 for c in self.checks if c.status is status and c.category not in self.advisory)

    @property
    def verdict(self) -> str:
        if self._judged(Status.ERROR):
            return "errors"
        return "warnings" if self._judged(Status.WARN) else "ok"

    def exit_code(self, strict: bool = False) -> int:
        """0 clean or warnings only, 1 on errors (with strict: on warnings too)."""
        if self._judged(Status.ERROR) or (strict and self._judged(Status.WARN)):
            return 1
        return 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "platform": self.platform,
            "headline": self.headline,
            "root": self.root,
            "live": self.live,
            "profile": self.profile,
            "counts": {s.value: self.count(s) for s in Status},
            "facts": self.facts,
            "checks": [
                {
                    "id": c.id,
                    "category": c.category,
                    "status": c.status.value,
                    "summary": c.summary,
                    "fix": c.fix or None,
                }
                for c in self.checks
            ],
        }
