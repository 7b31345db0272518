"""The metric families of one scrape, built from the exporter's latest state.

Devices go out under npu-exporter's names on Ascend and dcgm-exporter's on CUDA (the table in
devices.yaml); the `ascendctl_*` families are what only ascendctl knows (the run, the plan, the
diagnostics, doctor). The engines' own `vllm:*` series are added as text (`passthrough`).
Every family carries a `host` label, so one Prometheus can tell the hosts of a fleet apart.
"""

from __future__ import annotations

import functools
from typing import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from engine.data import load_yaml
from engine.devices.sample import DeviceSample
from engine.devices.views import health_codes
from engine.exporter.collect import ExporterState
from engine.severity import rank
from engine.telemetry.faults import chip_faults, held_npus, npu_id

# Device health as npu-exporter writes it.
_HEALTH_CODE = {True: 1.0, False: 0.0, None: -1.0}


@functools.lru_cache(maxsize=1)
def device_metrics() -> tuple[dict, ...]:
    return tuple(load_yaml("engine.exporter", "devices.yaml")["metrics"])


@functools.lru_cache(maxsize=1)
def view_metrics() -> tuple[dict, ...]:
    return tuple(load_yaml("engine.exporter", "devices.yaml")["views"])


@functools.lru_cache(maxsize=1)
def nic_metrics() -> tuple[dict, ...]:
    return tuple(load_yaml("engine.exporter", "devices.yaml")["nics"])


def families(state: ExporterState, collected: bool = True, sources: bool = True) -> Iterator[Metric]:
    """Every family of a scrape: what the groups collected (which changes only when a group runs
    again: the server renders it once per change) and the sources' health (ages change with time)."""
    if collected:
        yield from _device_families(state)
        yield from _fault_families(state)
        yield from _view_families(state)
        yield from _engine_families(state)
        yield from _diagnostic_families(state)
        yield from _plog_families(state)
        yield from _doctor_families(state)
    if sources:
        yield from _source_families(state)


# -- devices ---------------------------------------------------------------------------------


def _value(d: DeviceSample, name: str) -> float | None:
    if name == "health_code":
        return _HEALTH_CODE[d.healthy] if d.health is not None else None
    if name == "mem_free_mb":
        return None if d.mem_used_mb is None or d.mem_total_mb is None else d.mem_total_mb - d.mem_used_mb
    value = getattr(d, name)
    return None if value is None else float(value)


def _npu_labels(d: DeviceSample, host: str) -> dict[str, str]:
    labels = {"id": npu_id(d), "model_name": d.name}
    if d.bus:
        labels["pcie_bus_info"] = d.bus
    return {**labels, "host": host}


class _Families:
    """Gauges by name, each created with the label names of its first sample; a later chip that
    lacks one (no PCIe bus) gets it empty, as npu-exporter writes a label it has no value for."""

    def __init__(self) -> None:
        self.by_name: dict[str, GaugeMetricFamily] = {}

    def add(self, name: str, help_text: str, labels: dict[str, str], value: float) -> None:
        family = self.by_name.get(name)
        if family is None:
            family = self.by_name[name] = GaugeMetricFamily(name, help_text, labels=list(labels))
        family.add_metric([labels.get(k, "") for k in family._labelnames], value)


def _cuda_labels(d: DeviceSample, host: str) -> dict[str, str]:
    return {"gpu": d.key.removeprefix("cuda"), "modelName": d.name, "Hostname": host}


