"""Which lines deserve a closer look, and which rules they match.

Most lines of a big log (INFO stats, request logs, DEBUG plog chatter) match nothing. One
pre-filter (every rule's literal keywords, the error level markers, the shapes of error codes)
is run over whole blocks of bytes; only the lines it hits are decoded and checked against the
few rules whose keywords they contain.

Engines for the pre-filter, fastest first: Hyperscan (x86_64, the `fast` extra), RE2 (the
`fast` extra; with an RE2 Set of the same pieces it also says which pieces a candidate line
holds, like Hyperscan), Python's `re` (always there, e.g. on aarch64 without wheels). They find
the same lines; `ASCENDCTL_TRIAGE_ENGINE=hyperscan|re2|re` forces one.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Any, Sequence

from engine.triage.codes import CODE_LITERALS, CODE_LOOSE, CODE_REGEXES, CodeInfo
from engine.triage.devicefaults import DEVICE_LITERALS
from engine.triage.rules import Rule

ENGINES = ("hyperscan", "re2", "re")
# Lines that are errors by their level or shape even when no rule knows them.
LEVEL_MARKERS = (
    "ERROR",
    "CRITICAL",
    "FATAL",
    "Fatal Python error",
    "Traceback (most recent call last)",
    "Error: ",  # exception lines (`OSError: ...`) and argparse's `prog: error: ...` are events
    "Exception: ",
    ": error: ",
    "Segmentation fault",
    "core dumped",
    " received at time=",  # `*** SIGSEGV received at time=...`
)


def _import(name: str) -> Any:
    try:
        return __import__(name)
    except ImportError:
        return None


class _Hyperscan:
    """All pre-filter pieces in one Hyperscan database; matches come back as end offsets."""

    def __init__(self, hs: Any, parts: Sequence[str]) -> None:
        self._hs = hs
        self._db = hs.Database(mode=hs.HS_MODE_BLOCK)
        exprs = [p.encode("utf-8") for p in parts]
        self._db.compile(expressions=exprs, ids=list(range(len(exprs))), elements=len(exprs), flags=[0] * len(exprs))
        self._hits: list[int] = []

    def _on_match(self, _id: int, _start: int, end: int, _flags: int, _ctx: Any) -> None:
        self._hits.append(end - 1)

    def _on_match_id(self, id_: int, _start: int, end: int, _flags: int, _ctx: Any) -> None:
        self._pairs.append((end - 1, id_))

    def offsets(self, data: bytes, start: int, end: int) -> list[int]:
        self._hits = []
        self._db.scan(
            data if (start == 0 and end == len(data)) else data[start:end], match_event_handler=self._on_match
        )
        hits = sorted(set(self._hits))
        return [h + start for h in hits]

    def hits(self, data: bytes, start: int, end: int) -> list[tuple[int, int]]:
        """(offset, pattern id) of every match, sorted: the scan already knows which piece matched."""
        self._pairs: list[tuple[int, int]] = []
        self._db.scan(
            data if (start == 0 and end == len(data)) else data[start:end], match_event_handler=self._on_match_id
        )
        self._pairs.sort()
        return [(h + start, i) for h, i in self._pairs]


class _Regex:
    """RE2 or `re`: one combined pattern, searched repeatedly."""

    def __init__(self, compile_: Any, pattern: str) -> None:
        self._search = compile_(pattern.encode("utf-8")).search

    def offsets(self, data: bytes, start: int, end: int) -> list[int]:
        out = []
        pos = start
        search = self._search
        while pos < end:
            m = search(data, pos, end)
            if m is None:
                break
            out.append(m.start())
            nl = data.find(b"\n", m.end(), end)  # one hit per line is enough
            pos = end if nl < 0 else nl + 1
        return out


class _Re2Set(_Regex):
    """RE2 with a `re2.Set` of the same pieces: the combined pattern finds the candidate lines in
    the block, then the Set says which pieces each of those lines holds (RE2 Set Match returns
    pattern indices), so a line is tried only against its pieces' rules, as with Hyperscan."""

    def __init__(self, re2: Any, parts: Sequence[str], pattern: str) -> None:
        options = re2.Options()
        # The DFA of ~500 pieces: with RE2's 8 MiB default the combined pattern's DFA runs out of
        # memory and RE2 falls back to its NFA, some 50x slower (seen at 305 rules); the Set too.
        options.max_mem = 64 << 20
        super().__init__(lambda p: re2.compile(p, options), pattern)
        self._set = re2.Set.SearchSet(options)
        for piece in parts:
            self._set.Add(piece.encode("utf-8"))
        self._set.Compile()

    def hits(self, data: bytes, start: int, end: int) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        match = self._set.Match
        find, rfind = data.find, data.rfind
        for h in self.offsets(data, start, end):
            first = rfind(b"\n", start, h) + 1 or start
            stop = find(b"\n", h, end)
            ids = match(data[max(first, start) : end if stop < 0 else stop])
            if ids:
                out.extend((h, i) for i in ids)
            else:  # cannot say (should not happen): the line is checked against every rule
                out.append((h, -1))
        return out


