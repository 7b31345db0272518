"""CPU time and memory of the `ascendctl top` dashboard at a 1 s refresh, replaying 8 NPUs
(recorded `npu-smi info` + `-t usages` per card) and 2 engines (recorded /metrics sequence).

The dashboard runs in a child process on a pseudo-terminal (so the real terminal output is
paid for), for --seconds. The baseline is an empty Textual app measured the same way in the same
run: the ratio shows what the dashboard adds on top of the framework's own idle cost.

Four children: the table view, the charts view (`c`), and the charts view after a day of
history: 86400 one-second snapshots (the recorded ones again, times shifted to the last 24 h)
fed into the chart history before the app starts, so its memory is what a day costs and its CPU
is that of full 5-minute charts.

Goals: <= 2% of one core, <= 120 MB RSS.

    .venv/bin/python benchmarks/bench_top.py [--seconds 30]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures"
CPU_GOAL_PCT = 2.0
RSS_GOAL_MB = 120.0
DAY_S = 86400


def child(kind: str) -> None:
    sys.path.insert(0, str(ROOT))
    from textual.app import App

    if kind == "baseline":
        App().run()
        return

    from ascendctl.tui.app import TopApp
    from engine.devices import NpuSmiSource
    from engine.metrics import LeanParser
    from engine.system.runner import CommandResult
    from engine.telemetry import Collector, Target, Thresholds

    # Three 8-card 910B recordings in turn, so the device panel changes every tick as it does live.
    infos = [
        (FIX / "npu_smi" / "info" / name).read_text()
        for name in ("s01_910b3_25.2.0_blank_name.txt", "s02_910b2_25.2.0_vllm_dp.txt", "s03_910b4_25.0.rc1.1_idle.txt")
    ]
    ticks = [0]
    usages = (FIX / "npu_smi" / "usages" / "u2_910b_25.5.1.txt").read_text()
    times = json.loads((FIX / "vllm_seq" / "times.json").read_text())
    bodies = [(FIX / "vllm_seq" / name).read_text() for name in sorted(times)]

    class Replay:
        def which(self, name):
            return "/usr/local/sbin/npu-smi"

        def run(self, argv, timeout=10.0, env=None):
            if list(argv[1:]) == ["info"]:
                ticks[0] += 1
                return CommandResult(tuple(argv), 0, infos[ticks[0] % len(infos)], "")
            return CommandResult(tuple(argv), 0, usages, "")

    position = {"http://e1": 0, "http://e2": 5}
    parsers = {url: LeanParser() for url in position}  # one per engine, as the live collector has

    def scrape(url):  # the recorded bodies in a loop, parsed for real every tick
        body = bodies[position[url] % len(bodies)]
        position[url] += 1
        return parsers[url](body)

    collector = Collector(
        [Target("http://e1", "engine-1"), Target("http://e2", "engine-2")],
        NpuSmiSource(Replay()),
        Thresholds.defaults(),
        scrape_fn=scrape,
    )
    app = TopApp(collector.poll, interval=1.0, charts=kind != "dashboard")
    if kind == "day":
        import dataclasses

        start = time.perf_counter()
        recorded = [collector.poll() for _ in range(30)]  # real snapshots, recycled below
        now = time.time()
        for i in range(DAY_S):
            app.history.add(dataclasses.replace(recorded[i % len(recorded)], time=now - DAY_S + i))
        feed_s = time.perf_counter() - start
        Path(os.environ["BENCH_READY"]).write_text(json.dumps({"feed_s": feed_s, "series": app.history.series_count()}))
    app.run()


def measure(kind: str, seconds: float, ready: dict | None = None) -> tuple[float, float]:
    """(CPU % of one core, peak RSS MB) of one child over `seconds` after a 5 s warm-up (after
    the child says it is ready, for the day of history; what it said goes into `ready`)."""
    import tempfile

    import psutil

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    marker = Path(tempfile.mkdtemp()) / "ready"
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="160", LINES="50", BENCH_READY=str(marker))
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", kind],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        start_new_session=True,
    )
    os.close(slave)
    stop = threading.Event()

    def drain():
        while not stop.is_set():
            try:
                if not os.read(master, 65536):
                    break
            except OSError:
                break

    threading.Thread(target=drain, daemon=True).start()
    p = psutil.Process(proc.pid)
    if kind == "day":
        for _ in range(1200):
            if marker.exists() and marker.stat().st_size:
                break
            time.sleep(0.25)
        if ready is not None:
            ready.update(json.loads(marker.read_text()))
    time.sleep(5.0)  # imports and first paint are start-up, not steady state
    t0, c0 = time.monotonic(), sum(p.cpu_times()[:2])
    peak = 0.0
    while time.monotonic() - t0 < seconds:
        peak = max(peak, p.memory_info().rss / 2**20)
        time.sleep(0.5)
    cpu = (sum(p.cpu_times()[:2]) - c0) / (time.monotonic() - t0) * 100
    os.write(master, b"q")
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    stop.set()
    os.close(master)
    return cpu, peak


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--child", choices=("dashboard", "charts", "day", "baseline"))
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return 0
    base_cpu, base_rss = measure("baseline", args.seconds)
    print(f"empty Textual app (baseline)  : {base_cpu:5.2f}% of one core, {base_rss:6.1f} MB RSS")
    ready: dict = {}
    ok = True
    for kind, what in (
        ("dashboard", "top, 8 NPUs + 2 engines, 1 s "),
        ("charts", "  the same, charts view       "),
        ("day", "  charts, after 24 h history  "),
    ):
        cpu, rss = measure(kind, args.seconds, ready)
        ratio = f"(x{cpu / max(base_cpu, 0.01):.1f} cpu, x{rss / base_rss:.2f} rss of the baseline)"
        print(f"{what}: {cpu:5.2f}% of one core, {rss:6.1f} MB RSS {ratio}")
        ok = ok and cpu <= CPU_GOAL_PCT and rss <= RSS_GOAL_MB
    print(f"24 h of history: {DAY_S} snapshots fed in {ready.get('feed_s', 0):.1f} s, {ready.get('series')} series")
    print(f"goal <= {CPU_GOAL_PCT}% cpu, <= {RSS_GOAL_MB:.0f} MB rss: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
