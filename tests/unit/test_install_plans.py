"""Install plans of the Ascend engine (engine/stacks/plan.py), the runner install.sh calls
(engine/stacks/install.py) and their command line (`python -m engine.stacks.pins ascend plan`).
Offline: tests/unit/test_install_plans_resolve.py checks the same plans against PyPI."""

from __future__ import annotations

import json
import subprocess

import pytest
from helpers import FIXTURES, ROOT

from engine.stacks import install
from engine.stacks.pins import ascend_sets, main
from engine.stacks.plan import (
    ARCHES,
    CHIPS,
    PlanError,
    build_plan,
    glibc_needed,
    index_urls,
    newest_set_for_glibc,
    pip_install_hint,
    render,
    resolve_cann,
)

HOSTS = FIXTURES / "hosts"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
ASCEND_INDEX = "https://mirrors.huaweicloud.com/ascend/repos/pypi"


def _ids(plan):
    return [s.id for s in plan.steps]


def _step(plan, step_id):
    return next(s for s in plan.steps if s.id == step_id)


def test_the_newest_set_follows_the_dockerfile_order_on_a2_aarch64():
    plan = build_plan("9.1.0", chip="A2", arch="aarch64")
    assert (plan.vllm_ascend, plan.vllm, plan.glibc) == ("0.23.0", "0.23.0", "2.34")
    assert _ids(plan) == [
        "torch",
        "vllm",
        "remove-triton",
        "vllm-ascend",
        "remove-triton-again",
        "triton-ascend",
        "check-chip",
    ]
    vllm = _step(plan, "vllm")
    assert vllm.pip_args() == ["install", "--no-binary", "vllm", "vllm==0.23.0"]
    assert dict(vllm.env) == {"VLLM_TARGET_DEVICE": "empty"}
    # triton-ascend 3.2.2 is on Huawei's index only (PyPI stops at 3.2.0)
    va = _step(plan, "vllm-ascend")
    assert va.options[:2] == ("--extra-index-url", ASCEND_INDEX)
    assert plan.from_index("ascend") == ["triton-ascend==3.2.2"]
    assert "--no-binary" not in va.options  # the PyPI wheel is the A2 build
    assert _step(plan, "triton-ascend").pip_args() == [
        "install",
        "--extra-index-url",
        ASCEND_INDEX,
        "triton-ascend==3.2.2",
    ]
    assert _step(plan, "check-chip").options == ("A2",)
    assert "arctic-inference==0.1.1: step 4 compiles them" in render(plan)


def test_x86_64_takes_torch_from_the_cpu_index_in_every_step_that_can_pull_it():
    plan = build_plan("9.1.0", chip="A2", arch="x86_64")
    for step_id in ("torch", "vllm", "vllm-ascend"):
        step = _step(plan, step_id)
        assert CPU_INDEX in step.options, step_id
    assert {p.source for p in _step(plan, "torch").packages} == {"pytorch_cpu"}
    assert "--extra-index-url" not in _step(build_plan("9.1.0", arch="aarch64"), "torch").options


def test_other_chips_take_the_variant_index_from_0_22_1rc1_and_build_from_source_before():
    a3 = build_plan("9.0.0", chip="A3", arch="aarch64")
    va = _step(a3, "vllm-ascend")
    assert va.options[:2] == ("--extra-index-url", index_urls()["ascend_variant"])
    assert a3.from_index("ascend_variant") == ["vllm-ascend==0.22.1rc1"]
    assert not va.needs_cann_env and _step(a3, "check-chip").options == ("A3",)
    old = build_plan("8.5.1", chip="A3", arch="aarch64")
    va = _step(old, "vllm-ascend")
    assert va.options[:2] == ("--no-binary", "vllm-ascend") and dict(va.env) == {"SOC_VERSION": "ascend910_9391"}
    assert va.needs_cann_env and "set_env.sh" in va.fix
    assert "needs: glibc >= 2.28" in render(old) and "CANN environment sourced" in render(old)


def test_310p_removes_triton_ascend_and_triton_and_checks_the_build():
    plan = build_plan("9.1.0", chip="310P", arch="aarch64")
    assert "triton-ascend" not in _ids(plan)
    removal = _step(plan, "remove-triton-again")
    assert removal.pip_args() == ["uninstall", "-y", "triton", "triton-ascend"]
    assert "triton-ascend==3.2.2" not in plan.pins
    assert _step(plan, "check-chip").options == ("_310P",)


def test_a_release_without_the_chip_in_its_hardware_has_no_plan():
    with pytest.raises(PlanError, match="does not support A3"):
        build_plan("8.2.RC1", chip="A3")
    with pytest.raises(PlanError, match="unknown chip"):
        build_plan("9.1.0", chip="910")
    with pytest.raises(PlanError, match="architecture"):
        build_plan("9.1.0", arch="riscv64")


