"""How a launch looks, for every command that starts the engine (serve, demo): the preflight's
errors, the start-up phases, the ready line, NDJSON events with --json, and the diagnosis of a
crash."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ascendctl.output import SCHEMA_VERSION, to_jsonable
from ascendctl.style import clean, safe, severity_style

if TYPE_CHECKING:
    from pathlib import Path

    from ascendctl.output import Output
    from engine.launcher import Diagnosis, Outcome, PhaseEvent, PhaseRecord
    from engine.profiles import LaunchSpec, Profile


def ensure_demo_model(out: Output, model_path: str | None = None) -> Path:
    """The demo's tiny model, built into the cache first when it is missing (about 10 s, once).

    With `model_path`, only when that is where the demo model lives (the cpu-tiny profile): then
    `serve -p cpu-tiny` works before `demo` ever ran, as the demo does."""
    from pathlib import Path

    from engine.demo.ensure import ensure_model, model_dir
    from engine.demo.tiny_model import is_built

    target = model_dir()
    if model_path is not None and Path(model_path) != target:
        return Path(model_path)
    if is_built(target):
        return target
    with out.status("building the tiny demo model (once; about 10 s)…"):
        path, _ = ensure_model()
    out.info(f"built the demo model: {path}")
    return path


def preflight(
    out: Output,
    prof: Profile,
    spec: LaunchSpec,
    port_option: str | None = None,
    listens: bool = True,
    container: bool = False,
) -> None:
    """Fail before the engine starts: a taken port, a missing model, a plan that does not fit
    (exit 2), doctor's errors for this profile (exit 1, each printed with its fix). Then what the
    plan warns about (a layout's short HCCL_CONNECT_TIMEOUT), before anything starts. `port_option`
    is how this command takes a port, for the fix of a taken one (default: --set server.port=)."""
    from engine.errors import ProblemsFound
    from engine.launcher import run_preflight
    from engine.launcher.portlock import SET_PORT

    found = run_preflight(prof, spec.host, spec.port, port_option or SET_PORT, listens=listens, container=container)
    for check in found.errors:
        out.error(f"doctor {check.cause}", check.fix)
    if found.errors:
        raise ProblemsFound(
            f"doctor found {len(found.errors)} error(s) for profile {prof.name}: the engine was not started",
            f"fix them (`ascendctl doctor --profile {prof.name}` shows every check), or start anyway with "
            "--skip-preflight",
        )
    if found.plan is not None:
        for warning in found.plan.warnings:
            out.warn(warning)


def show_diagnosis(out: Output, outcome: Outcome) -> None:
    """Why the engine died: the headline, the root exception, known issues with their fixes, the
    last lines of its log and where the whole log is."""
    from engine.launcher import describe_exit

    diag: Diagnosis = outcome.diagnosis  # type: ignore[assignment]
    when = "before it was ready" if outcome.ready_seconds is None else "while serving"
    if outcome.timed_out:
        last = outcome.phases[-1].label if outcome.phases else "start-up"
        headline = f"the engine was not ready within the ready timeout (last phase: {last}); it was stopped"
    else:
        headline = f"the engine exited {when} ({describe_exit(outcome.exit_code)})"
        if outcome.exit_code == 0:
            headline += " though nobody asked it to stop"
    out.error(headline)
    console = out.err_console
    if diag.root_error:
        cause = diag.root_error if len(diag.root_error) <= 320 else diag.root_error[:320] + "…"
        console.print(f"  [bold]cause:[/] {safe(cause)}", soft_wrap=True)
    for line in diag.likely_lines():  # a symptom leads: the causes it can have, not one name
        console.print(f"  {line}", markup=False, soft_wrap=True)
    for finding in diag.findings:
        console.print(
            f"  [bold]known issue[/] [{severity_style(finding.severity)}]{finding.severity}[/]: {safe(finding.title)}",
            soft_wrap=True,
        )
        if finding.cause:
            console.print(f"    why: {safe(finding.cause)}", soft_wrap=True)
        if finding.fix:
            console.print(f"    [bold]fix:[/] {safe(finding.fix)}", soft_wrap=True)
    if not diag.findings:
        console.print(
            f"  (no known issue matched; `ascendctl triage {outcome.run_dir / 'engine.log'}` explains the whole log)",
            markup=False,
            soft_wrap=True,
        )
    console.print("  last lines of the engine log:", markup=False)
    for line in diag.tail[-10:]:
        console.print(f"    {clean(line)}", markup=False, soft_wrap=True)
    console.print(f"  full log: {outcome.run_dir / 'engine.log'}", markup=False, soft_wrap=True)


class LaunchView:
    """Shows a supervised start-up: phases as progress on a terminal, NDJSON events with --json,
    the engine's own output on stderr when asked (or when nobody watches a terminal)."""

    def __init__(self, out: Output, echo: bool | None = None) -> None:
        self.out = out
        self.echo = (not out.interactive and not out.json_mode) if echo is None else echo
        self._progress = None
        self._task = None
        self._lock = threading.Lock()
        self.run_dir: Path | None = None
        self._current: PhaseEvent | None = None

    def begin(self, run_dir: Path, url: str) -> None:
        self.run_dir = run_dir
        self.out.info(f"run directory: {run_dir}")

    # The Listener protocol of engine.launcher.Supervisor, by duck typing.

    def started(self, pid: int, attempt: int) -> None:
        again = f" (restart {attempt})" if attempt else ""
        if self.out.json_mode:
            self.out.json_line({"schema_version": SCHEMA_VERSION, "event": "started", "pid": pid, "attempt": attempt})
        elif not self.out.interactive:
            self.out.info(f"engine started{again}, pid {pid}")
        if self.out.interactive:
            self._start_progress(f"starting the engine{again} (pid {pid})")

    def line(self, line: str) -> None:
        if self.echo:
            with self._lock:
                console = self._progress.console if self._progress is not None else self.out.err_console
                console.print(clean(line), markup=False, highlight=False, soft_wrap=True)

    def phase(self, event: PhaseEvent) -> None:
        self._current = event
        if self.out.json_mode:
            self.out.json_line(
                {
                    "schema_version": SCHEMA_VERSION,
                    "event": "phase",
                    "phase": event.phase,
                    "label": event.label,
                    "at": round(event.at, 3),
                }
            )
        if event.previous is not None:
            self._done(event.previous)
        self._update(f"{event.label}…")

    def ready(self, url: str, seconds: float, phases: list[PhaseRecord]) -> None:
        if phases:
            self._done(phases[-1])
        self._stop_progress()
        if self.out.json_mode:
            self.out.json_line(
                {
                    "schema_version": SCHEMA_VERSION,
                    "event": "ready",
                    "url": url,
                    "seconds": round(seconds, 3),
                    "phases": to_jsonable(phases),
                }
            )
            return
        self.out.info(f"[bold green]ready[/] in {seconds:.1f} s: {url}   (Ctrl-C stops the engine)")
        self.out.info(f"  watch it: ascendctl top {url}    log: {self.run_dir / 'engine.log'}")

    def exited(self, code, diagnosis, restart_in, attempt) -> None:
        from engine.launcher import describe_exit

        if self.out.interactive and self._current is not None and self._current.phase != "http":
            with self._lock:
                console = self._progress.console if self._progress is not None else self.out.err_console
                console.print(
                    f"  [red]✗[/] {self._current.at:6.1f} s  {self._current.label}: the engine died here",
                    highlight=False,
                )
        self._current = None
        self._stop_progress()
        if self.out.json_mode:
            self.out.json_line(
                {
                    "schema_version": SCHEMA_VERSION,
                    "event": "exited",
                    "exit_code": code,
                    "restart_in": restart_in,
                    "attempt": attempt,
                    "root_error": diagnosis.root_error if diagnosis else None,
                    # the known issues triage found in the log tail (ids), so a script sees why
                    "issues": [finding.id for finding in diagnosis.findings] if diagnosis else [],
                    # when the leading finding is only a symptom: the causes it can have
                    "likely": [
                        {"cause": c.cause, "rule": c.rule or None, "evidence": c.evidence}
                        for c in diagnosis.likely.likely
                    ]
                    if diagnosis and diagnosis.likely
                    else None,
                }
            )
            return
        if restart_in is not None:
            cause = f": {diagnosis.root_error}" if diagnosis and diagnosis.root_error else ""
            ended = "exited" if diagnosis is not None else "was stopped after the hang"
            self.out.warn(
                f"the engine {ended} ({describe_exit(code)}){safe(cause)}; restart {attempt} in {restart_in:g} s"
            )

    def hung(self, record) -> None:
        """The hang monitor's verdict, with where its evidence went and what follows."""
        if self.out.json_mode:
            self.out.json_line({"schema_version": SCHEMA_VERSION, "event": "hung", **to_jsonable(record)})
            return
        follows = {
            "restart": "stopping and restarting the engine",
            "stop": "stopping the engine",
            "report": "left running (--on-hang report)",
        }[record.action]
        with self._lock:
            self.out.warn(f"the engine is hung: {safe(record.summary)}; {follows}")
            if record.evidence_dir:
                self.out.info(f"  evidence (stack dump, triage, metrics): {record.evidence_dir}")
            if record.note:
                self.out.info(f"  {safe(record.note)}")

    def stopping(self, signame: str, grace: float) -> None:
        self._stop_progress()
        if not self.out.json_mode:
            self.out.info(
                f"stopping the engine: {signame} to its process group, SIGKILL after {grace:g} s "
                "(press Ctrl-C again to kill it now)"
            )

    def warning(self, message: str) -> None:
        if self.out.json_mode:
            self.out.json_line({"schema_version": SCHEMA_VERSION, "event": "warning", "message": message})
            return
        with self._lock:  # from the log thread, maybe under the progress display
            self.out.warn(safe(message))

    def end(self) -> None:
        self._stop_progress()

    # -- progress on a terminal ---------------------------------------------------------------

    def _start_progress(self, text: str) -> None:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        with self._lock:
            if self._progress is None:
                self._progress = Progress(
                    SpinnerColumn(),
                    TextColumn("{task.description}"),
                    TimeElapsedColumn(),
                    console=self.out.err_console,
                    transient=True,
                )
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
        text = f"  [green]✓[/] {record.started:6.1f} s  {record.label:<20} {safe(record.detail)}"
        with self._lock:
            console = self._progress.console if self._progress is not None else self.out.err_console
            console.print(text, highlight=False)

    def _stop_progress(self) -> None:
        with self._lock:
            if self._progress is not None:
                self._progress.stop()
                self._progress = None
