"""The `docker run` / `podman run` / `nerdctl run` line that wraps the launch spec serve builds.

The engine's argv and environment come from engine.profiles.launch_spec, run by the image's
interpreter (container.python): the container adds only what a container needs (its name and
labels, devices, mounts, shared memory, network, user). The result is itself a LaunchSpec, so the
supervisor, the dry run and the port lock treat it like any other.

No secret lands in argv: a variable whose name marks it secret (VLLM_API_KEY, HF_TOKEN, ...) and
every `pass_env` name go as `-e NAME`, the runtime reading the value from its own environment;
the others as `-e NAME=value`, readable in the printout. Flags common to docker (docs.docker.com
"docker container run"), podman (podman-run(1)) and nerdctl (its command reference) are used,
in the order an operator writes them.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, replace
from pathlib import Path

from engine.container.image import chip_family, facts
from engine.container.runtime import Runtime, container_name, run_labels
from engine.errors import BadInput
from engine.profiles import LaunchSpec, Profile
from engine.profiles.container import Container
from engine.redact import is_secret_name
from engine.system.devnodes import device_nodes
from engine.system.host import Host

SECRET_ENV = ("VLLM_API_KEY",)


@dataclass(frozen=True)
class ContainerPlan:
    """Everything fixed before the run id is known: the runtime, the image and the settings."""

    runtime: Runtime
    image: str
    settings: Container
    image_id: str | None = None
    image_digest: str | None = None
    image_why: str = ""

    def record(self, name: str, container_id: str | None = None) -> dict[str, str | None]:
        """What run.json keeps about the container."""
        return {
            "runtime": self.runtime.name,
            "runtime_path": self.runtime.path,
            "name": name,
            "id": container_id,
            "image": self.image,
            "image_id": self.image_id,
            "image_digest": self.image_digest,
        }


def ranks(profile: Profile) -> int:
    """Devices the engine on this host uses: TP x PP, or a layout's devices per host."""
    if profile.nodes is not None:
        return profile.nodes.devices_per_host
    return profile.engine.tensor_parallel_size * (profile.engine.pipeline_parallel_size or 1)


def visible_devices(profile: Profile) -> list[int]:
    settings = profile.container or Container()
    if settings.visible_devices is not None:
        return list(settings.visible_devices)
    return list(range(ranks(profile)))


def check_devices(profile: Profile, host: Host) -> None:
    """BadInput when the container would be given an NPU this host lacks."""
    if profile.platform != "ascend" or device_mode(profile) == "none":
        return
    have = set(device_nodes(host).davinci)
    wanted = visible_devices(profile)
    missing = [n for n in wanted if n not in have]
    if not missing:
        return
    where = "container.visible_devices" if (profile.container and profile.container.visible_devices) else "TP x PP"
    listed = ", ".join(f"/dev/davinci{n}" for n in missing)
    raise BadInput(
        f"the container would get NPU(s) {', '.join(map(str, missing))} ({where}), but this host has no {listed}"
        + (f" (it has {', '.join(map(str, sorted(have)))})" if have else " (it has no /dev/davinci* at all)"),
        "list only NPUs the host has in container.visible_devices (npu-smi info shows them), or lower the "
        "parallel sizes",
    )


def device_mode(profile: Profile) -> str:
    mode = (profile.container or Container()).devices
    if mode != "auto":
        return mode
    return {"ascend": "mounts", "cuda": "gpus"}.get(profile.platform, "none")


def shm_size(profile: Profile) -> str:
    settings = profile.container or Container()
    if settings.shm_size:
        return settings.shm_size
    shm = facts()["shm"]
    gib = shm["default_gib"]
    if profile.platform == "ascend":
        gib = shm["chip_gib"].get(chip_family(profile), gib)
    n = ranks(profile)
    if n > 1:
        gib = max(gib, shm["per_rank_gib"] * n)
    return f"{gib}g"


def _engine_spec(spec: LaunchSpec, settings: Container) -> LaunchSpec:
    """The engine command as it runs inside: the image's interpreter, and with a published port
    the engine listening on every address of the container's own network."""
    argv = [settings.python, *spec.argv[1:]]
    if settings.network == "publish" and "--host" in argv:
        i = argv.index("--host")
        if i + 1 < len(argv):
            argv[i + 1] = "0.0.0.0"
    return replace(spec, argv=argv)


