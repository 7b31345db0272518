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

# The report's own words in Chinese (the knowledge base's texts are engine/triage/zh/*.yaml).
# Keyed by the English; a word missing here is shown in English. Kept here until the program's
# messages move to gettext catalogues.
ZH = {
    "inputs": "个输入",
    "lines": "行",
    "events": "个事件",
    "Device faults": "设备故障",
    "(the NPUs' own codes, and what to do):": "（NPU 自身上报的故障码及处理办法）：",
    "No known issue found.": "未发现已知问题。",
    "No issue named with confidence: only generic codes, consequences or warnings matched.": (
        "无法确定根因：只匹配到通用错误码、连带后果或告警。"
    ),
    "Most likely root line: ": "最可能的根因行：",
    "severity": "级别",
    "count": "次数",
    "issue": "问题",
    "first seen": "首次出现",
    "last seen": "最后出现",
    "cause": "原因",
    "generic": "通用",
    "fix": "处理",
    "seen": "日志",
    "see": "参考",
    "critical": "严重",
    "error": "错误",
    "warning": "告警",
    "info": "信息",
    "Catch-all codes and wrappers around the cause above: ": "上述原因周围的通用错误码和外层报错：",
    "Consequences of the above (no separate fix): ": "上述问题的连带后果（无需单独处理）：",
    "Unknown errors": "未知错误",
    "templates, most frequent first": "类模板，按出现次数排序",
    "more (--top N, or --json)": "条未显示（--top N，或 --json）",
    "template": "模板",
    "kind": "类别",
    "meaning": "含义",
    "reported": "报告中",
    "action": "动作",
    "match": "匹配",
    "N/A": "无",
    "N/A (no description in our table)": "无（本表没有描述）",
    "known issues": "个已知问题",
    "codes (ascendctl triage --explain CODE)": "个错误码（ascendctl triage --explain CODE）",
    "id": "id",
    "title": "标题",
    "code": "错误码",
    "name": "名称",
    "decide by: ": "判断依据：",
    " (after an error of the same process)": "（在同一进程报出错误之后）",
    "  a symptom: a report it leads says likely one of{when}:": "  这是现象：以它为首的报告会列出可能的原因{when}：",
}


def _w(english: str, lang: str) -> str:
    """A word of the report in the output language."""
    return ZH.get(english, english) if lang == "zh" else english


