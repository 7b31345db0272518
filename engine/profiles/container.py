"""The `container` section of a profile: the engine in a container image instead of a host
interpreter (engine/container builds the `run` line from it)."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any, Callable

from engine.redact import redact_value
from engine.yamlfile import Problem, quote

# An image reference as docker, podman and nerdctl parse it ([registry[:port]/]path[:tag][@digest],
# the distribution/reference grammar): nothing a shell would read twice gets through.
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REFERENCE = re.compile(
    rf"^(?:[A-Za-z0-9][A-Za-z0-9.-]*(?::[0-9]+)?/)?{_PATH_PART}(?:/{_PATH_PART})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"
)
SHM_SIZE = re.compile(r"^[0-9]+(?:\.[0-9]+)?[bkmg]?$", re.I)
USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(?::[A-Za-z0-9_][A-Za-z0-9_.-]*)?$")

Locate = Callable[[str], tuple[str, "int | None"]]


@dataclass(frozen=True)
class Container:
    """The engine in a container (the `container` section): serve wraps the launch spec in a
    `docker run` / `podman run` / `nerdctl run` of `image` (None: the official one for the host)."""

    image: str | None = None
    runtime: str = "auto"
    python: str = "python3"
    devices: str = "auto"
    visible_devices: tuple[int, ...] | None = None
    runtime_options: str | None = None
    shm_size: str | None = None
    cache_dir: str | None = None
    volumes: tuple[str, ...] = ()
    pass_env: tuple[str, ...] = ()
    network: str = "host"
    user: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and value != ():
                out[f.name] = list(value) if isinstance(value, tuple) else value
        if "volumes" in out:  # a URL with credentials could hide in a volume spec
            out["volumes"] = [redact_value(v) for v in out["volumes"]]
        return out


def container_section(values: dict[str, dict[str, Any]], locate: Locate) -> tuple[Container, list[Problem]]:
    """The `container` section as a Container, each value checked where a runtime would choke on
    it (or a shell would read it twice)."""
    from engine.profiles.schema import ENV_NAME  # schema imports this module

    problems: list[Problem] = []
    given = values["container"]
    platform = values[""].get("platform")

    def bad(key: str, message: str) -> None:
        problems.append(Problem(*locate(f"container.{key}"), f"container.{key}", message))

    image = given.get("image")
    if image is not None and not IMAGE_REFERENCE.match(image):
        bad(
            "image",
            f"{quote(image)} is not an image name: [registry/]name[:tag][@sha256:digest], lower-case path, "
            "no spaces or shell characters",
        )
    devices = given.get("devices", "auto")
    fits = {"ascend-runtime": ("ascend",), "mounts": ("ascend",), "gpus": ("cuda",), "cdi": ("cuda",)}
    if devices in fits and platform not in fits[devices]:
        bad("devices", f"{devices} is for platform {' or '.join(fits[devices])}, not {platform}")
    if given.get("runtime_options") is not None and devices != "ascend-runtime":
        bad("runtime_options", "only applies with devices: ascend-runtime (it sets ASCEND_RUNTIME_OPTIONS)")
    if devices == "ascend-runtime" and given.get("runtime") == "podman":
        bad(
            "devices",
            "Ascend Docker Runtime registers with Docker and containerd, not podman: use devices: mounts, "
            "or runtime: docker / nerdctl",
        )
    ids: tuple[int, ...] | None = None
    if "visible_devices" in given:
        raw_ids = [str(i) for i in given["visible_devices"]]  # the schema keeps list items as text
        if not raw_ids or not all(i.isdigit() for i in raw_ids):
            bad("visible_devices", f"must be a list of device numbers (0, 1, ...), got {quote(raw_ids)}")
        elif len(set(raw_ids)) != len(raw_ids):
            bad("visible_devices", f"names a device twice: {quote(raw_ids)}")
        else:
            ids = tuple(int(i) for i in raw_ids)
    shm = given.get("shm_size")
    if shm is not None and not SHM_SIZE.match(shm):
        bad("shm_size", f"must be a size such as 1g, 512m or 10g, got {quote(shm)}")
    user = given.get("user")
    if user is not None and not USER.match(user):
        bad("user", f"must be USER, UID or UID:GID, got {quote(user)}")
    for key in ("cache_dir", "python"):
        value = given.get(key)
        if value is not None and (not value or any(c.isspace() for c in value) or ":" in value and key == "cache_dir"):
            bad(key, f"must be a path without spaces{' or colons' if key == 'cache_dir' else ''}, got {quote(value)}")
    for volume in given.get("volumes", ()):
        parts = str(volume).split(":")
        if (
            not isinstance(volume, str)
            or len(parts) not in (2, 3)
            or not all(parts[:2])
            or not parts[1].startswith("/")
            or (len(parts) == 3 and parts[2] not in ("ro", "rw", "z", "Z", "ro,z", "ro,Z"))
            or any(c.isspace() for c in volume)
        ):
            bad("volumes", f"{quote(volume)} is not HOST:CONTAINER or HOST:CONTAINER:ro (absolute container path)")
    for name in given.get("pass_env", ()):
        if not isinstance(name, str) or not ENV_NAME.match(name):
            bad("pass_env", f"{quote(name)} is not an environment variable name")
    nodes = values.get("nodes")
    if nodes is not None and given.get("network") == "publish":
        bad("network", "a layout of several hosts needs the host's network (HCCL, the DP RPC port): use network: host")
    if nodes is not None and nodes.get("mode", "dp") == "ray":
        problems.append(
            Problem(
                *locate("container"),
                "container",
                "nodes.mode ray cannot run in containers yet: `ray start` and the engine would have to share one "
                "container on each host. Use nodes.mode dp (each host's engine in its own container), or "
                "`ascendctl deploy k8s` for a LeaderWorkerSet",
            )
        )
    container = Container(
        image=image,
        runtime=given.get("runtime", "auto"),
        python=given.get("python", "python3"),
        devices=devices,
        visible_devices=ids,
        runtime_options=given.get("runtime_options"),
        shm_size=shm,
        cache_dir=given.get("cache_dir"),
        volumes=tuple(str(v) for v in given.get("volumes", ())),
        pass_env=tuple(str(n) for n in given.get("pass_env", ())),
        network=given.get("network", "host"),
        user=user,
    )
    return container, problems
