"""Playing a recording back at a speed, with jumps: `ascendctl top --replay FILE --speed 10`.

Replay time follows the recorded timestamps: it runs `speed` recorded seconds per second of the
clock. Each `take()` hands over every frame passed since the last one (for the history, so the
charts miss nothing) and the one to show (the last at or before the position: frames in between
are skipped on screen when the screen cannot keep up). A jump back, or far ahead, asks for the
history to be cleared and refills it with the hour before the new position.
"""

from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from engine.telemetry.history import WINDOWS
from engine.telemetry.snapshot import Snapshot

SPEEDS: tuple[float, ...] = (1.0, 10.0, 60.0)
JUMP_S = 300.0
# What a jump refills by default: the longest chart window before the new position. The
# dashboard sets the window in view (`refill_s`): decoding a recorded hour takes seconds.
REFILL_S = max(WINDOWS)


@dataclass(frozen=True)
class Step:
    frames: tuple[Snapshot, ...]  # for the history, oldest first
    reset: bool  # clear the history before adding them
    current: Snapshot | None  # the frame to show


class Replay:
    def __init__(
        self, snaps: Sequence[Snapshot | None], speed: float = 1.0, clock: Callable[[], float] = time.monotonic
    ):
        """`snaps` in time order: a list, or a RecordingIndex (its `times`, and a snapshot
        decoded when played; None for one that fails to decode, which is skipped)."""
        if not snaps:
            raise ValueError("a replay needs at least one snapshot")
        if not speed > 0:
            raise ValueError("the speed must be above 0")
        self.snaps = snaps
        self._times = list(getattr(snaps, "times", None) or [s.time for s in snaps if s is not None])
        # How much recording a jump refills: the chart window in view (decoding is the cost).
        self.refill_s = REFILL_S
        self._current: Snapshot | None = None
        self.speed = float(speed)
        self.paused = False
        self._clock = clock
        self._lock = threading.Lock()
        self._anchor_pos = self._times[0]
        self._anchor_at = clock()
        self._fed = -1  # index of the last frame handed to the history
        self._reset = False

    @property
    def start(self) -> float:
        return self._times[0]

    @property
    def end(self) -> float:
        return self._times[-1]

    @property
    def position(self) -> float:
        """The recorded time being shown."""
        with self._lock:
            return self._position()

    @property
    def at_end(self) -> bool:
        return self.position >= self.end

    def _position(self) -> float:
        if self.paused:
            return self._anchor_pos
        return min(self.end, self._anchor_pos + (self._clock() - self._anchor_at) * self.speed)

    def _rebase(self, position: float) -> None:
        self._anchor_pos = max(self.start, min(self.end, position))
        self._anchor_at = self._clock()

    def set_speed(self, speed: float) -> None:
        if not speed > 0:
            raise ValueError("the speed must be above 0")
        with self._lock:
            self._rebase(self._position())
            self.speed = float(speed)

    def faster(self) -> float:
        """The next speed of SPEEDS (1 -> 10 -> 60); stays at the last."""
        self.set_speed(next((s for s in SPEEDS if s > self.speed), max(self.speed, SPEEDS[-1])))
        return self.speed

    def slower(self) -> float:
        self.set_speed(next((s for s in reversed(SPEEDS) if s < self.speed), min(self.speed, SPEEDS[0])))
        return self.speed

    def set_paused(self, paused: bool) -> None:
        with self._lock:
            self._rebase(self._position())
            self.paused = paused

    def seek(self, position: float) -> None:
        """Go to a recorded time. Back, or ahead further than the history holds: the history is
        refilled from the recording; a short way ahead: the frames skipped are fed as usual."""
        with self._lock:
            self._rebase(position)
            shown = bisect.bisect_right(self._times, self._anchor_pos) - 1
            refill_from = bisect.bisect_left(self._times, self._anchor_pos - self.refill_s)
            if shown < self._fed or refill_from > self._fed + 1:
                self._reset = True
                self._fed = refill_from - 1

    def jump(self, seconds: float) -> None:
        self.seek(self.position + seconds)

    def take(self) -> Step:
        """The frames since the last call (all of them, for the history) and the one to show."""
        with self._lock:
            shown = bisect.bisect_right(self._times, self._position()) - 1
            frames = tuple(f for f in self.snaps[self._fed + 1 : shown + 1] if f is not None)
            if frames:
                self._current = frames[-1]  # else the last frame shown stays (paused, or between frames)
            self._fed = max(self._fed, shown)
            reset, self._reset = self._reset, False
            return Step(frames, reset, self._current)


__all__ = ["JUMP_S", "REFILL_S", "SPEEDS", "Replay", "Step"]
