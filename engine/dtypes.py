"""The one map of model dtype names: profiles, vLLM's --dtype, config.json and the chip table spell
the same dtype differently, and every comparison goes through `canonical_dtype`.

vLLM's --dtype takes auto, half, float16, bfloat16, float, float32; people also write fp16, bf16
and fp32, and config.json says `torch.bfloat16`. Without one map, `half` passed the schema and
then failed doctor's chip check, which knows only `float16`.
"""

from __future__ import annotations

# alias -> canonical name. The canonical names are the ones every vLLM version accepts.
ALIASES: dict[str, str] = {
    "auto": "auto",
    "half": "float16",
    "float16": "float16",
    "fp16": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float": "float32",
    "float32": "float32",
    "fp32": "float32",
}


def canonical_dtype(name: str | None) -> str | None:
    """`half` -> `float16`, `bf16` -> `bfloat16`, `torch.float32` -> `float32`; a name the map does
    not know comes back lower-cased, for the caller to judge (None stays None)."""
    if name is None:
        return None
    key = str(name).strip().lower().removeprefix("torch.")
    return ALIASES.get(key, key)


__all__ = ["ALIASES", "canonical_dtype"]
