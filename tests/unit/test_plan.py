"""The planner on recorded config.json + safetensors headers of real model shapes.

The fixture shards under tests/fixtures/models/ keep only the header of each file (the tensor
data is cut off), so every figure here comes from headers and config.json alone.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

import pytest
from helpers import FIXTURES, ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from ascendctl.cli import main
from engine.capacity import NO_FIT, OK, TIGHT, capacity, layout, plan, read_config, weights
from engine.capacity.kv import linear_state_bytes
from engine.errors import BadInput
from engine.profiles import load_profile

MODELS = FIXTURES / "models"
QWEN3_32B, QWEN3_MOE, QWEN35_27B = MODELS / "Qwen3-32B", MODELS / "Qwen3-30B-A3B", MODELS / "Qwen3.5-27B"
GIB = 2**30


def test_weights_are_exact_from_headers_alone():
    w = weights(QWEN3_32B)
    # The real checkpoint's index states total_size 65,524,246,528 for its 17 shards.
    assert (w.total_bytes, w.files, w.tensors) == (65_524_246_528, 17, 707)
    assert w.parameters == 32_762_123_264 and w.bytes_by_dtype == {"BF16": 65_524_246_528}
    index = json.loads((QWEN3_32B / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == w.total_bytes
    # The files hold headers only: far smaller than the weights they describe.
    assert sum(p.stat().st_size for p in QWEN3_32B.glob("*.safetensors")) < 1_000_000


def test_moe_weights_count_every_expert():
    w = weights(QWEN3_MOE)
    assert w.files == 16 and w.tensors == 18_867  # 48 layers x 128 experts x 3 + the rest
    assert w.parameters == 30_532_122_624


def test_config_shapes():
    dense, moe, hybrid = read_config(QWEN3_32B), read_config(QWEN3_MOE), read_config(QWEN35_27B)
    assert (dense.num_layers, dense.num_kv_heads, dense.head_dim, dense.hybrid) == (64, 8, 128, False)
    assert (moe.num_experts, moe.experts_per_token, moe.num_kv_heads) == (128, 8, 4)
    # Qwen3.5 keeps its language model under text_config; 1 layer in 4 is full attention.
    assert (hybrid.full_attention_layers, hybrid.linear_attention_layers) == (16, 48)
    assert (hybrid.num_kv_heads, hybrid.head_dim, hybrid.linear.ssm_dtype) == (4, 256, "float32")


@pytest.mark.parametrize(
    "model, tp, per_token",
    [
        (QWEN3_32B, 1, 2 * 64 * 8 * 128 * 2),
        (QWEN3_32B, 2, 2 * 64 * 4 * 128 * 2),
        (QWEN3_32B, 8, 2 * 64 * 1 * 128 * 2),
        (QWEN3_32B, 16, 2 * 64 * 1 * 128 * 2),  # 8 KV heads on 16 ranks: replicated, one per rank
        (QWEN3_MOE, 4, 2 * 48 * 1 * 128 * 2),
        (QWEN3_MOE, 8, 2 * 48 * 1 * 128 * 2),
        (QWEN35_27B, 1, 2 * 16 * 4 * 256 * 2),  # only the 16 full-attention layers keep per-token KV
    ],
)
def test_kv_bytes_per_token(model, tp, per_token):
    assert layout(read_config(model), tp, 128, "bfloat16", 16).bytes_per_token == per_token


def test_hybrid_state_is_per_sequence_and_sets_the_block():
    shape = read_config(QWEN35_27B)
    conv = (128 * 16 * 2 + 128 * 48) * 3 * 2  # conv window in bf16
    recurrent = 48 * 128 * 128 * 4  # mamba_ssm_dtype float32
    assert linear_state_bytes(shape, 1, 2) == conv + recurrent
    kv = layout(shape, 1, 16, "bfloat16", 16)
    # The attention page must hold a whole state: 16 * cdiv(state, 16 * 4096 B/token/layer) tokens.
    assert kv.block_size == 16 * -(-(conv + recurrent) // (16 * 4096)) == 784
    assert (kv.group_size, kv.full_groups, kv.linear_groups) == (16, 1, 3)
    # A request needs its attention blocks plus one state block per linear-attention group.
    assert kv.blocks_per_request(784 * 10) == 10 + 3


def test_known_cpu_figure_and_block_rounding():
    """2 layers x 2 KV heads x 32 head_dim x K,V x 2 B = 512 B/token; 1 GiB -> 2,097,152 tokens."""
    from engine.capacity.model_config import ModelShape

    tiny = ModelShape("Qwen3ForCausalLM", "qwen3", "bfloat16", 2, 2, 0, 4, 2, 32, 128, 256, 1024, 4096)
    kv = layout(tiny, 1, 128, "bfloat16", 16)
    assert kv.bytes_per_token == 512
    assert capacity(kv, GIB, 512).kv_tokens == 2_097_152
    # 500 tokens still take 4 blocks of 128: vLLM reports int(concurrency * max_model_len).
    odd = capacity(kv, GIB, 500)
    assert odd.num_blocks == 16_384 and odd.max_concurrency == 4096.0 and odd.kv_tokens == 2_048_000


def test_shipped_910b_profile_fits_with_tp2_and_not_tp1():
    p = plan(load_profile("910b-32b"), QWEN3_32B)
    assert p.verdict == OK and p.tensor_parallel_size == 2
    assert p.weights_per_device == 65_524_246_528 // 2
    assert p.max_concurrency >= p.max_num_seqs
    assert {o.tensor_parallel_size: o.fits for o in p.tp_options} == {1: False, 2: True, 4: True, 8: True}
    assert p.offload_bytes == 32 * GIB and p.offload_tokens > 0  # 64 GiB over 2 ranks

    single = plan(load_profile("910b-32b", ["engine.tensor_parallel_size=1"]), QWEN3_32B)
    assert single.verdict == NO_FIT and single.suggested_tensor_parallel_size == 2
    assert "no room for a KV cache" in single.reasons[0]


def test_32gb_card_needs_tp4():
    p = plan(load_profile("910b4-32b"), QWEN3_32B)
    assert p.verdict == OK
    fits = {o.tensor_parallel_size: o.fits for o in p.tp_options}
    assert fits[2] is False and fits[4] is True


def test_tight_when_max_num_seqs_exceeds_what_fits():
    p = plan(load_profile("910b-32b", ["engine.max_num_seqs=64"]), QWEN3_32B)
    assert p.verdict == TIGHT
    assert p.suggested_max_num_seqs == int(p.max_concurrency)
    assert p.suggested_tensor_parallel_size == 8  # the smallest TP where 64 full-length requests fit


def test_max_model_len_beyond_the_model_is_refused_before_launch():
    # The engine itself would refuse it only after loading (tests/fixtures/vllm/fail_max_model_len_too_big.log).
    p = plan(load_profile("910b-32b", ["engine.max_model_len=65536"]), QWEN3_32B)
    assert p.verdict == NO_FIT
    assert any("exceeds the model's max_position_embeddings 40,960" in r for r in p.reasons)


def test_hybrid_and_moe_profiles_plan():
    hybrid = plan(load_profile("910b-qwen3.5-27b"), QWEN35_27B)
    assert hybrid.verdict == OK and hybrid.state_bytes_per_seq > 0
    assert hybrid.block_size > 128  # grown to hold a linear-attention state
    refused = {o.tensor_parallel_size: o.note for o in plan(load_profile("a3-30b-a3b"), QWEN3_MOE).tp_options}
    assert refused[16] == ""  # 32 heads over 16 ranks is fine, 4 KV heads are replicated
    odd = plan(load_profile("910b-qwen3.5-27b", ["device.count=16"]), QWEN35_27B)
    assert (
        "24 attention heads do not split over 16 ranks" in {o.tensor_parallel_size: o.note for o in odd.tp_options}[16]
    )


def test_cpu_plan_is_exact_with_explicit_kv_space(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["Qwen3ForCausalLM"],
                "model_type": "qwen3",
                "torch_dtype": "bfloat16",
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "head_dim": 32,
                "hidden_size": 128,
                "intermediate_size": 256,
                "vocab_size": 1024,
                "max_position_embeddings": 4096,
            }
        )
    )
    _header_only(
        model / "model.safetensors", {"w": {"dtype": "BF16", "shape": [1024, 128], "data_offsets": [0, 262144]}}
    )
    p = plan(load_profile("cpu-tiny"), model)  # the demo's kv_cache_memory_bytes: 3 MiB
    assert p.kv_budget_exact and p.kv_bytes == 3 * 2**20
    assert (p.kv_bytes_per_token, p.num_blocks, p.kv_tokens, p.max_concurrency) == (1024, 24, 3072, 6.0)
    # VLLM_CPU_KVCACHE_SPACE's whole GiB, through cpu_kvcache_space_gib
    text = (ROOT / "profiles" / "cpu-tiny.yaml").read_text()
    gib = tmp_path / "gib.yaml"
    gib.write_text(re.sub(r"(?m)^  kv_cache_memory_bytes: .*$", "  cpu_kvcache_space_gib: 1", text))
    p = plan(load_profile(str(gib)), model)
    assert p.kv_budget_exact and p.kv_bytes == GIB
    assert (p.kv_bytes_per_token, p.num_blocks, p.kv_tokens, p.max_concurrency) == (1024, 8192, 1_048_576, 2048.0)


def _header_only(path: Path, header: dict) -> None:
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob)


def test_broken_model_directories_are_bad_input(tmp_path):
    profile = load_profile("910b-32b")
    with pytest.raises(BadInput, match="model directory not found"):
        plan(profile, tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BadInput, match="no config.json"):
        plan(profile, empty)
    (empty / "config.json").write_text("{not json")
    with pytest.raises(BadInput, match="not readable JSON"):
        plan(profile, empty)

    partial = tmp_path / "partial"
    shutil.copytree(QWEN3_32B, partial)
    (partial / "model-00007-of-00017.safetensors").unlink()
    with pytest.raises(BadInput, match="1 of 17 weight shards .* missing"):
        plan(profile, partial)

    garbage = tmp_path / "garbage"
    garbage.mkdir()
    shutil.copy(QWEN3_32B / "config.json", garbage)
    (garbage / "model.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(BadInput, match="not a safetensors file"):
        plan(profile, garbage)
    (garbage / "model.safetensors").write_bytes(struct.pack("<Q", 20) + b"{" * 20)
    with pytest.raises(BadInput, match="not valid JSON"):
        plan(profile, garbage)


def test_cli_plan_json_and_exit_codes(capsys, tmp_path):
    assert main(["plan", "--profile", "910b-32b", "--model", str(QWEN3_32B), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema_version"] == 1 and data["verdict"] == "ok"
    assert data["kv_bytes_per_token"] == 131_072 and data["weights"]["total_bytes"] == 65_524_246_528
    # Does not fit: the job found a problem (exit 1), and says what would fit.
    assert main(["plan", "-p", "910b-32b", "--model", str(QWEN3_32B), "--set", "engine.tensor_parallel_size=1"]) == 1
    out = capsys.readouterr().out
    assert "verdict: does-not-fit" in out and "--set engine.tensor_parallel_size=2" in out
    # A model directory that is not there: bad input (exit 2), with the fix.
    assert main(["plan", "-p", "910b-32b", "--model", str(tmp_path / "nope")]) == 2
    assert "ascendctl plan --profile 910b-32b --model DIR" in capsys.readouterr().err


def test_cli_plan_table_reads_at_a_glance(capsys):
    assert main(["plan", "-p", "910b-qwen3.5-27b", "--model", str(QWEN35_27B)]) == 0
    out = capsys.readouterr().out
    for text in (
        "Memory per device",
        "= KV cache",
        "state per sequence",
        "max concurrency",
        "Tensor parallel options",
        "verdict: ok",
        "hybrid: 16 full + 48 linear-attention layers",
    ):
        assert text in out


@settings(max_examples=200, deadline=None)
@given(
    layers=st.integers(1, 96),
    kv_heads=st.sampled_from([1, 2, 4, 8, 16, 32]),
    head_dim=st.sampled_from([32, 64, 128, 256]),
    tp=st.sampled_from([1, 2, 4, 8, 16]),
    block=st.sampled_from([16, 32, 64, 128]),
    max_len=st.integers(1, 131072),
    kv_gib=st.floats(0.01, 96),
)
def test_capacity_never_promises_more_than_the_memory(layers, kv_heads, head_dim, tp, block, max_len, kv_gib):
    from engine.capacity.model_config import ModelShape

    shape = ModelShape("X", "x", "bfloat16", layers, layers, 0, 32, kv_heads, head_dim, 4096, 8192, 1000, None)
    kv = layout(shape, tp, block, "bfloat16", 16)
    budget = int(kv_gib * GIB)
    cap = capacity(kv, budget, max_len)
    assert cap.num_blocks * kv.bytes_per_block <= budget < (cap.num_blocks + 1) * kv.bytes_per_block
    assert cap.kv_tokens * kv.bytes_per_token <= budget  # whole blocks only, never more tokens than bytes
    assert cap.kv_tokens <= cap.num_blocks * block
