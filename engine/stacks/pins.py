"""Print the pinned engine set for a platform, for install.sh (which must not parse YAML in bash).

    python -m engine.stacks.pins cpu requirements      -> one requirement per line
    python -m engine.stacks.pins cpu remove            -> one package per line
    python -m engine.stacks.pins ascend requirements   -> the set matching the host's CANN toolkit
    python -m engine.stacks.pins ascend requirements --cann 8.5.0   (choose the CANN version)
    python -m engine.stacks.pins ascend requirements --root DIR     (a recorded machine)

The `ascend` entry holds one set per CANN version (`by_cann`); its shared fields (build_env,
check_import, ...) apply to every set. Exit 1 when no set matches the CANN found.
"""

from __future__ import annotations

import sys
from typing import Any

from engine.data import load_yaml
from engine.versions import cann_release


def engine_sets() -> dict[str, Any]:
    return load_yaml("engine.stacks", "engines.yaml")


def ascend_sets() -> dict[str, dict[str, Any]]:
    """CANN release (canonical spelling) -> its pinned set, shared fields merged in."""
    entry = engine_sets().get("ascend") or {}
    shared = {k: v for k, v in entry.items() if k != "by_cann"}
    return {
        cann_release(str(cann)) or str(cann): {**shared, **{k: v for k, v in (pinned or {}).items()}, "cann": str(cann)}
        for cann, pinned in (entry.get("by_cann") or {}).items()
    }


def ascend_set(cann_version: str | None) -> dict[str, Any] | None:
    """The pinned set for this CANN version (`8.3.rc2` and `8.3.RC2` are the same), or None."""
    key = cann_release(cann_version)
    return ascend_sets().get(key) if key else None


def _detect_cann(root: str | None) -> str | None:
    from engine.system.cann import find_toolkit
    from engine.system.host import Host
    from engine.system.recorded import recorded_host

    host = recorded_host(root)[0] if root else Host()
    toolkit = find_toolkit(host)
    return toolkit.version if toolkit else None


def _option(argv: list[str], name: str) -> tuple[list[str], str | None]:
    if name in argv:
        i = argv.index(name)
        if i + 1 >= len(argv):
            raise ValueError(f"{name} needs a value")
        return argv[:i] + argv[i + 2 :], argv[i + 1]
    return argv, None


def main(argv: list[str]) -> int:
    try:
        argv, cann = _option(list(argv), "--cann")
        argv, root = _option(argv, "--root")
    except ValueError as exc:
        print(f"pins: {exc}", file=sys.stderr)
        return 2
    if len(argv) != 2:
        print("usage: python -m engine.stacks.pins PLATFORM FIELD [--cann VERSION] [--root DIR]", file=sys.stderr)
        return 2
    platform, key = argv
    sets = engine_sets()
    if platform not in sets:
        print(f"no pinned engine for platform {platform!r} (known: {', '.join(sets)})", file=sys.stderr)
        return 2
    chosen = sets[platform]
    if platform == "ascend":
        try:
            cann = cann or _detect_cann(root)
        except Exception as exc:  # a broken tree must not stop install.sh with a traceback
            print(f"pins: cannot read the CANN version: {exc}", file=sys.stderr)
            return 1
        if not cann:
            print("pins: no CANN toolkit found; install CANN first or pass --cann VERSION", file=sys.stderr)
            return 1
        chosen = ascend_set(cann)
        if chosen is None:
            known = ", ".join(ascend_sets())
            print(f"pins: no pinned Ascend set for CANN {cann} (sets exist for {known})", file=sys.stderr)
            return 1
    value = chosen.get(key, [])
    for item in value if isinstance(value, list) else [value]:
        print(item)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
