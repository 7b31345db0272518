"""Cluster triage of a 16-node incident: time, and memory against the number of nodes.

Builds N node folders from the recorded multi-rank failure (tests/fixtures/cluster/peer_named:
real EI0002 / lost-heartbeat lines, ranks renumbered so that node K holds ranks 2K and 2K+1 and
rank 11 on node5 loses its device), each padded with real plog INFO lines to --lines lines, packs
them as a `bundle --cluster` archive (a manifest with each node's clock offset, a folder per node),
then:

    ascendctl triage --json CLUSTER.tar.gz      (the cluster report: unpacking included)
    ascendctl triage --json DIR0 ... DIR15      (baseline: one triage of the same files)

in fresh processes, and prints wall time, peak memory (ru_maxrss of the child) and the ratio to
the baseline; then the cluster triage's peak memory at 2, 4, 8 and 16 nodes.

Goals: 16 nodes in under 5 s; cluster triage (unpacking the archive to disk and a triage per node
included) within 3x of the baseline; peak memory at 16
nodes within 1.25x of that at 2 nodes (flat: one node is read at a time).

    .venv/bin/python benchmarks/bench_triage_cluster.py               # 16 nodes x 20,000 lines
    .venv/bin/python benchmarks/bench_triage_cluster.py --lines 5000  # quick
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASE = ROOT / "tests" / "fixtures" / "cluster" / "peer_named"
ROOT_RANK = 11
INFO = "[INFO] HCCL({pid},python3):2026-05-01-10:{mm:02d}:{ss:02d}.{ms:03d}.200 [hcom.cc:194][hccl-{pid}-0-1746096000-hccl_world_group][{rank}]hcom init by file success,take time [248118]us\n"


def build(top: Path, nodes: int, lines: int) -> list[Path]:
    waiting = (CASE / "node0" / "plog" / "plog-4100_20260501103000000.log").read_text()
    failing = (CASE / "node2" / "plog" / "plog-4102_20260501103000000.log").read_text()
    wait_block = waiting[waiting.index("[ERROR]") :]
    wait_block = wait_block[: wait_block.index("[ERROR]", 10)]  # one rank's EI0002 report
    fail_block = failing[failing.index("[ERROR]") :]
    fail_block = fail_block[fail_block.index("RankID:5") - 60 :]
    fail_block = fail_block[fail_block.index("[ERROR]") :]  # rank 5's lost heartbeat
    dirs = []
    for k in range(nodes):
        d = top / f"node{k}"
        d.mkdir(parents=True)
        with open(d / "plog.log", "w") as f:
            for i in range(lines):
                f.write(INFO.format(pid=4100 + k, mm=30 + i // 60000 % 28, ss=i // 1000 % 60, ms=i % 1000, rank=2 * k))
            for r in (2 * k, 2 * k + 1):
                if r == ROOT_RANK:
                    f.write(re.sub(r"RankID:\d+", f"RankID:{r}", fail_block))
                else:
                    block = re.sub(r"RankID:\d+", f"RankID:{r}", wait_block)
                    f.write(re.sub(r"remote rank: ?\[\d+\]", f"remote rank: [{ROOT_RANK}]", block))
        dirs.append(d)
    return dirs


def pack(top: Path, dirs: list[Path]) -> Path:
    """The node folders as a cluster archive, as `bundle --cluster` writes it."""
    import tarfile

    nodes = [
        {"name": d.name, "dir": f"nodes/{d.name}", "status": "ok", "clock_offset_s": 0.25 * k, "addresses": []}
        for k, d in enumerate(dirs)
    ]
    manifest = {
        "schema_version": 1,
        "kind": "ascendctl-cluster-bundle",
        "profile": "bench",
        "run": "bench",
        "nodes": nodes,
    }
    (top / "manifest.json").write_text(json.dumps(manifest))
    out = top / "cluster.tar.gz"
    with tarfile.open(out, "w:gz", compresslevel=1) as tar:
        tar.add(top / "manifest.json", arcname="cluster/manifest.json")
        for d in dirs:
            tar.add(d, arcname=f"cluster/nodes/{d.name}")
    return out


def timed(args: list[str]) -> tuple[float, int, dict]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "ascendctl", "triage", "--json", *args], capture_output=True, env=env)
    wall = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if p.returncode not in (0, 1):
        raise SystemExit(f"triage failed ({p.returncode}): {p.stderr.decode()[-500:]}")
    return wall, max(rss, before), json.loads(p.stdout)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--lines", type=int, default=20_000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        dirs = build(Path(tmp), a.nodes, a.lines)
        size = sum(p.stat().st_size for d in dirs for p in d.iterdir())
        named = [x for k, d in enumerate(dirs) for x in ("--node", f"node{k}={d}")]
        archive = pack(Path(tmp), dirs)
        base_s, _, _ = timed([str(d) for d in dirs])
        wall, _, data = timed([str(archive)])
        root = data["first_to_fail"]["node"]
        ok = root == "node5"
        print(
            f"{a.nodes} nodes, {size / 1e6:.1f} MB of logs ({archive.stat().st_size / 1e6:.1f} MB as a cluster archive): cluster triage {wall:.2f} s, baseline {base_s:.2f} s, ratio {wall / base_s:.2f}"
        )
        print(f"first to fail: {root} ({'right' if ok else 'WRONG'})")
        # Memory against the number of nodes (--node folders): each run in its own process (ru_maxrss is a high-water mark).
        rss = {}
        for n in (2, 4, 8, a.nodes):
            code = (
                "import resource,sys; sys.argv=['ascendctl','triage','--json',*sys.argv[1:]];"
                "from ascendctl.cli import main\ntry: main(sys.argv[1:])\nexcept SystemExit: pass\n"
                "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)"
            )
            p = subprocess.run(
                [sys.executable, "-c", code, *named[: 2 * n]],
                capture_output=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            rss[n] = int(p.stderr.decode().strip().splitlines()[-1]) / 1024
        print("peak memory by nodes: " + ", ".join(f"{n}: {m:.0f} MB" for n, m in rss.items()))
        flat = rss[a.nodes] / rss[2]
        print(f"memory ratio {a.nodes} / 2 nodes: {flat:.2f}")
        passed = ok and wall < 5.0 and wall / base_s <= 3.0 and flat <= 1.25
        print("goals (under 5 s, <= 3x baseline, memory <= 1.25x):", "PASS" if passed else "FAIL")
        return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
