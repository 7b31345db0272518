"""Recordings: snapshots as NDJSON, one per line, written as they are taken and read back by
`ascendctl top --replay` through the same renderers."""

from __future__ import annotations

import dataclasses
import math
import threading
from array import array
from pathlib import Path
from typing import IO, Iterator, Sequence, overload

from engine.errors import BadInput
from engine.jsonsafe import loads
from engine.telemetry.snapshot import Snapshot
from engine.telemetry.thresholds import device_levels, engine_levels, hbm_budget

# Recordings made before snapshots carried a `schema_version` named their format so.
_LEGACY_SCHEMAS = {"ascendctl.top/1": 1}


class Recorder:
    """Appends snapshots to an NDJSON file, each stamped with the JSON documents' schema_version
    (the shell's `ascendctl.output.SCHEMA_VERSION`), as `top --json --interval` prints them."""

    def __init__(self, path: str | Path, schema_version: int) -> None:
        self.path = Path(path)
        self.schema_version = schema_version
        try:
            self._file: IO[str] = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            raise BadInput(f"cannot write the recording {path}: {exc.strerror}", "choose a writable path") from exc

    def write(self, snapshot: Snapshot) -> None:
        self._file.write(snapshot.to_json(schema_version=self.schema_version) + "\n")
        self._file.flush()  # a recording cut by Ctrl-C keeps every full tick

    def close(self) -> None:
        self._file.close()


def read_recording(path: str | Path, schema_version: int, skipped: list[str] | None = None) -> Iterator[Snapshot]:
    """Snapshots of an NDJSON recording of this `schema_version`. A damaged line (a cut last
    line, garbage, wrong types) raises BadInput naming the line, after the good snapshots before
    it have been yielded; with `skipped`, it is skipped instead and said there."""
    try:
        handle = Path(path).open("r", encoding="utf-8", errors="replace")
    except OSError as exc:
        raise BadInput(
            f"cannot read the recording {path}: {exc.strerror}", "give a file written by `ascendctl top --record FILE`"
        ) from exc
    with handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                yield _snapshot(_document(line, schema_version))
            except _DAMAGED as exc:
                _damaged(path, number, exc, skipped)


# What a damaged line raises, from json.loads to the type-checked decoder.
_DAMAGED = (ValueError, TypeError, AttributeError, KeyError)


def _document(line: str | bytes, schema_version: int) -> dict:
    """One line's JSON object, checked to be a snapshot of `schema_version`."""
    data = loads(line, walk=False)  # Snapshot.from_dict reads fixed fields, never walks it
    found = data.get("schema_version", _LEGACY_SCHEMAS.get(data.get("schema")))
    if found != schema_version:
        raise ValueError(f"schema_version {found!r}, expected {schema_version}")
    at = data.get("time")
    # Python's json reads NaN and Infinity: a snapshot has to sit at a time the charts can place.
    if not isinstance(at, (int, float)) or isinstance(at, bool) or not math.isfinite(at):
        raise ValueError(f"time {at!r} is not a finite number")
    return data


def _snapshot(data: dict) -> Snapshot:
    snapshot = Snapshot.from_dict(data)
    return snapshot if "schema_version" in data else _judged(snapshot)


def _damaged(path: str | Path, number: int, exc: Exception, skipped: list[str] | None) -> None:
    cause = f"{path}:{number}: not a top snapshot ({str(exc)[:80]})"
    if skipped is None:
        raise BadInput(cause, "record with `ascendctl top --record FILE`; a cut last line can be deleted") from exc
    skipped.append(cause)


class RecordingIndex(Sequence[Snapshot]):
    """A recording read on demand, for replays: the time and file offset of every line are
    indexed (in time order), and a snapshot is decoded only when it is played. A day at 1 s is
    86400 snapshots of about 20 KB each decoded: indexed, it stays a few MB. A line that fails to
    decode when played is None (the replay skips it); damaged lines found while indexing are
    said in `skipped`."""

    def __init__(self, path: str | Path, schema_version: int, skipped: list[str] | None = None) -> None:
        self.path, self.schema_version = Path(path), schema_version
        try:
            handle = self.path.open("rb")
        except OSError as exc:
            raise BadInput(
                f"cannot read the recording {path}: {exc.strerror}",
                "give a file written by `ascendctl top --record FILE`",
            ) from exc
        found: list[tuple[float, int]] = []
        offset = 0
        with handle:
            for number, line in enumerate(handle, 1):
                at, offset = offset, offset + len(line)
                if not line.strip():
                    continue
                try:
                    found.append((float(_document(line, schema_version)["time"]), at))
                except _DAMAGED as exc:
                    _damaged(path, number, exc, skipped)
        if not found:
            why = f" ({skipped[0]})" if skipped else ""
            raise BadInput(f"{path} holds no snapshots{why}", "record one with `ascendctl top --record FILE`")
        found.sort()
        self.times = [t for t, _ in found]
        self._offsets = array("q", (at for _, at in found))
        self._file = self.path.open("rb")
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.times)

    @overload
    def __getitem__(self, i: int) -> Snapshot | None: ...

    @overload
    def __getitem__(self, i: slice) -> list[Snapshot | None]: ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        with self._lock:
            self._file.seek(self._offsets[i])
            line = self._file.readline()
        try:
            return _snapshot(_document(line, self.schema_version))
        except _DAMAGED:
            return None

    def close(self) -> None:
        self._file.close()


def _judged(snap: Snapshot) -> Snapshot:
    """A snapshot recorded before levels were: its figures judged by its own thresholds."""
    t = snap.thresholds
    budget = hbm_budget(snap.engines, t)
    return dataclasses.replace(
        snap,
        device_levels={d.key: device_levels(d, t, budget) for d in snap.devices},
        engines=tuple(dataclasses.replace(e, levels=engine_levels(e, t)) for e in snap.engines),
    )


def load_recording(path: str | Path, schema_version: int, skipped: list[str] | None = None) -> list[Snapshot]:
    """Every good snapshot of the recording. With `skipped`, damaged lines (a cut last line of a
    recording stopped by a crash) are left out and said there: one bad line must not cost the
    rest of the recording."""
    snapshots = list(read_recording(path, schema_version, skipped))
    if not snapshots:
        why = f" ({skipped[0]})" if skipped else ""
        raise BadInput(f"{path} holds no snapshots{why}", "record one with `ascendctl top --record FILE`")
    return snapshots
