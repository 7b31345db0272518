"""Replay helpers for the telemetry tests: recorded npu-smi outputs behind a fake runner, and
recorded /metrics bodies behind a fake scrape. Nothing here invents tool output."""

from __future__ import annotations

import json
from typing import Callable, Iterable, Mapping, Sequence

from helpers import FIXTURES

from engine.metrics import EngineMetrics, parse_metrics
from engine.system.runner import CommandResult, ToolMissing, ToolTimeout

NPU = FIXTURES / "npu_smi"
SEQ = FIXTURES / "vllm_seq"


def npu_text(rel: str) -> str:
    return (NPU / rel).read_text(encoding="utf-8")


class ReplayRunner:
    """Answers `npu-smi info` with one recording, `-t usages -i N` with another and `-t health`
    with a third; can fail."""

    def __init__(
        self, info: str | Exception, usages: str | Exception | None = None, health: str | Exception | None = None
    ) -> None:
        self.info = info
        self.usages = usages
        self.health = health
        self.calls: list[tuple[str, ...]] = []

    def which(self, name: str) -> str | None:
        return None if isinstance(self.info, ToolMissing) else f"/usr/local/sbin/{name}"

    def run(self, argv: Sequence[str], timeout: float = 10.0, env: Mapping[str, str] | None = None) -> CommandResult:
        argv = tuple(argv)
        self.calls.append(argv)
        answer = self.info if argv[1:] == ("info",) else self.health if "health" in argv else self.usages
        if answer is None:
            return CommandResult(argv, 1, "", "")
        if isinstance(answer, Exception):
            raise answer
        return CommandResult(argv, 0, answer, "")


def timeout_error() -> ToolTimeout:
    return ToolTimeout("npu-smi did not answer within 5 s", "check the driver")


def seq_bodies() -> list[tuple[float, str]]:
    times = json.loads((SEQ / "times.json").read_text())
    return [(t, (SEQ / name).read_text(encoding="utf-8")) for name, t in sorted(times.items())]


class ScriptedScrape:
    """Per-URL list of bodies (or exceptions) served in order; the last one repeats."""

    def __init__(self, script: Mapping[str, Iterable[str | Exception]]) -> None:
        self.script = {url: list(items) for url, items in script.items()}
        self.position = {url: 0 for url in script}

    def __call__(self, url: str) -> EngineMetrics:
        items = self.script[url]
        i = min(self.position[url], len(items) - 1)
        self.position[url] += 1
        item = items[i]
        if isinstance(item, Exception):
            raise item
        return parse_metrics(item)


class StepClock:
    """A clock that returns the given instants in turn (then keeps adding the last step)."""

    def __init__(self, instants: Sequence[float]) -> None:
        self.instants = list(instants)
        self.i = 0

    def __call__(self) -> float:
        if self.i < len(self.instants):
            value = self.instants[self.i]
        else:
            value = self.instants[-1] + (self.i - len(self.instants) + 1)
        self.i += 1
        return value


def fixed(value: float) -> Callable[[], float]:
    return lambda: value


class MetricsServer:
    """A local HTTP endpoint serving recorded /metrics bodies in turn (the last one repeats).
    `.bodies` may be replaced at any time; a body of None answers HTTP 500."""

    def __init__(self, bodies: Sequence[str | None]) -> None:
        import http.server
        import threading

        self.bodies = list(bodies)
        self.hits = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's naming
                if self.path != "/metrics":  # as vLLM answers a path it does not serve
                    self.send_response(404)
                    self.end_headers()
                    return
                i = min(server.hits, len(server.bodies) - 1)
                server.hits += 1
                body = server.bodies[i]
                if body is None:
                    self.send_response(500)
                    self.end_headers()
                    return
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=1.0.0; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def chart_feed(
    info: str = "info/s02_910b2_25.2.0_vllm_dp.txt",
    engines: Sequence[str] = ("engine-1", "engine-2"),
    seconds: int = 900,
    t0: float = 1_800_000_000.0,
    down: tuple[int, int] = (400, 460),
) -> list:
    """One snapshot a second with known series for the charts: the chips of a recorded npu-smi
    table, their figures and the engines' set by formulas (waves of 5 minutes, each chip a little
    later than the one before); the last engine is down for the `down` seconds."""
    import dataclasses
    import math

    from engine.devices import NpuSmiSource
    from engine.metrics.rates import EngineRates, KvPool, Percentiles
    from engine.telemetry.snapshot import EngineView, Snapshot, SourceStatus

    chips = NpuSmiSource(ReplayRunner(npu_text(info), None)).sample()
    out = []
    for s in range(seconds):
        t = t0 + s

        def wave(shift: float, s: int = s) -> float:
            return math.sin(2 * math.pi * s / 300 + shift)

        devices = tuple(
            dataclasses.replace(
                d,
                mem_used_mb=(d.mem_total_mb or 65536) * (0.86 + 0.04 * wave(i / 4)),
                mem_bw_pct=50 + 40 * wave(i / 4),
                util_pct=60 + 30 * wave(i / 4 + 1),
            )
            for i, d in enumerate(chips)
        )
        views = []
        for k, label in enumerate(engines):
            if k == len(engines) - 1 and down[0] <= s < down[1]:
                views.append(EngineView(url=f"http://{label}", label=label, status=SourceStatus(label, False)))
                continue
            views.append(
                EngineView(
                    url=f"http://{label}",
                    label=label,
                    status=SourceStatus(label, True),
                    running=round(12 + 10 * wave(k)),
                    waiting=max(0, round(20 * wave(k + 2))),
                    kv=KvPool(8192, None, 0.5 + 0.4 * wave(k + 1)),
                    rates=EngineRates(
                        prompt_tps=1500 + 1000 * wave(k),
                        generation_tps=600 + 300 * wave(k + 0.5),
                        ttft=Percentiles(p99=0.4 + 0.3 * wave(k + 2)),
                        itl=Percentiles(p99=0.05 + 0.02 * wave(k)),
                    ),
                )
            )
        source = SourceStatus("npu-smi", True, t, 0.0)
        out.append(Snapshot(t, s + 1, devices=devices, device_source=source, engines=tuple(views)))
    return out
