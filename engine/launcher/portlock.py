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
from pathlib import Path

from engine import runs
from engine.errors import BadInput

LOCKS_DIR = "locks"
SET_PORT = "--set server.port="  # how serve takes a port; demo passes its own option


def lock_path(port: int) -> Path:
    return runs.state_dir() / LOCKS_DIR / f"port-{port}.lock"


def _describe(data: dict) -> str:
    run_id, pid = data.get("run_id"), data.get("pid")
    if run_id:
        return f"ascendctl run {run_id}" + (f" (pid {pid})" if pid else "")
    return f"another ascendctl (pid {pid})" if pid else "another ascendctl"


def _read(fd: int) -> dict:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _taken(port: int, data: dict, port_option: str) -> BadInput:
    pid = data.get("pid")
    stop = f"stop that run (kill -TERM {pid}), or " if pid else "stop that run, or "
    return BadInput(
        f"port {port} is already served by {_describe(data)}",
        f"{stop}choose another port: {port_option}{port + 1}",
    )


def _holder(port: int) -> dict | None:
    """What the lock of `port` says about its holder; None when nobody holds it."""
    try:
        fd = os.open(lock_path(port), os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return _read(fd) if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN) else None
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def port_lock_holder(port: int) -> str | None:
    """Who holds the lock of `port` ('ascendctl run <id> (pid N)'), None when nobody does."""
    data = _holder(port)
    return None if data is None else _describe(data)


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
