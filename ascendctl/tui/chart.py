"""History charts for `top`: braille line charts with axes and units, drawn by a small renderer
of our own.

Why not textual-plotext: plotext builds each chart as an ANSI string that Textual parses back,
about 50 ms for one 70x12 chart of 8 lines (95 ms for 16), so the charts view of 8 NPUs and 2
engines would take 15-20% of a core at a 1 s refresh against a 2% goal; it also pins plotext < 6.
Here a chart is a bytearray of braille dots turned into strips. A chart is drawn again when its
time axis has moved by a thirtieth of the window (10 s in the 5 minute window, 2 min in the hour)
or by one dot if that is more, all charts at the same tick, and only when it is on screen: a
chart cannot show a finer step, and drawing it every second cost more than the whole table view
(docs/top.md has the figures).

`ChartPanel(history, "device")` is the charts of every chip (one line per chip, or max / mean /
min when there are more chips than colours); `ChartPanel(history, "engine", subject=label)` is
one engine's charts: the engine screen can embed that one.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Sequence

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Container
from textual.strip import Strip
from textual.widget import Widget

from ascendctl.style import clean
from ascendctl.tui.panel import TextPanel
from engine.runs import short_name
from engine.telemetry.history import CHARTS, WINDOWS, Chart, History

# One colour per line; past this many chips a chart draws max / mean / min instead.
PALETTE = ("#4ea1ff", "#f0a030", "#3cc47c", "#d070d0", "#e0d050", "#50d0d0", "#ff8080", "#a0a0a0")
ENVELOPE = (("max", "#f0a030"), ("mean", "#4ea1ff"), ("min", "#a0a0a0"))
CHART_HEIGHT = 9  # title, 7 rows of plot (28 dots high), time labels
CHART_MIN_WIDTH = 38
LABEL_W = 6  # y labels and the axis
# A chart is redrawn when its time axis moved by this share of the window (or a dot, if more).
REDRAW_SHARE = 1 / 30
# Time-axis ticks per window: a label every so many seconds.
TICKS = {300.0: 60.0, 900.0: 300.0, 3600.0: 900.0}

# Braille dot bits by (row in the cell 0..3 from the top, column 0..1).
_DOTS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))


@dataclass(frozen=True)
class Line:
    label: str
    color: str
    times: Sequence[float]
    values: Sequence[float]  # NaN breaks the line


@dataclass(frozen=True)
class Entry:
    """A legend entry: a line's name, colour and newest value."""

    label: str
    color: str
    value: float | None


def _per_line(chart: Chart, subjects: Sequence[str]) -> bool:
    """One line per figure and subject; else (many chips) max / mean / min across them."""
    return len(chart.figures) > 1 or len(subjects) <= len(PALETTE)


def lines_for(
    history: History, chart: Chart, subjects: Sequence[str], window: float, end: float | None = None, res: float = 0.0
) -> list[Line]:
    """The lines of one chart: each figure of each subject, or the envelope of many subjects."""
    if not _per_line(chart, subjects):
        return _envelope(history, chart, subjects, window, end, res)
    out: list[Line] = []
    for figure in chart.figures:
        for subject in subjects:
            label = figure.label if len(chart.figures) > 1 else short_name(subject)
            series = history.series(subject, figure.key, window, end, res)
            out.append(Line(label, PALETTE[len(out) % len(PALETTE)], *series))
    return out


def _envelope(
    history: History, chart: Chart, subjects: Sequence[str], window: float, end: float | None, res: float
) -> list[Line]:
    """max / mean / min across subjects at each time."""
    by_time: dict[float, list[float]] = {}
    for subject in subjects:
        times, values = history.series(subject, chart.figures[0].key, window, end, res)
        for t, v in zip(times, values):
            by_time.setdefault(t, []).append(v)
    times = sorted(by_time)
    stats: dict[str, list[float]] = {"max": [], "mean": [], "min": []}
    for t in times:
        known = [v for v in by_time[t] if v == v]
        stats["max"].append(max(known) if known else math.nan)
        stats["mean"].append(sum(known) / len(known) if known else math.nan)
        stats["min"].append(min(known) if known else math.nan)
    return [Line(name, color, times, stats[name]) for name, color in ENVELOPE]


