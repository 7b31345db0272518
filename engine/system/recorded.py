"""A machine recorded as a directory tree, replayed anywhere.

The tree holds the machine's files at their paths (`usr/local/Ascend/...`, `dev/davinci0` as
empty files, `etc/...`). An optional `.recorded/` folder at its top holds what cannot be a file
of the tree:

    .recorded/env                     the environment, one NAME=value a line (the output of `env`)
    .recorded/commands/<key>.out      a command's stdout, replayed verbatim
    .recorded/commands/<key>.err      its stderr (optional)
    .recorded/commands/<key>.rc       its exit status (optional, default 0)
    .recorded/commands/<key>.hang     present: the command hung (replayed as a timeout)
    .recorded/partial                 present: the tree was rebuilt from a report and holds only
                                      what the report showed (a missing path is unknown)
    .recorded/npu_info_before.txt     a transcript in the layout of MindCluster FaultDiag's
                                      environment check: each command line, then its output, a
                                      blank line between blocks; a command not in commands/ is
                                      answered from it (hccn_tool, npu-smi)

`<key>` is the command line with the program's directory dropped, any `pythonX.Y` written as
`python`, the code after `-c` left out, and spaces as `_`: `npu-smi_info`, `python_-c`,
`ldd_--version`. A command that is not recorded is "not installed".
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from pathlib import Path
from typing import Mapping, Sequence

from engine.errors import Unreachable
from engine.i18n import _
from engine.system.host import Host
from engine.system.runner import CommandResult, ToolMissing, ToolTimeout

RECORD_DIR = ".recorded"


def command_key(argv: Sequence[str]) -> str:
    """The file name a command's answer is recorded under: its words, and for `python -c SCRIPT`
    a short digest of the script, so two different queries of one interpreter keep two answers."""
    words: list[str] = []
    for i, arg in enumerate(argv):
        if i == 0:
            arg = posixpath.basename(arg)
            if re.fullmatch(r"python[0-9.]*", arg):
                arg = "python"
        words.append(arg)
        if arg == "-c":
            if i + 1 < len(argv):
                words.append(hashlib.sha256(argv[i + 1].encode()).hexdigest()[:10])
            break
    return "_".join(words)


def _legacy_key(key: str) -> str | None:
    """Recordings made before scripts were told apart: `python_-c` for every script."""
    head, sep, _digest = key.rpartition("_-c_")
    return f"{head}_-c" if sep else None


# Programs whose command lines open a block of a transcript. A line after a blank line that starts
# with anything else belongs to the output above it (npu-smi prints blank lines inside its answers).
TRANSCRIPT_PROGRAMS = frozenset(
    {"hccn_tool", "npu-smi", "cat", "pip", "pip3", "lspci", "ls", "uname", "ifconfig", "ip"}
)


def write_transcript(blocks: Sequence[tuple[Sequence[str], str]]) -> str:
    """A transcript that read_transcript (and FaultDiag's environment-check parser) reads back:
    each command line, then its output, then blank lines, as FaultDiag's `npu_info_before.txt`."""
    return "".join(f"{' '.join(argv)}\n{output.rstrip()}\n\n\n" for argv, output in blocks)


def read_transcript(text: str) -> dict[str, str]:
    """{command key: output} from a transcript (FaultDiag's `npu_info_before.txt` layout). The
    first block of a command that appears twice wins; trailing blank lines of a block are dropped."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    previous_blank = True
    for line in text.splitlines():
        words = line.split()
        if previous_blank and words and not line[0].isspace():
            program = posixpath.basename(words[0])
            if program in TRANSCRIPT_PROGRAMS:
                key = command_key(words)
                # A piped command's output is filtered: not the answer of the command itself.
                current = None if "|" in words or key in blocks else blocks.setdefault(key, [])
                previous_blank = False
                continue
        if current is not None:
            current.append(line)
        previous_blank = not line.strip()
    return {
        key: "\n".join(lines).rstrip() + "\n" if any(x.strip() for x in lines) else "" for key, lines in blocks.items()
    }


class RecordedRunner:
    """Answers from `.recorded/commands/`, then from a transcript; never runs anything."""

    def __init__(self, commands_dir: Path, transcript: Path | None = None) -> None:
        self.dir = commands_dir
        self.transcript: dict[str, str] = {}
        if transcript is not None and transcript.is_file():
            self.transcript = read_transcript(_read(transcript) or "")

    def which(self, name: str) -> str | None:
        prefix = command_key([name])
        keys = [p.stem for p in self._files()] + list(self.transcript)
        if any(k.startswith(prefix + "_") or k == prefix for k in keys):
            return f"/usr/local/bin/{name}"  # where the recording says it lived does not matter
        return None

    def _files(self) -> list[Path]:
        try:
            return [p for p in self.dir.iterdir() if p.is_file() and not p.is_symlink()]
        except OSError:
            return []

    def run(self, argv: Sequence[str], timeout: float = 10.0, env: Mapping[str, str] | None = None) -> CommandResult:
        key = command_key(argv)
        legacy = _legacy_key(key)
        if legacy is not None and not any((self.dir / f"{key}{ext}").exists() for ext in (".out", ".hang")):
            key = legacy
        out = self.dir / f"{key}.out"
        if (self.dir / f"{key}.hang").exists():
            raise ToolTimeout(
                f"{argv[0]} did not answer within {timeout:g} s (recorded)", "check the driver on that machine"
            )
        if not out.exists() and key in self.transcript:
            return CommandResult(tuple(argv), 0, self.transcript[key], "")
        if not out.exists():
            raise ToolMissing(f"{posixpath.basename(argv[0])} not recorded", "record its output in .recorded/commands/")
        rc_text = (_read(self.dir / f"{key}.rc") or "0").strip() or "0"
        return CommandResult(
            tuple(argv),
            int(rc_text) if re.fullmatch(r"-?\d{1,4}", rc_text) else 1,
            _read(out) or "",
            _read(self.dir / f"{key}.err") or "",
        )


def read_env_file(path: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in (_read(path) or "").splitlines():
        name, sep, value = line.partition("=")
        if sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            env[name] = value
    return env


_UNPACKED: dict[Path, Path] = {}


def recorded_root(path: str | Path) -> Path:
    """The top of the recorded tree at `path`: the folder itself, or a `.tar.gz` (an `ascendctl
    bundle`) unpacked once into a temporary folder that lives as long as this process.

    Raises Unreachable when the archive cannot be read.
    """
    import tarfile

    path = Path(path)
    try:
        is_archive = path.is_file() and tarfile.is_tarfile(path)
    except (OSError, EOFError) as exc:  # unreadable by this user, or a compressed file cut short
        raise Unreachable(
            _("cannot read {path}: {error}").format(path=path, error=getattr(exc, "strerror", None) or exc),
            _("give --root a recorded tree or a whole archive this user can read (its permissions, its size)"),
        ) from exc
    if not is_archive:
        return path
    key = path.resolve()
    if key not in _UNPACKED:
        import atexit
        import shutil
        import tarfile
        import tempfile

        from engine.errors import BadInput
        from engine.system.archive import ArchiveRefused, unpack

        dest = Path(tempfile.mkdtemp(prefix="ascendctl-recorded-"))
        atexit.register(shutil.rmtree, dest, True)
        try:
            unpack(path, dest)
        except ArchiveRefused as exc:
            shutil.rmtree(dest, ignore_errors=True)
            raise BadInput(
                f"{path} is not unpacked: {exc}",
                f"unpack it yourself into a folder (mkdir case && tar xzf {path} -C case) and give that folder",
            ) from None
        except (tarfile.TarError, OSError, EOFError) as exc:
            shutil.rmtree(dest, ignore_errors=True)
            raise Unreachable(
                _("cannot unpack {path}: {error}").format(path=path, error=exc),
                _("give --root a recorded tree or an archive written by `ascendctl bundle`"),
            ) from exc
        except BaseException:
            shutil.rmtree(dest, ignore_errors=True)
            raise
        _remove_on_sigterm()
        entries = list(dest.iterdir())
        # A bundle holds one folder; a hand-made archive may hold the tree itself.
        _UNPACKED[key] = entries[0] if len(entries) == 1 and entries[0].is_dir() else dest
    return _UNPACKED[key]


def _remove_on_sigterm() -> None:
    """The unpacked folder lives until the process ends; a SIGTERM ends it as Ctrl-C does (the
    atexit clean-up runs) where nothing else handles SIGTERM."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, signal.default_int_handler)
    except (ValueError, OSError):
        pass


def _read(path: Path) -> str | None:
    """A recorded file's text: a regular file only, no link at its end followed, capped."""
    from engine.system.archive import read_regular

    data = read_regular(path)
    return None if data is None else data.decode("utf-8", "replace")


def recorded_host(root: str | Path) -> tuple[Host, bool]:
    """A Host reading the recorded tree at `root` (or an `ascendctl bundle` archive), and whether
    its environment was recorded.

    Raises Unreachable when `root` is neither a directory nor a readable archive: nothing can be probed.
    """
    root = recorded_root(root)
    if not root.is_dir():
        raise Unreachable(
            _("no recorded machine at {root}: not a directory").format(root=root),
            _("give --root the top of a recorded tree (the folder holding usr/, etc/, dev/)"),
        )
    if not any(root.iterdir()):
        raise Unreachable(
            _("nothing recorded at {root}: the directory is empty").format(root=root),
            _(
                "copy the machine's /usr/local/Ascend, /etc and /dev listing into it "
                '(see docs/doctor.md, "A recorded machine")'
            ),
        )
    rec = root / RECORD_DIR
    env_file = rec / "env"
    env = read_env_file(env_file) if env_file.is_file() else {}
    host = Host(
        root=root,
        env=env,
        runner=RecordedRunner(rec / "commands", rec / "npu_info_before.txt"),
        partial=(rec / "partial").exists(),
    )
    return host, env_file.is_file()
