"""What stops a launch before the engine starts (a missing model, a plan that does not fit, a
taken port), what `serve -p cpu-tiny` builds for itself, the run directory's permissions and
masks, and user profile folders that cannot be read. The stand-in engine replays recorded logs."""

from __future__ import annotations

import dataclasses
import socket
import stat
import sys
from pathlib import Path

import pytest
from helpers import FIXTURES, SAMPLES, fake_tiny_model, free_port

from ascendctl.cli import main
from engine import runs
from engine.demo.ensure import model_dir

FAKE = FIXTURES / "launcher" / "fake_engine.py"


def _stand_in(monkeypatch, tmp_path: Path, *fake_args: str, log: Path = SAMPLES / "fail_kv_too_small.log") -> None:
    """serve / demo launch the stand-in engine instead of vLLM; everything else is the real path."""
    import ascendctl.profile_args as profile_args

    real_resolve = profile_args.resolve

    def resolve(profile, model, sets):
        prof, spec, version = real_resolve(profile, model, sets)
        argv = [sys.executable, str(FAKE), "--log", str(log), "--port", str(spec.port)]
        argv += ["--pidfile", str(tmp_path / "pids.json"), *fake_args]
        return prof, dataclasses.replace(spec, argv=argv), version

    monkeypatch.setattr(profile_args, "resolve", resolve)


def _nothing_started() -> bool:
    return not runs.runs_dir().exists() or not list(runs.runs_dir().iterdir())


# -- the model directory, checked before launch ---------------------------------------------------


@pytest.mark.parametrize(
    "kind, message",
    [
        ("missing", "model directory not found"),
        ("file", "is a file, not a model directory"),
        ("empty", "holds no config.json"),
    ],
)
def test_a_model_path_that_is_no_model_stops_serve_with_exit_2(capsys, monkeypatch, tmp_path, kind, message):
    _stand_in(monkeypatch, tmp_path, "--exit", "1", "--children", "0")  # what the engine would do
    target = tmp_path / "model"
    if kind == "file":
        target.write_text("not a model")
    elif kind == "empty":
        target.mkdir()
    code = main(
        ["serve", "-p", "cpu-tiny", "--model", str(target), "--set", f"server.port={free_port()}"]
        + ["--restart", "on-failure"]  # a deterministic failure is not retried
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and "--model DIR" in err
    assert "engine started" not in err and _nothing_started()


def test_demo_shares_the_model_check(capsys, monkeypatch, tmp_path):
    _stand_in(monkeypatch, tmp_path, "--exit", "1", "--children", "0")
    assert main(["demo", "--batch", "--model", str(tmp_path / "nope"), "--port", str(free_port())]) == 2
    assert "model directory not found" in capsys.readouterr().err and _nothing_started()


def test_serve_cpu_tiny_builds_the_demo_model_when_it_is_missing(capsys, monkeypatch, tmp_path):
    import engine.demo.ensure as ensure

    built = []

    def fake_ensure_model(*args, **kwargs):
        built.append(fake_tiny_model(model_dir()))
        return model_dir(), True

    monkeypatch.setattr(ensure, "ensure_model", fake_ensure_model)
    _stand_in(monkeypatch, tmp_path, "--exit", "1")
    code = main(["serve", "-p", "cpu-tiny", "--set", f"server.port={free_port()}", "--no-engine-output"])
    err = capsys.readouterr().err
    assert built == [model_dir()] and "built the demo model" in err
    assert code == 1 and "engine started" in err  # it got past the preflight and ran


def test_a_plan_that_does_not_fit_stops_serve_before_launch(capsys, monkeypatch, tmp_path):
    fake_tiny_model(model_dir())
    _stand_in(monkeypatch, tmp_path, "--exit", "1", "--children", "0")
    code = main(
        ["serve", "-p", "cpu-tiny", "--set", "engine.max_model_len=8192", "--set", f"server.port={free_port()}"]
        + ["--restart", "on-failure"]
    )
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2, err
    assert "the memory plan for profile cpu-tiny says it does not fit" in err
    assert "max_position_embeddings 4,096" in err and "--set engine.max_model_len=4096" in err
    assert "engine started" not in err and _nothing_started()


# -- demo's port fix names its own option ---------------------------------------------------------


def test_demo_with_a_taken_port_names_port_not_set(capsys, tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        code = main(["demo", "--batch", "--model", str(fake_tiny_model(tmp_path / "m")), "--port", str(port)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"--port {port + 1}" in err and "--set" not in err


# -- the run directory keeps secrets to its owner --------------------------------------------------


def test_the_run_directory_is_private_and_its_profile_masks_secrets(capsys, monkeypatch, tmp_path):
    fake_tiny_model(model_dir())
    _stand_in(monkeypatch, tmp_path, "--exit", "1")
    token = "hf_" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt"
    code = main(
        ["serve", "-p", "cpu-tiny", "--set", f"env.HF_TOKEN={token}", "--set", "env.DB_PASSWORD=hunter2"]
        + ["--set", f"server.port={free_port()}", "--no-engine-output"]
    )
    assert code == 1
    run = Path(runs.list_runs()[0].directory)
    saved = (run / runs.PROFILE_FILE).read_text()
    assert token not in saved and "hunter2" not in saved and "HF_TOKEN: '****'" in saved
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    assert stat.S_IMODE((run / runs.PROFILE_FILE).stat().st_mode) == 0o600


# -- user profiles that cannot be read are skipped, not fatal --------------------------------------


def test_a_binary_user_profile_is_skipped_with_a_warning(capsys, tmp_path):
    folder = tmp_path / "profiles"  # the conftest points ASCENDCTL_PROFILES_DIR here
    folder.mkdir()
    (folder / "x.yaml").write_bytes(b"\xff\xfe\x00\x01binary")
    assert main(["profile", "list"]) == 0
    out, err = capsys.readouterr()
    assert "cpu-tiny" in out and "x.yaml" not in out
    assert "skipped" in err and "x.yaml" in err
    assert main(["profile", "show", "cpu-tiny"]) == 0
    assert main(["serve", "-p", "cpu-tiny", "--dry-run"]) == 0


def test_an_unreadable_user_profile_folder_is_skipped_with_a_warning(capsys, monkeypatch, tmp_path):
    folder = tmp_path / "profiles"
    folder.mkdir()
    real_iterdir = Path.iterdir

    def iterdir(self):
        if self == folder:  # what a folder without read permission does (tests may run as root)
            raise PermissionError(13, "Permission denied", str(self))
        return real_iterdir(self)

    monkeypatch.setattr(Path, "iterdir", iterdir)
    for argv in (["profile", "show", "cpu-tiny"], ["serve", "-p", "cpu-tiny", "--dry-run"], ["profile", "list"]):
        assert main(argv) == 0, argv
        err = " ".join(capsys.readouterr().err.split())
        assert "cannot read your profiles folder" in err and "Permission denied" in err, argv