def test_a_source_only_release_is_built_everywhere_and_old_builds_skip_the_chip_check():
    plan = build_plan("8.1.RC1", chip="A2", arch="aarch64")
    assert _step(plan, "vllm-ascend").options[:2] == ("--no-binary", "vllm-ascend")
    assert "check-chip" not in _ids(plan) and plan.device_type is None
    assert any("only the source archive" in n for n in plan.notes)


@pytest.mark.parametrize(
    "cann, served_by, warned",
    [("9.1.1", "9.1.0", True), ("8.5.2", "8.5.1", True), ("9.0.1", "9.0.1", False), ("8.3.rc2", "8.3.RC2", False)],
)
def test_a_cann_without_a_set_takes_its_lines_set_with_a_warning(cann, served_by, warned):
    set_cann, warning = resolve_cann(cann)
    assert set_cann == served_by and bool(warning) is warned
    plan = build_plan(cann)
    assert plan.set_cann == served_by and bool(plan.warnings) is warned


def test_a_cann_of_no_known_line_has_no_set():
    for cann in ("7.0.0", "9.2.0", "10.0.0"):
        with pytest.raises(PlanError, match=f"no pinned Ascend set for CANN {cann}"):
            resolve_cann(cann)


def test_every_set_has_a_plan_for_every_architecture_and_its_pins_are_exact():
    for cann in ascend_sets():
        for arch in ARCHES:
            plan = build_plan(cann, chip="A2", arch=arch)
            assert plan.glibc, (cann, arch)
            assert _ids(plan)[:4] == ["torch", "vllm", "remove-triton", "vllm-ascend"]
            names = [p.requirement for s in plan.steps for p in s.packages if s.kind == "install"]
            assert all("@" not in n and " " not in n for n in names)  # no git URLs, one argv word each
    assert set(CHIPS) == {"A2", "A3", "310P", "950"}


def test_indexes_are_settings_flag_over_environment_over_default():
    env = {"ASCENDCTL_INDEX_ASCEND": "https://env.example/ascend"}
    assert index_urls(environ=env)["ascend"] == "https://env.example/ascend"
    assert index_urls({"ascend": "https://flag.example"}, environ=env)["ascend"] == "https://flag.example"
    assert index_urls(environ={})["pytorch_cpu"] == CPU_INDEX
    with pytest.raises(PlanError, match="unknown index"):
        index_urls({"nope": "x"}, environ={})
    plan = build_plan("9.1.0", arch="x86_64", indexes=index_urls({"pytorch_cpu": "https://m.example/cpu"}, environ={}))
    assert "https://m.example/cpu" in _step(plan, "torch").options


