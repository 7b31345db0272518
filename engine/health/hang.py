"""The hang verdict: an engine that is alive (its port open, /health 200) and answers nothing.

Four parts of evidence, each judged against its threshold of thresholds.yaml (`hang_*`, which a
profile's `diagnostics` section may override):

- probe: a 1-token completion with the served model, sent every `hang_probe_interval_s` while no
  generated token was counted since the last probe (never while tokens flow). Its timeout is the
  engine's own measured prefill times four (the slowest of the last probes answered; with requests in flight,
  also the largest time to first token it has reported in the last ten minutes) and never shorter than
  `hang_probe_timeout_s`. `hang_probe_failures` failures in a row are a hang.
- progress: requests running or waiting while the generation-token counter has not moved for
  `hang_progress_s` seconds.
- process: the EngineCore / worker processes of the tree gone while the API server lives (a hang
  at once), or their CPU time not advancing for `hang_cpu_s` seconds while requests wait.
- device (npu-smi): the engine's NPUs at AI Core <= `idle_util_pct` with HBM unchanged for
  `hang_device_s` seconds while requests run.

A verdict needs a decisive part: the engine's processes gone, the probe failing its count in a
row, or progress stalled *and* a second witness (CPU time or the NPUs doing nothing). A long
prefill stalls progress, but its processes burn CPU and its NPUs compute; a saturated queue keeps
tokens flowing; an idle engine answers its probes. None of them is a hang.

Everything here is driven by `tick()` with an injectable clock, HTTP client and device source, so
the tests replay recorded figures instead of waiting.
"""

from __future__ import annotations

import json
import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import httpx

from engine.devices.sample import DeviceSample
from engine.errors import BadInput, Unreachable
from engine.httpread import Deadline, read_page
from engine.httpread import client as httpread_client
from engine.i18n import Msg, _

# The processes of a vLLM engine's tree, by the title vLLM gives them (setproctitle).
_ENGINE_TITLES = ("EngineCore", "VLLM::Worker", "VllmWorker")
PROBE_PROMPT = "ping"
# The probe's timeout: this many times the engine's measured prefill (probe_timeout).
PREFILL_FACTOR = 4.0
# The times to first token that count for it: those the engine reported in this window (a
# saturated hour's queue waits of long ago say nothing of the engine now).
TTFT_WINDOW_S = 600.0


@dataclass(frozen=True)
class HangLimits:
    """The `hang_*` thresholds (thresholds.yaml says what each means, and holds the defaults:
    callers build these with `from_thresholds(load_thresholds(...))`)."""

    probe_interval_s: float
    probe_timeout_s: float
    probe_failures: int
    progress_s: float
    cpu_s: float
    device_s: float
    device_idle_pct: float

    @classmethod
    def from_thresholds(cls, t: Any) -> "HangLimits":
        return cls(
            probe_interval_s=t.hang_probe_interval_s,
            probe_timeout_s=t.hang_probe_timeout_s,
            probe_failures=max(1, int(t.hang_probe_failures)),
            progress_s=t.hang_progress_s,
            cpu_s=t.hang_cpu_s,
            device_s=t.hang_device_s,
            device_idle_pct=t.idle_util_pct,
        )


@dataclass(frozen=True)
class Evidence:
    part: str  # probe | progress | process | device
    text: str  # what was seen, in words
    hung: bool  # this part, alone or with its witness, says hung


@dataclass(frozen=True)
class Verdict:
    hung: bool
    parts: tuple[Evidence, ...] = ()
    at: float = field(default_factory=time.time)

    @property
    def summary(self) -> str:
        """The evidence on one line: the parts that count first, then what else was seen."""
        seen = [e.text for e in self.parts if e.hung] + [e.text for e in self.parts if not e.hung]
        # English (a str: JSON and the run record keep it); shown() gives it translated
        return Msg.join("; ", seen) if seen else Msg("no evidence")

    def as_dict(self) -> dict:
        return {
            "hung": self.hung,
            "summary": self.summary,
            "at": self.at,
            "parts": [{"part": e.part, "text": e.text, "hung": e.hung} for e in self.parts],
        }


# -- probe -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    seconds: float
    error: str | None = None  # "timed out", "HTTP 500", "connection refused"...
    reached: bool = True  # False: nothing answered at all (not a hang: the engine is down)


