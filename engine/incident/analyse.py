"""From each node's triage to one incident: aligned timeline, first node to fail, propagation.

How the first node is chosen (docs/triage.md, "Across nodes"):

1. Each node is triaged alone (engine.incident.nodescan). Its events are sorted into its own
   failures ("cause": a specific error that is no wait on a peer) and its waits on peers ("wait":
   the HCCL / collective timeouts of roles.yaml), with the peers those timeouts named (rank, IP,
   port), resolved to nodes through the ranks and addresses each node's logs (or the cluster
   manifest) say are its own.
2. Blame: a node that waited on a peer points at the peer's node. Following the pointers from a
   waiting node ends at a node that waits on no one (or whose own failure came before its first
   wait): that node is a root. Several roots are independent failures. A peer no input holds (a
   node that logged nothing, or was never collected) is a root by itself when the timeouts name
   it.
3. Nodes that failed on their own and that no one names are roots too; a waiting node that named
   no peer is put under the earliest root.
4. Roots are ordered by the aligned time of what started them; the first is "the first to fail".
   Times are aligned with the collector's measured clock offsets when the manifest has them, else
   the logs' own stamps are compared as printed (and the report says so).
"""

from __future__ import annotations

import calendar
import os
import re
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

from engine.i18n import _
from engine.incident.inputs import NodeInput, gather
from engine.incident.model import IncidentReport, Link, NodeEvent, NodeSummary, Peer, Root
from engine.incident.nodescan import NodeScanner, roles
from engine.severity import rank as severity_rank
from engine.triage.model import IssueSummary
from engine.triage.readers import scan_paths
from engine.triage.rules import Rule, load_rules

MAX_EVENTS_PER_NODE = 40  # the timeline keeps a node's first this many issues
_ERROR = severity_rank("error")
_STAMP = re.compile(r"(?:(\d{4})-)?(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?$")
Progress = Callable[[str], None]


def to_seconds(text: str | None, year: int) -> float | None:
    """A triage time stamp (`2026-05-01 10:58:51.789768` or vLLM's `05-01 10:58:51`) as seconds
    since the epoch, read as UTC (every node's stamps the same way, so differences are right)."""
    if not text:
        return None
    m = _STAMP.match(text)
    if not m:
        return None
    y, mo, d, hh, mm, ss, frac = m.groups()
    try:
        base = calendar.timegm((int(y) if y else year, int(mo), int(d), int(hh), int(mm), int(ss), 0, 0, 0))
    except (ValueError, OverflowError):
        return None
    return base + (float("0." + frac) if frac else 0.0)


def _role(issue: IssueSummary, waits: frozenset[str]) -> str:
    if issue.id in waits:
        return "wait"
    if severity_rank(issue.severity) < _ERROR:
        return "context"
    if issue.kind == "symptom":  # even one triage says is "likely one of" (an engine death): it follows
        return "consequence"
    if issue.likely:
        return "likely"
    return "cause" if issue.names_cause() else "consequence"


class _Scanned:
    """What is kept of one node once its logs were read: small, whatever the logs' size."""

    def __init__(self, node: NodeInput, scanner: NodeScanner, issues: list[IssueSummary], report) -> None:  # noqa: ANN001
        self.node = node
        self.issues = issues[:MAX_EVENTS_PER_NODE]
        self.lines = report.lines
        self.inputs = len(report.inputs)
        self.unreadable = tuple(report.unreadable[:5])
        rc = report.root_cause()
        self.root_cause = rc.id if rc else None
        f = scanner.facts
        self.ranks = tuple(sorted(set(node.ranks) | set(f.ranks)))
        self.addresses = tuple(dict.fromkeys([*node.addresses, *sorted(f.addresses)]))
        self.peers = list(f.peers.values())
        self.years = [int(i.first_seen[:4]) for i in issues if i.first_seen and i.first_seen[4:5] == "-"]


def triage_cluster(
    paths: Sequence[str] = (),
    named: Sequence[tuple[str, str]] = (),
    *,
    rules: Sequence[Rule] | None = None,
    progress: Progress | None = None,
    workdir: str | os.PathLike[str] | None = None,
) -> IncidentReport:
    """Read every node (one at a time: memory does not grow with the number of nodes) and build
    the incident report."""
    import shutil

    tmp = Path(tempfile.mkdtemp(prefix=".ascendctl-incident-", dir=workdir))
    try:
        got = gather(list(paths), list(named), tmp)
        rules = load_rules() if rules is None else rules
        scanned: list[_Scanned] = []
        index = None
        for node in got.nodes:
            if progress:
                progress(_("node {node}").format(node=node.name))
            scanner = NodeScanner(rules, index)
            index = scanner.index
            report = scan_paths(list(node.files), scanner=scanner) if node.files else scanner.report()
            scanned.append(_Scanned(node, scanner, report.issues, report))
            del scanner, report
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return build_report(scanned, got.problems, rules)


