"""The exporter on recorded npu-smi tables and recorded vLLM scrapes: names and labels as
npu-exporter writes them, the engines' series passed through, a hung npu-smi, the web
configuration (basic auth, TLS), and promtool's lint of a real scrape."""

from __future__ import annotations

import ssl
import subprocess
import time

import bcrypt
import httpx
import pytest
from helpers import FIXTURES, fake_npu_smi, require_tool
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families
from top_fakes import ReplayRunner, npu_text

from engine.devices.sources import NpuSmiSource
from engine.errors import BadInput, Unreachable
from engine.exporter.collect import EngineExtra, Exporter, ExporterState
from engine.exporter.families import families
from engine.exporter.server import ExporterServer, Renderer
from engine.exporter.webconfig import load_web_config
from engine.system.runner import SubprocessRunner
from engine.telemetry.faults import held_npus

SCRAPE = (FIXTURES / "vllm_seq" / "scrape_01.txt").read_text()


def _samples(state: ExporterState) -> dict[str, list]:
    out: dict[str, list] = {}
    for fam in families(state):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def _devices(info: str, usages: str | None = None):
    runner = ReplayRunner(npu_text(info), npu_text(usages) if usages else None)
    return tuple(NpuSmiSource(runner).sample())


def test_a2_chips_carry_npu_exporter_names_and_labels():
    state = ExporterState("node1", _devices("info/s02_910b2_25.2.0_vllm_dp.txt", "usages/u2_910b_25.5.1.txt"))
    s = _samples(state)
    used = s["npu_chip_info_hbm_used_memory"]
    assert len(used) == 8
    first = next(x for x in used if x.labels["id"] == "0")
    assert first.labels == {"id": "0", "model_name": "910B2", "pcie_bus_info": "0000:C1:00.0", "host": "node1"}
    assert first.value == 60126.0
    assert {x.value for x in s["npu_chip_info_hbm_total_memory"]} == {65536.0}
    assert s["machine_npu_nums"][0].value == 8
    assert {x.value for x in s["npu_chip_info_health_status"]} == {1.0}
    assert "npu_chip_info_hbm_bandwidth_utilization" in s  # from -t usages
    # One process per chip in this recording: its memory under its pid.
    proc = next(x for x in s["npu_chip_info_process_info"] if x.labels["id"] == "0")
    assert proc.labels["process_id"] == "2759218" and proc.value == 56293.0


def test_a3_dies_are_told_apart_and_310p_reports_ddr_under_its_own_names():
    a3 = _samples(ExporterState("h", _devices("info/s04_a3_25.2.3_multiproc.txt")))
    ids = [x.labels["id"] for x in a3["npu_chip_info_hbm_used_memory"]]
    assert len(ids) == len(set(ids)) > 2  # two dies per card, each its own id
    ddr = _samples(ExporterState("h", _devices("info/s12_310p3_npu6.txt")))
    assert "npu_chip_info_used_memory" in ddr and "npu_chip_info_hbm_used_memory" not in ddr
    assert "npu_chip_info_total_memory" in ddr


def test_a_figure_npu_smi_does_not_give_is_left_out_not_zero():
    # Without -t usages there is no bandwidth figure: the family is absent, as npu-exporter does.
    s = _samples(ExporterState("h", _devices("info/s02_910b2_25.2.0_vllm_dp.txt")))
    assert "npu_chip_info_hbm_bandwidth_utilization" not in s


def test_engine_series_pass_through_with_the_engine_label_and_merge_across_engines():
    fams = SCRAPE
    engines = {
        "run-a": EngineExtra("run-a", "http://127.0.0.1:8000", passthrough=fams),
        "user:pw@10.0.0.2:8000": EngineExtra("b", "http://10.0.0.2:8000", passthrough=fams),
    }
    state = ExporterState("h", engines=engines)
    text = Renderer().render(state)[0].decode()
    running = [line for line in text.splitlines() if line.startswith("vllm:num_requests_running{")]
    assert len(running) == 2
    assert 'engine="run-a"' in running[0] + running[1] and 'vllm_engine="0"' in running[0]
    assert "pw@" not in text and "user:" not in text  # no credential in a label
    assert "_created" not in text
    assert text.count("# TYPE vllm:num_requests_running gauge") == 1  # one family per name


