"""`ascendctl doctor` and `ascendctl env`."""

from __future__ import annotations

from typing import Any, List, Optional

import typer

from ascendctl.style import clean, safe, severity_style

# The status column is five characters wide; the word itself is in --json.
_MARK = {"ok": "ok", "warning": "warn", "error": "ERROR", "skip": "skip"}


def register(app: typer.Typer) -> None:
    app.command(
        "doctor",
        help=(
            "Is this machine able to serve? Checks the CANN toolkit and driver (and their pairing), "
            "firmware, set_env.sh, LD_LIBRARY_PATH order, Python and the engine packages against the "
            "compatibility matrix, device nodes, npu-smi health and HBM, glibc, disk and the serving port. "
            "Exit 0 when clean or warnings only, 1 on errors (--strict: on warnings too), 3 when nothing "
            "can be probed."
        ),
    )(doctor)
    app.command(
        "env",
        help="Print a paste-ready environment report for bug reports (versions, chips, relevant variables; secrets masked).",
    )(env)


def doctor(
    profile: Optional[str] = typer.Option(
        None,
        "--profile",
        "-p",
        metavar="P",
        help="Also check the machine against this serving profile (name or YAML file): TP vs NPUs, HBM vs plan, dtype vs chip.",
    ),
    sets: Optional[List[str]] = typer.Option(
        None, "--set", metavar="KEY=VALUE", help="Override a profile value (repeatable), as for `serve`."
    ),
    model: Optional[str] = typer.Option(
        None, "--model", metavar="DIR", help="Model directory for the --profile memory plan (default: the profile's)."
    ),
    root: Optional[str] = typer.Option(
        None, "--root", metavar="DIR", help="Check a machine recorded as a directory tree instead of this one."
    ),
    strict: bool = typer.Option(False, "--strict", help="Exit 1 on warnings too."),
    list_checks: bool = typer.Option(
        False, "--list-checks", help="List every check (id, category, what it checks) and exit."
    ),
    only: Optional[List[str]] = typer.Option(
        None, "--check", metavar="ID", help="Run only this check id or category (repeatable)."
    ),
    port: int = typer.Option(8000, "--port", min=1, max=65535, help="Serving port to check (a --profile's port wins)."),
) -> None:
    from ascendctl.output import get_output
    from engine.doctor import list_checks as all_checks
    from engine.doctor import run_doctor

    out = get_output()
    if list_checks:
        infos = all_checks()
        out.emit({"checks": infos}, lambda c: _render_list(c, infos))
        return
    prof = None
    if profile is not None:
        from engine.profiles import load_profile

        prof = load_profile(profile, sets or ())
    report = run_doctor(root, port=port, profile=prof, profile_name=profile, model_dir=model, only=only or None)
    out.emit(report.to_dict(), lambda c: _render_report(c, report, strict))
    code = report.exit_code(strict)
    if code:
        raise typer.Exit(code)


def _render_list(console: Any, infos: list) -> None:
    width = max(len(i.id) for i in infos)
    for i in infos:
        extra = "  (with --profile)" if i.needs_profile else ""
        console.print(f"{i.id:<{width}}  {i.category:<8}  {clean(i.title)}{extra}", markup=False, highlight=False)


def _render_report(console: Any, report: Any, strict: bool) -> None:
    # Summaries quote what the (possibly recorded, possibly hostile) machine holds: version files,
    # paths, variables. They go through safe(): no escape sequence reaches the terminal, no markup.
    facts = report.facts
    where = "" if report.live else f" (recorded machine at {report.root})"
    if report.profile:
        where += f" with profile {report.profile}"
    console.print(f"[bold]ascendctl doctor[/]{safe(where)}: {safe(report.headline)}", soft_wrap=True)
    width = max(len(c.id) for c in report.checks) if report.checks else 10
    skipped: dict[str, list[str]] = {}
    for c in report.checks:
        status = c.status.value
        if status == "skip":
            skipped.setdefault(c.summary, []).append(c.id)
            continue
        console.print(
            f"  [{severity_style(status)}]{_MARK[status]:<5}[/] {c.id:<{width}}  {safe(c.summary)}", soft_wrap=True
        )
        if c.fix and status in ("warning", "error"):
            console.print(f"        {'':<{width}}  [bold]fix:[/] {safe(c.fix)}", soft_wrap=True)
    for reason, ids in skipped.items():
        console.print(f"  [dim]skip  {safe(reason)}: {', '.join(ids)}[/]", soft_wrap=True)
    counts = {s: sum(1 for c in report.checks if c.status.value == s) for s in ("ok", "warning", "error", "skip")}
    elapsed = facts.get("elapsed_s")
    tail = f" in {elapsed:.2f} s" if isinstance(elapsed, (int, float)) else ""
    verdict = report.verdict + (
        " (--strict: warnings fail)" if strict and counts["warning"] and not counts["error"] else ""
    )
    console.print(
        f"{counts['ok']} ok, {counts['warning']} warning(s), {counts['error']} error(s), "
        f"{counts['skip']} skipped{tail}: {verdict}",
        markup=False,
        highlight=False,
    )


def env(
    root: Optional[str] = typer.Option(
        None, "--root", metavar="DIR", help="Report on a machine recorded as a directory tree."
    ),
) -> None:
    from ascendctl import __version__
    from ascendctl.output import get_output
    from engine.doctor.envreport import env_report, recorded_or_live

    out = get_output()
    host, live = recorded_or_live(root)
    report = env_report(__version__, host, live=live)
    out.emit(
        report.to_dict(),
        lambda c: c.print(clean(report.text(), multiline=True), markup=False, highlight=False, soft_wrap=True),
    )