def build_report(scanned: list[_Scanned], problems: list[str], rules: Sequence[Rule]) -> IncidentReport:
    waits = roles().waits
    years = Counter(y for s in scanned for y in s.years)
    year = years.most_common(1)[0][0] if years else 1970
    offsets = any(s.node.offset_s is not None for s in scanned)
    notes: list[str] = []
    if offsets:
        clock = _("aligned with the clock offsets the collector measured (manifest)")
        missing = [s.node.name for s in scanned if s.node.offset_s is None]
        if missing:
            no_offset = _("no clock offset recorded for {nodes}: their stamps are taken as printed")
            notes.append(no_offset.format(nodes=", ".join(missing)))
    else:
        clock = _("the logs' own time stamps, compared as printed (no clock offsets known)")
    if not years:
        notes.append(_("no log printed a year; stamps are compared within one year"))

    # 1. Per-node events, aligned.
    events: list[NodeEvent] = []
    raw_first: list[tuple[float, str]] = []
    per_node: dict[str, list[NodeEvent]] = {}
    for s in scanned:
        off = s.node.offset_s or 0.0
        evs = []
        for i in s.issues:
            local = to_seconds(i.first_seen, year)
            role = _role(i, waits)
            ev = NodeEvent(
                s.node.name,
                i.id,
                i.title,
                i.severity,
                role,
                i.first_seen,
                None if local is None else local - off,
                i.count,
                i.example,
                tuple(c.rule or c.cause for c in i.likely),
                i.code,
            )
            evs.append(ev)
            if local is not None and role in ("cause", "likely"):
                raw_first.append((local, s.node.name))
        per_node[s.node.name] = evs
        events.extend(evs)

    def first(evs: list[NodeEvent], role: str) -> NodeEvent | None:
        cands = [e for e in evs if e.role == role]
        timed = [e for e in cands if e.at is not None]
        if timed:
            return min(timed, key=lambda e: e.at)  # type: ignore[arg-type, return-value]
        return cands[0] if cands else None

    # 2. Who is which rank / address; what each node waited on.
    owner_rank: dict[int, str] = {}
    owner_ip: dict[str, str] = {}
    for s in scanned:
        for r in s.ranks:
            owner_rank.setdefault(r, s.node.name)
        for a in s.addresses:
            owner_ip.setdefault(a, s.node.name)
    summaries: list[NodeSummary] = []
    edges: dict[str, Counter[str]] = {}
    evidence: dict[tuple[str, str], str] = {}
    for s in scanned:
        name = s.node.name
        peers = []
        for p in s.peers:
            target = (owner_rank.get(p.rank) if p.rank is not None else None) or (owner_ip.get(p.ip) if p.ip else None)
            if target is None and p.ip:
                target = owner_ip.get(p.ip)
            peer = Peer(p.rank, p.ip, p.port, p.via, p.count, target)
            peers.append(peer)
            if target == name:
                continue  # a rank of this node waited on another rank of the same node
            key = target or f"@{peer.label()}"
            edges.setdefault(name, Counter())[key] += p.count
            evidence.setdefault((name, key), f"{peer.label()} ({p.via})")
        evs = per_node[name]
        status = s.node.status if s.node.status != "ok" else ("ok" if s.node.files else "no logs")
        summaries.append(
            NodeSummary(
                name,
                s.node.origin,
                status,
                "offset" if s.node.offset_s is not None else "own",
                s.node.offset_s,
                s.ranks,
                s.addresses,
                s.inputs,
                s.lines,
                _own_failure(evs, first),
                first(evs, "wait"),
                tuple(peers),
                s.root_cause,
                s.unreadable,
            )
        )
    by_name = {n.name: n for n in summaries}

    # 3. Follow the blame to the roots.
    def own_first(n: NodeSummary) -> bool:
        """Its own failure came before its first wait (or it did not wait at all)."""
        if n.cause is None:
            return False
        if n.first_wait is None or n.first_wait.at is None or n.cause.at is None:
            return True
        return n.cause.at <= n.first_wait.at

    def root_of(name: str) -> str | None:
        path = [name]
        cur = name
        while True:
            n = by_name.get(cur)
            if n is not None and own_first(n):
                return cur
            out = edges.get(cur)
            if not out:
                return cur if n is not None and (n.cause or cur != name) else None
            nxt = max(out, key=lambda t: (out[t], -_t(by_name.get(t))))
            if nxt.startswith("@") or nxt not in by_name:
                return nxt
            if nxt in path:  # a cycle: the one that failed on its own earliest, else where it closed
                inside = [by_name[x] for x in path[path.index(nxt) :]]
                withcause = [x for x in inside if x.cause is not None]
                return min(withcause, key=_t).name if withcause else nxt
            path.append(nxt)
            cur = nxt

    groups: dict[str, list[str]] = {}
    unplaced: list[str] = []
    for n in summaries:
        if n.cause is None and n.first_wait is None:
            continue
        r = root_of(n.name)
        if r is None:
            unplaced.append(n.name)
        else:
            groups.setdefault(r, [])
            if n.name != r:
                groups[r].append(n.name)

    def root_time(r: str) -> float:
        n = by_name.get(r)
        if n is not None and n.cause is not None and n.cause.at is not None:
            return n.cause.at
        # a root that logged nothing: just before the first timeout that named it
        waits_at = [by_name[m].first_wait.at for m in groups[r] if by_name[m].first_wait and by_name[m].first_wait.at]
        return min(waits_at) - 1e-3 if waits_at else float("inf")

    order = sorted(groups, key=lambda r: (root_time(r), -len(groups[r])))
    if unplaced and order:
        groups[order[0]].extend(unplaced)  # timeouts that named no peer: put under the first failure
        for u in unplaced:
            evidence.setdefault((u, order[0]), _("no peer named (a timeout only)"))
    elif unplaced:
        only = _("only timeouts, and none names a peer: {nodes} waited on a node not among the inputs")
        notes.append(only.format(nodes=", ".join(unplaced)))

    # 4. Roots, why, and the chain.
    roots: list[Root] = []
    chain: list[Link] = []
    for idx, r in enumerate(order):
        members = groups[r]
        n = by_name.get(r)
        blamers = tuple(m for m in members if r in edges.get(m, {}))
        ev = n.cause if n is not None else None
        why = _why(r, n, ev, blamers, members, by_name, evidence, clock, raw_first, idx, order)
        affected = (r, *members) if n is not None else tuple(members)
        named = {
            p.rank
            for m in members
            for p in by_name[m].waits_on
            if p.rank is not None and (p.node or f"@{p.label()}") == r
        }
        ranks = tuple(sorted(named)) or (n.ranks if n is not None and len(n.ranks) == 1 else ())
        roots.append(
            Root(r.lstrip("@") if n is None else r, ev, why, blamers, affected, in_inputs=n is not None, ranks=ranks)
        )
        chain.extend(_links(r, n, members, edges, evidence, by_name, rules))
    events.sort(key=lambda e: (e.at is None, e.at or 0.0, e.node))
    report = IncidentReport(summaries, events, roots, chain, clock, list(problems), notes)
    return replace(report, chain=[*explained_on_node(report, rules), *chain])


