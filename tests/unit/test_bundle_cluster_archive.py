"""The archive `bundle --cluster` writes, from nodes' bundles already collected: a folder per
node, one manifest, one map for every node; a node whose bundle is hostile or missing is listed
and the others kept; triage reads the archive back with the measured offsets."""

from __future__ import annotations

import io
import json
import tarfile

from helpers import FIXTURES

from ascendctl.cli import main
from engine.cluster.bundle import ClusterOptions, NodeResult, measure_offset, write_cluster_archive

CASES = FIXTURES / "cluster"


def _bundle(top: str, files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.type, info.linkname = tarfile.SYMTYPE, target
            t.addfile(info)
    return buf.getvalue()


def _node_bundle(log: bytes, hostname: str, ip: str) -> bytes:
    manifest = {"schema_version": 1, "kind": "ascendctl-bundle", "logs": ["run/engine.log"]}
    env = json.dumps({"HOSTNAME": hostname}).encode()
    line = f"INFO 05-01 10:00:00 [api_server.py:1] listening on {ip}:8000 as {hostname}\n".encode()
    return _bundle(
        "b",
        {
            "manifest.json": json.dumps(manifest).encode(),
            "env.json": env,
            "etc/hostname": hostname.encode() + b"\n",
            "run/engine.log": line + log,
        },
    )


def test_one_map_for_every_node_and_triage_reads_it_back(tmp_path, capsys):
    logs = {n: (CASES / "two_failures" / n / "engine.log").read_bytes() for n in ("node0", "node1")}
    peer_line = b"peer gpu-a.corp.example at 10.1.2.3 is down\n"
    results = [
        NodeResult(
            "gpu-a.corp.example",
            "ssh:gpu-a",
            "ok",
            archive=_node_bundle(logs["node0"], "gpu-a.corp.example", "10.1.2.3"),
            addresses=["10.1.2.3"],
            offset_s=0.0,
            offset_error_s=0.001,
            host="gpu-a.corp.example",
        ),
        NodeResult(
            "gpu-b.corp.example",
            "ssh:gpu-b",
            "ok",
            archive=_node_bundle(logs["node1"] + peer_line, "gpu-b.corp.example", "10.1.2.4"),
            addresses=["10.1.2.4"],
            offset_s=-2.5,
            offset_error_s=0.001,
            host="gpu-b.corp.example",
        ),
        NodeResult("gpu-c", "ssh:gpu-c", "timed out", reason="no bundle within 300 s", named=True),
        NodeResult("gpu-d", "ssh:gpu-d", "ok", archive=_bundle("b", {"x": b"1", "../../evil.log": b"x"}), named=True),
    ]
    out = tmp_path / "c.tar.gz"
    res = write_cluster_archive(results, ClusterOptions(out=out))
    with tarfile.open(out) as t:
        files = {m.name: t.extractfile(m).read() for m in t if m.isreg()}
    text = b"\n".join(files.values())
    assert b"gpu-a" not in text and b"gpu-b" not in text and b"10.1.2.3" not in text
    mapping = json.loads((tmp_path / "c.tar.gz.map.json").read_text())["mapping"]
    ph_a = next(k for k, v in mapping["host"].items() if v == "gpu-a.corp.example")
    ip_a = next(k for k, v in mapping["ip"].items() if v == "10.1.2.3")
    node_b = [
        v for k, v in files.items() if "/nodes/" in k and k.endswith("engine.log") and ph_a.encode() not in k.encode()
    ]
    # node b's log names node a: with the same placeholders node a's own files have
    assert any(ph_a.encode() in v and ip_a.encode() in v for v in node_b)
    by = {n["name"]: n for n in res.nodes}
    assert by["gpu-c"]["status"] == "timed out"
    assert by["gpu-d"]["status"] == "failed" and "unpacked safely" in by["gpu-d"]["reason"]
    assert not (tmp_path.parent / "evil.log").exists() and not any("evil" in k for k in files)
    manifest = json.loads(next(v for k, v in files.items() if k.endswith("/manifest.json") and k.count("/") == 1))
    assert [n["clock_offset_s"] for n in manifest["nodes"]][:2] == [0.0, -2.5]

    code = main(["triage", "--json", str(out)])
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    assert "offsets the collector measured" in data["clock"]
    statuses = {n["status"] for n in data["nodes"]}
    assert {"timed out", "failed"} <= statuses  # the nodes that were not collected are listed
    assert data["first_to_fail"]["event"]["issue"] == "npu-heartbeat-lost"


def test_offset_from_the_shortest_round_trip():
    import time

    skew = 42.0
    off, err = measure_offset(lambda: time.time() + skew)
    assert abs(off - skew) < 0.05 and err < 0.05
