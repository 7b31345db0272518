"""Parsers for `npu-smi` output, keyed on labels and cell boundaries, never on column positions.

The overview table changed width across drivers (98, 99, 106 and 116 columns) and across chip
families (910B, A3 with two dies per card, 310/310P with a logical device id, 950 with its own
header), so the table parser splits rows on `|` and tells the two rows of a chip apart by what
their cells hold. The `-t <type>` outputs are `key : value` lines grouped in blank-line separated
blocks; they go through one block parser and a table of key aliases.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from engine.errors import Unreachable

_VERSION = re.compile(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)")
# used / total pairs; a five-digit used value eats the space before the slash ("46223/ 65536").
_PAIR = re.compile(r"(\d+|NA)\s*/\s*(\d+)")
_BUS = re.compile(r"^[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
_IDLE = re.compile(r"No running processes found in NPU\s+(\d+)")

# Lines npu-smi prints instead of a table when it cannot talk to the driver.
_FAILURES = (
    "dcmi model initialized failed",
    "dcmi module initialize failed",
    "npu get board type failed",
    "There is no NPU card on this server",
    "There is no NPU chip on this card",
    "Failed to execute npu-smi",
    "Command or option is not found",
    "Error parameter of -t",
    "This device does not support querying",
)


class NpuSmiError(Unreachable):
    """npu-smi answered, but with an error or with text that is not its table."""


@dataclass(frozen=True)
class ChipRow:
    npu: int
    chip: int
    name: str
    health: str
    power_w: float | None
    temp_c: float | None
    hugepages: tuple[int, int] | None
    bus: str | None
    aicore_pct: float | None
    # The second id of row 2: the physical chip id on A3, the logical device id on 310/310P.
    second_id: int | None = None
    ddr: tuple[int | None, int] | None = None  # used / total MB of on-board DDR
    hbm: tuple[int | None, int] | None = None  # used / total MB of HBM; None on 310 family


@dataclass(frozen=True)
class ProcessRow:
    npu: int
    chip: int
    pid: int
    name: str
    memory_mb: int
    pid_in_container: int | None = None


@dataclass(frozen=True)
class NpuTable:
    tool_version: str | None
    driver_version: str | None
    chips: tuple[ChipRow, ...]
    processes: tuple[ProcessRow, ...]
    idle_npus: frozenset[int]


def _num(token: str | None) -> float | None:
    if token is None:
        return None
    try:
        return float(token)
    except ValueError:
        return None  # "NA", "-", or damage


def _int(token: str | None) -> int | None:
    value = _num(token)
    return None if value is None else int(value)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _pairs(text: str) -> list[tuple[int | None, int]]:
    return [(None if u == "NA" else int(u), int(t)) for u, t in _PAIR.findall(text)]


def _fail_line(text: str) -> str | None:
    for line in text.splitlines():
        if any(marker in line for marker in _FAILURES):
            return line.strip()
    return None


def _raise_failure(text: str, what: str) -> None:
    line = _fail_line(text)
    if line is not None:
        from engine.i18n import _

        raise NpuSmiError(
            _("npu-smi {what} failed: {line}").format(what=what, line=line),
            _(
                "run `npu-smi info` by hand; 'device is used' (-8020) inside a container means the "
                "container lacks the /dev/davinci_manager and driver mounts"
            ),
        )


def parse_info(text: str) -> NpuTable:
    """Parse `npu-smi info`. Raises NpuSmiError on npu-smi's own error lines or non-table text."""
    versions = _VERSION.search(text)
    chips: list[ChipRow] = []
    processes: list[ProcessRow] = []
    idle: set[int] = set()
    pending: dict | None = None  # row 1 of a chip, waiting for its row 2
    in_processes = False
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped.startswith("|"):
            continue
        if "Process id" in stripped and "Process name" in stripped:
            in_processes = True
            continue
        if ("Health" in stripped and "Name" in stripped) or "Bus-Id" in stripped or "npu-smi" in stripped:
            continue
        cells = _cells(stripped)
        if in_processes:
            _process_row(cells, processes, idle)
            continue
        row1 = _row1(cells)
        if row1 is not None and (pending is None or not _looks_like_row2(cells)):
            pending = row1
            continue
        if pending is not None:
            chips.append(_row2(cells, pending))
            pending = None
    if not chips:
        _raise_failure(text, "info")
        raise NpuSmiError(
            "npu-smi info printed no device rows",
            "run `npu-smi info` by hand and check the driver (`cat /usr/local/Ascend/driver/version.info`)",
        )
    return NpuTable(
        versions.group(1) if versions else None,
        versions.group(2) if versions else None,
        tuple(chips),
        tuple(processes),
        frozenset(idle),
    )


def _looks_like_row2(cells: list[str]) -> bool:
    bus_cell = cells[2] if len(cells) >= 4 else (cells[1] if len(cells) > 1 else "")
    return bool(_BUS.match(bus_cell)) or (bus_cell == "NA" and len(cells) >= 2)


