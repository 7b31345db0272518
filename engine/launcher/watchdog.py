"""Kill the engine's whole process group when ascendctl dies, however it dies.

A signal can be forwarded only while ascendctl lives; a SIGKILL, the OOM killer or a crash leaves
no time for it. A parent-death signal on the engine's main process is not enough either: vLLM's
API server ignores SIGTERM early in its start-up, and its children (EngineCore, workers) have
another parent, so they would live on, hung, holding the accelerator's memory.

So next to each engine runs this small watchdog, in a session of its own (a Ctrl-C on the terminal
does not reach it). It reads a pipe whose only writer is ascendctl. End of file with nothing read
means ascendctl is gone: SIGKILL to the engine's process group. One byte first means ascendctl
ended the group itself: exit without touching it, since a process group id can be reused.

An engine in a container is not in that process group: the group holds the runtime's CLI
(`docker run ...`), the container lives on under the runtime. So its watchdog also kills and
removes the container by name (`RUNTIME kill NAME`, then `RUNTIME rm -f NAME`, twice in case the
CLI died while the container was still being created), well within 10 s of ascendctl's death.

The script runs by path with `python -I -S`: standard library only, it starts in milliseconds
and does not depend on ascendctl's environment (the runtime's CLI gets ascendctl's environment,
so a CONTAINERS_CONF or DOCKER_HOST still applies).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

DISARM = b"x"
RUNTIME_TIMEOUT = 4.0  # seconds for each runtime command: the whole clean-up stays under 10 s


def remove_container(runtime: str, name: str) -> None:
    """Kill the container at once (podman's `rm -f` alone waits out the stop timeout), then remove
    it; again a moment later, in case it was still being created."""
    for argv in ([runtime, "kill", name], [runtime, "rm", "-f", name], None, [runtime, "rm", "-f", name]):
        if argv is None:
            time.sleep(0.5)
            continue
        try:
            subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=RUNTIME_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            pass


def main(argv: list[str]) -> int:
    """argv: PGID [RUNTIME CONTAINER-NAME]."""
    pgid = int(argv[1])
    try:
        data = os.read(0, 1)
    except OSError:
        data = b""
    if not data:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass  # the group is gone already
        if len(argv) >= 4:
            remove_container(argv[2], argv[3])
    return 0


class Watchdog:
    """The running watchdog of one process group. `disarm()` once the group has ended; if
    ascendctl dies first, the kernel closes the pipe and the watchdog kills the group."""

    def __init__(self, pgid: int, container: tuple[str, str] | None = None) -> None:
        """`container`: (the runtime's path, the container's name) to remove as well."""
        self.pgid = pgid
        self._fd: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        read_fd, write_fd = os.pipe()  # neither end is inherited by the engine (PEP 446)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(__file__), str(pgid), *(container or ())],
                stdin=read_fd,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError:
            os.close(write_fd)  # the engine keeps its parent-death signal; nothing better to do
        else:
            self._fd = write_fd
        finally:
            os.close(read_fd)

    @property
    def armed(self) -> bool:
        return self._fd is not None

    def disarm(self) -> None:
        """The group has ended: let the watchdog exit without a kill."""
        self._close(DISARM)

    def fire(self) -> None:
        """Kill the group now, as if ascendctl had died."""
        self._close(b"")

    def _close(self, word: bytes) -> None:
        if self._fd is not None:
            try:
                if word:
                    os.write(self._fd, word)
            except OSError:
                pass  # the watchdog itself was killed: nothing reads the pipe
            finally:
                os.close(self._fd)
                self._fd = None
        if self.proc is not None:
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass


if __name__ == "__main__":
    sys.exit(main(sys.argv))
