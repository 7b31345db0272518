"""`ascendctl serve`: resolve a profile, preflight, launch and supervise the engine."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from ascendctl.output import Output
    from engine.launcher import Diagnosis, Outcome, PhaseEvent, PhaseRecord
    from engine.profiles.launch import LaunchSpec
    from engine.profiles.schema import Profile

PRECEDENCE = (
    "Settings are taken, strongest first, from: --model and --set on the command line, then the "
    "profile file, then the schema defaults (`ascendctl profile show P` prints the result)."
)

EXIT_CODES = (
    "Exit codes: 0 the engine stopped cleanly; 1 the engine exited non-zero (its own code is printed "
    "and kept in run.json) or never got ready, or doctor found errors; 2 bad profile or flag, or the "
    "port is taken; "
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
    profile: str = typer.Option(..., "--profile", "-p", help="Profile name (see `ascendctl profile list`) or YAML file."),
    model: Optional[str] = typer.Option(None, "--model", help="Model directory; overrides model.path."),
    sets: List[str] = typer.Option([], "--set", help="Override one setting, e.g. --set engine.max_num_seqs=32 (repeatable)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the engine command line and environment (API key masked) and exit."),
    restart: str = typer.Option("no", "--restart", help="Restart policy: no | on-failure."),
    max_restarts: int = typer.Option(3, "--max-restarts", min=0, help="With --restart on-failure: restarts in a row before giving up."),
    grace: float = typer.Option(20.0, "--grace", min=0, help="Seconds the engine gets to stop after a signal before SIGKILL."),
    ready_timeout: float = typer.Option(1800.0, "--ready-timeout", min=1, help="Seconds to wait for /health before the start counts as failed."),
    engine_output: Optional[bool] = typer.Option(
        None, "--engine-output/--no-engine-output",
        help="Also copy the engine's output to stderr (default: only when stderr is not a terminal and not --json).",
    ),
    skip_preflight: bool = typer.Option(False, "--skip-preflight", help="Start even if the port check or doctor finds errors."),
) -> None:
    from ascendctl.output import get_output
    from engine.errors import BadInput

    out = get_output()
    if restart not in ("no", "on-failure"):
        raise BadInput(f"unknown restart policy {restart!r}", "use --restart no or --restart on-failure")
    prof, spec, version = resolve(profile, model, sets)
    if dry_run:
        show_dry_run(out, prof, spec, version)
        return
    if not skip_preflight:
        preflight(out, prof, spec)

    from engine.launcher import RestartPolicy

    policy = RestartPolicy(on_failure=restart == "on-failure", max_restarts=max_restarts)
    outcome = launch(out, prof, spec, policy=policy, grace=grace, ready_timeout=ready_timeout,
                     echo=engine_output)
    raise typer.Exit(finish(out, outcome))


# -- shared with `ascendctl demo` -------------------------------------------------------------


def resolve(profile: str, model: str | None, sets: list[str]) -> tuple[Profile, LaunchSpec, str | None]:
    """Profile -> launch spec for the engine interpreter next to ascendctl. Warns about flags the
    installed engine does not know (they are dropped, never passed blindly)."""
    from ascendctl.output import get_output
    from engine.profiles import launch_spec, load_profile
    from engine.system import Host
    from engine.system.enginepy import engine_interpreter, query_engine

    prof = load_profile(profile, overrides=list(sets), model=model)
    host = Host()
    python = engine_interpreter(host)
    version = query_engine(host).vllm
    spec = launch_spec(prof, version, python)
    for reason in spec.dropped:
        get_output().warn(f"dropped {reason}")
    return prof, spec, version


def show_dry_run(out: Output, prof: Profile, spec: LaunchSpec, version: str | None) -> None:
    data = {
        "profile": prof.name,
        "source": prof.source,
        "engine_version": version,
        "argv": spec.argv,
        "command_line": spec.command_line(),
        "env": spec.masked_env(),
        "url": spec.url,
        "dropped": spec.dropped,
    }

    import shlex

    def render(console: Console) -> None:
        console.print(f"# profile {prof.name} ({prof.source}), engine vLLM {version or 'N/A'}", markup=False, soft_wrap=True)
        for key, value in spec.masked_env().items():
            console.print(f"export {key}={shlex.quote(value)}", markup=False, soft_wrap=True)
        console.print(spec.command_line(), markup=False, soft_wrap=True)
        console.print(f"# serves {spec.url}", markup=False)

    out.emit(data, render)


def preflight(out: Output, prof: Profile, spec: LaunchSpec) -> None:
    """Fail before the engine starts: a taken port (exit 2), doctor's errors for this profile (exit 1)."""
    from engine.launcher import check_port

    check_port(spec.host, spec.port)
    doctor_preflight(out, prof)


