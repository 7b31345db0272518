"""The address of a vLLM server as every command takes it from the user."""

from __future__ import annotations

from urllib.parse import urlsplit

from engine.errors import BadInput
from engine.i18n import _


def normalize_base_url(text: str) -> str:
    """The server root `/metrics` and `/v1/...` hang off: `host:port` gets `http://`, trailing
    slashes go, and so does a trailing `/v1` (the OpenAI base URL people paste from a client's
    configuration). Raises BadInput for anything that is not an http(s) URL with a host."""
    scheme, sep, rest = text.strip().partition("://")
    if not sep:
        scheme, rest = "http", scheme
    rest = rest.rstrip("/")
    if rest.endswith("/v1"):
        rest = rest[: -len("/v1")].rstrip("/")
    url = f"{scheme}://{rest}"
    bad = scheme not in ("http", "https") or not rest or any(c.isspace() for c in rest)
    if not bad:
        try:
            parts = urlsplit(url)
            bad = not parts.hostname or parts.port == 0
        except ValueError:  # a port that is not a number, or out of range
            bad = True
    if bad:
        raise BadInput(
            _("{text} is not an http(s) URL of a vLLM server").format(text=repr(text.strip())),
            _("give e.g. http://127.0.0.1:8000"),
        )
    return url


def split_host_port(text: str) -> tuple[str, int] | None:
    """HOST:PORT or [IPv6]:PORT -> (host without brackets, port); None when the text has no port
    in 1..65535 after its last colon. The host may be empty (`:9108`); callers decide."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


__all__ = ["normalize_base_url", "split_host_port"]
