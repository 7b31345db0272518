"""Rich renderables of a Snapshot: the same panels for the Textual dashboard and `top --once`.

Only formatting lives here; every number, and every figure's level, comes from the snapshot.
"""

from __future__ import annotations

import math
import time
from typing import Iterable, Mapping, Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ascendctl.style import NA, age, cells, clean, ljust_cells, num, plain, seconds, severity_style, size, spaced
from engine.i18n import N_, _
from engine.runs import short_name
from engine.severity import Severity
from engine.severity import rank as severity_rank
from engine.telemetry.faults import chip_mark
from engine.telemetry.logmarks import MarkedLine
from engine.telemetry.snapshot import Diagnostic, EngineView, ProxyView, Snapshot, SourceStatus
from engine.telemetry.thresholds import Thresholds

_SPARK = "▁▂▃▄▅▆▇█"


def level_style(level: Severity | None) -> str:
    """Gauges (bars, percentages, temperatures, health) always wear their level's colour."""
    return severity_style(level)


def alert_style(level: Severity | None) -> str:
    """Counts stay plain while they are fine: only a level above OK colours them."""
    return severity_style(level) if level is not None and level > Severity.OK else ""


def sparkline(values: Sequence[float | None], width: int = 12) -> str:
    """Unicode sparkline of the last `width` values; gaps (source down, or a NaN / Inf sample,
    which int() would raise on) show as spaces."""
    tail = [v if v is not None and math.isfinite(v) else None for v in list(values)[-width:]]
    known = [v for v in tail if v is not None]
    if not known:
        return " " * len(tail)
    top = max(known) or 1.0
    return "".join(" " if v is None else _SPARK[max(0, min(7, int(v / top * 7.999)))] for v in tail)


def bar(fraction: float | None, width: int = 16) -> str:
    if fraction is None or not math.isfinite(fraction):
        return "·" * width
    filled = max(0, min(width, round(fraction * width)))
    return "█" * filled + "░" * (width - filled)


def _status_text(status: SourceStatus | None) -> Text:
    if status is None:
        return Text(W("off"), style=severity_style(None))
    if status.ok:
        return Text(W("up"), style=severity_style(Severity.OK))
    return Text(W("DOWN"), style=severity_style(Severity.CRITICAL))


# The dashboard's short labels, marked for the catalogue; W() gives one in the messages' language.
WORDS = (
    N_("model"), N_("running"), N_("pending"), N_("preempted"), N_("rejected"), N_("KV blocks"), N_("used"),
    N_("free"), N_("total"), N_("prompt"), N_("generation"), N_("prefix hit"), N_("req"), N_("last"), N_("tick"),
    N_("PAUSED"), N_("health"), N_("memory GiB"), N_("util%"), N_("power"), N_("temp"), N_("procs"), N_("up"),
    N_("DOWN"), N_("off"),
    # engine.severity's words, as a diagnostic's row shows them
    N_("critical"), N_("error"), N_("warning"), N_("info"),
)  # fmt: skip


def W(word: str) -> str:
    return _(word)


def _rjust(text: str, width: int) -> str:
    return " " * max(0, width - cells(text)) + text


def _never_or_last_ok(status: SourceStatus) -> str:
    if status.last_ok is None:
        return _("never reached")
    return _("last ok {age} ago").format(age=age(status.age_s))


