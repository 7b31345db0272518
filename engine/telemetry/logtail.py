"""Follow an engine log as it grows: known issues through the triage scanner, and the KV
capacity the engine announced at start-up (for engines whose metrics lack `num_gpu_blocks`)."""

from __future__ import annotations

import os
from pathlib import Path

from engine.metrics.startup_log import KvCapacity, parse_kv_capacity
from engine.system.follow import Follower

# The first look reads the head of the log (start-up lines carry the KV capacity) and only the
# tail of a big log; later polls read what was appended, at most this much per poll.
HEAD_BYTES = 512 * 1024
TAIL_BYTES = 1024 * 1024


class LogTail:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.capacity = KvCapacity()
        self.error: str | None = None
        # every line is scanned: one that fell behind reads on, TAIL_BYTES a poll
        self._follow = Follower(self.path, TAIL_BYTES, first="tail", again="tail", catch_up=True, head_bytes=HEAD_BYTES)
        from engine.triage import Scanner  # its rules load on first use, not when top starts

        self._scanner = Scanner()

    def poll(self) -> None:
        try:
            chunk = self._follow.poll()
            self.error = None
        except OSError as exc:
            self.error = f"{self.path}: {exc.strerror or exc}"
            return
        if chunk.head:  # a big log read from its tail: its head announces the KV capacity
            head = chunk.head.decode("utf-8", "replace").splitlines()
            self.capacity = _merge(self.capacity, parse_kv_capacity(head))
        lines = [raw.decode("utf-8", "replace") for raw in chunk.lines]
        self.capacity = _merge(self.capacity, parse_kv_capacity(lines))
        for line in lines:
            self._scanner.feed(line, source=self.path.name)

    def issues(self) -> list:
        """Known issues found so far (IssueSummary of engine.triage), most severe first."""
        return list(self._scanner.report().issues)


def _merge(old: KvCapacity, new: KvCapacity) -> KvCapacity:
    return KvCapacity(
        new.blocks if new.blocks is not None else old.blocks, new.tokens if new.tokens is not None else old.tokens
    )
