"""The last lines of an engine log, each with the known issues it matches (triage rules, ACL /
CANN codes): the log pane of `top`'s engine screen.

The first look reads only the end of the file; later polls read what was appended since, so a
log of gigabytes costs one bounded read per tick and only new lines are matched. A file that
shrank or was replaced (rotation, a restarted run) is read again from its end.
"""

from __future__ import annotations

import os
import re
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from engine.system.follow import Follower
from engine.triage import Rule, find_codes, load_rules
from engine.triage.matcher import RuleIndex

KEEP_LINES = 200
# At most this much is read per poll: an engine that wrote more since the last tick has its
# older lines skipped (only the last KEEP_LINES are shown anyway).
MAX_BYTES = 256 * 1024

# The engine's access-log line for a poll that succeeded: `top`, the exporter, Prometheus and the
# supervisor read /metrics and /health every second or so, and those lines would bury the
# engine's own. A poll that failed (4xx, 5xx) is kept: that one is news.
POLL_LINE = re.compile(r'"GET /(?:metrics|health)(?:\?\S*)? HTTP/[\d.]+" 2\d\d\b')


@dataclass(frozen=True)
class Mark:
    """A known issue a line matched: the triage rule id (or `acl-507011`), its title, severity."""

    id: str
    title: str
    severity: str


@dataclass(frozen=True)
class MarkedLine:
    text: str  # as the engine wrote it: the screen cleans escape sequences when it shows it
    marks: tuple[Mark, ...] = ()


class MarkedTail:
    def __init__(
        self,
        path: str | os.PathLike[str],
        keep: int = KEEP_LINES,
        max_bytes: int = MAX_BYTES,
        rules: Sequence[Rule] | None = None,
    ) -> None:
        self.path = Path(path)
        self.lines: deque[MarkedLine] = deque(maxlen=keep)
        self.error: str | None = None
        self.polls_hidden = 0  # successful /metrics and /health polls left out of `lines`
        # only the newest lines are shown: one that fell behind jumps to the end
        self._follow = Follower(self.path, max_bytes, first="tail", again="tail", catch_up=False)
        self._index = RuleIndex(load_rules() if rules is None else rules)

    @property
    def offset(self) -> int | None:
        """Where the next read starts; None: not read yet."""
        return self._follow.offset

    @property
    def restarts(self) -> int:
        """Times the file was read again from its end (rotated, truncated)."""
        return self._follow.restarts

    def poll(self) -> bool:
        """Read what was appended; True when the lines changed."""
        try:
            chunk = self._follow.poll()
        except OSError as exc:
            self.error = f"{self.path}: {exc.strerror or exc}"
            return False
        self.error = None
        if chunk.fresh:
            self.lines.clear()
        texts = [raw.decode("utf-8", "replace").rstrip("\r") for raw in chunk.lines]
        shown = [text for text in texts if not POLL_LINE.search(text)]
        self.polls_hidden += len(texts) - len(shown)
        for text in shown[-(self.lines.maxlen or len(shown)) :]:  # older ones would scroll away
            self.lines.append(MarkedLine(text, self.marks(text)))
        return bool(chunk.lines) or chunk.fresh

    def marks(self, line: str) -> tuple[Mark, ...]:
        """The known issues `line` matches, rules first (in database order), then codes."""
        if not self._index.candidate(line):
            return ()
        rules, codes = self._index.named(self._index.matching(line), find_codes(line))
        found = {r.id: Mark(r.id, r.title, r.severity) for r in rules}
        for info in codes:
            found.setdefault(info.issue_id, Mark(info.issue_id, info.title, info.severity))
        return tuple(found.values())
