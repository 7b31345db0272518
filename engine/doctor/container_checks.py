"""Checks for serving in a container: the runtime (docker, podman, nerdctl) present and answering,
Ascend Docker Runtime installed and registered, the engine image present and made for this
host's driver and chip, /dev/shm, and inside a container the NPUs it owns.

Every command goes through the Host's runner with a timeout and every file through its root, so
`doctor --root` replays a recorded docker or podman host. The profile's `container:` section is
read defensively (`image`, `runtime`, `devices`): a profile without one checks the runtime and
the images present.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.container.runtime import Runtime, find_runtime
from engine.doctor.checks import check
from engine.doctor.context import Context
from engine.doctor.model import Outcome, error, ok, skip, warn
from engine.errors import AscendctlError, BadInput, Unreachable
from engine.i18n import N_, _
from engine.system import paths
from engine.system.devnodes import visible_devices
from engine.system.runner import CommandResult
from engine.versions import cann_release

if TYPE_CHECKING:
    from engine.container.inspect import ImageFacts

# The client, image and inspect modules are imported by the checks that use them: most doctor runs
# (no profile with a container) never list images or ask a runtime, and doctor must answer at once.

RUNTIME_TIMEOUT = 10.0
DAEMON_JSON = "/etc/docker/daemon.json"
# Where Ascend Docker Runtime's installer puts its binaries (Ascend-docker-runtime_<ver>_linux-
# <arch>.run --install), and the name it registers the runtime under in daemon.json.
ASCEND_RUNTIME_DIR = "/usr/local/Ascend/Ascend-Docker-Runtime"
ASCEND_RUNTIME_BIN = f"{ASCEND_RUNTIME_DIR}/ascend-docker-runtime"
ASCEND_RUNTIME_NAME = "ascend"
ASCEND_RUNTIME_INSTALL = N_(
    "install Ascend Docker Runtime (MindCluster's Ascend-docker-runtime_<version>_linux-<arch>.run --install), "
    "then sudo systemctl restart docker"
)
# vLLM's workers share tensors through /dev/shm: the vllm-ascend docker lines give --shm-size=1g
# (A2 / A3) and 10g (300I Duo); docker's default is 64 MiB.
SHM_MIN_BYTES = 1 << 30


def _section(ctx: Context) -> Any:
    """The profile's `container:` section, when the profile has one (None otherwise)."""
    return getattr(ctx.profile, "container", None) if ctx.profile is not None else None


def _wanted(ctx: Context, key: str) -> Any:
    """A key of the profile's `container:` section; `auto` or empty reads as not given."""
    value = getattr(_section(ctx), key, None)
    return None if value in ("", "auto") else value


@dataclass(frozen=True)
class RuntimeProbe:
    runtime: Runtime | None
    version: str | None = None  # the server's (docker) or the CLI's (podman) version
    info: dict | None = None
    cause: str | None = None  # why it is not usable
    fix: str | None = None
    note: str | None = None  # a runtime tried before this one, and why it was passed over
    asked: bool = True  # False: found on PATH, not asked (see _asks_runtime)


def _probe(ctx: Context) -> RuntimeProbe:
    """The runtime's answers, asked once per doctor run."""
    cached = ctx.__dict__.get("_container_runtime")
    if cached is None:
        cached = _probe_runtime(ctx)
        ctx.__dict__["_container_runtime"] = cached
    return cached


def _asks_runtime(ctx: Context) -> bool:
    """Is the runtime worth asking (a daemon round trip, about 0.4 s for podman's info)? On an
    Ascend host, where the official image is how most engines run, always; elsewhere only for a
    profile that serves in a container, so a plain `doctor` stays fast. A recorded machine
    (`--root`) replays the answers it holds: asking costs nothing there."""
    return ctx.platform == "ascend" or _wants_container(ctx) or str(ctx.host.root) != "/"


