"""The project's YAML data files (rules, matrices, profiles' facts, thresholds), shipped as
package data and parsed once per process.

libyaml's C loader parses them about five times faster than the pure-Python one, and a parsed
file is kept in the user's cache (`<cache>/data/`, marshal, keyed by the file's content), so that
a command that reads one (doctor: the compatibility matrix) imports neither yaml nor
importlib.resources: together some 40 ms of a command that must answer at once.

These files are ours and tested, so they load as plain data. YAML a person writes (profiles,
scenarios, rules or thresholds passed on the command line) goes through `engine.yamlfile`
instead, which keeps the line of every key for its messages.
"""

from __future__ import annotations

import datetime
import marshal
import os
import sys
import zlib
from functools import lru_cache
from pathlib import Path
from typing import Any

# Bump when the cached form changes; the Python version is part of the key too (marshal's format).
_CACHE_FORMAT = 1


def __getattr__(name: str) -> Any:
    if name == "SAFE_LOADER":  # engine.yamlfile builds its line-keeping loader on it
        return _safe_loader()
    raise AttributeError(name)


def _safe_loader() -> Any:
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@lru_cache(maxsize=None)
def load_yaml(package: str, name: str) -> Any:
    """The parsed content of the data file `name` inside `package` (e.g. "engine.stacks",
    "matrix.yaml"). Callers must not modify it: it is shared."""
    raw = _read(package, name)
    key = (_CACHE_FORMAT, sys.version_info[:2], len(raw), zlib.crc32(raw))  # hashlib costs ~5 ms to import
    cache = _cache_file(package, name)
    if cache is not None:
        try:
            cached_key, dated, data = marshal.loads(cache.read_bytes())
            if cached_key == key:
                return _undate(data) if dated else data
        except (OSError, EOFError, ValueError, TypeError):
            pass  # absent, cut short or from another version: parsed again below
    import yaml

    data = yaml.load(raw.decode("utf-8"), Loader=_safe_loader())  # noqa: S506 - a safe loader
    if cache is not None:
        _store(cache, key, data)
    return data


def _read(package: str, name: str) -> bytes:
    """The file's bytes: straight from the package's folder, or through importlib.resources
    (a zip import) when the package has no folder."""
    module = sys.modules.get(package) or __import__(package, fromlist=["_"])
    folder = getattr(module, "__file__", None)
    if folder:
        try:
            return (Path(folder).parent / name).read_bytes()
        except OSError:
            pass
    from importlib import resources

    return resources.files(package).joinpath(name).read_bytes()


def _cache_file(package: str, name: str) -> Path | None:
    try:
        from engine.dirs import cache_dir

        return cache_dir() / "data" / f"{package}.{name}.marshal"
    except Exception:  # no home, an odd platform: parse every time
        return None


def _date(value: Any, found: list[bool]) -> Any:
    """YAML dates (the matrix's release dates) as ("\0date", ISO text): marshal holds no date.
    A parsed file holds no tuple otherwise, so the tagged pair cannot be mistaken."""
    if isinstance(value, dict):
        return {k: _date(v, found) for k, v in value.items()}
    if isinstance(value, list):
        return [_date(v, found) for v in value]
    if isinstance(value, datetime.datetime):
        raise ValueError("a timestamp: not cached")  # parsed each time instead
    if isinstance(value, datetime.date):
        found.append(True)
        return ("\0date", value.isoformat())
    return value


def _undate(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _undate(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_undate(v) for v in value]
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "\0date":
        return datetime.date.fromisoformat(value[1])
    return value


def _store(path: Path, key: tuple, data: Any) -> None:
    """Written whole or not at all (a temporary file renamed); a value marshal cannot hold or an
    unwritable cache only costs the next run a parse."""
    try:
        found: list[bool] = []
        encoded = _date(data, found)
        blob = marshal.dumps((key, bool(found), encoded))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(blob)
        os.replace(tmp, path)
    except (OSError, ValueError):
        pass
