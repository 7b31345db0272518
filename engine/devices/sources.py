"""Device telemetry sources. Each one's `sample()` returns `list[DeviceSample]` or raises an
`Unreachable` with a fix; vendor tools run through an injected runner so tests replay recordings."""

from __future__ import annotations

import csv
import io
import time
from typing import TYPE_CHECKING, Protocol

from engine.devices.npu_smi import ChipUsage, NpuSmiError, chip_keys, parse_health, parse_info, parse_usages
from engine.devices.sample import HEALTHY, DeviceProcess, DeviceSample
from engine.errors import Unreachable
from engine.system.runner import Runner, SubprocessRunner

if TYPE_CHECKING:
    from engine.system.host import Host


class DeviceSource(Protocol):
    name: str

    def sample(self) -> list[DeviceSample]: ...


if TYPE_CHECKING:
    from engine.system.host import Host


class NpuSmiSource:
    """`npu-smi info` for the table, plus `-t usages -i N` per card for HBM bandwidth and AI CPU.

    A card whose usages query fails keeps its table figures (bandwidth shows N/A): one slow or
    unsupported card must not blank the whole panel. A chip whose health is not OK is also asked
    `-t health -i N -c C` for its error codes; healthy chips cost no extra call.
    """

    name = "npu-smi"

    def __init__(
        self,
        runner: Runner | None = None,
        timeout: float = 5.0,
        usages: bool = True,
        program: str = "npu-smi",
        usages_every: float = 0.0,
    ) -> None:
        self.runner = runner or SubprocessRunner()
        self.timeout = timeout
        self.usages = usages
        self.program = program
        # Seconds between two reads of the cards' usages (one npu-smi per card); between them a
        # sample reuses the last answer. 0: every sample (top); the exporter reads them less often.
        self.usages_every = usages_every
        self._usages: dict[tuple[int, int], ChipUsage] = {}
        self._usages_at: float | None = None
        self._usages_asked: set[int] = set()  # the cards that read asked (a new card is asked at once)

    def _run(self, *args: str) -> str:
        result = self.runner.run([self.program, *args], timeout=self.timeout)
        if not result.ok and not result.stdout.strip():
            raise NpuSmiError(
                f"`{self.program} {' '.join(args)}` exited with {result.returncode}: "
                f"{(result.stderr.strip().splitlines() or ['no output'])[-1]}",
                f"run `{self.program} {' '.join(args)}` by hand",
            )
        return result.stdout

    def sample(self) -> list[DeviceSample]:
        table = parse_info(self._run("info"))
        usages = self._read_usages(sorted({c.npu for c in table.chips}))
        keys = chip_keys(table.chips)
        procs: dict[tuple[int, int], list[DeviceProcess]] = {}
        for p in table.processes:
            procs.setdefault((p.npu, p.chip), []).append(DeviceProcess(p.pid, p.name, float(p.memory_mb)))
        out = []
        for c in table.chips:
            use = usages.get((c.npu, c.chip), ChipUsage())
            # 310-family chips have no HBM: their device memory is the DDR pair.
            mem = c.hbm or c.ddr
            has_proc_table = bool(table.processes) or bool(table.idle_npus)
            out.append(
                DeviceSample(
                    key=keys[(c.npu, c.chip)],
                    kind="npu",
                    name=c.name,
                    health=c.health,
                    power_w=c.power_w,
                    temp_c=c.temp_c,
                    util_pct=c.aicore_pct if c.aicore_pct is not None else use.aicore_pct,
                    mem_used_mb=None if mem is None or mem[0] is None else float(mem[0]),
                    mem_total_mb=None if mem is None else float(mem[1]),
                    mem_bw_pct=use.hbm_bw_pct if c.hbm else use.ddr_bw_pct,
                    aicpu_pct=use.aicpu_pct,
                    ctrlcpu_pct=use.ctrlcpu_pct,
                    processes=len(procs.get((c.npu, c.chip), ())) if has_proc_table else None,
                    error_codes=() if c.health == HEALTHY else self._error_codes(c.npu, c.chip),
                    device_id=c.second_id if c.second_id is not None else c.npu,
                    bus=c.bus,
                    mem_kind="hbm" if c.hbm else "ddr" if c.ddr else None,
                    procs=tuple(procs.get((c.npu, c.chip), ())),
                )
            )
        return out

    def _read_usages(self, npus: list[int]) -> dict[tuple[int, int], ChipUsage]:
        if not self.usages:
            return {}
        now = time.monotonic()
        # (a tenth of slack: polls placed before each scrape come a little early or late)
        fresh = self._usages_at is not None and now - self._usages_at < 0.9 * self.usages_every
        if fresh and self._usages_asked >= set(npus):
            return self._usages
        usages: dict[tuple[int, int], ChipUsage] = {}
        for npu in npus:
            try:
                for chip, usage in parse_usages(self._run("info", "-t", "usages", "-i", str(npu))).items():
                    usages[(npu, chip)] = usage
            except Unreachable:
                continue
        self._usages, self._usages_at, self._usages_asked = usages, now, set(npus)
        return usages

    def _error_codes(self, npu: int, chip: int) -> tuple[str, ...]:
        """An unhealthy chip's error codes; none when the query fails (the health word stays)."""
        try:
            answer = parse_health(self._run("info", "-t", "health", "-i", str(npu), "-c", str(chip)))
        except Unreachable:
            return ()
        # The chip-level form has one block and no `Chip ID` line.
        return next(iter(answer.values())).error_codes if answer else ()


