"""KV-cache geometry and capacity, following vLLM's own arithmetic (v1 kv_cache_utils).

One "page" is one layer's slice of one block. Layers are split into KV-cache groups of equal size;
a block id taken from the shared pool covers one page in every layer of a group, so
`bytes_per_block = group_size x page`. A request at max_model_len needs cdiv(len, block) blocks
in each full-attention group and one block in each linear-attention (state) group.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.capacity.model_config import ModelShape, dtype_bytes


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class KVLayout:
    tensor_parallel_size: int
    block_size: int  # effective: hybrid models may need a larger one than asked
    kv_heads_per_rank: int
    kv_dtype_bytes: int
    bytes_per_token: int  # per device: every full-attention layer's K and V for one token
    state_bytes_per_seq: int  # per device: linear-attention layers' fixed state for one sequence
    page_bytes: int
    group_size: int
    full_groups: int
    linear_groups: int

    @property
    def bytes_per_block(self) -> int:
        return self.group_size * self.page_bytes

    def blocks_per_request(self, max_model_len: int) -> int:
        return self.full_groups * cdiv(max_model_len, self.block_size) + self.linear_groups


def _attention_page_per_token(shape: ModelShape, kv_heads_per_rank: int, nbytes: int) -> int:
    if shape.mla_latent_dim:
        return shape.mla_latent_dim * nbytes  # one latent per token, no separate V
    return 2 * kv_heads_per_rank * shape.head_dim * nbytes


def linear_state_bytes(shape: ModelShape, tp: int, conv_bytes: int) -> int:
    """One gated delta-net layer's state per sequence on one rank: conv window + recurrent state."""
    lin = shape.linear
    assert lin is not None
    conv_dim = lin.key_head_dim * lin.num_key_heads * 2 + lin.value_head_dim * lin.num_value_heads
    conv = conv_dim // tp * (lin.conv_kernel - 1) * conv_bytes
    ssm_bytes = dtype_bytes(lin.ssm_dtype) if lin.ssm_dtype else conv_bytes
    temporal = lin.num_value_heads // tp * lin.value_head_dim * lin.key_head_dim * ssm_bytes
    return conv + temporal


def layout(
    shape: ModelShape, tp: int, block_size: int, kv_dtype: str, align: int, model_dtype: str | None = None
) -> KVLayout:
    """The KV-cache layout vLLM would build for `shape` on one of `tp` ranks.

    `model_dtype` (default: the checkpoint's) sets the conv-state dtype of linear-attention layers.
    """
    nbytes = dtype_bytes(kv_dtype)
    # KV heads are split over ranks, and replicated when there are fewer heads than ranks.
    kv_rank = max(1, shape.num_kv_heads // tp)
    per_token_layer = _attention_page_per_token(shape, kv_rank, nbytes)
    n_full, n_linear = shape.full_attention_layers, shape.linear_attention_layers
    if not n_linear:
        return KVLayout(
            tp, block_size, kv_rank, nbytes, n_full * per_token_layer, 0, block_size * per_token_layer, n_full, 1, 0
        )

    # Hybrid: every page must be the same size, so the attention block grows until its page holds
    # a whole linear-attention state; the state page is padded up to the attention page.
    state = linear_state_bytes(shape, tp, dtype_bytes(model_dtype or shape.dtype))
    needed = align * cdiv(state, align * per_token_layer)
    block = max(block_size, needed)
    page = block * per_token_layer
    smallest, largest = min(n_full, n_linear), max(n_full, n_linear)
    group = largest if largest < smallest * 1.5 else smallest
    full_groups, linear_groups = cdiv(n_full, group), cdiv(n_linear, group)
    return KVLayout(
        tp,
        block,
        kv_rank,
        nbytes,
        n_full * per_token_layer,
        linear_groups * group * page,
        page,
        group,
        full_groups,
        linear_groups,
    )


@dataclass(frozen=True)
class Capacity:
    num_blocks: int
    kv_tokens: int  # what vLLM prints as "KV cache size: N tokens"
    max_concurrency: float  # requests of max_model_len tokens that fit at once


def capacity(kv: KVLayout, kv_bytes: int, max_model_len: int) -> Capacity:
    num_blocks = max(0, kv_bytes) // kv.bytes_per_block
    concurrency = num_blocks / kv.blocks_per_request(max_model_len)
    # vLLM reports int(concurrency * max_model_len), not num_blocks * block_size.
    return Capacity(num_blocks, int(concurrency * max_model_len), concurrency)
