"""One way to run a vendor tool (npu-smi, nvidia-smi, an engine interpreter): with a timeout,
never raising on a non-zero exit, and typed errors for 'not installed' and 'hung'."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

from engine.errors import Unreachable


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class ToolMissing(Unreachable):
    """The program is not on PATH (or not at the given path)."""


class ToolTimeout(Unreachable):
    """The program did not answer within its timeout (npu-smi hangs when the driver is stuck)."""


class Runner(Protocol):
    def run(
        self, argv: Sequence[str], timeout: float = 10.0, env: Mapping[str, str] | None = None
    ) -> CommandResult: ...

    def which(self, name: str) -> str | None: ...


class SubprocessRunner:
    """Runs real programs. `path` overrides PATH for lookups (used with a recorded host root)."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path

    def which(self, name: str) -> str | None:
        return shutil.which(name, path=self.path)

    def run(
        self,
        argv: Sequence[str],
        timeout: float = 10.0,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> CommandResult:
        """`cwd`: for a tool that writes where it is started (msnpureport's export folder)."""
        argv = tuple(argv)
        exe = argv[0] if os.sep in argv[0] else self.which(argv[0])
        if exe is None:
            raise ToolMissing(f"{argv[0]} not found on PATH", f"install {argv[0]} or add it to PATH")
        try:
            # Its own process group: npu-smi and friends are wrapper scripts whose children hang
            # with them, and killing only the direct child left those orphaned on every tick.
            proc = subprocess.Popen(
                (exe, *argv[1:]),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as exc:
            raise ToolMissing(f"cannot run {argv[0]}: {exc.strerror}", f"check that {exe} is executable") from exc
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            _kill_group(proc)
            raise ToolTimeout(
                f"{argv[0]} did not answer within {timeout:g} s",
                f"check the driver: run `{' '.join(argv)}` by hand; a hung npu-smi often means a stuck device",
            ) from exc
        except BaseException:  # Ctrl-C while waiting: the tool's group must not outlive us
            _kill_group(proc)
            raise
        return CommandResult(
            argv, proc.returncode, stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace")
        )


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the tool's whole process group, reap it, and close its pipes."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:  # already gone
        pass
    try:
        proc.communicate(timeout=1.0)
    except subprocess.TimeoutExpired:  # a child that left the group still holds the pipes
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        proc.wait()
