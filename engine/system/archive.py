"""The one way ascendctl opens an archive it did not write itself, and reads a file it did not make.

A `--root` archive, a bundle given to triage, a source archive from an index: each may be crafted.
So an archive is unpacked with tarfile's "data" filter (PEP 706: no member outside the folder, no
device, no set-id bit, no link that leaves the folder), under a cap on what it may write and on how
many members it may hold, and removed again when the unpacking fails or is stopped (Ctrl-C,
SIGTERM). A recorded tree keeps its absolute links (`latest -> /usr/local/Ascend/cann`): they are
rewritten relative to the tree's top first, so they point where the recorded machine meant, inside.

`read_regular` reads a file without following a link at its end, only when it is a regular file
(never a FIFO or /dev/zero), and never more than a cap.
"""

from __future__ import annotations

import os
import posixpath
import signal
import stat
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

if TYPE_CHECKING:
    import tarfile

# What an archive may write when unpacked: a bundle holds at most --max-size (200 MB by default)
# and a little more; a larger one is unpacked by hand into a folder (which --root reads as it is).
MAX_UNPACKED = 256 * 1024 * 1024
MAX_MEMBERS = 100_000
# One recorded file, log or manifest read into memory.
MAX_READ = 64 * 1024 * 1024


class ArchiveRefused(ValueError):
    """An archive that is not unpacked: too big, too many members, or not an archive."""


def inside(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> bool:
    """Whether `path`, every link followed, is `root` or under it."""
    top = os.path.realpath(root)
    real = os.path.realpath(path)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def read_regular(path: str | os.PathLike[str], limit: int = MAX_READ, follow: bool = False) -> bytes | None:
    """The first `limit` bytes of a regular file, or None when it is missing, unreadable, not a
    regular file (a FIFO, a device, a folder) or, unless `follow`, a symbolic link."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            block = os.read(fd, min(left, 1 << 20))
            if not block:
                break
            chunks.append(block)
            left -= len(block)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


@contextmanager
def term_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt while the block runs (main thread only), so that the
    `finally` clauses that clean up run on `kill` as they do on Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum, frame):  # noqa: ANN001 - signal handler signature
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, _raise)
    except (ValueError, OSError):  # not settable here: no change
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _Filter:
    """tarfile's data filter with the caps; absolute links are set aside, to be made afterwards
    under the tree's top (known only once every member is out)."""

    def __init__(self, max_bytes: int, max_members: int, skipped: list[str] | None = None) -> None:
        self.skipped = skipped  # when a list: a member the data filter refuses is left out and named here
        self.max_bytes = max_bytes
        self.max_members = max_members
        self.bytes = 0
        self.members = 0
        self.absolute_links: list[tuple[str, str]] = []

    def __call__(self, member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
        import tarfile

        self.members += 1
        if self.members > self.max_members:
            raise ArchiveRefused(f"it holds more than {self.max_members} members")
        if not (member.isfile() or member.isdir() or member.issym()) or member.issparse():
            return None  # devices, FIFOs, hard links, sparse files: never part of a recorded machine
        if member.isfile():
            self.bytes += member.size
            if self.bytes > self.max_bytes:
                raise ArchiveRefused(
                    f"it unpacks to more than {self.max_bytes // (1024 * 1024)} MB (member {member.name!r})"
                )
        if member.issym() and member.linkname.startswith("/"):
            checked = tarfile.data_filter(member.replace(linkname="x", deep=False), dest)  # its own name
            if checked is not None:
                self.absolute_links.append((checked.name, member.linkname))
            return None
        try:
            return tarfile.data_filter(member, dest)
        except tarfile.LinkOutsideDestinationError:
            if self.skipped is not None:
                self.skipped.append(f"{member.name}: a link out of the archive (to {member.linkname}), left out")
            return None  # a link that leaves the folder is not kept: what reads it finds nothing
        except tarfile.FilterError as exc:
            if self.skipped is None:
                raise
            self.skipped.append(f"{member.name}: {exc}; left out")
            return None

    def make_absolute_links(self, dest: Path) -> None:
        """Each absolute link made relative to the recorded tree's top (the one folder of a bundle,
        else `dest`), so that it points inside, where the recorded machine meant."""
        entries = list(dest.iterdir())
        top = entries[0] if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink() else dest
        for name, linkname in self.absolute_links:
            link = dest / name
            if not inside(top, link.parent) or os.path.lexists(link):
                continue
            target = top / posixpath.normpath("/" + linkname).lstrip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.path.relpath(target, link.parent), link)


def unpack(
    archive: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    max_bytes: int | None = None,
    max_members: int | None = None,
    skipped: list[str] | None = None,
) -> None:
    """Unpack a .tar(.gz) into `dest` (an empty folder) with the data filter and the caps.

    With `skipped` (a list), a member the data filter refuses (`../x`, `/etc/x`, a link that leaves
    the folder) is left out and named there, and the rest is unpacked; without it, it fails the
    whole archive. Raises ArchiveRefused past a cap, tarfile.TarError / OSError / EOFError when it cannot be read;
    `dest` is emptied again on any failure, Ctrl-C and SIGTERM included."""
    import shutil
    import tarfile

    dest = Path(dest)
    try:
        with term_as_interrupt():
            keep = _Filter(max_bytes or MAX_UNPACKED, max_members or MAX_MEMBERS, skipped)
            with tarfile.open(archive) as tar:
                tar.extractall(dest, filter=keep)
            keep.make_absolute_links(dest)
    except BaseException:
        for child in list(dest.iterdir()) if dest.is_dir() else []:
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
        raise


def read_members(
    archive: str | os.PathLike[str], wanted: Callable[[str], bool], limit: int = MAX_READ
) -> dict[str, bytes]:
    """The regular-file members of a .tar(.gz) or .zip whose name `wanted` accepts, each read up to
    `limit` bytes (the first of a name wins); nothing is written to disk."""
    import tarfile
    import zipfile

    found: dict[str, bytes] = {}
    if str(archive).endswith((".zip", ".whl")):
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                if info.is_dir() or info.filename in found or not wanted(info.filename):
                    continue
                with z.open(info) as f:
                    found[info.filename] = f.read(limit)
        return found
    with tarfile.open(archive) as t:
        for member in t:
            if member.isreg() and member.name not in found and wanted(member.name):
                f = t.extractfile(member)
                if f is not None:
                    found[member.name] = f.read(limit)
    return found


__all__ = [
    "ArchiveRefused",
    "MAX_MEMBERS",
    "MAX_READ",
    "MAX_UNPACKED",
    "inside",
    "read_members",
    "read_regular",
    "term_as_interrupt",
    "unpack",
]
