"""A crash in one line (for a sweep's results and other records that are not a terminal view)."""

from __future__ import annotations

from engine.launcher.diagnosis import describe_exit
from engine.launcher.supervisor import Outcome


def diagnosis_line(o: Outcome) -> str:
    """`exited with code 1: ValueError: ...`, a known issue's title first when triage knows it."""
    what = (
        "not ready within the ready timeout"
        if o.timed_out and o.exit_code is None
        else f"the engine ended ({describe_exit(o.exit_code)})"
    )
    d = o.diagnosis
    if d is None:
        return what
    parts = [f.title for f in d.findings[:2]]
    if d.root_error:
        parts.append(d.root_error)
    return f"{what}: {'; '.join(parts)}" if parts else what
