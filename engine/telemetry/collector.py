"""The collector: polls every source once per tick and returns one immutable Snapshot.

Polls never overlap (a lock; the TUI also runs them in one exclusive worker). A source that
fails becomes a status with its age and last error, and is retried on the next tick; nothing a
source does can raise out of `poll()`. The engines' pages are fetched concurrently, each through
the bounded reader (`engine.httpread`: a total deadline and a size cap), so one slow engine never
holds the others: a poll takes about as long as its slowest engine, at most the deadline.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import httpx

from engine.devices.sample import DeviceSample
from engine.devices.sources import DeviceSource
from engine.errors import AscendctlError, BadInput, Unreachable
from engine.httpread import client as http_client
from engine.httpread import read_page
from engine.metrics.catalog import HISTORY_KEYS, RATE_FIELDS, VIEW_FIELDS
from engine.metrics.prom import EngineMetrics, LeanParser, scrape
from engine.metrics.proxy import ProxyMetrics, parse_proxy
from engine.metrics.rates import EngineRates, RateTracker, kv_pool
from engine.redact import redact_text, redact_value, url_without_credentials
from engine.severity import rank as severity_rank
from engine.system.proctree import tree_rss_mib
from engine.telemetry.kvtransfer import KvTransferWatch
from engine.telemetry.logtail import LogTail
from engine.telemetry.rules import RuleEngine
from engine.telemetry.snapshot import (
    ContainerView,
    Diagnostic,
    EngineView,
    ProxyView,
    ServeView,
    Snapshot,
    SourceStatus,
)
from engine.telemetry.thresholds import Thresholds, device_levels, engine_levels, hbm_budget

HISTORY_LEN = 60
PROXY_ROLE = "proxy"  # engine.profiles.parts.PROXY, without importing the profiles here


@dataclass(frozen=True)
class Target:
    """An engine to watch: its URL, a short label, and its log when ascendctl serve started it."""

    url: str
    label: str = ""
    log_path: str | None = None
    # The serving profile's diagnostics.pending_threshold, when the run's profile is known.
    pending_threshold: float | None = None
    # The serving profile's engine.gpu_memory_utilization, when the run's profile is known.
    hbm_budget: float | None = None
    # An `ascendctl exporter` on another host: its devices, engines and diagnostics are shown,
    # each named `<host>/<key>`.
    remote: bool = False
    # The engine's process, when `ascendctl serve` started it on this host: its tree's memory is
    # watched for a leak (rss-leak).
    pid: int | None = None
    # The container the engine runs in, found by its `ascendctl.run` label: its name, the
    # runtime that lists it, the NPUs it was given and its image.
    container: str | None = None
    runtime: str | None = None
    npus: tuple[int, ...] | None = None
    image: str | None = None
    # The part of a pd / external-dp layout the run is (prefill, decode, rank), from run.json.
    role: str | None = None

    @property
    def name(self) -> str:
        """The engine's name on screen, in labels and in files: never with `user:password@`."""
        return self.label or url_without_credentials(self.url).split("://", 1)[-1].rstrip("/")

    @property
    def shown_url(self) -> str:
        return url_without_credentials(self.url)


def targets_from_runs(skipped: list[str] | None = None, containers: list | None = None) -> list[Target]:
    """The live runs `ascendctl serve` started (newest first), and the engines in containers that
    carry a run's label (with_containers); damaged run records are left out and said in
    `skipped`. `containers`: what engine.container.discover.find_engines found, when the caller
    asked already (None: ask now)."""
    from engine.runs import list_runs

    notes: list[str] = [] if skipped is None else skipped
    runs = list_runs(live_only=True, skipped=notes)
    for r in runs:
        if not r.serves_api:
            notes.append(f"{r.run_id} is a headless data-parallel rank: it serves no API here (watch node 0's)")
    # A layout's proxy is a target too: its /metrics is read as the proxy's (Snapshot.proxies).
    targets = with_containers([target_of(r) for r in runs if watched(r)], notes, containers)
    return targets + [target_of(r) for r in runs if r.serves_api and is_proxy(r)]


def is_proxy(run) -> bool:
    """The proxy or balancer of a pd / external-dp layout (`serve --role proxy`): no vLLM /metrics,
    its own (engine.metrics.proxy). A run or a Target."""
    return getattr(run, "role", None) == PROXY_ROLE


