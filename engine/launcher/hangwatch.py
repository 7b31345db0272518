"""The supervisor's hang watch: the hang monitor (engine/health) on a thread of its own while the
engine is ready, and what serve does when it calls the engine hung (`--on-hang`).

On a verdict it saves the evidence into the run directory first (stacks, triage, metrics), records
the hang in run.json, tells the listener, and then, unless the action is `report`, asks the
supervisor's loop to stop the group (which restarts it under `--restart on-failure`). A `report`
records each hang once: the next one is recorded when the engine has answered in between.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from engine.health.hang import HangLimits, HangMonitor, Verdict
from engine.runs import HangRecord

ACTIONS = ("restart", "stop", "report")


@dataclass(frozen=True)
class HangPolicy:
    """`action`: restart | stop | report. `tick_s`: seconds between two looks at the engine."""

    limits: HangLimits
    action: str = "report"
    tick_s: float = 5.0
    api_key: str | None = None
    model: str | None = None
    devices: Callable[[], Sequence] | None = None
    # A headless rank's: the API of its group (node 0's URL), watched instead of its own. A member
    # of an expert-parallel group of a pd role: its group's first member's, watched besides its own.
    group_url: str | None = None

    @staticmethod
    def default_action(restart_on_failure: bool) -> str:
        return "restart" if restart_on_failure else "report"


class HangWatch:
    def __init__(
        self,
        policy: HangPolicy,
        url: str,
        pid: int | None,
        run_dir: Path,
        number: int,
        tail: Callable[[], list[str]],
        on_hang: Callable[[HangRecord, Verdict], None],
    ) -> None:
        self.policy = policy
        self.monitor = HangMonitor(
            url, policy.limits, pid=pid, model=policy.model, api_key=policy.api_key, devices=policy.devices
        )
        self.monitor.group = policy.group_url is not None and url == policy.group_url
        if policy.group_url is not None and url != policy.group_url:
            self.monitor.group_url = policy.group_url
        self.run_dir = run_dir
        self.number = number  # hangs recorded in this run so far
        self._tail = tail
        self._on_hang = on_hang
        self._stop = threading.Event()
        self.hung = threading.Event()  # set for restart / stop: the loop must end the group
        self.verdict: Verdict | None = None
        self.record: HangRecord | None = None
        self._reported = False
        self.thread = threading.Thread(target=self._loop, name="hang-watch", daemon=True)

    def start(self) -> "HangWatch":
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=30)
        self.monitor.close()

    def _loop(self) -> None:
        while not self._stop.wait(self.policy.tick_s):
            try:
                verdict = self.monitor.tick()
            except Exception:  # noqa: BLE001 - the watch must never take the run down
                continue
            if not verdict.hung:
                self._reported = False
                continue
            if self._reported or self._stop.is_set():
                continue
            self._found(verdict)
            if self.policy.action != "report":
                return

    def _found(self, verdict: Verdict) -> None:
        from engine.launcher.evidence import ptrace_note, save_evidence

        self.number += 1
        self.verdict = verdict
        try:
            saved = save_evidence(
                self.run_dir, self.number, verdict, self.monitor.pid, self._tail(), self.monitor.last_metrics_text
            )
            directory, stacks = str(saved.directory), saved.stacks_ok
            note = ptrace_note(saved) or (saved.stacks_failed[0] if saved.stacks_failed else None)
        except OSError as exc:
            directory, stacks, note = "", 0, f"evidence not saved: {exc.strerror or exc}"
        self.record = HangRecord(
            at=time.time(),
            summary=verdict.summary,
            evidence_dir=directory,
            action=self.policy.action,
            stacks=stacks,
            note=note,
        )
        self._reported = True
        self._on_hang(self.record, verdict)
        if self.policy.action != "report":
            self.hung.set()


__all__ = ["ACTIONS", "HangPolicy", "HangWatch"]
