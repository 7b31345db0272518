"""`ascendctl triage`: explain engine, CANN and torch_npu logs with the known-issue database."""

from __future__ import annotations

import time
from typing import Any, List, Optional

import typer

from ascendctl.style import clean, plain, safe, severity_style, size
from engine.severity import Severity

# The severities a rule can have, and "never".
FAIL_ON_CHOICES = (*(w for w in Severity.words() if w != "ok"), "never")
PROGRESS_EVERY_S = 0.2


def register(app: typer.Typer) -> None:
    app.command(
        "triage",
        help=(
            "Explain logs: vLLM stdout, CANN plog directories, .gz files, or - for stdin. Known issues are "
            "grouped with count, first/last seen, cause and fix; unknown error lines are clustered into "
            "templates. With no LOG, the log of the newest `ascendctl serve` run. Exit 1 when an issue at "
            "or above --fail-on is found, 2 when an input cannot be read (the others are still reported)."
        ),
        no_args_is_help=False,
    )(triage)


def triage(
    logs: Optional[List[str]] = typer.Argument(
        None, metavar="[LOG]...", help="Files, directories, .gz files, or - for stdin."
    ),
    fail_on: str = typer.Option(
        "error",
        "--fail-on",
        help="Exit 1 when an issue at or above this severity is found: info, warning, error, critical, never.",
    ),
    explain: Optional[str] = typer.Option(
        None,
        "--explain",
        metavar="CODE",
        help="Explain an ACL code (507011), a CANN code (EZ9999), a torch_npu code (ERR00100), a device fault code "
        "(0x80E18402) or a rule id.",
    ),
    list_: bool = typer.Option(False, "--list", help="List the known issues and code tables."),
    rules_file: Optional[str] = typer.Option(
        None,
        "--rules",
        metavar="FILE",
        help="Add the rules of this YAML to the bundled database (a rule of the same id replaces the bundled one).",
    ),
    rules_only: Optional[str] = typer.Option(
        None, "--rules-only", metavar="FILE", help="Use the rules of this YAML instead of the bundled database."
    ),
    top: int = typer.Option(20, "--top", min=1, help="Show at most this many unknown-error templates."),
) -> None:
    from ascendctl.output import get_output
    from engine.errors import BadInput, ProblemsFound

    out = get_output()
    from engine.triage.rules import rule_set

    rules = rule_set(rules_file, rules_only)
    if fail_on not in FAIL_ON_CHOICES:
        raise BadInput(
            f"--fail-on {fail_on!r} is not one of {', '.join(FAIL_ON_CHOICES)}", "use e.g. --fail-on warning"
        )
    if explain is not None:
        _explain(out, explain, rules)
        return
    if list_:
        _list(out, rules)
        return
    paths = _expand_bundles(list(logs or [])) or [_latest_run_log()]
    report = _scan(out, paths, rules)

    failing = [] if fail_on == "never" else report.at_or_above(fail_on)
    data = {
        "inputs": report.inputs,
        "unreadable": report.unreadable,
        "notes": report.notes,
        "lines": report.lines,
        "bytes": report.bytes,
        "events": report.events,
        "fail_on": fail_on,
        "failed": bool(failing),
        "issues": report.issues,
        # The NPUs' own fault codes, each with MindCluster's action class and what on-call does
        # (verb): the issues of kind "device", in short.
        "device_faults": [
            {
                "npu": i.npu,
                "code": i.code,
                "action": i.action,
                "verb": i.verb,
                "title": i.title,
                "count": i.count,
                "first_seen": i.first_seen,
                "last_seen": i.last_seen,
                "sources": i.sources,
            }
            for i in report.device_faults()
        ],
        "unknown": report.unknown[:top],
        "unknown_total": len(report.unknown),
        "root_line": report.root_line,
        # root_cause: the issue a one-line diagnosis names; null when only generic codes,
        # consequences or warnings were found (then root_line is where to start reading), or when
        # the leading evidence is only a symptom: then `likely` lists the causes it can have
        # ({issue, title, candidates: [{cause, rule, evidence}]}), else it is null.
        **report.verdict(),
    }
    out.emit(data, lambda console: _render(console, report, top))
    for note in report.notes:
        out.warn(safe(note))
    if report.unreadable:
        raise BadInput(
            f"could not read {len(report.unreadable)} input(s), or not to the end: " + "; ".join(report.unreadable[:3]),
            "check the path and its permissions; the report above covers the inputs that were read",
        )
    if failing:
        ids = ", ".join(i.id for i in failing[:3]) + (", ..." if len(failing) > 3 else "")
        raise ProblemsFound(
            f"{len(failing)} issue{'s' if len(failing) != 1 else ''} at or above {fail_on}: {ids}",
            "apply the fixes above" + ("" if out.json_mode else "; --fail-on critical to fail only on critical ones"),
        )


