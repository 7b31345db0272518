"""A profile's `nodes` layout as a Kubernetes LeaderWorkerSet: one group of `nodes.count` pods,
the leader being node 0 and worker K node K, each running the commands `serve --node-rank K`
runs, with the host's variables, the NPUs, the host paths vllm-ascend's images need, a
memory-backed /dev/shm, and readiness on the leader's /health.

    manifest = lws_manifest(profile, K8sOptions(image="quay.io/ascend/vllm-ascend:v0.11.0"))
    -> [LeaderWorkerSet, Service] as plain dicts, ready for yaml.safe_dump_all

Addresses come from the pods: each pod's own IP (status.podIP, also its HCCL_IF_IP: the pods run
on the host network, as vllm-ascend's multi-node containers do with --net=host) and the leader's
from LWS_LEADER_ADDRESS, which LWS sets in every pod of a group with LWS_WORKER_INDEX.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, replace
from typing import Any

from engine.data import load_yaml
from engine.errors import BadInput
from engine.profiles.launch import launch_spec
from engine.profiles.multinode import dp_local_size, node_env, node_launch
from engine.profiles.schema import Profile
from engine.redact import is_secret_name

LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
POD_IP = "$(POD_IP)"  # Kubernetes expands $(VAR) in env values, command and args
LEADER = "$(LWS_LEADER_ADDRESS)"
# The Service in front of the leaders is named after the set: a DNS-1035 label (a letter first).
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
ENGINE_PYTHON = "python3"  # any name: the image's `vllm` and `ray` scripts are used
OWN_REFS = (POD_IP, LEADER)  # the only $(VAR) references Kubernetes may expand
# What the API server accepts (k8s.io/apimachinery validation): a namespace is a DNS-1123 label,
# an extended resource a qualified name, /dev/shm's size a quantity, replicas an int32.
NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
QUALIFIED_NAME = re.compile(
    r"^(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
QUANTITY = re.compile(r"^\+?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-/:@+]*$")
INT32_MAX = 2**31 - 1


def k8s_literal(text: str) -> str:
    """`text` as Kubernetes must pass it on: it expands `$(NAME)` in a container's command and env
    values and turns `$$` into `$`, so every `$` of a profile value is written `$$` (a served name
    `m$(HF_TOKEN)` would otherwise put the Secret on vLLM's command line); only ascendctl's own
    references to the pod's and the leader's address stay expandable."""
    out = text.replace("$", "$$")
    for ref in OWN_REFS:
        out = out.replace("$" + ref, ref)
    return out


def facts() -> dict[str, Any]:
    return load_yaml("engine.deploy", "k8s.yaml")


@dataclass(frozen=True)
class K8sOptions:
    image: str
    name: str = ""  # default: the profile's name, made a DNS label
    namespace: str | None = None
    replicas: int = 1
    device_plugin: str = "mindcluster"  # or cce: which resource name the NPUs go by
    npu_resource: str | None = None  # an explicit resource name wins
    shm_size: str | None = None
    engine_version: str | None = None  # the image's vLLM: version-gated flags follow it
    kind: str = "Deployment"  # pd / external-dp: the workload of a part that fits one pod
    proxy_image: str | None = None  # pd / external-dp: the proxy's image (default: `image`)
    model_pvc: str | None = None  # pd / external-dp: the model from this claim, not a hostPath


def chip(profile: Profile) -> str:
    kind = profile.device.kind.lower()
    return "310p" if "310p" in kind else "910"


def default_image(profile: Profile, vllm_ascend_version: str) -> str:
    """The official vllm-ascend image of the release for the profile's chip (serve's choice of
    the tag, engine.container.image; the cluster's OS is not known here: the Ubuntu image)."""
    from engine.container.image import chip_family, official_image

    return official_image(chip_family(profile), vllm_ascend_version)


def check_options(options: K8sOptions) -> None:
    """BadInput for an option the API server would refuse: the manifest is written only when
    `kubectl apply` can take it."""
    bad: list[tuple[str, str]] = []
    if options.namespace is not None and (not NAMESPACE.match(options.namespace) or len(options.namespace) > 63):
        bad.append(
            (
                f"--namespace {options.namespace!r} is not a namespace name",
                "lower-case letters, digits and '-', at most 63",
            )
        )
    if options.npu_resource is not None and (
        not QUALIFIED_NAME.match(options.npu_resource) or len(options.npu_resource) > 316
    ):
        bad.append(
            (
                f"--npu-resource {options.npu_resource!r} is not a resource name",
                "e.g. --npu-resource huawei.com/Ascend910",
            )
        )
    if options.shm_size is not None and not QUANTITY.match(options.shm_size):
        bad.append((f"--shm-size {options.shm_size!r} is not a Kubernetes quantity", "e.g. --shm-size 1Gi or 512Mi"))
    if not options.image or not IMAGE.match(options.image) or len(options.image) > 1024:
        bad.append(
            (f"--image {options.image!r} is not an image reference", "e.g. --image quay.io/ascend/vllm-ascend:v0.11.0")
        )
    if not 1 <= options.replicas <= INT32_MAX:
        bad.append((f"--replicas {options.replicas} is out of range", f"1 to {INT32_MAX}"))
    if bad:
        raise BadInput("; ".join(c for c, _ in bad), "; ".join(f for _, f in bad))


def npu_resource(profile: Profile, options: K8sOptions) -> str:
    if options.npu_resource is not None:
        return options.npu_resource
    plugins = facts()["npu_resources"]
    if options.device_plugin not in plugins:
        raise BadInput(
            f"unknown device plugin {options.device_plugin!r}",
            f"use one of {', '.join(plugins)}, or name the resource with --npu-resource",
        )
    return plugins[options.device_plugin][chip(profile)]


def dns_name(text: str) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    if not name[:1].isalpha():
        name = f"vllm-{name}"
    return name[:50].strip("-")


def lws_manifest(profile: Profile, options: K8sOptions, load_s: float | None = None) -> list[dict[str, Any]]:
    """The LeaderWorkerSet and the Service in front of its leaders. BadInput for a profile
    without `nodes` or an unusable name. `load_s`: the plan's weight-load time, which sizes the
    leader's startup probe (engine.deploy.single.startup_budget_s)."""
    if profile.nodes is None:
        raise BadInput(
            f"profile {profile.name} has no `nodes` section: a LeaderWorkerSet is one group of several hosts",
            "add a nodes section to the profile (docs/profile-keys.md), or deploy a one-host profile another way",
        )
    check_options(options)
    name = options.name or dns_name(profile.name)
    if not DNS_LABEL.match(name) or len(name) > 50:
        raise BadInput(
            f"{name!r} cannot name a LeaderWorkerSet",
            "use lower-case letters, digits and '-', at most 50 characters (--name)",
        )
    resource = npu_resource(profile, options)
    leader = _pod_spec(profile, options, resource, name, rank=0, load_s=load_s)
    worker = _pod_spec(profile, options, resource, name, rank=1)
    metadata: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/managed-by": "ascendctl"}}
    if options.namespace:
        metadata["namespace"] = options.namespace
    lws = {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": metadata,
        "spec": {
            "replicas": options.replicas,
            "leaderWorkerTemplate": {
                "size": profile.nodes.count,
                "restartPolicy": facts()["restart_policy"],
                "leaderTemplate": {"metadata": {"labels": {"role": "leader"}}, "spec": leader},
                "workerTemplate": {"metadata": {"labels": {"role": "worker"}}, "spec": worker},
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {**metadata, "name": f"{name}-leader"},
        "spec": {
            "type": "ClusterIP",
            "selector": {LWS_NAME_LABEL: name, "role": "leader"},
            "ports": [
                {"name": "http", "port": profile.server.port, "targetPort": profile.server.port, "protocol": "TCP"}
            ],
        },
    }
    return [lws, service]


def _pod_profile(profile: Profile, rank: int) -> Profile:
    """The profile as one pod sees it: addresses from the pod and LWS, the API on every interface
    (the readiness probe and the Service reach the pod's own IP)."""
    nodes = profile.nodes
    assert nodes is not None
    head = POD_IP if rank == 0 else LEADER
    addresses = (head,) + (POD_IP,) * (nodes.count - 1)
    return replace(
        profile,
        nodes=replace(nodes, addresses=addresses),
        server=replace(profile.server, host="0.0.0.0"),
    )


def _script(profile: Profile, options: K8sOptions, rank: int) -> str:
    """The shell the pod runs: the host's own variables (per worker index), then its commands."""
    nodes = profile.nodes
    assert nodes is not None
    pod = _pod_profile(profile, rank)
    environ = {profile.server.api_key_env: "from-a-secret"} if profile.server.api_key_env else {}
    launch = node_launch(pod, rank, options.engine_version, ENGINE_PYTHON, environ)
    lines = ["set -e"]
    if rank:
        lines += _per_worker_env(profile)
    steps = launch.steps
    for i, step in enumerate(steps):
        argv = _image_argv(step.argv)
        raw = {}
        if step.name == "engine" and nodes.mode == "dp" and rank:
            # Worker K starts at DP rank K * n; LWS tells the pod its K. `$$` is a literal `$`
            # for Kubernetes, so the shell sees $((...)).
            at = argv.index("--data-parallel-start-rank") + 1
            raw[at] = f"$$((LWS_WORKER_INDEX * {dp_local_size(profile)}))"
        if step.name == "ray-worker":
            argv.append("--block")  # the pod lives as long as its Ray node
        words = [raw.get(j) or k8s_literal(shlex.quote(word)) for j, word in enumerate(argv)]
        last = i == len(steps) - 1
        lines.append(("exec " if last else "") + " ".join(words))
    return "\n".join(lines) + "\n"


def _image_argv(argv: list[str]) -> list[str]:
    """The image's `vllm` script instead of `python -m vllm.entrypoints.cli.main`."""
    if argv[:2] == [ENGINE_PYTHON, "-m"] and argv[2].startswith("vllm.entrypoints"):
        return ["vllm", *argv[3:]] if argv[3:4] == ["serve"] else ["vllm", "serve", "--model", *argv[3:]]
    return list(argv)


def _per_worker_env(profile: Profile) -> list[str]:
    """Host overrides of workers 1..N-1, chosen by LWS_WORKER_INDEX in the one worker template."""
    nodes = profile.nodes
    assert nodes is not None
    cases = []
    for rank in range(1, nodes.count):
        host = nodes.host(rank)
        exports = {}
        if host.nic:
            exports.update(GLOO_SOCKET_IFNAME=host.nic, TP_SOCKET_IFNAME=host.nic, HCCL_SOCKET_IFNAME=host.nic)
        exports.update(host.env)
        if exports:
            body = " ".join(f"export {k}={k8s_literal(shlex.quote(v))};" for k, v in exports.items())
            cases.append(f"  {rank}) {body} ;;")
    return ['case "$LWS_WORKER_INDEX" in', *cases, "esac"] if cases else []


def secret_name(name: str) -> str:
    """The Secret the manifest reads secret-looking variables and the API key from."""
    return f"{name}-secrets"


def _env(profile: Profile, rank: int, name: str) -> list[dict[str, Any]]:
    """The container's variables: its IP first (the others refer to it), the layout's, then the
    profile's; secret-looking ones and the API key come from a Secret named after the set."""
    pod = _pod_profile(profile, rank)
    spec = launch_spec(pod, None, ENGINE_PYTHON, {profile.server.api_key_env or "": "x"})
    values = {**node_env(pod, rank), **{k: v for k, v in spec.env.items() if k != "VLLM_API_KEY"}}
    if rank == 0:
        values.update(profile.nodes.host(0).env if profile.nodes else {})
    pod_ip = {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    return [pod_ip, *container_env(values, secret_name(name), bool(profile.server.api_key_env))]


def container_env(values: dict[str, str], secret: str, api_key: bool) -> list[dict[str, Any]]:
    """A container's `env`: secret-looking variables (and VLLM_API_KEY when the profile serves
    with a key) from the Secret `secret`, the others written literally (k8s_literal)."""
    env: list[dict[str, Any]] = []
    for key, value in values.items():
        if is_secret_name(key):
            env.append({"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
        else:
            env.append({"name": key, "value": k8s_literal(value)})
    if api_key:
        env.append({"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": secret, "key": "VLLM_API_KEY"}}})
    return env


def _pod_spec(
    profile: Profile, options: K8sOptions, resource: str, name: str, rank: int, load_s: float | None = None
) -> dict[str, Any]:
    nodes = profile.nodes
    assert nodes is not None
    data = facts()
    devices = str(nodes.devices_per_host)
    mounts = [{"name": m["name"], "mountPath": m["path"], "readOnly": True} for m in data["host_mounts"]]
    volumes = [{"name": m["name"], "hostPath": {"path": m["path"], "type": m["type"]}} for m in data["host_mounts"]]
    mounts.append({"name": "model", "mountPath": profile.model.path, "readOnly": True})
    volumes.append({"name": "model", "hostPath": {"path": profile.model.path, "type": "Directory"}})
    mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    volumes.append(
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": options.shm_size or data["shm_size"]}}
    )
    container: dict[str, Any] = {
        "name": "vllm-leader" if rank == 0 else "vllm-worker",
        "image": options.image,
        "command": ["/bin/bash", "-c", _script(profile, options, rank)],
        "env": _env(profile, rank, name),
        "resources": {"requests": {resource: devices}, "limits": {resource: devices}},
        "volumeMounts": mounts,
    }
    serves = rank == 0
    if serves:
        probe = data["readiness"]
        container["ports"] = [{"name": "http", "containerPort": profile.server.port}]
        container["readinessProbe"] = {
            "httpGet": {"path": probe["path"], "port": profile.server.port},
            "initialDelaySeconds": probe["initial_delay_s"],
            "periodSeconds": probe["period_s"],
            "failureThreshold": probe["failure_threshold"],
        }
        # A hung group keeps /health at 200: liveness asks for one token, as on one host, and a
        # restart of the leader recreates the whole group (RecreateGroupOnPodRestart). The
        # startup probe holds it off while the weights load.
        from engine.deploy.single import liveness_script, startup_budget_s

        startup, live = data["startup"], data["liveness"]
        container["startupProbe"] = {
            "httpGet": {"path": probe["path"], "port": profile.server.port},
            "periodSeconds": startup["period_s"],
            "failureThreshold": math.ceil(startup_budget_s(load_s) / startup["period_s"]),
        }
        container["livenessProbe"] = {
            "exec": {"command": ["python3", "-c", liveness_script(profile)]},
            "periodSeconds": live["period_s"],
            "timeoutSeconds": live["timeout_s"] + 5,
            "failureThreshold": live["failure_threshold"],
        }
    return {
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "containers": [container],
        "volumes": volumes,
    }
