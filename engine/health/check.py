"""One look at an engine: `ascendctl probe URL | RUN`. Alive and answering (healthy), alive and
answering nothing (hung), nothing answering (unreachable), or not an OpenAI server at all.

One probe, not a streak: a Kubernetes livenessProbe or a container HEALTHCHECK counts failures in
a row itself (failureThreshold, --retries), so here a single failed probe is enough to say hung.
Given a RUN of `ascendctl serve` on this host, its process tree is looked at too (an EngineCore
gone under a living API server), and a hang the supervisor recorded is named.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from engine import httpread, runs
from engine.errors import BadInput, Unreachable
from engine.health.hang import Evidence, HangLimits, HangMonitor, Verdict, served_model
from engine.i18n import Msg, _

HEALTHY, HUNG, UNREACHABLE, NOT_OPENAI = "healthy", "hung", "unreachable", "not-openai"


@dataclass(frozen=True)
class Target:
    url: str
    run_id: str | None = None
    pid: int | None = None  # the API server's, for a live run of this host


@dataclass(frozen=True)
class ProbeReport:
    target: str
    url: str
    status: str  # healthy | hung | unreachable | not-openai
    summary: str  # the evidence on one line (or why it could not be judged)
    seconds: float  # how long the look took
    model: str | None = None
    run_id: str | None = None
    verdict: Verdict | None = None


def resolve(target: str) -> Target:
    """A URL as it is; else a run: its id (or a unique prefix) under the state dir, or a run
    directory. BadInput when no run matches."""
    if "://" in target:
        return Target(target.rstrip("/"))
    path = Path(target)
    info = None
    if (path / runs.RUN_FILE).is_file():
        info, why = runs.load_run(path)
        if info is None:
            raise BadInput(
                why or _("{path}: no run record").format(path=path),
                _("give a URL or the id of a run (`ascendctl top` lists them)"),
            )
    else:
        matches = [r for r in runs.list_runs() if r.run_id == target or r.run_id.startswith(target)]
        exact = [r for r in matches if r.run_id == target]
        if exact:
            matches = exact
        if len(matches) != 1:
            what = (
                _("no run matches {target}")
                if not matches
                else _("{n} runs match {target}").format(n=len(matches), target="{target}")
            )
            raise BadInput(
                what.format(target=repr(target)),
                _("give a URL (http://127.0.0.1:8000) or a run id from `ascendctl top --once` / the run directory"),
            )
        info = matches[0]
    if not info.serves_api:
        raise BadInput(
            _("run {run} serves no API on this host (a headless rank)").format(run=info.run_id),
            _("probe node 0's URL"),
        )
    return Target(info.url.rstrip("/"), info.run_id, info.pid if info.alive() else None)


def probe(
    target: str,
    limits: HangLimits,
    timeout: float | None = None,
    api_key: str | None = None,
    client: httpx.Client | None = None,
) -> ProbeReport:
    """Look once. Never raises for the engine's state: unreachable and not-openai are statuses."""
    started = time.monotonic()
    t = resolve(target)
    limits = dataclasses.replace(limits, probe_failures=1)
    http = client or httpread.client()
    try:

        def report(status: str, summary: str, model: str | None = None, verdict: Verdict | None = None):
            return ProbeReport(target, t.url, status, summary, time.monotonic() - started, model, t.run_id, verdict)

        try:
            model = served_model(http, t.url, min(limits.probe_timeout_s, 5.0), api_key)
        except Unreachable as exc:
            return report(UNREACHABLE, exc.cause)
        except BadInput as exc:
            return report(NOT_OPENAI, exc.cause)
        monitor = HangMonitor(t.url, limits, pid=t.pid, model=model, api_key=api_key, client=http)
        monitor.process.expect_core = True
        monitor.probe_first = True  # one look: the probe now, not a baseline for later
        monitor.fixed_timeout = timeout
        verdict = monitor.tick()  # metrics, process tree, the probe
        if monitor.failures:  # metrics again: did a token come out while the probe waited?
            later = monitor.tick()
            progress = tuple(e for e in later.parts if e.part == "progress")
            kept = tuple(e for e in verdict.parts if e.part != "progress")
            verdict = Verdict(verdict.hung or later.hung, kept + progress)
        last = monitor.last_result
        if last is not None and not last.reached:
            return report(
                UNREACHABLE, _("the completion could not be sent ({error})").format(error=last.error), model, verdict
            )
        if not verdict.hung and last is not None and last.ok:
            answered = Evidence("probe", Msg("probe answered in {seconds} s", seconds=f"{last.seconds:.2f}"), False)
            verdict = Verdict(False, (answered, *verdict.parts))
        verdict = _with_recorded(verdict, t)
        return report(HUNG if verdict.hung else HEALTHY, verdict.summary, model, verdict)
    finally:
        if client is None:
            http.close()


def _with_recorded(verdict: Verdict, t: Target) -> Verdict:
    """A live run's last hang, as the supervisor recorded it, when the engine is hung now."""
    if not verdict.hung or t.run_id is None:
        return verdict
    info = next((r for r in runs.list_runs() if r.run_id == t.run_id), None)
    if info is None or not info.hangs:
        return verdict
    last = info.hangs[-1]
    return Verdict(True, (*verdict.parts, Evidence("record", f"evidence saved in {last.evidence_dir}", False)))


__all__ = ["HEALTHY", "HUNG", "NOT_OPENAI", "UNREACHABLE", "ProbeReport", "Target", "probe", "resolve"]
