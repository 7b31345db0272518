"""Entry point: the Typer app, global flags, and the one place errors become exit codes.

Command modules register themselves; at import time they load only typer and the standard
library, so `ascendctl --help` stays fast. Heavy imports live inside the commands.
"""

from __future__ import annotations

import sys
import traceback
from typing import Optional, Sequence

import typer

from ascendctl import __version__
from ascendctl.commands import (
    bench,
    bundle,
    demo,
    deploy,
    doctor,
    engine,
    exporter,
    netcheck,
    plan,
    probe,
    profile,
    serve,
    top,
    triage,
)
from ascendctl.errors import EXIT_INTERRUPTED, EXIT_SOFTWARE, EXIT_USAGE, exit_code_for
from ascendctl.output import Output, get_output, set_output
from engine.errors import AscendctlError

try:  # Typer 0.22+ carries its own copy of Click
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover - older Typer
    from click import exceptions as click_exc

GLOBAL_FLAGS = ("--json", "--debug")

app = typer.Typer(
    name="ascendctl",
    help="Serve LLMs with vLLM + vllm-ascend on Ascend NPUs: check, plan, launch, watch, explain, load-test.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        from ascendctl.versions_view import print_versions

        print_versions(__version__)
        raise typer.Exit()


@app.callback()
def _root(
    json_: bool = typer.Option(
        False, "--json", help="Write machine-readable JSON on stdout (accepted anywhere on the line)."
    ),
    debug: bool = typer.Option(
        False, "--debug", help="Show tracebacks and debug detail (accepted anywhere on the line)."
    ),
    version: Optional[bool] = typer.Option(
        None,
        "--version",
        callback=_version_callback,
        is_eager=True,
        help="Show ascendctl's version and the engine's (vllm, vllm-ascend, torch, torch_npu, CANN).",
    ),
) -> None:
    out = get_output()
    out.json_mode = out.json_mode or json_
    out.debug = out.debug or debug


for module in (
    doctor,
    netcheck,
    plan,
    serve,
    probe,
    profile,
    top,
    triage,
    bench,
    demo,
    bundle,
    exporter,
    deploy,
    engine,
):
    module.register(app)


def _split_global_flags(argv: list[str]) -> tuple[list[str], set[str]]:
    """Take --json / --debug from anywhere before `--`, so `ascendctl doctor --json` works."""
    rest: list[str] = []
    found: set[str] = set()
    for i, arg in enumerate(argv):
        if arg == "--":
            rest.extend(argv[i:])
            break
        if arg in GLOBAL_FLAGS:
            found.add(arg)
        else:
            rest.append(arg)
    return rest, found


def main(argv: Sequence[str] | None = None) -> int:
    args, flags = _split_global_flags(list(sys.argv[1:] if argv is None else argv))
    out = Output(json_mode="--json" in flags, debug="--debug" in flags)
    set_output(out)
    try:
        # Without standalone mode, Click returns (not raises) the code of a `typer.Exit(n)`.
        code = app(args=args, prog_name="ascendctl", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort as exc:
        # Click turns an EOFError raised anywhere in a command into Abort ("interrupted"); one that
        # did not come from a prompt is a bug of ours and must not pass for Ctrl-C in silence.
        return _crashed(out, exc.__cause__) if isinstance(exc.__cause__, EOFError) else EXIT_INTERRUPTED
    except click_exc.ClickException as exc:
        # Usage errors: Typer/Click's own message, one line, exit 2.
        ctx = getattr(exc, "ctx", None)
        out.error(exc.format_message(), f"see `{ctx.command_path if ctx else 'ascendctl'} --help`")
        return EXIT_USAGE
    except KeyboardInterrupt:
        out.error("interrupted")
        return EXIT_INTERRUPTED
    except AscendctlError as exc:
        if out.debug:
            traceback.print_exc()
        out.error(exc.cause, exc.fix)
        return exit_code_for(exc)
    except Exception as exc:
        return _crashed(out, exc)
    return code if isinstance(code, int) else 0


def _crashed(out: Output, exc: BaseException) -> int:
    """A bug of ours: one line, the traceback only on --debug, its own exit code."""
    if out.debug:
        traceback.print_exception(exc)
    out.error(f"unexpected error: {type(exc).__name__}: {exc}", "run again with --debug and report the traceback")
    return EXIT_SOFTWARE


if __name__ == "__main__":
    raise SystemExit(main())
