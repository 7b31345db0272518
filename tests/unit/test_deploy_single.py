"""`deploy k8s` of a one-host profile (a Deployment or StatefulSet, checked offline against
Kubernetes' own schemas with kubernetes-validate, strict) and `deploy compose` (checked against
the compose-spec schema that check-jsonschema ships, with its licence). The liveness check is run
for real against stand-in servers on 127.0.0.1: a healthy one, one whose /health answers while
completions hang, and none at all."""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources

import jsonschema
import kubernetes_validate
import pytest
import yaml
from helpers import ROOT

from ascendctl.cli import main
from engine.deploy import single
from engine.deploy.single import OneHostOptions, compose_file, deployment_manifest, expected_load_s, liveness_script
from engine.errors import BadInput
from engine.profiles import load_profile

K8S_VERSION = "1.30.0"
IMAGE = "quay.io/ascend/vllm-ascend:v0.13.0"
COMPOSE_SCHEMA = json.loads(
    (resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json").read_text("utf-8")
)


def profile(name="910b-32b", sets=()):
    return load_profile(name, list(sets))


def check_k8s(documents):
    for doc in documents:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def check_compose(document):
    jsonschema.Draft202012Validator(COMPOSE_SCHEMA).validate(document)


def pod(documents):
    return documents[0]["spec"]["template"]["spec"]


def container(documents):
    (only,) = pod(documents)["containers"]
    return only


def test_a_one_host_deployment_passes_the_kubernetes_schemas_with_npus_probes_shm_and_model():
    docs = deployment_manifest(profile(), OneHostOptions(image=IMAGE))
    check_k8s(docs)
    assert [d["kind"] for d in docs] == ["Deployment", "Service"]
    c = container(docs)
    assert c["image"] == IMAGE
    assert c["command"][:3] == ["vllm", "serve", "/models/Qwen3-32B"]
    assert c["command"][c["command"].index("--host") + 1] == "0.0.0.0"  # the Service reaches the pod's IP
    assert c["resources"]["limits"] == {"huawei.com/Ascend910": "2"}  # tensor_parallel_size 2
    # the device plugin picks the NPUs; the profile's host ids would be wrong inside the pod
    assert "ASCEND_RT_VISIBLE_DEVICES" not in {e["name"] for e in c["env"]}
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8000}
    assert c["startupProbe"]["httpGet"] == {"path": "/health", "port": 8000}
    assert c["livenessProbe"]["exec"]["command"][:2] == ["python3", "-c"]
    volumes = {v["name"]: v for v in pod(docs)["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Gi"}
    assert volumes["model"]["hostPath"] == {"path": "/models/Qwen3-32B", "type": "Directory"}
    assert "hccn-conf" not in volumes  # one host: no NPU network config to mount
    assert {"name": "model", "mountPath": "/models/Qwen3-32B", "readOnly": True} in c["volumeMounts"]
    assert docs[0]["spec"]["strategy"] == {"type": "Recreate"}  # never two pods wanting the same NPUs
    assert "hostNetwork" not in pod(docs)
    assert "&id" not in yaml.safe_dump_all(docs)  # no YAML anchors: every block reads on its own


def test_options_statefulset_cce_names_host_network_pvc_and_310p():
    docs = deployment_manifest(
        profile(),
        OneHostOptions(image=IMAGE, kind="StatefulSet", device_plugin="cce", host_network=True, model_pvc="models"),
    )
    check_k8s(docs)
    assert docs[0]["kind"] == "StatefulSet" and docs[0]["spec"]["serviceName"] == "vllm-910b-32b"
    assert container(docs)["resources"]["requests"] == {"huawei.com/ascend-1980": "2"}
    assert pod(docs)["hostNetwork"] is True and pod(docs)["dnsPolicy"] == "ClusterFirstWithHostNet"
    model = {v["name"]: v for v in pod(docs)["volumes"]}["model"]
    assert model == {"name": "model", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}}
    docs = deployment_manifest(profile("310p-8b"), OneHostOptions(image=IMAGE + "-310p"))
    check_k8s(docs)
    assert list(container(docs)["resources"]["limits"]) == ["huawei.com/Ascend310P"]
    with pytest.raises(BadInput, match="unknown workload kind"):
        deployment_manifest(profile(), OneHostOptions(image=IMAGE, kind="DaemonSet"))
    with pytest.raises(BadInput, match="has a `nodes` section"):
        deployment_manifest(profile("910b-deepseek-v3.1-w8a8-2x8"), OneHostOptions(image=IMAGE))


