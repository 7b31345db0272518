"""`ascendctl bench` end to end against the asyncio stub: exit codes, JSON, --out, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from helpers import ROOT, free_port

from ascendctl.cli import main
from engine.bench.stub import StubConfig, StubThread

ASCENDCTL = [sys.executable, "-m", "ascendctl"]


@pytest.fixture()
def stub():
    with StubThread(StubConfig(token_delay_s=0.002, max_model_len=1024)) as server:
        yield server


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_list_and_print_scenario(capsys):
    code, out, _ = _run(capsys, "bench", "--list", "--json")
    assert code == 0
    assert [s["name"] for s in json.loads(out)["scenarios"]] == ["burst", "chat-qa", "long-doc"]
    code, out, _ = _run(
        capsys, "bench", "--scenario", "burst", "--scale", "0.5", "--duration", "30", "--print-scenario"
    )
    assert code == 0
    doc = yaml.safe_load(out)
    assert [p["concurrency"] for p in doc["phases"]] == [8, 32, 8]
    assert sum(p["duration_s"] for p in doc["phases"]) == pytest.approx(30)


def test_usage_errors_exit_2_with_a_fix(capsys, tmp_path):
    code, _, err = _run(capsys, "bench", "http://127.0.0.1:1")
    assert code == 2 and "no scenario given" in err and "fix:" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("phases:\n  - duration_s: ten\n    concurrency: 2\nprompt_tokens: 8\nmax_tokens: 4\n")
    code, _, err = _run(capsys, "bench", "http://127.0.0.1:1", "--scenario", str(bad))
    assert code == 2 and "bad.yaml:2: duration_s: must be a number" in err
    assert "Traceback" not in err
    code, _, err = _run(capsys, "bench", "--scenario", "chat-qa")
    assert code == 2 and "no server URL" in err
    code, _, err = _run(capsys, "bench", "ftp://127.0.0.1:1", "--scenario", "chat-qa")
    assert code == 2 and "not an http(s) URL" in err
    code, _, err = _run(capsys, "bench", "http://127.0.0.1:1", "--scenario", "chat-qa", "--scale", "-1")
    assert code == 2 and "--scale" in err
    code, _, err = _run(
        capsys, "bench", "http://127.0.0.1:1", "--scenario", "chat-qa", "--out", str(tmp_path / "no" / "r.json")
    )
    assert code == 2 and "not a directory" in err


def test_unreachable_server_exits_3(capsys):
    code, out, err = _run(capsys, "bench", f"http://127.0.0.1:{free_port()}", "--scenario", "chat-qa", "--json")
    assert code == 3 and out == ""
    assert "cannot reach" in err


def test_json_report_and_out_file(capsys, stub, tmp_path):
    target = tmp_path / "report.json"
    code, out, err = _run(
        capsys,
        "bench",
        stub.url,
        "--scenario",
        "chat-qa",
        "--scale",
        "0.1",
        "--duration",
        "2",
        "--json",
        "--out",
        str(target),
    )
    report = json.loads(out)
    assert code == (0 if report["passed"] else 1)
    assert report["schema_version"] == 1 and report["scenario"] == "chat-qa"
    assert report["completed"] > 0 and report["failed"] == 0
    assert report["output_tokens"] == report["server"]["generation_tokens"]
    # Every request of the run streamed its 13 tokens; one more (the warm-up) is outside the figures.
    assert stub.counters.generation_tokens == report["output_tokens"] + 13 == 13 * (report["completed"] + 1)
    assert {v["name"] for v in report["slo"]} == {"ttft_p99_ms", "itl_p99_ms", "error_rate", "output_tokens_per_s"}
    assert report["prompt_tokens_sizing"] == "tokenizer"
    assert json.loads(target.read_text()) == report


def test_missed_slo_exits_1_and_the_human_view_says_why(capsys, stub, tmp_path):
    f = tmp_path / "strict.yaml"
    f.write_text("""\
name: strict
phases: [{name: run, duration_s: 1.5, concurrency: 2}]
prompt_tokens: {dist: uniform, min: 10, max: 40}
max_tokens: 8
slo: {ttft_p99_ms: 0.000001, error_rate: 0}
""")
    code, out, err = _run(capsys, "bench", stub.url, "--scenario", str(f))
    assert code == 1
    assert "TTFT" in out and "ttft_p99_ms" in out
    assert "verdict: FAIL (1 of 2 SLOs missed: ttft_p99_ms)" in out
    code, out, err = _run(capsys, "bench", stub.url, "--scenario", str(f), "--json")
    assert code == 1 and "verdict: FAIL" in err
    verdicts = {v["name"]: v["ok"] for v in json.loads(out)["slo"]}
    assert verdicts == {"ttft_p99_ms": False, "error_rate": True}


def test_ctrl_c_prints_the_partial_report_and_exits_130(tmp_path):
    f = tmp_path / "long.yaml"
    f.write_text("""\
