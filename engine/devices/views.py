"""The device views beside `npu-smi info`: `npu-smi info -t <type> -i <npu>` (ECC, memory with the
HBM temperature, common with the AI Core's current frequency, voltage, board, temperature, power)
and hccn_tool's per-NIC views (`-link`, `-net_health`, `-stat`, `-optical`), each polled on its
own interval (views.yaml).

Parsers are driven by views.yaml's key table: a key the table does not know is kept, as printed,
in `unknown`, never dropped; a value npu-smi prints as `NA` is None (shown N/A). hccn_tool's
answers go through engine/netcheck/hccn.py, the parsers netcheck uses.
"""

from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from engine.data import load_yaml
from engine.devices.npu_smi import parse_key_values
from engine.errors import Unreachable
from engine.system.runner import Runner, SubprocessRunner

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


# ---- hccn_tool -------------------------------------------------------------------------------


def parse_stat(text: str) -> dict[str, int | None]:
    """`hccn_tool -i N -stat -g`: every `name:count` line under `packet statistics:`, all of
    them (npu-exporter exports some; the rest stay in the JSON view). A count that is not a
    number is None."""
    out: dict[str, int | None] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if not sep or not key or " " in key or not value.strip():
            continue
        number = _number(value)
        out[key] = None if number is None else int(number)
    return out


@dataclass(frozen=True)
class NicView:
    """One NIC's answer to one hccn_tool view."""

    word: str | None = None  # link: UP / DOWN; net_health: Success, Init, Fault...
    counters: Mapping[str, int | None] = field(default_factory=dict)  # stat
    optical: Mapping[str, float | str | None] = field(default_factory=dict)


def parse_nic_view(view: str, text: str) -> NicView:
    from engine.netcheck import hccn  # netcheck's parsers (its package imports doctor's model)

    if view == "link":
        return NicView(word=hccn.link_status(text))
    if view == "net_health":
        return NicView(word=hccn.net_health(text))
    if view == "stat":
        return NicView(counters=parse_stat(text))
    if view == "optical":
        return NicView(optical=hccn.optical_values(text))
    raise ValueError(f"unknown hccn_tool view {view!r}")


# ---- polling ---------------------------------------------------------------------------------


def chip_of(key: str) -> tuple[int, int] | None:
    """(npu, chip) of a DeviceSample key: `npu3` -> (3, 0), `npu0.1` -> (0, 1)."""
    m = re.fullmatch(r"npu(\d+)(?:\.(\d+))?", key)
    return (int(m.group(1)), int(m.group(2) or 0)) if m else None


@dataclass(frozen=True)
class ViewAnswer:
    """What one poll of one view found: by device key (npu views) or NIC index (hccn_tool), the
    cards or NICs whose query failed (with npu-smi's or hccn_tool's line), and when."""

    view: str
    chips: Mapping[str, ChipView] = field(default_factory=dict)
    nics: Mapping[int, NicView] = field(default_factory=dict)
    failed: Mapping[str, str] = field(default_factory=dict)
    time: float = 0.0


class ViewPoller:
    """Runs one view over the NPUs (or their NICs) the device poll found. A card whose query
    fails keeps its place in `failed`: one unsupported card must not blank the others."""

    def __init__(
        self,
        runner: Runner | None = None,
        npu_smi: str = "npu-smi",
        hccn_tool: str | None = "hccn_tool",
        timeout: float = 5.0,
    ) -> None:
        self.runner = runner or SubprocessRunner()
        self.npu_smi = npu_smi
        self.hccn_tool = hccn_tool
        self.timeout = timeout

    def _run(self, argv: Sequence[str]) -> str:
        result = self.runner.run(list(argv), timeout=self.timeout)
        text = result.stdout
        if not result.ok and not text.strip():
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise Unreachable(f"`{' '.join(argv)}` exited with {result.returncode}: {last}", "run it by hand")
        return text

    def poll_npus(self, view: str, keys: Iterable[str]) -> ViewAnswer:
        cards: dict[int, list[tuple[int, str]]] = {}
        for key in keys:
            where = chip_of(key)
            if where is not None:
                cards.setdefault(where[0], []).append((where[1], key))
        chips: dict[str, ChipView] = {}
        failed: dict[str, str] = {}
        for npu, members in sorted(cards.items()):
            try:
                answer = parse_view(view, self._run([self.npu_smi, "info", "-t", view, "-i", str(npu)]))
            except Unreachable as exc:
                failed[f"npu{npu}"] = exc.cause
                continue
            for chip, key in members:
                if chip in answer:
                    chips[key] = answer[chip]
        return ViewAnswer(view, chips=chips, failed=failed, time=time.time())

    def poll_nics(self, view: str, nics: Iterable[int]) -> ViewAnswer:
        if self.hccn_tool is None:
            return ViewAnswer(view, time=time.time())
        out: dict[int, NicView] = {}
        failed: dict[str, str] = {}
        for nic in sorted(set(nics)):
            try:
                out[nic] = parse_nic_view(view, self._run([self.hccn_tool, "-i", str(nic), f"-{view}", "-g"]))
            except Unreachable as exc:
                failed[f"nic{nic}"] = exc.cause
        return ViewAnswer(view, nics=out, failed=failed, time=time.time())


__all__ = [
    "ChipView",
    "NicView",
    "ViewAnswer",
    "ViewPoller",
    "chip_of",
    "health_codes",
    "intervals",
    "nic_views",
    "npu_views",
    "parse_nic_view",
    "parse_stat",
    "parse_view",
    "view_table",
]
