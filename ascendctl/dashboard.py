"""The live dashboard on a set of engines: `ascendctl top` opens it, and so does `ascendctl demo`
on the engine it started."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:
    from engine.devices.sources import DeviceSource
    from engine.telemetry import Collector, Recorder, Snapshot, Target, Thresholds


def make_collector(urls: Sequence[str], thresholds: "Thresholds", devices: "DeviceSource | None") -> "Collector":
    from ascendctl.output import get_output
    from ascendctl.style import safe
    from engine.endpoints import normalize_base_url
    from engine.telemetry import Collector, targets_from_runs

    skipped: list[str] = []
    runs = targets_from_runs(skipped)
    for note in skipped:  # a damaged run.json costs its run, not the dashboard
        get_output().warn(safe(note))
    if urls:
        # A URL that `ascendctl serve` started keeps its run's label, log and profile threshold.
        known = {t.url.rstrip("/"): t for t in runs}
        targets = [known.get(url) or _target(url) for url in (normalize_base_url(u) for u in urls)]
    else:
        targets = runs
    return Collector(targets, devices, thresholds)


def _target(url: str) -> "Target":
    """A URL given on the command line: an engine, or another host's `ascendctl exporter`."""
    from engine.telemetry import Target
    from engine.telemetry.collector import is_exporter

    return Target(url, remote=is_exporter(url))


def run_dashboard(
    urls: Sequence[str] = (),
    interval: float = 1.0,
    thresholds: "Thresholds | None" = None,
    devices: "DeviceSource | None | bool" = True,
    record: Path | None = None,
    quit_when: Callable[[], bool] | None = None,
) -> None:
    """Open the dashboard on `urls` (or on the live runs) until the user quits, or until
    `quit_when()` is true (the demo: its engine was told to stop).

    `devices`: True picks npu-smi / nvidia-smi / the host automatically, False polls none, or a
    DeviceSource to use. Blocks; raises BadInput on a bad URL or thresholds.
    """
    from engine.telemetry import Thresholds

    thresholds = thresholds or Thresholds.defaults()
    source = default_devices() if devices is True else (None if devices is False else devices)
    collector = make_collector(urls, thresholds, source)
    recorder = open_recorder(record)
    try:
        run_app(lambda: poll_and_record(collector, recorder), interval, thresholds, quit_when=quit_when)
    finally:
        collector.close()
        if recorder is not None:
            recorder.close()


def run_app(
    feed,
    interval: float | None,
    thresholds: "Thresholds",
    replay=None,
    charts: bool = False,
    quit_when: Callable[[], bool] | None = None,
) -> None:
    """The dashboard on `feed` (a callable giving the next snapshot), or on a `replay`
    (engine.telemetry.replay.Replay, played at its speed); it quits on `q` or once `quit_when()`."""
    from ascendctl.tui.app import TopApp

    TopApp(feed, interval, thresholds, replay=replay, charts=charts, quit_when=quit_when).run()


def resolve_thresholds(profile: str | None, path: Path | None, sets: Sequence[str]) -> "Thresholds":
    """Built-in defaults, then --profile's diagnostics section, then --thresholds FILE, then --set."""
    from engine.telemetry import load_thresholds

    base = None
    if profile is not None:
        from engine.profiles import load_profile
        from engine.telemetry.thresholds import profile_thresholds

        base = profile_thresholds(load_profile(profile))
    return load_thresholds(path, sets, base)


def default_devices() -> "DeviceSource":
    from engine.devices import detect_source

    return detect_source()


def open_recorder(path: Path | None) -> "Recorder | None":
    if path is None:
        return None
    from ascendctl.output import SCHEMA_VERSION
    from engine.telemetry import Recorder

    return Recorder(path, SCHEMA_VERSION)


def poll_and_record(collector: "Collector", recorder: "Recorder | None") -> "Snapshot":
    snap = collector.poll()
    if recorder is not None:
        recorder.write(snap)
    return snap