phases: [{name: run, duration_s: 300, concurrency: 4}]
prompt_tokens: 16
max_tokens: 50
""")
    with StubThread(StubConfig(token_delay_s=0.01)) as stub:
        proc = subprocess.Popen(
            [*ASCENDCTL, "bench", stub.url, "--scenario", str(f), "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=dict(os.environ),
        )
        deadline = time.monotonic() + 60
        while stub.counters.succeeded < 8 and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    report = json.loads(out)
    assert report["interrupted"] is True and report["passed"] is False
    assert report["completed"] >= 8
    assert report["cancelled"] >= 1  # the requests in flight at Ctrl-C
    assert report["requests"] == report["completed"] + report["failed"] + report["cancelled"]
    assert "interrupted" in err and "Traceback" not in err


def test_absurd_scale_and_unwritable_out_are_refused_before_the_run(capsys, tmp_path):
    code, out, err = _run(capsys, "bench", "http://127.0.0.1:1", "--scenario", "chat-qa", "--scale", "1e9")
    assert code == 2 and out == "" and "--scale 1e+09 is above the limit" in err
    # The URL answers nothing: exit 2 naming --out (not 3) shows the check came before the run.
    code, out, err = _run(capsys, "bench", "http://127.0.0.1:1", "--scenario", "chat-qa", "--out", str(tmp_path))
    assert code == 2 and out == "" and "it is a directory" in err
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        code, _, err = _run(
            capsys, "bench", "http://127.0.0.1:1", "--scenario", "chat-qa", "--out", str(locked / "r.json")
        )
        assert code == 2 and "cannot write the report" in err
    fine = tmp_path / "r.json"
    code, _, _ = _run(capsys, "bench", "http://127.0.0.1:1", "--scenario", "chat-qa", "--out", str(fine))
    assert code == 3 and not fine.exists()  # the check leaves no empty file behind


def test_print_scenario_after_scale_describes_the_scaled_load(capsys):
    code, out, _ = _run(capsys, "bench", "--scenario", "burst", "--scale", "0.5", "--print-scenario")
    assert code == 0 and yaml.safe_load(out)["description"].startswith("Scaled x0.5: before 8 concurrent")


def test_a_burst_that_queues_nothing_reports_no_drain_time(capsys, stub):
    code, out, _ = _run(capsys, "bench", stub.url, "--scenario", "burst", "--scale", "0.05", "--duration", "3")
    assert "no queue formed, so no drain time (N/A)" in out and "back to that level" not in out
    assert "queue_drain_s" in out and "not applicable" in out


def test_goodput_in_vllms_syntax_reaches_the_report_and_the_table(capsys, stub):
    argv = ["bench", stub.url, "--scenario", "chat-qa", "--scale", "0.05", "--duration", "1.5"]
    code, out, _ = _run(capsys, *argv, "--goodput", "ttft:60000", "tpot:60000", "e2el:60000", "--json")
    report = json.loads(out)
    g = report["goodput"]
    assert g["slo_ms"] == {"ttft": 60000.0, "tpot": 60000.0, "e2el": 60000.0}
    assert g["good"] == report["completed"] > 0 and g["share"] == 1.0
    assert g["rate"] == pytest.approx(report["request_rate"])
    s = report["samples"]
    assert len(s["sent_s"]) == len(s["ttft_ms"]) == report["completed"] + report["failed"]
    # The pairs may also come before the URL, and the human view shows the line.
    code, out, _ = _run(capsys, "bench", "--goodput", "ttft:0.0001", "e2el:9000", *argv[1:])
    assert "goodput (ttft:0.0001 e2el:9000 ms): 0 requests met every target (0.0%), 0.00 req/s" in out
    code, _, err = _run(capsys, *argv, "--goodput", "itl:5")
    assert code == 2 and "bad --goodput target 'itl:5'" in err
    code, _, err = _run(capsys, *argv, "tpot:5")
    assert code == 2 and "unexpected argument 'tpot:5'" in err


def test_compare_exit_codes_and_json(capsys):
    from helpers import FIXTURES

    base, same, slow = (str(FIXTURES / "bench" / f"{n}.json") for n in ("base", "same", "slow"))
    code, out, _ = _run(capsys, "bench", "compare", base, same, "--fail-if-worse", "10")
    assert code == 0 and "nothing worse beyond noise by more than 10%" in out
    code, out, err = _run(capsys, "bench", "compare", base, slow, "--fail-if-worse", "10", "--json")
    doc = json.loads(out)
    assert code == 1 and doc["passed"] is False and "worse than the baseline" in err
    itl = next(f for f in doc["figures"] if f["name"] == "itl_p50_ms")["changes"][0]
    assert itl["verdict"] == "worse" and itl["ci_pct"][0] > 0
    code, out, _ = _run(capsys, "bench", "compare", base, slow)
    assert code == 0 and "worse" in out  # without --fail-if-worse the comparison only informs
    code, _, err = _run(capsys, "bench", "compare", base)
    assert code == 2 and "at least two reports" in err


def test_a_burst_that_queues_measures_the_queue_and_kv_drain(capsys, tmp_path):
    f = tmp_path / "burst.yaml"
    f.write_text("""\
phases:
  - {name: before, duration_s: 1, concurrency: 2}
  - {name: burst, duration_s: 1.5, concurrency: 12}
  - {name: after, duration_s: 2, concurrency: 2}
drain_after: burst
prompt_tokens: 16
max_tokens: 10
slo: {queue_drain_s: 5, kv_drain_s: 5, ttft_mean_ms: 60000}
""")
    # The stub answers 4 at a time: the burst queues, then drains.
    with StubThread(StubConfig(token_delay_s=0.01, max_running=4, max_model_len=1024)) as stub:
        code, out, _ = _run(capsys, "bench", stub.url, "--scenario", str(f), "--json")
    report = json.loads(out)
    q = report["queue"]
    assert q["peak"] > 0 and q["drain_s"] is not None
    assert q["kv_formed"] and q["kv_peak"] == 1.0 and q["kv_drain_s"] is not None
    assert code == 0, report["slo"]
    assert max(report["samples"]["engine"]["waiting"]) > 0


def test_bench_without_run_and_with_a_bad_option(capsys):
    code, _, err = _run(capsys, "bench")
    assert code == 2 and "no scenario given" in err
    code, _, err = _run(capsys, "bench", "http://127.0.0.1:1", "--bogus")
    assert code == 2 and "no such option: --bogus" in err
    code, out, _ = _run(capsys, "bench", "run", "--list", "--json")
    assert code == 0 and json.loads(out)["scenarios"]
