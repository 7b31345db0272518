"""`ascendctl top`: the live dashboard; `--once` / `--json` print snapshots without the TUI.

The dashboard itself (also opened by `ascendctl demo`) is in ascendctl.dashboard.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer

from ascendctl.dashboard import (
    default_devices,
    make_collector,
    open_recorder,
    poll_and_record,
    resolve_thresholds,
    run_app,
)
from engine import i18n

if TYPE_CHECKING:
    from engine.telemetry import Collector, Snapshot

HELP = """Live dashboard: every NPU (HBM, bandwidth, AI Core, power, temperature, health), every
engine (running / pending, KV block pool, preemptions, tokens/s, TTFT and ITL percentiles) and a
diagnostics table (known issues in the engine log + threshold rules).

With no URL it watches the live runs started by `ascendctl serve`. When stdout is not a terminal
it prints one frame (as --once). --json prints one snapshot, or NDJSON every --interval seconds
(with --once, one snapshot whose rates span --interval).

Thresholds: built-in defaults, then --profile's diagnostics section, then --thresholds FILE
(YAML, any subset of keys), then --set. A run started by `ascendctl serve` also brings its own
profile's pending-requests threshold.

Charts: c switches to history charts (per chip HBM used, bandwidth and AI Core; per engine
tokens/s, requests, KV cache and p99 latencies), w cycles their window (5, 15, 60 min).

--replay FILE plays a --record file back at --speed (1, 10, 60 or any factor above 0): keys
+ / - change the speed, ] / [ jump 5 min ahead / back, home / end, p pauses the replay.
Keys in the dashboard: q quit, p pause, r refresh, s save snapshot, c charts, w chart window, ? help,
Tab engines / diagnostics, Enter opens the selected engine's screen (its profile and plan,
diagnostics and log tail with known issues marked; m previous marked line, Esc back) or the
selected diagnostic's details."""


def register(app: typer.Typer) -> None:
    app.command("top", help=HELP)(top)


def top(
    urls: Optional[List[str]] = typer.Argument(None, help="vLLM server URLs (default: live `ascendctl serve` runs)."),
    once: bool = typer.Option(
        False, "--once", help="Print one frame and exit (the default when stdout is not a terminal)."
    ),
    interval: Optional[float] = typer.Option(
        None, "--interval", "-n", min=0.1, help="Seconds between polls (1 when not given). With --json: stream NDJSON."
    ),
    count: Optional[int] = typer.Option(
        None, "--count", min=1, help="With --json --interval: stop after this many snapshots."
    ),
    record: Optional[Path] = typer.Option(None, "--record", help="Append every snapshot to FILE as NDJSON."),
    replay: Optional[Path] = typer.Option(None, "--replay", help="Play back a recording instead of polling."),
    speed: Optional[float] = typer.Option(
        None, "--speed", help="With --replay: recorded seconds played per second, e.g. 10 or 60 (1 when not given)."
    ),
    charts: bool = typer.Option(False, "--charts", help="Open on the charts view (the c key)."),
    thresholds_file: Optional[Path] = typer.Option(None, "--thresholds", help="YAML file overriding thresholds."),
    set_: Optional[List[str]] = typer.Option(
        None, "--set", help="Override one threshold, e.g. --set pending_requests=32."
    ),
    profile: Optional[str] = typer.Option(
        None, "--profile", help="Take thresholds from this serving profile's diagnostics."
    ),
    no_devices: bool = typer.Option(False, "--no-devices", help="Do not poll npu-smi / nvidia-smi / the host."),
) -> None:
    from ascendctl.output import get_output
    from engine.errors import BadInput

    out = get_output()
    thresholds = resolve_thresholds(profile, thresholds_file, set_ or ())
    if replay is not None and urls:
        raise BadInput(
            i18n._("--replay plays a recording; it takes no URL"), i18n._("drop the URLs or the --replay option")
        )
    if speed is not None and replay is None:
        raise BadInput(i18n._("--speed is the speed of a replay"), i18n._("add --replay FILE, or drop --speed"))
    if speed is not None and not (speed > 0 and speed < float("inf")):
        raise BadInput(
            i18n._("--speed {speed:g} is not a speed").format(speed=speed), i18n._("give a factor above 0: 1, 10 or 60")
        )
    headless = once or out.json_mode or not sys.stdout.isatty()
    if replay is not None:
        _replay(replay, headless, interval, speed or 1.0, charts)
        return
    collector = make_collector(urls or (), thresholds, None if no_devices else default_devices())
    recorder = open_recorder(record)
    try:
        if not headless:
            run_app(lambda: poll_and_record(collector, recorder), interval or 1.0, thresholds, charts=charts)
            return
        if out.json_mode and interval is not None and not once:
            _stream(collector, recorder, interval, count)
            return
        snap = _two_polls(collector, recorder, interval or 1.0)
        if out.json_mode:
            out.emit(snap.to_dict())
        else:
            from ascendctl.tui.render import frame

            out.console.print(frame(snap))
        _fail_if_down(snap)
    finally:
        collector.close()
        if recorder is not None:
            recorder.close()


