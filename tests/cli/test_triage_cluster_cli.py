"""`ascendctl triage` across nodes as a user runs it: the table, --json, --html, exit codes, and
hostile input (an archive with path traversal or a link out of it, a node given twice)."""

from __future__ import annotations

import io
import json
import shutil
import tarfile

from helpers import FIXTURES

from ascendctl.cli import main

CASES = FIXTURES / "cluster"


def _nodes(case: str, n: int) -> list[str]:
    out = []
    for i in range(n):
        out += ["--node", f"node{i}={CASES / case / f'node{i}'}"]
    return out


def test_table_names_the_first_node_why_and_the_chain(capsys):
    code = main(["triage", *_nodes("chain", 3)])
    out, err = capsys.readouterr()
    assert code == 1
    assert "First to fail: node0 (rank 0) aicpu-exception" in out
    assert "node0 aicpu-exception -> node1 hccl-notify-wait-task-failed" in out
    assert "node1 hccl-notify-wait-task-failed -> node2" in out
    assert "the cluster failed first at node0" in err


def test_nodes_that_waited_on_the_same_rank_read_as_one_propagation_line(capsys):
    code = main(["triage", *_nodes("peer_named", 4)])
    out = capsys.readouterr().out
    assert code == 1
    lines = [line for line in out.splitlines() if "->" in line]
    # three nodes' EI0002 named rank 5: one line for the three, not one each (16 nodes: one, not 15)
    assert [line.split("   via ")[0].strip() for line in lines] == [
        "node2 npu-heartbeat-lost -> node2 npu-device-absent",
        "node2 npu-heartbeat-lost -> node0, node1, node3 hccl-notify-wait-task-failed",
    ]
    main(["triage", "--json", *_nodes("peer_named", 4)])
    assert len(json.loads(capsys.readouterr().out)["chain"]) == 4  # scripts still get every link


def test_lang_zh_across_nodes_reads_in_chinese(capsys):
    from engine import i18n

    try:
        code = main(["triage", "--lang", "zh", *_nodes("chain", 3)])
    finally:
        i18n.set_language(None)  # the choice is the process's: the next test starts from none
    out, err = capsys.readouterr()
    assert code == 1 and "最先失败：node0（rank 0） aicpu-exception 时间 2026-05-01 10:35:31" in out
    # the verdict: who waited on it, the rule's Chinese title, how far ahead of the timeouts
    assert "有 1 个节点的超时指明在等待它（node1: rank 0 (ei0002-remote-rank)）" in out
    assert (
        "它自己的日志出现了 aicpu-exception（AI CPU kernel 失败）" in out and "比其他节点的第一次超时早 1800 秒" in out
    )
    assert "传播链" in out and "依据 rank 0 (ei0002-remote-rank)" in out and "自身故障" in out
    assert "错误：集群最先在 node0 出现故障（aicpu-exception）" in err
    for english in ("First to fail", "why", "Propagation", "own failure", "timeouts of", "in English"):
        assert english not in out + err


def test_json_for_scripts(capsys):
    code = main(["triage", "--json", *_nodes("two_failures", 4)])
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    assert data["first_to_fail"]["node"] == "node0"
    assert [r["node"] for r in data["roots"]] == ["node0", "node2"]
    assert {n["name"] for n in data["nodes"]} == {"node0", "node1", "node2", "node3"}
    assert data["timeline"][0]["node"] == "node0" and data["timeline"][0]["at"] is not None


def test_html_timeline_one_lane_per_node_root_marked(capsys, tmp_path):
    page = tmp_path / "t.html"
    code = main(["triage", str(CASES / "clock_skew"), "--html", str(page)])
    capsys.readouterr()
    assert code == 1
    text = page.read_text()
    assert "first to fail: npu-heartbeat-lost" in text
    for n in ("node0", "node1", "node2", "node3"):
        assert f'"{n}"' in text
    assert "cdn.plot.ly" not in text.split("<script", 2)[1][:200]  # the script is embedded: opens offline


def _tar(path, members):
    with tarfile.open(path, "w:gz") as t:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, data
                t.addfile(info)
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
                t.addfile(info)
            else:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))