def watched(run) -> bool:
    """A run whose URL serves vLLM's /metrics: not a headless rank, not a layout's proxy."""
    return run.serves_api and not is_proxy(run)


def with_containers(targets: list[Target], notes: list[str], containers: list | None = None) -> list[Target]:
    """`targets` with the engines found in containers by their `ascendctl.run` label: a run's
    own target gains its container (CPU, memory, NPUs); a container whose run is not here
    (another user's state directory, a run directory removed) is added from its labels alone,
    with the run's log when the run directory is on this host."""
    from engine.container.runtime import LABEL_URL
    from engine.runs import PROFILE_FILE

    if containers is None:
        from engine.container.discover import find_engines

        containers = find_engines(notes=notes)
    out = list(targets)
    by_label = {t.label: i for i, t in enumerate(out) if t.label}
    by_url = {t.url.rstrip("/"): i for i, t in enumerate(out)}
    for c in containers:
        url = (c.entry.url or "").rstrip("/")
        at = by_label.get(c.run_id, by_url.get(url) if url else None)
        extra = {"container": c.name, "runtime": c.runtime, "npus": c.npus, "image": c.image}
        if at is not None:
            out[at] = replace(out[at], **extra)
        elif url:
            pending, budget = (None, None)
            if c.log_path:
                pending, budget = _profile_limits(Path(c.log_path).parent / PROFILE_FILE)
            out.append(Target(url, c.run_id, c.log_path, pending, budget, **extra))
        else:
            notes.append(f"container {c.name} of run {c.run_id} has no {LABEL_URL} label: it cannot be polled")
    return out


def target_of(run) -> Target:
    """A run (engine.runs.RunInfo) as a target: its URL, its id as the label, its log, and the
    limits its resolved profile sets."""
    from engine.runs import PROFILE_FILE

    return Target(
        run.url,
        run.run_id,
        str(run.log_path),
        *_profile_limits(Path(run.directory) / PROFILE_FILE),
        pid=run.pid,
        role=getattr(run, "role", None),
    )


def _profile_limits(path: Path) -> tuple[float | None, float | None]:
    """The pending-requests threshold and the memory budget (gpu_memory_utilization) of a run's
    resolved profile; None for what it does not say or when it cannot be read."""
    if not path.is_file():
        return None, None
    try:
        from engine.profiles import load_profile

        profile = load_profile(str(path))
        pending = float(profile.diagnostics.pending_threshold)
    except (AscendctlError, AttributeError, OSError, TypeError, ValueError):
        return None, None  # a damaged or older profile must not keep the dashboard from starting
    utilization = getattr(getattr(profile, "engine", None), "gpu_memory_utilization", None)
    return pending, float(utilization) if isinstance(utilization, (int, float)) and utilization else None


class _Status:
    def __init__(self, name: str) -> None:
        self.name = name
        self.last_ok: float | None = None
        self.error: str | None = None
        self.fix: str | None = None
        self.latency_ms: float | None = None
        self.error_kind: str | None = None

    def ok(self, now: float, latency_s: float) -> None:
        self.last_ok, self.error, self.fix, self.latency_ms = now, None, None, latency_s * 1000
        self.error_kind = None

    def failed(self, exc: BaseException) -> None:
        # an error may quote what a server sent or the URL it was asked at: shown, served, recorded
        if isinstance(exc, AscendctlError):
            self.error, self.fix = redact_text(exc.cause), exc.fix
            self.error_kind = (
                "unreachable" if isinstance(exc, Unreachable) else "bad-input" if isinstance(exc, BadInput) else "error"
            )
        else:  # a bug or an unforeseen failure of a source: still a row, never a crash
            self.error, self.fix = redact_text(f"{type(exc).__name__}: {exc}"), None
            self.error_kind = "error"

    def view(self, now: float) -> SourceStatus:
        return SourceStatus(
            self.name,
            self.error is None and self.last_ok is not None,
            self.last_ok,
            None if self.last_ok is None else max(0.0, now - self.last_ok),
            self.error,
            self.fix,
            self.latency_ms,
            self.error_kind,
        )


