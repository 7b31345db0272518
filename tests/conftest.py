"""Shared fixtures. The end-to-end ones run the real vLLM CPU engine on a tiny model built here.

Without the engine installed, e2e tests are skipped, except under ASCENDCTL_REQUIRE_E2E=1 (set by
.ci/run), where a missing engine is a failure.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from hypothesis import settings

# CI replays the same examples every run (a red CI must be reproducible); local runs explore.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# Recorded real outputs (vLLM logs, /metrics) shared with the research notes, copied as they are.
SAMPLES = FIXTURES / "vllm"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def require_engine() -> None:
    if importlib.util.find_spec("vllm") is None:
        if os.environ.get("ASCENDCTL_REQUIRE_E2E") == "1":
            pytest.fail("the vLLM engine is not installed: run ./install.sh --dev")
        pytest.skip("the vLLM engine is not installed (./install.sh installs it)")


def engine_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", NO_COLOR="1", VLLM_CPU_KVCACHE_SPACE="1", TOKENIZERS_PARALLELISM="false")
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def model_cache() -> Path:
    """Tiny models persist across runs (they are deterministic): building one takes ~10 s."""
    base = Path(os.environ.get("ASCENDCTL_TEST_CACHE", Path.home() / ".cache" / "ascendctl-tests"))
    base.mkdir(parents=True, exist_ok=True)
    return base


def build_tiny_model(cache: Path, shape: str = "qwen3-tiny") -> Path:
    require_engine()
    from engine.demo.tiny_model import build, is_built

    out = cache / shape
    if not is_built(out):
        build(out, shape)
    return out


@pytest.fixture(scope="session")
def tiny_model(model_cache: Path) -> Path:
    return build_tiny_model(model_cache)


@dataclass
class Server:
    url: str
    port: int
    log_path: Path
    model_dir: Path
    proc: subprocess.Popen
    served_name: str = "tiny"


def wait_healthy(url: str, proc: subprocess.Popen, log_path: Path, timeout: float = 420) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"vLLM exited with {proc.returncode} during start-up:\n{tail}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"vLLM not healthy after {timeout} s; log: {log_path}")


def stop_group(proc: subprocess.Popen, grace: float = 20) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="session")
def vllm_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):
    """One real vLLM CPU server for the whole test session (start-up costs about a minute)."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("vllm") / "engine.log"
    argv = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(tiny_model), "--served-model-name", "tiny",
        "--host", "127.0.0.1", "--port", str(port),
        "--dtype", "bfloat16", "--max-model-len", "512", "--max-num-seqs", "8",
        "--enforce-eager",
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=engine_env(),
                                start_new_session=True, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, log_path)
        yield Server(url, port, log_path, tiny_model, proc)
    finally:
        stop_group(proc)
