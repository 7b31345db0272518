"""Print the pinned engine set for a platform, for install.sh (which must not parse YAML in bash).

    python -m engine.stacks.pins cpu requirements   -> one requirement per line
    python -m engine.stacks.pins cpu remove         -> one package per line
"""

from __future__ import annotations

import sys
from importlib import resources
from typing import Any

import yaml


def engine_sets() -> dict[str, Any]:
    text = resources.files("engine.stacks").joinpath("engines.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m engine.stacks.pins PLATFORM FIELD", file=sys.stderr)
        return 2
    platform, key = argv
    sets = engine_sets()
    if platform not in sets:
        print(f"no pinned engine for platform {platform!r} (known: {', '.join(sets)})", file=sys.stderr)
        return 2
    value = sets[platform].get(key, [])
    for item in value if isinstance(value, list) else [value]:
        print(item)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
