"""`ascendctl doctor` and `ascendctl env`."""

from __future__ import annotations

from typing import Any, List, Optional

import typer

from ascendctl.style import clean
from engine.i18n import _


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
        metavar="PROFILE",
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
    compare: Optional[List[str]] = typer.Option(
        None,
        "--compare",
        metavar="JSON",
        help=(
            "Compare doctor --json reports of several hosts (repeat, or give the files after it): CANN, driver, "
            "firmware, Python, torch, torch_npu, vllm, vllm-ascend; a host that differs is an error."
        ),
    ),
    cluster: bool = typer.Option(
        False,
        "--cluster",
        help=(
            "Run doctor and netcheck on every node of the Ray cluster this host belongs to (RAY_ADDRESS or "
            "a local `ray start`), then compare them as --compare does. Needs the `cluster` extra (Ray)."
        ),
    ),
    files: Optional[List[str]] = typer.Argument(None, metavar="[JSON...]", help="More reports for --compare."),
) -> None:
    if root is None and not (compare or files or cluster or list_checks or only):
        # The engine's versions come from a child Python: start it before the imports below.
        from engine.system.enginepy import ENGINE_TIMEOUT, prefetch
        from engine.system.host import Host

        prefetch(Host(), ENGINE_TIMEOUT)
    from ascendctl.checks_view import report_lines
    from ascendctl.output import get_output
    from engine.doctor import list_checks as all_checks
    from engine.doctor import run_doctor

    out = get_output()
    if compare or files or cluster:
        _compare_or_cluster(out, list(compare or ()) + list(files or ()), cluster, strict)
        return
    if list_checks:
        infos = all_checks()
        out.emit({"checks": infos}, lambda c: _render_list(c, infos))
        return
    prof = None
    if profile is not None:
        from engine.profiles import load_profile

        prof = load_profile(profile, sets or ())
    report = run_doctor(root, port=port, profile=prof, profile_name=profile, model_dir=model, only=only or None)
    if out.json_mode:
        out.emit(report.to_dict())
    else:  # lines, not a table: printed without Rich
        out.styled(report_lines(report, strict, "doctor"))
    code = report.exit_code(strict)
    if code:
        raise typer.Exit(code)


def _render_list(console: Any, infos: list) -> None:
    width = max(len(i.id) for i in infos)
    for i in infos:
        extra = _("  (with --profile)") if i.needs_profile else ""
        console.print(f"{i.id:<{width}}  {i.category:<8}  {clean(_(i.title))}{extra}", markup=False, highlight=False)


def _compare_or_cluster(out: Any, paths: list[str], cluster: bool, strict: bool) -> None:
    from ascendctl.checks_view import render_skew_table
    from engine.doctor.compare import compare_reports
    from engine.errors import BadInput

    if cluster and paths:
        raise BadInput("--cluster gathers the reports itself", "give either --cluster or --compare FILES, not both")
    if cluster:
        from engine.cluster import run_cluster

        with out.status("running doctor and netcheck on every node of the Ray cluster"):
            reports = run_cluster()
        named = [(r["facts"].get("host") or f"node{i}", r) for i, r in enumerate(reports)]
    else:
        named = [(path, _read_report(path)) for path in paths]
    report = compare_reports(named)
    data = report.to_dict()
    if cluster:
        data["reports"] = [r for _, r in named]
    out.emit(data, lambda c: render_skew_table(c, report))
    code = report.exit_code(strict)
    if code:
        raise typer.Exit(code)


def _read_report(path: str) -> Any:
    from engine.errors import BadInput
    from engine.jsonsafe import load_path

    try:
        return load_path(path)
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}", "give the path of a `doctor --json` report") from exc
    except ValueError as exc:
        raise BadInput(f"{path} is not JSON: {exc}", "write it with `ascendctl doctor --json > FILE`") from exc


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
