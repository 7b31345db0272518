"""doctor's perf group: each check's good and bad value on recorded trees, values the host hides,
the live host through the real probes, and `doctor --write-env`."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from helpers import FIXTURES

from ascendctl.cli import main
from engine.doctor import run_doctor
from engine.doctor.model import Status

HOSTS = FIXTURES / "hosts"
TUNED = HOSTS / "perf-tuned-910b"
UNTUNED = HOSTS / "perf-untuned-910b"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def rows(root, *only: str) -> dict:
    return {c.id: c for c in run_doctor(root, only=list(only) or ["perf"]).checks}


# check id -> (what the untuned host shows, what its fix says)
UNTUNED_ROWS = {
    "perf.governor": ("governor ondemand on 192 core(s)", "scaling_governor"),
    "perf.thp": (
        "transparent huge pages: madvise",
        "echo always | sudo tee /sys/kernel/mm/transparent_hugepage/enabled",
    ),
    "perf.swap": ("vm.swappiness 60 with swap active", "sudo sysctl -w vm.swappiness=0"),
    "perf.numa_balancing": ("kernel.numa_balancing 1 on 4 NUMA nodes", "sudo sysctl -w kernel.numa_balancing=0"),
    "perf.sched_migration": ("sched_migration_cost_ns 500,000", "sudo sysctl -w kernel.sched_migration_cost_ns=50000"),
    "perf.kernel": ("kernel 4.19.90-2107.6.0.0100.oe1.aarch64", "5.10"),
    "perf.allocator": ("the running engine (pid 5151) uses glibc malloc", "libjemalloc.so.2"),
    "perf.cpu_binding": ("engine process(es) 5151 may run on any of the 192 online cores", "CPU_AFFINITY_CONF=1"),
    "perf.task_queue": ("TASK_QUEUE_ENABLE=0", "export TASK_QUEUE_ENABLE=2"),
    "perf.hccl_expansion": ("HCCL_OP_EXPANSION_MODE is unset", "export HCCL_OP_EXPANSION_MODE=AIV"),
    "perf.cpu_affinity": ("CPU_AFFINITY_CONF is unset", "export CPU_AFFINITY_CONF=1"),
    "perf.npu_alloc": ("garbage_collection_threshold:0.6", "expandable_segments:True"),
    "perf.launch_blocking": ("ASCEND_LAUNCH_BLOCKING=1", "unset ASCEND_LAUNCH_BLOCKING"),
}


@pytest.mark.parametrize("cid", sorted(UNTUNED_ROWS))
def test_each_check_warns_on_the_untuned_host_and_passes_on_the_tuned_one(cid):
    bad, good = rows(UNTUNED)[cid], rows(TUNED)[cid]
    found, fix = UNTUNED_ROWS[cid]
    assert bad.status is Status.WARN and found in bad.summary and fix in bad.fix
    assert "recommended: " in bad.summary  # the value the source recommends, and the source
    assert good.status is Status.OK, good


def test_the_report_keeps_value_level_source_and_effect():
    report = run_doctor(UNTUNED, only=["perf"]).to_dict()
    perf = report["facts"]["perf"]
    assert perf["perf.thp"]["value"] == "madvise" and perf["perf.thp"]["recommended"] == "always"
    assert perf["perf.hccl_expansion"]["level"] == "warning"  # msprechecker: severity high
    assert perf["perf.governor"]["level"] == "recommendation"
    assert "vllm-ascend-tuning" in perf["perf.swap"]["source"] and "latency" in perf["perf.swap"]["effect"]


def test_perf_findings_are_advice_unless_the_group_runs_alone(capsys):
    code, out, _ = run(capsys, "doctor", "--root", str(UNTUNED), "--strict")
    assert code == 0 and "ready to serve; 13 perf finding(s)" in out
    code, out, _ = run(capsys, "doctor", "--root", str(UNTUNED), "--check", "perf.*", "--strict")
    assert code == 1 and "13 warning(s)" in out and "cann.toolkit" not in out
    assert run(capsys, "doctor", "--root", str(TUNED), "--check", "perf.*", "--strict")[0] == 0


def test_values_the_host_hides_are_unknown_never_an_error(tmp_path):
    root = tmp_path / "h"
    shutil.copytree(UNTUNED, root, symlinks=True)
    # a container masks these: the file is missing, or something that is not a regular file
    shutil.rmtree(root / "sys/devices/system/cpu")
    (root / "sys/kernel/mm/transparent_hugepage/enabled").unlink()
    (root / "sys/kernel/mm/transparent_hugepage/enabled").mkdir()
    (root / "proc/sys/kernel/sched_migration_cost_ns").unlink()
    (root / "proc/sys/vm/swappiness").unlink()
    (root / "proc/swaps").unlink()
    got = rows(root)
    for cid in ("perf.governor", "perf.thp", "perf.sched_migration", "perf.swap", "perf.cpu_binding"):
        assert got[cid].status is Status.SKIP and got[cid].summary.startswith("unknown: "), got[cid]
    assert not [c for c in got.values() if c.status is Status.ERROR]


def test_a_tree_without_an_environment_skips_the_variables(tmp_path):
    root = tmp_path / "h"
    shutil.copytree(TUNED, root, symlinks=True)
    (root / ".recorded/env").unlink()
    got = rows(root)
    for cid in ("perf.task_queue", "perf.hccl_expansion", "perf.cpu_affinity", "perf.npu_alloc"):
        assert got[cid].status is Status.SKIP and "not recorded" in got[cid].summary


def test_a_cpu_engine_host_gets_what_applies_to_it():
    got = rows(HOSTS / "cpu-host")
    for cid in ("perf.task_queue", "perf.hccl_expansion", "perf.cpu_affinity", "perf.npu_alloc", "perf.kernel"):
        assert got[cid].status is Status.SKIP and got[cid].summary == "applies to Ascend NPU hosts"
    assert got["perf.allocator"].status is Status.WARN  # the CPU engine gains from jemalloc too
    assert {"perf.governor", "perf.thp", "perf.cpu_binding"} <= set(got)


def _first_line(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def test_this_host_through_the_real_probes():
    report = run_doctor(only=["perf"])
    assert report.live and report.platform == "cpu"
    perf = report.to_dict()["facts"]["perf"]
    got = {c.id: c for c in report.checks}
    thp = _first_line("/sys/kernel/mm/transparent_hugepage/enabled")
    if thp is None:
        assert got["perf.thp"].status is Status.SKIP
    else:
        assert perf["perf.thp"]["value"] == thp.split("[")[1].split("]")[0]
    swappiness = _first_line("/proc/sys/vm/swappiness")
    if swappiness is not None:
        assert perf["perf.swap"]["value"].split(" ")[0] == swappiness
    governor = _first_line("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    assert (got["perf.governor"].status is Status.SKIP) == (governor is None)
    assert not [c for c in report.checks if c.status is Status.ERROR]


# -- doctor --write-env --------------------------------------------------------------------------


def _sourced(path, *names: str) -> dict:
    script = f". {path}; " + "; ".join(f'echo "{n}=${{{n}-<unset>}}"' for n in names)
    out = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, check=True
    )
    return dict(line.split("=", 1) for line in out.stdout.splitlines())


def test_write_env_exports_what_the_host_lacks_with_why(capsys, tmp_path):
    path = tmp_path / "perf.env"
    code, out, _ = run(capsys, "doctor", "--root", str(UNTUNED), "--write-env", str(path))
    assert code == 0 and f"wrote {path}: 4 variable(s)" in out
    text = path.read_text()
    got = _sourced(
        path, "TASK_QUEUE_ENABLE", "HCCL_OP_EXPANSION_MODE", "CPU_AFFINITY_CONF", "PYTORCH_NPU_ALLOC_CONF", "LD_PRELOAD"
    )
    assert got == {
        "TASK_QUEUE_ENABLE": "2",
        "HCCL_OP_EXPANSION_MODE": "AIV",
        "CPU_AFFINITY_CONF": "1",
        "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
        "LD_PRELOAD": "<unset>",  # no jemalloc installed there: the line says how, commented
    }
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("export "):
            assert lines[i - 1].startswith("#"), line  # every variable says why
    assert "sudo apt install libjemalloc2" in text
    assert "\nunset ASCEND_LAUNCH_BLOCKING\n" in text  # set on that host: it switches the task queue off
    # the tuned host has jemalloc installed: its path is preloaded
    run(capsys, "doctor", "--root", str(TUNED), "--write-env", str(path))
    assert _sourced(path, "LD_PRELOAD")["LD_PRELOAD"] == "/usr/lib64/libjemalloc.so.2"


def test_write_env_for_a_profile_keeps_its_values_and_no_secret(capsys, tmp_path):
    prof = tmp_path / "p.yaml"
    prof.write_text(
        "name: one-npu\nplatform: ascend\ndevice: {kind: 910B4, hbm_gib: 32, count: 8}\nmodel: {path: /models/m}\n"
        "engine: {tensor_parallel_size: 1}\n"
        "env: {TASK_QUEUE_ENABLE: '1', HF_TOKEN: hf_SecretValueThatMustNotLeak1234}\n"
    )
    path = tmp_path / "perf.env"
    code, out, err = run(capsys, "doctor", "--root", str(UNTUNED), "-p", str(prof), "--write-env", str(path))
    assert code == 0, err
    text = path.read_text()
    assert "hf_SecretValueThatMustNotLeak1234" not in text + out and "HF_TOKEN: a secret" in text
    got = _sourced(path, "TASK_QUEUE_ENABLE", "HCCL_OP_EXPANSION_MODE")
    assert got == {"TASK_QUEUE_ENABLE": "1", "HCCL_OP_EXPANSION_MODE": "<unset>"}  # one NPU: no collectives
    assert "tensor_parallel_size 1" in text


def test_write_env_json_and_an_unwritable_path(capsys, tmp_path):
    code, out, _ = run(
        capsys, "doctor", "--json", "--root", str(HOSTS / "cpu-host"), "--write-env", str(tmp_path / "e.sh")
    )
    assert code == 0 and json.loads(out)["platform"] == "cpu"
    code, _, err = run(capsys, "doctor", "--root", str(TUNED), "--write-env", str(tmp_path / "no" / "such" / "e.sh"))
    assert code == 2 and "cannot write" in err


def test_a_bundle_keeps_what_the_perf_group_read_and_no_other_process(capsys, tmp_path):
    root = tmp_path / "h"
    shutil.copytree(TUNED, root, symlinks=True)
    other = root / "proc/777"
    other.mkdir()
    (other / "cmdline").write_text("mysqld\0--password=hunter2\0")  # not an engine: none of our business
    bundle = tmp_path / "b.tar.gz"
    code, _, err = run(capsys, "bundle", "--root", str(root), "-o", str(bundle))
    assert code == 0, err
    import tarfile

    with tarfile.open(bundle) as tar:
        names = tar.getnames()
    assert any(n.endswith("proc/4242/cmdline") for n in names) and not any("proc/777" in n for n in names)
    got = rows(bundle)
    assert got["perf.cpu_binding"].status is Status.OK and "4242" in got["perf.cpu_binding"].summary
    assert got["perf.allocator"].summary == "the running engine (pid 4242) uses libjemalloc.so.2"