_NVIDIA_FIELDS = (
    "index",
    "name",
    "memory.used",
    "memory.total",
    "utilization.gpu",
    "utilization.memory",
    "power.draw",
    "temperature.gpu",
)


def parse_nvidia_csv(text: str) -> list[DeviceSample]:
    """`nvidia-smi --query-gpu=<_NVIDIA_FIELDS> --format=csv,noheader,nounits`."""

    def num(value: str) -> float | None:
        try:
            return float(value)
        except ValueError:
            return None  # "[N/A]", "[Not Supported]"

    out = []
    for row in csv.reader(io.StringIO(text)):
        cells = [c.strip() for c in row]
        if len(cells) < len(_NVIDIA_FIELDS):
            continue
        idx, name, used, total, util, mem_util, power, temp = cells[: len(_NVIDIA_FIELDS)]
        out.append(
            DeviceSample(
                key=f"cuda{idx}",
                kind="cuda",
                name=name,
                mem_used_mb=num(used),
                mem_total_mb=num(total),
                util_pct=num(util),
                mem_bw_pct=num(mem_util),
                power_w=num(power),
                temp_c=num(temp),
            )
        )
    return out


class NvidiaSmiSource:
    name = "nvidia-smi"

    def __init__(self, runner: Runner | None = None, timeout: float = 5.0) -> None:
        self.runner = runner or SubprocessRunner()
        self.timeout = timeout

    def sample(self) -> list[DeviceSample]:
        argv = ["nvidia-smi", f"--query-gpu={','.join(_NVIDIA_FIELDS)}", "--format=csv,noheader,nounits"]
        result = self.runner.run(argv, timeout=self.timeout)
        devices = parse_nvidia_csv(result.stdout)
        if not devices:
            raise Unreachable(
                f"nvidia-smi listed no GPU ({(result.stderr or result.stdout).strip()[:120] or 'no output'})",
                "run `nvidia-smi` by hand and check the driver",
            )
        return devices


class HostSource:
    """A CPU host: its RAM is the device memory, CPU % the utilisation (psutil)."""

    name = "host"

    def sample(self) -> list[DeviceSample]:
        import psutil

        vm = psutil.virtual_memory()
        temp = None
        try:
            sensors = psutil.sensors_temperatures()
            readings = [t.current for entries in sensors.values() for t in entries if t.current]
            temp = max(readings) if readings else None
        except (AttributeError, OSError):
            pass
        return [
            DeviceSample(
                key="host",
                kind="cpu",
                name=f"CPU x{psutil.cpu_count() or 1}",
                util_pct=psutil.cpu_percent(interval=None),
                mem_used_mb=(vm.total - vm.available) / 2**20,
                mem_total_mb=vm.total / 2**20,
                temp_c=temp,
            )
        ]


def detect_source(runner: Runner | None = None, host: Host | None = None) -> DeviceSource:
    """The source for this machine's platform (`engine.system.platform`, as doctor decides it).

    An Ascend host whose npu-smi is not on PATH gets npu-smi from the driver's install location,
    or a source that reports it missing: never the CPU host's figures in place of the NPUs'.
    """
    from engine.system.host import Host
    from engine.system.platform import detect_platform, npu_smi_path

    runner = runner or (host.runner if host else SubprocessRunner())
    host = host or Host(runner=runner)
    platform = detect_platform(host)
    if platform == "ascend":
        return NpuSmiSource(runner, program=npu_smi_path(host) or "npu-smi")
    if platform == "cuda":
        return NvidiaSmiSource(runner)
    return HostSource()
