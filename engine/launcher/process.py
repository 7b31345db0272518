"""One engine process tree: started in its own process group, its output tee'd line by line.

The engine (vLLM's API server) forks an engine-core and worker processes. They all stay in the
process group we create, so signals go to the group and nothing is left behind: after the main
process exits we still sweep the group, and after the grace period everything left gets SIGKILL.
"""

from __future__ import annotations

import collections
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

import psutil

from engine.errors import BadInput

TAIL_LINES = 600  # enough for a full vLLM start-up traceback chain (~250 lines)
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child before exec: if ascendctl itself is SIGKILLed, the engine gets SIGTERM
    (and shuts its own children down) instead of running on unsupervised."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of the group. Zombies are left out: an orphan's zombie waits
    for PID 1 to reap it, and in some containers PID 1 never does."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass
    members = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(proc.pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return members


def group_alive(pgid: int) -> bool:
    return bool(group_members(pgid))


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class EngineProcess:
    """Start with `start()`; every output line goes to the log file, to `on_line`, and to a tail
    buffer kept for the crash diagnosis."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        log_path: Path,
        on_line: Callable[[str], None] | None = None,
    ) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.log_path = Path(log_path)
        self.on_line = on_line
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self.started_at = 0.0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> None:
        try:
            self.proc = subprocess.Popen(
                self.argv,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own session and process group: pgid == pid
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        except OSError as exc:
            raise BadInput(
                f"cannot start the engine ({self.argv[0]}): {exc.strerror or exc}",
                "check the engine interpreter: run ./install.sh, or point the profile at an existing python",
            ) from exc
        self.started_at = time.time()
        self._reader = threading.Thread(target=self._pump, name="engine-log", daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with open(self.log_path, "ab") as log:
            for raw in iter(self.proc.stdout.readline, b""):
                log.write(raw)
                log.flush()
                # tqdm bars redraw with \r: keep the last state of the line.
                line = raw.decode("utf-8", "replace").rstrip("\r\n").rsplit("\r", 1)[-1]
                self.tail.append(line)
                if self.on_line is not None:
                    try:
                        self.on_line(line)
                    except Exception:  # a display problem must never stop the tee
                        pass
        self.proc.stdout.close()

    def poll(self) -> int | None:
        return self.proc.poll() if self.proc else None

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code, or None if still running after `timeout` seconds."""
        if self.proc is None:
            return None
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self.drain()
        return code

    def drain(self, timeout: float = 5.0) -> None:
        """Wait for the reader to copy what the engine wrote before it exited."""
        if self._reader is not None:
            self._reader.join(timeout)

    def send(self, sig: int) -> None:
        if self.proc is not None:
            signal_group(self.proc.pid, sig)

    def group_alive(self) -> bool:
        return self.proc is not None and group_alive(self.proc.pid)

    def stop(
        self, sig: int = signal.SIGTERM, grace: float = 20.0, kill_now: Callable[[], bool] = lambda: False
    ) -> int | None:
        """Send `sig` to the whole group, wait up to `grace` seconds for every process of it to
        end, then SIGKILL what is left. Returns the main process's exit code."""
        if self.proc is None:
            return None
        self.send(sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and not kill_now():
            self.proc.poll()
            if self.proc.returncode is not None and not self.group_alive():
                break
            time.sleep(0.1)
        else:
            self.send(signal.SIGKILL)
        self.sweep()
        return self.proc.returncode

    def sweep(self, grace: float = 5.0) -> None:
        """After the main process is gone, make sure none of its children outlive it."""
        if self.proc is None:
            return
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.send(signal.SIGKILL)
            self.proc.wait()
        if self.group_alive():
            self.send(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while self.group_alive() and time.monotonic() < deadline:
                time.sleep(0.1)
            if self.group_alive():
                self.send(signal.SIGKILL)
                deadline = time.monotonic() + grace
                while self.group_alive() and time.monotonic() < deadline:
                    time.sleep(0.05)
        self.drain()
