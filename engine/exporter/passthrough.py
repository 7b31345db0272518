"""The engines' own `vllm:*` series, re-exported with `engine` and `host` labels, line by line.

vLLM serves the Prometheus text format; re-parsing it into families and encoding them again costs
~20 ms of CPU per engine and scrape (prometheus_client's parser is pure Python), against about a
millisecond for this pass over the lines. The text is trusted only as far as its shape: every
line is checked against the exposition format and one that would not parse is dropped and counted
(`ascendctl_passthrough_dropped_lines{engine}`), so one bad engine page can never make the whole
scrape invalid (Prometheus would then mark the host's target down, NPU series included).

vLLM's own `engine` label (its data-parallel engine index) becomes `vllm_engine`, and a `host`
label of the page becomes `exported_host` (Prometheus' own rule for clashing labels); counters'
`_created` series (start times nobody graphs) are dropped; a label value holding a URL loses its
password. For OpenMetrics the counter families lose their `_total` in HELP / TYPE (the format
names the family without it) and `"` in HELP is escaped; the samples are the same lines.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from engine.redact import redact_value

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped"})
# One label: name="value" with only the escapes the format knows (\\, \", \n).
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\\n]|\\[\\"n])*)"\s*(?:,|$)')
# The value (Go's ParseFloat forms Prometheus writes) and an optional integer timestamp.
_VALUE = re.compile(r"\s+([+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|[Ii]nf|NaN))(?:\s+-?\d+)?\s*$")
_HELP_ESCAPE = re.compile(r"\\(.?)")
_RENAMED = {"engine": "vllm_engine", "host": "exported_host"}


@dataclass
class Family:
    name: str
    type: str = "untyped"
    help: str = ""
    samples: list[str] = field(default_factory=list)


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help_escape(m: re.Match[str]) -> str:
    """HELP knows two escapes (\\\\ and \\n): any other backslash is written as a backslash."""
    return m.group(0) if m.group(1) in ("\\", "n") else "\\\\" + m.group(1)


def _labels(text: str) -> list[tuple[str, str]] | None:
    """The label pairs of `{...}` (without the braces), values still escaped; None when they would
    not parse or a name comes twice."""
    pairs: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if m is None or m.end() == pos:
            return None if text[pos:].strip() else pairs
        pairs.append((_RENAMED.get(m.group(1), m.group(1)), m.group(2)))
        pos = m.end()
    return pairs


def _sample(line: str, fam: Family, extra: str) -> str | None:
    """A sample line of `fam` relabelled, or None when it does not parse or does not belong."""
    m = _NAME.match(line)
    if m is None:
        return None
    name = m.group(0)
    if not name.startswith(fam.name.removesuffix("_total")) or name.endswith("_created"):
        return None
    rest = line[m.end() :]
    labels, has_le, has_quantile = "", False, False
    if rest.startswith("{"):
        end = rest.rfind("}")
        checked = _label_set(rest[1:end]) if end > 0 else None
        if checked is None:
            return None
        (labels, has_le, has_quantile), rest = checked, rest[end + 1 :]
    value = _VALUE.match(rest)
    if value is None:
        return None
    if fam.type == "histogram" and name.endswith("_bucket") and not has_le:
        return None
    if fam.type == "summary" and name == fam.name and not has_quantile:
        return None
    return f"{name}{{{extra}{',' if labels else ''}{labels}}} {value.group(1)}"


# An engine's label sets stay the same from one poll to the next (only the values move): each is
# checked and rewritten once, not on every render.
@functools.lru_cache(maxsize=16384)
def _label_set(text: str) -> tuple[str, bool, bool] | None:
    """(the labels rewritten, has a float `le`, has a float `quantile`), or None when the label
    set would not parse or names a label twice."""
    pairs = _labels(text)
    if pairs is None:
        return None
    names = [k for k, _ in pairs]
    if len(set(names)) != len(names):
        return None
    labels = ",".join(f'{k}="{redact_value(v) if "@" in v else v}"' for k, v in pairs)
    return labels, _float_label(pairs, "le"), _float_label(pairs, "quantile")


def _float_label(pairs: list[tuple[str, str]], key: str) -> bool:
    for k, v in pairs:
        if k == key:
            try:
                float(v)
                return True
            except ValueError:
                return False
    return False


def relabel(
    text: str, engine: str, host: str, into: dict[str, Family] | None = None, dropped: dict[str, int] | None = None
) -> dict[str, Family]:
    """The vllm:* families of one engine's /metrics, samples relabelled; added to `into` (which
    merges several engines: one family per name in a scrape). Lines that would not parse are
    left out and counted in `dropped[engine]`."""
    families: dict[str, Family] = {} if into is None else into
    extra = f'engine="{_quote(engine)}",host="{_quote(host)}"'
    current: Family | None = None
    bad = 0
    types: dict[str, str] = {}  # this page's TYPE of each family
    for line in text.splitlines():
        if not line.strip():
            continue
        if line[0] == "#":
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                if not name.startswith("vllm:") or name.endswith("_created") or not _NAME.fullmatch(name):
                    current = None
                    continue
                value = parts[3] if len(parts) > 3 else ""
                if parts[1] == "TYPE":
                    kind = value.strip()
                    known = families.get(name)
                    if kind not in _TYPES or (known is not None and known.samples and known.type != kind):
                        # an unknown type, or another engine's family of another type: not mixed in
                        bad += 1
                        current = None
                        types[name] = ""
                        continue
                    types[name] = kind
                    current = families.setdefault(name, Family(name))
                    current.type = kind
                else:
                    if types.get(name) == "":
                        continue
                    current = families.setdefault(name, Family(name))
                    current.help = _HELP_ESCAPE.sub(_help_escape, value)
            continue
        if current is None:
            if line.startswith("vllm:"):
                bad += 1 if not line.split("{")[0].split(" ")[0].endswith("_created") else 0
            continue
        sample = _sample(line, current, extra)
        if sample is None:
            if not line.split("{", 1)[0].split(" ", 1)[0].endswith("_created"):
                bad += 1
            continue
        current.samples.append(sample)
    if dropped is not None and bad:
        dropped[engine] = dropped.get(engine, 0) + bad
    return families


def merge(bodies: Iterable[tuple[str, str]], host: str, dropped: dict[str, int] | None = None) -> dict[str, Family]:
    """(engine name, /metrics text) of every engine, merged by family."""
    out: dict[str, Family] = {}
    for engine, text in bodies:
        relabel(text, engine, host, out, dropped)
    return out


def render_dropped(dropped: Mapping[str, int], host: str) -> str:
    """The lines each engine's page lost here, as our own gauge."""
    if not dropped:
        return ""
    name = "ascendctl_passthrough_dropped_lines"
    lines = [
        f"# HELP {name} Lines of the engine's /metrics left out of this scrape because they would not parse.",
        f"# TYPE {name} gauge",
    ]
    lines += [f'{name}{{engine="{_quote(e)}",host="{_quote(host)}"}} {n}' for e, n in sorted(dropped.items())]
    return "\n".join(lines) + "\n"


def render(families: Mapping[str, Family], openmetrics: bool) -> str:
    lines: list[str] = []
    for fam in families.values():
        if not fam.samples:
            continue
        name = fam.name
        help_ = fam.help
        if openmetrics:
            if fam.type == "counter":
                name = name.removesuffix("_total")
            help_ = help_.replace('"', '\\"') if '\\"' not in help_ else help_
        lines.append(f"# HELP {name} {help_}")
        lines.append(f"# TYPE {name} {fam.type if not (openmetrics and fam.type == 'untyped') else 'unknown'}")
        lines.extend(fam.samples)
    return "\n".join(lines) + "\n" if lines else ""