def devices_table(snap: Snapshot) -> Text:
    """Fixed-width lines rather than a rich Table: this is redrawn every tick and a Table's
    measuring pass costs more than everything else on the screen together."""
    src = snap.device_source
    if src is None and not snap.devices:
        return Text(_("Devices: not polled"), style="dim")
    out = Text()
    # --no-devices with remote exporters: this host's are not polled, theirs are still shown
    out.append(
        (
            _("Devices ({source})").format(source=src.name)
            if src is not None
            else _("Devices (remote hosts; this host's not polled)")
        )
        + "\n",
        style="bold",
    )
    # Column heads in the messages' language, padded by terminal columns (a Chinese character
    # takes two); each translation fits the width of its column's figures.
    dev, name = _("dev"), _("name")
    # The fault column only when a chip has a fault: a healthy table keeps its width.
    marks = [chip_mark(d) for d in snap.devices]
    fault = "  " + _("fault") if any(m is not None for m in marks) else ""
    key_w = max([cells(dev)] + [len(d.key) for d in snap.devices])
    name_w = max([cells(name)] + [len(d.name) for d in snap.devices])
    out.append(
        f"{ljust_cells(dev, key_w)}  {ljust_cells(name, name_w)}  {ljust_cells(_('health'), 8)} "
        f"{ljust_cells(_('memory GiB'), 22)} {'BW%':>4} {_rjust(_('util%'), 5)} {'aicpu%':>6} "
        f"{_rjust(_('power'), 6)} {_rjust(_('temp'), 5)} {_rjust(_('procs'), 5)}{fault}",
        style="bold underline",
    )
    for d, mark in zip(snap.devices, marks):
        pct, levels = d.mem_pct, snap.device_levels.get(d.key, {})
        used = num(None if d.mem_used_mb is None else d.mem_used_mb / 1024, "{:.1f}")
        total = num(None if d.mem_total_mb is None else d.mem_total_mb / 1024, "{:.0f}")
        # Names and health words come from npu-smi or a remote exporter: text, never escapes.
        out.append(f"\n{clean(d.key):<{key_w}}  {clean(d.name):<{name_w}}  ")
        out.append(f"{clean(d.health or NA):<8}", style=level_style(levels.get("health")))
        out.append(" ")
        out.append(bar(None if pct is None else pct / 100, 10), style=level_style(levels.get("mem_pct")))
        out.append(f" {used + '/' + total + 'G':<11} ")
        out.append(f"{num(d.mem_bw_pct):>4}", style=level_style(levels.get("mem_bw_pct")))
        # AI CPU runs the operators AI Core cannot; operators watch it stay low while serving.
        out.append(f" {num(d.util_pct):>5} {num(d.aicpu_pct):>6} {num(d.power_w, '{:.0f}', 'W'):>6} ")
        out.append(f"{num(d.temp_c, '{:.0f}', 'C'):>5}", style=level_style(levels.get("temp_c")))
        out.append(f" {num(d.processes):>5}")
        # A chip with an active fault code: what to do about it (the action class of its code).
        if mark is not None:
            out.append(f"  {clean(mark[0])}", style=severity_style(Severity(mark[1])))
    if src is not None and not src.ok:
        since = _never_or_last_ok(src)
        down = _("{source} DOWN ({since}): {error}").format(source=src.name, since=since, error=clean(src.error))
        out.append("\n" + down, style=severity_style(Severity.ERROR))
        if src.fix:
            out.append("\n  " + spaced(_("fix:")) + clean(src.fix), style="dim")
    elif not snap.devices:
        out.append("\n" + _("no devices"), style="dim")
    return out


def engine_head(e: EngineView) -> Text:
    """The engine's name, whether it answers, and its model."""
    head = Text()
    head.append(f"{clean(short_name(e.label))} ", style="bold")
    head.append_text(_status_text(e.status))
    role = getattr(e, "role", None)
    if role:  # the part of a pd / external-dp layout it is
        head.append(f"  {clean(role)}", style="bold")
    if e.model:  # the model name is a label of the engine's /metrics: text, never escapes
        head.append(f"  {W('model')} {clean(e.model)}", style="dim")
    return head


def engine_figures(e: EngineView, thresholds: Thresholds, p90: bool = False) -> list[Text]:
    """Its figures, a few short lines: load, KV pool, throughput and caches, latencies (`p90`:
    the middle percentile too, where there is room for it)."""
    r, kv, h, levels = e.rates, e.kv, e.history, e.levels
    lines = []
    if not e.status.ok:
        since = _never_or_last_ok(e.status)
        since = _("{since}: {error}").format(since=since, error=clean(e.status.error))
        lines.append(Text(f"  {since}", style=severity_style(Severity.ERROR)))
    load = Text(f"  {W('running')} {num(e.running):>4} {sparkline(h.get('running', ()))}  {W('pending')} ")
    load.append(f"{num(e.waiting):>4} {sparkline(h.get('waiting', ()))}", style=alert_style(levels.get("waiting")))
    load.append(f"  {W('preempted')} {num(e.preemptions)}")
    if r.preemptions_in_window:
        load.append(f" (+{r.preemptions_in_window:.0f})", style=alert_style(levels.get("preemptions_in_window")))
    load.append(f"  {W('rejected')} {num(e.admission_rejections)}")
    usage_pct = None if kv.usage is None else kv.usage * 100
    pool = Text(f"  {W('KV blocks')} ")
    pool.append(bar(kv.usage, 16), style=level_style(levels.get("kv_usage")))
    pool.append(
        f" {num(usage_pct, '{:.1f}', '%')}  {W('used')} {num(kv.used_blocks)}  {W('free')} {num(kv.free_blocks)}"
        f"  {W('total')} {num(kv.total_blocks)}"
    )
    flow = Text(
        f"  {W('prompt')} {num(r.prompt_tps, '{:.1f}')} tok/s {sparkline(h.get('prompt_tps', ()))}"
        f"  {W('generation')} {num(r.generation_tps, '{:.1f}')} tok/s {sparkline(h.get('generation_tps', ()))}"
    )
    cache = Text(
        f"  {W('prefix hit')} {num(None if r.prefix_hit_rate is None else r.prefix_hit_rate * 100, '{:.0f}', '%')}"
    )
    tiers = {k: v for k, v in r.cached_tps_by_tier.items() if k in ("device", "host") or v}
    if tiers:
        cache.append("  cached tok/s " + " ".join(f"{k} {v:.0f}" for k, v in tiers.items()))
    if r.offload_per_s:
        cache.append("  offload/s " + " ".join(f"{k.split(':')[-1]} {v:.0f}" for k, v in r.offload_per_s.items()))
    mid = (lambda p: f" p90 {seconds(p.p90)}") if p90 else (lambda p: "")
    lat = Text(
        f"  TTFT p50 {seconds(r.ttft.p50)}{mid(r.ttft)} p99 {seconds(r.ttft.p99)}"
        f"  ITL p50 {seconds(r.itl.p50)}{mid(r.itl)} p99 {seconds(r.itl.p99)}"
        f"  ({r.ttft.count:.0f} {W('req')} / {_window(r.window_span_s, thresholds.window_s)})",
        style="" if r.ttft.count else "dim",
    )
    return [*lines, load, pool, flow, cache, lat, *container_line(e)]


