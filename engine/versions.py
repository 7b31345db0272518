"""Version strings of the Ascend world, compared without a packaging dependency.

CANN versions are not PEP 440 (`8.3.RC2`, `8.1.RC1.alpha001`, `8.0.T6`, `9.2.0-beta.2`, and image
tags spell `8.3.rc2`), and torch_npu ships post builds with local tags (`2.9.0.post1+git4c901a4`),
so comparisons go through the small helpers here.
"""

from __future__ import annotations

import re
from typing import Iterable

_CANN = re.compile(r"^\s*(\d+)\.(\d+)\.(?:(RC|T)(\d+)|(\d+))(?:[.\-_]?(alpha|beta)[.\-_]?(\d+))?", re.I)
_NUMS = re.compile(r"\d+")
_RELEASE = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")


def cann_release(version: str | None) -> str | None:
    """The canonical release a CANN version string names: `8.3.rc2` -> `8.3.RC2`, `9.1.0` -> `9.1.0`.

    Pre-release builds keep their tag (`9.2.0-beta.2` -> `9.2.0-beta.2`), because a beta of 9.2.0
    is not 9.2.0 as far as the matrix is concerned; `8.1.RC1.alpha001` -> `8.1.RC1-alpha.1`.
    """
    if not version:
        return None
    m = _CANN.match(version)
    if not m:
        return None
    major, minor, kind, kind_n, patch, pre, pre_n = m.groups()
    base = f"{major}.{minor}.{kind.upper()}{int(kind_n)}" if kind else f"{major}.{minor}.{int(patch)}"
    return f"{base}-{pre.lower()}.{int(pre_n)}" if pre else base


def cann_key(version: str) -> tuple[int, ...]:
    """A sort key: RCs before the final release of the same major.minor, pre-releases before both."""
    m = _CANN.match(version or "")
    if not m:
        return (-1,)
    major, minor, kind, kind_n, patch, pre, pre_n = m.groups()
    if kind and kind.upper() == "T":  # early test builds
        stage = (0, int(kind_n))
    elif kind:
        stage = (1, int(kind_n))
    else:
        stage = (2, int(patch))
    pre_key = (0, int(pre_n)) if pre else (1, 0)
    return (int(major), int(minor), *stage, *pre_key)


def release_tuple(version: str | None, width: int = 3) -> tuple[int, ...]:
    """The leading numeric release of a PEP 440-ish version: `2.13.0+cpu` -> (2, 13, 0),
    `2.9.0.post1+git4c901a4` -> (2, 9, 0), `3.13` -> (3, 13, 0)."""
    if not version:
        return ()
    m = _RELEASE.match(version)
    if not m:
        return ()
    nums = [int(x) for x in m.group(1).split(".")][:width]
    return tuple(nums + [0] * (width - len(nums)))


def same_release(a: str | None, b: str | None) -> bool:
    """True when both name the same X.Y.Z (post and local tags ignored)."""
    return bool(a and b) and release_tuple(a) == release_tuple(b)


def normalize(version: str | None) -> str:
    """Lower case, no leading `v`, no local tag: `v0.11.0rc1` -> `0.11.0rc1`, `0.11.0+empty` -> `0.11.0`."""
    if not version:
        return ""
    return version.strip().lower().lstrip("v").split("+", 1)[0]


_CLAUSE = re.compile(r"^\s*(==|!=|>=|<=|<|>|~=)\s*([0-9][0-9A-Za-z.*+\-]*)\s*$")


def satisfies(version: str | None, spec: str | None) -> bool | None:
    """Whether `version` meets a specifier such as `>=3.10,<3.13` or `==5.5.4`.

    Compares numeric releases only (X.Y.Z); an empty spec accepts anything. None when either
    side cannot be read, so callers can say "cannot tell" instead of guessing.
    """
    if not spec or not spec.strip():
        return True
    v = release_tuple(version)
    if not v:
        return None
    for clause in spec.split(","):
        if not clause.strip():
            continue
        m = _CLAUSE.match(clause)
        if not m:
            return None
        op, target = m.groups()
        if target.endswith(".*"):
            prefix = release_tuple(target[:-2], width=len(target[:-2].split(".")))
            hit = v[: len(prefix)] == prefix
            if (op == "==" and not hit) or (op == "!=" and hit):
                return False
            continue
        t = release_tuple(target)
        ok = {
            "==": v == t,
            "!=": v != t,
            ">=": v >= t,
            "<=": v <= t,
            "<": v < t,
            ">": v > t,
            "~=": v >= t and v[: max(1, len(target.split(".")) - 1)] == t[: max(1, len(target.split(".")) - 1)],
        }[op]
        if not ok:
            return False
    return True


def newest_cann(versions: Iterable[str]) -> str | None:
    items = [v for v in versions if v]
    return max(items, key=cann_key) if items else None


# What a version read from a file may look like: an optional short prefix (`V100R001...`, `v`),
# then a digit, then release characters. Anything else (control bytes, a sentence, a 100 KB line
# of a damaged or hostile file) is not a version, whatever key it sits under.
_PLAUSIBLE = re.compile(r"[A-Za-z]{0,4}\d[0-9A-Za-z.+_~\-]*")
VERSION_MAX_LEN = 64
QUOTE_LIMIT = 80


def looks_like_version(value: str | None) -> bool:
    return bool(value) and len(value) <= VERSION_MAX_LEN and _PLAUSIBLE.fullmatch(value) is not None  # type: ignore[arg-type]


def quoted(value: str, limit: int = QUOTE_LIMIT) -> str:
    """A value from a file as a message shows it: repr (control bytes visible as \\x1b, never
    raw) and cut to about `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