def _device_families(state: ExporterState) -> Iterator[Metric]:
    npus = [d for d in state.devices if d.kind == "npu"]
    gpus = [d for d in state.devices if d.kind == "cuda"]
    if npus:
        count = GaugeMetricFamily("machine_npu_nums", "Amount of npu installed on the machine.", labels=["host"])
        count.add_metric([state.host], float(len(npus)))
        yield count
    for row in device_metrics():
        for kind, devices, labeller in (("npu", npus, _npu_labels), ("cuda", gpus, _cuda_labels)):
            if not devices or not row.get(kind):
                continue
            by_name: dict[str, GaugeMetricFamily] = {}
            for d in devices:
                value = _value(d, row["field"])
                if value is None:
                    continue
                name = row.get("npu_ddr", row[kind]) if kind == "npu" and d.mem_kind == "ddr" else row[kind]
                labels = labeller(d, state.host)
                family = by_name.get(name)
                if family is None:
                    family = by_name[name] = GaugeMetricFamily(name, row["help"], labels=list(labels))
                family.add_metric([labels[k] for k in family._labelnames], value)
            yield from by_name.values()
    if npus:
        procs = GaugeMetricFamily(
            "npu_chip_info_process_info",
            "Memory used on the chip by each process holding it, MB.",
            labels=["id", "model_name", "process_id", "host"],
        )
        for d in npus:
            labels = _npu_labels(d, state.host)
            for p in d.procs:
                if p.memory_mb is not None:
                    procs.add_metric([labels["id"], labels["model_name"], str(p.pid), state.host], p.memory_mb)
        yield procs


# -- faults and the device views --------------------------------------------------------------

_ERROR_CODE_SERIES = 10  # npu-exporter: the first ten codes, as _error_code and _error_code_1.._9
_ERROR_CODE_HELP = "The chip's error code (the decimal of npu-smi's hex code; 0: its health view lists none)."


def _chip_codes(state: ExporterState, d: DeviceSample) -> tuple[str, ...]:
    health = state.views.get("health")
    extra = health_codes(health.chips.get(d.key)) if health is not None else ()
    return tuple(dict.fromkeys((*d.error_codes, *extra)))


def _fault_families(state: ExporterState) -> Iterator[Metric]:
    npus = [d for d in state.devices if d.kind == "npu"]
    if not npus:
        return
    codes = _Families()
    fault = GaugeMetricFamily(
        "ascendctl_device_fault",
        "An active device fault code of the chip (value 1): its action class (MindCluster's "
        "faultCode.json; unknown when the table does not list it) and what on-call does (verb).",
        labels=["id", "code", "action", "verb", "host"],
    )
    health = state.views.get("health")
    for d in npus:
        labels = _npu_labels(d, state.host)
        listed = _chip_codes(state, d)
        if not listed and health is not None and d.key in health.chips:
            # the chip's health view answered and lists no code: npu-exporter writes 0
            codes.add("npu_chip_info_error_code", _ERROR_CODE_HELP, labels, 0.0)
        for i, code in enumerate(listed[:_ERROR_CODE_SERIES]):
            try:
                value = float(int(code, 16))
            except ValueError:
                continue
            name = "npu_chip_info_error_code" + (f"_{i}" if i else "")
            codes.add(name, _ERROR_CODE_HELP, labels, value)
        for f in chip_faults(d, listed):
            fault.add_metric([f.npu_id, f.fault.code, f.fault.action, f.fault.verb, state.host], 1.0)
    yield from codes.by_name.values()
    yield fault


_LINK = {"UP": 1.0, "DOWN": 0.0}
_NET_OK = {"Success", "Init"}  # npu-exporter's GetNetworkHealthy: both count as healthy


def _nic_value(view: str, row: dict, nic) -> float | None:
    if view == "link":
        return _LINK.get((nic.word or "").upper(), -1.0)
    if view == "net_health":
        return -1.0 if nic.word is None else 1.0 if nic.word in _NET_OK else 0.0
    if view == "stat":
        value = nic.counters.get(row["key"])
        return None if value is None else float(value)
    value = nic.optical.get(row["key"])
    if row["key"] == "present":
        return None if value is None else 0.0 if str(value).lower() == "not present" else 1.0
    return None if value is None or isinstance(value, str) else float(value)


