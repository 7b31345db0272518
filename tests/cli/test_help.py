"""Help that reads at 80 columns: one line per command, every flag name whole, paragraphs that
reflow, one metavar style, a short flag that means one thing, and listings that keep their ids."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import typer.main

from ascendctl.cli import COMMANDS, SHORT_FLAGS, app, main

try:  # Typer 0.22+ carries its own copy of Click
    from typer._click import Context
except ImportError:  # pragma: no cover - older Typer
    from click import Context

WIDTH = 80


def _commands() -> list[tuple[list[str], object]]:
    """(path, click command) for every command and subcommand."""
    found = []

    def walk(command, path):
        found.append((path, command))
        if hasattr(command, "list_commands"):
            ctx = Context(command)
            for name in command.list_commands(ctx):
                walk(command.get_command(ctx, name), [*path, name])

    walk(typer.main.get_command(app), [])
    return found


ALL = _commands()


def _help(path: list[str], capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    capsys.readouterr()
    assert main([*path, "--help"]) == 0
    return capsys.readouterr().out


def test_root_help_lists_each_command_on_one_line(capsys, monkeypatch):
    text = _help([], capsys, monkeypatch)
    listing = text.split("Commands:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in listing if line.strip()] == list(COMMANDS)
    for line in listing:
        assert line.startswith("  ") and not line.startswith("   "), f"a summary wraps: {line!r}"
        assert len(line) <= WIDTH
    assert len(text.splitlines()) < 40


@pytest.mark.parametrize("path", [p for p, _ in ALL], ids=lambda p: " ".join(p) or "ascendctl")
def test_every_flag_name_reads_whole_at_80_columns(path, capsys, monkeypatch):
    text = _help(path, capsys, monkeypatch)
    command = dict((tuple(p), c) for p, c in ALL)[tuple(path)]
    assert "…" not in text
    assert all(len(line) <= WIDTH for line in text.splitlines()), text
    words = set(re.findall(r"(?<![\w-])-{1,2}[\w-]+", text))
    for param in command.params:
        for flag in [*param.opts, *param.secondary_opts]:
            if flag.startswith("-"):
                assert flag in words, f"{flag} is cut or missing in `{' '.join(path)} --help`"


@pytest.mark.parametrize("path", [p for p, _ in ALL], ids=lambda p: " ".join(p) or "ascendctl")
def test_help_paragraphs_reflow_without_ragged_lines(path, capsys, monkeypatch):
    """A line followed by one whose first word would have fitted on it was hard-wrapped."""
    text = _help(path, capsys, monkeypatch)
    description = re.split(r"\n(?:Arguments|Options|Commands):\n", text)[0]
    for paragraph in description.split("\n\n")[1:]:  # after the usage line
        lines = [line.rstrip() for line in paragraph.splitlines()]
        for line, following in zip(lines, lines[1:]):
            first_word = following.split()[0]
            assert len(line) + 1 + len(first_word) > WIDTH - 2, f"ragged: {line!r} / {following!r}"


def test_one_metavar_style():
    for path, command in ALL:
        for param in command.params:
            if getattr(param, "param_type_name", "") == "option" and not (param.is_flag or param.count):
                metavar = param.make_metavar(Context(command))
                assert re.fullmatch(r"[A-Z0-9_=:|.-]+", metavar), f"{' '.join(path)} {param.opts[0]} {metavar}"


def test_a_short_flag_means_one_thing_everywhere():
    for path, command in ALL:
        for param in command.params:
            shorts = [o for o in [*param.opts, *param.secondary_opts] if re.fullmatch(r"-\w", o)]
            longs = [o for o in param.opts if o.startswith("--")]
            for short in shorts:
                assert short in SHORT_FLAGS, f"{' '.join(path)}: {short} is not in cli.SHORT_FLAGS"
                assert set(longs) & set(SHORT_FLAGS[short]), f"{' '.join(path)}: {short} is {longs}"


def test_every_lazy_entry_registers_its_command():
    for name, entry in COMMANDS.items():
        assert entry.module.startswith("ascendctl.commands.")
        assert len(entry.summary) <= 64, f"{name}'s summary does not fit one line at 80 columns"
    root = typer.main.get_command(app)
    ctx = Context(root)
    assert all(root.get_command(ctx, name) is not None for name in COMMANDS)


def test_bench_help_lists_the_scenarios(capsys, monkeypatch):
    from engine.bench.scenario import list_scenarios

    text = _help(["bench"], capsys, monkeypatch)
    assert all(name in text for name in list_scenarios())


def test_triage_list_piped_is_one_plain_line_per_rule_with_whole_ids():
    from engine.triage import load_rules

    rules = load_rules(None)
    out = subprocess.run(
        [sys.executable, "-m", "ascendctl", "triage", "--list"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "80"},
        check=True,
    ).stdout
    lines = out.splitlines()
    assert [line.split("\t")[0] for line in lines[: len(rules)]] == [r.id for r in rules]
    assert all(len(line.split("\t")) == 4 for line in lines)
    assert "…" not in out and "\x1b" not in out


def test_triage_list_on_a_terminal_keeps_every_rule_id_whole():
    from rich.console import Console

    import ascendctl.commands.triage as triage
    from ascendctl.output import Output, set_output
    from engine.triage import load_rules

    rules = load_rules(None)
    console = Console(width=WIDTH, force_terminal=True, record=True, color_system=None)
    out = Output()
    out._console = console
    set_output(out)
    triage._list(out, rules)
    text = console.export_text()
    assert all(re.search(rf"^{re.escape(r.id)}\s", text, re.M) for r in rules)


@pytest.mark.parametrize("path", [[], ["deploy"], ["engine"]], ids=lambda p: " ".join(p) or "ascendctl")
def test_a_command_alone_prints_its_help_not_an_error(path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    assert main(path) == 2
    out, err = capsys.readouterr()
    assert out.startswith("Usage: ascendctl") and "Commands:" in out and not err
