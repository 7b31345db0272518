"""Every install plan's PyPI steps resolve on PyPI itself (marked `network`: deselect offline with
`-m "not network"`).

For each pinned set and architecture, the packages of the torch and vllm-ascend steps go to one
`pip install --dry-run` against PyPI for the set's target (manylinux tag of its wheels, CPython
3.11, which every set supports), so a pin that does not exist there or two pins that conflict
fail here instead of on an operator's host. aarch64, where Atlas servers run, resolves the whole
dependency tree; x86_64 the plan's own pins only (`--no-deps`: their wheels exist for that
architecture and glibc), which keeps the whole file near a minute of CPU. What PyPI cannot hold is checked for presence only:
packages of Huawei's indexes and of the PyTorch CPU index are listed by the plan as such and
stand in as empty wheels; packages PyPI has only as source archives (vLLM itself, and the ones a
set lists under `built_from_source`) must have that archive.

pip evaluates environment markers against the interpreter running it, not against --platform:
the dry run is started with `platform.machine()` answering the target architecture, so
`platform_machine == "x86_64"` dependencies (CUDA wheels of torch) drop out of an aarch64 plan.
The dry runs use a current pip (fetched once into the test's temporary folder when the one
installed is older than 24): older ones download every wheel whole instead of its metadata file,
which made the run take minutes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import urllib.request
import zipfile
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import pytest
from helpers import require_pypi

from engine.stacks.pins import ascend_sets
from engine.stacks.plan import ARCHES, build_plan, requirement_name
from engine.versions import release_tuple

pytestmark = pytest.mark.network


@pytest.fixture(scope="module", autouse=True)
def _pypi_reachable():
    require_pypi()


PYTHON = "3.11"
DEFAULT_GLIBC = "2.28"  # sets whose vllm-ascend has no wheel: the rest must install on this
PIP_MAIN = (
    "import platform, sys; machine = sys.argv.pop(1); platform.machine = lambda: machine; "
    "pip = sys.argv.pop(1); pip and sys.path.insert(0, pip); "
    "from pip._internal.cli.main import main; sys.exit(main())"
)


def _stub_wheel(folder: Path, requirement: str) -> None:
    """An empty wheel of `name==version`, standing for a package PyPI does not serve."""
    name, _, ver = requirement.partition("==")
    dist = name.replace("-", "_")
    info = f"{dist}-{ver}.dist-info"
    files = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    with zipfile.ZipFile(folder / f"{dist}-{ver}-py3-none-any.whl", "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(text)}")
        whl.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,", ""]))


def _needs_glibc(wheel: str) -> tuple[int, int]:
    """The oldest glibc a wheel file name's platform tags accept (the most lenient of its tags)."""
    legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
    found = []
    for tag in wheel[: -len(".whl")].split("-")[-1].split("."):
        if m := re.match(r"manylinux_(\d+)_(\d+)_", tag):
            found.append((int(m.group(1)), int(m.group(2))))
        elif tag.split("_")[0] in legacy:
            found.append(legacy[tag.split("_")[0]])
    return min(found) if found else (0, 0)


def _platforms(arch: str, glibc: str) -> list[str]:
    """pip takes the wheel tags literally: every manylinux tag a host of that glibc accepts."""
    minor = int(glibc.split(".")[1])
    tags = [f"manylinux_2_{m}_{arch}" for m in range(minor, 16, -1)] + [f"manylinux2014_{arch}"]
    return [arg for tag in tags for arg in ("--platform", tag)]


@lru_cache(maxsize=None)
def _pypi_files(name: str) -> dict[str, list[str]]:
    with urllib.request.urlopen(f"https://pypi.org/pypi/{name}/json", timeout=60) as r:
        data = json.load(r)
    return {v: [f["filename"] for f in files] for v, files in data["releases"].items()}


def _has_sdist(requirement: str) -> bool:
    name, _, ver = requirement.partition("==")
    return any(f.endswith((".tar.gz", ".zip")) for f in _pypi_files(name).get(ver, []))


