"""One node's logs through triage's scanner, plus what a cluster report needs from them: which
ranks and addresses the node's processes are, and which peers they waited on.

The scanner is triage's own (engine.triage.scanner.Scanner), so a node's issues, ranking and root
cause are exactly what `ascendctl triage` says about that node alone. Two additions ride on the
same pass over the bytes: the peer and self patterns of roles.yaml (a regular expression over each
block, no extra read), and a time for events whose first line carries none (a CANN block opened by
`[PID: n] YYYY-MM-DD-hh:mm:ss...`, or the last stamp seen in that input). Memory is the scanner's
(bounded) plus capped tables of ranks, addresses and peers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Sequence

from engine.data import load_yaml
from engine.triage.formats import Stamp
from engine.triage.rules import Rule
from engine.triage.scanner import Scanner

MAX_IDS = 256  # ranks / addresses / peers remembered per node
# A CANN message line that carries its own time: `[PID: 2969] 2025-10-11-15:09:34.713.335 ...`
_EMBEDDED = re.compile(r"\[PID: ?\d+\] (\d{4})-(\d\d)-(\d\d)-(\d\d:\d\d:\d\d)\.(\d{3})\.(\d{3})")
# torch's glog-style prefix of a rank: `[rank1]:[E324 13:00:25.428029551 compiler_depend.ts:574]` (no year)
_GLOG = re.compile(r"\[rank\d+\]:\[[EWIF](\d{1,2})(\d\d) (\d\d:\d\d:\d\d)\.(\d{1,6})")


@dataclass(frozen=True)
class Roles:
    waits: frozenset[str]
    peers: tuple[tuple[str, re.Pattern[bytes]], ...]
    own: tuple[tuple[str, re.Pattern[bytes]], ...]


@lru_cache(maxsize=1)
def roles() -> Roles:
    data: Any = load_yaml("engine.incident", "roles.yaml")

    def compiled(key: str) -> tuple[tuple[str, re.Pattern[bytes]], ...]:
        return tuple((p["id"], re.compile(p["pattern"].encode(), re.M)) for p in data[key])

    return Roles(frozenset(data["waits"]), compiled("peers"), compiled("self"))


@dataclass
class PeerSeen:
    rank: int | None
    ip: str | None
    port: int | None
    via: str  # the roles.yaml pattern id that named it
    count: int = 0


@dataclass
class NodeFacts:
    ranks: dict[int, int] = field(default_factory=dict)  # rank -> times seen as this node's own
    addresses: dict[str, int] = field(default_factory=dict)
    peers: dict[tuple[int | None, str | None], PeerSeen] = field(default_factory=dict)


class NodeScanner(Scanner):
    """triage's Scanner, also collecting NodeFacts from every block it is fed."""

    def __init__(self, rules: Sequence[Rule] | None = None) -> None:
        super().__init__(rules)
        self.facts = NodeFacts()
        self._roles = roles()
        self._last: dict[str, Stamp] = {}

    def feed_block(self, data: bytes, source: str = "", start: int = 0, end: int | None = None) -> None:
        super().feed_block(data, source, start, end)
        n = len(data) if end is None else end
        f = self.facts
        for _id, rx in self._roles.own:
            for m in rx.finditer(data, start, n):
                g = m.groupdict()
                if g.get("rank") is not None and (len(f.ranks) < MAX_IDS or int(g["rank"]) in f.ranks):
                    f.ranks[int(g["rank"])] = f.ranks.get(int(g["rank"]), 0) + 1
                if g.get("ip") and (len(f.addresses) < MAX_IDS or g["ip"].decode() in f.addresses):
                    ip = g["ip"].decode()
                    f.addresses[ip] = f.addresses.get(ip, 0) + 1
        for pid, rx in self._roles.peers:
            for m in rx.finditer(data, start, n):
                g = m.groupdict()
                rank = int(g["rank"]) if g.get("rank") else None
                ip = g["ip"].decode() if g.get("ip") else None
                port = int(g["port"]) if g.get("port") else None
                seen = f.peers.get((rank, ip))
                if seen is None:
                    if len(f.peers) >= MAX_IDS:
                        continue
                    seen = f.peers[(rank, ip)] = PeerSeen(rank, ip, port, pid)
                seen.count += 1

    # -- times for events whose first line carries none ---------------------------------------

    def _add(self, ev: Any, p: Any, line: str) -> None:
        stamp = p.stamp
        if stamp is None:
            stamp = _embedded(line)
        if stamp is not None:
            self._last[ev.source] = stamp
            if ev.stamp is None:
                ev.stamp = stamp
        super()._add(ev, p, line)

    def _single(self, line: str, p: Any, source: str) -> None:
        stamp = p.stamp or _embedded(line)
        if stamp is not None:
            self._last[source] = stamp
        super()._single(line, p, source)

    def _record(self, hits: Any, stamp: Stamp | None, source: str) -> None:
        super()._record(hits, stamp if stamp is not None else self._last.get(source), source)


def _embedded(line: str) -> Stamp | None:
    """The time a CANN message or a torch rank prefix carries inside the line, if any."""
    if "[PID:" in line:
        m = _EMBEDDED.search(line)
        if m:
            y, mo, d, hms, ms, us = m.groups()
            return Stamp(int(y), (int(mo), int(d), hms, ms + us))
    if line.startswith("[rank"):
        g = _GLOG.match(line)
        if g:
            return Stamp(None, (int(g.group(1)), int(g.group(2)), g.group(3), g.group(4)))
    return None


__all__ = ["NodeFacts", "NodeScanner", "PeerSeen", "Roles", "roles"]
