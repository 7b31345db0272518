"""The bench report: figures from the request results, SLO verdicts, and the engine's own counters."""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

from engine.bench.client import RequestResult
from engine.bench.scenario import SLOS, Scenario
from engine.bench.stats import Summary, percentile, summarize
from engine.i18n import Msg


@dataclass(frozen=True)
class Verdict:
    name: str
    target: float
    actual: float | None  # None: not measurable in this run (counts as a miss, unless ok is None)
    unit: str
    bound: str  # "max": actual must not exceed target; "min": must reach it
    # None: does not apply to this run (no queue formed to drain, the run was interrupted before
    # it could be measured), or a miss this run cannot blame on the server (`why`): neither a
    # pass nor a miss.
    ok: bool | None
    why: str = ""  # for ok None after a miss: what the miss is instead ("client-bound", "noise")


@dataclass(frozen=True)
class PhaseFigures:
    name: str
    load: str
    duration_s: float
    sent: int
    completed: int
    failed: int
    request_rate: float | None  # completed requests/s within the phase
    output_tokens_per_s: float | None
    start_s: float = 0.0  # run clock when the phase began


@dataclass(frozen=True)
class QueueFigures:
    """The engine's pending queue (vllm:num_requests_waiting) around the burst."""

    after_phase: str
    baseline: float | None  # median before the burst
    peak: float | None  # highest during the burst
    drain_s: float | None  # from the end of the burst until back at the baseline; None: never (or no queue)
    samples: int
    # False: the queue never rose above its baseline during the burst, so nothing drained: the
    # first sample after the burst is no drain time. None: no reading came back during the burst
    # (each /metrics page took longer than the burst on a saturated host): nothing can be said.
    formed: bool | None = True
    # The KV cache (vllm:kv_cache_usage_perc, 0..1) the same way: back within KV_TOLERANCE of
    # its median before the burst; None when the engine does not report it.
    kv_baseline: float | None = None
    kv_peak: float | None = None
    kv_drain_s: float | None = None
    kv_formed: bool = False  # the burst raised KV usage beyond the tolerance


KV_TOLERANCE = 0.05  # of the pool: "back down" means within 5 points of the level before the burst


@dataclass(frozen=True)
class ServerCounters:
    """Deltas of the engine's own counters over the run (other traffic on the server adds to them)."""

    generation_tokens: float | None
    prompt_tokens: float | None
    requests_ok: float | None
    prefix_cache_queries: float | None = None  # prompt tokens looked up in the prefix cache
    prefix_cache_hits: float | None = None  # of those, tokens found there (work not done again)

    @property
    def prefix_cache_hit_share(self) -> float | None:
        """The share of the prompt tokens looked up that the prefix cache already held."""
        if not self.prefix_cache_queries or self.prefix_cache_hits is None:
            return None
        return self.prefix_cache_hits / self.prefix_cache_queries


def prefix_cache_phrase(share: float | None) -> str:
    """How much of the prompt work the engine's prefix cache saved over a run ("" when unknown:
    no counter, the cache off, or no prompt looked up)."""
    if share is None:
        return ""
    from engine.i18n import _

    return _("prefix cache hits {share} of prompt tokens").format(share=f"{share:.1%}")


@dataclass(frozen=True)
class GeneratorFigures:
    """How well the load generator kept its schedule (rate phases): large lag means the client,
    not the server, limited the offered load."""

    offered_rate: float | None
    lag_p99_ms: float | None
    behind: bool


@dataclass(frozen=True)
class Goodput:
    """Requests that met every per-request SLO, defined as `vllm bench serve --goodput` defines it
    (vllm/benchmarks/serve.py, calculate_metrics): a finished request counts when its TTFT, its
    TPOT (0 for an answer of one token) and its end-to-end latency are each at or under the
    targets given; a failed request never counts. The rate is those requests per second of the
    run, vLLM's `request_goodput`; the share is of all finished requests (ok + failed)."""

    slo_ms: Mapping[str, float]  # ttft / tpot / e2el -> milliseconds, vLLM's names
    good: int
    share: float | None
    rate: float | None


