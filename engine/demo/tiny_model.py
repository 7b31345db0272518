"""Build a tiny random-weight model of a real architecture with a tokenizer trained on the spot.

The output text is noise, but the engine's tokenisation, prefill, decode, KV cache, scheduler and
/metrics are all real. Needs the engine's packages (transformers, tokenizers, torch); run it with
the engine interpreter: `python -m engine.demo.tiny_model OUT_DIR [--shape NAME]`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Shapes used by the demo and by the planner's end-to-end exactness tests. All keep head_dim >= 32:
# the CPU attention kernel rejects head_dim 16.
SHAPES: dict[str, dict[str, int]] = {
    "qwen3-tiny": dict(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
    ),
    "qwen3-tiny-mha": dict(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=64,
    ),
    "qwen3-tiny-gqa8": dict(
        hidden_size=256,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=1,
        head_dim=32,
    ),
}
VOCAB = 1024
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Text to train the byte-level BPE on: mixed English and Chinese, like the bench prompts.
_CORPUS = [
    "The quick brown fox jumps over the lazy dog. Serving large language models needs memory.",
    "Ascend NPUs run vLLM through the vllm-ascend plugin; the KV cache holds keys and values.",
    "大语言模型推理服务需要显存规划、监控和故障排查。昇腾处理器上的部署需要匹配的软件栈。",
    "Operators watch throughput, latency, pending requests and the block pool of the cache.",
    "请总结以下文档的主要内容，并给出三个要点。Please summarise the following document.",
]


@dataclass(frozen=True)
class BuiltModel:
    path: Path
    shape: str


def build(out_dir: Path, shape: str = "qwen3-tiny", seed: int = 0) -> BuiltModel:
    """Write config.json, model.safetensors and the tokenizer files into out_dir (atomically)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=out_dir.parent))
    try:
        torch.manual_seed(seed)
        config = Qwen3Config(
            vocab_size=VOCAB,
            max_position_embeddings=4096,
            tie_word_embeddings=True,
            torch_dtype="bfloat16",
            bos_token_id=0,
            eos_token_id=2,
            **SHAPES[shape],
        )
        model = Qwen3ForCausalLM(config).to(torch.bfloat16)
        model.save_pretrained(tmp, safe_serialization=True)

        tok = Tokenizer(models.BPE(unk_token=None))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=VOCAB,
            special_tokens=SPECIALS,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator(_CORPUS * 20, trainer=trainer)
        fast = PreTrainedTokenizerFast(
            tokenizer_object=tok,
            eos_token="<|im_end|>",
            pad_token="<|endoftext|>",
            bos_token=None,
        )
        fast.chat_template = CHAT_TEMPLATE
        fast.save_pretrained(tmp)
        # Stop generation on <|im_end|>, as real Qwen3 models do.
        gen = {"eos_token_id": fast.convert_tokens_to_ids("<|im_end|>"), "do_sample": True}
        (tmp / "generation_config.json").write_text(json.dumps(gen), encoding="utf-8")
        (tmp / "ASCENDCTL_TINY_MODEL").write_text(f"{shape} seed={seed}\n", encoding="utf-8")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return BuiltModel(out_dir, shape)


def is_built(out_dir: Path) -> bool:
    return (Path(out_dir) / "ASCENDCTL_TINY_MODEL").is_file() and (Path(out_dir) / "model.safetensors").is_file()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.demo.tiny_model")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--shape", default="qwen3-tiny", choices=sorted(SHAPES))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    built = build(args.out_dir, args.shape, args.seed)
    print(built.path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
