"""LD_LIBRARY_PATH as the Ascend stack needs it.

The toolkit and driver libraries must come before the system directories: a system
libstdc++.so.6 found first shadows the newer one CANN needs and the failure looks like a C++ ABI
error. The driver's libraries must resolve (libascend_hal.so in lib64/driver, the rest in
lib64/common), and entries that do not exist are noise at best (a stale toolkit at worst).
"""

from __future__ import annotations

import posixpath
import re
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
# What the runtime loads from the driver lives in these two (libascend_hal.so in lib64/driver).
# vllm-ascend's container images put only these two on LD_LIBRARY_PATH and serve, so
# `driver/lib64` itself is not asked for.
DRIVER_DIRS = ("driver/lib64/common", "driver/lib64/driver")
# NNAL's set_env.sh puts <atb>/cxx_abi_N/lib on the path; N is the C++ ABI the build is for.
_ATB_LIB = re.compile(r"/cxx_abi_([01])/lib/?$")


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


def atb_libs(value: str | None) -> list[tuple[str, int]]:
    """The ATB library directories on LD_LIBRARY_PATH, in search order, with the C++ ABI each is
    built for: the loader takes libatb.so from the first."""
    out = []
    for entry in (value or "").split(":"):
        m = _ATB_LIB.search(entry)
        if m:
            out.append((entry, int(m.group(1))))
    return out


def abi_of(path: str | None) -> int | None:
    """0 or 1 for an ATB_HOME_PATH ending in cxx_abi_0 / cxx_abi_1, else None."""
    m = re.search(r"cxx_abi_([01])/?$", path or "")
    return int(m.group(1)) if m else None
