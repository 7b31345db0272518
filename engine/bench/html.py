"""The bench report as one self-contained HTML page with plots: it opens offline (the plotting
library's script is embedded, nothing is fetched), so it can be mailed or attached to a ticket.

Built from the JSON report (the dict `bench --out` writes), so a saved report renders the same:
latency CDFs (TTFT, ITL, E2E); TTFT of each request and output tokens/s over time with the
phases shaded; the engine's queue, running requests and KV usage over time (sampled from
/metrics, finely during a burst); finished requests by outcome over time. Plotly is an optional
dependency (the `report` extra), imported only here."""

from __future__ import annotations

import html
import math
from typing import Any, Mapping, Sequence

from engine.errors import BadInput

PHASE_COLOURS = ("rgba(99,110,250,0.08)", "rgba(239,85,59,0.08)", "rgba(0,204,150,0.08)", "rgba(171,99,250,0.08)")


def require_plotly() -> None:
    """Raise BadInput (before a run, not after it) when the plotting library is missing."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        raise BadInput(
            "--html needs the plotly package, which is not installed",
            "pip install 'ascendctl[report]' (or ./install.sh --dev), or leave out --html",
        ) from None


def _cdf(values: Sequence[float | None]) -> tuple[list[float], list[float]]:
    v = sorted(x for x in values if x is not None)
    n = len(v)
    return v, [(i + 1) / n for i in range(n)]


def _phases(doc: Mapping[str, Any]) -> list[tuple[str, float, float]]:
    out, t = [], 0.0
    for p in doc.get("phases") or []:
        start = float(p.get("start_s", t))
        end = start + float(p.get("duration_s") or 0.0)
        out.append((str(p.get("name")), start, end))
        t = end
    return out


def _mark_phases(fig, doc: Mapping[str, Any], rows: int = 1) -> None:
    phases = _phases(doc)
    if len(phases) < 2 and not doc.get("queue"):
        return
    for i, (name, start, end) in enumerate(phases):
        for row in range(1, rows + 1):
            label = {"annotation_text": name, "annotation_position": "top left"} if row == 1 else {}
            fig.add_vrect(
                x0=start,
                x1=end,
                fillcolor=PHASE_COLOURS[i % len(PHASE_COLOURS)],
                line_width=0,
                layer="below",
                row=row,
                col=1,
                **label,
            )


def _tokens_per_s(doc: Mapping[str, Any]) -> tuple[list[float], list[float]]:
    from engine.bench.compare import bucket_series

    strata = bucket_series(doc, "tokens")
    values = [v for s in strata for v in s]
    return [i + 0.5 for i in range(len(values))], values


def _outcomes(doc: Mapping[str, Any]) -> dict[str, list[int]]:
    """Finished requests per one-second bucket (by when they ended), "ok" or the error kind."""
    s = doc["samples"]
    n = max(1, math.ceil(float(doc.get("duration_s") or 0.0)))
    kinds: dict[str, list[int]] = {"ok": [0] * n}
    for i, sent in enumerate(s["sent_s"]):
        err = s["error"][i]
        end = sent + (s["e2e_ms"][i] or 0.0) / 1000.0 if err is None else sent
        kinds.setdefault(err or "ok", [0] * n)[min(n - 1, max(0, int(end)))] += 1
    return kinds


def figures(doc: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(title, plotly figure) for each plot the report's data allows."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    s = doc.get("samples") or {}
    out: list[tuple[str, Any]] = []
    if not s.get("sent_s"):
        return out

    cdf = make_subplots(rows=1, cols=3, subplot_titles=("TTFT", "ITL", "E2E"))
    for col, key in enumerate(("ttft_ms", "itl_ms", "e2e_ms"), start=1):
        x, y = _cdf(s.get(key) or [])
        cdf.add_trace(go.Scatter(x=x, y=y, mode="lines", name=key.split("_")[0].upper()), row=1, col=col)
        cdf.update_xaxes(title_text="ms", row=1, col=col)
    cdf.update_yaxes(title_text="share of samples", range=[0, 1.01], row=1, col=1)
    cdf.update_layout(showlegend=False, height=380)
    out.append(("Latency distribution (CDF)", cdf))

    over = make_subplots(rows=2, cols=1, shared_xaxes=True, subplot_titles=("TTFT per request", "output tokens/s"))
    ok = [i for i, e in enumerate(s["error"]) if e is None and s["ttft_ms"][i] is not None]
    over.add_trace(
        go.Scattergl(x=[s["sent_s"][i] for i in ok], y=[s["ttft_ms"][i] for i in ok], mode="markers", name="TTFT (ms)"),
        row=1,
        col=1,
    )
    tx, ty = _tokens_per_s(doc)
    over.add_trace(go.Scatter(x=tx, y=ty, mode="lines", line_shape="hv", name="tokens/s"), row=2, col=1)
    over.update_yaxes(title_text="ms", row=1, col=1)
    over.update_yaxes(title_text="tok/s", row=2, col=1)
    over.update_xaxes(title_text="seconds into the run", row=2, col=1)
    _mark_phases(over, doc, rows=2)
    over.update_layout(height=560)
    out.append(("TTFT and throughput over time", over))

    eng = s.get("engine") or {}
    if eng.get("t_s"):
        q = make_subplots(specs=[[{"secondary_y": True}]])
        for key, label in (("waiting", "waiting (queue)"), ("running", "running")):
            q.add_trace(go.Scatter(x=eng["t_s"], y=eng.get(key) or [], mode="lines", name=label), secondary_y=False)
        if any(v is not None for v in eng.get("kv_usage") or []):
            kv = [None if v is None else v * 100 for v in eng["kv_usage"]]
            q.add_trace(
                go.Scatter(x=eng["t_s"], y=kv, mode="lines", name="KV cache used (%)", line={"dash": "dot"}),
                secondary_y=True,
            )
        q.update_yaxes(title_text="requests", secondary_y=False)
        q.update_yaxes(title_text="KV used %", range=[0, 100], secondary_y=True)
        q.update_xaxes(title_text="seconds into the run")
        _mark_phases(q, doc)
        q.update_layout(height=380)
        out.append(("Engine queue and KV cache (from /metrics)", q))

    kinds = _outcomes(doc)
    errs = go.Figure()
    for kind, counts in sorted(kinds.items(), key=lambda kv: (kv[0] != "ok", kv[0])):
        errs.add_trace(
            go.Bar(
                x=[i + 0.5 for i in range(len(counts))],
                y=counts,
                name=kind,
                marker_color="rgba(160,160,160,0.5)" if kind == "ok" else None,
            )
        )
    _mark_phases(errs, doc)
    errs.update_layout(barmode="stack", height=340, xaxis_title="seconds into the run", yaxis_title="requests")
    out.append(("Finished requests by outcome (errors by kind)", errs))
    return out


def _fmt(v: Any, spec: str = ",.1f") -> str:
    return "N/A" if v is None else format(v, spec)


def _summary(doc: Mapping[str, Any]) -> str:
    e = html.escape
    rows = []
    for label, key in (("TTFT", "ttft_ms"), ("ITL", "itl_ms"), ("TPOT", "tpot_ms"), ("E2E", "e2e_ms")):
        st = doc.get(key) or {}
        rows.append(
            f"<tr><th>{label}</th>"
            + "".join(f"<td>{_fmt(st.get(k))}</td>" for k in ("p50", "p90", "p99", "mean", "max"))
            + f"<td>{st.get('count', 0)}</td></tr>"
        )
    lines = [
        f"<p>{doc.get('completed', 0)} ok, {doc.get('failed', 0)} failed, {doc.get('cancelled', 0)} cancelled; "
        f"{_fmt(doc.get('request_rate'), ',.2f')} req/s; {_fmt(doc.get('output_tokens_per_s'))} output tok/s</p>"
    ]
    g = doc.get("goodput")
    if g:
        targets = " ".join(f"{k}:{v:g}" for k, v in g["slo_ms"].items())
        lines.append(
            f"<p>goodput ({e(targets)} ms): {g['good']} requests met every target "
            f"({_fmt(g['share'], '.1%')}), {_fmt(g['rate'], ',.2f')} req/s</p>"
        )
    verdicts = "".join(
        f"<tr><td>{e(str(v['name']))}</td><td>{'&le;' if v['bound'] == 'max' else '&ge;'} {v['target']:g}</td>"
        f"<td>{_fmt(v['actual'], ',.3g')}</td><td>{'N/A' if v['ok'] is None else 'PASS' if v['ok'] else 'FAIL'}</td></tr>"
        for v in doc.get("slo") or []
    )
    table = (
        "<table><tr><th>ms</th><th>p50</th><th>p90</th><th>p99</th><th>mean</th><th>max</th><th>samples</th></tr>"
        + "".join(rows)
        + "</table>"
    )
    slo = f"<table><tr><th>SLO</th><th>target</th><th>measured</th><th>verdict</th></tr>{verdicts}</table>"
    return "\n".join(lines) + table + (slo if verdicts else "")


def html_report(doc: Mapping[str, Any]) -> str:
    """The page: a summary, then each plot; the plotting script embedded once, at the first plot."""
    require_plotly()
    e = html.escape
    parts = []
    for i, (title, fig) in enumerate(figures(doc)):
        fig.update_layout(margin={"l": 60, "r": 30, "t": 40, "b": 50}, template="plotly_white")
        div = fig.to_html(full_html=False, include_plotlyjs=(i == 0), config={"displaylogo": False})
        parts.append(f"<h2>{e(title)}</h2>\n{div}")
    if not parts:
        parts.append("<p>This report keeps no per-request samples: nothing to plot.</p>")
    notes = "".join(f"<li>{e(str(n))}</li>" for n in doc.get("notes") or [])
    verdict = (
        "INCOMPLETE"
        if doc.get("interrupted")
        else "no SLOs"
        if not doc.get("slo")
        else "PASS"
        if doc.get("passed")
        else "FAIL"
    )
    title = f"bench {doc.get('scenario')} against {doc.get('url')}"
    body = f"""<p>{e(str(doc.get("description") or ""))}</p>
<p>model {e(str(doc.get("model")))}, {e(str(doc.get("api")))} API, {_fmt(doc.get("duration_s"))} s, started
{e(str(doc.get("started_at")))}; verdict <b>{verdict}</b></p>
{f"<ul>{notes}</ul>" if notes else ""}
{_summary(doc)}
{"".join(parts)}"""
    return page(title, body)


def page(title: str, body: str) -> str:
    """One self-contained page: the title as heading, then `body` (HTML, escaped by the caller)."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:1.5em;max-width:1200px}}table{{border-collapse:collapse;margin:.5em 0}}
td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}h2{{margin-top:1.5em}}</style></head>
<body>
<h1>{html.escape(title)}</h1>
{body}
</body></html>
"""


__all__ = ["figures", "html_report", "page", "require_plotly"]
