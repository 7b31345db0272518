"""Device telemetry: npu-smi (Ascend), nvidia-smi (CUDA) and psutil (CPU host), all yielding
`DeviceSample`. Parsers live in `npu_smi`; sources take a command runner so tests replay
recorded outputs."""

from engine.devices.sample import DeviceProcess, DeviceSample
from engine.devices.sources import (
    DeviceSource,
    HostSource,
    NpuSmiSource,
    NvidiaSmiSource,
    detect_source,
    parse_nvidia_csv,
)

__all__ = [
    "DeviceProcess",
    "DeviceSample",
    "DeviceSource",
    "HostSource",
    "NpuSmiSource",
    "NvidiaSmiSource",
    "detect_source",
    "parse_nvidia_csv",
]
