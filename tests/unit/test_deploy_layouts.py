"""`deploy k8s` of a prefill / decode (nodes.mode pd) or external-dp layout: every document checked
offline (the LWS against its CRD schema, everything else and every pod template against
Kubernetes' own schemas, strictly), each role's container command checked against serve's own
parts for that role and against vllm-ascend's tutorial (tests/fixtures/pd/, as test_pd.py does),
the proxy's upstreams against the Services, and the pod's shell run for real with stand-in engines."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time

import jsonschema
import kubernetes_validate
import pytest
import yaml
from test_deploy import K8S_VERSION, LWS_SCHEMA, k8s_expand
from test_pd import CPU_EDP, CPU_PD, HOSTS, PD_PROFILE, PYTHON, VERSION, flags_of, launches, script

from ascendctl.cli import main
from engine.deploy import K8sOptions
from engine.deploy.layouts import COMPONENT, layout_manifests
from engine.deploy.lws import _image_argv
from engine.profiles import ProfileInvalid, load_profile, load_profile_text
from engine.profiles.parts import PROXY, layout_parts

IMAGE = "quay.io/ascend/vllm-ascend:v0.11.0-a3"
WORKER = "leaderworkerset.sigs.k8s.io/worker-index"
EP_EDP = """\
name: edp
platform: ascend
device: {kind: Ascend910B3, hbm_gib: 64, count: 8}
model: {path: /models/dsv3}
engine: {tensor_parallel_size: 4, enable_expert_parallel: true}
server: {host: 0.0.0.0, port: 8000}
nodes:
  mode: external-dp
  count: 2
  addresses: [192.0.2.10, 192.0.2.11]
  dp_rpc_port: 12342
  instance_port: 9000
