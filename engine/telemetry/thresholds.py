"""The numbers `top` judges figures by, and the judgement: each figure's level.

The defaults are `thresholds.yaml` and nowhere else. A level is computed here once per tick and
stored in the snapshot, so the dashboard's colours, `--once`, `--json` and the diagnostics rules
cannot disagree about what is too high.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from engine import yamlfile
from engine.data import load_yaml
from engine.devices.sample import HEALTHY, DeviceSample
from engine.errors import BadInput
from engine.severity import Severity

if TYPE_CHECKING:
    from engine.telemetry.snapshot import EngineView


@dataclass(frozen=True)
class Thresholds:
    """The meaning of each key is written beside it in thresholds.yaml."""

    warn_pct: float
    temp_warn_c: float
    temp_crit_c: float
    temp_sustain_s: float
    idle_power_w: float
    idle_util_pct: float
    idle_power_sustain_s: float
    aicpu_warn_pct: float
    aicpu_sustain_s: float
    leak_window_h: float
    leak_min_rise_mib: float
    leak_min_fit: float
    leak_max_step_share: float
    leak_load_rise: float
    leak_warmup_min: float
    hbm_budget: float
    hbm_headroom_warn: float
    hbm_headroom_crit: float
    hbm_bw_pct: float
    hbm_bw_sustain_s: float
    pending_requests: float
    pending_sustain_s: float
    kv_fetch_sustain_s: float
    kv_usage_pct: float
    window_s: float
    hang_probe_interval_s: float
    hang_probe_timeout_s: float
    hang_probe_failures: float
    hang_progress_s: float
    hang_cpu_s: float
    hang_device_s: float

    @classmethod
    def defaults(cls) -> "Thresholds":
        return _defaults()

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def updated(self, values: Mapping[str, Any]) -> "Thresholds":
        """A copy with some keys replaced. Raises KeyError on an unknown key, ValueError or
        TypeError on a value that is not a number (`load_thresholds` says which, with a fix)."""
        unknown = set(values) - set(self.keys())
        if unknown:
            raise KeyError(sorted(unknown)[0])
        return dataclasses.replace(self, **{k: float(v) for k, v in values.items()})

    def as_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


@functools.lru_cache(maxsize=1)
def _defaults() -> Thresholds:
    data = load_yaml("engine.telemetry", "thresholds.yaml")
    missing = set(Thresholds.keys()) - set(data)
    if missing:  # a packaging fault, not the user's: say which key
        raise RuntimeError(f"thresholds.yaml lacks {', '.join(sorted(missing))}")
    for key, value in data.items():  # a packaging fault as well: the shipped numbers obey the rule
        problem = _refused(key, value)
        if problem:
            raise RuntimeError(f"thresholds.yaml: {key} {problem}")
    return Thresholds(**{k: float(v) for k, v in data.items()})


def _refused(key: str, value: Any) -> str | None:
    """Why `value` cannot be threshold `key` (None when it can). Every threshold is a positive,
    finite number: a NaN never compares true, an infinite, zero or negative limit writes a rule or
    an alert that can never fire (or always does)."""
    if isinstance(value, bool):
        return f"must be a number, got {yamlfile.quote(value)}"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return f"must be a number, got {yamlfile.quote(value)}"
    if not math.isfinite(number):
        return f"must be a finite number, got {yamlfile.quote(value)}"
    if number <= 0:
        return f"must be greater than 0, got {yamlfile.quote(value)}"
    if key in _FRACTIONS and number > 1:
        return f"must be a fraction > 0 and <= 1, got {yamlfile.quote(value)}"
    return None


def profile_thresholds(profile: Any) -> dict[str, float]:
    """The `diagnostics` section of a serving profile (engine.profiles.Profile) as thresholds,
    and its engine's memory budget (gpu_memory_utilization) when it sets one."""
    d = profile.diagnostics
    out = {
        "pending_requests": float(d.pending_threshold),
        "kv_usage_pct": float(d.kv_usage_warn) * 100,
        "hbm_bw_pct": float(d.hbm_bandwidth_warn_pct),
        "temp_warn_c": float(d.temperature_warn_c),
    }
    for key in HANG_KEYS:
        value = getattr(d, key, None)
        if value is not None:
            out[key] = float(value)
    utilization = getattr(getattr(profile, "engine", None), "gpu_memory_utilization", None)
    if utilization:
        out["hbm_budget"] = float(utilization)
    return out


# The hang verdict's keys (engine/health/hang.py), which a profile's diagnostics section may set.
HANG_KEYS = (
    "hang_probe_interval_s",
    "hang_probe_timeout_s",
    "hang_probe_failures",
    "hang_progress_s",
    "hang_cpu_s",
    "hang_device_s",
)

# Keys that are fractions, not percentages: `--set hbm_budget=90` would judge nothing.
_FRACTIONS = ("hbm_budget", "hbm_headroom_warn", "hbm_headroom_crit", "leak_min_fit", "leak_max_step_share")


