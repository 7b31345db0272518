"""Live telemetry for `ascendctl top`: a collector that polls devices and engines into one
immutable Snapshot per tick, threshold rules, engine-log triage, and NDJSON record / replay."""

from engine.telemetry.collector import Collector, Target, targets_from_runs
from engine.telemetry.record import Recorder, load_recording, read_recording
from engine.telemetry.rules import RuleEngine
from engine.telemetry.snapshot import Diagnostic, EngineView, Snapshot, SourceStatus
from engine.telemetry.thresholds import Thresholds, load_thresholds

__all__ = [
    "Collector",
    "Diagnostic",
    "EngineView",
    "Recorder",
    "RuleEngine",
    "Snapshot",
    "SourceStatus",
    "Target",
    "Thresholds",
    "load_recording",
    "load_thresholds",
    "read_recording",
    "targets_from_runs",
]