def _view_families(state: ExporterState) -> Iterator[Metric]:
    if not state.views:
        return
    npus = [d for d in state.devices if d.kind == "npu"]
    out = _Families()
    for row in view_metrics():
        answer = state.views.get(row["view"])
        if answer is None:
            continue
        for d in npus:
            chip = answer.chips.get(d.key)
            value = chip.values.get(row["field"]) if chip is not None else None
            if value is not None:
                out.add(row["npu"], row["help"], _npu_labels(d, state.host), value)
    board = state.views.get("board")
    for d in npus if board is not None else ():
        serial = board.chips[d.key].text.get("serial_number") if d.key in board.chips else None
        if serial:  # `-t board` of the card; npu-exporter's info gauge (NA when not configured)
            labels = {**_npu_labels(d, state.host), "serial_number": serial}
            out.add("npu_chip_info_serial_number", "The chip's serial number (npu-smi -t board), value 1.", labels, 1.0)
    by_id = {npu_id(d): d for d in npus}
    for row in nic_metrics():
        answer = state.views.get(row["view"])
        if answer is None:
            continue
        for index, nic in sorted(answer.nics.items()):
            value = _nic_value(row["view"], row, nic)
            if value is None:
                continue
            d = by_id.get(str(index))
            labels = _npu_labels(d, state.host) if d is not None else {"id": str(index), "host": state.host}
            out.add(row["npu"], row["help"], labels, value)
    unknown = GaugeMetricFamily(
        "ascendctl_device_view_unknown_field",
        "A key a device view printed that this ascendctl does not know (value 1): shown, never dropped.",
        labels=["id", "view", "field", "host"],
    )
    for view, answer in sorted(state.views.items()):
        for key, chip in answer.chips.items():
            d = next((x for x in npus if x.key == key), None)
            for field_name in chip.unknown:
                unknown.add_metric([npu_id(d) if d else key, view, field_name, state.host], 1.0)
    yield from out.by_name.values()
    yield unknown


# -- engines ---------------------------------------------------------------------------------