class _EngineState:
    def __init__(self, target: Target, window_s: float) -> None:
        self.target = target
        self.status = _Status(target.name)
        self.rates = RateTracker(window_s)
        self.last: EngineMetrics | None = None
        self.last_rates = EngineRates()
        self.history: dict[str, deque] = {k: deque(maxlen=HISTORY_LEN) for k in HISTORY_KEYS}
        self.log = LogTail(target.log_path) if target.log_path else None
        self.pid = target.pid  # `serve --restart` starts a new engine: see Collector._engine_rss
        # The run directory of an engine `ascendctl serve` started (its log's folder): its run.json
        # says the restarts and hangs; read again only when it changed.
        self.run_dir = Path(target.log_path).parent if target.log_path else None
        self.run_seen: tuple[int, int] | None = None
        self.serve: ServeView | None = None
        self.kv = KvTransferWatch()  # kv-transfer-failing


class _ProxyState:
    def __init__(self, target: Target) -> None:
        self.target = target
        self.status = _Status(target.name)
        self.last: ProxyMetrics | None = None
        self.last_at: float | None = None
        self.per_s: dict[str, float] = {}

    def view(self, now: float, got: object, took: float, at: float) -> ProxyView:
        """This tick's view: the page it answered (or its last, greyed by the status when down),
        and each role's requests per second since the previous page."""
        if isinstance(got, BaseException):
            self.status.failed(got)
            self.per_s = {}
        else:
            assert isinstance(got, ProxyMetrics)
            self.status.ok(now, took)
            if self.last is not None and self.last_at is not None and at > self.last_at:
                before = _requests_by_role(self.last)
                self.per_s = {
                    role: (new - old) / (at - self.last_at)
                    for role, new in _requests_by_role(got).items()
                    if (old := before.get(role)) is not None and new >= old
                }
            self.last, self.last_at = got, at
        page = self.last or ProxyMetrics()
        return ProxyView(
            self.target.shown_url,
            self.target.name,
            self.status.view(now),
            page.backends,
            dict(page.refused),
            dict(self.per_s),
        )


def _requests_by_role(page: ProxyMetrics) -> dict[str, float]:
    out: dict[str, float] = {}
    for b in page.backends:
        out[b.role] = out.get(b.role, 0.0) + b.requests
    return out


