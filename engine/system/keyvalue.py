"""Readers for the small version files of the Ascend stack.

Two shapes exist: `key=value` (ascend_toolkit_install.info, driver/firmware version.info,
/etc/ascend_install.info, version.cfg) and `key : value` (NNAL version.info, npu-smi -t output).
"""

from __future__ import annotations

import re

_COLON = re.compile(r"^\s*([^:=]+?)\s+:\s?(.*?)\s*$")


def parse_equals(text: str | None) -> dict[str, str]:
    """`key=value` lines; the first occurrence of a key wins; comments and blank lines skipped."""
    out: dict[str, str] = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out.setdefault(key.strip(), value.strip().strip('"'))
    return out


def parse_colon(text: str | None) -> dict[str, str]:
    """`key : value` lines (keys padded with spaces or tabs); the first occurrence wins."""
    out: dict[str, str] = {}
    for line in (text or "").splitlines():
        m = _COLON.match(line)
        if m and m.group(1).strip():
            out.setdefault(m.group(1).strip(), m.group(2))
    return out
