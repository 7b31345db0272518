"""Run a scenario against a server: probe it, size prompts, drive the load, sample /metrics.

The load follows the phases: a `concurrency` phase keeps N workers each sending one request after
another; a `rate` phase sends requests at their due times whatever the server's state (open loop).
When the schedule ends no new request starts, and the ones in flight get `drain_grace_s` to
finish. Setting `stop` (Ctrl-C) cancels what is in flight and still returns the report of what
was measured so far."""

from __future__ import annotations

import asyncio
import collections
import os
import random
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

import httpx

from engine.bench.client import Endpoint, RequestResult, endpoint, request_body, stream_request
from engine.bench.prompts import PromptMaker
from engine.bench.report import BenchReport, EngineSeries, ServerCounters, build_report, queue_figures
from engine.bench.scenario import Scenario, fit_context
from engine.bench.schedule import Window, arrivals, draw_length, window_at, windows
from engine.bench.transport import LeanTransport
from engine.endpoints import normalize_base_url
from engine.errors import AscendctlError, BadInput, Unreachable
from engine.i18n import _
from engine.metrics import EngineMetrics, scrape

API_KEY_ENV = "VLLM_API_KEY"
# A saturated engine answers /metrics late: during a burst on a busy 2-core host a page took over
# 6 s to arrive in full, and a 6 s total deadline (the bounded reader's) left no sample of the
# burst at all. A late sample still shows the queue, a missing one shows nothing; a page that
# never ends is still cut here.
SCRAPE_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class ServerInfo:
    url: str
    model: str
    models: tuple[str, ...]
    max_model_len: int | None


@dataclass(frozen=True)
class Progress:
    elapsed_s: float
    total_s: float
    phase: str
    load: str
    in_flight: int
    completed: int
    failed: int
    output_tokens: int
    output_tokens_per_s: float | None  # over the last few seconds
    waiting: float | None  # the engine's pending queue, when /metrics answers


def make_client(
    url: str, request_timeout_s: float = 600.0, transport: httpx.AsyncBaseTransport | None = None
) -> httpx.AsyncClient:
    headers = {}
    key = os.environ.get(API_KEY_ENV)
    if key:
        headers["authorization"] = f"Bearer {key}"
    return httpx.AsyncClient(
        base_url=url,
        transport=transport or LeanTransport(),
        headers=headers,
        timeout=httpx.Timeout(connect=10.0, read=request_timeout_s, write=30.0, pool=None),
    )


async def probe(client: httpx.AsyncClient, url: str, model: str | None) -> ServerInfo:
    """Ask /v1/models which model to load and its context length. Raises Unreachable / BadInput."""
    try:
        resp = await client.get("/v1/models", timeout=10.0)
    except httpx.HTTPError as exc:
        raise Unreachable(
            _("cannot reach {url}: {error}").format(url=f"{url}/v1/models", error=type(exc).__name__),
            _("check that the server is up (`curl {url}/health`) and the host and port are right").format(url=url),
        ) from exc
    if resp.status_code in (401, 403):
        raise BadInput(
            _("{url} refused the request (HTTP {status}): it needs an API key").format(
                url=url, status=resp.status_code
            ),
            _("export {env}=<the server's key> and run again").format(env=API_KEY_ENV),
        )
    if resp.status_code != 200:
        raise Unreachable(
            _("{url} answered HTTP {status}").format(url=f"{url}/v1/models", status=resp.status_code),
            _("give the server root URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000"),
        )
    try:
        entries = [m for m in resp.json()["data"] if isinstance(m, dict) and m.get("id")]
    except (ValueError, KeyError, TypeError):
        raise BadInput(
            _("{url} did not answer an OpenAI model list").format(url=f"{url}/v1/models"),
            _("point ascendctl at the root of a vLLM / OpenAI-compatible server"),
        ) from None
    names = tuple(str(m["id"]) for m in entries)
    if not names:
        raise BadInput(
            _("{url} serves no model").format(url=url), _("check the server's start-up log (`ascendctl triage LOG`)")
        )
    chosen = model or names[0]
    if chosen not in names:
        raise BadInput(
            _("{url} does not serve a model named {model} (it serves: {names})").format(
                url=url, model=repr(chosen), names=", ".join(names)
            ),
            _("use --model {model}").format(model=names[0]),
        )
    entry = entries[names.index(chosen)]
    mml = entry.get("max_model_len")
    return ServerInfo(url, chosen, names, int(mml) if isinstance(mml, (int, float)) and mml > 0 else None)


