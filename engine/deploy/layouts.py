"""A `pd` or `external-dp` layout as Kubernetes manifests: one workload per role's part, a
Service in front of each pod, and the proxy (or balancer) as a Deployment and a Service.

    layout_manifests(profile, K8sOptions(image=...), load_for) -> [documents]

The parts are serve's own (engine.profiles.parts.layout_parts): each pod runs what one host runs
for one role, every instance its `vllm serve` with the same flags and the same
--kv-transfer-config, as vllm-ascend's launch_online_dp.py runs them on a host. Only the
addresses change: a host's own address becomes the pod's IP ($(POD_IP), also HCCL_IF_IP; engine
pods use the host network as Mooncake and HCCL need), a data-parallel group's master address
the LWS leader's ($(LWS_LEADER_ADDRESS)), and an address in the proxy's upstream lists the DNS
name of the Service in front of that pod. NPU ids are the pod's own, numbered from 0.

- A data-parallel group over several hosts (expert parallel) is one LeaderWorkerSet: the leader
  is the group's master host, worker K the K-th other host (they share one template, so their
  parts must be alike); its data-parallel ranks follow LWS_WORKER_INDEX.
- Any other part is one pod: a Deployment (or StatefulSet) of one replica.

Every object carries `app.kubernetes.io/component: prefill | decode | rank | proxy`, so that
`kubectl get pods -l app.kubernetes.io/component=decode` lists a role.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from typing import Any, Callable

from engine.deploy.lws import (
    DNS_LABEL,
    ENGINE_PYTHON,
    LEADER,
    LWS_API,
    LWS_NAME_LABEL,
    POD_IP,
    K8sOptions,
    _image_argv,
    check_options,
    container_env,
    dns_name,
    facts,
    k8s_literal,
    npu_resource,
    secret_name,
)
from engine.deploy.single import model_and_shm, probes
from engine.errors import BadInput
from engine.profiles.parts import PROXY, PROXY_MODULE, Part, layout_parts
from engine.profiles.schema import Profile

WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
COMPONENT = "app.kubernetes.io/component"
PART_OF = "app.kubernetes.io/part-of"
INSTANCE = "app.kubernetes.io/instance"
PROXY_PYTHON = "python3"
# The proxy's one file, from a ConfigMap: the engine image has python3 but not ascendctl.
PROXY_DIR = "/opt/ascendctl"
VISIBLE = "ASCEND_RT_VISIBLE_DEVICES"
DP_RANK = "--data-parallel-rank"
DP_ADDRESS = "--data-parallel-address"
UPSTREAM_LISTS = {"--prefiller-hosts": "prefill", "--decoder-hosts": "decode", "--backends": "rank"}


def _token(host: int) -> str:
    """A stand-in for host `host`'s address, replaced per pod (it cannot be a real address)."""
    return f"@host{host}@"


@dataclass
class Pod:
    """What one pod runs: the parts of one role on one host (serve's parts, addresses as tokens)."""

    role: str
    host: int
    group: int
    parts: list[Part]
    index: int | None = None  # a pod of one independent instance: its index on the host

    @property
    def key(self) -> str:
        return f"{self.role}-{self.host}" + ("" if self.index is None else f"-{self.index}")

    @property
    def ports(self) -> list[int]:
        return [p.spec.port for p in self.parts]

    @property
    def devices(self) -> int:
        return sum(len(p.devices) for p in self.parts)


