"""Run directories: where `ascendctl serve` leaves what `top` and `triage` need to find a run.

<state dir>/runs/<run id>/ holds `run.json` (pid, url, argv, profile name...), `engine.log`
(the engine's output, tee'd) and `profile.yaml` (the resolved profile).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import platformdirs

RUN_FILE = "run.json"
LOG_FILE = "engine.log"
PROFILE_FILE = "profile.yaml"


def state_dir() -> Path:
    """ASCENDCTL_STATE_DIR, else the user state dir (~/.local/state/ascendctl on Linux)."""
    override = os.environ.get("ASCENDCTL_STATE_DIR")
    return Path(override) if override else Path(platformdirs.user_state_dir("ascendctl"))


def cache_dir() -> Path:
    """ASCENDCTL_CACHE_DIR, else the user cache dir (~/.cache/ascendctl on Linux)."""
    override = os.environ.get("ASCENDCTL_CACHE_DIR")
    return Path(override) if override else Path(platformdirs.user_cache_dir("ascendctl"))


def runs_dir() -> Path:
    return state_dir() / "runs"


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
    path = Path(info.directory) / RUN_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(info), indent=2), encoding="utf-8")
    tmp.replace(path)


def read_run(directory: Path) -> RunInfo | None:
    """The run recorded in `directory`, or None when its run.json is missing or damaged."""
    try:
        data = json.loads((directory / RUN_FILE).read_text(encoding="utf-8"))
        return RunInfo(**data)
    except (OSError, ValueError, TypeError):
        return None


def list_runs(live_only: bool = False) -> list[RunInfo]:
    """Runs under the state dir, newest first."""
    base = runs_dir()
    if not base.is_dir():
        return []
    runs = [r for d in base.iterdir() if d.is_dir() and (r := read_run(d)) is not None]
    if live_only:
        runs = [r for r in runs if r.alive()]
    return sorted(runs, key=lambda r: r.started_at, reverse=True)
