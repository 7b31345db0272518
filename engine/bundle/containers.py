"""The bundle's container part: for a run whose engine is in a container, the runtime's version
and info, the container's `inspect` with its environment and command lines redacted, and the
tail of its log (which triage then reads with the run's own log).

    run/container/runtime.json     {"runtime": ..., "version": {...}, "info": {...}}
    run/container/inspect.json     `RUNTIME inspect NAME`, through engine.container.inspect.redact_inspect
    run/container/container.log    `RUNTIME logs --tail N NAME` (stdout and stderr as the runtime gives them)

`version` and `info` also go through the bundle's command recorder (so `doctor --root` on the
archive replays them); `inspect` and `logs` do not: the raw answers hold the container's
environment, and only the redacted copy may enter the archive.
"""

from __future__ import annotations

import json
from typing import Any

from engine.bundle.layout import RUN_DIR
from engine.container.discover import discovery_runtimes, find_engines
from engine.container.inspect import json_documents, redact_inspect
from engine.container.runtime import Runtime, container_name, find_runtime
from engine.errors import AscendctlError
from engine.i18n import N_

CONTAINER_DIR = f"{RUN_DIR}/container"
LOG_TAIL_LINES = 2000


def _recorded_container(run: Any) -> tuple[str | None, str | None]:
    """(runtime, container name or id) of the `container` record `serve --container` writes into
    run.json (engine.runs.RunInfo.container: runtime, name, id, image...); (None, None) for a
    host engine."""
    record = getattr(run, "container", None)
    if not isinstance(record, dict):  # a host engine
        return None, None
    runtime = record.get("runtime")
    name = record.get("name") or record.get("id")
    return (str(runtime) if runtime else None), (str(name) if name else None)


def _runtimes(builder: Any, named: str | None) -> list[Runtime]:
    if named:
        try:
            return [find_runtime(builder.base, named)]
        except AscendctlError:
            return []
    return discovery_runtimes(builder.base)


def _strings(builder: Any, value: Any) -> Any:
    if isinstance(value, str):
        return builder.red.text(value)
    if isinstance(value, list):
        return [_strings(builder, v) for v in value]
    if isinstance(value, dict):
        return {builder.red.text(str(k)): _strings(builder, v) for k, v in value.items()}
    return value


def _json(builder: Any, data: Any) -> bytes:
    """JSON with the bundle's redactor (host and user names, the machine's secrets) applied to
    each string, not to the text: a line-based pass would mask `"authorization": null` into
    invalid JSON."""
    return (json.dumps(_strings(builder, data), indent=2) + "\n").encode("utf-8", "surrogateescape")


def collect(builder: Any, src: Any) -> None:
    """The collector `bundle` runs after the serve run's files (`builder` is the bundle's
    _Builder: its base host, recorder, stage, redactor and logs)."""
    run = getattr(builder, "run_info", None)
    named_runtime, name = _recorded_container(run)
    if name is None and run is not None:
        name = container_name(run.run_id)
    timeout = builder.opts.timeout_s
    found: tuple[Runtime, dict] | None = None
    for runtime in _runtimes(builder, named_runtime):
        candidates = [name] if name else []
        if not candidates and builder.live:
            # No run here: the newest engine container this runtime lists by label.
            candidates = [e.name for e in find_engines(builder.base) if e.runtime == runtime.name][:1]
        for candidate in candidates:
            try:
                got = builder.base.runner.run([runtime.path, "inspect", candidate], timeout=timeout)
            except AscendctlError:
                continue
            docs = json_documents(got.stdout) if got.ok else []
            if docs:
                found = (runtime, docs[0])
                break
        if found:
            break
    if found is None:
        src.status = "skipped"
        src.why = (
            N_("no container runtime installed")
            if not _runtimes(builder, named_runtime)
            else N_("the run's engine is not in a container")
            if run is not None
            else N_("no engine container found (label ascendctl.run)")
        )
        return
    runtime, inspect = found
    cname = str(inspect.get("Name") or name or "").lstrip("/")
    src.what = builder.red.text(f"{runtime.name} inspect / logs --tail {LOG_TAIL_LINES} {cname}")
    facts: dict[str, Any] = {"runtime": runtime.name}
    for key, args in (("version", ("version", "--format", "json")), ("info", ("info", "--format", "json"))):
        try:
            result = builder.recorder.run([runtime.path, *args], timeout=timeout)
            docs = json_documents(result.stdout) if result.ok else []
            facts[key] = docs[0] if docs else {"error": (result.stderr or result.stdout).strip()[:500]}
        except AscendctlError as exc:
            facts[key] = {"error": exc.cause}
    builder.stage.write(f"{CONTAINER_DIR}/runtime.json", _json(builder, redact_inspect(facts)), src)
    builder.stage.write(f"{CONTAINER_DIR}/inspect.json", _json(builder, redact_inspect(inspect)), src)
    try:
        logs = builder.base.runner.run([runtime.path, "logs", "--tail", str(LOG_TAIL_LINES), cname], timeout=timeout)
    except AscendctlError as exc:
        src.status, src.why = "failed", f"{runtime.name} logs: {exc.cause}"
        return
    src.rc = logs.returncode
    text = logs.stdout + (("\n" if logs.stdout and not logs.stdout.endswith("\n") else "") + logs.stderr)
    if not logs.ok:
        src.status, src.why = "failed", f"{runtime.name} logs: exit code {logs.returncode}"
    if text.strip():
        member = f"{CONTAINER_DIR}/container.log"
        builder.stage.write(member, builder.text(text), src, tail=True)
        builder.logs.append(member)
