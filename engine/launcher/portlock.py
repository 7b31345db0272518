"""One port, one supervised engine: a lock file per port under the state directory.

The port check alone cannot tell two launches a fraction of a second apart: vLLM binds its port
but listens only once the model is loaded, and both binds succeed (SO_REUSEADDR), so both
preflights find the port free and, worse, the second launch would see the first engine answer
its /health. The lock (flock, held by ascendctl for the run's life, released by the kernel
however ascendctl ends) makes the second launch stop at once and name the run that holds it.

<state dir>/locks/port-<port>.lock holds {"run_id", "pid", "url"} of the holder. The port alone
is the key: 0.0.0.0:8000 and 127.0.0.1:8000 collide.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os

from engine import runs
from engine.errors import BadInput

SET_PORT = "--set server.port="  # how serve takes a port; demo passes its own option

# Reading a lock (who holds a port) lives with the state directory's layout in engine.runs, so
# that doctor, below this layer, can name the run that holds a port.
lock_path = runs.port_lock_path
_describe = runs.describe_lock_holder
_read = runs.read_lock
_holder = runs.lock_holder
port_lock_holder = runs.port_lock_holder


def _taken(port: int, data: dict, port_option: str) -> BadInput:
    pid = data.get("pid")
    stop = f"stop that run (kill -TERM {pid}), or " if pid else "stop that run, or "
    return BadInput(
        f"port {port} is already served by {_describe(data)}",
        f"{stop}choose another port: {port_option}{port + 1}",
    )


def check_port_lock(port: int, port_option: str = SET_PORT) -> None:
    """BadInput (exit 2) when another ascendctl run holds `port`; the fix names `port_option`."""
    data = _holder(port)
    if data is not None:
        raise _taken(port, data, port_option)


class PortLock:
    """Held from `acquire()` to `release()` (or the end of the process)."""

    def __init__(self, port: int, fd: int) -> None:
        self.port = port
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, port: int, port_option: str = SET_PORT) -> PortLock:
        """BadInput naming the holder when another run has the port; BadInput as well when the
        state directory cannot hold the lock (the fix is a setting: ASCENDCTL_STATE_DIR)."""
        path = lock_path(port)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by the engine
        except OSError as exc:
            raise BadInput(
                f"cannot create the port lock {path}: {exc.strerror or exc}",
                "make the state directory writable (free space in it), or point ASCENDCTL_STATE_DIR elsewhere",
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            data = _read(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise _taken(port, data, port_option) from None
            raise BadInput(f"cannot lock {path}: {exc.strerror or exc}", "check the state directory") from exc
        lock = cls(port, fd)
        lock.record(pid=os.getpid())
        return lock

    @property
    def held(self) -> bool:
        return self._fd is not None

    def record(self, **holder: object) -> None:
        """Say who holds the lock (the run id once it exists). Best effort: a full disk must not
        stop a run that holds the lock already."""
        if self._fd is None:
            return
        data = {**_read(self._fd), "pid": os.getpid(), **holder}
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, json.dumps(data).encode("utf-8"), 0)
        except OSError:
            pass

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None