def _expand_bundles(paths: list[str]) -> list[str]:
    """An `ascendctl bundle` (archive or unpacked) stands for the logs it holds, not every file in it:
    its manifest and recorded commands are not logs. Its npu-smi transcript is read for the fault
    codes of `npu-smi info -t health`."""
    from engine.bundle.layout import NPU_INFO_FILE, bundle_dir, bundle_logs

    out: list[str] = []
    for p in paths:
        top = None if p == "-" else bundle_dir(p)
        out.extend(bundle_logs(top) if top is not None else [p])
        # the npu-smi transcript is no log, but its `-t health` answers carry the NPUs' fault codes
        if top is not None and (top / NPU_INFO_FILE).is_file() and not (top / NPU_INFO_FILE).is_symlink():
            out.append(str(top / NPU_INFO_FILE))
    return out


def _latest_run_log() -> str:
    from ascendctl.output import get_output
    from engine.errors import BadInput
    from engine.runs import list_runs

    skipped: list[str] = []
    runs = list_runs(skipped=skipped)
    for note in skipped:  # a damaged run.json costs its run, not the command
        get_output().warn(safe(note))
    for run in runs:
        if run.log_path.is_file():
            return str(run.log_path)
    raise BadInput(
        "no LOG given and no `ascendctl serve` run log found",
        "ascendctl triage engine.log  (or a plog directory, a .gz, - for stdin)",
    )


def _scan(out: Any, paths: list[str], rules: Any) -> Any:
    from engine.triage import Scanner, scan_paths

    scanner = Scanner(rules)
    with out.status("triage: starting") as update:
        last = [0.0]

        def progress(done: int, total: int | None, name: str) -> None:
            now = time.monotonic()
            if now - last[0] < PROGRESS_EVERY_S:
                return
            last[0] = now
            pct = f" ({100 * done / total:.0f}%)" if total else ""
            amount = f"{size(done)} of {size(total)}" if total else size(done)
            update(f"triage: {amount}{pct} — {name}")

        return scan_paths(paths, scanner=scanner, progress=progress)


