"""engine/ is headless, and the fast commands import nothing heavy."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

from helpers import ROOT

import engine

# rich is not listed: httpx loads it for its own command line whenever it is installed. Direct
# imports of rich from engine/ are caught by the import-linter contract below.
UI = ("textual", "typer")
HEAVY = ("torch", "vllm", "transformers", "torch_npu")


def _engine_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(engine.__path__, "engine.") if not m.name.endswith("__main__"))


def _modules_after(code: str) -> set[str]:
    probe = code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def _loaded_after(code: str) -> set[str]:
    return {m.split(".")[0] for m in _modules_after(code)}


def test_engine_never_loads_ui_libraries():
    modules = _engine_modules()
    assert len(modules) > 5
    loaded = _loaded_after("\n".join(f"import {m}" for m in modules))
    assert not loaded & set(UI), f"engine pulled in {sorted(loaded & set(UI))}"


def test_cli_help_loads_no_engine_runtime():
    loaded = _loaded_after("from ascendctl.cli import app")
    assert not loaded & set(HEAVY), f"`ascendctl --help` would import {sorted(loaded & set(HEAVY))}"


def test_triage_of_a_plain_log_never_loads_the_bundle_builder(tmp_path):
    # triage asks every path whether it is a bundle; a plain log must not pay for building one.
    log = tmp_path / "engine.log"
    log.write_text("INFO Started server process\n")
    loaded = _modules_after(f"from ascendctl.cli import main\nmain(['triage', '--fail-on', 'never', {str(log)!r}])")
    assert "engine.bundle.layout" in loaded and "engine.bundle.builder" not in loaded


def test_import_linter_contract_holds():
    lint = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(lint)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


def _modules_of_cli(*argv: str) -> set[str]:
    quiet = "import contextlib, io\nfrom ascendctl.cli import main\n"
    quiet += f"with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()): main({list(argv)!r})"
    return _modules_after(quiet)


def _command_modules(modules: set[str]) -> set[str]:
    return {m for m in modules if m.startswith("ascendctl.commands.")}


def test_version_imports_neither_typer_rich_nor_any_command():
    loaded = _modules_of_cli("--version")
    assert "ascendctl.versions_view" in loaded  # it did answer
    assert not {m.split(".")[0] for m in loaded} & {"typer", "click", "rich", "textual", "yaml", "httpx"}
    assert not _command_modules(loaded)


def test_help_imports_no_command_module_and_no_rich():
    loaded = _modules_of_cli("--help")
    assert "typer" in loaded  # Click lays the help out
    assert not {m.split(".")[0] for m in loaded} & {"rich", "textual", "yaml", "httpx", *HEAVY}
    assert not _command_modules(loaded), "listing the commands must not import them"
    # engine.i18n: the language choice (a few lines of the standard library; no catalogue is read)
    assert not {m for m in loaded if m.startswith("engine.")} - {"engine", "engine.errors", "engine.i18n"}


def test_a_command_imports_its_own_module_only():
    loaded = _modules_of_cli("doctor", "--list-checks")
    assert _command_modules(loaded) == {"ascendctl.commands.doctor"}
    loaded = _modules_of_cli("bench", "compare", "--help")
    assert _command_modules(loaded) == {"ascendctl.commands.bench"}


def test_data_files_parsed_once_are_read_back_without_yaml(tmp_path):
    """The compatibility matrix (dates included) comes back from the cache equal to the parse,
    and the second process imports neither yaml nor importlib.resources for it."""
    import os

    code = (
        "import sys, json\nfrom engine.data import load_yaml\nm = load_yaml('engine.stacks', 'matrix.yaml')\n"
        "print(json.dumps({'yaml': 'yaml' in sys.modules, 'resources': 'importlib.resources' in sys.modules,"
        " 'first': str(m['releases'][0]['date'])}))"
    )
    env = {**os.environ, "ASCENDCTL_CACHE_DIR": str(tmp_path)}
    runs = [
        json.loads(
            subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
        )
        for _ in range(2)
    ]
    assert runs[0]["yaml"] and not runs[1]["yaml"] and not runs[1]["resources"]
    assert runs[0]["first"] == runs[1]["first"]
    assert list(tmp_path.glob("data/engine.stacks.matrix.yaml.marshal"))


def test_doctor_prints_its_lines_without_rich_or_yaml():
    _modules_of_cli("doctor")  # the first run parses the data files into the cache
    loaded = _modules_of_cli("doctor")
    assert "ascendctl.checks_view" in loaded  # it did print its report
    assert not {m.split(".")[0] for m in loaded} & {"rich", "yaml", "textual", *HEAVY}


def test_doctor_without_a_container_profile_loads_no_container_client_nor_archive_readers():
    """doctor must answer in a small fraction of `torch.utils.collect_env`: the container client,
    image and inspect modules are for a profile that serves in a container (or an Ascend host),
    tarfile / zipfile for reading archives; a plain doctor on a CPU host asks neither."""
    loaded = _modules_of_cli("doctor")
    assert "ascendctl.checks_view" in loaded  # it did print its report
    assert "engine.container.runtime" in loaded  # container.runtime still looks for one
    unneeded = {"engine.container.client", "engine.container.inspect", "engine.container.image"}
    assert not loaded & {*unneeded, "engine.container.discover", "tarfile", "zipfile"}
