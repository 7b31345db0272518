"""Where ascendctl keeps its files: the state folder (runs) and the cache folder (models, parsed
data). A leaf, so that every layer of the engine may ask it."""

from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    """ASCENDCTL_STATE_DIR, else the user state dir (~/.local/state/ascendctl on Linux)."""
    override = os.environ.get("ASCENDCTL_STATE_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_state_dir("ascendctl"))


def cache_dir() -> Path:
    """ASCENDCTL_CACHE_DIR, else the user cache dir (~/.cache/ascendctl on Linux)."""
    override = os.environ.get("ASCENDCTL_CACHE_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("ascendctl"))
