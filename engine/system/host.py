"""The machine being probed: a filesystem root, its environment and a command runner."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from engine.system.runner import Runner, SubprocessRunner


@dataclass(frozen=True)
class Host:
    root: Path = Path("/")
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    runner: Runner = field(default_factory=SubprocessRunner)
    # A tree rebuilt from a bug report holds only the files the report showed: a path missing
    # from it is unknown, not missing, and checks that would conclude from its absence skip.
    partial: bool = False

    def path(self, p: str | os.PathLike[str]) -> Path:
        """Map an absolute path on the probed machine to a path under `root`."""
        p = Path(p)
        return self.root / p.relative_to(p.anchor) if p.is_absolute() else self.root / p

    def read_text(self, p: str | os.PathLike[str]) -> str | None:
        """The file's text, or None when it is missing, unreadable or not a regular file (a FIFO,
        /dev/zero); at most engine.system.archive.MAX_READ bytes. In a recorded tree, links are
        followed inside the tree only: one that leads out (`etc/hostname -> /etc/shadow` in a
        crafted archive) reads as missing."""
        from engine.system.archive import inside, read_regular

        if self.root == Path("/"):
            data = read_regular(self.path(p), follow=True)
        else:
            from engine.system.paths import realpath

            local = self.path(realpath(self, os.fspath(p)))
            data = read_regular(local) if inside(self.root, local) else None
        return None if data is None else data.decode("utf-8", "replace")
