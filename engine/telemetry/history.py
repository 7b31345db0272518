"""The history behind `top`'s charts: one bounded time series per (subject, figure), fed from
snapshots by the snapshot's own time, so a replay at any speed draws the same time axis as the
live view did.

Each series is a few rings of time buckets (every second for the last 5 minutes, every 3 s for
15, every 12 s for the hour): a sample lands in the bucket of its time in every ring, merged by the figure's
rule (mean, or max where a spike must stay visible). Rings never grow, so memory is the same
after a minute and after a month. Which figures, and how they merge, is figures.yaml.
"""

from __future__ import annotations

import math
import threading
from array import array
from dataclasses import dataclass
from typing import Any, Iterable

from engine.data import load_yaml

# (bucket seconds, buckets kept): 5.5 minutes of 1 s, 16.5 of 3 s, 66 of 12 s. A chart reads the
# coarsest ring still as fine as one dot of its width, so it draws 100-300 points per line
# whichever the window: that keeps a redraw cheap.
TIERS: tuple[tuple[float, int], ...] = ((1.0, 330), (3.0, 330), (12.0, 330))
WINDOWS: tuple[float, ...] = (300.0, 900.0, 3600.0)
# A subject (a chip, an engine) not seen for this long is forgotten: engines come and go over days.
FORGET_S = max(step * size for step, size in TIERS)


@dataclass(frozen=True)
class Figure:
    key: str
    of: str  # "device" | "engine"
    source: tuple[str, ...]  # attribute path in a DeviceSample / EngineView
    scale: float = 1.0
    bucket: str = "mean"  # "mean" | "max"
    label: str = ""

    def value(self, obj: Any) -> float | None:
        for name in self.source:
            obj = getattr(obj, name, None)
            if obj is None:
                return None
        if not isinstance(obj, (int, float)) or not math.isfinite(obj):
            return None  # a NaN / Inf sample is a gap, never a point
        return float(obj) * self.scale


@dataclass(frozen=True)
class Chart:
    title: str
    unit: str
    figures: tuple[Figure, ...]
    max: float | None = None  # a fixed top of the y axis (percentages); None: the data's
    titles: tuple[tuple[str, str], ...] = ()  # (device kind, title) where the kind names it otherwise
    kinds: tuple[str, ...] = ()  # device charts: the kinds of chip that have this figure (all when empty)

    @property
    def of(self) -> str:
        return self.figures[0].of

    def title_for(self, kinds: set[str]) -> str:
        """The title for chips of these kinds: their own word when they are all of one kind."""
        named = dict(self.titles)
        return named[next(iter(kinds))] if len(kinds) == 1 and next(iter(kinds)) in named else self.title

    def shown_for(self, kinds: set[str]) -> bool:
        """False when no chip of these kinds has the figure (a CPU host has no HBM bandwidth):
        a chart that could only ever read N/A is not drawn."""
        return not self.kinds or not kinds or bool(kinds & set(self.kinds))


def _load() -> tuple[dict[str, Figure], tuple[Chart, ...]]:
    data = load_yaml("engine.telemetry", "figures.yaml")
    figures = {
        key: Figure(
            key,
            f["of"],
            tuple(f["source"].split(".")),
            float(f.get("scale", 1.0)),
            f.get("bucket", "mean"),
            f.get("label", ""),
        )
        for key, f in data["figures"].items()
    }
    charts = tuple(
        Chart(
            c["title"],
            c["unit"],
            tuple(figures[k] for k in c["figures"]),
            c.get("max"),
            tuple((c.get("titles") or {}).items()),
            tuple(c.get("kinds") or ()),
        )
        for c in data["charts"]
    )
    return figures, charts


FIGURES, CHARTS = _load()


_EMPTY = -(2**63)  # the bucket id of a slot never written (no real time maps to it)


class _Ring:
    """Time buckets of `step` seconds, the last `size` of them, in fixed arrays: slot b % size
    holds bucket b. A bucket whose samples were all gaps is kept as a gap (count 0)."""

    __slots__ = ("step", "size", "use_max", "ids", "agg", "count")

    def __init__(self, step: float, size: int, use_max: bool) -> None:
        self.step, self.size, self.use_max = step, size, use_max
        self.ids = array("q", [_EMPTY]) * size
        self.agg = array("d", [0.0]) * size
        self.count = array("I", [0]) * size

    def add(self, t: float, v: float | None) -> None:
        b = math.floor(t / self.step)
        i = b % self.size
        held = self.ids[i]
        if held != b:
            if held > b:
                return  # older than what the slot holds now: a sample too late to matter
            self.ids[i], self.agg[i], self.count[i] = b, 0.0, 0
        if v is None:
            return
        n = self.count[i]
        if n == 0:
            self.agg[i] = v
        elif self.use_max:
            if v > self.agg[i]:
                self.agg[i] = v
        else:
            self.agg[i] += v
        self.count[i] = n + 1

    def points(self, t0: float, t1: float, gap_s: float) -> tuple[list[float], list[float]]:
        """(bucket mid-times, values) between t0 and t1; NaN where the line must break: a bucket
        of gaps, or no bucket for longer than `gap_s`."""
        step, size, ids, agg, count, use_max = self.step, self.size, self.ids, self.agg, self.count, self.use_max
        first = max(math.floor(t0 / step), math.floor(t1 / step) - size + 1)
        times: list[float] = []
        values: list[float] = []
        last_t = None
        for b in range(first, math.floor(t1 / step) + 1):
            i = b % size
            if ids[i] != b:
                continue
            t = min(t1, (b + 0.5) * step)
            if last_t is not None and t - last_t > gap_s:
                times.append((t + last_t) / 2)
                values.append(math.nan)
            n = count[i]
            times.append(t)
            values.append(math.nan if n == 0 else agg[i] if use_max else agg[i] / n)
            last_t = t
        return times, values


