"""The /metrics page of a pd / external-dp layout's proxy (engine/pdproxy.py, `serve --role proxy`).

Fetched like an engine's page (`prom.scrape` with `parse=parse_proxy`) and parsed with the same
prometheus_client parser: per role and backend, the requests sent, the failures, whether the
backend is up, and per role the requests refused for want of a backend.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

from prometheus_client.parser import text_string_to_metric_families

from engine.errors import BadInput
from engine.i18n import _

# The proxy's families (engine/pdproxy.py writes them; it imports nothing of ascendctl).
REQUESTS = "ascendctl_proxy_requests"
FAILURES = "ascendctl_proxy_failures"
REFUSED = "ascendctl_proxy_refused"
BACKEND_UP = "ascendctl_proxy_backend_up"


@dataclass(frozen=True)
class ProxyBackend:
    """One upstream of the proxy: an instance of a role (prefill, decode, rank)."""

    role: str
    backend: str  # host:port, as the proxy was given it
    up: bool | None = None  # its /health answers (None: the page does not say)
    requests: float = 0.0  # sent to it since the proxy started
    failures: float = 0.0  # of those, no answer or an error


@dataclass(frozen=True)
class ProxyMetrics:
    backends: tuple[ProxyBackend, ...] = ()
    refused: Mapping[str, float] = field(default_factory=dict)  # role -> answered 503, no backend up


def parse_proxy(text: str) -> ProxyMetrics:
    """The proxy's page. BadInput when it is not Prometheus text, or holds no proxy family (the
    URL is an engine or another service)."""
    by_key: dict[tuple[str, str], dict[str, float]] = {}
    refused: dict[str, float] = {}
    seen = False
    try:
        for fam in text_string_to_metric_families(text):
            if fam.name not in (REQUESTS, FAILURES, REFUSED, BACKEND_UP):
                continue
            seen = True
            for s in fam.samples:
                if s.name.endswith("_created") or not math.isfinite(s.value):
                    continue
                role = s.labels.get("role", "")
                if fam.name == REFUSED:
                    refused[role] = refused.get(role, 0.0) + float(s.value)
                    continue
                figures = by_key.setdefault((role, s.labels.get("backend", "")), {})
                figures[fam.name] = float(s.value)  # the parser gives an int for `2`
    except (ValueError, TypeError, IndexError) as exc:
        raise BadInput(
            _("the proxy's /metrics body is not Prometheus text ({detail})").format(detail=str(exc)[:80]),
            _("point top at the proxy `ascendctl serve --role proxy` started (its server.port)"),
        ) from exc
    if not seen:
        raise BadInput(
            _("the /metrics page has no ascendctl_proxy_ metrics: it is not the layout's proxy"),
            _("check the proxy's address in the run's run.json (serve --role proxy)"),
        )
    backends = tuple(
        ProxyBackend(
            role,
            backend,
            None if BACKEND_UP not in f else f[BACKEND_UP] >= 1,
            f.get(REQUESTS, 0.0),
            f.get(FAILURES, 0.0),
        )
        for (role, backend), f in by_key.items()  # the page's order: the proxy's roles in turn
    )
    return ProxyMetrics(backends, refused)


__all__ = ["ProxyBackend", "ProxyMetrics", "parse_proxy"]
