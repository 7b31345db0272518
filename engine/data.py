"""The project's YAML data files (rules, matrices, profiles' facts, thresholds), shipped as
package data and parsed once per process.

libyaml's C loader parses them about five times faster than the pure-Python one, which matters
for commands such as doctor that must answer in well under a second.

These files are ours and tested, so they load as plain data. YAML a person writes (profiles,
scenarios, rules or thresholds passed on the command line) goes through `engine.yamlfile`
instead, which keeps the line of every key for its messages.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@lru_cache(maxsize=None)
def load_yaml(package: str, name: str) -> Any:
    """The parsed content of the data file `name` inside `package` (e.g. "engine.stacks",
    "matrix.yaml"). Callers must not modify it: it is shared."""
    text = resources.files(package).joinpath(name).read_text(encoding="utf-8")
    return yaml.load(text, Loader=SAFE_LOADER)  # noqa: S506 - a safe loader