# Every page read here is bounded, in time and size (engine.httpread): a /metrics page of a real
# engine is tens of KiB.
MAX_PAGE_BYTES = 8 << 20
METRICS_DEADLINE_S = 5.0


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def served_model(client: httpx.Client, url: str, timeout: float, api_key: str | None = None) -> str:
    """The first model id of GET /v1/models. Unreachable when nothing answers; BadInput when what
    answers is not an OpenAI-compatible server."""
    target = url.rstrip("/") + "/v1/models"
    page = read_page(client, target, timeout, MAX_PAGE_BYTES, "the engine", auth_headers(api_key))
    status, text = page.status_code, page.text
    if status in (401, 403):
        raise BadInput(
            _("{url} refused the request (HTTP {status})").format(url=target, status=status),
            _("set VLLM_API_KEY to the server's API key"),
        )
    try:
        data = json.loads(text) if status == 200 else None
        models = [m["id"] for m in data["data"]] if isinstance(data, dict) else []
    except (ValueError, KeyError, TypeError):
        models = []
    if not models or not isinstance(models[0], str):
        raise BadInput(
            _(
                "{url} is not an OpenAI-compatible server: GET /v1/models answered HTTP {status} with no model list"
            ).format(url=url, status=status),
            _("point at the vLLM server root, e.g. http://127.0.0.1:8000"),
        )
    return models[0]


def probe_once(client: httpx.Client, url: str, model: str, timeout: float, api_key: str | None = None) -> ProbeResult:
    """One streamed 1-token completion, successful once its first token arrives. Failures: no
    token within `timeout` (a server that accepts and never streams, or trickles bytes: the
    socket is shut at the deadline, engine.httpread.Deadline), an HTTP error status, a stream that
    ends with no token. Nothing listening is `reached=False`."""
    started = time.monotonic()
    limit = Deadline(timeout)
    body = {"model": model, "prompt": PROBE_PROMPT, "max_tokens": 1, "temperature": 0, "stream": True}

    def failed(error: str, reached: bool = True) -> ProbeResult:
        return ProbeResult(False, time.monotonic() - started, error, reached)

    try:
        with limit.stream(
            client, "POST", url.rstrip("/") + "/v1/completions", json=body, headers=auth_headers(api_key)
        ) as resp:
            if resp.status_code != 200:
                return failed(f"HTTP {resp.status_code}")
            read = 0
            for line in resp.iter_lines():
                read += len(line) + 1
                if limit.passed or read > MAX_PAGE_BYTES:
                    break
                if not line.startswith("data:") or line.strip() == "data: [DONE]":
                    continue
                try:
                    choices = json.loads(line[5:]).get("choices")
                except (ValueError, AttributeError):
                    choices = None
                if choices:
                    return ProbeResult(True, time.monotonic() - started)
            else:
                return failed(Msg("the stream ended with no token"))
    except httpx.TimeoutException:
        pass
    except httpx.ConnectError as exc:
        return failed(type(exc).__name__, reached=False)
    except httpx.HTTPError as exc:
        if not limit.passed:  # past the deadline: the socket was shut, a time-out
            return failed(type(exc).__name__)
    return failed(Msg("timed out after {seconds} s", seconds=f"{timeout:g}"))


def probe_timeout(limits: HangLimits, ttft_max_s: float | None, probe_max_s: float | None = None) -> float:
    """PREFILL_FACTOR times the engine's measured prefill, never below the floor. The prefill is
    the slowest answer of the last probes (a short prompt's prefill on this engine) and, when given (the
    caller passes it while requests are in flight, which the probe may queue behind), the
    longest time to first token the engine has reported lately (HangMonitor.recent_ttft). Not that time when the engine has
    nothing in flight: it includes the waits in the queue of a past busy hour, and would stretch
    the time to find a hang for nothing."""
    seen = [s for s in (ttft_max_s, probe_max_s) if s is not None and math.isfinite(s)]
    return max([limits.probe_timeout_s] + [PREFILL_FACTOR * s for s in seen])


def ttft_max(metrics: Any) -> float | None:
    """The upper bound of the highest non-empty finite bucket of the TTFT histogram."""
    return top_bucket(metrics.histogram("ttft") if metrics is not None else None)


def top_bucket(hist: Any) -> float | None:
    """The upper bound of the highest non-empty finite bucket of a histogram (cumulative buckets,
    as exposed, or the difference of two readings)."""
    if hist is None or not hist.count:
        return None
    previous = 0.0
    top = None
    for le, count in hist.buckets:
        if count > previous and math.isfinite(le):
            top = le
        previous = count
    return top