def _engine_families(state: ExporterState) -> Iterator[Metric]:
    snap = state.snapshot
    views = snap.engines if snap is not None else ()
    host = state.host
    up = GaugeMetricFamily(
        "ascendctl_engine_up", "1 when the engine's /metrics answered on the last poll.", labels=["engine", "host"]
    )
    info = GaugeMetricFamily(
        "ascendctl_engine_info",
        "The engine: its model, profile, vLLM version and the NPUs its processes hold (value 1).",
        labels=["engine", "model", "profile", "vllm_version", "npus", "host"],
    )
    phase = GaugeMetricFamily(
        "ascendctl_engine_phase",
        "The start-up phase an ascendctl serve run reached (value 1; ready once /health answered).",
        labels=["engine", "phase", "host"],
    )
    ready = GaugeMetricFamily(
        "ascendctl_engine_ready_seconds", "Time to ready of the run's last start, seconds.", labels=["engine", "host"]
    )
    restarts = CounterMetricFamily(
        "ascendctl_engine_restarts", "Times ascendctl serve restarted the engine.", labels=["engine", "host"]
    )
    blocks = GaugeMetricFamily(
        "ascendctl_engine_kv_blocks",
        "KV cache blocks: planned (ascendctl plan for the run's profile) and actual (the engine's own).",
        labels=["engine", "source", "host"],
    )
    stalled = GaugeMetricFamily(
        "ascendctl_engine_stalled",
        "1 when requests have been running with no token generated for the stall time.",
        labels=["engine", "host"],
    )
    stall_s = GaugeMetricFamily(
        "ascendctl_engine_stall_seconds",
        "Seconds with requests running and no token generated (0 when tokens flow).",
        labels=["engine", "host"],
    )
    role = GaugeMetricFamily(
        "ascendctl_engine_role",
        "The part of a prefill / decode or external data-parallel layout the engine is (value 1): prefill, "
        "decode or rank (ascendctl serve --role).",
        labels=["engine", "role", "host"],
    )
    container = GaugeMetricFamily(
        "ascendctl_engine_container_info",
        "The container an engine runs in, found by its ascendctl.run label (value 1).",
        labels=["engine", "container", "runtime", "image", "npus", "host"],
    )
    container_cpu = GaugeMetricFamily(
        "ascendctl_engine_container_cpu_percent",
        "CPU use of the engine's container, percent of one CPU (the runtime's stats).",
        labels=["engine", "host"],
    )
    container_memory = GaugeMetricFamily(
        "ascendctl_engine_container_memory_bytes",
        "Memory use of the engine's container (the runtime's stats).",
        labels=["engine", "host"],
    )
    hangs = CounterMetricFamily(
        "ascendctl_engine_hangs",
        "Times ascendctl serve's hang monitor found the engine alive and answering nothing (evidence saved in "
        "the run directory).",
        labels=["engine", "host"],
    )
    reason = GaugeMetricFamily(
        "ascendctl_engine_restart_reason",
        "Why ascendctl serve last restarted the engine (value 1): hang, exit or not ready.",
        labels=["engine", "reason", "host"],
    )

    for view in views:
        name = engine_name(view.label)
        extra = state.engines.get(view.label)
        up.add_metric([name, host], 1.0 if view.status.ok else 0.0)
        npus = held_npus(extra.pid if extra else None, state.devices)
        ctr = view.container
        if ctr is not None:
            given = ",".join(str(n) for n in ctr.npus) if ctr.npus is not None else ""
            npus = npus or ([given] if given else [])
            container.add_metric([name, ctr.name, ctr.runtime, ctr.image or "", given, host], 1.0)
            if ctr.cpu_percent is not None:
                container_cpu.add_metric([name, host], ctr.cpu_percent)
            if ctr.memory_mb is not None:
                container_memory.add_metric([name, host], ctr.memory_mb * 1024 * 1024)
        info.add_metric(
            [
                name,
                view.model or "",
                (extra.profile if extra else None) or "",
                (extra.vllm_version if extra else None) or "",
                ",".join(npus),
                host,
            ],
            1.0,
        )
        if extra is None:
            continue
        if extra.role:
            role.add_metric([name, extra.role, host], 1.0)
        if extra.phase:
            phase.add_metric([name, extra.phase, host], 1.0)
        if extra.ready_seconds is not None:
            ready.add_metric([name, host], extra.ready_seconds)
        if extra.pid is not None:
            restarts.add_metric([name, host], float(extra.restarts))
            hangs.add_metric([name, host], float(extra.hangs))
        if extra.restart_reason:
            reason.add_metric([name, extra.restart_reason, host], 1.0)
        if extra.planned_blocks is not None:
            blocks.add_metric([name, "planned", host], float(extra.planned_blocks))
        if view.kv.total_blocks is not None:
            blocks.add_metric([name, "actual", host], float(view.kv.total_blocks))
        if view.status.ok:
            seconds = extra.stalled_for or 0.0
            stall_s.add_metric([name, host], seconds)
            stalled.add_metric([name, host], 1.0 if seconds >= extra.stall_after_s else 0.0)
    yield from (up, info, role, phase, ready, restarts, hangs, reason, blocks, stalled, stall_s)
    yield from _proxy_families(state)
    yield from (container, container_cpu, container_memory)


def engine_name(label: str) -> str:
    """The engine label: the run id, or the URL given without its scheme and any user:password@
    (no credential ever lands in a label)."""
    return label.rsplit("@", 1)[-1]


# -- diagnostics, doctor, sources ------------------------------------------------------------


