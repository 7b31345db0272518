"""The engine in a container, under the same supervisor as a host engine.

The supervised process is the runtime's CLI (`docker run --rm --name ascendctl-<run> ...`,
attached): its output is the container's, so the log is tee'd exactly as a host engine's, and it
exits with the container's exit code. What differs is how it is stopped and cleaned up: signals
go to the container through the runtime (`RUNTIME stop -t GRACE NAME` for SIGTERM, `RUNTIME kill
-s SIG NAME` for another), the container is removed by name before each start and after each end,
and the watchdog removes it if ascendctl dies.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable

import psutil

from engine.container.client import container_pid
from engine.container.command import ContainerPlan
from engine.container.runtime import Runtime
from engine.launcher.process import EngineProcess, pids_listen_on
from engine.launcher.watchdog import Watchdog
from engine.system.runner import SubprocessRunner

CIDFILE = "container.id"  # in the run directory: the runtime writes the container's id there


class ContainerProcess(EngineProcess):
    """An EngineProcess whose argv is a runtime's `run` of container `name`."""

    def __init__(self, *args, plan: ContainerPlan, name: str, cidfile: Path | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.plan = plan
        self.runtime: Runtime = plan.runtime
        self.name = name
        self.cidfile = cidfile
        self._runner = SubprocessRunner()

    # -- start -------------------------------------------------------------------------------

    def start(self) -> None:
        # A container of this name left by the previous attempt (the runtime's --rm runs after
        # the CLI returns) or by a crash would make `run` refuse the name.
        self._runtime("rm", "-f", self.name)
        if self.cidfile is not None:
            try:
                self.cidfile.unlink()
            except OSError:
                pass
        super().start()

    def new_watchdog(self, pgid: int) -> Watchdog:
        return Watchdog(pgid, container=(self.runtime.path, self.name))

    def _runtime(self, *args: str, timeout: float = 30.0) -> bool:
        try:
            done = subprocess.run(
                [self.runtime.path, *args],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        return done.returncode == 0

    # -- what run.json and readiness ask ----------------------------------------------------

    def container_id(self) -> str | None:
        if self.cidfile is None:
            return None
        try:
            text = self.cidfile.read_text(encoding="utf-8").strip()
        except OSError:
            return None
        return text or None

    def describe(self) -> dict | None:
        return self.plan.record(self.name, self.container_id())

    def listens_on(self, port: int) -> bool | None:
        """With the host's network, the listening socket belongs to a process of the container
        (seen from the host); a published port is held by the runtime's proxy: None, /health
        and the port lock decide."""
        if self.plan.settings.network != "host":
            return None
        pid = container_pid(self.runtime, self._runner, self.name)
        if pid is None:
            return None
        try:
            root = psutil.Process(pid)
            pids = [root.pid, *(c.pid for c in root.children(recursive=True))]
        except psutil.Error:
            return None
        return pids_listen_on(pids, port)

    # -- stop and clean up ------------------------------------------------------------------

    def send(self, sig: int) -> None:
        self._runtime("kill", "--signal", signal.Signals(sig).name, self.name)

    def stop(
        self, sig: int = signal.SIGTERM, grace: float = 20.0, kill_now: Callable[[], bool] = lambda: False
    ) -> int | None:
        """SIGTERM: `RUNTIME stop -t GRACE NAME` (the runtime sends SIGTERM, then SIGKILL after the
        grace period); another signal: sent with `RUNTIME kill`, SIGKILL after the grace period.
        A second Ctrl-C (kill_now) kills the container at once."""
        if self.proc is None:
            return None
        if sig == signal.SIGTERM:
            stopper = threading.Thread(
                target=self._runtime,
                args=("stop", "-t", str(int(round(grace))), self.name),
                kwargs={"timeout": grace + 30},
                daemon=True,
            )
            stopper.start()
        else:
            self.send(sig)
        deadline = time.monotonic() + grace + 5  # the runtime's own SIGKILL comes at `grace`
        while time.monotonic() < deadline and not kill_now():
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        else:
            self._runtime("kill", self.name)
        self.sweep()
        return self.proc.returncode

    def sweep(self, grace: float = 5.0) -> None:
        """The CLI has returned (or is killed now): remove the container, then what is left of
        the CLI's process group, and disarm the watchdog."""
        if self.proc is None:
            return
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self._runtime("kill", self.name)
        self._runtime("rm", "-f", self.name)
        super().sweep(grace)