def entries_for(history: History, chart: Chart, subjects: Sequence[str]) -> list[Entry]:
    """The legend of one chart with each line's newest value; for many chips, max (naming the
    chip that holds it) / mean / min of the newest values."""
    if _per_line(chart, subjects):
        out: list[Entry] = []
        for figure in chart.figures:
            for subject in subjects:
                label = figure.label if len(chart.figures) > 1 else short_name(subject)
                out.append(Entry(label, PALETTE[len(out) % len(PALETTE)], history.last(subject, figure.key)))
        return out
    last = {s: v for s in subjects if (v := history.last(s, chart.figures[0].key)) is not None}
    if not last:
        return [Entry(name, color, None) for name, color in ENVELOPE]
    top = max(last, key=last.__getitem__)
    values = list(last.values())
    stats = {"max": last[top], "mean": sum(values) / len(values), "min": min(values)}
    return [Entry(f"max {top}" if name == "max" else name, color, stats[name]) for name, color in ENVELOPE]


def _number(v: float) -> str:
    if v >= 10_000:
        return f"{v / 1000:.0f}k"
    if v >= 1000:
        return f"{v / 1000:.1f}k"
    return f"{v:.0f}" if v >= 10 or v == int(v) else f"{v:.1f}"


def _nice_top(v: float) -> float:
    """The y axis' top: the largest value rounded up to 1, 2 or 5 times a power of ten."""
    if not v > 0:
        return 1.0
    power = 10 ** math.floor(math.log10(v))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= v)


def shares_legend(chart: Chart, subjects: Sequence[str]) -> bool:
    """One line per chip in the same colours on every chip chart: the panel's heading carries
    the legend once, and each chart names its highest chip."""
    return len(chart.figures) == 1 and 1 < len(subjects) <= len(PALETTE)


def legend(subjects: Sequence[str]) -> Text:
    text = Text()
    for i, subject in enumerate(subjects):
        text.append(f"  ━ {clean(subject)}", style=PALETTE[i % len(PALETTE)])
    return text


def resolution(window: float, width: int) -> float:
    """Seconds per braille dot of a chart `width` cells wide."""
    return window / max(1, (width - LABEL_W) * 2 - 1)


def redraw_step(window: float, width: int) -> float:
    """How far the time axis moves between two drawings of a chart."""
    return max(window * REDRAW_SHARE, resolution(window, width))


def draw(
    chart: Chart,
    lines: Sequence[Line],
    entries: Sequence[Entry],
    end: float,
    window: float,
    width: int,
    height: int,
    base: Style,
    shared_legend: bool = False,
) -> list[Strip]:
    """One chart as `height` strips of `width` cells: title and legend, then the plot."""
    return [title(chart, entries, width, base, shared_legend), *plot(chart, lines, end, window, width, height, base)]


