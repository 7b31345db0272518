"""The root command group that imports a command's module only when that command runs.

`ascendctl --help` lists every command from a table of names and one-line summaries
(ascendctl/cli.py, COMMANDS) without importing any command module; `ascendctl doctor` imports
doctor's module and no other. Help is Click's plain layout, as git and kubectl print it: one line
per command, every flag name whole, paragraphs reflowed to the terminal's width.

Help speaks the messages' language (engine/i18n.py): a command's help texts are looked up in the
catalogue when the command is built (`translate_help`), Click's headings when they are written, and
Chinese is wrapped by terminal columns (a Chinese character takes two; Click counts one).
`extract_help` hands every help text to `pybabel extract` (babel.cfg), so a help text without its
Chinese fails the catalogue's test like any other message.
"""

from __future__ import annotations

import importlib
import re
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import typer
import typer.main
from typer.core import TyperGroup

from engine.i18n import DEFAULT, N_, _, message_language

if TYPE_CHECKING:
    from ascendctl.cli import Lazy

try:  # Typer 0.22+ carries its own copy of Click
    from typer._click import types
    from typer._click._textwrap import TextWrapper
    from typer._click.core import Command, Context, Parameter
    from typer._click.formatting import HelpFormatter
except ImportError:  # pragma: no cover - older Typer
    from click import types  # type: ignore[no-redef]
    from click._textwrap import TextWrapper  # type: ignore[no-redef]
    from click.core import Command, Context, Parameter  # type: ignore[no-redef]
    from click.formatting import HelpFormatter  # type: ignore[no-redef]


# What a flag's value is, for the flags several commands share (an explicit metavar wins).
METAVARS = {
    "--profile": "PROFILE",
    "--model": "DIR",
    "--set": "KEY=VALUE",
    "--thresholds": "FILE",
    "--out": "FILE",
    "--output": "FILE",
    "--html": "FILE",
    "--record": "FILE",
    "--replay": "FILE",
    "--dest": "DIR",
    "--index": "NAME=URL",
}


def metavar_for(param: Parameter) -> str:
    """One metavar style: an upper-case word for what the value is (explicit metavars are written
    so too). The shared flags' table first, then N for a number, else the flag's own name (a
    choice's values are for its help text to list)."""
    longs = [o for o in param.opts if o.startswith("--")]
    if longs and longs[0] in METAVARS:
        return METAVARS[longs[0]]
    if isinstance(param.type, (types.IntParamType, types.FloatParamType)):
        return "N"
    return longs[0][2:].replace("-", "_").upper() if longs else (param.name or "VALUE").upper()


def plain_help(command: Any) -> None:
    """Click's own help layout for a command and everything under it: Typer's Rich panels cut
    flag names at 80 columns and keep hard line breaks; Click's reflow paragraphs and never cut."""
    if hasattr(command, "rich_markup_mode"):
        command.rich_markup_mode = None
    command.context_class = HelpContext
    translate_help(command)
    for param in getattr(command, "params", []):
        kind = getattr(param, "param_type_name", "")
        if kind == "option" and param.metavar is None and not (param.is_flag or param.count):
            param.metavar = metavar_for(param)
        elif kind == "argument" and param.metavar is None:
            param.metavar = (param.name or "ARG").upper() + ("..." if param.nargs != 1 else "")
    for sub in getattr(command, "commands", {}).values():
        plain_help(sub)
        if not sub.short_help and sub.help:  # Click would cut the first sentence at ~45 characters
            sub.short_help = _first_sentence(sub.help)


def _first_sentence(text: str) -> str:
    paragraph = " ".join(text.strip().split("\n\n")[0].split())
    end = paragraph.find(". ")
    if end < 0 and "。" in paragraph[:-1]:  # Chinese ends a sentence with a full stop of its own
        end = paragraph.find("。")
    return paragraph if end < 0 else paragraph[: end + 1]


