"""The demo model in the user cache, built once by the engine interpreter (the builder needs
torch and transformers, which ascendctl itself never imports)."""

from __future__ import annotations

import sys
from pathlib import Path

from engine.demo.tiny_model import is_built
from engine.errors import BadInput, Unreachable
from engine.runs import cache_dir
from engine.system.runner import Runner, SubprocessRunner

BUILD_TIMEOUT = 900.0  # ~10 s on a quiet 2-core host; torch's first import can take minutes on a slow disk


def model_dir(shape: str = "qwen3-tiny") -> Path:
    """Where the demo model lives: <cache>/models/<shape> (the cpu-tiny profile points here)."""
    return cache_dir() / "models" / shape


def ensure_model(
    shape: str = "qwen3-tiny", python: str = sys.executable, runner: Runner | None = None, rebuild: bool = False
) -> tuple[Path, bool]:
    """The model directory, and whether it had to be built now."""
    out = model_dir(shape)
    if is_built(out) and not rebuild:
        return out, False
    runner = runner or SubprocessRunner()
    argv = [python, "-m", "engine.demo.tiny_model", str(out), "--shape", shape]
    try:
        result = runner.run(argv, timeout=BUILD_TIMEOUT)
    except Unreachable as exc:
        raise Unreachable(f"cannot build the demo model: {exc.cause}", exc.fix) from exc
    if not result.ok or not is_built(out):
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise BadInput(
            f"building the demo model failed: {last}",
            f"run `{python} -m engine.demo.tiny_model {out}` to see the whole error; "
            "./install.sh installs the engine it needs",
        )
    return out, True
