"""Recordings: snapshots as NDJSON, one per line, written as they are taken and read back by
`ascendctl top --replay` through the same renderers."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import IO, Iterator

from engine.errors import BadInput
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
                data = json.loads(line)
                found = data.get("schema_version", _LEGACY_SCHEMAS.get(data.get("schema")))
                if found != schema_version:
                    raise ValueError(f"schema_version {found!r}, expected {schema_version}")
                snapshot = Snapshot.from_dict(data)
                yield snapshot if "schema_version" in data else _judged(snapshot)
            except (ValueError, TypeError, AttributeError, KeyError) as exc:
                cause = f"{path}:{number}: not a top snapshot ({str(exc)[:80]})"
                if skipped is not None:
                    skipped.append(cause)
                    continue
                raise BadInput(
                    cause, "record with `ascendctl top --record FILE`; a cut last line can be deleted"
                ) from exc


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
