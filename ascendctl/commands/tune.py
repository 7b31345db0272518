"""`ascendctl tune`: the most load a server carries within its SLO (`capacity`), and the engine
settings that raise it (`sweep`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from engine.i18n import _

GROUP_HELP = """Find by measuring: the most load a server carries within the SLO (`tune capacity URL`),
and the engine settings that raise it (`tune sweep -p PROFILE --sweep KEY=V1,V2`). Both drive
bench's load generator; docs/tune.md explains the search."""

SLO_HELP = (
    "Targets, NAME=TARGET comma-separated (repeatable): ttft_p99, itl_p99, e2el_p99 (or e2e_p99), the _mean "
    "ones and tpot_mean as durations (500ms, 0.5s); error_rate and goodput_share as shares. Default: the "
    "scenario's own latency targets. An error_rate of 1% is held unless given."
)

CAPACITY_HELP = """Find the highest load at which every SLO target holds: bracket (double or halve
the load), then bisect down to a minimum step; a load whose verdict is close (a value within 10% of
its target) is measured again and the majority decides. Prints the capacity with an error band (the
search's resolution, widened by the spread of the repeats), the figures at it, the load at which each
target breaks first, and goodput at the capacity as bench counts it.

Each step is one bench run of the scenario's workload at that load: Poisson arrivals at a rate
(`--by rate`, the default) or N requests always in flight (`--by concurrency`).

Exit codes: 0 a capacity was found; 1 the targets did not hold even at the lowest load; 2 bad flag,
SLO or scenario; 3 server unreachable; 130 interrupted (the best found so far is printed)."""


def register(app: typer.Typer) -> None:
    group = typer.Typer(help=GROUP_HELP, add_completion=False, no_args_is_help=True)
    group.command("capacity", help=CAPACITY_HELP)(capacity)
    from ascendctl.commands.tune_sweep import SWEEP_HELP, sweep

    group.command("sweep", help=SWEEP_HELP)(sweep)
    app.add_typer(group, name="tune")