def test_openmetrics_keeps_vllm_names_as_vllm_writes_them():
    engines = {"run-a": EngineExtra("run-a", "http://127.0.0.1:8000", passthrough=SCRAPE)}
    accept = "application/openmetrics-text; version=1.0.0,text/plain;version=0.0.4;q=0.5"
    body, ctype = Renderer().render(ExporterState("h", engines=engines), accept)
    text = body.decode()
    assert ctype.startswith("application/openmetrics-text") and text.rstrip().endswith("# EOF")
    assert "\nvllm:num_requests_running{" in text and "vllm_num_requests_running" not in text
    families_ = {f.name for f in om_parse(text)}
    assert "vllm:num_requests_running" in families_ and "vllm:generation_tokens" in families_


def test_an_engine_is_joined_to_the_npus_its_processes_hold():
    devices = _devices("info/s02_910b2_25.2.0_vllm_dp.txt")
    assert held_npus(2759218, devices) == ["0"]
    assert held_npus(None, devices) == []
    assert held_npus(1, devices) == []  # pid 1 holds no NPU in the recording


def test_scrape_lints_clean_with_promtool(tmp_path):
    promtool = require_tool("promtool")
    state = ExporterState("h", _devices("info/s02_910b2_25.2.0_vllm_dp.txt", "usages/u2_910b_25.5.1.txt"))
    engines = {"run-a": EngineExtra("run-a", "http://127.0.0.1:8000", passthrough=SCRAPE)}
    state = ExporterState("h", state.devices, engines=engines)
    text = Renderer().render(state)[0]
    result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=60)
    # promtool lints names and HELP; vLLM's own families are what vLLM writes, ours must be clean.
    ours = [line for line in result.stdout.decode().splitlines() if not line.startswith("vllm:")]
    assert not ours, result.stdout.decode()


def test_a_hung_npu_smi_never_slows_a_scrape(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    fake_npu_smi(bin_dir)
    runner = SubprocessRunner(path=f"{bin_dir}:/usr/bin:/bin")
    source = NpuSmiSource(runner, timeout=1.0, program=str(bin_dir / "npu-smi"))
    # Engines polled as by default (5 s): a scrape renders again only when a group has run since.
    exp = Exporter(devices=source, intervals={"devices": 0.5}, with_runs=False, doctor=False, plogs=False)
    server = ExporterServer(exp, "127.0.0.1", 0)
    server.start()
    exp.start()
    url = f"http://127.0.0.1:{server.port}/metrics"
    try:
        assert 'ascendctl_source_up{host="%s",source="npu-smi"} 1.0' % exp.host in httpx.get(url).text
        (bin_dir / "hang").touch()
        took: list[float] = []
        deadline = time.monotonic() + 8
        text = ""
        while time.monotonic() < deadline and (len(took) < 20 or 'source="npu-smi"} 0.0' not in text):
            started = time.monotonic()
            text = httpx.get(url, timeout=5).text
            took.append(time.monotonic() - started)
            time.sleep(0.05)
        assert 'source="npu-smi"} 0.0' in text
        # Never waiting on the hung tool (its timeout is 1 s), and within 100 ms as a rule (the
        # median: on a loaded 2-core runner a scrape now and then waits for the GIL).
        assert max(took) < 0.5, took
        assert sorted(took)[len(took) // 2] < 0.1, took
        assert "npu_chip_info_hbm_used_memory" in text  # the last good figures stay
    finally:
        server.shutdown()
        exp.close()


def _hash(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()


def test_basic_auth_from_a_web_config_file(tmp_path):
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"basic_auth_users:\n  prom: '{_hash('s3cret')}'\n")
    exp = Exporter(with_runs=False, doctor=False)
    server = ExporterServer(exp, "127.0.0.1", 0, load_web_config(cfg))
    server.start()
    url = f"http://127.0.0.1:{server.port}/metrics"
    try:
        assert httpx.get(url).status_code == 401
        assert httpx.get(url, auth=("prom", "wrong")).status_code == 401
        assert httpx.get(url, auth=("prom", "s3cret")).status_code == 200
    finally:
        server.shutdown()
        exp.close()


def test_tls_from_a_web_config_file(tmp_path):
    openssl = require_tool("openssl")
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(tmp_path / "k.pem"), "-out", str(tmp_path / "c.pem")],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    cfg = tmp_path / "web.yml"
    cfg.write_text("tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n")
    exp = Exporter(with_runs=False, doctor=False)
    server = ExporterServer(exp, "127.0.0.1", 0, load_web_config(cfg))
    server.start()
    try:
        trust = ssl.create_default_context(cafile=str(tmp_path / "c.pem"))
        resp = httpx.get(f"https://127.0.0.1:{server.port}/metrics", verify=trust)
        assert resp.status_code == 200 and "ascendctl_source_up" in resp.text
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=3)
    finally:
        server.shutdown()
        exp.close()


