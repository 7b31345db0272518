"""A built wheel holds every module and data file of the tree, and finds the shipped profiles."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile

from helpers import ROOT

DATA = (".py", ".yaml", ".yml", ".tcss", ".mo")  # .mo: the compiled Chinese messages


def _expected() -> set[str]:
    files = {
        str(p.relative_to(ROOT))
        for top in ("engine", "ascendctl")
        for p in (ROOT / top).rglob("*")
        if p.suffix in DATA and "__pycache__" not in p.parts
    }
    files |= {f"engine/profiles/shipped/{p.name}" for p in (ROOT / "profiles").iterdir() if p.suffix in DATA}
    return files


def test_a_built_wheel_ships_the_whole_tree_and_the_profiles(tmp_path):
    # Built from a copy: setuptools writes build/ and *.egg-info/ into the tree it builds.
    source = tmp_path / "source"
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for part in ("engine", "ascendctl", "profiles"):
        shutil.copytree(ROOT / part, source / part, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", *isolation, "-w", str(tmp_path), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = next(tmp_path.glob("ascendctl-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(_expected() - names)
    assert not missing, f"not in the wheel (list the package in pyproject.toml): {missing}"

    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    probe = (
        "from engine.profiles.loader import list_profiles; import engine; "
        "print(engine.__file__); print(sorted(p.name for p in list_profiles())); "
        "from engine import i18n; i18n.set_language('zh'); print(i18n._('ready to serve'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(target), "ASCENDCTL_PROFILES_DIR": str(tmp_path / "none"), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    where, names_line, chinese = done.stdout.splitlines()[:3]
    assert where.startswith(str(target))  # the wheel's copy, not the repository's
    assert "cpu-tiny" in names_line and "910b-32b" in names_line
    assert chinese == "可以提供服务"  # the installed package speaks Chinese without a compile step