# -- process ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineProc:
    pid: int
    title: str  # "EngineCore", "VLLM::Worker_0"...
    cpu_s: float
    status: str  # psutil's: running, sleeping, stopped, zombie...


def engine_procs(root_pid: int) -> tuple[bool, list[EngineProc]]:
    """(the root process lives, its EngineCore / worker descendants)."""
    import psutil

    try:
        root = psutil.Process(root_pid)
        if root.status() == psutil.STATUS_ZOMBIE:
            return False, []
        children = root.children(recursive=True)
    except psutil.Error:
        return False, []
    found = []
    for child in children:
        try:
            with child.oneshot():
                title = " ".join(child.cmdline()) or child.name()
                role = next((t for t in _ENGINE_TITLES if t in title), None)
                if role is None:
                    continue
                times = child.cpu_times()
                found.append(EngineProc(child.pid, title.split()[0], times.user + times.system, child.status()))
        except psutil.Error:
            continue
    return True, found


class ProcessTracker:
    """Which engine processes were seen, which are gone, and whether their CPU time moves."""

    def __init__(self, limits: HangLimits, read: Callable[[int], tuple[bool, list[EngineProc]]] = engine_procs):
        self.limits = limits
        self._read = read
        self.seen: dict[int, str] = {}
        # A one-shot look at a ready engine expects its EngineCore: none at all is one gone.
        self.expect_core = False
        self._cpu: float | None = None
        self._cpu_since: float | None = None

    def feed(self, now: float, root_pid: int, busy: bool) -> Evidence | None:
        root_alive, procs = self._read(root_pid)
        if not root_alive:
            return None  # the server itself ended: an exit, which the supervisor sees
        live = {p.pid for p in procs if p.status != "zombie"}
        gone = [
            Msg("{name} pid {pid} gone", name=title.split("::")[-1], pid=pid)
            for pid, title in sorted(self.seen.items())
            if pid not in live
        ]
        if self.expect_core and not self.seen and not any("EngineCore" in p.title for p in procs if p.pid in live):
            gone = [Msg("EngineCore gone (none under the API server pid {pid})", pid=root_pid)]
        for p in procs:
            self.seen.setdefault(p.pid, p.title)
        if gone:
            return Evidence("process", Msg("{gone} while the API server lives", gone=Msg.join("; ", gone)), True)
        stopped = [
            Msg("{name} pid {pid} stopped (SIGSTOP)", name=p.title.split("::")[-1], pid=p.pid)
            for p in procs
            if p.status == "stopped"
        ]
        cpu = sum(p.cpu_s for p in procs if p.status != "zombie")
        if not procs or not busy:
            self._cpu, self._cpu_since = cpu, None
            return Evidence("process", stopped[0], False) if stopped else None
        if self._cpu is None or cpu - self._cpu > 0.05:
            self._cpu, self._cpu_since = cpu, None
        elif self._cpu_since is None:
            self._cpu_since = now
        still = 0.0 if self._cpu_since is None else now - self._cpu_since
        if still >= self.limits.cpu_s:
            names = ", ".join(f"{p.title.split('::')[-1]} pid {p.pid}" for p in procs[:3])
            text = Msg("no CPU time used for {seconds} s by {names}", seconds=f"{still:.0f}", names=names)
            if stopped:
                text = Msg("{text} ({stopped})", text=text, stopped=Msg.join("; ", stopped))
            return Evidence("process", text, True)
        return Evidence("process", stopped[0], False) if stopped else None


# -- progress --------------------------------------------------------------------------------


class ProgressTracker:
    """How long requests have been running or waiting with the generation counter still."""

    def __init__(self, limits: HangLimits) -> None:
        self.limits = limits
        self.tokens: float | None = None
        self.token_moved_at: float | None = None  # when the counter last moved (or was first read)
        self.still_since: float | None = None  # requests in, counter still, since
        self.requests = 0

    def feed(self, now: float, running: float | None, waiting: float | None, tokens: float | None) -> Evidence | None:
        self.requests = int((running or 0) + (waiting or 0))
        moved = tokens is not None and (self.tokens is None or tokens != self.tokens)
        if moved:
            self.token_moved_at = now
        if tokens is not None:
            self.tokens = tokens
        if self.requests <= 0 or moved:
            self.still_since = None
            return None
        if self.still_since is None:
            self.still_since = now
            return None
        still = now - self.still_since
        parts = []
        if running:
            one = int(running) == 1
            parts.append(Msg("{n} request running", n=1) if one else Msg("{n} requests running", n=int(running)))
        if waiting:
            parts.append(Msg("{n} waiting", n=int(waiting)))
        text = Msg("{parts}, no token for {seconds} s", parts=Msg.join(", ", parts), seconds=f"{still:.0f}")
        return Evidence("progress", text, still >= self.limits.progress_s)