def layout_manifests(
    profile: Profile, options: K8sOptions, load_for: Callable[[Part], float | None] | None = None
) -> list[dict[str, Any]]:
    """Every workload and Service of a pd or external-dp layout, the proxy's last. BadInput (with
    the profile's file:line where a role's entry is at fault) for a layout Kubernetes cannot place."""
    nodes = profile.nodes
    assert nodes is not None and nodes.in_parts
    check_options(options)
    if options.replicas != 1:
        raise BadInput(
            f"--replicas {options.replicas}: a nodes.mode {nodes.mode} layout is one copy behind its proxy",
            "scale it in the profile (more nodes.roles entries, or nodes.count) and write the manifests again",
        )
    if options.kind not in ("Deployment", "StatefulSet"):
        raise BadInput(f"unknown workload kind {options.kind!r}", "use one of Deployment, StatefulSet")
    base = options.name or dns_name(profile.name)
    tokened = replace(
        profile,
        nodes=replace(nodes, addresses=tuple(_token(h) for h in range(nodes.count))),
        server=replace(profile.server, host="0.0.0.0"),
    )
    parts = layout_parts(tokened, options.engine_version, ENGINE_PYTHON, PROXY_PYTHON, _environ(profile))
    proxy = parts[-1]
    assert proxy.role == PROXY
    workloads = _workloads(profile, parts[:-1])
    names = {}
    for pods in workloads:
        for pod in pods:
            names[pod.key] = _check_name(f"{base}-{pod.key}")
    _check_name(f"{base}-{PROXY}")
    resource = npu_resource(profile, options) if profile.platform == "ascend" else None
    documents: list[dict[str, Any]] = []
    services: list[dict[str, Any]] = []
    for pods in workloads:
        name = names[pods[0].key]
        load_s = load_for(pods[0].parts[0]) if load_for else None
        if len(pods) == 1:
            documents.append(_one_pod(profile, options, base, name, pods[0], resource, load_s))
            selector = {INSTANCE: name}
            services.append(_service(options, base, name, pods[0], selector))
        else:
            # Not the leader's Service name: LWS makes a headless Service of its own name.
            name = _check_name(f"{base}-{pods[0].role}-dp{pods[0].group}", 50)
            documents.append(_lws(profile, options, base, name, pods, resource, load_s))
            for k, pod in enumerate(pods):
                selector = {LWS_NAME_LABEL: name, WORKER_INDEX_LABEL: str(k)}
                services.append(_service(options, base, names[pod.key], pod, selector))
    pod_of = {id(p): names[pod.key] for pods in workloads for pod in pods for p in pod.parts}
    documents += services
    documents += _proxy(profile, options, base, proxy, [p for p in parts[:-1]], pod_of)
    return documents


def _environ(profile: Profile) -> dict[str, str]:
    return {profile.server.api_key_env: "from-a-secret"} if profile.server.api_key_env else {}


def _check_name(name: str, longest: int = 63) -> str:
    """`name` if it can name the object (an LWS: 50, its pods add `-GROUP-WORKER`)."""
    if not DNS_LABEL.match(name) or len(name) > longest:
        raise BadInput(
            f"{name!r} cannot name a Kubernetes object",
            "give a shorter --name: lower-case letters, digits and '-', the role and host are added to it",
        )
    return name


def _workloads(profile: Profile, parts: list[Part]) -> list[list[Pod]]:
    """The pods, grouped into workloads: the instances of a data-parallel group (expert
    parallel) one pod per host, the pods of a group over several hosts together (its master
    first); an independent instance (a rank, a dense model's instance) is a pod of its own."""
    pods: dict[tuple[str, int, int], Pod] = {}
    alone: list[list[Pod]] = []
    for part in parts:
        if DP_ADDRESS in part.spec.argv:
            key = (part.role, part.host, part.group)
            pods.setdefault(key, Pod(part.role, part.host, part.group, [])).parts.append(part)
        else:
            alone.append([Pod(part.role, part.host, part.group, [part], index=part.index)])
    coupled: dict[tuple[str, int], list[Pod]] = {}
    for pod in pods.values():
        coupled.setdefault((pod.role, pod.group), []).append(pod)
    out: list[list[Pod]] = []
    for group in coupled.values():
        group.sort(key=lambda pod: pod.parts[0].rank or 0)  # rank 0 is on the group's master host
        if len(group) > 1:
            _check_alike(profile, group)
        out.append(group)
    out += alone
    order = {"prefill": 0, "decode": 1, "rank": 2}
    out.sort(key=lambda pods: (order.get(pods[0].role, 3), pods[0].host, pods[0].index or 0))
    return out


def _role_line(profile: Profile, pod: Pod) -> tuple[str, int | None, str]:
    """Where the entry of nodes.roles (or nodes.count, in external-dp) that makes `pod` is."""
    from engine import yamlfile

    nodes = profile.nodes
    assert nodes is not None
    key = "nodes.count"
    index = None
    if nodes.mode == "pd":
        index = next(
            i for i, r in enumerate(nodes.roles) if (r.role, r.host, r.dp_group) == (pod.role, pod.host, pod.group)
        )
        key = f"nodes.roles[{index}]"
    source = profile.source or "<profile>"
    try:
        with open(source, encoding="utf-8") as handle:
            data = yamlfile.load(handle.read(), source)
    except (OSError, yamlfile.YamlInvalid):  # a profile built from text: no file to point at
        return source, None, key
    section = data.get("nodes") if isinstance(data, dict) else None
    line = yamlfile.line_of(section, key.split(".")[1] if index is None else "roles") if section else None
    if index is not None and isinstance(section, dict):
        line = yamlfile.line_of(section.get("roles"), index) or line
    return source, line, key


