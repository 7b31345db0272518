"""Run the engine from a launch spec and look after it: start-up phases, readiness on /health,
signals forwarded to its process group, restarts on failure, and a diagnosis when it dies.

The shell passes a `Listener` to show what happens; the supervisor itself prints nothing.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, Mapping, Sequence
from urllib.parse import urlsplit, urlunsplit

from engine import runs
from engine.i18n import N_
from engine.launcher import rundir
from engine.launcher.diagnosis import Diagnosis, describe_exit, diagnose
from engine.launcher.hangwatch import HangPolicy, HangWatch
from engine.launcher.phases import PhaseEvent, PhaseRecord, PhaseTracker
from engine.launcher.portlock import PortLock
from engine.launcher.process import EngineProcess

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True)
class RestartPolicy:
    """`on_failure`: start the engine again when it exits without being asked to (whatever its
    code: vLLM's API server exits 0 when its EngineCore dies) or never gets ready, up to
    `max_restarts` times in a row, waiting backoff, 2x backoff, ... (capped) in between. A run
    that stayed ready for `reset_after` seconds starts the count again."""

    on_failure: bool = False
    max_restarts: int = 3
    backoff: float = 2.0
    backoff_max: float = 60.0
    reset_after: float = 300.0

    def delay(self, attempt: int) -> float:
        return min(self.backoff * (2 ** max(0, attempt - 1)), self.backoff_max)


class Listener:
    """What the supervisor reports. Methods may be called from the log-reader thread."""

    def line(self, line: str) -> None: ...

    def phase(self, event: PhaseEvent) -> None: ...

    def started(self, pid: int, attempt: int) -> None: ...

    def ready(self, url: str, seconds: float, phases: list[PhaseRecord]) -> None: ...

    def exited(self, code: int | None, diagnosis: Diagnosis | None, restart_in: float | None, attempt: int) -> None: ...

    def stopping(self, signame: str, grace: float) -> None: ...

    def hung(self, record: "runs.HangRecord") -> None:
        """The hang monitor called the engine hung (`record.action` says what follows)."""

    def warning(self, message: str) -> None:
        """Something the operator should know that does not stop the run (a log that cannot be
        written...). Each kind is said once."""


@dataclass(frozen=True)
class Outcome:
    exit_code: int | None  # the engine's last exit code (negative: killed by that signal)
    run_dir: Path
    url: str
    restarts: int = 0
    stopped_by: str | None = None  # the signal that stopped us (SIGINT, SIGTERM...)
    ready_seconds: float | None = None  # time to ready of the last start
    timed_out: bool = False  # never got ready within the ready timeout
    diagnosis: Diagnosis | None = None
    phases: list[PhaseRecord] = field(default_factory=list)
    hangs: list[runs.HangRecord] = field(default_factory=list)  # every hang found in the run

    @property
    def failed(self) -> bool:
        """A server only stops when asked: an engine that ended without a signal of ours failed,
        whatever its exit code."""
        return self.stopped_by is None and (self.timed_out or self.exit_code is not None)


def health_url(url: str) -> str:
    """Where to probe: a wildcard bind address is reached on the loopback."""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    netloc = f"[{host}]" if ":" in host else host
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme or "http", netloc, "/health", "", ""))


class Supervisor:
    # The hang watch (engine/launcher/hangwatch.py): set by the caller to watch a ready engine.
    hang_policy: HangPolicy | None = None
    _hang: HangWatch | None = None

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        url: str,
        run_dir: Path,
        profile_name: str,
        listener: Listener | None = None,
        policy: RestartPolicy = RestartPolicy(),
        grace: float = 20.0,
        ready_timeout: float | None = 1800.0,
        poll_interval: float = 0.2,
        port_lock: PortLock | None = None,
        open_log: Callable[[Path], BinaryIO] | None = None,
        health: bool = True,
        process: Callable[..., EngineProcess] = EngineProcess,
    ) -> None:
        self.argv = list(argv)
        # What runs the argv: EngineProcess, or ContainerProcess (launcher/container.py) when the
        # argv is a container runtime's `run`.
        self.process = process
        # False for an engine without an API server (a headless data-parallel host): nothing to
        # wait for, it is supervised from its start.
        self.health = health
        self.role: str | None = None  # serve --role: the part of a pd / external-dp layout (run.json)
        self.env = dict(env)
        self.url = url
        self.run_dir = Path(run_dir)
        self.profile_name = profile_name
        self.listener = listener or Listener()
        self.policy = policy
        self.grace = grace
        self.ready_timeout = ready_timeout
        self.poll_interval = poll_interval
        self.log_path = self.run_dir / runs.LOG_FILE
        self.engine: EngineProcess | None = None
        self.tracker = PhaseTracker()
        self.info: runs.RunInfo | None = None
        self._stop = threading.Event()
        self._kill_now = threading.Event()
        self._stop_signal: int | None = None
        self._ready_at: float | None = None
        self.timed_out = False
        self._health = health_url(url)
        self._port = urlsplit(url).port
        self.port_lock = port_lock  # held until the run ends: released by run() or shutdown()
        self._open_log = open_log
        self._record_lock = threading.Lock()  # run.json is updated from the log thread as well
        self._said_started = threading.Event()  # the listener has been told of the engine's start
        self._warned: set[str] = set()
        self._warn_lock = threading.Lock()

    # -- signals -----------------------------------------------------------------------------

    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        """First call: forward `signum` and stop gracefully. A second call: SIGKILL at once."""
        if self._stop.is_set():
            self._kill_now.set()
            return
        self._stop_signal = signum
        self._stop.set()

    @contextmanager
    def forwarding_signals(self) -> Iterator[None]:
        """Install handlers for SIGINT/SIGTERM/SIGHUP that stop the engine (main thread only)."""
        previous = {}
        for sig in FORWARDED_SIGNALS:
            previous[sig] = signal.signal(sig, lambda s, _f: self.request_stop(s))
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def stop_signal(self) -> int:
        """The signal to forward: the one we received, SIGTERM when we stop on our own."""
        return self._stop_signal or signal.SIGTERM

    def wait_for_stop(self, timeout: float) -> bool:
        """Sleep up to `timeout` seconds; True as soon as a stop is requested."""
        return self._stop.wait(timeout)

    # -- one engine process ------------------------------------------------------------------

    def start(self, attempt: int = 0) -> EngineProcess:
        self.tracker = PhaseTracker()
        self._ready_at = None
        self._said_started.clear()
        engine = self.process(
            self.argv,
            self.env,
            self.log_path,
            on_line=self._on_line,
            on_log_error=self._log_failed,
            open_log=self._open_log,
        )
        engine.start()
        self.engine = engine
        assert engine.pid is not None
        if self.info is None:
            with self._record_lock:
                self.info = rundir.new_record(
                    self.run_dir,
                    self.profile_name,
                    self.url,
                    self.argv,
                    engine.pid,
                    serves_api=self.health,
                    role=self.role,
                )
            self._record(container=engine.describe())
        else:
            self._record(
                pid=engine.pid,
                ended_at=None,
                exit_code=None,
                phase=None,
                ready_seconds=None,
                restarts=attempt,
                container=engine.describe(),
            )
        self.listener.started(engine.pid, attempt)
        self._said_started.set()
        return engine

    def _warn_once(self, kind: str, message: str) -> None:
        with self._warn_lock:  # the log thread and the main thread both warn
            if kind in self._warned:
                return
            self._warned.add(kind)
        self.listener.warning(message)

    def _record(self, **changes) -> None:
        """Update run.json. A state directory that cannot be written (a full disk) costs the
        record, never the run: the operator is told once, and the last write tries again."""
        with self._record_lock:
            if self.info is None:
                return
            self.info = dataclasses.replace(self.info, **changes)
            try:
                runs.write_run(self.info)
            except OSError as exc:
                self._warn_once(
                    "run.json", f"cannot write {self.run_dir / runs.RUN_FILE}: {exc.strerror or exc}; the run goes on"
                )

    def _log_failed(self, exc: OSError) -> None:
        """From the log thread, on the first error writing the engine log."""
        self._warn_once(
            "log",
            f"cannot write the engine log {self.log_path}: {exc.strerror or exc}. The engine keeps running; "
            "its output is still read, but lines are dropped (run.json counts them) until the log can be "
            "written again",
        )
        self._record(log_error=str(exc))

    def _on_line(self, line: str) -> None:
        # The log thread starts with the engine: its first phase must not be told before the
        # engine's start is (a busy host once printed a `phase` event ahead of `started`).
        self._said_started.wait(5.0)
        self.listener.line(line)
        if self._ready_at is not None:
            return  # start-up is over: spare the pattern scan on every access-log line
        event = self.tracker.feed(line)
        if event is not None:
            self.listener.phase(event)
            self._record(phase=event.phase)

    def wait_ready(self) -> bool:
        """Poll /health until it answers 200. False when the engine exits, a stop is requested
        or the ready timeout passes (`self.timed_out` tells which)."""
        assert self.engine is not None
        self.timed_out = False
        if not self.health:
            return self.engine.poll() is None
        deadline = None if self.ready_timeout is None else time.monotonic() + self.ready_timeout
        from engine.errors import Unreachable
        from engine.httpread import client as http_client
        from engine.httpread import read_page

        with http_client(2.0) as client:
            while not self._stop.is_set():
                if self.engine.poll() is not None:
                    return False
                try:
                    page = read_page(client, self._health, deadline=2.0, max_bytes=64 * 1024, what=N_("the engine"))
                    if page.status_code == 200 and self._serves_port():
                        ready_at = self.tracker.elapsed()
                        self._catch_up_on_phases()
                        self._ready_at = ready_at
                        self._record(
                            phase="ready", ready_seconds=round(self._ready_at, 3), container=self.engine.describe()
                        )
                        self.listener.ready(self.url, self._ready_at, self.tracker.records(self._ready_at))
                        return True
                except Unreachable:
                    pass
                if deadline is not None and time.monotonic() > deadline:
                    self.timed_out = True
                    return False
                self._stop.wait(self.poll_interval)
        return False

    def _catch_up_on_phases(self, patience: float = 1.0) -> None:
        """/health can answer before the output thread has read the lines that announced the API
        server (a busy host): wait a moment for the last start-up phase, so the ready report lists
        every phase. An engine that never prints it costs `patience` once."""
        if not self.tracker.specs:
            return
        last = self.tracker.specs[-1].id
        deadline = time.monotonic() + patience
        while not self.tracker.reached(last) and time.monotonic() < deadline:
            if self._stop.wait(0.02):  # a stop was asked for: report what was read
                return

    def _serves_port(self) -> bool:
        """Is the server that answered /health this engine? Another server on the port (one
        started a moment earlier) answers as well; ours owns the listening socket."""
        assert self.engine is not None and self.engine.pid is not None
        if self._port is None:
            return True
        owned = self.engine.listens_on(self._port)
        if owned is False:
            self._warn_once(
                "port",
                f"another server answers on port {self._port}, not this engine; waiting for the engine's own",
            )
        return owned is not False  # None: we may not look, so /health has the last word

    def wait_exit(self, timeout: float | None = None) -> int | None:
        """Block until the engine exits (its code), or a stop is requested or `timeout` seconds
        pass (None)."""
        assert self.engine is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        watch = self._watch_hangs()
        try:
            while not self._stop.is_set():
                step = (
                    self.poll_interval
                    if deadline is None
                    else max(0.0, min(self.poll_interval, deadline - time.monotonic()))
                )
                code = self.engine.wait(step)
                if code is not None:
                    return code
                if watch is not None and watch.hung.is_set():
                    return None  # hung: self._hang.verdict says why, the loop ends the group
                if deadline is not None and time.monotonic() >= deadline:
                    return None
            return None
        finally:
            if watch is not None:
                watch.stop()

    def _watch_hangs(self) -> HangWatch | None:
        """Start the hang watch on a ready engine that serves the API, when a policy is set."""
        self._hang = None
        policy = self.hang_policy
        if policy is None or self.engine is None:
            return None
        if self.health and self._ready_at is not None:
            url = health_url(self.url).rsplit("/health", 1)[0]
        elif not self.health and policy.group_url:
            url = policy.group_url  # a headless rank: its group answers through node 0
        else:
            return None
        engine = self.engine
        self._hang = HangWatch(
            policy,
            url,
            engine.pid,
            self.run_dir,
            len(self.info.hangs) if self.info is not None else 0,
            lambda: list(engine.tail),
            self._hung,
        )
        return self._hang.start()

    def _hung(self, record: runs.HangRecord, _verdict) -> None:
        """From the watch thread: keep the hang in run.json and the log, then tell the listener."""
        hangs = [*(self.info.hangs if self.info is not None else []), record]
        self._record(hangs=hangs)
        rundir.append_marker(self.log_path, f"engine hung: {record.summary}; evidence in {record.evidence_dir}")
        self.listener.hung(record)

    def poll(self) -> int | None:
        """The engine's exit code; None while it runs, or before it started."""
        return self.engine.poll() if self.engine is not None else None

    def stop(self, sig: int = signal.SIGTERM, asked: bool = True) -> int | None:
        """Stop the whole process group: `sig`, then SIGKILL after the grace period; as soon as
        the group is gone, whichever comes first.

        `asked`: the stop is wanted (a signal, the demo's q), not the end of a failed start. Then
        run.json records the signal (`stopped_by`) and engine.log a line saying so before the
        engine gets it: the errors vLLM logs while it shuts down (an EngineDeadError traceback on
        every SIGINT / SIGTERM) are the stop, not a crash, for triage and bundles.

        Before the engine is ready, SIGTERM is sent as SIGINT: vLLM's start-up ignores a SIGTERM
        (or its API server hangs on after its EngineCore died of it) until the grace period ends,
        while an interrupt stops it as soon as its engine core is up. Nothing is in flight yet
        that a graceful SIGTERM would drain."""
        if self.engine is None:
            return None
        if sig == signal.SIGTERM and self._ready_at is None:
            sig = signal.SIGINT
        name = signal.Signals(sig).name
        if asked and self.engine.poll() is None and self.info is not None and self.info.ended_at is None:
            rundir.append_marker(self.log_path, f"stop requested ({name}): the engine's shutdown follows")
            self._record(stopped_by=name)
        self.listener.stopping(name, self.grace)
        code = self.engine.stop(sig, self.grace, kill_now=self._kill_now.is_set)
        self._finish(code)
        return code

    def shutdown(self) -> int | None:
        """Leave nothing running, however the run went: stop the engine's process group if the
        engine still runs (with the signal we received, else SIGTERM), else sweep what its main
        process left behind. run.json records how it ended. Returns the engine's exit code."""
        try:
            if self.engine is None:
                return None
            if self.engine.poll() is None:
                return self.stop(self.stop_signal)
            self.engine.sweep(self.grace)
            code = self.engine.poll()
            self._finish(code)
            return code
        finally:
            self.release()

    def release(self) -> None:
        """Give the port back to other runs (the lock taken by prepare_run)."""
        if self.port_lock is not None:
            self.port_lock.release()

    def _finish(self, code: int | None) -> None:
        # The first end is the one to keep: a stop from another thread may have recorded it.
        if self.info is not None and self.info.ended_at is None:
            dropped = self.engine.log_lines_dropped if self.engine is not None else 0
            changes = {"log_lines_dropped": self.info.log_lines_dropped + dropped} if dropped else {}
            self._record(ended_at=time.time(), exit_code=code, **changes)

    # -- the serve loop ----------------------------------------------------------------------

    def run(self) -> Outcome:
        """Start, wait until ready, supervise until the engine exits or we are told to stop."""
        try:
            return self._run()
        finally:
            self.release()

    def _run(self) -> Outcome:
        attempt = 0
        while True:
            engine = self.start(attempt)
            ready = self.wait_ready()
            code = self.wait_exit() if ready else engine.poll()
            hung = self._hang is not None and self._hang.hung.is_set() and code is None
            if hung and not self._stop.is_set():
                code = self.stop(signal.SIGTERM)  # grace, then SIGKILL: a hung engine rarely drains
                if self.hang_policy is not None and self.hang_policy.action == "stop":
                    self.listener.exited(code, None, None, attempt)
                    return self._outcome(code, attempt)
            elif self._stop.is_set() or (self.timed_out and code is None):
                sig = self._stop_signal or signal.SIGTERM
                code = self.stop(sig, asked=self._stop.is_set())
                if self._stop.is_set():
                    return self._outcome(code, attempt, stopped_by=signal.Signals(sig).name)
            else:
                engine.sweep(self.grace)  # the main process is gone: leave none of its children
                code = engine.proc.returncode if engine.proc else code
                self._finish(code)
            # Not stopped by us: it never got ready, or it ended on its own, which a server only
            # does when something broke, whatever its exit code.
            diagnosis = None if hung else diagnose(list(engine.tail), code)
            if (
                self._ready_at is not None
                and engine.started_at
                and time.time() - engine.started_at - self._ready_at >= self.policy.reset_after
            ):
                attempt = 0
            if self.policy.on_failure and attempt < self.policy.max_restarts:
                attempt += 1
                delay = self.policy.delay(attempt)
                self.listener.exited(code, diagnosis, delay, attempt)
                self._record(restart_reason="hang" if hung else "not ready" if self.timed_out else "exit")
                rundir.append_marker(
                    self.log_path,
                    f"engine {describe_exit(code)}; restart {attempt}/{self.policy.max_restarts} in {delay:g} s",
                )
                if self._stop.wait(delay):
                    stopped_by = signal.Signals(self._stop_signal or signal.SIGTERM).name
                    return self._outcome(code, attempt, stopped_by=stopped_by, diagnosis=diagnosis)
                continue
            self.listener.exited(code, diagnosis, None, attempt)
            return self._outcome(code, attempt, diagnosis=diagnosis, timed_out=self.timed_out)

    def outcome(self) -> Outcome:
        """The run as it stands, for a caller that drives start() and wait_ready() itself instead
        of run(): the engine's exit code (None while it runs) and, once it has exited or missed
        the ready timeout, the diagnosis of its log tail."""
        code = self.poll()
        ended = self.engine is not None and (code is not None or self.timed_out)
        return self._outcome(
            code,
            0,
            stopped_by=signal.Signals(self.stop_signal).name if self.stopping else None,
            timed_out=self.timed_out,
            diagnosis=diagnose(list(self.engine.tail), code) if ended else None,
        )

    def _outcome(self, code: int | None, restarts: int, **kw) -> Outcome:
        return Outcome(
            exit_code=code,
            run_dir=self.run_dir,
            url=self.url,
            restarts=restarts,
            hangs=list(self.info.hangs) if self.info is not None else [],
            ready_seconds=None if self._ready_at is None else round(self._ready_at, 3),
            phases=self.tracker.records(self._ready_at),
            **kw,
        )