class _Literals:
    """Pure Python: `bytes.find` per keyword (C speed each) instead of one big `re` alternation,
    which Python's engine tries position by position (100x slower). Lines found this way are
    confirmed with the exact pattern, so the answers equal the other engines'."""

    def __init__(self, literals: Sequence[str], loose: str, exact: str) -> None:
        self._literals = [s.encode("utf-8") for s in literals]
        self._loose = re.compile(loose.encode("utf-8"))
        self._exact = re.compile(exact.encode("utf-8"))

    def offsets(self, data: bytes, start: int, end: int) -> list[int]:
        hits: set[int] = set()
        find = data.find
        for lit in self._literals:
            pos = find(lit, start, end)
            while pos >= 0:
                hits.add(pos)
                nl = find(b"\n", pos, end)
                if nl < 0:
                    break
                pos = find(lit, nl + 1, end)
        for m in self._loose.finditer(data, start, end):
            hits.add(m.start())
        out = []
        last_line = -1
        for h in sorted(hits):
            first = data.rfind(b"\n", start, h) + 1 or start
            if first == last_line:
                continue
            stop = data.find(b"\n", h, end)
            if self._exact.search(data, max(first, start), end if stop < 0 else stop):
                out.append(h)
                last_line = first
        return out


class RuleIndex:
    """The rules, grouped by keyword, plus the pre-filter that finds candidate lines."""

    def __init__(self, rules: Sequence[Rule], engine: str = "auto") -> None:
        self.rules = tuple(rules)
        by_kw: dict[str, list[Rule]] = {}
        for rule in self.rules:
            for kw in rule.keywords:
                by_kw.setdefault(kw, []).append(rule)
        self._by_keyword = tuple((kw, tuple(rs)) for kw, rs in by_kw.items())
        self._by_kw = {kw: tuple(rs) for kw, rs in by_kw.items()}
        self._order = {r.id: n for n, r in enumerate(self.rules)}
        # A code that a rule declares (`codes:`) is that rule's failure: see `named`.
        self._fold: dict[str, Rule] = {c: r for r in self.rules for c in r.codes}
        # DEVICE_LITERALS: the lines that carry a device fault code, or the NPU an npu-smi answer is about
        literals = sorted(
            set(by_kw) | set(LEVEL_MARKERS) | set(CODE_LITERALS) | set(DEVICE_LITERALS), key=lambda s: (-len(s), s)
        )
        self._literals = literals
        self.parts = [re.escape(s) for s in literals] + list(CODE_REGEXES)
        # Per pre-filter piece: the (keyword, rules) it stands for, and whether it can start an
        # ACL / CANN code; a block scan that reports piece ids spares the per-line keyword loop.
        self._part_rules: tuple[tuple[tuple[str, tuple[Rule, ...]], ...], ...] = tuple(
            ((kw, self._by_kw[kw]),) if kw in self._by_kw else () for kw in literals
        ) + tuple(() for _ in CODE_REGEXES)
        code_literals = set(CODE_LITERALS)
        self._part_code = tuple(kw in code_literals for kw in literals) + tuple(True for _ in CODE_REGEXES)
        self.prefilter_pattern = "|".join(self.parts)
        self._wanted = engine
        self._picked: tuple[str, Any] | None = None  # built on first use: the line API never needs it

    @property
    def engine(self) -> str:
        return self._finder()[0]

    def _finder(self) -> tuple[str, Any]:
        if self._picked is None:
            self._picked = self._pick(self._wanted)
        return self._picked

    def _pick(self, engine: str) -> tuple[str, Any]:
        wanted = os.environ.get("ASCENDCTL_TRIAGE_ENGINE", "") if engine == "auto" else engine
        order = [wanted] if wanted in ENGINES else list(ENGINES)
        for name in order:
            if name == "hyperscan" and (hs := _import("hyperscan")) is not None:
                try:
                    return name, _Hyperscan(hs, self.parts)
                except Exception:  # noqa: BLE001 - a CPU without SSSE3 or an odd build: use the next engine
                    continue
            if name == "re2" and (re2 := _import("re2")) is not None:
                try:
                    return name, _Re2Set(re2, self.parts, self.prefilter_pattern)
                except Exception:  # noqa: BLE001 - an RE2 build without Set: pieces unknown, same results
                    return name, _Regex(re2.compile, self.prefilter_pattern)
            if name == "re":
                return name, self._pure_python()
        if wanted in ENGINES:
            raise RuntimeError(f"triage engine {wanted!r} is not installed")
        return "re", self._pure_python()

    def _pure_python(self) -> _Literals:
        return _Literals(self._literals, CODE_LOOSE, self.prefilter_pattern)

    def offsets(self, data: bytes, start: int, end: int) -> list[int]:
        """Sorted offsets in data[start:end] that lie in lines worth decoding."""
        return self._finder()[1].offsets(data, start, end)

    def hits(self, data: bytes, start: int, end: int) -> list[tuple[int, int]]:
        """Sorted (offset, piece id) pairs; the id is -1 when the engine cannot say which piece."""
        finder = self._finder()[1]
        if isinstance(finder, (_Hyperscan, _Re2Set)):
            return finder.hits(data, start, end)
        return [(h, -1) for h in finder.offsets(data, start, end)]

    def may_hold_code(self, parts: frozenset[int]) -> bool:
        """Whether a line whose pre-filter pieces are `parts` can carry an ACL / CANN code."""
        return any(self._part_code[p] for p in parts)

    def candidate(self, line: str) -> bool:
        return self._prefilter_str.search(line) is not None

    @functools.cached_property
    def _prefilter_str(self) -> re.Pattern[str]:
        # For the line API only (a block scan never needs it); compiling it took a tenth of a
        # second of every `triage` start. ASCII word boundaries, as in the byte engines: `ÀEZ0000`
        # must be judged the same way whether a line arrives as text or inside a block of bytes.
        return re.compile(self.prefilter_pattern, re.ASCII)

    def matching(self, line: str, parts: frozenset[int] | None = None) -> list[Rule]:
        """Rules that match the line, in database order, each once. `parts`: the pre-filter pieces
        a block scan found in the line (only their rules can match), None to look at all."""
        hits: dict[str, Rule] = {}
        pairs = self._by_keyword if parts is None else [kr for p in parts for kr in self._part_rules[p]]
        for kw, rules in pairs:
            if kw in line:
                for rule in rules:
                    if rule.id not in hits and rule.match(line):
                        hits[rule.id] = rule
        if len(hits) > 1:
            return sorted(hits.values(), key=lambda r: self._order[r.id])
        return list(hits.values())

    def named(self, rules: Sequence[Rule], codes: Sequence[CodeInfo]) -> tuple[list[Rule], list[CodeInfo]]:
        """What a line names: its rules, plus the rules that declare its codes (`codes:` in
        rules.yaml), and the codes no rule declares. One failure, one name: a hit of 507035 is
        the vector-core-exception rule, wherever a report or a log mark shows it."""
        if not self._fold or not codes:
            return list(rules), list(codes)
        out, kept = list(rules), []
        for info in codes:
            rule = self._fold.get(info.code)
            if rule is None:
                kept.append(info)
            elif rule not in out:
                out.append(rule)
        return out, kept