def _check_alike(profile: Profile, pods: list[Pod]) -> None:
    """An LWS gives its workers one pod template: the worker hosts of a group must run alike."""
    first = pods[1]
    lead, each = len(pods[0].parts), len(first.parts)
    for k, pod in enumerate(pods[1:], start=1):
        why = None
        if [p.rank for p in pod.parts] != [lead + (k - 1) * each + i for i in range(len(pod.parts))]:
            why = "holds data-parallel ranks out of the order of its worker index"
        elif len(pod.parts) != len(first.parts) or pod.devices != first.devices:
            why = (
                f"runs {len(pod.parts)} instance(s) on {pod.devices} NPU(s) where host {first.host} runs "
                f"{len(first.parts)} on {first.devices}"
            )
        elif pod.ports != first.ports:
            why = f"serves on ports {pod.ports}, host {first.host} on {first.ports}"
        elif [_neutral(p, pod.host) for p in pod.parts] != [_neutral(p, first.host) for p in first.parts]:
            why = f"runs other flags or secret-looking variables than host {first.host}"
        if why:
            from engine.profiles.loader import ProfileInvalid
            from engine.yamlfile import Problem

            source, line, key = _role_line(profile, pod)
            raise ProfileInvalid(
                source,
                [
                    Problem(
                        source,
                        line,
                        key,
                        f"cannot be placed by deploy k8s: the {pod.role} group (dp_group {pod.group}) spans hosts as "
                        f"one LeaderWorkerSet, whose workers share one pod template, and host {pod.host} {why} "
                        "(give each worker host of the group the same devices, TP, port, engine and env, or its "
                        "own dp_group)",
                    )
                ],
            )


def _neutral(part: Part, host: int) -> tuple[list[str], dict[str, str]]:
    """A part's command and secret-looking variables without what differs from worker to worker
    by design (the others may differ: the worker template exports each host's own)."""
    from engine.redact import is_secret_name

    argv = list(part.spec.argv)
    if DP_RANK in argv:
        argv[argv.index(DP_RANK) + 1] = "R"
    env = {k: v for k, v in part.spec.env.items() if is_secret_name(k)}
    own = _token(host)
    return [w.replace(own, "@own@") for w in argv], {k: v.replace(own, "@own@") for k, v in env.items()}


def _in_pod(text: str, host: int, leader: int | None) -> str:
    """A token-bearing word as the pod sees it: its own host's address is its IP, the group
    master's (on an LWS worker) the leader's address."""
    text = text.replace(_token(host), POD_IP)
    if leader is not None and leader != host:
        text = text.replace(_token(leader), LEADER)
    return text


def _script(pod: Pod, leader: int | None, ranks: tuple[int, int] | None) -> tuple[str, dict[str, str]]:
    """The shell the pod runs and the variables common to its instances. Each instance starts in
    the background with its own NPUs, numbered from 0 in the pod; the first to stop stops the
    pod (Kubernetes restarts it). One instance is exec'd. `ranks` on an LWS worker: the leader's
    instances and each worker's, which place worker K's data-parallel ranks."""
    lines = ["set -e"]
    starts: list[str] = []
    per = len(pod.parts[0].devices)
    env: dict[str, str] = {}
    for i, part in enumerate(pod.parts):
        argv = [_in_pod(w, pod.host, leader) for w in _image_argv(part.spec.argv)]
        raw: dict[int, str] = {}
        if ranks and DP_RANK in argv:
            # Worker K (1...) follows the leader's L ranks and K-1 workers of W: LWS tells the
            # pod its K; `$$` is Kubernetes' escape of a literal `$`.
            lead, each = ranks
            offset = lead - each + i
            raw[argv.index(DP_RANK) + 1] = f"$$((LWS_WORKER_INDEX * {each}{f' + {offset}' if offset else ''}))"
        words = [raw.get(j) or k8s_literal(shlex.quote(w)) for j, w in enumerate(argv)]
        env = {k: _in_pod(v, pod.host, leader) for k, v in part.spec.env.items() if k != VISIBLE}
        ids = ",".join(str(d) for d in range(i * per, (i + 1) * per))
        visible = bool(part.devices) and VISIBLE in part.spec.env
        if len(pod.parts) == 1:
            if visible:
                env[VISIBLE] = ids
            starts.append(" ".join(words))
        else:
            starts.append((f"{VISIBLE}={ids} " if visible else "") + " ".join(words))
    if len(starts) == 1:
        lines.append("exec " + starts[0])
    else:
        lines += [line + " &" for line in starts]
        lines += [
            "trap 'kill -TERM $$(jobs -p) 2>/dev/null' TERM INT",
            "code=0",
            "wait -n || code=$$?",
            "kill -TERM $$(jobs -p) 2>/dev/null || true",
            "wait || true",
            'echo "an instance of this pod stopped (exit $$code): stopping the others" >&2',
            "exit $$((code ? code : 1))",
        ]
    return "\n".join(lines) + "\n", env