def plot(
    chart: Chart, lines: Sequence[Line], end: float, window: float, width: int, height: int, base: Style
) -> list[Strip]:
    """The braille plot with its y labels, and the time labels under it: `height` - 1 strips."""
    plot_w, plot_h = max(1, width - LABEL_W), max(1, height - 2)
    dots_x, dots_y = plot_w * 2, plot_h * 4
    finite = [v for line in lines for v in line.values if v == v]
    high = max(finite, default=0.0)
    top = max(chart.max, high) if chart.max is not None else _nice_top(high)
    cells = bytearray(plot_w * plot_h)
    owner = bytearray(plot_w * plot_h)  # 1 + the index of the line that last set a dot there
    # Per dot row (from the bottom): the offset of its cell row and its bit in each column half.
    row_at = [((dots_y - 1 - y) >> 2) * plot_w for y in range(dots_y)]
    bit_at = [_DOTS[(dots_y - 1 - y) & 3] for y in range(dots_y)]
    t0 = end - window
    sx = (dots_x - 1) / window
    sy = (dots_y - 1) / top
    last_y = dots_y - 1
    for index, line in enumerate(lines, 1):
        prev_x = prev_y = -1
        for t, v in zip(line.times, line.values):
            if v != v:
                prev_x = -1
                continue
            x = int((t - t0) * sx + 0.5)
            if x < 0 or x >= dots_x:
                continue
            y = int(v * sy + 0.5)
            y = 0 if y < 0 else last_y if y > last_y else y
            if prev_x < 0 or x <= prev_x:
                spans = ((x, y, y),)
            else:
                # Connect to the previous point: each column covers the span the segment crosses.
                slope = (y - prev_y) / (x - prev_x)
                spans = []
                at = prev_y
                for cx in range(prev_x + 1, x + 1):
                    nxt = int(prev_y + slope * (cx - prev_x) + 0.5)
                    spans.append((cx, at, nxt) if at <= nxt else (cx, nxt, at))
                    at = nxt
            for cx, lo, hi in spans:
                col, half = cx >> 1, cx & 1
                for yy in range(lo, hi + 1):
                    i = row_at[yy] + col
                    cells[i] |= bit_at[yy][half]
                    owner[i] = index
            prev_x, prev_y = x, y
    styles = [base] + [base + Style(color=line.color) for line in lines]
    dim = base + Style(dim=True)
    strips = []
    for row in range(plot_h):
        label = _number(top) if row == 0 else _number(top / 2) if row == plot_h // 2 and plot_h > 2 else ""
        label = "0" if row == plot_h - 1 else label
        segments = [Segment(f"{label:>{LABEL_W - 1}}{'┤' if label else '│'}", dim)]
        start = row * plot_w
        run_owner, run = -1, []
        for i in range(start, start + plot_w):
            bits = cells[i]
            if not bits:
                run.append(" ")  # a blank joins any run: fewer segments for the screen to compose
                continue
            who = owner[i]
            if who != run_owner:
                if run:
                    segments.append(Segment("".join(run), styles[max(0, run_owner)]))
                    run = []
                run_owner = who
            run.append(chr(0x2800 + bits))
        if run:
            segments.append(Segment("".join(run), styles[max(0, run_owner)]))
        strips.append(Strip(segments, width))
    strips.append(_time_axis(end, window, plot_w, width, dim))
    return strips


def title(chart: Chart, entries: Sequence[Entry], width: int, base: Style, shared: bool = False) -> Strip:
    """The chart's name and unit, then each line's name and newest value in its colour (or, when
    the panel's heading holds the legend, the highest line's)."""
    segments = [Segment(f"{chart.title} {chart.unit} " if chart.unit else f"{chart.title} ", base + Style(bold=True))]
    used = segments[0].cell_length
    if shared:
        known = [e for e in entries if e.value is not None]
        if known:
            e = max(known, key=lambda e: e.value or 0.0)
            segments.append(Segment(f" top {clean(e.label)} {_number(e.value or 0.0)}", base + Style(color=e.color)))
        return Strip(segments).crop(0, width).extend_cell_length(width)
    for e in entries:
        text = f" ━ {clean(e.label)} {'N/A' if e.value is None else _number(e.value)}"
        if used + len(text) > width:
            segments.append(Segment(" …", base + Style(dim=True)))
            break
        segments.append(Segment(text, base + Style(color=e.color)))
        used += len(text)
    return Strip(segments).crop(0, width).extend_cell_length(width)


