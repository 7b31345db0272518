"""Following symbolic links inside a recorded tree.

A recorded machine keeps its links as they were (`ascend-toolkit/latest -> /usr/local/Ascend/cann`);
resolving them with the OS would leave the tree, so links are followed one component at a time
and absolute targets are mapped back under the host root.
"""

from __future__ import annotations

import os
import posixpath

from engine.system.host import Host


def realpath(host: Host, path: str, max_links: int = 40) -> str:
    """The machine path `path` points to after all links, as the probed machine sees it."""
    parts = [p for p in posixpath.normpath(path).split("/") if p]
    resolved = "/"
    hops = 0
    while parts:
        name = parts.pop(0)
        if name == "..":
            resolved = posixpath.dirname(resolved) or "/"
            continue
        candidate = posixpath.join(resolved, name)
        local = host.path(candidate)
        if os.path.islink(local) and hops < max_links:
            hops += 1
            target = os.readlink(local)
            base = "/" if target.startswith("/") else resolved
            parts = [p for p in posixpath.normpath(posixpath.join(base, target)).split("/") if p] + parts
            resolved = "/"
            continue
        resolved = candidate
    return resolved


def exists(host: Host, path: str) -> bool:
    return host.path(realpath(host, path)).exists()


def is_dir(host: Host, path: str) -> bool:
    return host.path(realpath(host, path)).is_dir()


def read_text(host: Host, path: str) -> str | None:
    return host.read_text(realpath(host, path))


def listdir(host: Host, path: str) -> list[str]:
    real = realpath(host, path)
    note = getattr(host, "note_listed", None)
    if note is not None:  # a bundle records which folders a probe listed (engine.bundle.recording)
        note(real)
    try:
        return sorted(os.listdir(host.path(real)))
    except OSError:
        return []
