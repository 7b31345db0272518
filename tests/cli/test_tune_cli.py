"""`ascendctl tune`: bad input refused (exit 2) before anything starts, and a capacity measured
against the stub server, whose queue makes TTFT jump past its max_running."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import ROOT

from ascendctl.cli import main


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


SWEEP = ["tune", "sweep", "-p", "cpu-tiny", "--slo", "ttft_p99=1s"]


@pytest.mark.parametrize(
    "argv, says",
    [
        (["tune", "capacity", "http://127.0.0.1:1", "--slo", "ttft_p95=500ms"], "unknown SLO 'ttft_p95'"),
        (["tune", "capacity", "http://127.0.0.1:1", "--slo", "ttft_p99=fast"], "'fast' is not a duration"),
        (["tune", "capacity", "http://127.0.0.1:1", "--slo", "itl_p99=-5ms"], "is not a duration"),
        (["tune", "capacity", "http://127.0.0.1:1", "--slo", "ttft_p99=1s", "--by", "tokens"], "unknown --by"),
        ([*SWEEP, "--sweep", "engine.max_num_sequences=8,16"], "'engine.max_num_sequences' is not a profile key"),
        ([*SWEEP, "--sweep", "engine.max_num_seqs="], "gives no values"),
        ([*SWEEP, "--sweep", "engine.max_num_seqs=8,,16"], "has an empty value"),
        ([*SWEEP, "--sweep", "engine.max_num_seqs=8,lots"], "'lots' must be"),
        (
            [
                *SWEEP,
                "--sweep",
                "engine.max_num_seqs=1,2,3,4,5,6,7,8,9",
                "--sweep",
                "engine.max_num_batched_tokens=512,1024,2048,4096,8192,16384,32768,65536",
                "--model",
                "/nonexistent",
            ],
            "the grid has 72 combinations (over 64)",
        ),
    ],
)
def test_bad_input_exits_2_before_anything_starts(capsys, tmp_path, monkeypatch, argv, says):
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(capsys, *argv)
    assert code == 2, err
    assert says in err and "fix:" in err
    assert out == ""
    assert not (tmp_path / "state" / "runs").exists()  # no engine run was started
    assert not (tmp_path / "tune-sweep.jsonl").exists()


def test_a_big_grid_runs_with_yes_only(capsys, tmp_path, monkeypatch):
    """--yes lifts the 64 limit: the sweep then goes on to its next check (here: the profile's model)."""
    monkeypatch.chdir(tmp_path)
    grid = [
        "--sweep",
        "engine.max_num_seqs=1,2,3,4,5,6,7,8,9",
        "--sweep",
        "engine.max_num_batched_tokens=1,2,3,4,5,6,7,8",
    ]
    code, _, err = _run(capsys, *SWEEP, *grid, "--yes", "--model", str(tmp_path / "nowhere"))
    assert code == 2 and "over 64" not in err and "model directory not found" in err


STUB = """
import sys, time
from engine.bench.stub import StubConfig, StubThread
with StubThread(StubConfig(token_delay_s=0.02, max_running=4, max_model_len=1024)) as s:
    print(s.url, flush=True)
    sys.stdin.read()
"""


@pytest.fixture()
def stub_server():
    """The stub in a process of its own: in the test's process it would share the GIL with the
    load generator, and its answers would stall behind the client's work."""
    proc = subprocess.Popen(
        [sys.executable, "-c", STUB], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.stdin.close()
        proc.wait(10)


def test_capacity_against_the_stub(capsys, stub_server):
    # 4 answers at a time, the rest wait: past 4 in flight a request waits a whole answer
    # (13 tokens of 20 ms) for its first token.
    code, out, err = _run(
        capsys,
        "tune", "capacity", stub_server, "-s", "chat-qa", "--scale", "0.1", "--by", "concurrency",
        "--slo", "ttft_p99=150ms", "--step-duration", "2", "--json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert doc["capacity"] == 4 and doc["by"] == "concurrency"
    assert doc["bracket"] == [4, 5]
    breaks = {b["target"]: b for b in doc["breaks"]}
    assert breaks["ttft_p99_ms"]["breaks_at"] == 5 and breaks["ttft_p99_ms"]["held_to"] == 4
    assert breaks["error_rate"]["breaks_at"] is None
    assert doc["at_capacity"]["figures"]["goodput_rate"] > 0
    assert doc["goodput_slo_ms"] == {"ttft": 150.0}
    assert "step 1: 1 concurrent: HOLDS" in err and "BREAKS" in err  # progress on stderr


def test_a_trace_is_searched_by_rate_only(capsys, tmp_path):
    (tmp_path / "t.jsonl").write_text('{"timestamp": 0, "input_length": 20, "output_length": 4, "hash_ids": [0]}\n')
    (tmp_path / "replay.yaml").write_text("name: replay\ntrace: t.jsonl\nslo: {ttft_p99_ms: 500}\n")
    code, _, err = _run(
        capsys, "tune", "capacity", "http://127.0.0.1:1", "-s", str(tmp_path / "replay.yaml"), "--by", "concurrency"
    )
    assert code == 2 and "replays a trace" in err and "--by rate" in err
