"""Compare saved bench reports: each figure against the baseline, with whether the change is
beyond run-to-run noise.

Noise is judged with a bootstrap: the per-request samples a report keeps are resampled (with
replacement, a seeded generator, 1,000 times by default) and the figure computed again each
time, for the baseline and the other report independently; the 2.5th and 97.5th percentiles of
the differences are the 95% confidence interval of the change. A change whose interval holds 0
is within noise. Percentiles are resampled exactly and cheaply: the r-th smallest of n draws
from the samples is the sample at the position of the r-th smallest of n uniform numbers, which
follows a Beta(r, n - r + 1) law, so one resample costs two Beta draws instead of a sort.
Rates (output tokens/s, requests/s, goodput) are resampled over one-second buckets of the run,
within each phase; shares (error rate, goodput share) over requests.

Reports are read as the JSON that `bench --out` writes (plain dicts), so a report from an older
version still compares: without samples, its figures show and their noise is N/A."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from engine.bench.report import is_good
from engine.bench.stats import percentile
from engine.errors import BadInput
from engine.i18n import N_, Msg
from engine.jsonsafe import loads

RESAMPLES = 1000
CONFIDENCE = 0.95
BUCKET_S = 1.0


@dataclass(frozen=True)
class Figure:
    """One compared figure: where it sits in a report and which way is better."""

    name: str
    label: str  # marked N_(): JSON keeps the English, the table shows it translated
    unit: str
    better: str  # "lower" | "higher"


FIGURES: tuple[Figure, ...] = (
    Figure("ttft_p50_ms", "TTFT p50", "ms", "lower"),
    Figure("ttft_p90_ms", "TTFT p90", "ms", "lower"),
    Figure("ttft_p99_ms", "TTFT p99", "ms", "lower"),
    Figure("itl_p50_ms", "ITL p50", "ms", "lower"),
    Figure("itl_p99_ms", "ITL p99", "ms", "lower"),
    Figure("tpot_p50_ms", "TPOT p50", "ms", "lower"),
    Figure("tpot_p99_ms", "TPOT p99", "ms", "lower"),
    Figure("e2e_p50_ms", "E2E p50", "ms", "lower"),
    Figure("e2e_p99_ms", "E2E p99", "ms", "lower"),
    Figure("output_tokens_per_s", N_("output"), "tok/s", "higher"),
    Figure("request_rate", N_("request rate"), "req/s", "higher"),
    Figure("error_rate", N_("error rate"), "", "lower"),
    Figure("goodput_share", N_("goodput share"), "", "higher"),
    Figure("goodput_rate", N_("goodput"), "req/s", "higher"),
)


@dataclass(frozen=True)
class Change:
    report: str
    value: float | None
    change_pct: float | None  # (value - baseline) / baseline, in percent
    ci_pct: tuple[float, float] | None  # the confidence interval of that change
    beyond_noise: bool | None  # None: no samples to judge by
    verdict: str  # "better" | "worse" | "same" (within noise) | "N/A"


@dataclass(frozen=True)
class FigureRow:
    name: str
    label: str
    unit: str
    better: str
    baseline: float | None
    changes: tuple[Change, ...]


@dataclass(frozen=True)
class Comparison:
    baseline: str
    reports: tuple[str, ...]
    scenarios: tuple[str, ...]
    resamples: int
    confidence: float
    seed: int
    goodput_slo_ms: Mapping[str, float] | None  # the targets goodput was counted against (the baseline's)
    figures: tuple[FigureRow, ...]
    worse: tuple[str, ...] = ()  # "figure in report" beyond --fail-if-worse
    fail_if_worse_pct: float | None = None
    passed: bool = True  # nothing in `worse`
    notes: tuple[str, ...] = field(default_factory=tuple)


# A bench run longer than a week is not one: its one-second buckets would fill the memory.
MAX_DURATION_S = 7 * 86400.0
_SAMPLE_NUMBERS = ("sent_s", "ttft_ms", "tpot_ms", "e2e_ms", "output_tokens")


def load_report(path: Path, schema_version: int | None = None) -> dict[str, Any]:
    """A report written by `bench --out` (or `bench --json`), checked so that what the comparison
    reads is there and is a number: a damaged one is refused naming the file and field. Raises
    BadInput; so does a report of a newer schema than `schema_version` (this tool's)."""
    fix = "give JSON reports written by `ascendctl bench ... --out FILE`"
    try:
        doc = loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(f"report {path} does not exist", fix) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read report {path}: {exc}", fix) from None
    except ValueError as exc:
        raise BadInput(f"report {path} is not JSON: {exc}", fix) from None
    if not isinstance(doc, dict) or not {"scenario", "ttft_ms", "e2e_ms"} <= doc.keys():
        raise BadInput(f"{path} is not a bench report", fix)
    found = doc.get("schema_version")
    if schema_version is not None and (not _is_int(found) or found > schema_version):
        raise BadInput(
            f"{path} is a report of schema_version {found!r}; this ascendctl reads {schema_version} and older",
            "compare it with the ascendctl that wrote it (or a newer one)",
        )
    problem = _damage(doc)
    if problem:
        raise BadInput(f"{path} is a damaged bench report: {problem}", fix)
    return doc


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _damage(doc: Mapping[str, Any]) -> str | None:
    """What in the report the comparison cannot read, or None."""
    duration = doc.get("duration_s")
    if duration is not None and not (_is_number(duration) and 0 <= duration <= MAX_DURATION_S):
        return f"duration_s is {duration!r:.40}, not a number of seconds up to {MAX_DURATION_S:g}"
    for key in ("output_tokens_per_s", "request_rate", "error_rate"):
        if doc.get(key) is not None and not _is_number(doc[key]):
            return f"{key} is {doc[key]!r:.40}, not a number"
    for metric in ("ttft", "itl", "tpot", "e2e"):
        summary = doc.get(f"{metric}_ms")
        if summary is None:
            continue
        if not isinstance(summary, dict):
            return f"{metric}_ms is not a mapping of percentiles"
        for k, v in summary.items():
            if v is not None and not _is_number(v):
                return f"{metric}_ms.{k} is {v!r:.40}, not a number"
    phases = doc.get("phases")
    if phases is not None:
        if not isinstance(phases, list) or not all(isinstance(p, dict) for p in phases):
            return "phases is not a list of phases"
        for i, p in enumerate(phases):
            for k in ("start_s", "duration_s"):
                if p.get(k) is not None and not (_is_number(p[k]) and 0 <= p[k] <= MAX_DURATION_S):
                    return f"phases[{i}].{k} is {p[k]!r:.40}, not a number of seconds"
    s = doc.get("samples")
    if s is None:
        return None
    if not isinstance(s, dict):
        return "samples is not a mapping"
    if not s.get("sent_s"):
        return None  # no per-request samples: the figures show without noise verdicts
    n = len(s["sent_s"]) if isinstance(s["sent_s"], list) else -1
    for key in (*_SAMPLE_NUMBERS, "error"):
        values = s.get(key)
        if not isinstance(values, list) or len(values) != n:
            return f"samples.{key} is not a list as long as samples.sent_s ({n})"
    for key in (*_SAMPLE_NUMBERS, "itl_ms"):
        for i, x in enumerate(s.get(key) or ()):
            if x is None and key != "sent_s":
                continue
            if not _is_number(x) or x < 0:
                return f"samples.{key}[{i}] is {x!r:.40}, not a number >= 0"
    for i, e in enumerate(s["error"]):
        if e is not None and not isinstance(e, str):
            return f"samples.error[{i}] is {e!r:.40}, not an error text"
    return None


# ---------------------------------------------------------------- resampling


def _percentile_boot(values: Sequence[float], q: float, rng: random.Random, n_boot: int) -> list[float]:
    """The q-th percentile of `n_boot` bootstrap resamples of `values`, with the linear definition
    of stats.percentile, drawn through the order statistics of uniforms (see the module's text)."""
    v = sorted(values)
    n = len(v)
    pos = (n - 1) * q / 100.0
    lo = math.floor(pos)
    frac = pos - lo
    out = []
    for _ in range(n_boot):
        u = rng.betavariate(lo + 1, n - lo)  # the (lo+1)-th smallest of n uniforms
        x = v[min(n - 1, int(u * n))]
        if frac > 0 and lo + 1 < n:
            u2 = u + (1.0 - u) * rng.betavariate(1, n - lo - 1)  # the next one up
            x += (v[min(n - 1, int(u2 * n))] - x) * frac
        out.append(x)
    return out


def _mean_boot(strata: Sequence[Sequence[float]], rng: random.Random, n_boot: int, scale: float) -> list[float]:
    """sum(resampled values) * scale, each stratum resampled on its own (phases keep their sizes)."""
    out = []
    for _ in range(n_boot):
        total = 0.0
        for s in strata:
            if s:
                total += math.fsum(rng.choices(s, k=len(s)))
        out.append(total * scale)
    return out


# Past this many requests a resample of 0/1 flags is drawn as its count (see _share_boot).
_SHARE_EXACT_UP_TO = 2000


def _share_boot(flags: Sequence[float], rng: random.Random, n_boot: int) -> list[float]:
    """The share of 1s in `n_boot` resamples of 0/1 `flags`. The count of 1s in a resample is
    Binomial(n, p): drawn exactly for small n, and by its normal approximation (rounded,
    clamped to 0..n) past _SHARE_EXACT_UP_TO requests, where it is within a fraction of a
    percent and where drawing every request again made an hour-long report take most of a minute."""
    n = len(flags)
    if n <= _SHARE_EXACT_UP_TO:
        return _mean_boot([flags], rng, n_boot, 1.0 / n)
    p = math.fsum(flags) / n
    sd = math.sqrt(n * p * (1.0 - p))
    return [min(n, max(0, round(rng.gauss(n * p, sd)))) / n for _ in range(n_boot)]


@dataclass(frozen=True)
class _Measured:
    value: float | None
    boot: list[float] | None  # bootstrap replicates, None when the report has no samples


def _phase_bounds(doc: Mapping[str, Any]) -> list[tuple[float, float]]:
    bounds, t = [], 0.0
    for p in doc.get("phases") or []:
        start = float(p.get("start_s", t))
        bounds.append((start, start + float(p.get("duration_s") or 0.0)))
        t = bounds[-1][1]
    return bounds or [(0.0, float(doc.get("duration_s") or 0.0))]


def bucket_series(doc: Mapping[str, Any], what: str, slo_ms: Mapping[str, float] | None = None) -> list[list[float]]:
    """Per phase, the run cut in one-second buckets: output tokens streamed in each ("tokens",
    each answer spread evenly from its first token to its end), or requests finished in each
    ("requests"), or requests meeting every goodput target ("good")."""
    s = doc["samples"]
    duration = float(doc.get("duration_s") or 0.0)
    n_buckets = max(1, math.ceil(duration / BUCKET_S))
    acc = [0.0] * n_buckets

    def add(t0: float, t1: float, amount: float) -> None:
        if t1 <= t0:
            acc[min(n_buckets - 1, max(0, int(t0 / BUCKET_S)))] += amount
            return
        rate = amount / (t1 - t0)
        b = max(0, int(t0 / BUCKET_S))
        while b < n_buckets and b * BUCKET_S < t1:
            lo, hi = max(t0, b * BUCKET_S), min(t1, (b + 1) * BUCKET_S)
            if hi > lo:
                acc[b] += rate * (hi - lo)
            b += 1

    for i, sent in enumerate(s["sent_s"]):
        if s["error"][i] is not None or s["e2e_ms"][i] is None:
            continue
        end = sent + s["e2e_ms"][i] / 1000.0
        if what == "tokens":
            first = sent + (s["ttft_ms"][i] or 0.0) / 1000.0
            add(first, end, float(s["output_tokens"][i]))
        elif what == "requests" or is_good(_s(s["ttft_ms"][i]), _s(s["tpot_ms"][i]), _s(s["e2e_ms"][i]), slo_ms or {}):
            add(end, end, 1.0)
    strata: list[list[float]] = []
    for lo, hi in _phase_bounds(doc):
        strata.append([acc[b] for b in range(n_buckets) if lo <= b * BUCKET_S < hi])
    return strata


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000.0


def _measure(
    doc: Mapping[str, Any], fig: Figure, rng: random.Random, n_boot: int, slo_ms: Mapping[str, float] | None
) -> _Measured:
    s = doc.get("samples") or {}
    has = bool(s.get("sent_s"))
    name = fig.name
    if name.endswith("_ms"):  # ttft_p99_ms: the summary's figure, resampled from the samples
        metric, pct = name[: -len("_ms")].rsplit("_p", 1)
        value = (doc.get(f"{metric}_ms") or {}).get(f"p{pct}")
        values = [x for x in s.get(f"{metric}_ms") or () if x is not None]
        boot = _percentile_boot(values, float(pct), rng, n_boot) if has and values else None
        return _Measured(value, boot)
    duration = float(doc.get("duration_s") or 0.0)
    if name in ("output_tokens_per_s", "request_rate", "goodput_rate"):
        if name == "goodput_rate":
            if not slo_ms or not has:
                return _Measured(None, None)
            strata = bucket_series(doc, "good", slo_ms)
            value = math.fsum(map(math.fsum, strata)) / duration if duration > 0 else None
        else:
            value = doc.get(name)
            strata = bucket_series(doc, "tokens" if name == "output_tokens_per_s" else "requests") if has else []
        boot = _mean_boot(strata, rng, n_boot, 1.0 / duration) if has and duration > 0 else None
        if boot is not None and value is not None and strata:
            # The buckets spread tokens over time and so may differ a hair from the report's own
            # figure: centre the replicates on that figure.
            centre = math.fsum(map(math.fsum, strata)) / duration
            boot = [b - centre + value for b in boot]
        return _Measured(value, boot)
    # shares over finished requests
    if name == "error_rate":
        value = doc.get("error_rate")
        flags = [0.0 if e is None else 1.0 for e in s.get("error") or ()]
    else:  # goodput_share
        if not slo_ms or not has:
            return _Measured(None, None)
        flags = [
            1.0
            if s["error"][i] is None and is_good(_s(s["ttft_ms"][i]), _s(s["tpot_ms"][i]), _s(s["e2e_ms"][i]), slo_ms)
            else 0.0
            for i in range(len(s["sent_s"]))
        ]
        value = math.fsum(flags) / len(flags) if flags else None
    boot = _share_boot(flags, rng, n_boot) if flags else None
    return _Measured(value, boot)


def _change(base: _Measured, other: _Measured, fig: Figure, confidence: float, name: str) -> Change:
    if base.value is None or other.value is None:
        return Change(name, other.value, None, None, None, "N/A")
    diff = other.value - base.value
    pct = diff / base.value * 100.0 if base.value else None
    ci = None
    beyond: bool | None = None
    if base.boot is not None and other.boot is not None:
        diffs = sorted(o - b for o, b in zip(other.boot, base.boot))
        tail = (1.0 - confidence) / 2 * 100.0
        lo, hi = percentile(diffs, tail), percentile(diffs, 100.0 - tail)
        beyond = bool(lo > 0 or hi < 0)
        if base.value:
            ci = (lo / base.value * 100.0, hi / base.value * 100.0)
    if beyond is None:
        verdict = "N/A" if diff else "same"
    elif not beyond or diff == 0:
        verdict = "same"
    else:
        worse = diff > 0 if fig.better == "lower" else diff < 0
        verdict = "worse" if worse else "better"
    return Change(name, other.value, pct, ci, beyond, verdict)


def compare(
    docs: Sequence[Mapping[str, Any]],
    names: Sequence[str],
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
    fail_if_worse_pct: float | None = None,
) -> Comparison:
    """docs[0] is the baseline; every other report is compared with it."""
    if len(docs) < 2:
        raise BadInput("compare needs at least two reports", "ascendctl bench compare BASELINE.json OTHER.json")
    notes = []
    scenarios = tuple(str(d.get("scenario")) for d in docs)
    if len(set(scenarios)) > 1:
        notes.append(f"the reports ran different scenarios ({', '.join(scenarios)}): their figures may not compare")
    for n, d in zip(names, docs):
        if not (d.get("samples") or {}).get("sent_s"):
            notes.append(f"{n} keeps no per-request samples: its changes are shown without a noise verdict")
        if d.get("interrupted"):
            notes.append(f"{n} was interrupted: it covers part of its run")
    slo_ms = next((dict(d["goodput"]["slo_ms"]) for d in docs if d.get("goodput")), None)
    if slo_ms and not docs[0].get("goodput"):
        notes.append("goodput is counted against the targets of the first report that has them")
    rows = []
    worse = []
    for i, fig in enumerate(FIGURES):
        if fig.name.startswith("goodput") and not slo_ms:
            continue
        # One generator per figure and report, seeded from both: a verdict does not move when a
        # figure is added before it or a report after it.
        measured = [
            _measure(d, fig, random.Random(seed * 1_000_003 + i * 101 + j), resamples, slo_ms)
            for j, d in enumerate(docs)
        ]
        changes = tuple(_change(measured[0], m, fig, confidence, names[j]) for j, m in enumerate(measured) if j)
        rows.append(FigureRow(fig.name, fig.label, fig.unit, fig.better, measured[0].value, changes))
        if fail_if_worse_pct is not None:
            for c in changes:
                if c.verdict == "worse" and c.change_pct is not None and abs(c.change_pct) > fail_if_worse_pct:
                    worse.append(
                        Msg(
                            "{figure} in {report} ({change})",
                            figure=Msg(fig.label),
                            report=Path(c.report).name,
                            change=f"{c.change_pct:+.1f}%",
                        )
                    )
                elif c.verdict == "worse" and c.change_pct is None and fig.name == "error_rate":
                    worse.append(
                        Msg(
                            "{figure} in {report} (from 0 to {value})",
                            figure=Msg(fig.label),
                            report=Path(c.report).name,
                            value=f"{c.value:.2%}",
                        )
                    )
    return Comparison(
        baseline=names[0],
        reports=tuple(names),
        scenarios=scenarios,
        resamples=resamples,
        confidence=confidence,
        seed=seed,
        goodput_slo_ms=slo_ms,
        figures=tuple(rows),
        worse=tuple(worse),
        fail_if_worse_pct=fail_if_worse_pct,
        passed=not worse,
        notes=tuple(notes),
    )


__all__ = ["FIGURES", "Change", "Comparison", "FigureRow", "compare", "load_report"]