@dataclass(frozen=True)
class EngineSeries:
    """The engine's gauges as sampled from /metrics during the run (run clock, seconds)."""

    t_s: tuple[float, ...] = ()
    waiting: tuple[float | None, ...] = ()
    running: tuple[float | None, ...] = ()
    kv_usage: tuple[float | None, ...] = ()  # 0..1 of the KV pool


ITL_KEEP = 20_000  # inter-token gaps kept in the report; more are subsampled (seeded)


@dataclass(frozen=True)
class Samples:
    """Per-request figures, one column each, one entry per finished request in send order: what
    `bench compare` resamples and the HTML report plots. Milliseconds are rounded to 0.01 ms; a
    failed request has `error` set and no latencies."""

    sent_s: tuple[float, ...] = ()
    phase: tuple[int, ...] = ()
    error: tuple[str | None, ...] = ()
    ttft_ms: tuple[float | None, ...] = ()
    tpot_ms: tuple[float | None, ...] = ()  # None for answers of one token or none
    e2e_ms: tuple[float | None, ...] = ()
    output_tokens: tuple[int, ...] = ()
    itl_ms: tuple[float, ...] = ()  # every gap, or ITL_KEEP of them drawn at random (seeded)
    itl_count: int = 0  # gaps measured in all
    engine: EngineSeries = field(default_factory=EngineSeries)


@dataclass(frozen=True)
class BenchReport:
    scenario: str
    description: str
    url: str
    model: str
    api: str
    started_at: str
    duration_s: float
    interrupted: bool
    requests: int
    completed: int
    failed: int
    cancelled: int
    error_rate: float | None
    errors: Mapping[str, int]
    error_examples: Mapping[str, str]
    ttft_ms: Summary
    itl_ms: Summary
    tpot_ms: Summary
    e2e_ms: Summary
    prompt_tokens: Summary
    prompt_tokens_sizing: str  # "tokenizer" (the server's /tokenize) or "estimate"
    output_tokens: int
    output_tokens_per_s: float | None
    request_rate: float | None
    phases: tuple[PhaseFigures, ...]
    server: ServerCounters | None
    queue: QueueFigures | None
    generator: GeneratorFigures
    slo: tuple[Verdict, ...]
    passed: bool
    notes: tuple[str, ...] = field(default_factory=tuple)
    goodput: Goodput | None = None
    samples: Samples = field(default_factory=Samples)


def _rate(count: float, seconds: float) -> float | None:
    return count / seconds if seconds > 0 else None


def judge(
    slo: Mapping[str, float], actual: Mapping[str, float | None], not_applicable: frozenset[str] = frozenset()
) -> tuple[Verdict, ...]:
    out = []
    for name, target in slo.items():
        unit, bound = SLOS[name]
        value = actual.get(name)
        ok: bool | None
        if name in not_applicable:
            ok = None
        elif value is None or (isinstance(value, float) and math.isnan(value)):
            ok = False
        elif bound == "max":
            ok = value <= target
        else:
            ok = value >= target
        out.append(Verdict(name, target, value, unit, bound, ok))
    return tuple(out)


# SLOs that measure how much the server delivered at the offered load: a miss says nothing about
# the server when the client offered less than the schedule, or when it lies within the spread
# the schedule's own random arrivals give a run of this length.
THROUGHPUT_SLOS = frozenset({"output_tokens_per_s"})
NOISE_SIGMAS = 2.0


def arrival_noise(windows) -> tuple[float, int] | None:
    """(relative spread, expected requests) of the offered load of the Poisson rate phases: the
    number of arrivals in a run is Poisson, so the load actually offered varies by about
    NOISE_SIGMAS / sqrt(n) around the schedule's. None without such phases."""
    poisson = [w for w in windows if w.phase.rate and w.phase.arrival == "poisson"]
    n = sum(w.phase.rate * w.phase.duration_s for w in poisson)
    if n < 1:
        return None
    return NOISE_SIGMAS / math.sqrt(n), int(round(n))


