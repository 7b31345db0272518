"""The KV capacity an engine prints while starting, for engines whose metrics lack it.

vLLM printed it three ways over time: V0 `# GPU blocks: N, # CPU blocks: M` (`# cuda blocks`,
`# npu blocks`...), early V1 `# GPU blocks: N`, and V1 from 0.8 on `<DEV> KV cache size: N tokens`
(thousands separators; `DEV` is GPU, CPU, NPU...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

_BLOCKS = re.compile(r"# (\w+) blocks: ([\d,]+)")
_TOKENS = re.compile(r"\b(\w+)(?: \+ host)? KV cache size: ([\d,]+) tokens")


@dataclass(frozen=True)
class KvCapacity:
    blocks: int | None = None
    tokens: int | None = None


def parse_kv_capacity(lines: Iterable[str]) -> KvCapacity:
    """The last capacity announced in the log (an engine restart announces it again)."""
    blocks = tokens = None
    for line in lines:
        if "blocks:" in line:
            m = _BLOCKS.search(line)
            if m and m.group(1).upper() != "CPU":  # "# CPU blocks" is the swap space of V0
                blocks = int(m.group(2).replace(",", ""))
        if "KV cache size:" in line:
            m = _TOKENS.search(line)
            if m:
                tokens = int(m.group(2).replace(",", ""))
    return KvCapacity(blocks, tokens)
