"""The incident as one self-contained HTML page: a timeline with one lane per node (events placed
on the collector's clock, the root event marked), the roots with why, the propagation chain and
the per-node table. Built with the bench page's tooling (plotly, the `report` extra, its script
embedded: the page opens offline)."""

from __future__ import annotations

import datetime as dt
import html
from typing import Any

from engine.bench.html import require_plotly
from engine.i18n import DEFAULT, N_, _, message_language
from engine.incident.model import IncidentReport

ROLE_STYLE = {
    "cause": ("#d62728", "circle"),
    "likely": ("#e377c2", "circle"),
    "wait": ("#ff7f0e", "diamond"),
    "consequence": ("#9467bd", "square"),
    "context": ("#7f7f7f", "circle-open"),
}


def figure(report: IncidentReport) -> Any:
    import plotly.graph_objects as go

    lanes = [n.name for n in report.nodes]
    fig = go.Figure()
    for role, (colour, symbol) in ROLE_STYLE.items():
        evs = [e for e in report.timeline if e.role == role and e.at is not None]
        if not evs:
            continue
        fig.add_trace(
            go.Scatter(
                x=[dt.datetime.fromtimestamp(e.at, dt.timezone.utc) for e in evs],  # type: ignore[arg-type]
                y=[e.node for e in evs],
                mode="markers",
                name=_(ROLE_NAMES[role]),
                marker={"color": colour, "symbol": symbol, "size": 11},
                text=[
                    f"{e.node}: {e.issue} ({_(e.severity)}) x{e.count}<br>{html.escape(event_title(e))}<br>"
                    + _("log time {time}").format(time=e.local)
                    for e in evs
                ],
                hoverinfo="text",
            )
        )
    for i, root in enumerate(report.roots):
        if root.event is None or root.event.at is None:
            continue
        x = dt.datetime.fromtimestamp(root.event.at, dt.timezone.utc)
        label = _("first to fail") if i == 0 else _("independent failure")
        fig.add_trace(
            go.Scatter(
                x=[x],
                y=[root.node],
                mode="markers",
                name=label,
                marker={"color": "black", "symbol": "star", "size": 20, "line": {"width": 1, "color": "yellow"}},
                text=[f"{label}: {root.node} {root.event.issue}"],
                hoverinfo="text",
            )
        )
        fig.add_annotation(x=x, y=root.node, text=f"{label}: {root.event.issue}", showarrow=True, arrowhead=2, ay=-35)
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(lanes)), type="category", title=_("node"))
    aligned = any(n.offset_s is not None for n in report.nodes)
    fig.update_xaxes(title=_("time (collector's clock)") if aligned else _("time (as the logs printed it)"))
    fig.update_layout(
        height=160 + 40 * len(lanes), margin={"l": 90, "r": 30, "t": 40, "b": 50}, template="plotly_white"
    )
    return fig


def html_report(report: IncidentReport) -> str:
    require_plotly()
    e = html.escape
    plot = figure(report).to_html(full_html=False, include_plotlyjs=True, config={"displaylogo": False})
    first, independent = _(" (first to fail)"), _(" (independent)")
    likely = _(" (likely one of: {causes})")
    roots = (
        "".join(
            f"<li><b>{e(r.node)}</b>{first if i == 0 else independent}"
            f"{': ' + e(r.event.issue) if r.event else ''}"
            f"{e(likely.format(causes=', '.join(r.event.likely))) if r.event and r.event.likely else ''}"
            f"<br>{e(r.why)}</li>"
            for i, r in enumerate(report.roots)
        )
        or "<li>" + e(_("no node failed on its own, and no timeout names a peer")) + "</li>"
    )
    chain = "".join(
        f"<tr><td>{e(c.cause_node)}</td><td>{e(c.cause or '-')}</td><td>&rarr;</td><td>{e(c.effect_node)}</td>"
        f"<td>{e(c.effect)}</td><td>{e(c.via)}</td></tr>"
        for c in report.chain
    )
    rows = []
    for n in report.nodes:
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{e(str(v))}</td>"
                for v in (
                    n.name,
                    _(n.status),
                    ", ".join(map(str, n.ranks)) or "-",
                    ", ".join(n.addresses) or "-",
                    f"{n.offset_s:+.3f} s" if n.offset_s is not None else _("as printed"),
                    (n.cause.issue + (" " + _("(likely)") if n.cause.likely else "")) if n.cause else "-",
                    n.first_wait.issue if n.first_wait else "-",
                    ", ".join(p.label() for p in n.waits_on) or "-",
                )
            )
            + "</tr>"
        )
    problems = "".join(f"<li>{e(p)}</li>" for p in [*report.problems, *report.notes])
    lang = "en" if message_language() == DEFAULT else "zh-CN"
    title = _("cluster triage")
    chain_heads = "".join(f"<th>{e(_(h))}</th>" if h else "<th></th>" for h in CHAIN_HEADS)
    node_heads = "".join(f"<th>{e(_(h))}</th>" for h in NODE_HEADS)
    heading = e(_("cluster triage: {count} nodes").format(count=len(report.nodes)))
    clocks = e(_("clocks: {clock}").format(clock=report.clock))
    started, timeline, propagation, nodes = (
        e(_("Where it started")),
        e(_("Timeline")),
        e(_("Propagation")),
        e(_("Nodes")),
    )
    return f"""<!DOCTYPE html>
<html lang="{lang}"><head><meta charset="utf-8"><title>{e(title)}</title>
<style>body{{font-family:sans-serif;margin:1.5em;max-width:1300px}}table{{border-collapse:collapse;margin:.5em 0}}
td,th{{border:1px solid #ccc;padding:2px 8px;text-align:left}}h2{{margin-top:1.5em}}</style></head>
<body>
<h1>{heading}</h1>
<p>{clocks}</p>
<h2>{started}</h2><ol>{roots}</ol>
{f"<ul>{problems}</ul>" if problems else ""}
<h2>{timeline}</h2>
{plot}
<h2>{propagation}</h2>
<table><tr>{chain_heads}</tr>{chain}</table>
<h2>{nodes}</h2>
<table><tr>{node_heads}</tr>{"".join(rows)}</table>
</body></html>
"""


# What each marker of the timeline is, and the tables' column heads (translated where shown).
ROLE_NAMES = {
    "cause": N_("cause"),
    "likely": N_("likely"),
    "wait": N_("wait"),
    "consequence": N_("consequence"),
    "context": N_("context"),
}
CHAIN_HEADS = (N_("node"), N_("cause"), "", N_("node"), N_("effect"), N_("via"))
NODE_HEADS = (
    N_("node"),
    N_("status"),
    N_("ranks"),
    N_("addresses"),
    N_("clock offset"),
    N_("own failure"),
    N_("first wait"),
    N_("waited on"),
)


def event_title(e) -> str:  # noqa: ANN001
    from engine.incident.analyse import event_title as title

    return title(e)


__all__ = ["figure", "html_report"]
