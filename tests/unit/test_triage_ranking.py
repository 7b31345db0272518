"""What leads a triage report: a specific cause before a catch-all code (EZ9999, 507014) or a
wrapper, errors before warnings, the first cause before its echoes; and a report of catch-alls,
consequences or warnings alone names no issue but points at the root line. Real lines only: the
rules' own samples and the recorded fixtures (tests/fixtures/logs/PROVENANCE.md)."""

from __future__ import annotations

import re

import pytest
from helpers import FIXTURES

from engine.triage import diagnose_lines, explain, load_rules, scan_paths
from engine.triage.formats import parse_line

LOGS = FIXTURES / "logs"

# vllm-ascend issue 4020 (FIA tiling) and sglang issue 30453 (aicore timeout), as recorded.
TILING = "e05_vllm_ascend_4020_fia_561002.log"
AICORE_TIMEOUT = "e03_sglang_30453_aicore_timeout.log"
# A torch_npu report whose E-code block says only "inner error" (vllm-ascend issue 6190's wrapper
# and the EZ9999 lines of sglang issue 30453).
INNER_ONLY = [
    "RuntimeError: The Inner error is reported as above. The process exits for this inner error, and the current "
    "working operator name is aclnnRmsNorm.",
    "[ERROR] 2026-07-07-07:20:43 (PID:163686, Device:1, RankID:-1) ERR00100 PTA call acl api failed.",
    "EZ9999: Inner Error!",
]
DTYPE = (
    "AclNN_Parameter_Error(EZ1001): Tensor scale not implemented for DT_FLOAT16, should be in dtype support list "
    "[DT_UINT64, DT_BFLOAT16, DT_INT64, DT_FLOAT]"
)
NUMPY2 = "A module that was compiled using NumPy 1.x cannot be run in"
PRECISION_MODE = (
    "RuntimeError: SetPrecisionMode:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:155 NPU function error: "
    "at_npu::native::AclSetCompileopt(aclCompileOpt::ACL_PRECISION_MODE, precision_mode), error code is 500001"
)
TOOLKIT_OWNER = "Warning: The /usr/local/Ascend/ascend-toolkit/latest owner does not match the current owner."
ULIMIT = (
    "(APIServer pid=25783) WARNING 11-29 21:12:58 [system_utils.py:255] Found ulimit of 1024 and failed to "
    "automatically increase with error current limit"
)
KV = (
    "(EngineCore pid=25107) ERROR 11-29 21:12:20 [core.py:1510] ValueError: No available memory for the cache "
    "blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
)


def ids(report):
    return [i.id for i in report.issues]


def test_a_specific_operator_message_leads_over_the_codes_around_it():
    report = scan_paths([str(LOGS / TILING)])
    assert report.root_cause().id == "aclnn-tiling-failed"
    found = {i.id: i for i in report.issues}
    # E89999 and torch_npu's ERR00100 are listed, after every specific finding, worded as catch-alls.
    generic = [i for i in report.issues if i.generic]
    assert {"cann-e89999", "torch_npu-err00100"} <= {i.id for i in generic}
    assert all(ids(report).index(g.id) > ids(report).index("aclnn-tiling-failed") for g in generic)
    assert "acl-561002" not in ids(report)  # the tiling code is that rule's failure: one name
    assert found["cann-e89999"].title.endswith("(generic): see the lines around it")


def test_a_dtype_complaint_leads_over_the_inner_error_block_before_it():
    report = diagnose_lines([*INNER_ONLY, DTYPE])
    assert report.root_cause().id == "aclnn-dtype-unsupported"
    assert ids(report)[0] == "aclnn-dtype-unsupported"
    assert {"cann-ez9999", "cann-ez1001", "torch-npu-inner-error"} <= set(ids(report))


def test_catch_alls_alone_name_no_issue_and_point_at_the_detail_line():
    report = scan_paths([str(LOGS / AICORE_TIMEOUT)])
    # 507014 / "aicore timeout" is what everything that waited on the real fault prints.
    # 507014 is the aicore-timeout rule's own code (`codes:`): one failure, one name
    assert {"aicore-timeout", "cann-ez9999"} <= set(ids(report)) and "acl-507014" not in ids(report)
    assert report.root_cause() is None
    assert "Kernel task happen error, retCode=0x25, [aicore timeout]" in report.root_line
    bare = diagnose_lines(INNER_ONLY)
    assert bare.root_cause() is None and bare.issues  # listed, not named


