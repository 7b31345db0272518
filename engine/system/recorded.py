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

`<key>` is the command line with the program's directory dropped, any `pythonX.Y` written as
`python`, the code after `-c` left out, and spaces as `_`: `npu-smi_info`, `python_-c`,
`ldd_--version`. A command that is not recorded is "not installed".
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Mapping, Sequence

from engine.errors import Unreachable
from engine.system.host import Host
from engine.system.runner import CommandResult, ToolMissing, ToolTimeout

RECORD_DIR = ".recorded"


def command_key(argv: Sequence[str]) -> str:
    words: list[str] = []
    for i, arg in enumerate(argv):
        if i == 0:
            arg = posixpath.basename(arg)
            if re.fullmatch(r"python[0-9.]*", arg):
                arg = "python"
        words.append(arg)
        if arg == "-c":
            break
    return "_".join(words)


class RecordedRunner:
    """Answers from `.recorded/commands/`; never runs anything."""

    def __init__(self, commands_dir: Path) -> None:
        self.dir = commands_dir

    def which(self, name: str) -> str | None:
        prefix = command_key([name])
        if any(p.name.startswith(prefix + "_") or p.stem == prefix for p in self._files()):
            return f"/usr/local/bin/{name}"  # where the recording says it lived does not matter
        return None

    def _files(self) -> list[Path]:
        try:
            return [p for p in self.dir.iterdir() if p.is_file()]
        except OSError:
            return []

    def run(self, argv: Sequence[str], timeout: float = 10.0, env: Mapping[str, str] | None = None) -> CommandResult:
        key = command_key(argv)
        out = self.dir / f"{key}.out"
        if (self.dir / f"{key}.hang").exists():
            raise ToolTimeout(
                f"{argv[0]} did not answer within {timeout:g} s (recorded)", "check the driver on that machine"
            )
        if not out.exists():
            raise ToolMissing(f"{posixpath.basename(argv[0])} not recorded", "record its output in .recorded/commands/")
        err = self.dir / f"{key}.err"
        rc = self.dir / f"{key}.rc"
        return CommandResult(
            tuple(argv),
            int(rc.read_text().strip() or 0) if rc.exists() else 0,
            out.read_text(encoding="utf-8", errors="replace"),
            err.read_text(encoding="utf-8", errors="replace") if err.exists() else "",
        )


def read_env_file(path: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        name, sep, value = line.partition("=")
        if sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            env[name] = value
    return env


def recorded_host(root: str | Path) -> tuple[Host, bool]:
    """A Host reading the recorded tree at `root`, and whether its environment was recorded.

    Raises Unreachable when `root` is not a directory: nothing can be probed.
    """
    root = Path(root)
    if not root.is_dir():
        raise Unreachable(
            f"no recorded machine at {root}: not a directory",
            "give --root the top of a recorded tree (the folder holding usr/, etc/, dev/)",
        )
    if not any(root.iterdir()):
        raise Unreachable(
            f"nothing recorded at {root}: the directory is empty",
            'copy the machine\'s /usr/local/Ascend, /etc and /dev listing into it (see docs/doctor.md, "A recorded machine")',
        )
    rec = root / RECORD_DIR
    env_file = rec / "env"
    env = read_env_file(env_file) if env_file.is_file() else {}
    host = Host(root=root, env=env, runner=RecordedRunner(rec / "commands"), partial=(rec / "partial").exists())
    return host, env_file.is_file()
