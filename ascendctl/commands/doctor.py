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
            "compatibility matrix, device nodes, npu-smi health and HBM, glibc, disk and the serving port; "
            "and how fast it can serve (the perf group: CPU governor, huge pages, swap, NUMA balancing, allocator, "
            "CPU binding, the Ascend throughput variables; advice that leaves the verdict alone unless run alone). "
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
    compare: bool = typer.Option(
        False,
        "--compare",
        help=(
            "Compare nodes given after it: doctor --json reports, recorded trees or bundles (one kind). Versions "
            "(CANN, driver, firmware, Python, every package), the engine's variables (secrets compared masked), "
            "kernel, perf settings, hccn.conf, the profile and the weights (--model): one row per difference, "
            "exit 1 when one can break or slow the group."
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
    full_hash: bool = typer.Option(
        False,
        "--full-hash",
        help="With --compare and --model: SHA-256 of every byte of the weights (default: safetensors headers and sizes).",
    ),
    write_env: Optional[str] = typer.Option(
        None,
        "--write-env",
        metavar="FILE",
        help="Write a shell file exporting the variables the perf checks recommend for this host (and -p PROFILE).",
    ),
    files: Optional[List[str]] = typer.Argument(
        None, metavar="[INPUT...]", help="With --compare: doctor --json reports, recorded trees or bundles."
    ),
) -> None:
    if root is None and not (compare or files or cluster or list_checks or only or write_env):
        # The engine's versions come from a child Python: start it before the imports below.
        from engine.system.enginepy import ENGINE_TIMEOUT, prefetch
        from engine.system.host import Host

        prefetch(Host(), ENGINE_TIMEOUT)
    from ascendctl.checks_view import report_lines
    from ascendctl.output import get_output
    from engine.doctor import list_checks as all_checks
    from engine.doctor import run_doctor

    out = get_output()
    if files and not (compare or cluster):
        from engine.errors import BadInput

        raise BadInput(
            f"{files[0]!r}: doctor takes inputs only with --compare",
            f"ascendctl doctor --compare {' '.join(files)}",
        )
    if compare or cluster:
        prof = _profile(profile, sets)
        _compare_or_cluster(out, list(files or ()), cluster, strict, model, full_hash, prof, profile)
        return
    if list_checks:
        infos = all_checks()
        out.emit({"checks": infos}, lambda c: _render_list(c, infos))
        return
    prof = _profile(profile, sets)
    if write_env:
        _write_env(out, write_env, root, prof, profile, only)
        return
    report = run_doctor(root, port=port, profile=prof, profile_name=profile, model_dir=model, only=only or None)
    if out.json_mode:
        data = report.to_dict()
        data["facts"]["drift"] = _snapshot(root, data, model, full_hash, prof)
        out.emit(data)
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


def _profile(name: str | None, sets: Any) -> Any:
    if name is None:
        return None
    from engine.profiles import load_profile

    return load_profile(name, sets or ())


def _snapshot(root: str | None, data: dict, model: str | None, full_hash: bool, prof: Any) -> dict:
    """What --compare compares of this node beyond its versions (engine.doctor.drift)."""
    from engine.doctor.drift import snapshot
    from engine.system.host import Host

    if root is not None:
        from engine.system.recorded import recorded_host

        host, env_known = recorded_host(root)
    else:
        host, env_known = Host(), True
    return snapshot(host, data, env_known=env_known, model_dir=model, full_hash=full_hash, profile=prof)


def _write_env(out: Any, path: str, root: str | None, prof: Any, profile: str | None, only: Any) -> None:
    from engine.doctor import run_doctor
    from engine.doctor.perf_checks import env_file
    from engine.errors import BadInput
    from engine.system.host import Host

    report = run_doctor(root, profile=prof, profile_name=profile, only=list(only or ()) or ["perf"])
    if root is not None:
        from engine.system.recorded import recorded_host

        host = recorded_host(root)[0]
    else:
        host = Host()
    text, count = env_file(report.platform, host, prof, profile)
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise BadInput(f"cannot write {path}: {exc.strerror or exc}", "give --write-env a path in a writable folder")
    said = f"wrote {path}: {count} variable(s) for this {report.platform} host; source it before serving: . {path}"
    out.emit(
        {"written": path, "exported": count, "platform": report.platform},
        lambda c: c.print(clean(said), markup=False, highlight=False, soft_wrap=True),
    )


def _compare_or_cluster(
    out: Any,
    paths: list[str],
    cluster: bool,
    strict: bool,
    model: str | None = None,
    full_hash: bool = False,
    prof: Any = None,
    profile: str | None = None,
) -> None:
    from ascendctl.checks_view import render_skew_table
    from engine.doctor import drift
    from engine.doctor.compare import compare_reports
    from engine.errors import BadInput

    if cluster and paths:
        raise BadInput("--cluster gathers the reports itself", "give either --cluster or --compare FILES, not both")
    if cluster:
        from engine.cluster import run_cluster

        with out.status("running doctor and netcheck on every node of the Ray cluster"):
            reports = run_cluster(drift={"model_dir": model, "full_hash": full_hash})
        named = [(r["facts"].get("host") or f"node{i}", r) for i, r in enumerate(reports)]
    else:
        if len(paths) < 2:
            raise BadInput("--compare needs at least two inputs", "ascendctl doctor --compare node0.json node1.json")
        kinds = [(p, "recorded machine" if drift.input_kind(p) == "machine" else "") for p in paths]
        named = [
            (path, _read_machine(path, model, full_hash, prof, profile) if kind else _read_report(path))
            for path, kind in kinds
        ]
        drift.refuse_mixed([(p, k or drift.report_kind(d)) for (p, k), (_, d) in zip(kinds, named)])
    drift.refuse_twice(named)
    report = drift.add_drift(compare_reports(named), named)
    data = report.to_dict()
    if cluster:
        data["reports"] = [r for _, r in named]
    out.emit(data, lambda c: render_skew_table(c, report))
    code = report.exit_code(strict)
    if code:
        raise typer.Exit(code)


def _read_machine(path: str, model: str | None, full_hash: bool, prof: Any, profile: str | None) -> dict:
    """A recorded tree or bundle, checked now, with its drift snapshot."""
    from engine.doctor import run_doctor

    data = run_doctor(path, profile=prof, profile_name=profile).to_dict()
    data["facts"]["drift"] = _snapshot(path, data, model, full_hash, prof)
    return data


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
