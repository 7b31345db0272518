"""Reading the stack's YAML data files (shipped as package data), parsed once per process.

libyaml's C loader parses the matrix five times faster than the pure-Python one, which matters
for a doctor that must answer in well under a second.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@lru_cache(maxsize=None)
def load_data(name: str) -> Any:
    """The parsed content of engine/stacks/<name>. Callers must not modify it (it is shared)."""
    text = resources.files("engine.stacks").joinpath(name).read_text(encoding="utf-8")
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader
