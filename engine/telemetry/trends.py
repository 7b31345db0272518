"""Slow trends: memory (a chip's HBM, an engine's resident memory) rising steadily over hours
while the load does not, which is how a leak looks before it ends in an out-of-memory.

Each subject keeps a bounded series of one point per bucket (the window / POINTS: a minute at
6 h), fed by the snapshot's own time, so a replay judges the same as the live view. A series is
judged when a bucket closes, not every tick. The numbers are data (thresholds.yaml, `leak_*`).
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from engine.telemetry.thresholds import Thresholds

POINTS = 360  # points per window: one a minute at 6 h
_SLOPE_POINTS = 60  # the slope is fitted on at most this many (bucket means of the points)
_PARTS = 6  # the window's sixths: the load is compared first to last, the rise checked for one jump


@dataclass(frozen=True)
class Point:
    t: float  # start of the bucket (snapshot time)
    value: float  # mean memory in the bucket, MiB
    load: float | None  # mean load in the bucket; None when not known


@dataclass(frozen=True)
class Trend:
    """A steady rise found in a window: what the row says."""

    start: float
    span_s: float
    rise_mib: float
    load_first: float | None
    load_last: float | None


def theil_sen(xs: list[float], ys: list[float]) -> float:
    """The median of the slopes between every two points: one spike or a few bad samples cannot
    tilt it, where a least-squares line follows them."""
    slopes = [(ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[j] > xs[i]]
    return statistics.median(slopes) if slopes else 0.0


def _thin(points: list[Point], most: int) -> tuple[list[float], list[float]]:
    """(times, values) with consecutive points averaged down to at most `most`."""
    size = max(1, -(-len(points) // most))
    xs, ys = [], []
    for i in range(0, len(points), size):
        group = points[i : i + size]
        xs.append(sum(p.t for p in group) / len(group))
        ys.append(sum(p.value for p in group) / len(group))
    return xs, ys


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def judge(points: list[Point], now: float, t: Thresholds) -> Trend | None:
    """A steady rise over the last leak_window_h, else None. Steady: the rise reaches
    leak_min_rise_mib, the line explains at least leak_min_fit of the variance, no single step
    between the window's sixths holds more than leak_max_step_share of it, and the load did not
    rise by more than leak_load_rise."""
    window = t.leak_window_h * 3600.0
    recent = [p for p in points if p.t >= now - window]
    # Less than nine tenths of a window seen is not yet a trend over the window.
    if len(recent) < POINTS // 2 or recent[-1].t - recent[0].t < 0.9 * window:
        return None
    # The cheap tests first: judge runs once a bucket for every chip and engine.
    size = len(recent) / _PARTS
    parts = [recent[round(i * size) : round((i + 1) * size)] for i in range(_PARTS)]
    medians = [statistics.median(p.value for p in part) for part in parts]
    whole = medians[-1] - medians[0]
    steps = [b - a for a, b in zip(medians, medians[1:])]
    # The sixths' middles lie 5/6 of the window apart; half the rise there is far short of it.
    if whole * _PARTS / (_PARTS - 1) < 0.5 * t.leak_min_rise_mib or max(steps) > t.leak_max_step_share * whole:
        return None
    first, last = _mean([p.load for p in parts[0]]), _mean([p.load for p in parts[-1]])
    if first is not None and last is not None and last > first * (1.0 + t.leak_load_rise) and last > first:
        return None  # memory following the load
    xs, ys = _thin(recent, _SLOPE_POINTS)
    slope = theil_sen(xs, ys)
    span = recent[-1].t - recent[0].t
    rise = slope * span
    if rise < t.leak_min_rise_mib:
        return None
    intercept = statistics.median(y - slope * x for x, y in zip(xs, ys))
    mean_y = sum(ys) / len(ys)
    total = sum((y - mean_y) ** 2 for y in ys)
    residual = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys))
    if total <= 0 or 1.0 - residual / total < t.leak_min_fit:
        return None
    return Trend(recent[0].t, span, rise, first, last)


@dataclass
class _Series:
    """One subject's points, bounded to a window, with the bucket being filled."""

    start: float
    points: deque = field(default_factory=lambda: deque(maxlen=POINTS + 1))
    bucket: float | None = None
    sums: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0])  # value, n, load, n load
    verdict: Trend | None = None


class TrendTracker:
    """Series per subject ("npu3", an engine's label) and their last verdicts."""

    def __init__(self, thresholds: Thresholds) -> None:
        self.t = thresholds
        self._series: dict[str, _Series] = {}

    @property
    def step_s(self) -> float:
        return self.t.leak_window_h * 3600.0 / POINTS

    def forget(self, subject: str) -> None:
        """The subject restarted or went away: its next points start a new series (and warm-up)."""
        self._series.pop(subject, None)

    def add(self, subject: str, now: float, value: float | None, load: float | None) -> Trend | None:
        """Feed one sample at snapshot time `now`; the subject's current verdict."""
        if value is None:
            self.forget(subject)
            return None
        s = self._series.get(subject)
        if s is None:
            s = self._series[subject] = _Series(start=now)
        if now < s.start + self.t.leak_warmup_min * 60.0:
            return None  # vLLM allocates its memory now: not part of any trend
        step = self.step_s
        if s.bucket is not None and now >= s.bucket + step:
            if not self._close(s):
                self._series[subject] = _Series(start=now)
                return None
            s.verdict = judge(list(s.points), now, self.t)
        if s.bucket is None or now >= s.bucket + step:
            s.bucket = now - (now - s.start) % step
            s.sums = [0.0, 0.0, 0.0, 0.0]
        s.sums[0] += value
        s.sums[1] += 1
        if load is not None:
            s.sums[2] += load
            s.sums[3] += 1
        return s.verdict

    def _close(self, s: _Series) -> bool:
        """Append the filled bucket's point. False when the memory fell far below where the series
        began (freed, or the engine restarted): a fall is no leak, and the old points would read
        as a slope, so the series starts over, warm-up included."""
        value, n, load, n_load = s.sums
        if not n:
            return True
        point = Point(s.bucket, value / n, load / n_load if n_load else None)  # type: ignore[arg-type]
        if s.points and point.value < s.points[0].value - self.t.leak_min_rise_mib:
            return False
        s.points.append(point)
        return True


__all__ = ["POINTS", "Point", "Trend", "TrendTracker", "judge", "theil_sen"]