def _own_failure(evs: list[NodeEvent], first: Callable[[list[NodeEvent], str], NodeEvent | None]) -> NodeEvent | None:
    """A node's own failure: a named cause before a "likely one of"; a symptom (an engine death,
    which triage says is likely one of several causes) only on a node that shows nothing else,
    no wait on a peer included."""
    found = first(evs, "cause") or first(evs, "likely")
    if found is None and first(evs, "wait") is None:
        found = first([e for e in evs if e.role == "consequence" and e.likely], "consequence")
    return found


def _t(n: NodeSummary | None) -> float:
    if n is None or n.cause is None or n.cause.at is None:
        return float("inf")
    return n.cause.at


def _clock_text(at: float) -> str:
    import time

    frac = f"{at % 1:.6f}"[1:] if at % 1 else ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at)) + frac


def _fmt_dt(seconds: float) -> str:
    return _("{seconds:.0f} s").format(seconds=seconds) if seconds >= 1 else f"{seconds * 1000:.0f} ms"


def _why(r, n, ev, blamers, members, by_name, evidence, clock, raw_first, idx, order) -> str:  # noqa: ANN001, PLR0913
    parts = []
    if blamers:
        said: dict[str, list[str]] = {}
        for b in blamers:
            said.setdefault(evidence.get((b, r), "?"), []).append(b)
        more = _("{nodes} and more")
        named = _("; ").join(
            f"{more.format(nodes=', '.join(bs[:6])) if len(bs) > 6 else ', '.join(bs)}: {ev_}"
            for ev_, bs in said.items()
        )
        blamed = _("the timeouts of {count} node(s) name it as the peer they waited for ({evidence})")
        parts.append(blamed.format(count=len(blamers), evidence=named))
    if n is None:
        parts.append(_("no input holds it: its node logged nothing or was not collected"))
    elif ev is None and n.status not in ("ok", "no logs"):
        parts.append(
            _("its logs were not collected ({status}): read them on the node itself first").format(status=n.status)
        )
    elif ev is None:
        parts.append(
            _(
                "its own logs hold no error ({status}): it never reached the collective, e.g. never started listening"
            ).format(status=n.status)
        )
    else:
        waits = [by_name[m].first_wait.at for m in members if by_name[m].first_wait and by_name[m].first_wait.at]
        when = ""
        if ev.at is not None and waits:
            lead = min(waits) - ev.at
            if lead > 0:
                when = _(", {lead} before the first timeout elsewhere").format(lead=_fmt_dt(lead))
        shifted = ""
        if n.offset_s and ev.at is not None:
            shifted = _(" ({time} on the collector's clock: this node's runs {offset} s off)").format(
                time=_clock_text(ev.at), offset=f"{n.offset_s:+.3g}"
            )
        at = _("at {time}").format(time=ev.local) if ev.local else _("(no time stamp on its line)")
        parts.append(
            _("its own log shows {issue} ({title}) {at}{shifted}{when}").format(
                issue=ev.issue, title=event_title(ev), at=at, shifted=shifted, when=when
            )
        )
        if ev.likely:
            parts.append(
                _(
                    "that is a symptom of several causes, likely one of: {causes} (ascendctl triage --explain "
                    "{issue} says what decides)"
                ).format(causes=_("; ").join(ev.likely), issue=ev.issue)
            )
        if not blamers:
            parts.append(_("no timeout names a peer, so the order is by time: clocks {clock}").format(clock=clock))
    if idx > 0:
        parts.append(_("independent of {node}: no timeout links the two").format(node=order[0].lstrip("@")))
    if idx == 0 and raw_first and n is not None:
        raw = min(raw_first)[1]
        if raw != r:
            parts.append(
                _("by the raw stamps {raw} looks first; its clock and {node}'s differ (see the offsets)").format(
                    raw=raw, node=r
                )
            )
    return _("; ").join(parts)


