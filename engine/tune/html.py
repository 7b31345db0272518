"""A sweep's report as one self-contained page (bench's page tooling, engine/bench/html.py):
capacity per combination, the Pareto front of tokens/s per user against tokens/s in total, and
the table of every combination."""

from __future__ import annotations

import html
from typing import Any, Mapping, Sequence

from engine.bench.html import page, require_plotly
from engine.i18n import english
from engine.tune.sweep import describe, pareto


def _label(doc: Mapping[str, Any]) -> str:
    return " ".join(f"{k.split('.')[-1]}={v}" for k, v in doc["combination"].items())


def _at(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    cap = doc.get("capacity") or {}
    return (cap.get("at_capacity") or {}).get("figures") or {}


def sweep_html(results: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> str:
    require_plotly()
    import plotly.graph_objects as go

    e = html.escape
    measured = [d for d in results if d["status"] == "measured" and (d.get("capacity") or {}).get("capacity")]
    figs = []
    if measured:
        bar = go.Figure(
            go.Bar(
                x=[_label(d) for d in measured],
                y=[d["capacity"]["capacity"] for d in measured],
                error_y={"type": "data", "array": [d["capacity"].get("band") or 0 for d in measured]},
            )
        )
        unit = measured[0]["capacity"].get("unit", "")
        bar.update_layout(yaxis_title=f"capacity ({unit})", xaxis_title="combination")
        figs.append(("Capacity per combination (± its band)", bar))
        pts = [(_at(d).get("output_tokens_per_s") or 0.0, _at(d).get("tokens_per_s_per_user") or 0.0) for d in measured]
        front = set(pareto(pts))
        sc = go.Figure()
        for on, name in ((False, "dominated"), (True, "Pareto front")):
            idx = [i for i in range(len(pts)) if (i in front) == on]
            idx.sort(key=lambda i: pts[i][0])
            sc.add_trace(
                go.Scatter(
                    x=[pts[i][0] for i in idx],
                    y=[pts[i][1] for i in idx],
                    text=[_label(measured[i]) for i in idx],
                    mode="markers+lines" if on else "markers",
                    name=name,
                )
            )
        sc.update_layout(xaxis_title="output tokens/s in total", yaxis_title="tokens/s per user (1000 / mean TPOT)")
        figs.append(("Pareto front at each combination's capacity", sc))
    parts = []
    for i, (title, fig) in enumerate(figs):
        fig.update_layout(margin={"l": 60, "r": 30, "t": 40, "b": 50}, template="plotly_white")
        div = fig.to_html(full_html=False, include_plotlyjs=(i == 0), config={"displaylogo": False})
        parts.append(f"<h2>{e(title)}</h2>\n{div}")
    rows = []
    for d in results:
        at = _at(d)
        cap = d.get("capacity") or {}

        def f(v, spec=",.1f"):
            return "" if v is None else format(v, spec)

        rows.append(
            "<tr>"
            + f"<td style='text-align:left'>{e(_label(d))}</td><td>{e(d['status'])}</td>"
            + f"<td>{f(cap.get('capacity'), 'g')}</td><td>{f(cap.get('band'), 'g')}</td>"
            + f"<td>{f(at.get('output_tokens_per_s'))}</td><td>{f(at.get('tokens_per_s_per_user'))}</td>"
            + f"<td>{f(at.get('ttft_p99_ms'))}</td><td>{f(at.get('itl_p99_ms'))}</td>"
            + f"<td>{f(at.get('goodput_rate'), ',.2f')}</td>"
            + f"<td style='text-align:left'>{e(_english_describe(d))}</td></tr>"
        )
    table = (
        "<table><tr><th>combination</th><th>status</th><th>capacity</th><th>±</th><th>output tok/s</th>"
        "<th>tok/s per user</th><th>TTFT p99 ms</th><th>ITL p99 ms</th><th>goodput req/s</th><th>result</th></tr>"
        + "".join(rows)
        + "</table>"
    )
    targets = ", ".join(f"{k} {v:g}" for k, v in (meta.get("targets") or {}).items())
    title = f"tune sweep of {meta.get('profile')}: {meta.get('scenario')} by {meta.get('by')}"
    body = f"<p>targets: {e(targets)}</p>\n<h2>Every combination</h2>\n{table}\n" + "\n".join(parts)
    return page(title, body)


def _english_describe(doc: Mapping[str, Any]) -> str:
    """The page is English (a file to share): the outcome's text too, whatever the locale."""
    with english():
        return describe(doc)