# -- device ----------------------------------------------------------------------------------


class DeviceTracker:
    """The engine's NPUs at AI Core ~0 with HBM unchanged, while requests run."""

    def __init__(self, limits: HangLimits) -> None:
        self.limits = limits
        self._mem: tuple[float | None, ...] | None = None
        self._idle_since: float | None = None

    def feed(self, now: float, samples: Sequence[DeviceSample], pids: set[int], running: bool) -> Evidence | None:
        npus = [s for s in samples if s.kind == "npu"]
        owned = [s for s in npus if pids & {p.pid for p in s.procs}] or npus
        if not owned:
            return None
        mem = tuple(s.mem_used_mb for s in owned)
        idle = all(s.util_pct is not None and s.util_pct <= self.limits.device_idle_pct for s in owned)
        same = self._mem is not None and all(
            a is not None and b is not None and abs(a - b) < 1.0 for a, b in zip(mem, self._mem)
        )
        if self._mem is None or not (running and idle and same):
            self._idle_since = now if running and idle else None
            self._mem = mem
            return None
        if self._idle_since is None:
            self._idle_since = now
        still = now - self._idle_since
        names = ",".join(s.key for s in owned)
        text = Msg(
            "{names} AI Core <= {pct} and HBM unchanged for {seconds} s",
            names=names,
            pct=f"{self.limits.device_idle_pct:g}%",
            seconds=f"{still:.0f}",
        )
        return Evidence("device", text, still >= self.limits.device_s)


# -- the monitor -----------------------------------------------------------------------------


