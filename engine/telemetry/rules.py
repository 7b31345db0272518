"""Threshold rules for the diagnostics table. The numbers are data (thresholds.yaml); each rule
turns a snapshot's figures into a row with a cause and the fix to apply."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from engine.data import load_yaml
from engine.devices.sample import DeviceSample
from engine.errors import BadInput
from engine.telemetry.snapshot import Diagnostic, EngineView


def default_thresholds() -> dict[str, float]:
    return {k: float(v) for k, v in load_yaml("engine.telemetry", "thresholds.yaml").items()}


def profile_thresholds(profile: Any) -> dict[str, float]:
    """The `diagnostics` section of a serving profile (engine.profiles.Profile) as thresholds."""
    d = profile.diagnostics
    return {
        "pending_requests": float(d.pending_threshold),
        "kv_usage_pct": float(d.kv_usage_warn) * 100,
        "hbm_bw_pct": float(d.hbm_bandwidth_warn_pct),
        "temp_warn_c": float(d.temperature_warn_c),
    }


def load_thresholds(path: str | Path | None = None, overrides: Sequence[str] = (),
                    base: Mapping[str, float] | None = None) -> dict[str, float]:
    """Defaults, then `base` (a profile's), then a YAML file of some keys, then `key=value`
    overrides. Unknown keys and non-numbers are rejected with the list of valid keys."""
    values = default_thresholds()
    values.update(base or {})
    updates: list[tuple[str, Any, str]] = []
    if path is not None:
        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise BadInput(f"cannot read thresholds file {path}: {exc.strerror}", "check the path") from exc
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{path}:{mark.line + 1}" if mark else str(path)
            raise BadInput(f"{where}: not valid YAML", "fix the YAML syntax at that line") from exc
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise BadInput(f"{path}: expected a mapping of threshold names to numbers", "write `key: number` lines")
        updates += [(str(k), v, str(path)) for k, v in data.items()]
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise BadInput(f"--set {item!r} is not key=value", "write e.g. --set pending_requests=32")
        updates.append((key.strip(), value.strip(), "--set"))
    for key, value, origin in updates:
        if key not in values:
            raise BadInput(f"{origin}: unknown threshold {key!r}", f"valid keys: {', '.join(sorted(values))}")
        try:
            values[key] = float(value)
        except (TypeError, ValueError):
            raise BadInput(f"{origin}: threshold {key} must be a number, got {value!r}", f"write {key}: <number>")
    return values


@dataclass
class RuleEngine:
    """Evaluates the rules each tick; remembers since when a 'sustained' condition holds."""

    thresholds: Mapping[str, float]
    _since: dict[tuple[str, str], float] = field(default_factory=dict)

    def _sustained(self, rule: str, subject: str, active: bool, now: float, needed: float) -> float | None:
        """The start time of a condition held for `needed` seconds, else None."""
        key = (rule, subject)
        if not active:
            self._since.pop(key, None)
            return None
        start = self._since.setdefault(key, now)
        return start if now - start >= needed else None

    def evaluate(self, now: float, devices: Sequence[DeviceSample], engines: Sequence[EngineView]) -> list[Diagnostic]:
        t = self.thresholds
        out: list[Diagnostic] = []
        for d in devices:
            if d.health is not None and d.health != "OK":
                out.append(Diagnostic(
                    "device-health", "critical" if d.health in ("Critical", "Alarm") else "error", d.key,
                    f"{d.key} health is {d.health}",
                    f"npu-smi reports {d.key} ({d.name}) as {d.health}"
                    + (f" with error codes {' '.join(d.error_codes)}" if d.error_codes else ""),
                    f"run `npu-smi info -t health -i <npu>` for the error codes, then drain this device "
                    "and check `dmesg` / the device plog before serving on it",
                ))
            bw_high = d.mem_bw_pct is not None and d.mem_bw_pct > t["hbm_bw_pct"]
            since = self._sustained("hbm-bandwidth", d.key, bw_high, now, t["hbm_bw_sustain_s"])
            if since is not None:
                out.append(Diagnostic(
                    "hbm-bandwidth", "warning", d.key,
                    f"{d.key} HBM bandwidth above {t['hbm_bw_pct']:g}%",
                    f"HBM bandwidth has stayed at {d.mem_bw_pct:g}% for {now - since:.0f} s: decode is "
                    "memory-bound, more concurrency will not raise throughput",
                    "lower max_num_seqs, or quantise the KV cache / weights (w8a8) to move fewer bytes per token",
                    since=since,
                ))
        for e in engines:
            if not e.status.ok:
                out.append(Diagnostic(
                    "engine-unreachable", "critical", e.label, f"{e.label} unreachable",
                    e.status.error or f"{e.url}/metrics did not answer",
                    e.status.fix or "check the engine process and its log (`ascendctl triage <run>/engine.log`)",
                    since=e.status.last_ok,
                ))
                continue
            limit = e.pending_threshold if e.pending_threshold is not None else t["pending_requests"]
            pending = e.waiting is not None and e.waiting > limit
            since = self._sustained("pending", e.label, pending, now, t["pending_sustain_s"])
            if since is not None:
                out.append(Diagnostic(
                    "pending-high", "warning", e.label,
                    f"{e.label}: {e.waiting:g} requests pending",
                    f"more than {limit:g} requests have waited for {now - since:.0f} s: "
                    "the engine is at capacity",
                    "add replicas, or raise max_num_seqs if the KV pool has room (see the KV gauge)",
                    since=since,
                ))
            usage_pct = None if e.kv.usage is None else 100.0 * e.kv.usage
            rising = (e.rates.preemptions_in_window or 0) > 0
            if usage_pct is not None and usage_pct > t["kv_usage_pct"] and rising:
                out.append(Diagnostic(
                    "kv-pressure", "error", e.label,
                    f"{e.label}: KV cache {usage_pct:.0f}% full and preempting",
                    f"the KV pool is {usage_pct:.0f}% used and {e.rates.preemptions_in_window:g} requests were "
                    f"preempted in the last {t['window_s']:g} s (recomputed from scratch)",
                    "lower max_num_seqs or max_model_len, raise gpu_memory_utilization, or add devices (TP)",
                ))
        return out
