"""The exporter's polling of the device views (engine/devices/views.yaml): npu-smi's `-t` types per
card, hccn_tool's views per NIC (parsed by engine/netcheck/hccn.py, as netcheck does)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from engine.devices.views import ChipView, chip_of, parse_view
from engine.errors import Unreachable
from engine.netcheck import hccn
from engine.system.runner import Runner, SubprocessRunner


@dataclass(frozen=True)
class NicView:
    """One NIC's answer to one hccn_tool view."""

    word: str | None = None  # link: UP / DOWN; net_health: Success, Init, Fault...
    counters: Mapping[str, int | None] = field(default_factory=dict)  # stat
    optical: Mapping[str, float | str | None] = field(default_factory=dict)


def parse_nic_view(view: str, text: str) -> NicView:
    if view == "link":
        return NicView(word=hccn.link_status(text))
    if view == "net_health":
        return NicView(word=hccn.net_health(text))
    if view == "stat":
        return NicView(counters=hccn.stat_counters(text))
    if view == "optical":
        return NicView(optical=hccn.optical_values(text))
    raise ValueError(f"unknown hccn_tool view {view!r}")


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


__all__ = ["NicView", "ViewAnswer", "ViewPoller", "parse_nic_view"]