def excuse_throughput(
    verdicts: Sequence[Verdict], lag_p99_ms: float | None, behind: bool, noise: tuple[float, int] | None
) -> tuple[Verdict, ...]:
    """A throughput target missed because of our own client, or by less than the run's noise, is
    not a FAIL: it is not judged, and `why` says which."""
    out = []
    for v in verdicts:
        if v.ok is False and v.name in THROUGHPUT_SLOS and v.actual is not None and v.target:
            short = 1 - v.actual / v.target
            if behind:
                lag = Msg(" (p99 lag {lag} ms)", lag=f"{lag_p99_ms:,.0f}") if lag_p99_ms is not None else ""
                v = replace(
                    v,
                    ok=None,
                    why=Msg(
                        "client-bound: the load generator fell behind its schedule{lag}, so the server was "
                        "offered less than the target assumes; rerun from a less busy client, or with --scale below 1",
                        lag=lag,
                    ),
                )
            elif noise is not None and short <= noise[0]:
                v = replace(
                    v,
                    ok=None,
                    why=Msg(
                        "within noise: {short} short, while the random arrivals of ~{n} requests alone "
                        "vary the offered load by about {noise}; a longer run (--duration) can judge it",
                        short=f"{short:.0%}",
                        n=noise[1],
                        noise=f"{noise[0]:.0%}",
                    ),
                )
        out.append(v)
    return tuple(out)


def _kv_drain(kv: Sequence[tuple[float, float]], start: float, end: float) -> tuple:
    before = sorted(v for t, v in kv if t < start)
    during = [v for t, v in kv if start <= t < end]
    if not during:
        return None, None, None, False
    baseline = percentile(before, 50) if before else 0.0
    peak = max(during)
    level = (baseline or 0.0) + KV_TOLERANCE
    if peak <= level:
        return baseline, peak, None, False
    drain = next((t - end for t, v in kv if t >= end and v <= level), None)
    return baseline, peak, drain, True


def queue_figures(
    sc: Scenario, samples: Sequence[tuple[float, float]], windows, kv: Sequence[tuple[float, float]] = ()
) -> QueueFigures | None:
    """Drain time of the pending queue after the `drain_after` phase, from (time, waiting) samples,
    and of the KV cache's usage from (time, usage) samples."""
    if not sc.drain_after:
        return None
    burst = next(w for w in windows if w.phase.name == sc.drain_after)
    kv_figures = _kv_drain(kv, burst.start_s, burst.end_s)
    before = [v for t, v in samples if t < burst.start_s]
    during = [v for t, v in samples if burst.start_s <= t < burst.end_s]
    baseline = percentile(sorted(before), 50) if before else 0.0
    if not during:
        return QueueFigures(sc.drain_after, baseline, None, None, len(samples), None, *kv_figures)
    peak = max(during)
    if peak <= (baseline or 0.0):
        return QueueFigures(sc.drain_after, baseline, peak, None, len(samples), False, *kv_figures)
    drain = None
    for t, v in samples:
        if t >= burst.end_s and v <= (baseline or 0.0):
            drain = t - burst.end_s
            break
    return QueueFigures(sc.drain_after, baseline, peak, drain, len(samples), True, *kv_figures)


