"""A lean HTTP/1.1 transport for httpx, for plain-http load generation.

httpx's default pool (httpcore) scans every pooled connection on each request and runs h11 once
per received chunk; with a streamed answer of a few hundred chunks and dozens of connections that
costs milliseconds per request and caps a load generator at a few hundred requests/s on one core
(encode/httpx#3215). This transport keeps idle connections in a stack (O(1) checkout), writes
each request in one send, and hands the body over as it arrives, de-chunked in bulk. It speaks
only what an OpenAI-style server needs (HTTP/1.1, Content-Length or chunked bodies, keep-alive);
https URLs go through httpx's own transport.

Why not httpx-aiohttp (the maintained aiohttp transport for httpx): measured against the local stub
(benchmarks/bench_loadgen.py, 64 connections, 8 tokens per answer, 2-core host, rounds alternated),
its closed loop did 1470-1516 req/s median against 2056-2184 for this transport (~0.7x), below the
2000 req/s goal, and it could not hold a 2000 req/s open loop. It also reports a connection the
server drops before answering as httpx.ConnectTimeout, which the bench would count as a timeout.
The benchmark keeps measuring it next to this transport whenever it is installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import AsyncIterator

import httpx

_READ = 1 << 16

if sys.version_info >= (3, 11):
    _deadline = asyncio.timeout  # no extra task per read, unlike wait_for before 3.12
else:  # pragma: no cover - Python 3.10

    @contextlib.asynccontextmanager
    async def _deadline(delay: float | None) -> AsyncIterator[None]:
        task = asyncio.current_task()
        handle = asyncio.get_running_loop().call_later(delay, task.cancel) if delay and task else None
        try:
            yield
        except asyncio.CancelledError:
            if handle is not None and handle.when() <= asyncio.get_running_loop().time():
                raise asyncio.TimeoutError from None
            raise
        finally:
            if handle is not None:
                handle.cancel()


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:  # closing a dead socket: nothing left to do
            pass


class _Body(httpx.AsyncByteStream):
    """The response body, de-chunked; gives the connection back to the pool once fully read."""

    def __init__(
        self,
        transport: "LeanTransport",
        key: tuple,
        conn: _Conn,
        length: int | None,
        chunked: bool,
        keep_alive: bool,
        read_timeout: float | None,
    ) -> None:
        self._t = transport
        self._key = key
        self._conn = conn
        self._length = length
        self._chunked = chunked
        self._keep = keep_alive
        self._timeout = read_timeout
        self._done = False

    async def _read(self, n: int = _READ) -> bytes:
        try:
            async with _deadline(self._timeout):
                data = await self._conn.reader.read(n)
        except asyncio.TimeoutError:
            raise httpx.ReadTimeout("no data from the server within the read timeout") from None
        except (ConnectionError, OSError) as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__) from exc
        if not data:
            raise httpx.RemoteProtocolError("the server closed the connection before the response ended")
        return data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if not self._chunked:
            left = self._length
            if left is None:  # read to close: the connection cannot be reused
                self._keep = False
                while True:
                    try:
                        data = await self._read()
                    except httpx.RemoteProtocolError:
                        break
                    yield data
            else:
                while left > 0:
                    data = await self._read(min(left, _READ))
                    left -= len(data)
                    yield data
            self._done = True
            return
        # Chunked: parse as many whole chunks as the buffer holds and yield them together.
        buf = b""
        while True:
            out = []
            pos = 0
            while True:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                try:
                    size = int(buf[pos:eol].split(b";", 1)[0], 16)
                except ValueError:
                    raise httpx.RemoteProtocolError(f"bad chunk size line {buf[pos:eol][:40]!r}") from None
                if size == 0:
                    if buf.find(b"\r\n\r\n", eol) < 0:
                        break  # the terminating blank line has not arrived yet
                    if out:
                        yield b"".join(out)
                    # Anything after the terminator would be a pipelined answer we never asked for.
                    self._done = True
                    return
                end = eol + 2 + size
                if len(buf) < end + 2:
                    break
                out.append(buf[eol + 2 : end])
                pos = end + 2
            buf = buf[pos:]
            if out:
                yield b"".join(out)
            buf += await self._read()

    async def aclose(self) -> None:
        if self._done and self._keep:
            self._t._release(self._key, self._conn)
        else:
            self._conn.close()


class LeanTransport(httpx.AsyncBaseTransport):
    def __init__(self, fallback: httpx.AsyncBaseTransport | None = None) -> None:
        self._idle: dict[tuple, list[_Conn]] = {}
        self._fallback = fallback
        self._closed = False

    def _release(self, key: tuple, conn: _Conn) -> None:
        if self._closed:
            conn.close()
        else:
            self._idle.setdefault(key, []).append(conn)

    async def _connect(self, host: str, port: int, timeout: float | None) -> _Conn:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, limit=1 << 20), timeout)
        except asyncio.TimeoutError:
            raise httpx.ConnectTimeout(f"no connection to {host}:{port} within {timeout} s") from None
        except OSError as exc:
            raise httpx.ConnectError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from exc
        return _Conn(reader, writer)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http":
            if self._fallback is None:
                self._fallback = httpx.AsyncHTTPTransport()
            return await self._fallback.handle_async_request(request)
        timeouts = request.extensions.get("timeout", {})
        host = url.host
        port = url.port or 80
        key = (host, port)
        body = request.content if isinstance(request.stream, httpx.ByteStream) else await request.aread()
        head = [b"%s %s HTTP/1.1\r\n" % (request.method.encode(), url.raw_path)]
        for k, v in request.headers.raw:
            if k.lower() not in (b"content-length", b"transfer-encoding"):
                head.append(k + b": " + v + b"\r\n")
        if body or request.method in ("POST", "PUT", "PATCH"):
            head.append(b"content-length: %d\r\n" % len(body))
        head.append(b"\r\n")
        wire = b"".join(head) + body
        idle = self._idle.get(key)
        # A pooled connection may have been closed by the server while idle: retry once on a new one.
        for attempt in (0, 1):
            reused = bool(idle) and attempt == 0
            conn = idle.pop() if reused else await self._connect(host, port, timeouts.get("connect"))
            try:
                conn.writer.write(wire)
                async with _deadline(timeouts.get("read")):
                    head_bytes = await conn.reader.readuntil(b"\r\n\r\n")
                break
            except asyncio.TimeoutError:
                conn.close()
                raise httpx.ReadTimeout("no response headers within the read timeout") from None
            except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
                conn.close()
                if reused:
                    continue
                raise httpx.RemoteProtocolError(f"the server closed the connection: {exc}") from None
            except asyncio.LimitOverrunError:
                conn.close()
                raise httpx.RemoteProtocolError("response headers too large") from None
        lines = head_bytes[:-4].split(b"\r\n")
        try:
            version, status_s = lines[0].split(b" ", 2)[:2]
            status = int(status_s)
        except ValueError:
            conn.close()
            raise httpx.RemoteProtocolError(f"not an HTTP response: {lines[0][:60]!r}") from None
        headers = []
        length = None
        chunked = False
        keep = version == b"HTTP/1.1"
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            value = value.strip()
            headers.append((name, value))
            low = name.lower()
            if low == b"content-length":
                length = int(value)
            elif low == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif low == b"connection":
                keep = b"close" not in value.lower()
        if request.method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            length, chunked = 0, False
        stream = _Body(self, key, conn, length, chunked, keep, timeouts.get("read"))
        return httpx.Response(status, headers=headers, stream=stream, extensions={"http_version": version})

    async def aclose(self) -> None:
        self._closed = True
        for conns in self._idle.values():
            for c in conns:
                c.close()
        self._idle.clear()
        if self._fallback is not None:
            await self._fallback.aclose()