def test_a_rank_whose_own_kernel_timed_out_is_not_blamed_on_its_hccl_watchdog():
    # sglang issue 30453: the rank's AI Core kernel timed out (507014), then its HCCL watchdog
    # ended the collective. The watchdog is the consequence; 507014 names no cause by itself, so
    # the report names nothing and points at the timeout line rather than at "a peer stopped".
    report = scan_paths([str(LOGS / AICORE_TIMEOUT), str(LOGS / "e04_sglang_30453_hccl_watchdog.log")])
    assert "hccl-watchdog-timeout" in ids(report) and report.root_cause() is None
    assert "error code is 507014" in report.root_line


def test_the_first_cause_leads_over_a_later_one_of_the_same_severity():
    # numpy 2 refused at import; the first ACL call fails afterwards (its cause is not the kernels).
    report = diagnose_lines([NUMPY2, PRECISION_MODE])
    assert report.root_cause().id == "numpy2-abi-mismatch"
    assert ids(report).index("acl-set-precision-mode") > 0


def test_the_rule_that_explains_a_wrapper_leads_it():
    report = scan_paths([str(LOGS / "e02_vllm_ascend_692_acl_500001.log")])
    assert report.root_cause().id == "cann-ge-init-failed"
    assert ids(report)[-1] == "acl-set-precision-mode"


def test_warnings_never_lead_over_errors():
    report = diagnose_lines([ULIMIT, KV])
    assert report.root_cause().id == "vllm-no-kv-cache-memory"
    assert ids(report) == ["vllm-no-kv-cache-memory", "vllm-fd-ulimit-low"]


def test_a_warning_before_an_unknown_error_names_nothing_and_the_error_is_the_root_line():
    # e11b's line with a parameter name no rule knows
    error = "KeyError: 'model.layers.23.mlp.experts.w2_weight' [repeated 14x across cluster]"
    report = diagnose_lines([TOOLKIT_OWNER, error])
    assert ids(report) == ["ascend-toolkit-owner"]
    assert report.root_cause() is None
    assert report.root_line == error


def test_a_warning_that_names_the_error_line_itself_is_named():
    # vllm-ascend logs the failed import of its kernels at ERROR and serves on: the warning-level
    # rule explains that very error event, so it is the answer, not a warning beside an unknown error
    line = (
        "ERROR 04-28 16:10:09 camem.py:69] Failed to import vllm_ascend_C:No module named 'vllm_ascend.vllm_ascend_C'"
    )
    report = diagnose_lines([line])
    assert report.root_cause().id == "ascend-custom-kernels-not-loaded"
    # ... and stays behind an error that follows it
    assert diagnose_lines([line, "KeyError: 'model.layers.23.mlp.experts.w2_weight'"]).root_cause() is None


def test_a_warning_alone_is_named():
    report = diagnose_lines([ULIMIT])
    assert report.root_line is None  # a warning line is not where a failure starts
    assert report.root_cause().id == "vllm-fd-ulimit-low"


@pytest.mark.parametrize(
    "code, generic",
    [
        ("EZ9999", True),  # inner error of any operator
        ("EH9999", True),
        ("EZ1001", True),  # any parameter check
        ("EZ1008", True),  # known only by its module range
        ("507014", True),  # AI Core timeout: what waited on the fault
        ("507011", True),  # model execute: a wrapper
        ("ERR00100", True),  # torch_npu's category code
        ("507033", False),  # device setup failed: says what
        ("EI0006", False),  # HCCL socket timeout
        ("207001", False),  # device out of memory
    ],
)
def test_code_table_marks_catch_alls_with_a_reason(code, generic):
    info = explain(code)
    assert bool(info.generic) is generic
    assert not generic or len(info.generic) > 30  # a reason a user can read


_WARNING_LINE = re.compile(r"\b(?:WARNING|WARN|UserWarning)\b|^Warning: |\[W[ \d]")


def _is_warning(sample: str) -> bool:
    # NCCL prints its errors on its WARN channel (`NCCL WARN Error while ...`).
    return "NCCL WARN" not in sample and (
        parse_line(sample).level in ("WARNING", "WARN") or _WARNING_LINE.search(sample) is not None
    )


