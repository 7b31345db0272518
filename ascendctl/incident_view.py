"""`ascendctl triage` over several nodes: the shell around engine.incident (`triage` hands over
to it when it is given a cluster archive, several bundles or --node)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ascendctl.style import plain, safe, severity_style


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
    from engine.i18n import language

    if language() != "en" and not out.json_mode:
        out.warn("the report across nodes is in English for now (--lang zh covers the report of one node's logs)")
    if html:
        from engine.bench.html import require_plotly

        require_plotly()
    with out.status("reading the nodes") as update:
        report = triage_cluster(paths, pairs, rules=rules, progress=update)
    if not report.nodes:
        raise BadInput(
            "no node could be read: " + "; ".join(report.problems[:3]),
            "give a cluster archive, bundles, or --node NAME=DIR folders of logs",
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
        out.info(f"timeline page written to {html}")
    if report.problems:
        raise BadInput(
            f"{len(report.problems)} input problem(s): " + "; ".join(report.problems[:2]),
            "the report above covers every node that could be read; fix or leave out the inputs named",
        )
    if fail_on != "never" and any(r.event is None or rank(r.event.severity) >= rank(fail_on) for r in report.roots):
        r = report.roots[0]
        issue = r.event.issue if r.event is not None else "its log"
        if r.event is not None and r.event.likely:
            issue += f": likely one of {len(r.event.likely)} causes"
        raise ProblemsFound(
            f"the cluster failed first at {r.node} ({issue})"
            + (
                f", and independently at {', '.join(x.node for x in report.roots[1:3])}"
                if len(report.roots) > 1
                else ""
            ),
            f"ascendctl triage --explain {r.event.explain()}"
            if r.event is not None
            else f"check why {r.node} never started (its service log, its network)",
        )


def _render(console: Any, report: Any) -> None:
    from rich.table import Table
    from rich.text import Text

    nodes = report.nodes
    console.print(f"[bold]triage[/]: {len(nodes)} node{'s' if len(nodes) != 1 else ''}; clocks: {safe(report.clock)}")
    if not report.roots:
        console.print("No node failed on its own, and no timeout names a peer.")
    for i, r in enumerate(report.roots):
        head = "First to fail" if i == 0 else "Independent failure"
        what = f" {r.event.issue} {_when(r.event)}" if r.event is not None else " (logged nothing)"
        if r.event is not None and r.event.likely:
            what += " (likely one of: " + "; ".join(r.event.likely) + ")"
        rank = f" (rank {', '.join(map(str, r.ranks))})" if r.ranks and r.in_inputs else ""
        console.print(Text.assemble((f"{head}: ", "bold"), plain(r.node + rank, style="bold red"), plain(what)))
        console.print(Text.assemble(("  why ", "bold"), plain(r.why)))
    if report.chain:
        console.print("[bold]Propagation[/]")
        for (cause_node, cause, effect, via), effect_nodes in _grouped(report.chain):
            console.print(
                Text.assemble(
                    "  ",
                    plain(f"{cause_node} {cause or '(nothing logged)'}"),
                    " -> ",
                    plain(f"{_names(effect_nodes)} {effect}"),
                    (f"   via {via}", "dim"),
                )
            )
    table = Table(show_edge=False, header_style="bold", pad_edge=False)
    for col in ("node", "status", "ranks", "clock", "own failure", "first seen", "first wait", "waited on"):
        table.add_column(col)
    for n in nodes:
        table.add_row(
            plain(n.name),
            plain(n.status),
            plain(_ranks(n.ranks)),
            plain(f"{n.offset_s:+.3f} s" if n.offset_s is not None else "as printed"),
            Text(n.cause.issue + (" (likely)" if n.cause.likely else ""), style=severity_style(n.cause.severity))
            if n.cause
            else Text("-"),
            plain(n.cause.local if n.cause and n.cause.local else "-"),
            plain(n.first_wait.issue if n.first_wait else "-"),
            plain(", ".join(p.label() for p in n.waits_on[:3]) or "-"),
        )
    console.print(table)
    for p in [*report.problems, *report.notes]:
        console.print(Text.assemble(("note ", "yellow"), plain(p)))


def _ranks(ranks: tuple[int, ...]) -> str:
    if not ranks:
        return "-"
    if len(ranks) > 4 and ranks[-1] - ranks[0] == len(ranks) - 1:
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks[:6])) + (", ..." if len(ranks) > 6 else "")


def _when(ev: Any) -> str:
    return f"at {ev.local}" if ev.local else "(its line carries no time stamp)"


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
    return f"{', '.join(nodes[:shown])} and {len(nodes) - shown} more ({len(nodes)} nodes)"