def container_line(e: EngineView) -> list[Text]:
    """The container an engine runs in (found by its label): its CPU, memory and NPUs; nothing
    for an engine on the host."""
    c = getattr(e, "container", None)
    if c is None:
        return []
    mem = None if c.memory_mb is None else c.memory_mb / 1024
    limit = f" / {c.memory_limit_mb / 1024:.1f} GiB" if c.memory_limit_mb else ""
    npus = "N/A" if c.npus is None else ",".join(map(str, c.npus)) or "none"
    return [
        Text(
            f"  {clean(c.runtime)} container {clean(c.name)}  CPU {num(c.cpu_percent, '{:.0f}', '%')}"
            f"  memory {num(mem, '{:.1f}', ' GiB')}{limit}  NPUs {npus}",
            style="dim",
        )
    ]


def restarts_text(serve) -> str:
    """`restarts 2 (last: hang)` of an engine.telemetry.ServeView."""
    why = _(" (last: {reason})").format(reason=clean(serve.restart_reason)) if serve.restart_reason else ""
    return _("restarts {count}{why}").format(count=serve.restarts, why=why)


def hangs_text(serve) -> str | None:
    """`hung 2x, last: <the verdict>; evidence in <dir>`; None for a run with no hang."""
    if not serve.hangs:
        return None
    summary = clean(serve.last_hang or NA)
    if serve.last_hang_evidence:
        return _("hung {count}x, last: {summary}; evidence in {path}").format(
            count=serve.hangs, summary=summary, path=clean(serve.last_hang_evidence)
        )
    return _("hung {count}x, last: {summary}").format(count=serve.hangs, summary=summary)


def serve_lines(serve) -> list[Text]:
    """What `ascendctl serve` did to the engine (engine.telemetry.ServeView): its restarts and why
    the last, and its hangs with the last verdict and where the evidence is. Nothing for an
    engine known only by its URL, or a run with neither."""
    if serve is None or not (serve.restarts or serve.hangs):
        return []
    lines = [Text(f"  {restarts_text(serve)}", style=severity_style("warning") if serve.hangs else "dim")]
    hung = hangs_text(serve)
    if hung:
        lines.append(Text(f"  {hung}", style=severity_style("warning")))
    return lines


def _window(span_s: float | None, window_s: float) -> str:
    """The time the latency figures cover: the window, or less while the scrapes do not span it
    yet (`top --once`: two scrapes a second apart), so `0 req` is never claimed for a minute."""
    if span_s is None or span_s >= window_s - 0.5:
        return f"{window_s:.0f}s"
    return W("last") + (f" {max(span_s, 0.1):.1f}s" if span_s < 10 else f" {span_s:.0f}s")


def engine_panel(e: EngineView, thresholds: Thresholds, selected: bool = False) -> Text:
    """A few short lines per engine; the `selected` one (the dashboard's cursor) is marked."""
    head = engine_head(e)
    if selected:
        head = Text.assemble(("▶ ", "bold"), head)
    return Text("\n").join([head, *engine_figures(e, thresholds), *serve_lines(getattr(e, "serve", None))])


