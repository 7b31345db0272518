"""Synthetic prompts of a given length in tokens: mixed Chinese and English text, no dataset needed.

Text is assembled from sentences whose token counts were measured once with the server's own
tokenizer (`POST /tokenize`), plus one-token filler words to land on the exact length. A server
without `/tokenize` gets an estimate instead (about 1.3 tokens per English word, one per Chinese
character), and the report says so. Every prompt starts with a unique tag so the engine's
prefix cache cannot serve one request from another's work."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Sequence

import httpx

_EN_SUBJECTS = [
    "The operator",
    "Each server",
    "The scheduler",
    "A new model",
    "The cache manager",
    "Our team",
    "The gateway",
    "The report",
    "This cluster",
    "The engineer",
]
_EN_VERBS = [
    "checks",
    "measures",
    "records",
    "balances",
    "reviews",
    "explains",
    "plans",
    "tracks",
    "compares",
    "summarises",
]
_EN_OBJECTS = [
    "the memory budget of every card",
    "latency under heavy traffic",
    "the queue of waiting requests",
    "tokens generated per second",
    "errors seen in the last hour",
    "the size of each batch",
    "power draw and temperature",
    "the long tail of response times",
    "the key and value blocks",
    "throughput after the upgrade",
]
_EN_TAILS = [
    "before the release.",
    "during the night shift.",
    "for the quarterly review.",
    "again after lunch.",
    "with great care.",
    "on every node.",
    "in the weekly meeting.",
    "without any downtime.",
]
_ZH_SUBJECTS = ["运维团队", "推理服务", "调度器", "新模型", "监控系统", "工程师", "这台服务器", "我们的集群"]
_ZH_VERBS = ["正在检查", "详细记录了", "重新评估了", "每天关注", "仔细比较了", "需要优化"]
_ZH_OBJECTS = [
    "显存的使用情况",
    "请求的排队时间",
    "每秒生成的词元数量",
    "长文档的处理延迟",
    "错误日志中的告警",
    "批处理的大小",
    "功耗和温度",
    "缓存块的分配",
]
_ZH_TAILS = ["。", "，以便及时发现问题。", "，结果令人满意。", "，并写成了报告。"]
_INSTRUCTION = "\nPlease summarise the text above. 请用几句话总结上文。"
_FILLERS = [" the", " and", " of", " to", " in", " a", " is", " it", " on", " we", "的", "是", "在", "了"]
_TAG = "#{:06d} "


def _sentences(rng: random.Random, n: int) -> list[str]:
    out = []
    for i in range(n):
        en = f" {rng.choice(_EN_SUBJECTS)} {rng.choice(_EN_VERBS)} {rng.choice(_EN_OBJECTS)} {rng.choice(_EN_TAILS)}"
        zh = f"{rng.choice(_ZH_SUBJECTS)}{rng.choice(_ZH_VERBS)}{rng.choice(_ZH_OBJECTS)}{rng.choice(_ZH_TAILS)}"
        out.append(en if i % 3 == 0 else zh if i % 3 == 1 else en + " " + zh)
    return out


def estimate_tokens(text: str) -> int:
    """Rough token count for servers without /tokenize: ~1.3 per English word, 1 per CJK character."""
    cjk = sum(1 for ch in text if "\u3000" <= ch <= "\u9fff" or "\uff00" <= ch <= "\uffef")
    words = len("".join(" " if "\u3000" <= ch <= "\u9fff" or "\uff00" <= ch <= "\uffef" else ch for ch in text).split())
    return max(1, round(words * 1.3) + cjk)


@dataclass(frozen=True)
class Piece:
    text: str
    tokens: int


class PromptMaker:
    """Builds prompts of an exact token length from measured pieces. Use `await calibrate(...)` first."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)
        self.sentences: list[Piece] = []
        self.fillers: list[Piece] = []
        self.instruction = Piece(_INSTRUCTION, estimate_tokens(_INSTRUCTION))
        self.tag_tokens = estimate_tokens(_TAG.format(0))
        self.measured = False  # True when the counts come from the server's tokenizer

    async def calibrate(self, client: httpx.AsyncClient | None, model: str, sentences: int = 160) -> None:
        """Count each piece with the server's /tokenize; fall back to estimates when it has none."""
        texts = _sentences(self._rng, sentences)
        counts: Sequence[int | None] = [None] * (len(texts) + len(_FILLERS) + 2)
        if client is not None:
            counts = await _count_all(client, model, [*texts, *_FILLERS, _INSTRUCTION, _TAG.format(123456)])
        self.measured = all(c is not None for c in counts)
        if not self.measured:
            counts = [estimate_tokens(t) for t in (*texts, *_FILLERS, _INSTRUCTION, _TAG.format(123456))]
        n = len(texts)
        self.sentences = [Piece(t, c) for t, c in zip(texts, counts[:n]) if c]  # type: ignore[arg-type]
        fillers = [Piece(t, c) for t, c in zip(_FILLERS, counts[n : n + len(_FILLERS)]) if c == 1]  # type: ignore[arg-type]
        self.fillers = fillers or [Piece(" a", 1)]
        self.instruction = Piece(_INSTRUCTION, int(counts[-2] or 1))
        self.tag_tokens = int(counts[-1] or 1)

    def make(self, index: int, tokens: int, rng: random.Random) -> str:
        """A prompt of about `tokens` tokens (exact up to merges across piece boundaries)."""
        if not self.sentences:
            self.sentences = [Piece(t, estimate_tokens(t)) for t in _sentences(self._rng, 40)]
            self.fillers = [Piece(" a", 1)]
        budget = tokens - self.tag_tokens
        parts = [_TAG.format(index % 1_000_000)]
        if budget > 4 * self.instruction.tokens:  # short prompts are questions, not documents
            budget -= self.instruction.tokens
            tail = self.instruction.text
        else:
            tail = ""
        parts.extend(self._fill(budget, rng))
        parts.append(tail)
        return "".join(parts)

    def shared(self, key: int, tokens: int) -> str:
        """Text of about `tokens` tokens that is the same for the same `key` (no unique tag): a
        shared prefix, or one block of a replayed trace, which the engine's prefix cache can reuse."""
        if not self.sentences:
            self.make(0, 1, random.Random(0))  # the estimated pieces
        return "".join(self._fill(tokens, random.Random(f"shared-{key}")))

    def _fill(self, budget: int, rng: random.Random) -> list[str]:
        parts: list[str] = []
        sentences = self.sentences
        misses = 0
        while budget > 0 and misses < 8:  # a few tries for a sentence that fits, then filler words
            s = sentences[rng.randrange(len(sentences))]
            if s.tokens > budget:
                misses += 1
                continue
            parts.append(s.text)
            budget -= s.tokens
        fillers = self.fillers
        for _ in range(max(0, budget)):
            parts.append(fillers[rng.randrange(len(fillers))].text)
        return parts


async def _count_all(client: httpx.AsyncClient, model: str, texts: list[str]) -> list[int | None]:
    """Token counts from POST /tokenize, 8 at a time; all None when the server has no such endpoint."""
    sem = asyncio.Semaphore(8)
    missing = False

    async def one(text: str) -> int | None:
        nonlocal missing
        if missing:
            return None
        async with sem:
            try:
                resp = await client.post(
                    "/tokenize", json={"model": model, "prompt": text, "add_special_tokens": False}, timeout=10
                )
            except httpx.HTTPError:
                missing = True
                return None
        if resp.status_code != 200:
            missing = True
            return None
        try:
            return int(resp.json()["count"])
        except (ValueError, KeyError, TypeError):
            missing = True
            return None

    first = await one(texts[0])
    if first is None:
        return [None] * len(texts)
    rest = await asyncio.gather(*(one(t) for t in texts[1:]))
    return [first, *rest]
