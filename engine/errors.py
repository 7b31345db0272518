"""Typed errors: every failure the user can meet carries a one-line cause and the fix.

The shell maps each class to an exit code in one place (ascendctl/errors.py); the engine only
raises them.
"""

from __future__ import annotations


class AscendctlError(Exception):
    """Base class. `cause` says what went wrong, `fix` what to do about it."""

    def __init__(self, cause: str, fix: str = "") -> None:
        super().__init__(cause)
        self.cause = cause
        self.fix = fix

    def __str__(self) -> str:
        return self.cause


class BadInput(AscendctlError):
    """The user gave us something we cannot use: a bad profile, an unreadable file, a bad flag."""


class Unreachable(AscendctlError):
    """Something we must talk to cannot be reached or probed: no npu-smi, an endpoint down."""


class ProblemsFound(AscendctlError):
    """The job ran and found problems (doctor errors, triage issues, an engine that exited)."""


class Interrupted(AscendctlError):
    """The user pressed Ctrl-C or sent SIGTERM."""