class HangMonitor:
    """Judge one engine, tick after tick. `pid` (the API server's, for an engine on this host)
    enables the process part; `devices` (a callable returning DeviceSamples) the device part."""

    def __init__(
        self,
        url: str,
        limits: HangLimits,
        *,
        pid: int | None = None,
        model: str | None = None,
        api_key: str | None = None,
        devices: Callable[[], Sequence[DeviceSample]] | None = None,
        client: httpx.Client | None = None,
        clock: Callable[[], float] = time.monotonic,
        read_procs: Callable[[int], tuple[bool, list[EngineProc]]] = engine_procs,
        scrape: Callable[[], Any] | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.limits = limits
        self.pid = pid
        self.model = model
        self.api_key = api_key
        self.devices = devices
        self.client = client or httpread_client()
        self.clock = clock
        self._scrape = scrape or self._scrape_metrics
        self.progress = ProgressTracker(self.limits)
        self.process = ProcessTracker(self.limits, read_procs)
        self.device = DeviceTracker(self.limits)
        self.failures: list[tuple[float, str]] = []  # the current streak: (time, error)
        self.last_probe_at: float | None = None
        self.tokens_at_probe: float | None = None
        self.probes = 0
        self.last_result: ProbeResult | None = None
        self.answers: deque[float] = deque(maxlen=10)  # seconds each of the last answered probes took
        self.last_metrics: Any = None
        # (time, TTFT histogram) of the looks of the last TTFT_WINDOW_S, the oldest one past it kept.
        self._ttft_marks: deque[tuple[float, Any]] = deque()
        self.last_metrics_text: str | None = None
        # A headless rank watching its group's API (node 0's): that API gone for
        # probe_interval_s x probe_failures once it was up takes this rank down with it.
        self.group = False
        # A member of an expert-parallel group that serves its own API (a pd role's decode group
        # over several hosts): the group's first member's API, watched besides its own as a
        # headless rank watches node 0's. None elsewhere.
        self.group_url: str | None = None
        self.fixed_timeout: float | None = None  # the probe's timeout as given (`probe --timeout`)
        # Probe at the first look (`ascendctl probe`, one look) instead of reading a baseline.
        self.probe_first = False
        self._unread_since: float | None = None  # since when the token counter cannot be read
        self._seen_up = False
        self._down_since: float | None = None
        self.last: Verdict = Verdict(False)

    def _scrape_metrics(self) -> Any:
        from engine.metrics.prom import parse_metrics

        page = read_page(
            self.client,
            self.url + "/metrics",
            METRICS_DEADLINE_S,
            MAX_PAGE_BYTES,
            "the engine",
            auth_headers(self.api_key),
        )
        if page.status_code != 200:
            raise Unreachable(f"/metrics answered HTTP {page.status_code}", "check the engine")
        self.last_metrics_text = page.text
        return parse_metrics(page.text)

    def _probe_due(self, now: float, tokens: float | None) -> bool:
        """Is a probe due at this look? Only when the generation counter says no token flowed
        since the last probe, and says it for sure:

        - the first look of a watch only reads the counter (a watch starts on an engine that may
          already be serving: a restart under load); `probe_first` (`ascendctl probe`) probes at once;
        - a look that could not read the counter (/metrics slow or failing under load) is no
          sign of silence: the probe waits until the counter has been unreadable for a whole
          interval (an API server that answers nothing at all is probed then), and the count
          taken at the last probe is kept, so the next reading still compares against it;
        - a counter that went down (another engine behind the URL) is a new baseline;
        - requests arriving while their first tokens are still prefilling: the probe waits for a
          second look with the counter still (the progress part's stall, one tick old).
        """
        if tokens is None:
            if self._unread_since is None:
                self._unread_since = now
        else:
            self._unread_since = None
        if self.last_probe_at is None:
            if self.probe_first:
                return True
            self.last_probe_at, self.tokens_at_probe = now, tokens  # a baseline, no probe
            return False
        if now - self.last_probe_at < self.limits.probe_interval_s:
            return False
        if tokens is None:
            since = now if self._unread_since is None else self._unread_since
            return now - since >= self.limits.probe_interval_s
        if self.tokens_at_probe is None or tokens < self.tokens_at_probe:
            self.last_probe_at, self.tokens_at_probe = now, tokens  # a baseline (or a new engine)
            return False
        # Never while tokens flow: a token counted since the last probe (beyond the probe's own)
        # says the engine answers, and ends a streak of failed probes.
        if tokens - self.tokens_at_probe > 1:
            self.last_probe_at = now  # the engine proved itself: the next probe waits its interval
            self.tokens_at_probe = tokens
            self.failures = []
            return False
        if self.progress.requests > 0 and self.progress.still_since == now and not self.failures:
            return False  # requests just came in: their first tokens may be a prefill away
        return True

    def _mark_ttft(self, now: float, metrics: Any) -> None:
        hist = metrics.histogram("ttft")
        if hist is None:
            return
        marks = self._ttft_marks
        if marks and hist.count < marks[-1][1].count:
            marks.clear()  # a counter that went down: another engine behind the URL
        marks.append((now, hist))
        while len(marks) > 1 and now - marks[1][0] >= TTFT_WINDOW_S:
            marks.popleft()

    def recent_ttft(self) -> float | None:
        """The longest time to first token the engine reported in the last TTFT_WINDOW_S (the
        difference of the histogram between both ends); at a single look, all it has reported.
        A stalled engine reports none, so its probe falls back to the floor."""
        from engine.metrics.rates import histogram_delta

        marks = self._ttft_marks
        if len(marks) < 2:
            return ttft_max(self.last_metrics)
        return top_bucket(histogram_delta(marks[-1][1], marks[0][1]))

    def timeout_now(self) -> float:
        """The probe's timeout at this look (probe_timeout): the longest time to first token of
        the last TTFT_WINDOW_S counts only while requests are in flight."""
        busy = self.progress.requests > 0
        slowest = max(self.answers) if self.answers else None
        return probe_timeout(self.limits, self.recent_ttft() if busy else None, slowest)

    def probe(self, now: float) -> ProbeResult:
        timeout = self.fixed_timeout or self.timeout_now()
        if self.model is None:
            self.model = served_model(self.client, self.url, min(timeout, 5.0), self.api_key)
        result = probe_once(self.client, self.url, self.model, timeout, self.api_key)
        self.last_result = result
        self.probes += 1
        self.last_probe_at = self.clock()
        if result.ok:
            self.failures = []
            self.answers.append(result.seconds)
        elif result.reached:
            self.failures.append((now, result.error or Msg("failed")))
        return result

    def _probe_evidence(self) -> Evidence | None:
        if not self.failures:
            return None
        n = len(self.failures)
        span = self.clock() - self.failures[0][0]
        errors = sorted({e for _, e in self.failures})
        timed_out = all(e.startswith("timed out") for e in errors)
        what = Msg("timed out") if timed_out else Msg("failed ({errors})", errors=Msg.join(", ", errors))
        single = self.failures[0][1]
        if n > 1:
            text = Msg("probe {what} {n}x in {seconds} s", what=what, n=n, seconds=f"{span:.0f}")
        elif "timed out" in single:
            text = Msg("probe {error}", error=single)
        else:
            text = Msg("probe failed ({error})", error=single)
        return Evidence("probe", text, n >= self.limits.probe_failures)

    def tick(self) -> Verdict:
        now = self.clock()
        notes: list[Evidence] = []
        metrics = None
        try:
            metrics = self._scrape()
            self.last_metrics = metrics
            self._mark_ttft(now, metrics)
        except (httpx.HTTPError, Unreachable, BadInput) as exc:
            notes.append(
                Evidence(
                    "progress",
                    Msg("/metrics unreadable ({error})", error=getattr(exc, "cause", type(exc).__name__)),
                    False,
                )
            )
        group = self._group_evidence(now, metrics is not None) if self.group else None
        if self.group_url is not None:
            group = self._group_evidence(now, self._answers(self.group_url), self.group_url)
        if group is not None:
            notes.insert(0, group)
        running = getattr(metrics, "running", None)
        waiting = getattr(metrics, "waiting", None)
        tokens = getattr(metrics, "generation_tokens", None)
        progress = self.progress.feed(now, running, waiting, tokens) if metrics is not None else None
        busy = self.progress.requests > 0
        process = self.process.feed(now, self.pid, busy) if self.pid is not None else None
        device = None
        if self.devices is not None:
            try:
                samples = list(self.devices())
            except Exception:  # noqa: BLE001 - a device tool that fails costs this part only
                samples = []
            pids = set(self.process.seen) | ({self.pid} if self.pid else set())
            device = self.device.feed(now, samples, pids, bool(running))
        if self._probe_due(now, tokens):
            try:
                self.probe(now)
            except (Unreachable, BadInput) as exc:
                notes.append(Evidence("probe", Msg("probe not sent: {error}", error=exc.cause), False))
            if tokens is not None:  # an unread counter keeps the count of the last reading
                self.tokens_at_probe = tokens
        probe = self._probe_evidence()
        parts = [e for e in (probe, progress, process, device) if e is not None] + notes
        hung = self.judge(probe, progress, process, device) or (group is not None and group.hung)
        self.last = Verdict(hung, tuple(parts))
        return self.last

    def _answers(self, url: str) -> bool:
        """Does the API at `url` answer its /health (any answer within the probe's timeout)?"""
        try:
            read_page(self.client, url.rstrip("/") + "/health", deadline=self.limits.probe_timeout_s)
        except (Unreachable, BadInput, httpx.HTTPError):
            return False
        return True

    def _group_evidence(self, now: float, reachable: bool, url: str | None = None) -> Evidence | None:
        if reachable:
            self._seen_up, self._down_since = True, None
            return None
        if not self._seen_up:
            return None  # node 0 not up yet: a group that is still starting
        if self._down_since is None:
            self._down_since = now
        down = now - self._down_since
        limit = self.limits.probe_interval_s * self.limits.probe_failures
        return Evidence(
            "group",
            Msg("the group's API at {url} gone for {seconds} s", url=url or self.url, seconds=f"{down:.0f}"),
            down >= limit,
        )

    @staticmethod
    def judge(
        probe: Evidence | None, progress: Evidence | None, process: Evidence | None, device: Evidence | None
    ) -> bool:
        if process is not None and process.hung and "gone" in process.text:
            return True  # EngineCore or a worker died under a living API server
        if probe is not None and probe.hung:
            return True
        stalled = progress is not None and progress.hung
        witness = (process is not None and process.hung) or (device is not None and device.hung)
        return stalled and witness

    def close(self) -> None:
        self.client.close()


__all__ = [
    "Evidence",
    "HangLimits",
    "HangMonitor",
    "ProbeResult",
    "Verdict",
    "engine_procs",
    "probe_once",
    "probe_timeout",
    "served_model",
]