def _clean_env() -> dict[str, str]:
    """PyPI only: no pip configuration of this machine (local indexes, constraints)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


CASES = [(cann, arch) for cann in ascend_sets() for arch in ARCHES]


def current_pip(tmp: Path) -> str:
    """ "" to use the installed pip, else the path of a newer pip wheel (importable as it is)."""
    import pip

    if int(pip.__version__.split(".")[0]) >= 24:
        return ""
    where = tmp / "pip"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(where), "pip>=24"]
    subprocess.run(cmd, check=True, capture_output=True, env=_clean_env(), timeout=120)
    with zipfile.ZipFile(next(where.glob("pip-*.whl"))) as whl:
        whl.extractall(where / "unpacked")
    return str(where / "unpacked")


def _resolve(cann: str, arch: str, tmp: Path, pip: str = "", ceiling: str | None = None) -> tuple:
    plan = build_plan(cann, chip="A2", arch=arch)
    pinned = ascend_sets()[plan.set_cann]
    stubs = tmp / f"stubs-{cann}-{arch}"
    stubs.mkdir()
    elsewhere = {p.requirement for s in plan.steps for p in s.packages if p.source != "pypi"}
    from_source = {str(r) for r in pinned.get("built_from_source", [])}
    cpu_index = {p.requirement for s in plan.steps for p in s.packages if p.source == "pytorch_cpu"}
    va_wheel = pinned.get("vllm_ascend_wheel", True) is not False
    wanted: list[str] = []
    for step in plan.steps:
        if step.id not in ("torch", "vllm-ascend"):
            continue
        for package in step.packages:
            req = package.requirement
            if req in elsewhere or (requirement_name(req) == "vllm-ascend" and not va_wheel):
                continue
            wanted.append(req)
    for req in sorted(elsewhere | from_source):
        if "==" in req:
            # the x86_64 torch_npu wheels ask for the CPU build by its local label (torch==X+cpu)
            cpu = arch == "x86_64" and req in cpu_index
            _stub_wheel(stubs, req + ("+cpu" if cpu else ""))
            wanted.append(req)
    wanted = list(dict.fromkeys(wanted))
    cmd = [sys.executable, "-c", PIP_MAIN, arch, pip, "install", "--dry-run", "--ignore-installed", "--quiet"]
    cmd += ["--report", "-", "--target", str(tmp / "target"), "--only-binary=:all:", "--python-version", PYTHON]
    cmd += [] if arch == "aarch64" else ["--no-deps"]
    cmd += [*_platforms(arch, ceiling or plan.glibc or DEFAULT_GLIBC), "--find-links", str(stubs), *wanted]
    out = subprocess.run(cmd, capture_output=True, text=True, env=_clean_env(), timeout=240)
    installed, needs = [], (0, 0)
    if out.returncode == 0:
        report = json.loads(out.stdout)
        installed = [f"{i['metadata']['name']}=={i['metadata']['version']}" for i in report["install"]]
        needs = max(_needs_glibc(i["download_info"]["url"].rsplit("/", 1)[-1]) for i in report["install"])
    return cann, arch, out.returncode, out.stderr[-3000:], installed, f"{needs[0]}.{needs[1]}"


@pytest.fixture(scope="module")
def resolutions(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("resolve")
    pip = current_pip(tmp)
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = list(pool.map(lambda case: _resolve(*case, tmp, pip), CASES))
    return {(cann, arch): rest for cann, arch, *rest in done}


@pytest.mark.parametrize("cann, arch", CASES)
def test_the_plans_pypi_packages_resolve_together(resolutions, cann, arch):
    rc, stderr, installed, needs = resolutions[(cann, arch)]
    assert rc == 0, f"CANN {cann} on {arch}: pip could not resolve the plan's PyPI packages\n{stderr}"
    names = {requirement_name(i) for i in installed}
    plan = build_plan(cann, chip="A2", arch=arch)
    # engines.yaml's glibc is what the newest manylinux tag among the wheels asks: exactly where the
    # whole tree was resolved, at least that of the plan's own pins elsewhere
    if arch == "aarch64":
        assert plan.glibc == needs
    else:
        assert release_tuple(needs) <= release_tuple(plan.glibc)
    # No CUDA wheel enters an Ascend environment. On x86_64 a dependency of vllm-ascend
    # (xgrammar) pulls the CUDA triton back: the plan removes it after that step.
    assert not {n for n in names if n.startswith("nvidia-")}, sorted(names)
    if "triton" in names:
        ids = [s.id for s in plan.steps]
        later = plan.steps[ids.index("vllm-ascend") + 1 :]
        assert any(s.kind == "remove" and "triton" in [p.requirement for p in s.packages] for s in later)


@pytest.mark.parametrize("cann", list(ascend_sets()))
def test_what_pypi_has_only_as_source_has_that_archive(cann):
    plan = build_plan(cann, chip="A2", arch="aarch64")
    pinned = ascend_sets()[plan.set_cann]
    assert _has_sdist(f"vllm=={plan.vllm}"), f"vLLM {plan.vllm} has no source archive on PyPI"
    for req in pinned.get("built_from_source", []):
        assert _has_sdist(str(req)), req
    if not plan.glibc:  # no vllm-ascend wheel: the plan compiles its source archive
        assert _has_sdist(f"vllm-ascend=={plan.vllm_ascend}")


def test_every_matrix_row_names_releases_pypi_has():
    """vllm-ascend of every row is on PyPI; so is the torch_npu a fix hint may name
    (Release.pip_torch_npu), and a row says `torch_npu_pypi` exactly when its torch_npu is not."""
    from engine.stacks.matrix import load_matrix

    va, tn = _pypi_files("vllm-ascend"), _pypi_files("torch-npu")
    for row in load_matrix().releases:
        assert va.get(row.vllm_ascend), f"vllm-ascend {row.vllm_ascend} is not on PyPI"
        on_pypi = bool(tn.get(row.torch_npu))
        assert on_pypi is (row.torch_npu_pypi is None), (row.vllm_ascend, row.torch_npu)
        if hint := row.pip_torch_npu():
            assert tn.get(hint), (row.vllm_ascend, hint)
