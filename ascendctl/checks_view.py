"""The human view of a report made of check rows (doctor, netcheck, doctor --compare), and the
version table of `doctor --compare`. Summaries quote what the (possibly recorded, possibly hostile)
machine holds; they go through safe(): no escape sequence reaches the terminal, no markup."""

from __future__ import annotations

from typing import Any

from ascendctl.style import clean, ljust_cells, safe, severity_style, spaced
from engine.i18n import N_, _

# The status column is five columns wide; the word itself is in --json.
_MARK = {"ok": N_("ok"), "warning": N_("warn"), "error": N_("ERROR"), "skip": N_("skip")}
_VERDICT = {"ok": N_("ok"), "warnings": N_("warnings"), "errors": N_("errors")}

Line = list[tuple[str, str]]  # (text, style) pieces of one line; the text is already clean


def report_lines(report: Any, strict: bool, command: str, where: str | None = None) -> list[Line]:
    """A report of check rows (doctor, netcheck, doctor --compare): headline, one line per
    check with its fix, skipped checks grouped by reason, then the counts. Lines of styled
    pieces, not Rich markup: doctor prints them without importing Rich (Output.styled)."""
    facts = report.facts
    if where is None:
        where = "" if report.live else _(" (recorded machine at {root})").format(root=report.root)
    if report.profile:
        where += _(" with profile {profile}").format(profile=report.profile)
    lines: list[Line] = [
        [
            (f"ascendctl {command}", "bold"),
            (clean(_("{where}: {headline}").format(where=where, headline=report.headline)), ""),
        ]
    ]
    width = max(len(c.id) for c in report.checks) if report.checks else 10
    mark = {k: ljust_cells(_(v), 5) for k, v in _MARK.items()}
    fix = spaced(_("fix:"))
    skipped: dict[str, list[str]] = {}
    for c in report.checks:
        status = c.status.value
        if status == "skip":
            skipped.setdefault(c.summary, []).append(c.id)
            continue
        lines.append(
            [("  ", ""), (mark[status], severity_style(status)), (clean(f" {c.id:<{width}}  {c.summary}"), "")]
        )
        if c.fix and status in ("warning", "error"):
            lines.append([(f"        {'':<{width}}  ", ""), (fix, "bold"), (clean(c.fix), "")])
    for reason, ids in skipped.items():
        grouped = _("{reason}: {checks}").format(reason=reason, checks=", ".join(ids))
        lines.append([(clean(f"  {mark['skip']} {grouped}"), "dim")])
    counts = {s: sum(1 for c in report.checks if c.status.value == s) for s in ("ok", "warning", "error", "skip")}
    elapsed = facts.get("elapsed_s")
    tail = _(" in {seconds:.2f} s").format(seconds=elapsed) if isinstance(elapsed, (int, float)) else ""
    verdict = _(_VERDICT.get(report.verdict, report.verdict)) + (
        _(" (--strict: warnings fail)") if strict and counts["warning"] and not counts["error"] else ""
    )
    total = _("{ok} ok, {warnings} warning(s), {errors} error(s), {skipped} skipped").format(
        ok=counts["ok"], warnings=counts["warning"], errors=counts["error"], skipped=counts["skip"]
    )
    lines.append([(_("{counts}: {verdict}").format(counts=total + tail, verdict=verdict), "")])
    return lines


def render_report(console: Any, report: Any, strict: bool, command: str, where: str | None = None) -> None:
    """The same lines through a Rich console (netcheck, doctor --compare under its table)."""
    from rich.text import Text

    for line in report_lines(report, strict, command, where):
        console.print(Text.assemble(*line), soft_wrap=True)


def render_skew_table(console: Any, report: Any) -> None:
    """`doctor --compare`: one row per version, one column per host; a value that differs from
    the row's most common one is marked, then the check rows below say which host to fix."""
    from collections import Counter

    from rich.table import Table

    hosts = report.facts["hosts"]
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    table.add_column("", no_wrap=True)
    for h in hosts:
        table.add_column(safe(h), overflow="fold")
    for label, values in report.facts["table"].items():
        known = [v for v in values.values() if v is not None]
        common = Counter(known).most_common(2)
        # The reference is the value most hosts hold; with no majority every value is marked.
        ref = common[0][0] if common and (len(common) == 1 or common[0][1] > common[1][1]) else None
        cells = []
        for h in hosts:
            v = values.get(h)
            if v is None:
                cells.append("[dim]N/A[/]")
            elif v != ref:
                cells.append(f"[{severity_style('error')}]{safe(v)} *[/]")
            else:
                cells.append(safe(v))
        table.add_row(label, *cells)
    console.print(table)
    render_report(console, report, False, "doctor --compare", where="")
