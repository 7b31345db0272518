"""One step of a capacity search: the scenario's workload at one load, as one bench run.

The load generator is bench's (engine/bench/runner.py: its client, its phases, its verdicts): a
step is the scenario with its phases replaced by one phase at the load asked for (Poisson arrivals
at a rate, or N requests always in flight), judged by bench against the search's targets."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Callable

from engine.bench.report import BenchReport
from engine.bench.scenario import Phase, Scenario
from engine.i18n import Msg
from engine.tune.search import Interrupted, Trial


@dataclasses.dataclass(frozen=True)
class StepPlan:
    """How each step runs."""

    by: str  # rate | concurrency
    duration_s: float = 30.0
    drain_grace_s: float = 30.0  # requests still running this long after the step: the load was not carried


def step_scenario(base: Scenario, plan: StepPlan, load: float, targets, goodput) -> Scenario:
    """The scenario at one load: one phase, the search's targets as its SLOs."""
    if base.trace is not None:
        phase = Phase("step", base.trace.duration_at(load), rate=load, arrival="trace")
    elif plan.by == "rate":
        cap = next((p.max_concurrency for p in base.phases if p.rate is not None and p.max_concurrency), None)
        phase = Phase("step", plan.duration_s, rate=load, arrival="poisson", max_concurrency=cap)
    else:
        phase = Phase("step", plan.duration_s, concurrency=int(load))
    return dataclasses.replace(
        base,
        name=f"{base.name} at {phase.load}",
        phases=(phase,),
        slo=dict(targets),
        goodput=dict(goodput),
        drain_after=None,
        max_requests=None,
    )


def figures_of(report: BenchReport) -> dict[str, float | None]:
    """What the tune report shows of a step (the Pareto front reads tokens/s per user and in total)."""
    tpot = report.tpot_ms.mean
    return {
        "request_rate": report.request_rate,
        "offered_rate": report.generator.offered_rate,
        "output_tokens_per_s": report.output_tokens_per_s,
        "tokens_per_s_per_user": 1000.0 / tpot if tpot else None,
        "ttft_p50_ms": report.ttft_ms.p50,
        "ttft_p99_ms": report.ttft_ms.p99,
        "itl_p99_ms": report.itl_ms.p99,
        "tpot_mean_ms": tpot,
        "e2e_p99_ms": report.e2e_ms.p99,
        "error_rate": report.error_rate,
        "completed": float(report.completed),
        "goodput_rate": report.goodput.rate if report.goodput else None,
        "goodput_share": report.goodput.share if report.goodput else None,
        "prefix_cache_hit_share": report.server.prefix_cache_hit_share if report.server else None,
    }


def trial_of(report: BenchReport, load: float, targets, grace_s: float) -> Trial:
    values = {v.name: v.actual for v in report.slo}
    problem = ""
    if report.completed == 0:
        problem = Msg("no request finished")
    elif report.cancelled:
        problem = Msg(
            "{n} requests were still unfinished {seconds} s after the step",
            n=report.cancelled,
            seconds=f"{grace_s:g}",
        )
    elif report.generator.behind:
        lag = report.generator.lag_p99_ms or 0.0
        problem = Msg("client-bound: the load generator fell behind its schedule (p99 lag {lag} ms)", lag=f"{lag:,.0f}")
    return Trial(load, values, dict(targets), figures_of(report), problem)


class BenchMeasure:
    """`measure(load)` for the search: one bench run per call. `stop` (a threading.Event, set by a
    signal handler) ends the run in progress and the search with it."""

    def __init__(
        self,
        url: str,
        base: Scenario,
        plan: StepPlan,
        targets,
        goodput,
        *,
        model: str | None = None,
        stop: threading.Event | None = None,
        on_report: Callable[[float, BenchReport], None] | None = None,
    ) -> None:
        self.url, self.base, self.plan = url, base, plan
        self.targets, self.goodput = dict(targets), dict(goodput)
        self.model = model
        self.stop = stop or threading.Event()
        self.on_report = on_report
        self.notes: list[str] = []

    def __call__(self, load: float) -> Trial:
        if self.stop.is_set():
            raise Interrupted()
        sc = step_scenario(self.base, self.plan, load, self.targets, self.goodput)
        report = asyncio.run(self._run(sc))
        if report.interrupted or self.stop.is_set():
            raise Interrupted()
        for note in report.notes:
            if note not in self.notes:
                self.notes.append(note)
        if self.on_report is not None:
            self.on_report(load, report)
        return trial_of(report, load, self.targets, self.plan.drain_grace_s)

    async def _run(self, sc: Scenario) -> BenchReport:
        from engine.bench.runner import BenchRunner

        stop = asyncio.Event()

        async def relay() -> None:
            while not self.stop.is_set():
                await asyncio.sleep(0.1)
            stop.set()

        watcher = asyncio.create_task(relay())
        try:
            runner = BenchRunner(self.url, sc, model=self.model, drain_grace_s=self.plan.drain_grace_s)
            return await runner.run(stop)
        finally:
            watcher.cancel()