def _per_worker(workers: list[Pod], leader: int | None) -> tuple[dict[str, str], list[str]]:
    """The variables of an LWS's one worker template: those every worker host has alike, and a
    `case` on LWS_WORKER_INDEX exporting each worker's own (a host's nic or env override)."""
    envs = [_script(pod, leader, None)[1] for pod in workers]
    common = {k: v for k, v in envs[0].items() if all(env.get(k) == v for env in envs)}
    cases = []
    for k, env in enumerate(envs, start=1):
        own = {key: v for key, v in env.items() if key not in common}
        if own:
            body = " ".join(f"export {key}={k8s_literal(shlex.quote(v))};" for key, v in own.items())
            cases.append(f"  {k}) {body} ;;")
    return common, (['case "$$LWS_WORKER_INDEX" in', *cases, "esac"] if cases else [])


def _volumes(profile: Profile, options: K8sOptions) -> tuple[list[dict], list[dict]]:
    data = facts()
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    if profile.platform == "ascend":
        mounts = [{"name": m["name"], "mountPath": m["path"], "readOnly": True} for m in data["host_mounts"]]
        volumes = [{"name": m["name"], "hostPath": {"path": m["path"], "type": m["type"]}} for m in data["host_mounts"]]
    more_mounts, more_volumes = model_and_shm(profile, options.model_pvc, options.shm_size)
    return mounts + more_mounts, volumes + more_volumes


def _labels(base: str, role: str, name: str | None = None) -> dict[str, str]:
    labels = {PART_OF: base, COMPONENT: role, "app.kubernetes.io/managed-by": "ascendctl"}
    if name:
        labels[INSTANCE] = name
    return labels


def _metadata(options: K8sOptions, name: str, labels: dict[str, str]) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": dict(labels)}
    if options.namespace:
        metadata["namespace"] = options.namespace
    return metadata


def _pod_spec(
    profile: Profile,
    options: K8sOptions,
    base: str,
    pod: Pod,
    resource: str | None,
    load_s: float | None,
    leader: int | None,
    ranks: tuple[int, int] | None = None,
    workers: list[Pod] | None = None,
) -> dict[str, Any]:
    script, values = _script(pod, leader, ranks)
    if workers:
        values, case = _per_worker(workers, leader)
        if case:
            script = script.replace("set -e\n", "set -e\n" + "\n".join(case) + "\n", 1)
    mounts, volumes = _volumes(profile, options)
    env = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        *container_env(values, secret_name(base), bool(profile.server.api_key_env)),
    ]
    container: dict[str, Any] = {
        "name": f"vllm-{pod.role}",
        "image": options.image,
        "command": ["/bin/bash", "-c", script],
        "env": env,
        "ports": [{"name": f"http-{port}", "containerPort": port} for port in pod.ports],
        "volumeMounts": mounts,
        **probes(profile, pod.ports, load_s),
    }
    if resource:
        count = str(pod.devices)
        container["resources"] = {"requests": {resource: count}, "limits": {resource: count}}
    return {
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "containers": [container],
        "volumes": volumes,
    }


def _one_pod(
    profile: Profile, options: K8sOptions, base: str, name: str, pod: Pod, resource: str | None, load_s: float | None
) -> dict[str, Any]:
    labels = _labels(base, pod.role, name)
    spec: dict[str, Any] = {
        "replicas": 1,
        "selector": {"matchLabels": {INSTANCE: name}},
        "template": {
            "metadata": {"labels": dict(labels)},
            "spec": _pod_spec(profile, options, base, pod, resource, load_s, pod.host),
        },
    }
    if options.kind == "Deployment":
        spec["strategy"] = {"type": "Recreate"}  # the NPUs are the pod's alone
    else:
        spec["serviceName"] = name
    return {"apiVersion": "apps/v1", "kind": options.kind, "metadata": _metadata(options, name, labels), "spec": spec}


