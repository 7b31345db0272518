"""Time to ready: `ascendctl serve` against the raw vLLM api_server with the same flags, in the
same run, starts alternating so a busy machine slows both alike. Prints the ratio (goal <= 1.03).

    .venv/bin/python benchmarks/bench_serve_ready.py [--rounds N]

Ready means GET /health answers 200, polled by this script every 0.1 s in both cases, counted from
the moment the process is spawned. ascendctl's cost is its own start (profile, preflight, run
directory) and the log tee; the engine's start-up is the same.

The ratio compares the fastest start of each kind: on a shared host other work only ever adds
time (a start spends most of it importing torch and vLLM), so the minimum is the measurement least
disturbed. Medians are printed too.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
ASCENDCTL = str(Path(sys.executable).with_name("ascendctl"))
GOAL = 1.03


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def time_to_ready(argv: list[str], env: dict[str, str], port: int, timeout: float = 600) -> float:
    """Spawn, poll /health, return the seconds to 200; then stop the process and its group."""
    start = time.monotonic()
    spawned_at = time.time()
    proc = subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        with httpx.Client(timeout=1.0, trust_env=False) as client:
            while time.monotonic() - start < timeout:
                if proc.poll() is not None:
                    raise SystemExit(f"{argv[0]} exited with {proc.returncode} before it was ready")
                try:
                    if client.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                        time_to_ready.spawned_at = spawned_at  # type: ignore[attr-defined]
                        return time.monotonic() - start
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        raise SystemExit(f"not ready within {timeout} s: {' '.join(argv)}")
    finally:
        # ascendctl forwards SIGTERM to its engine group; the raw server gets it on its group.
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass


def _engine_spawned_after(state: str, spawned_at: float) -> float:
    """Seconds from spawning `ascendctl serve` to its spawning the engine (run.json started_at)."""
    from engine.runs import read_run

    newest = max((Path(state) / "runs").iterdir(), key=lambda d: d.stat().st_mtime)
    info = read_run(newest)
    return info.started_at - spawned_at if info else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="starts of each kind (default 2)")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    from engine.demo.ensure import ensure_model
    from engine.profiles import launch_spec, load_profile
    from engine.system import Host
    from engine.system.enginepy import query_engine

    model, _ = ensure_model()
    state = tempfile.mkdtemp(prefix="bench-serve-state-")
    base_env = {**os.environ, "ASCENDCTL_STATE_DIR": state}

    raw_times: list[float] = []
    ctl_times: list[float] = []
    own_start: list[float] = []  # ascendctl's own start: its spawn until it spawns the engine
    for i in range(args.rounds):
        order = ("raw", "ascendctl") if i % 2 == 0 else ("ascendctl", "raw")
        for kind in order:
            port = free_port()
            if kind == "raw":
                spec = launch_spec(
                    load_profile("cpu-tiny", [f"server.port={port}"], model=str(model)),
                    query_engine(Host()).vllm,
                    sys.executable,
                )
                t = time_to_ready(spec.argv, {**base_env, **spec.env}, port)
                raw_times.append(t)
            else:
                argv = [
                    ASCENDCTL,
                    "serve",
                    "--profile",
                    "cpu-tiny",
                    "--model",
                    str(model),
                    "--set",
                    f"server.port={port}",
                    "--json",
                ]
                t = time_to_ready(argv, base_env, port)
                ctl_times.append(t)
                own_start.append(_engine_spawned_after(state, time_to_ready.spawned_at))  # type: ignore[attr-defined]
            print(f"round {i + 1}: {kind:<9} ready in {t:6.2f} s", flush=True)

    raw, ctl = min(raw_times), min(ctl_times)
    ratio = ctl / raw
    for name, times in (("raw api_server ", raw_times), ("ascendctl serve", ctl_times)):
        print(
            f"{name} best {min(times):6.2f} s  median {statistics.median(times):6.2f} s  "
            f"({', '.join(f'{t:.2f}' for t in times)})"
        )
    print(
        f"ascendctl's own start before it spawns the engine: median {statistics.median(own_start):.2f} s "
        f"({', '.join(f'{t:.2f}' for t in own_start)})"
    )
    print(f"ratio ascendctl / raw (best starts) = {ratio:.3f}  (goal <= {GOAL}) {'OK' if ratio <= GOAL else 'OVER'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
