"""`doctor --compare` over recorded machines, bundles and doctor --json reports: one row per item
that differs, the odd node marked, exit 1 when it can break or slow the group, 0 when cosmetic."""

from __future__ import annotations

import json
import shutil
import struct
import tarfile

import pytest
from helpers import FIXTURES

from ascendctl.cli import main
from engine.doctor.drift import PACKAGES_QUERY_TAIL
from engine.system.enginepy import COLLECT
from engine.system.recorded import command_key

TUNED = FIXTURES / "hosts" / "perf-tuned-910b"
MODEL = "/models/Qwen3-tiny"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def safetensors(name: str, data: bytes = b"\0" * 8) -> bytes:
    header = json.dumps({name: {"dtype": "F16", "shape": [2, 2], "data_offsets": [0, 8]}}).encode()
    return struct.pack("<Q", len(header)) + header + data


def node(tmp_path, i: int, *, tensor: str = "model.embed.weight", data: bytes = b"\0" * 8, env: dict | None = None):
    """A copy of the tuned host as node i, with its own name and machine-id and a tiny model."""
    root = tmp_path / f"node{i}"
    shutil.copytree(TUNED, root, symlinks=True)
    (root / "etc/hostname").write_text(f"node{i}\n")
    (root / "etc/machine-id").write_text(f"{i:x}" * 32 + "\n")
    model = root / MODEL.lstrip("/")
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"architectures": ["Qwen3ForCausalLM"]}')
    (model / "model.safetensors").write_bytes(safetensors(tensor, data))
    if env:
        lines = (root / ".recorded/env").read_text().splitlines()
        lines = [ln for ln in lines if ln.split("=", 1)[0] not in env] + [f"{k}={v}" for k, v in env.items()]
        (root / ".recorded/env").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture
def three(tmp_path):
    """node1 has another HCCL_OP_EXPANSION_MODE; node2's weights differ by one byte in a header."""
    a = node(tmp_path, 0)
    b = node(tmp_path, 1, env={"HCCL_OP_EXPANSION_MODE": "AI_CPU"})
    c = node(tmp_path, 2, tensor="model.embed.weighT")
    return [str(a), str(b), str(c)]


def test_three_nodes_name_the_odd_one_of_each_row(capsys, three):
    code, out, _ = run(capsys, "doctor", "--json", "--compare", *three, "--model", MODEL)
    data = json.loads(out)
    assert code == 1
    drift = {c["id"]: c for c in data["checks"] if c["category"] == "drift"}
    assert set(drift) == {"drift.env_hccl_op_expansion_mode", "drift.weights"}
    hccl = drift["drift.env_hccl_op_expansion_mode"]
    assert hccl["status"] == "error" and hccl["summary"].startswith(
        "[breaks] env HCCL_OP_EXPANSION_MODE differs on node1"
    )
    assert "(the others: AIV)" in hccl["summary"]
    weights = drift["drift.weights"]
    assert weights["status"] == "error" and "differs on node2" in weights["summary"]
    assert weights["summary"].endswith("files that differ: model.safetensors")
    table = data["facts"]["table"]
    assert table["env HCCL_OP_EXPANSION_MODE"] == {"node0": "AIV", "node1": "AI_CPU", "node2": "AIV"}
    assert table["weights"]["node0"] == table["weights"]["node1"] != table["weights"]["node2"]
    # the text table marks the odd value of each row
    code, out, _ = run(capsys, "doctor", "--compare", *three, "--model", MODEL)
    row = next(line for line in out.splitlines() if line.startswith("env HCCL_OP_EXPANSION_MODE"))
    assert row.split()[2:] == ["AIV", "AI_CPU", "*", "AIV"]


def test_doctor_json_reports_of_each_node_compare_the_same(capsys, tmp_path, three):
    files = []
    for root in three:
        code, out, _ = run(capsys, "doctor", "--json", "--root", root, "--model", MODEL)
        path = tmp_path / f"{root.rsplit('/', 1)[-1]}.json"
        path.write_text(out)
        files.append(str(path))
    code, out, _ = run(capsys, "doctor", "--json", "--compare", *files)
    assert code == 1
    ids = {c["id"] for c in json.loads(out)["checks"] if c["category"] == "drift"}
    assert ids == {"drift.env_hccl_op_expansion_mode", "drift.weights"}


def test_a_bundle_compares_like_its_tree(capsys, tmp_path, three):
    bundle = tmp_path / "node1.tar.gz"
    with tarfile.open(bundle, "w:gz") as tar:
        tar.add(three[1], arcname="node1")
    code, out, _ = run(capsys, "doctor", "--json", "--compare", three[0], str(bundle))
    assert code == 1
    assert "drift.env_hccl_op_expansion_mode" in {c["id"] for c in json.loads(out)["checks"]}


