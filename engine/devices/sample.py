"""The one device sample every telemetry source produces (NPU chip, CUDA GPU, or the CPU host)."""

from __future__ import annotations

from dataclasses import dataclass

# Health words npu-smi prints; anything else (NA, UNKNOWN, garbage) counts as not OK.
HEALTHY = "OK"


@dataclass(frozen=True)
class DeviceProcess:
    """A process holding device memory, as the device tool lists it."""

    pid: int
    name: str
    memory_mb: float | None = None


@dataclass(frozen=True)
class DeviceSample:
    """One chip at one instant. A value the source does not give is None (shown as N/A).

    `key` identifies the chip across ticks: "npu0", "npu0.1" (A3 die 1), "cuda0", "host".
    Memory is device memory (HBM on Ascend, VRAM on CUDA, RAM on a CPU host), in MiB.
    """

    key: str
    kind: str  # "npu" | "cuda" | "cpu"
    name: str
    health: str | None = None
    power_w: float | None = None
    temp_c: float | None = None
    util_pct: float | None = None  # AI Core % on Ascend, GPU util on CUDA, CPU % on a host
    mem_used_mb: float | None = None
    mem_total_mb: float | None = None
    mem_bw_pct: float | None = None  # HBM bandwidth usage on Ascend, memory controller % on CUDA
    aicpu_pct: float | None = None
    ctrlcpu_pct: float | None = None
    processes: int | None = None
    error_codes: tuple[str, ...] = ()  # npu-smi's codes for a chip whose health is not OK
    # Added after recordings existed, so last and optional: the chip's device id (npu-smi's
    # physical chip id on A3, else its NPU ID: what npu-exporter labels `id`), its PCIe bus,
    # whether its memory is HBM or the board's DDR (310 family), and the processes on it.
    device_id: int | None = None
    bus: str | None = None
    mem_kind: str | None = None  # "hbm" | "ddr"
    procs: tuple[DeviceProcess, ...] = ()

    @property
    def mem_pct(self) -> float | None:
        if self.mem_used_mb is None or not self.mem_total_mb:
            return None
        return 100.0 * self.mem_used_mb / self.mem_total_mb

    @property
    def healthy(self) -> bool | None:
        """None when the source does not report health (CUDA, CPU host)."""
        if self.health is None:
            return None
        return self.health == HEALTHY