def _render(console: Any, report: Any, top: int) -> None:
    from rich.table import Table
    from rich.text import Text

    inputs = len(report.inputs)
    console.print(
        f"[bold]triage[/]: {inputs} input{'s' if inputs != 1 else ''}, {report.lines:,} line"
        f"{'s' if report.lines != 1 else ''}, "
        # Warnings and info-level issues are events too: not "error events".
        f"{report.events:,} event{'s' if report.events != 1 else ''}"
    )
    faults = report.device_faults()
    if faults:
        # What on-call decides first: which NPU to isolate, reset or leave alone.
        console.print("[bold]Device faults[/] (the NPUs' own codes, and what to do):")
        for i in faults:
            times = f"  ({i.count}x)" if i.count > 1 else ""
            console.print(Text.assemble("  ", plain(i.title, style=severity_style(i.severity)), plain(times, "dim")))
        console.print()
    likely = report.likely()
    if likely is not None:
        _render_likely(console, likely)
    elif report.root_cause() is None:
        console.print(
            "No known issue found."
            if not report.issues
            else "No issue named with confidence: only generic codes, consequences or warnings matched."
        )
    if report.root_cause() is None:
        if report.root_line:
            # The first error of the process that failed last: where to start reading.
            console.print(Text.assemble(("Most likely root line: ", "bold"), plain(report.root_line[:300])))
    if report.issues:
        if report.root_cause() is None:
            console.print()
        table = Table(title=None, show_edge=False, header_style="bold", pad_edge=False)
        for col, kw in (
            ("severity", {"min_width": 8, "no_wrap": True}),
            ("count", {"justify": "right", "min_width": 5}),
            ("issue", {"no_wrap": True}),
            ("first seen", {}),
            ("last seen", {}),
        ):
            table.add_column(col, **kw)
        for i in report.issues:
            table.add_row(
                Text(i.severity, style=severity_style(i.severity)),
                str(i.count),
                plain(i.id, style="" if i.names_cause() else "dim"),
                plain(i.first_seen or "N/A"),
                plain(i.last_seen or "N/A"),
            )
        console.print(table)
        # A named cause gets the details; catch-all codes and wrappers beside it only their row
        # (the cause explains them). With no cause named, they are all there is: details for them.
        named = report.root_cause() is not None
        for i in report.issues:
            if i.kind == "symptom" or (named and i.generic):
                continue  # a consequence or a catch-all: its row above is enough
            console.print()
            console.print(
                Text.assemble(
                    (f"{i.severity} ", severity_style(i.severity)), plain(i.id, "bold"), plain(f"  {i.title}")
                )
            )
            details = Table.grid(padding=(0, 1))
            details.add_column(style="dim", no_wrap=True)
            details.add_column(overflow="fold")
            # Everything below comes from the log or a rules file: never markup, never raw escapes.
            if i.cause:
                details.add_row("  cause", plain(i.cause))
            if i.generic and i.kind != "code":  # a code's cause already says it
                details.add_row("  generic", plain(i.generic))
            if i.fix:
                details.add_row("  fix", plain(i.fix, style="bold"))
            details.add_row("  seen", plain(i.example[:300], style="dim"))
            for link in i.links[:2]:
                details.add_row("  see", plain(link))
            console.print(details)
        generic = [i.id for i in report.issues if named and i.generic and i.kind != "symptom"]
        if generic:
            console.print()
            console.print(f"[dim]Catch-all codes and wrappers around the cause above: {safe(', '.join(generic))}[/]")
        symptoms = [i.id for i in report.issues if i.kind == "symptom"]
        if symptoms:
            console.print()
            console.print(f"[dim]Consequences of the above (no separate fix): {safe(', '.join(symptoms))}[/]")
    if report.unknown:
        console.print()
        console.print(
            f"[bold]Unknown errors[/] ({len(report.unknown)} template{'s' if len(report.unknown) != 1 else ''}, most frequent first):"
        )
        table = Table(show_edge=False, header_style="bold", pad_edge=False)
        table.add_column("count", justify="right")
        table.add_column("template", overflow="fold")
        for t in report.unknown[:top]:
            table.add_row(str(t.count), plain(t.template))
        console.print(table)
        if len(report.unknown) > top:
            console.print(f"[dim]… {len(report.unknown) - top} more (--top N, or --json)[/]")


def _render_likely(console: Any, issue: Any) -> None:
    """'Likely one of' the causes a symptom can have, each with what decides for it."""
    from rich.table import Table
    from rich.text import Text

    console.print(
        Text.assemble(
            ("Likely one of", "bold"),
            plain(f" (what the log shows, {issue.id}, is only a symptom; no one cause is named):"),
        )
    )
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for n, c in enumerate(issue.likely, 1):
        grid.add_row(f"  {n}.", plain(c.cause + (f" ({c.rule})" if c.rule else ""), style="bold"))
        grid.add_row("", plain("decide by: " + c.evidence, style="dim"))
    console.print(grid)


