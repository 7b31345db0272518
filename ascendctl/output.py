"""One Output object per invocation: data on stdout (a human view on a terminal, JSON with
--json), diagnostics and progress on stderr, progress only when stderr is a terminal and not
in --json mode."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import json
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, TextIO

if TYPE_CHECKING:
    from rich.console import Console

SCHEMA_VERSION = 1

# ANSI SGR codes of the styles Output.styled knows.
_SGR = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}


def _console(file: TextIO, stderr: bool = False) -> Console:
    """Off a terminal (a pipe, a file, CI logs) lines are not wrapped at 80 columns: a path cut
    there (serve's `log:` line, a file:line) can no longer be copied. Soft wrap, not a huge width:
    tables that fill the width (top's diagnostics) still lay out at the usual one."""
    from rich.console import Console

    console = Console(file=file, highlight=False, stderr=stderr, soft_wrap=False)
    if console.is_terminal:
        return console
    return Console(file=file, highlight=False, stderr=stderr, soft_wrap=True)


def to_jsonable(obj: Any) -> Any:
    """Dataclasses, enums, paths, tuples and NaN turned into plain JSON values (NaN -> null)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
        return None
    return obj


class Output:
    def __init__(
        self,
        json_mode: bool = False,
        debug: bool = False,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
    ) -> None:
        self.json_mode = json_mode
        self.debug = debug
        self._out = stdout or sys.stdout
        self._err = stderr or sys.stderr
        self._console: Console | None = None
        self._err_console: Console | None = None

    # Rich is imported when something is first printed through it: `--version`, `--help` and
    # JSON output never pay for it.
    @property
    def console(self) -> Console:
        if self._console is None:
            self._console = _console(self._out)
        return self._console

    @property
    def err_console(self) -> Console:
        if self._err_console is None:
            self._err_console = _console(self._err, stderr=True)
        return self._err_console

    @property
    def interactive(self) -> bool:
        """True when a person watches: stderr is a terminal and we are not writing JSON."""
        return not self.json_mode and self.err_console.is_terminal

    def emit(self, data: Any, render: Callable[[Console], None] | None = None, text: str | None = None) -> None:
        """The command's result: JSON (with schema_version when a dict) or the human view.

        `text`: the JSON already written out, when the command lays it out itself."""
        if (self.json_mode or render is None) and text is not None:
            self._out.write(text)
            self._out.flush()
        elif self.json_mode or render is None:
            payload = to_jsonable(data)
            if isinstance(payload, dict) and "schema_version" not in payload:
                payload = {"schema_version": SCHEMA_VERSION, **payload}
            self._out.write(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
            self._out.flush()
        else:
            render(self.console)

    def lines(self, lines: list[str]) -> None:
        """Plain lines on stdout, as they are (no markup, no wrapping): cheap output."""
        self._out.write("".join(f"{line}\n" for line in lines))
        self._out.flush()

    def styled(self, lines: list[list[tuple[str, str]]]) -> None:
        """Lines of (text, style) pieces on stdout, coloured with plain ANSI codes on a terminal
        (the styles the views use: bold, dim and the severity colours), without Rich. The text
        must be clean already (ascendctl.style.clean)."""
        colour = self._colour()
        out = []
        for line in lines:
            parts = []
            for text, style in line:
                codes = ";".join(_SGR[w] for w in style.split() if w in _SGR) if colour else ""
                parts.append(f"\x1b[{codes}m{text}\x1b[0m" if codes and text else text)
            out.append("".join(parts))
        self.lines(out)

    def _colour(self) -> bool:
        """Colour as Rich decides it for the rest of the output: NO_COLOR wins, FORCE_COLOR forces,
        else a terminal that is not `dumb`."""
        if os.environ.get("NO_COLOR"):
            return False
        if os.environ.get("FORCE_COLOR"):
            return True
        isatty = getattr(self._out, "isatty", None)
        return bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"

    def json_line(self, data: Any) -> None:
        """One NDJSON record (streams such as `top --json --interval`)."""
        self._out.write(json.dumps(to_jsonable(data), ensure_ascii=False) + "\n")
        self._out.flush()

    def info(self, message: str) -> None:
        if not self.json_mode:
            self.err_console.print(message)

    def warn(self, message: str) -> None:
        from ascendctl.style import spaced
        from engine.i18n import _

        label = spaced(_("warning:"))
        self.err_console.print(f"[yellow]{label}[/]{message}")

    def error(self, cause: str, fix: str = "") -> None:
        # Escaped and unwrapped: causes carry paths, `[...]` values and file:line lines to grep, and
        # quote what the user or a log gave us, which must not reach the terminal as escapes.
        from ascendctl.style import safe, spaced
        from engine.i18n import _

        label, fix_label = spaced(_("error:")), spaced(_("fix:"))
        self.err_console.print(f"[bold red]{label}[/]{safe(cause)}", markup=True, highlight=False, soft_wrap=True)
        if fix:
            self.err_console.print(f"  [bold]{fix_label}[/]{safe(fix)}", highlight=False, soft_wrap=True)

    @contextlib.contextmanager
    def status(self, message: str) -> Iterator[Callable[[str], None]]:
        """A spinner line on a terminal; yields a function to change its text. Silent otherwise."""
        if not self.interactive:
            yield lambda _msg: None
            return
        with self.err_console.status(message) as st:
            yield st.update


_current = Output()


def get_output() -> Output:
    return _current


def set_output(output: Output) -> None:
    global _current
    _current = output
