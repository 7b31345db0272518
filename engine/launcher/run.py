"""The one way into a supervised run, for every command that launches the engine."""

from __future__ import annotations

import os
import subprocess
from typing import TYPE_CHECKING, Mapping, Sequence

from engine.errors import BadInput
from engine.launcher.portlock import PortLock
from engine.launcher.process import EngineProcess
from engine.launcher.rundir import new_run_dir, write_profile
from engine.launcher.supervisor import Listener, RestartPolicy, Supervisor
from engine.profiles import LaunchSpec, Profile, dump_profile
from engine.runs import runs_dir

if TYPE_CHECKING:
    from engine.container.command import ContainerPlan


def prepare_run(
    profile: Profile,
    spec: LaunchSpec,
    *,
    listener: Listener | None = None,
    policy: RestartPolicy = RestartPolicy(),
    grace: float = 20.0,
    ready_timeout: float | None = 1800.0,
    health: bool = True,
    container: ContainerPlan | None = None,
) -> Supervisor:
    """A new run directory holding the profile as resolved, and the supervisor that will start
    the engine there (`run()`, or `start()` / `wait_ready()`, then `outcome()` and `shutdown()`).

    run.json is written by the supervisor when the engine starts, since it records the pid: a
    run whose engine never started is not listed among the runs `top` and `triage` find.

    The port is locked first (BadInput, exit 2, naming the run that holds it) and stays locked
    until the run ends: two launches on one port cannot both start, however close together. An
    engine without an API server (`health` False: a headless rank) binds no port and locks none.

    With a `container` plan, `spec` is the engine's command inside the image: it is wrapped in the
    runtime's `run` of a container named after the run (engine/container/command.py) and
    supervised as a ContainerProcess.
    """
    lock = PortLock.acquire(spec.port) if health else None
    try:
        run_dir = new_run_dir(profile.name)
        write_profile(run_dir, dump_profile(profile))
    except OSError as exc:
        if lock is not None:
            lock.release()
        raise BadInput(
            f"cannot write the run directory under {runs_dir()}: {exc.strerror or exc}",
            "free space in the state directory, or point ASCENDCTL_STATE_DIR at another one",
        ) from exc
    if lock is not None:
        lock.record(run_id=run_dir.name, url=spec.url)
    process = EngineProcess
    if container is not None:
        from functools import partial

        from engine.container.command import run_spec
        from engine.container.runtime import container_name
        from engine.launcher.container import CIDFILE, ContainerProcess

        cidfile = run_dir / CIDFILE
        spec = run_spec(profile, spec, container, run_dir.name, cidfile)
        process = partial(ContainerProcess, plan=container, name=container_name(run_dir.name), cidfile=cidfile)
    return Supervisor(
        spec.argv,
        {**os.environ, **spec.env},
        spec.url,
        run_dir,
        profile.name,
        listener=listener,
        policy=policy,
        grace=grace,
        ready_timeout=ready_timeout,
        port_lock=lock,
        health=health,
        process=process,
    )


def run_once(argv: Sequence[str], env: Mapping[str, str], timeout: float = 300.0) -> tuple[int, str]:
    """Run a command that must finish before the engine starts (`ray start`): its exit code and
    output. The environment is ADDED to ours. BadInput when the program is not there."""
    try:
        done = subprocess.run(
            list(argv),
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        raise BadInput(
            f"{argv[0]} not found",
            "install it into the engine's environment (Ray comes with vLLM's `ray` extra: pip install 'ray[default]')",
        ) from None
    except subprocess.TimeoutExpired as exc:
        output = exc.output if isinstance(exc.output, str) else ""
        return 124, output + f"\n(no answer within {timeout:g} s)"
    return done.returncode, done.stdout