def _explain(out: Any, what: str, rules: Any) -> None:
    from rich.text import Text

    from engine.errors import BadInput
    from engine.triage import explain, reported_as

    info = explain(what)
    if info is not None:
        # the rule that declares the code (`codes:`), or the code it is `same_as`: reports name
        # the failure by that one
        code = reported_as(info).code
        named_by = next((r.id for r in rules if code in r.codes), None if code == info.code else code)

        def render(console: Any) -> None:
            console.print(Text.assemble(plain(info.code, "bold"), plain(f"  {info.name}" if info.name else "")))
            console.print(
                plain(f"  kind:     {info.kind}  ({info.family})" if info.family else f"  kind:     {info.kind}")
            )
            console.print(Text("  meaning:  ") + plain(info.meaning or "N/A"))
            console.print(Text("  severity: ") + plain(info.severity, style=severity_style(info.severity)))
            if info.generic:
                console.print(Text("  generic:  ") + plain(info.generic))
            if info.fix:
                console.print(Text("  fix:      ") + plain(info.fix, style="bold"))
            if named_by:
                console.print(Text("  reported: ") + plain(f"as {named_by} (ascendctl triage --explain {named_by})"))

        out.emit({"code": info, "reported_as": named_by}, render)
        return
    for rule in rules:
        if rule.id == what:
            data = {
                "rule": {
                    k: getattr(rule, k)
                    for k in (
                        "id",
                        "title",
                        "severity",
                        "component",
                        "generic",
                        "patterns",
                        "cause",
                        "fix",
                        "links",
                        "samples",
                        "likely",
                        "likely_when",
                    )
                }
            }

            def render_rule(console: Any) -> None:
                console.print(
                    Text.assemble(
                        plain(rule.id, "bold"),
                        plain(f"  {rule.title}  "),
                        plain(rule.severity, severity_style(rule.severity)),
                    )
                )
                console.print(Text("  cause: ") + plain(rule.cause))
                console.print(Text("  fix:   ") + plain(rule.fix, style="bold"))
                if rule.likely:
                    when = " (after an error of the same process)" if rule.likely_when == "after-error" else ""
                    console.print(Text(f"  a symptom: a report it leads says likely one of{when}:"))
                    for c in rule.likely:
                        console.print(Text("    - ") + plain(c.cause + (f" ({c.rule})" if c.rule else "")))
                        console.print(Text("      decide by: ") + plain(c.evidence, style="dim"))
                for p in rule.patterns:
                    console.print(Text("  match: ") + plain(p, style="dim"))
                for link in rule.links:
                    console.print(Text("  see:   ") + plain(link))

            out.emit(data, render_rule)
            return
    if _explain_device_code(out, what):
        return
    raise BadInput(
        f"{what!r} is not a known code or rule id",
        "ascendctl triage --list  (codes look like 507011, EZ9999, ERR00100)",
    )


def _explain_device_code(out: Any, what: str) -> bool:
    """A device fault code (0x80E18402, or its eight hex digits): MindCluster's action and ours."""
    import re

    from rich.text import Text

    if not re.fullmatch(r"(?:0[xX][0-9A-Fa-f]{1,9}|[0-9A-Fa-f]{8,9})", what.strip()):
        return False
    from engine.triage.faultcodes import device_fault

    fault = device_fault(what)

    def render(console: Any) -> None:
        console.print(Text.assemble(plain(fault.code, "bold"), plain(f"  {fault.name}" if fault.name else "")))
        console.print(Text("  action:   ") + plain(f"{fault.action} ({fault.verb}): {fault.means}"))
        console.print(Text("  meaning:  ") + plain(fault.meaning or "N/A (no description in our table)"))
        console.print(Text("  fix:      ") + plain(fault.todo, style="bold"))
        if fault.source:
            console.print(Text("  see:      ") + plain(fault.source))

    out.emit({"device_fault": fault, "means": fault.means, "todo": fault.todo}, render)
    return True


def _list(out: Any, rules: Any) -> None:
    from rich.table import Table

    from engine.triage.codes import all_codes

    codes = all_codes()
    data = {
        "rules": [{"id": r.id, "severity": r.severity, "component": r.component, "title": r.title} for r in rules],
        "codes": codes,
    }

    def render(console: Any) -> None:
        if not console.is_terminal:
            # Piped: one plain line per rule and per code, tab-separated, for grep, cut and awk.
            rows = [(r.id, r.severity, r.component, r.title) for r in rules]
            rows += [(c.code, c.kind, c.name, c.meaning) for c in codes]
            out.lines(["\t".join(clean(f).replace("\t", " ") for f in row) for row in rows])
            return
        table = Table(show_edge=False, header_style="bold", pad_edge=False, title=f"{len(rules)} known issues")
        # The ids are what --explain takes: never cut, never folded; the title wraps instead. The
        # component (the id's first word, mostly) is left to --json and the piped lines.
        table.add_column("id", no_wrap=True, min_width=max((len(r.id) for r in rules), default=2))
        table.add_column("severity", no_wrap=True)
        table.add_column("title", overflow="fold", min_width=20)
        for r in rules:
            table.add_row(plain(r.id), plain(r.severity, style=severity_style(r.severity)), plain(r.title))
        console.print(table)
        console.print()
        codes_table = Table(
            show_edge=False,
            header_style="bold",
            pad_edge=False,
            title=f"{len(codes)} codes (ascendctl triage --explain CODE)",
        )
        for col in ("code", "kind", "name", "meaning"):
            codes_table.add_column(col, overflow="fold")
        for c in codes:
            codes_table.add_row(plain(c.code), plain(c.kind), plain(c.name), plain(c.meaning))
        console.print(codes_table)

    out.emit(data, render)
