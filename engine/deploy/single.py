"""One host's engine as a Kubernetes Deployment (or StatefulSet) and as a Compose file.

    deployment_manifest(profile, OneHostOptions(image=...), load_s) -> [Deployment, Service]
    compose_file(profile, OneHostOptions(image=...), load_s)        -> the Compose document

The container runs the launch spec `serve` builds (engine.profiles.launch), as `vllm serve` of
the image. Probes: a startup probe on /health sized from the plan's weight-load time, readiness
on /health, and a liveness probe that catches a hung engine: /health keeps answering 200 while
every completion waits, so liveness asks for one completion of one token (liveness_script). The
official vllm-ascend image has python3 but not ascendctl: the check is a few lines of the
standard library. Where the image has ascendctl, `ascendctl probe URL` does the same job and
more (docs/deploy.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from engine.container.runtime import LABEL_PROFILE
from engine.deploy.lws import (
    DNS_LABEL,
    ENGINE_PYTHON,
    _image_argv,
    check_options,
    chip,
    container_env,
    dns_name,
    facts,
    k8s_literal,
    npu_resource,
    secret_name,
)
from engine.errors import BadInput
from engine.i18n import _
from engine.profiles.launch import launch_spec
from engine.profiles.schema import Profile
from engine.redact import is_secret_name

KINDS = ("Deployment", "StatefulSet")
# Files the quick start mounts for one host (docs/source/quick_start.md of vllm-ascend); the
# multi-host list adds /etc/hccn.conf, which a one-host serving needs not (and a hostPath of
# type File fails the pod where it is missing).
ONE_HOST_MOUNTS = ("ascend-driver", "dcmi", "npu-smi", "ascend-install-info")
SHARED_NODES = ("davinci_manager", "devmm_svm", "hisi_hdc")


@dataclass(frozen=True)
class OneHostOptions:
    image: str
    name: str = ""  # default: the profile's name, made a DNS label
    namespace: str | None = None
    kind: str = "Deployment"  # or StatefulSet
    device_plugin: str = "mindcluster"  # or cce
    npu_resource: str | None = None
    shm_size: str | None = None
    host_network: bool = False
    model_pvc: str | None = None  # a PersistentVolumeClaim holding the model, instead of a hostPath
    engine_version: str | None = None
    devices: str = "mounts"  # compose: "mounts" (the quick start's --device lines) or "ascend-runtime"


def npu_count(profile: Profile) -> int:
    return profile.engine.tensor_parallel_size * (profile.engine.pipeline_parallel_size or 1)


def expected_load_s(profile: Profile, model_dir: str | None = None) -> tuple[float | None, str]:
    """The plan's weight-load time of this host (its weights at the load rate of
    engine/capacity/defaults.yaml), and how it was found; None when the model cannot be planned
    here (not on this machine)."""
    from engine.capacity import plan
    from engine.capacity.planner import platform_defaults
    from engine.errors import AscendctlError

    try:
        p = plan(profile, model_dir)
    except AscendctlError as exc:
        return None, _("no plan ({cause})").format(cause=exc.cause)
    rate = float(platform_defaults()["startup"]["load_gib_per_s"])
    seconds = p.weights.total_bytes / (1 << 30) / rate
    return seconds, _("the plan's {size:.1f} GiB of weights at {rate} GiB/s").format(
        size=p.weights.total_bytes / (1 << 30), rate=f"{rate:g}"
    )


def startup_budget_s(load_s: float | None) -> int:
    """Seconds the startup probe allows: the base (graph capture, warm-up) plus a margin over
    the plan's weight-load time."""
    s = facts()["startup"]
    return int(math.ceil(s["base_s"] + s["load_factor"] * (load_s or 0.0)))


