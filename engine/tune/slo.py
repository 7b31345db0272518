"""The targets of a capacity search: `--slo ttft_p99=500ms,itl_p99=50ms,e2el_p99=8s`.

Names are bench's SLO names (engine/bench/scenario.py, SLOS) with or without their unit suffix,
plus vLLM's `e2el` for end-to-end latency; latency targets are durations (`500ms`, `0.5s`, `2s`,
a bare number is milliseconds). Only targets that judge the server at a given load make sense here:
throughput minimums and drain times follow the load offered, so they are not search targets."""

from __future__ import annotations

import math
import re
from typing import Iterable, Mapping

from engine.bench.scenario import SLOS
from engine.errors import BadInput
from engine.i18n import Msg, _

# Targets a capacity search can hold the server to (bench's names).
SEARCHABLE = (
    "ttft_p99_ms",
    "itl_p99_ms",
    "e2e_p99_ms",
    "ttft_mean_ms",
    "itl_mean_ms",
    "tpot_mean_ms",
    "e2e_mean_ms",
    "error_rate",
    "goodput_share",
)
DEFAULT_ERROR_RATE = 0.01  # a load at which more than 1% of requests fail is not carried
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*(ms|s|us)?\s*$", re.IGNORECASE)
_FACTOR = {"ms": 1.0, "s": 1000.0, "us": 0.001, None: 1.0}


def canonical(name: str) -> str | None:
    """`ttft_p99` / `ttft_p99_ms` / `e2el_p99` -> `ttft_p99_ms` / `e2e_p99_ms`; None if unknown."""
    key = name.strip().lower().replace("-", "_").replace("e2el", "e2e")
    for cand in (key, f"{key}_ms"):
        if cand in SEARCHABLE:
            return cand
    return None


def short_name(key: str) -> str:
    """bench's name without the unit: what `--slo` takes and what the report prints."""
    return key[:-3] if key.endswith("_ms") else key


def parse_duration_ms(text: str) -> float | None:
    m = _DURATION.match(text)
    if not m:
        return None
    value = float(m.group(1)) * _FACTOR[(m.group(2) or "").lower() or None]
    return value if math.isfinite(value) else None


def parse_slo(items: Iterable[str]) -> dict[str, float]:
    """`--slo` values (comma-separated pairs, the flag repeatable) -> {bench SLO name: target}.
    Raises BadInput naming the first bad pair."""
    known = ", ".join(short_name(k) for k in SEARCHABLE)
    out: dict[str, float] = {}
    for item in items:
        for pair in item.split(","):
            if not pair.strip():
                continue
            name, eq, value = pair.partition("=")
            key = canonical(name)
            if key is None:
                raise BadInput(
                    _("unknown SLO {name} in --slo").format(name=repr(name.strip())),
                    _("use NAME=TARGET with NAME one of {known}, e.g. --slo ttft_p99=500ms,itl_p99=50ms").format(
                        known=known
                    ),
                )
            if not eq or not value.strip():
                raise BadInput(
                    _("--slo {pair} has no target").format(pair=repr(pair.strip())),
                    _("give one, e.g. --slo {name}=500ms").format(name=short_name(key)),
                )
            unit = SLOS[key][0]
            if unit == "ms":
                target = parse_duration_ms(value)
                if target is None or target <= 0:
                    raise BadInput(
                        _("--slo {pair}: {value} is not a duration").format(
                            pair=pair.strip(), value=repr(value.strip())
                        ),
                        _("give a positive time such as 500ms, 0.5s or 2s: --slo {name}=500ms").format(
                            name=short_name(key)
                        ),
                    )
            else:
                try:
                    target = float(value.strip().rstrip("%")) / (100 if value.strip().endswith("%") else 1)
                except ValueError:
                    target = math.nan
                if not math.isfinite(target) or not 0 <= target <= 1:
                    raise BadInput(
                        _("--slo {pair}: {value} is not a share between 0 and 1").format(
                            pair=pair.strip(), value=repr(value.strip())
                        ),
                        _("give e.g. --slo {name}=0.01 (or 1%)").format(name=short_name(key)),
                    )
            out[key] = target
    if not out and list(items):
        raise BadInput(_("--slo given without targets"), _("e.g. --slo ttft_p99=500ms,itl_p99=50ms"))
    return out


def search_targets(given: Mapping[str, float], scenario_slo: Mapping[str, float]) -> tuple[dict[str, float], list[str]]:
    """The targets to hold: `--slo` when given, else the scenario's own (those a search can use),
    and an error-rate ceiling unless one is set. Returns them and notes on what was left out."""
    notes: list[str] = []
    if given:
        targets = dict(given)
    else:
        targets = {k: v for k, v in scenario_slo.items() if k in SEARCHABLE}
        dropped = sorted(set(scenario_slo) - set(targets))
        if dropped:
            notes.append(
                Msg(
                    "the scenario's {names} follow the load offered, not the server's limit: not searched on",
                    names=", ".join(dropped),
                )
            )
    if not any(k != "error_rate" for k in targets):
        raise BadInput(
            _("no latency target to search against"),
            _("give --slo, e.g. --slo ttft_p99=500ms,itl_p99=50ms (or a scenario with `slo:` latency targets)"),
        )
    targets.setdefault("error_rate", DEFAULT_ERROR_RATE)
    return targets, notes


def goodput_targets(targets: Mapping[str, float], scenario_goodput: Mapping[str, float]) -> dict[str, float]:
    """Per-request targets for goodput at the capacity: the scenario's `goodput:`, else the
    latency targets read per request (ttft, tpot from itl / tpot, e2el), vLLM's names."""
    if scenario_goodput:
        return dict(scenario_goodput)
    out: dict[str, float] = {}
    for key, name in (("ttft", "ttft"), ("itl", "tpot"), ("tpot", "tpot"), ("e2e", "e2el")):
        for stat in ("p99", "mean"):
            value = targets.get(f"{key}_{stat}_ms")
            if value is not None and name not in out:
                out[name] = value
    return out