def _probe_runtime(ctx: Context) -> RuntimeProbe:
    """The runtime serve would use (engine.container.client.pick_runtime: the one the profile
    names; with `auto`, the first installed one that answers, else the first's failure). When the
    runtime is not worth asking (`_asks_runtime`), the first installed one, unasked."""
    choice = _wanted(ctx, "runtime") or "auto"
    if not _asks_runtime(ctx):
        try:
            return RuntimeProbe(find_runtime(ctx.host, choice), asked=False)
        except BadInput as exc:  # the profile named a runtime that is not installed
            return RuntimeProbe(None, cause=exc.cause, fix=exc.fix)
        except Unreachable:  # none installed
            return RuntimeProbe(None)
    from engine.container.client import RuntimeUnusable, pick_runtime

    try:
        picked = pick_runtime(ctx.host, choice, lambda runtime: _ask(ctx, runtime))
    except RuntimeUnusable as exc:
        return RuntimeProbe(exc.runtime, cause=exc.cause, fix=exc.fix)
    except BadInput as exc:  # the profile named a runtime that is not installed
        return RuntimeProbe(None, cause=exc.cause, fix=exc.fix)
    except Unreachable:  # none installed
        return RuntimeProbe(None)
    version, info = picked.answer
    note = picked.passed_over[0] if picked.passed_over else None
    return RuntimeProbe(picked.runtime, version, info, note=note)


def _ask(ctx: Context, runtime: Runtime) -> tuple[str | None, dict | None]:
    """(version, info) of a runtime that answers; RuntimeUnusable otherwise."""
    from engine.container.inspect import json_documents

    result = _run_or_unusable(ctx, runtime, "version", "--format", "json")
    docs = json_documents(result.stdout)
    data = docs[0] if docs else {}
    server = data.get("Server") or {}
    client = data.get("Client") or {}
    version = str(server.get("Version") or client.get("Version") or "") or None
    docs = json_documents(_run_or_unusable(ctx, runtime, "info", "--format", "json").stdout)
    return version, docs[0] if docs else None


def _run_or_unusable(ctx: Context, runtime: Runtime, *args: str) -> CommandResult:
    from engine.container.client import RuntimeUnusable, explain_failure
    from engine.container.discover import run as run_runtime

    try:
        result = run_runtime(ctx.host, runtime, *args, timeout=RUNTIME_TIMEOUT)
    except AscendctlError as exc:
        raise RuntimeUnusable(runtime, f"{runtime.name} {args[0]}: {exc.cause}", exc.fix) from None
    if not result.ok:
        raise RuntimeUnusable(runtime, *explain_failure(runtime.name, result))
    return result


def _wants_container(ctx: Context) -> bool:
    section = _section(ctx)
    return section is not None and getattr(section, "enabled", True) is not False


@check("container.runtime", "container", N_("Container runtime (docker, podman, nerdctl) present and answering"))
def check_runtime(ctx: Context) -> Outcome:
    p = _probe(ctx)
    if p.runtime is None:
        if p.cause:
            return error(p.cause, p.fix or "")
        if _wants_container(ctx):
            return error(
                _("the profile serves in a container, but no container runtime is installed (docker, podman, nerdctl)"),
                _("install Docker (with Ascend Docker Runtime on an Ascend host) or podman, or serve --no-container"),
            )
        return skip(_("no container runtime installed (docker, podman, nerdctl): engines run on the host"))
    if not p.asked:
        return ok(
            _(
                "{runtime} installed ({path}); not asked, since no profile here serves in a container "
                "(doctor --profile P with a container: section asks it)"
            ).format(runtime=p.runtime.name, path=p.runtime.path)
        )
    if p.cause:
        # Docker installed with its daemon stopped stops nobody who serves on the host.
        return (error if _wants_container(ctx) else warn)(p.cause, p.fix or "")
    info = p.info or {}
    host = info.get("host") or {}  # podman
    details = []
    default = info.get("DefaultRuntime") or (host.get("ociRuntime") or {}).get("name")
    if default:
        details.append(_("default runtime {runtime}").format(runtime=default))
    cgroup = info.get("CgroupDriver") or host.get("cgroupManager")
    if cgroup:
        details.append(f"cgroup {cgroup}")
    rootless = (host.get("security") or {}).get("rootless")
    if rootless:
        details.append("rootless")
    extra = _(" ({details})").format(details=_(", ").join(details)) if details else ""
    note = _("; {note}").format(note=p.note) if p.note else ""
    answers = _("{runtime} {version} answers{details}{note}")
    return ok(
        answers.format(runtime=p.runtime.name, version=p.version or _("(version unknown)"), details=extra, note=note)
    )


