"""`ascendctl netcheck` and `ascendctl doctor --compare` as a user runs them."""

from __future__ import annotations

import json

from helpers import FIXTURES

from ascendctl.cli import main

NET = FIXTURES / "netcheck"
HOSTS = FIXTURES / "hosts"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_netcheck_exit_codes_on_recorded_machines(capsys):
    code, out, _ = run(capsys, "netcheck", "--root", str(NET / "faultdiag-kg-parse-910a"))
    assert code == 1
    assert "ERROR nic.net_health" in out and "Socket failed on NIC 0" in out
    assert "fix: hccn_tool -i 0 -fec -s encoding rs" in out
    guide = ("--root", str(NET / "multinode-guide-910b"), "--peer-npu", "11.12.165.80")
    code, out, _ = run(capsys, "netcheck", *guide)
    assert code == 0 and "ok    nic.link" in out
    assert run(capsys, "netcheck", "--strict", *guide)[0] == 1  # the timeout warning fails it


def test_netcheck_json(capsys):
    code, out, _ = run(capsys, "netcheck", "--json", "--root", str(NET / "multinode-guide-910b"), "--nics", "0-3")
    data = json.loads(out)
    assert code == 0 and data["schema_version"] == 1
    assert [n["nic"] for n in data["facts"]["nics"]] == [0, 1, 2, 3]
    assert data["facts"]["nics"][0]["tls_switch"] == "0"
    assert {c["id"] for c in data["checks"]} >= {"nic.link", "nic.net_health", "peer.tcp"}


def test_netcheck_bad_input_and_nothing_to_probe(capsys, tmp_path):
    assert run(capsys, "netcheck", "--root", str(NET / "multinode-guide-910b"), "--nics", "7-1")[0] == 2
    code, _, err = run(capsys, "netcheck", "--root", str(NET / "multinode-guide-910b"), "--peer", "nope")
    assert code == 2 and "HOST:PORT" in err
    assert run(capsys, "netcheck", "--root", str(tmp_path / "absent"))[0] == 3


def test_netcheck_on_a_host_without_an_npu_exits_3_as_its_help_says(capsys):
    code, out, err = run(capsys, "netcheck", "--root", str(HOSTS / "cpu-host"))
    assert code == 3 and out == ""
    assert err.startswith("error: no NPU on this host: nothing for netcheck to probe")
    assert "ERROR" not in err and "--peer HOST:PORT" in err
    # host ports can still be probed there
    code, out, _ = run(capsys, "netcheck", "--root", str(HOSTS / "cpu-host"), "--peer", "10.0.0.6:29500")
    assert code == 0 and "skip  no NPU on this host" in out


def _doctor_json(capsys, tmp_path, tree: str) -> str:
    code, out, _ = run(capsys, "doctor", "--json", "--root", str(HOSTS / tree))
    path = tmp_path / f"{tree}.json"
    path.write_text(out)
    return str(path)


def test_doctor_compare_names_the_host_that_differs(capsys, tmp_path):
    a = _doctor_json(capsys, tmp_path, "vllm-ascend-2498-910b3-container")  # CANN 8.2.RC1
    b = _doctor_json(capsys, tmp_path, "vllm-ascend-3906-910b2-image-0.9.2dev")  # CANN 8.2.RC1
    c = _doctor_json(capsys, tmp_path, "vllm-ascend-5111-910b2-cann83rc2")  # CANN 8.3.RC2
    code, out, _ = run(capsys, "doctor", "--compare", a, b, c)
    assert code == 1
    assert "CANN differs: vllm-ascend-5111-910b2-cann83rc2 has 8.3.RC2 (the others: 8.2.RC1)" in out
    code, out, _ = run(capsys, "doctor", "--json", "--compare", a, "--compare", c)
    data = json.loads(out)
    assert data["facts"]["table"]["CANN"] == {
        "vllm-ascend-2498-910b3-container": "8.2.RC1",
        "vllm-ascend-5111-910b2-cann83rc2": "8.3.RC2",
    }
    assert next(x for x in data["checks"] if x["id"] == "skew.cann")["status"] == "error"


def test_doctor_compare_same_stack_is_clean(capsys, tmp_path):
    a = _doctor_json(capsys, tmp_path, "healthy-910b")
    data = json.loads(open(a).read())
    data["facts"]["host"] = "node-b"  # a second node built from the same image
    b = tmp_path / "copy.json"
    b.write_text(json.dumps(data))
    code, out, _ = run(capsys, "doctor", "--compare", a, str(b))
    assert code == 0 and "the same stack on every host" in out
    assert "no drift in variables, perf settings, hccn.conf or weights" in out


def test_doctor_compare_bad_input(capsys, tmp_path):
    a = _doctor_json(capsys, tmp_path, "healthy-910b")
    assert run(capsys, "doctor", "--compare", a)[0] == 2  # one report compares nothing
    junk = tmp_path / "junk.json"
    junk.write_text('{"verdict": "ok"}')
    code, _, err = run(capsys, "doctor", "--compare", a, str(junk))
    assert code == 2 and "not a doctor report" in err
    assert run(capsys, "doctor", "--compare", a, str(tmp_path / "missing.json"))[0] == 2
    assert run(capsys, "doctor", "--cluster", "--compare", a, a)[0] == 2


