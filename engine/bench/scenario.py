"""Bench scenarios: YAML data (built-ins ship beside this file), validated with file:line errors.

A scenario is a list of phases run one after the other. A phase holds either a `concurrency`
(closed loop: that many requests always in flight) or a `rate` (open loop: requests per second,
Poisson or evenly spaced, optionally capped by `max_concurrency`). Prompt lengths are drawn from a
distribution in tokens; every request asks for `max_tokens`; SLOs turn the figures into a verdict.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Iterable, Mapping

import yaml

from engine.bench.workload import MOONCAKE_BLOCK_TOKENS, Prefix, Trace, load_trace
from engine.errors import BadInput
from engine.i18n import Msg
from engine.yamlfile import Problem, YamlInvalid, duplicate_keys, line_of, load, quote

APIS = ("completions", "chat")
DISTS = ("fixed", "uniform", "normal")
ARRIVALS = ("poisson", "uniform")
# SLO name -> (unit, direction). "max": the measured value must not exceed the target.
SLOS: Mapping[str, tuple[str, str]] = {
    "ttft_p99_ms": ("ms", "max"),
    "itl_p99_ms": ("ms", "max"),
    "e2e_p99_ms": ("ms", "max"),
    # means: what a user feels on average, where a p99 judges the tail
    "ttft_mean_ms": ("ms", "max"),
    "itl_mean_ms": ("ms", "max"),
    "tpot_mean_ms": ("ms", "max"),
    "e2e_mean_ms": ("ms", "max"),
    "error_rate": ("", "max"),
    "output_tokens_per_s": ("tok/s", "min"),
    "queue_drain_s": ("s", "max"),
    # time after the burst until the KV cache is back to its level before it (needs drain_after)
    "kv_drain_s": ("s", "max"),
    # share of finished requests meeting every per-request target of `goodput:`
    "goodput_share": ("", "min"),
}
# Per-request targets in milliseconds, under the names of `vllm bench serve --goodput`.
GOODPUT_KEYS = ("ttft", "tpot", "e2el")
# What one load generator can sensibly offer one server. Past these a figure is a typo or a
# runaway --scale (1e9 grew a run to 24 GB in a minute): refused before anything is sent.
MAX_CONCURRENCY = 4096  # requests in flight (concurrency, max_concurrency)
MAX_RATE = 5000.0  # requests/s of a rate phase
MAX_TOKENS = 1_048_576  # prompt or answer length: the longest contexts served today
MAX_PHASE_S = 7 * 86400.0  # one phase: a week-long soak, not more
MAX_SCALE = 1000.0

# Tokens kept free of the prompt budget for the per-request tag and, with the chat API, the
# chat template's own tokens.
_RESERVE = {"completions": 16, "chat": 48}


@dataclass(frozen=True)
class Phase:
    name: str
    duration_s: float
    concurrency: int | None = None
    rate: float | None = None
    arrival: str = "poisson"
    max_concurrency: int | None = None

    @property
    def load(self) -> str:
        if self.concurrency is not None:
            return Msg("{n} concurrent", n=self.concurrency)
        if self.max_concurrency:
            return Msg(
                "{rate} req/s {arrival}, at most {n} in flight",
                rate=f"{self.rate:g}",
                arrival=self.arrival,
                n=self.max_concurrency,
            )
        return Msg("{rate} req/s {arrival}", rate=f"{self.rate:g}", arrival=self.arrival)


@dataclass(frozen=True)
class LengthDist:
    """Prompt length in tokens. `fixed` uses `mean`; `normal` is clipped to [min, max]."""

    dist: str
    mean: float
    min: int
    max: int
    stddev: float = 0.0

    def describe(self) -> str:
        if self.dist == "fixed":
            return Msg("{n} tokens", n=f"{self.mean:g}")
        if self.dist == "uniform":
            return Msg("{low}-{high} tokens, uniform", low=self.min, high=self.max)
        return Msg(
            "~{mean} tokens (sd {sd}, {low}-{high})",
            mean=f"{self.mean:g}",
            sd=f"{self.stddev:g}",
            low=self.min,
            high=self.max,
        )


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    api: str
    phases: tuple[Phase, ...]
    prompt_tokens: LengthDist
    max_tokens: int
    slo: Mapping[str, float] = field(default_factory=dict)
    goodput: Mapping[str, float] = field(default_factory=dict)  # per-request targets (ms), GOODPUT_KEYS
    drain_after: str | None = None  # phase after which the pending-queue drain time is measured
    ignore_eos: bool = True  # every answer runs to max_tokens, so the load is what it says
    max_requests: int | None = None  # stop issuing after this many (comparisons with other tools)
    request_timeout_s: float = 600.0
    seed: int = 0
    source: str = ""  # built-in name or file path, for messages
    prefix: Prefix | None = None  # a shared prefix that the engine's prefix cache can reuse
    trace: Trace | None = None  # requests replayed from a trace file instead of drawn

    @property
    def duration_s(self) -> float:
        return sum(p.duration_s for p in self.phases)


# ---------------------------------------------------------------- loading with line numbers


class _Problems:
    """Collects every problem of a file, so the user fixes them in one go."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.items: list[Problem] = []

    def add(self, where: Mapping[str, Any] | None, key: str, message: str) -> None:
        self.items.append(Problem(self.source, line_of(where, key), key, message))

    def raise_if_any(self) -> None:
        if self.items:
            more = (
                f" (and {len(self.items) - 1} more: {'; '.join(map(str, self.items[1:]))})"
                if len(self.items) > 1
                else ""
            )
            raise BadInput(
                f"bad scenario {self.items[0]}{more}",
                "fix the scenario file; the built-in ones are shown by `ascendctl bench --scenario long-doc --print-scenario`",
            )