def test_plan_command_prints_text_and_json(capsys):
    assert main(["ascend", "plan", "--cann", "9.1.0", "--chip", "A3", "--arch", "x86_64"]) == 0
    out = capsys.readouterr().out
    assert "vllm-ascend 0.23.0" in out and "VLLM_TARGET_DEVICE=empty python -m pip install" in out
    assert " 7. vllm-ascend is built for A3" in out
    args = ["ascend", "plan", "--cann", "8.5.2", "--chip", "310P", "--arch", "aarch64", "--json"]
    assert main([*args, "--index", "ascend=https://mirror.example/a"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["set_cann"] == "8.5.1" and data["warnings"] and data["indexes"]["ascend"] == "https://mirror.example/a"
    assert [s["n"] for s in data["steps"]] == list(range(1, len(data["steps"]) + 1))
    assert all(s["command"] and s["title"] for s in data["steps"])


def test_plan_command_reads_the_chip_and_cann_of_a_recorded_host(capsys):
    assert main(["ascend", "plan", "--root", str(HOSTS / "atlas-300i-310p"), "--arch", "aarch64", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["chip"] == "310P"
    assert main(["ascend", "plan", "--root", str(HOSTS / "vllm-ascend-4989-a3-cann83rc2"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["chip"], data["set_cann"]) == ("A3", "8.3.RC2")
    # an A3 host on CANN 8.2.RC1: that set's vllm-ascend (0.9.1) was built for A2 only
    assert main(["ascend", "plan", "--root", str(HOSTS / "vllm-ascend-3974-a3-tutorial")]) == 1
    assert "does not support A3" in capsys.readouterr().err


def test_requirements_of_a_cann_without_a_set_warn_and_print_its_lines_set(capsys):
    assert main(["ascend", "requirements", "--cann", "9.1.1"]) == 0
    out = capsys.readouterr()
    assert "vllm-ascend==0.23.0" in out.out.splitlines() and "using the set for CANN 9.1.0" in out.err


def test_install_without_a_set_exits_3_for_install_sh(capsys):
    assert main(["ascend", "install", "--root", str(HOSTS / "cpu-host")]) == 3
    assert main(["ascend", "install", "--cann", "7.0.0"]) == 3
    assert main(["ascend", "plan", "--cann", "7.0.0"]) == 1
    assert main(["ascend", "plan", "--index", "broken"]) == 2


class FakePip:
    def __init__(self, fail_at: str | None = None, rc: int = 1):
        self.calls: list[tuple[list[str], dict]] = []
        self.fail_at, self.rc = fail_at, rc

    def __call__(self, argv, env):
        self.calls.append((argv, env))
        failed = self.fail_at is not None and self.fail_at in argv
        return subprocess.CompletedProcess(argv, self.rc if failed else 0)


def test_the_runner_numbers_steps_and_names_the_failing_one_with_its_fix(capsys):
    plan = build_plan("8.5.1", chip="A2", arch="aarch64")
    pip = FakePip(fail_at="vllm-ascend==0.18.0")
    rc = install.run_plan(plan, python="/venv/bin/python", run=pip, environ={}, glibc="2.35")
    out = capsys.readouterr()
    assert rc == 1
    assert "==> [1/7] torch 2.9.0" in out.out and "==> [4/7] vllm-ascend 0.18.0" in out.out
    assert "step 4/7 (vllm-ascend 0.18.0" in out.err and "pip exited 1" in out.err and "fix:" in out.err
    assert len(pip.calls) == 4  # nothing ran after the failure
    argv, env = pip.calls[1]
    assert argv[:3] == ["/venv/bin/python", "-m", "pip"] and env["VLLM_TARGET_DEVICE"] == "empty"


def test_the_runner_checks_what_the_host_lacks_before_any_step(capsys):
    plan = build_plan("9.1.0", chip="A2", arch="aarch64")
    pip = FakePip()
    assert install.run_plan(plan, python="/venv/bin/python", run=pip, environ={}, glibc="2.31") == 1
    err = capsys.readouterr().err
    assert "glibc 2.31 is older than 2.34" in err and "container image" in err and not pip.calls
    source = build_plan("8.5.1", chip="A3", arch="aarch64")
    assert install.run_plan(source, python="/venv/bin/python", run=pip, environ={}, glibc="2.35") == 1
    assert "CANN environment is not set" in capsys.readouterr().err and not pip.calls
    env = {"ASCEND_HOME_PATH": "/usr/local/Ascend/cann-8.5.1"}
    assert install.run_plan(source, python="/venv/bin/python", run=pip, environ=env, glibc="2.35") == 0
    assert len(pip.calls) == 6
    problem = install.preflight(plan, "3.13.1", "2.35", {})
    assert problem and "Python 3.13.1 is outside" in problem[0]


def test_pins_are_met_exactly_and_the_cpu_label_of_torch_does_not_matter():
    assert install.pin_met("torch==2.10.0", "2.10.0+cpu")
    assert not install.pin_met("torch-npu==2.10.0.post4", "2.10.0.post2")
    assert install.pin_met("transformers>=4.57.4,<5", "4.57.6")
    assert not install.pin_met("vllm==0.23.0", None)


def test_the_chip_check_reads_the_build_info_without_importing(tmp_path, monkeypatch):
    pkg = tmp_path / "vllm_ascend"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('importing loads torch_npu')\n")
    (pkg / "_build_info.py").write_text("# Auto-generated file\n__device_type__ = 'A2'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert install.built_device_type() == "A2"
    assert install.main(["--check-chip", "A2"]) == 0
    assert install.main(["--check-chip", "A3"]) == 1


def test_hints_name_an_index_only_where_a_set_gets_the_version_there():
    assert (
        pip_install_hint("triton-ascend", "3.2.2")
        == f"pip install triton-ascend==3.2.2 --extra-index-url {ASCEND_INDEX}"
    )
    assert pip_install_hint("triton-ascend", "3.2.0") == "pip install triton-ascend==3.2.0"
    assert pip_install_hint("triton-ascend", "3.2.0.dev20260322") is None


def test_glibc_of_a_set_and_the_newest_set_an_old_glibc_can_take():
    assert glibc_needed("9.1.0", "aarch64") == ("2.34", "0.23.0")
    assert glibc_needed("9.1.1", "x86_64") == ("2.34", "0.23.0")
    assert glibc_needed("9.0.0", "x86_64") == ("2.28", "0.22.1rc1")
    assert glibc_needed("7.0.0", "aarch64") is None and glibc_needed("9.1.0", None) is None
    assert newest_set_for_glibc("2.31", "aarch64") == "8.5.1"
    assert newest_set_for_glibc("2.17", "x86_64") == "8.1.RC1"


def test_install_sh_hands_ascend_hosts_to_the_plan_and_keeps_the_cpu_path():
    text = (ROOT / "install.sh").read_text()
    assert "engine.stacks.pins ascend install" in text
    assert 'reqs=$("$VPY" -m engine.stacks.pins "$PLATFORM" requirements)' in text
    assert subprocess.run(["bash", "-n", str(ROOT / "install.sh")]).returncode == 0