def _proxy_families(state: ExporterState) -> Iterator[Metric]:
    """The requests and failures each pd / external-dp proxy on this host sent to each backend."""
    host = state.host
    families = {
        "requests": CounterMetricFamily(
            "ascendctl_proxy_requests",
            "Requests a pd / external-dp layout's proxy (serve --role proxy) sent to each backend.",
            labels=["proxy", "role", "backend", "host"],
        ),
        "failures": CounterMetricFamily(
            "ascendctl_proxy_failures",
            "Requests to a backend that failed at the proxy (no answer, or an error status).",
            labels=["proxy", "role", "backend", "host"],
        ),
    }
    up = GaugeMetricFamily(
        "ascendctl_proxy_backend_up",
        "1 while the proxy routes to the backend (its /health answers), 0 while it is down.",
        labels=["proxy", "role", "backend", "host"],
    )
    refused = CounterMetricFamily(
        "ascendctl_proxy_refused",
        "Requests the proxy answered 503 because no backend of the role was up.",
        labels=["proxy", "role", "host"],
    )
    for (proxy, kind, role, backend), value in sorted(state.proxies.items()):
        if kind == "up":
            up.add_metric([engine_name(proxy), role, backend, host], value)
        elif kind == "refused":
            refused.add_metric([engine_name(proxy), role, host], value)
        else:
            families[kind].add_metric([engine_name(proxy), role, backend, host], value)
    yield from families.values()
    yield up
    yield refused


def _diagnostic_families(state: ExporterState) -> Iterator[Metric]:
    host = state.host
    active = GaugeMetricFamily(
        "ascendctl_diagnostic_active",
        "A diagnostic top shows now (value 1): a threshold rule that fired or a known issue in an engine log.",
        labels=["id", "severity", "subject", "source", "host"],
    )
    events = CounterMetricFamily(
        "ascendctl_known_issue_events",
        "Lines of an engine log that matched a known issue of the triage rules, by rule id.",
        labels=["engine", "rule", "severity", "host"],
    )
    snap = state.snapshot
    seen: set[tuple[str, str, str, str]] = set()
    for d in snap.diagnostics if snap is not None else ():
        key = (d.id, d.severity, engine_name(d.subject), d.source)
        if key not in seen:
            seen.add(key)
            active.add_metric([*key, host], 1.0)
        if d.source == "log":
            events.add_metric([engine_name(d.subject), d.id, d.severity, host], float(d.count))
    yield active
    yield events


def _plog_families(state: ExporterState) -> Iterator[Metric]:
    codes = CounterMetricFamily(
        "ascendctl_plog_error_codes",
        "ERROR lines of the CANN plogs carrying a known error code, by code (counted while the exporter runs).",
        labels=["code", "kind", "host"],
    )
    for (code, kind), n in sorted(state.plog_codes.items()):
        codes.add_metric([code, kind, state.host], float(n))
    yield codes


def _doctor_families(state: ExporterState) -> Iterator[Metric]:
    status = GaugeMetricFamily(
        "ascendctl_doctor_check_status",
        "Each doctor check: 0 ok, 1 info or skipped, 2 warning, 3 error.",
        labels=["check", "category", "host"],
    )
    report = state.doctor
    for c in report.checks if report is not None else ():
        word = "info" if c.status.value == "skip" else c.status.value
        status.add_metric([c.id, c.category, state.host], float(min(rank(word), 3)))
    yield status


def _source_families(state: ExporterState) -> Iterator[Metric]:
    import time

    now = time.time()
    up = GaugeMetricFamily("ascendctl_source_up", "1 when the source's last poll succeeded.", labels=["source", "host"])
    age = GaugeMetricFamily(
        "ascendctl_source_age_seconds", "Seconds since the source last answered.", labels=["source", "host"]
    )
    took = GaugeMetricFamily(
        "ascendctl_source_duration_seconds", "How long the source's last poll took.", labels=["source", "host"]
    )
    for s in state.statuses:
        up.add_metric([s.name, state.host], 1.0 if s.up else 0.0)
        if s.last_ok is not None:
            age.add_metric([s.name, state.host], max(0.0, now - s.last_ok))
        if s.duration_s is not None:
            took.add_metric([s.name, state.host], s.duration_s)
    yield from (up, age, took)