def _daemon_runtimes(ctx: Context) -> tuple[dict | None, str | None, str | None]:
    """(daemon.json's runtimes, its default-runtime, why it could not be read)."""
    text = paths.read_text(ctx.host, DAEMON_JSON)
    if text is None:
        return None, None, None
    try:
        data = json.loads(text)
    except ValueError as exc:
        invalid = _("{path} is not valid JSON ({error}, line {line})")
        return None, None, invalid.format(path=DAEMON_JSON, error=exc.msg, line=exc.lineno)
    if not isinstance(data, dict):
        return None, None, _("{path} is not a JSON object").format(path=DAEMON_JSON)
    runtimes = data.get("runtimes")
    return (runtimes if isinstance(runtimes, dict) else {}), data.get("default-runtime"), None


@check("container.ascend_runtime", "container", N_("Ascend Docker Runtime installed and registered with Docker"))
def check_ascend_runtime(ctx: Context) -> Outcome:
    if ctx.platform != "ascend":
        return skip(_("no NPU: Ascend Docker Runtime is for Ascend hosts"))
    if ctx.container:
        return skip(_("inside a container: Ascend Docker Runtime is checked on the host"))
    p = _probe(ctx)
    needed = _wanted(ctx, "devices") == "ascend-runtime"
    fail = error if needed else warn
    if p.runtime is None and not needed:
        return skip(_("no container runtime installed: engines run on the host"))
    if p.runtime is not None and p.runtime.name == "podman":
        if needed:
            return error(
                _(
                    "the profile asks for Ascend Docker Runtime (devices: ascend-runtime), which Docker and "
                    "containerd use, but the runtime here is podman"
                ),
                _("set container.devices: mounts (the quick start's --device and driver mounts), or use Docker"),
            )
        return skip(_("podman: Ascend Docker Runtime plugs into Docker and containerd; use the quick start's mounts"))
    runtimes, default, bad = _daemon_runtimes(ctx)
    if bad:
        return error(bad, _("fix {path}, then sudo systemctl restart docker").format(path=DAEMON_JSON))
    entry = (runtimes or {}).get(ASCEND_RUNTIME_NAME)
    path = str((entry or {}).get("path") or ASCEND_RUNTIME_BIN) if isinstance(entry, dict) or entry is None else ""
    installed = paths.exists(ctx.host, path) if path else False
    if entry is None:
        if installed:
            entry_json = f'"runtimes": {{"ascend": {{"path": "{path}", "runtimeArgs": []}}}}'
            return error(
                _("Ascend Docker Runtime is installed ({path}) but not registered in {daemon_json}").format(
                    path=path, daemon_json=DAEMON_JSON
                ),
                _(
                    "add {entry} to {daemon_json} (or rerun its installer with --install), then sudo systemctl "
                    "restart docker"
                ).format(entry=entry_json, daemon_json=DAEMON_JSON),
            )
        if ctx.host.partial:
            return skip(_("Ascend Docker Runtime files not recorded"))
        return fail(
            _("Ascend Docker Runtime is not installed: containers need the quick start's --device and driver mounts"),
            _(ASCEND_RUNTIME_INSTALL) + _("; or set container.devices: mounts"),
        )
    if not installed:
        return error(
            _("{daemon_json} registers the ascend runtime at {path}, which does not exist").format(
                daemon_json=DAEMON_JSON, path=path
            ),
            _(ASCEND_RUNTIME_INSTALL),
        )
    loaded = (p.info or {}).get("Runtimes")
    if p.runtime is not None and p.runtime.name == "docker" and isinstance(loaded, dict):
        if ASCEND_RUNTIME_NAME not in loaded:
            return warn(
                _("the ascend runtime is in {daemon_json} but the running Docker daemon does not list it").format(
                    daemon_json=DAEMON_JSON
                ),
                _("sudo systemctl restart docker (the daemon reads daemon.json when it starts)"),
            )
    if default == ASCEND_RUNTIME_NAME:
        return ok(_("Ascend Docker Runtime registered as `ascend` ({path}), the default runtime").format(path=path))
    return ok(_("Ascend Docker Runtime registered as `ascend` ({path}), used with --runtime ascend").format(path=path))