def _row1(cells: list[str]) -> dict | None:
    if len(cells) >= 4 and cells[0].isdigit():  # 950 layout: NPU ID | Name | Health | rest
        npu, name, health, rest = cells[0], cells[1], cells[2], cells[3]
    elif len(cells) == 3:
        head = cells[0].split(None, 1)
        if len(head) != 2 or not head[0].isdigit() or _BUS.match(cells[1]):
            return None
        npu, name, health, rest = head[0], head[1], cells[1], cells[2]
    else:
        return None
    if not health or _BUS.match(health):
        return None
    tokens = rest.split()
    pairs = _pairs(rest)
    return {
        "npu": int(npu),
        "name": name,
        "health": health,
        "power_w": _num(tokens[0]) if tokens else None,
        "temp_c": _num(tokens[1]) if len(tokens) > 1 else None,
        "hugepages": (pairs[0][0] or 0, pairs[0][1]) if pairs else None,
    }


def _row2(cells: list[str], row1: dict) -> ChipRow:
    if len(cells) >= 4:  # 950: the id cells of row 2 are empty
        ids, bus, rest = cells[0].split(), cells[2], cells[3]
    else:
        ids = cells[0].split()
        bus = cells[1] if len(cells) > 1 else None
        rest = cells[2] if len(cells) > 2 else ""
    pairs = _pairs(rest)
    tokens = rest.split()
    return ChipRow(
        npu=row1["npu"],
        chip=(_int(ids[0]) or 0) if ids else 0,
        name=row1["name"],
        health=row1["health"],
        power_w=row1["power_w"],
        temp_c=row1["temp_c"],
        hugepages=row1["hugepages"],
        bus=None if bus in (None, "", "NA") else bus,
        aicore_pct=_num(tokens[0]) if tokens else None,
        second_id=_int(ids[1]) if len(ids) > 1 else None,
        ddr=pairs[0] if pairs else None,
        hbm=pairs[1] if len(pairs) > 1 else None,
    )


def _process_row(cells: list[str], processes: list[ProcessRow], idle: set[int]) -> None:
    match = _IDLE.search(cells[0]) if cells else None
    if match:
        idle.add(int(match.group(1)))
        return
    if len(cells) < 4:
        return
    ids = cells[0].split()
    pid, memory = _int(cells[1]), _int(cells[3])
    if not ids or pid is None or memory is None or not ids[0].isdigit():
        return
    processes.append(
        ProcessRow(
            npu=int(ids[0]),
            chip=(_int(ids[1]) or 0) if len(ids) > 1 else 0,
            pid=pid,
            name=cells[2],
            memory_mb=memory,
            pid_in_container=_int(cells[4]) if len(cells) > 4 else None,
        )
    )


# ---- `npu-smi info -t <type>`: `key : value` blocks -------------------------------------------


@dataclass(frozen=True)
class KeyValueOutput:
    """One `-t` answer: the card header (`NPU ID`, `Chip Count`...) and one field map per block.

    Blocks are the blank-line separated groups; a chip block carries its `Chip ID` (before or
    after its fields depending on the type and family), an MCU block carries `Chip Name : mcu`.
    """

    header: Mapping[str, str]
    blocks: tuple[Mapping[str, str], ...]

    def chips(self) -> dict[int, Mapping[str, str]]:
        """Chip id -> fields, MCU blocks left out. A card-less form (950, chip level) is chip 0."""
        out: dict[int, Mapping[str, str]] = {}
        for block in self.blocks:
            if block.get("Chip Name", "").lower() == "mcu":
                continue
            chip = _int(block.get("Chip ID"))
            out[len(out) if chip is None else chip] = block
        return out


_HEADER_KEYS = ("NPU ID", "Chip Count", "Total Count", "Card Count")


def parse_key_values(text: str) -> KeyValueOutput:
    header: dict[str, str] = {}
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    last_key: str | None = None
    for raw in text.splitlines():
        if not raw.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        if ":" not in raw:
            continue
        key, _, value = raw.partition(":")
        key, value = key.strip(), value.strip()
        if not key:  # continuation line of a multi-line value (Error Information)
            if last_key is not None:
                target = current if last_key in current else header
                target[last_key] = f"{target.get(last_key, '')}; {value}".strip("; ")
            continue
        if key in _HEADER_KEYS and not current and key not in header:
            header[key] = value
        else:
            current[key] = value
        last_key = key
    if current:
        blocks.append(current)
    if not header and not blocks:
        _raise_failure(text, "query")
        raise NpuSmiError("npu-smi printed no `key : value` lines", "run the same npu-smi command by hand")
    if not blocks:
        _raise_failure(text, "query")
    return KeyValueOutput(header, tuple(blocks))


def _first(fields: Mapping[str, str], *keys: str) -> str | None:
    for key in keys:
        if key in fields:
            return fields[key]
    return None


