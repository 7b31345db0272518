"""The last lines of an engine log, each with the known issues it matches (triage rules, ACL /
CANN codes): the log pane of `top`'s engine screen.

The first look reads only the end of the file; later polls read what was appended since, so a
log of gigabytes costs one bounded read per tick and only new lines are matched. A file that
shrank or was replaced (rotation, a restarted run) is read again from its end.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from engine.triage import Rule, find_codes, load_rules
from engine.triage.matcher import RuleIndex
from engine.triage.scanner import MAX_LINE

KEEP_LINES = 200
# At most this much is read per poll: an engine that wrote more since the last tick has its
# older lines skipped (only the last KEEP_LINES are shown anyway).
MAX_BYTES = 256 * 1024


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
        self.max_bytes = max_bytes
        self.lines: deque[MarkedLine] = deque(maxlen=keep)
        self.error: str | None = None
        self.offset: int | None = None  # where the next read starts; None: not read yet
        self.restarts = 0  # times the file was read again from its end (rotated, truncated)
        self._inode: int | None = None
        self._partial = b""
        self._index = RuleIndex(load_rules() if rules is None else rules)

    def poll(self) -> bool:
        """Read what was appended; True when the lines changed."""
        try:
            with self.path.open("rb") as f:
                st = os.fstat(f.fileno())
                fresh = self.offset is None or st.st_ino != self._inode or st.st_size < self.offset
                if fresh and self.offset is not None:
                    self.restarts += 1
                start = st.st_size - self.max_bytes if fresh else self.offset
                start = max(0, start, st.st_size - self.max_bytes)
                f.seek(start)
                data = f.read(st.st_size - start)
        except OSError as exc:
            self.error = f"{self.path}: {exc.strerror or exc}"
            return False
        self.error = None
        skipped = not fresh and start != self.offset  # more was appended than one read takes
        self._inode, self.offset = st.st_ino, start + len(data)
        if fresh or skipped:
            self._partial = b""
            if fresh:
                self.lines.clear()
            if start > 0:  # the read began mid-line: that piece of a line is not shown
                data = data[data.find(b"\n") + 1 :] if b"\n" in data else b""
        if not data:
            return fresh
        pieces = (self._partial + data).split(b"\n")
        self._partial = pieces.pop()  # an unfinished last line waits for the next poll
        if len(self._partial) > MAX_LINE:  # a "line" that never ends: show its start
            pieces.append(self._partial[:MAX_LINE])
            self._partial = b""
        for raw in pieces[-(self.lines.maxlen or len(pieces)) :]:  # older ones would scroll away
            text = raw[:MAX_LINE].decode("utf-8", "replace").rstrip("\r")
            self.lines.append(MarkedLine(text, self.marks(text)))
        return bool(pieces) or fresh

    def marks(self, line: str) -> tuple[Mark, ...]:
        """The known issues `line` matches, rules first (in database order), then codes."""
        if not self._index.candidate(line):
            return ()
        rules, codes = self._index.named(self._index.matching(line), find_codes(line))
        found = {r.id: Mark(r.id, r.title, r.severity) for r in rules}
        for info in codes:
            found.setdefault(info.issue_id, Mark(info.issue_id, info.title, info.severity))
        return tuple(found.values())
