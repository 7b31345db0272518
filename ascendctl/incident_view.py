"""`ascendctl triage` over several nodes: the shell around engine.incident (`triage` hands over
to it when it is given a cluster archive, several bundles or --node)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ascendctl.style import plain, safe, severity_style
from engine.i18n import N_, _


def wanted(paths: list[str], named: list[str]) -> bool:
    """Cluster mode: --node given, a cluster archive among the inputs, or two bundles or more."""
    if named:
        return True
    from engine.bundle.layout import bundle_dir
    from engine.incident import is_cluster

    real = [p for p in paths if p != "-"]
    if any(is_cluster(p) for p in real):
        return True
    return len(real) > 1 and sum(1 for p in real if bundle_dir(p) is not None) > 1


def parse_named(named: list[str]) -> list[tuple[str, str]]:
    from engine.errors import BadInput

    out = []
    for spec in named:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise BadInput(f"--node {spec!r} is not NAME=DIR", "give it as --node node0=logs/node0 (once per node)")
        out.append((name, path))
    return out


def run(out: Any, paths: list[str], named: list[str], rules: Any, fail_on: str, html: str | None) -> None:
    from engine.errors import BadInput, ProblemsFound
    from engine.incident import triage_cluster
    from engine.severity import rank

    pairs = parse_named(named)
    if html:
        from engine.bench.html import require_plotly

        require_plotly()
    with out.status(_("reading the nodes")) as update:
        report = triage_cluster(paths, pairs, rules=rules, progress=update)
    if not report.nodes:
        raise BadInput(
            _("no node could be read: {problems}").format(problems="; ".join(report.problems[:3])),
            _("give a cluster archive, bundles, or --node NAME=DIR folders of logs"),
        )
    first = report.roots[0] if report.roots else None
    data = {
        "clock": report.clock,
        "first_to_fail": first,
        "roots": report.roots,
        "chain": report.chain,
        "nodes": report.nodes,
        "timeline": report.timeline,
        "problems": report.problems,
        "notes": report.notes,
    }
    out.emit(data, lambda console: _render(console, report))
    if html:
        from engine.incident.html import html_report

        Path(html).write_text(html_report(report), encoding="utf-8")
        out.info(_("timeline page written to {path}").format(path=html))
    if report.problems:
        raise BadInput(
            _("{count} input problem(s): {problems}").format(
                count=len(report.problems), problems="; ".join(report.problems[:2])
            ),
            _("the report above covers every node that could be read; fix or leave out the inputs named"),
        )
    if fail_on != "never" and any(r.event is None or rank(r.event.severity) >= rank(fail_on) for r in report.roots):
        r = report.roots[0]
        issue = r.event.issue if r.event is not None else _("its log")
        if r.event is not None and r.event.likely:
            issue += _(": likely one of {count} causes").format(count=len(r.event.likely))
        also = (
            _(", and independently at {nodes}").format(nodes=", ".join(x.node for x in report.roots[1:3]))
            if len(report.roots) > 1
            else ""
        )
        raise ProblemsFound(
            _("the cluster failed first at {node} ({issue})").format(node=r.node, issue=issue) + also,
            f"ascendctl triage --explain {r.event.explain()}"
            if r.event is not None
            else _("check why {node} never started (its service log, its network)").format(node=r.node),
        )


def _render(console: Any, report: Any) -> None:
    from rich.table import Table
    from rich.text import Text

    nodes = report.nodes
    head_line = _("{count} node(s); clocks: {clock}").format(count=len(nodes), clock=safe(report.clock))
    console.print(f"[bold]triage[/]: {head_line}")
    if not report.roots:
        console.print(_("No node failed on its own, and no timeout names a peer."))
    for i, r in enumerate(report.roots):
        head = _("First to fail") if i == 0 else _("Independent failure")
        what = f" {r.event.issue} {_when(r.event)}" if r.event is not None else " " + _("(logged nothing)")
        if r.event is not None and r.event.likely:
            what += " " + _("(likely one of: {causes})").format(causes="; ".join(r.event.likely))
        ranks = ", ".join(map(str, r.ranks))
        rank = _(" (rank {ranks})").format(ranks=ranks) if r.ranks and r.in_inputs else ""
        console.print(
            Text.assemble(
                (_("{label}: ").format(label=head), "bold"), plain(r.node + rank, style="bold red"), plain(what)
            )
        )
        console.print(Text.assemble(("  " + _("why") + " ", "bold"), plain(r.why)))
    if report.chain:
        console.print("[bold]" + _("Propagation") + "[/]")
        for (cause_node, cause, effect, via), effect_nodes in _grouped(report.chain):
            console.print(
                Text.assemble(
                    "  ",
                    plain(f"{cause_node} {cause or _('(nothing logged)')}"),
                    " -> ",
                    plain(f"{_names(effect_nodes)} {effect}"),
                    ("   " + _("via {how}").format(how=via), "dim"),
                )
            )
    table = Table(show_edge=False, header_style="bold", pad_edge=False)
    for col in COLUMNS:
        table.add_column(_(col))
    for n in nodes:
        table.add_row(
            plain(n.name),
            plain(_(n.status)),
            plain(_ranks(n.ranks)),
            plain(f"{n.offset_s:+.3f} s" if n.offset_s is not None else _("as printed")),
            Text(
                n.cause.issue + (" " + _("(likely)") if n.cause.likely else ""), style=severity_style(n.cause.severity)
            )
            if n.cause
            else Text("-"),
            plain(n.cause.local if n.cause and n.cause.local else "-"),
            plain(n.first_wait.issue if n.first_wait else "-"),
            plain(", ".join(p.label() for p in n.waits_on[:3]) or "-"),
        )
    console.print(table)
    for p in [*report.problems, *report.notes]:
        console.print(Text.assemble((_("note") + " ", "yellow"), plain(p)))


# The node table's column heads; a node's status word ("ok", "no logs", the collector's own) is
# translated when the catalogue has it.
COLUMNS = (
    N_("node"),
    N_("status"),
    N_("ranks"),
    N_("clock"),
    N_("own failure"),
    N_("first seen"),
    N_("first wait"),
    N_("waited on"),
)
STATUSES = (N_("no logs"), N_("no answer"))


def _ranks(ranks: tuple[int, ...]) -> str:
    if not ranks:
        return "-"
    if len(ranks) > 4 and ranks[-1] - ranks[0] == len(ranks) - 1:
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks[:6])) + (", ..." if len(ranks) > 6 else "")


def _when(ev: Any) -> str:
    return _("at {time}").format(time=ev.local) if ev.local else _("(its line carries no time stamp)")


def _grouped(chain: list[Any]) -> list[tuple[tuple[str, str, str, str], list[str]]]:
    """Links that differ only by the node they reached, as one line (15 nodes that waited on the
    same rank read as one effect), in the order of their first link."""
    groups: dict[tuple[str, str, str, str], list[str]] = {}
    for c in chain:
        groups.setdefault((c.cause_node, c.cause, c.effect, c.via), []).append(c.effect_node)
    return list(groups.items())


def _names(nodes: list[str], shown: int = 6) -> str:
    if len(nodes) <= shown:
        return ", ".join(nodes)
    return _("{nodes} and {more} more ({count} nodes)").format(
        nodes=", ".join(nodes[:shown]), more=len(nodes) - shown, count=len(nodes)
    )
