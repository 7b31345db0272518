"""One immutable snapshot per tick: what every renderer (TUI, `--once`, `--json`, recordings,
diagnostics) reads. Renderers never call npu-smi or HTTP themselves."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from engine.devices.sample import DeviceSample
from engine.metrics.catalog import VIEW_FIELDS, optional_fields
from engine.metrics.proxy import ProxyBackend
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
        # The part of a pd / external-dp layout the engine is (prefill, decode, rank), from its
        # run.json; None for an engine outside such a layout. Last, as above.
        ("role", str | None, field(default=None)),
    ],
    namespace={"__module__": __name__},
    frozen=True,
)


@dataclass(frozen=True)
class ProxyRole:
    """A role behind a proxy, summed over its backends."""

    role: str
    up: int  # backends up
    total: int  # backends the proxy was given
    requests: float
    failures: float
    refused: float
    requests_per_s: float | None = None


@dataclass(frozen=True)
class ProxyView:
    """The proxy (or balancer) of a pd / external-dp layout at one tick, from its /metrics: the
    requests it sent to each backend, the failures, whether each is up, what it refused."""

    url: str
    label: str
    status: SourceStatus
    backends: tuple[ProxyBackend, ...] = ()
    refused: Mapping[str, float] = field(default_factory=dict)  # role -> requests answered 503
    requests_per_s: Mapping[str, float] = field(default_factory=dict)  # role -> since the last poll

    def roles(self) -> list[ProxyRole]:
        """Each role in the page's order, its backends summed."""
        names = list(dict.fromkeys([b.role for b in self.backends] + list(self.refused)))
        out = []
        for role in names:
            mine = [b for b in self.backends if b.role == role]
            out.append(
                ProxyRole(
                    role,
                    sum(1 for b in mine if b.up),
                    len(mine),
                    sum(b.requests for b in mine),
                    sum(b.failures for b in mine),
                    self.refused.get(role, 0.0),
                    self.requests_per_s.get(role),
                )
            )
        return out

    def routes_to(self, url: str) -> ProxyBackend | None:
        """The backend that is the engine at `url` (its host:port; 127.0.0.1, localhost and
        0.0.0.0 are one host), or None."""
        where = _host_port(url)
        return next((b for b in self.backends if _host_port(b.backend) == where), None) if where else None


_LOCAL = {"localhost", "127.0.0.1", "0.0.0.0", "::1", "[::1]"}


def _host_port(address: str) -> tuple[str, str] | None:
    rest = address.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit():
        return None
    return ("local" if host.lower() in _LOCAL else host.lower(), port)


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
    # The proxies of pd / external-dp layouts (`serve --role proxy`). Last: scripts read the
    # keys above as they were.
    proxies: tuple[ProxyView, ...] = ()

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
    "ProxyBackend",
    "ProxyRole",
    "ProxyView",
    "ServeView",
    "Snapshot",
    "SourceStatus",
]
