"""One engine process tree: started in its own process group, its output tee'd line by line.

The engine (vLLM's API server) forks an engine-core and worker processes. They all stay in the
process group we create, so signals go to the group and nothing is left behind: after the main
process exits we still sweep the group, and after the grace period everything left gets SIGKILL.
If ascendctl itself dies, a watchdog (watchdog.py) kills the group.

The engine never waits for us: its output is read all the time, and a log file that cannot be
written (a full disk) costs lines of the log, never a blocked engine.
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
from typing import BinaryIO, Callable, Iterable, Mapping, Sequence

import psutil

from engine.errors import BadInput
from engine.launcher.rundir import marker
from engine.launcher.watchdog import Watchdog

TAIL_LINES = 600  # enough for a full vLLM start-up traceback chain (~250 lines)
LOG_RETRY = 30.0  # seconds between attempts to write a log that failed (a disk may get space again)
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child before exec: if ascendctl dies before the watchdog is armed, the
    engine's main process dies too. SIGKILL, since vLLM ignores SIGTERM early in its start-up.
    (The kernel sends it when the thread that started the engine exits: start it from a thread
    that lives as long as the run.)"""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def open_log_file(path: Path) -> BinaryIO:
    return open(path, "ab")


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


def group_listens_on(pgid: int, port: int) -> bool | None:
    """True when a process of the group has a listening socket on `port`, False when none has,
    None when we may not look (another user's processes)."""
    return pids_listen_on(group_members(pgid), port)


def pids_listen_on(pids: Iterable[int], port: int) -> bool | None:
    """True when one of `pids` has a listening socket on `port`, False when none has, None when
    we may not look at one of them (another user's processes)."""
    unknown = False
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            conns = proc.net_connections(kind="inet") if hasattr(proc, "net_connections") else proc.connections("inet")
        except psutil.AccessDenied:
            unknown = True
            continue
        except psutil.Error:
            continue
        if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in conns):
            return True
    return None if unknown else False


class EngineProcess:
    """Start with `start()`; every output line goes to the log file, to `on_line`, and to a tail
    buffer kept for the crash diagnosis.

    When the log cannot be written, its lines are dropped (counted in `log_lines_dropped`) while
    the output is still read, `on_log_error` hears of the first error, and a write is tried again
    every LOG_RETRY seconds; a marker in the log then says how many lines are missing.
    `open_log` opens the log file (tests pass one that fails)."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        log_path: Path,
        on_line: Callable[[str], None] | None = None,
        on_log_error: Callable[[OSError], None] | None = None,
        open_log: Callable[[Path], BinaryIO] | None = None,
    ) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.log_path = Path(log_path)
        self.on_line = on_line
        self.on_log_error = on_log_error
        self._open_log = open_log or open_log_file
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._watchdog: Watchdog | None = None
        self.started_at = 0.0
        self.log_error: OSError | None = None  # the first error writing the log
        self.log_lines_dropped = 0
        self._gap = 0  # lines dropped since the log was last written
        self._retry_at = 0.0

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
        # Right after the start: until it is armed, only the parent-death signal guards the
        # engine's main process, which has had no time to start children.
        self._watchdog = self.new_watchdog(self.proc.pid) if sys.platform.startswith("linux") else None
        self._reader = threading.Thread(target=self._pump, name="engine-log", daemon=True)
        self._reader.start()

    def new_watchdog(self, pgid: int) -> Watchdog:
        return Watchdog(pgid)

    def listens_on(self, port: int) -> bool | None:
        """Does this engine own the listening socket on `port`? (None: we may not look.)"""
        return group_listens_on(self.proc.pid, port) if self.proc is not None else None

    def describe(self) -> dict | None:
        """What run.json records about where the engine runs beyond its pid (a container)."""
        return None

    def _pump(self) -> None:
        """Read the engine's output to its end, whatever happens to the log: an engine whose pipe
        is not drained blocks in its next print, and stops answering."""
        assert self.proc is not None and self.proc.stdout is not None
        log = self._log_open()
        for raw in iter(self.proc.stdout.readline, b""):
            log = self._log_write(log, raw)
            # tqdm bars redraw with \r: keep the last state of the line.
            line = raw.decode("utf-8", "replace").rstrip("\r\n").rsplit("\r", 1)[-1]
            self.tail.append(line)
            if self.on_line is not None:
                try:
                    self.on_line(line)
                except Exception:  # a display problem must never stop the tee
                    pass
        self._log_close(log)
        self.proc.stdout.close()

    def _log_open(self) -> BinaryIO | None:
        try:
            return self._open_log(self.log_path)
        except OSError as exc:
            self._log_failed(exc)
            return None

    def _log_write(self, log: BinaryIO | None, raw: bytes) -> BinaryIO | None:
        """Write one line; the log to use for the next one (None while it cannot be written)."""
        if log is None:
            if time.monotonic() < self._retry_at or (log := self._log_open()) is None:
                self._drop()
                return None
        try:
            if self._gap:
                reason = self.log_error.strerror if self.log_error else None
                text = f"{self._gap} lines of the engine's output are missing here: {reason or self.log_error}"
                log.write((os.linesep + marker(text)).encode("utf-8"))
            log.write(raw)
            log.flush()
        except OSError as exc:
            self._log_failed(exc)
            self._log_close(log)
            self._drop()
            return None
        self._gap = 0
        return log

    def _drop(self) -> None:
        self.log_lines_dropped += 1
        self._gap += 1

    def _log_failed(self, exc: OSError) -> None:
        self._retry_at = time.monotonic() + LOG_RETRY
        if self.log_error is not None:
            return  # said once
        self.log_error = exc
        if self.on_log_error is not None:
            try:
                self.on_log_error(exc)
            except Exception:  # reporting it must not stop the reading either
                pass

    @staticmethod
    def _log_close(log: BinaryIO | None) -> None:
        if log is not None:
            try:
                log.close()
            except OSError:
                pass  # what it still buffered is lost; the count of dropped lines says so

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
        if self._watchdog is not None:
            # A group that resisted even SIGKILL (a process stuck in the kernel): the watchdog
            # kills it once more and exits; one that is gone: no kill of a reused group id.
            if self.group_alive():
                self._watchdog.fire()
            else:
                self._watchdog.disarm()
            self._watchdog = None
        self.drain()