def _help_slots(command: Any) -> Iterator[tuple[Any, str]]:
    """(object, attribute) of each help text of `command` (not of its subcommands) that holds one:
    its help, short help and each parameter's. The extractor and the lookup read the same slots."""
    for obj, attr in [(command, "help"), (command, "short_help")] + [
        (p, "help") for p in getattr(command, "params", [])
    ]:
        if getattr(obj, attr, None):
            yield obj, attr


def help_texts(command: Any) -> Iterator[str]:
    """What a person reads in the help of `command` (not of its subcommands), as Click holds it."""
    for obj, attr in _help_slots(command):
        yield getattr(obj, attr)


def help_id(text: str) -> str:
    """The catalogue's id of a help text. Babel takes a text holding "10% of" for a printf
    format (`% o`); written as printf writes a percent sign, %%, it is one."""
    return text.replace("%", "%%")


def translated_help(text: str) -> str:
    """A help text in the messages' language (English where the catalogue has none)."""
    return _(help_id(text)).replace("%%", "%")


def translate_help(command: Any) -> None:
    """The help texts of `command` in the messages' language. Run once, when the command is built
    for this run."""
    if message_language() == DEFAULT:
        return
    for obj, attr in list(_help_slots(command)):
        setattr(obj, attr, translated_help(getattr(obj, attr)))


def command_tree(commands: Mapping[str, Lazy]) -> Iterator[tuple[list[str], Any]]:
    """(path, click command) of every command and subcommand in `commands`, each built as its
    run builds it (in English: the help as written)."""

    def walk(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])

    for name, entry in commands.items():
        holder = typer.Typer(rich_markup_mode=None)
        importlib.import_module(entry.module).register(holder)
        yield from walk(typer.main.get_group(holder).commands[name], [name])


def extract_help(fileobj: Any, keywords: Any, comment_tags: Any, options: dict[str, str]) -> Iterator[Any]:
    """A Babel extraction method for ascendctl/cli.py: its marked strings (the root's help and the
    COMMANDS summaries, `keywords = Lazy:2`), then the help of every command it lists and of their
    subcommands and options, as `translate_help` looks them up."""
    from babel.messages.extract import extract_python

    from ascendctl.cli import COMMANDS
    from engine import i18n

    yield from extract_python(fileobj, keywords, comment_tags, options)
    with i18n.english():
        for _path, command in command_tree(COMMANDS):
            for text in help_texts(command):
                yield 0, "", help_id(text), []


# Click's own words in a help page, for the catalogue (Click writes them in English).
CLICK_WORDS = (N_("Usage: "), N_("Options"), N_("Arguments"), N_("Commands"), N_("Show this message and exit."))
# Click's usage errors, for a person: Typer's copy of Click writes them in English with no gettext,
# so its message is matched and written again (one that matches none stays as Click wrote it).
CLICK_ERRORS = (
    (r"No such option: (?P<name>\S+)", N_("No such option: {name}")),
    (
        r"No such option: (?P<name>\S+) \(Possible options: (?P<options>.+)\)",
        N_("No such option: {name} (possible options: {options})"),
    ),
    (r"No such option: (?P<name>\S+) Did you mean (?P<hint>\S+)\?", N_("No such option: {name}. Did you mean {hint}?")),
    (r"No such command (?P<name>'.*')\.", N_("No such command {name}.")),
    (r"Missing option (?P<hint>.+)\.", N_("Missing option {hint}.")),
    (r"Missing argument (?P<hint>.+)\.", N_("Missing argument {hint}.")),
    (r"Missing parameter (?P<hint>.+)\.", N_("Missing parameter {hint}.")),
    (r"Option (?P<name>'[^']*') requires an argument\.", N_("Option {name} requires an argument.")),
    (r"Option (?P<name>'[^']*') does not take a value\.", N_("Option {name} does not take a value.")),
    (r"Got unexpected extra arguments? \((?P<args>.*)\)", N_("Got unexpected extra arguments ({args})")),
    (r"Invalid value for (?P<hint>.+?): (?P<message>.+)", N_("Invalid value for {hint}: {message}")),
    (r"Invalid value: (?P<message>.+)", N_("Invalid value: {message}")),
    (r"(?P<value>.+) is not in the range (?P<range>.+)\.", N_("{value} is not in the range {range}.")),
    (r"(?P<value>.+) is not one of (?P<choices>.+)\.", N_("{value} is not one of {choices}.")),
    (r"(?P<value>.+) is not a valid (?P<kind>[\w ]+)\.", N_("{value} is not a valid {kind}.")),
)


