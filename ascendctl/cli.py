"""Entry point: the Typer app, global flags, and the one place errors become exit codes.

Commands are listed in COMMANDS and imported only when they run (ascendctl/lazy.py), so
`ascendctl --version` and `--help` import no command module, no Rich and no engine code beyond
what they print. Heavy imports live inside the commands.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, Sequence

from ascendctl import __version__
from ascendctl.errors import EXIT_INTERRUPTED, EXIT_SOFTWARE, EXIT_USAGE, exit_code_for
from ascendctl.output import Output, get_output, set_output
from engine import i18n
from engine.errors import AscendctlError

if TYPE_CHECKING:
    import typer

GLOBAL_FLAGS = ("--json", "--debug")
LANG_FLAG = "--lang"  # a global option with a value: `--lang zh` or `--lang=zh`, anywhere on the line


class Lazy(NamedTuple):
    """A command the root group knows by name before importing it."""

    module: str  # defines `register(app: typer.Typer)`, which adds the command or group `name`
    summary: str  # its one line in `ascendctl --help`


# Every command, in the order `ascendctl --help` lists them: name -> Lazy(module, summary).
# The module is imported only when its command runs (or its own --help is asked for); its
# `register(app)` adds a command or a group of this name, with the full help. The summary is
# the command's one line in `ascendctl --help` (Click's short_help): ~60 characters at most, so
# that it fits 80 columns. A new command is one more line here, e.g.
#     "probe": Lazy("ascendctl.commands.probe", "Is this engine alive and answering?"),
# and nothing else (a subcommand such as `deploy compose` is the group module's business, a new
# flag its command's; a new short flag goes into SHORT_FLAGS below). tests/cli/test_help.py
# checks that each entry registers its name and fits one line; tests/unit/test_import_hygiene.py
# that `--help` imports none of the modules.
COMMANDS = {
    "doctor": Lazy("ascendctl.commands.doctor", "Check that this machine can serve, with a fix for each problem."),
    "env": Lazy("ascendctl.commands.doctor", "Print an environment report to paste into a bug report."),
    "netcheck": Lazy("ascendctl.commands.netcheck", "Check the NPU network for multi-node serving."),
    "plan": Lazy("ascendctl.commands.plan", "Plan memory per device: weights, KV cache, concurrency."),
    "serve": Lazy("ascendctl.commands.serve", "Start the engine from a profile and supervise it."),
    "probe": Lazy("ascendctl.commands.probe", "Is this engine alive and answering? (exit 0, 1 hung, 3 down)"),
    "profile": Lazy("ascendctl.commands.profile", "List, show and validate serving profiles."),
    "top": Lazy("ascendctl.commands.top", "Live dashboard of NPUs, engines and diagnostics."),
    "triage": Lazy("ascendctl.commands.triage", "Explain engine and CANN logs: known issues, causes, fixes."),
    "bench": Lazy("ascendctl.commands.bench", "Load-test a server with a scenario, or compare reports."),
    "demo": Lazy("ascendctl.commands.demo", "No NPU needed: serve a tiny model on the CPU and watch it."),
    "bundle": Lazy("ascendctl.commands.bundle", "Write one redacted archive for support."),
    "exporter": Lazy("ascendctl.commands.exporter", "Serve /metrics for Prometheus: NPUs, engines, diagnostics."),
    "deploy": Lazy("ascendctl.commands.deploy", "Write Kubernetes or Compose manifests from a profile."),
    "engine": Lazy("ascendctl.commands.engine", "The bundled engine: install plan and offline wheelhouse."),
    "tune": Lazy("ascendctl.commands.tune", "Find the most load within the SLO, and the settings for it."),
}

# A short flag means one thing in every command; the long names it may stand for (the test in
# tests/cli/test_help.py holds every command to this table):
SHORT_FLAGS = {
    "-h": ("--help",),
    "-p": ("--profile",),  # a serving profile: name or YAML file
    "-n": ("--interval",),  # seconds between polls, as `watch -n`
    "-o": ("--out", "--output"),  # the file to write
    "-s": ("--scenario",),  # a bench scenario
}


def build_app() -> typer.Typer:
    """The Typer app: the root options, and a group that imports a command when it runs."""
    import typer

    from ascendctl.lazy import lazy_group

    app = typer.Typer(
        name="ascendctl",
        help=i18n._(
            "Serve LLMs with vLLM + vllm-ascend on Ascend NPUs: check, plan, launch, watch, explain, load-test."
        ),
        cls=lazy_group(COMMANDS),
        rich_markup_mode=None,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    def version_callback(value: bool) -> None:
        if value:
            _print_versions()
            raise typer.Exit()

    @app.callback()
    def _root(
        json_: bool = typer.Option(
            False, "--json", help=i18n._("Write machine-readable JSON on stdout (accepted anywhere on the line).")
        ),
        debug: bool = typer.Option(
            False, "--debug", help=i18n._("Show tracebacks and debug detail (accepted anywhere on the line).")
        ),
        lang: Optional[str] = typer.Option(
            None,
            "--lang",
            metavar="LANG",
            help=i18n._(
                "Write messages in English (en) or Chinese (zh). Default: ASCENDCTL_LANG, then LC_ALL, "
                "LC_MESSAGES, LANG (zh_* is Chinese). --json is always English."
            ),
        ),
        version: Optional[bool] = typer.Option(
            None,
            "--version",
            callback=version_callback,
            is_eager=True,
            help=i18n._("Show ascendctl's version and the engine's (vllm, vllm-ascend, torch, torch_npu, CANN)."),
        ),
    ) -> None:
        out = get_output()
        out.json_mode = out.json_mode or json_
        out.debug = out.debug or debug

    return app


_app: Any = None
_app_language = ""  # the language its help texts were looked up in


def get_app() -> typer.Typer:
    """The app, built again when the messages' language changed since (tests run both in one
    process): its help texts are looked up when it is built."""
    global _app, _app_language
    if _app is None or _app_language != i18n.message_language():
        _app, _app_language = build_app(), i18n.message_language()
    return _app


def __getattr__(name: str) -> Any:
    """`ascendctl.cli.app`, built on first use: `ascendctl --version` never imports Typer."""
    if name == "app":
        return get_app()
    raise AttributeError(name)


def _print_versions() -> None:
    from ascendctl.versions_view import print_versions

    print_versions(__version__)


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


def _split_lang(argv: list[str]) -> tuple[list[str], str | None]:
    """Take `--lang X` / `--lang=X` from anywhere before `--`. triage has a --lang of its own
    that sets the language again, so under triage the flag also stays on its line."""
    rest: list[str] = []
    lang: str | None = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest.extend(argv[i:])
            break
        if arg == LANG_FLAG and i + 1 < len(argv):
            lang, i = argv[i + 1], i + 2
            continue
        if arg.startswith(LANG_FLAG + "="):
            lang, i = arg.split("=", 1)[1], i + 1
            continue
        rest.append(arg)
        i += 1
    if lang is not None and "triage" in rest[:1]:
        rest[1:1] = [LANG_FLAG, lang]
    return rest, lang


def main(argv: Sequence[str] | None = None) -> int:
    args, flags = _split_global_flags(list(sys.argv[1:] if argv is None else argv))
    out = Output(json_mode="--json" in flags, debug="--debug" in flags)
    set_output(out)
    i18n.set_machine_output(out.json_mode)  # --json: every message stays English
    try:
        args, lang = _split_lang(args)
        i18n.set_language(lang)
        if args == ["--version"]:  # answered before Typer is imported (~30 ms of start-up)
            _print_versions()
            return 0
        return _run_app(out, args)
    except KeyboardInterrupt:
        out.error(i18n._("interrupted"))
        return EXIT_INTERRUPTED
    except AscendctlError as exc:
        if out.debug:
            import traceback

            traceback.print_exc()
        out.error(exc.cause, exc.fix)
        return exit_code_for(exc)
    except Exception as exc:
        return _crashed(out, exc)


def _run_app(out: Output, args: list[str]) -> int:
    import typer

    try:  # Typer 0.22+ carries its own copy of Click
        from typer._click import exceptions as click_exc
    except ImportError:  # pragma: no cover - older Typer
        from click import exceptions as click_exc

    try:
        # Without standalone mode, Click returns (not raises) the code of a `typer.Exit(n)`.
        code = get_app()(args=args, prog_name="ascendctl", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort as exc:
        # Click turns an EOFError raised anywhere in a command into Abort ("interrupted"); one that
        # did not come from a prompt is a bug of ours and must not pass for Ctrl-C in silence.
        return _crashed(out, exc.__cause__) if isinstance(exc.__cause__, EOFError) else EXIT_INTERRUPTED
    except click_exc.NoArgsIsHelpError as exc:
        # `ascendctl` or a group alone (`ascendctl deploy`): its help, on stdout, as git shows its usage.
        sys.stdout.write(exc.format_message().rstrip("\n") + "\n")
        return EXIT_USAGE
    except click_exc.ClickException as exc:
        # Usage errors: Typer/Click's own message, one line, exit 2.
        ctx = getattr(exc, "ctx", None)
        from ascendctl.lazy import click_message

        out.error(
            click_message(exc.format_message()),
            i18n._("see `{command} --help`").format(command=ctx.command_path if ctx else "ascendctl"),
        )
        return EXIT_USAGE
    return code if isinstance(code, int) else 0


def _crashed(out: Output, exc: BaseException) -> int:
    """A bug of ours: one line, the traceback only on --debug, its own exit code."""
    if out.debug:
        import traceback

        traceback.print_exception(exc)
    out.error(
        i18n._("unexpected error: {kind}: {error}").format(kind=type(exc).__name__, error=exc),
        i18n._("run again with --debug and report the traceback"),
    )
    return EXIT_SOFTWARE


if __name__ == "__main__":
    raise SystemExit(main())
