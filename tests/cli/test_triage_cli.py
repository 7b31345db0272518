"""`ascendctl triage` as a user runs it: table, --json, exit codes, --explain, --list, stdin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import FIXTURES

from ascendctl.cli import main

KV_LOG = FIXTURES / "vllm" / "fail_kv_too_small.log"
ASCENDCTL = Path(sys.executable).with_name("ascendctl")


def run_json(capsys, *args):
    code = main(["triage", "--json", *args])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def test_table_names_the_issue_its_cause_and_fix(capsys):
    code = main(["triage", str(KV_LOG)])
    out, err = capsys.readouterr()
    assert code == 1  # an error-level issue, default --fail-on error
    assert "vllm-no-kv-cache-memory" in out
    assert "  fix " in out and "--gpu-memory-utilization" in out
    assert "11-29 21:12:20" in out
    assert "issues at or above error: vllm-no-kv-cache-memory" in err and "Traceback" not in err


def test_json_report_and_fail_on(capsys):
    code, data, _ = run_json(capsys, "--fail-on", "critical", str(KV_LOG))
    assert code == 0  # nothing critical
    assert data["schema_version"] == 1 and data["failed"] is False
    issue = next(i for i in data["issues"] if i["id"] == "vllm-no-kv-cache-memory")
    assert issue["count"] == 2 and issue["first_seen"] == "11-29 21:12:20"
    assert set(issue) >= {
        "id",
        "title",
        "severity",
        "count",
        "first_seen",
        "last_seen",
        "cause",
        "fix",
        "links",
        "example",
    }
    assert data["lines"] == 168 and data["inputs"] == [str(KV_LOG)]


def test_warning_threshold_and_never(capsys, tmp_path):
    log = tmp_path / "err99999.log"  # e11b's ERR99999 line alone: only info-level issues
    log.write_text(
        "[ERROR] 2025-05-28-03:53:39 (PID:23386, Device:0, RankID:-1) ERR99999 UNKNOWN applicaiton exception\n",
        encoding="utf-8",
    )
    assert main(["triage", "--json", str(log)]) == 0
    assert main(["triage", "--json", "--fail-on", "info", str(log)]) == 1
    assert main(["triage", "--json", "--fail-on", "never", str(KV_LOG)]) == 0
    capsys.readouterr()


def test_unreadable_input_exits_2_but_still_reports_the_rest(capsys, tmp_path):
    code, data, err = run_json(capsys, str(tmp_path / "nope.log"), str(KV_LOG))
    assert code == 2
    assert data["unreadable"] == [f"{tmp_path / 'nope.log'}: no such file or directory"]
    assert any(i["id"] == "vllm-no-kv-cache-memory" for i in data["issues"])
    assert "could not read 1 input" in err


def test_an_archive_cut_short_is_reported_not_taken_for_ctrl_c(capsys, tmp_path):
    # the bundle check probes a .tar.gz; a copy cut after the gzip header makes that probe raise
    # EOFError, which once ended the command as a silent "interrupted" (130)
    cut = tmp_path / "bundle.tar.gz"
    cut.write_bytes(b"\x1f\x8b")
    code, data, err = run_json(capsys, str(cut), str(KV_LOG))
    assert code == 2 and len(data["unreadable"]) == 1 and "truncated" in data["unreadable"][0]
    assert any(i["id"] == "vllm-no-kv-cache-memory" for i in data["issues"])


def test_a_file_this_user_cannot_read_exits_2_and_the_rest_is_reported(capsys, tmp_path, monkeypatch):
    import builtins
    import tarfile

    # As a non-root user chmod 000 would do; the tests may run as root, so open() is refused instead,
    # for the log reader and for the bundle check (tarfile keeps its own reference to open).
    secret = tmp_path / "secret.log"
    secret.write_text("ERROR something\n")

    def refusing(real):
        def open_(file, *args, **kwargs):
            if str(file) == str(secret):
                raise PermissionError(13, "Permission denied", str(file))
            return real(file, *args, **kwargs)

        return open_

    monkeypatch.setattr(builtins, "open", refusing(builtins.open))
    monkeypatch.setattr(tarfile, "bltn_open", refusing(tarfile.bltn_open))
    code, data, err = run_json(capsys, str(secret), str(KV_LOG))
    assert code == 2 and len(data["unreadable"]) == 1 and "Permission denied" in data["unreadable"][0]
    assert any(i["id"] == "vllm-no-kv-cache-memory" for i in data["issues"])
    assert "could not read 1 input" in err


def test_bad_fail_on_is_a_usage_error(capsys):
    assert main(["triage", "--fail-on", "loud", str(KV_LOG)]) == 2
    assert "--fail-on" in capsys.readouterr().err


def test_explain_acl_cann_torch_npu_codes_and_rules(capsys):
    code, data, _ = run_json(capsys, "--explain", "507011")
    assert code == 0 and data["code"]["name"] == "ACL_ERROR_RT_MODEL_EXECUTE"
    assert data["reported_as"] == "model-execute-failed"  # the rule that names the same failure in reports
    code, data, _ = run_json(capsys, "--explain", "ei0006")
    assert data["code"]["code"] == "EI0006" and "HCCL" in data["code"]["family"]
    assert data["reported_as"] == "hccl-socket-timeout"
    code, data, _ = run_json(capsys, "--explain", "EZ9999")
    assert data["reported_as"] is None  # a catch-all names no one failure
    code, data, _ = run_json(capsys, "--explain", "EL0014")
    assert data["code"]["name"] == "Operation_Unsupported"  # its own meaning...
    assert data["reported_as"] == "207000"  # ...reported under the runtime code of the same refusal
    code, data, _ = run_json(capsys, "--explain", "ERR00100")
    assert data["code"]["kind"] == "torch_npu"
    code, data, _ = run_json(capsys, "--explain", "hccl-socket-timeout")
    assert data["rule"]["id"] == "hccl-socket-timeout" and data["rule"]["fix"]
    assert main(["triage", "--explain", "507011"]) == 0
    assert "ACL_ERROR_RT_MODEL_EXECUTE" in capsys.readouterr().out


def test_explain_unknown_code_is_bad_input(capsys):
    assert main(["triage", "--explain", "12ab"]) == 2
    assert "ascendctl triage --list" in capsys.readouterr().err


def test_list_shows_rules_and_codes(capsys):
    code, data, _ = run_json(capsys, "--list")
    assert code == 0 and len(data["rules"]) >= 60
    assert any(c["code"] == "507033" for c in data["codes"])
    assert main(["triage", "--list"]) == 0
    assert "hccl-watchdog-timeout" in capsys.readouterr().out


def test_own_rules_file_with_a_bad_regex_is_one_line_error(capsys, tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "rules:\n  - id: x-y\n    title: t\n    severity: error\n    patterns: ['oops (']\n    cause: c\n    fix: f\n    samples: ['oops (']\n"
    )
    assert main(["triage", "--rules", str(rules), str(KV_LOG)]) == 2
    err = capsys.readouterr().err
    assert "bad regex" in err and "x-y" in err and "Traceback" not in err


def test_no_log_and_no_run_is_bad_input(capsys):
    assert main(["triage"]) == 2
    assert "no LOG given" in capsys.readouterr().err


@pytest.mark.skipif(not ASCENDCTL.exists(), reason="console script not installed")
def test_stdin_in_a_real_process_stays_quiet_and_exits_1():
    proc = subprocess.run(
        [str(ASCENDCTL), "triage", "--json", "-"],
        input=KV_LOG.read_bytes(),
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert data["inputs"] == ["-"]
    assert any(i["id"] == "vllm-no-kv-cache-memory" for i in data["issues"])
    assert b"triage:" not in proc.stderr  # no progress without a terminal


def test_log_text_is_never_markup_nor_raw_escapes(capsys, tmp_path):
    log = tmp_path / "engine.log"
    log.write_text(
        "ERROR 11-29 21:12:20 [x.py:1] boom [red]red[/red] then [/] and \x1b]0;pwned\x07\x1b[2Jcleared\n"
        "WARNING 11-29 21:12:21 [x.py:2] [bold]odd[/] \x1b[31mwarning\n"
    )
    assert main(["triage", str(log)]) == 0  # unknown errors only: nothing at or above --fail-on
    out, err = capsys.readouterr()
    assert "MarkupError" not in err and "unexpected error" not in err
    assert "[red]red[/red] then [/] and" in out  # literal, not colours
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert "1 event\n" in out and "error event" not in out  # warnings are events, not "error events"


@pytest.mark.skipif(not ASCENDCTL.exists(), reason="console script not installed")
def test_process_substitution_and_dev_stdin_are_read():
    for script in (
        f'"{ASCENDCTL}" triage --json <(cat "{KV_LOG}")',
        f'cat "{KV_LOG}" | "{ASCENDCTL}" triage --json /dev/stdin',
    ):
        proc = subprocess.run(["bash", "-c", script], capture_output=True, timeout=120)
        assert proc.returncode == 1, proc.stderr
        data = json.loads(proc.stdout)
        assert data["unreadable"] == [] and any(i["id"] == "vllm-no-kv-cache-memory" for i in data["issues"])


def test_truncated_gz_counts_as_an_input_and_says_so(capsys, tmp_path):
    import gzip

    broken = tmp_path / "engine.log.gz"
    broken.write_bytes(gzip.compress(KV_LOG.read_bytes())[:-200])
    code = main(["triage", "--fail-on", "never", str(broken)])
    out, err = capsys.readouterr()
    assert code == 2 and "1 input," in out and "vllm-no-kv-cache-memory" in out  # exit 2: a damaged input
    assert "truncated" in err and "what came before it was scanned" in err


def test_catch_all_codes_alone_are_listed_but_the_root_line_leads(capsys):
    # sglang issue 30453: 507014 / EZ9999 "aicore timeout" and nothing more specific.
    log = str(FIXTURES / "logs" / "e03_sglang_30453_aicore_timeout.log")
    main(["triage", log])
    out = capsys.readouterr().out
    head = out.split("\n", 3)[:3]
    assert head[1].startswith("No issue named with confidence")
    assert head[2].startswith("Most likely root line: EZ9999") and "[aicore timeout]" in head[2]
    assert "(generic): see the lines around it" in out  # the codes are still explained, as catch-alls
    _, data, _ = run_json(capsys, log)
    assert data["root_cause"] is None and "aicore timeout" in data["root_line"]
    assert all(i["generic"] for i in data["issues"])
    _, named, _ = run_json(capsys, str(KV_LOG))
    assert named["root_cause"] == "vllm-no-kv-cache-memory"


def test_explain_says_when_a_code_is_a_catch_all(capsys):
    main(["triage", "--explain", "EZ9999"])
    assert "generic:  an inner-error code" in capsys.readouterr().out
    main(["triage", "--explain", "EI0006"])
    assert "generic:" not in capsys.readouterr().out


OWN_RULE = """rules:
  - id: site-nfs-stale
    title: The model share went stale
    severity: error
    patterns: ['Stale file handle']
    cause: the NFS export holding the weights was remounted under the engine
    fix: remount the share and restart the engine
    samples: ['OSError: [Errno 116] Stale file handle']
"""


def test_own_rules_add_to_the_bundled_database_and_rules_only_replaces_it(capsys, tmp_path):
    rules = tmp_path / "site.yaml"
    rules.write_text(OWN_RULE)
    log = tmp_path / "engine.log"
    log.write_text(KV_LOG.read_text() + "OSError: [Errno 116] Stale file handle\n")
    _, added, _ = run_json(capsys, "--fail-on", "never", "--rules", str(rules), str(log))
    assert {"site-nfs-stale", "vllm-no-kv-cache-memory"} <= {i["id"] for i in added["issues"]}
    _, alone, _ = run_json(capsys, "--fail-on", "never", "--rules-only", str(rules), str(log))
    assert {i["id"] for i in alone["issues"]} == {"site-nfs-stale"}
    # --list and --explain see the same set
    _, listed, _ = run_json(capsys, "--rules", str(rules), "--list")
    assert "site-nfs-stale" in {r["id"] for r in listed["rules"]} and len(listed["rules"]) > 100
    assert main(["triage", "--rules", str(rules), "--rules-only", str(rules), str(log)]) == 2
    assert "--rules and --rules-only" in capsys.readouterr().err
