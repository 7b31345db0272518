"""Why did the engine die? Known issues from triage's matcher on the log tail, plus the root
exception line, so even an error no rule knows yet is named in one line."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

from engine.i18n import N_
from engine.launcher.phases import log_message
from engine.triage import IssueSummary, diagnose_lines, severity_rank

_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit)(?:\[\w+\])?: \S")
# Re-raises across vLLM's processes that only point back at the real error ("see above").
_WRAPPERS = re.compile(
    r"Engine core initialization failed|EngineDeadError|EngineCore encountered an issue|Worker failed with error"
)


@dataclass(frozen=True)
class Diagnosis:
    exit_code: int | None
    findings: list[IssueSummary] = field(default_factory=list)
    root_error: str | None = None  # the first real exception line in the tail
    tail: list[str] = field(default_factory=list)  # the last lines, for the user to read
    # The leading finding when its evidence is only a symptom: its `likely` candidates are what
    # to say ("likely one of"), not its own name (TriageReport.likely).
    likely: IssueSummary | None = None

    def likely_lines(self) -> list[str]:
        """'likely one of' and one line per candidate cause with its evidence; [] when none."""
        if self.likely is None:
            return []
        lines = [f"likely one of (the log shows only {self.likely.id}, a symptom of several causes):"]
        for c in self.likely.likely:
            lines.append(f"  - {c.cause}" + (f" ({c.rule})" if c.rule else "") + f"; decide by: {c.evidence}")
        return lines


def root_exception(lines: Sequence[str]) -> str | None:
    """The last exception line of the tail that is not a 'see above' wrapper. The engine's
    processes re-raise a worker's error with wrappers that only point back at it; within one
    process, the last exception of a chain is the one that says what was being done."""
    messages = [log_message(line) for line in lines]
    for i in range(len(messages) - 1, -1, -1):
        msg = messages[i]
        text = msg.strip()
        if not _EXCEPTION.match(text) or _WRAPPERS.search(text):
            continue
        # pydantic puts the reason on the next, indented line.
        if text.endswith(("validation error for ModelConfig", "validation errors for ModelConfig")) or re.search(
            r"\d+ validation errors? for \w+$", text
        ):
            if i + 1 < len(messages) and messages[i + 1].startswith(" "):
                text = f"{text}: {messages[i + 1].strip()}"
        return text
    return None


def _names_root(example: str, root: str | None) -> bool:
    ex = log_message(example or "").strip()
    return bool(root and ex) and (ex[:60] in root or root[:60] in ex)


def _triage_findings(lines: Sequence[str], root: str | None) -> tuple[list[IssueSummary], IssueSummary | None]:
    report = diagnose_lines(lines)
    # Specific causes before consequences ("engine core failed to start") and catch-all codes
    # (EZ9999): those are true as well but name no cause. Then the issue that matched the root
    # exception; the rest keep triage's ranking (a stable sort).
    issues = sorted(report.issues, key=lambda i: (not i.names_cause(), not _names_root(str(i.example), root)))
    # Warnings (a low open-file limit...) are true but do not explain a dead engine; beside a
    # named cause, catch-all codes and consequences add nothing (alone, they are all there is).
    errors = [i for i in issues if severity_rank(i.severity) >= severity_rank("error")]
    return ([i for i in errors if i.names_cause()] or errors)[:3], report.likely()


def diagnose(tail: Sequence[str], exit_code: int | None, show_lines: int = 15) -> Diagnosis:
    lines = list(tail)
    root = root_exception(lines)
    findings, likely = _triage_findings(lines, root)
    shown = [line for line in lines if line.strip()][-show_lines:]
    return Diagnosis(exit_code=exit_code, findings=findings, root_error=root, tail=shown, likely=likely)


def describe_exit(code: int | None, translate: Callable[[str], str] = N_) -> str:
    """'exit code 1', or 'killed by SIGKILL' for a negative Popen return code. English by default
    (it goes into the run's log as a marker); a view passes engine.i18n._ to show it translated."""
    if code is None:
        return translate(N_("exit code unknown"))
    if code < 0:
        import signal

        try:
            return translate(N_("killed by {signal}")).format(signal=signal.Signals(-code).name)
        except ValueError:
            return translate(N_("killed by signal {number}")).format(number=-code)
    return translate(N_("exit code {code}")).format(code=code)
