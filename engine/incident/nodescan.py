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
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Sequence

from engine.data import load_yaml
from engine.triage.formats import Stamp
from engine.triage.matcher import RuleIndex
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
    peers: tuple[tuple[str, bytes, re.Pattern[bytes]], ...]  # (id, keyword, pattern)
    own: tuple[tuple[str, bytes, re.Pattern[bytes]], ...]
    keywords: frozenset[bytes]  # each searched once per block


@lru_cache(maxsize=1)
def roles() -> Roles:
    data: Any = load_yaml("engine.incident", "roles.yaml")

    def compiled(key: str) -> tuple[tuple[str, bytes, re.Pattern[bytes]], ...]:
        return tuple((p["id"], p["keyword"].encode(), re.compile(p["pattern"].encode(), re.M)) for p in data[key])

    peers, own = compiled("peers"), compiled("self")
    return Roles(frozenset(data["waits"]), peers, own, frozenset(kw for _i, kw, _r in (*peers, *own)))


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

    def __init__(self, rules: Sequence[Rule] | None = None, index: RuleIndex | None = None) -> None:
        """`index`: the compiled rules of an earlier NodeScanner, reused (compiling them costs more
        than reading a node's logs)."""
        super().__init__(() if index is not None else rules)
        if index is not None:
            self.index = index
        self.facts = NodeFacts()
        self._roles = roles()
        self._last: dict[str, Stamp] = {}

    def feed_block(self, data: bytes, source: str = "", start: int = 0, end: int | None = None) -> None:
        super().feed_block(data, source, start, end)
        n = len(data) if end is None else end
        f = self.facts
        present = _present(data, start, n)
        if not present:
            return
        for _id, kw, rx in self._roles.own:
            if kw not in present:
                continue
            for m in rx.finditer(data, start, n):
                g = m.groupdict()
                if g.get("rank") is not None and (len(f.ranks) < MAX_IDS or int(g["rank"]) in f.ranks):
                    f.ranks[int(g["rank"])] = f.ranks.get(int(g["rank"]), 0) + 1
                if g.get("ip") and (len(f.addresses) < MAX_IDS or g["ip"].decode() in f.addresses):
                    ip = g["ip"].decode()
                    f.addresses[ip] = f.addresses.get(ip, 0) + 1
        for pid, kw, rx in self._roles.peers:
            if kw not in present:
                continue
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

    def _record(self, hits: Any, stamp: Stamp | None, source: str, key: str = "") -> None:
        super()._record(hits, stamp if stamp is not None else self._last.get(source), source, key)

    def _record_device(self, faults: Any, p: Any, source: str) -> None:
        if p.stamp is None and self._last.get(source) is not None:
            p = replace(p, stamp=self._last[source])  # a fault line without its own time: the last one seen
        super()._record_device(faults, p, source)


@lru_cache(maxsize=1)
def _keyword_db() -> tuple[Any, tuple[bytes, ...]] | None:
    """A Hyperscan database of the roles' keywords (the `fast` extra, as triage's pre-filter):
    one pass over a block finds them all, some 30 times faster than a search per keyword."""
    kws = tuple(sorted(roles().keywords))
    try:
        import hyperscan as hs

        db = hs.Database(mode=hs.HS_MODE_BLOCK)
        db.compile(
            expressions=[re.escape(k) for k in kws],
            ids=list(range(len(kws))),
            elements=len(kws),
            flags=[hs.HS_FLAG_SINGLEMATCH] * len(kws),
        )
    except Exception:  # noqa: BLE001 - not installed, or a CPU / build it cannot run on: search per keyword
        return None
    return db, kws


def _present(data: bytes, start: int, end: int) -> set[bytes]:
    """The roles' keywords found in data[start:end]."""
    hs = _keyword_db()
    if hs is None:
        return {kw for kw in roles().keywords if data.find(kw, start, end) >= 0}
    db, kws = hs
    found: set[bytes] = set()

    def seen(i: int, _f: int, _t: int, _fl: int, _ctx: Any) -> None:
        found.add(kws[i])

    db.scan(data[start:end] if start or end != len(data) else data, match_event_handler=seen)
    return found


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
