"""The C library version (the engine's wheels are built for a minimum glibc)."""

from __future__ import annotations

import os
import re

from engine.errors import Unreachable
from engine.system.host import Host
from engine.system.runner import SubprocessRunner


def glibc_version(host: Host) -> str | None:
    """`2.36`; None when it is not glibc or cannot be told. On the live machine this asks libc
    itself (no subprocess); on a recorded one it reads the recorded `ldd --version`."""
    if str(host.root) == "/" and isinstance(host.runner, SubprocessRunner):
        try:
            value = os.confstr("CS_GNU_LIBC_VERSION") or ""
        except (ValueError, OSError, AttributeError):
            value = ""
        m = re.search(r"glibc\s+(\d+\.\d+)", value)
        return m.group(1) if m else None
    try:
        result = host.runner.run(["ldd", "--version"], timeout=5)
    except Unreachable:
        return None
    first = (result.stdout or result.stderr).splitlines()[:1]
    m = re.search(r"(\d+\.\d+)\s*$", first[0]) if first else None
    return m.group(1) if m else None
