"""A block of pre-styled lines that repaints cheaply, for panels redrawn every tick.

Static runs its Text through Textual's content pipeline (wrap, then style every span) on every
repaint; that was most of the dashboard's CPU. Here rich renders the Text once per change into
strips, lines are cropped rather than wrapped, the height is the line count, and only the lines
that differ from the ones on screen are repainted.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget


class TextPanel(Widget):
    DEFAULT_CSS = "TextPanel { height: auto; }"

    def __init__(self, text: Text | None = None, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._text = text or Text()
        self._strips: list[Strip] = []
        # What _strips were rendered for: the width and the widget's CSS style (a theme change
        # alters the latter). None: not rendered yet, or the line count changed.
        self._rendered_for: tuple[int, Style] | None = None
        self._line_cache: dict[tuple, Strip] = {}  # the lines of the last render

    @property
    def text(self) -> Text:
        return self._text

    def update(self, text: Text) -> None:
        """Show `text`. Nothing is repainted when it equals what is shown, only the changed lines
        when the line count is the same, and the screen is laid out again only when it is not."""
        if text == self._text:
            return
        same_height = text.plain.count("\n") == self._text.plain.count("\n")
        self._text = text
        if not same_height or self._rendered_for is None:
            self._rendered_for = None
            self.refresh(layout=not same_height)
            return
        width = self._rendered_for[0]
        old, self._strips = self._strips, self._render(*self._rendered_for)
        changed = [Region(0, y, width, 1) for y, (a, b) in enumerate(zip(old, self._strips)) if a != b]
        if changed:
            self.refresh(*changed)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return self._text.plain.count("\n") + 1

    def render_line(self, y: int) -> Strip:
        wanted = (self.size.width, self.rich_style)
        if self._rendered_for != wanted:
            self._strips = self._render(*wanted)
            self._rendered_for = wanted
        return self._strips[y] if y < len(self._strips) else Strip.blank(wanted[0])

    def _render(self, width: int, base: Style) -> list[Strip]:
        """One strip a line; a line equal to one of the last render is reused (the headings, and
        whatever did not move since the last tick)."""
        console = self.app.console
        cache = self._line_cache if self._rendered_for == (width, base) else {}
        self._line_cache = {}
        strips = []
        for line in self._text.split("\n", allow_blank=True):
            key = (line.plain, tuple(line.spans), str(line.style))
            strip = cache.get(key)
            if strip is None:
                if line.cell_len > width:
                    line.truncate(width, overflow="ellipsis")
                # The widget's CSS colours go under the Text's own styles, as Static would paint
                # them; a line's base style is not in its segments when it has no spans.
                under = base + console.get_style(line.style) if line.style else base
                strip = Strip(Segment.apply_style(line.render(console), under))
            strips.append(strip)
            self._line_cache[key] = strip
        return strips
