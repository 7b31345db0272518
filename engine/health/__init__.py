"""Is the engine alive and answering? The one hang verdict (`hang`) that serve's restart policy,
`top`, the exporter and `ascendctl probe` share, and `ascendctl probe`'s one look (`check`). What a hang leaves in the run directory is
engine/launcher/evidence.py."""

from engine.health.hang import HangLimits, HangMonitor, Verdict

__all__ = ["HangLimits", "HangMonitor", "Verdict"]
