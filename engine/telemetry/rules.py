"""Threshold rules for the diagnostics table. The numbers are data (thresholds.yaml); a rule fires
on the levels the thresholds module gave the snapshot's figures (so a figure is red on screen
exactly when its rule sees it as critical), holds them for as long as the rule needs, and turns
them into a row with a cause and the fix to apply."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from engine.devices.sample import DeviceSample
from engine.severity import Severity
from engine.telemetry.snapshot import Diagnostic, EngineView, Levels
from engine.telemetry.thresholds import Thresholds, pending_limit


@dataclass
class RuleEngine:
    """Evaluates the rules each tick; remembers since when a 'sustained' condition holds."""

    thresholds: Thresholds
    _since: dict[tuple[str, str], float] = field(default_factory=dict)

    def _sustained(self, rule: str, subject: str, active: bool, now: float, needed: float) -> float | None:
        """The start time of a condition held for `needed` seconds, else None."""
        key = (rule, subject)
        if not active:
            self._since.pop(key, None)
            return None
        start = self._since.setdefault(key, now)
        return start if now - start >= needed else None

    def evaluate(
        self,
        now: float,
        devices: Sequence[DeviceSample],
        device_levels: Mapping[str, Levels],
        engines: Sequence[EngineView],
    ) -> list[Diagnostic]:
        t = self.thresholds
        out: list[Diagnostic] = []
        for d in devices:
            levels = device_levels.get(d.key, {})
            health = levels.get("health")
            if health is not None and health > Severity.OK:
                out.append(
                    Diagnostic(
                        "device-health",
                        health.value,
                        d.key,
                        f"{d.key} health is {d.health}",
                        f"npu-smi reports {d.key} ({d.name}) as {d.health}"
                        + (f" with error codes {' '.join(d.error_codes)}" if d.error_codes else ""),
                        (
                            "drain this device"
                            if d.error_codes
                            else "run `npu-smi info -t health -i <npu>` for the error codes, then drain this device"
                        )
                        + " and check `dmesg` / the device plog before serving on it",
                    )
                )
            bw_high = levels.get("mem_bw_pct") is Severity.CRITICAL
            since = self._sustained("hbm-bandwidth", d.key, bw_high, now, t.hbm_bw_sustain_s)
            if since is not None:
                out.append(
                    Diagnostic(
                        "hbm-bandwidth",
                        "warning",
                        d.key,
                        f"{d.key} HBM bandwidth above {t.hbm_bw_pct:g}%",
                        f"HBM bandwidth has stayed at {d.mem_bw_pct:g}% for {now - since:.0f} s: decode is "
                        "memory-bound, more concurrency will not raise throughput",
                        # By effect: every decode step reads all the weights once, shared by the
                        # whole batch, so fewer bytes per weight relieve bandwidth most; lowering
                        # max_num_seqs only cuts the KV reads, and throughput with them.
                        "1) serve W8A8 weights (msModelSlim, --quantization ascend): each decode step reads every "
                        "weight once, and 8-bit weights halve those bytes; 2) W8A8C8 also quantises the KV cache, "
                        "whose reads grow with sequences x context; 3) last, lower max_num_seqs: it cuts only the KV "
                        "reads, and throughput with them",
                        since=since,
                    )
                )
            hot = levels.get("temp_c") is Severity.CRITICAL
            since = self._sustained("temperature", d.key, hot, now, t.temp_sustain_s)
            if since is not None:
                out.append(
                    Diagnostic(
                        "temperature-high",
                        "error",
                        d.key,
                        f"{d.key} at {d.temp_c:g} C",
                        f"{d.key} has stayed at or above {t.temp_crit_c:g} C for {now - since:.0f} s: cooling "
                        "problems show up as throughput drops, and operators keep cards below about 85 C",
                        "check the fans and airflow of the chassis; `npu-smi info -t common -i <npu>` shows "
                        "whether Aicore curFreq(MHZ) fell below Aicore Freq(MHZ); move load off this card until it "
                        "cools",
                        since=since,
                    )
                )
        for e in engines:
            if not e.status.ok:
                out.append(
                    Diagnostic(
                        "engine-unreachable",
                        "critical",
                        e.label,
                        # It answered, with something else than vLLM's /metrics (a login page...).
                        f"{e.label} serves no vLLM metrics"
                        if e.status.error_kind == "bad-input"
                        else f"{e.label} unreachable",
                        e.status.error or f"{e.url}/metrics did not answer",
                        e.status.fix or "check the engine process and its log (`ascendctl triage <run>/engine.log`)",
                        since=e.status.last_ok,
                    )
                )
                continue
            limit = pending_limit(e, t)
            pending = e.levels.get("waiting") is Severity.WARNING
            since = self._sustained("pending", e.label, pending, now, t.pending_sustain_s)
            if since is not None:
                kv_full = e.levels.get("kv_usage") in (Severity.WARNING, Severity.CRITICAL)
                if kv_full:
                    fix = (
                        "the KV pool is nearly full, so waiting requests have no blocks to start in: add replicas, "
                        "or give the engine more KV cache (more devices with TP, a higher gpu_memory_utilization)"
                    )
                else:
                    # With KV room left, waiting requests are held back by the per-step token
                    # budget: long prompts' prefill uses it up and new requests cannot start.
                    fix = (
                        "raise max_num_batched_tokens (the tokens one scheduler step may take: long prompts' "
                        "prefill uses it up and new requests wait to start), then max_num_seqs; add replicas "
                        "when the KV pool fills"
                    )
                out.append(
                    Diagnostic(
                        "pending-high",
                        "warning",
                        e.label,
                        f"{e.label}: {e.waiting:g} requests pending",
                        f"more than {limit:g} requests have waited for {now - since:.0f} s: the engine is at capacity",
                        fix,
                        since=since,
                    )
                )
            usage_pct = None if e.kv.usage is None else 100.0 * e.kv.usage
            rising = e.levels.get("preemptions_in_window") is Severity.WARNING
            if e.levels.get("kv_usage") is Severity.CRITICAL and rising:
                out.append(
                    Diagnostic(
                        "kv-pressure",
                        "error",
                        e.label,
                        f"{e.label}: KV cache {usage_pct:.0f}% full and preempting",
                        f"the KV pool is {usage_pct:.0f}% used and {e.rates.preemptions_in_window:g} requests were "
                        f"preempted in the last {t.window_s:g} s (recomputed from scratch)",
                        "lower max_num_seqs or max_model_len, raise gpu_memory_utilization, or add devices (TP)",
                    )
                )
        return out
