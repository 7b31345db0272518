"""The device views beside `npu-smi info`: `npu-smi info -t <type> -i <npu>` (ECC, memory with the
HBM temperature, common with the AI Core's current frequency, voltage, board, health, temperature,
power), each polled on its own interval (views.yaml, which also gives hccn_tool's per-NIC views
theirs; those are parsed by engine/netcheck/hccn.py, the parsers netcheck uses).

Parsers are driven by views.yaml's key table: a key the table does not know is kept, as printed,
in `unknown`, never dropped; a value npu-smi prints as `NA` is None (shown N/A).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Mapping

from engine.data import load_yaml
from engine.devices.npu_smi import parse_key_values

# Keys every card-level answer prints around the chip blocks: not figures of the view.
_FRAME_KEYS = frozenset({"NPU ID", "Chip ID", "Chip Count", "Chip Name", "Total Count", "Card Count"})


@functools.lru_cache(maxsize=1)
def view_table() -> Mapping:
    return load_yaml("engine.devices", "views.yaml")


def npu_views(polled_only: bool = True) -> list[str]:
    table = view_table()["npu_smi"]
    return [name for name, spec in table.items() if spec.get("poll", True) or not polled_only]


def nic_views() -> list[str]:
    return list(view_table()["hccn_tool"])


def intervals() -> dict[str, float]:
    """The polling interval of every polled view, seconds: `npu:<type>` and `nic:<view>`."""
    table = view_table()
    out = {f"npu:{k}": float(v["interval_s"]) for k, v in table["npu_smi"].items() if v.get("poll", True)}
    out.update({f"nic:{k}": float(v["interval_s"]) for k, v in table["hccn_tool"].items()})
    return out


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    m = re.match(r"\s*(-?\d+(?:\.\d+)?)\s*$", value)
    return float(m.group(1)) if m else None


@dataclass(frozen=True)
class ChipView:
    """One chip's answer to one view: numbers by our field name (None: printed NA or not a
    number), text fields, and every key the table does not know, as printed."""

    values: Mapping[str, float | None] = field(default_factory=dict)
    text: Mapping[str, str] = field(default_factory=dict)
    unknown: Mapping[str, str] = field(default_factory=dict)


def parse_view(view: str, text: str) -> dict[int, ChipView]:
    """`npu-smi info -t <view> -i N` (card level, chip id -> fields) or `-i N -c C` (one chip,
    chip 0). MCU blocks (`Chip Name : mcu`) are the board's, not a chip's: left out."""
    spec = view_table()["npu_smi"][view]
    fields: Mapping[str, list[str]] = spec.get("fields") or {}
    texts: Mapping[str, list[str]] = spec.get("text") or {}
    taken = {k for keys in (*fields.values(), *texts.values()) for k in keys}
    known = set(spec.get("known") or ()) | _FRAME_KEYS
    answer = parse_key_values(text)
    out: dict[int, ChipView] = {}
    for chip, block in answer.chips().items():
        values = {}
        for name, keys in fields.items():
            key = next((k for k in keys if k in block), None)
            if key is not None:
                values[name] = _number(block[key])
        words = {}
        for name, keys in texts.items():
            key = next((k for k in keys if k in block or k in answer.header), None)
            if key is not None:
                words[name] = block.get(key, answer.header.get(key, ""))
        unknown = {k: v for k, v in block.items() if k not in taken and k not in known}
        out[chip] = ChipView(values, words, unknown)
    return out


def health_codes(view: ChipView | None) -> tuple[str, ...]:
    """The error codes of a `-t health` answer (`NA`: none)."""
    codes = (view.text.get("error_codes") or "") if view is not None else ""
    return () if codes.strip() in ("", "NA") else tuple(codes.split())


# ---- keys ---------------------------------------------------------------------------------


def chip_of(key: str) -> tuple[int, int] | None:
    """(npu, chip) of a DeviceSample key: `npu3` -> (3, 0), `npu0.1` -> (0, 1)."""
    m = re.fullmatch(r"npu(\d+)(?:\.(\d+))?", key)
    return (int(m.group(1)), int(m.group(2) or 0)) if m else None


__all__ = [
    "ChipView",
    "chip_of",
    "health_codes",
    "intervals",
    "nic_views",
    "npu_views",
    "parse_view",
    "view_table",
]
