"""One "is the port free" answer: doctor and serve's preflight agree, TIME_WAIT included."""

from __future__ import annotations

import socket

import pytest

from engine.doctor import run_doctor
from engine.errors import BadInput
from engine.launcher.preflight import check_port
from engine.system.ports import port_is_free


def _port_left_in_time_wait() -> int:
    """A port whose last connection was closed by the server side: it sits in TIME_WAIT, as the
    port of an engine just stopped does (uvicorn's listener sets SO_REUSEADDR, and Linux lets a
    new bind through only when the old socket had it too)."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = server.accept()
        conn.close()  # the side that closes first keeps TIME_WAIT on the listening port
        client.close()
    return port


def _doctor_port_status(port: int) -> str:
    report = run_doctor(port=port, only=["system.port"])
    return report.checks[0].status.value


def test_a_time_wait_port_is_free_for_doctor_and_for_serve():
    port = _port_left_in_time_wait()
    with socket.socket() as plain:  # what doctor used to test: a plain bind refuses it
        with pytest.raises(OSError):
            plain.bind(("127.0.0.1", port))
    assert port_is_free("127.0.0.1", port)
    check_port("127.0.0.1", port)  # no BadInput
    assert _doctor_port_status(port) == "ok"


def test_a_listening_port_is_taken_for_doctor_and_for_serve():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert not port_is_free("127.0.0.1", port)
        with pytest.raises(BadInput, match="already in use"):
            check_port("127.0.0.1", port)
        report = run_doctor(port=port, only=["system.port"])
        assert report.checks[0].status.value == "warning"
        assert f"port {port} is already in use" in report.checks[0].summary
