"""Host probes. Every probe reads through a `Host`: a filesystem root, an environment and a
command runner, so a machine recorded as a directory tree can be checked anywhere."""

from engine.system.host import Host
from engine.system.runner import CommandResult, Runner, SubprocessRunner

__all__ = ["CommandResult", "Host", "Runner", "SubprocessRunner"]
