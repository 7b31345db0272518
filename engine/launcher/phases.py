"""Start-up phases read from the engine's own log lines (patterns are data: phases.yaml)."""

from __future__ import annotations

import re
import string
import time
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Callable, Iterable, Mapping

import yaml

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# `(Proc pid=N) ` (vLLM >= 0.10), then `LEVEL MM-DD HH:MM:SS [file.py:N] ` (the bracket is
# missing before 0.8). uvicorn's `INFO:     ` lines keep their text after the level.
_PREFIX = re.compile(
    r"^(?:\(\S+ pid=\d+\) )?"
    r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d \[?[^\]\s]+:\d+\] "
    r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+)"
)


def log_message(line: str) -> str:
    """The message part of an engine log line: colour codes and the vLLM/uvicorn prefix removed."""
    line = _ANSI.sub("", line).rstrip("\r\n")
    match = _PREFIX.match(line)
    return line[match.end() :] if match else line


@dataclass(frozen=True)
class PhaseSpec:
    id: str
    label: str
    patterns: tuple[re.Pattern[str], ...]
    details: tuple[str, ...] = ()

    def describe(self, values: Mapping[str, str]) -> str:
        """The first detail template whose fields are all known; '' when none is."""
        for template in self.details:
            names = {f for _, f, _, _ in string.Formatter().parse(template) if f}
            if names <= values.keys():
                return template.format(**values)
        return ""


@lru_cache(maxsize=1)
def load_phases() -> tuple[PhaseSpec, ...]:
    text = resources.files("engine.launcher").joinpath("phases.yaml").read_text(encoding="utf-8")
    return parse_phases(text)


def parse_phases(text: str) -> tuple[PhaseSpec, ...]:
    data = yaml.safe_load(text)
    specs = []
    for entry in data["phases"]:
        detail = entry.get("detail", [])
        specs.append(
            PhaseSpec(
                id=entry["id"],
                label=entry["label"],
                patterns=tuple(re.compile(p) for p in entry["patterns"]),
                details=tuple([detail] if isinstance(detail, str) else detail),
            )
        )
    return tuple(specs)


@dataclass
class PhaseState:
    spec: PhaseSpec
    started: float  # seconds since the tracker started
    values: dict[str, str] = field(default_factory=dict)

    @property
    def detail(self) -> str:
        return self.spec.describe(self.values)


@dataclass(frozen=True)
class PhaseEvent:
    """A phase reached for the first time; `previous` is the phase it ends, when there was one."""

    phase: str
    label: str
    at: float  # seconds since start
    previous: PhaseRecord | None = None


@dataclass(frozen=True)
class PhaseRecord:
    """A phase as shown to the user and written to JSON: when it started, how long it took."""

    phase: str
    label: str
    started: float
    seconds: float | None
    detail: str


class PhaseTracker:
    """Feed it engine log lines; it reports each phase the first time it is reached.

    Not thread-safe by itself: one reader thread feeds it, others read `records()` copies.
    """

    def __init__(self, specs: Iterable[PhaseSpec] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.specs = tuple(specs) if specs is not None else load_phases()
        self._clock = clock
        self._t0 = clock()
        self._states: dict[str, PhaseState] = {}
        self._order: list[str] = []  # ids in the order they were reached

    def elapsed(self) -> float:
        return self._clock() - self._t0

    def reached(self, phase_id: str) -> bool:
        return phase_id in self._states

    def feed(self, line: str) -> PhaseEvent | None:
        message = log_message(line)
        if not message:
            return None
        event = None
        for spec in self.specs:
            for pattern in spec.patterns:
                match = pattern.search(message)
                if match is None:
                    continue
                state = self._states.get(spec.id)
                if state is None:
                    previous = self._record(self._order[-1], self.elapsed()) if self._order else None
                    state = self._states[spec.id] = PhaseState(spec, self.elapsed())
                    self._order.append(spec.id)
                    event = PhaseEvent(spec.id, spec.label, state.started, previous)
                state.values.update({k: v for k, v in match.groupdict().items() if v is not None})
                break
        return event

    def _record(self, phase_id: str, end: float | None) -> PhaseRecord:
        state = self._states[phase_id]
        seconds = None if end is None else max(0.0, end - state.started)
        return PhaseRecord(
            phase_id,
            state.spec.label,
            round(state.started, 3),
            None if seconds is None else round(seconds, 3),
            state.detail,
        )

    def records(self, until: float | None = None) -> list[PhaseRecord]:
        """Every phase reached so far, in order; the last one lasts until `until` (None: open)."""
        out = []
        for i, pid in enumerate(self._order):
            end = self._states[self._order[i + 1]].started if i + 1 < len(self._order) else until
            out.append(self._record(pid, end))
        return out
