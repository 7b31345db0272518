"""`bundle --cluster` for real: a two-node Ray cluster on this machine (as doctor --cluster's test),
and ssh through an sshd of the test's own on 127.0.0.1 (a generated host key and user key, a
high free port). The archive must hold a folder per node, one manifest with each node's clock
offset, and one redaction map; a node that does not answer or hangs is listed as such and the
others are still collected. Every process the tests start is gone at the end."""

from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from ascendctl.cli import main
from engine.cluster import ROOT_ENV

REPO = Path(__file__).resolve().parents[2]
HOSTS = REPO / "tests" / "fixtures" / "hosts"
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def _descendants() -> list[psutil.Process]:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as t:
        return {m.name: t.extractfile(m).read() for m in t if m.isreg()}  # type: ignore[union-attr]


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_ray_cluster_one_archive_a_folder_per_node_offsets_one_map(monkeypatch, capsys, tmp_path):
    pytest.importorskip("ray", reason="the cluster extra (Ray) is not installed")
    from ray.cluster_utils import Cluster

    before = {p.pid for p in _descendants()}
    cluster = None
    out = tmp_path / "c.tar.gz"
    try:
        env = {"PYTHONPATH": str(REPO)}
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 1,
                "include_dashboard": False,
                "env_vars": {**env, ROOT_ENV: str(HOSTS / "healthy-910b")},
            },
        )
        cluster.add_node(num_cpus=1, env_vars={**env, ROOT_ENV: str(HOSTS / "vllm-ascend-5111-910b2-cann83rc2")})
        cluster.wait_for_nodes()
        # The Ray cluster the profile uses: its head is nodes.addresses[0] at nodes.ray_port (the
        # shipped Ray profile, with this machine's head in place of its documentation addresses).
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        port = int(cluster.address.rsplit(":", 1)[1])
        profile = tmp_path / "ray-2x8.yaml"
        profile.write_text(
            (REPO / "profiles" / "910b-qwen3-235b-ray-2x8.yaml")
            .read_text()
            .replace("[192.0.2.10, 192.0.2.11]", f"[127.0.0.1, 127.0.0.2]\n  ray_port: {port}")
        )
        code = main(
            ["bundle", "--cluster", "--json", "--profile", str(profile), "--out", str(out), "--node-timeout", "200"]
        )
        data = json.loads(capsys.readouterr().out)
    finally:
        if cluster is not None:
            cluster.shutdown()
        deadline = time.monotonic() + 20
        left = [p for p in _descendants() if p.pid not in before]
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = [p for p in _descendants() if p.pid not in before and p.is_running()]
        for p in left:
            p.kill()
    assert code == 0, data
    assert len(data["nodes"]) == 2 and all(n["status"] == "ok" for n in data["nodes"])
    assert all(n["clock_offset_s"] is not None and abs(n["clock_offset_s"]) < 5 for n in data["nodes"])
    files = _members(out)
    top = next(iter(files)).split("/")[0]
    manifest = json.loads(files[f"{top}/manifest.json"])
    assert manifest["kind"] == "ascendctl-cluster-bundle"
    assert manifest["profile"] == "910b-qwen3-235b-ray-2x8"
    assert all(n["reached"].startswith("ray:") for n in manifest["nodes"])
    dirs = {n["dir"] for n in manifest["nodes"]}
    assert len(dirs) == 2 and all(any(k.startswith(f"{top}/{d}/") for k in files) for d in dirs)
    # the two recorded machines differ: each node's own bundle went into its own folder
    doctors = [json.loads(files[f"{top}/{d}/doctor.json"]) for d in sorted(dirs)]
    assert doctors[0] != doctors[1]
    assert Path(str(out) + ".map.json").is_file() and data["map"]
    # triage reads the archive back as a cluster, its nodes' clocks aligned with the offsets measured
    main(["triage", "--json", "--fail-on", "never", str(out)])
    report = json.loads(capsys.readouterr().out)
    assert len(report["nodes"]) == 2 and "offsets the collector measured" in report["clock"]
    assert all(n["clock"] == "offset" for n in report["nodes"])


