"""Where a bundle's archive goes, checked before anything is collected, and its default name."""

from __future__ import annotations

import os
import stat
import tempfile
import time
from pathlib import Path

from engine.errors import BadInput


def check_out(out: Path) -> Path:
    """Where the archive goes, checked before anything is collected: an existing folder gets the
    default name inside it; an existing path must be a regular file (never a device, a FIFO, a
    link: renaming over /dev/null would replace it for the whole machine); the folder must take a
    new file. BadInput naming the path otherwise."""
    out = Path(out)
    if out.is_dir() and not out.is_symlink():
        out = out / default_name()
    fix = "give --out a new file name in a folder you can write (or an existing archive to replace)"
    for p in (out, out.with_name(out.name + ".map.json")):
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise BadInput(f"--out {p}: {exc.strerror or exc}", fix) from None
        if not stat.S_ISREG(st.st_mode):
            kind = (
                "a symbolic link"
                if stat.S_ISLNK(st.st_mode)
                else "a folder"
                if stat.S_ISDIR(st.st_mode)
                else "not a regular file"
            )
            raise BadInput(f"--out {p} is {kind}: the archive is not written over it", fix)
    parent = out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=parent, prefix=f".{out.name}.", suffix=".check")
        probe.close()
    except OSError as exc:
        raise BadInput(f"--out {out}: cannot write in {parent} ({exc.strerror or exc})", fix) from None
    return out


def default_name(now: float | None = None) -> str:
    return time.strftime("ascendctl-bundle-%Y%m%d-%H%M%S.tar.gz", time.localtime(now))


def top_name(out: Path) -> str:
    name = out.name
    for suffix in (".tar.gz", ".tgz"):
        if name.endswith(suffix):
            return name[: -len(suffix)] or "bundle"
    return name or "bundle"
