"""Is a serving port free, and who holds it: one answer for doctor and serve's preflight."""

from __future__ import annotations

import errno
import socket

from engine.errors import BadInput
from engine.i18n import _


def port_holder(port: int) -> str | None:
    """'pid 1234 (python3)' for the process listening on `port`, when we may see it."""
    import psutil

    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.Error, OSError):
        return None
    for conn in conns:
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
            try:
                return f"pid {conn.pid} ({psutil.Process(conn.pid).name()})"
            except psutil.Error:
                return f"pid {conn.pid}"
    return None


def port_is_free(host: str, port: int) -> bool:
    """Bind the way vLLM does (SO_REUSEADDR), so a socket in TIME_WAIT does not count as busy.

    BadInput when `host` does not resolve or is not an address of this machine: that is a
    setting to change, not a busy port.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise BadInput(
            _("cannot resolve the server host {host}: {error}").format(host=repr(host), error=exc.strerror),
            _("set server.host to an address of this machine, e.g. --set server.host=127.0.0.1"),
        ) from exc
    family, addr = infos[0][0], infos[0][4]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            if exc.errno == errno.EADDRNOTAVAIL:
                raise BadInput(
                    _("{host} is not an address of this machine").format(host=host),
                    _("set server.host to 127.0.0.1 or 0.0.0.0, e.g. --set server.host=127.0.0.1"),
                ) from exc
            raise
    return True


__all__ = ["port_holder", "port_is_free"]
