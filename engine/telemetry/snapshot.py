"""One immutable snapshot per tick: what every renderer (TUI, `--once`, `--json`, recordings,
diagnostics) reads. Renderers never call npu-smi or HTTP themselves."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from engine.devices.sample import DeviceSample
from engine.metrics.catalog import VIEW_FIELDS, optional_fields
from engine.metrics.rates import EngineRates, KvPool, Percentiles
from engine.severity import Severity
from engine.telemetry.thresholds import Thresholds
from engine.typed import decode

# The JSON document an `ascendctl exporter` serves at REMOTE_PATH: `top` reads remote hosts from it.
REMOTE_PATH = "/api/snapshot"
REMOTE_KIND = "ascendctl-exporter-snapshot"

# The level of each judged figure (figure name -> OK / WARNING / CRITICAL, None when N/A), as
# `engine.telemetry.thresholds` computes it: the TUI, --once and --json all show this one.
Levels = Mapping[str, Severity | None]


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
    # Why it is down: "unreachable" (no answer), "bad-input" (it answered, but not vLLM's
    # /metrics: a login page, another service), "error" (anything else). None when up, and in
    # recordings made before this field.
    error_kind: str | None = None


@dataclass(frozen=True)
class ContainerView:
    """The container an engine runs in (found by its `ascendctl.run` label): its CPU and memory
    from the runtime's `stats`, and the NPUs it was given."""

    name: str
    runtime: str  # docker, podman or nerdctl
    cpu_percent: float | None = None  # of one CPU: 200 is two CPUs busy
    memory_mb: float | None = None
    memory_limit_mb: float | None = None
    npus: tuple[int, ...] | None = None  # None: neither --device nor ASCEND_VISIBLE_DEVICES says
    image: str | None = None


@dataclass(frozen=True)
class ServeView:
    """What `ascendctl serve` recorded of the run that serves an engine (its run.json): how many
    times it restarted the engine and why last, and the hangs its monitor found, the last one's
    verdict on one line with where its evidence was saved."""

    run_id: str
    restarts: int = 0
    restart_reason: str | None = None  # hang | exit | not ready
    hangs: int = 0
    last_hang: str | None = None  # the verdict's evidence on one line
    last_hang_at: float | None = None  # wall-clock time of that verdict
    last_hang_action: str | None = None  # restart | stop | report
    last_hang_evidence: str | None = None  # the hang-N folder of the run directory

    @classmethod
    def of(cls, run: Any) -> "ServeView":
        """From an engine.runs.RunInfo."""
        last = run.hangs[-1] if run.hangs else None
        return cls(
            run.run_id,
            run.restarts,
            run.restart_reason,
            len(run.hangs),
            last.summary if last else None,
            last.at if last else None,
            last.action if last else None,
            last.evidence_dir if last else None,
        )


# One engine at one tick: its status, a field per figure the catalog puts on the view
# (running, waiting, preemptions...), the KV pool, the rates, the sparkline series (history keys
# of the catalog) so that a replay draws the same lines as the live view, and the levels.
EngineView = dataclasses.make_dataclass(
    "EngineView",
    [
        ("url", str),
        ("label", str),
        ("status", SourceStatus),
        ("model", str | None, field(default=None)),
        *optional_fields(VIEW_FIELDS),
        ("kv", KvPool, field(default_factory=lambda: KvPool(None, None, None))),
        ("rates", EngineRates, field(default_factory=EngineRates)),
        ("history", Mapping[str, tuple[float | None, ...]], field(default_factory=dict)),
        ("log_path", str | None, field(default=None)),
        # From the run's profile; else the global threshold applies.
        ("pending_threshold", float | None, field(default=None)),
        ("levels", Levels, field(default_factory=dict)),
        # The run's profile's gpu_memory_utilization: the HBM the engine takes by design. Last,
        # so the fields scripts already read keep their places.
        ("hbm_budget", float | None, field(default=None)),
        # Resident memory of the engine's process tree in MiB, for a run `ascendctl serve` started
        # on this host (None for an engine known only by its URL). Last, for the same reason.
        ("rss_mb", float | None, field(default=None)),
        # The container of an engine that runs in one (None for a host engine). Last, as above.
        ("container", ContainerView | None, field(default=None)),
        # The NPUs the engine uses (npu-exporter ids): its process tree joined on npu-smi's process
        # table, else its container's devices. None when unknown. Last, as above.
        ("npus", tuple[str, ...] | None, field(default=None)),
        # Restarts and hangs of the run `ascendctl serve` keeps for this engine (None for an
        # engine known only by its URL). Last, as above.
        ("serve", ServeView | None, field(default=None)),
    ],
    namespace={"__module__": __name__},
    frozen=True,
)


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
    thresholds: Thresholds = field(default_factory=Thresholds.defaults)
    device_levels: Mapping[str, Levels] = field(default_factory=dict)  # by device key

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self, **header: Any) -> str:
        """One JSON line; `header` keys (a schema_version) come first."""
        return json.dumps({**header, **self.to_dict()}, ensure_ascii=False, allow_nan=False, default=str)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Snapshot":
        # A recording made before a threshold existed is judged by today's default for it.
        thresholds = {**Thresholds.defaults().as_dict(), **(data.get("thresholds") or {})}
        return decode(cls, {**data, "thresholds": thresholds})


__all__ = [
    "Diagnostic",
    "EngineRates",
    "EngineView",
    "KvPool",
    "Levels",
    "Percentiles",
    "ServeView",
    "Snapshot",
    "SourceStatus",
]