"""


def manifests(profile, **options):
    options.setdefault("engine_version", VERSION)
    return layout_manifests(profile, K8sOptions(image=IMAGE, **options))


def pd_manifests(**options):
    return manifests(load_profile(str(PD_PROFILE)), **options)


def templates(doc: dict) -> list[dict]:
    """The pod templates of a workload (an LWS: the leader's, then the workers'); none of a
    Service or ConfigMap."""
    if doc["kind"] in ("Service", "ConfigMap"):
        return []
    if doc["kind"] == "LeaderWorkerSet":
        spec = doc["spec"]["leaderWorkerTemplate"]
        return [spec["leaderTemplate"], spec["workerTemplate"]]
    return [doc["spec"]["template"]]


def container(template: dict) -> dict:
    (only,) = template["spec"]["containers"]
    return only


def env(template: dict) -> dict[str, object]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(template)["env"]}


def instances(template: dict, worker_index: int = 0) -> list[tuple[dict[str, str], list[str]]]:
    """Each `vllm serve` of a pod's shell as the process sees it (Kubernetes' expansion done with
    the pod's addresses and, on an LWS worker, the shell's arithmetic with its index): its own
    variables (ASCEND_RT_VISIBLE_DEVICES) and its argv."""
    pod_env = {"POD_IP": "POD-IP", "LWS_LEADER_ADDRESS": "LEADER"}
    out = []
    for line in container(template)["command"][2].splitlines():
        if " vllm serve " not in f" {line}":
            continue
        line = k8s_expand(line, pod_env).removeprefix("exec ").removesuffix(" &")
        line = re.sub(r"\$\(\((LWS_WORKER_INDEX[^)]*)\)\)", lambda m: str(eval(m.group(1), {"LWS_WORKER_INDEX": worker_index})), line)  # fmt: skip
        words = shlex.split(line)
        own = dict(w.split("=", 1) for w in words[: words.index("vllm")])
        out.append((own, words[words.index("vllm") :]))
    return out


def check(documents: list[dict]) -> None:
    for doc in documents:
        if doc["kind"] == "LeaderWorkerSet":
            jsonschema.Draft7Validator(LWS_SCHEMA["openAPIV3Schema"]).validate(doc)
            for template in templates(doc):
                kubernetes_validate.validate(
                    {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template},
                    K8S_VERSION,
                    strict=True,
                )
        else:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.mark.parametrize(
    "path, sets, kind",
    [
        (PD_PROFILE, (), "Deployment"),
        (PD_PROFILE, (), "StatefulSet"),
        (PD_PROFILE, ("engine.enable_expert_parallel=false",), "Deployment"),
        (CPU_PD, (), "Deployment"),
        (CPU_EDP, (), "StatefulSet"),
    ],
)
def test_every_document_passes_the_lws_and_kubernetes_schemas(path, sets, kind):
    documents = manifests(load_profile(str(path), list(sets)), kind=kind)
    check(documents)
    assert {d["kind"] for d in documents} >= {kind, "Service", "ConfigMap", "Deployment"}
    check(manifests(load_profile_text(EP_EDP, "edp.yaml"), namespace="serving", model_pvc="models"))


def test_the_schemas_catch_a_mistake():
    documents = pd_manifests()
    container(templates(documents[0])[0])["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        check(documents)


def test_the_2p1d_layout_is_a_workload_per_role_part():
    documents = pd_manifests()
    workloads = [(d["kind"], d["metadata"]["name"]) for d in documents if d["kind"] not in ("Service", "ConfigMap")]
    base = "a3-deepseek-r1-w8a8-pd-2p1d"
    assert workloads == [
        ("Deployment", f"{base}-prefill-0"),  # a data-parallel group of 2 on one host: one pod
        ("Deployment", f"{base}-prefill-1"),
        ("LeaderWorkerSet", f"{base}-decode-dp0"),  # the decode group of 32 spans hosts 2 and 3
        ("Deployment", f"{base}-proxy"),
    ]
    by_name = {d["metadata"]["name"]: d for d in documents if d["kind"] != "Service"}
    # LWS makes a headless Service of its own name: none of ours may take it.
    assert f"{base}-decode-dp0" not in {d["metadata"]["name"] for d in documents if d["kind"] == "Service"}
    decode = by_name[f"{base}-decode-dp0"]["spec"]["leaderWorkerTemplate"]
    assert decode["size"] == 2 and decode["restartPolicy"] == "RecreateGroupOnPodRestart"
    for name, npus in ((f"{base}-prefill-0", "16"), (f"{base}-decode-dp0", "16")):
        for template in templates(by_name[name]):
            c = container(template)
            assert c["resources"]["limits"] == c["resources"]["requests"] == {"huawei.com/Ascend910": npus}
            assert template["spec"]["hostNetwork"] is True  # Mooncake and HCCL use the hosts' NICs
            mounts = {m["mountPath"] for m in c["volumeMounts"]}
            assert {
                "/etc/hccn.conf",
                "/usr/local/Ascend/driver",
                "/dev/shm",
                "/path_to_weight/DeepSeek-r1_w8a8_mtp",
            } <= mounts
            # Startup and readiness on every instance's /health; liveness one token from each.
            ports = [p["containerPort"] for p in c["ports"]]
            assert len(ports) == (2 if "prefill" in name else 16)
            assert str(ports) in c["readinessProbe"]["exec"]["command"][2]
            live = c["livenessProbe"]["exec"]["command"][2]
            assert f"ports = {ports}" in live and "'max_tokens': 1" in live
            assert c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"] >= 600


def test_each_roles_instances_run_serves_parts_for_that_role():
    """Every engine part `serve --role R --node-rank K --instance I` starts is one `vllm serve` of
    a pod, with the same flags and variables; only the addresses are the pod's (its IP, the LWS
    leader's) and its NPUs are numbered in the pod."""
    profile = load_profile(str(PD_PROFILE))
    parts = [p for p in layout_parts(profile, VERSION, PYTHON, PYTHON) if p.role != PROXY]
    pods = {}
    for doc in pd_manifests():
        for k, template in enumerate(templates(doc)):
            if template["metadata"]["labels"][COMPONENT] in ("prefill", "decode"):
                pods[doc["metadata"]["name"], k] = template
    where = {0: ("prefill-0", 0), 1: ("prefill-1", 0), 2: ("decode-dp0", 0), 3: ("decode-dp0", 1)}
    addresses = dict(enumerate(profile.nodes.addresses))
    seen = 0
    for part in parts:
        name, k = where[part.host]
        template = pods[f"a3-deepseek-r1-w8a8-pd-2p1d-{name}", k]
        own, argv = instances(template, worker_index=k)[part.index]
        master = {0: 0, 1: 1, 2: 2, 3: 2}[part.host]
        theirs = [w.replace(addresses[master], "LEADER" if master != part.host else "POD-IP") for w in part.spec.argv]
        assert flags_of(argv[2:]) == flags_of(theirs[theirs.index("serve") + 1 :]), (part.name, k)
        assert argv[:3] == ["vllm", "serve", profile.model.path]
        values = {n: v for n, v in env(template).items() if n != "POD_IP"}
        want = {n: v.replace(addresses[part.host], "$(POD_IP)") for n, v in part.spec.env.items()}
        visible = want.pop("ASCEND_RT_VISIBLE_DEVICES")
        assert values == want, part.name
        per = len(part.devices)
        assert own == {"ASCEND_RT_VISIBLE_DEVICES": ",".join(str(part.index * per + d) for d in range(per))}
        assert visible == ",".join(map(str, part.devices))
        seen += 1
    assert seen == 36