def click_message(text: str) -> str:
    """A usage error's message (Click's `format_message()`) in the messages' language."""
    if message_language() == DEFAULT:
        return text
    for pattern, message in CLICK_ERRORS:
        found = re.fullmatch(pattern, text, re.S)
        if found is not None:
            parts = {k: click_message(v) if k == "message" else v for k, v in found.groupdict().items()}
            return _(message).format(**parts)
    return text


_EXTRAS = r"\s\s\[([^\[\]]*)\]$"  # Click's "  [default: 8; required]" after a help
_NO_LINE_START = "，。、；：！？）】》」』…)]"  # closing marks stay at the end of their line
_NO_LINE_END = "（【《「『(["  # opening marks at the start of theirs


def _wide(text: str) -> bool:
    """Whether `text` holds a character that takes two columns (Chinese)."""
    if text.isascii():  # English help: decided without a look at each character
        return False
    import unicodedata

    return any(unicodedata.east_asian_width(ch) in "WF" for ch in text)


class CellWrapper(TextWrapper):
    """Click's text wrapper measuring terminal columns: a Chinese character takes two and a line
    may break between two of them (not before a closing mark nor after an opening one)."""

    def _split(self, text: str) -> list[str]:
        chunks: list[str] = []
        for chunk in super()._split(text):
            if not _wide(chunk):
                chunks.append(chunk)
                continue
            for char in chunk:  # one chunk per Chinese character; a run of others stays whole
                glue = chunks and (
                    char in _NO_LINE_START
                    or chunks[-1][-1] in _NO_LINE_END
                    or not (_wide(char) or _wide(chunks[-1][-1]) or chunks[-1][-1].isspace())
                    or chunks[-1].count("[") > chunks[-1].count("]")  # "[默认：1.0]" stays whole
                )
                if glue:
                    chunks[-1] += char
                else:
                    chunks.append(char)
        return chunks

    def _wrap_chunks(self, chunks: list[str]) -> list[str]:
        from ascendctl.style import cells

        sizes: dict[str, int] = {}  # most chunks are one character, met again and again
        lines: list[str] = []
        chunks.reverse()
        while chunks:
            line: list[str] = []
            used = 0
            indent = self.subsequent_indent if lines else self.initial_indent
            width = self.width - cells(indent)
            if self.drop_whitespace and lines and not chunks[-1].strip():
                del chunks[-1]
            while chunks:
                size = sizes.get(chunks[-1])
                if size is None:
                    size = sizes[chunks[-1]] = cells(chunks[-1])
                if used + size > width:
                    break
                used += size
                line.append(chunks.pop())
            if chunks and not line:  # one chunk wider than the line: cut it
                line.append(chunks.pop())
            if self.drop_whitespace and line and not line[-1].strip():
                del line[-1]
            if line:
                lines.append(indent + "".join(line))
        return lines


def wrap_cells(text: str, width: int, indent: str = "", subsequent: str = "") -> str:
    """Click's `wrap_text(..., preserve_paragraphs=True)` by terminal columns: paragraphs apart
    reflow, a paragraph after a line holding only \\b keeps its lines."""
    wrapper = CellWrapper(width, initial_indent=indent, subsequent_indent=subsequent, replace_whitespace=False)
    out = []
    for paragraph in re.split(r"\n\s*\n", text.expandtabs().strip("\n")):
        lines = paragraph.splitlines()
        if lines and lines[0].strip() == "\b":
            out.append(wrapper.indent_only("\n".join(lines[1:])))
            continue
        lead = len(lines[0]) - len(lines[0].lstrip()) if lines else 0
        with wrapper.extra_indent(" " * lead):
            out.append(wrapper.fill(" ".join(line.strip() for line in lines)))
    return "\n\n".join(out)


