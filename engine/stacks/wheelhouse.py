"""A wheelhouse: every file of an install plan, fetched on a connected machine for another one (an
air-gapped Ascend host), with a manifest that says for which host it was made.

    ascendctl engine download --cann 9.1.0 --chip A2 --arch aarch64 --python 3.11 --dest DIR
    ./install.sh --wheelhouse DIR          (on the host: no network, each plan step in order)

The manifest (`ascendctl-wheelhouse.json` in DIR) holds the plan, the target (architecture,
Python, glibc, the wheel tags), every file with its size and sha256, and what could not be
fetched. Installing checks the target against the host and the files against their checksums
before the first step. engine/stacks/download.py fills a wheelhouse; this module reads it.

    python -m engine.stacks.wheelhouse --check-host DIR

is what install.sh asks before its first pip call (the standard library alone: nothing is
installed yet): exit 1, each problem named with its fix, when the target is not this host, when a
file does not match its checksum, or when the folder holds a package file the manifest does not
list (pip's --find-links would take it, a newer version first).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from engine.versions import release_tuple

if TYPE_CHECKING:
    from engine.stacks.plan import Plan, Step

MANIFEST = "ascendctl-wheelhouse.json"
SCHEMA = 1
PACKAGE_FILES = (".whl", ".tar.gz", ".zip")
# The oldest manylinux tag a target accepts: manylinux2014 is glibc 2.17.
OLDEST_GLIBC_MINOR = 17


@dataclass(frozen=True)
class Target:
    """The host a wheelhouse is for: CPU architecture, CPython minor version, and the newest glibc
    whose manylinux wheels it may hold."""

    arch: str
    python: str
    glibc: str
    implementation: str = "cp"

    def platforms(self) -> list[str]:
        """Every wheel platform tag a host of this glibc accepts, newest first: pip takes the
        tags it is given literally."""
        minor = int(self.glibc.split(".")[1])
        tags = [f"manylinux_2_{m}_{self.arch}" for m in range(minor, OLDEST_GLIBC_MINOR - 1, -1)]
        return [*tags, f"manylinux2014_{self.arch}"]

    def pip_args(self) -> list[str]:
        """The `pip download` / `pip install --dry-run` options that choose wheels for this target."""
        args = ["--only-binary=:all:", "--python-version", self.python, "--implementation", self.implementation]
        for tag in self.platforms():
            args += ["--platform", tag]
        return args

    def markers(self) -> dict[str, str]:
        """Environment markers of the target (pip evaluates them against the machine running it,
        not against --platform: the download passes these instead)."""
        return {
            "platform_machine": self.arch,
            "platform_system": "Linux",
            "sys_platform": "linux",
            "os_name": "posix",
            "implementation_name": "cpython",
            "platform_python_implementation": "CPython",
            "python_version": self.python,
            "python_full_version": f"{self.python}.0",
            "implementation_version": f"{self.python}.0",
        }


@dataclass(frozen=True)
class FileEntry:
    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Missing:
    """A requirement the download could not fetch, where it should come from, and why not."""

    requirement: str
    step: str
    index: str
    reason: str


@dataclass
class StepResult:
    id: str
    title: str
    status: str = "ok"  # ok; incomplete: a package is in `missing`; failed: pip or the index failed
    files: list[str] = field(default_factory=list)
    error: str = ""
    package: str = ""  # the requirement pip named when it failed


@dataclass
class Manifest:
    plan: dict[str, Any]
    target: Target
    steps: list[StepResult]
    files: list[FileEntry]
    missing: list[Missing]
    only: list[str] | None = None
    schema_version: int = SCHEMA
    kind: str = "ascendctl-wheelhouse"

    @property
    def complete(self) -> bool:
        return not self.missing and not self.only and all(s.status == "ok" for s in self.steps)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["complete"] = self.complete
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Manifest":
        return cls(
            plan=dict(data["plan"]),
            target=Target(**data["target"]),
            steps=[StepResult(**s) for s in data.get("steps", [])],
            files=[FileEntry(**f) for f in data.get("files", [])],
            missing=[Missing(**m) for m in data.get("missing", [])],
            only=data.get("only"),
            schema_version=_schema(data.get("schema_version", SCHEMA)),
        )


def _schema(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).isdigit():
        raise ValueError(f"schema_version {value!r}")
    return int(value)


class WheelhouseError(ValueError):
    """A wheelhouse that cannot be used here; `fix` says what to do."""

    def __init__(self, cause: str, fix: str) -> None:
        super().__init__(cause)
        self.cause, self.fix = cause, fix


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def package_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(PACKAGE_FILES))


def write_manifest(folder: Path, manifest: Manifest) -> Path:
    path = folder / MANIFEST
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest.to_json(), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_manifest(folder: str | Path) -> Manifest:
    path = Path(folder) / MANIFEST
    fix = "make it on a connected machine: ascendctl engine download --cann V --chip C --arch A --dest DIR"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise WheelhouseError(f"{path} does not exist: {folder} is not a wheelhouse", fix) from None
    except (OSError, ValueError) as exc:
        raise WheelhouseError(f"cannot read {path}: {exc}", fix) from None
    if not isinstance(data, dict) or data.get("kind") != "ascendctl-wheelhouse":
        raise WheelhouseError(f"{path} is not a wheelhouse manifest", fix)
    try:
        version = _schema(data.get("schema_version", 0))
    except ValueError:
        raise WheelhouseError(f"{path}: schema_version {data.get('schema_version')!r} is not a number", fix) from None
    if version > SCHEMA:
        raise WheelhouseError(
            f"{path} was written by a newer ascendctl (manifest version {data['schema_version']})",
            "install with the ascendctl version that made it",
        )
    try:
        manifest = Manifest.from_json(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise WheelhouseError(f"{path} lacks a field or has one of the wrong type ({exc})", fix) from None
    target = manifest.target
    for name, value, shape in (
        ("target.arch", target.arch, r"[A-Za-z0-9_]+"),
        ("target.python", target.python, r"3\.\d{1,2}"),
        ("target.glibc", target.glibc, r"2\.\d{1,3}"),
    ):
        if not isinstance(value, str) or not re.fullmatch(shape, value):
            raise WheelhouseError(f"{path}: {name} is {value!r}, not a string such as the download writes", fix)
    for entry in manifest.files:
        if not _plain_name(entry.name) or not isinstance(entry.size, int) or not isinstance(entry.sha256, str):
            raise WheelhouseError(
                f"{path}: the file entry {entry.name!r} is not a plain file name with its size and sha256", fix
            )
    return manifest


def _plain_name(name: object) -> bool:
    """A file name of the folder itself: no folder part (`../../etc/hostname`, `/etc/passwd`),
    nothing hidden, no control character."""
    return (
        isinstance(name, str)
        and bool(name)
        and not name.startswith(".")
        and not any(c in name for c in "/\\")
        and all(c.isprintable() for c in name)
    )


def _dist_name(filename: str) -> str:
    return re.sub(r"[-_.]+", "-", filename.split("-", 1)[0]).lower()


def _dist_version(filename: str) -> str:
    stem = filename[: -len(".whl")] if filename.endswith(".whl") else re.sub(r"\.(tar\.gz|zip)$", "", filename)
    parts = stem.split("-")
    return parts[1] if len(parts) > 1 else ""


def file_for(requirement: str, names: list[str]) -> str | None:
    """A file of `names` that is `requirement` (name==version, a local label such as +cpu aside)."""
    want = re.sub(r"[-_.]+", "-", re.split(r"[<>=!~;@\[ ]", requirement, maxsplit=1)[0]).lower()
    version = requirement.partition("==")[2].strip()
    for name in names:
        if _dist_name(name) == want and (not version or _dist_version(name).split("+")[0] == version):
            return name
    return None


def host_problems(target: Target, machine: str, python: str, glibc: str | None) -> list[tuple[str, str]]:
    """(cause, fix) for each way this host differs from the wheelhouse's target."""
    again = "download again for this host: ascendctl engine download ... --arch {a} --python {p}"
    problems = []
    if machine != target.arch:
        problems.append(
            (
                f"the wheelhouse is for {target.arch}, this host is {machine}",
                again.format(a=machine, p=target.python),
            )
        )
    if ".".join(python.split(".")[:2]) != target.python:
        problems.append(
            (
                f"the wheelhouse is for Python {target.python}, this environment runs Python {python}",
                again.format(a=target.arch, p=".".join(python.split(".")[:2]))
                + f"; or recreate .venv with Python {target.python} (rm -r .venv; PYTHON=python{target.python} "
                "./install.sh --wheelhouse DIR)",
            )
        )
    if glibc and release_tuple(glibc) < release_tuple(target.glibc):
        problems.append(
            (
                f"the wheelhouse holds wheels for glibc {target.glibc}, this host has glibc {glibc}",
                f"download again with --glibc {glibc} (and a CANN set whose wheels install there)",
            )
        )
    return problems