def test_the_startup_probe_is_sized_from_the_plans_load_time(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["Qwen3ForCausalLM"],
                "model_type": "qwen3",
                "torch_dtype": "bfloat16",
                "vocab_size": 151936,
                "max_position_embeddings": 40960,
                "hidden_size": 5120,
                "intermediate_size": 25600,
                "num_hidden_layers": 64,
                "num_attention_heads": 64,
                "num_key_value_heads": 8,
                "head_dim": 128,
            }
        )
    )
    size = 60 * (1 << 30)  # a headers-only file claiming 60 GiB of weights
    header = json.dumps({"w": {"dtype": "BF16", "shape": [size // 2], "data_offsets": [0, size]}})
    (model / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header.encode())
    load_s, how = expected_load_s(profile(), str(model))
    assert load_s == pytest.approx(40.0) and "60.0 GiB of weights at 1.5 GiB/s" in how
    small = container(deployment_manifest(profile(), OneHostOptions(image=IMAGE)))["startupProbe"]
    big = container(deployment_manifest(profile(), OneHostOptions(image=IMAGE), load_s))["startupProbe"]
    assert small["failureThreshold"] * small["periodSeconds"] == 600
    assert big["failureThreshold"] == math.ceil((600 + 3 * 40) / 10)
    assert expected_load_s(profile(), str(tmp_path / "absent"))[0] is None


# -- the liveness check, run for real ---------------------------------------------------------


class _Engine(BaseHTTPRequestHandler):
    mode = "ok"
    seen: list = []

    def log_message(self, *args):
        pass

    def do_GET(self):  # /health answers even when the engine hangs
        self.send_response(200)
        self.end_headers()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append((self.path, body, self.headers.get("Authorization")))
        if self.mode == "hang":
            threading.Event().wait(5)
            return
        data = json.dumps({"choices": [{"text": "!"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def engine_stub():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Engine.seen = []
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _probe(script: str, env=None) -> int:
    return subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=30, env=env).returncode


def test_liveness_passes_a_healthy_engine_and_fails_a_hung_or_absent_one(engine_stub, monkeypatch):
    data = single.facts()
    monkeypatch.setattr(single, "facts", lambda: {**data, "liveness": {**data["liveness"], "timeout_s": 1}})
    prof = load_profile("910b-32b", ["server.api_key_env=MY_KEY"])
    port = engine_stub.server_address[1]
    script = liveness_script(prof, port)
    assert _probe(script, {"VLLM_API_KEY": "k-123", "PATH": ""}) == 0
    path, body, auth = _Engine.seen[0]
    assert path == "/v1/completions" and body == {"model": "qwen3-32b", "prompt": "ping", "max_tokens": 1}
    assert auth == "Bearer k-123" and "k-123" not in script  # the key is read in the pod, never written
    _Engine.mode = "hang"
    try:
        assert _probe(script) == 1  # /health says 200, the completion never comes: a hung engine
    finally:
        _Engine.mode = "ok"
    engine_stub.shutdown()
    engine_stub.server_close()
    assert _probe(script) == 1


# -- Compose ------------------------------------------------------------------------------------


def test_compose_passes_the_compose_spec_with_the_quick_starts_devices_and_mounts():
    doc = compose_file(profile(), OneHostOptions(image=IMAGE))
    check_compose(doc)
    svc = doc["services"]["vllm"]
    assert svc["devices"] == [
        "/dev/davinci0:/dev/davinci0",
        "/dev/davinci1:/dev/davinci1",
        "/dev/davinci_manager:/dev/davinci_manager",
        "/dev/devmm_svm:/dev/devmm_svm",
        "/dev/hisi_hdc:/dev/hisi_hdc",
    ]
    assert svc["ports"] == ["127.0.0.1:8000:8000"]  # published on the profile's loopback address only
    assert "/models/Qwen3-32B:/models/Qwen3-32B:ro" in svc["volumes"]
    assert "/usr/local/dcmi:/usr/local/dcmi:ro" in svc["volumes"]
    assert svc["shm_size"] == "1g" and "ASCEND_RT_VISIBLE_DEVICES" not in svc["environment"]
    assert svc["healthcheck"]["test"][:3] == ["CMD", "python3", "-c"]
    assert compose_file(profile("310p-8b"), OneHostOptions(image=IMAGE))["services"]["vllm"]["shm_size"] == "10g"


def test_compose_with_ascend_docker_runtime_host_network_and_secrets():
    prof = load_profile("910b-32b", ["server.api_key_env=MY_KEY", "env.HF_TOKEN=hf_abcdefghijklmnopqrstu"])
    doc = compose_file(prof, OneHostOptions(image=IMAGE, devices="ascend-runtime", host_network=True))
    check_compose(doc)
    svc = doc["services"]["vllm"]
    assert svc["runtime"] == "ascend" and svc["environment"]["ASCEND_VISIBLE_DEVICES"] == "0,1"
    assert "devices" not in svc and svc["network_mode"] == "host" and "ports" not in svc
    assert svc["command"][svc["command"].index("--host") + 1] == "127.0.0.1"
    assert svc["environment"]["VLLM_API_KEY"].startswith("${MY_KEY:?")
    assert svc["environment"]["HF_TOKEN"].startswith("${HF_TOKEN:?")
    assert "hf_abcdefghijklmnopqrstu" not in json.dumps(doc)
    with pytest.raises(BadInput, match="unknown device mode"):
        compose_file(profile(), OneHostOptions(image=IMAGE, devices="gpus"))


def test_the_compose_schema_catches_a_mistake():
    doc = compose_file(profile("cpu-tiny"), OneHostOptions(image="localhost/vllm-cpu:dev"))
    check_compose(doc)
    assert "devices" not in doc["services"]["vllm"]
    doc["services"]["vllm"]["shm-size"] = "1g"  # the docker flag's spelling, not Compose's
    with pytest.raises(jsonschema.ValidationError):
        check_compose(doc)


def test_cli_one_host_k8s_and_compose(capsys, tmp_path):
    assert main(["deploy", "k8s", "--profile", "910b-32b", "--image", IMAGE]) == 0
    captured = capsys.readouterr()
    docs = list(yaml.safe_load_all(captured.out))
    check_k8s(docs)
    assert "startup probe allows 600 s" in captured.err and "kubectl apply" in captured.err

    target = tmp_path / "compose.yaml"
    assert main(["deploy", "compose", "--profile", "910b-32b", "-o", str(target)]) == 0
    doc = yaml.safe_load(target.read_text())
    check_compose(doc)
    assert doc["services"]["vllm"]["image"].startswith("quay.io/ascend/vllm-ascend:v")
    assert main(["--json", "deploy", "compose", "--profile", "cpu-tiny", "--image", "localhost/x:1"]) == 0
    check_compose(json.loads(capsys.readouterr().out)["document"])
    assert main(["deploy", "compose", "--profile", "cpu-tiny"]) == 2
    assert "no engine image is known for platform cpu" in capsys.readouterr().err
    assert main(["deploy", "compose", "--profile", str(ROOT / "profiles" / "910b-deepseek-v3.1-w8a8-2x8.yaml")]) == 2


def test_profile_values_stay_literal_in_both_files_and_bad_options_are_refused():
    # Kubernetes expands `$(NAME)` in command and env values, Compose `${NAME}` anywhere: a served
    # name or a variable holding `$` must reach vLLM as written, never as a Secret's value.
    p = profile("910b-32b", ["model.served_name=m$(HF_TOKEN)${HF_TOKEN}", "env.NOTE=v$(HF_TOKEN)"])
    vllm = container(deployment_manifest(p, OneHostOptions(image=IMAGE)))
    served = vllm["command"][vllm["command"].index("--served-model-name") + 1]
    assert served == "m$$(HF_TOKEN)$${HF_TOKEN}"
    assert {"name": "NOTE", "value": "v$$(HF_TOKEN)"} in vllm["env"]
    service = compose_file(p, OneHostOptions(image=IMAGE))["services"]["vllm"]
    assert service["command"][service["command"].index("--served-model-name") + 1] == "m$$(HF_TOKEN)$${HF_TOKEN}"
    assert service["environment"]["NOTE"] == "v$$(HF_TOKEN)"
    for bad, said in [
        ({"namespace": "Bad_NS!"}, "is not a namespace name"),
        ({"shm_size": "lots"}, "is not a Kubernetes quantity"),
        ({"npu_resource": ""}, "is not a resource name"),
    ]:
        with pytest.raises(BadInput, match=said):
            deployment_manifest(profile(), OneHostOptions(image=IMAGE, **bad))
