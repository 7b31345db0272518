"""The engines' own `vllm:*` series, re-exported with `engine` and `host` labels, line by line.

vLLM serves the Prometheus text format; re-parsing it into families and encoding them again costs
~20 ms of CPU per engine and scrape (prometheus_client's parser is pure Python), against well
under a millisecond for this pass over the lines. The text is trusted only as far as its shape:
a line that is not `# HELP`, `# TYPE` or a sample is dropped.

vLLM's own `engine` label (its data-parallel engine index) becomes `vllm_engine`; counters'
`_created` series (start times nobody graphs) are dropped. For OpenMetrics the counter families
lose their `_total` in HELP / TYPE (the format names the family without it) and `"` in HELP is
escaped; the samples are the same lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

_ENGINE_LABEL = re.compile(r'(^|,)engine="')
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


@dataclass
class Family:
    name: str
    type: str = "untyped"
    help: str = ""
    samples: list[str] = field(default_factory=list)


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def relabel(text: str, engine: str, host: str, into: dict[str, Family] | None = None) -> dict[str, Family]:
    """The vllm:* families of one engine's /metrics, samples relabelled; added to `into` (which
    merges several engines: one family per name in a scrape)."""
    families: dict[str, Family] = {} if into is None else into
    extra = f'engine="{_quote(engine)}",host="{_quote(host)}"'
    current: Family | None = None
    for line in text.splitlines():
        if not line:
            continue
        if line[0] == "#":
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                if not name.startswith("vllm:") or name.endswith("_created"):
                    current = None
                    continue
                current = families.setdefault(name, Family(name))
                value = parts[3] if len(parts) > 3 else ""
                if parts[1] == "HELP":
                    current.help = value
                else:
                    current.type = value.strip()
            continue
        if current is None:
            continue
        m = _NAME.match(line)
        if (
            m is None
            or not m.group(0).startswith(current.name.removesuffix("_total"))
            or m.group(0).endswith("_created")
        ):
            continue
        rest = line[m.end() :]
        if rest.startswith("{"):
            end = rest.rfind("}")
            if end < 0:
                continue
            labels = _ENGINE_LABEL.sub(r'\1vllm_engine="', rest[1:end])
            current.samples.append(f"{m.group(0)}{{{extra}{',' if labels else ''}{labels}}}{rest[end + 1 :]}")
        elif rest.startswith(" "):
            current.samples.append(f"{m.group(0)}{{{extra}}}{rest}")
    return families


def merge(bodies: Iterable[tuple[str, str]], host: str) -> dict[str, Family]:
    """(engine name, /metrics text) of every engine, merged by family."""
    out: dict[str, Family] = {}
    for engine, text in bodies:
        relabel(text, engine, host, out)
    return out


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
