"""Background collection for the exporter: one thread per group, each on its own interval.

A scrape only reads the latest results (`Exporter.state()`), so it never waits on npu-smi, an
engine or doctor. A group that fails or hangs keeps its last good result and says so in its
status (`ascendctl_source_up`, `..._age_seconds`); npu-smi runs under the runner's timeout, which
kills a hung tool's whole process group.

Groups: `devices` (npu-smi info and per-card usages, or nvidia-smi, or the host), `engines`
(the live `ascendctl serve` runs plus the URLs given: /metrics, the log tail's known issues, the
threshold rules, all through the same Collector `top` uses), `plogs` (CANN error codes in the
plogs), `doctor` (every check, slowly). On an Ascend host each view beside `npu-smi info` is a
group of its own (`ecc`, `common`, `memory`, `volt`, `board`, `health`, and hccn_tool's `link`,
`net_health`, `stat`, `optical`), on the interval engine/devices/views.yaml gives it: ECC counters
and links move slowly and are asked less often than utilisation.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import httpx

from engine.devices.sample import DeviceSample
from engine.devices.views import intervals as view_intervals
from engine.errors import AscendctlError, BadInput, Unreachable
from engine.exporter.deviceviews import ViewAnswer, ViewPoller
from engine.httpread import client as http_client
from engine.httpread import read_page
from engine.jsonsafe import loads
from engine.metrics.prom import LeanParser, scrape
from engine.metrics.proxy import parse_proxy
from engine.telemetry.collector import Collector, Target, is_proxy, target_of, watched, with_containers
from engine.telemetry.runprofile import planned_blocks
from engine.telemetry.snapshot import Snapshot
from engine.telemetry.thresholds import Thresholds

DEFAULT_INTERVALS: Mapping[str, float] = {
    "devices": 5.0,
    "engines": 5.0,
    "plogs": 30.0,
    "doctor": 300.0,
    # Inside the engines group: a container runtime's `ps` costs ~10-30 ms of CPU (podman, docker),
    # six times the rest of an engine poll, so containers are looked for less often than engines
    # are read; npu-smi's per-card usages (AI CPU, HBM bandwidth) likewise, beside the 5 s table.
    "containers": 30.0,
    "usages": 15.0,
    # the device views (views.yaml), by view name
    **{name.split(":", 1)[1]: seconds for name, seconds in view_intervals().items()},
}


@dataclass
class GroupStatus:
    """How one source did on its last run: the exporter's `ascendctl_source_*` series."""

    name: str
    interval: float
    last_ok: float | None = None  # wall-clock time of the last good run
    error: str | None = None
    duration_s: float | None = None
    runs: int = 0  # runs so far: a scrape renders again only when a group has run since

    @property
    def up(self) -> bool:
        return self.error is None and self.last_ok is not None


class ScrapeClock:
    """When the scrapes come. Prometheus scrapes on a fixed period (15 s is usual), so a group that
    collects every 5 s has two results of three read by nobody: once the period is known, each
    group runs at its interval or later, just before the scrape that reads the result (which is
    then fresher too). Scrapes at no steady period (a person, a test, two scrapers out of step)
    leave the intervals as they are."""

    KEEP = 5  # the last scrapes the period is judged from
    MIN_PERIOD, MAX_PERIOD = 1.0, 300.0

    def __init__(self) -> None:
        self._times: list[float] = []
        self._lock = threading.Lock()

    def scraped(self, now: float | None = None) -> None:
        with self._lock:
            self._times = [*self._times[-(self.KEEP - 1) :], time.monotonic() if now is None else now]

    def period(self) -> tuple[float, float] | None:
        """(the last scrape's time, the period), or None while the scrapes keep no steady period."""
        with self._lock:
            times = list(self._times)
        if len(times) < 3:
            return None
        gaps = [b - a for a, b in zip(times, times[1:])]
        if min(gaps) < self.MIN_PERIOD or max(gaps) > self.MAX_PERIOD or max(gaps) > 1.25 * min(gaps):
            return None
        return times[-1], sum(gaps) / len(gaps)

    def due(self, earliest: float, lead: float) -> float:
        """When a group that may run from `earliest` on should run: `lead` seconds before the
        first scrape at or after `earliest + lead`, or at `earliest` without a steady period."""
        known = self.period()
        if known is None:
            return earliest
        last, period = known
        lead = min(lead, period / 2)
        k = max(1, math.ceil((earliest + lead - last) / period))
        return last + k * period - lead


