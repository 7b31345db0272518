"""Checks made before the engine starts, so a start-up that cannot work fails in a second
with the fix instead of minutes later in the engine log."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from engine.doctor import CheckResult, Status, run_doctor
from engine.errors import AscendctlError, BadInput
from engine.i18n import _
from engine.launcher.portlock import SET_PORT, check_port_lock
from engine.system.ports import port_holder, port_is_free

if TYPE_CHECKING:
    from engine.capacity import Plan
    from engine.profiles import Profile


@dataclass(frozen=True)
class Preflight:
    """What the checks before a launch found that does not stop it on its own."""

    errors: list[CheckResult]  # doctor's: the caller shows each with its fix and does not start (exit 1)
    plan: Plan | None  # the memory plan, made once for the launch; None when it cannot be made


def check_port(host: str, port: int, port_option: str = SET_PORT) -> None:
    """BadInput (exit 2) when the port is taken: the profile asks for something this host cannot
    give right now, and the fix is a setting. `port_option` is how the calling command takes a
    port (`--port ` for demo, which has no --set). Another ascendctl run on the port is named
    first: while its engine loads the model, the port still looks free."""
    check_port_lock(port, port_option)
    if port_is_free(host, port):
        return
    holder = port_holder(port)
    raise BadInput(
        _("port {port} on {host} is already in use by {holder}").format(port=port, host=host, holder=holder)
        if holder
        else _("port {port} on {host} is already in use").format(port=port, host=host),
        _("stop that server, or choose another port: {option}").format(option=f"{port_option}{port + 1}"),
    )


def check_model(profile: Profile) -> None:
    """BadInput (exit 2) unless model.path is a model directory (one with config.json): otherwise
    the engine starts, dies seconds later, and a restart policy would only repeat that."""
    path = Path(profile.model.path)
    fix = _("download the model into {path}, or give its directory with --model DIR").format(path=path)
    if not path.exists():
        raise BadInput(_("model directory not found: {path}").format(path=path), fix)
    if not path.is_dir():
        raise BadInput(
            _("{path} is a file, not a model directory").format(path=path),
            _("give the directory that holds config.json: --model DIR"),
        )
    if not (path / "config.json").is_file():
        raise BadInput(
            _("{path} holds no config.json: not a model directory, or its download is incomplete").format(path=path),
            fix,
        )


def check_plan(profile: Profile) -> Plan | None:
    """The memory plan of `profile`; BadInput (exit 2) when its verdict is does-not-fit: the engine
    would refuse to start or run out of memory, every time, so this is a setting to change, not a
    launch to retry.

    A plan that cannot be made (weights the planner cannot read, such as .bin files) does not stop
    the launch (None): the engine may load what the planner cannot."""
    from engine.capacity import NO_FIT, plan

    try:
        result = plan(profile)
    except AscendctlError:
        return None
    if result.verdict != NO_FIT:
        return result
    limit = result.model.max_position_embeddings
    if limit and result.max_model_len > limit:
        change = _("--set engine.max_model_len={limit} (the model's limit) or less").format(limit=limit)
    elif (
        result.suggested_tensor_parallel_size
        and result.suggested_tensor_parallel_size != profile.engine.tensor_parallel_size
    ):
        change = f"--set engine.tensor_parallel_size={result.suggested_tensor_parallel_size}"
    else:
        change = _("lower engine.max_model_len, or give the KV cache more memory")
    raise BadInput(
        _("the memory plan for profile {name} says it does not fit: {reasons}").format(
            name=profile.name, reasons=_("; ").join(result.reasons)
        ),
        _("{change}; `ascendctl plan --profile {name}` with the same --set shows the whole budget").format(
            change=change, name=profile.name
        ),
    )


# What an engine in a container brings in its image, so the host's copy does not matter: the CANN
# toolkit and NNAL, the library path, the engine's Python stack, the glibc its wheels need.
IMAGE_OWNS = ("cann", "env", "stack")
IMAGE_OWNS_IDS = ("system.glibc",)


def run_preflight(
    profile: Profile,
    host: str,
    port: int,
    port_option: str = SET_PORT,
    listens: bool = True,
    container: bool = False,
) -> Preflight:
    """Everything that should stop a launch of `profile` on `host:port` before the engine starts.

    A taken port, a model.path that is no model directory, or a plan that does not fit raise
    BadInput (exit 2: the fix is a setting, and no restart could help). Returns doctor's errors for
    the profile, every one of them, and the memory plan (its warnings are the caller's to say).
    For an engine in a `container`, doctor's checks of what the image brings are left out.
    """
    if listens:  # a headless host or a Ray worker binds no API port
        check_port(host, port, port_option)
    check_model(profile)
    made = check_plan(profile)
    # The plan of a big MoE model reads hundreds of safetensors headers: doctor judges this one.
    report = run_doctor(profile=profile, profile_name=profile.name, model_dir=profile.model.path, plan=made)
    errors = [c for c in report.checks if c.status is Status.ERROR]
    if container:
        errors = [c for c in errors if c.category not in IMAGE_OWNS and c.id not in IMAGE_OWNS_IDS]
    return Preflight(errors, made)
