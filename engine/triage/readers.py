"""Inputs: files, directories (plog trees), `.gz`, and stdin, read in large binary blocks.

Nothing is ever read whole: blocks of CHUNK bytes are cut at the last newline and handed to
`Scanner.feed_block`; a line longer than MAX_LINE is cut there and the rest skipped, so memory
stays bounded by CHUNK + MAX_LINE whatever the input. An unreadable input is recorded and the
others are still scanned.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import sys
import zlib
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, Sequence

from engine.system.follow import MAX_LINE
from engine.triage.model import TriageReport
from engine.triage.rules import Rule
from engine.triage.scanner import Scanner

CHUNK = 1024 * 1024  # small enough that the line count and the pre-filter read it from cache
STDIN = "-"
# Progress callback: (bytes done, bytes total or None when unknown, current input name).
Progress = Callable[[int, "int | None", str], None]


class Truncated(Exception):
    """An input ended early (a cut .gz): what came before it was scanned."""


def _stat_error(raw: str, exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "symbolic link loop"
    if exc.errno == errno.ENOENT and os.path.islink(raw):
        return f"broken symbolic link (to {os.readlink(raw)})"
    if exc.errno == errno.ENOENT:
        return "no such file or directory"
    return (exc.strerror or str(exc)).lower()


def is_stream(path: Path) -> bool:
    """A pipe or socket: `<(cat x.log)`, /dev/stdin fed by a pipe, a FIFO. Read once, no size."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def expand(paths: Sequence[str]) -> Iterator[tuple[str, Path | None, str | None]]:
    """(name, path, error) per input file; directories are walked in name order, which is
    time order for plog files (`plog-<pid>_<YYYYMMDDhhmmssmmm>.log`)."""
    for raw in paths:
        if raw == STDIN:
            yield STDIN, None, None
            continue
        p = Path(raw)
        try:
            os.stat(raw)
        except OSError as exc:  # Path.exists() says "no such file" for a link loop or a denied parent
            yield str(p), None, _stat_error(raw, exc)
            continue
        if is_stream(p):
            yield str(p), p, None
        elif p.is_dir():
            found = False
            for root, dirs, files in os.walk(p, onerror=None):
                dirs.sort()
                for name in sorted(files):
                    fp = Path(root) / name
                    if fp.is_file():
                        found = True
                        yield str(fp), fp, None
            if not found:
                yield str(p), None, "directory holds no files"
        elif p.is_file():
            yield str(p), p, None
        elif p.exists():
            yield str(p), None, "not a regular file"
        else:
            yield str(p), None, "no such file or directory"


