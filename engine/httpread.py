"""The one bounded HTTP reader: every page ascendctl reads from a server (an engine's /metrics and
/version, an exporter's snapshot) comes through `read_page`.

httpx's timeout applies to each read, not to the whole answer: a server that sends one byte a
second, or a page that never ends, would hold the caller for ever and fill its memory. Here a
request has a total deadline and a size cap, as Prometheus' own scraper does. At the deadline a
timer shuts the connection's socket, so even a server that trickles its headers lets go; the
caller gets Unreachable, which the views show as the engine DOWN.

Connections are not kept alive (the timer needs the socket of each request, and a poll every few
seconds to 127.0.0.1 costs little to open).
"""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import httpx

from engine.errors import Unreachable
from engine.i18n import N_, _
from engine.redact import url_without_credentials

# Prometheus' default scrape timeout is 10 s; a view that polls every 2 s wants less.
DEADLINE_S = 5.0
MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Page:
    url: str
    status_code: int
    content_type: str
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def client(timeout: float = DEADLINE_S) -> httpx.Client:
    """A client for `read_page`: no proxies from the environment (engines are local or named by
    URL), no keep-alive (see the module's note)."""
    return httpx.Client(
        timeout=timeout, trust_env=False, limits=httpx.Limits(max_keepalive_connections=0), follow_redirects=False
    )


class _Cutter:
    """Shuts the request's socket when the deadline passes (from a timer thread)."""

    def __init__(self) -> None:
        self.sock: socket.socket | None = None
        self.fired = False
        self._lock = threading.Lock()

    def trace(self, event: str, info: dict) -> None:
        if event == "connection.connect_tcp.complete":
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            with self._lock:
                self.sock = sock
                if self.fired:
                    self._shut()

    def fire(self) -> None:
        with self._lock:
            self.fired = True
            self._shut()

    def _shut(self) -> None:
        if self.sock is not None:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Deadline:
    """A total deadline over one request, its headers and its body: at the deadline a timer shuts
    the request's socket, so a server that trickles cannot hold the caller past it.

        limit = Deadline(5.0)
        with limit.stream(http, "POST", url, json=body) as resp:
            for line in resp.iter_lines(): ...
        # an httpx.HTTPError with limit.passed: it ran out of time
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started = time.monotonic()
        self._cutter = _Cutter()

    @property
    def passed(self) -> bool:
        return self._cutter.fired or time.monotonic() - self.started > self.seconds

    @contextmanager
    def stream(self, http: httpx.Client, method: str, url: str, **kwargs: Any) -> Iterator[httpx.Response]:
        timer = threading.Timer(max(0.0, self.seconds - (time.monotonic() - self.started)), self._cutter.fire)
        timer.daemon = True
        timer.start()
        try:
            with http.stream(
                method, url, timeout=self.seconds, extensions={"trace": self._cutter.trace}, **kwargs
            ) as resp:
                yield resp
        finally:
            timer.cancel()


def read_page(
    http: httpx.Client | None,
    url: str,
    deadline: float = DEADLINE_S,
    max_bytes: int = MAX_BYTES,
    what: str = N_("the server"),
    headers: Mapping[str, str] | None = None,
) -> Page:
    """GET `url` with a total deadline and a cap on the (decoded) body. Raises Unreachable with a
    fix when it cannot connect, does not finish in time or sends too much; any status is returned
    (the caller decides what a 404 means). `url` is named in errors without its credentials;
    `headers` (an API key's Authorization) go with the request, never into an error."""
    shown = url_without_credentials(url)
    own = http is None
    http = http or client(deadline)
    limit = Deadline(deadline)
    try:
        with limit.stream(http, "GET", url, headers=dict(headers or {})) as resp:
            chunks: list[bytes] = []
            size = 0
            for chunk in resp.iter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise Unreachable(
                        _("{url} sent more than {size}: not read further").format(url=shown, size=_size(max_bytes)),
                        _("check what serves {what} there").format(what=_(what)),
                    )
                if limit.passed:
                    raise _Late()
                chunks.append(chunk)
            if limit.passed:
                raise _Late()
            return Page(str(url), resp.status_code, resp.headers.get("content-type", ""), b"".join(chunks))
    except _Late:
        raise _late(shown, deadline, what) from None
    except httpx.HTTPError as exc:
        if limit.passed:
            raise _late(shown, deadline, what) from None
        raise Unreachable(
            _("cannot reach {url}: {error}").format(url=shown, error=type(exc).__name__),
            _("check that {what} is running and the port is right").format(what=_(what)),
        ) from exc
    finally:
        if own:
            http.close()


def _size(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB" if n >= 1024 * 1024 else f"{n} bytes"


class _Late(Exception):
    pass


def _late(shown: str, deadline: float, what: str) -> Unreachable:
    return Unreachable(
        _("{url} did not answer in full within {seconds:g} s").format(url=shown, seconds=deadline),
        _("check {what} there: it answers too slowly").format(what=_(what)),
    )


__all__ = ["DEADLINE_S", "MAX_BYTES", "Deadline", "Page", "client", "read_page"]