def liveness_script(profile: Profile, port: int | None = None, ports: list[int] | None = None) -> str:
    """A python3 program (standard library only) that exits 0 when the engine at 127.0.0.1
    completes one token within the liveness timeout, 1 otherwise; with `ports` (a pod of several
    instances, deploy k8s of a pd layout), when every one of them does, asked together. The API
    key, when the profile has one, is read from the container's VLLM_API_KEY, never written into
    the probe."""
    timeout = facts()["liveness"]["timeout_s"]
    ports = ports or [port or profile.server.port]
    key = "VLLM_API_KEY" if profile.server.api_key_env else None
    lines = [
        "import json, os, sys, urllib.request",
        f"body = json.dumps({{'model': {profile.model.served_name!r}, 'prompt': 'ping', 'max_tokens': 1}}).encode()",
        "headers = {'Content-Type': 'application/json'}",
    ]
    if key:
        lines.append(f"headers['Authorization'] = 'Bearer ' + os.environ.get({key!r}, '')")
    if len(ports) > 1:
        lines[0] += "\nfrom concurrent.futures import ThreadPoolExecutor"
        lines += [
            "def one(port):",
            "    req = urllib.request.Request(f'http://127.0.0.1:{port}/v1/completions', body, headers)",
            "    try:",
            f"        with urllib.request.urlopen(req, timeout={timeout}) as r:",
            "            return r.status == 200 and bool(json.load(r).get('choices'))",
            "    except Exception as e:",
            "        print('liveness:', port, e, file=sys.stderr)",
            "        return False",
            f"ports = {list(ports)!r}",
            "with ThreadPoolExecutor(len(ports)) as pool:",
            "    sys.exit(0 if all(pool.map(one, ports)) else 1)",
        ]
        return "\n".join(lines) + "\n"
    lines += [
        f"req = urllib.request.Request('http://127.0.0.1:{ports[0]}/v1/completions', body, headers)",
        "try:",
        f"    with urllib.request.urlopen(req, timeout={timeout}) as r:",
        "        sys.exit(0 if r.status == 200 and json.load(r).get('choices') else 1)",
        "except Exception as e:",
        "    print('liveness:', e, file=sys.stderr)",
        "    sys.exit(1)",
    ]
    return "\n".join(lines) + "\n"


def health_script(ports: list[int]) -> str:
    """A python3 program that exits 0 when /health of every engine of a pod answers 200."""
    return (
        "\n".join(
            [
                "import sys, urllib.request",
                f"for port in {list(ports)!r}:",
                "    try:",
                "        with urllib.request.urlopen(f'http://127.0.0.1:{port}/health', timeout=5) as r:",
                "            if r.status != 200:",
                "                sys.exit(1)",
                "    except Exception as e:",
                "        print('health:', port, e, file=sys.stderr)",
                "        sys.exit(1)",
            ]
        )
        + "\n"
    )


def _pod_profile(profile: Profile, host: str) -> Profile:
    return replace(profile, server=replace(profile.server, host=host))


def engine_argv(profile: Profile, engine_version: str | None, host: str = "0.0.0.0") -> list[str]:
    """The engine's command line inside the image: serve's launch spec, as `vllm serve`."""
    environ = {profile.server.api_key_env: "x"} if profile.server.api_key_env else {}
    spec = launch_spec(_pod_profile(profile, host), engine_version, ENGINE_PYTHON, environ)
    return _image_argv(spec.argv)


def engine_env(profile: Profile, engine_version: str | None) -> dict[str, str]:
    """The engine's variables as serve sets them (the API key left out: it comes from a Secret)."""
    environ = {profile.server.api_key_env: "x"} if profile.server.api_key_env else {}
    spec = launch_spec(profile, engine_version, ENGINE_PYTHON, environ)
    return {k: v for k, v in spec.env.items() if k != "VLLM_API_KEY"}


def _name(profile: Profile, options: OneHostOptions) -> str:
    name = options.name or dns_name(profile.name)
    if not DNS_LABEL.match(name) or len(name) > 50:
        raise BadInput(
            f"{name!r} cannot name a {options.kind}",
            "use lower-case letters, digits and '-', at most 50 characters (--name)",
        )
    return name


def _check_one_host(profile: Profile, what: str) -> None:
    if profile.nodes is not None:
        raise BadInput(
            f"profile {profile.name} has a `nodes` section: {what} is one host",
            "use `ascendctl deploy k8s` for it (a LeaderWorkerSet of its hosts), or a one-host profile",
        )


