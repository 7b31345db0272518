"""`ascendctl probe URL | RUN`: is this engine alive and answering? For people, scripts and
Kubernetes exec liveness probes."""

from __future__ import annotations

from typing import Optional

import typer

from engine.i18n import N_, _, shown

# the status as a person reads it (--json keeps the English word)
STATUS = {
    "healthy": N_("healthy"),
    "hung": N_("hung"),
    "unreachable": N_("unreachable"),
    "not-openai": N_("not-openai"),
}

EXIT_CODES = (
    "Exit codes: 0 healthy (the probe was answered); 1 hung (alive, answering nothing: the evidence on "
    "one line); 2 the URL is not an OpenAI-compatible server, or no run matches; 3 unreachable (nothing "
    "answers)."
)


def register(app: typer.Typer) -> None:
    app.command(
        "probe",
        short_help="Is an engine alive and answering? (exit 0 healthy, 1 hung, 3 unreachable)",
        help=(
            "Probe an engine once with a 1-token completion of its served model, read its /metrics (requests "
            "in, tokens out) and, for a RUN of `ascendctl serve` on this host, its process tree (EngineCore "
            "gone while the API server lives). One failed probe says hung: a Kubernetes livenessProbe "
            "(failureThreshold) or a container HEALTHCHECK (--retries) counts failures in a row. The probe's "
            "timeout is hang_probe_timeout_s of thresholds.yaml (10 s), or, while requests are in flight, four "
            "times the engine's longest time to first token if that is longer, so give the livenessProbe a "
            "timeoutSeconds above it. The API key is read from VLLM_API_KEY.\n\n" + EXIT_CODES
        ),
    )(probe)


def probe(
    target: str = typer.Argument(..., help="The engine's URL (http://127.0.0.1:8000) or a run id / run directory."),
    timeout: Optional[float] = typer.Option(
        None,
        "--timeout",
        min=0.1,
        help="Seconds the probe may take (default: hang_probe_timeout_s, or four times the engine's longest time "
        "to first token while requests are in flight, if longer).",
    ),
    profile: Optional[str] = typer.Option(
        None, "--profile", "-p", help="Take the hang_* thresholds from this profile's diagnostics section."
    ),
) -> None:
    import os

    from ascendctl.output import get_output
    from engine.health import check
    from engine.health.hang import HangLimits
    from engine.telemetry.thresholds import load_thresholds, profile_thresholds

    out = get_output()
    base = None
    if profile is not None:
        from ascendctl.profile_args import resolve

        base = profile_thresholds(resolve(profile, None, [])[0])
    limits = HangLimits.from_thresholds(load_thresholds(base=base))
    report = check.probe(target, limits, timeout=timeout, api_key=os.environ.get("VLLM_API_KEY") or None)

    def render(console) -> None:
        from rich.markup import escape

        colour = {"healthy": "green", "hung": "red"}.get(report.status, "yellow")
        named = f" ({report.model})" if report.model else ""
        console.print(
            f"[{colour}]{_(STATUS.get(report.status, report.status))}[/]"
            + _(": ")
            + f"{escape(report.url)}{escape(named)}"
            + _(": ")
            + escape(shown(report.summary)),
            highlight=False,
            soft_wrap=True,
        )

    data = {
        "target": report.target,
        "url": report.url,
        "status": report.status,
        "summary": report.summary,
        "model": report.model,
        "run_id": report.run_id,
        "seconds": round(report.seconds, 3),
        "verdict": report.verdict.as_dict() if report.verdict is not None else None,
    }
    out.emit(data, render)
    code = {check.HEALTHY: 0, check.HUNG: 1, check.NOT_OPENAI: 2, check.UNREACHABLE: 3}[report.status]
    if code:
        raise typer.Exit(code)
