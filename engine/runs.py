"""Run directories: where `ascendctl serve` leaves what `top` and `triage` need to find a run.

<state dir>/runs/<run id>/ holds `run.json` (pid, url, argv, profile name...), `engine.log`
(the engine's output, tee'd) and `profile.yaml` (the resolved profile).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

from engine.dirs import cache_dir, state_dir  # noqa: F401 - callers ask engine.runs
from engine.typed import decode

LOCKS_DIR = "locks"  # <state dir>/locks/port-<port>.lock: the run that holds a port (engine/launcher/portlock.py)
RUN_FILE = "run.json"
LOG_FILE = "engine.log"
PROFILE_FILE = "profile.yaml"


# A run id: <YYYYmmdd-HHMMSS>-<profile>[-n] (engine/launcher/rundir.py makes them).
_RUN_ID = re.compile(r"^\d{8}-\d{6}-(?P<name>.+)$")


def short_name(label: str) -> str:
    """An engine's name on screen: a run id without its start stamp (`20261207-035315-cpu-tiny`
    reads `cpu-tiny`), any other label as it is. The run id stays the engine's key and its
    `engine` label in metrics; only what a person reads gets shorter."""
    m = _RUN_ID.match(label)
    return m.group("name") if m else label


def runs_dir() -> Path:
    return state_dir() / "runs"


@dataclass(frozen=True)
class HangRecord:
    """One hang the supervisor found (engine/health): when, the evidence in words, where the
    stack dump, triage and metrics were saved, and what was done (restart | stop | report)."""

    at: float
    summary: str
    evidence_dir: str
    action: str
    stacks: int = 0  # processes whose Python stacks were dumped
    note: str | None = None  # why some stacks are missing (ptrace not allowed...)


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    directory: str
    pid: int | None
    url: str
    profile: str
    argv: list[str] = field(default_factory=list)
    started_at: float = 0.0
    ended_at: float | None = None
    exit_code: int | None = None
    # The engine log could not be written (a full disk...): the error, and how many of the
    # engine's lines are missing from engine.log. The engine kept running either way.
    log_error: str | None = None
    log_lines_dropped: int = 0
    # The supervisor's view, for the exporter: the start-up phase reached ("ready" once /health
    # answered), the time to ready of the last start, and how many times the engine was restarted.
    phase: str | None = None
    ready_seconds: float | None = None
    restarts: int = 0
    # False for a headless data-parallel rank: it serves no API on this host (clients use node
    # 0's), so `top` and the exporter here have nothing to poll at `url`.
    serves_api: bool = True
    # The signal a requested stop sent the engine (SIGINT, SIGTERM); None while it runs, and for
    # an engine that ended on its own or never got ready: those ended in a failure.
    stopped_by: str | None = None
    # Hangs found by the supervisor's monitor, oldest first, and why the engine was last restarted
    # ("hang", "exit", "not ready"): top, the exporter and the alert rules read them.
    hangs: list[HangRecord] = field(default_factory=list)
    restart_reason: str | None = None
    # An engine in a container: runtime, name, id, image, image_id, image_digest
    # (engine.container.command.ContainerPlan.record); None for an engine on the host.
    container: dict[str, str | None] | None = None
    # The part of a pd or external-dp layout this run is (`serve --role`): prefill, decode, rank
    # or proxy; None for any other run. A proxy has no vLLM /metrics: top and the exporter show
    # the roles behind it as engines, and leave it out.
    role: str | None = None

    @property
    def log_path(self) -> Path:
        return Path(self.directory) / LOG_FILE

    def alive(self) -> bool:
        if self.pid is None or self.ended_at is not None:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def write_run(info: RunInfo) -> None:
    """Atomically (a temporary file renamed over run.json), so a reader never sees half of it.

    When the temporary file cannot be written (a full disk), run.json is rewritten in place: its
    blocks are already allocated, so how the run ended still gets recorded. OSError when neither
    works.
    """
    path = Path(info.directory) / RUN_FILE
    data = json.dumps(asdict(info), indent=2).encode("utf-8")
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
        return
    except OSError:
        if not path.exists():
            raise
        try:
            tmp.unlink()
        except OSError:
            pass
    with open(path, "r+b") as f:
        f.write(data)
        f.truncate()


def _decode_run(data: object) -> tuple[RunInfo | None, str | None]:
    """(the RunInfo a loaded run.json holds, None) or (None, why it cannot be one). Each field is
    checked against its type hint (engine.typed): a hand-edited or damaged file ("pid": "abc")
    must not reach os.kill() or a sort. Keys a newer ascendctl may record are left out."""
    if not isinstance(data, dict):
        return None, "not a JSON object"
    required = [f.name for f in fields(RunInfo) if f.default is MISSING and f.default_factory is MISSING]
    missing = [name for name in required if name not in data]
    if missing:
        return None, f"missing {', '.join(missing)}"
    try:
        return decode(RunInfo, data), None
    except (TypeError, ValueError) as exc:
        return None, str(exc)


def load_run(directory: Path) -> tuple[RunInfo | None, str | None]:
    """(the run recorded in `directory`, None) or (None, why not). No run.json at all is
    (None, None): a run directory whose engine never started."""
    path = directory / RUN_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"{path}: {exc.strerror or exc}"
    except ValueError as exc:  # not JSON, or not UTF-8
        return None, f"{path}: not valid JSON ({exc})"
    run, why = _decode_run(data)
    return (run, None) if run is not None else (None, f"{path}: {why}")


def read_run(directory: Path) -> RunInfo | None:
    """The run recorded in `directory`, or None when its run.json is missing or damaged."""
    return load_run(directory)[0]


def list_runs(live_only: bool = False, skipped: list[str] | None = None) -> list[RunInfo]:
    """Runs under the state dir, newest first. What could not be read (a damaged run.json, a
    state directory that is a file or unreadable) is left out, and said in `skipped`."""
    notes: list[str] = [] if skipped is None else skipped
    base = runs_dir()
    if not base.is_dir():
        state = state_dir()
        if state.exists() and not state.is_dir():
            notes.append(f"the state directory {state} is not a directory (set ASCENDCTL_STATE_DIR to one)")
        return []
    try:
        entries = [d for d in base.iterdir() if d.is_dir()]
    except OSError as exc:
        notes.append(f"cannot read {base}: {exc.strerror or exc} (set ASCENDCTL_STATE_DIR to a readable directory)")
        return []
    runs = []
    for d in entries:
        run, why = load_run(d)
        if run is not None:
            runs.append(run)
        elif why is not None:
            notes.append(f"skipped a damaged run record: {why}")
    if live_only:
        runs = [r for r in runs if r.alive()]
    return sorted(runs, key=lambda r: r.started_at, reverse=True)


# ---- port locks (taken and held by engine/launcher/portlock.py; read here, below doctor)


def port_lock_path(port: int) -> Path:
    return state_dir() / LOCKS_DIR / f"port-{port}.lock"


def describe_lock_holder(data: dict) -> str:
    run_id, pid = data.get("run_id"), data.get("pid")
    if run_id:
        return f"ascendctl run {run_id}" + (f" (pid {pid})" if pid else "")
    return f"another ascendctl (pid {pid})" if pid else "another ascendctl"


def read_lock(fd: int) -> dict:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def lock_holder(port: int) -> dict | None:
    """What the lock of `port` says about its holder; None when nobody holds it."""
    import errno
    import fcntl

    try:
        fd = os.open(port_lock_path(port), os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return read_lock(fd) if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN) else None
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def port_lock_holder(port: int) -> str | None:
    """Who holds the lock of `port` ('ascendctl run <id> (pid N)'), None when nobody does."""
    data = lock_holder(port)
    return None if data is None else describe_lock_holder(data)