def doctor_preflight(out: Output, prof: Profile) -> None:
    """doctor's errors for this profile stop the launch (exit 1), each printed with its fix."""
    try:
        from engine.doctor import Status, run_doctor
    except ImportError:  # a build without doctor: the port check and the engine's own checks remain
        out.warn("doctor is not available in this build: only the port was checked before the launch")
        return
    from engine.errors import ProblemsFound

    report = run_doctor(profile=prof, profile_name=prof.name, model_dir=prof.model.path)
    errors = [c for c in report.checks if c.status is Status.ERROR]
    if not errors:
        return
    for check in errors:
        out.error(f"doctor {check.id}: {check.summary}", check.fix)
    raise ProblemsFound(
        f"doctor found {len(errors)} error(s) for profile {prof.name}: the engine was not started",
        f"fix them (`ascendctl doctor --profile {prof.name}` shows every check), or start anyway with --skip-preflight",
    )


def launch(out: Output, prof: Profile, spec: LaunchSpec, *, policy=None, grace: float = 20.0,
           ready_timeout: float | None = 1800.0, echo: bool | None = None) -> Outcome:
    """Create the run directory and supervise the engine in the foreground until it exits or a
    signal stops it."""
    import os

    from engine.launcher import RestartPolicy, Supervisor
    from engine.launcher.rundir import new_run_dir, write_profile
    from engine.profiles import dump_profile

    run_dir = new_run_dir(prof.name)
    write_profile(run_dir, dump_profile(prof))
    view = LaunchView(out, echo=echo)
    supervisor = Supervisor(
        spec.argv, {**os.environ, **spec.env}, spec.url, run_dir, prof.name,
        listener=view, policy=policy or RestartPolicy(), grace=grace, ready_timeout=ready_timeout,
    )
    view.begin(run_dir, spec.url)
    try:
        with supervisor.forwarding_signals():
            return supervisor.run()
    finally:
        view.end()


def finish(out: Output, outcome: Outcome) -> int:
    """Report how it ended; the exit code of `ascendctl serve`."""
    from engine.launcher import describe_exit

    code = outcome.exit_code
    if out.json_mode:
        out.json_line({"schema_version": 1, "event": "end", **_jsonable(outcome)})
    if outcome.stopped_by:
        out.info(f"stopped by {outcome.stopped_by}: the engine ({describe_exit(code)}) and all its processes are gone")
        return 130
    if not outcome.failed:
        out.info(f"the engine exited cleanly; log: {outcome.run_dir / 'engine.log'}")
        return 0
    if not out.json_mode and outcome.diagnosis is not None:
        show_diagnosis(out, outcome)
    return 1


def show_diagnosis(out: Output, outcome: Outcome) -> None:
    from engine.launcher import describe_exit

    diag: Diagnosis = outcome.diagnosis  # type: ignore[assignment]
    when = "before it was ready" if outcome.ready_seconds is None else "while serving"
    if outcome.timed_out:
        last = outcome.phases[-1].label if outcome.phases else "start-up"
        headline = f"the engine was not ready within the ready timeout (last phase: {last}); it was stopped"
    else:
        headline = f"the engine exited {when} ({describe_exit(outcome.exit_code)})"
    out.error(headline)
    console = out.err_console
    if diag.root_error:
        cause = diag.root_error if len(diag.root_error) <= 320 else diag.root_error[:320] + "…"
        console.print(f"  [bold]cause:[/] {_esc(cause)}", soft_wrap=True)
    for finding in diag.findings:
        console.print(f"  [bold]known issue[/] [{_severity_style(finding.severity)}]{finding.severity}[/]: "
                      f"{_esc(finding.title)}", soft_wrap=True)
        if finding.cause:
            console.print(f"    why: {_esc(finding.cause)}", soft_wrap=True)
        if finding.fix:
            console.print(f"    [bold]fix:[/] {_esc(finding.fix)}", soft_wrap=True)
    if not diag.findings:
        console.print(f"  (no known issue matched; `ascendctl triage {outcome.run_dir / 'engine.log'}` explains the whole log)",
                      markup=False, soft_wrap=True)
    console.print("  last lines of the engine log:", markup=False)
    for line in diag.tail[-10:]:
        console.print(f"    {line}", markup=False, soft_wrap=True)
    console.print(f"  full log: {outcome.run_dir / 'engine.log'}", markup=False, soft_wrap=True)


def _severity_style(severity: str) -> str:
    return {"critical": "bold red", "error": "red", "warning": "yellow"}.get(severity, "cyan")


