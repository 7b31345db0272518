"""One immutable snapshot per tick: what every renderer (TUI, `--once`, `--json`, recordings,
diagnostics) reads. Renderers never call npu-smi or HTTP themselves."""

from __future__ import annotations

import collections.abc
import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Mapping

from engine.devices.sample import DeviceSample
from engine.metrics.rates import EngineRates, KvPool, Percentiles

SCHEMA = "ascendctl.top/1"
# Series kept in each snapshot for sparklines, so a replay draws the same lines as the live view.
HISTORY_KEYS = ("running", "waiting", "prompt_tps", "generation_tps")


@dataclass(frozen=True)
class SourceStatus:
    """Health of one source (the device tool or one engine endpoint)."""

    name: str
    ok: bool
    last_ok: float | None = None  # wall-clock time of the last good poll
    age_s: float | None = None  # seconds since then, at snapshot time
    error: str | None = None
    fix: str | None = None
    latency_ms: float | None = None


@dataclass(frozen=True)
class EngineView:
    url: str
    label: str
    status: SourceStatus
    model: str | None = None
    running: float | None = None
    waiting: float | None = None
    preemptions: float | None = None
    admission_rejections: float | None = None
    kv: KvPool = field(default_factory=lambda: KvPool(None, None, None))
    rates: EngineRates = field(default_factory=EngineRates)
    history: Mapping[str, tuple[float | None, ...]] = field(default_factory=dict)
    log_path: str | None = None
    pending_threshold: float | None = None  # from the run's profile; else the global threshold


@dataclass(frozen=True)
class Diagnostic:
    """One row of the diagnostics table: a threshold rule that fired or a known issue in a log."""

    id: str
    severity: str  # "critical" | "error" | "warning" | "info"
    subject: str  # the engine label or device key it is about
    title: str
    cause: str
    fix: str
    source: str = "rule"  # "rule" | "log"
    count: int = 1
    since: float | None = None  # wall-clock time it started
    detail: str = ""


@dataclass(frozen=True)
class Snapshot:
    time: float
    seq: int
    devices: tuple[DeviceSample, ...] = ()
    device_source: SourceStatus | None = None
    engines: tuple[EngineView, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()
    thresholds: Mapping[str, Any] = field(default_factory=dict)
    schema: str = SCHEMA

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, allow_nan=False, default=str)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Snapshot":
        return _decode(cls, data)


_SEVERITY_ORDER = {"critical": 0, "error": 1, "warning": 2, "info": 3}


def severity_rank(severity: str) -> int:
    return _SEVERITY_ORDER.get(severity, 4)


def _decode(tp: Any, value: Any) -> Any:
    """Rebuild nested frozen dataclasses from JSON (recordings are read back by `--replay`)."""
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _decode(inner[0], value) if len(inner) == 1 else value
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        names = {f.name for f in dataclasses.fields(tp) if f.init}
        return tp(**{k: _decode(hints[k], v) for k, v in value.items() if k in names})
    if origin is tuple:
        args = typing.get_args(tp)
        return tuple(_decode(args[0], v) for v in value)
    if origin in (dict, collections.abc.Mapping):
        args = typing.get_args(tp)
        return {k: _decode(args[1], v) for k, v in value.items()} if args else dict(value)
    if tp is float and isinstance(value, int):
        return float(value)
    return value


__all__ = [
    "Diagnostic", "EngineRates", "EngineView", "HISTORY_KEYS", "KvPool", "Percentiles", "SCHEMA",
    "Snapshot", "SourceStatus", "severity_rank",
]
