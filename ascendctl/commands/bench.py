"""`ascendctl bench`: load scenarios against an OpenAI-compatible server, with SLO verdicts."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from typer.core import TyperGroup

from ascendctl.style import spaced
from engine.i18n import N_, Msg, _, shown

# In `bench --help` and `bench run --help`; tests/cli/test_help.py checks it names every
# scenario in engine/bench/scenarios/.
SCENARIOS_HELP = """Built-in scenarios: long-doc (long documents at 16 concurrent), chat-qa (~32
requests/s of short questions), burst (16 concurrent, a jump to 64, back; times the pending queue's
drain), or your own FILE.yaml (start from `--scenario chat-qa --print-scenario`)."""

GROUP_HELP = f"""Load-test a server (`bench URL --scenario S`, the same as `bench run ...`; its options:
`ascendctl bench run --help`), or compare saved reports (`bench compare A.json B.json`).

{SCENARIOS_HELP}"""

HELP = f"""Load-test a server with a scenario and judge it against its SLOs.

{SCENARIOS_HELP}

Goodput, as `vllm bench serve --goodput` counts it: requests meeting every per-request target
given (`--goodput ttft:300 tpot:50 e2el:8000`, in ms, or the scenario's `goodput:`) per second.

Exit codes: 0 every SLO met; 1 an SLO missed; 2 bad scenario or flag; 3 server unreachable;
130 interrupted (the partial report is still printed). An API key is read from VLLM_API_KEY."""

COMPARE_HELP = """Compare saved bench reports side by side; the first is the baseline.

Each figure shows its change against the baseline and whether that change is beyond noise: a 95%
bootstrap confidence interval of the difference, from the per-request samples the reports keep
(seeded, so the verdict repeats). The interval covers the sampling noise of each run, not the drift
between two runs of the same setup: set PCT above that drift (compare two such runs to see it).

The reports are those that `bench run --out FILE` saves.

Exit codes: 0 done; 1 with --fail-if-worse, a figure worse by more than PCT percent and beyond
noise; 2 unreadable or not a bench report."""


class _RunByDefault(TyperGroup):
    """`bench URL ...` runs a scenario (the `run` subcommand); `bench compare ...` compares."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["run", *args]
        elif not args:
            args = ["run"]
        return super().parse_args(ctx, args)


def register(app: typer.Typer) -> None:
    group = typer.Typer(cls=_RunByDefault, help=GROUP_HELP, add_completion=False)
    group.command(
        "run",
        help=HELP,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(bench)
    group.command("compare", help=COMPARE_HELP)(compare)
    app.add_typer(group, name="bench")


def bench(
    ctx: typer.Context,
    url: Optional[str] = typer.Argument(None, help="Server root URL, e.g. http://127.0.0.1:8000"),
    scenario: Optional[str] = typer.Option(None, "--scenario", "-s", help="long-doc | chat-qa | burst | FILE.yaml"),
    scale: float = typer.Option(1.0, "--scale", help="Multiply concurrency, rate, durations and token lengths."),
    duration: Optional[float] = typer.Option(None, "--duration", help="Total seconds (phases keep their proportions)."),
    model: Optional[str] = typer.Option(None, "--model", help="Model name to send (default: the first one served)."),
    out_file: Optional[Path] = typer.Option(None, "--out", help="Also write the JSON report to this file."),
    html_file: Optional[Path] = typer.Option(
        None, "--html", help="Also write a self-contained HTML report with plots (opens offline)."
    ),
    goodput: Optional[List[str]] = typer.Option(
        None,
        "--goodput",
        help="Per-request targets in ms, vLLM's syntax: --goodput ttft:300 tpot:50 e2el:8000 (replaces the scenario's).",
    ),
    print_scenario: bool = typer.Option(False, "--print-scenario", help="Print the scenario as YAML and exit."),
    list_scenarios: bool = typer.Option(False, "--list", help="List the built-in scenarios and exit."),
) -> None:
    from ascendctl.output import get_output
    from engine.bench import scenario as scenarios
    from engine.errors import BadInput

    out = get_output()
    url, pairs = _split_extras(url, list(ctx.args), goodput is not None)
    if list_scenarios:
        items = [(n, scenarios.load_scenario(n)) for n in scenarios.list_scenarios()]
        out.emit(
            {"scenarios": [{"name": n, "description": s.description, "duration_s": s.duration_s} for n, s in items]},
            lambda c: [c.print(f"[bold]{n:<9}[/] {_(s.description)} ({s.duration_s:g} s)") for n, s in items],
        )
        return
    if not scenario:
        raise BadInput(
            _("no scenario given"),
            _("add --scenario with one of {names} or a FILE.yaml").format(names=", ".join(scenarios.list_scenarios())),
        )
    sc = scenarios.scaled(scenarios.load_scenario(scenario), scale)
    if duration is not None:
        sc = scenarios.with_duration(sc, duration)
    if goodput is not None:
        import dataclasses

        sc = dataclasses.replace(sc, goodput=scenarios.parse_goodput([*goodput, *pairs]))
    if print_scenario:
        out.console.out(scenarios.to_yaml(sc), end="", highlight=False)
        return
    if not url:
        raise BadInput(_("no server URL given"), f"ascendctl bench http://127.0.0.1:8000 --scenario {scenario}")
    if out_file is not None:
        _check_writable(out_file)
    if html_file is not None:
        from engine.bench.html import require_plotly

        require_plotly()
        _check_writable(html_file, "--html")

    report = _run(url, sc, model, out)
    from ascendctl.output import SCHEMA_VERSION, to_jsonable
    from engine.bench.report import dumps_report

    doc = {"schema_version": SCHEMA_VERSION, **to_jsonable(report)}
    text = dumps_report(doc)
    out.emit(report, lambda console: render_report(console, report), text=text)
    if html_file is not None:
        from engine.bench.html import html_report

        try:
            html_file.write_text(html_report(doc), encoding="utf-8")
        except OSError as exc:
            raise BadInput(
                _("cannot write the HTML report to {path}: {error}").format(path=html_file, error=exc.strerror or exc),
                _("give --html a writable path (the report above is complete)"),
            ) from None
        out.info(_("HTML report written to {path}").format(path=html_file))
    if out_file is not None:
        try:
            out_file.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise BadInput(
                _(CANNOT_WRITE).format(path=out_file, error=exc.strerror or exc),
                _("give --out a writable path (the report above is complete)"),
            ) from None
        out.info(_("report written to {path}").format(path=out_file))
    if report.interrupted:
        out.warn(_("interrupted: the report covers the requests finished before Ctrl-C"))
        raise typer.Exit(130)
    if not report.passed:
        if out.json_mode:
            out.warn(verdict_line(report))
        raise typer.Exit(1)


def _split_extras(url: Optional[str], extras: list[str], goodput: bool) -> tuple[Optional[str], list[str]]:
    """vLLM's `--goodput ttft:300 tpot:50` takes several values, Click options one: the values after
    the first land among the positional arguments. Sort them out: pairs for --goodput, one URL."""
    from engine.bench.scenario import GOODPUT_KEYS
    from engine.errors import BadInput

    pairs, rest = [], []
    for item in [*([url] if url is not None else []), *extras]:
        if goodput and item.partition(":")[0] in GOODPUT_KEYS:
            pairs.append(item)
        else:
            rest.append(item)
    for item in rest:
        if item.startswith("-"):
            raise BadInput(f"no such option: {item}", "see `ascendctl bench run --help`")
    if len(rest) > 1:
        extra = rest[1]
        hint = "--goodput ttft:MS tpot:MS e2el:MS" if extra.partition(":")[0] in GOODPUT_KEYS else "--help"
        raise BadInput(f"unexpected argument {extra!r}", f"give one server URL; see {hint}")
    return (rest[0] if rest else None), pairs


def _check_writable(path: Path, flag: str = "--out") -> None:
    """Before the run, not after it: an --out that cannot be written would otherwise be found
    only once the whole load test is over. The file is opened for writing the way the report
    will be (permissions, read-only file systems, a directory in the way), then left as it was."""
    import os

    from engine.errors import BadInput

    fix = _("give {flag} a writable path in an existing directory").format(flag=flag)
    if not path.parent.is_dir():
        error = _("{path} is not a directory").format(path=path.parent)
        raise BadInput(_(CANNOT_WRITE).format(path=path, error=error), fix)
    if path.is_dir():
        raise BadInput(_(CANNOT_WRITE).format(path=path, error=_("it is a directory")), fix)
    existed = path.exists()
    try:
        with open(path, "ab"):
            pass
    except OSError as exc:
        raise BadInput(_(CANNOT_WRITE).format(path=path, error=exc.strerror or exc), fix) from None
    if not existed:
        try:
            os.unlink(path)
        except OSError:
            pass


def _run(url: str, sc, model: Optional[str], out):
    """Drive the run on an event loop; the first Ctrl-C stops it and keeps the partial report."""
    import asyncio
    import signal

    from engine.bench import BenchRunner, Progress

    def show(update):
        def on_progress(p: Progress) -> None:
            tput = "N/A" if p.output_tokens_per_s is None else f"{p.output_tokens_per_s:,.0f}"
            waiting = "" if p.waiting is None else f" | queue {p.waiting:.0f}"
            update(
                f"[bold]{sc.name}[/] {p.elapsed_s:.0f}/{p.total_s:.0f}s {p.phase} ({p.load}) | "
                f"{p.in_flight} in flight, {p.completed} ok, {p.failed} failed | {tput} tok/s{waiting}"
            )

        return on_progress

    async def main(update) -> object:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def first_signal() -> None:
            stop.set()
            # A second Ctrl-C is not caught: it ends the program at once.
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, first_signal)
            except (NotImplementedError, RuntimeError):  # not the main thread (e.g. under a test runner)
                pass
        runner = BenchRunner(url, sc, model=model, on_progress=show(update) if out.interactive else None)
        return await runner.run(stop)

    starting = _("bench {scenario}: probing {url}, sizing prompts, one warm-up request").format(
        scenario=sc.name, url=url
    )
    with out.status(starting) as update:
        return asyncio.run(main(update))


def compare(
    reports: List[Path] = typer.Argument(..., help="Saved reports (bench --out); the first is the baseline."),
    fail_if_worse: Optional[float] = typer.Option(
        None,
        "--fail-if-worse",
        metavar="PCT",
        help="Exit 1 when a figure is worse than the baseline's by more than PCT percent and beyond noise.",
    ),
    resamples: int = typer.Option(1000, "--resamples", min=100, max=100_000, help="Bootstrap resamples."),
    seed: int = typer.Option(0, "--seed", help="Seed of the resampling (the same seed gives the same verdicts)."),
) -> None:
    from ascendctl.output import SCHEMA_VERSION, get_output
    from engine.bench.compare import compare as compare_reports
    from engine.bench.compare import load_report
    from engine.errors import BadInput

    out = get_output()
    if len(reports) < 2:
        raise BadInput(_("compare needs at least two reports"), "ascendctl bench compare BASELINE.json OTHER.json")
    if fail_if_worse is not None and (fail_if_worse < 0 or fail_if_worse != fail_if_worse):
        raise BadInput(
            _("--fail-if-worse must be a percentage >= 0, got {value}").format(value=fail_if_worse),
            _("e.g. --fail-if-worse 5"),
        )
    docs = [load_report(p, SCHEMA_VERSION) for p in reports]
    result = compare_reports(
        docs, [str(p) for p in reports], resamples=resamples, seed=seed, fail_if_worse_pct=fail_if_worse
    )
    out.emit(result, lambda console: render_comparison(console, result))
    if not result.passed:
        if out.json_mode:
            out.warn(
                f"worse than the baseline beyond noise and by more than {fail_if_worse:g}%: {', '.join(result.worse)}"
            )
        raise typer.Exit(1)


CANNOT_WRITE = N_("cannot write the report to {path}: {error}")


def render_comparison(console, c) -> None:
    from rich.table import Table

    from ascendctl.style import safe

    head = _(
        "baseline {baseline} ({scenario}); change ± half of its {confidence:.0%} bootstrap interval "
        "({resamples} resamples, seed {seed}); ~ within noise"
    ).format(
        baseline=safe(c.baseline),
        scenario=safe(c.scenarios[0]),
        confidence=c.confidence,
        resamples=f"{c.resamples:,}",
        seed=c.seed,
    )
    console.print("[bold]bench compare[/]" + _(": ") + head)
    for note in c.notes:
        console.print("  [yellow]" + spaced(_("note:")) + "[/]" + safe(note))
    if c.goodput_slo_ms:
        targets = " ".join(f"{k}:{v:g} ms" for k, v in c.goodput_slo_ms.items())
        console.print("  " + spaced(_("goodput targets:")) + targets)
    short = _short_names(c.reports)
    if short != list(c.reports):
        console.print("  " + "; ".join(f"{s} = {safe(n)}" for s, n in zip(short, c.reports)))
    t = Table(show_edge=False)
    t.add_column(_("figure"), no_wrap=True)
    t.add_column(safe(short[0]), justify="right", no_wrap=True)
    for name in short[1:]:
        t.add_column(safe(name), justify="right", no_wrap=True)
        t.add_column(_("change"), justify="right", no_wrap=True)
    for row in c.figures:
        spec = ".2%" if row.unit == "" else ",.1f"
        label = _(row.label)
        cells = [f"{label} {row.unit}" if row.unit else label, _fmt(row.baseline, spec)]
        for ch in row.changes:
            cells.append(_fmt(ch.value, spec))
            cells.append(_change_cell(ch))
        t.add_row(*cells)
    console.print(t)
    if c.fail_if_worse_pct is not None:
        if c.worse:
            worse = _("worse beyond noise by more than {pct}%: {figures}").format(
                pct=f"{c.fail_if_worse_pct:g}", figures=safe(_(", ").join(shown(w) for w in c.worse))
            )
            console.print(f"[bold red]{worse}[/]")
        else:
            same = _("nothing worse beyond noise by more than {pct}%").format(pct=f"{c.fail_if_worse_pct:g}")
            console.print(f"[bold green]{same}[/]")


def _short_names(paths) -> list[str]:
    """File names without their folder when that keeps them apart, else the paths as given."""
    names = [Path(p).name for p in paths]
    return names if len(set(names)) == len(names) else list(paths)


def _change_cell(ch) -> str:
    if ch.change_pct is None:
        text = {"same": _("same")}.get(ch.verdict, ch.verdict)
    else:
        # The interval as a half-width: asymmetric ones are in the JSON (ci_pct).
        ci = f"±{(ch.ci_pct[1] - ch.ci_pct[0]) / 2:.1f}" if ch.ci_pct else ""
        text = f"{ch.change_pct:+.1f}{ci}%"
    style = {"worse": "red", "better": "green"}.get(ch.verdict)
    mark = {"worse": " " + _("worse"), "better": " " + _("better"), "same": " ~"}.get(ch.verdict, "")
    return f"[{style}]{text}{mark}[/]" if style else f"{text}{mark}"


# ---------------------------------------------------------------- the human view


def _fmt(value, spec: str = ",.1f", unit: str = "") -> str:
    if value is None:
        return "N/A"
    return f"{value:{spec}}{unit}"


def _prefix_cache(server) -> str:
    from engine.bench.report import prefix_cache_phrase

    phrase = prefix_cache_phrase(server.prefix_cache_hit_share)
    return f", {phrase}" if phrase else ""


BURST_MS = 0.1  # a median gap this small is tokens read together, not a decode speed


def _ms(value) -> str:
    """A latency in ms with the digits it needs: 3.2, 0.042 (not 0.0), 0 when it is exactly 0."""
    if value is None:
        return "N/A"
    if value == 0:
        return "0"
    if abs(value) < 1:
        return f"{value:.2g}"
    return f"{value:,.1f}"


def verdict_line(report) -> str:
    missed = [v for v in report.slo if v.ok is False]
    if report.interrupted:
        return _("verdict: INCOMPLETE (interrupted)")
    if not report.slo:
        return _("verdict: no SLOs in this scenario")
    if not missed:
        unjudged = [v for v in report.slo if v.ok is None and v.why]
        na = sum(1 for v in report.slo if v.ok is None) - len(unjudged)
        met = len(report.slo) - na - len(unjudged)
        parts = [_("{count} SLOs met").format(count=met)]
        parts += [_("{count} not applicable").format(count=na)] if na else []
        parts += [_("{slo} not judged, {why}").format(slo=v.name, why=_why_head(v.why)) for v in unjudged]
        if len(parts) > 1:
            return _("verdict: PASS ({parts})").format(parts=_(", ").join(parts))
        return _("verdict: PASS (all {count} SLOs met)").format(count=len(report.slo))
    names = ", ".join(v.name for v in missed)
    return _("verdict: FAIL ({missed} of {count} SLOs missed: {names})").format(
        missed=len(missed), count=len(report.slo), names=names
    )


def _why_head(why) -> str:
    """What kind of excuse a not-judged SLO has ("within noise", "client-bound"), translated."""
    import re

    return re.split("[:：]", shown(why), maxsplit=1)[0]


def _verdict_cell(v) -> str:
    if v.ok is None:
        return f"[yellow]{_why_head(v.why)}[/]" if v.why else "[dim]N/A[/]"
    return "[green]PASS[/]" if v.ok else "[red]FAIL[/]"


def render_report(console, r) -> None:
    from rich.table import Table

    from ascendctl.style import safe

    # The model name and error bodies come from the server, the description from a scenario file.
    head = _("against {url} (model {model}, {api} API), {seconds:.1f} s, started {started}").format(
        url=safe(r.url), model=safe(r.model), api=r.api, seconds=r.duration_s, started=r.started_at
    )
    console.print(f"[bold]bench {safe(r.scenario)}[/] {head}")
    if r.description:
        console.print(f"  {safe(shown(r.description) if isinstance(r.description, Msg) else _(r.description))}")
    for note in r.notes:
        console.print("  [yellow]" + spaced(_("note:")) + "[/]" + safe(note))

    console.print(
        _(
            "requests: {ok} ok, {failed} failed, {cancelled} cancelled (error rate {error_rate}); {rate} req/s; "
            "output {tokens} tokens, {tps} tok/s; prompts ~{prompt} tokens (sized by {sizing})"
        ).format(
            ok=r.completed,
            failed=r.failed,
            cancelled=r.cancelled,
            error_rate=_fmt(r.error_rate, ".2%"),
            rate=_fmt(r.request_rate, ",.2f"),
            tokens=f"{r.output_tokens:,}",
            tps=_fmt(r.output_tokens_per_s, ",.1f"),
            prompt=_fmt(r.prompt_tokens.mean, ",.0f"),
            sizing=r.prompt_tokens_sizing,
        )
    )
    if r.goodput is not None:
        g = r.goodput
        targets = " ".join(f"{k}:{v:g}" for k, v in g.slo_ms.items())
        console.print(
            _("goodput ({targets} ms): {good} requests met every target ({share}), {rate} req/s").format(
                targets=targets, good=f"{g.good:,}", share=_fmt(g.share, ".1%"), rate=_fmt(g.rate, ",.2f")
            )
        )
    for kind, count in sorted(r.errors.items(), key=lambda kv: -kv[1]):
        console.print(f"  [red]{safe(kind)}[/] x{count}: {safe(r.error_examples.get(kind, ''))}")

    lat = Table(title=_("latency (ms)"), title_justify="left", show_edge=False)
    for col in ("", "p50", "p90", "p99", _("mean"), _("max"), _("samples")):
        lat.add_column(col, justify="right" if col else "left")
    for label, s in (("TTFT", r.ttft_ms), ("ITL", r.itl_ms), ("TPOT", r.tpot_ms), ("E2E", r.e2e_ms)):
        lat.add_row(label, _ms(s.p50), _ms(s.p90), _ms(s.p99), _ms(s.mean), _ms(s.max), str(s.count))
    console.print(lat)
    bursts = [
        f"{label} p50 is {_ms(s.p50)} ms"
        for label, s in (("ITL", r.itl_ms), ("TPOT", r.tpot_ms))
        if s.p50 is not None and s.p50 < BURST_MS
    ]
    if bursts:
        console.print(
            f"  {' and '.join(bursts)}: most tokens reached the client in one read with the token before them "
            "(flushed together by the server, or read late by a busy client); the ITL mean carries the decode speed"
        )

    if len(r.phases) > 1 or r.queue is not None:
        ph = Table(title=_("phases"), title_justify="left", show_edge=False)
        for i, col in enumerate((_("phase"), _("load"), "s", _("sent"), "ok", _("failed"), "req/s", "out tok/s")):
            ph.add_column(col, justify="left" if i < 2 else "right")
        for p in r.phases:
            ph.add_row(
                p.name,
                p.load,
                _fmt(p.duration_s, ".0f"),
                str(p.sent),
                str(p.completed),
                str(p.failed),
                _fmt(p.request_rate, ",.2f"),
                _fmt(p.output_tokens_per_s, ",.1f"),
            )
        console.print(ph)
    if r.queue is not None:
        q = r.queue
        head = _(
            "engine queue (vllm:num_requests_waiting): {baseline} before the {phase} phase, peak {peak} during it"
        ).format(baseline=_fmt(q.baseline, ".0f"), phase=q.after_phase, peak=_fmt(q.peak, ".0f"))
        if q.formed is None:
            tail = _(
                "; no /metrics reading came back during it (the engine answered too slowly), so no drain time (N/A)"
            )
        elif not q.formed:
            tail = _("; no queue formed, so no drain time (N/A)")
        elif q.drain_s is not None:
            tail = _(", back to that level {seconds:.2f} s after it ended").format(seconds=q.drain_s)
        elif r.interrupted:
            tail = _("; drain time N/A (interrupted before the queue drained)")
        else:
            tail = _(", did not drain back to that level")
        console.print(head + tail + _(" ({count} samples)").format(count=q.samples))
        if q.kv_peak is not None:
            head = _("KV cache (vllm:kv_cache_usage_perc): {baseline} used before the burst, peak {peak}").format(
                baseline=_fmt(q.kv_baseline, ".0%"), peak=_fmt(q.kv_peak, ".0%")
            )
            if not q.kv_formed:
                tail = _("; the burst did not raise it, so no drain time (N/A)")
            elif q.kv_drain_s is not None:
                tail = _(", back down (within 5 points) {seconds:.2f} s after it ended").format(seconds=q.kv_drain_s)
            elif r.interrupted:
                tail = _("; drain time N/A (interrupted)")
            else:
                tail = _(", [red]did not come back down[/] before the run ended")
            console.print(head + tail)
    if r.server is not None:
        console.print(
            _(
                "engine counters over the run: {generated} generated tokens (client counted {counted}), "
                "{finished} requests finished"
            ).format(
                generated=_fmt(r.server.generation_tokens, ",.0f"),
                counted=f"{r.output_tokens:,}",
                finished=_fmt(r.server.requests_ok, ",.0f"),
            )
            + _prefix_cache(r.server)
        )
    g = r.generator
    if g.offered_rate is not None:
        behind = " [red]" + _("(fell behind)") + "[/]" if g.behind else ""
        console.print(
            _("load generator: offered {rate} req/s, schedule lag p99 {lag} ms").format(
                rate=f"{g.offered_rate:,.2f}", lag=_fmt(g.lag_p99_ms, ",.1f")
            )
            + behind
        )

    if r.slo:
        t = Table(title=_("SLOs"), title_justify="left", show_edge=False)
        for col in ("SLO", _("target"), _("measured"), _("verdict")):
            t.add_column(col, justify="left" if col == "SLO" else "right")
        for v in r.slo:
            op = "<=" if v.bound == "max" else ">="
            spec = ".2%" if v.name in ("error_rate", "goodput_share") else ",.1f"
            unit = f" {v.unit}" if v.unit else ""
            t.add_row(
                v.name,
                f"{op} {_fmt(v.target, spec)}{unit}",
                f"{_fmt(v.actual, spec)}{unit if v.actual is not None else ''}",
                _verdict_cell(v),
            )
        console.print(t)
        for v in r.slo:
            if v.ok is None and v.why:
                console.print("  " + _("{slo} not judged: {why}").format(slo=v.name, why=safe(shown(v.why))))
    line = verdict_line(r)
    color = "green" if r.passed else "yellow" if r.interrupted else "red"
    console.print(f"[bold {color}]{line}[/]")
