"""Write the generated reference pages of docs/, or check that they are up to date.

    .venv/bin/python docs/generate.py           rewrite docs/cli.md and docs/profile-keys.md
    .venv/bin/python docs/generate.py --check   exit 1 and name the stale files, change nothing

docs/cli.md is the `--help` of ascendctl and of every command and subcommand, rendered at a
fixed width without colour. docs/profile-keys.md is the profile key reference, built from the
schema's own data (engine/profiles/schema.py). tests/unit/test_docs.py runs the check.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
COMMAND = ".venv/bin/python docs/generate.py"
WIDTH = 80

# Variables that would make Rich or Typer colour the output or change its width.
_STYLE_VARS = (
    "FORCE_COLOR",
    "PY_COLORS",
    "GITHUB_ACTIONS",
    "TTY_COMPATIBLE",
    "TTY_INTERACTIVE",
    "CLICOLOR_FORCE",
    "_TYPER_FORCE_DISABLE_TERMINAL",
    "LINES",
)


def _header(source: str) -> str:
    return f"<!-- Generated from {source} by `{COMMAND}`: do not edit by hand. -->\n"


# --- docs/cli.md ---------------------------------------------------------------------------------


def _command_paths() -> list[list[str]]:
    """Every command path of the app, depth first, in the order `ascendctl --help` lists them."""
    import typer.main

    from ascendctl.cli import app

    try:  # Typer 0.22+ carries its own copy of Click
        from typer._click import Context
    except ImportError:  # pragma: no cover - older Typer
        from click import Context

    paths: list[list[str]] = []

    def walk(command: Any, path: list[str]) -> None:
        paths.append(path)
        if not hasattr(command, "list_commands"):
            return
        ctx = Context(command)
        for name in command.list_commands(ctx):  # the root group imports each command here
            sub = command.get_command(ctx, name)
            if sub is not None and not getattr(sub, "hidden", False):
                walk(sub, path + [name])

    walk(typer.main.get_command(app), [])
    return paths


def _help_pages() -> list[tuple[str, str]]:
    """(command line, help text) for each command, rendered in this process."""
    from ascendctl.cli import main

    pages = []
    for path in _command_paths():
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
            main(path + ["--help"])
        lines = [line.rstrip() for line in buf.getvalue().splitlines()]
        pages.append((" ".join(["ascendctl", *path]), "\n".join(lines).strip("\n")))
    return pages


def _emit_cli() -> None:
    """Print the body of docs/cli.md (run in a child process with a fixed environment)."""
    out = [
        "# Command-line reference",
        "",
        "The `--help` of every command, as `ascendctl` prints it. The manual pages are listed in",
        "[docs/README.md](README.md).",
        "",
    ]
    from ascendctl.cli import SHORT_FLAGS

    out += [
        "A short flag means the same in every command: "
        + ", ".join(f"`{short}` {' / '.join(f'`{name}`' for name in names)}" for short, names in SHORT_FLAGS.items())
        + ". `--json` and `--debug` are accepted anywhere on the line.",
        "",
    ]
    pages = _help_pages()
    for line, _ in pages:
        out.append(f"- [`{line}`](#{line.replace(' ', '-')})")
    for line, text in pages:
        out += ["", f"## {line}", "", "```text", f"$ {line} --help", text, "```"]
    sys.stdout.write("\n".join(out) + "\n")


def render_cli() -> str:
    """docs/cli.md: the help is rendered in a child process so the width and colours are fixed."""
    env = {k: v for k, v in os.environ.items() if k not in _STYLE_VARS}
    env.update(
        COLUMNS=str(WIDTH),
        TERMINAL_WIDTH=str(WIDTH),
        NO_COLOR="1",
        TERM="dumb",
        PYTHONIOENCODING="utf-8",
        ASCENDCTL_LANG="en",  # the reference is the English help, whatever the locale of who runs this
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    )
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--emit-cli"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"rendering the CLI help failed (exit {proc.returncode}):\n{proc.stderr}")
    return _header("`ascendctl --help` and the help of each command") + "\n" + proc.stdout


# --- docs/profile-keys.md ------------------------------------------------------------------------


def _cell(text: str) -> str:
    """Text for a table cell: engine flags in code, no pipes or line breaks."""
    text = re.sub(r"(?<![\w`-])(--[a-z][a-z0-9-]*)", r"`\1`", text)
    return text.replace("|", "\\|").replace("\n", " ")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, (tuple, list)):
        return "`[" + ", ".join(str(v) for v in value) + "]`"
    if value == "":
        return '`""`'
    return f"`{value}`"


def render_profile_keys() -> str:
    from engine.profiles import schema

    out = [
        _header("the schema in `engine/profiles/schema.py`").rstrip("\n"),
        "",
        "# Profile keys",
        "",
        "Every key a serving profile may set, with its type or allowed values, its default and what it",
        "does. An `engine` key with no default is not passed to the engine, which then uses its own.",
        "How profiles are found, overridden and checked: [profiles.md](profiles.md); complete examples:",
        "the files in `profiles/`.",
        "",
    ]
    for section, specs in schema.SCHEMA.items():
        title = f"`{section}`" if section else "top level"
        out += [f"## {title}", "", "| key | type / allowed values | default | description |", "|---|---|---|---|"]
        for key, spec in specs.items():
            dotted = f"{section}.{key}" if section else key
            default = "required" if spec.required else ("none" if spec.default is None else _value(spec.default))
            out.append(f"| `{dotted}` | {_cell(spec.describe())} | {default} | {_cell(spec.help)} |")
        out.append("")
    out += [
        "A profile without a `nodes` section runs on one host. With one, each entry of `nodes.hosts`",
        f"(host K is entry K) may set {' and '.join(f'`{k}`' for k in schema.HOST_KEYS)} for that host",
        "alone; the variables a `nodes` key sets on every host are:",
        "",
        "| variable | set by |",
        "|---|---|",
    ]
    for name, key in schema.NODE_ENV_KEYS.items():
        out.append(f"| `{name}` | `{key}` |")
    out += [
        "",
        "How a layout runs (`serve --node-rank`, `plan`, `deploy k8s`): [multinode.md](multinode.md).",
        "",
        "## `env`",
        "",
        "A free mapping of environment variables added to the engine's environment. Each name must",
        f"match `{schema.ENV_NAME.pattern}`; values are strings (`true` / `false` become `1` / `0`).",
        "`VLLM_API_KEY` is refused here: name the variable that holds the key in `server.api_key_env`.",
        "",
        "## Refused engine flags",
        "",
        "`engine.extra_args` passes flags to the engine as they are, except these:",
        "",
        "| flag | why |",
        "|---|---|",
    ]
    for flag, why in schema.FORBIDDEN_ARGS.items():
        out.append(f"| `{flag}` | {_cell(why)} |")
    return "\n".join(out) + "\n"


# --- check and write -----------------------------------------------------------------------------

GENERATED = {
    "docs/cli.md": render_cli,
    "docs/profile-keys.md": render_profile_keys,
}


def stale() -> list[str]:
    """The generated files whose content differs from what the generator writes now."""
    found = []
    for rel, render in GENERATED.items():
        path = ROOT / rel
        if not path.exists() or path.read_text(encoding="utf-8") != render():
            found.append(rel)
    return found


def write() -> list[str]:
    """Rewrite every generated file; return those that changed."""
    changed = []
    for rel, render in GENERATED.items():
        path = ROOT / rel
        text = render()
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(rel)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write docs/cli.md and docs/profile-keys.md, or check them.")
    parser.add_argument("--check", action="store_true", help="exit 1 and list the stale files; write nothing")
    parser.add_argument("--emit-cli", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    if args.emit_cli:
        _emit_cli()
        return 0
    if args.check:
        found = stale()
        for rel in found:
            print(f"stale: {rel}", file=sys.stderr)
        if found:
            print(f"regenerate with: {COMMAND}", file=sys.stderr)
            return 1
        print("generated docs are up to date")
        return 0
    changed = write()
    print("rewrote " + ", ".join(changed) if changed else "generated docs were already up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