def test_an_archive_with_traversal_and_a_link_out_is_read_without_them(capsys, tmp_path):
    good = (CASES / "chain" / "node0" / "engine.log").read_bytes()
    manifest = {
        "schema_version": 1,
        "kind": "ascendctl-cluster-bundle",
        "profile": "p",
        "run": "r",
        "nodes": [
            {"name": "node0", "dir": "nodes/node0", "status": "ok", "clock_offset_s": 0.0},
            {"name": "node1", "dir": "../../outside", "status": "ok"},
            {"name": "node2", "dir": "nodes/node2", "status": "no answer"},
        ],
    }
    secret = tmp_path / "secret.log"
    secret.write_text("[ERROR] 2026-05-01-10:00:00 (PID:1, Device:0, RankID:9) ERR00100 PTA call acl api failed.\n")
    arc = tmp_path / "c.tar.gz"
    _tar(
        arc,
        [
            ("c/manifest.json", json.dumps(manifest).encode(), "file"),
            ("c/nodes/node0/engine.log", good, "file"),
            ("c/nodes/node0/escape.log", str(secret), "link"),  # absolute: kept only as a link inside
            ("c/nodes/node0/up.log", "../../../../../" + str(secret), "link"),  # relative, leaves the folder
            ("c/../../evil.log", b"x\n", "file"),
        ],
    )
    code = main(["triage", "--json", str(arc)])
    data = json.loads(capsys.readouterr().out)
    assert code == 2  # bad input, said after the report
    assert data["first_to_fail"]["node"] == "node0"
    problems = "\n".join(data["problems"])
    assert "evil.log" in problems and "up.log: a link out of the archive" in problems
    assert "symbolic link(s) not followed" in problems and "outside the archive" in problems
    assert not (tmp_path.parent / "evil.log").exists()
    assert all(e["node"] != "node1" or e["issue"] for e in data["timeline"])
    assert 9 not in next(n for n in data["nodes"] if n["name"] == "node0")["ranks"]  # the secret was never read
    assert next(n for n in data["nodes"] if n["name"] == "node2")["status"] == "no answer"


def test_a_symlink_in_a_node_folder_is_not_followed(capsys, tmp_path):
    d = tmp_path / "n0"
    d.mkdir()
    (d / "engine.log").write_bytes((CASES / "chain" / "node0" / "engine.log").read_bytes())
    outside = tmp_path / "outside.log"
    outside.write_text("[ERROR] 2026-05-01-09:00:00 (PID:1, Device:0, RankID:9) ERR00100 PTA call acl api failed.\n")
    (d / "link.log").symlink_to(outside)
    code = main(["triage", "--json", "--node", f"n0={d}"])
    data = json.loads(capsys.readouterr().out)
    assert code == 2
    assert any("symbolic link" in p for p in data["problems"])
    assert data["nodes"][0]["ranks"] == [0]


def test_bad_node_spec_is_a_usage_error(capsys):
    assert main(["triage", "--node", "justaname"]) == 2
    assert "NAME=DIR" in capsys.readouterr().err


def _single_bundle(top, log):
    (top / ".recorded").mkdir(parents=True)
    (top / "run").mkdir()
    (top / "run" / "engine.log").write_bytes(log.read_bytes())
    (top / "manifest.json").write_text(
        json.dumps({"schema_version": 1, "kind": "ascendctl-bundle", "logs": ["run/engine.log"]})
    )
    return top


def test_several_single_node_bundles_are_triaged_as_one_cluster(capsys, tmp_path):
    a = _single_bundle(tmp_path / "bundle-a", CASES / "chain" / "node0" / "engine.log")
    b = _single_bundle(tmp_path / "bundle-b", CASES / "chain" / "node1" / "engine.log")
    code = main(["triage", "--json", str(a), str(b)])
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    assert {n["name"] for n in data["nodes"]} == {"bundle-a", "bundle-b"}
    assert data["first_to_fail"]["node"] == "bundle-a"
    assert [(c["cause_node"], c["effect_node"]) for c in data["chain"]] == [("bundle-a", "bundle-b")]


def test_a_node_that_shows_only_a_symptom_is_likely_one_of_its_causes_as_triage_says(capsys, tmp_path):
    # One node prints only EJ0001 (a public verl report): single-node triage names no cause but
    # "likely one of" three; across nodes the first node must say the same, never name EJ0001 as the cause.
    ej, quiet = tmp_path / "ej", tmp_path / "quiet"
    ej.mkdir()
    quiet.mkdir()
    (ej / "plog.log").write_bytes((FIXTURES / "logs" / "unseen" / "u11_verl_332_ej0001.log").read_bytes())
    (quiet / "engine.log").write_text("INFO 05-21 11:57:00 [api_server.py:1] started\n")
    code = main(["triage", "--node", f"a={ej}", "--node", f"b={quiet}"])
    out, err = capsys.readouterr()
    assert code == 1
    flat = " ".join(out.split())
    assert "First to fail: a (rank 2) hccp-process-init-failed at 2025-04-24 16:14:56" in flat
    assert "likely one of: hccp-port-in-use; " in flat
    assert "likely one of 3 causes" in err and "triage --explain hccp-process-init-failed" in err
    main(["triage", "--json", "--node", f"a={ej}", "--node", f"b={quiet}"])
    first = json.loads(capsys.readouterr().out)["first_to_fail"]
    assert first["event"]["role"] == "likely" and "hccp-port-in-use" in first["event"]["likely"]
    page = tmp_path / "t.html"
    main(["triage", "--node", f"a={ej}", "--node", f"b={quiet}", "--html", str(page)])
    capsys.readouterr()
    assert "hccp-process-init-failed (likely one of: hccp-port-in-use, " in page.read_text()
    assert "<td>hccp-process-init-failed (likely)</td>" in page.read_text()


