"""The state directory as it may be found: a file, or holding a damaged run record. Neither is
a crash: exit 2 naming ASCENDCTL_STATE_DIR where something must be written there, a warning and
the remaining runs where it is only read."""

from __future__ import annotations

import json
import os

from helpers import FIXTURES, free_port

from ascendctl.cli import main
from engine.runs import RunInfo, list_runs, runs_dir, write_run

KV_LOG = FIXTURES / "vllm" / "fail_kv_too_small.log"


def test_a_state_dir_that_is_a_file_is_bad_input_naming_the_variable(capsys, tmp_path, monkeypatch):
    state = tmp_path / "state-file"
    state.write_text("not a directory\n")
    monkeypatch.setenv("ASCENDCTL_STATE_DIR", str(state))
    model = FIXTURES / "models" / "Qwen3-32B"
    port = str(free_port())
    code = main(
        ["serve", "-p", "cpu-tiny", "--skip-preflight", "--set", f"model.path={model}", "--set", f"server.port={port}"]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert "ASCENDCTL_STATE_DIR" in err and "unexpected error" not in err
    skipped: list[str] = []
    assert list_runs(skipped=skipped) == [] and "ASCENDCTL_STATE_DIR" in skipped[0]


def _run_record(name: str, log: str, **fields) -> RunInfo:
    directory = runs_dir() / name
    directory.mkdir(parents=True)
    (directory / "engine.log").write_text(log)
    info = RunInfo(name, str(directory), os.getpid(), "http://127.0.0.1:1", "cpu-tiny", started_at=1.0)
    write_run(info)
    if fields:
        data = json.loads((directory / "run.json").read_text())
        (directory / "run.json").write_text(json.dumps({**data, **fields}))
    return info


def test_a_damaged_run_record_is_skipped_with_a_warning(capsys):
    _run_record("20250101-000000-good", KV_LOG.read_text())
    _run_record("20250102-000000-bad", "", pid="abc", started_at=2.0)
    skipped: list[str] = []
    assert [r.run_id for r in list_runs(skipped=skipped)] == ["20250101-000000-good"]
    assert "20250102-000000-bad" in skipped[0] and "pid" in skipped[0]
    # triage without a LOG takes the newest readable run's log
    assert main(["triage", "--json"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["inputs"][0].endswith("20250101-000000-good/engine.log")
    assert "skipped a damaged run record" in err and "unexpected error" not in err
    assert main(["top", "--once", "--no-devices", "--json", "--interval", "0.1"]) in (0, 3)
    out, err = capsys.readouterr()
    assert "skipped a damaged run record" in err and "unexpected error" not in err
    assert [e["label"] for e in json.loads(out)["engines"]] == ["20250101-000000-good"]
