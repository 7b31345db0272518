"""The streaming scanner: lines in, grouped known issues and unknown-error templates out.

Events, not lines: a Python traceback (frames, the exception line and the torch_npu / CANN
report that continues its message) is one event, so a failure printed as forty lines counts
once. Interleaved processes are kept apart by their log prefix (`(Worker_TP0 pid=9) `).
Memory is bounded: counters per rule, a capped template table, a capped set of open events.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from engine.system.follow import MAX_LINE
from engine.triage.codes import CodeInfo, find_codes
from engine.triage.devicefaults import DeviceCodeReader, fault_id
from engine.triage.formats import ERROR_LEVELS, Parsed, Stamp, parse_line
from engine.triage.matcher import RuleIndex
from engine.triage.miner import TemplateMiner
from engine.triage.model import Candidate, IssueSummary, TriageReport, severity_rank
from engine.triage.rules import Rule, load_rules

MAX_OPEN_EVENTS = 256
MAX_EVENT_LINES = 2000
MAX_MESSAGE_LINES = 60  # lines after the exception line that still belong to its message
STALE_LINES = 200  # a raw event that got none of the last this many lines of its input is over
MAX_SOURCES = 5
MAX_PROCESSES = 1024  # processes whose first error is remembered for the root line
EXAMPLE_CHARS = 500
# Ranking tiers (docs/triage.md, "What leads a report"): specific causes of error severity or
# above, then generic codes and wrapper rules, then consequences, then warnings and info.
_SPECIFIC, _GENERIC, _CONSEQUENCE, _CONTEXT = range(4)
_ERROR = severity_rank("error")
_TRACEBACK = "Traceback (most recent call last)"
_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")
# Lines that open a torch_npu / CANN error report printed outside a Python traceback.
_REPORT_OPENER = re.compile(
    r"\s*(?:\w+Error: .*NPU function error|RuntimeError: The Inner error is reported|(?:CANN error: )?E[0-9A-Z]\d{4}: Inner Error"
    r"|\[ERROR\] \d{4}-\d\d-\d\d-\d\d:\d\d:\d\d \(PID:\d+, Device:-?\d+, RankID:-?\d+\) ERR\d{5}|\[Error\]: |-+$)"
)
# Lines that continue such a report (or the message of a traceback's exception).
_REPORT_LINE = re.compile(
    r"(?:\s|E[0-9A-Z]\d{4}\b|\[Error\]:|\[ERROR\] \d{4}-|TraceBack \(most recent|Since the operator is called"
    r"|Note: ASCEND_LAUNCH_BLOCKING|\[PID: \d+\]|Exception raised from|frame #\d+|- Ascend Error Message|-+$)"
)
_PLOG_TABLE_OPENER = "LINK_ERROR_INFO"
_PLOG_TABLE_ROW = re.compile(r"\[[^\]]+:\d+\] ?\[\d+\]\s+[|_]")
# A CANN report's opener that carries no detail: the line after it says what failed.
_BARE_INNER = re.compile(r"(?:CANN error: )?E[0-9A-Z]\d{4}: Inner Error!?\s*$")
# Error lines that are pieces of something larger (a traceback frame, a caret line): no template.
_FRAGMENT = re.compile(r"\s|[\^~]+$")
# Lines that are errors by their shape though they carry no level: an exception line (also when
# the log starts mid-traceback), argparse's `prog: error: ...` (its `usage:` lines are not events),
# a fatal signal or a core dump.
_SHAPED_ERROR = re.compile(
    r"(?:[A-Za-z_][\w.]*(?:Error|Exception): |[\w./ -]+: error: |Segmentation fault|.*\(core dumped\)"
    r"|\*\*\* SIG[A-Z]+ received)"
)


def _opens_block(p: Parsed) -> str:
    if _PLOG_TABLE_OPENER in p.payload and p.src is not None:
        return "table"
    if _REPORT_OPENER.match(p.payload):
        return "report"
    return ""


@dataclass
class _Hit:
    kind: str
    title: str
    severity: str
    cause: str
    fix: str
    links: tuple[str, ...]
    count: int = 0
    first: Stamp | None = None
    last: Stamp | None = None
    example: str = ""
    sources: list[str] = field(default_factory=list)
    explains: tuple[str, ...] = ()
    generic: str = ""
    seq: int = 0  # the event it was first seen in (scan order): earlier errors are likelier causes
    device: tuple[int | None, str, str, str] | None = None  # a device fault: (npu, code, action, verb)
    likely: tuple[Candidate, ...] = ()
    likely_when: str = "always"
    after_error: bool = False  # its process had logged an error event before its first line


@dataclass
class _Event:
    source: str
    key: str
    src: str | None  # the vLLM [file:line] or plog module of the record that opened it
    level: str | None
    raw: bool  # its lines do not all carry an error marker: every line must be read while open
    kind: str  # "traceback" | "report" (torch_npu / CANN error report) | "table" (plog table)
    phase: str = "frames"  # "frames" -> "message" (after the exception line)
    lines: int = 0
    last_at: int = 0  # the source's handled-line count when it last got a line
    message_lines: int = 0
    stamp: Stamp | None = None
    first_payload: str = ""
    first_line: str = ""
    head_generic: bool = False  # its opener / exception line matched only catch-alls and wrappers
    detail: str = ""  # its first CANN code line that says something (not a bare `EZ9999: Inner Error!`)
    exception: str = ""
    exception_line: str = ""
    # a traceback's last `File "...", line N, in f` and its code line, while no exception line came
    last_frame: str = ""
    hits: dict[str, tuple[Rule | CodeInfo, str]] = field(default_factory=dict)
    after_stop: bool = False  # opened after a requested stop of its input: the engine's shutdown


class Scanner:
    """Feed lines (or blocks of bytes), then ask for the report; `report()` can be called at any
    time (a live view) and does not disturb the scan."""

    def __init__(
        self,
        rules: Sequence[Rule] | None = None,
        *,
        engine: str = "auto",
        device_ids: Mapping[int, Any] | None = None,  # logic id -> ChipIds, from `npu-smi info -m`
    ) -> None:
        self.index = RuleIndex(load_rules() if rules is None else rules, engine=engine)
        self._hits: dict[str, _Hit] = {}
        self._miner = TemplateMiner()
        self._open: dict[tuple[str, str], _Event] = {}
        self._raw_open: dict[str, int] = {}
        self._handled: dict[str, int] = {}  # lines looked at per source (the clock of STALE_LINES)
        # The first error event of each process (source, log prefix), and the process that failed
        # last: its first error is the most likely root line when no rule names the problem.
        self._first_error: dict[tuple[str, str], str] = {}
        self._parts: frozenset[int] | None = None  # pre-filter pieces of the line being handled
        self._last_failing: tuple[str, str] | None = None
        # Inputs in which a stop was asked for (a `stop` rule's line), and the error events seen
        # after it that were taken as the engine's shutdown (vLLM logs EngineDeadError on every
        # SIGINT / SIGTERM it is stopped with): they name no issue and no root line.
        self._stopped: set[str] = set()
        self._shutdown_events = 0
        self._device = DeviceCodeReader(device_ids)  # device fault codes (npu-smi health, device-OS logs, dmesg)
        self.lines = 0
        self.events = 0
        self.bytes = 0

    # -- input -----------------------------------------------------------------------------
    def feed(self, line: str, source: str = "") -> None:
        """One line of text (with or without its newline)."""
        self.lines += 1
        self.bytes += len(line)
        line = line.rstrip("\r\n")[:MAX_LINE]
        if self._raw_open.get(source) or self.index.candidate(line):
            self._handle(line, source)

    def feed_lines(self, lines: Iterable[str], source: str = "") -> None:
        for line in lines:
            self.feed(line, source)

    def feed_block(self, data: bytes, source: str = "", start: int = 0, end: int | None = None) -> None:
        """Whole lines of bytes, data[start:end] (ending at a newline, except at the end of an
        input). Only the lines the pre-filter hits are decoded; this is the fast path the file
        readers use, and it never copies the block. When the pre-filter engine says which piece
        matched where (Hyperscan), each line is tried only against the rules of its pieces."""
        n = len(data) if end is None else end
        self.bytes += n - start
        self.lines += data.count(b"\n", start, n) + (0 if n <= start or data[n - 1] == 10 else 1)
        hits = self.index.hits(data, start, n)
        nh = len(hits)
        j = 0  # the first hit not yet attributed to a line
        pos = start

        def take(first: int, stop: int) -> None:
            """Decode and handle the line data[first:stop], with the pieces found in it."""
            nonlocal j
            parts: set[int] = set()
            while j < nh and hits[j][0] < stop:
                if hits[j][0] >= first:
                    parts.add(hits[j][1])
                j += 1
            cut = min(stop, first + MAX_LINE)
            self._parts = None if -1 in parts or cut < stop else frozenset(parts)
            self._handle(_decode(data[first:cut]), source)
            self._parts = None

        while True:
            while self._raw_open.get(source) and pos < n:
                # an open traceback without level markers: its lines carry no keyword, read them all
                stop = data.find(b"\n", pos, n)
                stop = n if stop < 0 else stop
                take(pos, stop)
                pos = stop + 1
            while j < nh and hits[j][0] < pos:
                j += 1  # a hit in a line already handled
            if j >= nh:
                break
            hit = hits[j][0]
            first = max(data.rfind(b"\n", pos, hit) + 1 or pos, pos)
            stop = data.find(b"\n", hit, n)
            stop = n if stop < 0 else stop
            take(first, stop)
            pos = stop + 1

    def end_source(self, source: str) -> None:
        """The input ended: events still open in it are complete."""
        for k in [k for k in self._open if k[0] == source]:
            self._close(self._open.pop(k))

    # -- events ----------------------------------------------------------------------------
    def _handle(self, line: str, source: str) -> None:
        n = self._handled[source] = self._handled.get(source, 0) + 1
        if self._raw_open.get(source):
            self._expire(source, n)
        p = parse_line(line)
        faults = self._device.read(line, source)
        if faults:
            self._record_device(faults, p, source)
        k = (source, p.key)
        ev = self._open.get(k)
        if ev is not None:
            if self._continue(ev, p, line):
                return
            self._close(self._open.pop(k))
        payload = p.payload.strip()
        if payload.startswith(_TRACEBACK):
            self._start(k, p, line, kind="traceback")
            return
        if payload.startswith(_CHAIN):
            return  # the link between two tracebacks of one chain: not an error of its own
        kind = _opens_block(p)
        if kind:
            self._start(k, p, line, kind=kind)
            return
        self._single(line, p, source)

    def _expire(self, source: str, n: int) -> None:
        """Close raw events that got no line for a while: their process went quiet, and reading
        every line on their behalf would turn a block scan into a line-by-line one."""
        for k in [k for k, ev in self._open.items() if ev.raw and k[0] == source and n - ev.last_at > STALE_LINES]:
            self._close(self._open.pop(k))

    def _continue(self, ev: _Event, p: Parsed, line: str) -> bool:
        """Add the line to the open event if it belongs to it."""
        text = p.payload
        stripped = text.strip()
        if stripped.startswith(_TRACEBACK) or stripped.startswith(_CHAIN) or ev.lines >= MAX_EVENT_LINES:
            return False
        if ev.kind == "traceback" and ev.phase == "frames":
            if text[:1] in (" ", "\t") or not stripped:
                if stripped.startswith('File "'):
                    ev.last_frame = stripped
                elif ev.last_frame and stripped and "\n" not in ev.last_frame and not _FRAGMENT.match(stripped):
                    ev.last_frame += "\n" + stripped  # the frame's code line
                self._add(ev, p, line)
                return True
            ev.phase = "message"  # the exception line; its message may go on over more lines
            ev.exception = stripped
            ev.exception_line = line
            self._add(ev, p, line)
            return True
        if not stripped or ev.message_lines >= MAX_MESSAGE_LINES:
            return False
        if ev.kind == "table":
            belongs = p.src == ev.src and _PLOG_TABLE_ROW.match(text) is not None
        elif ev.raw:
            belongs = p.src is None and _REPORT_LINE.match(text) is not None
        else:  # the same vLLM log record: same [file:line] and level
            belongs = p.src == ev.src and p.level == ev.level
        if belongs:
            ev.message_lines += 1
            self._add(ev, p, line)
        return belongs

    def _start(self, k: tuple[str, str], p: Parsed, line: str, kind: str) -> None:
        raw = kind != "table" and p.level not in ERROR_LEVELS
        ev = _Event(source=k[0], key=k[1], src=p.src, level=p.level, raw=raw, kind=kind, stamp=p.stamp)
        ev.after_stop = k[0] in self._stopped
        ev.first_payload = p.payload.strip()
        ev.first_line = line
        if kind != "traceback":
            ev.phase = "message"
        if raw:
            self._raw_open[k[0]] = self._raw_open.get(k[0], 0) + 1
        if len(self._open) >= MAX_OPEN_EVENTS:
            oldest = next(iter(self._open))
            self._close(self._open.pop(oldest))
        self._open[k] = ev
        self._add(ev, p, line)

    def _add(self, ev: _Event, p: Parsed, line: str) -> None:
        ev.lines += 1
        ev.last_at = self._handled.get(ev.source, 0)
        if ev.stamp is None:
            ev.stamp = p.stamp
        parts = self._parts
        if parts is None and not self.index.candidate(line):
            return
        payload = p.payload.strip()
        rules = self.index.matching(line, parts)
        codes = find_codes(line) if parts is None or self.index.may_hold_code(parts) else []
        cann = any(c.kind == "cann" for c in codes)
        rules, codes = self.index.named([r for r in rules if r.holds(line)], codes)
        for rule in rules:
            ev.hits.setdefault(rule.id, (rule, payload))
        for info in codes:
            seen = ev.hits.get(info.issue_id)
            if seen is None or seen[1].endswith("Inner Error!"):  # prefer the detail line as example
                ev.hits[info.issue_id] = (info, payload)
        if ev.lines == 1 or line is ev.exception_line:
            found = [*rules, *codes]
            ev.head_generic = bool(found) and all(w.generic or (isinstance(w, Rule) and w.symptom) for w in found)
        if not ev.detail and cann and not _BARE_INNER.match(payload):
            ev.detail = payload

    def _close(self, ev: _Event) -> None:
        if ev.raw:
            left = self._raw_open.get(ev.source, 1) - 1
            if left:
                self._raw_open[ev.source] = left
            else:
                self._raw_open.pop(ev.source, None)
        if ev.after_stop:
            kept = _past_stop(ev.hits)
            if not kept and (ev.hits or ev.level in ERROR_LEVELS or ev.exception):
                self._shutdown_events += 1
                return
            ev.hits = kept
        self._record(ev.hits, ev.stamp, ev.source, ev.key)
        # A traceback cut off before its exception line (the process died, the log was cut): its
        # last frame is where it failed, which says more than "Traceback (most recent call last)".
        cut = "" if ev.exception or not ev.last_frame else "traceback cut off at " + ev.last_frame.replace("\n", ": ")
        if not ev.hits:
            self._miner.add(ev.exception or cut or ev.first_payload, ev.exception_line or ev.first_line)
        if ev.kind != "table" and (ev.level in ERROR_LEVELS or ev.exception or _any_error(ev.hits)):
            text = ev.exception or cut or ev.first_payload
            if ev.detail and (ev.head_generic or _BARE_INNER.match(text)):
                text = ev.detail  # a wrapper or `EZ9999: Inner Error!` says nothing; the CANN detail does
            self._failed(ev.source, ev.key, text, ev.hits)

    def _single(self, line: str, p: Parsed, source: str) -> None:
        hits: dict[str, tuple[Rule | CodeInfo, str]] = {}
        payload = p.payload.strip()
        parts = self._parts
        codes = find_codes(line) if parts is None or self.index.may_hold_code(parts) else []
        rules, codes = self.index.named([r for r in self.index.matching(line, parts) if r.holds(line)], codes)
        for rule in rules:
            hits[rule.id] = (rule, payload)
        for info in codes:
            hits.setdefault(info.issue_id, (info, payload))
        if source in self._stopped:
            kept = _past_stop(hits)
            shaped = p.level in ERROR_LEVELS or _SHAPED_ERROR.match(payload)
            if not kept and (hits or (shaped and payload and not _FRAGMENT.match(p.payload))):
                self._shutdown_events += 1
                return
            hits = kept
        if any(isinstance(w, Rule) and w.stop for w, _ in hits.values()):
            self._stopped.add(source)
        if hits:
            self._record(hits, p.stamp, source, p.key)
            if p.level in ERROR_LEVELS or _any_error(hits) or _SHAPED_ERROR.match(payload):
                self._failed(source, p.key, payload, hits)  # a warning line is not where a failure starts
        elif (p.level in ERROR_LEVELS or _SHAPED_ERROR.match(payload)) and payload and not _FRAGMENT.match(p.payload):
            self.events += 1
            self._miner.add(payload, line)
            self._failed(source, p.key, payload, hits)

    def _failed(self, source: str, key: str, text: str, hits: dict[str, tuple[Rule | CodeInfo, str]]) -> None:
        """An error event of the process `key`: remember the first one, and that it failed last.
        Wrappers and consequences (symptom rules), notices (info: torch_npu's exit hook) and lines
        a warning explains (vllm-ascend logs the failed import of its kernels at ERROR and serves
        on) say nothing about the root: the warning is the answer only when no error follows."""
        if hits and all(
            (isinstance(w, Rule) and w.symptom) or w.severity in ("info", "warning") for w, _ in hits.values()
        ):
            return
        k = (source, key)
        if k not in self._first_error:
            if len(self._first_error) >= MAX_PROCESSES:
                return
            self._first_error[k] = text[:EXAMPLE_CHARS]
        self._last_failing = k

    def _record(
        self, hits: dict[str, tuple[Rule | CodeInfo, str]], stamp: Stamp | None, source: str, key: str = ""
    ) -> None:
        self.events += 1
        for hid, (what, example) in hits.items():
            acc = self._hits.get(hid)
            if acc is None:
                acc = self._hits[hid] = _new_hit(what, example)
                acc.seq = self.events
                acc.after_error = (source, key) in self._first_error
            acc.count += 1
            if stamp is not None:
                if acc.first is None or stamp.before(acc.first):
                    acc.first = stamp
                if acc.last is None or acc.last.before(stamp):
                    acc.last = stamp
            if source and source not in acc.sources and len(acc.sources) < MAX_SOURCES:
                acc.sources.append(source)

    def _record_device(self, faults: list[tuple[int | None, int]], p: Parsed, source: str) -> None:
        """Device fault codes a line shows: one issue per (NPU, code), named with its action."""
        from engine.triage.faultcodes import device_fault, triage_explains, triage_severity

        self.events += 1
        for npu, value in faults:
            hid = fault_id(npu, value)
            acc = self._hits.get(hid)
            if acc is None:
                fault = device_fault(value)
                where = f"NPU {npu}" if npu is not None else "NPU ?"
                severity = triage_severity(fault.action)
                acc = self._hits[hid] = _Hit(
                    kind="device",
                    title=f"{where}: {fault.headline()}",
                    severity=severity,
                    cause=fault.meaning or fault.means,
                    fix=fault.todo,
                    links=(fault.source,) if fault.source else (),
                    example=p.payload.strip()[:EXAMPLE_CHARS],
                    explains=triage_explains() if severity_rank(severity) >= _ERROR else (),
                    device=(npu, fault.code, fault.action, fault.verb),
                )
                acc.seq = self.events
            acc.count += 1
            if p.stamp is not None:
                if acc.first is None or p.stamp.before(acc.first):
                    acc.first = p.stamp
                if acc.last is None or acc.last.before(p.stamp):
                    acc.last = p.stamp
            if source and source not in acc.sources and len(acc.sources) < MAX_SOURCES:
                acc.sources.append(source)

    # -- output ----------------------------------------------------------------------------
    def report(self) -> TriageReport:
        """A snapshot: events still open count as if they ended now."""
        snapshot = copy.copy(self)
        snapshot._hits = {k: copy.copy(v) for k, v in self._hits.items()}
        for acc in snapshot._hits.values():
            acc.sources = list(acc.sources)
        snapshot._miner = copy.deepcopy(self._miner)
        snapshot._raw_open = dict(self._raw_open)
        snapshot._handled = dict(self._handled)
        snapshot._first_error = dict(self._first_error)
        snapshot._stopped = set(self._stopped)
        for ev in list(self._open.values()):
            snapshot._close(ev)
        return snapshot._build()

    def _build(self) -> TriageReport:
        issues = [
            IssueSummary(
                id=hid,
                title=h.title,
                severity=h.severity,
                count=h.count,
                first_seen=h.first.text() if h.first else None,
                last_seen=h.last.text() if h.last else None,
                cause=h.cause,
                fix=h.fix,
                links=h.links,
                example=h.example,
                sources=tuple(h.sources),
                kind=h.kind,
                generic=h.generic,
                npu=h.device[0] if h.device else None,
                code=h.device[1] if h.device else None,
                action=h.device[2] if h.device else None,
                verb=h.device[3] if h.device else None,
                likely=h.likely if h.likely_when == "always" or h.after_error else (),
            )
            for hid, h in self._hits.items()
        ]
        # Within a tier: the more severe first, a rule before a code (the rule reads the message, the
        # code only its number), then the one seen first (a failure's cause comes before its echoes).
        explained = {e for h in self._hits.values() for e in h.explains}
        seq = {hid: h.seq for hid, h in self._hits.items()}
        issues.sort(key=lambda i: (_tier(i, explained), -severity_rank(i.severity), i.kind == "code", seq[i.id], i.id))
        notes = []
        if self._shutdown_events:
            n = self._shutdown_events
            notes.append(
                f"{n} error event{'s' if n != 1 else ''} after a requested stop (EngineDeadError and the like) "
                "taken as the engine's shutdown, not as a failure"
            )
        return TriageReport(
            issues=issues,
            unknown=self._miner.templates(),
            lines=self.lines,
            events=self.events,
            bytes=self.bytes,
            notes=notes,
            root_line=self._first_error.get(self._last_failing) if self._last_failing else None,
        )


def _tier(issue: IssueSummary, explained: set[str]) -> int:
    """What leads a report: errors before warnings, a specific cause before a catch-all code or a
    wrapper, causes before consequences. A rule another seen rule `explains` (an argparse error
    behind the specific rejected flag, "HCCL init failed" behind EJ0001) counts as a consequence."""
    if severity_rank(issue.severity) < _ERROR:
        return _CONTEXT
    if issue.kind == "symptom" or issue.id in explained:
        return _CONSEQUENCE
    return _GENERIC if issue.generic else _SPECIFIC


def _past_stop(hits: dict[str, tuple[Rule | CodeInfo, str]]) -> dict[str, tuple[Rule | CodeInfo, str]]:
    """What still counts after a requested stop: not the consequences (engine dead, worker died,
    start-up failed), which a stop produces by itself; a specific cause still does."""
    return {k: v for k, v in hits.items() if not (isinstance(v[0], Rule) and v[0].symptom)}


def _any_error(hits: dict[str, tuple[Rule | CodeInfo, str]]) -> bool:
    return any(severity_rank(what.severity) >= _ERROR for what, _ in hits.values())


def _new_hit(what: Rule | CodeInfo, example: str) -> _Hit:
    if isinstance(what, Rule):
        kind = "symptom" if what.symptom else "rule"
        return _Hit(
            kind,
            what.title,
            what.severity,
            what.cause,
            what.fix,
            what.links,
            example=example[:EXAMPLE_CHARS],
            explains=what.explains,
            generic=what.generic,
            likely=what.likely,
            likely_when=what.likely_when,
        )
    return _Hit(
        kind="code",
        title=what.title,
        severity=what.severity,
        cause=what.meaning + (f"; generic: {what.generic}" if what.generic else ""),
        fix=what.fix,
        links=(),
        example=example[:EXAMPLE_CHARS],
        generic=what.generic,
    )


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").rstrip("\r")


def diagnose_lines(lines: Iterable[str], source: str = "", rules: Sequence[Rule] | None = None) -> TriageReport:
    """Scan an iterable of lines in one go (what `serve` calls on a crashed engine's log)."""
    scanner = Scanner(rules)
    scanner.feed_lines(lines, source)
    scanner.end_source(source)
    return scanner.report()
