"""The one map from error type to exit code (documented in README.md, "Exit codes")."""

from __future__ import annotations

from engine.errors import AscendctlError, BadInput, Interrupted, ProblemsFound, Unreachable

EXIT_OK = 0
EXIT_PROBLEMS = 1  # the job found problems: doctor errors, triage issues, the engine exited unasked
EXIT_USAGE = 2  # usage or bad input: bad profile, unreadable file, bad flag
EXIT_UNREACHABLE = 3  # cannot reach or probe: no npu-smi, endpoint down
# A bug of ours (an unexpected exception): not 1, which scripts read as "the job found problems".
EXIT_SOFTWARE = 70  # EX_SOFTWARE of sysexits.h
EXIT_INTERRUPTED = 130

_CODES: tuple[tuple[type[AscendctlError], int], ...] = (
    (BadInput, EXIT_USAGE),
    (Unreachable, EXIT_UNREACHABLE),
    (ProblemsFound, EXIT_PROBLEMS),
    (Interrupted, EXIT_INTERRUPTED),
)


def exit_code_for(exc: AscendctlError) -> int:
    for cls, code in _CODES:
        if isinstance(exc, cls):
            return code
    return EXIT_PROBLEMS