class _Group:
    def __init__(
        self,
        name: str,
        interval: float,
        work: Callable[[], Any],
        stop: threading.Event,
        source: str,
        clock: ScrapeClock | None = None,
    ):
        self.status = GroupStatus(source, interval)
        self.name = name
        self.value: Any = None
        self._work = work
        self._stop = stop
        self._clock = clock
        self._done_once = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=f"exporter-{name}", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.run_once()
            due = started + self.status.interval
            if self._clock is not None:
                # ready one second (or twice its last run) before the scrape that will read it
                due = self._clock.due(due, max(1.0, 2 * (self.status.duration_s or 0.0)))
            self._stop.wait(max(0.0, due - time.monotonic()))

    def run_once(self) -> None:
        status = self.status
        started = time.monotonic()
        try:
            self.value = self._work()
            status.error = None
            status.last_ok = time.time()
        except Exception as exc:  # noqa: BLE001 - one failing source must not stop the others
            status.error = exc.cause if isinstance(exc, AscendctlError) else f"{type(exc).__name__}: {exc}"
        status.runs += 1
        status.duration_s = time.monotonic() - started
        self._done_once.set()

    def wait_first(self, timeout: float) -> bool:
        return self._done_once.wait(timeout)


VERSION_RETRY_S = 60.0  # an engine with no /version answer is asked again after this long

MAX_PROXY_PAGE = 1024 * 1024  # two lines per backend: a page past this is not our proxy's


@dataclass(frozen=True)
class EngineExtra:
    """What the exporter knows of an engine beyond its /metrics: from its run, its process tree
    and the plan of its profile."""

    label: str
    url: str
    profile: str | None = None
    pid: int | None = None
    phase: str | None = None
    ready_seconds: float | None = None
    restarts: int = 0
    vllm_version: str | None = None
    planned_blocks: int | None = None
    # The engine's /metrics as scraped, for the vllm:* pass-through. Parsed when a scrape renders
    # it, not on every poll: Prometheus scrapes less often than the engines are polled.
    passthrough: str | None = None
    stalled_for: float | None = None  # seconds with requests running and no token generated
    # ...judged against the hang verdict's progress threshold (thresholds.yaml hang_progress_s).
    stall_after_s: float = 90.0
    # From the run's record: the hangs serve's monitor found, and why the engine last restarted.
    hangs: int = 0
    restart_reason: str | None = None
    role: str | None = None  # serve --role: prefill, decode or rank in a pd / external-dp layout


@dataclass(frozen=True)
class ExporterState:
    """What one scrape renders: the latest result of every group and their statuses."""

    host: str
    devices: tuple[DeviceSample, ...] = ()
    snapshot: Snapshot | None = None
    engines: Mapping[str, EngineExtra] = field(default_factory=dict)
    # (proxy run id, "requests" | "failures", role, backend) -> count (engine/pdproxy.py's /metrics).
    proxies: Mapping[tuple[str, str, str, str], float] = field(default_factory=dict)
    doctor: Any = None  # engine.doctor.DoctorReport
    plog_codes: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (code, kind) -> lines
    statuses: tuple[GroupStatus, ...] = ()
    views: Mapping[str, ViewAnswer] = field(default_factory=dict)  # the device views' latest answers


class _LatestDevices:
    """The Collector's device source inside the exporter: the devices group's latest answer, so
    an engine poll never runs npu-smi itself."""

    def __init__(self, group: _Group, name: str) -> None:
        self._group = group
        self.name = name

    def sample(self) -> list[DeviceSample]:
        if self._group.value is None:
            raise Unreachable(self._group.status.error or "no device sample yet", "wait for the first poll")
        return list(self._group.value)


