"""The capacity search against a fake latency model: it finds the load where a target breaks,
within its step, measures again where the verdict is close, and says which target broke where."""

from __future__ import annotations

import random

import pytest

from engine.tune.search import Interrupted, Settings, Trial, search

TARGETS = {"ttft_p99_ms": 500.0, "itl_p99_ms": 50.0, "error_rate": 0.01}


def model(capacity: float, *, itl_knee: float | None = None, noise: float = 0.0, seed: int = 1):
    """A server whose TTFT p99 climbs as 100 ms / (1 - load / capacity): 500 ms at 80% of
    `capacity`. ITL p99 is flat at 20 ms, or jumps to 80 ms past `itl_knee`."""
    rng = random.Random(seed)
    calls: list[float] = []

    def measure(load: float) -> Trial:
        calls.append(load)
        u = load / capacity
        ttft = 100.0 / (1 - u) if u < 1 else 60_000.0
        ttft *= 1 + rng.gauss(0, noise)
        itl = 80.0 if itl_knee is not None and load > itl_knee else 20.0
        return Trial(load, {"ttft_p99_ms": ttft, "itl_p99_ms": itl, "error_rate": 0.0}, TARGETS)

    measure.calls = calls  # type: ignore[attr-defined]
    return measure


def test_finds_the_load_where_the_target_breaks_within_its_step():
    m = model(10.0)  # ttft reaches 500 ms at 8 req/s
    r = search(m, Settings(start=1.0, min_step=0.1, repeats=1), TARGETS)
    assert r.stopped == "converged"
    assert 7.9 <= r.capacity <= 8.0
    assert r.high - r.low <= 0.1
    assert r.capacity - r.band <= 8.0 <= r.high + r.band
    assert r.binding == "ttft_p99_ms"
    # bracketed by doubling: 1, 2, 4, 8 held... 16 broke
    assert m.calls[:5] == [1.0, 2.0, 4.0, 8.0, 16.0] or m.calls[:4] == [1.0, 2.0, 4.0, 8.0]


def test_halves_down_when_the_first_load_is_already_too_much():
    r = search(model(10.0), Settings(start=64.0, min_step=0.25, repeats=1), TARGETS)
    assert 7.75 <= r.capacity <= 8.0
    assert r.points[0].load == 64.0 and not r.points[0].ok


def test_each_target_breaks_where_it_first_failed():
    r = search(model(10.0, itl_knee=5.0), Settings(start=1.0, min_step=0.1, repeats=1), TARGETS)
    breaks = {b.target: b for b in r.breaks}
    assert 5.0 <= r.capacity <= 5.1  # the ITL knee comes before the TTFT limit
    assert r.binding == "itl_p99_ms"
    assert 5.0 < breaks["itl_p99_ms"].breaks_at <= 5.1
    assert breaks["ttft_p99_ms"].breaks_at is not None and breaks["ttft_p99_ms"].breaks_at >= 7.9
    assert breaks["error_rate"].breaks_at is None  # held at every load tried


def test_a_close_verdict_is_measured_again_and_the_band_covers_the_noise():
    m = model(10.0, noise=0.08, seed=7)
    r = search(m, Settings(start=1.0, min_step=0.05, repeats=3), TARGETS)
    assert any(len(p.trials) == 3 for p in r.points)  # near 8 req/s the verdict is close
    assert all(len(p.trials) == 1 for p in r.points if p.load <= 4.0)  # far from it, one run is enough
    assert r.band > (r.high - r.low) / 2  # the repeats' spread widened the band beyond the resolution
    assert abs(r.capacity - 8.0) <= r.band + 0.5


def test_concurrency_is_searched_in_whole_numbers():
    r = search(model(10.0), Settings(by="concurrency", start=1, min_step=1, min_load=1, repeats=1), TARGETS)
    assert r.capacity == 7.0 or r.capacity == 8.0
    assert all(float(p.load).is_integer() for p in r.points)


def test_no_capacity_when_even_the_lowest_load_misses():
    r = search(model(0.2), Settings(start=1.0, min_load=0.25, repeats=1), TARGETS)
    assert r.capacity is None and r.stopped == "min_load"
    assert [p.load for p in r.points] == [1.0, 0.5, 0.25]


def test_stops_at_the_highest_load_allowed():
    r = search(model(1000.0), Settings(start=1.0, max_load=20.0, repeats=1), TARGETS)
    assert r.capacity == 20.0 and r.stopped == "max_load" and r.high is None


def test_an_unfinished_step_is_not_carried_whatever_the_latencies():
    def measure(load):
        problem = "3 requests were still unfinished 30 s after the step" if load > 6 else ""
        return Trial(load, {"ttft_p99_ms": 10.0, "itl_p99_ms": 5.0, "error_rate": 0.0}, TARGETS, problem=problem)

    r = search(measure, Settings(start=1.0, min_step=0.5, repeats=1), TARGETS)
    assert 5.5 <= r.capacity <= 6.0
    assert "unfinished" in next(p for p in r.points if not p.ok).problem()


def test_interrupted_keeps_the_best_so_far():
    inner = model(10.0)

    def measure(load):
        if len(inner.calls) == 3:
            raise Interrupted()
        return inner(load)

    r = search(measure, Settings(start=1.0, repeats=1), TARGETS)
    assert r.stopped == "interrupted" and r.capacity == 4.0


@pytest.mark.parametrize("max_points", [3, 6])
def test_the_run_budget_is_kept(max_points):
    m = model(10.0, noise=0.05)
    r = search(m, Settings(start=1.0, min_step=0.01, repeats=3, max_points=max_points), TARGETS)
    assert len(m.calls) <= max_points
    assert r.stopped in ("max_points", "converged")


def test_a_step_is_the_scenario_at_one_load():
    from engine.bench.scenario import load_scenario
    from engine.tune.measure import StepPlan, step_scenario

    sc = load_scenario("chat-qa")
    rate = step_scenario(sc, StepPlan("rate", 20.0), 7.5, TARGETS, {"ttft": 500.0})
    assert [(p.rate, p.arrival, p.duration_s) for p in rate.phases] == [(7.5, "poisson", 20.0)]
    assert rate.slo == TARGETS and rate.goodput == {"ttft": 500.0} and rate.prompt_tokens == sc.prompt_tokens
    conc = step_scenario(sc, StepPlan("concurrency", 10.0), 12, TARGETS, {})
    assert [(p.concurrency, p.duration_s) for p in conc.phases] == [(12, 10.0)]


def test_the_report_says_how_much_the_prefix_cache_saved_at_the_capacity():
    from engine.tune.capacity import CapacityRun, summary_lines

    def measure(load: float, share: float | None) -> Trial:
        ttft = 100.0 if load <= 8 else 900.0
        return Trial(load, {"ttft_p99_ms": ttft}, {"ttft_p99_ms": 500.0}, {"prefix_cache_hit_share": share})

    def lines(share):
        r = search(
            lambda load: measure(load, share), Settings(start=2.0, min_step=1.0, repeats=1), {"ttft_p99_ms": 500}
        )
        return summary_lines(CapacityRun("http://127.0.0.1:1", "shared", r, 10.0, {}))

    assert "prefix cache hits 75.0% of prompt tokens" in lines(0.75)
    assert not any("prefix cache" in line for line in lines(None))  # no counter: nothing claimed
