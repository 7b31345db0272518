"""Scrape and parse vLLM `/metrics` with prometheus_client's own text parser.

Which figures are read, and under which names across vLLM versions, is the table in `catalog`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import httpx
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from engine.errors import BadInput, Unreachable
from engine.i18n import N_, _
from engine.metrics.catalog import HISTOGRAMS, SCALARS, optional_fields

# Headline figure -> metric family names that carry it, newest vLLM first.
_NAMES: Mapping[str, tuple[str, ...]] = {m.key: m.names for m in SCALARS}
HISTOGRAM_NAMES: Mapping[str, tuple[str, ...]] = {m.key: m.names for m in HISTOGRAMS}

# Counters kept per label value as well as summed: (sample name, label) -> breakdown key.
_BREAKDOWNS: Mapping[str, str] = {
    "vllm:prompt_tokens_cached_by_source_total": "source",
    "vllm:admission_rejections_total": "reason",
    "vllm:request_success_total": "finished_reason",
    "vllm:num_requests_waiting_by_reason": "reason",
}


@dataclass(frozen=True)
class Histogram:
    """Cumulative buckets (upper bound -> count), as exposed; `count` and `sum` of all samples."""

    buckets: tuple[tuple[float, float], ...]
    count: float
    sum: float


def _histogram(self, key: str) -> Histogram | None:
    """The histogram for "ttft", "itl" or "e2e", under whichever name this vLLM uses."""
    for name in HISTOGRAM_NAMES[key]:
        if name in self.histograms:
            return self.histograms[name]
    return None


def _config_int(self, label: str) -> int | None:
    """An integer label of `vllm:cache_config_info` ("None", "inf", "nan" and junk read as absent)."""
    try:
        value = float(self.cache_config[label])
    except (KeyError, ValueError):
        return None
    return int(value) if math.isfinite(value) else None


# One scrape: a field per gauge and counter of the catalog (None when the engine does not expose
# it), then what views beyond the headline figures need.
EngineMetrics = dataclasses.make_dataclass(
    "EngineMetrics",
    [
        *optional_fields(tuple(_NAMES)),
        ("histograms", Mapping[str, Histogram], field(default_factory=dict)),
        # Every sample value summed over label sets, by sample name (for figures not in the catalog).
        ("samples", Mapping[str, float], field(default_factory=dict)),
        # Labels of `vllm:cache_config_info` (block size, number of blocks...), when present.
        ("cache_config", Mapping[str, str], field(default_factory=dict)),
        # Per-label values of the counters in _BREAKDOWNS: sample name -> label value -> value.
        ("breakdowns", Mapping[str, Mapping[str, float]], field(default_factory=dict)),
        ("model_name", str | None, field(default=None)),  # the served model name, from `model_name`
    ],
    namespace={"histogram": _histogram, "config_int": _config_int, "__module__": __name__},
    frozen=True,
)


_HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")
# Histograms the dashboard does not show (e2e latency) are left to full parses (bench, scripts).
_WANTED_HISTOGRAMS = frozenset(name for m in HISTOGRAMS if m.live for name in m.names)


def _lean(text: str) -> tuple[str, str | None]:
    """Only the sample lines a live view reads: `vllm:` samples without their `_created` twins,
    and of the histograms only those the catalog marks `live`. Comment lines go too: the sums below are keyed
    by sample name and need no TYPE. The parser's cost is per character and a vLLM page has ~600
    lines, most of them buckets nobody on the dashboard looks at. Returns the lean body and the
    cache_config_info line (parsed apart, once, by `_info_labels`)."""
    kept = []
    info = None
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        brace, space = line.find("{"), line.find(" ")
        end = brace if brace >= 0 and (brace < space or space < 0) else space
        role = _role(line if end < 0 else line[:end])
        if role == _KEEP:
            kept.append(line)
        elif role == _CONFIG:
            info = line
    # The engine and model_name labels repeat on every sample and the parser walks labels one
    # character at a time: dropping them halves its work. Values are summed over them anyway.
    body = _CONSTANT_LABELS.sub("", "\n".join(kept)).replace(",}", "}").replace("{}", "")
    return body + "\n", info


_DROP, _KEEP, _CONFIG = range(3)
_INFO = "vllm:cache_config_info"


@functools.lru_cache(maxsize=4096)
def _role(name: str) -> int:
    """What `_lean` does with a sample of this name (a page has ~100 distinct names)."""
    if name.endswith("_created"):
        return _DROP
    if name.endswith(_HISTOGRAM_SUFFIXES):
        return _KEEP if name[: name.rindex("_")] in _WANTED_HISTOGRAMS else _DROP
    return _CONFIG if name == _INFO else _KEEP


@functools.lru_cache(maxsize=16)
def _info_labels(line: str) -> tuple[tuple[str, str], ...]:
    """Labels of the cache_config_info sample: ~40 labels that only change when the engine
    restarts, so parsed once per distinct line."""
    for fam in text_string_to_metric_families(f"# TYPE {_INFO} gauge\n{line}\n"):
        for sample in fam.samples:
            return tuple(sample.labels.items())
    return ()


_CONSTANT_LABELS = re.compile(r'\b(?:engine|model_name)="(?:[^"\\]|\\.)*",?')
_MODEL_NAME = re.compile(r'\bmodel_name="((?:[^"\\]|\\.)*)"')


def _samples_of_lines(body: str, memo: dict[str, Sample]) -> list[Sample]:
    """The samples of a lean body (one sample a line), parsing only the lines that are not in
    `memo`; `memo` is left holding this body's lines for the next call."""
    lines = [line for line in body.splitlines() if line]  # a page with nothing kept leaves ""
    new = [line for line in lines if line not in memo]
    if new:
        parsed = [s for fam in text_string_to_metric_families("\n".join(new) + "\n") for s in fam.samples]
        if len(parsed) != len(new):
            raise ValueError("a sample line did not parse as exactly one sample")
        memo.update(zip(new, parsed))
    samples = [memo[line] for line in lines]
    memo.clear()
    memo.update(zip(lines, samples))
    return samples


