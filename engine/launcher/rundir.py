"""Create a run directory (layout and RunInfo in engine/runs.py) and write what it holds."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from engine import runs
from engine.redact import redact_argv


def run_id(profile_name: str) -> str:
    """<YYYYmmdd-HHMMSS>-<profile>: the name a run started now gets (new_run_dir adds -n when
    two start in the same second)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime())
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(profile_name).stem or "run")[:40]
    return f"{stamp}-{safe}"


def new_run_dir(profile_name: str) -> Path:
    """<state>/runs/<YYYYmmdd-HHMMSS>-<profile>[-n]: sortable by time, readable by name."""
    name = run_id(profile_name)
    base = runs.runs_dir()
    base.mkdir(parents=True, exist_ok=True)
    for n in range(1000):
        candidate = base / (name + (f"-{n}" if n else ""))
        try:
            # Owner only: the run holds the engine's log and the resolved profile, and either may
            # carry a secret the masks do not recognise.
            candidate.mkdir(mode=0o700)
            return candidate
        except FileExistsError:
            continue
    raise RuntimeError(f"cannot create a run directory under {base}")


def write_profile(run_dir: Path, text: str) -> Path:
    """The resolved profile as the engine got it (overrides applied, placeholders expanded)."""
    path = Path(run_dir) / runs.PROFILE_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def new_record(
    run_dir: Path,
    profile_name: str,
    url: str,
    argv: list[str],
    pid: int | None,
    serves_api: bool = True,
    role: str | None = None,
) -> runs.RunInfo:
    """The run as run.json will record it; the supervisor writes it (runs.write_run), and a
    state directory that cannot be written costs the record, not the run."""
    return runs.RunInfo(
        run_id=Path(run_dir).name,
        directory=str(run_dir),
        pid=pid,
        url=url,
        profile=profile_name,
        argv=redact_argv(argv),  # run.json is read by top and bundles: no secret flag in it
        started_at=time.time(),
        serves_api=serves_api,
        role=role,
    )


def marker(text: str) -> str:
    """A line of ours for the engine log, marked so nobody takes it for the engine's."""
    return f"=== ascendctl {time.strftime('%m-%d %H:%M:%S')} {text} ===" + os.linesep


def append_marker(log_path: Path, text: str) -> bool:
    """Append a marker (restarts). False when the log cannot be written (a full disk): a missing
    marker must not stop the supervision."""
    try:
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(marker(text))
    except OSError:
        return False
    return True
