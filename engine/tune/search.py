"""Find the highest load at which every target holds: bracket, then bisect.

Pure: the search calls `measure(load) -> Trial` and never touches a server, so it is tested
against a fake latency model (tests/unit/test_tune_search.py) and driven by bench runs in
engine/tune/measure.py.

1. Bracket: from `start`, double the load while it holds (up to `max_load`), or halve it while it
   does not (down to `min_load`), until one load holds and the next one up does not.
2. Bisect between the two until they are `min_step` apart (whole numbers for concurrency).
3. A verdict is close when some target's measured value lies within `close` (10%) of its target:
   that load is measured again, `repeats` times in all, and the majority decides.
4. The error band: half the last bracket's width (the search's resolution), widened by the noise
   of the repeats at the capacity: the spread of the binding target's value over its repeats,
   turned into load through the slope between the two ends of the bracket.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Callable, Mapping

from engine.bench.scenario import SLOS

BY = ("rate", "concurrency")


@dataclass(frozen=True)
class Trial:
    """One measurement at one load: each target's measured value and whether it held."""

    load: float
    values: Mapping[str, float | None]  # target name -> measured (bench's SLO names)
    targets: Mapping[str, float]
    figures: Mapping[str, float | None] = field(default_factory=dict)  # throughput, goodput... for the report
    problem: str = ""  # a reason the load was not carried whatever the targets say (requests left unfinished)

    def held(self, name: str) -> bool:
        value, target = self.values.get(name), self.targets[name]
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return False
        return value >= target if SLOS[name][1] == "min" else value <= target

    @property
    def ok(self) -> bool:
        return not self.problem and all(self.held(n) for n in self.targets)

    def headroom(self, name: str) -> float:
        """How far the value is from its target, as a share of the target (negative: missed)."""
        value, target = self.values.get(name), self.targets[name]
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return -math.inf
        if target == 0:
            return math.inf if self.held(name) else -math.inf
        rel = (target - value) / target
        return -rel if SLOS[name][1] == "min" else rel

    def binding(self) -> str:
        """The target with the least headroom."""
        return min(self.targets, key=self.headroom)


@dataclass(frozen=True)
class Settings:
    by: str = "rate"
    start: float = 1.0
    min_step: float = 0.25
    min_load: float = 0.1
    max_load: float = 5000.0
    repeats: int = 3  # measurements in all at a load whose verdict is close
    close: float = 0.10
    max_points: int = 16  # loads measured at most (each repeat of a close one counts once more)

    def quantize(self, load: float) -> float:
        if self.by == "concurrency":
            return float(max(1, round(load)))
        return float(f"{load:.4g}")


@dataclass(frozen=True)
class Point:
    load: float
    trials: tuple[Trial, ...]

    @property
    def ok(self) -> bool:
        return sum(t.ok for t in self.trials) * 2 > len(self.trials)

    @property
    def split(self) -> bool:
        """The repeats disagreed."""
        return len({t.ok for t in self.trials}) > 1

    def held(self, name: str) -> bool:
        return sum(t.held(name) for t in self.trials) * 2 > len(self.trials)

    def value(self, name: str) -> float | None:
        vals = [v for t in self.trials if (v := t.values.get(name)) is not None and not math.isnan(v)]
        return statistics.median(vals) if vals else None

    def figure(self, name: str) -> float | None:
        vals = [v for t in self.trials if (v := t.figures.get(name)) is not None]
        return statistics.median(vals) if vals else None

    def problem(self) -> str:
        return next((t.problem for t in self.trials if t.problem), "")


@dataclass(frozen=True)
class Break:
    """Where one target stopped holding among the loads measured."""

    target: str
    breaks_at: float | None  # the lowest load at which it failed; None: it held at every load tried
    held_to: float | None  # the highest load below that at which it held


@dataclass(frozen=True)
class Result:
    by: str
    targets: Mapping[str, float]
    capacity: float | None  # None: not even the lowest load tried held
    band: float
    low: float | None  # the bracket: highest load that held ...
    high: float | None  # ... and the lowest above it that did not (None: none failed)
    binding: str | None  # the target closest to breaking at the capacity
    points: tuple[Point, ...]  # in the order measured
    breaks: tuple[Break, ...]
    stopped: str  # why the search ended: "converged", "max_load", "min_load", "max_points", "interrupted"

    @property
    def at(self) -> Point | None:
        return next((p for p in self.points if p.load == self.capacity), None)

    @property
    def measurements(self) -> int:
        return sum(len(p.trials) for p in self.points)


class Interrupted(Exception):
    """Raised by `measure` when the user stops the search: the search returns what it has."""


