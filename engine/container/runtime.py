"""Which container runtime runs the engine, and the names and labels every run's container
carries so that top, the exporter, bundle and the watchdog find it without a URL.

docker, podman and nerdctl share the verbs ascendctl uses (run, stop, rm, inspect, ps, logs,
image inspect, pull, version, info); where their flags differ, the caller asks `Runtime.name`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.errors import BadInput, Unreachable
from engine.system.host import Host

# `auto` looks for them in this order: Docker is what the vllm-ascend quick start and Ascend
# Docker Runtime use, podman is the daemonless stand-in, nerdctl is containerd's CLI.
RUNTIMES = ("docker", "podman", "nerdctl")
CHOICES = ("auto", *RUNTIMES)

# Labels on every container a run starts. `ascendctl.run` holds the run id (its directory name
# under the state dir), `ascendctl.profile` the profile's name, `ascendctl.url` where it serves.
LABEL_RUN = "ascendctl.run"
LABEL_PROFILE = "ascendctl.profile"
LABEL_URL = "ascendctl.url"
NAME_PREFIX = "ascendctl-"


@dataclass(frozen=True)
class Runtime:
    name: str  # docker, podman or nerdctl
    path: str  # the executable found on PATH

    @property
    def argv0(self) -> list[str]:
        return [self.path]


def installed_runtimes(host: Host, names: tuple[str, ...] = RUNTIMES) -> list[Runtime]:
    """The runtimes of `names` (known ones only) that are on PATH, in that order."""
    found = [Runtime(name, host.runner.which(name) or "") for name in names if name in RUNTIMES]
    return [r for r in found if r.path]


def no_runtime() -> Unreachable:
    return Unreachable(
        "no container runtime found (none of docker, podman, nerdctl is on PATH)",
        "install Docker (with Ascend Docker Runtime on an Ascend host) or podman, or serve without --container",
    )


def find_runtime(host: Host, choice: str = "auto") -> Runtime:
    """The runtime named, or with `auto` the first of RUNTIMES on PATH, unasked (which one answers
    is engine.container.client.pick_runtime). A runtime that is not installed is bad input when
    named, unreachable when none at all is there."""
    if choice not in CHOICES:
        raise BadInput(
            f"unknown container runtime {choice!r}",
            f"use one of: {', '.join(CHOICES)}",
        )
    found = installed_runtimes(host, RUNTIMES if choice == "auto" else (choice,))
    if found:
        return found[0]
    if choice != "auto":
        raise BadInput(
            f"container runtime {choice} is not installed (not on PATH)",
            f"install {choice}, or set container.runtime: auto to use whichever of {', '.join(RUNTIMES)} is there",
        )
    raise no_runtime()


_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]")


def container_name(run_id: str) -> str:
    """The container's name for a run: fixed, so a watchdog or a later `ascendctl` can remove it
    by name whatever happened to the process that started it."""
    return NAME_PREFIX + _UNSAFE.sub("-", run_id)


def run_labels(run_id: str, profile: str, url: str) -> dict[str, str]:
    return {LABEL_RUN: run_id, LABEL_PROFILE: profile, LABEL_URL: url}
