"""`ascendctl exporter rules`: the Prometheus alerting rules of alerts.yaml, with the thresholds
filled in (the defaults, or a profile's diagnostics section)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml

from engine.data import load_yaml
from engine.telemetry.thresholds import Thresholds

_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    probe: str
    duration: str
    severity: str
    summary: str
    fix: str


def alerts(thresholds: Thresholds | None = None) -> list[Alert]:
    values = {k: f"{v:g}" for k, v in (thresholds or Thresholds.defaults()).as_dict().items()}

    def fill(expr: str) -> str:
        # Only {threshold_name} is replaced: PromQL's own braces ({source="log"}) stay.
        return " ".join(_PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), expr).split())

    data = load_yaml("engine.exporter", "alerts.yaml")
    return [
        Alert(
            a["alert"],
            fill(a["expr"]),
            a["probe"],
            a["for"],
            a["severity"],
            a["summary"],
            a["fix"],
        )
        for a in data["alerts"]
    ]


def rules_document(thresholds: Thresholds | None = None) -> dict:
    group = load_yaml("engine.exporter", "alerts.yaml")["group"]
    return {
        "groups": [
            {
                "name": group,
                "rules": [
                    {
                        "alert": a.name,
                        "expr": a.expr,
                        "for": a.duration,
                        "labels": {"severity": a.severity},
                        "annotations": {"summary": a.summary, "fix": a.fix},
                    }
                    for a in alerts(thresholds)
                ],
            }
        ]
    }


def rules_yaml(thresholds: Thresholds | None = None) -> str:
    header = "# Prometheus alerting rules for ascendctl exporter (ascendctl exporter rules > ascendctl-rules.yml)\n"
    return header + yaml.safe_dump(rules_document(thresholds), sort_keys=False, width=100, allow_unicode=True)
