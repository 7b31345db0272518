"""Device fault codes in text: which NPU reported which code, in the shapes public logs show.

    reader = DeviceCodeReader()
    reader.read("... receive ts exception msg, call excep_code=0xb4060007, ..., devid=1 tsid=0", "dev.log")
    # -> [(1, 0xB4060007)]

Shapes, each seen in a public source (docs/triage.md, "Device faults", lists them):
- `npu-smi info -t health`: `Error Code : A4025021 8C03A000 8C084E00`; the NPU comes from the
  `NPU ID :` line or the `npu-smi info ... -i N` command line above it (a transcript);
- device-OS logs of an msnpureport export: `[fault_manager] event_id: [0x80E01809]`,
  `Event id=0x8c17a005`, tsdrv's `excep_code=0x...` / `mntn_system_error: 0x...`, the TS
  exception print's `exception_code=0x...`, the black box's `system exception code [0x...]` and
  `excep_id: 0x...`;
- the host kernel log (dmesg): the driver's `Heartbeat lost! (device=N; ...)`, which FaultDiag's
  knowledge base files as code 0x40F84E00 (inter-board heartbeat lost).
The NPU is the device id the line names (`devid=1`, `device_id=2`, `[devid-0]`, `device=1`),
else the `device-N` folder of the file (msnpureport's layout), else unknown (None). Those ids are
the runtime's logic ids; given `npu-smi info -m` (a bundle's transcript holds it) the reader names
the NPU ID `npu-smi info` shows instead (a 310P card with NPU ID 4 has logic id 0). The driver's
heartbeat line and npu-smi's own answers already name the NPU ID and are left as they are.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from engine.devices.npu_smi import ChipIds

# Literals one of which every line above holds: the triage pre-filter looks for them (cheap), and
# only lines holding one are read here.
DEVICE_LITERALS = (
    "event_id",
    "Event id=",
    "excep_code=",
    "mntn_system_error",
    "exception_code=",
    "system exception code",
    "excep_id",
    "Error Code",
    "Heartbeat lost!",
    "NPU ID",
    "npu-smi info",
)
HEARTBEAT_LOST_CODE = 0x40F84E00  # FaultDiag kg-config.json: "[drv_soft_fault] Heartbeat lost (device=" lines

_HEX = r"0[xX]([0-9A-Fa-f]{8})\b"
_IN_LINE = re.compile(
    r"event_id[:=]\s*\[?" + _HEX
    + r"|Event id=" + _HEX
    + r"|excep_code=" + _HEX
    + r"|mntn_system_error: " + _HEX
    + r"|exception_code=" + _HEX
    + r"|system exception code \[" + _HEX + r"\]"
    + r"|excep_id: " + _HEX
)  # fmt: skip
_HEALTH_CODES = re.compile(r"^\s*Error Code\s*:\s*((?:[0-9A-Fa-f]{8}\s*)+)$")
_HEARTBEAT = re.compile(r"\[drv_soft_fault\].*Heartbeat lost! \(device=([0-9]+);")
_NPU_ID = re.compile(r"^\s*NPU ID\s*:\s*([0-9]+)\s*$")
# a command line of a transcript (`/usr/local/bin/npu-smi info -i 0 -c 0 -t health`, `$ npu-smi ...`)
_COMMAND = re.compile(r"\s*(?:[$#] )?(?:\S*/)?npu-smi info\b(.*)")
_COMMAND_NPU = re.compile(r"\s-i\s+([0-9]+)\b")
_DEVICE_IN_LINE = re.compile(
    r"\bdevid[=:]\s*([0-9]+)|\[devid-([0-9]+)\]|\bdevice_id\s*[=:]\s*([0-9]+)|\(device=([0-9]+);|\bdevice_id-([0-9]+)"
)
_DEVICE_IN_PATH = re.compile(r"(?:^|/)device-([0-9]+)(?:/|_)")


def npu_of_path(source: str) -> int | None:
    """The `device-N` folder (or file name prefix) of an msnpureport export, None when absent."""
    hits = _DEVICE_IN_PATH.findall(source.replace("\\", "/"))
    return int(hits[-1]) if hits else None


def _npu_in_line(line: str) -> int | None:
    m = _DEVICE_IN_LINE.search(line)
    if m is None:
        return None
    return int(next(g for g in m.groups() if g is not None))


class DeviceCodeReader:
    """Reads lines one by one; keeps, per input, the NPU an npu-smi transcript is about."""

    def __init__(self, ids: Mapping[int, "ChipIds"] | None = None) -> None:
        self._npu: dict[str, int | None] = {}
        self._ids = dict(ids or {})  # logic id -> the chip's ids (npu-smi info -m)

    def _npu_of_logic(self, logic: int | None) -> int | None:
        chip = self._ids.get(logic) if logic is not None else None
        return chip.npu if chip is not None else logic

    def read(self, line: str, source: str = "") -> list[tuple[int | None, int]]:
        """(npu, code) for every device fault code the line shows; [] for most lines."""
        if not any(lit in line for lit in DEVICE_LITERALS):
            return []
        if (m := _COMMAND.match(line)) is not None:
            npu = _COMMAND_NPU.search(m.group(1))
            self._npu[source] = int(npu.group(1)) if npu else None
            return []
        if (m := _NPU_ID.match(line)) is not None:
            self._npu[source] = int(m.group(1))
            return []
        if (m := _HEALTH_CODES.match(line)) is not None:
            npu = self._npu.get(source)
            return [(npu, int(code, 16)) for code in m.group(1).split()]
        if (m := _HEARTBEAT.search(line)) is not None:
            return [(int(m.group(1)), HEARTBEAT_LOST_CODE)]
        found: list[tuple[int | None, int]] = []
        for m in _IN_LINE.finditer(line):
            code = int(next(g for g in m.groups() if g is not None), 16)
            npu = _npu_in_line(line)
            pair = (self._npu_of_logic(npu if npu is not None else npu_of_path(source)), code)
            if pair not in found:
                found.append(pair)
        return found


def fault_id(npu: int | None, code: int) -> str:
    """The issue id of a device fault in a triage report: `device-npu3-0x80e18402`."""
    where = f"npu{npu}" if npu is not None else "npu-unknown"
    return f"device-{where}-0x{code:08x}"


__all__ = ["DEVICE_LITERALS", "DeviceCodeReader", "fault_id", "npu_of_path"]
