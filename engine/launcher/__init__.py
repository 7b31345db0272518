"""Launch and supervise the engine: `ascendctl serve` and `ascendctl demo` are thin shells
around `Supervisor`.

- phases: start-up phases parsed from the engine log (patterns in phases.yaml)
- process: one engine process tree in its own process group, output tee'd
- supervisor: readiness on /health, signal forwarding, restarts, the outcome
- preflight: checks before launch (the port)
- diagnosis: why it died (triage's matcher on the log tail, plus the root exception)
- rundir: the run directory (run.json, engine.log, profile.yaml)
"""

from engine.launcher.diagnosis import Diagnosis, diagnose, describe_exit
from engine.launcher.phases import PhaseEvent, PhaseRecord, PhaseTracker, load_phases, log_message
from engine.launcher.preflight import check_port, port_is_free
from engine.launcher.process import EngineProcess, group_alive, group_members
from engine.launcher.supervisor import Listener, Outcome, RestartPolicy, Supervisor, health_url

__all__ = [
    "Diagnosis", "EngineProcess", "Listener", "Outcome", "PhaseEvent", "PhaseRecord",
    "PhaseTracker", "RestartPolicy", "Supervisor", "check_port", "describe_exit", "diagnose",
    "group_alive", "group_members", "health_url", "load_phases", "log_message", "port_is_free",
]
