"""Percentile summaries of latency samples."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) of already sorted values, linear between closest ranks.

    The same definition as numpy's default, which `vllm bench serve` uses, so the figures compare."""
    n = len(sorted_values)
    if n == 0:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    pos = (n - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


@dataclass(frozen=True)
class Summary:
    """count, mean, min, max and p50 / p90 / p99; None when there are no samples."""

    count: int
    mean: float | None
    min: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None


def summarize(values: Sequence[float], scale: float = 1.0) -> Summary:
    """Summary of `values` multiplied by `scale` (1000 turns seconds into milliseconds)."""
    if not values:
        return Summary(0, None, None, None, None, None, None)
    v = sorted(x * scale for x in values)
    return Summary(
        count=len(v),
        mean=math.fsum(v) / len(v),
        min=v[0],
        p50=percentile(v, 50),
        p90=percentile(v, 90),
        p99=percentile(v, 99),
        max=v[-1],
    )