def test_the_manifests_run_the_tutorials_command_lines():
    """The same check as test_pd's against vllm-ascend's scripts, made on the pods' commands: the
    data-parallel master is the LWS leader's address (or the pod's own IP), worker 1's ranks follow
    the leader's."""
    by_name = {d["metadata"]["name"]: d for d in pd_manifests() if d["kind"] != "Service"}
    pods = [("prefill-0", 0), ("prefill-1", 0), ("decode-dp0", 0), ("decode-dp0", 1)]
    for host, (name, launch) in enumerate(zip(HOSTS, launches())):
        doc, k = by_name[f"a3-deepseek-r1-w8a8-pd-2p1d-{pods[host][0]}"], pods[host][1]
        template = templates(doc)[k]
        mine = instances(template, worker_index=k)
        tp, local = int(launch["--tp-size"]), int(launch["--dp-size-local"])
        assert len(mine) == local
        for i, (own, argv) in enumerate(mine):
            values = {
                "1": ",".join(str(d) for d in range(i * tp, (i + 1) * tp)),
                "2": str(int(launch["--vllm-start-port"]) + i),
                "3": launch["--dp-size"],
                "4": str(int(launch["--dp-rank-start"]) + i),
                "5": "LEADER" if k else "POD-IP",
                "6": launch["--dp-rpc-port"],
                "7": launch["--tp-size"],
            }
            theirs_env, command = script(name, values)
            theirs = flags_of(command[2:])
            if theirs["--tensor-parallel-size"] == "1":
                del theirs["--tensor-parallel-size"]
            assert flags_of(argv[2:]) == theirs, (name, i)
            values = {**env(template), **own}
            assert {n: values.get(n) for n in theirs_env if n != "HCCL_IF_IP"} == {
                n: v for n, v in theirs_env.items() if n != "HCCL_IF_IP"
            }
            assert values["HCCL_IF_IP"] == "$(POD_IP)"


