"""Follow a growing text file: the whole lines appended since the last poll.

The one place for what every log follower needs (the engine log behind `top`'s diagnostics and
its log pane, the plogs behind the exporter's code counters): an offset, the unfinished last line
kept for the next poll, a file that shrank or was replaced (rotation, a restarted run) read again,
a bounded read per poll, and a "line" that never ends cut to its start.

    f = Follower(path, max_bytes=1 << 20, first="tail")
    chunk = f.poll()          # OSError when the file cannot be read
    chunk.lines               # list[bytes], without their newlines
    chunk.head                # with head_bytes: the file's start, on a fresh read that began past it
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

MAX_LINE = 64 * 1024  # longer lines are cut: what a reader looks at is the start of a line

# Where a read begins in a file not read before (`first`) or read again because it was replaced or
# truncated (`again`): its start, `max_bytes` before its end, or its end (only what comes next).
Start = Literal["start", "tail", "end"]


@dataclass(frozen=True)
class Chunk:
    lines: list[bytes] = field(default_factory=list)
    fresh: bool = False  # the first read, or the file was replaced or truncated and read again
    # the first `head_bytes` of the file, read through the same open file (the very file the lines
    # came from, even when it is being replaced); only when a fresh read began past them
    head: bytes = b""


class Follower:
    def __init__(
        self,
        path: str | os.PathLike[str],
        max_bytes: int,
        first: Start = "tail",
        again: Start = "tail",
        catch_up: bool = True,
        max_line: int = MAX_LINE,
        head_bytes: int = 0,
    ) -> None:
        """`catch_up`: a follower that fell behind reads on from where it stopped, `max_bytes` a
        poll (every line is seen, later); without it, it jumps to the newest `max_bytes` (what
        is shown is current; older lines are skipped). `head_bytes`: also hand over the file's
        start on a fresh read (start-up lines that announce something, in a big log read from its tail)."""
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.first, self.again = first, again
        self.catch_up = catch_up
        self.max_line = max_line
        self.head_bytes = head_bytes
        self.offset: int | None = None  # where the next read starts; None: not read yet
        self.restarts = 0  # times the file was read again (replaced, truncated)
        self._inode: int | None = None
        self._partial = b""

    def poll(self) -> Chunk:
        with self.path.open("rb") as f:
            st = os.fstat(f.fileno())
            fresh = self.offset is None or st.st_ino != self._inode or st.st_size < self.offset
            if fresh:
                if self.offset is not None:
                    self.restarts += 1
                start = self._start(self.first if self.offset is None else self.again, st.st_size)
            else:
                start = self.offset or 0
            skipped = not fresh and not self.catch_up and st.st_size - start > self.max_bytes
            if skipped:
                start = st.st_size - self.max_bytes
            head = b""
            if fresh and start > 0 and self.head_bytes:
                head = f.read(min(self.head_bytes, start))
            f.seek(start)
            data = f.read(self.max_bytes)
        self._inode, self.offset = st.st_ino, start + len(data)
        if fresh or skipped:
            self._partial = b""
            if start > 0:  # the read began mid-line: that piece of a line is no line
                data = data[data.find(b"\n") + 1 :] if b"\n" in data else b""
        pieces = (self._partial + data).split(b"\n")
        self._partial = pieces.pop()  # an unfinished last line waits for the next poll
        if len(self._partial) > self.max_line:  # a "line" that never ends: its start is the line
            pieces.append(self._partial[: self.max_line])
            self._partial = b""
        return Chunk([p[: self.max_line] for p in pieces], fresh, head)

    def _start(self, where: Start, size: int) -> int:
        return 0 if where == "start" else size if where == "end" else max(0, size - self.max_bytes)