class _Gunzip(io.RawIOBase):
    """Streaming gzip (multi-member too) that hands out everything it could decompress before
    a truncation or corruption, then raises: the part that was read still gets scanned."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._broken: str | None = None

    def read(self, size: int = -1) -> bytes:  # type: ignore[override]
        if self._broken:
            raise EOFError(self._broken)
        while True:
            compressed = self._raw.read(CHUNK)
            if not compressed:
                tail = self._z.flush()
                if not self._z.eof:
                    self._broken = "truncated: the compressed data ends before the end of the gzip stream"
                    if not tail:
                        raise EOFError(self._broken)
                return tail
            try:
                out = self._z.decompress(compressed)
                while self._z.eof and self._z.unused_data:  # the next gzip member
                    rest = self._z.unused_data
                    self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
                    out += self._z.decompress(rest)
            except zlib.error as exc:
                raise EOFError(f"corrupt gzip data ({exc})") from None
            if out:
                return out

    def close(self) -> None:
        self._raw.close()
        super().close()


def _open(path: Path) -> BinaryIO:
    f = open(path, "rb")  # noqa: SIM115 - closed by the caller
    # peek, not read + seek: a pipe cannot seek back.
    magic = f.peek(2)[:2]
    if magic == b"\x1f\x8b":
        return _Gunzip(f)  # type: ignore[return-value]
    return f


def feed_stream(scanner: Scanner, stream: BinaryIO, source: str, tick: Callable[[int], None] | None = None) -> bool:
    """Feed a binary stream block by block. Returns True when it held NUL bytes (binary data).

    Blocks are handed over whole (no copy); only the line cut by a block boundary is joined."""
    pending = b""  # the start of a line cut by the previous block
    skipping = False  # inside an overlong line: drop bytes up to the next newline
    binary = False
    broken: str | None = None
    while True:
        try:
            block = stream.read(CHUNK)
        except (EOFError, zlib.error) as exc:  # a cut or corrupt .gz: keep what came before it
            broken = str(exc) or type(exc).__name__
            break
        if not block:
            break
        if tick:
            tick(len(block))
        if not binary and b"\x00" in block:
            binary = True
        start = 0
        if skipping:
            nl = block.find(b"\n")
            if nl < 0:
                continue
            start, skipping = nl + 1, False
        if pending:
            nl = block.find(b"\n", start)
            if nl < 0:
                pending += block[start:]
                if len(pending) > MAX_LINE:
                    scanner.feed_block(pending[:MAX_LINE] + b"\n", source)
                    pending, skipping = b"", True
                continue
            scanner.feed_block(pending + block[start : nl + 1], source)
            pending, start = b"", nl + 1
        cut = block.rfind(b"\n", start)
        if cut >= 0:
            scanner.feed_block(block, source, start, cut + 1)
            start = cut + 1
        pending = block[start:]
        if len(pending) > MAX_LINE:
            scanner.feed_block(pending[:MAX_LINE] + b"\n", source)
            pending, skipping = b"", True
    if pending:
        scanner.feed_block(pending, source)
    scanner.end_source(source)
    if broken is not None:
        raise Truncated(broken)
    return binary


def scan_paths(
    paths: Sequence[str],
    *,
    rules: Sequence[Rule] | None = None,
    progress: Progress | None = None,
    stdin: BinaryIO | None = None,
    scanner: Scanner | None = None,
) -> TriageReport:
    """Scan every input; the report lists what could not be read (`unreadable`) and what looked
    odd (`notes`), and still covers everything that was read."""
    scanner = scanner or Scanner(rules)
    inputs = list(expand(paths))
    total = 0
    for _, p, _err in inputs:
        if p is not None:
            try:
                total += p.stat().st_size
            except OSError:
                pass
    streamed = any(n == STDIN or (p is not None and is_stream(p)) for n, p, _ in inputs)
    known_total: int | None = None if streamed else total
    done = 0
    read: list[str] = []
    unreadable: list[str] = []
    notes: list[str] = []

    for name, path, err in inputs:
        if err is not None:
            unreadable.append(f"{name}: {err}")
            continue

        def tick(n: int, _name: str = name) -> None:
            nonlocal done
            done += n
            if progress:
                progress(done, known_total, _name)

        try:
            if path is None:
                stream: BinaryIO | None = stdin or getattr(sys.stdin, "buffer", None)
                if stream is None:  # started with stdin closed: sys.stdin is None
                    unreadable.append(f"{name}: standard input is closed")
                    continue
                binary = feed_stream(scanner, stream, name, tick)
            else:
                with _open(path) as stream:
                    binary = feed_stream(scanner, stream, name, tick)
        except Truncated as exc:  # read, in part: an input of the report, and a damaged one
            read.append(name)
            unreadable.append(f"{name}: {exc}; what came before it was scanned")
            continue
        except (OSError, EOFError, zlib.error) as exc:
            scanner.end_source(name)
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
            unreadable.append(f"{name}: {reason}")
            continue
        read.append(name)
        if binary:
            notes.append(f"{name}: holds binary data (NUL bytes); scanned as text")
    report = scanner.report()
    return replace(report, inputs=read, unreadable=unreadable, notes=[*notes, *report.notes])