def _time_axis(end: float, window: float, plot_w: int, width: int, dim: Style) -> Strip:
    """Clock times (the recorded clock in a replay) under the ticks that fit."""
    row = [" "] * width
    every = TICKS.get(window, window / 4)
    t0 = end - window
    tick = math.ceil(t0 / every) * every
    last_end = LABEL_W - 1
    while tick <= end:
        x = LABEL_W + int((tick - t0) / window * (plot_w - 1) + 0.5)
        label = time.strftime("%H:%M", time.localtime(tick))
        at = max(LABEL_W, min(width - len(label), x - len(label) // 2))
        if at > last_end + 1:
            row[at : at + len(label)] = label
            last_end = at + len(label)
        tick += every
    return Strip([Segment("".join(row)[:width], dim)], width)


class ChartView(Widget):
    """One chart. It is drawn when painted after its time axis moved by a redraw step (or the
    size, window or history changed); a chart scrolled out of view costs nothing."""

    DEFAULT_CSS = f"ChartView {{ height: {CHART_HEIGHT}; }}"

    def __init__(self, history: History, chart: Chart, subjects: Sequence[str], window: float) -> None:
        super().__init__()
        self.history, self.chart, self.subjects, self.window = history, chart, tuple(subjects), window
        self._strips: list[Strip] = []
        self._plot_for: tuple | None = None
        self._base: Style | None = None

    def _plot_key(self) -> tuple:
        """What the drawing depends on: its size and style, the window, the history's generation,
        and the newest time rounded up to a whole redraw step."""
        width = self.size.width
        end = self.history.latest
        step = redraw_step(self.window, width)
        end_q = None if end is None else math.ceil(end / step) * step
        return (width, self.size.height, self._base, self.window, self.history.generation, end_q)

    def changed(self) -> None:
        """New data: drawn again only once the time axis has moved by a redraw step."""
        if self._plot_for is None or self._plot_key() != self._plot_for:
            self._plot_for = None
            self.refresh()

    def render_line(self, y: int) -> Strip:
        if y == 0 or self._base is None:
            self._base = self.rich_style  # a theme change repaints every line, the first too
        width = self.size.width
        if self.history.latest is None:
            return Strip([Segment("collecting…" if y == 0 else "", self._base)]).extend_cell_length(width)
        key = self._plot_key()
        if self._plot_for != key:
            end_q = key[5]
            shared = shares_legend(self.chart, self.subjects)
            entries = entries_for(self.history, self.chart, self.subjects)
            lines = lines_for(
                self.history, self.chart, self.subjects, self.window, end_q, resolution(self.window, width)
            )
            self._strips = draw(
                self.chart, lines, entries, end_q, self.window, width, self.size.height, self._base, shared
            )
            self._plot_for = key
        return self._strips[y] if y < len(self._strips) else Strip.blank(width, self._base)


class ChartPanel(Container):
    """The charts of the chips (`of="device"`: every chip in the history) or of one engine
    (`of="engine"`, `subject=` its label) under a heading, in a grid that takes as many columns
    as fit."""

    DEFAULT_CSS = f"""
    ChartPanel {{ height: auto; }}
    ChartPanel > Container {{ height: auto; layout: grid; grid-size: 3; grid-rows: {CHART_HEIGHT}; grid-gutter: 0 2; }}
    """

    def __init__(
        self,
        history: History,
        of: str,
        subject: str | None = None,
        window: float = WINDOWS[0],
        *,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.history, self.of, self.subject, self.window = history, of, subject, window
        self.subjects = (subject,) if subject is not None else history.subjects(of)
        self.kinds = history.kinds(self.subjects) if of == "device" else set()
        # A CPU host's charts say host memory and CPU, and leave out what it has no counter for.
        self.charts = [
            replace(c, title=c.title_for(self.kinds)) for c in CHARTS if c.of == of and c.shown_for(self.kinds)
        ]

    def compose(self) -> ComposeResult:
        yield TextPanel(self._heading())
        with Container():
            for chart in self.charts:
                yield ChartView(self.history, chart, self.subjects, self.window)

    def on_resize(self) -> None:
        columns = max(1, min(len(self.charts), (self.size.width + 2) // (CHART_MIN_WIDTH + 2)))
        grid = self.query_one(Container)
        if grid.styles.grid_size_columns != columns:
            grid.styles.grid_size_columns = columns

    def set_window(self, window: float) -> None:
        self.window = window
        self.query_one(TextPanel).update(self._heading())
        for view in self.query(ChartView):
            view.window = window
            view.changed()

    def changed(self) -> None:
        for view in self.query(ChartView):
            view.changed()

    def _heading(self) -> Text:
        if self.subject:
            name = short_name(self.subject)
        elif self.kinds == {"cpu"}:
            name = "host"
        else:
            name = f"{len(self.subjects)} chip{'s' if len(self.subjects) != 1 else ''}"
        text = Text(f"{clean(name)} · last {self.window / 60:g} min", style="bold")
        if any(shares_legend(c, self.subjects) for c in self.charts):
            text.append_text(legend(self.subjects))
        return text
