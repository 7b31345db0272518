"""`tune capacity`: the search (engine/tune/search.py) driven by bench runs (engine/tune/measure.py),
and its result as data: the capacity with its band, the figures at it, where each target broke."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable, Mapping

from engine.bench.report import prefix_cache_phrase
from engine.bench.scenario import SLOS, Scenario
from engine.i18n import N_, _, shown, spaced
from engine.tune.measure import BenchMeasure, StepPlan
from engine.tune.search import Point, Result, Settings, search
from engine.tune.slo import goodput_targets, short_name

UNIT = {"rate": "req/s", "concurrency": N_("concurrent")}  # JSON's "unit"; shown through _()


@dataclass(frozen=True)
class CapacityRun:
    url: str
    scenario: str
    result: Result
    step_s: float
    goodput_slo_ms: Mapping[str, float]
    notes: tuple[str, ...] = field(default_factory=tuple)
    elapsed_s: float = 0.0


def default_settings(sc: Scenario, by: str) -> Settings:
    """Start where the scenario's own load is (its first phase of this kind), else low."""
    if by == "rate":
        start = next((p.rate for p in sc.phases if p.rate), None) or 1.0
        return Settings(by="rate", start=start, min_step=max(0.05, start * 0.05), min_load=0.05)
    start = next((p.concurrency for p in sc.phases if p.concurrency), None) or 1
    return Settings(by="concurrency", start=float(start), min_step=1.0, min_load=1.0, max_load=4096.0)


def measure_capacity(
    url: str,
    sc: Scenario,
    targets: Mapping[str, float],
    settings: Settings,
    plan: StepPlan,
    *,
    model: str | None = None,
    stop: threading.Event | None = None,
    on_point: Callable[[Point, int], None] | None = None,
    notes: tuple[str, ...] = (),
) -> CapacityRun:
    import time

    goodput = goodput_targets(targets, sc.goodput)
    measure = BenchMeasure(url, sc, plan, targets, goodput, model=model, stop=stop)
    t0 = time.monotonic()
    result = search(measure, settings, targets, on_point)
    return CapacityRun(
        url,
        sc.name,
        result,
        plan.duration_s,
        goodput,
        tuple(notes) + tuple(measure.notes),
        round(time.monotonic() - t0, 1),
    )


def fmt_value(name: str, value: float | None) -> str:
    if value is None:
        return "N/A"
    unit = SLOS[name][0]
    if unit == "ms":
        return f"{value:,.1f} ms"
    if name in ("error_rate", "goodput_share"):
        return f"{value:.2%}"
    return f"{value:,.1f} {unit}".strip()


def fmt_load(by: str, load: float | None) -> str:
    if load is None:
        return "N/A"
    return f"{load:g} {_(UNIT[by])}"


def point_line(p: Point, n: int, by: str) -> str:
    """One progress line: the load, each target's value against its target, the verdict."""
    parts = []
    t = p.trials[-1]
    for name, target in t.targets.items():
        mark = "" if p.held(name) else " " + _("MISS")
        parts.append(f"{short_name(name)} {fmt_value(name, p.value(name))}/{fmt_value(name, target)}{mark}")
    verdict = _("HOLDS") if p.ok else _("BREAKS")
    if len(p.trials) > 1:
        verdict += " " + _("({held}/{runs} runs held)").format(held=sum(x.ok for x in p.trials), runs=len(p.trials))
    why = _("; ") + shown(p.problem()) if p.problem() else ""
    return _("step {n}: {load}: {verdict} | {values}{why}").format(
        n=n, load=fmt_load(by, p.load), verdict=verdict, values=_(", ").join(parts), why=why
    )


def point_doc(p: Point) -> dict:
    return {
        "load": p.load,
        "held": p.ok,
        "runs": len(p.trials),
        "runs_held": sum(t.ok for t in p.trials),
        "values": {n: p.value(n) for n in p.trials[0].targets},
        "figures": {k: p.figure(k) for k in p.trials[0].figures},
        "problem": p.problem() or None,
    }