def _lws(
    profile: Profile,
    options: K8sOptions,
    base: str,
    name: str,
    pods: list[Pod],
    resource: str | None,
    load_s: float | None,
) -> dict[str, Any]:
    labels = _labels(base, pods[0].role)
    leader = pods[0].host
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": _metadata(options, name, labels),
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": len(pods),
                "restartPolicy": facts()["restart_policy"],
                "leaderTemplate": {
                    "metadata": {"labels": {**labels, "role": "leader"}},
                    "spec": _pod_spec(profile, options, base, pods[0], resource, load_s, leader),
                },
                "workerTemplate": {
                    "metadata": {"labels": {**labels, "role": "worker"}},
                    "spec": _pod_spec(
                        profile,
                        options,
                        base,
                        pods[1],
                        resource,
                        load_s,
                        leader,
                        (len(pods[0].parts), len(pods[1].parts)),
                        pods[1:],
                    ),
                },
            },
        },
    }


def _service(options: K8sOptions, base: str, name: str, pod: Pod, selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(options, name, _labels(base, pod.role, name)),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": f"http-{p}", "port": p, "targetPort": p, "protocol": "TCP"} for p in pod.ports],
        },
    }


def proxy_argv(proxy: Part, engines: list[Part], service_of: Callable[[Part], str]) -> list[str]:
    """The proxy's command line with each upstream's address the DNS name of its pod's Service;
    the i-th word of a role's list is the i-th part of that role (layout_parts' order)."""
    argv = list(proxy.spec.argv)
    for flag, role in UPSTREAM_LISTS.items():
        if flag not in argv:
            continue
        mine = [p for p in engines if p.role == role]
        at = argv.index(flag) + 1
        for i, part in enumerate(mine):
            word = argv[at + i]
            argv[at + i] = service_of(part) + (word[word.rindex(":") :] if flag == "--backends" else "")
    return argv


def _proxy(
    profile: Profile, options: K8sOptions, base: str, proxy: Part, engines: list[Part], pod_of: dict[int, str]
) -> list[dict[str, Any]]:
    name = f"{base}-{PROXY}"
    labels = _labels(base, PROXY, name)
    argv = proxy_argv(proxy, engines, lambda part: pod_of[id(part)])
    port = profile.server.port
    data = facts()
    live, ready = data["liveness"], data["readiness"]
    source = _proxy_source()
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(options, name, labels),
        # A package of its own (an empty __init__.py): first on PYTHONPATH, it wins over any
        # other `engine` the image may hold, which a namespace package would not.
        "data": {"__init__.py": "", "pdproxy.py": source},
    }
    env = [
        {"name": "PYTHONPATH", "value": PROXY_DIR},
        *container_env(dict(proxy.spec.env), secret_name(base), False),
    ]
    container: dict[str, Any] = {
        "name": PROXY,
        "image": options.proxy_image or options.image,
        "command": [k8s_literal(w) for w in argv],
        "env": env,
        "ports": [{"name": "http", "containerPort": port}],
        "volumeMounts": [{"name": "proxy", "mountPath": f"{PROXY_DIR}/engine", "readOnly": True}],
        # Ready once every instance behind it is (its /health asks theirs); alive while it
        # answers itself (/metrics): an engine that hangs is restarted by its own liveness probe,
        # and restarting the proxy would not help it.
        "readinessProbe": {
            "httpGet": {"path": ready["path"], "port": port},
            "periodSeconds": ready["period_s"],
            "failureThreshold": ready["failure_threshold"],
            "timeoutSeconds": 10,
        },
        "livenessProbe": {
            "httpGet": {"path": "/metrics", "port": port},
            "periodSeconds": live["period_s"],
            "timeoutSeconds": 10,
            "failureThreshold": live["failure_threshold"],
        },
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(options, name, labels),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {INSTANCE: name}},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "containers": [container],
                    "volumes": [{"name": "proxy", "configMap": {"name": name}}],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(options, name, labels),
        "spec": {
            "type": "ClusterIP",
            "selector": {INSTANCE: name},
            "ports": [{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }
    return [config, deployment, service]


def _proxy_source() -> str:
    from importlib import resources

    return resources.files("engine").joinpath(PROXY_MODULE.split(".")[-1] + ".py").read_text(encoding="utf-8")