class History:
    """Bounded series of every figure of figures.yaml, per chip and per engine. Thread-safe: the
    poller adds, the screen reads."""

    def __init__(self, tiers: Iterable[tuple[float, int]] = TIERS) -> None:
        self.tiers = tuple(tiers)
        self._series: dict[tuple[str, str], tuple[_Ring, ...]] = {}
        self._seen: dict[tuple[str, str], float] = {}  # (of, subject) -> time last seen
        self._kinds: dict[str, str] = {}  # chip -> its kind ("npu", "cuda", "cpu")
        self._lock = threading.Lock()
        self.latest: float | None = None  # the time of the newest snapshot
        self.interval: float | None = None  # the last gap between two snapshots
        self._next_forget = -math.inf
        self.generation = 0  # counts clear(): a chart drawn before it must be drawn again

    def clear(self) -> None:
        """Forget everything (a replay that jumps back refills from the recording)."""
        with self._lock:
            self.generation += 1
            self._series.clear()
            self._seen.clear()
            self._kinds.clear()
            self.latest = self.interval = None
            self._next_forget = -math.inf

    def add(self, snap: Any) -> None:
        """Every figure of every chip and engine of one snapshot, at the snapshot's time."""
        t = float(snap.time)
        with self._lock:
            if self.latest is not None and t > self.latest:
                self.interval = t - self.latest
            if self.latest is None or t > self.latest:
                self.latest = t
            for of, subjects in (("device", [(d.key, d) for d in snap.devices]), ("engine", self._engines(snap))):
                figures = [f for f in FIGURES.values() if f.of == of]
                for subject, obj in subjects:
                    self._seen[(of, subject)] = t
                    if of == "device":
                        self._kinds[subject] = getattr(obj, "kind", "")
                    for figure in figures:
                        rings = self._series.get((subject, figure.key))
                        if rings is None:
                            rings = tuple(_Ring(step, size, figure.bucket == "max") for step, size in self.tiers)
                            self._series[(subject, figure.key)] = rings
                        v = figure.value(obj)
                        for ring in rings:
                            ring.add(t, v)
            if t >= self._next_forget:
                self._next_forget = t + 60.0
                self._forget(t - FORGET_S)

    @staticmethod
    def _engines(snap: Any) -> list[tuple[str, Any]]:
        return [(e.label, e) for e in snap.engines]

    def _forget(self, before: float) -> None:
        gone = [key for key, seen in self._seen.items() if seen < before]
        for of, subject in gone:
            del self._seen[(of, subject)]
            if of == "device":
                self._kinds.pop(subject, None)
            for figure in FIGURES.values():
                if figure.of == of:
                    self._series.pop((subject, figure.key), None)

    def kinds(self, subjects: Iterable[str]) -> set[str]:
        """The kinds ("npu", "cuda", "cpu") of these chips, as their samples said."""
        with self._lock:
            return {k for s in subjects if (k := self._kinds.get(s))}

    def subjects(self, of: str) -> tuple[str, ...]:
        """The chips ("device") or engines ("engine") in the history, in the order first seen."""
        with self._lock:
            return tuple(s for o, s in self._seen if o == of)

    def series(
        self, subject: str, figure: str, window_s: float, end: float | None = None, resolution: float = 0.0
    ) -> tuple[list[float], list[float]]:
        """(times, values) of the last `window_s` seconds up to `end` (default: the newest
        snapshot), from the coarsest ring that spans the window and is still as fine as
        `resolution` seconds (else the finest that spans it). NaN values break the line."""
        with self._lock:
            rings = self._series.get((subject, figure))
            end = self.latest if end is None else end
            if rings is None or end is None:
                return [], []
            spanning = [r for r in rings if r.step * r.size >= window_s] or [rings[-1]]
            ring = ([r for r in spanning if r.step <= resolution] or spanning[:1])[-1]
            gap_s = max(2.5 * (self.interval or ring.step), 2.0 * ring.step)
            return ring.points(end - window_s, end, gap_s)

    def last(self, subject: str, figure: str) -> float | None:
        """The newest value of a series (None when its newest sample was a gap)."""
        with self._lock:
            rings = self._series.get((subject, figure))
            if rings is None or self.latest is None:
                return None
            ring = rings[0]
            b = math.floor(self.latest / ring.step)
            i = b % ring.size
            if ring.ids[i] != b or ring.count[i] == 0:
                return None
            return ring.agg[i] if ring.use_max else ring.agg[i] / ring.count[i]

    def series_count(self) -> int:
        with self._lock:
            return len(self._series)


__all__ = ["CHARTS", "FIGURES", "Chart", "Figure", "History", "TIERS", "WINDOWS"]