def _two_polls(collector: "Collector", recorder, gap: float) -> "Snapshot":
    """Rates need two scrapes: poll, wait `gap`, poll again, and report the second. When no
    engine answered the first (each waited out its deadline), there is no rate to make: that poll
    is the answer, and a dead URL costs one deadline, not two."""
    first = poll_and_record(collector, recorder)
    if not first.engines or not any(e.status.ok for e in first.engines):
        return first
    time.sleep(gap)
    return poll_and_record(collector, recorder)


def _stream(collector: "Collector", recorder, interval: float, count: int | None) -> None:
    from ascendctl.output import get_output

    out = get_output()
    written = 0
    next_at = time.monotonic()
    while count is None or written < count:
        snap = poll_and_record(collector, recorder)
        if snap.seq > 1 or not snap.engines:  # the first poll has no rates yet
            out.json_line(_document(snap))
            written += 1
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))


def _fail_if_down(snap: "Snapshot") -> None:
    from engine.errors import Unreachable

    down = [e for e in snap.engines if not e.status.ok]
    if down:
        e = down[0]
        raise Unreachable(f"{e.label}: {e.status.error}", e.status.fix or i18n._("check that the engine is running"))
    proxies = [p for p in snap.proxies if not p.status.ok]
    if proxies:
        p = proxies[0]
        raise Unreachable(
            f"{p.label}: {p.status.error}",
            i18n._("check that the layout's proxy is running (`ascendctl serve --role proxy`) and its port"),
        )


def _document(snap: "Snapshot") -> dict:
    """A snapshot as one NDJSON line, versioned like every JSON document the tool writes."""
    from ascendctl.output import SCHEMA_VERSION

    return {"schema_version": SCHEMA_VERSION, **snap.to_dict()}


def _replay(path: Path, headless: bool, interval: float | None, speed: float, charts: bool) -> None:
    from ascendctl.output import SCHEMA_VERSION, get_output
    from engine.telemetry import load_recording

    out = get_output()
    skipped: list[str] = []
    if out.json_mode or headless:
        snaps = load_recording(path, SCHEMA_VERSION, skipped)
        _warn_skipped(skipped)
        if out.json_mode:
            for snap in snaps:
                out.json_line(_document(snap))
            return
        from ascendctl.tui.render import frame

        out.console.print(frame(snaps[-1]))
        return
    from engine.errors import BadInput
    from engine.telemetry.record import RecordingIndex
    from engine.telemetry.replay import Replay

    # Indexed, not decoded: a day of snapshots would take minutes and gigabytes to decode at
    # once. Played in time order, should two recordings have been appended to one file.
    index = RecordingIndex(path, SCHEMA_VERSION, skipped)
    _warn_skipped(skipped)
    first = next((s for s in index[:50] if s is not None), None)
    if first is None:
        raise BadInput(
            i18n._("{path}: no snapshot among its first lines decodes").format(path=path),
            i18n._("record with `ascendctl top --record FILE`"),
        )
    try:
        run_app(None, interval or 1.0, first.thresholds, replay=Replay(index, speed), charts=charts)
    finally:
        index.close()


def _warn_skipped(skipped: list[str]) -> None:
    from ascendctl.output import get_output
    from ascendctl.style import safe

    out = get_output()
    for note in skipped[:5]:
        out.warn(i18n._("skipped {note}").format(note=safe(note)))
    if len(skipped) > 5:
        out.warn(i18n._("skipped {count} more damaged lines").format(count=len(skipped) - 5))
