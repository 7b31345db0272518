"""A symptom is not a cause: when the evidence that leads a report is only a symptom that several
causes produce (an HCCP start-up failure, an HCCL watchdog timeout, an engine death, a crash after
an error its process logged first), triage says "likely one of" its candidate causes, each with
the evidence that decides, instead of naming one (issue 29: a wrong name is worse than none)."""

from __future__ import annotations

import importlib.util
import io
import json

import pytest
from helpers import FIXTURES
from test_bundle import HOSTS, bundle_of, make_run

from ascendctl.cli import main
from engine.errors import BadInput
from engine.triage import diagnose_lines, load_rules
from engine.triage.rules import parse_rules

ROOT = FIXTURES.parent.parent
EJ0001 = [
    "HCCL function error: hcclCommInitRootInfoConfig ... error code is 7",
    "EJ0001: 2024-05-21-11:57:54.167.645 Failed to initialize the HCCP process. Reason: Maybe the last training "
    "process is running.",
]
SEGFAULT_AFTER_ERROR = [
    "[FATAL]  Acl return error  kernels/ascend/attention/attention.cc:140, with ERROR 561103",
    "",
    "Segmentation fault (core dumped)",
]
WATCHDOG = [
    "[rank1]:[E707 07:20:43.220330280 compiler_depend.ts:1693] [Rank 1] HCCL watchdog thread terminated with exception:"
]


def test_an_hccp_start_failure_alone_lists_its_causes_instead_of_naming_one():
    report = diagnose_lines(EJ0001)
    assert report.root_cause() is None
    likely = report.likely()
    assert likely is not None and likely.id == "hccp-process-init-failed"
    assert 2 <= len(likely.likely) <= 3 and all(c.evidence for c in likely.likely)
    assert "hccp-port-in-use" in {c.rule for c in likely.likely}
    verdict = report.verdict()
    assert verdict["root_cause"] is None and verdict["likely"]["issue"] == "hccp-process-init-failed"


def test_a_port_that_cannot_be_bound_beside_it_names_the_cause():
    report = diagnose_lines([*EJ0001, "Communication_Error_Bind_IP_Port(EJ0003): Failed to bind the IP port."])
    assert report.likely() is None
    assert report.root_cause() is not None and report.root_cause().id == "hccp-port-in-use"


def test_a_crash_after_an_error_of_its_process_is_likely_that_error_alone_it_is_named():
    after = diagnose_lines(SEGFAULT_AFTER_ERROR)
    assert after.root_cause() is None and after.likely().id == "process-segfault"
    assert any("root line" in c.cause for c in after.likely().likely)
    assert "561103" in after.root_line
    alone = diagnose_lines(["Fatal Python error: Segmentation fault"])
    assert alone.likely() is None and alone.root_cause().id == "process-segfault"


def test_a_bare_hccl_watchdog_timeout_is_likely_one_of_three_causes():
    report = diagnose_lines(WATCHDOG)
    assert report.root_cause() is None
    assert report.likely().id == "hccl-watchdog-timeout" and len(report.likely().likely) == 3


def test_the_device_fault_that_broke_the_collective_still_leads_over_the_watchdog():
    lines = ["RuntimeError: ACL stream synchronize failed, error code:507015", *WATCHDOG]
    report = diagnose_lines(lines)
    assert report.likely() is None and report.root_cause().id == "aicore-exception"


def test_an_engine_death_alone_lists_what_kills_an_engine():
    line = (
        "(APIServer pid=22676) ERROR 11-29 21:08:51 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause."
    )
    report = diagnose_lines([line])
    assert report.root_cause() is None and report.likely().id == "vllm-engine-dead"


def test_every_likely_list_has_two_or_three_candidates_with_evidence():
    ids = {r.id for r in load_rules()}
    with_likely = [r for r in load_rules() if r.likely]
    assert len(with_likely) >= 4
    for r in with_likely:
        assert 2 <= len(r.likely) <= 3, r.id
        for c in r.likely:
            assert c.cause and c.evidence and (not c.rule or c.rule in ids), r.id


RULE = """rules:
  - id: sym-one
    title: t
    severity: error
    patterns: ['NPU function error']
    cause: c
    fix: f
    samples: ['NPU function error 12']
{extra}
  - id: other-one
    title: The other cause
    severity: error
    patterns: ['other failure here']
    cause: c
    fix: f
    samples: ['other failure here']
"""


