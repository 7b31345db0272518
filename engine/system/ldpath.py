"""LD_LIBRARY_PATH as the Ascend stack needs it.

The toolkit and driver libraries must come before the system directories: a system
libstdc++.so.6 found first shadows the newer one CANN needs and the failure looks like a C++ ABI
error. The driver's lib64 directories must be on the path (libascend_hal.so), and entries that
do not exist are noise at best (a stale toolkit at worst).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from engine.system import paths
from engine.system.host import Host

SYSTEM_DIRS = (
    "/usr/lib64",
    "/lib64",
    "/usr/lib",
    "/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib/aarch64-linux-gnu",
)
DRIVER_DIRS = ("driver/lib64", "driver/lib64/common", "driver/lib64/driver")


@dataclass(frozen=True)
class LdPath:
    entries: tuple[str, ...]
    toolkit_lib: int | None  # index of the toolkit's lib64
    first_system: int | None  # index of the first system dir
    shadowing: tuple[str, ...]  # system dirs that come before the toolkit's lib64
    driver_missing: tuple[str, ...]
    dead: tuple[str, ...]


def _norm(p: str) -> str:
    return posixpath.normpath(p) if p else p


def analyze(host: Host, value: str | None, toolkit_homes: tuple[str, ...], driver_prefix: str) -> LdPath:
    entries = tuple((value or "").split(":")) if value else ()
    real = [paths.realpath(host, e) if e.startswith("/") else e for e in entries]
    libs = {paths.realpath(host, f"{h}/lib64") for h in toolkit_homes if h}
    toolkit_lib = next((i for i, r in enumerate(real) if r in libs), None)
    system = {_norm(s) for s in SYSTEM_DIRS}
    first_system = next((i for i, e in enumerate(entries) if _norm(e) in system), None)
    shadowing: tuple[str, ...] = ()
    if toolkit_lib is not None:
        shadowing = tuple(e for e in entries[:toolkit_lib] if _norm(e) in system)
    wanted = [f"{driver_prefix}/{d}" for d in DRIVER_DIRS]
    present = {_norm(r) for r in real}
    driver_missing = tuple(w for w in wanted if _norm(paths.realpath(host, w)) not in present)
    dead = tuple(e for e in entries if e == "" or (e.startswith("/") and not paths.is_dir(host, e)))
    return LdPath(entries, toolkit_lib, first_system, shadowing, driver_missing, dead)
