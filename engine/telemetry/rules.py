"""Threshold rules for the diagnostics table. The numbers are data (thresholds.yaml); a rule fires
on the levels the thresholds module gave the snapshot's figures (so a figure is red on screen
exactly when its rule sees it as critical), holds them for as long as the rule needs, and turns
them into a row with a cause and the fix to apply."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from engine.devices.sample import DeviceSample
from engine.i18n import N_, _
from engine.severity import Severity
from engine.telemetry.snapshot import Diagnostic, EngineView, Levels
from engine.telemetry.thresholds import Thresholds, pending_limit
from engine.telemetry.trends import Trend, TrendTracker


@dataclass
class RuleEngine:
    """Evaluates the rules each tick; remembers since when a 'sustained' condition holds."""

    thresholds: Thresholds
    _since: dict[tuple[str, str], float] = field(default_factory=dict)
    # Slow memory trends per chip and engine (hbm-leak, rss-leak).
    _trends: TrendTracker = field(init=False)

    def __post_init__(self) -> None:
        self._trends = TrendTracker(self.thresholds)

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
        out: list[Diagnostic] = _fault_diagnostics(devices, engines)
        for d in devices:
            levels = device_levels.get(d.key, {})
            health = levels.get("health")
            if health is not None and health > Severity.OK:
                out.append(
                    Diagnostic(
                        "device-health",
                        health.value,
                        d.key,
                        _("{chip} health is {health}").format(chip=d.key, health=d.health),
                        (
                            _("npu-smi reports {chip} ({name}) as {health} with error codes {codes}")
                            if d.error_codes
                            else _("npu-smi reports {chip} ({name}) as {health}")
                        ).format(chip=d.key, name=d.name, health=d.health, codes=" ".join(d.error_codes)),
                        _health_fix(d, health),
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
                        _("{chip} HBM bandwidth above {pct:g}%").format(chip=d.key, pct=t.hbm_bw_pct),
                        _(
                            "HBM bandwidth has stayed at {pct} for {seconds:.0f} s: decode is memory-bound, more "
                            "concurrency will not raise throughput"
                        ).format(pct=f"{d.mem_bw_pct:g}%", seconds=now - since),
                        # By effect: every decode step reads all the weights once, shared by the
                        # whole batch, so fewer bytes per weight relieve bandwidth most; lowering
                        # max_num_seqs only cuts the KV reads, and throughput with them.
                        _(
                            "1) serve W8A8 weights (msModelSlim, --quantization ascend): each decode step reads every "
                            "weight once, and 8-bit weights halve those bytes; 2) W8A8C8 also quantises the KV cache, "
                            "whose reads grow with sequences x context; 3) last, lower max_num_seqs: it cuts only the "
                            "KV reads, and throughput with them"
                        ),
                        since=since,
                    )
                )
            out += self._device_rules(now, d, levels)
            # A CPU host's "device memory" is its RAM, shared by everything on it: the engines'
            # own memory is judged instead (rss-leak).
            used = d.mem_used_mb if d.kind != "cpu" else None
            trend = self._trends.add(d.key, now, used, d.util_pct)
            if trend is not None:
                out.append(_hbm_leak(d, trend))
        for e in engines:
            subject = f"engine {e.label}"
            if not e.status.ok:
                self._trends.forget(subject)
                out.append(
                    Diagnostic(
                        "engine-unreachable",
                        "critical",
                        e.label,
                        # It answered, with something else than vLLM's /metrics (a login page...).
                        (
                            _("{engine} serves no vLLM metrics")
                            if e.status.error_kind == "bad-input"
                            else _("{engine} unreachable")
                        ).format(engine=e.label),
                        e.status.error or _("{url}/metrics did not answer").format(url=e.url),
                        e.status.fix or _("check the engine process and its log (`ascendctl triage <run>/engine.log`)"),
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
                    fix = _(
                        "the KV pool is nearly full, so waiting requests have no blocks to start in: add replicas, "
                        "or give the engine more KV cache (more devices with TP, a higher gpu_memory_utilization)"
                    )
                else:
                    # With KV room left, waiting requests are held back by the per-step token
                    # budget: long prompts' prefill uses it up and new requests cannot start.
                    fix = _(
                        "raise max_num_batched_tokens (the tokens one scheduler step may take: long prompts' "
                        "prefill uses it up and new requests wait to start), then max_num_seqs; add replicas "
                        "when the KV pool fills"
                    )
                out.append(
                    Diagnostic(
                        "pending-high",
                        "warning",
                        e.label,
                        _("{engine}: {count:g} requests pending").format(engine=e.label, count=e.waiting),
                        _(
                            "more than {limit:g} requests have waited for {seconds:.0f} s: the engine is at capacity"
                        ).format(limit=limit, seconds=now - since),
                        fix,
                        since=since,
                    )
                )
            waiting_kv = bool(e.kv_fetching) and not e.running
            since = self._sustained("kv-fetch", e.label, waiting_kv, now, t.kv_fetch_sustain_s)
            if since is not None:
                out.append(
                    Diagnostic(
                        "kv-fetch-stuck",
                        "error",
                        e.label,
                        _("{engine}: {count:g} requests waiting for their KV cache").format(
                            engine=e.label, count=e.kv_fetching
                        ),
                        _(
                            "requests have waited {seconds:.0f} s for their KV from the prefill instances and nothing "
                            "runs: the transfer does not come"
                        ).format(seconds=now - since),
                        _(
                            "read the prefill instances' logs for transfer errors (`ascendctl triage "
                            "<run>/engine.log`), check that decode reaches prefill on the connector's ports (kv_port) "
                            "and that both use the same kv_connector_extra; the proxy's /metrics counts failures per "
                            "backend"
                        ),
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
                        _("{engine}: KV cache {pct} full and preempting").format(
                            engine=e.label, pct=f"{usage_pct:.0f}%"
                        ),
                        _(
                            "the KV pool is {pct} used and {count:g} requests were preempted in the last "
                            "{window:g} s (recomputed from scratch)"
                        ).format(pct=f"{usage_pct:.0f}%", count=e.rates.preemptions_in_window, window=t.window_s),
                        _("lower max_num_seqs or max_model_len, raise gpu_memory_utilization, or add devices (TP)"),
                    )
                )
            load = None if e.running is None and e.waiting is None else (e.running or 0.0) + (e.waiting or 0.0)
            trend = self._trends.add(subject, now, e.rss_mb, load)
            if trend is not None:
                out.append(_rss_leak(e, trend))
        return out

    def _device_rules(self, now: float, d: DeviceSample, levels: Levels) -> list[Diagnostic]:
        """Temperature, power while idle and AI CPU: each once held long enough."""
        t = self.thresholds
        out = []
        temp = levels.get("temp_c")
        hot = temp in (Severity.WARNING, Severity.CRITICAL)
        since = self._sustained("temperature", d.key, hot, now, t.temp_sustain_s)
        if since is not None:
            line = t.temp_crit_c if temp is Severity.CRITICAL else t.temp_warn_c
            out.append(
                Diagnostic(
                    "temperature-high",
                    "error" if temp is Severity.CRITICAL else "warning",
                    d.key,
                    _("{chip} at {temp:g} C").format(chip=d.key, temp=d.temp_c),
                    _(
                        "{chip} has stayed at or above {limit:g} C for {seconds:.0f} s: cooling problems show up as "
                        "throughput drops, and operators keep cards below about 85 C"
                    ).format(chip=d.key, limit=line, seconds=now - since),
                    _(
                        "check the fans and airflow of the chassis; `npu-smi info -t common -i <npu>` shows whether "
                        "Aicore curFreq(MHZ) fell below Aicore Freq(MHZ); move load off this card until it cools"
                    ),
                    since=since,
                )
            )
        idle_hot = (
            d.kind == "npu"
            and d.power_w is not None
            and d.util_pct is not None
            and d.util_pct <= t.idle_util_pct
            and d.power_w >= t.idle_power_w
        )
        since = self._sustained("power-idle", d.key, idle_hot, now, t.idle_power_sustain_s)
        if since is not None:
            out.append(
                Diagnostic(
                    "power-idle",
                    "warning",
                    d.key,
                    _("{chip} draws {watts:g} W while idle").format(chip=d.key, watts=d.power_w),
                    _(
                        "AI Core has stayed at or below {pct} for {seconds:.0f} s while {chip} draws {watts:g} W "
                        "(at least {limit:g} W; an idle 910B draws about 100 W): something keeps the chip busy "
                        "without computing"
                    ).format(
                        pct=f"{t.idle_util_pct:g}%",
                        seconds=now - since,
                        chip=d.key,
                        watts=d.power_w,
                        limit=t.idle_power_w,
                    ),
                    _(
                        "list the processes on the chip (`npu-smi info`, its process table): a leftover or hung "
                        "process (a crashed engine's worker, a stress test) still holds it; stop it. With none "
                        "there, check `npu-smi info -t power -i <npu>` and the board's firmware"
                    ),
                    since=since,
                )
            )
        busy = d.aicpu_pct is not None and d.aicpu_pct >= t.aicpu_warn_pct
        since = self._sustained("aicpu-high", d.key, busy, now, t.aicpu_sustain_s)
        if since is not None:
            out.append(
                Diagnostic(
                    "aicpu-high",
                    "warning",
                    d.key,
                    _("{chip} AI CPU at {pct:g}%").format(chip=d.key, pct=d.aicpu_pct),
                    _(
                        "AI CPU usage has stayed at or above {pct} for {seconds:.0f} s: operators the AI Cores "
                        "cannot run fall back to the chip's few, slow AI CPUs"
                    ).format(pct=f"{t.aicpu_warn_pct:g}%", seconds=now - since),
                    _(
                        "find them with the profiler (msprof or the torch_npu profiler: operators of type AI_CPU); "
                        "check that CANN, torch_npu and vllm-ascend are a matching set (`ascendctl doctor`); a "
                        "dtype or shape the AI Core kernels lack sends an operator there"
                    ),
                    since=since,
                )
            )
        return out


def _fault_diagnostics(devices: Sequence[DeviceSample], engines: Sequence[EngineView]) -> list[Diagnostic]:
    """A row per chip with an active fault code (its most urgent), and one per engine on it: the
    code, what it means, what to do, and that the engine must move (engine/telemetry/faults.py)."""
    from engine.telemetry.faults import SEVERITY, chip_faults, fault_line, fault_texts, npu_id, worst

    out = []
    for d in devices:
        if d.kind != "npu" or not d.error_codes:
            continue
        f = worst(chip_faults(d))
        if f is None:
            continue
        users = [e for e in engines if e.npus and npu_id(d) in e.npus]
        severity = SEVERITY.get(f.fault.verb, "warning")
        texts = fault_texts(f)
        fix = texts["todo"] + (f" ({f.fault.source})" if f.fault.source else "")
        title = _("{chip}: fault {code} ({action})").format(chip=d.key, code=f.fault.code, action=f.fault.action)
        line = fault_line(f, users[0].npus if users else None)
        cause = line + (_(": {meaning}").format(meaning=texts["meaning"]) if texts["meaning"] else "")
        out.append(Diagnostic("device-fault", severity, d.key, title, cause, fix))
        for e in users:
            cause = fault_line(f, e.npus) + (
                _(": {meaning}").format(meaning=texts["meaning"]) if texts["meaning"] else ""
            )
            out.append(Diagnostic("device-fault", severity, e.label, title, cause, fix))
    return out


def _health_fix(d: DeviceSample, health: Severity) -> str:
    if health is Severity.WARNING:
        # npu-smi's Warning is a minor alarm: the chip still serves.
        todo = _(
            "look the codes up in the health-code tables of the chip's manual; keep serving but watch it: "
            "drain this device if it turns to Alarm or Critical"
        )
    else:
        todo = _("drain this device and check `dmesg` / the device plog before serving on it")
    if d.error_codes:
        return todo
    return _("run `npu-smi info -t health -i <npu>` for the error codes, then {todo}").format(todo=todo)


def _gib(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB"


def _load_words(trend: Trend, what: str) -> str:
    if trend.load_first is None or trend.load_last is None:
        return _("({what} unknown)").format(what=what)
    return _("while {what} stayed flat ({first:.3g} then {last:.3g})").format(
        what=what, first=trend.load_first, last=trend.load_last
    )


# Known leaks: the issues themselves are cited in thresholds.yaml beside the leak_* keys.
_LEAK_FIX = N_(
    "record it to show the trend (`ascendctl top --record FILE`), and collect `ascendctl bundle` with the "
    "engine's log; known vllm-ascend leaks: device memory in FULL_DECODE_ONLY graph mode (vllm-ascend#6478), "
    "under load with VL models (#6929, #5262, fixed by #5136), host memory in v0.13.0rc1 (#5847): upgrade to "
    "the latest vllm-ascend release, and restart the engine in a quiet hour before it runs out of memory"
)


def _hbm_leak(d: DeviceSample, trend: Trend) -> Diagnostic:
    hours = trend.span_s / 3600
    memory = _("memory") if d.mem_kind == "ddr" else "HBM"  # the 310 family serves from the board's DDR
    return Diagnostic(
        "hbm-leak",
        "warning",
        d.key,
        _("{chip} {memory} rising steadily").format(chip=d.key, memory=memory),
        _(
            "{memory} used on {chip} rose {rise} over {hours:.1f} h ({rate}/h) {load}: vLLM takes its memory at "
            "start-up, so steady growth is a leak, and it ends in an out-of-memory"
        ).format(
            memory=memory,
            chip=d.key,
            rise=_gib(trend.rise_mib),
            hours=hours,
            rate=_gib(trend.rise_mib / hours),
            load=_load_words(trend, "AI Core %"),
        ),
        _(_LEAK_FIX),
        since=trend.start,
    )


def _rss_leak(e: EngineView, trend: Trend) -> Diagnostic:
    hours = trend.span_s / 3600
    return Diagnostic(
        "rss-leak",
        "warning",
        e.label,
        _("{engine}: host memory rising steadily").format(engine=e.label),
        _(
            "the engine's processes' resident memory rose {rise} over {hours:.1f} h ({rate}/h) {load}: a host "
            "memory leak ends with the kernel's OOM killer taking the engine"
        ).format(
            rise=_gib(trend.rise_mib),
            hours=hours,
            rate=_gib(trend.rise_mib / hours),
            load=_load_words(trend, _("the requests in it")),
        ),
        _(_LEAK_FIX),
        since=trend.start,
    )
