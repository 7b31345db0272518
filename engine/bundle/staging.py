"""How a bundle's collectors are held to their budget: the staging folder the archive is built
from, with its size cap, and a time limit per collector (one that runs out of time is left behind
and may write nothing more). Each collector reports itself as one `Source`, a manifest row."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable


@dataclass
class Source:
    """One row of the manifest."""

    name: str
    kind: str  # report | command | file | log | metrics | run
    what: str  # the command line run or the path read, redacted
    status: str = "ok"  # ok | failed | skipped | cut
    why: str | None = None
    rc: int | None = None
    duration_s: float = 0.0
    bytes: int = 0
    members: list[str] = field(default_factory=list)  # paths inside the bundle


class Stage:
    """The folder the archive is built from, with the size budget."""

    def __init__(self, top: Path, max_bytes: int) -> None:
        self.top = top
        self.max_bytes = max_bytes
        self.used = 0
        self.lock = threading.Lock()
        self.abandoned: set[int] = set()  # id() of the Sources of collectors left behind
        self.closed = False

    def abandon(self, src: Source) -> None:
        """A collector that ran out of time writes nothing more (its thread may still be running)."""
        with self.lock:
            self.abandoned.add(id(src))

    def close(self) -> None:
        with self.lock:
            self.closed = True

    def left(self) -> int:
        return max(0, self.max_bytes - self.used)

    def write(self, member: str, data: bytes, src: Source, tail: bool = False) -> None:
        """Write `data` at `member`, cut to what the budget leaves (its end when `tail`)."""
        with self.lock:
            if self.closed or id(src) in self.abandoned:
                raise Abandoned(src.name)
            self._write(member, data, src, tail)

    def _write(self, member: str, data: bytes, src: Source, tail: bool) -> None:
        if len(data) > self.left():
            if self.left() == 0:
                src.status, src.why = "skipped", f"size cap of {self.max_bytes} bytes reached"
                return
            keep = self.left()
            data = data[-keep:] if tail else data[:keep]
            src.status = "cut"
            src.why = f"size cap: kept the {'last' if tail else 'first'} {keep} bytes"
        target = self.top / member
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        before = target.stat().st_size if target.is_file() else 0  # an empty placeholder filled in later
        target.write_bytes(data)
        self.used += len(data) - before
        src.bytes += len(data) - before
        if member not in src.members:
            src.members.append(member)


class Abandoned(Exception):
    """Raised in a collector's thread that writes after its time ran out."""


def timed(fn: Callable[[], Any], timeout_s: float) -> tuple[Any, BaseException | None, bool]:
    """Run fn in a worker thread: (value, exception, timed out). A collector that hangs is left
    behind (a daemon thread; its result is never used) and the bundle goes on."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # reported as the collector's failure
            box["error"] = exc

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        return None, None, True
    return box.get("value"), box.get("error"), False


def reason_of(exc: BaseException) -> str:
    return str(getattr(exc, "cause", None) or exc or type(exc).__name__)[:300]


def json_bytes(data: Any) -> bytes:
    return (json.dumps(data, indent=2, default=str, ensure_ascii=False) + "\n").encode("utf-8")