class LeanParser:
    """Parses the successive scrapes of one engine for a live view (`parse_metrics(lean=True)`).

    Between two scrapes a second apart only the counters and buckets that moved change: a third
    of the lines under load, none when idle. Samples of unchanged lines are taken from the
    previous scrape instead of being parsed again, the parser costing ~30 us a line."""

    def __init__(self) -> None:
        self._memo: dict[str, Sample] = {}

    def __call__(self, text: str) -> EngineMetrics:
        return parse_metrics(text, lean=True, memo=self._memo)


def parse_metrics(text: str, lean: bool = False, memo: dict[str, Sample] | None = None) -> EngineMetrics:
    """Parse a Prometheus text body. Raises BadInput when it is not one.

    `lean=True` keeps only what the live dashboard reads (see `_lean`), several times faster.
    `memo` (lean only) carries the samples of the previous scrape of the same engine from one
    call to the next: see `LeanParser`.
    """
    if lean:
        if not (text.startswith("vllm:") or "\nvllm:" in text):
            parse_metrics(text)  # garbage: let the full parse say what is wrong
            raise BadInput(
                "the /metrics page has no vllm: metrics",
                "check that the URL is a vLLM server, started without --disable-log-stats",
            )
        found = _MODEL_NAME.search(text)
        lean_model = found.group(1) if found else None
        text, info_line = _lean(text)
    else:
        info_line = lean_model = None
    sums: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = {}
    families: set[str] = set()
    cache_config: dict[str, str] = {}
    breakdowns: dict[str, dict[str, float]] = {}
    model_name: str | None = None
    try:
        if lean:  # a lean body has no TYPE lines: each sample is its own family
            pairs = [(s.name, s) for s in _samples_of_lines(text, {} if memo is None else memo)]
        else:
            pairs = ((fam.name, s) for fam in text_string_to_metric_families(text) for s in fam.samples)
        for family, s in pairs:
            families.add(family)
            if not math.isfinite(s.value):
                # A NaN or +Inf gauge (a division by zero in the engine, a broken exporter) is
                # "not available", never a figure: one bad sample must not reach int() or a sum.
                continue
            sums[s.name] = sums.get(s.name, 0.0) + s.value
            if s.name.endswith("_bucket") and "le" in s.labels:
                b = buckets.setdefault(s.name[: -len("_bucket")], {})
                le = float(s.labels["le"])
                b[le] = b.get(le, 0.0) + s.value
            if model_name is None and s.name.startswith("vllm:"):
                model_name = s.labels.get("model_name")
            label = _BREAKDOWNS.get(s.name)
            if label is not None and label in s.labels:
                per = breakdowns.setdefault(s.name, {})
                per[s.labels[label]] = per.get(s.labels[label], 0.0) + s.value
            if family == "vllm:cache_config_info" and not cache_config:
                cache_config = dict(s.labels)
    except (ValueError, TypeError, IndexError) as exc:
        # The parser quotes the offending line, which may be a whole page on one line.
        detail = str(exc) if len(str(exc)) <= 80 else str(exc)[:79] + "…"
        raise BadInput(
            f"the /metrics body is not Prometheus text ({detail})",
            "point ascendctl at the vLLM server root, e.g. http://127.0.0.1:8000",
        ) from exc
    if info_line is not None:
        try:
            cache_config = dict(_info_labels(info_line))
        except (ValueError, TypeError, IndexError):
            pass  # a damaged info line only loses the block count
    if not families:
        raise BadInput("the /metrics body holds no metrics", "check that the URL is a vLLM server")

    def headline(key: str) -> float | None:
        for name in _NAMES[key]:
            for candidate in (name, name + "_total"):
                if candidate in sums:
                    # finite samples can still sum past the float range
                    return sums[candidate] if math.isfinite(sums[candidate]) else None
        return None

    hists = {
        name: Histogram(
            tuple(sorted(b.items())),
            sums.get(name + "_count", 0.0),
            sums.get(name + "_sum", 0.0),
        )
        for name, b in buckets.items()
    }
    return EngineMetrics(
        **{key: headline(key) for key in _NAMES},
        histograms=hists,
        samples=sums,
        cache_config=cache_config,
        breakdowns=breakdowns,
        model_name=model_name or lean_model,
    )