def test_the_proxy_reaches_every_instance_through_the_services():
    documents = pd_manifests()
    services = {d["metadata"]["name"]: d for d in documents if d["kind"] == "Service"}
    (proxy,) = [d for d in documents if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-proxy")]
    argv = container(proxy["spec"]["template"])["command"]
    serve = layout_parts(load_profile(str(PD_PROFILE)), VERSION, PYTHON, "python3")[-1].spec.argv

    def lists(words):
        out, key = {}, ""
        for word in words[3:]:
            if word.startswith("--"):
                key = word
                out[key] = []
            else:
                out[key].append(word)
        return out

    ours, theirs = lists(argv), lists(serve)
    # serve's command line, with each upstream's address the DNS name of its pod's Service.
    assert argv[:3] == serve[:3] == ["python3", "-m", "engine.pdproxy"]
    for hosts, ports in (("--prefiller-hosts", "--prefiller-ports"), ("--decoder-hosts", "--decoder-ports")):
        assert ours[ports] == theirs[ports]
        assert len(ours[hosts]) == len(theirs[hosts])
        for name, port in zip(ours[hosts], ours[ports]):
            assert int(port) in [p["port"] for p in services[name]["spec"]["ports"]], (name, port)
        del ours[hosts], theirs[hosts]
    assert ours == theirs
    # Each Service selects exactly its pod: the LWS worker by its index.
    decode3 = services["a3-deepseek-r1-w8a8-pd-2p1d-decode-3"]["spec"]["selector"]
    assert decode3 == {"leaderworkerset.sigs.k8s.io/name": "a3-deepseek-r1-w8a8-pd-2p1d-decode-dp0", WORKER: "1"}
    prefill = services["a3-deepseek-r1-w8a8-pd-2p1d-prefill-1"]["spec"]["selector"]
    (workload,) = [d for d in documents if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("prefill-1")]
    assert prefill.items() <= workload["spec"]["template"]["metadata"]["labels"].items()
    # The proxy's own file comes with it: the engine image has python3, not ascendctl.
    (config,) = [d for d in documents if d["kind"] == "ConfigMap"]
    assert "def main(" in config["data"]["pdproxy.py"]
    pod = proxy["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "proxy", "configMap": {"name": config["metadata"]["name"]}}]
    assert {"name": "PYTHONPATH", "value": "/opt/ascendctl"} in pod["containers"][0]["env"]
    assert services["a3-deepseek-r1-w8a8-pd-2p1d-proxy"]["spec"]["ports"][0]["port"] == 1999


def test_a_label_selects_each_role():
    documents = pd_manifests()

    def selected(role):
        return {
            d["metadata"]["name"]
            for d in documents
            for t in templates(d)
            if t["metadata"]["labels"].get(COMPONENT) == role
        }

    assert selected("decode") == {"a3-deepseek-r1-w8a8-pd-2p1d-decode-dp0"}
    assert selected("prefill") == {"a3-deepseek-r1-w8a8-pd-2p1d-prefill-0", "a3-deepseek-r1-w8a8-pd-2p1d-prefill-1"}
    assert selected("proxy") == {"a3-deepseek-r1-w8a8-pd-2p1d-proxy"}
    assert all(COMPONENT in d["metadata"]["labels"] for d in documents)


def test_external_dp_ranks_over_two_hosts_are_one_lws_and_independent_ranks_a_pod_each():
    documents = manifests(load_profile_text(EP_EDP, "edp.yaml"))
    (lws,) = [d for d in documents if d["kind"] == "LeaderWorkerSet"]
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    parts = [p for p in layout_parts(load_profile_text(EP_EDP, "edp.yaml"), VERSION, PYTHON, PYTHON) if p.role != PROXY]
    for k, template in enumerate(templates(lws)):
        for i, (own, argv) in enumerate(instances(template, worker_index=k)):
            flags = flags_of(argv[3:])
            part = parts[2 * k + i]
            assert flags["--data-parallel-rank"] == str(part.rank) and flags["--data-parallel-size"] == "4"
            assert flags["--data-parallel-address"] == ("LEADER" if k else "POD-IP")
            assert flags["--port"] == str(9000 + i) and own == {
                "ASCEND_RT_VISIBLE_DEVICES": f"{4 * i},{4 * i + 1},{4 * i + 2},{4 * i + 3}"
            }
    (balancer,) = [d for d in documents if d["kind"] == "Deployment"]
    argv = container(balancer["spec"]["template"])["command"]
    assert argv[argv.index("--backends") + 1 :] == [
        "edp-rank-0:9000",
        "edp-rank-0:9001",
        "edp-rank-1:9000",
        "edp-rank-1:9001",
    ]

    # Without expert parallel every rank is its own API server: a workload each, one NPU set each.
    documents = manifests(load_profile(str(CPU_EDP)))
    ranks = [d for d in documents if d["kind"] == "Deployment" and "-rank-" in d["metadata"]["name"]]
    assert [d["metadata"]["name"] for d in ranks] == ["cpu-tiny-external-dp-rank-0-0", "cpu-tiny-external-dp-rank-0-1"]
    serve = [p for p in layout_parts(load_profile(str(CPU_EDP)), VERSION, "python3", PYTHON) if p.role != PROXY]
    for doc, part in zip(ranks, serve):
        (only,) = instances(doc["spec"]["template"])
        want = _image_argv([w.replace("127.0.0.1", "0.0.0.0") for w in part.spec.argv])
        assert only[1] == want
        assert container(doc["spec"]["template"])["readinessProbe"]["httpGet"]["port"] == part.spec.port


def test_a_group_lws_workers_cannot_share_is_refused_with_its_line(tmp_path, capsys):
    """Three decode hosts in one group, the third with other NPUs: LWS workers share one pod
    template, so that layout cannot be placed as written."""
    text = PD_PROFILE.read_text(encoding="utf-8").replace("count: 4", "count: 5")
    text = text.replace("192.0.0.4]", "192.0.0.4, 192.0.0.5]")
    text += "    - <<: *decode\n      host: 4\n      devices: [0, 1, 2, 3, 4, 5, 6, 7]\n"
    path = tmp_path / "uneven.yaml"
    path.write_text(text, encoding="utf-8")
    line = max(i for i, ln in enumerate(text.splitlines(), 1) if ln == "    - <<: *decode")
    assert main(["deploy", "k8s", "--profile", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{path}:{line}: nodes.roles[4]: cannot be placed by deploy k8s" in captured.err
    assert "runs 8 instance(s) on 8 NPU(s) where host 3 runs 16 on 16" in captured.err
    with pytest.raises(ProfileInvalid):
        manifests(load_profile(str(path)))
    # The same hosts as a group of their own are placed.
    fixed = text.replace(
        "devices: [0, 1, 2, 3, 4, 5, 6, 7]\n", "devices: [0, 1, 2, 3, 4, 5, 6, 7]\n      dp_group: 1\n"
    )
    check(manifests(load_profile_text(fixed, "fixed.yaml")))


def test_a_worker_hosts_own_nic_is_exported_by_its_worker_index():
    """Three decode hosts in one group, the third with its own NIC (nodes.hosts): the one worker
    template exports each worker's own variables by LWS_WORKER_INDEX, as the dp LWS does."""
    text = PD_PROFILE.read_text(encoding="utf-8").replace("count: 4", "count: 5")
    text = text.replace("192.0.0.4]", "192.0.0.4, 192.0.0.5]")
    text = text.replace("  nic: eth0\n", "  nic: eth0\n  hosts: [{}, {}, {}, {}, {nic: enp2}]\n")
    text += "    - <<: *decode\n      host: 4\n"
    documents = manifests(load_profile_text(text, "three.yaml"))
    check(documents)
    (lws,) = [d for d in documents if d["kind"] == "LeaderWorkerSet"]
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 3
    worker = templates(lws)[1]
    assert "GLOO_SOCKET_IFNAME" not in env(worker) and env(worker)["HCCL_IF_IP"] == "$(POD_IP)"
    shell = k8s_expand(container(worker)["command"][2], {})
    for index, nic in ((1, "eth0"), (2, "enp2")):
        head = shell.split("\nASCEND_RT_VISIBLE_DEVICES=0 ")[0]
        done = subprocess.run(
            ["bash", "-c", head + "\necho $GLOO_SOCKET_IFNAME $HCCL_SOCKET_IFNAME"],
            env={"LWS_WORKER_INDEX": str(index), "PATH": os.environ["PATH"]},
            capture_output=True,
            text=True,
        )
        assert done.stdout.split() == [nic, nic]
    # Worker 2's ranks follow worker 1's.
    ranks = [flags_of(argv[3:])["--data-parallel-rank"] for _, argv in instances(worker, worker_index=2)]
    assert ranks == [str(32 + i) for i in range(16)]
    assert flags_of(instances(worker, 2)[0][1][3:])["--data-parallel-size"] == "48"


def test_a_role_larger_than_a_node_and_other_bad_input_exit_2(tmp_path, capsys):
    text = PD_PROFILE.read_text(encoding="utf-8").replace(
        "devices: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]\n      tensor_parallel_size: 8",
        "devices: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]\n      tensor_parallel_size: 8",
    )
    path = tmp_path / "big.yaml"
    path.write_text(text, encoding="utf-8")
    assert main(["deploy", "k8s", "--profile", str(path)]) == 2
    err = capsys.readouterr().err
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "16, 17]" in ln)
    assert f"{path}:{line}: nodes.roles[0].devices: must be a list of NPU ids from 0 to 15" in err
    assert main(["deploy", "k8s", "--profile", str(PD_PROFILE), "--replicas", "2"]) == 2
    assert "is one copy behind its proxy" in capsys.readouterr().err
    assert main(["deploy", "k8s", "--profile", str(PD_PROFILE), "--name", "x" * 60]) == 2
    assert "cannot name a Kubernetes object" in capsys.readouterr().err


def test_cli_writes_yaml_json_and_a_file(capsys, tmp_path):
    assert main(["deploy", "k8s", "--profile", str(PD_PROFILE), "--image", IMAGE]) == 0
    captured = capsys.readouterr()
    documents = list(yaml.safe_load_all(captured.out))
    check(documents)
    assert "the API is served by the Service a3-deepseek-r1-w8a8-pd-2p1d-proxy" in captured.err
    assert "kubectl get pods -l app.kubernetes.io/component=ROLE" in captured.err
    assert main(["deploy", "k8s", "--profile", str(CPU_PD), "--image", IMAGE, "--json", "--proxy-image", "python:3.12-slim"]) == 0  # fmt: skip
    data = json.loads(capsys.readouterr().out)["documents"]
    (proxy,) = [d for d in data if d["kind"] == "Deployment" and d["metadata"]["name"] == "cpu-tiny-pd-proxy"]
    assert container(proxy["spec"]["template"])["image"] == "python:3.12-slim"
    assert main(["deploy", "k8s", "--profile", str(CPU_PD), "--image", IMAGE, "--json", "--model-pvc", "weights"]) == 0
    data = json.loads(capsys.readouterr().out)["documents"]
    (volume,) = [v for v in data[0]["spec"]["template"]["spec"]["volumes"] if v["name"] == "model"]
    assert volume == {"name": "model", "persistentVolumeClaim": {"claimName": "weights", "readOnly": True}}
    target = tmp_path / "pd.yaml"
    assert main(["deploy", "k8s", "--profile", str(CPU_EDP), "--image", IMAGE, "-o", str(target)]) == 0
    assert [d["kind"] for d in yaml.safe_load_all(target.read_text(encoding="utf-8"))] == [
        "Deployment", "Deployment", "Service", "Service", "ConfigMap", "Deployment", "Service"
    ]  # fmt: skip


def test_profile_values_stay_literal_and_secrets_come_from_a_secret():
    text = PD_PROFILE.read_text().replace("served_name: ds_r1", 'served_name: "m$(HF_TOKEN)x$$y"')
    text = text.replace("env:\n", "env:\n  HF_TOKEN: hf_abcdefghijklmnopqrstuvwx\n", 1)
    documents = manifests(load_profile_text(text, "p.yaml"))
    assert "hf_abcdefghijklmnopqrstuvwx" not in json.dumps(documents)
    pod_env = {"HF_TOKEN": "hf_THE_SECRET", "POD_IP": "10.0.0.5", "LWS_LEADER_ADDRESS": "10.0.0.4"}
    for doc in documents:
        for template in templates(doc):
            command = " ".join(container(template)["command"])
            expanded = k8s_expand(command, pod_env)
            assert "hf_THE_SECRET" not in expanded
            if "vllm serve" in command:
                assert env(template)["HF_TOKEN"] == {
                    "secretKeyRef": {"name": "a3-deepseek-r1-w8a8-pd-2p1d-secrets", "key": "HF_TOKEN"}
                }
                for line in expanded.splitlines():
                    if " serve " in line:
                        words = shlex.split(line.removesuffix(" &"))
                        assert words[words.index("--served-model-name") + 1] == "m$(HF_TOKEN)x$$y"


def test_the_pods_shell_stops_every_instance_when_one_stops(tmp_path):
    """A pod of several instances runs them as launch_online_dp.py does; when one stops, the pod
    stops the others and exits non-zero (Kubernetes restarts it), and SIGTERM stops them all."""
    documents = pd_manifests()
    template = templates(documents[0])[0]  # prefill-0: two instances
    shell = k8s_expand(container(template)["command"][2], {"POD_IP": "127.0.0.1"})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "vllm"
    # A stand-in engine: records its pid and NPUs, runs until killed, or exits 3 on port 7101.
    stub.write_text(
        "#!/bin/bash\n"
        'port=$(echo "$@" | sed -E "s/.*--port ([0-9]+).*/\\1/")\n'
        f'echo "$$ $ASCEND_RT_VISIBLE_DEVICES" > {tmp_path}/pid-$port\n'
        '[ "$STOP_PORT" = "$port" ] && { sleep 0.5; exit 3; }\n'
        "exec sleep 60\n"
    )
    stub.chmod(0o755)
    environ = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STOP_PORT": "7101"}
    done = subprocess.run(["bash", "-c", shell], env=environ, capture_output=True, text=True, timeout=30)
    assert done.returncode == 3 and "an instance of this pod stopped (exit 3)" in done.stderr
    pids = {p.name: p.read_text().split() for p in tmp_path.glob("pid-*")}
    assert pids["pid-7100"][1] == "0,1,2,3,4,5,6,7" and pids["pid-7101"][1] == "8,9,10,11,12,13,14,15"
    time.sleep(0.2)
    assert not os.path.exists(f"/proc/{pids['pid-7100'][0]}")  # the other instance was stopped
    for p in tmp_path.glob("pid-*"):
        p.unlink()
    environ["STOP_PORT"] = ""
    proc = subprocess.Popen(["bash", "-c", shell], env=environ, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(100):
            if len(list(tmp_path.glob("pid-*"))) == 2:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) != 0
        time.sleep(0.2)
        for p in tmp_path.glob("pid-*"):
            assert not os.path.exists(f"/proc/{p.read_text().split()[0]}")
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in tmp_path.glob("pid-*"):
            try:
                os.kill(int(p.read_text().split()[0]), signal.SIGKILL)
            except (OSError, ValueError):
                pass


def test_a_pods_probes_ask_every_instance(monkeypatch):
    """Liveness fails a pod when one of its instances hangs (its /health still answers);
    startup and readiness fail it while one instance's /health does not answer."""
    import threading
    from http.server import ThreadingHTTPServer

    from test_deploy_single import _Engine, _probe

    from engine.deploy import single
    from engine.deploy.single import health_script, liveness_script

    class Hung(_Engine):
        mode = "hang"

    data = single.facts()
    monkeypatch.setattr(single, "facts", lambda: {**data, "liveness": {**data["liveness"], "timeout_s": 1}})
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), handler) for handler in (_Engine, _Engine, Hung)]
    threads = []
    for server in servers:
        server.daemon_threads = True
        threads.append(threading.Thread(target=server.serve_forever, daemon=True))
        threads[-1].start()
    try:
        ok, ok2, hung = (s.server_address[1] for s in servers)
        prof = load_profile(str(CPU_PD))
        assert _probe(liveness_script(prof, ports=[ok, ok2])) == 0
        assert _probe(liveness_script(prof, ports=[ok, hung])) == 1
        assert _probe(health_script([ok, hung])) == 0
        servers[1].shutdown()
        servers[1].server_close()
        assert _probe(health_script([ok, ok2])) == 1
    finally:
        for server, thread in zip(servers, threads):
            server.shutdown()
            server.server_close()
            thread.join(5)