def _sshd(tmp: Path) -> tuple[subprocess.Popen, Path, int]:
    """An sshd of this test's own on 127.0.0.1 and an ssh config that reaches it as `good`,
    `dead` (a closed port) and `hang` (a port that accepts and never speaks)."""
    for name in ("host", "user"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / name)], check=True)
    (tmp / "authorized_keys").write_text((tmp / "user.pub").read_text())
    os.chmod(tmp / "authorized_keys", 0o600)
    port = _free_port()
    (tmp / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp / 'host'}\nAuthorizedKeysFile {tmp / 'authorized_keys'}\n"
        f"PidFile {tmp / 'sshd.pid'}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "StrictModes no\nPermitRootLogin prohibit-password\nLogLevel ERROR\nAcceptEnv TEST_NODE\n"
    )
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation folder, when started as root
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(tmp / "sshd_config")], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    host_key = (tmp / "host.pub").read_text().split()
    (tmp / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
    return proc, tmp / "ssh_config", port


def _hang_server() -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            held.append(c)  # accepted, never answered: ssh waits for a banner that never comes

    threading.Thread(target=accept, daemon=True).start()
    return srv, srv.getsockname()[1]


@pytest.mark.timeout(300)
@pytest.mark.skipif(not Path(SSHD).exists() or shutil.which("ssh") is None, reason="openssh-server / client missing")
def test_ssh_hosts_collected_in_parallel_a_dead_and_a_hung_node_listed(capsys, tmp_path):
    before = {p.pid for p in _descendants()}
    keys = tmp_path / "keys"
    keys.mkdir()
    sshd, config, port = _sshd(keys)
    hang, hang_port = _hang_server()
    dead_port = _free_port()
    me = getpass.getuser()
    common = f"  User {me}\n  IdentityFile {keys / 'user'}\n  UserKnownHostsFile {keys / 'known_hosts'}\n  IdentitiesOnly yes\n"
    config.write_text(
        f"Host good good2\n  HostName 127.0.0.1\n  Port {port}\n{common}"
        f"Host dead\n  HostName 127.0.0.1\n  Port {dead_port}\n{common}"
        f"Host hang\n  HostName 127.0.0.1\n  Port {hang_port}\n{common}"
        f"Host slow\n  HostName 127.0.0.1\n  Port {port}\n  SetEnv TEST_NODE=slow\n{common}"
    )
    # the node `slow` answers ssh, then its collection hangs
    wrapper = tmp_path / "remote-ascendctl"
    wrapper.write_text(
        f'#!/bin/sh\n[ "$TEST_NODE" = slow ] && echo $$ > {tmp_path / "slow.pid"} && exec sleep 600\nexec env PYTHONPATH={REPO} {sys.executable} -m ascendctl "$@"\n'
    )
    wrapper.chmod(0o755)
    hosts = tmp_path / "hosts"
    hosts.write_text(
        "node-a good\nnode-b good2   # the same machine under a second alias\n"
        "node-dead dead\nnode-hang hang\nnode-slow slow\n"
    )
    out = tmp_path / "c.tar.gz"
    remote = str(wrapper)
    try:
        started = time.monotonic()
        code = main(
            [
                "bundle",
                "--cluster",
                "--json",
                "--hosts",
                str(hosts),
                "--ssh-config",
                str(config),
                "--out",
                str(out),
                "--remote-command",
                remote,
                "--node-timeout",
                "150",
                "--since",
                "1m",
            ]
        )
        took = time.monotonic() - started
        data = json.loads(capsys.readouterr().out)
    finally:
        sshd.terminate()
        try:
            sshd.wait(timeout=10)
        except subprocess.TimeoutExpired:
            sshd.kill()
        hang.close()
        slow = tmp_path / "slow.pid"  # the hung collection runs under sshd, not under this test
        if slow.exists():
            try:
                os.kill(int(slow.read_text()), 9)
            except (OSError, ValueError):
                pass
        for p in [p for p in _descendants() if p.pid not in before]:
            p.kill()
    status = {n["name"]: n for n in data["nodes"]}
    assert code == 1  # three nodes not collected: said, after the archive was written
    assert status["node-a"]["status"] == "ok" and status["node-b"]["status"] == "ok"
    assert status["node-dead"]["status"] == "no answer"
    assert status["node-hang"]["status"] == "no answer"  # accepts TCP, never speaks ssh
    assert status["node-slow"]["status"] == "timed out"  # answers ssh, its collection hangs
    # in parallel: the nodes' times overlap (one after the other, it would take their sum), and
    # the whole ends with the hung node's limit (150 s) plus writing the archive
    assert took < sum(n["duration_s"] for n in data["nodes"]), (took, data["nodes"])
    assert took < 150 + 90
    for n in ("node-a", "node-b"):
        assert status[n]["clock_offset_s"] is not None and abs(status[n]["clock_offset_s"]) < 2
    files = _members(out)
    top = next(iter(files)).split("/")[0]
    assert any(k.startswith(f"{top}/nodes/node-a/") for k in files)
    assert any(k.startswith(f"{top}/nodes/node-b/") for k in files)
    # one map: this machine's host name has one placeholder, the same in both nodes' files
    mapping = json.loads(Path(str(out) + ".map.json").read_text())["mapping"]
    hostname = socket.gethostname()
    placeholders = [k for k, v in mapping.get("host", {}).items() if v == hostname]
    assert len(placeholders) == 1
    for n in ("node-a", "node-b"):  # the same placeholder in both nodes' files, the name in neither
        text = b"".join(v for k, v in files.items() if k.startswith(f"{top}/nodes/{n}/"))
        assert placeholders[0].encode() in text
        assert re.search(rb"(?<![\w.-])" + re.escape(hostname.encode()) + rb"(?![\w-])", text) is None
    assert not [p for p in _descendants() if p.pid not in before and p.is_running()]


@pytest.mark.timeout(300)
@pytest.mark.skipif(not Path(SSHD).exists() or shutil.which("ssh") is None, reason="openssh-server / client missing")
def test_the_profiles_nodes_are_the_hosts_reached_over_ssh(capsys, tmp_path):
    # A data-parallel profile across two hosts, with no --hosts: its nodes.addresses are the hosts,
    # reached through the user's ssh config (here: the first is this test's sshd, the second a
    # closed port), named node0, node1 in the order of the profile.
    before = {p.pid for p in _descendants()}
    keys = tmp_path / "keys"
    keys.mkdir()
    sshd, config, port = _sshd(keys)
    me = getpass.getuser()
    common = f"  User {me}\n  IdentityFile {keys / 'user'}\n  UserKnownHostsFile {keys / 'known_hosts'}\n  IdentitiesOnly yes\n"
    config.write_text(
        f"Host 192.0.2.10\n  HostName 127.0.0.1\n  Port {port}\n  HostKeyAlias [127.0.0.1]:{port}\n{common}"
        f"Host 192.0.2.11\n  HostName 127.0.0.1\n  Port {_free_port()}\n  ConnectTimeout 5\n{common}"
    )
    wrapper = tmp_path / "remote-ascendctl"
    wrapper.write_text(f'#!/bin/sh\nexec env PYTHONPATH={REPO} {sys.executable} -m ascendctl "$@"\n')
    wrapper.chmod(0o755)
    profile = tmp_path / "dp-2x8.yaml"  # the shipped 2-host profile, documentation addresses kept
    profile.write_text((REPO / "profiles" / "910b-deepseek-v3.1-w8a8-2x8.yaml").read_text())
    out = tmp_path / "c.tar.gz"
    try:
        code = main(
            [
                "bundle",
                "--cluster",
                "--json",
                "--profile",
                str(profile),
                "--ssh-config",
                str(config),
                "--out",
                str(out),
                "--remote-command",
                str(wrapper),
                "--node-timeout",
                "120",
                "--since",
                "1m",
            ]
        )
        captured = capsys.readouterr()
    finally:
        sshd.terminate()
        try:
            sshd.wait(timeout=10)
        except subprocess.TimeoutExpired:
            sshd.kill()
        for p in [p for p in _descendants() if p.pid not in before]:
            p.kill()
    data = json.loads(captured.out)
    status = {n["name"]: n for n in data["nodes"]}
    assert code == 1, captured.err  # one node not collected: said after the archive was written
    assert set(status) == {"node0", "node1"}
    assert status["node0"]["status"] == "ok" and status["node0"]["clock_offset_s"] is not None
    assert status["node1"]["status"] == "no answer"
    assert "1 of 2 node(s) not collected: node1 no answer" in captured.err
    files = _members(out)
    top = next(iter(files)).split("/")[0]
    assert any(k.startswith(f"{top}/nodes/node0/") for k in files)
    manifest = json.loads(files[f"{top}/manifest.json"])
    assert manifest["profile"] == "910b-deepseek-v3.1-w8a8-2x8"
    assert not [p for p in _descendants() if p.pid not in before and p.is_running()]


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_a_ray_node_whose_collection_hangs_is_listed_and_the_other_is_collected(monkeypatch, capsys, tmp_path):
    # The second node's npu-smi never answers (a driver that stopped): its collection outlives
    # --node-timeout, it is listed as timed out, and the head's bundle is in the archive anyway.
    pytest.importorskip("ray", reason="the cluster extra (Ray) is not installed")
    from ray.cluster_utils import Cluster

    stuck = tmp_path / "bin"
    stuck.mkdir()
    pids = tmp_path / "npu-smi.pids"
    (stuck / "npu-smi").write_text(f"#!/bin/sh\necho $$ >> {pids}\nexec sleep 600\n")
    (stuck / "npu-smi").chmod(0o755)
    before = {p.pid for p in _descendants()}
    cluster = None
    out = tmp_path / "c.tar.gz"
    try:
        env = {"PYTHONPATH": str(REPO)}
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 1,
                "include_dashboard": False,
                "env_vars": {**env, ROOT_ENV: str(HOSTS / "healthy-910b")},
            },
        )
        cluster.add_node(num_cpus=1, env_vars={**env, "PATH": f"{stuck}:{os.environ['PATH']}"})
        cluster.wait_for_nodes()
        monkeypatch.setenv("RAY_ADDRESS", cluster.address)
        started = time.monotonic()
        code = main(["bundle", "--cluster", "--json", "--out", str(out), "--node-timeout", "20", "--timeout", "120"])
        took = time.monotonic() - started
        captured = capsys.readouterr()
    finally:
        if cluster is not None:
            cluster.shutdown()
        for pid in pids.read_text().split() if pids.exists() else ():  # the hung npu-smi runs on after its worker
            try:
                os.kill(int(pid), 9)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 20
        left = [p for p in _descendants() if p.pid not in before]
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = [p for p in _descendants() if p.pid not in before and p.is_running()]
        for p in left:
            p.kill()
    data = json.loads(captured.out)
    assert code == 1, data
    status = sorted(n["status"] for n in data["nodes"])
    assert status == ["ok", "timed out"], data["nodes"]
    hung = next(n for n in data["nodes"] if n["status"] == "timed out")
    assert "no bundle within 20 s" in hung["reason"] and "1 of 2 node(s) not collected" in captured.err
    assert took < 20 + 60  # the node's limit, not the hung command's
    assert pids.exists()  # it did hang where the test made it hang
    files = _members(out)
    top = next(iter(files)).split("/")[0]
    ok = next(n for n in json.loads(files[f"{top}/manifest.json"])["nodes"] if n["status"] == "ok")
    assert any(k.startswith(f"{top}/{ok['dir']}/") for k in files)