@dataclass(frozen=True)
class ChipUsage:
    hbm_total_mb: float | None = None
    hbm_pct: float | None = None
    hbm_bw_pct: float | None = None
    ddr_total_mb: float | None = None
    ddr_pct: float | None = None
    ddr_bw_pct: float | None = None
    aicore_pct: float | None = None
    aicpu_pct: float | None = None
    ctrlcpu_pct: float | None = None
    npu_util_pct: float | None = None


def parse_usages(text: str) -> dict[int, ChipUsage]:
    """`npu-smi info -t usages -i N`: chip id -> utilisation and memory capacity."""
    out = {}
    for chip, f in parse_key_values(text).chips().items():
        out[chip] = ChipUsage(
            hbm_total_mb=_num(f.get("HBM Capacity(MB)")),
            hbm_pct=_num(f.get("HBM Usage Rate(%)")),
            hbm_bw_pct=_num(f.get("HBM Bandwidth Usage Rate(%)")),
            # 310 / 310B name their DDR plainly "Memory".
            ddr_total_mb=_num(_first(f, "DDR Capacity(MB)", "Memory Capacity(MB)")),
            ddr_pct=_num(_first(f, "DDR Usage Rate(%)", "Memory Usage Rate(%)")),
            ddr_bw_pct=_num(_first(f, "DDR Bandwidth Usage Rate(%)", "Memory Bandwidth Usage Rate(%)")),
            aicore_pct=_num(f.get("Aicore Usage Rate(%)")),
            aicpu_pct=_num(f.get("Aicpu Usage Rate(%)")),
            ctrlcpu_pct=_num(f.get("Ctrlcpu Usage Rate(%)")),
            npu_util_pct=_num(f.get("NPU Utilization(%)")),
        )
    return out


@dataclass(frozen=True)
class ChipHealth:
    status: str | None
    error_codes: tuple[str, ...] = ()
    information: str | None = None


def parse_health(text: str) -> dict[int, ChipHealth]:
    """`-t health`: status word, error codes (hex), and their description."""
    out = {}
    for chip, f in parse_key_values(text).chips().items():
        codes = f.get("Error Code", "NA")
        info = f.get("Error Information")
        out[chip] = ChipHealth(
            status=_first(f, "Health Status", "Health"),
            error_codes=() if codes in ("", "NA") else tuple(codes.split()),
            information=None if info in (None, "", "NA") else info,
        )
    return out


def chip_keys(rows: Iterable[ChipRow]) -> dict[tuple[int, int], str]:
    """Stable display keys: `npu3` for a one-chip card, `npu0.1` for die 1 of a two-die card."""
    rows = list(rows)
    per_card: dict[int, int] = {}
    for row in rows:
        per_card[row.npu] = per_card.get(row.npu, 0) + 1
    return {(r.npu, r.chip): f"npu{r.npu}" if per_card[r.npu] == 1 else f"npu{r.npu}.{r.chip}" for r in rows}


@dataclass(frozen=True)
class ChipIds:
    """One chip's ids in `npu-smi info -m`: the NPU ID and Chip ID `npu-smi info` shows, the logic
    id the runtime and the logs use (plog `device-N`, `devid=N`), the physical id where printed (A3)."""

    npu: int
    chip: int
    logic: int
    phy: int | None = None


def parse_mapping(text: str) -> dict[int, ChipIds]:
    """`npu-smi info -m` by logic id. Columns by the header (`NPU ID`, `Chip ID`, `Chip Logic ID`,
    A3's `Chip Phy-ID`, then `Chip Name`, which may hold a space); an MCU row (logic id `-`) has no
    logic id and is left out. Nothing is guessed: a row whose ids are not numbers is skipped."""
    header: list[str] | None = None
    out: dict[int, ChipIds] = {}
    for line in text.splitlines():
        if "NPU ID" in line and "Chip Logic ID" in line:
            header = [c.strip() for c in re.split(r"\s{2,}|\t", line.strip()) if c.strip()]
            continue
        if header is None or "Chip Name" not in header:
            continue
        ids = header[: header.index("Chip Name")]
        words = line.split(None, len(ids))
        if len(words) <= len(ids):
            continue
        row = dict(zip(ids, words))
        if not all(row.get(k, "").isdigit() for k in ("NPU ID", "Chip ID", "Chip Logic ID")):
            continue
        phy = row.get("Chip Phy-ID", "")
        chip = ChipIds(
            int(row["NPU ID"]), int(row["Chip ID"]), int(row["Chip Logic ID"]), int(phy) if phy.isdigit() else None
        )
        out[chip.logic] = chip
    return out


__all__ = [
    "ChipHealth",
    "ChipIds",
    "ChipRow",
    "ChipUsage",
    "KeyValueOutput",
    "NpuSmiError",
    "NpuTable",
    "ProcessRow",
    "chip_keys",
    "parse_health",
    "parse_info",
    "parse_key_values",
    "parse_mapping",
    "parse_usages",
]
