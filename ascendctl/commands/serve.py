"""`ascendctl serve`: resolve a profile, preflight, launch and supervise the engine."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from ascendctl.output import Output
    from engine.launcher import Outcome
    from engine.profiles.launch import LaunchSpec
    from engine.profiles.schema import Profile

PRECEDENCE = (
    "Settings are taken, strongest first, from: --model and --set on the command line, then the "
    "profile file, then the schema defaults (`ascendctl profile show P` prints the result)."
)

EXIT_CODES = (
    "Exit codes: 0 --dry-run printed the launch; 1 the engine exited without being asked to, whatever "
    "its own code (a server stops only when asked; its code is printed and kept in run.json), or never "
    "got ready, or doctor found errors; 2 bad profile or flag, the port is taken (by another ascendctl "
    "run: it is named), model.path is no model directory, or the memory plan does not fit (nothing is "
    "started, nothing restarted); "
    "130 stopped by Ctrl-C / SIGTERM (forwarded to the engine)."
)


def register(app: typer.Typer) -> None:
    app.command(
        "serve",
        help=(
            "Start the engine from a profile and supervise it: preflight, start-up phases, readiness "
            "on /health, the log tee'd into a run directory, signals forwarded, restarts on failure, "
            f"and a diagnosis when it dies.\n\n{PRECEDENCE}\n\n{EXIT_CODES}"
        ),
    )(serve)


def serve(
    profile: str = typer.Option(
        ..., "--profile", "-p", help="Profile name (see `ascendctl profile list`) or YAML file."
    ),
    model: Optional[str] = typer.Option(None, "--model", help="Model directory; overrides model.path."),
    sets: List[str] = typer.Option(
        [], "--set", help="Override one setting, e.g. --set engine.max_num_seqs=32 (repeatable)."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the engine command line and environment (API key masked) and exit."
    ),
    restart: str = typer.Option("no", "--restart", help="Restart policy: no | on-failure."),
    max_restarts: int = typer.Option(
        3, "--max-restarts", min=0, help="With --restart on-failure: restarts in a row before giving up."
    ),
    grace: float = typer.Option(
        20.0, "--grace", min=0, help="Seconds the engine gets to stop after a signal before SIGKILL."
    ),
    ready_timeout: float = typer.Option(
        1800.0, "--ready-timeout", min=1, help="Seconds to wait for /health before the start counts as failed."
    ),
    engine_output: Optional[bool] = typer.Option(
        None,
        "--engine-output/--no-engine-output",
        help="Also copy the engine's output to stderr (default: only when stderr is not a terminal and not --json).",
    ),
    skip_preflight: bool = typer.Option(
        False, "--skip-preflight", help="Start even if the port check or doctor finds errors."
    ),
) -> None:
    from ascendctl.output import get_output
    from ascendctl.profile_args import resolve
    from engine.errors import BadInput

    out = get_output()
    if restart not in ("no", "on-failure"):
        raise BadInput(f"unknown restart policy {restart!r}", "use --restart no or --restart on-failure")
    prof, spec, version = resolve(profile, model, sets)
    if dry_run:
        show_dry_run(out, prof, spec, version)
        return

    from ascendctl.launch_view import LaunchView, ensure_demo_model, preflight
    from engine.launcher import RestartPolicy, prepare_run

    ensure_demo_model(out, prof.model.path)  # cpu-tiny before `demo` ever built its model
    if not skip_preflight:
        preflight(out, prof, spec)
    view = LaunchView(out, echo=engine_output)
    supervisor = prepare_run(
        prof,
        spec,
        listener=view,
        grace=grace,
        ready_timeout=ready_timeout,
        policy=RestartPolicy(on_failure=restart == "on-failure", max_restarts=max_restarts),
    )
    view.begin(supervisor.run_dir, supervisor.url)
    try:
        with supervisor.forwarding_signals():
            outcome = supervisor.run()
    finally:
        view.end()
    raise typer.Exit(finish(out, outcome))


def show_dry_run(out: Output, prof: Profile, spec: LaunchSpec, version: str | None) -> None:
    data = {
        "profile": prof.name,
        "source": prof.source,
        "engine_version": version,
        "argv": spec.masked_argv(),
        "command_line": spec.command_line(),
        "env": spec.masked_env(),
        "url": spec.url,
        "dropped": spec.dropped,
    }

    import shlex

    def render(console: Console) -> None:
        console.print(
            f"# profile {prof.name} ({prof.source}), engine vLLM {version or 'N/A'}", markup=False, soft_wrap=True
        )
        for key, value in spec.masked_env().items():
            console.print(f"export {key}={shlex.quote(value)}", markup=False, soft_wrap=True)
        console.print(spec.command_line(), markup=False, soft_wrap=True)
        console.print(f"# serves {spec.url}", markup=False)

    out.emit(data, render)


def finish(out: Output, outcome: Outcome) -> int:
    """Report how it ended; the exit code of `ascendctl serve`."""
    from ascendctl.output import SCHEMA_VERSION
    from engine.launcher import describe_exit

    code = outcome.exit_code
    if out.json_mode:
        out.json_line({"schema_version": SCHEMA_VERSION, "event": "end", **_jsonable(outcome)})
    if outcome.stopped_by:
        out.info(f"stopped by {outcome.stopped_by}: the engine ({describe_exit(code)}) and all its processes are gone")
        return 130
    # Not stopped by us: the engine ended on its own or never got ready. Even exit code 0 is a
    # failure (vLLM's API server exits 0 when its EngineCore dies).
    if not out.json_mode and outcome.diagnosis is not None:
        from ascendctl.launch_view import show_diagnosis

        show_diagnosis(out, outcome)
    return 1


def _jsonable(outcome: Outcome) -> dict:
    from ascendctl.output import to_jsonable

    data = to_jsonable(outcome)
    data["failed"] = outcome.failed
    return data
