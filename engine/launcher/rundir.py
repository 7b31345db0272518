"""Create a run directory (layout and RunInfo in engine/runs.py) and write what it holds."""

from __future__ import annotations

import dataclasses
import os
import re
import time
from pathlib import Path
from typing import Any

from engine import runs
from engine.redact import redact_argv


def new_run_dir(profile_name: str) -> Path:
    """<state>/runs/<YYYYmmdd-HHMMSS>-<profile>[-n]: sortable by time, readable by name."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime())
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(profile_name).stem or "run")[:40]
    base = runs.runs_dir()
    base.mkdir(parents=True, exist_ok=True)
    for n in range(1000):
        candidate = base / (f"{stamp}-{safe}" + (f"-{n}" if n else ""))
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise RuntimeError(f"cannot create a run directory under {base}")


def write_profile(run_dir: Path, text: str) -> Path:
    """The resolved profile as the engine got it (overrides applied, placeholders expanded)."""
    path = Path(run_dir) / runs.PROFILE_FILE
    path.write_text(text, encoding="utf-8")
    return path


def start_record(run_dir: Path, profile_name: str, url: str, argv: list[str], pid: int | None) -> runs.RunInfo:
    info = runs.RunInfo(
        run_id=Path(run_dir).name,
        directory=str(run_dir),
        pid=pid,
        url=url,
        profile=profile_name,
        argv=redact_argv(argv),  # run.json is read by top and bundles: no secret flag in it
        started_at=time.time(),
    )
    runs.write_run(info)
    return info


def update_record(info: runs.RunInfo, **changes: Any) -> runs.RunInfo:
    info = dataclasses.replace(info, **changes)
    runs.write_run(info)
    return info


def append_marker(log_path: Path, text: str) -> None:
    """A line of ours in the engine log (restarts), marked so nobody takes it for the engine's."""
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"=== ascendctl {time.strftime('%m-%d %H:%M:%S')} {text} ===" + os.linesep)