def _images(ctx: Context, p: RuntimeProbe) -> list[tuple[str, str, dict]]:
    """(reference, id, labels) of every image the runtime has, from `images --format json`:
    podman's array (Names, Labels) or docker's lines (Repository, Tag, ID)."""
    from engine.container.client import explain_failure
    from engine.container.discover import run as run_runtime
    from engine.container.inspect import json_documents

    assert p.runtime is not None
    result = run_runtime(ctx.host, p.runtime, "images", "--format", "json", timeout=RUNTIME_TIMEOUT)
    if not result.ok:
        raise BadInput(*explain_failure(p.runtime.name, result))
    out = []
    for item in json_documents(result.stdout):
        image_id = str(item.get("Id") or item.get("ID") or "")
        labels = item.get("Labels") if isinstance(item.get("Labels"), dict) else {}
        names = [str(n) for n in item.get("Names") or item.get("RepoTags") or []]
        if not names and item.get("Repository"):
            names = [f"{item['Repository']}:{item.get('Tag') or 'latest'}"]
        out += [(name, image_id, labels) for name in names]
    return out


def _labels_of(ctx: Context, p: RuntimeProbe, image_id: str, labels: dict) -> dict:
    """An image's labels: from the list when it says them (podman), else `image inspect ID`."""
    from engine.container.discover import run as run_runtime
    from engine.container.inspect import json_documents

    if labels or not image_id:
        return labels
    assert p.runtime is not None
    try:
        got = run_runtime(ctx.host, p.runtime, "image", "inspect", image_id, timeout=RUNTIME_TIMEOUT)
    except AscendctlError:
        return {}
    docs = json_documents(got.stdout) if got.ok else []
    found = ((docs[0].get("Config") or {}).get("Labels") or docs[0].get("Labels")) if docs else None
    return found if isinstance(found, dict) else {}


def _same_image(a: str, b: str) -> bool:
    from engine.container.inspect import split_reference

    def norm(ref: str) -> str:
        repo, tag = split_reference(ref)
        repo = re.sub(r"^(docker\.io/)?(library/)?", "", repo)
        return f"{repo}:{tag or 'latest'}"

    return norm(a) == norm(b)


def _host_family(ctx: Context) -> str | None:
    table = ctx.npu_smi.table if ctx.platform == "ascend" else None
    for c in table.chips if table is not None else ():
        chip = ctx.matrix.chip(c.name)
        if chip is not None:
            return chip.family
    return None


def _driver_version(ctx: Context) -> str | None:
    d = ctx.driver
    if d is not None and d.version:
        return d.version
    table = ctx.npu_smi.table if ctx.platform == "ascend" else None
    return getattr(table, "driver_version", None) if table is not None else None


