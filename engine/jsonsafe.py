"""The one JSON loader for documents that come from elsewhere: recordings, bench and doctor
reports, an exporter's snapshot.

Python's json parser recurses once per nesting level: 100,000 `[` in a file end in a
RecursionError, which no caller expects. Here that is a ValueError like any other malformed
document ("not a recording", "not a report", the URL DOWN). Objects nested deeper than any
document of ours are refused as well, so the code that walks them never meets that depth either.
"""

from __future__ import annotations

import json
from typing import Any

# Our deepest documents (a snapshot: engines -> histograms -> buckets -> pairs) stay under 10.
MAX_DEPTH = 64


class TooDeep(ValueError):
    pass


def loads(text: str | bytes, walk: bool = True) -> Any:
    """json.loads, with too deep a nesting raised as ValueError (TooDeep). `walk=False` only
    turns the parser's own RecursionError into TooDeep, for a caller whose typed decoder reads
    fixed fields and never walks the document (a recording's lines: the depth check would add
    some 8 s to indexing a day of them)."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise TooDeep(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    if walk:
        _check_depth(data)
    return data


def load_path(path) -> Any:
    """The JSON document in a file (see `loads`); OSError and ValueError go to the caller."""
    with open(path, "rb") as fh:
        return loads(fh.read())


def _check_depth(data: Any) -> None:
    level = [data]
    for _ in range(MAX_DEPTH + 1):
        nxt: list[Any] = []
        for item in level:
            if isinstance(item, dict):
                nxt.extend(v for v in item.values() if isinstance(v, (dict, list)))
            elif isinstance(item, list):
                nxt.extend(v for v in item if isinstance(v, (dict, list)))
        if not nxt:
            return
        level = nxt
    raise TooDeep(f"JSON nested deeper than {MAX_DEPTH} levels")


__all__ = ["MAX_DEPTH", "TooDeep", "load_path", "loads"]