def search(
    measure: Callable[[float], Trial],
    settings: Settings,
    targets: Mapping[str, float],
    on_point: Callable[[Point, int], None] | None = None,
) -> Result:
    points: dict[float, Point] = {}
    order: list[float] = []
    budget = [settings.max_points]

    def judge(load: float) -> Point:
        load = settings.quantize(load)
        if load in points:
            return points[load]
        trials = [measure(load)]
        budget[0] -= 1
        while len(trials) < settings.repeats and _close(trials, settings.close) and budget[0] > 0:
            trials.append(measure(load))
            budget[0] -= 1
        points[load] = Point(load, tuple(trials))
        order.append(load)
        if on_point is not None:
            on_point(points[load], len(order))
        return points[load]

    lo: float | None = None
    hi: float | None = None
    stopped = "converged"
    load = settings.quantize(min(max(settings.start, settings.min_load), settings.max_load))
    try:
        while True:  # bracket
            if budget[0] <= 0:
                stopped = "max_points"
                break
            p = judge(load)
            if p.ok:
                lo = load
                if hi is not None:
                    break
                if load >= settings.max_load:
                    stopped = "max_load"
                    break
                load = settings.quantize(min(load * 2, settings.max_load))
            else:
                hi = load
                if lo is not None:
                    break
                nxt = settings.quantize(max(load / 2, settings.min_load))
                if load <= settings.min_load or nxt == load:
                    stopped = "min_load"
                    break
                load = nxt
        while lo is not None and hi is not None and stopped == "converged":  # bisect
            if hi - lo <= settings.min_step:
                break
            mid = settings.quantize((lo + hi) / 2)
            if mid in (lo, hi):
                break
            if budget[0] <= 0:
                stopped = "max_points"
                break
            if judge(mid).ok:
                lo = mid
            else:
                hi = mid
    except Interrupted:
        stopped = "interrupted"
    return _result(settings, targets, [points[x] for x in order], lo, hi, stopped)


def _close(trials: list[Trial], close: float) -> bool:
    t = trials[-1]
    if t.problem:
        return False
    return any(abs(t.headroom(n)) <= close for n in t.targets)


def _result(
    settings: Settings, targets: Mapping[str, float], points: list[Point], lo: float | None, hi: float | None, stopped
) -> Result:
    at = next((p for p in points if p.load == lo), None)
    binding = None
    band = 0.0
    top = next((p for p in points if p.load == hi), None)
    if at is not None:
        # The target that stopped the load from rising: the one that failed just above the
        # capacity (the worst there), else the one with the least room at it.
        failed = [n for n in targets if top is not None and not top.held(n)]
        if failed:
            binding = min(failed, key=lambda n: _median_headroom(top, n))  # type: ignore[arg-type]
        else:
            binding = min(targets, key=lambda n: _median_headroom(at, n))
        if top is not None:
            # The capacity lies in [lo, hi): half that is the resolution, except for whole numbers
            # of requests in flight one apart, where nothing lies between.
            whole = settings.by == "concurrency" and hi - lo <= 1  # type: ignore[operator]
            band = 0.0 if whole else (hi - lo) / 2  # type: ignore[operator]
            band = max(band, _noise_band(at, top, binding))
            if at.split:
                band = max(band, hi - lo)  # type: ignore[operator]
    breaks = []
    for name in targets:
        failed = sorted(p.load for p in points if not p.held(name))
        first = failed[0] if failed else None
        held = [p.load for p in points if p.held(name) and (first is None or p.load < first)]
        breaks.append(Break(name, first, max(held) if held else None))
    return Result(
        by=settings.by,
        targets=dict(targets),
        capacity=lo,
        band=round(band, 4),
        low=lo,
        high=hi,
        binding=binding,
        points=tuple(points),
        breaks=tuple(breaks),
        stopped=stopped,
    )


def _median_headroom(p: Point, name: str) -> float:
    return statistics.median(t.headroom(name) for t in p.trials)


def _noise_band(at: Point, top: Point, name: str) -> float:
    """The load that the spread of `name` over the repeats at the capacity stands for."""
    vals = [v for t in at.trials if (v := t.values.get(name)) is not None and math.isfinite(v)]
    if len(vals) < 2:
        return 0.0
    lo_v, hi_v = at.value(name), top.value(name)
    if lo_v is None or hi_v is None or top.load == at.load:
        return 0.0
    slope = abs(hi_v - lo_v) / (top.load - at.load)
    if slope <= 0:
        return 0.0
    return statistics.stdev(vals) / slope