def test_compare_reads_the_nics_tls_from_netcheck_reports(capsys, tmp_path):
    code, out, _ = run(capsys, "netcheck", "--json", "--root", str(NET / "multinode-guide-910b"))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(out)
    b.write_text(out)
    code, out, _ = run(capsys, "doctor", "--json", "--compare", str(a), str(b))
    data = json.loads(out)
    tls = next(x for x in data["checks"] if x["id"] == "skew.tls")
    assert tls["status"] == "ok" and tls["summary"] == "NPU NIC TLS 0 on all 2 hosts"
    # netcheck's reports hold no versions: those rows are skipped, not errors
    assert next(x for x in data["checks"] if x["id"] == "skew.cann")["status"] == "skip"
    assert code == 0


def _netcheck_json(capsys, tmp_path, name: str, *argv: str) -> str:
    code, out, _ = run(capsys, "netcheck", "--json", *argv)
    path = tmp_path / f"{name}.json"
    path.write_text(out)
    return str(path)


def test_compare_names_the_host_whose_nics_run_tls(capsys, tmp_path):
    """The guide's host (TLS off on every NIC) beside the HCCL manual's NIC 1 (TLS on): the nodes
    cannot link, and the row says which host differs."""
    guide = _netcheck_json(capsys, tmp_path, "guide", "--root", str(NET / "multinode-guide-910b"))
    hccl = _netcheck_json(capsys, tmp_path, "hccl", "--root", str(NET / "hccl-doc-tls-mixed"), "--nics", "1")
    code, out, _ = run(capsys, "doctor", "--json", "--compare", guide, guide, hccl)
    data = json.loads(out)
    tls = next(x for x in data["checks"] if x["id"] == "skew.tls")
    assert code == 1 and tls["status"] == "error"
    assert tls["summary"] == "NPU NIC TLS differs: hccl-doc-tls-mixed has 1 (the others: 0)"
    assert tls["fix"].endswith("hccn_tool -i $i -tls -s enable 0")


def test_compare_names_the_host_whose_nics_lack_fec(capsys, tmp_path):
    """FaultDiag's 910A host answers `no FEC mode` on NIC 0; the MindCluster manual's host `rs`."""
    rs = tmp_path / "rs-host" / ".recorded" / "commands"
    rs.mkdir(parents=True)
    (rs / "hccn_tool_-i_0_-fec_-g.out").write_text((NET / "samples" / "fec-rs.txt").read_text())
    (rs.parent / "partial").write_text("")
    a = _netcheck_json(capsys, tmp_path, "rs", "--root", str(rs.parent.parent), "--nics", "0")
    b = _netcheck_json(capsys, tmp_path, "no", "--root", str(NET / "faultdiag-kg-parse-910a"), "--nics", "0")
    code, out, _ = run(capsys, "doctor", "--compare", a, a, b)
    assert code == 1
    assert "ERROR skew.fec" in out and "NPU NIC FEC differs: faultdiag-kg-parse-910a has no (the others: rs)" in out


def test_netcheck_root_renders_an_undocumented_word_as_unknown(capsys, tmp_path):
    cmds = tmp_path / ".recorded" / "commands"
    cmds.mkdir(parents=True)
    (cmds / "hccn_tool_-i_0_-net_health_-g.out").write_text(
        (NET / "samples" / "built" / "net_health-unknown.txt").read_text()
    )
    (cmds / "hccn_tool_-i_1_-net_health_-g.out").write_text("net health status: Something new\n")  # not a recording
    code, out, _ = run(capsys, "netcheck", "--root", str(tmp_path), "--nics", "0-1")
    assert code == 1
    assert "Unknown on NIC 0 (hccn_tool got a result it has no word for)" in out
    assert "Something new on NIC 1 (a state netcheck does not know)" in out
    assert "look up `Something new` in the hccn_tool manual" in out


def test_doctor_compare_of_one_host_twice_says_so(capsys, tmp_path):
    a = _doctor_json(capsys, tmp_path, "healthy-910b")
    b = tmp_path / "again.json"
    b.write_text(open(a).read())
    code, out, err = run(capsys, "doctor", "--json", "--compare", a, str(b))
    assert code == 2 and out == ""
    assert "are the same node (host healthy-910b, no machine-id)" in err and "again.json" in err
    # a report of an older doctor (no drift snapshot) still compares, with a warning
    old = json.loads(open(a).read())
    del old["facts"]["drift"]
    b.write_text(json.dumps(old))
    (tmp_path / "old.json").write_text(json.dumps(old))
    code, out, _ = run(capsys, "doctor", "--json", "--compare", str(tmp_path / "old.json"), str(b))
    data = json.loads(out)
    twice = next(x for x in data["checks"] if x["id"] == "hosts.distinct")
    assert twice["status"] == "warning" and "healthy-910b" in twice["summary"] and "again.json" in twice["summary"]
    assert data["headline"].startswith("2 reports of 1 host(s)")


def test_doctor_compare_headline_names_versions_it_could_not_read(capsys, tmp_path):
    a = json.loads(open(_doctor_json(capsys, tmp_path, "healthy-910b")).read())
    b = json.loads(json.dumps(a))
    b["facts"]["host"] = "node-b"
    b["facts"]["driver"] = None  # a host whose driver version doctor could not read
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    code, out, _ = run(capsys, "doctor", "--compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    assert code == 0
    assert "the same stack where known" in out and "unknown on some hosts" in out
    assert "the same stack on every host" not in out