class CellFormatter(HelpFormatter):
    """Click's help layout in the messages' language: its headings translated, and a text that
    holds Chinese wrapped by terminal columns. English help is Click's, byte for byte."""

    def write_usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
        super().write_usage(prog, args, _("Usage: ") if prefix is None else prefix)

    def write_heading(self, heading: str) -> None:
        heading = _(heading)
        self.write(f"{'':>{self.current_indent}}{heading}{'：' if _wide(heading) else ':'}\n")

    def write_text(self, text: str) -> None:
        if not _wide(text):
            return super().write_text(text)
        indent = " " * self.current_indent
        self.write(wrap_cells(text, self.width, indent, indent) + "\n")

    def write_dl(self, rows: Sequence[tuple[str, str]], col_max: int = 30, col_spacing: int = 2) -> None:
        rows = [(first, _local_help(second)) for first, second in rows]
        if not any(_wide(second) for _first, second in rows):
            return super().write_dl(rows, col_max, col_spacing)
        first_col = min(max(len(first) for first, _second in rows), col_max) + col_spacing
        for first, second in rows:
            self.write(f"{'':>{self.current_indent}}{first}")
            if not second:
                self.write("\n")
                continue
            if len(first) <= first_col - col_spacing:
                self.write(" " * (first_col - len(first)))
            else:
                self.write("\n" + " " * (first_col + self.current_indent))
            lines = wrap_cells(second, max(self.width - first_col - 2, 10)).splitlines() or [""]
            self.write(lines[0] + "\n")
            for line in lines[1:]:
                self.write(f"{'':>{first_col + self.current_indent}}{line}\n" if line else "\n")


def _local_help(text: str) -> str:
    """An option's help as Click wrote it, in the messages' language: its "[default: 8; required]"
    too (the values stay as they are)."""
    if message_language() == DEFAULT or not text:
        return text
    text = _(text)
    extras = re.search(_EXTRAS, text)
    if extras is None:
        return text
    words = []
    for part in extras.group(1).split("; "):
        key, sep, value = part.partition(": ")
        words.append(_(key) + ("：" + value if sep else "") if key in ("default", "required", "env var") else part)
    return text[: extras.start()] + "  [" + "；".join(words) + "]"


N_("default"), N_("required"), N_("env var")


class HelpContext(Context):
    formatter_class = CellFormatter


class LazyGroup(TyperGroup):
    """Commands come from `lazy` (name -> Lazy) and are built on first use."""

    lazy: Mapping[str, Lazy] = {}
    context_class = HelpContext

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._languages: dict[str, str] = {}  # command -> the language its help was built in

    def list_commands(self, ctx: Context) -> list[str]:
        return [*self.lazy, *(name for name in self.commands if name not in self.lazy)]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if cmd_name in self.lazy and self._languages.get(cmd_name) != message_language():
            self.commands[cmd_name] = self._load(cmd_name)  # its help in this run's language
            self._languages[cmd_name] = message_language()
        return self.commands.get(cmd_name)

    def _load(self, name: str) -> Command:
        entry = self.lazy[name]
        holder = typer.Typer(rich_markup_mode=None)
        importlib.import_module(entry.module).register(holder)
        command = typer.main.get_group(holder).commands.get(name)
        if command is None:
            raise LookupError(f"{entry.module}.register() adds no command named {name!r}")
        command.short_help = _(entry.summary)
        plain_help(command)
        return command

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        """The summaries from the table: listing the commands imports none of them."""
        rows = [(name, _(entry.summary)) for name, entry in self.lazy.items()]
        rows += [(n, c.get_short_help_str(80)) for n, c in self.commands.items() if n not in self.lazy and not c.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def lazy_group(commands: Mapping[str, Lazy]) -> type[LazyGroup]:
    return type("AscendctlGroup", (LazyGroup,), {"lazy": dict(commands)})
