"""Rebuild frozen dataclasses from JSON, checking each value against the field's type hint.

One decoder for every record ascendctl reads back: `top --replay` recordings (Snapshot) and the
run.json of `ascendctl serve` (RunInfo). A hand-edited or damaged file ("pid": "abc") fails here,
with a TypeError naming the field, never later in os.kill() or a renderer's format().
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import functools
import types
import typing
from typing import Any


def decode(tp: Any, value: Any, where: str = "") -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return decode(inner[0], value, where) if len(inner) == 1 else value
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise TypeError(f"{where or tp.__name__}: expected an object, got {value!r:.40}")
        hints = _init_hints(tp)
        return tp(**{k: decode(hints[k], v, _join(where, k)) for k, v in value.items() if k in hints})
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{where}: expected a list, got {value!r:.40}")
        item = typing.get_args(tp)[0] if typing.get_args(tp) else Any
        items = [decode(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin in (dict, collections.abc.Mapping):
        if not isinstance(value, dict):
            raise TypeError(f"{where}: expected an object, got {value!r:.40}")
        args = typing.get_args(tp)
        return {k: decode(args[1], v, _join(where, str(k))) for k, v in value.items()} if args else dict(value)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{where}: expected a number, got {value!r:.40}")
        return float(value)
    if tp is int:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{where}: expected a whole number, got {value!r:.40}")
    if tp in (str, bool) and not isinstance(value, tp):
        raise TypeError(f"{where}: expected {tp.__name__}, got {value!r:.40}")
    return value


@functools.lru_cache(maxsize=None)
def _init_hints(tp: type) -> dict[str, Any]:
    """The type hints of a dataclass's init fields. Cached: get_type_hints evaluates every
    annotation string each call, which was three quarters of reading back a recording."""
    hints = typing.get_type_hints(tp)
    return {f.name: hints[f.name] for f in dataclasses.fields(tp) if f.init}


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key
