"""netcheck's parsers and checks on hccn_tool answers copied from public sources
(tests/fixtures/netcheck/PROVENANCE.md), and its host checks on injected environments."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
from helpers import FIXTURES

from engine.doctor.model import Status
from engine.errors import BadInput
from engine.netcheck import hccn, parse_nics, run_netcheck, state_verdict, verdicts
from engine.system.host import Host
from engine.system.recorded import RecordedRunner, read_transcript

NET = FIXTURES / "netcheck"
SAMPLES = NET / "samples"


def statuses(report) -> dict[str, str]:
    return {c.id: c.status.value for c in report.checks}


def row(report, cid: str):
    return next(c for c in report.checks if c.id == cid)


def test_transcript_blocks_are_keyed_like_recorded_commands():
    text = (NET / "faultdiag-kg-parse-910a/.recorded/npu_info_before.txt").read_text()
    blocks = read_transcript(text)
    assert blocks["hccn_tool_-i_0_-net_health_-g"] == "net health status: Socket failed\n"
    assert blocks["hccn_tool_-i_1_-ip_-g"] == "ipaddr:192.161.201.10\nnetmask:255.255.255.0\n"
    assert blocks["hccn_tool_-i_2_-ip_-g"] == ""  # asked, answered nothing
    # npu-smi prints blank lines inside one answer; they stay in its block
    assert "HBM Capacity(MB)" in blocks["npu-smi_info_-i_0_-t_usages"]
    # a piped command's output belongs to no block, and not to the one above it
    assert not any("Processing accelerators" in v for v in blocks.values())


def test_transcript_answers_a_recorded_runner(tmp_path):
    (tmp_path / "t.txt").write_text((NET / "faultdiag-worker0-8nic/.recorded/npu_info_before.txt").read_text())
    runner = RecordedRunner(tmp_path / "missing", tmp_path / "t.txt")
    assert runner.which("hccn_tool")
    # the recording wrote this command line without its leading slash: the program's directory never matters
    out = runner.run(["/usr/local/Ascend/driver/tools/hccn_tool", "-i", "0", "-link_stat", "-g"]).stdout
    assert hccn.link_stat(out) == hccn.LinkStat(2, ("Tue Aug  1 14:43:40 2022",), "LINK UP")


def test_faultdiag_fixture_socket_failed_no_fec_optical_absent():
    r = run_netcheck(NET / "faultdiag-kg-parse-910a")
    s = statuses(r)
    assert r.exit_code() == 1
    assert s["nic.net_health"] == "error" and "Socket failed on NIC 0" in row(r, "nic.net_health").summary
    assert s["nic.fec"] == "error" and row(r, "nic.fec").fix == "hccn_tool -i 0 -fec -s encoding rs"
    assert s["nic.ip"] == "error" and "no address on NIC 2" in row(r, "nic.ip").summary
    optical = row(r, "nic.optical")
    assert optical.status is Status.ERROR
    assert "not present" in optical.summary and "Rx LOS 0xff" in optical.summary
    assert "Rx Power1 0.0054 mW < 0.1445 mW" in optical.summary
    assert s["nic.link_flaps"] == "warning"
    # the recording holds no -link, -gateway, ... answers: those rows are unknown, not failures
    assert s["nic.link"] == s["nic.gateway"] == s["nic.lldp"] == "skip"
    assert s["hccn.conf"] == "skip"  # a partial recording: a missing file is unknown
    facts = r.facts["nics"]
    assert [n["nic"] for n in facts] == list(range(8))  # from npu-smi info -m
    assert facts[0]["net_health"] == "Socket failed" and facts[0]["fec"] == "no"


def test_faultdiag_worker_fixture_eight_addresses_and_flaps():
    r = run_netcheck(NET / "faultdiag-worker0-8nic")
    assert row(r, "nic.ip").status is Status.OK
    assert [n["ip"] for n in r.facts["nics"]] == [f"10.10.0.1{i}" for i in range(8)]
    assert [n["link_up_count"] for n in r.facts["nics"]] == [2] * 8
    assert row(r, "nic.link_flaps").status is Status.WARN
    assert r.exit_code() == 0


def test_multinode_guide_fixture_is_ready():
    r = run_netcheck(NET / "multinode-guide-910b", peers_npu=["11.12.165.80"])
    s = statuses(r)
    for cid in ("nic.link", "nic.net_health", "nic.ip", "nic.gateway", "nic.netdetect", "nic.lldp", "nic.tls"):
        assert s[cid] == "ok", (cid, row(r, cid).summary)
    assert row(r, "nic.gateway").summary == "gateway: 11.12.165.1 on NIC 0-7"
    assert row(r, "nic.lldp").summary.startswith("switch port (LLDP): 400GE1/1/5:1 on NIC 0")
    assert s["peer.npu_ping"] == "ok" and row(r, "peer.npu_ping").summary == "8 NIC-to-peer ping(s) without loss"
    # peers given and HCCL_CONNECT_TIMEOUT left at its 120 s default: a warning, not an error
    assert s["env.hccl_timeouts"] == "warning"
    assert r.exit_code() == 0 and r.exit_code(strict=True) == 1


def test_blog_fixture_hccn_conf_and_lldp():
    conf = hccn.hccn_conf((NET / "blog-910b1-nic3/etc/hccn.conf").read_text())
    assert conf[0] == {
        "address": "29.1.137.205",
        "netmask": "255.255.0.0",
        "netdetect": "29.1.0.1",
        "gateway": "29.1.0.1",
        "send_arp_status": "1",
    }
    assert sorted(conf) == [0, 7]
    r = run_netcheck(NET / "blog-910b1-nic3", nics=[3], peers_npu=["29.1.137.205"])
    assert row(r, "nic.lldp").summary == "switch port (LLDP): 400GE1/1/20:2 on NIC 3"
    assert row(r, "hccn.conf").status is Status.WARN and "NIC 3 has no address_3" in row(r, "hccn.conf").summary
    assert row(r, "peer.npu_ping").status is Status.OK


# hccn_tool's own table of `-net_health -g` words, codes 0-9 (the CANN driver's open-source
# hccn_tool, tool_ops.c `g_net_health_status`), and the older driver's "Socket failed" that
# MindCluster FaultDiag recorded.
HCCN_TOOL_NET_HEALTH = (
    "Success",
    "Socket fail",
    "Receive timeout",
    "Unreachable",
    "Time exceeded",
    "Fault",
    "Init",
    "Thread error",
    "Detect ip set",
    "Unknown",
    "Socket failed",
)


def _slug(state: str) -> str:
    return state.lower().replace(" ", "_")


def _net_health_sample(state: str) -> Path:
    entry = verdicts()["net_health"][state]
    return (SAMPLES if entry["sample"] == "recorded" else SAMPLES / "built") / f"net_health-{_slug(state)}.txt"


def test_verdicts_cover_every_word_hccn_tool_prints():
    assert set(verdicts()["net_health"]) == set(HCCN_TOOL_NET_HEALTH)


@pytest.mark.parametrize("state", HCCN_TOOL_NET_HEALTH)
def test_every_net_health_state_through_the_parser_and_the_root_replay(tmp_path, state):
    text = _net_health_sample(state).read_text()
    assert hccn.net_health(text) == state
    r = _one_nic(tmp_path, net_health=text)  # a recorded machine, read as `netcheck --root` reads it
    health = row(r, "nic.net_health")
    entry = state_verdict("net_health", state)
    assert health.status.value == entry["status"]
    assert r.facts["nics"][0]["net_health"] == state
    if state == "Success":
        assert health.summary == "net health Success on NIC 0" and r.exit_code() == 0
    else:  # every other state fails the NIC, says what it means and how to fix it on this NIC
        assert health.status is Status.ERROR and r.exit_code() == 1
        assert health.summary == f"net health {state} on NIC 0 ({entry['meaning']})"
        assert health.fix and "{nic}" not in health.fix
        assert "hccn_tool -i 0" in health.fix or "npu-smi" in health.fix


def test_socket_failed_and_socket_fail_are_one_state(tmp_path):
    old = row(_one_nic(tmp_path / "a", net_health="net health status: Socket failed\n"), "nic.net_health")
    new = row(_one_nic(tmp_path / "b", net_health="net health status: Socket fail\n"), "nic.net_health")
    assert old.fix == new.fix and old.summary.replace("Socket failed", "Socket fail") == new.summary


def test_recorded_and_built_samples_are_kept_apart():
    """A state marked `recorded` has its line in a copied public output; a `built` one only in
    samples/built/ (the recorded Success line with the documented word), never among recordings."""
    recorded = "\n".join(
        p.read_text(errors="replace") for p in NET.rglob("*") if p.is_file() and "built" not in p.parts
    )
    for state, entry in verdicts()["net_health"].items():
        line = f"net health status: {state}\n"
        assert _net_health_sample(state).read_text() == line, state
        if entry["sample"] == "recorded":
            assert line in recorded, state
        else:
            assert entry["sample"] == "built" and line not in recorded, state
    success = (SAMPLES / "net_health-success.txt").read_text()
    for built in (SAMPLES / "built").glob("net_health-*.txt"):
        assert built.read_text() == success.replace("Success", hccn.net_health(built.read_text()))


def test_link_down_fec_rs_and_device_style_link_stat(tmp_path):
    r = _one_nic(
        tmp_path,
        link=(SAMPLES / "link-down.txt").read_text(),
        fec=(SAMPLES / "fec-rs.txt").read_text(),
        link_stat=(SAMPLES / "link_stat-device.txt").read_text(),
    )
    assert row(r, "nic.link").status is Status.ERROR and "-cfg recovery" in row(r, "nic.link").fix
    assert row(r, "nic.fec").status is Status.OK
    flaps = row(r, "nic.link_flaps")
    assert flaps.status is Status.WARN and "last at Tue Jun  6 16:32:10 2023" in flaps.summary


def test_fec_auto_is_a_warning_with_the_rs_fix(tmp_path):
    r = _one_nic(tmp_path, fec=(SAMPLES / "built" / "fec-auto.txt").read_text())
    fec = row(r, "nic.fec")
    assert fec.status is Status.WARN and fec.summary == "FEC mode auto on NIC 0 (the FEC mode is negotiated, not fixed)"
    assert fec.fix.endswith("hccn_tool -i 0 -fec -s encoding rs") and r.exit_code(strict=True) == 1


def _ping_tree(tmp_path: Path, peer: str, answer: str):
    cmds = tmp_path / ".recorded" / "commands"
    cmds.mkdir(parents=True)
    (cmds / f"hccn_tool_-i_0_-ping_-g_address_{peer}.out").write_text(answer)
    (cmds / f"hccn_tool_-i_0_-ping_-g_address_{peer}.rc").write_text("1\n")  # hccn_tool fails on loss
    (tmp_path / ".recorded" / "partial").write_text("")
    return run_netcheck(tmp_path, nics=[0], peers_npu=[peer])


def test_ping_with_partial_loss(tmp_path):
    text = (SAMPLES / "ping-partial-loss.txt").read_text()
    assert hccn.ping(text) == hccn.Ping(3, 2, 33.33)
    r = _ping_tree(tmp_path, "10.10.100.10", text)
    ping = row(r, "peer.npu_ping")
    assert ping.status is Status.ERROR and r.exit_code() == 1
    assert ping.summary == "some replies lost: NIC 0 -> 10.10.100.10: 33.33% loss"
    assert "-optical -g" in ping.fix and "-link_stat -g" in ping.fix


def test_ping_with_total_loss(tmp_path):
    text = (SAMPLES / "ping-total-loss.txt").read_text()
    assert hccn.ping(text) == hccn.Ping(3, 0, 100.0)
    # the tool exits non-zero ("Command execute failed!"): its answer is still read
    r = _ping_tree(tmp_path, "10.0.0.2", text)
    ping = row(r, "peer.npu_ping")
    assert ping.status is Status.ERROR and ping.summary == "no reply at all: NIC 0 -> 10.0.0.2"
    assert "-link -g" in ping.fix and "-gateway -g" in ping.fix


def test_hccs_ping_summary_wording_is_read_too():
    # hccn_tool's HCCS ping prints "packets loss" (tool_cmd.c), the RoCE ping "packet loss"
    assert hccn.ping("3 packets transmitted, 3 received, 0.00% packets loss") == hccn.Ping(3, 3, 0.0)


def test_links_that_went_down_and_stayed_down():
    """FaultDiag's transcript of the same host after training: NICs 0 and 3 went down twice and
    their newest record is LINK DOWN."""
    r = run_netcheck(NET / "faultdiag-worker0-8nic-after")
    flaps = row(r, "nic.link_flaps")
    assert flaps.status is Status.ERROR and r.exit_code() == 1
    assert flaps.summary.startswith("the newest record is LINK DOWN (no LINK UP since) on NIC 0, 3; ")
    assert "NIC 0: 2 down(s), last at Tue Aug  1 14:44:40 2022" in flaps.summary
    assert "NIC 5: 1 down(s), last at Tue Aug  1 14:43:40 2022" in flaps.summary
    assert [n["link_down_records"] for n in r.facts["nics"]] == [2, 1, 1, 2, 1, 1, 1, 1]
    # the same NICs before training: one flap each, all back up
    before = row(run_netcheck(NET / "faultdiag-worker0-8nic"), "nic.link_flaps")
    assert before.status is Status.WARN


def test_tls_differing_between_nics_of_one_host():
    r = run_netcheck(NET / "hccl-doc-tls-mixed", nics=[0, 1])
    tls = row(r, "nic.tls")
    assert tls.status is Status.ERROR
    assert tls.summary == "TLS differs between NICs: enabled on 1, disabled on 0"
    assert [n["tls_switch"] for n in r.facts["nics"]] == ["0", "1"]


def test_unknown_state_is_an_error_naming_it(tmp_path):
    # Not an output of the tool: a word netcheck has never seen, to show how it is reported.
    r = _one_nic(tmp_path, net_health="net health status: Something new\n")
    assert row(r, "nic.net_health").status is Status.ERROR
    assert "a state netcheck does not know" in row(r, "nic.net_health").summary


def _one_nic(tmp_path: Path, **answers: str):
    cmds = tmp_path / ".recorded" / "commands"
    cmds.mkdir(parents=True)
    for query, text in answers.items():
        (cmds / f"hccn_tool_-i_0_-{query}_-g.out").write_text(text)
    (tmp_path / ".recorded" / "partial").write_text("")
    return run_netcheck(tmp_path, nics=[0])


def _host(tmp_path: Path, **env: str) -> Host:
    return Host(root=tmp_path, env=env, runner=RecordedRunner(tmp_path / "none"))


IFACES = {"lo": ["127.0.0.1"], "enp189s0f0": ["192.168.0.128"], "bond0": ["10.0.0.5"]}


def test_hccl_if_ip_must_be_an_address_of_this_host(tmp_path):
    good = run_netcheck(host=_host(tmp_path, HCCL_IF_IP="10.0.0.5"), interfaces=IFACES)
    assert row(good, "env.hccl_if_ip").summary == "HCCL_IF_IP=10.0.0.5 (bond0)"
    bad = run_netcheck(host=_host(tmp_path, HCCL_IF_IP="10.0.0.9"), interfaces=IFACES)
    assert row(bad, "env.hccl_if_ip").status is Status.ERROR


def test_socket_ifname_variables_name_real_interfaces(tmp_path):
    env = {"GLOO_SOCKET_IFNAME": "bond0", "TP_SOCKET_IFNAME": "bond0", "HCCL_SOCKET_IFNAME": "enp"}
    assert row(run_netcheck(host=_host(tmp_path, **env), interfaces=IFACES), "env.socket_ifname").status is Status.OK
    env["GLOO_SOCKET_IFNAME"] = "eth0"
    r = run_netcheck(host=_host(tmp_path, **env), interfaces=IFACES)
    assert row(r, "env.socket_ifname").status is Status.ERROR
    assert "GLOO_SOCKET_IFNAME names eth0" in row(r, "env.socket_ifname").summary
    # "=name" is exact, "^..." excludes and is not checked
    env = {"HCCL_SOCKET_IFNAME": "=enp", "GLOO_SOCKET_IFNAME": "^docker0,bond0"}
    r = run_netcheck(host=_host(tmp_path, **env), interfaces=IFACES)
    assert "HCCL_SOCKET_IFNAME names enp" in row(r, "env.socket_ifname").summary
    assert "GLOO" not in row(r, "env.socket_ifname").summary
    # only HCCL takes a prefix
    r = run_netcheck(host=_host(tmp_path, GLOO_SOCKET_IFNAME="bond"), interfaces=IFACES)
    assert "GLOO_SOCKET_IFNAME names bond" in row(r, "env.socket_ifname").summary


def test_timeouts(tmp_path):
    r = run_netcheck(host=_host(tmp_path, HCCL_CONNECT_TIMEOUT="1200"), interfaces=IFACES, peers_tcp=["10.0.0.6:1"])
    assert row(r, "env.hccl_timeouts").status is Status.OK
    assert "HCCL_CONNECT_TIMEOUT 1200 s; HCCL_EXEC_TIMEOUT 1836 s (default)" == row(r, "env.hccl_timeouts").summary
    r = run_netcheck(host=_host(tmp_path, HCCL_EXEC_TIMEOUT="30m"), interfaces=IFACES)
    assert row(r, "env.hccl_timeouts").status is Status.ERROR


def test_tcp_peers_live(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    try:
        host = _host(tmp_path)
        ok = run_netcheck(host=host, interfaces=IFACES, peers_tcp=[f"127.0.0.1:{port}"], live=True)
        assert row(ok, "peer.tcp").status is Status.OK
        bad = run_netcheck(host=host, interfaces=IFACES, peers_tcp=[f"127.0.0.1:{closed_port}"], live=True)
        assert row(bad, "peer.tcp").status is Status.ERROR
        # a recording cannot reach anything
        rec = run_netcheck(host=host, interfaces=IFACES, peers_tcp=[f"127.0.0.1:{port}"])
        assert row(rec, "peer.tcp").status is Status.SKIP
    finally:
        server.close()


def test_no_hccn_tool_is_one_error_and_the_nic_rows_skip(tmp_path):
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "davinci0").touch()  # an NPU host whose driver tools are missing
    r = run_netcheck(host=_host(tmp_path), interfaces=IFACES)
    assert row(r, "hccn.tool").status is Status.ERROR
    assert row(r, "nic.link").status is Status.SKIP
    assert r.facts["nics"] == [] and r.facts["npu"] is True


def test_a_host_without_an_npu_has_no_hccn_tool_to_miss(tmp_path):
    r = run_netcheck(host=_host(tmp_path), interfaces=IFACES)
    assert row(r, "hccn.tool").status is Status.SKIP and "no NPU on this host" in row(r, "hccn.tool").summary
    assert r.facts["npu"] is False and r.platform == "cpu" and r.exit_code() == 0


def test_bad_input():
    assert parse_nics("0-3,8") == [0, 1, 2, 3, 8]
    for spec in ("x", "3-1", ""):
        with pytest.raises(BadInput):
            parse_nics(spec)
    with pytest.raises(BadInput):
        run_netcheck(NET / "multinode-guide-910b", peers_tcp=["nohostport"])


def test_live_hccn_tool_on_path_and_a_hung_nic(tmp_path):
    """A real program on PATH (replaying the guide's recorded answers), run through the subprocess
    runner as on a node; NIC 5 hangs on its first question and is asked nothing more."""
    from engine.system.runner import SubprocessRunner

    answers = NET / "multinode-guide-910b" / ".recorded" / "commands"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "hccn_tool"
    tool.write_text(
        "#!/bin/sh\n"
        '[ "$1 $2" = "-i 5" ] && exec sleep 600\n'
        'key=$(echo "hccn_tool $*" | tr " " "_")\n'
        f'[ -f "{answers}/$key.out" ] && exec cat "{answers}/$key.out"\n'
        'echo "unknown command" >&2; exit 1\n'
    )
    tool.chmod(0o755)
    host = Host(root=tmp_path, env={}, runner=SubprocessRunner(path=str(bin_dir)))
    r = run_netcheck(host=host, nics=list(range(8)), interfaces=IFACES, live=True, timeout=1.0)
    assert row(r, "hccn.tool").summary == f"hccn_tool at {tool}; NIC(s) 0-7"
    link = row(r, "nic.link")
    assert link.status is Status.WARN and link.summary == "link UP on NIC 0-4, 6-7; no answer from NIC 5"
    assert r.facts["unanswered"][5]["link"] == "no answer within the timeout"
    assert r.facts["unanswered"][5]["net_health"] == "not asked after a timeout"
    assert row(r, "nic.fec").status is Status.SKIP  # the guide shows no -fec answer: the tool fails, unknown
    assert r.facts["unanswered"][0]["fec"] == "unknown command"


def _copy_guide(tmp_path: Path) -> Path:
    import shutil

    tree = tmp_path / "tree"
    shutil.copytree(NET / "multinode-guide-910b", tree)
    return tree


def test_a_node_whose_hccn_tool_answers_nothing_does_not_pass(tmp_path):
    """Every question recorded as hung (the `.hang` state of a recorded machine): every NIC check
    would skip, and a node whose NICs could not be checked must not read "no errors"."""
    tree = _copy_guide(tmp_path)
    commands = tree / ".recorded" / "commands"
    for out in commands.glob("hccn_tool_*.out"):
        out.unlink()
        (commands / (out.stem + ".hang")).write_text("")
    r = run_netcheck(tree, nics=[0, 1, 2, 3])
    tool = row(r, "hccn.tool")
    assert tool.status is Status.ERROR and "answered no question on NIC 0-3" in tool.summary
    assert "no answer within" in tool.summary and "by hand" in tool.fix
    assert r.exit_code() == 1 and "no errors" not in r.headline


def test_odd_answers_are_errors_and_fixes_name_the_nics(tmp_path):
    tree = _copy_guide(tmp_path)
    commands = tree / ".recorded" / "commands"
    for i in range(4):  # the guide's real answers with one value changed
        tls = commands / f"hccn_tool_-i_{i}_-tls_-g.out"
        tls.write_text(re.sub(r"tls switch\[\d+\]", "tls switch[99999999999999999999999]", tls.read_text()))
        gw = commands / f"hccn_tool_-i_{i}_-gateway_-g.out"
        gw.write_text(re.sub(r"(default gateway:)\s*[^,\s]+", r"\1nan", gw.read_text()))
        (commands / f"hccn_tool_-i_{i}_-lldp_-g.out").write_text("")
    r = run_netcheck(tree, nics=[0, 1, 2, 3])
    tls = row(r, "nic.tls")
    assert tls.status is Status.ERROR and "(disabled)" not in tls.summary and "does not know" in tls.summary
    gateway = row(r, "nic.gateway")
    assert gateway.status is Status.ERROR and "not an IP address: nan on NIC 0-3" in gateway.summary
    lldp = row(r, "nic.lldp")
    assert lldp.fix == "check that the cable of NIC 0-3 reaches a switch port with LLDP enabled"
    assert "$i" not in lldp.fix and "for i in" not in lldp.fix
