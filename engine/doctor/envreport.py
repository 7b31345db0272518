"""`ascendctl env`: a paste-ready environment report for bug reports, with secrets masked.

It shows what a maintainer asks for first (versions of every layer, the chips, the variables
that steer CANN / torch_npu / vLLM), and nothing that should not leave the machine: values of
variables named like keys, tokens or passwords are masked, and so are credentials inside URLs
and token-shaped strings anywhere.
"""

from __future__ import annotations

import platform as _platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from engine.redact import redact_env
from engine.system import paths
from engine.system.cann import find_toolkit
from engine.system.driver import read_driver, read_firmware
from engine.system.enginepy import DISTRIBUTIONS, EnginePython, query_engine
from engine.system.host import Host
from engine.system.keyvalue import parse_equals

# Variables worth showing: what set_env.sh / the runtime / vLLM read, and where libraries come from.
PREFIXES = (
    "ASCEND",
    "ATB_",
    "HCCL_",
    "HCCN_",
    "TORCH",
    "PYTORCH_",
    "VLLM_",
    "HF_",
    "TRANSFORMERS_",
    "CUDA_",
    "NCCL_",
    "OMP_",
    "MKL_",
    "TASK_QUEUE_ENABLE",
    "SOC_VERSION",
    "CPU_AFFINITY",
    "PYTHON",
    "LD_",
    "PATH",
    "TOOLCHAIN_HOME",
    "OPTION_",
    "MOONCAKE_",
    "NPU_",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
)


def selected_env(env: Mapping[str, str]) -> dict[str, str]:
    picked = {k: v for k, v in env.items() if k.startswith(PREFIXES) or k == "container"}
    return dict(sorted(redact_env(picked).items()))


@dataclass(frozen=True)
class EnvReport:
    ascendctl: str
    os: str | None
    kernel: str | None
    arch: str | None
    container: bool
    cann: str | None
    cann_home: str | None
    driver: str | None
    firmware: str | None
    engine: EnginePython
    npus: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        e = self.engine
        return {
            "ascendctl": self.ascendctl,
            "os": self.os,
            "kernel": self.kernel,
            "arch": self.arch,
            "container": self.container,
            "cann": self.cann,
            "cann_home": self.cann_home,
            "driver": self.driver,
            "firmware": self.firmware,
            "engine": {"interpreter": e.interpreter, "python": e.python, "packages": e.packages, "error": e.error},
            "npus": self.npus,
            "env": self.env,
        }

    def text(self) -> str:
        """A fenced block ready to paste into an issue."""
        e = self.engine

        def na(v: object) -> str:
            return "N/A" if v in (None, "") else str(v)

        rows = [
            ("ascendctl", self.ascendctl),
            ("os", self.os),
            ("kernel", self.kernel),
            ("arch", self.arch),
            ("container", "yes" if self.container else "no"),
            ("CANN", f"{na(self.cann)}" + (f" ({self.cann_home})" if self.cann_home else "")),
            ("driver", self.driver),
            ("firmware", self.firmware),
            ("engine python", f"{na(e.python)} ({e.interpreter})" if not e.error else e.error),
        ]
        rows += [(name, e.packages.get(name)) for name in DISTRIBUTIONS if e.packages.get(name)]
        width = max(len(k) for k, _ in rows)
        lines = ["```text"] + [f"{k:<{width}}  {na(v)}" for k, v in rows]
        lines.append("npus" + " " * (width - 2) + (f"{len(self.npus)}" if self.npus else "none"))
        lines += [f"  {n}" for n in self.npus]
        lines.append("environment (secrets masked):")
        lines += [f"  {k}={v}" for k, v in self.env.items()] or ["  (none of the relevant variables set)"]
        lines.append("```")
        return "\n".join(lines)


def _os_name(host: Host) -> str | None:
    fields = parse_equals(paths.read_text(host, "/etc/os-release"))
    return fields.get("PRETTY_NAME") or fields.get("NAME")


def _recorded_output(host: Host, argv: list[str]) -> str | None:
    try:
        result = host.runner.run(argv, timeout=5)
    except Exception:  # not recorded, or a broken recording: the field shows N/A
        return None
    return result.stdout.strip() or None if result.ok else None


def env_report(ascendctl_version: str, host: Host | None = None, live: bool = True) -> EnvReport:
    from engine.devices.npu_smi import parse_info
    from engine.system.devnodes import in_container

    host = host or Host()
    engine = query_engine(host)
    tk = find_toolkit(host)
    driver = read_driver(host)
    firmware = read_firmware(host)
    kernel = arch = None
    if live:
        kernel, arch = _platform.release(), _platform.machine()
    else:
        kernel = _recorded_output(host, ["uname", "-r"])
        arch = _recorded_output(host, ["uname", "-m"]) or engine.machine or (tk.arch if tk else None)
    npus: list[str] = []
    if host.runner.which("npu-smi") or any(
        paths.exists(host, p) for p in ("/usr/local/bin/npu-smi", "/usr/local/sbin/npu-smi")
    ):
        try:
            result = host.runner.run(["npu-smi", "info"], timeout=8)
            table = parse_info(result.stdout)
            npus = [
                f"NPU {c.npu} chip {c.chip}: {c.name}, health {c.health}"
                + (
                    f", HBM {c.hbm[0]}/{c.hbm[1]} MB"
                    if c.hbm
                    else f", memory {c.ddr[0]}/{c.ddr[1]} MB"
                    if c.ddr
                    else ""
                )
                for c in table.chips
            ]
        except Exception as exc:  # npu-smi errors, a hang, garbage: the report is still useful without the chips
            npus = [f"npu-smi info failed: {getattr(exc, 'cause', exc)}"]
    return EnvReport(
        ascendctl=ascendctl_version,
        os=_os_name(host),
        kernel=kernel,
        arch=arch,
        container=in_container(host),
        cann=tk.version if tk else None,
        cann_home=tk.real_home if tk else None,
        driver=driver.version if driver else None,
        firmware=firmware.version if firmware else None,
        engine=engine,
        npus=npus,
        env=selected_env(host.env),
    )


def recorded_or_live(root: str | Path | None) -> tuple[Host, bool]:
    if root is None:
        return Host(), True
    from engine.system.recorded import recorded_host

    return recorded_host(root)[0], False