def test_secrets_are_compared_masked_and_are_cosmetic(capsys, tmp_path):
    a = node(tmp_path, 0, env={"HF_TOKEN": "hf_FirstSecretValue0123456789abcd"})
    b = node(tmp_path, 1, env={"HF_TOKEN": "hf_OtherSecretValue0123456789abcd"})
    c = node(tmp_path, 2, env={"HF_TOKEN": "hf_FirstSecretValue0123456789abcd"})
    code, out, _ = run(capsys, "doctor", "--json", "--compare", str(a), str(b), str(c))
    assert code == 0  # a token that differs cannot break the group
    assert "SecretValue" not in out
    data = json.loads(out)
    assert data["facts"]["table"]["env HF_TOKEN"] == {"node0": "**** #1", "node1": "**** #2", "node2": "**** #1"}
    row = next(c for c in data["checks"] if c["id"] == "drift.env_hf_token")
    assert row["status"] == "warning" and row["summary"].startswith("[cosmetic] env HF_TOKEN differs on node1")
    # the snapshot written by doctor --json holds a digest, never the value
    code, out, _ = run(capsys, "doctor", "--json", "--root", str(a))
    assert "SecretValue" not in out and json.loads(out)["facts"]["drift"]["env"]["HF_TOKEN"].startswith("masked:")


def _packages(root, **changes: str) -> None:
    """Record the engine interpreter's package list (the query doctor --compare runs)."""
    packages = {
        "vllm": "0.9.1+empty",
        "vllm_ascend": "0.9.1",
        "torch": "2.5.1",
        "triton_ascend": "3.2.0",
        "rich": "13.9.4",
    }
    packages.update(changes)
    key = command_key(["/opt/vllm/bin/python", "-c", COLLECT + PACKAGES_QUERY_TAIL])
    (root / ".recorded/commands" / f"{key}.out").write_text(json.dumps(packages) + "\n")


def test_the_whole_package_list_is_compared(capsys, tmp_path):
    a, b = node(tmp_path, 0), node(tmp_path, 1)
    _packages(a)
    _packages(b, rich="14.0.0")
    code, out, _ = run(capsys, "doctor", "--json", "--compare", str(a), str(b))
    row = next(c for c in json.loads(out)["checks"] if c["id"] == "drift.package_rich")
    assert code == 0 and row["status"] == "warning" and "[cosmetic]" in row["summary"]
    _packages(b, triton_ascend="3.2.1")  # an engine package: the group can break
    code, out, _ = run(capsys, "doctor", "--json", "--compare", str(a), str(b))
    row = next(c for c in json.loads(out)["checks"] if c["id"] == "drift.package_triton_ascend")
    assert code == 1 and row["status"] == "error"
    assert row["summary"] == "[breaks] package triton_ascend differs: node0 3.2.0; node1 3.2.1"


def test_full_hash_sees_a_change_inside_a_tensor(capsys, tmp_path):
    a = node(tmp_path, 0)
    b = node(tmp_path, 1, data=b"\0" * 7 + b"\1")  # same header, one byte of data differs
    code, out, _ = run(capsys, "doctor", "--json", "--compare", str(a), str(b), "--model", MODEL)
    assert code == 0 and "weights" not in json.loads(out)["facts"]["table"]
    code, out, _ = run(capsys, "doctor", "--json", "--compare", str(a), str(b), "--model", MODEL, "--full-hash")
    assert code == 1 and "weights" in json.loads(out)["facts"]["table"]


def test_the_same_node_twice_and_mixed_kinds_are_refused(capsys, tmp_path, three):
    code, out, err = run(capsys, "doctor", "--compare", three[0], three[0])
    assert code == 2 and out == "" and "are the same node (machine-id 0000" in err
    code, out, _ = run(capsys, "doctor", "--json", "--root", three[1])
    report = tmp_path / "node1.json"
    report.write_text(out)
    code, out, err = run(capsys, "doctor", "--compare", three[0], str(report))
    assert code == 2 and "inputs of one kind" in err and "is a recorded machine" in err and "is a doctor report" in err
    code, _, err = run(capsys, "doctor", three[0], three[1])
    assert code == 2 and "only with --compare" in err


def test_cosmetic_differences_exit_0(capsys, tmp_path):
    a = node(tmp_path, 0)
    b = node(tmp_path, 1)
    (b / "proc/sys/kernel/osrelease").write_text("5.10.0-136.13.0.87.oe2203sp1.aarch64\n")
    code, out, _ = run(capsys, "doctor", "--json", "--compare", str(a), str(b))
    data = json.loads(out)
    row = next(c for c in data["checks"] if c["id"] == "drift.kernel")
    assert code == 0 and row["status"] == "warning" and "1 cosmetic difference(s)" in data["headline"]
    assert run(capsys, "doctor", "--compare", str(a), str(b), "--strict")[0] == 1


def test_hccn_conf_settings_drift_and_its_addresses_do_not(capsys, tmp_path):
    a, b = node(tmp_path, 0), node(tmp_path, 1)
    conf = (b / "etc/hccn.conf").read_text().replace("address_0=192.168.0.8", "address_0=192.168.0.9")
    (b / "etc/hccn.conf").write_text(conf)  # each node has its own addresses: not a difference
    code, out, _ = run(capsys, "doctor", "--json", "--compare", str(a), str(b))
    assert code == 0 and not [c for c in json.loads(out)["checks"] if c["category"] == "drift"]
    (b / "etc/hccn.conf").write_text(conf.replace("netmask_3=255.255.255.0", "netmask_3=255.255.0.0"))
    code, out, _ = run(capsys, "doctor", "--json", "--compare", str(a), str(b))
    row = next(c for c in json.loads(out)["checks"] if c["id"] == "drift.hccn.conf_netmask_3")
    assert code == 1 and row["status"] == "error" and "hccn_tool" in row["fix"]
    # two nodes, no majority: both values are named
    assert row["summary"] == "[breaks] hccn.conf netmask_3 differs: node0 255.255.255.0; node1 255.255.0.0"
