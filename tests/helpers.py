"""What tests share besides fixtures: paths, a free port, the engine's environment, a tiny model,
and starting or stopping a real vLLM server. Test modules import it as `helpers`."""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# Recorded real outputs (vLLM logs, /metrics) shared with the research notes, copied as they are.
SAMPLES = FIXTURES / "vllm"
# A stand-in for vLLM's API server: replays a recorded log, forks helpers like EngineCore, answers /health.
FAKE_ENGINE = FIXTURES / "launcher" / "fake_engine.py"


def fake_engine_argv(log: Path, port: int, pidfile: Path | None = None, *args: str) -> list[str]:
    """The stand-in engine's command line, in place of vLLM's (see its --help for `args`)."""
    argv = [sys.executable, str(FAKE_ENGINE), "--log", str(log), "--port", str(port)]
    if pidfile is not None:
        argv += ["--pidfile", str(pidfile)]
    return [*argv, *args]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def require_engine() -> None:
    if importlib.util.find_spec("vllm") is None:
        if os.environ.get("ASCENDCTL_REQUIRE_E2E") == "1":
            pytest.fail("the vLLM engine is not installed: run ./install.sh --dev")
        pytest.skip("the vLLM engine is not installed (./install.sh installs it)")


def require_tool(name: str, package: str = "prometheus") -> str:
    """A tool `./install.sh --dev` installs (promtool, prometheus, chromium): its path; skipped
    when absent, except under ASCENDCTL_REQUIRE_E2E=1 (CI), where a missing tool fails the test.
    `package`: the Debian package that brings it."""
    import shutil

    found = shutil.which(name)
    if found is None:
        if os.environ.get("ASCENDCTL_REQUIRE_E2E") == "1":
            pytest.fail(f"{name} is not installed: run ./install.sh --dev (as root, it installs Debian's {package})")
        pytest.skip(f"{name} is not installed (./install.sh --dev installs it)")
    return found


def require_module(name: str) -> None:
    """A Python package of the `dev` extra: skipped when absent, a failure under ASCENDCTL_REQUIRE_E2E=1."""
    if importlib.util.find_spec(name) is None:
        if os.environ.get("ASCENDCTL_REQUIRE_E2E") == "1":
            pytest.fail(f"the {name} package is not installed: run ./install.sh --dev")
        pytest.skip(f"the {name} package is not installed (./install.sh --dev installs it)")


def headless_browser():  # noqa: ANN201 - a selenium WebDriver (selenium is imported only here)
    """Debian's chromium, headless, through chromedriver, with the page's console log kept (an
    HTML report's test checks it opens offline with no console error). Skipped when absent."""
    require_module("selenium")
    chromium = require_tool("chromium", "chromium")
    driver_path = require_tool("chromedriver", "chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver_path), options=opts)


def engine_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", NO_COLOR="1", VLLM_CPU_KVCACHE_SPACE="1", TOKENIZERS_PARALLELISM="false")
    env.update(extra)
    return env


def build_tiny_model(cache: Path, shape: str = "qwen3-tiny") -> Path:
    require_engine()
    from engine.demo.tiny_model import build, is_built

    out = cache / shape
    if not is_built(out):
        build(out, shape)
    return out


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


def stop_serve(proc: subprocess.Popen, engine_pgids: tuple[int, ...] | list[int] = (), grace: float = 60) -> None:
    """Stop an `ascendctl serve` a test started, and its engine, even when the test failed midway:
    SIGTERM lets serve stop its engine's process group; whatever is left after `grace` is killed
    (serve's engine runs in a group of its own, which killing serve alone would leave running)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for pgid in engine_pgids:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def fake_tiny_model(out: Path) -> Path:
    """The demo's qwen3-tiny model as the planner and the preflight see it (config.json and a
    safetensors header, no weights), marked built so nothing rebuilds it: for tests that launch
    the stand-in engine, which never loads a model."""
    import json
    import struct

    out.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "torch_dtype": "bfloat16",
        "vocab_size": 1024,
        "max_position_embeddings": 4096,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
    }
    (out / "config.json").write_text(json.dumps(config), encoding="utf-8")
    header = json.dumps(
        {"model.embed_tokens.weight": {"dtype": "BF16", "shape": [1024, 128], "data_offsets": [0, 262144]}}
    )
    (out / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header.encode())
    (out / "ASCENDCTL_TINY_MODEL").write_text("qwen3-tiny (headers only, for tests)\n", encoding="utf-8")
    return out


NPU_SMI = FIXTURES / "npu_smi"


def fake_npu_smi(
    bin_dir: Path, info: str = "info/s02_910b2_25.2.0_vllm_dp.txt", usages: str = "usages/u2_910b_25.5.1.txt"
) -> Path:
    """An `npu-smi` on PATH that replays recorded outputs: `info` prints the `info` recording,
    `info -t usages -i N` the `usages` one, anything else fails as npu-smi does. While the file
    `<bin_dir>/hang` exists it hangs instead (a driver that stopped answering)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    tool = bin_dir / "npu-smi"
    tool.write_text(
        "#!/bin/sh\n"
        f'[ -e "{bin_dir}/hang" ] && exec sleep 600\n'
        f'if [ "$*" = "info" ]; then exec cat "{NPU_SMI / info}"; fi\n'
        f'case "$*" in "info -t usages -i "*) exec cat "{NPU_SMI / usages}";; esac\n'
        'echo "Usage: npu-smi info <watch|proc|...>" >&2; exit 1\n'
    )
    tool.chmod(0o755)
    return tool


def require_pypi() -> None:
    """Skip a `network` test when PyPI cannot be reached (deselect them offline: -m 'not network')."""
    import urllib.request

    try:
        urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=20).close()
    except OSError as exc:
        pytest.skip(f"PyPI cannot be reached ({exc}); these tests need it")


def serve_events(proc: subprocess.Popen) -> queue.Queue:
    """NDJSON events of `serve --json`, read in a thread so the test can wait with a timeout."""
    q: queue.Queue = queue.Queue()

    def pump():
        for line in proc.stdout:
            q.put(json.loads(line))
        q.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return q


def wait_event(q: queue.Queue, kind: str, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            event = q.get(timeout=1)
        except queue.Empty:
            continue
        if event is None:
            raise AssertionError(f"serve ended before {kind!r}")
        if event["event"] == "end":
            raise AssertionError(f"serve ended before {kind!r}: {event}")
        if event["event"] == kind:
            return event
    raise AssertionError(f"no {kind!r} event within {timeout} s")
