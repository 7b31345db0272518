"""`ascendctl tune sweep`: serve each combination of engine settings, measure its capacity, stop it."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ascendctl.commands.tune import SLO_HELP, progress
from engine.i18n import _, shown

SWEEP_HELP = """Serve each combination of profile settings, measure its capacity within the SLO
(as `tune capacity`), stop it, and name the best.

Every combination is planned first: those the memory plan says do not fit are skipped with its
reason and never started. The rest are served one after the other through serve's supervisor (the
same preflight, readiness on /health, no process left behind); one that crashes is recorded with
the diagnosis and the sweep goes on. Results are appended to --results as JSON lines as they come;
--resume continues a sweep stopped by Ctrl-C and repeats nothing measured. --write-profile writes
the best combination as a profile that `serve -p` takes; --html the report (capacity per
combination, the Pareto front of tokens/s per user against tokens/s in total, the table).

Exit codes: 0 done; 1 no combination held the targets; 2 bad flag, sweep key, SLO or scenario (and
a grid of over 64 combinations without --yes), before anything starts; 130 interrupted (--resume
continues)."""


def sweep(
    profile: str = typer.Option(..., "--profile", "-p", help="Profile name or YAML file: the settings swept over."),
    sweeps: Optional[List[str]] = typer.Option(
        None,
        "--sweep",
        help="KEY=V1,V2,... : a profile key and its values (repeatable; the grid is every combination).",
    ),
    sets: Optional[List[str]] = typer.Option(None, "--set", help="Fix one key for every combination (as serve --set)."),
    model: Optional[str] = typer.Option(None, "--model", help="Model directory; overrides model.path."),
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
    max_steps: int = typer.Option(12, "--max-steps", min=1, help="Runs at most per combination."),
    results: Path = typer.Option(Path("tune-sweep.jsonl"), "--results", help="JSON lines, one per combination."),
    resume: bool = typer.Option(False, "--resume", help="Continue the sweep in --results; repeat nothing done."),
    write_profile: Optional[Path] = typer.Option(
        None, "--write-profile", help="Write the best combination as a profile file for `serve -p`."
    ),
    html_file: Optional[Path] = typer.Option(None, "--html", help="Write the report as one self-contained page."),
    yes: bool = typer.Option(False, "--yes", help="Allow a grid of more than 64 combinations."),
    ready_timeout: float = typer.Option(900.0, "--ready-timeout", min=1, help="Seconds each start may take."),
) -> None:
    import threading

    from ascendctl.commands.tune import capacity_inputs, run_capacity
    from ascendctl.launch_view import ensure_demo_model, preflight
    from ascendctl.output import get_output
    from ascendctl.profile_args import resolve
    from engine.errors import ProblemsFound
    from engine.tune.capacity import capacity_doc, point_line
    from engine.tune.grid import combinations, default_grid, grid_size, parse_grid, plan_combination
    from engine.tune.sweep import Sweeper, SweepSetup, best, check_resume, describe

    out = get_output()
    sets = list(sets or [])
    if not sweeps:
        from engine.profiles import load_profile

        sweeps = default_grid(load_profile(profile, sets, model=model).platform)
        progress(
            _("no --sweep: the default grid of the platform ({flags})").format(
                flags=" ".join(f"--sweep {s}" for s in sweeps)
            )
        )
    axes = parse_grid(sweeps, yes)
    sc, targets, settings, plan, notes = capacity_inputs(
        scenario, slo, by, scale, step_s, start, min_step, max_load, repeats, max_steps
    )
    if html_file is not None:
        from engine.bench.html import require_plotly

        require_plotly()
    base, spec0, version = resolve(profile, model, sets)
    meta = {"profile": profile, "scenario": sc.name, "by": by, "targets": targets, "sets": sets}
    done = check_resume(results, resume, meta)
    ensure_demo_model(out, base.model.path)
    planned = []
    for combo in combinations(axes):
        prof, combo = plan_combination(combo, profile, sets, model)
        planned.append((combo, prof))
    runnable = [(c, p) for c, p in planned if not c.skipped]
    progress(
        _("tune sweep: {n} combinations of {keys}; {skipped} do not fit and will not start").format(
            n=grid_size(axes), keys=", ".join(a.key for a in axes), skipped=len(planned) - len(runnable)
        )
    )
    for combo, _prof in planned:
        if combo.skipped:
            progress(f"  [{combo.index + 1}] {combo.label}: {shown(combo.skipped)}")
    if runnable and not any(d["id"] == runnable[0][0].id for d in done):
        preflight(out, runnable[0][1], spec0)  # serve's own: the port, the model, doctor's errors
    profiles = {c.id: p for c, p in planned}

    from engine.profiles import launch_spec
    from engine.system import Host
    from engine.system.enginepy import engine_interpreter
    from engine.tune.served import ServedEngine

    python = engine_interpreter(Host())
    stop = threading.Event()
    current: list[ServedEngine] = []

    def launch(combo):
        prof = profiles[combo.id]
        current[:] = [ServedEngine(prof, launch_spec(prof, version, python), ready_timeout=ready_timeout)]
        return current[0]

    def measure(combo, url):
        pos = f"[{combo.index + 1}/{len(planned)}]"
        run = run_capacity(
            url, sc, targets, settings, plan, None, notes, lambda p, n: progress(f"{pos} {point_line(p, n, by)}"), stop
        )
        if run.result.stopped == "interrupted":
            from engine.tune.search import Interrupted

            raise Interrupted()
        return capacity_doc(run)

    import signal

    def on_signal(_s, _f):
        stop.set()
        for engine in current:
            engine.interrupt()

    setup = SweepSetup(profile, sets, model, sc.name, targets, by, results, ready_timeout, meta=meta)
    sweeper = Sweeper(setup, [c for c, _prof in planned], launch, measure, spec0.url, progress, stop, done)
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        docs, interrupted = sweeper.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    top = best(docs)
    if write_profile is not None and top is not None:
        from engine.tune.overlay import overlay_text

        write_profile.write_text(
            overlay_text(profile, sets, top, f"{len(docs)} of {len(planned)} combinations"), encoding="utf-8"
        )
        progress(_("the best combination written to {path}: ascendctl serve -p {path}").format(path=write_profile))
    if html_file is not None:
        from engine.tune.html import sweep_html

        html_file.write_text(sweep_html(docs, meta), encoding="utf-8")
        progress(_("report written to {path}").format(path=html_file))
    data = {"setup": meta, "results": docs, "best": top, "interrupted": interrupted, "results_file": str(results)}

    def render(console) -> None:
        for d in docs:
            console.print(f"{', '.join(f'{k}={v}' for k, v in d['combination'].items())}: {describe(d)}", markup=False)
        if top is not None:
            console.print(
                _("best: {combination} ({result})").format(
                    combination=", ".join(f"{k}={v}" for k, v in top["combination"].items()),
                    result=describe(top, measured=False),
                ),
                markup=False,
            )

    out.emit(data, render)
    if interrupted:
        progress(
            _("interrupted: continue with the same command and --resume ({n} results kept in {path})").format(
                n=len(docs), path=results
            )
        )
        raise typer.Exit(130)
    if top is None:
        raise ProblemsFound(
            _("no combination held the targets at any load"),
            _("loosen the targets, or sweep other values (the results file has each combination's figures)"),
        )
