"""CANN error codes in the plogs of this host, counted by code for the exporter.

The plog directory (ASCEND_PROCESS_LOG_PATH, else ~/ascend/log) is followed like a log tail:
files that exist when the exporter starts are read from their end (the counters count what
happens while it runs, as Prometheus counters do), files that appear later from their start.
Only ERROR lines are looked at, and only codes the triage code tables can explain are counted.

No plog directory is no plog written yet (CANN makes it at its first log line, under the serving
user's home, and the exporter often runs as another user): nothing to count, not a source down,
which would fire AscendctlSourceDown on a healthy host. It is looked for again on every poll.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path
from typing import Mapping

from engine.errors import Unreachable
from engine.system.cann import process_log_dir
from engine.system.follow import Follower
from engine.triage.codes import find_codes

# A busy host keeps thousands of plog files: only those written lately are followed.
MAX_FILES = 200
RECENT_S = 24 * 3600
READ_CAP = 4 * 1024 * 1024  # bytes read from one file per poll


class PlogCounter:
    name = "plogs"

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.base = Path(process_log_dir(env if env is not None else os.environ))
        self._follow: dict[Path, Follower] = {}
        self._started = False
        self.counts: Counter[tuple[str, str]] = Counter()  # (code, kind) -> lines

    def poll(self) -> Counter:
        if not self.base.is_dir():
            if self.base.exists():
                raise Unreachable(f"{self.base} is not a directory", "set ASCEND_PROCESS_LOG_PATH to where plogs go")
            self._started = True  # plogs that appear later are counted from their start
            return Counter(self.counts)
        first = not self._started
        self._started = True
        for path in self._recent():
            follower = self._follow.get(path)
            if follower is None:
                # a file there when the exporter started counts from its end, a later one from its start
                follower = Follower(path, READ_CAP, first="end" if first else "start", again="start")
                self._follow[path] = follower
            try:
                chunk = follower.poll()
            except OSError:
                continue
            for raw in chunk.lines:
                if b"ERROR" not in raw[:16]:
                    continue
                for info in find_codes(raw.decode("utf-8", "replace")):
                    self.counts[(info.code, info.kind)] += 1
        return Counter(self.counts)

    def _recent(self) -> list[Path]:
        cutoff = time.time() - RECENT_S
        found: list[tuple[float, Path]] = []
        for dirpath, _dirs, names in os.walk(self.base):
            for n in names:
                if not n.endswith(".log"):
                    continue
                p = Path(dirpath) / n
                try:
                    mtime = p.stat().st_mtime
                except OSError:
                    continue
                if mtime >= cutoff:
                    found.append((mtime, p))
        found.sort(reverse=True)
        keep = [p for _, p in found[:MAX_FILES]]
        for gone in set(self._follow) - set(keep):  # forget files no longer followed
            self._follow.pop(gone, None)
        return keep