def register(app: typer.Typer) -> None:
    app.command(
        "triage",
        help=(
            "Explain logs: vLLM stdout, CANN plog directories, .gz files, or - for stdin. Known issues are "
            "grouped with count, first/last seen, cause and fix; unknown error lines are clustered into "
            "templates. With no LOG, the log of the newest `ascendctl serve` run. Exit 1 when an issue at "
            "or above --fail-on is found, 2 when an input cannot be read (the others are still reported). "
            "Given a `bundle --cluster` archive, several bundles or --node NAME=DIR folders, it triages the nodes "
            "together: one timeline with aligned clocks, the first node to fail and why, the propagation chain."
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
    node: Optional[List[str]] = typer.Option(
        None,
        "--node",
        metavar="NAME=DIR",
        help="A node's folder (or file) of logs, once per node: triage the nodes together, one timeline and the first node to fail.",
    ),
    html: Optional[str] = typer.Option(
        None, "--html", metavar="FILE", help="Across nodes: also write the timeline page (one lane per node) to FILE."
    ),
    lang: Optional[str] = typer.Option(
        None,
        "--lang",
        metavar="LANG",
        help="Write the report in English (en) or Chinese (zh); default: ASCENDCTL_LANG, then LC_ALL, LC_MESSAGES, LANG. "
        "--json is always English.",
    ),
) -> None:
    from ascendctl.output import get_output
    from engine.errors import BadInput, ProblemsFound
    from engine.i18n import set_language

    out = get_output()
    if lang is not None:  # only a choice made here: never undo one made before (a global --lang)
        set_language(lang)
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
    from ascendctl import incident_view

    if incident_view.wanted(list(logs or []), list(node or [])):
        incident_view.run(out, list(logs or []), list(node or []), rules, fail_on, html)
        return
    if html:
        raise BadInput(
            "--html draws the timeline of several nodes", "give a cluster archive, several bundles or --node NAME=DIR"
        )
    paths = _expand_bundles(list(logs or [])) or [_latest_run_log()]
    report = _scan(out, paths, rules, _device_ids(list(logs or [])))

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
    out.emit(data, lambda console: _render(console, report, top, _lang()))
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
    from engine.bundle.layout import bundle_dir, triage_inputs

    out: list[str] = []
    for p in paths:
        top = None if p == "-" else bundle_dir(p)
        out.extend(triage_inputs(top) if top is not None else [p])
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


def _device_ids(paths: list[str]) -> dict:
    """The chips' ids of the bundles' `npu-smi info -m` answers, by logic id: device-OS logs and
    plogs name a chip by its logic id, the operator knows it by the NPU ID of `npu-smi info`."""
    from engine.bundle.layout import bundle_dir, device_ids

    out: dict = {}
    for p in paths:
        top = None if p == "-" else bundle_dir(p)
        if top is not None:
            out.update(device_ids(top))
    return out


def _scan(out: Any, paths: list[str], rules: Any, device_ids: dict | None = None) -> Any:
    from engine.triage import Scanner, scan_paths

    scanner = Scanner(rules, device_ids=device_ids)
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


def _lang() -> str:
    from engine.i18n import language

    return language()


def _render(console: Any, report: Any, top: int, lang: str = "en") -> None:
    from rich.table import Table
    from rich.text import Text

    if lang != "en":
        from dataclasses import replace

        from engine.triage.localize import localized_issue

        report = replace(report, issues=[localized_issue(i, lang) for i in report.issues])
    w = lambda english: _w(english, lang)  # noqa: E731
    inputs = len(report.inputs)
    if lang == "zh":
        console.print(f"[bold]triage[/]：{inputs} 个输入，{report.lines:,} 行，{report.events:,} 个事件")
    else:
        console.print(
            f"[bold]triage[/]: {inputs} input{'s' if inputs != 1 else ''}, {report.lines:,} line"
            f"{'s' if report.lines != 1 else ''}, "
            # Warnings and info-level issues are events too: not "error events".
            f"{report.events:,} event{'s' if report.events != 1 else ''}"
        )
    faults = report.device_faults()
    if faults:
        # What on-call decides first: which NPU to isolate, reset or leave alone.
        what_to_do = w("(the NPUs' own codes, and what to do):")
        console.print(f"[bold]{w('Device faults')}[/]{'' if lang == 'zh' else ' '}{what_to_do}")
        for i in faults:
            times = f"  ({i.count}x)" if i.count > 1 else ""
            console.print(Text.assemble("  ", plain(i.title, style=severity_style(i.severity)), plain(times, "dim")))
        console.print()
    likely = report.likely()
    if likely is not None:
        _render_likely(console, likely, lang)
    elif report.root_cause() is None:
        console.print(
            w("No known issue found.")
            if not report.issues
            else w("No issue named with confidence: only generic codes, consequences or warnings matched.")
        )
    if report.root_cause() is None:
        if report.root_line:
            # The first error of the process that failed last: where to start reading.
            console.print(Text.assemble((w("Most likely root line: "), "bold"), plain(report.root_line[:300])))
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
            table.add_column(w(col), **kw)
        for i in report.issues:
            table.add_row(
                Text(w(i.severity), style=severity_style(i.severity)),
                str(i.count),
                plain(i.id, style="" if i.names_cause() else "dim"),
                plain(i.first_seen or w("N/A")),
                plain(i.last_seen or w("N/A")),
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
                    (f"{w(i.severity)} ", severity_style(i.severity)), plain(i.id, "bold"), plain(f"  {i.title}")
                )
            )
            details = Table.grid(padding=(0, 1))
            details.add_column(style="dim", no_wrap=True)
            details.add_column(overflow="fold")
            # Everything below comes from the log or a rules file: never markup, never raw escapes.
            if i.cause:
                details.add_row(f"  {w('cause')}", plain(i.cause))
            if i.generic and i.kind != "code":  # a code's cause already says it
                details.add_row(f"  {w('generic')}", plain(i.generic))
            if i.fix:
                details.add_row(f"  {w('fix')}", plain(i.fix, style="bold"))
            details.add_row(f"  {w('seen')}", plain(i.example[:300], style="dim"))
            for link in i.links[:2]:
                details.add_row(f"  {w('see')}", plain(link))
            console.print(details)
        generic = [i.id for i in report.issues if named and i.generic and i.kind != "symptom"]
        if generic:
            console.print()
            console.print(
                f"[dim]{w('Catch-all codes and wrappers around the cause above: ')}{safe(', '.join(generic))}[/]"
            )
        symptoms = [i.id for i in report.issues if i.kind == "symptom"]
        if symptoms:
            console.print()
            console.print(f"[dim]{w('Consequences of the above (no separate fix): ')}{safe(', '.join(symptoms))}[/]")
    if report.unknown:
        console.print()
        if lang == "zh":
            console.print(
                f"[bold]{w('Unknown errors')}[/]（{len(report.unknown)} {w('templates, most frequent first')}）："
            )
        else:
            console.print(
                f"[bold]Unknown errors[/] ({len(report.unknown)} template{'s' if len(report.unknown) != 1 else ''}, most frequent first):"
            )
        table = Table(show_edge=False, header_style="bold", pad_edge=False)
        table.add_column(w("count"), justify="right")
        table.add_column(w("template"), overflow="fold")
        for t in report.unknown[:top]:
            table.add_row(str(t.count), plain(t.template))
        console.print(table)
        if len(report.unknown) > top:
            console.print(f"[dim]… {len(report.unknown) - top} {w('more (--top N, or --json)')}[/]")