class Exporter:
    """Runs the groups; `state()` is what a scrape reads."""

    def __init__(
        self,
        urls: Sequence[str] = (),
        devices: Any = None,  # a DeviceSource, None for none
        thresholds: Thresholds | None = None,
        intervals: Mapping[str, float] | None = None,
        passthrough: bool = True,
        with_runs: bool = True,
        doctor: bool = True,
        plogs: bool = True,
        host: str | None = None,
        # A total deadline per engine page; as in top, an engine busy serving can take seconds
        # to answer, and a slow answer must not fire the engine-down alert.
        timeout: float = 10.0,
        views: bool = True,
    ) -> None:
        import socket

        self.host = host or socket.gethostname()
        self.urls = [u.rstrip("/") for u in urls]
        self.thresholds = thresholds or Thresholds.defaults()
        self.intervals = {**DEFAULT_INTERVALS, **(intervals or {})}
        self.passthrough = passthrough
        self.with_runs = with_runs
        self.timeout = timeout
        self._stop = threading.Event()
        self.clock = ScrapeClock()  # the scrapes' period: each group runs just before the one that reads it
        self._client = http_client(timeout)
        self._raw: dict[str, str] = {}
        self._parsers: dict[str, LeanParser] = {}
        self._versions: dict[str, str | None] = {}
        self._version_asked: dict[str, float] = {}  # monotonic time /version was last asked, by URL
        self._plans: dict[str, int | None] = {}
        self._stall_since: dict[str, float] = {}
        self._collector: Collector | None = None
        self._targets: tuple[Target, ...] = ()
        self._urls: dict[str, str] = {}  # engine label -> the URL it is polled at
        self._runs: dict[str, Any] = {}
        self._container_profiles: dict[str, str | None] = {}
        self._containers: list[Any] = []  # the engines last found in containers
        self._containers_at: float | None = None  # monotonic time of that look
        self._failed_runtimes: Any = None  # the runtimes that did not answer, rested a while
        self._extras: dict[str, EngineExtra] = {}
        # The live proxies of pd / external-dp layouts (serve --role proxy) and their counts.
        self._proxies: list[Any] = []
        self._proxy_counts: dict[tuple[str, str, str, str], float] = {}
        self._snapshot: Snapshot | None = None
        self._groups: list[_Group] = []
        self._device_group: _Group | None = None
        if devices is not None and hasattr(devices, "usages_every"):
            devices.usages_every = self.intervals["usages"]
        if devices is not None and hasattr(devices, "codes_every"):
            devices.codes_every = min(self.intervals["health"], DEFAULT_INTERVALS["health"])
        if devices is not None:
            self._device_group = _Group(
                "devices",
                self.intervals["devices"],
                devices.sample,
                self._stop,
                getattr(devices, "name", "devices"),
                self.clock,
            )
            self._groups.append(self._device_group)
            self._devices = _LatestDevices(self._device_group, getattr(devices, "name", "devices"))
        else:
            self._devices = None
        self._view_groups: list[_Group] = []
        if views and self._device_group is not None and getattr(devices, "name", "") == "npu-smi":
            self._view_groups = self._make_view_groups(devices)
            self._groups += self._view_groups
        self._groups.append(
            _Group("engines", self.intervals["engines"], self._poll_engines, self._stop, "engines", self.clock)
        )
        self._plog_group = None
        if plogs:
            from engine.exporter.plogs import PlogCounter

            counter = PlogCounter()
            self._plog_group = _Group("plogs", self.intervals["plogs"], counter.poll, self._stop, "plogs", self.clock)
            self._groups.append(self._plog_group)
        self._doctor_group = (
            _Group("doctor", self.intervals["doctor"], _run_doctor, self._stop, "doctor", self.clock)
            if doctor
            else None
        )
        if self._doctor_group is not None:
            self._groups.append(self._doctor_group)

    def _make_view_groups(self, devices: Any) -> list[_Group]:
        """One group per device view: npu-smi's through the devices source's own runner and
        program, hccn_tool's only where the tool is installed (a 310P host has none)."""
        from engine.devices.views import nic_views, npu_views
        from engine.netcheck import find_tool
        from engine.system.host import Host

        runner = getattr(devices, "runner", None)
        hccn = find_tool(Host(runner=runner)) if runner is not None else None
        poller = ViewPoller(runner, npu_smi=getattr(devices, "program", "npu-smi"), hccn_tool=hccn)
        groups = []
        for view in npu_views():
            work = functools.partial(self._poll_npu_view, poller, view)
            groups.append(_Group(view, self.intervals[view], work, self._stop, f"npu-smi -t {view}", self.clock))
        for view in nic_views() if hccn else ():
            work = functools.partial(self._poll_nic_view, poller, view)
            groups.append(_Group(view, self.intervals[view], work, self._stop, f"hccn_tool -{view}", self.clock))
        return groups

    def _npu_keys(self) -> list[str]:
        dev = self._device_group
        return [d.key for d in (dev.value or ()) if d.kind == "npu"] if dev is not None else []

    def _poll_npu_view(self, poller: ViewPoller, view: str) -> ViewAnswer:
        keys = self._npu_keys()
        answer = poller.poll_npus(view, keys)
        if keys and not answer.chips and answer.failed:
            raise Unreachable(next(iter(answer.failed.values())), f"run `npu-smi info -t {view} -i 0` by hand")
        return answer

    def _poll_nic_view(self, poller: ViewPoller, view: str) -> ViewAnswer:
        from engine.telemetry.faults import npu_id

        dev = self._device_group
        nics = [int(npu_id(d)) for d in (dev.value or ()) if d.kind == "npu" and npu_id(d).isdigit()] if dev else []
        answer = poller.poll_nics(view, nics)
        if nics and not answer.nics and answer.failed:
            raise Unreachable(next(iter(answer.failed.values())), f"run `hccn_tool -i 0 -{view} -g` by hand")
        return answer

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, first_wait: float = 10.0) -> None:
        """Start every group; wait (bounded) for the devices' first answer, so that the first
        engine poll judges cards against it."""
        if self._device_group is not None:
            self._device_group.thread.start()
            self._device_group.wait_first(first_wait)
        for g in self._groups:
            if not g.thread.is_alive():
                g.thread.start()

    def run_once(self) -> ExporterState:
        """Every group once, in this thread (tests, and `--once`)."""
        for g in self._groups:
            g.run_once()
        return self.state()

    def close(self) -> None:
        self._stop.set()
        for g in self._groups:
            if g.thread.is_alive():
                g.thread.join(timeout=5)
        if self._collector is not None:
            self._collector.close()
        self._client.close()

    # -- what a scrape reads -----------------------------------------------------------------

    def scraped(self) -> None:
        """A scrape of /metrics came (the server says so before it reads `state()`)."""
        self.clock.scraped()

    def state(self) -> ExporterState:
        dev = self._device_group
        return ExporterState(
            host=self.host,
            devices=tuple(dev.value or ()) if dev is not None else (),
            snapshot=self._snapshot,
            engines=dict(self._extras),
            proxies=dict(self._proxy_counts),
            doctor=self._doctor_group.value if self._doctor_group is not None else None,
            plog_codes=dict(self._plog_group.value or {}) if self._plog_group is not None else {},
            statuses=tuple(g.status for g in self._groups),
            views={g.name: g.value for g in self._view_groups if g.value is not None},
        )

    # -- the engines group -------------------------------------------------------------------

    def _targets_now(self) -> tuple[Target, ...]:
        targets = [Target(u) for u in self.urls]
        runs = []
        if self.with_runs:
            from engine.runs import list_runs

            # a headless data-parallel rank serves no API here: node 0's exporter covers it
            # and a pd / external-dp layout's proxy has no vLLM /metrics: the roles behind it do
            live = list_runs(live_only=True)
            runs = [r for r in live if watched(r)]
            self._proxies = [r for r in live if is_proxy(r)]
            targets += [target_of(r) for r in runs if r.url.rstrip("/") not in self.urls]
            # Engines in containers, found by their `ascendctl.run` label: no URL needed.
            found = self._find_containers()
            self._container_profiles = {c.run_id: c.entry.profile for c in found}
            targets = with_containers(targets, [], found)
        self._runs = {r.run_id: r for r in runs}
        return tuple(targets)

    def _find_containers(self) -> list[Any]:
        """The engines in containers, looked for again once the `containers` interval has passed
        (a container started since then is found on the next look; one that stopped answers no
        more in the meantime, as any engine that stops)."""
        now = time.monotonic()
        if self._containers_at is None or now - self._containers_at >= self.intervals["containers"]:
            from engine.container.discover import FailedRuntimes, find_engines

            if self._failed_runtimes is None:
                self._failed_runtimes = FailedRuntimes()
            self._containers = find_engines(notes=[], failed=self._failed_runtimes)
            self._containers_at = now
        return self._containers

    def _scrape(self, url: str):
        parser = self._parsers.setdefault(url, LeanParser())

        def keep(text: str):
            if self.passthrough:
                self._raw[url] = text
            return parser(text)

        return scrape(url, timeout=self.timeout, client=self._client, parse=keep)

    def _poll_engines(self) -> Snapshot:
        targets = self._targets_now()
        if self._collector is None or targets != self._targets:
            if self._collector is not None:
                self._collector.close()
            self._targets = targets
            self._urls = {t.name: t.url for t in targets}
            self._collector = Collector(
                targets, self._devices, self.thresholds, scrape_fn=self._scrape, timeout=self.timeout
            )
        self._raw = {}
        snap = self._collector.poll()
        self._snapshot = snap
        self._extras = {e.label: self._extra(e, snap) for e in snap.engines}
        self._proxy_counts = self._read_proxies()
        return snap

    def _read_proxies(self) -> dict[tuple[str, str, str, str], float]:
        """Each live proxy's request and failure counts per backend, from its /metrics:
        (proxy run id, "requests" | "failures" | "up", role, backend) -> count (up: 1 or 0), and
        the requests it refused per role: (proxy run id, "refused", role, "") -> count. A proxy that does not
        answer is left out (its run ends with it)."""
        counts: dict[tuple[str, str, str, str], float] = {}
        for run in self._proxies:
            try:
                page = read_page(
                    self._client, run.url.rstrip("/") + "/metrics", deadline=self.timeout, max_bytes=MAX_PROXY_PAGE
                )
            except Unreachable:
                continue
            if page.status_code != 200:
                continue
            try:
                proxy = parse_proxy(page.text)  # the one reader of the proxy's page, as top's
            except BadInput:
                continue
            for b in proxy.backends:
                counts[(run.run_id, "requests", b.role, b.backend)] = b.requests
                counts[(run.run_id, "failures", b.role, b.backend)] = b.failures
                if b.up is not None:
                    counts[(run.run_id, "up", b.role, b.backend)] = float(b.up)
            for role, value in proxy.refused.items():
                counts[(run.run_id, "refused", role, "")] = value
        return counts

    def _extra(self, view, snap: Snapshot) -> EngineExtra:
        run = self._runs.get(view.label)
        # The view names the engine without credentials; the target keeps the URL it is read at.
        url = self._urls.get(view.label, view.url)
        # An engine that answered no version (an older vLLM, a server with no /version) is asked
        # again once a minute, not on every poll: the request cost as much as the rest of the poll.
        now = time.monotonic()
        retry = now - self._version_asked.get(url, -VERSION_RETRY_S) >= VERSION_RETRY_S
        if url not in self._versions or (self._versions[url] is None and view.status.ok and retry):
            self._versions[url] = _vllm_version(self._client, url, self.timeout) if view.status.ok else None
            if view.status.ok:
                self._version_asked[url] = now
        if run is not None and run.run_id not in self._plans:
            self._plans[run.run_id] = planned_blocks(Path(run.directory))
        generation = getattr(view.rates, "generation_tps", None)
        stalled = None
        if view.status.ok and (view.running or 0) > 0 and not generation:
            since = self._stall_since.setdefault(view.label, snap.time)
            stalled = snap.time - since
        else:
            self._stall_since.pop(view.label, None)
        return EngineExtra(
            label=view.label,
            url=view.url,
            profile=run.profile if run is not None else self._container_profiles.get(view.label),
            pid=run.pid if run is not None else None,
            phase=run.phase if run is not None else None,
            ready_seconds=run.ready_seconds if run is not None else None,
            restarts=run.restarts if run is not None else 0,
            vllm_version=self._versions.get(url),
            planned_blocks=self._plans.get(run.run_id) if run is not None else None,
            passthrough=self._raw.get(url) if self.passthrough else None,
            stalled_for=stalled,
            stall_after_s=self.thresholds.hang_progress_s,
            hangs=len(run.hangs) if run is not None else 0,
            restart_reason=run.restart_reason if run is not None else None,
            role=run.role if run is not None else None,
        )


def _vllm_version(client: httpx.Client, url: str, timeout: float) -> str | None:
    """vLLM's /version answer ({"version": "0.11.0"}); None when it has none."""
    try:
        page = read_page(client, url.rstrip("/") + "/version", deadline=timeout, max_bytes=64 * 1024)
        value = loads(page.body).get("version") if page.status_code == 200 else None
    except (Unreachable, ValueError, AttributeError):
        return None
    return str(value)[:64] if value else None


def _run_doctor():
    from engine.doctor import run_doctor

    return run_doctor()