class BenchRunner:
    def __init__(
        self,
        url: str,
        scenario: Scenario,
        *,
        model: str | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        progress_every_s: float = 0.5,
        metrics_every_s: float | None = None,
        drain_grace_s: float = 120.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.url = normalize_base_url(url)
        self.scenario = scenario
        self.model = model
        self.on_progress = on_progress
        self.progress_every_s = progress_every_s
        # Drain times need a fine time line of the queue. Otherwise /metrics is read only before
        # and after the run (and every 2 s for a progress display): parsing vLLM's page costs the
        # client tens of ms of CPU and the server some too, which shows up in the latency tail.
        self.metrics_every_s = metrics_every_s or (
            0.25 if scenario.drain_after else 2.0 if on_progress is not None else None
        )
        self.drain_grace_s = drain_grace_s
        self.clock = clock
        self.notes: list[str] = []
        self.info: ServerInfo | None = None
        self.results: list[RequestResult] = []
        self.cancelled = 0
        self._rng = random.Random(scenario.seed)
        self._prefix_rng = random.Random(scenario.seed + 1)  # which requests carry the shared prefix
        self._maker = PromptMaker(scenario.seed)
        self._windows: tuple[Window, ...] = ()
        self._tasks: set[asyncio.Task] = set()
        self._workers: dict[int, asyncio.Task] = {}
        self._target = 0
        self._issuing = True
        self._next_index = 0
        self._in_flight = 0
        self._failed = 0
        self._out_tokens = 0
        self._t0 = 0.0
        self._samples: list[tuple[float, float]] = []
        self._series: list[tuple[float, float | None, float | None, float | None]] = []
        self._waiting: float | None = None
        self._client: httpx.AsyncClient | None = None
        self._endpoint: Endpoint | None = None
        self._stop: asyncio.Event | None = None
        self._wake = asyncio.Event()  # set by a stop or by the last allowed request
        # A sync client for /metrics, scraped from a worker thread: reusing it keeps each scrape cheap.
        self._scraper = httpx.Client()

    # ---------------------------------------------------------------- set-up

    async def prepare(self, client: httpx.AsyncClient) -> Scenario:
        """Probe the server, fit the scenario to its context length and size the prompts."""
        self.info = await probe(client, self.url, self.model)
        sc = self.scenario
        if self.info.max_model_len:
            sc, notes = fit_context(sc, self.info.max_model_len)
            self.notes.extend(notes)
        else:
            self.notes.append("the server does not report max_model_len: prompt lengths were not checked against it")
        await self._maker.calibrate(client, self.info.model)
        if not self._maker.measured:
            self.notes.append("the server has no /tokenize endpoint: prompt lengths are estimates")
        self.scenario = sc
        await self._warm_up(client)
        return sc

    async def _warm_up(self, client: httpx.AsyncClient) -> None:
        """One request outside the figures (as `vllm bench serve` does): the first request after a
        start-up or an idle spell pays one-off costs that are not the server's steady behaviour."""
        sc = self.scenario
        prompt = self._maker.make(999_999, int(sc.prompt_tokens.mean), random.Random(0))
        body = request_body(sc.api, self.info.model, prompt, min(sc.max_tokens, 16), sc.ignore_eos)  # type: ignore[union-attr]
        r = await stream_request(client, endpoint(client, sc.api), body, self.clock)
        if not r.ok:
            self.notes.append(f"the warm-up request failed ({r.error}: {r.detail})")

    # ---------------------------------------------------------------- the run

    async def run(self, stop: asyncio.Event | None = None) -> BenchReport:
        try:
            return await self._run(stop)
        finally:
            self._scraper.close()

    async def _run(self, stop: asyncio.Event | None) -> BenchReport:
        self._stop = stop or asyncio.Event()
        started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        transport = LeanTransport()
        async with make_client(self.url, self.scenario.request_timeout_s, transport) as client:
            self._client = client
            self._endpoint = endpoint(client, self.scenario.api, transport)
            sc = await self.prepare(client)
            self._windows = windows(sc)
            before = await self._scrape()
            if before is None:
                self.notes.append(f"{self.url}/metrics did not answer: no engine counters or queue figures")
            self._t0 = self.clock()
            helpers = [asyncio.create_task(self._report_progress())]
            if before is not None and self.metrics_every_s:
                helpers.append(asyncio.create_task(self._sample_metrics()))
            interrupted = False
            try:
                interrupted = await self._drive()
            finally:
                load_s = self.clock() - self._t0
                for h in helpers:
                    h.cancel()
                await asyncio.gather(*helpers, return_exceptions=True)
            after = (
                await self._scrape_settled()
                if before is not None and not interrupted
                else (await self._scrape() if before is not None else None)
            )
        if after is not None:
            self._samples.append((load_s, after.waiting or 0.0))
            self._series.append((load_s, after.waiting, after.running, after.kv_usage))
        server = _deltas(before, after)
        kv = [(t, k) for t, _, _, k in self._series if k is not None]
        queue = queue_figures(sc, self._samples, self._windows, kv) if before is not None else None
        if sc.drain_after and before is None:
            self.notes.append("queue drain not measured: /metrics is not available")
        return build_report(
            sc=sc,
            url=self.url,
            model=self.info.model if self.info else (self.model or ""),
            started_at=started_at,
            results=self.results,
            cancelled=self.cancelled,
            load_s=load_s,
            windows=self._windows,
            interrupted=interrupted,
            sizing="tokenizer" if self._maker.measured else "estimate",
            server=server,
            queue=queue,
            notes=self.notes,
            engine=EngineSeries(
                tuple(round(t, 3) for t, *_ in self._series),
                tuple(w for _, w, _, _ in self._series),
                tuple(r for _, _, r, _ in self._series),
                tuple(k for _, _, _, k in self._series),
            ),
        )

    async def _drive(self) -> bool:
        """Run the schedule, then let in-flight requests finish. True when interrupted."""
        stop = self._stop
        assert stop is not None
        relay = asyncio.create_task(self._relay_stop())
        for w in self._windows:
            if stop.is_set() or not self._issuing:
                break
            if w.phase.concurrency is not None:
                self._target = w.phase.concurrency
                for i in range(w.phase.concurrency):
                    t = self._workers.get(i)
                    if t is None or t.done():
                        self._workers[i] = self._spawn(self._worker(i))
                await self._sleep_until(w.end_s)
            else:
                self._target = 0  # closed-loop workers retire after their current request
                await self._dispatch(w)
        self._issuing = False
        self._target = 0
        pending = {t for t in self._tasks if not t.done()}
        if pending and not stop.is_set():
            stopper = asyncio.create_task(stop.wait())
            deadline = self.clock() + self.drain_grace_s
            while not stop.is_set():
                pending = {t for t in self._tasks if not t.done()}
                if not pending:
                    break
                left = deadline - self.clock()
                if left <= 0:
                    self.notes.append(
                        f"{len(pending)} requests still running {self.drain_grace_s:g} s after the "
                        "schedule ended were cancelled"
                    )
                    break
                await asyncio.wait(pending | {stopper}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
        relay.cancel()
        interrupted = stop.is_set()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        return interrupted

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _relay_stop(self) -> None:
        await self._stop.wait()  # type: ignore[union-attr]
        self._wake.set()
        # Cancel what is in flight now: a dispatcher waiting for a free slot wakes up, and the
        # partial report does not wait for slow answers.
        for t in list(self._tasks):
            t.cancel()

    def _end_issuing(self) -> None:
        self._issuing = False
        self._wake.set()

    async def _sleep_until(self, t: float) -> None:
        """Sleep until run time t, waking at once when the run is stopped or no request is left to send."""
        delay = t - (self.clock() - self._t0)
        if delay <= 0:
            return
        if delay < 0.05:
            await asyncio.sleep(delay)
            return
        try:
            await asyncio.wait_for(self._wake.wait(), delay)
        except asyncio.TimeoutError:
            pass

    async def _worker(self, slot: int) -> None:
        while self._issuing and slot < self._target and not self._stop.is_set():  # type: ignore[union-attr]
            await self._one(0.0)

    def _arrivals(self, w: Window):
        trace = self.scenario.trace
        if w.phase.arrival == "trace" and trace is not None:
            return (w.start_s + t for t in trace.arrivals(w.phase.rate))
        return arrivals(w, self._rng)

    async def _dispatch(self, w: Window) -> None:
        cap = asyncio.Semaphore(w.phase.max_concurrency) if w.phase.max_concurrency else None
        for due in self._arrivals(w):
            if not self._issuing or self._stop.is_set():  # type: ignore[union-attr]
                return
            await self._sleep_until(due)
            if self._stop.is_set():  # type: ignore[union-attr]
                return
            if cap is not None:
                await cap.acquire()
            lag = max(0.0, self.clock() - self._t0 - due)
            task = self._spawn(self._one(lag))
            if cap is not None:
                task.add_done_callback(lambda _t: cap.release())
        await self._sleep_until(w.end_s)

    async def _one(self, lag: float) -> None:
        sc = self.scenario
        index = self._next_index
        if sc.max_requests is not None and index >= sc.max_requests:
            self._end_issuing()
            return
        self._next_index += 1
        if sc.max_requests is not None and self._next_index >= sc.max_requests:
            self._end_issuing()
        now = self.clock() - self._t0
        w = window_at(self._windows, now) or self._windows[-1]
        prompt, max_tokens = self._prompt(index)
        body = request_body(sc.api, self.info.model, prompt, max_tokens, sc.ignore_eos)  # type: ignore[union-attr]
        self._in_flight += 1
        try:
            r = await stream_request(
                self._client,
                self._endpoint,
                body,
                self.clock,
                index=index,
                phase=w.index,  # type: ignore[arg-type]
                run_start=self._t0,
                lag_s=lag,
            )
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        except Exception as exc:  # a bug in our client must cost one request, not the run
            r = RequestResult(
                index=index,
                phase=w.index,
                sent_s=now,
                ok=False,
                error="client_error",
                detail=f"{type(exc).__name__}: {exc}"[:160],
                lag_s=lag,
            )
        finally:
            self._in_flight -= 1
        self.results.append(r)
        if r.ok:
            self._out_tokens += r.output_tokens
        else:
            self._failed += 1

    def _prompt(self, index: int) -> tuple[str, int]:
        """The prompt and answer length of request `index`: drawn from the scenario's distribution
        (after a shared prefix for `prefix.share` of the requests), or the trace's entry `index`."""
        sc = self.scenario
        trace = sc.trace
        if trace is not None:
            e = trace.entries[index % len(trace.entries)]
            out, ins = e.output_tokens, e.input_tokens
            mml = self.info.max_model_len if self.info else None
            if mml:
                out = min(out, max(1, mml // 4)) if ins + out > mml else out
                ins = min(ins, max(1, mml - out - 48))
            if not e.hash_ids:
                return self._maker.make(index, ins, self._rng), out
            block = trace.block_tokens
            parts = [
                self._maker.shared(h, min(block, ins - i * block))
                for i, h in enumerate(e.hash_ids)
                if ins - i * block > 0
            ]
            return "".join(parts), out
        body = self._maker.make(index, draw_length(sc.prompt_tokens, self._rng), self._rng)
        p = sc.prefix
        if p is not None and self._prefix_rng.random() < p.share:
            return self._maker.shared(-1 - index % p.count, p.tokens) + body, sc.max_tokens
        return body, sc.max_tokens

    # ---------------------------------------------------------------- /metrics and progress

    async def _scrape(self) -> EngineMetrics | None:
        try:
            return await asyncio.to_thread(scrape, self.url, SCRAPE_TIMEOUT_S, self._scraper)
        except AscendctlError:
            return None

    async def _scrape_settled(self) -> EngineMetrics | None:
        """The last scrape, once the engine's token counter stopped moving (it lags the streams a little)."""
        last = await self._scrape()
        for _try in range(12):
            await asyncio.sleep(0.25)
            now = await self._scrape()
            if now is None or last is None or now.generation_tokens == last.generation_tokens:
                return now or last
            last = now
        return last

    async def _sample_metrics(self) -> None:
        while True:
            asked = self.clock() - self._t0
            m = await self._scrape()
            if m is not None:
                # The reading belongs to the moment the page was made, between asking and the answer:
                # under a burst on 2 cores a page takes seconds, and stamped on arrival the burst's
                # readings land after it (the burst then reads as never sampled).
                now = (asked + self.clock() - self._t0) / 2
                self._series.append((now, m.waiting, m.running, m.kv_usage))
                if m.waiting is not None:
                    self._waiting = m.waiting
                    self._samples.append((now, m.waiting))
            await asyncio.sleep(self.metrics_every_s)

    async def _report_progress(self) -> None:
        if self.on_progress is None:
            return
        history: collections.deque[tuple[float, int]] = collections.deque(maxlen=12)
        total = self.scenario.duration_s
        while True:
            await asyncio.sleep(self.progress_every_s)
            now = self.clock() - self._t0
            history.append((now, self._out_tokens))
            t_old, tok_old = history[0]
            rate = (self._out_tokens - tok_old) / (now - t_old) if now > t_old else None
            w = window_at(self._windows, now)
            self.on_progress(
                Progress(
                    elapsed_s=now,
                    total_s=total,
                    phase=w.phase.name if w else "finishing",
                    load=w.phase.load if w else "in-flight requests",
                    in_flight=self._in_flight,
                    completed=len(self.results) - self._failed,
                    failed=self._failed,
                    output_tokens=self._out_tokens,
                    output_tokens_per_s=rate,
                    waiting=self._waiting,
                )
            )


def _deltas(before: EngineMetrics | None, after: EngineMetrics | None) -> ServerCounters | None:
    if before is None or after is None:
        return None

    def d(name: str) -> float | None:
        a, b = getattr(after, name), getattr(before, name)
        return None if a is None or b is None else a - b

    return ServerCounters(
        d("generation_tokens"), d("prompt_tokens"), d("requests_ok"), d("prefix_queries"), d("prefix_hits")
    )


async def run_scenario(url: str, scenario: Scenario, **kwargs) -> BenchReport:
    """Convenience for scripts: run one scenario to the end."""
    return await BenchRunner(url, scenario, **kwargs).run()


__all__ = ["BenchRunner", "Progress", "ServerInfo", "make_client", "probe", "run_scenario"]