def progress(line: str) -> None:
    """Progress on stderr, one plain line each (also under --json: stdout carries the data)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def capacity(
    url: str = typer.Argument(..., help="Server root URL, e.g. http://127.0.0.1:8000"),
    scenario: str = typer.Option(
        "chat-qa", "--scenario", "-s", help="Workload: a built-in bench scenario or FILE.yaml."
    ),
    slo: Optional[List[str]] = typer.Option(None, "--slo", help=SLO_HELP),
    by: str = typer.Option("rate", "--by", help="What to raise: rate (Poisson req/s) | concurrency."),
    scale: float = typer.Option(1.0, "--scale", help="Shrink or grow the scenario's token lengths (as bench --scale)."),
    step_s: float = typer.Option(30.0, "--step-duration", min=1, help="Seconds of load per step."),
    start: Optional[float] = typer.Option(None, "--start", help="First load tried (default: the scenario's)."),
    min_step: Optional[float] = typer.Option(
        None, "--min-step", help="Stop bisecting when the bracket is this narrow."
    ),
    max_load: Optional[float] = typer.Option(None, "--max-load", help="Never offer more than this load."),
    repeats: int = typer.Option(3, "--repeats", min=1, help="Runs in all at a load whose verdict is close."),
    max_steps: int = typer.Option(16, "--max-steps", min=1, help="Runs at most (repeats included)."),
    model: Optional[str] = typer.Option(None, "--model", help="Model name to send (default: the first served)."),
    out_file: Optional[Path] = typer.Option(None, "--out", "-o", help="Also write the JSON result to this file."),
) -> None:
    from ascendctl.output import get_output
    from engine.errors import ProblemsFound
    from engine.tune.capacity import capacity_doc, point_line, summary_lines

    out = get_output()
    sc, targets, settings, plan, notes = capacity_inputs(
        scenario, slo, by, scale, step_s, start, min_step, max_load, repeats, max_steps
    )
    progress(
        _(
            "tune capacity: {scenario} against {url}, by {by}, {targets} targets, steps of {seconds} s "
            "(at most {runs} runs, ~{minutes} min)"
        ).format(
            scenario=sc.name,
            url=url,
            by=by,
            targets=len(targets),
            seconds=f"{step_s:g}",
            runs=max_steps,
            minutes=f"{max_steps * (step_s + 5) / 60:.0f}",
        )
    )
    run = run_capacity(url, sc, targets, settings, plan, model, notes, lambda p, n: progress(point_line(p, n, by)))
    doc = capacity_doc(run)
    if out_file is not None:
        import json

        out_file.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    out.emit(doc, lambda console: [console.print(line, markup=False, highlight=False) for line in summary_lines(run)])
    if run.result.stopped == "interrupted":
        raise typer.Exit(130)
    if run.result.capacity is None:
        raise ProblemsFound(
            _("the targets did not hold at any load tried"),
            _("loosen the targets, lower --start, or check the server (`ascendctl bench URL` at a light load)"),
        )


def capacity_inputs(scenario, slo, by, scale, step_s, start, min_step, max_load, repeats, max_steps):
    """Every flag checked before anything is sent (BadInput, exit 2)."""
    import dataclasses

    from engine.bench.scenario import MAX_RATE, load_scenario, scaled
    from engine.errors import BadInput
    from engine.tune.capacity import default_settings
    from engine.tune.measure import StepPlan
    from engine.tune.search import BY
    from engine.tune.slo import parse_slo, search_targets

    if by not in BY:
        raise BadInput(_("unknown --by {by}").format(by=repr(by)), _("use --by rate or --by concurrency"))
    given = parse_slo(slo or [])
    sc = load_scenario(scenario)
    if scale != 1:
        sc = scaled(sc, scale)
    if sc.trace is not None and by != "rate":
        raise BadInput(
            _("scenario {name} replays a trace, whose arrival times set the load").format(name=sc.name),
            _("use --by rate: each step replays the trace at that mean rate"),
        )
    targets, notes = search_targets(given, sc.slo)
    settings = default_settings(sc, by)
    changes = {"repeats": repeats, "max_points": max_steps}
    for name, value in (("--start", start), ("--min-step", min_step), ("--max-load", max_load)):
        if value is not None and not value > 0:
            raise BadInput(
                _("{flag} must be a positive number, got {value}").format(flag=name, value=f"{value:g}"),
                _("e.g. {flag} 4").format(flag=name),
            )
    if start is not None:
        changes["start"] = start
    if min_step is not None:
        changes["min_step"] = min_step
    limit = MAX_RATE if by == "rate" else 4096.0
    if max_load is not None:
        if max_load > limit:
            raise BadInput(
                _("--max-load {load} is above the limit of {limit}").format(load=f"{max_load:g}", limit=f"{limit:g}"),
                _("use at most {limit}").format(limit=f"{limit:g}"),
            )
        changes["max_load"] = max_load
    settings = dataclasses.replace(settings, **changes)
    if settings.start > settings.max_load:
        raise BadInput(
            _("--start {start} is above --max-load {load}").format(
                start=f"{settings.start:g}", load=f"{settings.max_load:g}"
            ),
            _("lower --start or raise --max-load"),
        )
    return sc, targets, settings, StepPlan(by, step_s), notes


def run_capacity(url, sc, targets, settings, plan, model, notes, on_point, stop=None):
    """The search with Ctrl-C / SIGTERM stopping the step in progress (the best so far is kept)."""
    import signal
    import threading

    from engine.endpoints import normalize_base_url
    from engine.tune.capacity import measure_capacity

    stop = stop or threading.Event()
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[sig] = signal.signal(sig, lambda _s, _f: stop.set())
        except ValueError:  # not the main thread
            pass
    try:
        return measure_capacity(
            normalize_base_url(url), sc, targets, settings, plan, model=model, stop=stop, on_point=on_point, notes=notes
        )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
