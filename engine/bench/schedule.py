"""When each phase starts and ends, and when each request of a `rate` phase is due.

Pure functions of the scenario and a seed, so a run is reproducible and the schedule is testable
without a clock."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterator

from engine.bench.scenario import LengthDist, Phase, Scenario


@dataclass(frozen=True)
class Window:
    """One phase placed on the run's time line (seconds since the run started)."""

    index: int
    phase: Phase
    start_s: float
    end_s: float


def windows(sc: Scenario) -> tuple[Window, ...]:
    out: list[Window] = []
    t = 0.0
    for i, ph in enumerate(sc.phases):
        out.append(Window(i, ph, t, t + ph.duration_s))
        t += ph.duration_s
    return tuple(out)


def window_at(wins: tuple[Window, ...], t: float) -> Window | None:
    """The phase running at time t, None after the last one."""
    for w in wins:
        if w.start_s <= t < w.end_s:
            return w
    return None


def arrivals(w: Window, rng: random.Random) -> Iterator[float]:
    """Due times (run clock) of the requests of a `rate` phase, in order.

    Poisson: exponential gaps with mean 1/rate (real users arrive independently). Uniform: evenly
    spaced, the first one at the start of the phase."""
    rate = w.phase.rate
    if not rate:
        return
    t = w.start_s
    if w.phase.arrival == "uniform":
        gap = 1.0 / rate
        while t < w.end_s:
            yield t
            t += gap
        return
    while True:
        t += rng.expovariate(rate)
        if t >= w.end_s:
            return
        yield t


def expected_requests(sc: Scenario) -> float | None:
    """How many requests the rate phases will send (None when a concurrency phase makes it open)."""
    total = 0.0
    for ph in sc.phases:
        if ph.rate is None:
            return None
        total += ph.rate * ph.duration_s
    return total if sc.max_requests is None else min(total, sc.max_requests)


def draw_length(d: LengthDist, rng: random.Random) -> int:
    """One prompt length in tokens from the scenario's distribution."""
    if d.dist == "fixed":
        return int(d.mean)
    if d.dist == "uniform":
        return rng.randint(d.min, d.max)
    return int(min(d.max, max(d.min, round(rng.gauss(d.mean, d.stddev)))))
