"""The probed machine as the bundle sees it: every command run and every path looked at, so the
archive can hold exactly what doctor needed to judge the machine, in the recorded-machine layout."""

from __future__ import annotations

import os
import posixpath
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

from engine.system.host import Host
from engine.system.recorded import command_key
from engine.system.runner import CommandResult, ToolTimeout


class CommandRecorder:
    """The runner and the file accesses of the probed machine, seen from the bundle: every command
    run (its key, output, exit code, or that it hung) and every path looked at."""

    def __init__(self, runner: Any, timeout_s: float) -> None:
        self.runner = runner
        self.timeout_s = timeout_s
        self.commands: dict[str, tuple[CommandResult | None, bool]] = {}  # key -> (result, hung)
        self.found: set[str] = set()  # which() hits
        self.lock = threading.Lock()

    def which(self, name: str) -> str | None:
        hit = self.runner.which(name)
        if hit:
            with self.lock:
                self.found.add(command_key([name]))
        return hit

    def run(self, argv: Sequence[str], timeout: float = 10.0, env: Mapping[str, str] | None = None) -> CommandResult:
        key = command_key(argv)
        # The bundle's limit wins: one hung tool costs at most that, however patient its caller.
        try:
            result = self.runner.run(argv, timeout=min(timeout, self.timeout_s), env=env)
        except ToolTimeout:
            with self.lock:
                self.commands.setdefault(key, (None, True))
            raise
        with self.lock:
            # The first answer wins: `python -c` asks versions first, and replays answer every -c alike.
            self.commands.setdefault(key, (result, False))
        return result


class RecordingHost(Host):
    """A Host that remembers every machine path a probe asked for, and which folders it listed
    (engine.system.paths.listdir): only those are stored with their entries."""

    def __init__(self, base: Host, runner: CommandRecorder) -> None:
        super().__init__(root=base.root, env=base.env, runner=runner, partial=base.partial)
        object.__setattr__(self, "seen", set())
        object.__setattr__(self, "listed", set())

    def note_listed(self, machine_path: str) -> None:
        self.listed.add(posixpath.normpath(machine_path))  # type: ignore[attr-defined]

    def path(self, p: str | os.PathLike[str]) -> Path:
        s = os.fspath(p)
        if s.startswith("/"):
            self.seen.add(posixpath.normpath(s))  # type: ignore[attr-defined]
        return super().path(p)


__all__ = ["CommandRecorder", "RecordingHost"]