def _render_likely(console: Any, issue: Any, lang: str = "en") -> None:
    """'Likely one of' the causes a symptom can have, each with what decides for it."""
    from rich.table import Table
    from rich.text import Text

    if lang == "zh":
        head = Text.assemble(
            ("可能是以下原因之一", "bold"), plain(f"（日志里的 {issue.id} 只是现象，无法确定单一原因）：")
        )
    else:
        head = Text.assemble(
            ("Likely one of", "bold"),
            plain(f" (what the log shows, {issue.id}, is only a symptom; no one cause is named):"),
        )
    console.print(head)
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for n, c in enumerate(issue.likely, 1):
        grid.add_row(f"  {n}.", plain(c.cause + (f" ({c.rule})" if c.rule else ""), style="bold"))
        grid.add_row("", plain(_w("decide by: ", lang) + c.evidence, style="dim"))
    console.print(grid)


def _render_rule_likely(console: Any, rule: Any, lang: str) -> None:
    """--explain of a symptom rule: the causes a report it leads lists."""
    from rich.text import Text

    from engine.triage.localize import localized_likely

    when = _w(" (after an error of the same process)", lang) if rule.likely_when == "after-error" else ""
    console.print(Text(_w("  a symptom: a report it leads says likely one of{when}:", lang).format(when=when)))
    for c in localized_likely(rule.id, rule.likely, lang):
        console.print(Text("    - ") + plain(c.cause + (f" ({c.rule})" if c.rule else "")))
        console.print(Text("      " + _w("decide by: ", lang)) + plain(c.evidence, style="dim"))


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
            from engine.triage.localize import localized_code

            lang = _lang()
            loc = localized_code(info, lang)
            label = _labels(lang, ("kind", "meaning", "severity", "generic", "fix", "reported"))
            console.print(Text.assemble(plain(info.code, "bold"), plain(f"  {info.name}" if info.name else "")))
            family = (f"（{loc.family}）" if lang == "zh" else f"  ({loc.family})") if loc.family else ""
            console.print(plain(f"{label['kind']}{info.kind}{family}"))
            console.print(Text(label["meaning"]) + plain(loc.meaning or _w("N/A", lang)))
            console.print(Text(label["severity"]) + plain(_w(info.severity, lang), style=severity_style(info.severity)))
            if loc.generic:
                console.print(Text(label["generic"]) + plain(loc.generic))
            if loc.fix:
                console.print(Text(label["fix"]) + plain(loc.fix, style="bold"))
            if named_by:
                how = (
                    "记为 {id}（ascendctl triage --explain {id}）"
                    if lang == "zh"
                    else "as {id} (ascendctl triage --explain {id})"
                )
                console.print(Text(label["reported"]) + plain(how.format(id=named_by)))

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
                from engine.triage.localize import localized_issue
                from engine.triage.model import IssueSummary

                lang = _lang()
                label = _labels(lang, ("cause", "fix", "match", "see"))
                shown = IssueSummary(
                    rule.id,
                    rule.title,
                    rule.severity,
                    0,
                    None,
                    None,
                    rule.cause,
                    rule.fix,
                    rule.links,
                    "",
                    generic=rule.generic,
                )
                shown = localized_issue(shown, lang)  # an operator's own rule of that id stays as written
                console.print(
                    Text.assemble(
                        plain(rule.id, "bold"),
                        plain(f"  {shown.title}  "),
                        plain(_w(rule.severity, lang), severity_style(rule.severity)),
                    )
                )
                console.print(Text(label["cause"]) + plain(shown.cause))
                console.print(Text(label["fix"]) + plain(shown.fix, style="bold"))
                if rule.likely:
                    _render_rule_likely(console, rule, lang)
                for p in rule.patterns:
                    console.print(Text(label["match"]) + plain(p, style="dim"))
                for link in rule.links:
                    console.print(Text(label["see"]) + plain(link))

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
        from engine.triage.localize import localized_fault, verb_text

        lang = _lang()
        texts = localized_fault(fault, lang)
        label = _labels(lang, ("action", "meaning", "fix", "see"))
        console.print(Text.assemble(plain(fault.code, "bold"), plain(f"  {texts['name']}" if texts["name"] else "")))
        console.print(
            Text(label["action"])
            + plain(
                f"{fault.action}（{verb_text(fault.verb, lang)}）：{texts['means']}"
                if lang == "zh"
                else f"{fault.action} ({fault.verb}): {texts['means']}"
            )
        )
        console.print(Text(label["meaning"]) + plain(texts["meaning"] or _w("N/A (no description in our table)", lang)))
        console.print(Text(label["fix"]) + plain(texts["todo"], style="bold"))
        if fault.source:
            console.print(Text(label["see"]) + plain(fault.source))

    out.emit({"device_fault": fault, "means": fault.means, "todo": fault.todo}, render)
    return True


