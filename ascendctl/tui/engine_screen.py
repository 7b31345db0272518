"""One engine on the whole terminal (Enter on an engine of `top`): its figures, its history, the
profile and plan of its run, its diagnostics and the tail of its log with the lines triage knows
marked. The app hands it every new snapshot; it finds its engine again by URL and label."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer

from ascendctl.style import clean, num, severity_style
from ascendctl.tui import render, translate_bindings
from ascendctl.tui.chart import ChartPanel
from ascendctl.tui.diagnostics import DiagnosticsTable
from ascendctl.tui.engines import engine_key
from ascendctl.tui.panel import TextPanel
from engine.i18n import N_, _
from engine.runs import RunInfo, load_run
from engine.telemetry.faults import engine_fault_lines
from engine.telemetry.history import WINDOWS, History
from engine.telemetry.logmarks import MarkedTail
from engine.telemetry.runprofile import RunProfile, run_directory, run_profile
from engine.telemetry.snapshot import EngineView, ServeView, Snapshot

NO_RUN = N_("no profile (engine not started by ascendctl serve)")


class EngineScreen(Screen[None]):
    BINDINGS = [
        Binding("escape,q", "app.pop_screen", N_("back")),
        Binding("m", "next_mark", N_("previous marked line")),
    ]

    def __init__(
        self, engine: EngineView, snapshot: Snapshot, history: History | None = None, window: float = WINDOWS[0]
    ) -> None:
        """`history`: the app's, drawn as this engine's charts; without one, the snapshot's own
        sparklines (the last polls) stand in."""
        super().__init__()
        translate_bindings(self)
        self.history, self.window = history, window
        self.key = engine_key(engine)
        self.engine = engine  # the last view of it: kept on screen when it disappears
        self.snapshot = snapshot
        self.gone = False
        self.run_dir = run_directory(engine.log_path)
        self.run: RunInfo | None = None
        self.profile: RunProfile | None = None
        self.profile_error: str | None = None
        log = engine.log_path
        self.tail = MarkedTail(log) if log and (self.run_dir is not None or Path(log).is_file()) else None

    def compose(self) -> ComposeResult:
        yield TextPanel(id="engine-header")
        yield TextPanel(id="engine-figures")
        with Vertical(id="engine-charts"):
            if self.history is not None:
                yield ChartPanel(self.history, "engine", self.engine.label, self.window)
            else:
                yield TextPanel(id="engine-sparklines")
        with Horizontal(id="engine-lower"):
            yield TextPanel(id="engine-plan")
            yield DiagnosticsTable(id="engine-diagnostics", subject=False)
        yield TextPanel(id="engine-log-title")
        with VerticalScroll(id="engine-log"):
            yield TextPanel(id="engine-log-lines")
        yield Footer()

    def on_mount(self) -> None:
        if self.run_dir is not None:
            # Once: the profile does not change under a running engine, and the plan reads the
            # model's headers.
            self.profile, self.profile_error = run_profile(self.run_dir)
        self.show(self.snapshot)
        self.query_one("#engine-diagnostics").focus()

    def show(self, snap: Snapshot) -> None:
        """Draw the engine as `snap` has it (the app calls this on every snapshot it shows)."""
        self.snapshot = snap
        found = [e for e in snap.engines if engine_key(e) == self.key]
        self.gone = not found
        if found:
            self.engine = found[0]
        if self.run_dir is not None:
            self.run = load_run(self.run_dir)[0] or self.run  # its phase and restarts move
        e = self.engine
        self.query_one("#engine-header", TextPanel).update(self._header())
        figures = [
            Text(_("Figures"), style="bold"),
            *render.engine_figures(e, snap.thresholds, p90=True),
            *render.kv_transfer_lines(e, snap.thresholds),
            *render.routed_by(e, snap),
        ]
        self.query_one("#engine-figures", TextPanel).update(Text("\n").join(figures))
        if self.history is not None:
            self.query_one(ChartPanel).changed()
        else:
            self.query_one("#engine-sparklines", TextPanel).update(render.history_lines(e.history))
        self.query_one("#engine-plan", TextPanel).update(self._plan())
        self.query_one("#engine-diagnostics", DiagnosticsTable).show(
            [d for d in snap.diagnostics if d.subject == e.label]
        )
        self._show_log()

    def _header(self) -> Text:
        e = self.engine
        head = render.engine_head(e)
        head.append(f"  {clean(e.url)}", style="dim")
        if self.run is not None and self.run.phase:
            head.append("  " + _("phase {phase}").format(phase=_(clean(self.run.phase))))
        # The faults of the NPUs this engine uses, with what to do (engine/telemetry/faults.py).
        devices = self.snapshot.devices if self.snapshot is not None else ()
        for line in engine_fault_lines(e.npus, devices):
            head.append("\n" + _("faults:") + " " + clean(line), style="bold red")
        if self.gone:
            head.append(
                "  " + _("GONE: not in the latest snapshot (its run ended or it was removed)"), style="bold red"
            )
        return head

    def _plan(self) -> Text:
        out = Text()
        out.append(_("Profile and plan") + "\n", style="bold")
        if self.run_dir is None:
            log = self.engine.log_path
            # A log path whose run is not here: an engine of another host, through its exporter.
            gone = _("no profile: its run ({log}) is not on this host").format(log=clean(log)) if log else ""
            out.append(gone or _(NO_RUN), style="dim")
            return out
        run, p = self.run, self.profile
        if p is None:
            out.append(
                _("profile unreadable: {error}").format(error=clean(self.profile_error)),
                style=severity_style("warning"),
            )
        else:
            out.append(f"profile {clean(p.profile)}")
            if run is not None:
                # As the engine's row says it, from the snapshot's view (a replay has no run.json).
                serve = self.engine.serve or ServeView.of(run)
                out.append(
                    "  " + render.restarts_text(serve) + "  " + _("run {run}").format(run=clean(run.run_id)),
                    style=severity_style("warning") if serve.hangs else "dim",
                )
                hung = render.hangs_text(serve)
                if hung:
                    out.append(f"\n{hung}", style=severity_style("warning"))
            out.append(f"\nmodel {clean(p.model)}")
            if p.served_name:
                out.append(f" as {clean(p.served_name)}")
            pp = f"  pp {p.pipeline_parallel}" if p.pipeline_parallel else ""
            out.append(
                f"\ntp {p.tensor_parallel}{pp}  dp {p.data_parallel}  max_model_len {_setting(p.max_model_len)}"
                f"  max_num_seqs {_setting(p.max_num_seqs)}"
                f"\ngpu_memory_utilization {_setting(p.gpu_memory_utilization)}"
            )
        out.append_text(self._blocks())
        return out

    def _blocks(self) -> Text:
        """Planned against actual KV blocks: far apart means the plan's model of this engine is off."""
        kv = self.engine.kv
        planned = self.profile.planned_blocks if self.profile else None
        out = Text(
            "\n"
            + _("KV blocks planned {planned}  actual {actual}").format(
                planned=num(planned), actual=num(kv.total_blocks)
            )
        )
        if kv.source:
            out.append(f" ({'metrics' if kv.source == 'metrics' else 'start-up log'})", style="dim")
        if planned and kv.total_blocks:
            out.append("  " + _("{share:.0%} of plan").format(share=kv.total_blocks / planned))
        if planned is None and self.profile is not None and self.profile.plan_error:
            out.append("\n" + _("no plan: {error}").format(error=clean(self.profile.plan_error)), style="dim")
        return out

    def action_next_mark(self) -> None:
        """Scroll the log up to the nearest marked line above the view's top (the log opens on
        its newest lines, so the marks come newest first), round to the newest again."""
        lines = self.query_one("#engine-log-lines", TextPanel).text.plain.split("\n")
        marked = [n for n, line in enumerate(lines) if line.startswith(render.LOG_MARK)]
        if not marked:
            self.notify(_("no marked line in the log tail"))
            return
        view = self.query_one("#engine-log", VerticalScroll)
        above = [n for n in marked if n < view.scroll_y]
        view.scroll_to(y=above[-1] if above else marked[-1], animate=False, immediate=True)

    def _show_log(self) -> None:
        title = Text()
        title.append("Log", style="bold")
        if self.tail is None:
            log = self.engine.log_path
            title.append(
                f"  {clean(log)} is not on this host" if log else "  no log (engine not started by ascendctl serve)",
                style="dim",
            )
            self.query_one("#engine-log-title", TextPanel).update(title)
            return
        changed = self.tail.poll()
        marked = sum(1 for line in self.tail.lines if line.marks)
        title.append(f"  {clean(self.tail.path)}", style="dim")
        title.append(f"  last {len(self.tail.lines)} lines, {marked} marked")
        if self.tail.polls_hidden:
            title.append(f", {self.tail.polls_hidden} /metrics and /health polls hidden", style="dim")
        if self.tail.error:
            title.append(f"  {clean(self.tail.error)}", style=severity_style("warning"))
        self.query_one("#engine-log-title", TextPanel).update(title)
        if not changed:
            return
        view = self.query_one("#engine-log", VerticalScroll)
        follow = view.scroll_y >= view.max_scroll_y  # the reader scrolled up: leave them there
        self.query_one("#engine-log-lines", TextPanel).update(render.marked_log(self.tail.lines))
        if follow:
            self.call_after_refresh(view.scroll_end, animate=False)


def _setting(value: object) -> str:
    """A profile setting; one the profile leaves out is the engine's own default, not unknown."""
    return "default" if value is None else f"{value:g}" if isinstance(value, float) else str(value)
