"""One streaming request against an OpenAI-style server, timed token by token.

Every outcome is a `RequestResult`: HTTP errors, refused or dropped connections, timeouts and
garbage in the stream are classified, never raised, so a bad server cannot crash a run."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

import httpx

PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
# A one-choice token chunk as vLLM writes it (compact JSON); anything else is decoded in full.
_TOKEN_MARKER = {"completions": b'"choices":[{"index":0,"text":', "chat": b'"choices":[{"index":0,"delta":{"content":'}


@dataclass(frozen=True)
class RequestResult:
    index: int
    phase: int
    sent_s: float  # run clock when the request went out
    ok: bool
    error: str | None = None  # kind: http_500, connect, timeout, dropped, bad_response, server_error...
    detail: str = ""
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: tuple[float, ...] = ()
    output_tokens: int = 0
    prompt_tokens: int | None = None
    usage_reported: bool = False
    lag_s: float = 0.0  # how late the request left against its schedule (rate phases)


@dataclass(frozen=True)
class Endpoint:
    """Where and how to POST, resolved once per run: building a request through the client's
    merging of base URL, headers and timeouts costs more than the rest of a short request."""

    api: str
    url: httpx.URL
    headers: httpx.Headers
    extensions: dict
    # When set, requests go straight to this transport, skipping the client's auth, redirect and
    # cookie handling (none of which a bench request uses); else through `client.send`.
    transport: httpx.AsyncBaseTransport | None = None


def endpoint(client: httpx.AsyncClient, api: str, transport: httpx.AsyncBaseTransport | None = None) -> Endpoint:
    headers = httpx.Headers(client.headers)
    headers["content-type"] = "application/json"
    if transport is not None:
        headers["accept-encoding"] = "identity"  # the body is read raw, without httpx's decoders
    return Endpoint(api, client.base_url.join(PATHS[api]), headers, {"timeout": client.timeout.as_dict()}, transport)


def request_body(api: str, model: str, prompt: str, max_tokens: int, ignore_eos: bool) -> bytes:
    body: dict = {
        "model": model,
        "max_tokens": max_tokens,
        "stream": True,
        # The token counts come from the server's own usage record at the end of the stream.
        "stream_options": {"include_usage": True},
        "temperature": 0,
    }
    if ignore_eos:
        # vLLM extension: run every answer to max_tokens so the offered load is what it says.
        body["ignore_eos"] = True
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return json.dumps(body, ensure_ascii=False).encode()


def _is_token_event(choice: dict, api: str) -> bool:
    if api == "chat":
        delta = choice.get("delta") or {}
        if "role" in delta and not delta.get("content"):
            return False  # the opening role announcement carries no token
        return "content" in delta or choice.get("finish_reason") is not None
    return "text" in choice


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def stream_request(
    client: httpx.AsyncClient,
    ep: Endpoint,
    body: bytes,
    clock: Callable[[], float],
    *,
    index: int = 0,
    phase: int = 0,
    run_start: float = 0.0,
    lag_s: float = 0.0,
) -> RequestResult:
    """POST one streaming request; time the first token, the gaps between tokens and the end."""
    t0 = clock()
    base = dict(index=index, phase=phase, sent_s=t0 - run_start, lag_s=lag_s)
    first: float | None = None
    last: float | None = None
    gaps: list[float] = []
    tokens = 0
    usage: dict | None = None
    done = False
    events = 0
    marker = _TOKEN_MARKER[ep.api]
    try:
        req = httpx.Request("POST", ep.url, headers=ep.headers, content=body, extensions=ep.extensions)
        if ep.transport is not None:
            resp = await ep.transport.handle_async_request(req)
            chunks, close = resp.stream, resp.stream.aclose  # type: ignore[union-attr]
        else:
            resp = await client.send(req, stream=True)
            chunks, close = resp.aiter_bytes(), resp.aclose
        try:
            if resp.status_code != 200:
                text = b"".join([c async for c in chunks]).decode("utf-8", "replace")  # type: ignore[union-attr]
                return RequestResult(ok=False, error=f"http_{resp.status_code}", detail=_short(text), **base)
            pending = b""
            async for chunk in chunks:  # type: ignore[union-attr]
                now = clock()
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if not line.startswith(b"data:"):
                        continue  # blank separators, comments, `event:` lines
                    events += 1
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        done = True
                        continue
                    if (
                        marker in payload
                        and payload[:1] == b"{"
                        and payload[-1:] == b"}"
                        and b'"usage"' not in payload
                        and b'"error"' not in payload
                        and b'"role"' not in payload
                    ):
                        found = 1  # the common case, a compact one-choice token chunk: no need to decode it
                    else:
                        event = json.loads(payload)
                        if not isinstance(event, dict):
                            raise ValueError(f"event is not an object: {payload[:80]!r}")
                        if event.get("error"):
                            err = event["error"]
                            msg = err.get("message", err) if isinstance(err, dict) else err
                            return RequestResult(
                                ok=False,
                                error="server_error",
                                detail=_short(str(msg)),
                                ttft_s=None if first is None else first - t0,
                                **base,
                            )
                        if event.get("usage"):
                            usage = event["usage"]
                        found = sum(1 for choice in event.get("choices") or () if _is_token_event(choice, ep.api))
                    for _ in range(found):  # tokens of one read share its arrival time
                        tokens += 1
                        if first is None:
                            first = now
                        else:
                            gaps.append(now - last)  # type: ignore[operator]
                        last = now
        finally:
            await close()
    except httpx.ConnectError as exc:
        return RequestResult(ok=False, error="connect", detail=_short(str(exc) or type(exc).__name__), **base)
    except httpx.TimeoutException as exc:
        return RequestResult(ok=False, error="timeout", detail=type(exc).__name__, **base)
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
        return RequestResult(
            ok=False,
            error="dropped",
            detail=_short(str(exc) or type(exc).__name__),
            ttft_s=None if first is None else first - t0,
            output_tokens=tokens,
            **base,
        )
    except httpx.HTTPError as exc:
        return RequestResult(ok=False, error="http_error", detail=_short(f"{type(exc).__name__}: {exc}"), **base)
    except (ValueError, UnicodeDecodeError, AttributeError, TypeError) as exc:
        return RequestResult(ok=False, error="bad_response", detail=_short(f"{type(exc).__name__}: {exc}"), **base)
    end = clock()
    if not done and events == 0:
        return RequestResult(
            ok=False,
            error="bad_response",
            detail="the answer is not an event stream: does the server support stream=true?",
            **base,
        )
    if not done:
        return RequestResult(
            ok=False,
            error="dropped",
            detail="the stream ended before [DONE]",
            ttft_s=None if first is None else first - t0,
            output_tokens=tokens,
            **base,
        )
    out_tokens = tokens
    prompt_tokens = None
    if usage:
        out_tokens = int(usage.get("completion_tokens", tokens) or 0)
        prompt_tokens = usage.get("prompt_tokens")
    return RequestResult(
        ok=True,
        ttft_s=None if first is None else first - t0,
        e2e_s=end - t0,
        itl_s=tuple(gaps),
        output_tokens=out_tokens,
        prompt_tokens=int(prompt_tokens) if prompt_tokens is not None else None,
        usage_reported=usage is not None,
        **base,
    )
