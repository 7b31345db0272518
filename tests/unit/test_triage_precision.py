"""Triage precision on wordings a fresh held-out set showed: tokenizer classes with digits, vLLM's
free-memory check failing on equal numbers (XPU), and a worker's start-up failure whose log shows
only the wrapper line and traceback frames."""

from __future__ import annotations

import pytest

from engine.triage import diagnose_lines, load_rules


def ids(report) -> set[str]:
    return {i.id for i in report.issues}


@pytest.mark.parametrize("cls", ["Qwen2Tokenizer", "InternLM2Tokenizer", "TokenizersBackend"])
def test_tokenizer_classes_with_digits_are_named(cls):
    line = f"ValueError: Tokenizer class {cls} does not exist or is not currently imported."
    report = diagnose_lines([line])
    assert report.root_cause() is not None and report.root_cause().id == "vllm-tokenizer-class-missing"


def test_the_free_memory_check_with_equal_numbers_is_not_blamed_on_memory_that_rose():
    # vllm-project/vllm PR 33358: on XPU free memory is the same before and after profiling
    line = (
        "(EngineCore_DP0 pid=418) ERROR 01-29 15:38:21 [core.py:946] AssertionError: Error in memory profiling. "
        "Initial free memory 30.3 GiB, current free memory 30.3 GiB. This happens when other processes sharing "
        "the same container release GPU memory while vLLM is profiling during initialization."
    )
    issue = next(i for i in diagnose_lines([line]).issues if i.id == "vllm-memory-profiling-error")
    assert "rose" not in issue.title and "did not fall" in issue.title
    assert "equal" in issue.cause and "strictly" in issue.cause
    assert "33358" in issue.fix


FRAMES_ONLY = [
    "(Worker_TP0 pid=7) ERROR 12-07 04:20:01 [multiproc_executor.py:597] WorkerProc failed to start.",
    "(Worker_TP0 pid=7) ERROR 12-07 04:20:01 [multiproc_executor.py:597] Traceback (most recent call last):",
    '(Worker_TP0 pid=7) ERROR 12-07 04:20:01 [multiproc_executor.py:597]   File "/opt/venv/lib/python3.11/'
    'site-packages/vllm/v1/executor/multiproc_executor.py", line 571, in worker_main',
    "(Worker_TP0 pid=7) ERROR 12-07 04:20:01 [multiproc_executor.py:597]     worker = WorkerProc(*args, **kwargs)",
    "(Worker_TP0 pid=7) ERROR 12-07 04:20:01 [multiproc_executor.py:597]              ^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    '(Worker_TP0 pid=7) ERROR 12-07 04:20:01 [multiproc_executor.py:597]   File "/opt/venv/lib/python3.11/'
    'site-packages/vllm/v1/worker/worker_base.py", line 266, in init_device',
    "(Worker_TP0 pid=7) ERROR 12-07 04:20:01 [multiproc_executor.py:597]     self.worker.init_device()",
]


def test_a_worker_start_failure_cut_to_its_frames_is_an_engine_start_failure_with_its_root_line():
    report = diagnose_lines(FRAMES_ONLY)
    assert ids(report) == {"vllm-engine-startup-failed"}
    # the root line is where the traceback stops, not "Traceback (most recent call last):"
    assert report.root_line.startswith("traceback cut off at File ")
    assert "worker_base.py" in report.root_line and "init_device" in report.root_line
    assert all("Traceback (most recent call last)" not in t.template for t in report.unknown)


def test_the_rules_named_here_carry_their_sources():
    rules = {r.id: r for r in load_rules()}
    assert any("33358" in link for link in rules["vllm-memory-profiling-error"].links)
    assert any("Qwen3/issues/34" in link for link in rules["vllm-tokenizer-class-missing"].links)