class Collector:
    def __init__(
        self,
        targets: Sequence[Target],
        devices: DeviceSource | None = None,
        thresholds: Thresholds | None = None,
        scrape_fn: Callable[[str], EngineMetrics] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        # A total deadline per page: an engine busy serving can take seconds to answer /metrics
        # (on a 2-core host under load, past 5 s), and a slow answer is not a dead engine. Polls
        # run concurrently, so one slow engine never holds the others.
        timeout: float = 10.0,
        rss_fn: Callable[[int | None], float | None] = tree_rss_mib,
        usage_fn: Callable[[str], Mapping[str, Any]] | None = None,
        proxy_scrape_fn: Callable[[str], ProxyMetrics] | None = None,
    ) -> None:
        self.thresholds = thresholds or Thresholds.defaults()
        self.devices = devices
        self._clock, self._wall = clock, wall
        self._rss = rss_fn
        # {container name: Usage} of one runtime (`stats`), asked once a tick for the engines
        # that run in containers.
        self._usage = usage_fn or _container_usage
        self._client = http_client(timeout) if scrape_fn is None else None
        self._remote_client = http_client(timeout) if any(t.remote for t in targets) else None
        self._timeout = timeout
        parsers = {t.url: LeanParser() for t in targets}
        self._scrape = scrape_fn or (lambda url: scrape(url, timeout=timeout, client=self._client, parse=parsers[url]))
        # A layout's proxy: the same bounded fetch, its own parse.
        wants = proxy_scrape_fn is None and any(is_proxy(t) for t in targets)
        self._proxy_client = http_client(timeout) if wants else None
        self._scrape_proxy = proxy_scrape_fn or (
            lambda url: scrape(url, timeout=timeout, client=self._proxy_client, parse=parse_proxy)
        )
        # One worker per engine (bounded): every fetch ends by its deadline, so none is ever stuck.
        self._pool = ThreadPoolExecutor(min(16, len(targets)), "poll") if len(targets) > 1 else None
        self._engines = [_EngineState(t, self.thresholds.window_s) for t in targets if not is_proxy(t)]
        self._proxies = [_ProxyState(t) for t in targets if is_proxy(t)]
        self._device_status = _Status(getattr(devices, "name", "devices"))
        self._last_devices: list[DeviceSample] = []
        self._rules = RuleEngine(self.thresholds)
        self._lock = threading.Lock()
        self._seq = 0

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        for client in (self._client, self._remote_client, self._proxy_client):
            if client is not None:
                client.close()

    def _fetch(self, target: Target) -> tuple[object, float]:
        """One engine's page (its metrics, or a remote exporter's (snapshot, host)), or the
        exception it raised; with the seconds it took."""
        start = time.monotonic()
        try:
            if target.remote:
                assert self._remote_client is not None
                got: object = fetch_remote(target.url, self._remote_client, self._timeout)
            elif is_proxy(target):
                got = self._scrape_proxy(target.url)
            else:
                got = self._scrape(target.url)
        except Exception as exc:  # noqa: BLE001 - see _Status.failed
            got = exc
        return got, time.monotonic() - start

    def _fetch_all(self) -> list[tuple[object, float]]:
        targets = [s.target for s in (*self._engines, *self._proxies)]
        if self._pool is None:
            return [self._fetch(t) for t in targets]
        return list(self._pool.map(self._fetch, targets))

    def poll(self) -> Snapshot:
        with self._lock:
            return self._poll()

    def _poll(self) -> Snapshot:
        now = self._wall()
        device_status = None
        devices: list[DeviceSample] = []
        if self.devices is not None:
            start = self._clock()
            try:
                devices = self.devices.sample()
                self._device_status.ok(now, self._clock() - start)
                self._last_devices = devices
            except Exception as exc:  # noqa: BLE001 - see _Status.failed
                self._device_status.failed(exc)
            device_status = self._device_status.view(now)
        fetched = dict(zip(map(id, (*self._engines, *self._proxies)), self._fetch_all()))
        taken = self._clock() if self._proxies else 0.0
        proxies = [p.view(now, *fetched[id(p)], taken) for p in self._proxies]
        local = [s for s in self._engines if not s.target.remote]
        engines = [self._poll_engine(state, now, fetched[id(state)]) for state in local]
        engines = self._add_containers(local, engines)
        engines = [_with_npus(view, state.pid, devices) for state, view in zip(local, engines)]
        # Cards are judged against the engines' own memory budget, so the engines are polled first.
        budget = hbm_budget(engines, self.thresholds)
        levels = {d.key: device_levels(d, self.thresholds, budget) for d in devices}
        diagnostics = self._rules.evaluate(now, devices, levels, engines)
        for state, view in zip(local, engines):
            diagnostics += _log_diagnostics(state, view)
            issues = state.log.issues() if state.log is not None else []
            kv = state.kv.diagnostic(now, view, state.target.role, issues, self.thresholds.window_s)
            if kv is not None:
                diagnostics.append(kv)
        # Remote hosts come judged by their own exporter: their rows are added as they are.
        for state in self._engines:
            if state.target.remote:
                remote = self._poll_remote(state, now, fetched[id(state)])
                devices += remote.devices
                levels.update(remote.device_levels)
                engines += remote.engines
                diagnostics += remote.diagnostics
                proxies += remote.proxies
        diagnostics.sort(key=lambda d: (-severity_rank(d.severity), d.subject, d.id))
        self._seq += 1
        return Snapshot(
            now,
            self._seq,
            tuple(devices),
            device_status,
            tuple(engines),
            tuple(diagnostics),
            self.thresholds,
            levels,
            tuple(proxies),
        )

    def _add_containers(self, local: list[_EngineState], engines: list[EngineView]) -> list[EngineView]:
        """Each container engine's view with its container's CPU and memory of this tick (one
        `stats` per runtime; when it fails, the figures are N/A and the engine row stays)."""
        runtimes = {s.target.runtime for s in local if s.target.container and s.target.runtime}
        usage: dict[str, Any] = {}
        for runtime in sorted(runtimes):
            try:
                usage.update(self._usage(runtime))
            except Exception:  # noqa: BLE001 - a runtime that does not answer costs its figures only
                pass
        out = []
        for state, view in zip(local, engines):
            t = state.target
            if t.container:
                u = usage.get(t.container)
                mb = 1024 * 1024
                view = replace(
                    view,
                    container=ContainerView(
                        t.container,
                        t.runtime or "",
                        getattr(u, "cpu_percent", None),
                        u.memory_bytes / mb if u is not None and u.memory_bytes is not None else None,
                        u.memory_limit_bytes / mb if u is not None and u.memory_limit_bytes is not None else None,
                        t.npus,
                        t.image,
                    ),
                )
            out.append(view)
        return out

    def _poll_remote(self, state: _EngineState, now: float, fetched: tuple[object, float]) -> Snapshot:
        """A remote exporter's latest snapshot, every name prefixed with its host. When it does
        not answer: one engine row saying so (the rules then list it as unreachable)."""
        got, took = fetched
        self._clock()
        if isinstance(got, BaseException):
            state.status.failed(got)
            view = EngineView(url=state.target.shown_url, label=state.target.name, status=state.status.view(now))
            down = self._rules.evaluate(now, [], {}, [view])
            return Snapshot(now, 0, engines=(view,), diagnostics=tuple(down))
        snap, host = got  # type: ignore[misc]
        self._clock()
        state.status.ok(now, took)

        def name(key: str) -> str:
            return f"{host}/{key}"

        return Snapshot(
            now,
            0,
            devices=tuple(replace(d, key=name(d.key)) for d in snap.devices),
            engines=tuple(replace(e, label=name(e.label)) for e in snap.engines),
            diagnostics=tuple(replace(d, subject=name(d.subject)) for d in snap.diagnostics),
            device_levels={name(k): v for k, v in snap.device_levels.items()},
            proxies=tuple(replace(p, label=name(p.label)) for p in snap.proxies),
        )

    def _poll_engine(self, state: _EngineState, now: float, fetched: tuple[object, float]) -> EngineView:
        got, took = fetched
        self._clock()  # the poll's start, as the clock sees it (rates read the clock's steps)
        metrics = None
        if isinstance(got, BaseException):
            state.status.failed(got)
        else:
            metrics = got
            taken = self._clock()
            state.status.ok(now, took)
            state.last_rates = state.rates.update(taken, metrics)
            state.last = metrics
        if state.log is not None:
            state.log.poll()
        status = state.status.view(now)
        rates = state.last_rates if metrics is not None else EngineRates()
        values = {k: getattr(metrics, k) if metrics else None for k in VIEW_FIELDS}
        series = {**values, **{k: getattr(rates, k) for k in RATE_FIELDS}}
        for key in HISTORY_KEYS:
            state.history[key].append(series[key])
        cap = state.log.capacity if state.log is not None else None
        pool = kv_pool(metrics, cap.blocks if cap else None, cap.tokens if cap else None) if metrics else None
        view = EngineView(
            url=state.target.shown_url,
            label=state.target.name,
            status=status,
            model=_model_name(metrics),
            **values,
            rates=rates,
            history={k: tuple(v) for k, v in state.history.items()},
            log_path=state.target.log_path,
            pending_threshold=state.target.pending_threshold,
            hbm_budget=state.target.hbm_budget,
            rss_mb=self._engine_rss(state) if metrics is not None else None,
            serve=_serve_view(state),
            role=state.target.role,
        )
        if pool is not None:
            view = replace(view, kv=pool)
        return replace(view, levels=engine_levels(view, self.thresholds))

    def _engine_rss(self, state: _EngineState) -> float | None:
        """The memory of the engine's process tree. When that process is gone but its run lives on
        (`serve --restart` started another engine), the run record holds the new pid."""
        rss = self._rss(state.pid)
        if rss is None and state.target.pid is not None and state.target.log_path:
            from engine.runs import read_run

            run = read_run(Path(state.target.log_path).parent)
            if run is not None and run.pid is not None and run.pid != state.pid:
                state.pid = run.pid
                rss = self._rss(state.pid)
        return rss


