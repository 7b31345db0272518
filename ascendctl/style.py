"""How the shell shows things: one colour per severity and one formatter per kind of figure.

Every command and the dashboard print through these, so a warning is the same yellow and a
size the same unit everywhere. The engine decides *what* a value's severity is
(`engine.severity`); this module only decides how it looks.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from engine import i18n
from engine.severity import Severity

if TYPE_CHECKING:
    from rich.text import Text

NA = "N/A"

# Text we did not write (log lines, recorded version files, profile descriptions, /metrics) may
# carry escape sequences that recolour, retitle or clear the operator's terminal: whole ANSI
# sequences go first (so no `[31m` debris is left), then every other C0/C1 control and the
# bidirectional overrides that make a line read differently from what it holds. Tab stays.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]?|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-_])|\x9b[0-?]*[ -/]*[@-~]?")
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROLS_KEEP_NL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")

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


def clean(text: object, multiline: bool = False) -> str:
    """Untrusted text made safe for a terminal: escape sequences and control characters removed
    (tab kept; newlines kept only when `multiline`)."""
    s = _ANSI.sub("", "" if text is None else str(text))
    return (_CONTROLS_KEEP_NL if multiline else _CONTROLS).sub("", s)


def safe(text: object, multiline: bool = False) -> str:
    """Untrusted text to embed in a Rich markup string: cleaned, and `[...]` escaped so that a
    `[red]` in a log line stays literal and a `[/]` cannot raise MarkupError."""
    from rich.markup import escape  # here, not at the top: doctor's view prints without Rich

    return escape(clean(text, multiline))


def plain(text: object, style: str = "", multiline: bool = False) -> Text:
    """Untrusted text as a Rich Text (never parsed as markup), for table cells and print()."""
    from rich.text import Text

    return Text(clean(text, multiline), style=style)


def _missing(value: float | None) -> bool:
    """None, NaN and infinities are all "not available": an engine's +Inf gauge is no figure."""
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def num(value: float | None, fmt: str = "{:.0f}", unit: str = "") -> str:
    return NA if _missing(value) else fmt.format(value) + unit


def size(n: float | None) -> str:
    """Bytes in binary units: 1.5 GiB, 320.0 MiB, 512 B."""
    if _missing(n):
        return NA
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,.0f} B"


def seconds(value: float | None) -> str:
    """A latency: ms under one second, s above."""
    if _missing(value):
        return NA
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"


def age(value: float | None) -> str:
    """How long ago: 42s, 12m, 3.5h."""
    if value is None:
        return "never"
    if value < 90:
        return f"{value:.0f}s"
    return f"{value / 60:.0f}m" if value < 5400 else f"{value / 3600:.1f}h"


__all__ = ["NA", "age", "clean", "num", "plain", "safe", "seconds", "severity_style", "size"]


def cells(text: str) -> int:
    """Terminal columns of `text`: a Chinese (wide or fullwidth) character takes two."""
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def ljust_cells(text: str, width: int) -> str:
    """`text` padded to `width` terminal columns (str.ljust counts a Chinese character as one)."""
    return text + " " * max(0, width - cells(text))


spaced = i18n.spaced  # a translated label and the space after it ("fix: ", "处理：")
