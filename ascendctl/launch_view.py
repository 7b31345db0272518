"""How a launch looks, for every command that starts the engine (serve, demo): the preflight's
errors, the start-up phases, the ready line, NDJSON events with --json, and the diagnosis of a
crash."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ascendctl.output import SCHEMA_VERSION, to_jsonable
from ascendctl.style import clean, ljust_cells, safe, severity_style, spaced
from engine.i18n import _, shown

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
    with out.status(_("building the tiny demo model (once; about 10 s)…")):
        path = ensure_model()[0]
    out.info(_("built the demo model: {path}").format(path=path))
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
            _("doctor found {count} error(s) for profile {profile}: the engine was not started").format(
                count=len(found.errors), profile=prof.name
            ),
            _(
                "fix them (`ascendctl doctor --profile {profile}` shows every check), or start anyway with "
                "--skip-preflight"
            ).format(profile=prof.name),
        )
    if found.plan is not None:
        for warning in found.plan.warnings:
            out.warn(warning)


def show_diagnosis(out: Output, outcome: Outcome) -> None:
    """Why the engine died: the headline, the root exception, known issues with their fixes, the
    last lines of its log and where the whole log is."""
    from engine.launcher import describe_exit

    diag: Diagnosis = outcome.diagnosis  # type: ignore[assignment]
    from engine.i18n import language

    if language() != "en":  # the known issues' texts in the reader's language (engine/triage/zh/)
        from engine.triage.localize import localized_diagnosis

        diag = localized_diagnosis(diag, language())
    if outcome.timed_out:
        last = _(outcome.phases[-1].label) if outcome.phases else _("start-up")
        headline = _("the engine was not ready within the ready timeout (last phase: {phase}); it was stopped").format(
            phase=last
        )
    else:
        how = describe_exit(outcome.exit_code, _)
        if outcome.ready_seconds is None:
            headline = _("the engine exited before it was ready ({how})").format(how=how)
        else:
            headline = _("the engine exited while serving ({how})").format(how=how)
        if outcome.exit_code == 0:
            headline += _(" though nobody asked it to stop")
    out.error(headline)
    console = out.err_console
    if diag.root_error:
        cause = diag.root_error if len(diag.root_error) <= 320 else diag.root_error[:320] + "…"
        label = spaced(_("cause:"))
        console.print(f"  [bold]{label}[/]{safe(cause)}", soft_wrap=True)
    for line in diag.likely_lines():  # a symptom leads: the causes it can have, not one name
        console.print(f"  {line}", markup=False, soft_wrap=True)
    known, why, fix = _("known issue"), spaced(_("why:")), spaced(_("fix:"))
    for finding in diag.findings:
        console.print(
            f"  [bold]{known}[/] [{severity_style(finding.severity)}]{finding.severity}[/]: {safe(finding.title)}",
            soft_wrap=True,
        )
        if finding.cause:
            console.print(f"    {why}{safe(finding.cause)}", soft_wrap=True)
        if finding.fix:
            console.print(f"    [bold]{fix}[/]{safe(finding.fix)}", soft_wrap=True)
    if not diag.findings:
        console.print(
            _("  (no known issue matched; `ascendctl triage {log}` explains the whole log)").format(
                log=outcome.run_dir / "engine.log"
            ),
            markup=False,
            soft_wrap=True,
        )
    console.print(_("  last lines of the engine log:"), markup=False)
    for line in diag.tail[-10:]:
        console.print(f"    {clean(line)}", markup=False, soft_wrap=True)
    console.print(_("  full log: {log}").format(log=outcome.run_dir / "engine.log"), markup=False, soft_wrap=True)


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
        self.out.info(_("run directory: {path}").format(path=run_dir))

    # The Listener protocol of engine.launcher.Supervisor, by duck typing.

    def started(self, pid: int, attempt: int) -> None:
        again = _(" (restart {attempt})").format(attempt=attempt) if attempt else ""
        if self.out.json_mode:
            self.out.json_line({"schema_version": SCHEMA_VERSION, "event": "started", "pid": pid, "attempt": attempt})
        elif not self.out.interactive:
            self.out.info(_("engine started{again}, pid {pid}").format(again=again, pid=pid))
        if self.out.interactive:
            self._start_progress(_("starting the engine{again} (pid {pid})").format(again=again, pid=pid))

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
        self._update(f"{_(event.label)}…")

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
        self.out.info(
            _("[bold green]ready[/] in {seconds:.1f} s: {url}   (Ctrl-C stops the engine)").format(
                seconds=seconds, url=url
            )
        )
        self.out.info(
            _("  watch it: ascendctl top {url}    log: {log}").format(url=url, log=self.run_dir / "engine.log")
        )

    def exited(self, code, diagnosis, restart_in, attempt) -> None:
        from engine.launcher import describe_exit

        if self.out.interactive and self._current is not None and self._current.phase != "http":
            with self._lock:
                console = self._progress.console if self._progress is not None else self.out.err_console
                console.print(
                    f"  [red]✗[/] {self._current.at:6.1f} s  "
                    + _("{phase}: the engine died here").format(phase=_(self._current.label)),
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
            if diagnosis is not None:
                ended = _("the engine exited ({how})").format(how=describe_exit(code, _))
            else:
                ended = _("the engine was stopped after the hang ({how})").format(how=describe_exit(code, _))
            again = _("; restart {attempt} in {seconds:g} s").format(attempt=attempt, seconds=restart_in)
            self.out.warn(f"{ended}{safe(cause)}{again}")

    def hung(self, record) -> None:
        """The hang monitor's verdict, with where its evidence went and what follows."""
        if self.out.json_mode:
            self.out.json_line({"schema_version": SCHEMA_VERSION, "event": "hung", **to_jsonable(record)})
            return
        follows = {
            "restart": _("stopping and restarting the engine"),
            "stop": _("stopping the engine"),
            "report": _("left running (--on-hang report)"),
        }[record.action]
        with self._lock:
            self.out.warn(
                _("the engine is hung: {summary}; {follows}").format(
                    summary=safe(shown(record.summary)), follows=follows
                )
            )
            if record.evidence_dir:
                self.out.info(_("  evidence (stack dump, triage, metrics): {path}").format(path=record.evidence_dir))
            if record.note:
                self.out.info(f"  {safe(record.note)}")

    def stopping(self, signame: str, grace: float) -> None:
        self._stop_progress()
        if not self.out.json_mode:
            self.out.info(
                _(
                    "stopping the engine: {signal} to its process group, SIGKILL after {grace:g} s "
                    "(press Ctrl-C again to kill it now)"
                ).format(signal=signame, grace=grace)
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
        text = f"  [green]✓[/] {record.started:6.1f} s  {ljust_cells(_(record.label), 20)} {safe(record.detail)}"
        with self._lock:
            console = self._progress.console if self._progress is not None else self.out.err_console
            console.print(text, highlight=False)

    def _stop_progress(self) -> None:
        with self._lock:
            if self._progress is not None:
                self._progress.stop()
                self._progress = None