def _judge_image(ctx: Context, facts: ImageFacts) -> tuple[str, str, str]:
    """(status, summary, fix) of one engine image against this host's chip and driver."""
    from engine.container.image import host_os, official_image

    cann = facts.cann
    if cann is None and facts.vllm_ascend:
        row = ctx.matrix.release(facts.vllm_ascend)
        cann = row.cann if row is not None else None
    where = _("from its labels") if facts.source == "labels" else _("from its tag")
    what = _("{image}: vllm-ascend {vllm_ascend}, CANN {cann} ({where})").format(
        image=facts.reference, vllm_ascend=facts.vllm_ascend or "?", cann=cann or "?", where=where
    )
    family = _host_family(ctx)
    image_family = {"a2": "A2", "a3": "A3", "310p": "310P", "950": "950"}.get(facts.chip or "")
    if family and image_family and family != image_family:
        right = official_image(family, facts.vllm_ascend or "<version>", host_os(ctx.host))
        return (
            "error",
            _("{image} is built for {image_family}, this host's NPUs are {family}").format(
                image=what, image_family=image_family, family=family
            ),
            _("use the image made for {family}: {image}").format(family=family, image=right),
        )
    driver = _driver_version(ctx)
    if not cann or not driver:
        unchecked = _("{image}; driver pairing not checked (needs the CANN and the driver version)")
        return "ok", unchecked.format(image=what), ""
    verdict = ctx.matrix.driver_compatible(driver, cann)
    fix = _(
        "use an image whose CANN Huawei's compatibility table lists for driver {driver}, or upgrade the driver "
        "(HDK) for CANN {cann}"
    ).format(driver=driver, cann=cann_release(cann) or cann)
    if verdict is False:
        bad = _("{image}: Huawei's compatibility table marks driver {driver} incompatible with it")
        return "error", bad.format(image=what, driver=driver), fix
    if verdict is None:
        unlisted = _("{image}: Huawei's compatibility table does not list driver {driver} for it")
        return "warning", unlisted.format(image=what, driver=driver), fix
    return "ok", _("{image} pairs with driver {driver}").format(image=what, driver=driver), ""


@check("container.image", "container", N_("The engine image present, built for this chip and this host's driver"))
def check_image(ctx: Context) -> Outcome:
    p = _probe(ctx)
    if p.runtime is None or p.cause:
        return skip(_("no usable container runtime (see container.runtime)"))
    if not p.asked:
        return skip(_("no profile here serves in a container: images not listed"))
    from engine.container.inspect import image_facts, split_reference

    wanted = _wanted(ctx, "image")
    try:
        images = _images(ctx, p)
    except AscendctlError as exc:
        return error(exc.cause, exc.fix)
    if wanted:
        match = next((i for i in images if _same_image(i[0], str(wanted))), None)
        if match is None:
            return error(
                _("the profile's image {image} is not on this host").format(image=wanted),
                _("pull it: {runtime} pull {image} (or serve --pull)").format(runtime=p.runtime.name, image=wanted),
            )
        candidates = [match]
    else:
        candidates = [i for i in images if "vllm-ascend" in split_reference(i[0])[0]]
        if not candidates:
            return skip(_("no vllm-ascend image on this host ({runtime} images)").format(runtime=p.runtime.name))
    rows = [
        _judge_image(ctx, image_facts(ref, _labels_of(ctx, p, image_id, labels)))
        for ref, image_id, labels in candidates
    ]
    bad = [r for r in rows if r[0] == "error"] or [r for r in rows if r[0] == "warning"]
    if bad:
        status, summary, fix = bad[0]
        more = _(" (and {count} more)").format(count=len(bad) - 1) if len(bad) > 1 else ""
        # An image no profile names is only lying there: a warning, not a broken host.
        if status == "error" and wanted:
            return error(summary + more, fix)
        return warn(summary + more, fix)
    return ok(_("; ").join(r[1] for r in rows))


_SHM = re.compile(r"^\S+\s+/dev/shm\s+\S+\s+(\S+)", re.M)


def _size_option(options: str) -> int | None:
    m = re.search(r"(?:^|,)size=(\d+)([kmgKMG]?)", options)
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]