def test_the_proxy_runs_from_its_configmap_with_a_python_that_has_no_ascendctl(tmp_path):
    """The proxy container's command, run as Kubernetes would run it: its ConfigMap's files at the
    mount path, PYTHONPATH from its env, a python3 without ascendctl (the system's), the Services'
    names pointed at two stand-in ranks on 127.0.0.1. Requests reach both ranks in turn."""
    import shutil
    import threading
    from http.server import ThreadingHTTPServer

    import httpx
    from test_deploy_single import _Engine

    python = shutil.which("python3", path="/usr/bin:/bin")
    if (
        python is None
        or subprocess.run(
            [python, "-c", "import engine"], cwd=tmp_path, capture_output=True, env={"PATH": "/usr/bin:/bin"}
        ).returncode
        == 0
    ):
        python = None
    if python is None:
        pytest.skip("no python3 without ascendctl on this machine")
    documents = manifests(load_profile(str(CPU_EDP)))
    (config,) = [d for d in documents if d["kind"] == "ConfigMap"]
    (proxy,) = [d for d in documents if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-proxy")]
    c = container(proxy["spec"]["template"])
    (mount,) = c["volumeMounts"]
    root = tmp_path / mount["mountPath"].lstrip("/")
    root.mkdir(parents=True)
    for name, text in config["data"].items():
        (root / name).write_text(text, encoding="utf-8")
    pythonpath = next(e["value"] for e in c["env"] if e["name"] == "PYTHONPATH")
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), _Engine) for _ in range(2)]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for t in threads:
        t.start()
    port = free_port()
    argv = list(c["command"])
    argv[0] = python
    argv[argv.index("--host") + 1] = "127.0.0.1"
    argv[argv.index("--port") + 1] = str(port)
    at = argv.index("--backends") + 1
    for i, server in enumerate(servers):
        assert argv[at + i].startswith("cpu-tiny-external-dp-rank-0-")
        argv[at + i] = f"127.0.0.1:{server.server_address[1]}"
    # Another `engine` package later on the path (an image may hold one) must not shadow the proxy's.
    decoy = tmp_path / "site" / "engine"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("", encoding="utf-8")
    environ = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{tmp_path}{pythonpath}:{decoy.parent}"}
    proc = subprocess.Popen(argv, env=environ, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(100):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        _Engine.seen = []
        for _ in range(2):
            answer = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"model": "tiny", "prompt": "hi"})
            assert answer.status_code == 200 and answer.json()["choices"]
        assert len(_Engine.seen) == 2
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        for server in servers:
            assert f'backend="127.0.0.1:{server.server_address[1]}"}} 1' in metrics
    finally:
        proc.terminate()
        proc.wait(10)
        for server, t in zip(servers, threads):
            server.shutdown()
            server.server_close()
            t.join(5)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
