"""`kv-transfer-failing`: an engine of a prefill / decode layout whose KV transfers fail, while it
serves (top, and the exporter's diagnostics).

Two witnesses, over the last `window_s` seconds (thresholds.yaml):
- what vLLM counts where the connector exports it (engine/metrics/catalog.py): NIXL's failed
  transfers (`vllm:nixl_num_failed_transfers`, handshakes and notifications included) and, on a
  prefill instance, the requests whose KV expired before a decoder fetched it
  (`vllm:nixl_num_kv_expired_reqs`);
- new lines of the engine's own log that the triage rules of kvtransfer.yaml recognise (Mooncake's
  transfer errors: vllm-ascend's Mooncake connector exports no metrics). The log read when top
  starts is the baseline: what it held before is the log diagnostics' (`source: log`), and only
  lines written since make the transfers *failing now*.
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache
from typing import Sequence

from engine.data import load_yaml
from engine.i18n import _
from engine.telemetry.snapshot import Diagnostic, EngineView

ID = "kv-transfer-failing"


@lru_cache(maxsize=1)
def log_rules() -> frozenset[str]:
    return frozenset(load_yaml("engine.telemetry", "kvtransfer.yaml")["log_rules"])


class KvTransferWatch:
    """One engine's: the transfer errors its log showed, and when each was first counted."""

    def __init__(self) -> None:
        self._counts: dict[str, int] | None = None  # None: the first look, the baseline
        self._new: deque[tuple[float, str, int]] = deque()  # (when counted, rule id, lines)

    def diagnostic(
        self, now: float, view: EngineView, role: str | None, issues: Sequence, window_s: float
    ) -> Diagnostic | None:
        counts = {i.id: i.count for i in issues if i.id in log_rules()}
        if self._counts is not None:
            for rule, count in counts.items():
                # A count that went down is a new log (a restarted run): all of it is new.
                grown = count - self._counts.get(rule, 0) if count >= self._counts.get(rule, 0) else count
                if grown > 0:
                    self._new.append((now, rule, grown))
        self._counts = counts
        while self._new and self._new[0][0] < now - window_s:
            self._new.popleft()
        logged: dict[str, int] = {}
        for _when, rule, lines in self._new:
            logged[rule] = logged.get(rule, 0) + lines
        failed = view.rates.kv_failed_in_window or 0.0
        expired = view.rates.kv_expired_in_window or 0.0
        if not (logged or failed or expired):
            return None
        seen = []
        if failed:
            seen.append(_("{count:g} failed transfers (vllm:nixl_num_failed_transfers)").format(count=failed))
        if expired:
            seen.append(
                _(
                    "{count:g} requests whose KV expired before a decoder fetched it (vllm:nixl_num_kv_expired_reqs)"
                ).format(count=expired)
            )
        if logged:
            rules = ", ".join(f"{rule} x{n}" for rule, n in sorted(logged.items()))
            seen.append(_("in its log {rules}").format(rules=rules))
        if role == "prefill":
            what = _("prefill instance {engine}").format(engine=view.label)
        elif role == "decode":
            what = _("decode instance {engine}").format(engine=view.label)
        else:
            what = view.label
        if role == "decode":
            fix = _(
                "the decode instance cannot fetch KV from the prefill instances: check that it reaches them on the "
                "connector's ports (kv_port, the Mooncake / device NICs), that both roles run the same kv_connector "
                "and kv_connector_extra_config, and read the prefill instances' logs (`ascendctl triage "
                "<run>/engine.log`); the proxy's /metrics counts the failures per backend"
            )
        else:
            fix = _(
                "decode does not take this instance's KV: check that the decode hosts reach this one on the "
                "connector's ports (kv_port, the Mooncake / device NICs: `hccn_tool -i N -link -g` on Ascend), that "
                "both roles run the same kv_connector and kv_connector_extra_config, and that the decode instances "
                "are up (the proxy's /health); `ascendctl triage <run>/engine.log` names the transfer errors"
            )
        # The witnesses are joined with the language's own separator (Chinese: a full-width ；).
        cause = _(
            "in the last {seconds:g} s: {seen}. Requests it serves wait for their KV, fail, or are prefilled again"
        ).format(seconds=window_s, seen=_("; ").join(seen))
        return Diagnostic(
            ID,
            "error",
            view.label,
            _("{what}: KV transfers failing").format(what=what),
            cause,
            fix,
            since=self._new[0][0] if self._new else None,
        )
