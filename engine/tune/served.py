"""A combination served the way `ascendctl serve` serves a profile: the launcher's run directory,
port lock, readiness on /health, process-group stop and crash diagnosis (engine/launcher)."""

from __future__ import annotations

import signal
from typing import Any

from engine.launcher import prepare_run
from engine.launcher.describe import diagnosis_line
from engine.tune.sweep import Engine


class ServedEngine(Engine):
    def __init__(self, profile, spec, *, ready_timeout: float = 900.0, grace: float = 20.0) -> None:
        self.profile, self.spec = profile, spec
        self.ready_timeout, self.grace = ready_timeout, grace
        self.sup = None

    def start(self) -> bool:
        self.sup = prepare_run(self.profile, self.spec, grace=self.grace, ready_timeout=self.ready_timeout)
        self.sup.start()
        return self.sup.wait_ready()

    def interrupt(self) -> None:
        """From a signal handler: stop waiting for readiness (the sweep then shuts it down)."""
        if self.sup is not None:
            self.sup.request_stop(signal.SIGINT)

    def alive(self) -> bool:
        return self.sup is not None and self.sup.poll() is None

    def failure(self) -> dict[str, Any]:
        if self.sup is None:
            return {"diagnosis": "not started"}
        o = self.sup.outcome()
        return {
            "exit_code": o.exit_code,
            "timed_out": o.timed_out,
            "diagnosis": diagnosis_line(o),
            "run_dir": str(o.run_dir),
        }

    def shutdown(self) -> None:
        if self.sup is not None:
            self.sup.shutdown()