def _number(
    p: _Problems,
    m: Mapping[str, Any],
    key: str,
    *,
    integer: bool = False,
    low: float = 0.0,
    strict: bool = True,
    required: bool = True,
    high: float | None = None,
) -> float | None:
    if key not in m or m[key] is None:
        if required:
            p.add(m, key, "missing")
        return None
    v = m[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
        p.add(m, key, f"must be a number, got {quote(v)}")
        return None
    if integer and not float(v).is_integer():
        p.add(m, key, f"must be a whole number, got {quote(v)}")
        return None
    if (strict and v <= low) or (not strict and v < low):
        p.add(m, key, f"must be {'>' if strict else '>='} {low:g}, got {quote(v)}")
        return None
    if high is not None and v > high:
        p.add(m, key, f"must be <= {int(high) if float(high).is_integer() else high}, got {quote(v)}")
        return None
    return int(v) if integer else float(v)


def _targets(p: _Problems, data: Mapping[str, Any], key: str, known: Collection[str], what: str) -> dict[str, float]:
    """A section mapping known names to non-negative numbers (`slo`, `goodput`); problems go to `p`."""
    raw = data.get(key) or {}
    out: dict[str, float] = {}
    if not isinstance(raw, dict):
        p.add(data, key, f"must be a mapping of {what}")
        return out
    _unknown_keys(p, raw, known, key)
    for name in raw:
        if name in known:
            v = _number(p, raw, name, low=0, strict=False)
            if v is not None:
                out[name] = v
    return out


def _unknown_keys(p: _Problems, m: Mapping[str, Any], allowed: Iterable[str], what: str) -> None:
    allowed = set(allowed)
    for key in m:
        if key not in allowed:
            p.add(m, str(key), f"unknown key in {what} (known: {', '.join(sorted(allowed))})")


def _parse_phase(p: _Problems, raw: Any, index: int, line: int | None) -> Phase | None:
    if not isinstance(raw, dict):
        p.items.append(
            Problem(p.source, line, f"phases[{index}]", "must be a mapping with duration_s and concurrency or rate")
        )
        return None
    _unknown_keys(p, raw, ("name", "duration_s", "concurrency", "rate", "arrival", "max_concurrency"), "a phase")
    duration = _number(p, raw, "duration_s", high=MAX_PHASE_S)
    has_c, has_r = raw.get("concurrency") is not None, raw.get("rate") is not None
    if has_c == has_r:
        p.add(
            raw, "concurrency", "a phase needs exactly one of `concurrency` (requests in flight) or `rate` (requests/s)"
        )
        return None
    concurrency = _number(p, raw, "concurrency", integer=True, high=MAX_CONCURRENCY) if has_c else None
    rate = _number(p, raw, "rate", high=MAX_RATE) if has_r else None
    arrival = raw.get("arrival", "poisson")
    if arrival not in ARRIVALS:
        p.add(raw, "arrival", f"must be one of {', '.join(ARRIVALS)}, got {quote(arrival)}")
    cap = _number(p, raw, "max_concurrency", integer=True, required=False, high=MAX_CONCURRENCY)
    if has_c and cap is not None:
        p.add(raw, "max_concurrency", "only applies to a `rate` phase")
    name = str(raw.get("name") or f"phase{index + 1}")
    if duration is None or (concurrency is None and rate is None):
        return None
    return Phase(
        name,
        duration,
        concurrency,
        rate,
        arrival if arrival in ARRIVALS else "poisson",
        int(cap) if cap is not None else None,
    )


def _parse_lengths(p: _Problems, raw: Any, where: Mapping[str, Any]) -> LengthDist | None:
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        if not 1 <= raw <= MAX_TOKENS:  # also refuses NaN
            p.add(where, "prompt_tokens", f"must be between 1 and {MAX_TOKENS}, got {quote(raw)}")
            return None
        return LengthDist("fixed", float(raw), int(raw), int(raw))
    if not isinstance(raw, dict):
        p.add(where, "prompt_tokens", "must be a number of tokens or a mapping with `dist`")
        return None
    _unknown_keys(p, raw, ("dist", "mean", "min", "max", "stddev"), "prompt_tokens")
    dist = raw.get("dist", "fixed")
    if dist not in DISTS:
        p.add(raw, "dist", f"must be one of {', '.join(DISTS)}, got {quote(dist)}")
        return None
    if dist == "fixed":
        mean = _number(p, raw, "mean", integer=True, low=1, strict=False, high=MAX_TOKENS)
        return None if mean is None else LengthDist("fixed", float(mean), int(mean), int(mean))
    lo = _number(p, raw, "min", integer=True, low=1, strict=False, high=MAX_TOKENS)
    hi = _number(p, raw, "max", integer=True, low=1, strict=False, high=MAX_TOKENS)
    if lo is None or hi is None:
        return None
    if lo > hi:
        p.add(raw, "min", f"min ({lo}) is above max ({hi})")
        return None
    if dist == "uniform":
        return LengthDist("uniform", (lo + hi) / 2, int(lo), int(hi))
    mean = _number(p, raw, "mean", low=1, strict=False, high=MAX_TOKENS)
    sd = _number(p, raw, "stddev", low=0, strict=False, high=MAX_TOKENS)
    if mean is None or sd is None:
        return None
    return LengthDist("normal", mean, int(lo), int(hi), sd)


def parse_scenario(data: Any, source: str) -> Scenario:
    """Validate a loaded YAML document. Raises BadInput listing every problem with its line."""
    p = _Problems(source)
    if not isinstance(data, dict):
        raise BadInput(
            f"bad scenario {source}: the file must hold a YAML mapping (name, phases, ...)",
            "start from a built-in: `ascendctl bench --scenario chat-qa --print-scenario > my.yaml`",
        )
    p.items.extend(duplicate_keys(data, source))
    _unknown_keys(
        p,
        data,
        (
            "name",
            "description",
            "api",
            "phases",
            "prompt_tokens",
            "max_tokens",
            "slo",
            "goodput",
            "drain_after",
            "ignore_eos",
            "max_requests",
            "request_timeout_s",
            "seed",
            "prefix",
            "trace",
        ),
        "a scenario",
    )
    trace = _parse_trace(p, data, source)
    api = data.get("api", "completions")
    if api not in APIS:
        p.add(data, "api", f"must be one of {', '.join(APIS)}, got {quote(api)}")
    raw_phases = data.get("phases")
    phases: list[Phase] = []
    if trace is not None and raw_phases is None:
        # A replay as recorded: one phase, the trace's own arrival times.
        phases.append(Phase("replay", trace.span_s, rate=trace.natural_rate, arrival="trace"))
    elif trace is not None:
        p.add(data, "phases", "a trace sets the arrivals itself: leave out `phases` (tune capacity changes its pace)")
    elif not isinstance(raw_phases, list) or not raw_phases:
        p.add(data, "phases", "missing or empty: give a list of phases with duration_s and concurrency or rate")
    else:
        for i, raw in enumerate(raw_phases):
            ph = _parse_phase(p, raw, i, line_of(raw_phases, i))
            if ph is not None:
                phases.append(ph)
        names = [ph.name for ph in phases]
        if len(set(names)) != len(names):
            p.add(data, "phases", f"phase names must be unique, got {quote(names)}")
    lengths = _parse_lengths(p, data.get("prompt_tokens"), data) if "prompt_tokens" in data else None
    if trace is not None:
        for key in ("prompt_tokens", "max_tokens"):
            if key in data:
                p.add(data, key, "a trace gives each request's lengths: leave it out")
        ins = [e.input_tokens for e in trace.entries]
        lengths = LengthDist("uniform", sum(ins) / len(ins), min(ins), max(ins))
        max_tokens: float | None = max(e.output_tokens for e in trace.entries)
    else:
        if "prompt_tokens" not in data:
            p.add(data, "prompt_tokens", "missing: the prompt length in tokens (a number or a distribution)")
        max_tokens = _number(p, data, "max_tokens", integer=True, high=MAX_TOKENS)
    prefix = _parse_prefix(p, data)
    raw_slo = data.get("slo") or {}
    slo = _targets(p, data, "slo", SLOS, "SLO name to target")
    raw_goodput = data.get("goodput") or {}
    goodput = _targets(p, data, "goodput", GOODPUT_KEYS, "ttft / tpot / e2el to milliseconds")
    if "goodput_share" in slo and not raw_goodput and isinstance(raw_slo, dict):
        p.add(raw_slo, "goodput_share", "needs `goodput:` targets (ttft / tpot / e2el in ms) to count requests against")
    drain_after = data.get("drain_after")
    if drain_after is not None and drain_after not in [ph.name for ph in phases]:
        p.add(data, "drain_after", f"names no phase (phases: {', '.join(ph.name for ph in phases)})")
    for key in ("queue_drain_s", "kv_drain_s"):
        if key in slo and drain_after is None:
            p.add(raw_slo, key, "needs `drain_after: PHASE` to know when the burst ends")
    ignore_eos = data.get("ignore_eos", True)
    if not isinstance(ignore_eos, bool):
        p.add(data, "ignore_eos", f"must be true or false, got {quote(ignore_eos)}")
    max_requests = _number(p, data, "max_requests", integer=True, required=False)
    timeout = _number(p, data, "request_timeout_s", required=False)
    seed = _number(p, data, "seed", integer=True, low=0, strict=False, required=False)
    p.raise_if_any()
    assert lengths is not None and max_tokens is not None
    return Scenario(
        name=str(data.get("name") or Path(source).stem),
        description=str(data.get("description") or ""),
        api=api,
        phases=tuple(phases),
        prompt_tokens=lengths,
        max_tokens=int(max_tokens),
        slo=slo,
        goodput=goodput,
        drain_after=drain_after,
        ignore_eos=bool(ignore_eos),
        max_requests=int(max_requests) if max_requests is not None else None,
        request_timeout_s=timeout if timeout is not None else 600.0,
        seed=int(seed) if seed is not None else 0,
        source=source,
        prefix=prefix,
        trace=trace,
    )


def _parse_prefix(p: _Problems, data: Mapping[str, Any]) -> Prefix | None:
    """`prefix: {share: 0.6, tokens: 1024, count: 1}`."""
    raw = data.get("prefix")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        p.add(data, "prefix", "must be a mapping: {share: 0.6, tokens: 1024} (count: N prefixes, default 1)")
        return None
    _unknown_keys(p, raw, ("share", "tokens", "count"), "prefix")
    share = _number(p, raw, "share", low=0, strict=False, high=1.0)
    tokens = _number(p, raw, "tokens", integer=True, high=MAX_TOKENS)
    count = _number(p, raw, "count", integer=True, required=False, high=10_000)
    if share is None or tokens is None:
        return None
    return Prefix(float(share), int(tokens), int(count) if count else 1)


def _parse_trace(p: _Problems, data: Mapping[str, Any], source: str) -> Trace | None:
    """`trace: FILE.jsonl` (relative to the scenario file), or `{file: ..., block_tokens: 512}`."""
    raw = data.get("trace")
    if raw is None:
        return None
    block = MOONCAKE_BLOCK_TOKENS
    if isinstance(raw, dict):
        _unknown_keys(p, raw, ("file", "block_tokens"), "trace")
        b = _number(p, raw, "block_tokens", integer=True, required=False, high=MAX_TOKENS)
        block = int(b) if b else block
        raw = raw.get("file")
    if not isinstance(raw, str) or not raw:
        p.add(data, "trace", "must name a JSONL trace file (Mooncake format), e.g. trace: conversations.jsonl")
        return None
    path = Path(raw).expanduser()
    if not path.is_absolute() and source and Path(source).parent != Path(""):
        path = Path(source).parent / path
    try:
        return load_trace(path, block)
    except BadInput as exc:
        p.add(data, "trace", exc.cause)
        return None


def parse_goodput(pairs: Iterable[str]) -> dict[str, float]:
    """`ttft:300 tpot:50 e2el:8000`, the syntax of `vllm bench serve --goodput` (milliseconds);
    commas also separate pairs. Raises BadInput naming the bad pair."""
    out: dict[str, float] = {}
    fix = "give KEY:MS pairs, KEY one of ttft, tpot, e2el, e.g. --goodput ttft:300 tpot:50 e2el:8000"
    for item in pairs:
        for pair in item.replace(",", " ").split():
            key, sep, value = pair.partition(":")
            try:
                ms = float(value) if sep else math.nan
            except ValueError:
                ms = math.nan
            if key not in GOODPUT_KEYS or not math.isfinite(ms) or ms < 0:
                raise BadInput(f"bad --goodput target {pair!r}", fix)
            out[key] = ms
    if not out:
        raise BadInput("--goodput given without targets", fix)
    return out


def _builtin_dir() -> importlib.resources.abc.Traversable:
    return importlib.resources.files("engine.bench") / "scenarios"


def list_scenarios() -> list[str]:
    """Names of the built-in scenarios."""
    return sorted(f.name[: -len(".yaml")] for f in _builtin_dir().iterdir() if f.name.endswith(".yaml"))


def scenario_text(name_or_path: str) -> tuple[str, str]:
    """The YAML text of a built-in scenario or a file, and the name to show in messages."""
    if name_or_path in list_scenarios():
        return (_builtin_dir() / f"{name_or_path}.yaml").read_text(encoding="utf-8"), name_or_path
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        raise BadInput(
            f"unknown scenario {name_or_path!r}",
            f"use one of {', '.join(list_scenarios())}, or a path to a scenario FILE.yaml",
        )
    try:
        return path.read_text(encoding="utf-8"), str(path)
    except FileNotFoundError:
        raise BadInput(
            f"scenario file {path} does not exist", f"check the path, or use a built-in: {', '.join(list_scenarios())}"
        ) from None
    except IsADirectoryError:
        raise BadInput(f"scenario {path} is a directory", "give a scenario FILE.yaml") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read scenario {path}: {exc}", "give a readable UTF-8 YAML file") from None


def load_scenario(name_or_path: str) -> Scenario:
    """A built-in scenario by name (`long-doc`, `chat-qa`, `burst`) or a YAML file."""
    text, source = scenario_text(name_or_path)
    try:
        data = load(text, source)
    except YamlInvalid as exc:
        raise BadInput(f"bad scenario {exc.problem}", exc.fix) from None
    return parse_scenario(data, source)


# ---------------------------------------------------------------- reshaping


def scaled(sc: Scenario, factor: float) -> Scenario:
    """Grow or shrink everything: concurrency, rate, phase durations, prompt and answer lengths.

    The output-token-rate SLO follows the offered load (load factor x answer-length factor)."""
    if factor <= 0 or not math.isfinite(factor):
        raise BadInput(f"--scale must be a positive number, got {factor}", "use e.g. --scale 0.25 or --scale 2")
    if factor > MAX_SCALE:
        raise BadInput(f"--scale {factor:g} is above the limit of {MAX_SCALE:g}", "use e.g. --scale 0.25 or --scale 2")
    if factor == 1:
        return sc
    phases = tuple(
        dataclasses.replace(
            ph,
            duration_s=max(1.0, ph.duration_s * factor),
            concurrency=max(1, round(ph.concurrency * factor)) if ph.concurrency is not None else None,
            rate=ph.rate * factor if ph.rate is not None else None,
            max_concurrency=max(1, round(ph.max_concurrency * factor)) if ph.max_concurrency else None,
        )
        for ph in sc.phases
    )
    d = sc.prompt_tokens
    lo, hi = max(1, round(d.min * factor)), max(1, round(d.max * factor))
    lengths = LengthDist(d.dist, max(1.0, d.mean * factor), lo, max(lo, hi), d.stddev * factor)
    max_tokens = max(1, round(sc.max_tokens * factor))
    slo = dict(sc.slo)
    if "output_tokens_per_s" in slo:
        slo["output_tokens_per_s"] *= _load_ratio(sc.phases, phases) * max_tokens / sc.max_tokens
    out = dataclasses.replace(sc, phases=phases, prompt_tokens=lengths, max_tokens=max_tokens, slo=slo)
    _check_limits(out, f"--scale {factor:g}")
    # The description names the loads it was written for ("16 concurrent"): say what runs now.
    loads = Msg.join("; ", (Msg("{name} {load}", name=ph.name, load=ph.load) for ph in phases))
    what = Msg(
        "Scaled x{factor}: {loads}; prompts {lengths}, {tokens}-token answers.",
        factor=f"{factor:g}",
        loads=loads,
        lengths=lengths.describe(),
        tokens=max_tokens,
    )
    if sc.description:
        # a built-in scenario's description is in the catalogue (babel.cfg): shown translated
        what = Msg("{what} (from: {description})", what=what, description=Msg(sc.description))
    return dataclasses.replace(out, description=what)


def _check_limits(sc: Scenario, cause: str) -> None:
    """Refuse a reshaped scenario whose figures pass the limits a scenario file is held to."""
    over = []
    for ph in sc.phases:
        if ph.concurrency is not None and ph.concurrency > MAX_CONCURRENCY:
            over.append(f"phase {ph.name}: {ph.concurrency} concurrent (at most {MAX_CONCURRENCY})")
        if ph.max_concurrency is not None and ph.max_concurrency > MAX_CONCURRENCY:
            over.append(f"phase {ph.name}: max_concurrency {ph.max_concurrency} (at most {MAX_CONCURRENCY})")
        if ph.rate is not None and ph.rate > MAX_RATE:
            over.append(f"phase {ph.name}: {ph.rate:g} req/s (at most {MAX_RATE:g})")
        if ph.duration_s > MAX_PHASE_S:
            over.append(f"phase {ph.name}: {ph.duration_s:g} s (at most {MAX_PHASE_S:g})")
    if sc.prompt_tokens.max > MAX_TOKENS:
        over.append(f"prompts of up to {sc.prompt_tokens.max} tokens (at most {MAX_TOKENS})")
    if sc.max_tokens > MAX_TOKENS:
        over.append(f"max_tokens {sc.max_tokens} (at most {MAX_TOKENS})")
    if over:
        raise BadInput(
            f"{cause} makes {sc.name} too large: {'; '.join(over[:3])}"
            + (f" (and {len(over) - 3} more)" if len(over) > 3 else ""),
            "use a smaller --scale or --duration, or edit the scenario file",
        )


def with_duration(sc: Scenario, total_s: float) -> Scenario:
    """Stretch or shrink the phases to `total_s` seconds in all, keeping their proportions."""
    if total_s <= 0 or not math.isfinite(total_s):
        raise BadInput(f"--duration must be a positive number of seconds, got {total_s}", "use e.g. --duration 60")
    k = total_s / sc.duration_s
    out = dataclasses.replace(sc, phases=tuple(dataclasses.replace(p, duration_s=p.duration_s * k) for p in sc.phases))
    _check_limits(out, f"--duration {total_s:g}")
    return out


def fit_context(sc: Scenario, max_model_len: int) -> tuple[Scenario, list[str]]:
    """Clamp answer and prompt lengths so prompt + max_tokens fits the server's context.

    Returns the scenario and one note per change (the report shows them)."""
    notes: list[str] = []
    reserve = _RESERVE[sc.api]
    max_tokens = sc.max_tokens
    if max_tokens > max_model_len // 2:
        max_tokens = max(1, max_model_len // 4)
        notes.append(f"max_tokens {sc.max_tokens} -> {max_tokens}: the server's max_model_len is {max_model_len}")
    room = max(1, max_model_len - max_tokens - reserve)
    if sc.prefix is not None and sc.prefix.tokens > 0:
        keep = min(sc.prefix.tokens, room // 2)
        if keep != sc.prefix.tokens:
            notes.append(
                f"shared prefix {sc.prefix.tokens} -> {keep} tokens: prefix + prompt + max_tokens ({max_tokens}) "
                f"must fit the server's max_model_len {max_model_len}"
            )
            sc = dataclasses.replace(sc, prefix=dataclasses.replace(sc.prefix, tokens=keep))
        room = max(1, room - keep)
    if sc.trace is not None:  # each replayed request is fitted as it is sent
        return sc, notes
    d = sc.prompt_tokens
    if d.max > room:
        lo = min(d.min, room)
        new = LengthDist(d.dist, min(d.mean, room), lo, room, d.stddev if d.dist == "normal" else 0.0)
        if d.dist == "uniform":
            # Keep a spread: shrink the range in proportion instead of piling every draw at `room`.
            lo = max(1, round(room * d.min / d.max))
            new = LengthDist("uniform", (lo + room) / 2, lo, room)
        elif d.dist == "normal":
            k = room / d.max
            new = LengthDist("normal", max(1.0, d.mean * k), max(1, round(d.min * k)), room, d.stddev * k)
        notes.append(
            f"prompt lengths {d.describe()} -> {new.describe()}: prompt + max_tokens ({max_tokens}) "
            f"must fit the server's max_model_len {max_model_len}"
        )
        d = new
    if not notes or (max_tokens == sc.max_tokens and d == sc.prompt_tokens):
        return sc, notes
    slo = dict(sc.slo)
    if "output_tokens_per_s" in slo and max_tokens != sc.max_tokens:
        slo["output_tokens_per_s"] *= max_tokens / sc.max_tokens
    return dataclasses.replace(sc, max_tokens=max_tokens, prompt_tokens=d, slo=slo), notes


def _load_ratio(before: tuple[Phase, ...], after: tuple[Phase, ...]) -> float:
    def load(ph: Phase) -> float:
        return float(ph.concurrency if ph.concurrency is not None else ph.rate or 0.0)

    old = sum(load(p) * p.duration_s for p in before)
    new = sum(load(p) * p.duration_s for p in after)
    old_t = sum(p.duration_s for p in before)
    new_t = sum(p.duration_s for p in after)
    return (new / new_t) / (old / old_t) if old and old_t and new_t else 1.0


def to_yaml(sc: Scenario) -> str:
    """The scenario as YAML that `load_scenario` reads back (after --scale, --duration, clamping)."""
    phases = []
    for ph in sc.phases:
        d: dict[str, Any] = {"name": ph.name, "duration_s": round(ph.duration_s, 3)}
        if ph.concurrency is not None:
            d["concurrency"] = ph.concurrency
        else:
            d["rate"] = round(ph.rate or 0.0, 4)
            d["arrival"] = ph.arrival
            if ph.max_concurrency:
                d["max_concurrency"] = ph.max_concurrency
        phases.append(d)
    lp = sc.prompt_tokens
    if lp.dist == "fixed":
        lengths: Any = {"dist": "fixed", "mean": int(lp.mean)}
    elif lp.dist == "uniform":
        lengths = {"dist": "uniform", "min": lp.min, "max": lp.max}
    else:
        lengths = {
            "dist": "normal",
            "mean": round(lp.mean, 2),
            "stddev": round(lp.stddev, 2),
            "min": lp.min,
            "max": lp.max,
        }
    doc: dict[str, Any] = {"name": sc.name, "description": str(sc.description), "api": sc.api, "phases": phases}
    if sc.drain_after:
        doc["drain_after"] = sc.drain_after
    doc.update(prompt_tokens=lengths, max_tokens=sc.max_tokens, ignore_eos=sc.ignore_eos)
    if sc.max_requests:
        doc["max_requests"] = sc.max_requests
    if sc.slo:
        doc["slo"] = {k: round(v, 4) for k, v in sc.slo.items()}
    if sc.goodput:
        doc["goodput"] = dict(sc.goodput)
    if sc.prefix is not None:
        doc["prefix"] = {"share": sc.prefix.share, "tokens": sc.prefix.tokens, "count": sc.prefix.count}
    if sc.trace is not None:
        doc["trace"] = {"file": sc.trace.source, "block_tokens": sc.trace.block_tokens}
        for key in ("phases", "prompt_tokens", "max_tokens"):
            doc.pop(key, None)
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
