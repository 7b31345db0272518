"""`ascendctl deploy k8s` / `deploy compose`: a profile as Kubernetes manifests (a LeaderWorkerSet
for a multi-host layout, a Deployment or StatefulSet for one host) or as a Compose file."""

from __future__ import annotations

from typing import List, Optional

import typer

from ascendctl.profile_args import MODEL_HELP, PROFILE_HELP, SET_HELP, load
from engine.i18n import N_, _

SECRET_FIRST = N_("create the Secret {secret} with {keys} before applying it")
APPLY = N_("apply: kubectl apply -f {file}; the API is served by the Service {service}")


def _k8s(
    profile: str = typer.Option(..., "--profile", "-p", help=PROFILE_HELP),
    model: Optional[str] = typer.Option(None, "--model", help=MODEL_HELP + " The same path on every host."),
    sets: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
    image: Optional[str] = typer.Option(
        None,
        "--image",
        help="Container image (default: quay.io/ascend/vllm-ascend at the newest vllm-ascend release ascendctl "
        "knows, -a3 for A3).",
    ),
    name: Optional[str] = typer.Option(None, "--name", help="Name of the LeaderWorkerSet (default: the profile's)."),
    namespace: Optional[str] = typer.Option(None, "--namespace", help="Namespace to put it in."),
    replicas: int = typer.Option(1, "--replicas", min=1, help="Groups: each one is a whole copy of the layout."),
    device_plugin: str = typer.Option(
        "mindcluster",
        "--device-plugin",
        help="What advertises the NPUs: mindcluster (huawei.com/Ascend910) or cce (huawei.com/ascend-1980).",
    ),
    npu_resource: Optional[str] = typer.Option(
        None, "--npu-resource", help="Resource name of an NPU, when the cluster uses another one."
    ),
    shm_size: Optional[str] = typer.Option(None, "--shm-size", help="Size of /dev/shm (default 1Gi, as the docs)."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Write the manifest to FILE, not stdout."),
    kind: str = typer.Option("Deployment", "--kind", help="One-host profiles: Deployment (default) or StatefulSet."),
    host_network: bool = typer.Option(
        False,
        "--host-network",
        help="One-host profiles: run the pod on the host's network (multi-host pods always do).",
    ),
    model_pvc: Optional[str] = typer.Option(
        None,
        "--model-pvc",
        help="One-host, pd and external-dp profiles: mount the model from this PersistentVolumeClaim, not a hostPath.",
    ),
    proxy_image: Optional[str] = typer.Option(
        None,
        "--proxy-image",
        help="pd / external-dp: image of the proxy (any with python3; default: the engine's image).",
    ),
) -> None:
    """Write Kubernetes manifests for a profile: a LeaderWorkerSet for a `nodes` layout, a Deployment for one host.

    A profile with a `nodes` section gets a LeaderWorkerSet and a Service for its leaders; a
    one-host profile gets a Deployment (--kind StatefulSet for one) and a Service: the image,
    the NPUs as huawei.com/Ascend910 or Ascend310P (--device-plugin cce: CCE's names), the driver,
    dcmi, npu-smi and install-info mounts, the model directory read-only (a hostPath, or
    --model-pvc), /dev/shm in memory, a startup probe on /health sized from the plan's weight-load
    time, readiness on /health, and a liveness probe that completes one token (a hung engine
    keeps /health at 200). Host network with --host-network.

    One group of nodes.count pods: the leader is node 0 (the API, ready when /health answers),
    worker K is node K, each running what `serve --node-rank K` runs, with its variables
    (HCCL_IF_IP from the pod's IP, the leader's address from LWS_LEADER_ADDRESS, per-host
    overrides chosen by LWS_WORKER_INDEX). Pods use the host network, request the NPUs of a host,
    mount the driver, dcmi, npu-smi, /etc/ascend_install.info, /etc/hccn.conf and the model
    directory read-only, and get a memory-backed /dev/shm. Secret-looking variables and the API
    key come from a Secret named NAME-secrets.

    A `nodes.mode: pd` or `external-dp` layout gets one workload per role's part: the part one
    host runs for a role (its instances, each the command `serve --role R --node-rank K` runs),
    an LWS where a data-parallel group spans hosts, else a Deployment (--kind StatefulSet); a
    Service per pod, and the proxy (balancer) as a Deployment and Service NAME-proxy whose
    upstreams are those Services. Labelled app.kubernetes.io/component=prefill|decode|rank|proxy.

    Exit codes: 0 written; 2 a bad option, a profile no image is known for without --image, or a
    layout Kubernetes cannot place (file:line of the role's entry).
    """
    from ascendctl.output import get_output
    from engine.deploy import K8sOptions, lws_manifest

    out = get_output()
    prof = load(profile, sets, model)
    image, vllm_version = _image(prof, image)
    options = K8sOptions(
        image=image,
        name=name or "",
        namespace=namespace,
        replicas=replicas,
        device_plugin=device_plugin,
        npu_resource=npu_resource,
        shm_size=shm_size,
        engine_version=vllm_version,
        kind=kind,
        proxy_image=proxy_image,
        model_pvc=model_pvc,
    )
    if prof.nodes is not None and prof.nodes.in_parts:
        _layout_k8s(prof, model, options, output)
        return
    if prof.nodes is None:
        _one_host_k8s(
            prof,
            model,
            image,
            vllm_version,
            name,
            namespace,
            kind,
            device_plugin,
            npu_resource,
            shm_size,
            host_network,
            model_pvc,
            output,
        )
        return
    from engine.deploy.single import expected_load_s, startup_budget_s

    load_s, how = expected_load_s(prof, model)
    documents = lws_manifest(prof, options, load_s)
    _write(documents, f"# LeaderWorkerSet for profile {prof.name}, written by ascendctl deploy k8s\n", output)
    out.info(
        _("the leader's startup probe allows {seconds} s ({how})").format(seconds=startup_budget_s(load_s), how=how)
    )
    secrets = sorted(
        {
            ref["valueFrom"]["secretKeyRef"]["key"]
            for pod in ("leaderTemplate", "workerTemplate")
            for ref in documents[0]["spec"]["leaderWorkerTemplate"][pod]["spec"]["containers"][0]["env"]
            if "secretKeyRef" in ref.get("valueFrom", {})
        }
    )
    set_name = documents[0]["metadata"]["name"]
    if secrets:
        out.info(_(SECRET_FIRST).format(secret=f"{set_name}-secrets", keys=", ".join(secrets)))
    out.info(_(APPLY).format(file=output or "FILE", service=f"{set_name}-leader"))


def _layout_k8s(prof, model, options, output) -> None:
    """A pd or external-dp layout: each role's workloads and Services, and the proxy."""
    from ascendctl.output import get_output
    from engine.deploy.layouts import COMPONENT, layout_manifests
    from engine.deploy.single import expected_load_s, startup_budget_s
    from engine.profiles.parts import part_profile

    out = get_output()
    loads: dict[str, tuple] = {}

    def load_for(part):
        loads[part.role] = expected_load_s(part_profile(prof, part), model)
        return loads[part.role][0]

    documents = layout_manifests(prof, options, load_for)
    _write(documents, f"# {prof.nodes.mode} layout of profile {prof.name}, written by ascendctl deploy k8s\n", output)
    for role, (load_s, how) in loads.items():
        out.info(
            _("{role}: the startup probe allows {seconds} s ({how})").format(
                role=role, seconds=startup_budget_s(load_s), how=how
            )
        )
    secrets = sorted(
        {
            e["valueFrom"]["secretKeyRef"]["key"]
            for doc in documents
            for pod in _pod_specs(doc)
            for c in pod["containers"]
            for e in c.get("env", ())
            if "secretKeyRef" in e.get("valueFrom", {})
        }
    )
    base = options.name or documents[-1]["metadata"]["name"].rsplit("-", 1)[0]
    if secrets:
        out.info(_(SECRET_FIRST).format(secret=f"{base}-secrets", keys=", ".join(secrets)))
    kinds = ", ".join(
        f"{d['kind']} {d['metadata']['name']}" for d in documents if d["kind"] not in ("Service", "ConfigMap")
    )
    out.info(
        _("workloads: {kinds}; list a role with kubectl get pods -l {label}=ROLE").format(kinds=kinds, label=COMPONENT)
    )
    out.info(_(APPLY).format(file=output or "FILE", service=f"{base}-proxy"))


def _pod_specs(document: dict) -> list:
    spec = document.get("spec", {})
    if "leaderWorkerTemplate" in spec:
        lwt = spec["leaderWorkerTemplate"]
        return [lwt["leaderTemplate"]["spec"], lwt["workerTemplate"]["spec"]]
    return [spec["template"]["spec"]] if "template" in spec else []


def _image(prof, image: Optional[str]) -> tuple[str, Optional[str]]:
    """The image (--image, else the profile's container.image, else the official one of the
    newest vllm-ascend release ascendctl knows) and the vLLM version its flags are built for."""
    from engine.deploy import default_image
    from engine.errors import BadInput
    from engine.stacks.matrix import newest_engine

    newest = newest_engine(prof.platform)
    vllm_version = newest[0] if newest else None
    named = getattr(getattr(prof, "container", None), "image", None)
    image = image or (named if named not in (None, "", "auto") else None)
    if image is None:
        if newest is None or prof.platform != "ascend":
            raise BadInput(
                _("no engine image is known for platform {platform}").format(platform=prof.platform),
                _("give one with --image"),
            )
        image = default_image(prof, newest[1].rpartition(" ")[2])
    return image, vllm_version


def _write(documents: list, header: str, output: Optional[str], single: bool = False) -> None:
    """YAML on stdout or into --output; with --json, the documents as JSON."""
    import json

    from ascendctl.output import get_output
    from engine.errors import BadInput

    out = get_output()
    body = (lambda: _yaml([documents[0]])) if single else (lambda: _yaml(documents))
    data = documents[0] if single else documents
    if output:
        text = json.dumps(data, indent=2) + "\n" if out.json_mode else header + body()
        try:
            with open(output, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            raise BadInput(
                _("cannot write {path}: {error}").format(path=output, error=exc.strerror or exc),
                _("choose another --output path"),
            ) from exc
        out.info(_("wrote {path}").format(path=output))
    else:
        out.emit(
            {"document": data} if single else {"documents": data},
            lambda console: console.file.write(header + body()),
        )


def _one_host_k8s(
    prof,
    model,
    image,
    vllm_version,
    name,
    namespace,
    kind,
    device_plugin,
    npu_resource,
    shm_size,
    host_network,
    model_pvc,
    output,
) -> None:
    from ascendctl.output import get_output
    from engine.deploy.single import OneHostOptions, deployment_manifest, expected_load_s, startup_budget_s

    out = get_output()
    load_s, how = expected_load_s(prof, model)
    options = OneHostOptions(
        image=image,
        name=name or "",
        namespace=namespace,
        kind=kind,
        device_plugin=device_plugin,
        npu_resource=npu_resource,
        shm_size=shm_size,
        host_network=host_network,
        model_pvc=model_pvc,
        engine_version=vllm_version,
    )
    documents = deployment_manifest(prof, options, load_s)
    _write(documents, f"# {kind} for profile {prof.name}, written by ascendctl deploy k8s\n", output)
    workload = documents[0]["metadata"]["name"]
    out.info(_("startup probe allows {seconds} s ({how})").format(seconds=startup_budget_s(load_s), how=how))
    secrets = sorted(
        e["valueFrom"]["secretKeyRef"]["key"]
        for e in documents[0]["spec"]["template"]["spec"]["containers"][0]["env"]
        if "secretKeyRef" in e.get("valueFrom", {})
    )
    if secrets:
        out.info(_(SECRET_FIRST).format(secret=f"{workload}-secrets", keys=", ".join(secrets)))
    out.info(_(APPLY).format(file=output or "FILE", service=workload))


def _compose(
    profile: str = typer.Option(..., "--profile", "-p", help=PROFILE_HELP),
    model: Optional[str] = typer.Option(None, "--model", help=MODEL_HELP),
    sets: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
    image: Optional[str] = typer.Option(
        None,
        "--image",
        help="Container image (default: the profile's container.image, else quay.io/ascend/vllm-ascend at the newest "
        "vllm-ascend release ascendctl knows, with the chip's suffix).",
    ),
    name: Optional[str] = typer.Option(
        None, "--name", help="Name of the project and container (default: the profile's)."
    ),
    devices: str = typer.Option(
        "mounts",
        "--devices",
        help="How the NPUs reach the container: mounts (the quick start's --device lines) or ascend-runtime (Ascend "
        "Docker Runtime: runtime ascend and ASCEND_VISIBLE_DEVICES).",
    ),
    shm_size: Optional[str] = typer.Option(None, "--shm-size", help="Size of /dev/shm (default 1g; 10g on 300I Duo)."),
    host_network: bool = typer.Option(
        False, "--host-network", help="Use the host's network instead of a published port."
    ),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Write the Compose file to FILE, not stdout."),
) -> None:
    """Write a Compose file that serves a one-host profile in the official image.

    One service: the engine's command as `serve` builds it, the NPUs of the profile as the quick
    start's --device lines (or Ascend Docker Runtime with --devices ascend-runtime), the driver,
    dcmi, npu-smi and install-info mounts and the model directory read-only, /dev/shm sized as the
    docs do, the port published on the profile's address (127.0.0.1 by default), a health check
    that completes one token (start period from the plan's weight-load time). Secret-looking
    variables and the API key are read from the environment or an .env file when Compose starts.

    Exit codes: 0 written; 2 a multi-host profile, or a bad option.
    """
    from ascendctl.output import get_output
    from engine.deploy.single import OneHostOptions, compose_file, expected_load_s

    out = get_output()
    prof = load(profile, sets, model)
    image, vllm_version = _image(prof, image)
    load_s, how = expected_load_s(prof, model)
    document = compose_file(
        prof,
        OneHostOptions(
            image=image,
            name=name or "",
            shm_size=shm_size,
            host_network=host_network,
            engine_version=vllm_version,
            devices=devices,
        ),
        load_s,
    )
    _write([document], f"# Compose file for profile {prof.name}, written by ascendctl deploy compose\n", output, True)
    out.info(_("health check start period from {how}").format(how=how))
    out.info(_("start: docker compose -f {file} up -d (podman compose works too)").format(file=output or "FILE"))


def _yaml(documents: list) -> str:
    """YAML documents; a script of several lines as a literal block, readable as written."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return yaml.dump_all(documents, Dumper=Dumper, sort_keys=False, width=100)


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        help="Deployment files from a profile: `deploy k8s` (a LeaderWorkerSet, or a Deployment for one host), "
        "`deploy compose`.",
        no_args_is_help=True,
    )
    group.command("k8s")(_k8s)
    group.command("compose")(_compose)
    app.add_typer(group, name="deploy")