def model_and_shm(profile: Profile, model_pvc: str | None, shm_size: str | None) -> tuple[list[dict], list[dict]]:
    """The model directory read-only (a hostPath, or the claim `model_pvc`) and a memory-backed
    /dev/shm: the mounts and volumes every engine pod gets, one host or a layout's part."""
    mounts = [
        {"name": "model", "mountPath": profile.model.path, "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    if model_pvc:
        model = {"name": "model", "persistentVolumeClaim": {"claimName": model_pvc, "readOnly": True}}
    else:
        model = {"name": "model", "hostPath": {"path": profile.model.path, "type": "Directory"}}
    shm = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_size or facts()["shm_size"]}}
    return mounts, [model, shm]


def probes(profile: Profile, ports: list[int], load_s: float | None) -> dict[str, Any]:
    """A container's probes: startup and readiness on every instance's /health, liveness one
    token from each (a pod of one engine, or of a layout's instances on one host)."""
    data = facts()
    startup, live, ready = data["startup"], data["liveness"], data["readiness"]

    def health() -> dict[str, Any]:  # a new mapping each time: YAML would write a shared one as an alias
        if len(ports) == 1:
            return {"httpGet": {"path": ready["path"], "port": ports[0]}}
        return {"exec": {"command": ["python3", "-c", health_script(ports)]}, "timeoutSeconds": 10}

    return {
        "startupProbe": {
            **health(),
            "periodSeconds": startup["period_s"],
            "failureThreshold": math.ceil(startup_budget_s(load_s) / startup["period_s"]),
        },
        "readinessProbe": {
            **health(),
            "periodSeconds": ready["period_s"],
            "failureThreshold": ready["failure_threshold"],
        },
        "livenessProbe": {
            "exec": {"command": ["python3", "-c", liveness_script(profile, ports=ports)]},
            "periodSeconds": live["period_s"],
            "timeoutSeconds": live["timeout_s"] + 5,
            "failureThreshold": live["failure_threshold"],
        },
    }