@pytest.mark.parametrize(
    "text, words",
    [
        ("basic_auth_users:\n  prom: plaintext\n", "not a bcrypt hash"),
        ("tls_server_config:\n  cert_file: c.pem\n", "needs cert_file and key_file"),
        ("tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n  cipher_suites: [x]\n", "unsupported"),
        ("listen: 1\n", "unsupported key"),
        ("basic_auth_users: [\n", "web.yml:2: not valid YAML"),
    ],
)
def test_a_bad_web_config_is_refused_with_the_reason(tmp_path, text, words):
    cfg = tmp_path / "web.yml"
    cfg.write_text(text)
    with pytest.raises(BadInput) as err:
        load_web_config(cfg)
    assert words in str(err.value.cause)


def test_openmetrics_when_the_scraper_asks_for_it():
    exp = Exporter(with_runs=False, doctor=False)
    exp.run_once()
    server = ExporterServer(exp, "127.0.0.1", 0)
    server.start()
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        om = httpx.get(url, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        assert om.headers["content-type"].startswith("application/openmetrics-text")
        assert om.text.rstrip().endswith("# EOF")
        plain = httpx.get(url)
        assert plain.headers["content-type"].startswith("text/plain")
        assert httpx.get(f"http://127.0.0.1:{server.port}/").status_code == 200
        assert httpx.get(f"http://127.0.0.1:{server.port}/nope").status_code == 404
    finally:
        server.shutdown()
        exp.close()


def test_registry_renders_an_empty_exporter():
    exp = Exporter(with_runs=False, doctor=False)
    try:
        families_ = list(text_string_to_metric_families(Renderer().render(exp.state())[0].decode()))
        assert any(f.name == "ascendctl_source_up" for f in families_)
    finally:
        exp.close()


def test_stall_verdict_counts_seconds_with_requests_running_and_no_tokens(monkeypatch):

    exp = Exporter(with_runs=False, doctor=False)
    try:

        class View:
            label, url = "e", "http://x"
            running = 3
            status = type("S", (), {"ok": True})()
            rates = type("R", (), {"generation_tps": 0.0})()

        class Snap:
            time = 100.0

        exp._versions["http://x"] = "0.11.0"
        assert exp._extra(View, Snap).stalled_for == 0.0
        Snap.time = 190.0
        extra = exp._extra(View, Snap)
        assert extra.stalled_for == 90.0 and extra.stall_after_s == 90.0  # thresholds.yaml hang_progress_s
        View.rates.generation_tps = 12.0
        assert exp._extra(View, Snap).stalled_for is None
    finally:
        exp.close()


def test_plog_error_codes_are_counted_from_the_exporters_start(tmp_path):
    from engine.exporter.plogs import PlogCounter

    plog = tmp_path / "debug" / "plog"
    plog.mkdir(parents=True)
    old = plog / "plog-1.log"
    line = next(ln for ln in (FIXTURES / "logs" / "plog_mixed_modules.log").read_text().splitlines() if "507051" in ln)
    old.write_text(line + "\n")  # before the exporter started: not counted
    counter = PlogCounter({"ASCEND_PROCESS_LOG_PATH": str(tmp_path)})
    assert counter.poll() == {}
    with old.open("a") as f:
        f.write(line + "\n" + line.replace("[ERROR]", "[INFO]") + "\n")
    (plog / "plog-2.log").write_text(line + "\n" + line[:40])  # a new file, its last line unfinished
    assert counter.poll() == {("507051", "acl"): 2}
    state = ExporterState("h", plog_codes=counter.counts)
    text = Renderer().render(state)[0].decode()
    assert 'ascendctl_plog_error_codes_total{code="507051",host="h",kind="acl"} 2.0' in text


def test_no_plog_directory_is_nothing_to_count_not_a_source_down(tmp_path):
    """The documented systemd unit runs as a user with no ~/ascend/log: the plogs source must
    stay up (else AscendctlSourceDown fires on a healthy host), and plogs written later count."""
    from engine.exporter.plogs import PlogCounter

    counter = PlogCounter({"ASCEND_PROCESS_LOG_PATH": str(tmp_path / "none")})
    assert counter.poll() == {}
    plog = tmp_path / "none" / "debug" / "plog"
    plog.mkdir(parents=True)
    line = next(ln for ln in (FIXTURES / "logs" / "plog_mixed_modules.log").read_text().splitlines() if "507051" in ln)
    (plog / "plog-1.log").write_text(line + "\n")
    assert counter.poll() == {("507051", "acl"): 1}
    (tmp_path / "file").write_text("")
    with pytest.raises(Unreachable):  # a path that cannot be a plog directory is still said
        PlogCounter({"ASCEND_PROCESS_LOG_PATH": str(tmp_path / "file")}).poll()


def test_cuda_devices_go_out_under_dcgm_exporter_names():
    from engine.devices.sample import DeviceSample

    gpu = DeviceSample("cuda0", "cuda", "NVIDIA H200", mem_used_mb=1000.0, mem_total_mb=143771.0, util_pct=35.0)
    s = _samples(ExporterState("gpu-host", (gpu,)))
    assert s["DCGM_FI_DEV_FB_USED"][0].value == 1000.0
    assert s["DCGM_FI_DEV_FB_FREE"][0].value == 142771.0
    assert s["DCGM_FI_DEV_GPU_UTIL"][0].labels == {"gpu": "0", "modelName": "NVIDIA H200", "Hostname": "gpu-host"}
    assert not any(name.startswith("npu_chip_info") for name in s)


def test_a_headless_rank_is_not_an_engine_to_scrape(tmp_path, monkeypatch):
    """A headless data-parallel rank records node 0's URL but serves no API on its host: the
    exporter there scrapes only the runs that serve one."""
    import os

    from engine.runs import RunInfo, runs_dir, write_run

    monkeypatch.setenv("ASCENDCTL_STATE_DIR", str(tmp_path))
    for run_id, url, serves in (("run-1", "http://127.0.0.1:8000", True), ("run-2", "http://10.0.0.1:8000", False)):
        run = runs_dir() / run_id
        run.mkdir(parents=True)
        write_run(RunInfo(run_id, str(run), os.getpid(), url, "dp2", started_at=time.time(), serves_api=serves))
    exp = Exporter(doctor=False, plogs=False)
    try:
        assert [t.url for t in exp._targets_now()] == ["http://127.0.0.1:8000"]
    finally:
        exp.close()


def test_hangs_and_the_restart_reason_of_a_run_reach_the_exporter():
    """serve's hang monitor records each hang in run.json; the exporter counts them (the
    AscendctlEngineHung alert fires on their increase) and says why the engine last restarted."""
    from types import SimpleNamespace

    view = SimpleNamespace(  # an EngineView of a host engine (container None)
        label="run-a", status=SimpleNamespace(ok=True), model="m", kv=SimpleNamespace(total_blocks=None), container=None
    )
    extra = EngineExtra("run-a", "http://127.0.0.1:8000", pid=42, restarts=2, hangs=2, restart_reason="hang")
    snap = SimpleNamespace(engines=[view], diagnostics=[], time=0.0)
    state = ExporterState("h", snapshot=snap, engines={"run-a": extra})
    samples = _samples(state)
    assert [s.value for s in samples["ascendctl_engine_hangs_total"]] == [2.0]
    assert samples["ascendctl_engine_restart_reason"][0].labels == {"engine": "run-a", "reason": "hang", "host": "h"}


def test_the_exporter_reads_usages_on_their_own_interval_top_on_every_poll(monkeypatch):
    """The exporter's CPU is mostly the processes it starts (benchmarks/bench_exporter.py): the
    per-card usages are asked every `usages` interval (15 s), not on every 5 s table poll."""
    import engine.devices.sources as sources

    clock = [1000.0]
    monkeypatch.setattr(sources.time, "monotonic", lambda: clock[0])
    runner = ReplayRunner(npu_text("info/s19_a3_25.3.rc1_busy.txt"), npu_text("usages/u2_910b_25.5.1.txt"))
    source = NpuSmiSource(runner)
    exporter = Exporter(devices=source, doctor=False, plogs=False, with_runs=False, views=False)
    try:
        assert source.usages_every == 15.0

        def usages_calls() -> int:
            return sum(1 for argv in runner.calls if "usages" in argv)

        first = source.sample()
        assert usages_calls() == 8  # one per card (16 dies on 8 cards)
        clock[0] += 5
        again = source.sample()
        assert usages_calls() == 8  # within 15 s: the last answer, no npu-smi run
        assert [d.aicpu_pct for d in again] == [d.aicpu_pct for d in first] and first[0].aicpu_pct is not None
        clock[0] += 10
        source.sample()
        assert usages_calls() == 16
    finally:
        exporter.close()
    top = NpuSmiSource(ReplayRunner(npu_text("info/s19_a3_25.3.rc1_busy.txt"), npu_text("usages/u2_910b_25.5.1.txt")))
    top.sample(), top.sample()
    assert sum(1 for argv in top.runner.calls if "usages" in argv) == 16  # top: every poll


def test_the_exporter_keeps_an_unhealthy_chips_codes_while_its_health_word_stays(monkeypatch):
    """One `-t health` per unhealthy chip per 5 s poll was most of the exporter's npu-smi runs on a
    faulty host: it keeps a chip's codes for its health view's interval (60 s) while the chip's
    health word stays, and asks again at once when the word changes (a new fault changes it)."""
    import engine.devices.sources as sources

    clock = [1000.0]
    monkeypatch.setattr(sources.time, "monotonic", lambda: clock[0])
    alarm = npu_text("info/s16_310b4_alarm_trailing_spaces.txt")
    runner = ReplayRunner(alarm, health=npu_text("health/h2_warning.txt"))
    source = NpuSmiSource(runner, usages=False)
    exporter = Exporter(devices=source, doctor=False, plogs=False, with_runs=False, views=False)
    try:

        def health_calls() -> int:
            return sum(1 for argv in runner.calls if "health" in argv)

        assert source.sample()[0].error_codes == ("80E01801",) and health_calls() == 1
        clock[0] += 5
        assert source.sample()[0].error_codes == ("80E01801",) and health_calls() == 1  # kept
        runner.info = alarm.replace("Alarm", "Critical")
        clock[0] += 5
        source.sample()
        assert health_calls() == 2  # the word changed: asked at once
        clock[0] += 60
        source.sample()
        assert health_calls() == 3  # the interval is over
    finally:
        exporter.close()
    top = NpuSmiSource(ReplayRunner(alarm, health=npu_text("health/h2_warning.txt")), usages=False)
    top.sample(), top.sample()
    assert sum(1 for argv in top.runner.calls if "health" in argv) == 2  # top: every poll


def test_containers_are_looked_for_once_per_containers_interval(monkeypatch, tmp_path):
    import engine.container.discover as discover

    monkeypatch.setenv("ASCENDCTL_STATE_DIR", str(tmp_path))
    looks = []
    monkeypatch.setattr(discover, "find_engines", lambda notes=None, failed=None: looks.append(1) or [])
    exporter = Exporter(doctor=False, plogs=False, intervals={"containers": 30.0})
    try:
        for _ in range(3):
            exporter._targets_now()
        assert len(looks) == 1  # three engine polls, one `podman ps` / `docker ps`
        exporter._containers_at -= 30.0
        exporter._targets_now()
        assert len(looks) == 2
    finally:
        exporter.close()


def test_an_engine_without_a_version_is_asked_again_once_a_minute_not_every_poll(monkeypatch):
    import engine.exporter.collect as collect

    asked = []
    monkeypatch.setattr(collect, "_vllm_version", lambda client, url, timeout: asked.append(url) or None)
    clock = [500.0]
    monkeypatch.setattr(collect.time, "monotonic", lambda: clock[0])
    exp = Exporter(with_runs=False, doctor=False)
    try:

        class View:
            label, url = "e", "http://x"
            running = 0
            status = type("S", (), {"ok": True})()
            rates = None

        class Snap:
            time = 100.0

        for _ in range(12):  # a minute of 5 s polls
            exp._extra(View, Snap)
            clock[0] += 5
        assert asked == ["http://x"]  # the 404 of /version cost one request, not twelve
        exp._extra(View, Snap)
        assert asked == ["http://x"] * 2 and exp._extra(View, Snap).vllm_version is None
    finally:
        exp.close()


def test_with_a_steady_scrape_each_group_runs_just_before_the_scrape_that_reads_it():
    from engine.exporter.collect import ScrapeClock

    clock = ScrapeClock()
    for t in (100.0, 115.0, 130.0):  # Prometheus every 15 s
        clock.scraped(t)
    # the engines (every 5 s) last ran at 129: not again at 134 and 139, which nobody reads, but
    # at 144, one second before the scrape of 145
    assert clock.due(134.0, 1.0) == 144.0
    # a view every 60 s that ran at 131 runs before the first scrape after 191: at 204
    assert clock.due(191.0, 1.0) == 204.0
    # a run that takes 3 s starts 6 s ahead
    assert clock.due(134.0, 6.0) == 139.0


def test_scrapes_at_no_steady_period_leave_the_intervals_as_they_are():
    from engine.exporter.collect import ScrapeClock

    clock = ScrapeClock()
    assert clock.due(10.0, 1.0) == 10.0  # no scrape yet
    for t in (0.0, 2.0, 15.0, 17.0):  # two scrapers out of step, or a person
        clock.scraped(t)
    assert clock.due(20.0, 1.0) == 20.0
    fast = ScrapeClock()
    for t in (0.0, 0.2, 0.4, 0.6):  # a test scraping in a loop
        fast.scraped(t)
    assert fast.due(5.0, 1.0) == 5.0


def test_the_server_tells_the_exporter_of_each_scrape():
    exporter = Exporter(doctor=False, plogs=False, with_runs=False)
    server = ExporterServer(exporter, "127.0.0.1", 0)
    server.start()
    try:
        for _ in range(3):
            httpx.get(f"http://127.0.0.1:{server.port}/metrics").raise_for_status()
        httpx.get(f"http://127.0.0.1:{server.port}/")
        assert len(exporter.clock._times) == 3  # /metrics only
    finally:
        server.shutdown()
        exporter.close()
