"""Cluster triage (engine.incident) on real multi-rank failures arranged per node
(tests/fixtures/cluster: PROVENANCE.md says where each line comes from, EXPECTED.md the answers
written down before the code ran)."""

from __future__ import annotations

import json
import shutil

from helpers import FIXTURES

from engine.incident import triage_cluster
from engine.incident.analyse import to_seconds

CASES = FIXTURES / "cluster"


def nodes(case: str, n: int, sub: str = "") -> list[tuple[str, str]]:
    return [(f"node{i}", str(CASES / case / sub / f"node{i}")) for i in range(n)]


def test_the_rank_every_timeout_names_is_the_first_to_fail():
    r = triage_cluster(named=nodes("peer_named", 4))
    root = r.roots[0]
    assert root.node == "node2" and root.event is not None and root.event.issue == "npu-heartbeat-lost"
    assert len(r.roots) == 1
    assert set(root.blamed_by) == {"node0", "node1", "node3"}
    assert root.ranks == (5,)
    assert "rank 5" in root.why and "40 s before the first timeout elsewhere" in root.why
    # every waiting node is a link from node2 in the propagation chain, named by the rank it waited for
    across = {(c.cause_node, c.effect_node, c.via) for c in r.chain if c.cause_node != c.effect_node}
    assert {(c, e) for c, e, _ in across} == {("node2", "node0"), ("node2", "node1"), ("node2", "node3")}
    assert all("rank 5" in via for _, _, via in across)
    # within node2: the lost heartbeat explains the device loss (the rules' `explains`)
    assert any(c.cause_node == c.effect_node == "node2" and c.via == "explains" for c in r.chain)
    n2 = next(n for n in r.nodes if n.name == "node2")
    assert n2.ranks == (4, 5)
    assert "no clock offsets known" in r.clock


def test_recorded_clock_offsets_put_the_skewed_node_first():
    r = triage_cluster([str(CASES / "clock_skew")])
    assert "offsets the collector measured" in r.clock
    assert r.roots[0].node == "node2"
    assert "node0 looks first" in r.roots[0].why  # the raw stamps would have named node0
    # the timeline is in aligned order: node2's event (11:00:51 on a clock 120 s ahead) before node0's 10:59:21
    causes = [e.node for e in r.timeline if e.role == "cause"]
    assert causes.index("node2") < causes.index("node0")


def test_without_offsets_the_report_says_it_compared_the_printed_stamps():
    r = triage_cluster(named=nodes("clock_skew", 4, "nodes"))
    assert "as printed" in r.clock
    assert r.roots[0].node == "node0"  # what the raw stamps say: the reason offsets are recorded


def test_a_node_that_logged_nothing_is_named_by_the_peers_that_waited_for_it():
    r = triage_cluster([str(CASES / "silent")])
    root = r.roots[0]
    assert root.node == "worker-0" and root.event is None and root.in_inputs
    assert "192.168.2.199" in root.why and "16666" in root.why and "never started listening" in root.why
    w1 = next(n for n in r.nodes if n.name == "worker-1")
    assert [p.node for p in w1.waits_on] == ["worker-0"]
    assert next(n for n in r.nodes if n.name == "worker-0").status == "no logs"


def test_a_peer_no_input_holds_is_still_named():
    r = triage_cluster(named=[("worker-1", str(CASES / "silent" / "nodes" / "worker-1"))])
    assert r.roots[0].node == "rank 8 at 192.168.2.199 port 16666" and not r.roots[0].in_inputs


def test_a_chain_of_waits_ends_at_the_node_that_failed_on_its_own():
    r = triage_cluster(named=nodes("chain", 3))
    assert [x.node for x in r.roots] == ["node0"]
    assert r.roots[0].event.issue == "aicpu-exception"
    links = [(c.cause_node, c.effect_node) for c in r.chain if c.cause_node != c.effect_node]
    assert links == [("node0", "node1"), ("node1", "node2")]


def test_two_independent_failures_are_two_roots_first_one_first():
    r = triage_cluster(named=nodes("two_failures", 4))
    assert [x.node for x in r.roots] == ["node0", "node2"]
    assert set(r.roots[0].affected) == {"node0", "node1"} and set(r.roots[1].affected) == {"node2", "node3"}
    assert "independent of node0" in r.roots[1].why


def test_a_node_name_given_twice_keeps_the_first_and_says_so():
    r = triage_cluster(named=[("a", str(CASES / "chain" / "node0")), ("a", str(CASES / "chain" / "node1"))])
    assert [n.name for n in r.nodes] == ["a"]
    assert any("node a: given twice" in p for p in r.problems)
    assert r.roots[0].event.issue == "aicpu-exception"  # the first one's logs


def test_a_bundle_of_another_cluster_is_left_out(tmp_path):
    other = tmp_path / "other"
    shutil.copytree(CASES / "silent", other)
    m = json.loads((other / "manifest.json").read_text())
    m["run"] = "another-run"
    m["nodes"] = [dict(x, name=x["name"] + "-b") for x in m["nodes"]]
    (other / "manifest.json").write_text(json.dumps(m))
    r = triage_cluster([str(CASES / "clock_skew"), str(other)])
    assert {n.name for n in r.nodes} == {"node0", "node1", "node2", "node3"}
    assert any("another cluster" in p and "another-run" in p for p in r.problems)
    assert r.roots[0].node == "node2"  # nothing lost from the cluster that was read


def test_stamps_as_seconds():
    assert abs(to_seconds("2026-05-01 10:58:51.789768", 2000) - to_seconds("05-01 10:58:51", 2026) - 0.789768) < 1e-6
    assert to_seconds("not a stamp", 2026) is None


def test_a_node_the_collector_could_not_reach_is_named_as_not_collected(tmp_path):
    case = tmp_path / "silent"
    shutil.copytree(CASES / "silent", case)
    m = json.loads((case / "manifest.json").read_text())
    m["nodes"][0].update(status="timed out", dir=None)
    (case / "manifest.json").write_text(json.dumps(m))
    r = triage_cluster([str(case)])
    assert r.roots[0].node == "worker-0"
    assert "not collected (timed out)" in r.roots[0].why
    assert next(n for n in r.nodes if n.name == "worker-0").status == "timed out"
