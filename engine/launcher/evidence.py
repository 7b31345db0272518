"""What a hang leaves for the bug report, saved before the group is stopped: a Python stack dump
of every process of the engine (py-spy), the last log lines triaged, the last /metrics page and
the verdict itself, in `<run dir>/hang-<n>/`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from engine.health.hang import Verdict

STACKS_FILE = "stacks.txt"
TRIAGE_FILE = "triage.txt"
METRICS_FILE = "metrics.txt"
VERDICT_FILE = "verdict.json"
PYSPY_TIMEOUT_S = 20.0
_PTRACE_HINTS = ("Operation not permitted", "Permission denied", "EPERM", "ptrace")


@dataclass(frozen=True)
class StackDump:
    pid: int
    ok: bool
    text: str  # the stacks, or why there are none


def py_spy() -> str | None:
    """py-spy beside our interpreter (the venv's bin), else on PATH."""
    here = Path(sys.executable).with_name("py-spy")
    return str(here) if here.exists() else shutil.which("py-spy")


def dump_stacks(pids: Sequence[int], timeout: float = PYSPY_TIMEOUT_S) -> list[StackDump]:
    """`py-spy dump --nonblocking` of each pid: it reads the process's memory without pausing it
    (a SIGSTOPped process cannot be paused again, and a hung one's stacks do not move)."""
    exe = py_spy()
    if exe is None:
        return [StackDump(p, False, "py-spy is not installed (pip install py-spy)") for p in pids]
    out = []
    for pid in pids:
        try:
            done = subprocess.run(
                [exe, "dump", "--pid", str(pid), "--nonblocking"],
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            out.append(StackDump(pid, False, f"py-spy gave no dump within {timeout:g} s"))
            continue
        except OSError as exc:
            out.append(StackDump(pid, False, f"cannot run py-spy: {exc.strerror or exc}"))
            continue
        if done.returncode == 0 and done.stdout.strip():
            out.append(StackDump(pid, True, done.stdout))
            continue
        err = (done.stderr or done.stdout).strip().splitlines()
        first = next((line for line in err if line.strip() and not line.startswith("Stack backtrace")), "no output")
        if any(h in (done.stderr or "") for h in _PTRACE_HINTS):
            first = (
                f"ptrace is not allowed here ({first.strip()}): run as the engine's user with CAP_SYS_PTRACE, "
                "or set kernel.yama.ptrace_scope=0; in a container add --cap-add SYS_PTRACE"
            )
        out.append(StackDump(pid, False, first.strip()))
    return out


def engine_pids(root_pid: int | None) -> list[int]:
    """The API server and every live descendant, the root first."""
    if root_pid is None:
        return []
    from engine.system.proctree import tree_pids

    return [root_pid, *sorted(tree_pids(root_pid) - {root_pid})]


def _titles(pids: Sequence[int]) -> dict[int, str]:
    import psutil

    out = {}
    for pid in pids:
        try:
            out[pid] = " ".join(psutil.Process(pid).cmdline())[:120]
        except psutil.Error:
            out[pid] = "?"
    return out


@dataclass(frozen=True)
class Saved:
    directory: Path
    stacks_ok: int
    stacks_failed: list[str]  # one line per process without a dump, with the reason


def save_evidence(
    run_dir: Path,
    number: int,
    verdict: Verdict,
    root_pid: int | None,
    log_tail: Sequence[str],
    metrics_text: str | None,
) -> Saved:
    """Write `hang-<number>/` under the run directory. Writing never raises OSError beyond the
    directory itself: a missing part is said in what is returned."""
    from engine.launcher.diagnosis import diagnose

    directory = Path(run_dir) / f"hang-{number}"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / VERDICT_FILE).write_text(json.dumps(verdict.as_dict(), indent=2), encoding="utf-8")
    pids = engine_pids(root_pid)
    titles = _titles(pids)
    dumps = dump_stacks(pids)
    with open(directory / STACKS_FILE, "w", encoding="utf-8") as f:
        for d in dumps:
            f.write(f"=== pid {d.pid}: {titles.get(d.pid, '?')}\n")
            f.write(d.text if d.ok else f"(no stack dump: {d.text})\n")
            f.write("\n")
    diagnosis = diagnose(list(log_tail), None, show_lines=40)
    lines = [f"hang verdict: {verdict.summary}", ""]
    if diagnosis.findings:
        lines.append("known issues in the log tail:")
        lines += [f"  {i.title}: {i.fix}" for i in diagnosis.findings]
    else:
        lines.append("no known issue in the log tail")
    lines += diagnosis.likely_lines()
    if diagnosis.root_error:
        lines.append(f"last exception: {diagnosis.root_error}")
    lines += ["", "last log lines:", *diagnosis.tail]
    (directory / TRIAGE_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    if metrics_text:
        (directory / METRICS_FILE).write_text(metrics_text, encoding="utf-8")
    failed = [f"pid {d.pid}: {d.text}" for d in dumps if not d.ok]
    return Saved(directory, sum(1 for d in dumps if d.ok), failed)


def ptrace_note(saved: Saved) -> str | None:
    """One line when no stack could be dumped because ptrace is refused."""
    if saved.stacks_ok == 0 and saved.stacks_failed and any("ptrace" in f for f in saved.stacks_failed):
        return saved.stacks_failed[0].split(": ", 1)[1]
    return None


__all__ = ["Saved", "StackDump", "dump_stacks", "engine_pids", "save_evidence", "py_spy"]