@pytest.mark.parametrize("rule", load_rules(), ids=lambda r: r.id)
def test_a_rule_whose_samples_are_all_warnings_is_not_an_error(rule):
    if all(_is_warning(s) for s in rule.samples):
        assert rule.severity in ("warning", "info"), rule.samples[0]


def test_serve_crash_diagnosis_names_the_cause_without_the_catch_alls_around_it():
    from engine.launcher.diagnosis import diagnose

    lines = (LOGS / "e06_vllm_ascend_4256_aicpu_507011.log").read_text(encoding="utf-8").splitlines()
    assert [f.id for f in diagnose(lines, exit_code=1).findings] == ["aicpu-exception"]
    # With only catch-alls, they are shown (worded as such) rather than nothing.
    only = diagnose((LOGS / AICORE_TIMEOUT).read_text(encoding="utf-8").splitlines(), exit_code=1).findings
    assert only and all(f.generic for f in only)


# torch_npu's warning for a vector-core fault, as printed in a Triton-Ascend kernel test log: only
# the code says what failed.
VECTOR_CORE_WARNING = (
    "[W614 19:45:30.602900611 compiler_depend.ts:545] Warning: NPU warning, error code is 507035[Error]: "
)


def test_a_code_that_a_rule_declares_is_named_once_by_the_rule():
    report = diagnose_lines([VECTOR_CORE_WARNING])
    assert report.root_cause().id == "vector-core-exception"
    assert "acl-507035" not in ids(report)
    assert explain("507035").name == "ACL_ERROR_RT_VECTOR_CORE_EXCEPTION"  # --explain still knows the code


# Ascend/pytorch issue 54: the device's report of an HCCL FFTS+ task that timed out, then the
# host-side sync that gave up; the first is what the operator has to chase (a peer that stopped).
FFTS_TIMEOUT = [
    "EI9999: 2024-10-21-10:42:00.204.495  The error from device(chipId:2, dieId:0), serial number is 9, hccl "
    "fftsplus task timeout occurred during task execution, stream_id:5, sq_id:5, task_id:38827, stuck notify num:1, "
    "timeout:30min(default).[FUNC:ProcessStarsHcclFftsPlusTimeoutErrorInfo][FILE:device_error_proc.cc][LINE:1435]",
    "EE1002 Stream synchronize timeout. rtDeviceSynchronize execute failed, reason=[stream sync timeout]",
]
# vllm-ascend issue 2754: HCCL runs out of RDMA queue pairs, then the link it needed fails.
QP_EXHAUSTED = [
    "(VllmWorker TP3 pid=2322) ERROR 09-04 09:44:06 [multiproc_executor.py:596] RuntimeError: EI0007: [PID: 2322] "
    "2025-09-04-09:44:05.909.517 Failed to allocate resource[qp] with info [aicpu rank:7,localUserrank:7,localIpAddr: "
    "100.97.0.8,deviceLogicId:3,send_cq_depth:32768]. Reason: Memory resources are exhausted.",
    "(VllmWorker TP3 pid=2322) ERROR 09-04 09:44:06 [multiproc_executor.py:596]         Transport init error. Reason: "
    "[Create][DestLink]Create Dest error! creakLink para:rank[7]-localUserrank[7]-localIpAddr[192.168.1.3], "
    "dst_rank[1]-remoteUserrank[1]-remote_ip_addr[192.168.1.3]",
]

# CANN's HCCL user guide (FAQ EJ0002): HCCP gets ENOLINK from the NPU NIC; then a listen on that
# NIC fails (the line of vllm-ascend issue 4725), which alone would read as a port taken.
PORT_DOWN = [
    "[ERROR] HCCP(46430,alltoallv_test):2023-09-21-03:43:49.546.469 [ra hdc.c:1270]tid:46430,ra_hdc_rdev_init(1270) : "
    "[init][ra_hdc_rdev]ra hdc message process failed ret(-67) phy_id(3)",
    "[ERROR] HCCL(60570,):2025-12-04-14:46:07.911.312 [hccl_socket.cc:106] [60570][HcclSocket][Listen] socket type[0], "
    "listen on ip[192.2.2.195] and specific port[16666] fail. Please check the port status and whether the port is "
    "being used by other process.",
]