def _labels(lang: str, keys: tuple[str, ...]) -> dict[str, str]:
    """ "  meaning:  ": the words of an --explain answer, padded to one column (Chinese characters
    count two columns)."""
    from rich.cells import cell_len

    words = {k: _w(k, lang) + ("：" if lang == "zh" else ":") for k in keys}
    width = max(cell_len(v) for v in words.values()) + 1
    return {k: "  " + v + " " * (width - cell_len(v)) for k, v in words.items()}


def _list(out: Any, rules: Any) -> None:
    from rich.table import Table

    from engine.triage.codes import all_codes

    codes = all_codes()
    data = {
        "rules": [{"id": r.id, "severity": r.severity, "component": r.component, "title": r.title} for r in rules],
        "codes": codes,
    }

    def render(console: Any) -> None:
        lang = _lang()
        if lang != "en":
            from engine.triage.localize import localized_code, localized_title

            title = {r.id: localized_title(r, lang) for r in rules}
            meaning = [localized_code(c, lang).meaning for c in codes]
        else:
            title = {r.id: r.title for r in rules}
            meaning = [c.meaning for c in codes]
        if not console.is_terminal:
            # Piped: one plain line per rule and per code, tab-separated, for grep, cut and awk.
            rows = [(r.id, r.severity, r.component, title[r.id]) for r in rules]
            rows += [(c.code, c.kind, c.name, m) for c, m in zip(codes, meaning)]
            out.lines(["\t".join(clean(f).replace("\t", " ") for f in row) for row in rows])
            return
        w = lambda english: _w(english, lang)  # noqa: E731
        sep = " " if lang == "en" else ""
        table = Table(
            show_edge=False, header_style="bold", pad_edge=False, title=f"{len(rules)}{sep}{w('known issues')}"
        )
        # The ids are what --explain takes: never cut, never folded; the title wraps instead. The
        # component (the id's first word, mostly) is left to --json and the piped lines.
        table.add_column(w("id"), no_wrap=True, min_width=max((len(r.id) for r in rules), default=2))
        table.add_column(w("severity"), no_wrap=True)
        table.add_column(w("title"), overflow="fold", min_width=20)
        for r in rules:
            table.add_row(plain(r.id), plain(w(r.severity), style=severity_style(r.severity)), plain(title[r.id]))
        console.print(table)
        console.print()
        codes_table = Table(
            show_edge=False,
            header_style="bold",
            pad_edge=False,
            title=f"{len(codes)}{sep}{w('codes (ascendctl triage --explain CODE)')}",
        )
        for col in ("code", "kind", "name", "meaning"):
            codes_table.add_column(w(col), overflow="fold")
        for c, m in zip(codes, meaning):
            codes_table.add_row(plain(c.code), plain(c.kind), plain(c.name), plain(m))
        console.print(codes_table)

    out.emit(data, render)