def _serve_view(state: _EngineState) -> ServeView | None:
    """The restarts and hangs the engine's run.json records; the last view while it is unchanged
    (or, for a moment, unreadable: serve rewrites it by renaming a new file over it)."""
    from engine.runs import RUN_FILE, read_run

    if state.run_dir is None:
        return None
    try:
        st = (state.run_dir / RUN_FILE).stat()
    except OSError:
        return state.serve
    seen = (st.st_mtime_ns, st.st_size)
    if seen != state.run_seen:
        run = read_run(state.run_dir)
        if run is not None:
            view = ServeView.of(run)
            # What the monitor saw can quote a URL: masked here, as every text the collector serves.
            state.serve = replace(
                view,
                last_hang=redact_text(view.last_hang) if view.last_hang else None,
                last_hang_evidence=redact_text(view.last_hang_evidence) if view.last_hang_evidence else None,
            )
            state.run_seen = seen
    return state.serve


def _container_usage(runtime: str) -> Mapping[str, Any]:
    from engine.container.discover import container_usage
    from engine.system.host import Host

    return container_usage(Host(), runtime)


def _with_npus(view: EngineView, pid: int | None, devices: list[DeviceSample]) -> EngineView:
    """The view with the NPUs its engine uses: its process tree on npu-smi's process table, else
    the devices its container was given."""
    from engine.telemetry.faults import held_npus

    npus = held_npus(pid, devices)
    if not npus and view.container is not None and view.container.npus is not None:
        npus = [str(n) for n in view.container.npus]
    return replace(view, npus=tuple(npus)) if npus else view


