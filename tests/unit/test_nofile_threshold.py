"""One threshold for the open-file limit: doctor's system.nofile check and triage's
vllm-fd-ulimit-low rule agree on every value (issue 29: the rule warned at 20,000 open files while
doctor called that ok)."""

from __future__ import annotations

import pytest

from engine.doctor import limits
from engine.doctor.model import Status
from engine.triage import diagnose_lines
from engine.triage import rules as triage_rules


def vllm_line(n: int) -> str:
    return (
        f"(APIServer pid=25783) WARNING 11-29 21:12:58 [system_utils.py:255] Found ulimit of {n} and failed to "
        "automatically increase with error current limit exceeds maximum limit. This can cause fd limit errors"
    )


def triage_warns(n: int) -> bool:
    return "vllm-fd-ulimit-low" in {i.id for i in diagnose_lines([vllm_line(n)]).issues}


@pytest.mark.parametrize("n", [1024, limits.ENOUGH - 1, limits.ENOUGH, 20000, 60000])
def test_triage_warns_exactly_where_doctor_does(n):
    doctor_warns = limits.judge(n, n).status is Status.WARN  # a hard limit that does not let vLLM raise it
    assert triage_warns(n) is doctor_warns
    assert triage_warns(20000) is False and triage_warns(1024) is True


def test_the_threshold_lives_in_doctors_limits_module(monkeypatch):
    triage_rules.limit.cache_clear()
    monkeypatch.setattr(limits, "ENOUGH", 30000)
    try:
        assert triage_warns(20000) and limits.judge(20000, 20000).status is Status.WARN
    finally:
        triage_rules.limit.cache_clear()


def test_a_line_without_the_number_is_still_the_rules_problem():
    assert "vllm-fd-ulimit-low" in {
        i.id for i in diagnose_lines(["WARNING failed to automatically increase with error current limit"]).issues
    }


@pytest.mark.parametrize(
    "below", ["{number: 'ulimit of [0-9]+', limit: open-files}", "{number: 'of ([0-9]+)', limit: nobody}"]
)
def test_a_below_key_without_a_number_group_or_a_known_limit_is_refused(below):
    from engine.errors import BadInput

    text = (
        "rules:\n  - id: r-one\n    title: t\n    severity: warning\n    patterns: ['failed to increase']\n"
        f"    below: {below}\n    cause: c\n    fix: f\n    samples: ['failed to increase']\n"
    )
    with pytest.raises(BadInput) as exc:
        triage_rules.parse_rules(text, "x.yaml")
    assert "r-one.below" in exc.value.cause
