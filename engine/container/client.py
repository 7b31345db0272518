"""What ascendctl asks a container runtime: which one to use (`pick_runtime`: the one named, or
the first installed one that answers; serve and doctor ask here), why one does not answer
(`explain_failure`: daemon down, socket closed, other; every command says it so), is the image
there (its id and digest), pull it, and the pid of a run's container.

Every call goes through the host's runner (a timeout, never raising on a non-zero exit), so the
tests drive a stand-in CLI the same way as the real one.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

from engine.container.inspect import json_documents
from engine.container.runtime import Runtime, find_runtime, installed_runtimes, no_runtime
from engine.errors import AscendctlError, BadInput, Unreachable
from engine.system.host import Host
from engine.system.runner import CommandResult, Runner, ToolTimeout

T = TypeVar("T")

# What a runtime says when it cannot reach its daemon or socket, and the fix for each runtime.
_DAEMON_DOWN = ("cannot connect", "is the docker daemon running", "connection refused", "no such file or directory")
_FIXES = {
    "docker": {
        "down": "start it: sudo systemctl start docker (check: docker info)",
        "permission": "add your user to the docker group (sudo usermod -aG docker $USER, then log in again), "
        "or run ascendctl as root",
    },
    "nerdctl": {
        "down": "start containerd: sudo systemctl start containerd (check: nerdctl info)",
        "permission": "run ascendctl as root, or set up rootless containerd (containerd-rootless-setuptool.sh install)",
    },
    "podman": {
        # podman has no daemon; it needs one only as a client of a podman service (CONTAINER_HOST, --remote)
        "down": "start its service (sudo systemctl start podman.socket) or unset CONTAINER_HOST; "
        "`podman info` says what fails",
        "permission": "run ascendctl as root, or set up rootless podman (subuid / subgid entries for your user)",
    },
}


# The service behind each runtime's CLI.
_SERVICES = {"docker": "docker", "nerdctl": "containerd", "podman": "podman.socket"}


def said(text: str, returncode: int | None = None) -> str:
    """The line of a runtime's error output worth quoting: the last one (podman prints its
    warnings before the error), at most 300 characters."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else f"no output (exit {returncode})" if returncode else "no output")[:300]


def explain_failure(runtime: str, result: CommandResult) -> tuple[str, str]:
    """(cause, fix) for a runtime that answered with an error: its daemon down, its socket closed
    to this user, or whatever it said. serve, doctor, top, the exporter and bundle all say it so."""
    text = said(result.stderr or result.stdout, result.returncode)
    low = (result.stderr + "\n" + result.stdout).lower()
    fixes = _FIXES.get(runtime, {})
    if "permission denied" in low and (runtime != "podman" or "sock" in low):
        return f"{runtime} is installed but its socket refuses us: {text}", fixes.get("permission", "")
    if any(word in low for word in _DAEMON_DOWN) or (runtime == "nerdctl" and "containerd" in low):
        return f"{runtime} is installed but its daemon does not answer: {text}", fixes.get("down", "")
    if "permission denied" in low:
        return f"{runtime} does not work for this user: {text}", fixes.get("permission", "")
    return f"{runtime} does not work here: {text}", f"run `{runtime} info` by hand and fix what it says"


@dataclass(frozen=True)
class ImageInfo:
    image: str
    id: str  # the local image id (sha256:...)
    digest: str | None  # the registry digest (name@sha256:...), None for an image built or imported here


class RuntimeUnusable(Unreachable):
    """A runtime that is installed but does not answer; `runtime` says which."""

    def __init__(self, runtime: Runtime, cause: str, fix: str = "") -> None:
        super().__init__(cause, fix)
        self.runtime = runtime


