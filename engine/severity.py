"""The one severity scale: every finding, diagnostic, check and threshold level speaks it.

Ordered from harmless to worst, so `max()`, sorting and "at least" filters mean the same thing
in triage, doctor, the dashboard and serve's crash diagnosis. The values are the words written
in JSON and YAML; "warn" is read as "warning" (doctor's word until they were merged).
"""

from __future__ import annotations

import enum

_ORDER = ("ok", "info", "warning", "error", "critical")
_ALIASES = {"warn": "warning", "crit": "critical", "err": "error"}


class Severity(str, enum.Enum):
    OK = "ok"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return _ORDER.index(self.value)

    # str's own comparisons would order the words alphabetically: compare by rank instead.
    def __lt__(self, other: object) -> bool:
        return self.rank < Severity.parse(other).rank  # type: ignore[arg-type]

    def __le__(self, other: object) -> bool:
        return self.rank <= Severity.parse(other).rank  # type: ignore[arg-type]

    def __gt__(self, other: object) -> bool:
        return self.rank > Severity.parse(other).rank  # type: ignore[arg-type]

    def __ge__(self, other: object) -> bool:
        return self.rank >= Severity.parse(other).rank  # type: ignore[arg-type]

    __hash__ = str.__hash__

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: "str | Severity") -> "Severity":
        """A severity from its word (any case, "warn" accepted); ValueError names the choices."""
        if isinstance(value, Severity):
            return value
        word = str(value).strip().lower()
        word = _ALIASES.get(word, word)
        try:
            return cls(word)
        except ValueError:
            raise ValueError(f"{value!r} is not a severity (one of {', '.join(_ORDER)})") from None

    @classmethod
    def words(cls) -> tuple[str, ...]:
        return _ORDER


def rank(value: "str | Severity") -> int:
    """Sort key for a severity word; an unknown word sorts below everything."""
    try:
        return Severity.parse(value).rank
    except ValueError:
        return -1


__all__ = ["Severity", "rank"]
