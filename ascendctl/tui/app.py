"""The `ascendctl top` dashboard (Textual).

One background thread takes each snapshot (a live poll, or the next recorded one) and posts it
as a message; only the main thread touches widgets. The next poll is scheduled when the previous one
has finished, so polls never overlap however slow a source is.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Callable

from rich.text import Text
from textual import events, on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.timer import Timer
from textual.widgets import Footer, Static

from ascendctl.tui import render, translate_bindings
from ascendctl.tui.chart import ChartPanel
from ascendctl.tui.diagnostics import DiagnosticsTable
from ascendctl.tui.engine_screen import EngineScreen
from ascendctl.tui.engines import EnginesPanel
from ascendctl.tui.panel import TextPanel
from engine.i18n import N_, _
from engine.telemetry.history import WINDOWS, History
from engine.telemetry.replay import JUMP_S, Replay
from engine.telemetry.snapshot import Snapshot
from engine.telemetry.thresholds import Thresholds

# A feed gives the next snapshot; None means "no more" (a replay that ended).
Feed = Callable[[], "Snapshot | None"]

# Below this width the charts do not fit: the table view stays, with a note.
CHARTS_MIN_COLUMNS = 80


class SnapshotReady(Message):
    def __init__(self, snapshot: Snapshot | None, elapsed: float, error: str | None = None) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.elapsed = elapsed
        self.error = error


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", N_("close"))]

    def __init__(self, thresholds: Thresholds, interval: float | None) -> None:
        super().__init__()
        translate_bindings(self)
        self.thresholds = thresholds
        self.interval = interval

    def compose(self) -> ComposeResult:
        body = Text(_("Keys") + "\n", style="bold")
        for key, what in (
            ("q", _("quit")),
            ("p", _("pause the display (collection goes on)")),
            ("r", _("refresh now")),
            ("s", _("save the current snapshot as JSON")),
            ("tab", _("move between the engines and the diagnostics")),
            ("↑ ↓", _("select an engine or a diagnostic")),
            ("enter", _("open the selected engine's screen, or the selected diagnostic's details")),
            ("esc", _("back from an engine's screen (q there too)")),
            ("m", _("on an engine's screen: scroll up to the previous marked log line")),
            ("c", _("charts view / table view")),
            ("w", _("chart window: 5, 15, 60 minutes")),
            ("+ -", _("replay: faster / slower (1x, 10x, 60x)")),
            ("] [", _("replay: jump {minutes:g} min ahead / back").format(minutes=JUMP_S / 60)),
            ("home end", _("replay: to the start / the end")),
            ("?", _("this help")),
        ):
            body.append(f"  {key:<8} {what}\n")
        every = _("Refresh every {seconds:g} s").format(seconds=self.interval) if self.interval else _("Manual refresh")
        body.append(f"\n{every}\n")
        body.append("\n" + _("Thresholds in force") + "\n", style="bold")
        for key, value in sorted(self.thresholds.as_dict().items()):
            body.append(f"  {key:<20} {value:g}\n")
        body.append("\n" + _("(esc to close)"), style="dim")
        yield Static(body, id="help")


# How often the dashboard asks `quit_when` (a stop of the demo's engine): quick to notice, cheap.
QUIT_CHECK_S = 0.2


class TopApp(App[None]):
    CSS_PATH = "top.tcss"
    TITLE = "ascendctl top"
    AUTO_FOCUS = "#engines"
    BINDINGS = [
        Binding("q", "quit", N_("quit")),
        Binding("p", "toggle_pause", N_("pause")),
        Binding("r", "refresh", N_("refresh")),
        Binding("s", "save", N_("save snapshot")),
        Binding("question_mark", "help", N_("help")),
        Binding("c", "toggle_charts", N_("charts")),
        Binding("w", "cycle_window", N_("window")),
        Binding("plus", "replay_speed(1)", N_("faster")),
        Binding("minus", "replay_speed(-1)", N_("slower")),
        Binding("right_square_bracket", f"replay_jump({JUMP_S})", f"+{JUMP_S / 60:g}m"),
        Binding("left_square_bracket", f"replay_jump({-JUMP_S})", f"-{JUMP_S / 60:g}m"),
        Binding("home", "replay_seek('start')", "start", show=False, priority=True),
        Binding("end", "replay_seek('end')", "end", show=False, priority=True),
    ]

    def __init__(
        self,
        feed: Feed | None,
        interval: float | None = 1.0,
        thresholds: Thresholds | None = None,
        save_dir: Path | None = None,
        replay: Replay | None = None,
        charts: bool = False,
        quit_when: Callable[[], bool] | None = None,
    ) -> None:
        """`interval` None: poll once at start and then only on `r` (tests drive it that way).
        With `replay`, frames come from it (at its speed) and `feed` is not used. `quit_when`:
        asked a few times a second; once it is true the app quits as on `q` (the demo's engine
        was told to stop: a SIGTERM must not leave the dashboard holding the terminal)."""
        super().__init__()
        translate_bindings(self)
        self.quit_when = quit_when
        self.feed = feed if replay is None else self._replay_feed
        self.replay = replay
        if replay is not None:
            replay.refill_s = WINDOWS[0]  # a jump refills the window in view: decoding is the cost
        # Every snapshot goes into the history, shown or not, so the charts miss nothing.
        self.history = History()
        self.charts_view = charts
        self.window = WINDOWS[0]
        self._chart_subjects: tuple | None = None
        self._width: int | None = None
        self._show_next = False  # show the next snapshot even while paused (a replay jump)
        self.interval = interval
        self.thresholds = thresholds or Thresholds.defaults()
        self.save_dir = save_dir or Path.cwd()
        self.paused = False
        self.latest: Snapshot | None = None
        self.shown: Snapshot | None = None
        self.note = ""
        self.ended = False
        self._polling = False
        self._timer: Timer | None = None
        self._poll_wake = threading.Event()
        self._poll_stop = threading.Event()
        self._poller = threading.Thread(target=self._poll_loop, name="top-poller", daemon=True)

    def compose(self) -> ComposeResult:
        yield TextPanel(render.header_line(None, note=_("collecting…")), id="status")
        # Not focusable itself: Tab goes between the engines and the diagnostics.
        with VerticalScroll(id="main", can_focus=False):
            yield TextPanel(id="devices")
            yield EnginesPanel(id="engines")
            yield DiagnosticsTable(id="diagnostics")
        yield VerticalScroll(id="charts")
        yield Footer()

    def on_mount(self) -> None:
        self._apply_view()
        self._poller.start()
        self._start_poll()
        if self.quit_when is not None:
            self.set_interval(QUIT_CHECK_S, self._quit_if_asked)

    def _quit_if_asked(self) -> None:
        if self.quit_when is not None and self.quit_when():
            self.exit()

    def on_unmount(self) -> None:
        self._poll_stop.set()
        self._poll_wake.set()

    # --- polling (one background thread) ------------------------------------------------------

    def _start_poll(self) -> None:
        if self._polling or self.ended:
            return
        self._polling = True
        self._poll_wake.set()

    def _poll_loop(self) -> None:
        """The one thread that polls: it sleeps until woken, polls, posts the result. Being a
        single thread, two polls cannot run at once, whatever the keys and timers do."""
        while True:
            self._poll_wake.wait()
            self._poll_wake.clear()
            if self._poll_stop.is_set():
                return
            start = time.monotonic()
            try:
                snapshot, error = self.feed(), None
                if snapshot is not None and self.replay is None:
                    self.history.add(snapshot)
            except Exception as exc:  # noqa: BLE001 - the collector already turns source failures into rows
                snapshot, error = None, f"{type(exc).__name__}: {exc}"
            self.post_message(SnapshotReady(snapshot, time.monotonic() - start, error))

    @on(SnapshotReady)
    def _snapshot_ready(self, message: SnapshotReady) -> None:
        self._polling = False
        if message.error:
            self.note = _("poll failed: {error}").format(error=message.error)
        elif message.snapshot is None:
            self.ended, self.note = True, _("replay ended")
        else:
            self.latest, self.note = message.snapshot, ""
            if not self.paused or self._show_next:
                self._show_next = False
                self.show(message.snapshot)
                self._show_charts()
        self._update_status()
        if self.interval is not None and not self.ended:
            self._timer = self.set_timer(max(0.05, self.interval - message.elapsed), self._start_poll)

    # --- rendering (main thread) --------------------------------------------------------------

    def show(self, snap: Snapshot) -> None:
        try:
            self._show(snap)
        except Exception as exc:  # noqa: BLE001 - one bad sample must not take the dashboard down
            self.note = f"display failed: {type(exc).__name__}: {exc}"

    def _show(self, snap: Snapshot) -> None:
        self.shown = snap
        if not self._charts_shown():  # under the charts, the tables are drawn when they come back
            self._show_tables(snap)
        for screen in self.screen_stack:
            if isinstance(screen, EngineScreen) and screen.is_mounted:
                screen.show(snap)

    def _show_tables(self, snap: Snapshot) -> None:
        self.query_one("#devices", TextPanel).update(render.devices_table(snap))
        self.query_one("#engines", EnginesPanel).show(snap)
        self.query_one("#diagnostics", DiagnosticsTable).show(snap.diagnostics)

    def _update_status(self) -> None:
        self.query_one("#status", TextPanel).update(
            render.header_line(self.latest, self.paused, self.note, self._mode_text())
        )

    def _mode_text(self) -> str:
        """Replay position (the recorded clock), speed and end; the chart window; the narrow note."""
        parts = []
        if self.replay is not None:
            r = self.replay
            at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.position))
            parts.append(f"replay {at} x{r.speed:g}" + (" (end)" if r.at_end else ""))
        if self.charts_view:
            if self._charts_fit():
                parts.append(f"charts {self.window / 60:g} min")
                # The diagnostics table is hidden under the charts: say that it has rows.
                count = len(self.latest.diagnostics) if self.latest else 0
                if count:
                    parts.append(f"{count} diagnostic{'s' if count > 1 else ''} (c: tables)")
            else:
                parts.append(_("charts need {columns} columns").format(columns=CHARTS_MIN_COLUMNS))
        return "  ".join(parts)

    # --- charts (a second view, over the same snapshots) --------------------------------------

    def _charts_fit(self) -> bool:
        return (self._width or self.size.width) >= CHARTS_MIN_COLUMNS

    def _charts_shown(self) -> bool:
        return self.charts_view and self._charts_fit()

    def _apply_view(self) -> None:
        on = self._charts_shown()
        self.query_one("#charts").display = on
        self.query_one("#main").display = not on
        if on:
            self._show_charts()
        else:
            if self.focused is None or self.focused.id == "charts":
                self.query_one("#engines").focus()
            if self.shown is not None:
                self.show(self.shown)

    def on_resize(self, event: events.Resize) -> None:
        self._width = event.size.width  # self.size is updated after this handler
        if self.charts_view:
            self._apply_view()
            self._update_status()

    def _show_charts(self) -> None:
        """Redraw the charts; rebuild them when the chips or engines changed."""
        if not self._charts_shown():
            return
        subjects = (self.history.subjects("device"), self.history.subjects("engine"))
        box = self.query_one("#charts", VerticalScroll)
        if self.screen is box.screen and self.focused is not box:
            box.focus()  # the arrows scroll the charts, and never move a selection hidden under them
        if subjects != self._chart_subjects:
            self._chart_subjects = subjects
            box.remove_children()
            panels = [ChartPanel(self.history, "device", window=self.window)] if subjects[0] else []
            panels += [ChartPanel(self.history, "engine", label, self.window) for label in subjects[1]]
            if panels:
                box.mount_all(panels)
            else:
                box.mount(TextPanel(Text("no history yet", style="dim")))
            return
        for panel in box.query(ChartPanel):
            panel.changed()

    def action_toggle_charts(self) -> None:
        self.charts_view = not self.charts_view
        self._apply_view()
        self._update_status()

    def action_cycle_window(self) -> None:
        self.window = WINDOWS[(WINDOWS.index(self.window) + 1) % len(WINDOWS)]
        if self.replay is not None:
            self.replay.refill_s = self.window
        for panel in self.query(ChartPanel):
            panel.set_window(self.window)
        self._update_status()

    # --- replay --------------------------------------------------------------------------------

    def _replay_feed(self) -> Snapshot | None:
        """The frame to show now; every frame passed since the last call goes to the history."""
        assert self.replay is not None
        step = self.replay.take()
        if step.reset:
            self.history.clear()
        for frame in step.frames:
            self.history.add(frame)
        return step.current

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action.startswith("replay_") and self.replay is None:
            return False  # live: the replay keys do nothing and leave the footer
        if action in ("toggle_charts", "cycle_window") and self.screen is not self.screen_stack[0]:
            return False  # the charts are a view of the dashboard, not of an engine's screen
        return True

    def action_replay_speed(self, direction: int) -> None:
        assert self.replay is not None
        if direction > 0:
            self.replay.faster()
        else:
            self.replay.slower()
        self._update_status()

    def action_replay_jump(self, seconds: float) -> None:
        assert self.replay is not None
        self.replay.jump(seconds)
        self._show_next = True  # even paused: a jump is asked to be seen
        self.action_refresh()

    def action_replay_seek(self, where: str) -> None:
        assert self.replay is not None
        self.replay.seek(self.replay.start if where == "start" else self.replay.end)
        self._show_next = True
        self.action_refresh()

    # --- keys ----------------------------------------------------------------------------------

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        if self.replay is not None:
            self.replay.set_paused(self.paused)  # a paused replay stops its clock too
        if not self.paused and self.latest is not None and self.latest is not self.shown:
            self.show(self.latest)
        self._update_status()

    def action_refresh(self) -> None:
        if self._timer is not None:
            self._timer.stop()
        self._start_poll()

    def action_save(self) -> None:
        snap = self.shown or self.latest
        if snap is None:
            self.notify("nothing collected yet", severity="warning")
            return
        path = (
            self.save_dir / f"top-snapshot-{time.strftime('%Y%m%d-%H%M%S', time.localtime(snap.time))}-{snap.seq}.json"
        )
        try:
            path.write_text(json.dumps(snap.to_dict(), indent=2, default=str) + "\n", encoding="utf-8")
        except OSError as exc:
            self.notify(f"cannot save {path}: {exc.strerror}", severity="error")
            return
        self.notify(f"saved {path}")

    def action_help(self) -> None:
        thresholds = self.latest.thresholds if self.latest else self.thresholds
        self.push_screen(HelpScreen(thresholds, self.interval))

    @on(EnginesPanel.Open)
    def _open_engine(self, event: EnginesPanel.Open) -> None:
        snap = self.shown or self.latest
        if snap is not None:
            self.push_screen(EngineScreen(event.engine, snap, self.history, self.window))