def content_problems(folder: Path, manifest: Manifest) -> list[tuple[str, str]]:
    """(cause, fix) for what the wheelhouse lacks or holds damaged. A missing file added by hand
    since the download (same name and version) counts as there."""
    problems = []
    names = [p.name for p in package_files(folder)]
    if manifest.only:
        problems.append(
            (
                f"the wheelhouse holds only the steps {', '.join(manifest.only)} of the plan",
                "download the whole plan (without --only)",
            )
        )
    for step in manifest.steps:
        if step.status == "failed":
            problems.append(
                (
                    f"the download of step {step.id} failed" + (f" at {step.package}" if step.package else ""),
                    "run the download again on the connected machine (it keeps what it already has)",
                )
            )
    for miss in manifest.missing:
        if not file_for(miss.requirement, names):
            problems.append(
                (
                    f"{miss.requirement} is not in the wheelhouse ({miss.reason})",
                    f"download its wheel for {manifest.target.arch}, Python {manifest.target.python} from "
                    f"{miss.index} and copy it into {folder}",
                )
            )
    return problems + file_problems(folder, manifest)


def file_problems(folder: Path, manifest: Manifest) -> list[tuple[str, str]]:
    """(cause, fix) for every file of the manifest that is missing or does not match its sha256,
    and every package file in the folder the manifest does not list: pip's --find-links would
    install it (a newer version first). A file added by hand for a requirement the download
    could not fetch (`missing`) is the one exception."""
    problems = []
    listed = {entry.name for entry in manifest.files}
    for entry in manifest.files:
        path = folder / entry.name
        if not path.is_file() or path.is_symlink():
            problems.append((f"{entry.name} is missing from the wheelhouse", "copy the whole folder again"))
        elif path.stat().st_size != entry.size or sha256(path) != entry.sha256:
            problems.append((f"{entry.name} does not match its checksum (damaged in transfer)", "copy it again"))
    for path in package_files(folder):
        if path.name in listed or any(file_for(m.requirement, [path.name]) for m in manifest.missing):
            continue
        problems.append(
            (
                f"{path.name} is in the wheelhouse but not in its manifest (pip would install it unchecked)",
                f"remove it from {folder}, or make the wheelhouse again with `ascendctl engine download`",
            )
        )
    return problems


