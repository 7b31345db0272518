"""Cluster error lines that match no rule into templates, so new problems surface with a count.

Masking replaces what varies between occurrences of the same problem (paths, addresses, ids,
numbers) by placeholders; lines with the same masked text are one template.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.triage.model import Template

MAX_TEMPLATES = 2000  # memory stays bounded whatever the input
MAX_TEMPLATE_CHARS = 300
OVERFLOW = "<other templates: too many distinct ones to keep>"

_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?:[A-Za-z]:)?(?:/[\w.@+~-]+){2,}/?|~/[\w./-]+"), "<path>"),
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"), "<uuid>"),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "<ip>"),
    (
        re.compile(
            r"\b0[xX][0-9a-fA-F]+\b|\b[0-9a-fA-F]*\d[0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*\b(?<=\w{8})|\b[0-9a-f]{12,}\b"
        ),
        "<hex>",
    ),
    (re.compile(r"(?<!\w)\d+(?:\.\d+)*"), "<n>"),  # not inside identifiers: E39999, Worker_TP0 stay
)
_SPACES = re.compile(r"\s+")


def mask(text: str) -> str:
    """The template of one message: variable parts replaced, whitespace collapsed."""
    text = text[: MAX_TEMPLATE_CHARS * 2]
    for pattern, placeholder in _MASKS:
        text = pattern.sub(placeholder, text)
    return _SPACES.sub(" ", text).strip()[:MAX_TEMPLATE_CHARS]


@dataclass
class _Cluster:
    count: int
    example: str


class TemplateMiner:
    def __init__(self, max_templates: int = MAX_TEMPLATES) -> None:
        self._clusters: dict[str, _Cluster] = {}
        self._max = max_templates

    def add(self, message: str, example: str) -> None:
        key = mask(message)
        if not key:
            return
        cluster = self._clusters.get(key)
        if cluster is None:
            if len(self._clusters) >= self._max:
                key = OVERFLOW
                cluster = self._clusters.get(key)
            if cluster is None:
                cluster = self._clusters[key] = _Cluster(0, example[:1000])
        cluster.count += 1

    def templates(self) -> list[Template]:
        ordered = sorted(self._clusters.items(), key=lambda kv: (-kv[1].count, kv[0]))
        return [Template(template=k, count=c.count, example=c.example) for k, c in ordered]
