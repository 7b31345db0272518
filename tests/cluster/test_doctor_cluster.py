"""`doctor --cluster` against a real two-node Ray cluster on this machine (ray.cluster_utils: two
raylets, one CPU each). Each node reports on a different recorded machine through
ASCENDCTL_CLUSTER_ROOT, set in that raylet's environment, so the nodes' CANN differs and the skew
must be reported naming the node. Every process the cluster started is gone at the end."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil
import pytest

from ascendctl.cli import main
from engine.cluster import ROOT_ENV

ray = pytest.importorskip("ray", reason="the cluster extra (Ray) is not installed")
from ray.cluster_utils import Cluster  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
HOSTS = REPO / "tests" / "fixtures" / "hosts"

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]


def _descendants() -> list[psutil.Process]:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def test_cluster_reports_cann_skew_naming_the_node(monkeypatch, capsys):
    before = {p.pid for p in _descendants()}
    cluster = None
    try:
        node_env = {"PYTHONPATH": str(REPO)}
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 1,
                "include_dashboard": False,
                "env_vars": {**node_env, ROOT_ENV: str(HOSTS / "healthy-910b")},
            },
        )
        cluster.add_node(num_cpus=1, env_vars={**node_env, ROOT_ENV: str(HOSTS / "vllm-ascend-5111-910b2-cann83rc2")})
        cluster.wait_for_nodes()
        monkeypatch.setenv("RAY_ADDRESS", cluster.address)

        code = main(["doctor", "--cluster", "--compare", "--json"])
        data = json.loads(capsys.readouterr().out)
    finally:
        if cluster is not None:
            cluster.shutdown()
        # Nothing the cluster started may outlive the test.
        deadline = time.monotonic() + 20
        left = [p for p in _descendants() if p.pid not in before]
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = [p for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        for p in left:
            p.kill()
    assert not left, f"processes left running: {[p.pid for p in left]}"

    assert code == 1
    assert sorted(data["facts"]["hosts"]) == ["healthy-910b", "vllm-ascend-5111-910b2-cann83rc2"]
    assert data["facts"]["table"]["CANN"] == {"healthy-910b": "8.2.RC1", "vllm-ascend-5111-910b2-cann83rc2": "8.3.RC2"}
    cann = next(c for c in data["checks"] if c["id"] == "skew.cann")
    assert cann["status"] == "error"
    assert "8.3.RC2" in cann["summary"] and "8.2.RC1" in cann["summary"]
    # Each node ran its own doctor and netcheck, on the node it was pinned to.
    assert len({r["facts"]["ray_node"]["id"] for r in data["reports"]}) == 2
    assert all("netcheck" in r["facts"] for r in data["reports"])
    # --compare: each node also sent what drifts beyond the versions (variables, perf, hccn.conf)
    assert {r["facts"]["drift"]["node"]["host"] for r in data["reports"]} == set(data["facts"]["hosts"])
    atb = next(c for c in data["checks"] if c["id"] == "drift.env_atb_home_path")
    assert atb["status"] == "error" and "cxx_abi_1" in atb["summary"] and "cxx_abi_0" in atb["summary"]
    assert "token-abc123" not in json.dumps(data)  # healthy-910b's VLLM_API_KEY: compared masked, never sent


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_ray_address_is_said_at_once(monkeypatch, capsys):
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{_free_port()}")  # nothing listens there
    started = time.monotonic()
    assert main(["doctor", "--cluster"]) == 3
    assert time.monotonic() - started < 15
    err = capsys.readouterr().err
    assert "cannot reach the Ray cluster at 127.0.0.1:" in err and "fix:" in err
    assert not ray.is_initialized()


def test_the_password_of_a_ray_address_is_never_quoted(monkeypatch, capsys):
    monkeypatch.setenv("RAY_ADDRESS", f"http://alice:S3cretPW@127.0.0.1:{_free_port()}")
    assert main(["doctor", "--cluster"]) == 3
    captured = capsys.readouterr()
    assert "S3cretPW" not in captured.err + captured.out
    assert "alice:****@127.0.0.1" in captured.err


def test_a_head_that_accepts_but_never_answers_costs_the_connect_deadline(tmp_path):
    """A port that takes the connection and says nothing (a stuck head, another service): Ray's
    client would retry for ever; doctor gives up after its deadline (3 s here) with exit 3."""
    import socket
    import subprocess
    import sys

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = silent.getsockname()[1]
        code = (
            "import engine.cluster as c; c.CONNECT_TIMEOUT_S = 3; from ascendctl.cli import main; "
            "raise SystemExit(main(['doctor', '--cluster']))"
        )
        env = {**__import__("os").environ, "RAY_ADDRESS": f"127.0.0.1:{port}", "PYTHONPATH": str(REPO)}
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=90, cwd=tmp_path
        )
        took = time.monotonic() - started
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "cannot reach the Ray cluster at 127.0.0.1:" in proc.stderr and "no answer within 3 s" in proc.stderr
    assert took < 60
