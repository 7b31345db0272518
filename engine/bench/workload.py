"""Workloads that look like production: shared prefixes and replayed traces.

- `prefix: {share: 0.6, tokens: 1024, count: 1}` in a scenario: that share of the requests start
  with one of `count` shared prefixes of `tokens` tokens (a system prompt, a conversation's history)
  before their own unique text, so the engine's prefix cache can reuse the work, as it does in
  production. Without it every prompt is unique from its first token.
- `trace: FILE.jsonl`: requests replayed from a trace in the Mooncake format (one JSON object a
  line: `timestamp` in ms since the trace began, `input_length` and `output_length` in tokens,
  `hash_ids`: one id per block of 512 prompt tokens, equal ids meaning equal blocks, so shared
  prefixes replay as shared). The arrival times are kept, or compressed to an asked-for mean rate.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from engine.errors import BadInput

MOONCAKE_BLOCK_TOKENS = 512  # the block size the Mooncake traces' hash_ids were computed with
MAX_TRACE_LINES = 1_000_000


@dataclass(frozen=True)
class Prefix:
    share: float  # of requests, 0..1
    tokens: int
    count: int = 1  # distinct prefixes, used in turn


@dataclass(frozen=True)
class TraceEntry:
    t_s: float  # seconds since the trace began
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Trace:
    source: str
    entries: tuple[TraceEntry, ...]
    block_tokens: int = MOONCAKE_BLOCK_TOKENS

    @property
    def span_s(self) -> float:
        """From the first request to the last, at least a second."""
        return max(1.0, self.entries[-1].t_s - self.entries[0].t_s) if self.entries else 1.0

    @property
    def natural_rate(self) -> float:
        return len(self.entries) / self.span_s

    def duration_at(self, rate: float | None) -> float:
        """How long the replay lasts when compressed (or stretched) to `rate` requests/s on average."""
        return self.span_s * (self.natural_rate / rate if rate else 1.0)

    def arrivals(self, rate: float | None) -> list[float]:
        """Send times (seconds from the start of the replay) at a mean `rate` (None: as recorded)."""
        k = self.natural_rate / rate if rate else 1.0
        t0 = self.entries[0].t_s if self.entries else 0.0
        return [(e.t_s - t0) * k for e in self.entries]


def load_trace(path: Path, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> Trace:
    """Read a Mooncake JSONL trace. Raises BadInput naming the first bad line."""
    fix = 'each line must be a JSON object such as {"timestamp": 0, "input_length": 512, "output_length": 64}'
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read trace {path}: {exc}", "give a readable UTF-8 JSONL file") from None
    entries: list[TraceEntry] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if len(entries) >= MAX_TRACE_LINES:
            raise BadInput(f"trace {path} has more than {MAX_TRACE_LINES:,} requests", "replay a part of it")
        try:
            row = json.loads(line)
            t = float(row.get("timestamp", row.get("created_time", 0.0))) / 1000.0
            ins = int(row.get("input_length", row.get("input_tokens")))
            outs = int(row.get("output_length", row.get("output_tokens")))
            ids = tuple(int(x) for x in row.get("hash_ids") or ())
        except (ValueError, TypeError, AttributeError):
            raise BadInput(f"bad trace {path}:{n}: not a Mooncake trace line", fix) from None
        if not math.isfinite(t) or t < 0 or ins < 1 or outs < 1:
            raise BadInput(f"bad trace {path}:{n}: timestamp, input_length and output_length must be positive", fix)
        entries.append(TraceEntry(t, ins, outs, ids))
    if not entries:
        raise BadInput(f"trace {path} holds no request", fix)
    entries.sort(key=lambda e: e.t_s)
    return Trace(str(path), tuple(entries), block_tokens)
