"""Which engine platform a machine is: the one answer install.sh, doctor and top share.

Any part of the Ascend stack (a davinci device node, npu-smi, the driver's or CANN's version
files) makes it an Ascend host, even when npu-smi is missing from PATH: that host needs the
Ascend engine and a loud "npu-smi not found", not a quiet fall-back to the CPU. Then CUDA with
nvidia-smi or an NVIDIA device node, else the CPU.

Runs with the standard library alone, so install.sh can ask it before anything is installed:
`python -m engine.system.platform` prints ascend, cuda or cpu.
"""

from __future__ import annotations

from engine.system import paths
from engine.system.host import Host

PLATFORMS = ("ascend", "cuda", "cpu")
# Where the driver installs npu-smi when its bin directory is not on PATH (root's sbin).
NPU_SMI_PATHS = ("/usr/local/bin/npu-smi", "/usr/local/sbin/npu-smi")


def npu_smi_path(host: Host) -> str | None:
    """npu-smi on PATH, else at one of the driver's install locations."""
    found = host.runner.which("npu-smi")
    if found:
        return found
    return next((p for p in NPU_SMI_PATHS if paths.exists(host, p)), None)


def detect_platform(host: Host | None = None) -> str:
    from engine.system.cann import find_toolkit
    from engine.system.devnodes import device_nodes
    from engine.system.driver import read_driver

    host = host or Host()
    if device_nodes(host).any or npu_smi_path(host) or read_driver(host) is not None or find_toolkit(host) is not None:
        return "ascend"
    if host.runner.which("nvidia-smi") or paths.exists(host, "/dev/nvidia0"):
        return "cuda"
    return "cpu"


if __name__ == "__main__":
    print(detect_platform())