def _devices(profile: Profile, runtime: Runtime, ids: list[int]) -> tuple[list[str], dict[str, str]]:
    """Flags and variables that give the container its accelerators."""
    mode = device_mode(profile)
    settings = profile.container or Container()
    joined = ",".join(map(str, ids))
    if mode == "ascend-runtime":
        env = {"ASCEND_VISIBLE_DEVICES": joined}
        if settings.runtime_options:
            env["ASCEND_RUNTIME_OPTIONS"] = settings.runtime_options
        return ["--runtime", "ascend"], env
    if mode == "mounts":
        mounts = facts()["ascend_mounts"]
        flags: list[str] = []
        for n in ids:
            flags += ["--device", f"/dev/davinci{n}"]
        for dev in mounts["devices"]:
            flags += ["--device", dev]
        volumes = list(mounts["volumes"]) + (list(mounts["multi_node_volumes"]) if profile.nodes else [])
        for volume in volumes:
            flags += ["-v", volume]
        return flags, {}
    if mode == "gpus" and runtime.name != "podman":
        return ["--gpus", f'"device={joined}"' if len(ids) > 1 else f"device={joined}"], {}
    if mode in ("gpus", "cdi"):  # podman takes NVIDIA GPUs through CDI only
        flags = []
        for n in ids:
            flags += ["--device", f"nvidia.com/gpu={n}"]
        return flags, {}
    return [], {}


def _env_flags(env: dict[str, str], pass_env: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
    """-e flags, and the variables the runtime's own process must hold (the secret ones)."""
    flags: list[str] = []
    hidden: dict[str, str] = {}
    for key, value in env.items():
        if key in SECRET_ENV or is_secret_name(key):
            flags += ["-e", key]
            hidden[key] = value
        else:
            flags += ["-e", f"{key}={value}"]
    for key in pass_env:
        if key not in env:
            flags += ["-e", key]
    return flags, hidden


def run_spec(
    profile: Profile,
    spec: LaunchSpec,
    plan: ContainerPlan,
    run_id: str,
    cidfile: Path | None = None,
) -> LaunchSpec:
    """The launch spec of the runtime's `run` that runs `spec` (built for the image's interpreter)
    in a container named after the run. Its env holds only what `-e NAME` reads from the
    runtime's environment; url, host and port are the engine's."""
    settings = plan.settings
    runtime = plan.runtime
    inner = _engine_spec(spec, settings)
    name = container_name(run_id)
    argv = [runtime.path, "run", "--rm", "--name", name]
    for key, value in run_labels(run_id, profile.name, spec.url).items():
        argv += ["--label", f"{key}={value}"]
    if cidfile is not None:
        argv += ["--cidfile", str(cidfile)]
    if settings.network == "publish":
        argv += ["-p", f"{spec.host}:{spec.port}:{spec.port}"]
    else:
        argv += ["--network", "host"]
    argv += ["--shm-size", shm_size(profile)]
    device_flags, device_env = _devices(profile, runtime, visible_devices(profile))
    argv += device_flags
    model = profile.model.path
    if os.path.isabs(model):
        argv += ["-v", f"{model}:{model}:ro"]
    if settings.cache_dir:
        argv += ["-v", f"{os.path.expanduser(settings.cache_dir)}:/root/.cache"]
    for volume in settings.volumes:
        argv += ["-v", volume]
    env_flags, hidden = _env_flags({**device_env, **inner.env}, settings.pass_env)
    argv += env_flags
    if settings.user:
        argv += ["--user", settings.user]
    argv += [plan.image, *inner.argv]
    return LaunchSpec(argv=argv, env=hidden, host=spec.host, port=spec.port, url=spec.url, dropped=spec.dropped)


def printable(spec: LaunchSpec, runtime: Runtime) -> str:
    """The run line as it is printed: the runtime by name (copy-paste runnable where it is on
    PATH), secret flags masked."""
    argv = spec.masked_argv()
    if argv and argv[0] == runtime.path:
        argv[0] = runtime.name
    return shlex.join(argv)