def plan_of(manifest: Manifest) -> Plan:
    """The plan the wheelhouse was made for, built again from this ascendctl's pinned sets; an
    error when they no longer agree (the pins changed since the download)."""
    from engine.stacks.plan import build_plan

    p = manifest.plan
    plan = build_plan(str(p["set_cann"]), chip=str(p["chip"]), arch=str(p["arch"]), indexes=p.get("indexes"))
    if list(plan.pins) != list(p.get("pins", [])) or [s.id for s in plan.steps] != [s["id"] for s in p["steps"]]:
        raise WheelhouseError(
            f"the wheelhouse was made for other pins of CANN {p['set_cann']} than this ascendctl holds",
            "download again with this version of ascendctl",
        )
    return plan


def offline_args(step: Step, folder: str) -> list[str]:
    """The step's pip arguments for an install from the wheelhouse alone: its index options dropped,
    `--no-index --find-links DIR` added (removals are unchanged)."""
    args = step.pip_args()
    if step.kind != "install":
        return args
    kept: list[str] = []
    skip = False
    for arg in args[1:]:
        if skip:
            skip = False
            continue
        if arg in ("--extra-index-url", "--index-url", "-i"):
            skip = True
            continue
        kept.append(arg)
    return [args[0], "--no-index", "--find-links", folder, *kept]


def main(argv: list[str]) -> int:
    import platform
    import sys

    if len(argv) != 2 or argv[0] != "--check-host":
        print("usage: python -m engine.stacks.wheelhouse --check-host DIR", file=sys.stderr)
        return 2
    try:
        manifest = read_manifest(argv[1])
    except WheelhouseError as exc:
        problems = [(exc.cause, exc.fix)]
    else:
        try:
            libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
        except (ValueError, OSError, AttributeError):
            libc = ""
        glibc = re.search(r"glibc\s+(\d+\.\d+)", libc)
        python = ".".join(str(x) for x in sys.version_info[:3])
        problems = host_problems(manifest.target, platform.machine(), python, glibc.group(1) if glibc else None)
        # Every file checked before the first pip call: a tampered or unlisted dependency of
        # ascendctl itself would otherwise run before any later check could flag it.
        problems += file_problems(Path(argv[1]), manifest)
    for cause, fix in problems:
        print(f"install.sh: {cause}", file=sys.stderr)
        print(f"  fix: {fix}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
