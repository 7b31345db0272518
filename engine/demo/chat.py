"""The demo's requests: a few real chat and text completions against the OpenAI API."""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx

from engine.errors import Unreachable

PROMPTS = (
    ("chat", "What does the KV cache hold?"),
    ("completion", "Serving large language models on Ascend NPUs needs"),
    ("chat", "请用一句话介绍昇腾处理器。"),
    ("completion", "The operator watches throughput, latency and"),
)


@dataclass(frozen=True)
class Exchange:
    kind: str  # chat | completion
    prompt: str
    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    seconds: float


def send(
    url: str,
    model: str,
    kind: str,
    prompt: str,
    max_tokens: int = 24,
    api_key: str | None = None,
    client: httpx.Client | None = None,
) -> Exchange:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    if kind == "chat":
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}]}
    else:
        path, body = "/v1/completions", {"prompt": prompt}
    body.update(model=model, max_tokens=max_tokens, temperature=0.8, seed=len(prompt))
    own = client is None
    client = client or httpx.Client(timeout=120.0, trust_env=False)
    start = time.monotonic()
    try:
        response = client.post(url.rstrip("/") + path, json=body, headers=headers)
        response.raise_for_status()
        data = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise Unreachable(
            f"the demo request to {url}{path} failed: {exc}",
            "check the engine log in the run directory (`ascendctl triage` explains it)",
        ) from exc
    finally:
        if own:
            client.close()
    choice = data["choices"][0]
    text = choice["message"]["content"] if kind == "chat" else choice["text"]
    usage = data.get("usage") or {}
    return Exchange(
        kind,
        prompt,
        text or "",
        usage.get("prompt_tokens"),
        usage.get("completion_tokens"),
        round(time.monotonic() - start, 3),
    )


def demo_requests(url: str, model: str, count: int, api_key: str | None = None):
    """Yield `count` exchanges, cycling through the prompts (chat and completion in turn)."""
    with httpx.Client(timeout=120.0, trust_env=False) as client:
        for i in range(count):
            kind, prompt = PROMPTS[i % len(PROMPTS)]
            yield send(url, model, kind, prompt, api_key=api_key, client=client)
