"""install.sh on a stock machine: the CPU engine's torch (`torch==X+cpu`, not on PyPI) comes from
the PyTorch CPU index when pip's own sources lack it, and an unreachable index is one clear line.

pip here is configured as a stock machine's: no config file, no pre-seeded wheel folder, a
stand-in for PyPI (a local PEP 503 folder without torch) and a stand-in for the PyTorch CPU
index (127.0.0.1, serving a tiny fake `torch-X+cpu` wheel). No real network.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import os
import socket
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from engine.stacks import cputorch
from engine.stacks.cputorch import IndexUnreachable, pinned_version, torch_pin, torch_source

PIN = torch_pin()
VERSION = pinned_version(PIN) if PIN else ""


def _wheel(folder: Path, version: str) -> Path:
    """A real (tiny) wheel of a package named torch: pip can find, download and install it."""
    name = f"torch-{version}-py3-none-any.whl"
    info = f"torch-{version}.dist-info"
    files = {
        "torch/__init__.py": b"",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / name, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return folder / name


def _simple_index(root: Path, wheel: Path | None) -> Path:
    """A PEP 503 index under root/simple: torch's page lists `wheel` (none: no torch page)."""
    (root / "simple").mkdir(parents=True, exist_ok=True)
    if wheel is not None:
        (root / "simple" / "torch").mkdir()
        href = f"../../files/{wheel.name.replace('+', '%2B')}"
        (root / "simple" / "torch" / "index.html").write_text(
            f'<html><body><a href="{href}">{wheel.name}</a></body></html>'
        )
    return root / "simple"


@pytest.fixture
def stock_pip(tmp_path: Path) -> dict[str, str]:
    """The environment of a machine whose pip sees a PyPI without the `+cpu` torch, and a
    find-links folder that lacks it too."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and "proxy" not in k.lower()}
    pypi = _simple_index(tmp_path / "pypi", None)
    (tmp_path / "wheels").mkdir()
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_INDEX_URL=pypi.as_uri(),
        PIP_FIND_LINKS=str(tmp_path / "wheels"),
        PIP_NO_CACHE_DIR="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_RETRIES="0",
        PIP_TIMEOUT="5",
    )
    env.pop("ASCENDCTL_INDEX_PYTORCH_CPU", None)
    return env


@pytest.fixture
def pytorch_index(tmp_path: Path):
    """A stand-in for the PyTorch CPU index on 127.0.0.1, holding a fake torch of the pinned version."""
    root = tmp_path / "pytorch"
    _simple_index(root, _wheel(root / "files", VERSION))

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(root), **kw)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/simple"


def _pip_download(env: dict[str, str], dest: Path, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(dest), PIN, *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_cpu_set_pins_a_torch_pypi_lacks():
    assert PIN and PIN.startswith("torch==") and "+cpu" in PIN


def test_a_stock_pip_gets_the_cpu_torch_from_the_pytorch_index(stock_pip, pytorch_index, tmp_path):
    # As install.sh did before: pip's sources alone do not have the pinned CPU torch.
    before = _pip_download(stock_pip, tmp_path / "before")
    assert before.returncode != 0 and "No matching distribution" in before.stderr
    found = torch_source(cputorch.pip_runner(environ=stock_pip), pytorch_index, PIN)
    assert found.pip_args == ("--extra-index-url", pytorch_index)
    assert "PyTorch CPU index" in found.note and pytorch_index in found.note
    # With the options it printed, pip finds the wheel.
    after = _pip_download(stock_pip, tmp_path / "after", found.pip_args)
    assert after.returncode == 0, after.stderr
    assert [p.name for p in (tmp_path / "after").iterdir()] == [f"torch-{VERSION}-py3-none-any.whl"]


def test_a_pip_that_has_the_wheel_keeps_its_own_sources(stock_pip, tmp_path):
    _wheel(Path(stock_pip["PIP_FIND_LINKS"]), VERSION)  # a mirror or a pre-seeded folder
    found = torch_source(cputorch.pip_runner(environ=stock_pip), _closed_port_url(), PIN)
    assert found.pip_args == ()
    assert "configured sources" in found.note


def test_an_unreachable_index_is_one_line_with_the_mirror_setting(stock_pip, monkeypatch, capsys):
    monkeypatch.setattr(cputorch, "_installed_torch", lambda: None)
    url = _closed_port_url()
    rc = cputorch.main(["--index", f"pytorch_cpu={url}"], environ=stock_pip)
    out, err = capsys.readouterr()
    assert rc == 1 and out == ""
    cause, fix = err.splitlines()
    assert cause.startswith("install.sh: ") and f"torch {VERSION}" in cause and url in cause
    assert "cannot be reached" in cause
    assert "--index pytorch_cpu=URL" in fix and "ASCENDCTL_INDEX_PYTORCH_CPU" in fix


def test_the_mirror_variable_is_the_index_install_sh_uses(stock_pip, pytorch_index, monkeypatch, capsys):
    monkeypatch.setattr(cputorch, "_installed_torch", lambda: None)
    rc = cputorch.main([], environ={**stock_pip, "ASCENDCTL_INDEX_PYTORCH_CPU": pytorch_index})
    out, err = capsys.readouterr()
    assert rc == 0
    assert out.split() == ["--extra-index-url", pytorch_index]
    assert err.startswith("==> ") and "PyTorch CPU index" in err


def test_unreachable_is_raised_not_guessed(stock_pip):
    with pytest.raises(IndexUnreachable) as exc:
        torch_source(cputorch.pip_runner(environ=stock_pip), _closed_port_url(), PIN)
    assert "mirror" in exc.value.fix


def test_install_sh_asks_before_the_engine_install():
    """install.sh takes the options into the engine's pip install (a shell script: read, not run,
    here; the module above is what decides)."""
    text = (Path(__file__).resolve().parents[2] / "install.sh").read_text()
    assert "-m engine.stacks.cputorch" in text
    assert "PIP_EXTRA_INDEX_URL to the PyTorch CPU index" not in text


def test_an_index_only_pip_reaches_is_used_not_called_unreachable(stock_pip, pytorch_index):
    """The direct probe fails (a proxy set in pip's own configuration, say) but pip gets the page."""
    found = torch_source(cputorch.pip_runner(environ=stock_pip), pytorch_index, PIN, check=lambda url: "no route")
    assert found.pip_args == ("--extra-index-url", pytorch_index)