def check_reachable(runtime: Runtime, runner: Runner, timeout: float = 15.0) -> str:
    """The runtime's server version; RuntimeUnusable saying whether its daemon is down or its
    socket is closed to us, with the fix (explain_failure)."""
    try:
        result = runner.run([runtime.path, "version", "--format", "{{.Server.Version}}"], timeout=timeout)
    except ToolTimeout:
        raise RuntimeUnusable(
            runtime,
            f"{runtime.name} is installed but does not answer: `{runtime.name} version` took over {timeout:g} s",
            f"run `{runtime.name} info` by hand; a hung service needs a restart "
            f"(sudo systemctl restart {_SERVICES.get(runtime.name, runtime.name)})",
        ) from None
    except AscendctlError as exc:  # a CLI that cannot run
        raise RuntimeUnusable(runtime, exc.cause, exc.fix) from None
    if result.ok and result.stdout.strip():
        return result.stdout.strip()
    raise RuntimeUnusable(runtime, *explain_failure(runtime.name, result))


@dataclass(frozen=True)
class Picked(Generic[T]):
    runtime: Runtime
    answer: T  # what `ask` returned
    passed_over: tuple[str, ...] = ()  # why each installed runtime tried before it is not used


def pick_runtime(host: Host, choice: str, ask: Callable[[Runtime], T]) -> Picked[T]:
    """The runtime to use, and its answer to `ask` (which raises RuntimeUnusable when the runtime
    does not answer). A named runtime is the one used: BadInput when it is not installed, its
    failure raised when it does not answer. With `auto`, the first installed one (RUNTIMES order)
    that answers: docker installed with its daemon stopped beside a working podman gives podman.
    When none answers, the first one's failure is raised; when none is installed, Unreachable."""
    if choice != "auto":
        runtime = find_runtime(host, choice)
        return Picked(runtime, ask(runtime))
    first: RuntimeUnusable | None = None
    passed: list[str] = []
    for runtime in installed_runtimes(host):
        try:
            return Picked(runtime, ask(runtime), tuple(passed))
        except RuntimeUnusable as exc:
            first = first or exc
            passed.append(exc.cause)
    raise first or no_runtime()


def inspect_image(runtime: Runtime, runner: Runner, image: str, timeout: float = 30.0) -> ImageInfo | None:
    """The local image's id and registry digest, or None when the image is not here."""
    result = runner.run([runtime.path, "image", "inspect", "--format", "{{json .}}", image], timeout=timeout)
    if not result.ok:
        return None
    docs = json_documents(result.stdout)  # podman: an indented array; docker: one object
    if not docs:
        return None
    data = docs[0]
    digests = data.get("RepoDigests") or []
    return ImageInfo(image, str(data.get("Id") or data.get("ID") or ""), digests[0] if digests else None)


def pull_argv(runtime: Runtime, image: str) -> list[str]:
    return [runtime.name, "pull", image]


def require_image(runtime: Runtime, runner: Runner, image: str, why: str) -> ImageInfo:
    info = inspect_image(runtime, runner, image)
    if info is None:
        raise BadInput(
            f"image {image} ({why}) is not on this host",
            f"pull it: {' '.join(pull_argv(runtime, image))} (or serve with --pull)",
        )
    return info


def pull(runtime: Runtime, image: str, timeout: float = 3600.0) -> None:
    """Pull with the runtime's own progress on stderr (stdout stays for data)."""
    try:
        done = subprocess.run(
            [runtime.path, "pull", image], stdin=subprocess.DEVNULL, stdout=sys.stderr, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise Unreachable(
            f"{runtime.name} pull {image} did not finish within {timeout:g} s", "pull it by hand, then serve again"
        ) from None
    if done.returncode != 0:
        raise Unreachable(
            f"{runtime.name} pull {image} failed (exit code {done.returncode})",
            "check the name and the registry's reachability; a mirror (e.g. m.daocloud.io/quay.io/...) can be named "
            "in container.image",
        )


def container_pid(runtime: Runtime, runner: Runner, name: str) -> int | None:
    """The host pid of the container's first process, None when it does not run."""
    result = runner.run([runtime.path, "inspect", "--format", "{{.State.Pid}}", name], timeout=10)
    try:
        pid = int(result.stdout.strip()) if result.ok else 0
    except ValueError:
        return None
    return pid or None
