"""How the shell shows things: one colour per severity and one formatter per kind of figure.

Every command and the dashboard print through these, so a warning is the same yellow and a
size the same unit everywhere. The engine decides *what* a value's severity is
(`engine.severity`); this module only decides how it looks.
"""

from __future__ import annotations

from engine.severity import Severity

NA = "N/A"

_STYLE = {
    Severity.OK: "green",
    Severity.INFO: "cyan",
    Severity.WARNING: "yellow",
    Severity.ERROR: "red",
    Severity.CRITICAL: "bold red",
}


def severity_style(severity: "Severity | str | None") -> str:
    """The Rich style of a severity (or of a doctor status, which speaks the same words)."""
    if severity is None:
        return "dim"
    if isinstance(severity, str) and severity == "skip":
        return "dim"
    try:
        return _STYLE[Severity.parse(severity)]
    except ValueError:
        return ""


def num(value: float | None, fmt: str = "{:.0f}", unit: str = "") -> str:
    return NA if value is None else fmt.format(value) + unit


def size(n: float | None) -> str:
    """Bytes in binary units: 1.5 GiB, 320.0 MiB, 512 B."""
    if n is None:
        return NA
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,.0f} B"


def seconds(value: float | None) -> str:
    """A latency: ms under one second, s above."""
    if value is None:
        return NA
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"


def age(value: float | None) -> str:
    """How long ago: 42s, 12m, 3.5h."""
    if value is None:
        return "never"
    if value < 90:
        return f"{value:.0f}s"
    return f"{value / 60:.0f}m" if value < 5400 else f"{value / 3600:.1f}h"


__all__ = ["NA", "age", "num", "seconds", "severity_style", "size"]