# hicann/hccl's fault-diagnosis guide: an AIV-mode collective's kernel faults; the runtime words it
# as an AI Core kernel failure, which alone would point at a model operator.
AIV_KERNEL = [
    "[ERROR] RUNTIME(699131,python):2025-04-24-21:54:17.707.236 [davinci_kernel_task.cc:1268]699131 "
    "PrintErrorInfoForDavinciTask:[INIT][DEFAULT]Aicore kernel execute failed, device_id=0, stream_id=2, "
    "report_stream_id=2, task_id=55873, flip_num=2073, fault kernel_name=aiv_all_reduce_***, fault kernel info "
    "ext=aiv_all_reduce_910b_bfloat16_t, program id=42, hash=9645272693770703471.",
]

# A vector-core fault (Ascend/pytorch issue 66), then the driver call that fails on that device as
# a driver internal error (vllm-ascend issue 8186): the kernel fault is the one to chase.
FAULT_THEN_DRIVER = [
    "RuntimeError: operator():build/CMakeFiles/torch_npu.dir/compiler_depend.ts:25 NPU function error: "
    "c10_npu::acl::AclrtSynchronizeStreamWithTimeout(copy_stream), error code is 507035",
    "(Worker_TP0 pid=1070) ERROR 04-30 23:38:48 [multiproc_executor.py:932]         rtMemGetInfoEx execution failed, "
    "reason=driver error:internal error[FUNC:FuncErrorReason][FILE:error_message_manage.cc][LINE:65]",
]

# MoE dispatch could not get its HCCL resources (vllm-ascend issue 8568); where the log also shows
# the tiling check's HCCL_BUFFSIZE complaint (vllm-ascend issue 4051), that is the cause to fix.
MOE_WINDOW = [
    "EZ9999[PID: 5317] 2026-04-22-08:49:02.433.180 AclNN_Inner_Error(EZ9999):  Nnopbase fails to invoke the "
    "HcclAllocComResourceByTiling function of the hccl module. ret = 4, comm = 0xfffeb02eb000.",
    "(Worker_TP0_EP0 pid=940663) ERROR 11-07 06:32:37 [multiproc_executor.py:671] EZ9999[PID: 940663] "
    "2025-11-07-06:32:37.914.373 (EZ9999):  HCCL_BUFFSIZE is too SMALL, maxBs = 64, h = 2048, epWorldSize = 4, "
    "localMoeExpertNum = 128, sharedExpertNum = 0, tokenNeedSizeDispatch = 4608, tokenNeedSizeCombine = 4096, k = 10, "
    "NEEDED_HCCL_BUFFSIZE(((maxBs * tokenNeedSizeDispatch * ep_worldsize * localMoeExpertNum) + (maxBs * "
    "tokenNeedSizeCombine * (k + sharedExpertNum))) * 2) = 294MB, HCCL_BUFFSIZE=200MB.",
]


@pytest.mark.parametrize(
    "lines, cause, echo",
    [
        (FFTS_TIMEOUT, "npu-fftsplus-timeout", "hccl-op-timeout"),
        (QP_EXHAUSTED, "hccl-qp-resources-exhausted", "hccl-transport-init"),
        (list(reversed(QP_EXHAUSTED)), "hccl-qp-resources-exhausted", "hccl-transport-init"),
        (PORT_DOWN, "hccl-nic-port-down", "hccl-socket-listen-failed"),
        (AIV_KERNEL, "hccl-aiv-op-failed", "aicore-exception"),
        (FAULT_THEN_DRIVER, "vector-core-exception", "npu-driver-internal-error"),
        (MOE_WINDOW, "moe-hccl-buffsize-too-small", "moe-dispatch-hccl-resource"),
    ],
)
def test_the_cause_leads_over_the_failure_it_explains(lines, cause, echo):
    report = diagnose_lines(lines)
    assert report.root_cause().id == cause
    assert echo in ids(report)[1:]


def test_moe_dispatch_without_its_hccl_resources_is_named_when_nothing_explains_it():
    assert diagnose_lines(MOE_WINDOW[:1]).root_cause().id == "moe-dispatch-hccl-resource"


def test_the_first_acl_call_alone_names_nothing_and_shows_its_line():
    # SetPrecisionMode is where torch_npu's first ACL call fails, whatever broke before it.
    report = diagnose_lines([PRECISION_MODE])
    assert report.root_cause() is None
    assert "AclSetCompileopt" in report.root_line
