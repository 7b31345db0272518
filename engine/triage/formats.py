"""Log line formats: the vLLM prefix, CANN plog headers, the torch_npu `[ERROR] ... ERRnnnnn` banner.

`parse_line` splits a line into who wrote it (the process prefix, used to keep interleaved
tracebacks apart), its level, its timestamp and the payload that rules are matched against.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# vLLM: optional docker-compose prefix, nested `(Proc pid=N) ` prefixes, then
# `LEVEL MM-DD HH:MM:SS [file.py:line] ` (V1) or `LEVEL MM-DD HH:MM:SS file.py:line] ` (V0).
_VLLM = re.compile(
    r"(?P<key>(?:[\w.-]+\s+\|\s)?(?:\([\w .-]+ pid=(?P<pid>\d+)\) )*)"
    r"(?:(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<md>\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)(?:\.\d+)? "
    r"\[?(?P<src>[^\]\s]+:\d+)\] ?)?"
)
# CANN plog: `[LEVEL] MODULE(pid,pname):YYYY-MM-DD-hh:mm:ss.mmm.uuu rest`
_PLOG = re.compile(
    r"\[(?P<level>ERROR|WARNING|INFO|DEBUG|EVENT|TRACE|CRITICAL)\] (?P<module>\w+)\((?P<pid>-?\d+),[^)]*\):\s?"
    r"(?P<date>\d{4}-\d\d-\d\d)-(?P<hms>\d\d:\d\d:\d\d)\.(?P<ms>\d{3})\.(?P<us>\d{3}) "
)
# torch_npu: `[ERROR] YYYY-MM-DD-hh:mm:ss (PID:n, Device:d, RankID:r) ERRsscc SUB message`
_BANNER = re.compile(r"\[ERROR\] (?P<date>\d{4}-\d\d-\d\d)-(?P<hms>\d\d:\d\d:\d\d)(?:\.\d+)? \(PID:(?P<pid>\d+), ")
# A raw line that states its own level (glog `E0101 ...`, `[ERROR] TBE ...`, `FATAL: ...`).
_RAW_ERROR = re.compile(
    r"\s*(?:\[(?:ERROR|CRITICAL|FATAL)\]|(?:ERROR|CRITICAL|FATAL)[: ]|\[rank\d+\]:\[E\d{3}|Fatal Python error)"
)

ERROR_LEVELS = frozenset({"ERROR", "CRITICAL"})


@dataclass(frozen=True, slots=True)
class Stamp:
    """A log timestamp; `year` is None for vLLM's `MM-DD hh:mm:ss`."""

    year: int | None
    rest: tuple[int, int, str, str]  # month, day, hh:mm:ss, fraction

    def text(self) -> str:
        md = f"{self.rest[0]:02d}-{self.rest[1]:02d} {self.rest[2]}{'.' + self.rest[3] if self.rest[3] else ''}"
        return f"{self.year:04d}-{md}" if self.year is not None else md

    def before(self, other: "Stamp") -> bool:
        """Ordering; a stamp without a year compares on month..fraction only."""
        if self.year is not None and other.year is not None and self.year != other.year:
            return self.year < other.year
        return self.rest < other.rest


@dataclass(frozen=True, slots=True)
class Parsed:
    key: str  # who wrote it: compose + process prefix ("" for a bare line)
    level: str | None  # ERROR, WARNING, ... when the line says
    stamp: Stamp | None
    src: str | None  # vLLM [file.py:line] or plog module
    pid: int | None
    payload: str  # the text after the prefixes


def _date_stamp(date: str, hms: str, frac: str = "") -> Stamp:
    y, m, d = date.split("-")
    return Stamp(int(y), (int(m), int(d), hms, frac))


def parse_line(line: str) -> Parsed:
    m = _VLLM.match(line)
    key = m.group("key") if m else ""
    pid = int(m.group("pid")) if m and m.group("pid") else None
    level = stamp = src = None
    if m and m.group("level"):
        level = m.group("level")
        mo, d = m.group("md").split("-")
        stamp = Stamp(None, (int(mo), int(d), m.group("hms"), ""))
        src = m.group("src")
    payload = line[m.end() :] if m else line
    p = _PLOG.match(payload)
    if p:
        plevel = p.group("level")
        level = "ERROR" if plevel == "ERROR" and level is None else (level or plevel)
        stamp = _date_stamp(p.group("date"), p.group("hms"), p.group("ms") + p.group("us"))
        src = p.group("module")
        pid = int(p.group("pid"))
        return Parsed(key, level, stamp, src, pid, payload[p.end() :])
    b = _BANNER.match(payload)
    if b:
        return Parsed(
            key, level or "ERROR", _date_stamp(b.group("date"), b.group("hms")), src, int(b.group("pid")), payload
        )
    if level is None and _RAW_ERROR.match(payload):
        level = "ERROR"
    return Parsed(key, level, stamp, src, pid, payload)