def build_report(
    *,
    sc: Scenario,
    url: str,
    model: str,
    started_at: str,
    results: Sequence[RequestResult],
    cancelled: int,
    load_s: float,
    windows,
    interrupted: bool,
    sizing: str,
    server: ServerCounters | None,
    queue: QueueFigures | None,
    notes: Sequence[str],
    engine: EngineSeries | None = None,
) -> BenchReport:
    ok = [r for r in results if r.ok]
    bad = [r for r in results if not r.ok]
    kinds = Counter(r.error or "unknown" for r in bad)
    examples: dict[str, str] = {}
    for r in bad:
        examples.setdefault(r.error or "unknown", r.detail)
    done = len(ok) + len(bad)
    error_rate = len(bad) / done if done else None
    out_tokens = sum(r.output_tokens for r in ok)
    itl = [g for r in ok for g in r.itl_s]
    tpot = [t for t in map(_tpot_s, ok) if t is not None]
    phases = []
    for w in windows:
        mine = [r for r in results if r.phase == w.index]
        good = [r for r in mine if r.ok]
        span = min(w.end_s, load_s) - w.start_s
        phases.append(
            PhaseFigures(
                w.phase.name,
                w.phase.load,
                round(max(0.0, span), 3),
                len(mine),
                len(good),
                len(mine) - len(good),
                _rate(len(good), span),
                _rate(sum(r.output_tokens for r in good), span),
                round(w.start_s, 3),
            )
        )
    rate_windows = [w for w in windows if w.phase.rate]
    lags = sorted(r.lag_s for r in results if r.phase in {w.index for w in rate_windows})
    offered = None
    if rate_windows:
        offered = sum(w.phase.rate * w.phase.duration_s for w in rate_windows) / sum(
            w.phase.duration_s for w in rate_windows
        )
    lag_p99 = percentile(lags, 99)
    behind = bool(lag_p99 is not None and lag_p99 > 0.05)  # 50 ms late at p99: the client limited the load
    notes = list(notes)
    if behind:
        notes.append(
            f"the load generator fell behind its schedule (p99 lag {lag_p99 * 1000:.0f} ms): "
            "the offered rate was lower than the scenario asks"
        )
    missing_usage = sum(1 for r in ok if not r.usage_reported)
    if missing_usage:
        notes.append(
            f"{missing_usage} answers carried no usage record: their output tokens were counted from the stream"
        )
    tput = _rate(out_tokens, load_s)
    e2e = summarize([r.e2e_s for r in ok if r.e2e_s is not None], 1000)
    ttft = summarize([r.ttft_s for r in ok if r.ttft_s is not None], 1000)
    itl_s = summarize(itl, 1000)
    tpot_summary = summarize(tpot, 1000)
    good = goodput_of(results, sc.goodput, load_s) if sc.goodput else None
    actual = {
        "goodput_share": good.share if good else None,
        "ttft_p99_ms": ttft.p99,
        "itl_p99_ms": itl_s.p99,
        "e2e_p99_ms": e2e.p99,
        "error_rate": error_rate,
        "output_tokens_per_s": tput,
        "queue_drain_s": queue.drain_s if queue else None,
        "kv_drain_s": queue.kv_drain_s if queue else None,
        "ttft_mean_ms": ttft.mean,
        "itl_mean_ms": itl_s.mean,
        "tpot_mean_ms": tpot_summary.mean,
        "e2e_mean_ms": e2e.mean,
    }
    # No queue formed: nothing to drain. Interrupted before the drain was seen: not measured.
    # Either way N/A, not a miss.
    no_drain = (queue is not None and not queue.formed) or (interrupted and (queue is None or queue.drain_s is None))
    no_kv_drain = (queue is not None and queue.kv_peak is not None and not queue.kv_formed) or (
        interrupted and (queue is None or queue.kv_drain_s is None)
    )
    verdicts = judge(
        sc.slo,
        actual,
        frozenset({"queue_drain_s"} if no_drain else ()) | frozenset({"kv_drain_s"} if no_kv_drain else ()),
    )
    verdicts = excuse_throughput(
        verdicts, lag_p99 * 1000 if lag_p99 is not None else None, behind, arrival_noise(rate_windows)
    )
    return BenchReport(
        scenario=sc.name,
        description=sc.description,
        url=url,
        model=model,
        api=sc.api,
        started_at=started_at,
        duration_s=round(load_s, 3),
        interrupted=interrupted,
        requests=len(results) + cancelled,
        completed=len(ok),
        failed=len(bad),
        cancelled=cancelled,
        error_rate=error_rate,
        errors=dict(kinds),
        error_examples=examples,
        ttft_ms=ttft,
        itl_ms=itl_s,
        tpot_ms=tpot_summary,
        e2e_ms=e2e,
        prompt_tokens=summarize([float(r.prompt_tokens) for r in ok if r.prompt_tokens is not None]),
        prompt_tokens_sizing=sizing,
        output_tokens=out_tokens,
        output_tokens_per_s=tput,
        request_rate=_rate(len(ok), load_s),
        phases=tuple(phases),
        server=server,
        queue=queue,
        generator=GeneratorFigures(offered, lag_p99 * 1000 if lag_p99 is not None else None, behind),
        slo=verdicts,
        passed=all(v.ok is not False for v in verdicts) and not interrupted,
        notes=tuple(notes),
        goodput=good,
        samples=samples_of(results, itl, sc.seed, engine or EngineSeries()),
    )


