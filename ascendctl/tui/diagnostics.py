"""The diagnostics table (the dashboard's, and each engine screen's own rows) and the detail
screen Enter opens on a row."""

from __future__ import annotations

import textwrap
from typing import Sequence

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from ascendctl.style import cells as cells_of
from ascendctl.style import clean, severity_style, spaced
from ascendctl.tui import render, translate_bindings
from engine.i18n import N_, _
from engine.severity import Severity
from engine.telemetry.snapshot import Diagnostic


class DetailScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,enter", "dismiss", N_("close"))]

    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__()
        translate_bindings(self)
        self.diagnostic = diagnostic

    def compose(self) -> ComposeResult:
        d = self.diagnostic
        body = Text()
        # What a diagnostic says may quote the engine's log: cleaned of escape sequences.
        body.append(f"{clean(d.title)}\n", style="bold " + severity_style(d.severity))
        origin = _("from the engine log") if d.source == "log" else _("from a threshold rule")
        body.append(f"{_(d.severity)} · {clean(d.subject)} · {d.id} · {origin}")
        if d.count > 1:
            body.append(" · " + _("seen {count} times").format(count=d.count))
        body.append("\n\n" + spaced(_("cause:")), style="bold")
        body.append(clean(d.cause))
        body.append("\n\n" + spaced(_("fix:")), style="bold")
        body.append(clean(d.fix))
        if d.detail:
            body.append("\n\n" + clean(d.detail, multiline=True), style="dim")
        body.append("\n\n" + _("(esc to close)"), style="dim")
        yield Static(body, id="detail")


def _wrap(cell: Text, width: int) -> Text:
    text = cell.plain
    lines = (textwrap.wrap(text, width) if cells_of(text) == len(text) else _wrap_wide(text, width)) or [""]
    return Text("\n".join(lines), style=cell.style)


def _wrap_wide(text: str, width: int) -> list[str]:
    """Wrap text holding Chinese at `width` terminal columns: a line may break between two
    Chinese characters or at a space, never inside an English word or a command."""
    import re

    lines, line = [], ""
    for token in re.findall(r"\s+|[\x21-\x7e]+|.", " ".join(text.split())):
        if cells_of(line) + cells_of(token) > width and line.strip():
            lines.append(line.rstrip())
            line = "" if token.isspace() else token
        else:
            line += token
    if line.strip():
        lines.append(line.rstrip())
    return lines


class DiagnosticsTable(DataTable):
    """One row per diagnostic (severity, subject, issue, fix); Enter opens its DetailScreen.
    Without `subject` (a table about one engine), the subject column is left out."""

    def __init__(self, *, id: str | None = None, subject: bool = True) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False)
        translate_bindings(self)
        self.subject = subject
        columns = (
            (N_("severity"), N_("on"), N_("issue"), N_("fix")) if subject else (N_("severity"), N_("issue"), N_("fix"))
        )
        self._columns = tuple(_(c) for c in columns)
        self.add_columns(*self._columns)
        self.diagnostics: tuple[Diagnostic, ...] | None = None
        self._shown_width = 0

    def _wrapped(self, cells: Sequence[Text], width: int) -> list[Text]:
        """The issue and fix cells wrapped to what the table's width leaves them, so a long fix
        reads whole on an 80-column terminal instead of running off the edge. The other
        cells (severity, the engine's name) stay on one line."""
        *fixed, issue, fix = cells
        left = max(28, width - sum(cells_of(c.plain) for c in fixed) - 2 * len(cells) - 4)
        issue_w = max(12, min(cells_of(issue.plain), left * 2 // 5))
        fix_w = max(16, left - issue_w)
        return [*fixed, _wrap(issue, issue_w), _wrap(fix, fix_w)]

    def show(self, diagnostics: Sequence[Diagnostic]) -> None:
        rows = tuple(diagnostics)
        width = self.scrollable_content_region.width or self.size.width or self.app.size.width
        if rows == self.diagnostics and width == self._shown_width:
            return  # unchanged rows: rebuilding the table each tick would only cost redraws
        self.diagnostics = rows
        self._shown_width = width
        cursor = self.cursor_row
        self.clear(columns=True)  # columns keep the widest content they saw: start them afresh
        self.add_columns(*self._columns)
        for d in rows:
            # Text cells, not str: the table would read a str as markup (`[/]` raises).
            cells = render.diagnostic_cells(d)
            if not self.subject:
                cells = (cells[0], *cells[2:])
            self.add_row(*self._wrapped(cells, width), height=None)
        if not rows:
            ok, nothing = Text(_("ok"), style=severity_style(Severity.OK)), _("nothing to report")
            self.add_row(*((ok, "", nothing, "") if self.subject else (ok, nothing, "")))
        else:
            self.move_cursor(row=min(cursor, len(rows) - 1))

    def on_resize(self, event) -> None:
        """Wrap again to the new width (the first rows may come before the layout gave one)."""
        if self.diagnostics is not None and self.scrollable_content_region.width != self._shown_width:
            self.show(self.diagnostics)

    @on(DataTable.RowSelected)
    def _open_detail(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if self.diagnostics and 0 <= event.cursor_row < len(self.diagnostics):
            self.app.push_screen(DetailScreen(self.diagnostics[event.cursor_row]))