def scrape(
    base_url: str,
    timeout: float = 2.0,
    client: httpx.Client | None = None,
    parse: Callable[[str], Any] = parse_metrics,
) -> Any:
    """GET {base_url}/metrics (through the bounded reader: `timeout` is the total deadline) and
    parse it (a live view passes its engine's LeanParser; a layout's proxy, `proxy.parse_proxy`).
    Raises Unreachable or BadInput with a fix."""
    from engine.httpread import read_page
    from engine.redact import url_without_credentials

    url = base_url.rstrip("/") + "/metrics"
    shown = url_without_credentials(url)
    page = read_page(client, url, deadline=timeout, what=N_("the engine"))
    if page.status_code != 200:
        raise Unreachable(
            _("{url} answered HTTP {status}").format(url=shown, status=page.status_code),
            _("check the URL and the server's API key"),
        )
    text = page.text
    if "html" in page.content_type.lower() or text.lstrip()[:1] == "<":
        # A proxy's login page, a web UI: say so, instead of quoting the page as a parse error.
        title = _TITLE.search(text[:65536])
        named = f" titled {' '.join(title.group(1).split())[:60]!r}" if title else ""
        raise BadInput(
            f"{shown} is not a Prometheus page: it answered an HTML page{named}",
            "point ascendctl at the vLLM server root, e.g. http://127.0.0.1:8000 (the port vllm serve listens on)",
        )
    return parse(text)


_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.I | re.S)