def deployment_manifest(profile: Profile, options: OneHostOptions, load_s: float | None = None) -> list[dict[str, Any]]:
    """A Deployment (or StatefulSet) of one replica and a Service in front of it."""
    _check_one_host(profile, f"a {options.kind}")
    if options.kind not in KINDS:
        raise BadInput(f"unknown workload kind {options.kind!r}", f"use one of {', '.join(KINDS)}")
    check_options(_k8s_options(options))
    name = _name(profile, options)
    data = facts()
    port = profile.server.port
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "ascendctl"}
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    resources: dict[str, Any] = {}
    if profile.platform == "ascend":
        resource = npu_resource(profile, _k8s_options(options))
        count = str(npu_count(profile))
        resources = {"requests": {resource: count}, "limits": {resource: count}}
        for m in data["host_mounts"]:
            if m["name"] in ONE_HOST_MOUNTS:
                mounts.append({"name": m["name"], "mountPath": m["path"], "readOnly": True})
                volumes.append({"name": m["name"], "hostPath": {"path": m["path"], "type": m["type"]}})
    more_mounts, more_volumes = model_and_shm(profile, options.model_pvc, options.shm_size)
    mounts += more_mounts
    volumes += more_volumes
    values = engine_env(profile, options.engine_version)
    # The device plugin picks the pod's NPUs, and inside the pod they are numbered from 0.
    values.pop("ASCEND_RT_VISIBLE_DEVICES", None)
    env = container_env(values, secret_name(name), bool(profile.server.api_key_env))
    container: dict[str, Any] = {
        "name": "vllm",
        "image": options.image,
        "command": [k8s_literal(word) for word in engine_argv(profile, options.engine_version)],
        "env": env,
        "ports": [{"name": "http", "containerPort": port}],
        "volumeMounts": mounts,
        **probes(profile, [port], load_s),
    }
    if resources:
        container["resources"] = resources
    pod: dict[str, Any] = {"containers": [container], "volumes": volumes}
    if options.host_network:
        pod.update(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet")
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    if options.namespace:
        metadata["namespace"] = options.namespace
    spec: dict[str, Any] = {
        "replicas": 1,
        "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
        "template": {"metadata": {"labels": dict(labels)}, "spec": pod},
    }
    if options.kind == "Deployment":
        # The NPUs are the pod's alone: a rolling update would need a second set of them.
        spec["strategy"] = {"type": "Recreate"}
    else:
        spec["serviceName"] = name
    workload = {"apiVersion": "apps/v1", "kind": options.kind, "metadata": metadata, "spec": spec}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {**metadata, "labels": dict(labels)},
        "spec": {
            "type": "ClusterIP",
            "selector": {"app.kubernetes.io/name": name},
            "ports": [{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }
    return [workload, service]


def _k8s_options(options: OneHostOptions) -> Any:
    """The resource-name choice lws.npu_resource reads (device_plugin, npu_resource)."""
    from engine.deploy.lws import K8sOptions

    return K8sOptions(
        image=options.image,
        namespace=options.namespace,
        device_plugin=options.device_plugin,
        npu_resource=options.npu_resource,
        shm_size=options.shm_size,
    )


def _npu_ids(profile: Profile) -> list[int]:
    """The host's NPUs the engine uses: the profile's ASCEND_RT_VISIBLE_DEVICES, else the first N."""
    raw = str(profile.env.get("ASCEND_RT_VISIBLE_DEVICES") or "")
    ids = [int(x) for x in raw.replace(" ", "").split(",") if x.isdigit()]
    return ids or list(range(npu_count(profile)))


def compose_file(profile: Profile, options: OneHostOptions, load_s: float | None = None) -> dict[str, Any]:
    """A Compose file of one service, the engine, as the vllm-ascend quick start runs it."""
    _check_one_host(profile, "a Compose file")
    name = _name(profile, options)
    data = facts()
    port = profile.server.port
    loopback = profile.server.host in ("127.0.0.1", "localhost", "::1")
    env = engine_env(profile, options.engine_version)
    service: dict[str, Any] = {"image": options.image, "container_name": name}
    if profile.platform == "ascend":
        ids = _npu_ids(profile)
        # Inside the container the NPUs it is given are numbered from 0.
        env.pop("ASCEND_RT_VISIBLE_DEVICES", None)
        if options.devices == "ascend-runtime":
            service["runtime"] = "ascend"
            env["ASCEND_VISIBLE_DEVICES"] = ",".join(map(str, ids))
        elif options.devices == "mounts":
            service["devices"] = [f"/dev/davinci{i}:/dev/davinci{i}" for i in ids] + [
                f"/dev/{n}:/dev/{n}" for n in SHARED_NODES
            ]
        else:
            raise BadInput(f"unknown device mode {options.devices!r}", "use mounts or ascend-runtime (--devices)")
    # Compose interpolates `$VAR` and `${VAR}` in the file and reads `$$` as a `$`: a profile's
    # values are written literally, the secrets alone are references to the operator's environment.
    for key in list(env):
        if is_secret_name(key):
            env[key] = f"${{{key}:?set {key} in the environment or an .env file}}"
        else:
            env[key] = env[key].replace("$", "$$")
    if profile.server.api_key_env:
        env["VLLM_API_KEY"] = f"${{{profile.server.api_key_env}:?set {profile.server.api_key_env}}}"
    volumes = [f"{profile.model.path}:{profile.model.path}:ro"]
    if profile.platform == "ascend":
        volumes += [f"{m['path']}:{m['path']}:ro" for m in data["host_mounts"] if m["name"] in ONE_HOST_MOUNTS]
    if options.host_network:
        service["network_mode"] = "host"
        host = profile.server.host
    else:
        host = "0.0.0.0"  # inside the container; the published port keeps the profile's address
        service["ports"] = [f"{'127.0.0.1' if loopback else profile.server.host}:{port}:{port}"]
    service["command"] = [w.replace("$", "$$") for w in engine_argv(profile, options.engine_version, host=host)]
    service["environment"] = env
    service["volumes"] = volumes
    service["shm_size"] = (
        options.shm_size or data["compose_shm"][chip(profile) if profile.platform == "ascend" else "910"]
    )
    live = data["liveness"]
    service["healthcheck"] = {
        "test": ["CMD", "python3", "-c", liveness_script(profile)],
        "interval": f"{live['period_s']}s",
        "timeout": f"{live['timeout_s'] + 5}s",
        "retries": live["failure_threshold"],
        "start_period": f"{startup_budget_s(load_s)}s",
    }
    service["restart"] = "unless-stopped"
    service["labels"] = {LABEL_PROFILE: profile.name}
    return {"name": name, "services": {"vllm": service}}
