"""`ascendctl deploy k8s`: a profile's multi-host layout as a Kubernetes LeaderWorkerSet."""

from __future__ import annotations

from typing import List, Optional

import typer

from ascendctl.profile_args import MODEL_HELP, PROFILE_HELP, SET_HELP, load


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
) -> None:
    """Write a LeaderWorkerSet manifest for a profile with a `nodes` section, and a Service for its leaders.

    One group of nodes.count pods: the leader is node 0 (the API, ready when /health answers),
    worker K is node K, each running what `serve --node-rank K` runs, with its variables
    (HCCL_IF_IP from the pod's IP, the leader's address from LWS_LEADER_ADDRESS, per-host
    overrides chosen by LWS_WORKER_INDEX). Pods use the host network, request the NPUs of a host,
    mount the driver, dcmi, npu-smi, /etc/ascend_install.info, /etc/hccn.conf and the model
    directory read-only, and get a memory-backed /dev/shm. Secret-looking variables and the API
    key come from a Secret named NAME-secrets.

    Exit codes: 0 written; 2 the profile has no `nodes` section, or a bad option.
    """
    import json

    from ascendctl.output import get_output
    from engine.deploy import K8sOptions, default_image, lws_manifest
    from engine.errors import BadInput
    from engine.stacks.matrix import newest_engine

    out = get_output()
    prof = load(profile, sets, model)
    newest = newest_engine(prof.platform)
    vllm_version = newest[0] if newest else None
    if image is None:
        if newest is None:
            raise BadInput(f"no engine image is known for platform {prof.platform}", "give one with --image")
        image = default_image(prof, newest[1].rpartition(" ")[2])
    documents = lws_manifest(
        prof,
        K8sOptions(
            image=image,
            name=name or "",
            namespace=namespace,
            replicas=replicas,
            device_plugin=device_plugin,
            npu_resource=npu_resource,
            shm_size=shm_size,
            engine_version=vllm_version,
        ),
    )
    header = f"# LeaderWorkerSet for profile {prof.name}, written by ascendctl deploy k8s\n"
    if output:
        text = json.dumps(documents, indent=2) + "\n" if out.json_mode else header + _yaml(documents)
        try:
            with open(output, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            raise BadInput(f"cannot write {output}: {exc.strerror or exc}", "choose another --output path") from exc
        out.info(f"wrote {output}")
    else:
        out.emit({"documents": documents}, lambda console: console.file.write(header + _yaml(documents)))
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
        out.info(f"create the Secret {set_name}-secrets with {', '.join(secrets)} before applying it")
    out.info(f"apply: kubectl apply -f {output or 'FILE'}; the API is served by the Service {set_name}-leader")


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
        help="Deployment manifests from a profile: `deploy k8s` writes a LeaderWorkerSet for a multi-host layout.",
        no_args_is_help=True,
    )
    group.command("k8s")(_k8s)
    app.add_typer(group, name="deploy")