def engines_group(snap: Snapshot, selected: int | None = None) -> Text:
    """The engines, then the proxies of pd / external-dp layouts (after the engines: the
    dashboard's cursor walks the engines' blocks only)."""
    proxies = getattr(snap, "proxies", ())
    if not snap.engines:
        none = Text(_("Engines: none (pass a URL, or start one with `ascendctl serve`)"), style="dim")
        return Text("\n").join([none, proxies_group(proxies)]) if proxies else none
    panels = (engine_panel(e, snap.thresholds, n == selected) for n, e in enumerate(snap.engines))
    group = [Text(_("Engines"), style="bold"), *panels]
    if proxies:
        group.append(proxies_group(proxies))
    return Text("\n").join(group)


def proxy_lines(p: ProxyView) -> list[Text]:
    """A proxy's name and state, then a line per role: backends up of total, the requests sent
    (and per second), the failures, the requests refused for want of a backend, the ones down."""
    head = Text()
    head.append(f"{clean(short_name(p.label))} ", style="bold")
    head.append_text(_status_text(p.status))
    head.append("  " + _("proxy") + f"  {clean(p.url)}", style="dim")
    lines = [head]
    if not p.status.ok:
        since = _("{since}: {error}").format(since=_never_or_last_ok(p.status), error=clean(p.status.error))
        lines.append(Text(f"  {since}", style=severity_style(Severity.ERROR)))
    for r in p.roles():
        line = Text(f"  {clean(r.role):<8} ")
        short = r.up < r.total
        line.append(
            _("{up}/{total} up").format(up=r.up, total=r.total),
            style=severity_style(Severity.CRITICAL if r.up == 0 else Severity.WARNING) if short else "",
        )
        per_s = f" ({r.requests_per_s:.1f}/s)" if r.requests_per_s is not None else ""
        line.append("  " + _("requests {count}").format(count=num(r.requests)) + per_s)
        line.append("  ")
        line.append(_("failed {count}").format(count=num(r.failures)), style="bold yellow" if r.failures else "")
        line.append("  ")
        line.append(
            _("refused {count}").format(count=num(r.refused)), style=severity_style(Severity.ERROR) if r.refused else ""
        )
        down = [b.backend for b in p.backends if b.role == r.role and b.up is False]
        if down:
            line.append("  " + _("down: {backends}").format(backends=", ".join(map(clean, down))), style="dim")
        lines.append(line)
    if p.status.ok and not p.backends:
        lines.append(Text("  " + _("no backend on its page"), style="dim"))
    return lines


def proxies_group(proxies: Sequence[ProxyView]) -> Text:
    return Text("\n").join([Text(_("Proxies"), style="bold"), *(line for p in proxies for line in proxy_lines(p))])


def routed_by(e: EngineView, snap: Snapshot) -> list[Text]:
    """Which proxy of the snapshot routes to the engine, and what it sent it; nothing for an
    engine no proxy names."""
    out = []
    for p in getattr(snap, "proxies", ()):
        b = p.routes_to(e.url)
        if b is None:
            continue
        state = _("up") if b.up else _("DOWN") if b.up is False else NA
        out.append(
            Text(
                "  "
                + _("proxy {proxy} routes {role} requests here ({state}): {requests} sent, {failures} failed").format(
                    proxy=clean(short_name(p.label)),
                    role=clean(b.role),
                    state=state,
                    requests=num(b.requests),
                    failures=num(b.failures),
                ),
                style="" if b.up is not False else severity_style(Severity.WARNING),
            )
        )
    return out


def kv_transfer_lines(e: EngineView, thresholds: Thresholds) -> list[Text]:
    """The KV connector's transfers over the window, as its metrics give them (NIXL); for an
    engine of a prefill / decode layout whose connector exports none (Mooncake on vllm-ascend),
    a line that says so rather than zeros. Nothing for other engines."""
    kv = getattr(e.rates, "kv_transfer", None)
    if kv is None:
        if getattr(e, "role", None) not in ("prefill", "decode") or not e.status.ok:
            return []
        return [
            Text(
                "  "
                + _(
                    "KV transfer: the connector exports no metrics (Mooncake on vllm-ascend does not);"
                    " kv-fetch-stuck and kv-transfer-failing watch the requests and the log"
                ),
                style="dim",
            )
        ]
    rate = f"{num(kv.transfers_per_s, '{:.1f}')}/s"
    line = Text(
        "  "
        + _("KV transfer {rate}  {bytes}/s  avg {avg}  descriptors {descs}").format(
            rate=rate,
            bytes=size(kv.bytes_per_s),
            avg=seconds(kv.avg_transfer_s),
            descs=num(kv.avg_descriptors, "{:.0f}"),
        )
    )
    line.append("  ")
    line.append(
        _("failed {count}").format(count=num(kv.failed)),
        style=severity_style(Severity.ERROR) if kv.failed else "",
    )
    if kv.expired:
        line.append("  " + _("expired {count}").format(count=num(kv.expired)), style=severity_style(Severity.WARNING))
    line.append(f"  ({_window(e.rates.window_span_s, thresholds.window_s)})", style="dim")
    return [line]


