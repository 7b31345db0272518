"""The parts of a Hugging Face `config.json` that decide KV-cache size.

Handles plain decoders (Llama/Qwen3 style, GQA), MoE (same attention), multimodal wrappers with a
`text_config`, MLA (DeepSeek: one latent per token) and hybrid models whose linear-attention
layers (Qwen3.5 / Qwen3-Next gated delta-net) keep a fixed state per sequence instead of KV.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.dtypes import canonical_dtype
from engine.errors import BadInput

# Keyed by canonical name (engine.dtypes): `half`, `bf16`, `torch.float32` are looked up through it.
DTYPE_BYTES = {
    "bfloat16": 2,
    "float16": 2,
    "float32": 4,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "int8": 1,
}


@dataclass(frozen=True)
class LinearAttention:
    """Gated delta-net geometry (per layer, before TP sharding)."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int
    ssm_dtype: str | None  # the checkpoint's mamba_ssm_dtype; None = the model dtype


@dataclass(frozen=True)
class ModelShape:
    architecture: str
    model_type: str
    dtype: str
    num_layers: int
    full_attention_layers: int
    linear_attention_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int | None
    num_experts: int = 0
    experts_per_token: int = 0
    mla_latent_dim: int = 0  # kv_lora_rank + qk_rope_head_dim when the model uses MLA
    linear: LinearAttention | None = None

    @property
    def hybrid(self) -> bool:
        return self.linear_attention_layers > 0


def _int(cfg: dict[str, Any], key: str, source: Path, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        if value is None:
            raise BadInput(f"{source}: `{key}` is missing", "use the model's original config.json")
        raise BadInput(f"{source}: `{key}` must be an integer, got {value!r}", "use the model's original config.json")
    return value


def read_config(model_dir: Path) -> ModelShape:
    source = model_dir / "config.json"
    try:
        top = json.loads(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(f"no config.json in {model_dir}", "point --model at a Hugging Face model directory")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BadInput(f"{source} is not readable JSON: {exc}", "use the model's original config.json")
    if not isinstance(top, dict):
        raise BadInput(f"{source} is not a JSON object", "use the model's original config.json")
    # Multimodal checkpoints keep the language model under text_config (Qwen3.5, Qwen2.5-VL...).
    cfg = top.get("text_config") if isinstance(top.get("text_config"), dict) else top
    architecture = (top.get("architectures") or ["unknown"])[0]
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or top.get("torch_dtype") or top.get("dtype") or "bfloat16")
    dtype = canonical_dtype(dtype) or "bfloat16"

    layers = _int(cfg, "num_hidden_layers", source)
    heads = _int(cfg, "num_attention_heads", source)
    kv_heads = _int(cfg, "num_key_value_heads", source, heads)
    hidden = _int(cfg, "hidden_size", source)
    head_dim = cfg.get("head_dim") or hidden // heads

    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        linear_layers = sum(1 for t in layer_types if t == "linear_attention")
    elif cfg.get("full_attention_interval") and "linear_num_value_heads" in cfg:
        interval = int(cfg["full_attention_interval"])
        linear_layers = layers - layers // interval
    else:
        linear_layers = 0
    linear = None
    if linear_layers:
        linear = LinearAttention(
            num_key_heads=_int(cfg, "linear_num_key_heads", source),
            num_value_heads=_int(cfg, "linear_num_value_heads", source),
            key_head_dim=_int(cfg, "linear_key_head_dim", source),
            value_head_dim=_int(cfg, "linear_value_head_dim", source),
            conv_kernel=_int(cfg, "linear_conv_kernel_dim", source, 4),
            ssm_dtype=cfg.get("mamba_ssm_dtype"),
        )
    mla = 0
    if cfg.get("kv_lora_rank"):
        mla = int(cfg["kv_lora_rank"]) + int(cfg.get("qk_rope_head_dim") or 0)

    return ModelShape(
        architecture=architecture,
        model_type=str(cfg.get("model_type") or top.get("model_type") or "unknown"),
        dtype=dtype,
        num_layers=layers,
        full_attention_layers=layers - linear_layers,
        linear_attention_layers=linear_layers,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=int(head_dim),
        hidden_size=hidden,
        intermediate_size=int(cfg.get("intermediate_size") or 0),
        vocab_size=int(cfg.get("vocab_size") or 0),
        max_position_embeddings=cfg.get("max_position_embeddings"),
        num_experts=int(cfg.get("num_experts") or cfg.get("n_routed_experts") or cfg.get("num_local_experts") or 0),
        experts_per_token=int(cfg.get("num_experts_per_tok") or 0),
        mla_latent_dim=mla,
        linear=linear,
    )


def dtype_bytes(name: str) -> int:
    try:
        return DTYPE_BYTES[canonical_dtype(name) or name]
    except KeyError:
        raise BadInput(f"unknown dtype {name!r}", f"use one of {', '.join(DTYPE_BYTES)}")