def is_exporter(url: str, timeout: float = 1.0) -> bool:
    """Does `url` serve an `ascendctl exporter`'s snapshot (rather than vLLM's API)? Asked with
    the same total deadline as any other page: a URL that trickles is not one."""
    try:
        fetch_remote(url, None, timeout)
        return True
    except AscendctlError:
        return False


def fetch_remote(url: str, client: httpx.Client | None, timeout: float = 2.0) -> tuple[Snapshot, str]:
    """(snapshot, host name) from an `ascendctl exporter`'s REMOTE_PATH, read through the bounded
    reader. Raises Unreachable or BadInput (it answered, but not with an exporter's snapshot)."""
    from engine.jsonsafe import loads
    from engine.redact import url_without_credentials
    from engine.telemetry.snapshot import REMOTE_KIND, REMOTE_PATH

    page = read_page(client, url.rstrip("/") + REMOTE_PATH, deadline=timeout, what="`ascendctl exporter`")
    url = url_without_credentials(url)
    if page.status_code != 200:
        raise Unreachable(
            f"{url}{REMOTE_PATH} answered HTTP {page.status_code}", "check the URL (and --web-config auth)"
        )
    try:
        doc = loads(page.body)
        if doc.get("kind") != REMOTE_KIND:
            raise ValueError("not an exporter snapshot")
        return Snapshot.from_dict(doc.get("snapshot") or {"time": 0, "seq": 0}), str(doc.get("host") or url)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise BadInput(
            f"{url}{REMOTE_PATH} is not an ascendctl exporter snapshot ({exc})", "point top at the exporter's root URL"
        ) from exc


def _model_name(metrics: EngineMetrics | None) -> str | None:
    if metrics is None or metrics.model_name is None:
        return None
    return redact_value(metrics.model_name)  # a served name can be a URL with credentials


def _log_diagnostics(state: _EngineState, view: EngineView) -> list[Diagnostic]:
    if state.log is None:
        return []
    out = []
    if state.log.error:
        out.append(
            Diagnostic(
                "log-unreadable",
                "info",
                view.label,
                "engine log unreadable",
                redact_text(state.log.error),
                "check the run directory (`ascendctl top` reads <run>/engine.log)",
            )
        )
    # What a log line says is quoted on screen, served by the exporter and written by --record:
    # its secrets are masked here, once, for all of them.
    for issue in state.log.issues():
        out.append(
            Diagnostic(
                issue.id,
                issue.severity,
                view.label,
                redact_text(issue.title),
                redact_text(issue.cause),
                redact_text(issue.fix),
                source="log",
                count=issue.count,
                detail="\n".join(
                    [
                        f"first seen: {issue.first_seen or 'N/A'}   last seen: {issue.last_seen or 'N/A'}",
                        f"example: {redact_text(issue.example)}",
                    ]
                    + [f"see: {link}" for link in issue.links]
                ),
            )
        )
    return out
