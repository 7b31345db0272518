"""Launch and supervise the engine: `ascendctl serve` and `ascendctl demo` are thin shells
around `run_preflight` and `prepare_run`.

    found = run_preflight(profile, spec.host, spec.port)      # BadInput: the port is taken
    sup = prepare_run(profile, spec, listener=view)           # port locked, run directory made
    outcome = sup.run()                                       # or start(), wait_ready(), ...,
                                                              # then outcome() and shutdown()

- run: prepare_run, the one entry point
- phases: start-up phases parsed from the engine log (patterns in phases.yaml)
- process: one engine process tree in its own process group, output tee'd (never blocking it)
- watchdog: kills the engine's process group when ascendctl dies, however it dies
- supervisor: readiness (/health answered by this engine), signal forwarding, restarts, the outcome
- portlock: one supervised run per port (a lock file under the state directory)
- preflight: checks before launch (the port, the model, the memory plan, doctor's errors for the profile)
- diagnosis: why it died (triage's matcher on the log tail, plus the root exception)
- rundir: the run directory (run.json, engine.log, profile.yaml)
"""

from engine.launcher.diagnosis import Diagnosis, describe_exit, diagnose
from engine.launcher.phases import PhaseEvent, PhaseRecord, PhaseTracker, log_message
from engine.launcher.portlock import PortLock, port_lock_holder
from engine.launcher.preflight import Preflight, check_port, port_is_free, run_preflight
from engine.launcher.process import EngineProcess, group_members
from engine.launcher.run import prepare_run, run_once
from engine.launcher.supervisor import Listener, Outcome, RestartPolicy, Supervisor, health_url

__all__ = [
    "Diagnosis",
    "EngineProcess",
    "Listener",
    "Outcome",
    "PhaseEvent",
    "PhaseRecord",
    "PhaseTracker",
    "PortLock",
    "Preflight",
    "RestartPolicy",
    "Supervisor",
    "check_port",
    "describe_exit",
    "diagnose",
    "group_members",
    "health_url",
    "log_message",
    "port_is_free",
    "port_lock_holder",
    "prepare_run",
    "run_once",
    "run_preflight",
]