def event_title(ev: NodeEvent) -> str:
    """A node event's title in the messages' language (the knowledge base's Chinese for a bundled
    rule; the English as it is under --json, for an operator's own rule or a code)."""
    from engine.i18n import DEFAULT, message_language

    lang = message_language()
    if lang == DEFAULT:
        return ev.title
    from engine.triage.localize import rule_text

    return rule_text(ev.issue, "title", ev.title, lang)


def _links(r, n, members, edges, evidence, by_name, rules) -> list[Link]:  # noqa: ANN001
    out: list[Link] = []
    cause = n.cause.issue if n is not None and n.cause is not None else ""
    # Across nodes: breadth first from the root along reversed wait edges.
    frontier = [r]
    done = {r}
    while frontier:
        nxt = []
        for c in frontier:
            for m in members:
                if m in done or c not in edges.get(m, {}) and not (c == r and evidence.get((m, r))):
                    continue
                cn = by_name.get(c)
                c_issue = (
                    (cn.cause.issue if cn and cn.cause else (cn.first_wait.issue if cn and cn.first_wait else ""))
                    if cn
                    else cause
                )
                mw = by_name[m].first_wait
                out.append(Link(c.lstrip("@"), c_issue, m, mw.issue if mw else "", evidence.get((m, c), "")))
                done.add(m)
                nxt.append(m)
        frontier = nxt
    return out


def explained_on_node(report: IncidentReport, rules: Sequence[Rule]) -> list[Link]:
    """Within each node: its first failure -> the other issues of the same node it `explains` (a
    rule's `explains:`, or for a serious device fault faultcodes.yaml's)."""
    from engine.triage.faultcodes import triage_explains

    explains = {x.id: set(x.explains) for x in rules if x.explains}
    device = set(triage_explains())
    by_node: dict[str, set[str]] = {}
    for e in report.timeline:
        by_node.setdefault(e.node, set()).add(e.issue)
    out = []
    for n in report.nodes:
        if n.cause is None:
            continue
        behind = device if n.cause.code else explains.get(n.cause.issue, set())
        for other in sorted(behind & by_node.get(n.name, set())):
            out.append(Link(n.name, n.cause.issue, n.name, other, "explains"))
    return out


__all__ = ["IncidentReport", "build_report", "to_seconds", "triage_cluster"]
