"""The dashboard's engines panel: the engines as `render.engines_group` draws them, with a cursor
on one of them; Enter (or a click) asks for that engine's screen."""

from __future__ import annotations

from textual import events
from textual.binding import Binding
from textual.geometry import Region
from textual.message import Message

from ascendctl.tui import render, translate_bindings
from ascendctl.tui.panel import TextPanel
from engine.i18n import N_
from engine.telemetry.snapshot import EngineView, Snapshot


def engine_key(e: EngineView) -> tuple[str, str]:
    """What names an engine from one snapshot to the next: several engines of a remote exporter
    share its URL, and a label alone may repeat across hosts."""
    return (e.url, e.label)


class EnginesPanel(TextPanel):
    can_focus = True
    BINDINGS = [
        Binding("up,k", "move(-1)", N_("previous engine"), show=False),
        Binding("down,j", "move(1)", N_("next engine"), show=False),
        Binding("enter", "open", N_("open engine")),
    ]

    class Open(Message):
        """The user asked for an engine's screen."""

        def __init__(self, engine: EngineView) -> None:
            super().__init__()
            self.engine = engine

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        translate_bindings(self)
        self.snapshot: Snapshot | None = None
        self.cursor = 0
        self._selected: tuple[str, str] | None = None
        self._starts: list[int] = []  # the line of each engine's first line
        self._proxies_at: int | None = None  # the line the proxies' block starts on

    def show(self, snap: Snapshot) -> None:
        self.snapshot = snap
        keys = [engine_key(e) for e in snap.engines]
        # The cursor stays on its engine when others come or go; on a vanished one, it stays put.
        if self._selected in keys:
            self.cursor = keys.index(self._selected)
        self.cursor = max(0, min(self.cursor, len(keys) - 1))
        self._selected = keys[self.cursor] if keys else None
        text = render.engines_group(snap, self.cursor if keys else None)
        # An engine's block starts with its name at the margin; its figures are indented. The
        # proxies' block comes after the engines': the cursor does not go there.
        lines = text.plain.split("\n")
        starts = [n for n, line in enumerate(lines) if n and not line.startswith(" ")] if keys else []
        self._starts = starts[: len(keys)]
        self._proxies_at: int | None = starts[len(keys)] if len(starts) > len(keys) else None
        self.update(text)

    @property
    def selected(self) -> EngineView | None:
        engines = self.snapshot.engines if self.snapshot else ()
        return engines[self.cursor] if 0 <= self.cursor < len(engines) else None

    def action_move(self, step: int) -> None:
        if self.snapshot is None or not self.snapshot.engines:
            return
        self.cursor = max(0, min(self.cursor + step, len(self.snapshot.engines) - 1))
        self._selected = engine_key(self.snapshot.engines[self.cursor])
        self.show(self.snapshot)
        self._keep_in_sight()

    def _keep_in_sight(self) -> None:
        """Scroll the view this panel sits in so that the selected engine's lines show."""
        if not self._starts or self.parent is None:
            return
        start = self._starts[self.cursor]
        end = (
            self._starts[self.cursor + 1]
            if self.cursor + 1 < len(self._starts)
            else self._proxies_at or self.text.plain.count("\n") + 1
        )
        region = Region(0, self.virtual_region.y + start, self.size.width, end - start)
        self.parent.scroll_to_region(region, animate=False)

    def action_open(self) -> None:
        if self.selected is not None:
            self.post_message(self.Open(self.selected))

    def on_click(self, event: events.Click) -> None:
        if self._proxies_at is not None and event.y >= self._proxies_at:
            return  # a proxy's lines: it has no screen of its own
        hits = [n for n, start in enumerate(self._starts) if start <= event.y]
        if hits and self.snapshot is not None:
            self.cursor = hits[-1]
            self._selected = engine_key(self.snapshot.engines[self.cursor])
            self.show(self.snapshot)
            if event.chain == 2:  # a double click opens it, as Enter does
                self.action_open()