def test_a_device_fault_in_the_host_kernel_log_is_the_nodes_own_failure_with_its_code(capsys, tmp_path):
    # A node whose engine log ends in HCCL's watchdog timeout and whose host kernel log shows the
    # driver's lost heartbeat (recorded real lines): the device fault is the node's own failure,
    # and it explains the node's timeout in the propagation; the fix explains the code.
    dev = tmp_path / "dev"
    dev.mkdir()
    for f in (
        FIXTURES / "logs" / "e04_sglang_30453_hccl_watchdog.log",
        FIXTURES / "logs" / "device" / "messages_0x40F84E00",
    ):
        (dev / f.name).write_bytes(f.read_bytes())
    code = main(["triage", "--json", "--node", f"dev={dev}", *_nodes("chain", 1)])
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    dev_node = next(n for n in data["nodes"] if n["name"] == "dev")
    assert dev_node["cause"]["issue"] == "device-npu1-0x40f84e00" and dev_node["cause"]["code"] == "0x40F84E00"
    assert {"cause_node": "dev", "cause": "device-npu1-0x40f84e00", "effect_node": "dev",
            "effect": "hccl-watchdog-timeout", "via": "explains"} in data["chain"]  # fmt: skip
    main(["triage", "--node", f"dev={dev}"])
    assert "ascendctl triage --explain 0x40F84E00" in capsys.readouterr().err


def test_bundles_of_one_file_name_from_two_nodes_folders_are_two_nodes_the_same_path_twice_is_one(capsys, tmp_path):
    # `ascendctl bundle` on two nodes in the same second names both archives alike; copied into
    # one folder per node they are still two nodes, named after their folders.
    name = "ascendctl-bundle-20260501-105900"
    a = _single_bundle(tmp_path / "node0" / name, CASES / "chain" / "node0" / "engine.log")
    b = _single_bundle(tmp_path / "node1" / name, CASES / "chain" / "node1" / "engine.log")
    code = main(["triage", "--json", str(a), str(b)])
    data = json.loads(capsys.readouterr().out)
    assert code == 1 and not data["problems"]
    assert [n["name"] for n in data["nodes"]] == [f"node0-{name}", f"node1-{name}"]
    assert data["first_to_fail"]["node"] == f"node0-{name}"
    code = main(["triage", "--json", str(a), str(a)])
    data = json.loads(capsys.readouterr().out)
    assert code == 2 and [n["name"] for n in data["nodes"]] == [name]
    assert "given twice" in data["problems"][0]


def test_the_npu_fault_codes_a_nodes_bundle_recorded_are_in_the_cluster_report(capsys, tmp_path):
    # `ascendctl bundle` keeps the npu-smi transcript (its `-t health` answers): triage of one
    # bundle reads its fault codes, and so must triage of the cluster (a recorded real transcript).
    case = tmp_path / "clock_skew"
    shutil.copytree(CASES / "clock_skew", case)
    (case / "nodes" / "node2" / "environment_check").mkdir()
    shutil.copy(FIXTURES / "logs" / "device" / "npu_info_after.txt", case / "nodes" / "node2" / "environment_check")
    code = main(["triage", "--json", str(case)])
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    node2 = {e["issue"] for e in data["timeline"] if e["node"] == "node2"}
    assert "device-npu0-0x8c03a000" in node2  # RestartNPU: process manager heartbeat lost
    assert not any(e["issue"].startswith("device-") for e in data["timeline"] if e["node"] != "node2")
    assert data["first_to_fail"]["node"] == "node2"


ENGINE_DEAD = (
    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
    "See stack trace (above) for the root cause.\n"
)


def test_an_engine_death_after_a_wait_follows_the_wait_alone_it_is_likely_one_of_its_causes(capsys, tmp_path):
    # The chain (node2 waits on node1, which waits on node0), with node2's engine dying after its
    # timeout: the death is a consequence there, node0 is still the first to fail.
    case = tmp_path / "chain"
    shutil.copytree(CASES / "chain", case)
    with (case / "node2" / "engine.log").open("a") as f:
        f.write(ENGINE_DEAD)
    code = main(["triage", "--json", *[f"--node=node{i}={case / f'node{i}'}" for i in range(3)]])
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    assert [r["node"] for r in data["roots"]] == ["node0"]
    assert next(n for n in data["nodes"] if n["name"] == "node2")["cause"] is None
    # A node whose log shows only the engine's death: triage alone says "likely one of"; so here.
    solo = tmp_path / "solo"
    solo.mkdir()
    (solo / "engine.log").write_text(ENGINE_DEAD)
    main(["triage", "--json", "--node", f"solo={solo}", "--node", f"node0={case / 'node1'}"])
    data = json.loads(capsys.readouterr().out)
    solo_node = next(n for n in data["nodes"] if n["name"] == "solo")
    assert solo_node["cause"]["issue"] == "vllm-engine-dead" and len(solo_node["cause"]["likely"]) >= 2
