"""Facts about the machine, each probed once and only when a check asks for it.

Vendor tools and the engine interpreter are slow compared with reading files, so the two
subprocesses (npu-smi and the engine's Python) start together in threads at the beginning.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, TypeVar

from engine.stacks.matrix import Matrix, load_matrix
from engine.system.cann import CannToolkit, find_toolkit
from engine.system.devnodes import DeviceNodes, device_nodes, in_container
from engine.system.driver import DriverInfo, FirmwareInfo, install_prefix, read_driver, read_firmware
from engine.system.enginepy import ENGINE_TIMEOUT, EnginePython, query_engine
from engine.system.host import Host
from engine.system.libc import glibc_version
from engine.system.platform import detect_platform, npu_smi_path
from engine.system.runner import ToolMissing, ToolTimeout

NPU_SMI_TIMEOUT = 8.0

T = TypeVar("T")


@dataclass(frozen=True)
class NpuSmiProbe:
    """npu-smi's answer: `table` when it answered with its table, else why not."""

    found: bool
    table: Any = None  # engine.devices.npu_smi.NpuTable
    error: str | None = None
    fix: str | None = None
    timed_out: bool = False


class _Background:
    """A value computed in a thread, waited for on first use."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self._value: Any = None
        self._exc: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._value = fn()
        except BaseException as exc:  # re-raised in the caller's thread, where checks catch it
            self._exc = exc

    def get(self) -> Any:
        self._thread.join()
        if self._exc is not None:
            raise self._exc
        return self._value


class Context:
    def __init__(
        self,
        host: Host,
        *,
        live: bool = True,
        env_known: bool = True,
        port: int = 8000,
        profile: Any = None,
        profile_name: str | None = None,
        model_dir: str | None = None,
        plan: Any = None,
    ) -> None:
        self.host = host
        self.live = live
        self.env_known = env_known
        self.port = port
        self.profile = profile
        self.profile_name = profile_name
        self.model_dir = model_dir
        self.plan = plan  # the memory plan of profile and model_dir, when the caller made it already
        self._engine = _Background(lambda: query_engine(host, ENGINE_TIMEOUT))
        self._npu = _Background(self._probe_npu_smi) if self.npu_smi_path else None

    @cached_property
    def matrix(self) -> Matrix:
        return load_matrix()

    @cached_property
    def toolkit(self) -> CannToolkit | None:
        return find_toolkit(self.host)

    @cached_property
    def driver(self) -> DriverInfo | None:
        return read_driver(self.host)

    @cached_property
    def firmware(self) -> FirmwareInfo | None:
        return read_firmware(self.host)

    @cached_property
    def driver_prefix(self) -> str:
        return install_prefix(self.host, "Driver")

    @cached_property
    def nodes(self) -> DeviceNodes:
        return device_nodes(self.host)

    @cached_property
    def container(self) -> bool:
        return in_container(self.host)

    @cached_property
    def npu_smi_path(self) -> str | None:
        return npu_smi_path(self.host)

    @property
    def engine(self) -> EnginePython:
        return self._engine.get()

    @property
    def npu_smi(self) -> NpuSmiProbe:
        if self._npu is None:
            return NpuSmiProbe(found=False)
        return self._npu.get()

    def _probe_npu_smi(self) -> NpuSmiProbe:
        from engine.devices.npu_smi import NpuSmiError, parse_info

        argv = [self.npu_smi_path or "npu-smi", "info"]
        try:
            result = self.host.runner.run(argv, timeout=NPU_SMI_TIMEOUT)
        except ToolTimeout as exc:
            return NpuSmiProbe(True, error=exc.cause, fix=exc.fix, timed_out=True)
        except ToolMissing as exc:
            return NpuSmiProbe(False, error=exc.cause, fix=exc.fix)
        text = result.stdout + ("\n" + result.stderr if result.stderr else "")
        try:
            table = parse_info(text)
        except NpuSmiError as exc:
            return NpuSmiProbe(True, error=exc.cause, fix=exc.fix)
        if not table.chips:
            first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "no output")
            return NpuSmiProbe(
                True,
                error=f"npu-smi info listed no NPU (exit {result.returncode}): {first[:160]}",
                fix="run `npu-smi info` by hand and check the driver installation",
            )
        return NpuSmiProbe(True, table=table)

    @cached_property
    def glibc(self) -> str | None:
        return glibc_version(self.host)

    @cached_property
    def platform(self) -> str:
        return detect_platform(self.host)
