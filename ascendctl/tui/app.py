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
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.timer import Timer
from textual.widgets import Footer, Static

from ascendctl.tui import render
from ascendctl.tui.diagnostics import DiagnosticsTable
from ascendctl.tui.engine_screen import EngineScreen
from ascendctl.tui.engines import EnginesPanel
from ascendctl.tui.panel import TextPanel
from engine.telemetry.snapshot import Snapshot
from engine.telemetry.thresholds import Thresholds

# A feed gives the next snapshot; None means "no more" (a replay that ended).
Feed = Callable[[], "Snapshot | None"]


class SnapshotReady(Message):
    def __init__(self, snapshot: Snapshot | None, elapsed: float, error: str | None = None) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.elapsed = elapsed
        self.error = error


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "close")]

    def __init__(self, thresholds: Thresholds, interval: float | None) -> None:
        super().__init__()
        self.thresholds = thresholds
        self.interval = interval

    def compose(self) -> ComposeResult:
        body = Text("Keys\n", style="bold")
        for key, what in (
            ("q", "quit"),
            ("p", "pause the display (collection goes on)"),
            ("r", "refresh now"),
            ("s", "save the current snapshot as JSON"),
            ("tab", "move between the engines and the diagnostics"),
            ("↑ ↓", "select an engine or a diagnostic"),
            ("enter", "open the selected engine's screen, or the selected diagnostic's details"),
            ("esc", "back from an engine's screen (q there too)"),
            ("m", "on an engine's screen: scroll up to the previous marked log line"),
            ("?", "this help"),
        ):
            body.append(f"  {key:<6} {what}\n")
        body.append(f"\nRefresh every {self.interval:g} s\n" if self.interval else "\nManual refresh\n")
        body.append("\nThresholds in force\n", style="bold")
        for key, value in sorted(self.thresholds.as_dict().items()):
            body.append(f"  {key:<20} {value:g}\n")
        body.append("\n(esc to close)", style="dim")
        yield Static(body, id="help")


class TopApp(App[None]):
    CSS_PATH = "top.tcss"
    TITLE = "ascendctl top"
    AUTO_FOCUS = "#engines"
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("p", "toggle_pause", "pause"),
        Binding("r", "refresh", "refresh"),
        Binding("s", "save", "save snapshot"),
        Binding("question_mark", "help", "help"),
    ]

    def __init__(
        self,
        feed: Feed,
        interval: float | None = 1.0,
        thresholds: Thresholds | None = None,
        save_dir: Path | None = None,
    ) -> None:
        """`interval` None: poll once at start and then only on `r` (tests drive it that way)."""
        super().__init__()
        self.feed = feed
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
        yield TextPanel(render.header_line(None, note="collecting…"), id="status")
        # Not focusable itself: Tab goes between the engines and the diagnostics.
        with VerticalScroll(id="main", can_focus=False):
            yield TextPanel(id="devices")
            yield EnginesPanel(id="engines")
            yield DiagnosticsTable(id="diagnostics")
        yield Footer()

    def on_mount(self) -> None:
        self._poller.start()
        self._start_poll()

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
            except Exception as exc:  # noqa: BLE001 - the collector already turns source failures into rows
                snapshot, error = None, f"{type(exc).__name__}: {exc}"
            self.post_message(SnapshotReady(snapshot, time.monotonic() - start, error))

    @on(SnapshotReady)
    def _snapshot_ready(self, message: SnapshotReady) -> None:
        self._polling = False
        if message.error:
            self.note = f"poll failed: {message.error}"
        elif message.snapshot is None:
            self.ended, self.note = True, "replay ended"
        else:
            self.latest, self.note = message.snapshot, ""
            if not self.paused:
                self.show(message.snapshot)
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
        self.query_one("#devices", TextPanel).update(render.devices_table(snap))
        self.query_one("#engines", EnginesPanel).show(snap)
        self.query_one("#diagnostics", DiagnosticsTable).show(snap.diagnostics)
        for screen in self.screen_stack:
            if isinstance(screen, EngineScreen) and screen.is_mounted:
                screen.show(snap)

    def _update_status(self) -> None:
        self.query_one("#status", TextPanel).update(render.header_line(self.latest, self.paused, self.note))

    # --- keys ----------------------------------------------------------------------------------

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
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
            self.push_screen(EngineScreen(event.engine, snap))