def test_a_rule_candidate_reads_as_that_rules_title():
    extra = "    likely:\n      - {rule: other-one, evidence: e1}\n      - {cause: words, evidence: e2}\n"
    rules = {r.id: r for r in parse_rules(RULE.format(extra=extra), "x.yaml")}
    assert [c.cause for c in rules["sym-one"].likely] == ["The other cause", "words"]


@pytest.mark.parametrize(
    "extra, message",
    [
        ("    likely:\n      - {cause: only one, evidence: e}\n", "2 to 3"),
        ("    likely:\n      - {cause: a, evidence: e}\n      - {cause: b}\n", "evidence"),
        ("    likely:\n      - {cause: a, rule: other-one, evidence: e}\n      - {cause: b, evidence: e}\n", "rule:"),
        ("    likely:\n      - {rule: nobody, evidence: e}\n      - {cause: b, evidence: e}\n", "no other rule"),
        (
            "    likely_when: sometimes\n    likely:\n      - {cause: a, evidence: e}\n      - {cause: b, evidence: e}\n",
            "likely_when",
        ),
        ("    likely_when: after-error\n", "without a `likely:` list"),
    ],
)
def test_a_malformed_likely_list_is_refused_with_the_rule_named(extra, message):
    with pytest.raises(BadInput) as exc:
        parse_rules(RULE.format(extra=extra), "x.yaml")
    assert "sym-one" in exc.value.cause and message in exc.value.cause


def test_the_text_report_and_json_say_likely(tmp_path, capsys):
    log = tmp_path / "ej.log"
    log.write_text("\n".join(EJ0001) + "\n")
    assert main(["triage", str(log)]) == 1
    out = capsys.readouterr().out
    assert "Likely one of" in out and "decide by: npu-smi info" in out
    assert main(["triage", "--json", str(log)]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["root_cause"] is None
    assert data["likely"]["issue"] == "hccp-process-init-failed"
    assert {c["rule"] for c in data["likely"]["candidates"]} >= {"hccp-port-in-use"}
    assert all(c["evidence"] for c in data["likely"]["candidates"])


def test_serve_crash_diagnosis_says_likely():
    from ascendctl.launch_view import show_diagnosis
    from ascendctl.output import Output
    from engine.launcher.diagnosis import diagnose
    from engine.launcher.supervisor import Outcome

    diag = diagnose(EJ0001, 1)
    assert diag.likely is not None and diag.likely.id == "hccp-process-init-failed"
    err = io.StringIO()
    out = Output(stdout=io.StringIO(), stderr=err)
    from pathlib import Path

    show_diagnosis(out, Outcome(exit_code=1, run_dir=Path("run"), url="http://127.0.0.1:8000", diagnosis=diag))
    text = err.getvalue()
    assert "likely one of" in text and "decide by:" in text


def test_the_bundles_triage_report_says_likely(tmp_path):
    run = make_run(tmp_path / "state", "\n".join(EJ0001) + "\n", ["vllm", "serve", "m"], "engine: {}\n")
    _, top = bundle_of(HOSTS / "cpu-host", tmp_path / "b.tar.gz", run=str(run))
    report = json.loads((top / "triage.json").read_text())
    assert report["root_cause"] is None and report["likely"]["issue"] == "hccp-process-init-failed"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_triage_unseen", ROOT / "benchmarks/bench_triage_unseen.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_benchmark_scores_likely_on_its_own_line_never_right_never_wrong():
    bench = _bench()
    assert bench.verdict("hccp-port-in-use", None, ("hccp-port-in-use",)) == "likely"
    assert bench.verdict("none", None, ()) == "likely"
    t = bench.Tally()
    t.add("likely", "hccp-port-in-use", ("hccp-port-in-use",))
    t.add("likely", "none", ())
    t.add("right", "x", None)
    assert t.n == {"right": 1, "wrong": 0, "silent": 0, "likely": 2}
    assert "expected cause among the candidates: 1" in t.likely_line()
    good = bench.Tally()
    good.n.update(right=39, wrong=1)
    assert bench.goal_line(good, "s").endswith(": met")  # 2.5% wrong, 97.5% right
    good.n.update(wrong=2)
    assert bench.goal_line(good, "s").endswith("NOT met")  # 4.9% wrong


def test_explain_shows_a_symptoms_candidates(capsys):
    assert main(["triage", "--explain", "hccp-process-init-failed"]) == 0
    out = capsys.readouterr().out
    assert "likely one of" in out and "hccp-port-in-use" in out and "decide by:" in out
    assert main(["triage", "--json", "--explain", "process-segfault"]) == 0
    rule = json.loads(capsys.readouterr().out)["rule"]
    assert rule["likely_when"] == "after-error" and len(rule["likely"]) == 3