def load_thresholds(
    path: str | Path | None = None, overrides: Sequence[str] = (), base: Mapping[str, float] | None = None
) -> Thresholds:
    """Defaults, then `base` (a profile's), then a YAML file of some keys, then `key=value`
    overrides. Unknown keys and non-numbers are rejected with the list of valid keys."""
    values = Thresholds.defaults().updated(base or {})
    updates: list[tuple[str, Any, str, int | None]] = []
    if path is not None:
        try:
            data = yamlfile.load(Path(path).read_text(encoding="utf-8"), str(path))
        except OSError as exc:
            raise BadInput(f"cannot read thresholds file {path}: {exc.strerror}", "check the path") from exc
        except UnicodeDecodeError:
            raise BadInput(
                f"{path} is not a text file (not UTF-8)", "give a YAML file of `key: number` lines"
            ) from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise BadInput(f"{path}: expected a mapping of threshold names to numbers", "write `key: number` lines")
        for problem in yamlfile.duplicate_keys(data, str(path)):
            raise BadInput(str(problem), "keep one of the two")
        updates += [(str(k), v, str(path), yamlfile.line_of(data, k)) for k, v in data.items()]
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise BadInput(f"--set {item!r} is not key=value", "write e.g. --set pending_requests=32")
        updates.append((key.strip(), value.strip(), f"--set {item}", None))
    for key, value, origin, line in updates:
        if key not in Thresholds.keys():
            raise BadInput(
                str(yamlfile.Problem(origin, line, key, "unknown threshold")),
                f"valid keys: {', '.join(sorted(Thresholds.keys()))}",
            )
        problem = _refused(key, value)
        if problem is not None:
            default = getattr(Thresholds.defaults(), key)
            fix = (
                f"write {key}: 0.9 for 90%" if key in _FRACTIONS else f"write {key}: <number > 0> (default {default:g})"
            )
            raise BadInput(str(yamlfile.Problem(origin, line, key, problem)), fix)
        values = values.updated({key: value})
    return values


# ---- levels ----------------------------------------------------------------------------------

# npu-smi's health words (OK | Warning | Alarm | Critical, and UNKNOWN or NA when it cannot tell):
# Alarm and Critical mean the chip must not serve; Warning is a minor alarm to look at; any other
# word but OK is an error, since the chip's state is not known.
_HEALTH = {HEALTHY: Severity.OK, "Warning": Severity.WARNING, "Alarm": Severity.CRITICAL, "Critical": Severity.CRITICAL}


def health_level(health: str | None) -> Severity | None:
    """npu-smi's health word as a severity; None when the source reports no health."""
    if health is None:
        return None
    return _HEALTH.get(health, Severity.ERROR)


def _at_least(value: float | None, warn: float, crit: float) -> Severity | None:
    if value is None:
        return None
    return Severity.CRITICAL if value >= crit else Severity.WARNING if value >= warn else Severity.OK


def hbm_budget(engines: Sequence["EngineView"], t: Thresholds) -> float:
    """The memory budget the cards are judged against: the largest gpu_memory_utilization of the
    engines whose profile is known, else hbm_budget. One host usually serves one engine; which
    cards each engine holds is not known here, so the largest budget stands for all of them."""
    known = [e.hbm_budget for e in engines if e.hbm_budget]
    return max(known) if known else t.hbm_budget


def hbm_limits(budget: float, t: Thresholds) -> tuple[float, float]:
    """HBM used % at which a card turns warning and critical, for an engine budget (a fraction)."""
    free = 100.0 * (1.0 - budget)
    return 100.0 - free * (1.0 - t.hbm_headroom_warn), 100.0 - free * (1.0 - t.hbm_headroom_crit)


def device_levels(d: DeviceSample, t: Thresholds, budget: float | None = None) -> dict[str, Severity | None]:
    """Levels of a chip's judged figures, by DeviceSample field (`mem_pct` is HBM used, judged
    against the engine's memory budget: see thresholds.yaml)."""
    return {
        "health": health_level(d.health),
        "mem_pct": _at_least(d.mem_pct, *hbm_limits(t.hbm_budget if budget is None else budget, t)),
        "mem_bw_pct": _at_least(d.mem_bw_pct, t.warn_pct, t.hbm_bw_pct),
        "temp_c": _at_least(d.temp_c, t.temp_warn_c, t.temp_crit_c),
    }


def pending_limit(e: "EngineView", t: Thresholds) -> float:
    """The pending-requests threshold of one engine: its run's profile's own, else the global."""
    return t.pending_requests if e.pending_threshold is None else e.pending_threshold


def engine_levels(e: "EngineView", t: Thresholds) -> dict[str, Severity | None]:
    """Levels of an engine's judged figures: `waiting` (more than its pending limit), `kv_usage`
    (against warn_pct and kv_usage_pct) and `preemptions_in_window` (any at all)."""
    preempted = e.rates.preemptions_in_window
    return {
        "waiting": None if e.waiting is None else Severity.WARNING if e.waiting > pending_limit(e, t) else Severity.OK,
        "kv_usage": _at_least(None if e.kv.usage is None else 100.0 * e.kv.usage, t.warn_pct, t.kv_usage_pct),
        "preemptions_in_window": None if preempted is None else Severity.WARNING if preempted > 0 else Severity.OK,
    }


__all__ = [
    "Thresholds",
    "device_levels",
    "engine_levels",
    "hbm_budget",
    "hbm_limits",
    "health_level",
    "load_thresholds",
    "pending_limit",
    "profile_thresholds",
]
