"""Recordings: snapshots as NDJSON, one per line, written as they are taken and read back by
`ascendctl top --replay` through the same renderers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Iterator

from engine.errors import BadInput
from engine.telemetry.snapshot import SCHEMA, Snapshot


class Recorder:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self._file: IO[str] = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            raise BadInput(f"cannot write the recording {path}: {exc.strerror}", "choose a writable path") from exc

    def write(self, snapshot: Snapshot) -> None:
        self._file.write(snapshot.to_json() + "\n")
        self._file.flush()  # a recording cut by Ctrl-C keeps every full tick

    def close(self) -> None:
        self._file.close()


def read_recording(path: str | Path) -> Iterator[Snapshot]:
    """Snapshots of an NDJSON recording. A damaged line (a cut last line, garbage) raises BadInput
    naming the line, after the good snapshots before it have been yielded."""
    try:
        handle = Path(path).open("r", encoding="utf-8", errors="replace")
    except OSError as exc:
        raise BadInput(f"cannot read the recording {path}: {exc.strerror}",
                       "give a file written by `ascendctl top --record FILE`") from exc
    with handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if data.get("schema") != SCHEMA:
                    raise ValueError(f"schema {data.get('schema')!r}, expected {SCHEMA!r}")
                yield Snapshot.from_dict(data)
            except (ValueError, TypeError, AttributeError, KeyError) as exc:
                raise BadInput(f"{path}:{number}: not a top snapshot ({str(exc)[:80]})",
                               "record with `ascendctl top --record FILE`; a cut last line can be deleted") from exc


def load_recording(path: str | Path) -> list[Snapshot]:
    snapshots = list(read_recording(path))
    if not snapshots:
        raise BadInput(f"{path} holds no snapshots", "record one with `ascendctl top --record FILE`")
    return snapshots
