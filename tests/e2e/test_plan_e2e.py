"""Planner exactness against the real vLLM CPU engine: planned KV tokens == the engine's own figure.

For each tiny model shape, the cpu-tiny profile is resolved to its real command line, the engine is
started until it logs `CPU KV cache size: N tokens, Maximum concurrency for L tokens per request:
Xx`, and then stopped. max_model_len values that are not a multiple of the block size check that
the planner rounds to whole blocks the way the engine does.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import build_tiny_model, free_port, require_engine, stop_group

from engine.capacity import plan
from engine.profiles import launch_spec, load_profile

KV_LINE = re.compile(
    r"CPU KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"
)
CASES = [  # shape, max_model_len
    ("qwen3-tiny", 512),
    ("qwen3-tiny-mha", 500),
    ("qwen3-tiny-gqa8", 1000),
]


def engine_kv_line(argv: list[str], env: dict[str, str], log_path: Path, timeout: float = 420) -> re.Match:
    """Start the engine, return its KV-capacity log line, and stop the whole process group."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, stdin=subprocess.DEVNULL
        )
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = log_path.read_text(errors="replace")
            match = KV_LINE.search(text)
            if match:
                return match
            if proc.poll() is not None:
                raise AssertionError(
                    f"engine exited with {proc.returncode} before sizing its KV cache:\n{text[-3000:]}"
                )
            time.sleep(0.5)
        raise AssertionError(f"no KV cache line after {timeout} s; log: {log_path}")
    finally:
        stop_group(proc, grace=10)


@pytest.mark.e2e
@pytest.mark.parametrize("shape, max_len", CASES)
def test_planned_kv_tokens_equal_the_engines(shape, max_len, model_cache, tmp_path, monkeypatch):
    require_engine()
    model = build_tiny_model(model_cache, shape)
    profile = load_profile(
        "cpu-tiny",
        # 1 GiB, not the demo's 4 MiB: a budget of a million tokens, where a planner that is off by
        # a block per layer would show
        [f"engine.max_model_len={max_len}", f"server.port={free_port()}", "engine.kv_cache_memory_bytes=1073741824"],
        model=str(model),
    )
    planned = plan(profile)
    spec = launch_spec(profile, "0.32.0", sys.executable)
    match = engine_kv_line(spec.argv, {**os.environ, **spec.env}, tmp_path / "engine.log")

    engine_tokens = int(match.group(1).replace(",", ""))
    assert int(match.group(2).replace(",", "")) == max_len
    assert planned.kv_tokens == engine_tokens
    assert f"{planned.max_concurrency:.2f}" == match.group(3)