def dumps_report(doc: Mapping, indent: int = 2) -> str:
    """The report as JSON, indented for reading, with every list of plain values on one line: the
    per-request samples stay a few lines instead of one line per number."""
    import json

    def walk(obj, depth: int) -> str:
        pad = " " * (indent * (depth + 1))
        if isinstance(obj, Mapping) and obj:
            items = [f"{pad}{json.dumps(str(k), ensure_ascii=False)}: {walk(v, depth + 1)}" for k, v in obj.items()]
            return "{\n" + ",\n".join(items) + "\n" + " " * (indent * depth) + "}"
        if isinstance(obj, (list, tuple)) and obj and any(isinstance(v, (Mapping, list, tuple)) for v in obj):
            return "[\n" + ",\n".join(pad + walk(v, depth + 1) for v in obj) + "\n" + " " * (indent * depth) + "]"
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":") if isinstance(obj, (list, tuple)) else None)

    return walk(doc, 0) + "\n"


def _tpot_s(r: RequestResult) -> float | None:
    if r.e2e_s is None or r.ttft_s is None or r.output_tokens <= 1:
        return None
    return (r.e2e_s - r.ttft_s) / (r.output_tokens - 1)


def is_good(ttft_s: float | None, tpot_s: float | None, e2e_s: float | None, slo_ms: Mapping[str, float]) -> bool:
    """One finished request against the per-request SLOs, as `vllm bench serve --goodput` judges it."""
    measured = {"ttft": ttft_s, "tpot": tpot_s or 0.0, "e2el": e2e_s}
    for key, target_ms in slo_ms.items():
        value = measured[key]
        if value is None or value > target_ms / 1000.0:
            return False
    return True


def goodput_of(results: Sequence[RequestResult], slo_ms: Mapping[str, float], load_s: float) -> Goodput:
    good = sum(1 for r in results if r.ok and is_good(r.ttft_s, _tpot_s(r), r.e2e_s, slo_ms))
    return Goodput(dict(slo_ms), good, good / len(results) if results else None, _rate(good, load_s))


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 2)


def samples_of(results: Sequence[RequestResult], itl_s: Sequence[float], seed: int, engine: EngineSeries) -> Samples:
    rows = sorted(results, key=lambda r: (r.sent_s, r.index))
    itl = list(itl_s)
    if len(itl) > ITL_KEEP:
        itl = random.Random(seed).sample(itl, ITL_KEEP)
    return Samples(
        sent_s=tuple(round(r.sent_s, 3) for r in rows),
        phase=tuple(r.phase for r in rows),
        error=tuple(None if r.ok else (r.error or "unknown") for r in rows),
        ttft_ms=tuple(_ms(r.ttft_s) if r.ok else None for r in rows),
        tpot_ms=tuple(_ms(_tpot_s(r)) if r.ok else None for r in rows),
        e2e_ms=tuple(_ms(r.e2e_s) if r.ok else None for r in rows),
        output_tokens=tuple(r.output_tokens if r.ok else 0 for r in rows),
        itl_ms=tuple(round(g * 1000.0, 2) for g in itl),
        itl_count=len(itl_s),
        engine=engine,
    )