@check("container.shm", "container", N_("/dev/shm large enough for the engine's workers (inside a container)"))
def check_shm(ctx: Context) -> Outcome:
    if not ctx.container:
        return skip(_("not in a container: /dev/shm is the host's"))
    mounts = paths.read_text(ctx.host, "/proc/mounts")
    if mounts is None:
        return skip(_("/proc/mounts not recorded"))
    m = _SHM.search(mounts)
    size = _size_option(m.group(1)) if m else None
    if size is None:
        return skip(_("/dev/shm size unknown (not in /proc/mounts)"))
    need = "10g" if _host_family(ctx) == "310P" else "1g"
    if size < SHM_MIN_BYTES:
        # The NPU and GPU engines' workers share tensors through it; the CPU engine copes with less.
        fail = warn if ctx.platform == "cpu" else error
        return fail(
            _("/dev/shm is {size:.0f} MiB (docker's default is 64 MiB); the engine's workers need more").format(
                size=size / (1 << 20)
            ),
            _(
                "start the container with --shm-size={need} (Kubernetes: an emptyDir with medium: Memory at /dev/shm)"
            ).format(need=need),
        )
    return ok(_("/dev/shm is {size:.1f} GiB").format(size=size / (1 << 30)))


@check(
    "container.npus", "container", N_("Inside a container: the NPUs it owns, and ASCEND_RT_VISIBLE_DEVICES within them")
)
def check_owned_npus(ctx: Context) -> Outcome:
    if not ctx.container:
        return skip(_("not in a container"))
    if ctx.platform != "ascend":
        return skip(_("no NPU in this container"))
    from engine.container.inspect import parse_device_list

    env = ctx.host.env
    nodes = list(ctx.nodes.davinci)
    given_raw = env.get("ASCEND_VISIBLE_DEVICES")
    given = parse_device_list(given_raw)
    global_raw = env.get("ASCEND_GLOBAL_VISIBLE_DEVICES")
    owned = given if given is not None else parse_device_list(global_raw)
    source = (
        f"ASCEND_VISIBLE_DEVICES={given_raw}"
        if given is not None
        else f"ASCEND_GLOBAL_VISIBLE_DEVICES={global_raw}"
        if owned is not None
        else _("its /dev/davinciN nodes")
    )
    if given is not None and not ctx.host.partial:
        missing = [n for n in given if n not in nodes]
        if missing:
            return error(
                _("{source}, but {nodes} is not in this container").format(source=source, nodes=_davinci(missing)),
                _(
                    "start the container with Ascend Docker Runtime (--runtime ascend) or one --device "
                    "/dev/davinciN per NPU it should own"
                ),
            )
        extra = [n for n in nodes if n not in given]
        if extra:
            return warn(
                _("{source}, but the container also sees {nodes}").format(source=source, nodes=_davinci(extra)),
                _("give the container only its own NPUs: another job's NPUs must not be visible to this one"),
            )
    count = len(owned) if owned is not None else len(nodes)
    if not count:
        return skip(_("no NPU owned by this container (see devices.nodes)"))
    ids = visible_devices(ctx.host)
    if ids is not None:
        beyond = [i for i in ids if i >= count]
        if beyond:
            return error(
                _(
                    "ASCEND_RT_VISIBLE_DEVICES names {ids}, but the container owns {count} NPU(s) ({source}): "
                    "inside it they are numbered 0-{last}"
                ).format(ids=", ".join(map(str, beyond)), count=count, source=source, last=count - 1),
                _("set ASCEND_RT_VISIBLE_DEVICES to ids from 0 to {last}, or unset it").format(last=count - 1),
            )
    return ok(_("the container owns {count} NPU(s) ({source})").format(count=count, source=source))


def _davinci(ids) -> str:
    """ "/dev/davinci4, /dev/davinci5" """
    return ", ".join(f"/dev/davinci{n}" for n in ids)
