"""The engine screen's log tail (engine.telemetry.logmarks) and the run's profile and plan
(engine.telemetry.runprofile), on a recorded vLLM log and a run directory like serve's."""

from __future__ import annotations

import os
from pathlib import Path

from top_fakes import MARKED_LOG, serve_run

from engine.telemetry.logmarks import MarkedTail
from engine.telemetry.runprofile import planned_blocks, run_directory, run_profile

RECORDED = MARKED_LOG.read_bytes()
DEAD = b"(APIServer pid=22676) ERROR 11-29 21:08:51 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: x\n"


def test_the_tail_keeps_the_last_lines_with_the_issues_they_match(tmp_path):
    log = tmp_path / "engine.log"
    log.write_bytes(RECORDED)
    tail = MarkedTail(log)
    shown = [line for line in RECORDED.decode().splitlines() if '"GET /metrics HTTP/1.1" 200' not in line]
    assert tail.poll() and len(tail.lines) == 200
    assert tail.lines[-1].text == shown[-1]
    marked = {m.id for line in tail.lines for m in line.marks}
    assert {"vllm-engine-dead", "vllm-cpu-attention-unsupported", "vllm-engine-core-fatal"} <= marked
    dead = next(line for line in tail.lines if any(m.id == "vllm-engine-dead" for m in line.marks))
    assert dead.marks[0].title == "The engine died while serving" and dead.marks[0].severity == "error"


def test_later_polls_read_only_what_was_appended_and_wait_for_whole_lines(tmp_path):
    log = tmp_path / "engine.log"
    log.write_bytes(RECORDED)
    tail = MarkedTail(log)
    tail.poll()
    assert not tail.poll()  # nothing new: nothing read, nothing changed
    with log.open("ab") as f:
        f.write(DEAD[:40])
    assert not tail.poll() and tail.offset == len(RECORDED) + 40  # half a line waits for its end
    with log.open("ab") as f:
        f.write(DEAD[40:])
    assert tail.poll() and tail.lines[-1].text == DEAD.decode().rstrip("\n")
    assert [m.id for m in tail.lines[-1].marks] == ["vllm-engine-dead"] and len(tail.lines) == 200


def test_a_truncated_or_replaced_log_starts_over_and_a_flood_skips_to_its_end(tmp_path):
    log = tmp_path / "engine.log"
    log.write_bytes(RECORDED)
    tail = MarkedTail(log, max_bytes=4096)
    tail.poll()
    assert tail.lines[-1].text == RECORDED.decode().splitlines()[-1]  # only the last 4 KiB were read
    log.write_bytes(b"restarted\n")  # truncated
    assert tail.poll() and [line.text for line in tail.lines] == ["restarted"] and tail.restarts == 1
    other = tmp_path / "engine.log.new"
    other.write_bytes(b"one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten and more\n")
    os.replace(other, log)  # rotated: a new file, larger than the old offset
    assert tail.poll() and tail.lines[0].text == "one" and tail.restarts == 2
    with log.open("ab") as f:  # more than one read takes: the lines in between are skipped
        f.write(b"x" * 10_000 + b"\n" + DEAD)
    assert tail.poll() and tail.lines[-1].text == DEAD.decode().rstrip("\n") and len(tail.lines[-2].text) < 4096


def test_an_unreadable_log_is_an_error_line_not_a_crash(tmp_path):
    tail = MarkedTail(tmp_path / "missing.log")
    assert not tail.poll() and "missing.log" in tail.error and not tail.lines


def test_a_serve_run_has_its_profile_and_plan_and_a_url_engine_none(tmp_path):
    run = serve_run(tmp_path, "http://127.0.0.1:8000")
    assert run_directory(str(run.log_path)) == Path(run.directory)
    assert run_directory(None) is None and run_directory(str(tmp_path / "x.log")) is None
    profile, why = run_profile(Path(run.directory))
    assert why is None and profile.profile == "cpu-tiny" and profile.max_num_seqs == 8
    assert profile.planned_blocks == planned_blocks(Path(run.directory)) and profile.planned_blocks > 0
    (Path(run.directory) / "profile.yaml").write_text("engine: [\n")  # damaged
    profile, why = run_profile(Path(run.directory))
    assert profile is None and why and planned_blocks(Path(run.directory)) is None


def test_a_code_line_is_marked_by_the_rule_that_names_the_code_as_triage_does(tmp_path):
    # torch_npu's warning for a vector-core fault: the engine screen marks it as triage reports it
    line = "[W614 19:45:30.602900611 compiler_depend.ts:545] Warning: NPU warning, error code is 507035[Error]: "
    log = tmp_path / "engine.log"
    log.write_text(line + "\n", encoding="utf-8")
    tail = MarkedTail(log)
    assert tail.poll()
    assert [m.id for m in tail.lines[-1].marks] == ["vector-core-exception"]


def test_our_own_metrics_and_health_polls_stay_out_of_the_log_pane(tmp_path):
    log = tmp_path / "engine.log"
    polls = [
        'INFO:     127.0.0.1:53548 - "GET /metrics HTTP/1.1" 200 OK',
        '(APIServer pid=7) INFO:     127.0.0.1:44654 - "GET /health HTTP/1.1" 200 OK',
    ]
    kept = [
        "(APIServer pid=7) INFO 12-07 03:53:15 [loggers.py:259] Engine 000: Avg prompt throughput: 12.0 tokens/s",
        'INFO:     127.0.0.1:53550 - "POST /v1/completions HTTP/1.1" 200 OK',
        'INFO:     127.0.0.1:53551 - "GET /metrics HTTP/1.1" 500 Internal Server Error',
    ]
    log.write_text("\n".join([polls[0], kept[0], polls[1], kept[1], polls[0], kept[2]]) + "\n")
    tail = MarkedTail(log)
    assert tail.poll()
    assert [line.text for line in tail.lines] == kept
    assert tail.polls_hidden == 3
