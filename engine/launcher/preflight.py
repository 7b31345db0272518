"""Checks made before the engine starts, so a start-up that cannot work fails in a second
with the fix instead of minutes later in the engine log."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.doctor import CheckResult, Status, run_doctor
from engine.errors import BadInput
from engine.system.ports import port_holder, port_is_free

if TYPE_CHECKING:
    from engine.profiles import Profile


def check_port(host: str, port: int) -> None:
    """BadInput (exit 2) when the port is taken: the profile asks for something this host cannot
    give right now, and the fix is a setting."""
    if port_is_free(host, port):
        return
    holder = port_holder(port)
    who = f" by {holder}" if holder else ""
    raise BadInput(
        f"port {port} on {host} is already in use{who}",
        f"stop that server, or choose another port: --set server.port={port + 1}",
    )


def preflight_errors(profile: Profile, host: str, port: int) -> list[CheckResult]:
    """Everything that should stop a launch of `profile` on `host:port` before the engine starts.

    A taken port raises BadInput (exit 2: the fix is a setting). Returns doctor's errors for the
    profile, every one of them: the caller shows each with its fix and does not start (exit 1).
    """
    check_port(host, port)
    report = run_doctor(profile=profile, profile_name=profile.name, model_dir=profile.model.path)
    return [c for c in report.checks if c.status is Status.ERROR]
