"""The best combination of a sweep as a profile that `serve -p FILE` takes: the base profile's
YAML with the user's --set and the combination's keys written in, and the measured capacity in a
comment at the top."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from engine.errors import BadInput


def overlay_text(profile_ref: str, sets: Sequence[str], best: Mapping[str, Any], how: str) -> str:
    """The profile text; checked by loading it back (BadInput if the profile would not load)."""
    from engine.profiles.loader import _apply_overrides, load_profile_text, resolve_source
    from engine.yamlfile import load

    source, text = resolve_source(profile_ref)
    data = load(text, source) or {}
    raw: dict[str, Any] = {"": {}}
    for key, value in data.items():
        if isinstance(value, dict):
            raw[str(key)] = dict(value)
        else:
            raw[""][str(key)] = value
    settings = [f"{k}={_yaml_scalar(v)}" for k, v in best["combination"].items()]
    problems = _apply_overrides(raw, None, [*sets, *settings])
    if problems:
        raise BadInput(f"cannot write the profile: {problems[0]}", "check the --set values")
    top = raw.pop("")
    name = f"{top.get('name') or Path(source).stem}-tuned"
    doc = {**top, "name": name, **{k: v for k, v in raw.items() if v is not None}}
    cap = best["capacity"]
    band = f" ± {cap['band']:g}" if cap.get("band") else ""
    targets = ", ".join(f"{k}={v:g}" for k, v in (cap.get("targets") or {}).items())
    header = [
        f"# Written by `ascendctl tune sweep` on {time.strftime('%Y-%m-%d', time.gmtime())} from profile {source}.",
        f"# Best of the sweep: {', '.join(f'{k}={v}' for k, v in best['combination'].items())}",
        f"# Measured capacity: {cap['capacity']:g}{band} {cap.get('unit', '')} of scenario {cap.get('scenario')} "
        f"within {targets}",
        f"# ({how}). Serve it: ascendctl serve -p THIS_FILE",
    ]
    body = "\n".join(header) + "\n" + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    load_profile_text(body, "the written profile", default_name=name)
    return body


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
