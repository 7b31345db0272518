"""`ascendctl deploy k8s`: the LeaderWorkerSet of a `nodes` layout, checked offline against the
LWS CRD's own schema (tests/fixtures/k8s/, with its source) and, for the pod templates and the
Service, against Kubernetes' core/v1 schemas (kubernetes-validate, strict: unknown fields fail).
The leader's command is checked against vllm-ascend's tutorial, as serve --node-rank's is."""

from __future__ import annotations

import json
import shlex

import jsonschema
import kubernetes_validate
import pytest
import yaml
from helpers import FIXTURES, ROOT
from test_multinode import DP_PROFILE, NIC, NODE0, RAY_PROFILE, serve_options, tutorial

from ascendctl.cli import main
from engine.deploy import K8sOptions, default_image, lws_manifest
from engine.errors import BadInput
from engine.profiles import load_profile, load_profile_text

K8S_VERSION = "1.30.0"
IMAGE = "quay.io/ascend/vllm-ascend:v0.11.0"
LWS_SCHEMA = json.loads((FIXTURES / "k8s" / "lws-v1-openapi.json").read_text(encoding="utf-8"))


def manifest(path=DP_PROFILE, sets=(), **options):
    return lws_manifest(load_profile(str(path), list(sets)), K8sOptions(image=IMAGE, **options))


def templates(lws: dict) -> tuple[dict, dict]:
    spec = lws["spec"]["leaderWorkerTemplate"]
    return spec["leaderTemplate"], spec["workerTemplate"]


def container(template: dict) -> dict:
    (only,) = template["spec"]["containers"]
    return only


def script(template: dict) -> list[str]:
    command = container(template)["command"]
    assert command[:2] == ["/bin/bash", "-c"]
    return command[2].strip().splitlines()


def env(template: dict) -> dict[str, object]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(template)["env"]}


def check_schemas(documents: list[dict]) -> None:
    lws, service = documents
    assert LWS_SCHEMA["version"] == "v1" and lws["apiVersion"] == f"{LWS_SCHEMA['group']}/v1"
    assert lws["kind"] == LWS_SCHEMA["kind"]
    jsonschema.Draft7Validator(LWS_SCHEMA["openAPIV3Schema"]).validate(lws)
    for template in templates(lws):
        pod_template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template}
        kubernetes_validate.validate(pod_template, K8S_VERSION, strict=True)
    kubernetes_validate.validate(service, K8S_VERSION, strict=True)


@pytest.mark.parametrize("path", [DP_PROFILE, RAY_PROFILE])
def test_manifests_pass_the_lws_and_kubernetes_schemas(path):
    check_schemas(manifest(path))


