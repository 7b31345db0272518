"""The demo's model cache and requests (the whole demo on the real engine: test_serve_e2e.py)."""

from __future__ import annotations

import pytest

from ascendctl.cli import main
from engine.demo.ensure import ensure_model, model_dir
from engine.errors import BadInput, Unreachable
from engine.system.runner import CommandResult, ToolTimeout


class FakeRunner:
    """Stands in for the engine interpreter: records the call, optionally writes a model."""

    def __init__(self, returncode: int = 0, stderr: str = "", build: bool = True, hang: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.returncode, self.stderr, self.build, self.hang = returncode, stderr, build, hang

    def which(self, name):
        return name

    def run(self, argv, timeout=10.0, env=None):
        self.calls.append(list(argv))
        if self.hang:
            raise ToolTimeout("python did not answer within 900 s", "check the engine interpreter")
        if self.build:
            out = model_dir()
            out.mkdir(parents=True, exist_ok=True)
            (out / "ASCENDCTL_TINY_MODEL").write_text("qwen3-tiny seed=0\n")
            (out / "model.safetensors").write_bytes(b"x")
        return CommandResult(tuple(argv), self.returncode, "", self.stderr)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCENDCTL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ASCENDCTL_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "cache"


def test_the_model_is_built_once_into_the_cache_by_the_engine_interpreter(cache):
    runner = FakeRunner()
    path, built = ensure_model(python="/engine/python", runner=runner)
    assert built and path == cache / "models" / "qwen3-tiny"
    assert runner.calls == [["/engine/python", "-m", "engine.demo.tiny_model", str(path), "--shape", "qwen3-tiny"]]
    again, built_again = ensure_model(python="/engine/python", runner=runner)
    assert again == path and not built_again and len(runner.calls) == 1


def test_the_cpu_tiny_profile_serves_the_model_the_demo_builds(capsys):
    assert main(["serve", "--profile", "cpu-tiny", "--dry-run", "--json"]) == 0
    import json

    argv = json.loads(capsys.readouterr().out)["argv"]
    assert argv[argv.index("--model") + 1] == str(model_dir())


def test_a_failed_build_says_how_to_see_the_whole_error():
    runner = FakeRunner(returncode=1, build=False,
                        stderr="Traceback...\nModuleNotFoundError: No module named 'transformers'\n")
    with pytest.raises(BadInput) as err:
        ensure_model(python="/engine/python", runner=runner)
    assert "No module named 'transformers'" in err.value.cause
    assert "/engine/python -m engine.demo.tiny_model" in err.value.fix


def test_a_hung_build_is_unreachable_not_a_traceback():
    with pytest.raises(Unreachable) as err:
        ensure_model(python="/engine/python", runner=FakeRunner(hang=True))
    assert "cannot build the demo model" in err.value.cause


def test_demo_requests_against_a_dead_endpoint_fail_with_one_line():
    from conftest import free_port
    from engine.demo.chat import send

    with pytest.raises(Unreachable) as err:
        send(f"http://127.0.0.1:{free_port()}", "tiny", "chat", "hello")
    assert "/v1/chat/completions failed" in err.value.cause
