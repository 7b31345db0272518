"""The demo's background load: the bench client running a light, varied scenario (load.yaml)
round after round against the demo's engine, in a thread of its own, until stopped.

Used as a context manager around the dashboard: `with BackgroundLoad(url, model): ...`. Stopping
cancels the requests in flight and joins the thread: nothing is left running."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading

from engine.bench import BenchRunner, Scenario
from engine.bench.scenario import parse_scenario
from engine.data import load_yaml
from engine.errors import AscendctlError

log = logging.getLogger(__name__)

# Seconds to wait before the next round when one failed (the engine busy starting, or gone: the
# dashboard shows which).
RETRY_S = 5.0


def load_plan() -> tuple[Scenario, tuple[int, ...]]:
    """The scenario of one round and the answer lengths the rounds take in turn (load.yaml)."""
    data = load_yaml("engine.demo", "load.yaml")
    return parse_scenario(data["scenario"], "engine/demo/load.yaml"), tuple(int(n) for n in data["max_tokens"])


class BackgroundLoad:
    """A light load on `url` while open. `rounds`: how many rounds at most (None: until stopped)."""

    def __init__(self, url: str, model: str | None = None, scenario: Scenario | None = None, rounds: int | None = None):
        base, lengths = load_plan()
        self.url, self.model, self.rounds = url, model, rounds
        self.scenario = scenario or base
        self.lengths = lengths
        self.sent = 0  # requests finished (ok or not), over all rounds
        self.ok = 0
        self._stopping = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._thread = threading.Thread(target=self._run, name="demo-load", daemon=True)

    def __enter__(self) -> "BackgroundLoad":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 15.0) -> None:
        """Cancel what is in flight and wait for the thread to end."""
        self._stopping.set()
        loop, task = self._loop, self._task
        if loop is not None and task is not None:
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:
                pass  # the loop already closed: the thread is ending by itself
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except asyncio.CancelledError:
            pass

    async def _main(self) -> None:
        self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
        done = 0
        while not self._stopping.is_set() and (self.rounds is None or done < self.rounds):
            sc = dataclasses.replace(self.scenario, max_tokens=self.lengths[done % len(self.lengths)], seed=done)
            runner = BenchRunner(self.url, sc, model=self.model, drain_grace_s=sc.request_timeout_s)
            try:
                await runner.run()
            except AscendctlError as exc:
                log.debug("demo load round failed: %s", exc.cause)
                await asyncio.sleep(RETRY_S)
                continue
            finally:
                done += 1
                self.sent += len(runner.results)
                self.ok += sum(1 for r in runner.results if r.ok)


__all__ = ["BackgroundLoad", "load_plan"]