def test_the_schemas_catch_a_mistake():
    # Guards the check itself: a validator that accepted anything would pass every manifest.
    lws, service = manifest()
    lws["spec"]["leaderWorkerTemplate"]["size"] = "two"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(LWS_SCHEMA["openAPIV3Schema"]).validate(lws)
    lws, service = manifest()
    container(templates(lws)[0])["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        check_schemas([lws, service])


def test_one_group_of_the_layouts_hosts_with_the_npus_mounts_and_shm():
    lws, service = manifest()
    spec = lws["spec"]["leaderWorkerTemplate"]
    assert spec["size"] == 2 and spec["restartPolicy"] == "RecreateGroupOnPodRestart"
    for template in templates(lws):
        pod = template["spec"]
        assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
        c = container(template)
        assert c["resources"]["requests"] == c["resources"]["limits"] == {"huawei.com/Ascend910": "8"}
        volumes = {v["name"]: v for v in pod["volumes"]}
        paths = {v["hostPath"]["path"] for v in volumes.values() if "hostPath" in v}
        assert {
            "/usr/local/Ascend/driver",
            "/usr/local/dcmi",
            "/usr/local/bin/npu-smi",
            "/etc/ascend_install.info",
            "/etc/hccn.conf",
            "/weights/DeepSeek-V3.1-w8a8-mtp-QuaRot",
        } <= paths
        assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Gi"}
        mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
        assert mounts["/dev/shm"]["name"] == "dshm" and mounts["/usr/local/Ascend/driver"]["readOnly"] is True
    leader, worker = templates(lws)
    probe = container(leader)["readinessProbe"]["httpGet"]
    assert probe == {"path": "/health", "port": 8004}
    assert "readinessProbe" not in container(worker)  # headless: no API server
    # A hung group keeps /health at 200: the leader's liveness asks for one token (a restart of
    # the leader recreates the group), held off by a startup probe while the weights load.
    live = container(leader)["livenessProbe"]
    assert live["exec"]["command"][:2] == ["python3", "-c"]
    assert "http://127.0.0.1:8004/v1/completions" in live["exec"]["command"][2]
    assert "'max_tokens': 1" in live["exec"]["command"][2]
    assert container(leader)["startupProbe"]["httpGet"] == {"path": "/health", "port": 8004}
    assert "livenessProbe" not in container(worker) and "startupProbe" not in container(worker)
    assert lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert service["spec"]["selector"] == {
        "leaderworkerset.sigs.k8s.io/name": lws["metadata"]["name"],
        "role": "leader",
    }
    assert service["spec"]["ports"][0]["port"] == 8004


def test_the_leader_runs_the_tutorials_node_0_command():
    leader, worker = templates(manifest()[0])
    *_, last = script(leader)
    assert last.startswith("exec vllm serve ")
    words = shlex.split(last[len("exec ") :])
    _, theirs = tutorial("deepseek-v3.1-dp-node0.sh", {"local_ip": NODE0, "nic_name": NIC, "node0_ip": NODE0})
    model, ours = serve_options(words)
    their_model, their_flags = serve_options(theirs[0])
    # The pod's own IP, which Kubernetes puts in for $(POD_IP), instead of a fixed address.
    assert ours.pop("--data-parallel-address") == "$(POD_IP)"
    their_flags.pop("--data-parallel-address")
    assert (model, ours) == (their_model, their_flags)


def test_pods_take_their_addresses_from_kubernetes_and_lws():
    leader, worker = templates(manifest()[0])
    for template in (leader, worker):
        names = [e["name"] for e in container(template)["env"]]
        assert names[0] == "POD_IP"  # first: the variables after it refer to it
        assert env(template)["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert env(template)["HCCL_IF_IP"] == "$(POD_IP)" and env(template)["GLOO_SOCKET_IFNAME"] == "eth0"
    last = script(worker)[-1]
    assert "--data-parallel-address '$(LWS_LEADER_ADDRESS)'" in last
    # Worker K starts at DP rank K x 2; `$$` is Kubernetes' escape for a literal `$`.
    assert last.endswith("--headless --data-parallel-start-rank $$((LWS_WORKER_INDEX * 2))")


def test_ray_pods_start_ray_then_serve_on_the_leader():
    leader, worker = templates(manifest(RAY_PROFILE)[0])
    assert script(leader)[1:] == [
        "ray start --head",
        script(leader)[2],
    ] and script(leader)[2].endswith("--distributed-executor-backend ray")
    assert script(worker)[-1] == (
        "exec ray start '--address=$(LWS_LEADER_ADDRESS):6379' '--node-ip-address=$(POD_IP)' --block"
    )
    assert env(worker)["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"] == "1"


def test_per_host_overrides_follow_the_worker_index():
    text = (
        DP_PROFILE.read_text(encoding="utf-8")
        .replace("count: 2", "count: 3")
        .replace("[192.0.2.10, 192.0.2.11]", "[192.0.2.10, 192.0.2.11, 192.0.2.12]")
        + "  hosts:\n    - env: {TASK_QUEUE_ENABLE: '1'}\n    - {}\n    - nic: enp2\n"
    )
    profile = load_profile_text(text, "three.yaml")
    lws, service = lws_manifest(profile, K8sOptions(image=IMAGE))
    check_schemas([lws, service])
    leader, worker = templates(lws)
    assert env(leader)["TASK_QUEUE_ENABLE"] == "1" and "TASK_QUEUE_ENABLE" not in env(worker)
    lines = script(worker)
    case = lines[lines.index('case "$LWS_WORKER_INDEX" in') : lines.index("esac") + 1]
    assert case[1].strip().startswith("2) export GLOO_SOCKET_IFNAME=enp2;") and len(case) == 3


def test_secrets_come_from_a_secret(monkeypatch):
    text = (
        DP_PROFILE.read_text(encoding="utf-8")
        .replace("env:\n", "env:\n  HF_TOKEN: hf_abcdefghijklmnopqrstuvwx\n", 1)
        .replace("  port: 8004\n", "  port: 8004\n  api_key_env: SERVE_KEY\n")
    )
    lws, _ = lws_manifest(load_profile_text(text, "keyed.yaml"), K8sOptions(image=IMAGE, name="ds"))
    dumped = json.dumps(lws)
    assert "hf_abcdefghijklmnopqrstuvwx" not in dumped
    for template in templates(lws):
        assert env(template)["HF_TOKEN"] == {"secretKeyRef": {"name": "ds-secrets", "key": "HF_TOKEN"}}
        assert env(template)["VLLM_API_KEY"] == {"secretKeyRef": {"name": "ds-secrets", "key": "VLLM_API_KEY"}}


def test_resource_names_per_device_plugin_and_image_per_chip():
    lws, _ = manifest(device_plugin="cce")
    assert container(templates(lws)[0])["resources"]["limits"] == {"huawei.com/ascend-1980": "8"}
    lws, _ = manifest(npu_resource="example.com/npu")
    assert container(templates(lws)[1])["resources"]["requests"] == {"example.com/npu": "8"}
    with pytest.raises(BadInput, match="unknown device plugin"):
        manifest(device_plugin="nvidia")
    a3 = load_profile(str(DP_PROFILE), ["device.kind=Ascend910 (A3)"])
    assert default_image(a3, "0.11.0") == "quay.io/ascend/vllm-ascend:v0.11.0-a3"
    assert default_image(load_profile(str(DP_PROFILE)), "v0.11.0") == IMAGE


def test_deploy_names_the_same_official_image_as_serve_for_each_chip():
    """npu-smi's name of an A3 chip (Ascend910) and the 950 get their own images in a manifest,
    as serve picks them (one table: engine/container/container.yaml)."""
    for kind, suffix in (("Ascend910", "-a3"), ("Ascend950DT", "-a5"), ("310P3", "-310p"), ("910B3", "")):
        profile = load_profile(str(DP_PROFILE), [f"device.kind={kind}"])
        assert default_image(profile, "0.23.0") == f"quay.io/ascend/vllm-ascend:v0.23.0{suffix}"


def test_names_must_suit_kubernetes():
    lws, service = manifest()
    assert lws["metadata"]["name"] == "vllm-910b-deepseek-v3-1-w8a8-2x8"  # a Service name starts with a letter
    assert service["metadata"]["name"] == "vllm-910b-deepseek-v3-1-w8a8-2x8-leader"
    with pytest.raises(BadInput, match="cannot name a LeaderWorkerSet"):
        manifest(name="Bad_Name")
    lws, _ = manifest(name="ds", namespace="serving", replicas=2)
    assert lws["metadata"] == {
        "name": "ds",
        "labels": {"app.kubernetes.io/managed-by": "ascendctl"},
        "namespace": "serving",
    }
    assert lws["spec"]["replicas"] == 2


def test_a_one_host_profile_has_no_group():
    with pytest.raises(BadInput, match="no `nodes` section"):
        lws_manifest(load_profile(str(ROOT / "profiles" / "910b-32b.yaml")), K8sOptions(image=IMAGE))


def test_cli_writes_yaml_and_json(capsys, tmp_path):
    assert main(["deploy", "k8s", "--profile", str(DP_PROFILE), "--image", IMAGE]) == 0
    captured = capsys.readouterr()
    documents = list(yaml.safe_load_all(captured.out))
    assert [d["kind"] for d in documents] == ["LeaderWorkerSet", "Service"]
    check_schemas(documents)
    assert "kubectl apply" in captured.err

    assert main(["deploy", "k8s", "--profile", str(RAY_PROFILE), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["documents"][0]["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert container(templates(data["documents"][0])[0])["image"].startswith("quay.io/ascend/vllm-ascend:v")

    target = tmp_path / "lws.yaml"
    assert main(["deploy", "k8s", "--profile", str(DP_PROFILE), "-o", str(target)]) == 0
    assert len(list(yaml.safe_load_all(target.read_text(encoding="utf-8")))) == 2

    # a one-host profile gets a Deployment (tests/unit/test_deploy_single.py); none is known for the CPU engine
    assert main(["deploy", "k8s", "--profile", "cpu-tiny"]) == 2
    assert "no engine image is known for platform cpu" in capsys.readouterr().err


def k8s_expand(text: str, env: dict[str, str]) -> str:
    """What Kubernetes does to a container's command and env values before the process starts
    (k8s.io/kubernetes third_party/forked/golang/expansion): `$$` is `$`, `$(NAME)` of a defined
    variable its value, anything else as written."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i) and ")" in text[i:]:
            name = text[i + 2 : text.index(")", i)]
            out.append(env.get(name, text[i : text.index(")", i) + 1]))
            i = text.index(")", i) + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def test_profile_values_reach_vllm_as_written_after_kubernetes_expansion():
    text = DP_PROFILE.read_text().replace("served_name: deepseek_v3", 'served_name: "m$(HF_TOKEN)x$$y"')
    text = text.replace("env:\n", 'env:\n  HF_TOKEN: hf_placeholder\n  NOTE_VALUE: "v$(HF_TOKEN)"\n', 1)
    lws, _ = lws_manifest(load_profile_text(text, "p.yaml"), K8sOptions(image=IMAGE))
    pod_env = {"HF_TOKEN": "hf_THE_SECRET", "POD_IP": "10.0.0.5", "LWS_LEADER_ADDRESS": "10.0.0.4"}
    for template in templates(lws):
        command = k8s_expand(container(template)["command"][2], pod_env)
        assert "hf_THE_SECRET" not in command
        words = shlex.split(command.splitlines()[-1])
        if "--served-model-name" in words:
            assert words[words.index("--served-model-name") + 1] == "m$(HF_TOKEN)x$$y"
        values = {e["name"]: k8s_expand(e["value"], pod_env) for e in container(template)["env"] if "value" in e}
        assert values["NOTE_VALUE"] == "v$(HF_TOKEN)"
        # ascendctl's own references still become the pod's addresses.
        assert values["HCCL_IF_IP"] == "10.0.0.5"
        assert "10.0.0.5" in command or "10.0.0.4" in command


@pytest.mark.parametrize(
    "option, said",
    [
        ({"namespace": "Bad_NS!"}, "--namespace 'Bad_NS!' is not a namespace name"),
        ({"shm_size": "lots"}, "--shm-size 'lots' is not a Kubernetes quantity"),
        ({"image": ""}, "--image '' is not an image reference"),
        ({"npu_resource": "huawei.com/x: y\n"}, "is not a resource name"),
        ({"npu_resource": ""}, "--npu-resource '' is not a resource name"),
        ({"replicas": 100000000000}, "--replicas 100000000000 is out of range"),
    ],
)
def test_options_kubernetes_would_refuse_are_refused_here(option, said):
    options = {"image": IMAGE, **option}
    with pytest.raises(BadInput, match=re_escape(said)):
        lws_manifest(load_profile(str(DP_PROFILE), []), K8sOptions(**options))


def test_valid_options_still_pass_kubernetes_schemas():
    check_schemas(manifest(namespace="serving-1", shm_size="512Mi", npu_resource="huawei.com/Ascend910", replicas=3))


def re_escape(text: str) -> str:
    import re

    return re.escape(text)
