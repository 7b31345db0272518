"""The root command group that imports a command's module only when that command runs.

`ascendctl --help` lists every command from a table of names and one-line summaries
(ascendctl/cli.py, COMMANDS) without importing any command module; `ascendctl doctor` imports
doctor's module and no other. Help is Click's plain layout, as git and kubectl print it: one line
per command, every flag name whole, paragraphs reflowed to the terminal's width.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Mapping

import typer
import typer.main
from typer.core import TyperGroup

from engine.i18n import _

if TYPE_CHECKING:
    from ascendctl.cli import Lazy

try:  # Typer 0.22+ carries its own copy of Click
    from typer._click import types
    from typer._click.core import Command, Context, Parameter
    from typer._click.formatting import HelpFormatter
except ImportError:  # pragma: no cover - older Typer
    from click import types  # type: ignore[no-redef]
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
    for param in getattr(command, "params", []):
        kind = getattr(param, "param_type_name", "")
        if kind == "option" and param.metavar is None and not (param.is_flag or param.count):
            param.metavar = metavar_for(param)
        elif kind == "argument" and param.metavar is None:
            param.metavar = (param.name or "ARG").upper() + ("..." if param.nargs != 1 else "")
    for sub in getattr(command, "commands", {}).values():
        if not sub.short_help and sub.help:  # Click would cut the first sentence at ~45 characters
            sub.short_help = _first_sentence(sub.help)
        plain_help(sub)


def _first_sentence(text: str) -> str:
    paragraph = " ".join(text.strip().split("\n\n")[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]


class LazyGroup(TyperGroup):
    """Commands come from `lazy` (name -> Lazy) and are built on first use."""

    lazy: Mapping[str, Lazy] = {}

    def list_commands(self, ctx: Context) -> list[str]:
        return [*self.lazy, *(name for name in self.commands if name not in self.lazy)]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            self.commands[cmd_name] = self._load(cmd_name)
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
