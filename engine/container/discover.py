"""Finding the engines ascendctl started in containers, by their labels, with no URL given:
`top`, the exporter and `bundle` ask here.

    engines = find_engines(host, notes)      # ps + inspect: run id, URL, NPUs, the run's log
    usage = container_usage(host, runtime)   # stats: CPU and memory of every running container

Every command goes through the Host's runner with a timeout, so a recorded tree replays it and a
hung daemon costs seconds, not the dashboard. ASCENDCTL_CONTAINER_DISCOVERY picks the runtime to
ask (auto, docker, podman, nerdctl) or turns discovery off (off).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from engine.container.client import explain_failure
from engine.container.inspect import ContainerEntry, Usage, json_documents, npus_given, parse_ps, parse_stats
from engine.container.runtime import LABEL_RUN, RUNTIMES, Runtime, installed_runtimes
from engine.errors import AscendctlError
from engine.system.host import Host
from engine.system.runner import CommandResult

DISCOVERY_VAR = "ASCENDCTL_CONTAINER_DISCOVERY"
TIMEOUT_S = 5.0


def discovery_runtimes(host: Host) -> list[Runtime]:
    """The runtimes to look for labelled containers in: the one ASCENDCTL_CONTAINER_DISCOVERY
    names, else every one installed (docker, podman, nerdctl order); none when it says off."""
    choice = (host.env.get(DISCOVERY_VAR) or "auto").strip().lower()
    if choice in ("off", "none", "0", "no"):
        return []
    return installed_runtimes(host, RUNTIMES if choice == "auto" else (choice,))


def run(host: Host, runtime: Runtime, *args: str, timeout: float = TIMEOUT_S) -> CommandResult:
    """`RUNTIME ARGS...` through the host's runner (ToolMissing / ToolTimeout as it raises them)."""
    return host.runner.run([runtime.path, *args], timeout=timeout)


@dataclass(frozen=True)
class ContainerEngine:
    """An engine container of a run: what `ps` and `inspect` said of it."""

    runtime: str
    entry: ContainerEntry
    npus: tuple[int, ...] | None = None  # the NPUs it was given (None: not said)
    image: str | None = None
    log_path: str | None = None  # the run directory's engine.log, when the run is on this host

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def run_id(self) -> str:
        return self.entry.run_id


def _run_log(run_id: str) -> str | None:
    from engine.runs import LOG_FILE, runs_dir

    path = runs_dir() / run_id / LOG_FILE
    return str(path) if path.is_file() else None


@dataclass
class FailedRuntimes:
    """For a caller that looks again and again (the exporter): a runtime that did not answer is
    asked again only after `rest_s`. A docker CLI whose daemon is stopped fails every `ps` after
    ~60 ms of CPU, which at the exporter's 30 s look was a tenth of its whole budget; a daemon
    started later is found within `rest_s`."""

    rest_s: float = 300.0
    failed: dict[str, tuple[float, str]] = field(default_factory=dict)  # runtime -> (monotonic, cause)


def find_engines(
    host: Host | None = None, notes: list[str] | None = None, failed: FailedRuntimes | None = None
) -> list[ContainerEngine]:
    """The running containers labelled `ascendctl.run`, in every runtime installed. What went
    wrong is said in `notes`, never raised: a dashboard still shows its other engines. A runtime
    that does not answer is said only when no runtime answered (docker installed with its daemon
    stopped beside a working podman is no news)."""
    host = host or Host()
    notes = [] if notes is None else notes
    out: list[ContainerEngine] = []
    failures: list[str] = []
    answered = False
    now = time.monotonic()
    for runtime in discovery_runtimes(host):
        last = failed.failed.get(runtime.path) if failed is not None else None
        if last is not None and now - last[0] < failed.rest_s:
            failures.append(last[1])
            continue
        try:
            found = _find_in(host, runtime)
        except AscendctlError as exc:
            failures.append(exc.cause)
            if failed is not None:
                failed.failed[runtime.path] = (now, exc.cause)
            continue
        if failed is not None:
            failed.failed.pop(runtime.path, None)
        answered = True
        out += found
    if failures and not answered:
        notes += [f"containers not listed: {cause}" for cause in failures]
    return out


def _find_in(host: Host, runtime: Runtime) -> list[ContainerEngine]:
    from engine.errors import Unreachable

    result = run(host, runtime, "ps", "--filter", f"label={LABEL_RUN}", "--format", "json")
    if not result.ok:
        raise Unreachable(*explain_failure(runtime.name, result))
    entries = [e for e in parse_ps(result.stdout) if e.state in ("running", "")]
    if not entries:
        return []
    details: dict[str, dict] = {}
    try:
        got = run(host, runtime, "inspect", *[e.name for e in entries])
        for item in json_documents(got.stdout):
            details[str(item.get("Name") or "").lstrip("/")] = item
            details[str(item.get("Id") or "")] = item
    except AscendctlError:
        pass  # the engines are still listed, without their NPUs and image
    out = []
    for e in entries:
        item = details.get(e.name) or details.get(e.id) or {}
        npus = npus_given(item) if item else None
        image = item.get("ImageName") or (item.get("Config") or {}).get("Image") or e.image
        out.append(
            ContainerEngine(
                runtime.name, e, tuple(npus) if npus is not None else None, image or None, _run_log(e.run_id)
            )
        )
    return out


def container_usage(host: Host, runtime_name: str) -> dict[str, Usage]:
    """{container name and id: CPU and memory} of the runtime's running containers. Raises
    Unreachable (ToolMissing / ToolTimeout) when the runtime does not answer."""
    from engine.errors import Unreachable

    runtime = Runtime(runtime_name, host.runner.which(runtime_name) or runtime_name)
    result = run(host, runtime, "stats", "--no-stream", "--format", "json")
    if not result.ok:
        raise Unreachable(*explain_failure(runtime_name, result))
    return parse_stats(result.stdout)
