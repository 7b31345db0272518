"""The one rule for what is a secret, used by every printout and every file ascendctl writes.

A variable or flag is secret when one part of its name (split at `_` or `-`) is a secret word,
or ends in one (`APIKEY`, `HFTOKEN`): HF_TOKEN, VLLM_API_KEY, HCCL_CRED, DB_PASS and --hf-token
are masked; TOKENIZERS_PARALLELISM and KEYRING_BACKEND are not (the word starts the part, it does
not end it). Inside any value, credentials in URLs, token-shaped strings, the credential of an
`Authorization` header (`Bearer X`), cookies, PEM private keys and AWS secret keys are masked as well.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

MASK = "****"

_SECRET_WORDS = (
    "KEY",
    "KEYS",
    "APIKEY",
    "TOKEN",
    "TOKENS",
    "SECRET",
    "SECRETS",
    "PASSWORD",
    "PASSWD",
    "PASS",
    "PWD",
    "CRED",
    "CREDS",
    "CREDENTIAL",
    "CREDENTIALS",
    "AUTH",
    "AUTHORIZATION",
    "COOKIE",
    "SESSION",
    "PRIVATE",
    "SIGNATURE",
)
_SECRET_ENDINGS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD")
_PARTS = re.compile(r"[_\-.]+")
_COUNT_WORDS = {"MAX", "MIN", "NUM"}
_URL_CREDS = re.compile(r"(?P<scheme>[a-z][a-z0-9+.\-]*://)(?P<user>[^:/@\s]+):(?P<pw>[^@/\s]+)@", re.I)
_TOKENS = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{16,}|sk-[A-Za-z0-9_\-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abp]-[A-Za-z0-9\-]{10,}"
    r"|AKIA[0-9A-Z]{16}|eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,})\b"
)
# The credential of an HTTP header, whole: `Authorization: Bearer X`, `'Authorization': 'Basic X'`,
# a bare `Bearer X`, and every cookie of a `Cookie:` / `Set-Cookie:` header.
_BEARER = re.compile(r"\b(?P<s>Bearer\s+)(?P<v>[A-Za-z0-9._~+/=\-]{8,})", re.I)
_AUTH_HEADER = re.compile(
    r"(?P<k>\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)(?P<s>(?:Bearer|Basic|Digest|Token|Negotiate|AWS4-HMAC-SHA256)\s+)?"
    r"(?P<v>[^\s\"',}][^\"'\n,}]*)",
    re.I,
)
_COOKIE = re.compile(r"(?P<k>\b(?:set-)?cookie[\"']?\s*[:=]\s*[\"']?)(?P<v>[^\"'\n]+)", re.I)
_PEM = re.compile(
    r"-----BEGIN (?P<kind>[A-Z0-9 ]*PRIVATE KEY|[A-Z0-9 ]*PRIVATE KEY BLOCK)-----.*?(?:-----END (?P=kind)-----|\Z)",
    re.S,
)
# An AWS secret access key: 40 characters of base64, on a line that speaks of AWS or a secret.
_AWS_CONTEXT = re.compile(r"aws|secret", re.I)
_AWS_SECRET = re.compile(
    r"(?<![A-Za-z0-9/+=])(?=[A-Za-z0-9/+]*[0-9])(?=[A-Za-z0-9/+]*[a-z])(?=[A-Za-z0-9/+]*[A-Z])[A-Za-z0-9+][A-Za-z0-9/+]{39}(?![A-Za-z0-9/+=])"
)
_FLAG = re.compile(r"^(--?[A-Za-z0-9_\-]+)(=(.*))?$", re.S)
_FLAG_IN_TEXT = re.compile(r"(--[A-Za-z0-9_\-]+)([= ])(\S+)")
_URL_USERINFO = re.compile(r"(?P<scheme>[a-z][a-z0-9+.\-]*://)[^/@\s]+@", re.I)
# In free text (log lines, error messages): `password=x`, `"api_key": "x"`, `passwd: x`.
_ASSIGN_IN_TEXT = re.compile(
    r"(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)(?P<sep>\"?\s*(?:=(?!=)|:\s*)\s*\"?)(?P<value>[^\s\"',;}&]+)"
)
# Plural counts in log lines (`prompt_tokens=12`, `keys: 3`) are figures, not secrets.
_COUNT_ENDINGS = ("TOKENS", "KEYS")


def is_secret_name(name: str) -> bool:
    """A variable name, profile key or flag (with or without its dashes) that holds a secret.

    Counts and limits are not (`--max-num-batched-tokens 4096`, MAX_TOKENS)."""
    parts = _PARTS.split(name.strip("-").upper())
    if _COUNT_WORDS & set(parts):
        return False
    for part in parts:
        if part in _SECRET_WORDS or (len(part) > 3 and part.endswith(_SECRET_ENDINGS)):
            return True
    return False


def redact_value(value: str) -> str:
    """Mask credentials inside a value: user:password@ in URLs, token-shaped strings, and the
    argument of a secret flag written in the text (`--api-key X`)."""
    low = value.lower()  # each pattern runs only where its word is: a big log costs less
    if "://" in value:
        value = _URL_CREDS.sub(lambda m: f"{m.group('scheme')}{m.group('user')}:{MASK}@", value)
    value = _TOKENS.sub(MASK, value)
    if "-----begin" in low:
        value = _PEM.sub(lambda m: f"-----BEGIN {m.group('kind')}-----{MASK}-----END {m.group('kind')}-----", value)
    if "authorization" in low:
        value = _AUTH_HEADER.sub(lambda m: m.group("k") + (m.group("s") or "") + MASK, value)
    if "bearer" in low:
        value = _BEARER.sub(lambda m: m.group("s") + MASK, value)
    if "cookie" in low:
        value = _COOKIE.sub(lambda m: m.group("k") + MASK, value)
    if "aws" in low or "secret" in low:
        value = "\n".join(
            _AWS_SECRET.sub(MASK, line) if _AWS_CONTEXT.search(line) else line for line in value.split("\n")
        )
    return _FLAG_IN_TEXT.sub(
        lambda m: m.group(1) + m.group(2) + (MASK if is_secret_name(m.group(1)) else m.group(3)), value
    )


def url_without_credentials(url: str) -> str:
    """A URL (or a text holding URLs) without any `user:password@`, for names, labels and errors."""
    return _URL_USERINFO.sub(lambda m: m.group("scheme"), url)


def redact_text(text: str) -> str:
    """Free text that may quote a secret (a log line, an error): `redact_value`, then the value of
    every secret-named assignment (`password=x`, `"api_key": "x"`); `redact_value` already masks
    the credential of an HTTP auth header. What an engine log or a server says goes through this
    before it is shown, served or written."""
    text = redact_value(text)

    def assign(m: re.Match[str]) -> str:
        name, value = m.group("name"), m.group("value")
        if value == MASK or value.lower() in ("bearer", "basic", "token", "digest") or not is_secret_name(name):
            return m.group(0)
        if name.upper().endswith(_COUNT_ENDINGS):
            return m.group(0)
        return f"{name}{m.group('sep')}{MASK}"

    return _ASSIGN_IN_TEXT.sub(assign, text)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Values of secret-named variables masked, credentials inside the others masked."""
    return {k: (MASK if is_secret_name(k) and v else redact_value(str(v))) for k, v in env.items()}


def redact_argv(argv: Iterable[str]) -> list[str]:
    """A command line with the value of every secret flag masked: `--hf-token X`, `--api-key=X`."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        match = _FLAG.match(arg)
        if match and is_secret_name(match.group(1)):
            if match.group(2) is not None:
                out.append(f"{match.group(1)}={MASK}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(redact_value(arg))
    return out


__all__ = [
    "MASK",
    "is_secret_name",
    "redact_argv",
    "redact_env",
    "redact_text",
    "redact_value",
    "url_without_credentials",
]