def _esc(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _jsonable(outcome: Outcome) -> dict:
    from ascendctl.output import to_jsonable

    data = to_jsonable(outcome)
    data["failed"] = outcome.failed
    return data


class LaunchView:
    """Shows a supervised start-up: phases as progress on a terminal, NDJSON events with --json,
    the engine's own output on stderr when asked (or when nobody watches a terminal)."""

    def __init__(self, out: Output, echo: bool | None = None) -> None:
        import threading

        self.out = out
        self.echo = (not out.interactive and not out.json_mode) if echo is None else echo
        self._progress = None
        self._task = None
        self._lock = threading.Lock()
        self.run_dir = None
        self._current: PhaseEvent | None = None

    # The Listener protocol of engine.launcher.Supervisor, by duck typing.

    def begin(self, run_dir, url: str) -> None:
        self.run_dir = run_dir
        self.out.info(f"run directory: {run_dir}")

    def started(self, pid: int, attempt: int) -> None:
        again = f" (restart {attempt})" if attempt else ""
        if self.out.json_mode:
            self.out.json_line({"schema_version": 1, "event": "started", "pid": pid, "attempt": attempt})
        elif not self.out.interactive:
            self.out.info(f"engine started{again}, pid {pid}")
        if self.out.interactive:
            self._start_progress(f"starting the engine{again} (pid {pid})")

    def line(self, line: str) -> None:
        if self.echo:
            with self._lock:
                console = self._progress.console if self._progress is not None else self.out.err_console
                console.print(line, markup=False, highlight=False, soft_wrap=True)

    def phase(self, event: PhaseEvent) -> None:
        self._current = event
        if self.out.json_mode:
            self.out.json_line({"schema_version": 1, "event": "phase", "phase": event.phase,
                                "label": event.label, "at": round(event.at, 3)})
        if event.previous is not None:
            self._done(event.previous)
        self._update(f"{event.label}…")

    def ready(self, url: str, seconds: float, phases: list[PhaseRecord]) -> None:
        if phases:
            self._done(phases[-1])
        self._stop_progress()
        if self.out.json_mode:
            from ascendctl.output import to_jsonable

            self.out.json_line({"schema_version": 1, "event": "ready", "url": url,
                                "seconds": round(seconds, 3), "phases": to_jsonable(phases)})
            return
        self.out.info(f"[bold green]ready[/] in {seconds:.1f} s: {url}   (Ctrl-C stops the engine)")
        self.out.info(f"  watch it: ascendctl top {url}    log: {self.run_dir / 'engine.log'}")

    def exited(self, code, diagnosis, restart_in, attempt) -> None:
        from engine.launcher import describe_exit

        if self.out.interactive and self._current is not None and self._current.phase != "http":
            with self._lock:
                console = self._progress.console if self._progress is not None else self.out.err_console
                console.print(f"  [red]✗[/] {self._current.at:6.1f} s  {self._current.label}: the engine died here",
                              highlight=False)
        self._current = None
        self._stop_progress()
        if self.out.json_mode:
            self.out.json_line({"schema_version": 1, "event": "exited", "exit_code": code,
                                "restart_in": restart_in, "attempt": attempt,
                                "root_error": diagnosis.root_error if diagnosis else None})
            return
        if restart_in is not None:
            cause = f": {diagnosis.root_error}" if diagnosis and diagnosis.root_error else ""
            self.out.warn(f"the engine exited ({describe_exit(code)}){_esc(cause)}; "
                          f"restart {attempt} in {restart_in:g} s")

    def stopping(self, signame: str, grace: float) -> None:
        self._stop_progress()
        if not self.out.json_mode:
            self.out.info(f"stopping the engine: {signame} to its process group, SIGKILL after {grace:g} s "
                          "(press Ctrl-C again to kill it now)")

    def end(self) -> None:
        self._stop_progress()

    # -- progress on a terminal ---------------------------------------------------------------

    def _start_progress(self, text: str) -> None:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        with self._lock:
            if self._progress is None:
                self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                                          TimeElapsedColumn(), console=self.out.err_console, transient=True)
                self._progress.start()
                self._task = self._progress.add_task(text)
            else:
                self._progress.update(self._task, description=text)

    def _update(self, text: str) -> None:
        with self._lock:
            if self._progress is not None:
                self._progress.update(self._task, description=text)

    def _done(self, record: PhaseRecord) -> None:
        if not self.out.interactive:
            return
        # When each phase began, counted from the engine's start: some phases are only seen by
        # their closing line (an eager start's warm-up), so a per-phase duration would mislead.
        text = f"  [green]✓[/] {record.started:6.1f} s  {record.label:<20} {_esc(record.detail)}"
        with self._lock:
            console = self._progress.console if self._progress is not None else self.out.err_console
            console.print(text, highlight=False)

    def _stop_progress(self) -> None:
        with self._lock:
            if self._progress is not None:
                self._progress.stop()
                self._progress = None
