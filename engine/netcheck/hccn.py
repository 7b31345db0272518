"""Parsers for hccn_tool's answers, keyed on their labels (`link status:`, `ipaddr:`), never on
line positions. Each returns None (or an empty value) when the label is absent: an answer the
parser does not know is "unknown", not a failure of the NIC.

Formats, from public samples (tests/fixtures/netcheck/PROVENANCE.md):

    link status: UP
    net health status: Success
    ipaddr:11.12.165.80 / netmask:255.255.255.0
    default gateway:11.12.165.1, Iface:eth0
    netdetect address: 11.12.165.1
    \tIfname: 400GE1/1/5:1                      (-lldp -g, under "Port ID TLV")
    fec mode: rs FEC mode
    dev_id:0, tls switch[0](0:disable, 1:enable), ...
    [devid 0]link up count       : 2            ([device 0] in newer drivers)
    3 packets transmitted, 3 received, 0.00% packet loss   ("packets loss" in hccn_tool's HCCS ping)
"""

from __future__ import annotations

import re
from dataclasses import dataclass


def _label(text: str, pattern: str) -> str | None:
    m = re.search(pattern, text, re.MULTILINE)
    return m.group(1).strip() if m else None


def link_status(text: str) -> str | None:
    return _label(text, r"^\s*link status:\s*(\S+)")


def net_health(text: str) -> str | None:
    return _label(text, r"^\s*net health status:\s*(.+?)\s*$")


def ip_address(text: str) -> tuple[str | None, str | None]:
    return _label(text, r"^\s*ipaddr:\s*(\S+)"), _label(text, r"^\s*netmask:\s*(\S+)")


def gateway(text: str) -> str | None:
    return _label(text, r"^\s*default gateway:\s*([^,\s]+)")


def netdetect(text: str) -> str | None:
    return _label(text, r"^\s*netdetect address:\s*(\S+)")


def lldp_ifname(text: str) -> str | None:
    return _label(text, r"^\s*Ifname:\s*(\S+)")


def fec_mode(text: str) -> str | None:
    """The mode word: "rs" for `fec mode: rs FEC mode`, "no" for `fec mode: no FEC mode`."""
    return _label(text, r"^\s*fec mode:\s*(\S+)\s+FEC mode")


def tls_switch(text: str) -> str | None:
    """ "0" (disabled) or "1" (enabled), from the `tls switch[N]` line."""
    return _label(text, r"tls switch\[(\d+)\]")


@dataclass(frozen=True)
class LinkStat:
    up_count: int | None
    downs: tuple[str, ...]  # the time of each "LINK DOWN" record, newest first as printed
    latest: str | None = None  # "LINK UP" / "LINK DOWN": the newest record, the link's state since then


def link_stat(text: str) -> LinkStat:
    count = _label(text, r"link up count\s*:\s*(\d+)")
    records = re.findall(r"^\[dev(?:ice|id) \d+\]\s+(.+?)\s+(LINK UP|LINK DOWN)\s*$", text, re.MULTILINE)
    downs = tuple(when.strip() for when, state in records if state == "LINK DOWN")
    return LinkStat(int(count) if count is not None else None, downs, records[0][1] if records else None)


@dataclass(frozen=True)
class Optical:
    present: bool | None
    tx_los: str | None
    rx_los: str | None
    out_of_range: tuple[str, ...]  # "Rx Power1 0.0054 mW < 0.1445 mW"


def optical(text: str) -> Optical:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    present = fields.get("present")
    low: list[str] = []
    for kind in ("Tx", "Rx"):
        lo = _number(fields.get(f"{kind}Power Low Thres"))
        hi = _number(fields.get(f"{kind}Power High Thres"))
        for key, value in fields.items():
            if not re.fullmatch(rf"{kind} Power\d*", key):
                continue
            v = _number(value)
            if v is None:
                continue
            if lo is not None and v < lo:
                low.append(f"{key} {v:g} mW < {lo:g} mW")
            elif hi is not None and v > hi:
                low.append(f"{key} {v:g} mW > {hi:g} mW")
    return Optical(
        None if present is None else present.lower() != "not present",
        fields.get("Tx Los Flag"),
        fields.get("Rx Los Flag"),
        tuple(low),
    )


# `-optical -g` keys npu-exporter exports (its collector_for_optical.go reads them with spaces as
# `_`): the module's presence, temperature (C), supply voltage (mV), and per-lane power (mW).
# Modules with one lane print `Tx Power` / `Rx Power` without a number: lane 0.
_OPTICAL_LANE = re.compile(r"(Tx|Rx) Power(\d*)")


def optical_values(text: str) -> dict[str, float | str | None]:
    """The figures of `-optical -g`: `present` (the word as printed), `temperature`, `vcc`,
    `tx_power_N` / `rx_power_N`; a value printed as `not supported` or `NA` is None."""
    out: dict[str, float | str | None] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not sep:
            continue
        if key == "present":
            out["present"] = value
        elif key == "temperature":
            out["temperature"] = _number(value)
        elif key == "Vcc":
            out["vcc"] = _number(value)
        else:
            m = _OPTICAL_LANE.fullmatch(key)
            if m:
                out[f"{m.group(1).lower()}_power_{m.group(2) or '0'}"] = _number(value)
    return out


def stat_counters(text: str) -> dict[str, int | None]:
    """`hccn_tool -i N -stat -g`: every `name:count` line under `packet statistics:`, all of them
    (the exporter writes those npu-exporter names; the others are kept). A count that is not a
    whole number is None."""
    out: dict[str, int | None] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if not sep or not key or " " in key or not value.strip():
            continue
        number = _number(value.strip()) if re.fullmatch(r"\s*-?\d+\s*", value) else None
        out[key] = None if number is None else int(number)
    return out


def _number(value: str | None) -> float | None:
    m = re.match(r"\s*(-?\d+(?:\.\d+)?)", value or "")
    return float(m.group(1)) if m else None


@dataclass(frozen=True)
class Ping:
    sent: int
    received: int
    loss_pct: float


def ping(text: str) -> Ping | None:
    m = re.search(r"(\d+) packets transmitted, (\d+) received, ([\d.]+)% packets? loss", text)
    return Ping(int(m.group(1)), int(m.group(2)), float(m.group(3))) if m else None


def hccn_conf(text: str) -> dict[int, dict[str, str]]:
    """/etc/hccn.conf as {nic: {"address": ..., "netmask": ..., "netdetect": ..., "gateway": ...}}."""
    nics: dict[int, dict[str, str]] = {}
    for line in text.splitlines():
        m = re.fullmatch(r"\s*([a-z_]+)_(\d+)\s*=\s*(\S*)\s*", line)
        if m:
            nics.setdefault(int(m.group(2)), {})[m.group(1)] = m.group(3)
    return nics


def chip_logic_ids(npu_smi_info_m: str) -> list[int]:
    """The chip logic ids of `npu-smi info -m` (rows "NPU ID  Chip ID  Chip Logic ID  Chip Name")."""
    ids = []
    for line in npu_smi_info_m.splitlines():
        words = line.split()
        if len(words) >= 4 and all(w.isdigit() for w in words[:3]):
            ids.append(int(words[2]))
    return sorted(set(ids))