def capacity_doc(run: CapacityRun) -> dict:
    """The result as JSON (`--json`, and each line of a sweep's results)."""
    r = run.result
    at = r.at
    return {
        "url": run.url,
        "scenario": run.scenario,
        "by": r.by,
        "unit": UNIT[r.by],
        "targets": dict(r.targets),
        "capacity": r.capacity,
        "band": r.band,
        "bracket": [r.low, r.high],
        "binding": r.binding,
        "stopped": r.stopped,
        "at_capacity": point_doc(at) if at is not None else None,
        "goodput_slo_ms": dict(run.goodput_slo_ms),
        "breaks": [{"target": b.target, "breaks_at": b.breaks_at, "held_to": b.held_to} for b in r.breaks],
        "steps": [point_doc(p) for p in r.points],
        "measurements": r.measurements,
        "step_s": run.step_s,
        "elapsed_s": run.elapsed_s,
        "notes": list(run.notes),
    }


def summary_lines(run: CapacityRun) -> list[str]:
    """The human report."""
    r = run.result
    by = r.by
    out = []
    if r.capacity is None:
        out.append(
            _("capacity: none found: the targets did not hold even at {load}").format(
                load=fmt_load(by, min(p.load for p in r.points))
            )
            if r.points
            else _("capacity: not measured (interrupted before the first step)")
        )
    else:
        more = {
            "max_load": _(" (the highest load allowed: the server may carry more)"),
            "max_points": _(" (the step budget ran out before the search converged)"),
            "interrupted": _(" (interrupted: the best found so far)"),
        }.get(r.stopped, "")
        band = f" ± {r.band:g}" if r.band else ""
        out.append(
            _("capacity: {capacity}{more}, {runs} runs of {seconds} s").format(
                capacity=f"{r.capacity:g}{band} {_(UNIT[by])}",
                more=more,
                runs=r.measurements,
                seconds=f"{run.step_s:g}",
            )
        )
    at = r.at
    if at is not None:
        figs = [
            _("{name} {value} (target {target})").format(
                name=short_name(n), value=fmt_value(n, at.value(n)), target=fmt_value(n, t)
            )
            for n, t in r.targets.items()
        ]
        out.append(_("at it: ") + _(", ").join(figs))
        tput = at.figure("output_tokens_per_s")
        per_user = at.figure("tokens_per_s_per_user")
        rate = at.figure("request_rate")
        out.append(
            _("throughput: ")
            + _(", ").join(
                x
                for x in (
                    f"{rate:.2f} req/s" if rate is not None else "",
                    _("{rate} output tok/s").format(rate=f"{tput:,.0f}") if tput is not None else "",
                    _("{rate} tok/s per user").format(rate=f"{per_user:,.1f}") if per_user is not None else "",
                )
                if x
            )
        )
        g_rate, g_share = at.figure("goodput_rate"), at.figure("goodput_share")
        if run.goodput_slo_ms and g_rate is not None:
            slo = " ".join(f"{k}:{v:g}" for k, v in run.goodput_slo_ms.items())
            share = _(" ({share} of requests)").format(share=f"{g_share:.1%}") if g_share is not None else ""
            out.append(_("goodput ({slo} ms): {rate} req/s{share}").format(slo=slo, rate=f"{g_rate:.2f}", share=share))
        if phrase := prefix_cache_phrase(at.figure("prefix_cache_hit_share")):
            out.append(phrase)
    for b in r.breaks:
        if b.breaks_at is None:
            out.append("  " + _("{target}: held at every load tried").format(target=short_name(b.target)))
        else:
            held = _(", held at {load}").format(load=fmt_load(by, b.held_to)) if b.held_to is not None else ""
            out.append(
                "  "
                + _("{target}: breaks first at {load}{held}").format(
                    target=short_name(b.target), load=fmt_load(by, b.breaks_at), held=held
                )
            )
    if r.binding:
        out.append(_("the binding target: {target}").format(target=short_name(r.binding)))
    out.extend(spaced(_("note:")) + shown(n) for n in run.notes)
    return out