# The history series (engine.metrics.catalog HISTORY_KEYS) as the engine screen names them.
HISTORY_LABELS = {
    "running": "running",
    "waiting": "pending",
    "prompt_tps": "prompt tok/s",
    "generation_tps": "generation tok/s",
}


def history_lines(history: Mapping[str, Sequence[float | None]], width: int = 60) -> Text:
    """Each history series as a sparkline of its last `width` polls and its latest value."""
    out = Text()
    out.append(f"History (last {width} polls)", style="bold")
    name_w = max([len(v) for v in HISTORY_LABELS.values()] + [len(k) for k in history])
    for key, values in history.items():
        latest = values[-1] if values else None
        value = num(latest, "{:.1f}" if key.endswith("_tps") else "{:.0f}")
        out.append(f"\n  {HISTORY_LABELS.get(key, key):<{name_w}} {value:>8}  {sparkline(values, width)}")
    if not history:
        out.append("\n  no samples yet", style="dim")
    return out


LOG_MARK = "● "


def marked_log(lines: Iterable[MarkedLine]) -> Text:
    """Log lines behind a gutter; a line a known issue matched gets a marker in the issue's colour
    and, under it, the rule's id and title (on the line's own end they would be cropped away)."""
    out: list[Text] = []
    for line in lines:
        text = Text(clean(line.text))
        if not line.marks:
            out.append(Text("  ") + text)
            continue
        worst = max(line.marks, key=lambda m: severity_rank(m.severity))
        out.append(Text.assemble((LOG_MARK, severity_style(worst.severity)), text))
        for m in line.marks:
            out.append(Text(f"  ↳ {m.id}: {clean(m.title)}", style=severity_style(m.severity)))
    return Text("\n").join(out) if out else Text("(the log is empty)", style="dim")


def diagnostic_cells(d: Diagnostic) -> tuple[Text, Text, Text, Text]:
    """One diagnostic's row, for `top --once` and the dashboard's table alike. Titles and fixes
    quote the engine's log (a known issue's example, a model name): plain text, never markup."""
    return (
        plain(_(d.severity), style=severity_style(d.severity)),
        plain(short_name(d.subject)),
        plain(d.title + (f" (x{d.count})" if d.count > 1 else "")),
        plain(d.fix),
    )


def diagnostics_table(diagnostics: Iterable[Diagnostic]) -> RenderableType:
    table = Table(title=_("Diagnostics"), title_justify="left", expand=True, show_edge=False, pad_edge=False)
    table.add_column(_("severity"), no_wrap=True)
    table.add_column(_("on"), no_wrap=True)
    table.add_column(_("issue"), ratio=2, overflow="fold")
    table.add_column(_("fix"), ratio=3, overflow="fold")
    rows = list(diagnostics)
    for d in rows:
        table.add_row(*diagnostic_cells(d))
    if not rows:
        table.add_row(Text(_("ok"), style=severity_style(Severity.OK)), "", _("nothing to report"), "")
    return table


def header_line(snap: Snapshot | None, paused: bool = False, note: str = "", mode: str = "") -> Text:
    text = Text("ascendctl top", style="bold")
    if mode:  # the replay position, the charts' window: first, so a narrow terminal still shows it
        text.append(f"  {mode}", style="bold")
    if snap is not None:
        text.append(f"  {time.strftime('%H:%M:%S', time.localtime(snap.time))}  {W('tick')} {snap.seq}")
        text.append(
            "  "
            + _("{devices} devices  {engines} engines").format(devices=len(snap.devices), engines=len(snap.engines))
        )
    if paused:
        text.append(f"  {W('PAUSED')} ", style="bold black on yellow")
    if note:
        text.append(f"  {clean(note)}", style="dim")
    return text


def frame(snap: Snapshot) -> RenderableType:
    """The whole dashboard as one printable frame (`top --once`)."""
    return Group(
        header_line(snap),
        Text(""),
        devices_table(snap),
        Text(""),
        engines_group(snap),
        Text(""),
        diagnostics_table(snap.diagnostics),
    )
