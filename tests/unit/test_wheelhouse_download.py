"""`ascendctl engine download` for real, against PyPI (marked `network`; skipped when PyPI cannot be
reached), then the install resolved from the wheelhouse alone.

Kept small (about 300 MB, under a minute on a fast link): the plan of CANN 8.1.RC1 (torch 2.5.1,
the oldest and lightest set) for A2 on aarch64 and CPython 3.11, its torch and vllm-ascend steps
(that release of vllm-ascend is a source archive: its requirements and its build requirements come
as wheels) and ascendctl's own requirements. Each is then resolved with `pip install --dry-run
--no-index --find-links DIR` for the same target: nothing is installed, no index is asked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, require_pypi

from engine.stacks.download import PIP_MAIN, own_requirements, sdist_requirements
from engine.stacks.plan import build_plan
from engine.stacks.wheelhouse import read_manifest

pytestmark = pytest.mark.network

CANN, ARCH, PYTHON = "8.1.RC1", "aarch64", "3.11"


@pytest.fixture(scope="module", autouse=True)
def _pypi_reachable():
    require_pypi()


def _clean_env() -> dict[str, str]:
    """PyPI only: no pip configuration of this machine (local indexes, find-links)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory):
    dest = tmp_path_factory.mktemp("wheelhouse")
    cmd = [sys.executable, "-m", "ascendctl", "engine", "download", "--cann", CANN, "--chip", "A2"]
    cmd += ["--arch", ARCH, "--python", PYTHON, "--dest", str(dest), "--only", "torch,vllm-ascend,ascendctl", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=_clean_env(), cwd=ROOT, timeout=600)
    return dest, out


def _dry_run(dest: Path, reqs: list[str]) -> subprocess.CompletedProcess:
    manifest = read_manifest(dest)
    target = manifest.target
    cmd = [sys.executable, "-c", PIP_MAIN, json.dumps(target.markers()), "install", "--dry-run", "--quiet"]
    cmd += ["--ignore-installed", "--report", "-", "--target", str(dest.parent / "never-written")]
    cmd += ["--no-index", "--find-links", str(dest), *target.pip_args(), *reqs]
    return subprocess.run(cmd, capture_output=True, text=True, env=_clean_env(), timeout=300)


def test_download_fetches_the_steps_for_the_target_with_a_manifest(wheelhouse):
    dest, out = wheelhouse
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert data["target"] == {"arch": ARCH, "python": PYTHON, "glibc": "2.17", "implementation": "cp"}
    assert [s["id"] for s in data["steps"]] == ["torch", "vllm-ascend", "ascendctl"]
    assert all(s["status"] == "ok" for s in data["steps"]) and not data["missing"]
    names = [f["name"] for f in data["files"]]
    assert "torch-2.5.1-cp311-cp311-manylinux2014_aarch64.whl" in names
    assert "vllm_ascend-0.7.3.post1.tar.gz" in names  # PyPI has only the source archive
    # every wheel is for the target: aarch64 or pure Python, CPython 3.11 or ABI-neutral
    for name in names:
        if name.endswith(".whl"):
            tags = name[:-4].split("-")[-3:]
            assert tags[2] == "any" or "aarch64" in tags[2], name
            assert tags[0] in ("py3", "py2.py3", "cp311") or tags[0].startswith("cp3") and tags[1] == "abi3", name
    assert not any(n.startswith("nvidia_") for n in names)
    assert sum(f["size"] for f in data["files"]) < 1e9
    assert data["complete"] is False  # --only: install.sh would refuse it


def test_the_install_steps_resolve_from_the_wheelhouse_alone(wheelhouse):
    dest, out = wheelhouse
    assert out.returncode == 0, out.stderr[-3000:]
    plan = build_plan(CANN, chip="A2", arch=ARCH)
    va = next(s for s in plan.steps if s.id == "vllm-ascend")
    binary = [p.requirement for p in va.packages if not p.requirement.startswith("vllm-ascend")]
    runtime, build = sdist_requirements(dest / "vllm_ascend-0.7.3.post1.tar.gz")
    for reqs in (
        [p.requirement for p in plan.steps[0].packages],  # the torch step
        [*binary, *runtime],  # the vllm-ascend step, its source archive's requirements in place of it
        build,  # what its isolated build installs
        own_requirements(),  # ascendctl itself (install.sh's first pip call)
    ):
        done = _dry_run(dest, reqs)
        assert done.returncode == 0, f"{reqs}\n{done.stderr[-3000:]}"
        report = json.loads(done.stdout)
        assert report["install"]
        for item in report["install"]:
            assert item["download_info"]["url"].startswith("file://"), item["download_info"]["url"]
